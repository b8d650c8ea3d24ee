//! `quiverdb load`: a CSV or Parquet file into a table, through one
//! Flight SQL ingest request.
//!
//! ```text
//!  file ──reader thread──► batches of 64Ki rows ──channel (2)──► DoPut stream ──► server
//!        (parse, match to                                         (one request: the server
//!         the table's columns)                                     applies all or nothing)
//! ```
//!
//! The file is streamed, never held whole. Appending to an existing table,
//! the file's columns are matched to the table's by name and read (CSV) or
//! cast (Parquet) to the table's types; with `--create` the table takes the
//! file's schema (CSV types inferred from the first records).
//!
//! If reading fails half-way, the upload must not look finished. Neither
//! ending the stream nor cancelling the call will do: the server cannot
//! tell a `RST_STREAM(CANCEL)` from a clean end of the request (hyper
//! reports both as the end of the body) and would apply the rows it got.
//! So the stream stalls instead, and the runtime (one thread, so nothing
//! runs outside `block_on`) is dropped with the call still open: its
//! tasks are dropped unpolled, no reset frame is written, and the server
//! sees the connection close mid-request, an error.

use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_cast::cast::{CastOptions, cast_with_options};
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

use super::CliError;
use super::client::{ConnectArgs, RequestError, connect};

/// Arguments of `quiverdb load`.
#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    /// The table to load into.
    pub(crate) table: String,
    /// A CSV (.csv, with a header row) or Parquet (.parquet) file.
    pub(crate) file: PathBuf,
    /// Create the table from the file's schema (fails if it exists).
    #[arg(long)]
    pub(crate) create: bool,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// Rows per batch sent: 64Ki rows keeps a batch of a few narrow columns
/// at a few MiB, well under the server's 64 MiB message bound (and the
/// Flight encoder splits larger batches into 2 MiB messages anyway).
const BATCH_ROWS: usize = 65536;

/// CSV records read to infer the column types of a new table.
const INFER_RECORDS: usize = 1000;

/// Batches read ahead of the upload: enough to keep the network busy,
/// few enough to keep memory flat.
const READ_AHEAD: usize = 2;

/// The read buffer of a CSV file.
const CSV_BUFFER_BYTES: usize = 1 << 20;

/// The kind of file, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    Csv,
    Parquet,
}

