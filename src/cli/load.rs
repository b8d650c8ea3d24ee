//! `quiverdb load`: a CSV or Parquet file into a table, through one
//! Flight SQL ingest request.
//!
//! ```text
//!  file ──reader thread──► batches of 64Ki rows ──channel (2)──► DoPut stream ──► server
//!        (parse, match to                                         (one request: the server
//!         the table's columns)                                     applies all or nothing)
//! ```
//!
//! Before any row is read, the loader asks the server whether the table
//! exists and fails at once if it does not (or, with `--create`, if it
//! does). Names are read as SQL reads them ([`names`]): `Sales` is the
//! table `sales`, `"Sales"` the table `Sales`, and a file's column names
//! are folded the same way. The file's columns are matched to an existing
//! table's by name (by position for a CSV file without a header) and read
//! (CSV) or cast (Parquet) to the table's types. With `--create` the table
//! takes the file's columns; a CSV file's types are inferred from all its
//! records in a first pass over the file ([`csv`]), unless `--schema`
//! gives them. The file is streamed, never held whole.
//!
//! If reading fails half-way, the upload must not look finished. Neither
//! ending the stream nor cancelling the call will do: the server cannot
//! tell a `RST_STREAM(CANCEL)` from a clean end of the request (hyper
//! reports both as the end of the body) and would apply the rows it got.
//! So the stream stalls instead, and the runtime (one thread, so nothing
//! runs outside `block_on`) is dropped with the call still open: its
//! tasks are dropped unpolled, no reset frame is written, and the server
//! sees the connection close mid-request, an error.

mod csv;
mod record;

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_flight::IpcMessage;
use arrow_flight::error::FlightError;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandGetTables, CommandStatementIngest, TableDefinitionOptions, TableExistsOption, TableNotExistOption,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use clap::Args;
use futures::TryStreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use quiverdb::server::DEFAULT_SCHEMA;
use tonic::transport::Channel;

use self::csv::{CsvFile, CsvFormat, parse_delimiter};
use self::record::{BATCH_ROWS, BadRecord, Conform, Place, Refused};
use super::CliError;
use super::client::{ConnectArgs, RequestError, connect};
use super::names::{self, ColumnDef, TableName};

/// Arguments of `quiverdb load`.
#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    /// The table to load into, named as in SQL: `sales` and `Sales` are the
    /// same table, `'"Sales"'` (in double quotes) keeps the case, `s.sales`
    /// is in schema `s`.
    pub(crate) table: String,
    /// A CSV file (.csv; .tsv is tab-separated; .txt is read as CSV) or a
    /// Parquet file (.parquet).
    pub(crate) file: PathBuf,
    /// Create the table from the file's columns (fails if it exists).
    #[arg(long)]
    pub(crate) create: bool,
    /// The CSV field delimiter: one character, or \t for a tab [default: a
    /// tab for .tsv, else a comma].
    #[arg(long, value_name = "CHAR")]
    pub(crate) delimiter: Option<String>,
    /// The CSV file has no header line: its columns are column_1,
    /// column_2, ..., or, appending, the table's columns in order.
    #[arg(long)]
    pub(crate) no_header: bool,
    /// The CSV file's columns and their SQL types, in order, instead of the
    /// header's names and inferred types: "id BIGINT NOT NULL, name TEXT".
    /// A header line is still skipped unless --no-header is given.
    #[arg(long, value_name = "COLUMNS")]
    pub(crate) schema: Option<String>,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// Batches read ahead of the upload: enough to keep the network busy,
/// few enough to keep memory flat.
const READ_AHEAD: usize = 2;

/// The kind of file, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    /// CSV, split at `delimiter` unless `--delimiter` says otherwise.
    Csv {
        delimiter: u8,
    },
    Parquet,
}

impl FileKind {
    /// `.csv` and `.txt` are CSV, `.tsv` is CSV split at tabs; `.parquet`
    /// and `.parq` are Parquet.
    fn of(path: &Path) -> Result<Self, String> {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("csv" | "txt") => Ok(Self::Csv { delimiter: b',' }),
            Some("tsv") => Ok(Self::Csv { delimiter: b'\t' }),
            Some("parquet" | "parq") => Ok(Self::Parquet),
            Some(other) => Err(format!(
                "cannot load {}: unknown file type '.{other}' (use .csv, .tsv or .txt for CSV, or .parquet)",
                path.display()
            )),
            None => Err(format!(
                "cannot load {}: the file has no extension to tell its type (use .csv, .tsv, .txt or .parquet)",
                path.display()
            )),
        }
    }
}

/// An error reading the file, naming it.
#[derive(Debug)]
struct ReadError {
    path: PathBuf,
    source: CliError,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "reading {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

pub(crate) fn run(args: LoadArgs) -> Result<ExitCode, CliError> {
    let kind = FileKind::of(&args.file)?;
    let name = TableName::parse(&args.table)?;
    let columns = match args.schema.as_deref() {
        Some(text) => Some(names::parse_columns(text).map_err(|e| format!("--schema: {e}"))?),
        None => None,
    };
    let csv_format = match kind {
        FileKind::Csv { delimiter } => {
            let delimiter = args.delimiter.as_deref().map_or(Ok(delimiter), parse_delimiter)?;
            Some(CsvFormat { delimiter, header: !args.no_header })
        }
        FileKind::Parquet => {
            let csv_only = [
                ("--delimiter", args.delimiter.is_some()),
                ("--no-header", args.no_header),
                ("--schema", columns.is_some()),
            ];
            if let Some((flag, _)) = csv_only.iter().find(|(_, given)| *given) {
                return Err(format!("{flag} is for CSV files (a Parquet file names and types its own columns)").into());
            }
            None
        }
    };
    let read_error = |source: CliError| ReadError { path: args.file.clone(), source };
    let opened = Opened::open(&args.file, csv_format, columns.as_ref().map(Vec::len)).map_err(read_error)?;
    // One thread: between `block_on` calls nothing runs (see the module
    // documentation on a failed read).
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut client = runtime.block_on(connect(&args.connect))?;
    let table = runtime.block_on(find_table(&mut client, &name))?;
    match (&table, args.create) {
        (Some(_), true) => {
            return Err(format!("table '{name}' already exists (load without --create to append to it)").into());
        }
        (None, false) => {
            return Err(format!("table '{name}' does not exist (give --create to create it from the file)").into());
        }
        _ => {}
    }
    let declared = match &columns {
        Some(columns) => Some(runtime.block_on(declared_schema(&mut client, columns))?),
        None => None,
    };
    // The time and rate printed cover reading the file, inferring types
    // included, and the upload.
    let start = Instant::now();
    let progress = opened.progress_bar();
    let infers = matches!(opened, Opened::Csv(_)) && table.is_none() && declared.is_none();
    let (target, batches) = opened.into_batches(table, declared, &progress).map_err(read_error)?;
    if infers {
        // The connection sat idle through a pass over the whole file: a
        // fresh one cannot have been dropped, nor its token expired.
        client = runtime.block_on(connect(&args.connect))?;
    }
    let (sender, receiver) = tokio::sync::mpsc::channel(READ_AHEAD);
    let reader = {
        let path = args.file.clone();
        let progress = progress.clone();
        std::thread::spawn(move || read_file(&path, target, batches, &sender, &progress))
    };
    let loaded = runtime.block_on(ingest(&mut client, &name, args.create, receiver));
    // On a read error the call is still open: drop every task unpolled so
    // the connection closes without a frame that would end the request.
    drop(runtime);
    progress.finish_and_clear();
    // The reader stops at its next batch once the channel is gone; it
    // catches its panics, so its join result carries nothing.
    let _ = reader.join();
    let rows = loaded?;
    let seconds = start.elapsed().as_secs_f64();
    let rate = format_rate(rows, seconds);
    let rows = if rows == 1 { "1 row".to_string() } else { format!("{rows} rows") };
    println!("loaded {rows} into {name} in {seconds:.2} s ({rate} rows/s)");
    Ok(ExitCode::SUCCESS)
}

/// Reads `batches` and sends them, then (for a file without rows) one
/// empty batch so the server still learns the schema. Stops at the first
/// error, which it sends too, or when the receiver is gone. A panic of
/// the file reader (a malformed file the parser does not guard against)
/// is sent as an error too: were the channel just dropped, the upload
/// would end as if complete.
fn read_file(
    path: &Path,
    target: SchemaRef,
    batches: Batches,
    sender: &tokio::sync::mpsc::Sender<Result<RecordBatch, CliError>>,
    progress: &ProgressBar,
) {
    let send_all = || {
        let mut sent_any = false;
        for batch in batches {
            let batch =
                batch.map_err(|source| -> CliError { Box::new(ReadError { path: path.to_path_buf(), source }) });
            let failed = batch.is_err();
            if sender.blocking_send(batch).is_err() || failed {
                return;
            }
            sent_any = true;
        }
        if !sent_any && sender.blocking_send(Ok(RecordBatch::new_empty(target))).is_err() {
            return;
        }
        progress.set_message("waiting for the server to apply the load");
    };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(send_all)).is_err() {
        let error = format!("reading {}: the file reader failed (is the file malformed?)", path.display());
        let _ = sender.blocking_send(Err(error.into()));
    }
}