impl FileKind {
    /// `.csv` is CSV with a header row; `.parquet` and `.parq` are Parquet.
    fn of(path: &Path) -> Result<Self, String> {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("csv") => Ok(Self::Csv),
            Some("parquet" | "parq") => Ok(Self::Parquet),
            Some(other) => Err(format!(
                "cannot load {}: unknown file type '.{other}' (use a .csv file with a header row, or .parquet)",
                path.display()
            )),
            None => Err(format!(
                "cannot load {}: the file has no extension to tell its type (use .csv or .parquet)",
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

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
    let read_error = |source: CliError| ReadError { path: args.file.clone(), source };
    let opened = Opened::open(kind, &args.file).map_err(read_error)?;
    // One thread: between `block_on` calls nothing runs (see the module
    // documentation on a failed read).
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut client = runtime.block_on(connect(&args.connect))?;
    let table_schema = if args.create {
        None
    } else {
        let schema = runtime.block_on(table_schema(&mut client, &args.table))?;
        Some(schema.ok_or_else(|| {
            format!("table '{}' does not exist (give --create to create it from the file's schema)", args.table)
        })?)
    };
    let progress = opened.progress_bar();
    let (target, batches) = opened.into_batches(table_schema, progress.clone()).map_err(read_error)?;

    let start = Instant::now();
    let (sender, receiver) = tokio::sync::mpsc::channel(READ_AHEAD);
    let reader = {
        let path = args.file.clone();
        let progress = progress.clone();
        std::thread::spawn(move || read_file(&path, target, batches, &sender, &progress))
    };
    let loaded = runtime.block_on(ingest(&mut client, &args.table, args.create, receiver));
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
    println!("loaded {rows} into {} in {seconds:.2} s ({rate} rows/s)", args.table);
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
    table: &str,
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
        table: table.to_string(),
        schema: None,
        catalog: None,
        temporary: false,
        transaction_id: None,
        options: Default::default(),
    };
    tokio::select! {
        result = client.execute_ingest(command, stream) => Ok(result.map_err(RequestError::from)?),
        Ok(e) = error_receiver => Err(e),
    }
}

/// The schema of `table` in quiverdb's default schema, or `None` if there
/// is no such table.
async fn table_schema(
    client: &mut FlightSqlServiceClient<Channel>,
    table: &str,
) -> Result<Option<SchemaRef>, CliError> {
    let request = CommandGetTables {
        catalog: None,
        db_schema_filter_pattern: Some(DEFAULT_SCHEMA.to_string()),
        table_name_filter_pattern: Some(table.to_string()),
        table_types: Vec::new(),
        include_schema: true,
    };
    let info = client.get_tables(request).await.map_err(RequestError::from)?;
    for endpoint in info.endpoint {
        let Some(ticket) = endpoint.ticket else { continue };
        let batches: Vec<RecordBatch> =
            client.do_get(ticket).await.map_err(RequestError::from)?.try_collect().await.map_err(RequestError::from)?;
        for batch in &batches {
            let names = batch.column_by_name("table_name").and_then(|c| c.as_string_opt::<i32>());
            let schemas = batch.column_by_name("table_schema").and_then(|c| c.as_binary_opt::<i32>());
            let (Some(names), Some(schemas)) = (names, schemas) else {
                return Err("the server's table list has no table_name or table_schema column".into());
            };
            for (name, schema) in names.iter().zip(schemas.iter()) {
                if let (Some(name), Some(schema)) = (name, schema)
                    && name == table
                {
                    let schema = Schema::try_from(IpcMessage(schema.to_vec().into()))
                        .map_err(|e| format!("decoding the schema of table '{table}': {e}"))?;
                    return Ok(Some(Arc::new(schema)));
                }
            }
        }
    }
    Ok(None)
}

/// The batches of a file, as the table's columns.
type Batches = Box<dyn Iterator<Item = Result<RecordBatch, CliError>> + Send>;

/// A file opened and its layout read, before its rows are.
enum Opened {
    Csv {
        file: File,
        /// The header's column names and the types inferred from the
        /// first records.
        inferred: Schema,
        bytes: u64,
    },
    Parquet {
        builder: ParquetRecordBatchReaderBuilder<File>,
        rows: u64,
    },
}

impl Opened {
    fn open(kind: FileKind, path: &Path) -> Result<Self, CliError> {
        let mut file = File::open(path)?;
        match kind {
            FileKind::Csv => {
                let bytes = file.metadata()?.len();
                let (inferred, _) = arrow_csv::reader::Format::default()
                    .with_header(true)
                    .infer_schema(&mut file, Some(INFER_RECORDS))?;
                if inferred.fields().is_empty() {
                    return Err("the file has no header row".into());
                }
                file.rewind()?;
                Ok(Self::Csv { file, inferred, bytes })
            }
            FileKind::Parquet => {
                let builder = ParquetRecordBatchReaderBuilder::try_new(file)?.with_batch_size(BATCH_ROWS);
                let rows = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
                Ok(Self::Parquet { builder, rows })
            }
        }
    }

    /// A progress bar on stderr (hidden when stderr is not a terminal):
    /// bytes read of a CSV file, rows read of a Parquet file.
    fn progress_bar(&self) -> ProgressBar {
        let (len, template) = match self {
            Self::Csv { bytes, .. } => (
                *bytes,
                "{spinner} [{elapsed_precise}] {wide_bar} {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}) {msg}",
            ),
            Self::Parquet { rows, .. } => {
                (*rows, "{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} rows ({per_sec}) {msg}")
            }
        };
        let style = ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar());
        ProgressBar::new(len).with_style(style)
    }

    /// The file's rows as batches of `table`'s columns (the file's own
    /// columns if `table` is `None`), and the schema they have.
    fn into_batches(self, table: Option<SchemaRef>, progress: ProgressBar) -> Result<(SchemaRef, Batches), CliError> {
        match self {
            Self::Csv { file, inferred, .. } => {
                let target = table.unwrap_or_else(|| Arc::new(text_if_unknown(&strip_metadata(&inferred))));
                let names: Vec<&str> = inferred.fields().iter().map(|f| f.name().as_str()).collect();
                let sources = match_columns(&names, &target)?;
                // Read each column as its table column's type where the CSV
                // reader parses that type, else as text to cast.
                let mut fields: Vec<Field> = names.iter().map(|n| Field::new(*n, DataType::Utf8, true)).collect();
                for (field, &source) in target.fields().iter().zip(&sources) {
                    if csv_parses(field.data_type()) {
                        fields[source] = Field::new(names[source], field.data_type().clone(), true);
                    }
                }
                let counting = Counting { inner: file, progress };
                let reader = arrow_csv::ReaderBuilder::new(Arc::new(Schema::new(fields)))
                    .with_header(true)
                    .with_batch_size(BATCH_ROWS)
                    .build_buffered(BufReader::with_capacity(CSV_BUFFER_BYTES, counting))?;
                let conform = Conform { target: Arc::clone(&target), sources };
                let batches = reader.map(move |b| conform.apply(&b?));
                Ok((target, Box::new(batches)))
            }
            Self::Parquet { builder, .. } => {
                let file_schema = Arc::clone(builder.schema());
                let target = table.unwrap_or_else(|| Arc::new(strip_metadata(&file_schema)));
                let names: Vec<&str> = file_schema.fields().iter().map(|f| f.name().as_str()).collect();
                let sources = match_columns(&names, &target)?;
                let conform = Conform { target: Arc::clone(&target), sources };
                let reader = builder.build()?;
                let batches = reader.map(move |b| {
                    let b = b?;
                    progress.inc(b.num_rows() as u64);
                    conform.apply(&b)
                });
                Ok((target, Box::new(batches)))
            }
        }
    }
}

/// A reader that advances a progress bar by the bytes it reads.
struct Counting<R> {
    inner: R,
    progress: ProgressBar,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.inc(n as u64);
        Ok(n)
    }
}

/// `schema` without schema or field metadata (a new table gets the
/// file's columns, not the writer's annotations).
fn strip_metadata(schema: &Schema) -> Schema {
    Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), f.data_type().clone(), f.is_nullable()))
            .collect::<Vec<_>>(),
    )
}

/// `schema` with columns of type `Null` (no value among the records the
/// types were inferred from) made text.
fn text_if_unknown(schema: &Schema) -> Schema {
    Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Null => Field::new(f.name(), DataType::Utf8, true),
                _ => f.as_ref().clone(),
            })
            .collect::<Vec<_>>(),
    )
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

/// For each column of `target`, the index of the file column of the same
/// name (exactly, or else ignoring ASCII case if that is unambiguous).
/// Every file column must match one table column and every table column
/// one file column.
fn match_columns(file: &[&str], target: &Schema) -> Result<Vec<usize>, String> {
    let mut sources = Vec::with_capacity(target.fields().len());
    let mut used = vec![false; file.len()];
    for field in target.fields() {
        let name = field.name();
        let exact: Vec<usize> = (0..file.len()).filter(|&i| file[i] == name).collect();
        let candidates = if exact.is_empty() {
            (0..file.len()).filter(|&i| file[i].eq_ignore_ascii_case(name)).collect()
        } else {
            exact
        };
        match candidates[..] {
            [i] => {
                used[i] = true;
                sources.push(i);
            }
            [] => return Err(format!("the file has no column '{name}' (its columns: {})", file.join(", "))),
            _ => return Err(format!("the file has more than one column named '{name}'")),
        }
    }
    let extra: Vec<&str> = file.iter().zip(&used).filter(|(_, used)| !**used).map(|(n, _)| *n).collect();
    if !extra.is_empty() {
        return Err(format!("the table has no column '{}' (its columns: {})", extra.join("', '"), {
            target.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
        }));
    }
    Ok(sources)
}

/// Turns a file batch into a batch of the target's columns: picks each
/// column by [`match_columns`]'s mapping and casts it where the types
/// differ (failing, not nulling, on values that do not convert).
#[derive(Debug)]
struct Conform {
    target: SchemaRef,
    sources: Vec<usize>,
}

impl Conform {
    fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch, CliError> {
        let options = CastOptions { safe: false, ..CastOptions::default() };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.sources.len());
        for (field, &source) in self.target.fields().iter().zip(&self.sources) {
            let column = batch.column(source);
            if column.data_type() == field.data_type() {
                columns.push(Arc::clone(column));
            } else {
                let cast = cast_with_options(column, field.data_type(), &options)
                    .map_err(|e| format!("column '{}': {e}", field.name()))?;
                columns.push(cast);
            }
        }
        Ok(RecordBatch::try_new(Arc::clone(&self.target), columns)?)
    }
}