/// Sends the batches from `receiver` as one ingest request and returns
/// the row count the server reports. On a read error the stream stalls
/// (it never ends, so the server cannot take it as complete) and the
/// error is returned at once; the caller then drops the runtime.
async fn ingest(
    client: &mut FlightSqlServiceClient<Channel>,
    name: &TableName,
    create: bool,
    receiver: tokio::sync::mpsc::Receiver<Result<RecordBatch, CliError>>,
) -> Result<i64, CliError> {
    let (error_sender, error_receiver) = tokio::sync::oneshot::channel::<CliError>();
    let stream =
        futures::stream::unfold((receiver, Some(error_sender)), |(mut receiver, mut error_sender)| async move {
            match receiver.recv().await {
                Some(Ok(batch)) => Some((Ok::<_, FlightError>(batch), (receiver, error_sender))),
                Some(Err(e)) => {
                    if let Some(s) = error_sender.take() {
                        let _ = s.send(e);
                    }
                    std::future::pending().await
                }
                None => None,
            }
        });
    // The server checks again: a table made or dropped since the check
    // before the upload fails the load rather than changing its meaning.
    let options = if create {
        TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Create.into(),
            if_exists: TableExistsOption::Fail.into(),
        }
    } else {
        TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Fail.into(),
            if_exists: TableExistsOption::Append.into(),
        }
    };
    let command = CommandStatementIngest {
        table_definition_options: Some(options),
        table: name.table.clone(),
        schema: name.schema.clone(),
        catalog: name.catalog.clone(),
        temporary: false,
        transaction_id: None,
        options: Default::default(),
    };
    tokio::select! {
        result = client.execute_ingest(command, stream) => Ok(result.map_err(RequestError::from)?),
        Ok(e) = error_receiver => Err(e),
    }
}

/// The schema of the table `name` (in quiverdb's default schema unless
/// the name gives one), or `None` if there is no such table. A view of
/// that name is an error: rows cannot be loaded into a view.
async fn find_table(
    client: &mut FlightSqlServiceClient<Channel>,
    name: &TableName,
) -> Result<Option<SchemaRef>, CliError> {
    let schema = name.schema.as_deref().unwrap_or(DEFAULT_SCHEMA);
    let request = CommandGetTables {
        catalog: name.catalog.clone(),
        db_schema_filter_pattern: Some(like_pattern(schema)),
        table_name_filter_pattern: Some(like_pattern(&name.table)),
        table_types: Vec::new(),
        include_schema: true,
    };
    let info = client.get_tables(request).await.map_err(RequestError::from)?;
    for endpoint in info.endpoint {
        let Some(ticket) = endpoint.ticket else { continue };
        let batches: Vec<RecordBatch> =
            client.do_get(ticket).await.map_err(RequestError::from)?.try_collect().await.map_err(RequestError::from)?;
        for batch in &batches {
            let column = |name: &str| batch.column_by_name(name);
            let schemas = column("db_schema_name").and_then(|c| c.as_string_opt::<i32>());
            let names = column("table_name").and_then(|c| c.as_string_opt::<i32>());
            let kinds = column("table_type").and_then(|c| c.as_string_opt::<i32>());
            let ipc = column("table_schema").and_then(|c| c.as_binary_opt::<i32>());
            let (Some(schemas), Some(names), Some(kinds), Some(ipc)) = (schemas, names, kinds, ipc) else {
                return Err("the server's table list lacks a schema, name, type or table_schema column".into());
            };
            for row in 0..batch.num_rows() {
                if schemas.value(row) != schema || names.value(row) != name.table {
                    continue;
                }
                if kinds.value(row) == "VIEW" {
                    return Err(format!("'{name}' is a view: rows are loaded into a table").into());
                }
                let table_schema = Schema::try_from(IpcMessage(ipc.value(row).to_vec().into()))
                    .map_err(|e| format!("decoding the schema of table '{name}': {e}"))?;
                return Ok(Some(Arc::new(table_schema)));
            }
        }
    }
    Ok(None)
}