/// `950`, `12.35K`, `2.38M` rows per second.
fn format_rate(rows: i64, seconds: f64) -> String {
    if seconds <= 0.0 {
        return "-".into();
    }
    let rate = rows as f64 / seconds;
    if rate >= 1e6 {
        format!("{:.2}M", rate / 1e6)
    } else if rate >= 1e3 {
        format!("{:.2}K", rate / 1e3)
    } else {
        format!("{rate:.0}")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use arrow_array::{Array, Int32Array, Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::{Conform, FileKind, format_rate, match_columns};

    #[test]
    fn file_kinds() {
        assert_eq!(FileKind::of(Path::new("a/b.csv")), Ok(FileKind::Csv));
        assert_eq!(FileKind::of(Path::new("b.CSV")), Ok(FileKind::Csv));
        assert_eq!(FileKind::of(Path::new("b.parquet")), Ok(FileKind::Parquet));
        assert_eq!(FileKind::of(Path::new("b.parq")), Ok(FileKind::Parquet));
        assert!(FileKind::of(Path::new("b.json")).unwrap_err().contains("unknown file type '.json'"));
        assert!(FileKind::of(Path::new("b")).unwrap_err().contains("no extension"));
    }

    #[test]
    fn columns_match_by_name() {
        let table = Schema::new(vec![Field::new("a", DataType::Int64, false), Field::new("b", DataType::Utf8, true)]);
        assert_eq!(match_columns(&["a", "b"], &table), Ok(vec![0, 1]));
        assert_eq!(match_columns(&["b", "a"], &table), Ok(vec![1, 0]));
        assert_eq!(match_columns(&["B", "A"], &table), Ok(vec![1, 0]));
        assert_eq!(match_columns(&["A", "a", "b"], &table).map_err(|e| e.contains("no column 'A'")), Err(true));
        assert!(match_columns(&["a"], &table).unwrap_err().contains("the file has no column 'b'"));
        assert!(match_columns(&["a", "b", "c"], &table).unwrap_err().contains("the table has no column 'c'"));
        assert!(match_columns(&["A", "b", "a2"], &table).unwrap_err().contains("'a2'"));
        assert!(match_columns(&["B", "b2", "A", "a"], &table).unwrap_err().contains("'b2'"));
        let twice = Schema::new(vec![Field::new("a", DataType::Int64, false)]);
        assert!(match_columns(&["A", "a2", "A"], &twice).unwrap_err().contains("more than one column named 'a'"));
    }

    #[test]
    fn conform_reorders_and_casts() {
        let file =
            Arc::new(Schema::new(vec![Field::new("b", DataType::Utf8, true), Field::new("a", DataType::Int32, true)]));
        let batch = RecordBatch::try_new(
            file,
            vec![Arc::new(StringArray::from(vec![Some("x"), None])), Arc::new(Int32Array::from(vec![1, 2]))],
        )
        .unwrap();
        let table =
            Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false), Field::new("b", DataType::Utf8, true)]));
        let conform = Conform { target: Arc::clone(&table), sources: vec![1, 0] };
        let out = conform.apply(&batch).unwrap();
        assert_eq!(out.schema(), table);
        assert_eq!(out.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values(), &[1, 2]);
        assert!(out.column(1).is_null(1));

        // A NULL into a NOT NULL column is refused, not passed on.
        let strict = Arc::new(Schema::new(vec![Field::new("b", DataType::Utf8, false)]));
        assert!(Conform { target: strict, sources: vec![0] }.apply(&batch).is_err());
        // A value that does not convert fails instead of becoming NULL.
        let narrow = Arc::new(Schema::new(vec![Field::new("b", DataType::Int64, true)]));
        assert!(
            Conform { target: narrow, sources: vec![0] }.apply(&batch).unwrap_err().to_string().contains("column 'b'")
        );
    }

    #[test]
    fn rates() {
        assert_eq!(format_rate(2_000_000, 0.84), "2.38M");
        assert_eq!(format_rate(12_345, 1.0), "12.35K");
        assert_eq!(format_rate(950, 1.0), "950");
        assert_eq!(format_rate(10, 0.0), "-");
    }
}