/// A LIKE pattern matching `name` only (the table list filters by
/// pattern; `_` and `%` are common in names).
fn like_pattern(name: &str) -> String {
    let mut pattern = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '\\' | '%' | '_') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern
}

/// `--schema` as an Arrow schema, its SQL types made Arrow types by the
/// server: the types of `SELECT CAST(NULL AS type) AS name, ...`, which
/// the server prepares (plans, but does not run). The types are the ones
/// `CREATE TABLE` with the same text would give.
async fn declared_schema(
    client: &mut FlightSqlServiceClient<Channel>,
    columns: &[ColumnDef],
) -> Result<Schema, CliError> {
    let types = match prepared_types(client, columns).await {
        Ok(types) => types,
        Err(error) => {
            // Name the column whose type the server refuses.
            for column in columns {
                if let Err(e) = prepared_types(client, std::slice::from_ref(column)).await {
                    return Err(format!("--schema: column '{}', type '{}': {e}", column.name, column.sql_type).into());
                }
            }
            return Err(format!("--schema: {error}").into());
        }
    };
    if types.len() != columns.len() {
        return Err(format!("--schema: the server gave {} types for {} columns", types.len(), columns.len()).into());
    }
    let fields: Vec<Field> =
        columns.iter().zip(types).map(|(c, data_type)| Field::new(&c.name, data_type, c.nullable)).collect();
    Ok(Schema::new(fields))
}

/// The Arrow types the server gives `columns`' SQL types.
async fn prepared_types(
    client: &mut FlightSqlServiceClient<Channel>,
    columns: &[ColumnDef],
) -> Result<Vec<DataType>, RequestError> {
    let list: Vec<String> =
        columns.iter().map(|c| format!("CAST(NULL AS {}) AS {}", c.sql_type, names::quote(&c.name))).collect();
    let prepared = client.prepare(format!("SELECT {}", list.join(", ")), None).await?;
    let types = prepared.dataset_schema()?.fields().iter().map(|f| f.data_type().clone()).collect();
    // The server keeps nothing for a prepared statement; closing is a
    // courtesy whose failure changes nothing.
    let _ = prepared.close().await;
    Ok(types)
}

/// The batches of a file, as the table's columns.
type Batches = Box<dyn Iterator<Item = Result<RecordBatch, CliError>> + Send>;

/// A file opened and its layout read, before its rows are.
enum Opened {
    Csv(CsvFile),
    Parquet { builder: ParquetRecordBatchReaderBuilder<File>, rows: u64 },
}

impl Opened {
    /// Opens a CSV file (if `csv` gives its format) or a Parquet file.
    /// `declared` is the number of columns `--schema` gives.
    fn open(path: &Path, csv: Option<CsvFormat>, declared: Option<usize>) -> Result<Self, CliError> {
        match csv {
            Some(format) => Ok(Self::Csv(CsvFile::open(path, format, declared)?)),
            None => {
                let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path)?)?.with_batch_size(BATCH_ROWS);
                let rows = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
                Ok(Self::Parquet { builder, rows })
            }
        }
    }

    /// A progress bar on stderr (hidden when stderr is not a terminal):
    /// bytes read of a CSV file, rows read of a Parquet file.
    fn progress_bar(&self) -> ProgressBar {
        let (len, template) = match self {
            Self::Csv(file) => (
                file.bytes(),
                "{spinner} [{elapsed_precise}] {wide_bar} {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}) {msg}",
            ),
            Self::Parquet { rows, .. } => {
                (*rows, "{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} rows ({per_sec}) {msg}")
            }
        };
        let style = ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar());
        ProgressBar::new(len).with_style(style)
    }

    /// The file's rows as batches of `table`'s columns (of a new table's
    /// if `table` is `None`), and the schema they have. `declared` is
    /// `--schema`, resolved.
    fn into_batches(
        self,
        table: Option<SchemaRef>,
        declared: Option<Schema>,
        progress: &ProgressBar,
    ) -> Result<(SchemaRef, Batches), CliError> {
        match self {
            Self::Csv(file) => {
                let width = file.width();
                let names: Vec<String> = match (&declared, file.header()) {
                    (Some(declared), _) => declared.fields().iter().map(|f| f.name().clone()).collect(),
                    (None, Some(header)) => header.iter().map(|n| names::column_name(n)).collect(),
                    (None, None) => (1..=width).map(|i| format!("column_{i}")).collect(),
                };
                // The table's columns, the file column each comes from, and
                // the file columns' types: given, inferred for a new table,
                // or (`None`) the table's.
                let (target, sources, types) = match table {
                    Some(table) => {
                        let sources = if declared.is_none() && file.header().is_none() {
                            in_order(width, &table)?
                        } else {
                            match_columns(&names, &table)?
                        };
                        let types = declared.map(|d| d.fields().iter().map(|f| f.data_type().clone()).collect());
                        (table, sources, types)
                    }
                    None => {
                        check_new_names(&names)?;
                        let (types, nullable): (Vec<DataType>, Vec<bool>) = match declared {
                            Some(declared) => {
                                declared.fields().iter().map(|f| (f.data_type().clone(), f.is_nullable())).unzip()
                            }
                            None => {
                                progress.set_message("inferring the column types");
                                let types = file.infer(progress)?;
                                progress.set_message("");
                                let nullable = vec![true; types.len()];
                                (types, nullable)
                            }
                        };
                        let fields: Vec<Field> =
                            (0..width).map(|i| Field::new(&names[i], types[i].clone(), nullable[i])).collect();
                        (Arc::new(Schema::new(fields)), (0..width).collect(), Some(types))
                    }
                };
                // Each column read as its own type (or, appending without
                // --schema, its table column's) where arrow-csv parses that
                // type, else as text to cast.
                let mut fields: Vec<Field> = names.iter().map(|n| Field::new(n, DataType::Utf8, true)).collect();
                for (field, &source) in target.fields().iter().zip(&sources) {
                    let data_type = types.as_ref().map_or(field.data_type(), |types| &types[source]);
                    let read_as = if csv_parses(data_type) { data_type.clone() } else { DataType::Utf8 };
                    fields[source] = Field::new(field.name(), read_as, true);
                }
                let conform = Conform { target: Arc::clone(&target), sources };
                let batches = file.batches(Arc::new(Schema::new(fields)), conform, progress.clone())?;
                Ok((target, Box::new(batches)))
            }
            Self::Parquet { builder, .. } => {
                let file_schema = Arc::clone(builder.schema());
                let names: Vec<String> = file_schema.fields().iter().map(|f| names::column_name(f.name())).collect();
                let target = match table {
                    Some(table) => table,
                    None => {
                        check_new_names(&names)?;
                        let fields = file_schema
                            .fields()
                            .iter()
                            .zip(&names)
                            .map(|(f, name)| Field::new(name, f.data_type().clone(), f.is_nullable()));
                        Arc::new(Schema::new(fields.collect::<Vec<_>>()))
                    }
                };
                let sources = match_columns(&names, &target)?;
                let conform = Conform { target: Arc::clone(&target), sources };
                let reader = builder.build()?;
                let progress = progress.clone();
                let mut rows_before = 0u64;
                let batches = reader.map(move |b| {
                    let b = b?;
                    progress.inc(b.num_rows() as u64);
                    let first_row = rows_before + 1;
                    rows_before += b.num_rows() as u64;
                    conform.apply(&b).map_err(|refused| match refused {
                        Refused::Value { row, problem } => {
                            BadRecord { place: Place::Row(first_row + row as u64), problem }.into()
                        }
                        Refused::Other(e) => e,
                    })
                });
                Ok((target, Box::new(batches)))
            }
        }
    }
}

/// Whether arrow-csv parses text straight into `data_type`.
fn csv_parses(data_type: &DataType) -> bool {
    use arrow_schema::TimeUnit::{Microsecond, Millisecond, Nanosecond, Second};
    match data_type {
        DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..)
        | DataType::Date32
        | DataType::Date64
        | DataType::Time32(Second | Millisecond)
        | DataType::Time64(Microsecond | Nanosecond)
        | DataType::Timestamp(..)
        | DataType::Utf8
        | DataType::Utf8View => true,
        DataType::Dictionary(key, value) => key.is_dictionary_key_type() && value.as_ref() == &DataType::Utf8,
        _ => false,
    }
}

/// Fails if a new table's column names hold an empty one (which SQL
/// cannot name) or the same one twice.
fn check_new_names(names: &[String]) -> Result<(), String> {
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() {
            return Err(format!("column {} of the file has no name (name it, or give --schema)", i + 1));
        }
        if names[..i].contains(name) {
            return Err(format!(
                "the file has more than one column named '{name}' (unquoted names are folded to lower case; \
                 a name in double quotes keeps its case)"
            ));
        }
    }
    Ok(())
}

/// For each column of `target`, the index of the file column of the same
/// name. Both sides are names as SQL has them, so they compare exactly
/// (the file's were folded as SQL folds them). Every file column must
/// match one table column and every table column one file column.
fn match_columns(file: &[String], target: &Schema) -> Result<Vec<usize>, String> {
    let mut sources = Vec::with_capacity(target.fields().len());
    let mut used = vec![false; file.len()];
    for field in target.fields() {
        let name = field.name();
        let found: Vec<usize> = (0..file.len()).filter(|&i| &file[i] == name).collect();
        match found[..] {
            [i] => {
                used[i] = true;
                sources.push(i);
            }
            [] => {
                let hint = if file.iter().any(|f| f.eq_ignore_ascii_case(name)) {
                    format!(
                        "; an unquoted name is folded to lower case, write \"{name}\" in double quotes to keep its case"
                    )
                } else {
                    String::new()
                };
                return Err(format!("the file has no column '{name}' (its columns: {}{hint})", file.join(", ")));
            }
            _ => return Err(format!("the file has more than one column named '{name}'")),
        }
    }
    let extra: Vec<&str> = file.iter().zip(&used).filter(|(_, used)| !**used).map(|(n, _)| n.as_str()).collect();
    if !extra.is_empty() {
        return Err(format!("the table has no column '{}' (its columns: {})", extra.join("', '"), {
            target.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
        }));
    }
    Ok(sources)
}

/// The file's `width` columns taken as `target`'s in order (a CSV file
/// without a header or `--schema`, appended).
fn in_order(width: usize, target: &Schema) -> Result<Vec<usize>, String> {
    let columns = target.fields().len();
    if width != columns {
        let fields = if width == 1 { "1 field".to_string() } else { format!("{width} fields") };
        return Err(format!(
            "the file's lines have {fields} and it has no header, but the table has {columns} columns \
             (without a header, the fields are loaded into the table's columns in order)"
        ));
    }
    Ok((0..width).collect())
}

/// Rows per second as a whole number (`-` for no time at all).
fn format_rate(rows: i64, seconds: f64) -> String {
    if seconds <= 0.0 {
        return "-".into();
    }
    format!("{:.0}", (rows as f64 / seconds).round())
}

#[cfg(test)]
mod tests;
