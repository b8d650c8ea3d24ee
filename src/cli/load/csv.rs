//! Reading a CSV file for `quiverdb load`: its layout (the header and how
//! many fields a record has), type inference over the whole file, the
//! records as batches, and, when a record cannot be loaded, the line it
//! starts on and what is wrong with it.
//!
//! ```text
//!  pass 1 (a new table without --schema): every record ──► arrow-csv inference ──► column types
//!  pass 2: records ──► arrow-csv decoder ──► batches of 64Ki rows, each with the
//!                            │                byte offset it starts at
//!                            │ a batch fails
//!                            ▼
//!          lines counted up to the batch's offset; its records again, one at a
//!          time, each with the line it starts on ──► the failing record and line
//! ```
//!
//! Neither pass holds more than a batch of the file, and the loading pass
//! does not count lines: only a failure does. A line number counts the
//! file's lines from 1 (the header is line 1) and names the line a record
//! starts on, also after a quoted field that spans lines. The error path
//! finds the record itself rather than reading arrow-csv's messages,
//! which count records (some from 0, some from 1), not lines.
//!
//! The loader skips the header itself (arrow-csv would only skip it too).
//! A UTF-8 byte order mark at the start of the file is skipped by the CSV
//! parser.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_csv::reader::{Decoder, Format};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use indicatif::ProgressBar;

use super::record::{BATCH_ROWS, BadRecord, Conform, Place, Problem, Refused, WidthFrom};
use crate::cli::CliError;

/// The read buffer of a CSV file.
const CSV_BUFFER_BYTES: usize = 1 << 20;

/// How a CSV file splits into fields and records: the delimiter, and
/// whether the first record is a header. Fields may be quoted with `"`
/// (`""` inside is one `"`); a record ends at `\n`, `\r\n` or `\r`; empty
/// lines are skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CsvFormat {
    pub(super) delimiter: u8,
    pub(super) header: bool,
}

impl CsvFormat {
    /// arrow-csv's format, without a header (the loader reads it itself).
    fn arrow(self) -> Format {
        Format::default().with_delimiter(self.delimiter)
    }

    /// A decoder of records as `schema`, `batch_rows` at a time.
    fn decoder(self, schema: SchemaRef, batch_rows: usize) -> Decoder {
        arrow_csv::ReaderBuilder::new(schema).with_format(self.arrow()).with_batch_size(batch_rows).build_decoder()
    }
}

/// Reads `--delimiter`: one ASCII character, or `\t` for a tab.
pub(super) fn parse_delimiter(text: &str) -> Result<u8, String> {
    let byte = match text.as_bytes() {
        b"\\t" => b'\t',
        [b] if b.is_ascii() => *b,
        _ => return Err(format!("--delimiter takes one ASCII character (or \\t for a tab), not '{text}'")),
    };
    if matches!(byte, b'"' | b'\n' | b'\r') {
        return Err(format!("--delimiter cannot be {:?}: it quotes fields or ends records", char::from(byte)));
    }
    Ok(byte)
}

/// A place in the file: a byte offset and the line it is on (from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mark {
    offset: u64,
    line: u64,
}

impl Mark {
    /// The start of a file.
    const START: Self = Self { offset: 0, line: 1 };

    /// Moves the mark past `bytes`.
    fn advance(&mut self, bytes: &[u8]) {
        self.offset += bytes.len() as u64;
        self.line += bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

/// A CSV file with its layout read: the number of fields, the header's
/// names, and where the records after the header start.
#[derive(Debug)]
pub(super) struct CsvFile {
    path: PathBuf,
    format: CsvFormat,
    width: usize,
    width_from: WidthFrom,
    /// The header's fields as written (without CSV's quotes).
    header: Option<Vec<String>>,
    /// Where the first record after the header starts.
    data: Mark,
    bytes: u64,
}

impl CsvFile {
    /// Reads the layout of the file at `path`: the first record, and the
    /// header if the format has one. `declared` is the number of columns
    /// `--schema` gives, which the first record must have too.
    pub(super) fn open(path: &Path, format: CsvFormat, declared: Option<usize>) -> Result<Self, CliError> {
        let opened = File::open(path)?;
        let bytes = opened.metadata()?.len();
        let mut reader = BufReader::new(opened);
        let mut at = Mark::START;
        let first = if skip_line_breaks(&mut reader, &mut at)? {
            Some((at.line, count_fields(&mut reader, format.delimiter)?))
        } else {
            None
        };
        let (width, width_from) = match (declared, first) {
            (Some(width), _) => (width, WidthFrom::Schema),
            (None, Some((_, found))) => (found, if format.header { WidthFrom::Header } else { WidthFrom::FirstLine }),
            (None, None) if format.header => return Err("the file is empty (it has no header line)".into()),
            (None, None) => return Err("the file is empty".into()),
        };
        let mut file =
            Self { path: path.to_path_buf(), format, width, width_from, header: None, data: Mark::START, bytes };
        let Some((line, found)) = first else { return Ok(file) };
        if found != width {
            let problem = Problem::Width { found, expected: width, from: width_from };
            return Err(BadRecord { place: Place::Line(line), problem }.into());
        }
        if format.header {
            let schema = text_schema(width);
            let mut records = Records::open(&file.path, format, Arc::clone(&schema), Mark::START)?;
            let Some(record) = records.next()? else { return Ok(file) };
            let batch = match record.parsed {
                Ok(batch) => batch,
                Err(e) => return Err(file.explain(&schema, record.start, &record.bytes, e)?.into()),
            };
            let names = batch
                .columns()
                .iter()
                .map(|c| c.as_string_opt::<i32>().filter(|c| c.is_valid(0)).map_or("", |c| c.value(0)).to_string());
            file.header = Some(names.collect());
            file.data = records.at;
        }
        Ok(file)
    }

    /// The number of fields each record has.
    pub(super) fn width(&self) -> usize {
        self.width
    }

    /// The header's fields as written, if the file has a header.
    pub(super) fn header(&self) -> Option<&[String]> {
        self.header.as_deref()
    }

    /// The size of the file in bytes.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The type of each column, inferred by arrow-csv from every record
    /// (a column without a value is text), advancing `progress` by the
    /// bytes read.
    pub(super) fn infer(&self, progress: &ProgressBar) -> Result<Vec<DataType>, CliError> {
        let counting = Counting { inner: File::open(&self.path)?, progress: progress.clone() };
        let reader = BufReader::with_capacity(CSV_BUFFER_BYTES, counting);
        let inferred = self.format.arrow().with_header(self.format.header).infer_schema(reader, None);
        progress.reset();
        match inferred {
            Ok((schema, _)) if schema.fields().len() == self.width => Ok(schema
                .fields()
                .iter()
                .map(|f| match f.data_type() {
                    DataType::Null => DataType::Utf8,
                    other => other.clone(),
                })
                .collect()),
            Ok((schema, _)) => Err(format!(
                "the file's records have {} fields, its first line {} (is the file changing?)",
                schema.fields().len(),
                self.width
            )
            .into()),
            Err(error) => Err(match self.locate(&text_schema(self.width), self.data, None) {
                Ok(Some(bad)) => bad.into(),
                _ => error.into(),
            }),
        }
    }

    /// The records after the header, read as `schema` (a field for each
    /// of the file's columns) in batches of [`BATCH_ROWS`] and made the
    /// table's columns by `conform`, advancing `progress` by the bytes
    /// read.
    pub(super) fn batches(
        self,
        schema: SchemaRef,
        conform: Conform,
        progress: ProgressBar,
    ) -> Result<CsvBatches, CliError> {
        let mut inner = File::open(&self.path)?;
        inner.seek(SeekFrom::Start(self.data.offset))?;
        progress.set_position(self.data.offset);
        let reader = BufReader::with_capacity(CSV_BUFFER_BYTES, Counting { inner, progress });
        let decoder = self.format.decoder(Arc::clone(&schema), BATCH_ROWS);
        let next = self.data.offset;
        Ok(CsvBatches { file: self, schema, reader, decoder, next, conform, done: false })
    }

    /// The mark of byte `offset`: its line, counted from the start.
    fn mark_at(&self, offset: u64) -> Result<Mark, CliError> {
        if offset == self.data.offset {
            return Ok(self.data);
        }
        let mut reader = BufReader::with_capacity(CSV_BUFFER_BYTES, File::open(&self.path)?.take(offset));
        let mut at = Mark::START;
        loop {
            let buf = reader.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            let n = buf.len();
            at.advance(buf);
            reader.consume(n);
        }
        if at.offset != offset {
            return Err(format!("the file is shorter than the {offset} bytes read from it (is it changing?)").into());
        }
        Ok(at)
    }

    /// The first record from `from` (within `limit` records) that fails
    /// when read as `schema`, and why; `None` if none does.
    fn locate(&self, schema: &SchemaRef, from: Mark, limit: Option<usize>) -> Result<Option<BadRecord>, CliError> {
        let mut records = Records::open(&self.path, self.format, Arc::clone(schema), from)?;
        for _ in 0..limit.unwrap_or(usize::MAX) {
            let Some(record) = records.next()? else { break };
            if let Err(e) = record.parsed {
                return Ok(Some(self.explain(schema, record.start, &record.bytes, e)?));
            }
        }
        Ok(None)
    }

    /// The line the record `index` records after `from` starts on.
    fn line_of(&self, from: Mark, index: usize) -> Result<u64, CliError> {
        let mut records = Records::open(&self.path, self.format, text_schema(self.width), from)?;
        for _ in 0..index {
            records.next()?;
        }
        Ok(records.next()?.map_or(records.at.line, |r| r.start.line))
    }

    /// Why a record (starting at `start`, its text `bytes`) failed with
    /// `error` when read as `schema`: the wrong number of fields, text that
    /// is not UTF-8, or the first value that is not of its column's type.
    /// Else arrow-csv's error.
    fn explain(&self, schema: &SchemaRef, start: Mark, bytes: &[u8], error: ArrowError) -> Result<BadRecord, CliError> {
        let mut file = File::open(&self.path)?;
        file.seek(SeekFrom::Start(start.offset))?;
        let found = count_fields(&mut BufReader::new(file), self.format.delimiter)?;
        let problem = if found != self.width {
            Problem::Width { found, expected: self.width, from: self.width_from }
        } else {
            self.probe(schema, bytes).unwrap_or(Problem::Other(error))
        };
        Ok(BadRecord { place: Place::Line(start.line), problem })
    }

    /// What fails in the one record `bytes` read as `schema`: its text, or
    /// the first value arrow-csv cannot read as its column's type.
    fn probe(&self, schema: &SchemaRef, bytes: &[u8]) -> Option<Problem> {
        let text = match decode_one(self.format, text_schema(self.width), bytes, None) {
            Err(_) => return Some(Problem::NotUtf8),
            Ok(None) => return None,
            Ok(Some(text)) => text,
        };
        for (i, field) in schema.fields().iter().enumerate() {
            if field.data_type() == &DataType::Utf8
                || decode_one(self.format, Arc::clone(schema), bytes, Some(i)).is_ok()
            {
                continue;
            }
            let value = text.column(i).as_string_opt::<i32>().map_or("", |c| c.value(0));
            return Some(Problem::Value {
                column: field.name().clone(),
                value: value.to_string(),
                data_type: field.data_type().clone(),
            });
        }
        None
    }
}

/// A schema of `width` text columns.
fn text_schema(width: usize) -> SchemaRef {
    Arc::new(Schema::new(
        (1..=width).map(|i| Field::new(format!("column_{i}"), DataType::Utf8, true)).collect::<Vec<_>>(),
    ))
}

/// Reads the one record `bytes` as `schema` (only column `column` if
/// given).
fn decode_one(
    format: CsvFormat,
    schema: SchemaRef,
    bytes: &[u8],
    column: Option<usize>,
) -> Result<Option<RecordBatch>, ArrowError> {
    let mut builder = arrow_csv::ReaderBuilder::new(schema).with_format(format.arrow()).with_batch_size(1);
    if let Some(column) = column {
        builder = builder.with_projection(vec![column]);
    }
    let mut decoder = builder.build_decoder();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = decoder.decode(rest)?;
        if n == 0 {
            break;
        }
        rest = &rest[n..];
    }
    // The end of the input ends a last record without a line break.
    decoder.decode(&[])?;
    decoder.flush()
}

/// Skips the line breaks at `reader`'s position (the empty lines before a
/// record, which CSV skips), moving `at` past them. Returns whether a
/// record follows.
fn skip_line_breaks(reader: &mut impl BufRead, at: &mut Mark) -> io::Result<bool> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(false);
        }
        let n = buf.iter().take_while(|&&b| b == b'\n' || b == b'\r').count();
        let more = n < buf.len();
        at.advance(&buf[..n]);
        reader.consume(n);
        if more {
            return Ok(true);
        }
    }
}

/// The number of fields of the record at `reader`'s position, split as
/// arrow-csv (csv-core) splits it: a `"` opens a quoted field only at the
/// start of a field, `""` inside one is a quote, and the record ends at
/// the first line break outside quotes (or at the end of the file).
fn count_fields(reader: &mut impl BufRead, delimiter: u8) -> io::Result<usize> {
    #[derive(Clone, Copy)]
    enum State {
        FieldStart,
        Unquoted,
        Quoted,
        /// A `"` in a quoted field: the end of the quotes, or half of `""`.
        QuoteInQuoted,
    }
    let mut state = State::FieldStart;
    let mut fields = 1;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(fields);
        }
        for &b in buf {
            state = match (state, b) {
                (State::Quoted, b'"') => State::QuoteInQuoted,
                (State::Quoted, _) | (State::QuoteInQuoted, b'"') => State::Quoted,
                (State::FieldStart, b'"') => State::Quoted,
                (_, b'\n' | b'\r') => return Ok(fields),
                (_, b) if b == delimiter => {
                    fields += 1;
                    State::FieldStart
                }
                _ => State::Unquoted,
            };
        }
        let n = buf.len();
        reader.consume(n);
    }
}

/// A CSV file read one record at a time from a mark, each record with the
/// line it starts on: the slow, exact reader of the header and of the
/// error path.
#[derive(Debug)]
struct Records {
    reader: BufReader<File>,
    decoder: Decoder,
    /// Where reading is.
    at: Mark,
}

/// A record read by [`Records`].
#[derive(Debug)]
struct Record {
    /// Where it starts (the line it starts on).
    start: Mark,
    /// Its text (all of it when it split into fields without error).
    bytes: Vec<u8>,
    /// The record as one row, or why it is not one.
    parsed: Result<RecordBatch, ArrowError>,
}

impl Records {
    /// Reads the file at `path` as `schema` from `from`, which must be
    /// where a record (or the line breaks before one) starts.
    fn open(path: &Path, format: CsvFormat, schema: SchemaRef, from: Mark) -> io::Result<Self> {
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(from.offset))?;
        Ok(Self { reader: BufReader::new(file), decoder: format.decoder(schema, 1), at: from })
    }

    /// The next record, or `None` at the end of the file. After a record
    /// that failed, the next is not to be asked for.
    fn next(&mut self) -> io::Result<Option<Record>> {
        skip_line_breaks(&mut self.reader, &mut self.at)?;
        let start = self.at;
        let mut bytes = Vec::new();
        loop {
            let buf = self.reader.fill_buf()?;
            let n = match self.decoder.decode(buf) {
                Ok(n) => n,
                Err(e) => return Ok(Some(Record { start, bytes, parsed: Err(e) })),
            };
            bytes.extend_from_slice(&buf[..n]);
            self.at.advance(&buf[..n]);
            self.reader.consume(n);
            if n == 0 || self.decoder.capacity() == 0 {
                break;
            }
        }
        Ok(match self.decoder.flush() {
            Ok(None) => None,
            Ok(Some(batch)) => Some(Record { start, bytes, parsed: Ok(batch) }),
            Err(e) => Some(Record { start, bytes, parsed: Err(e) }),
        })
    }
}

/// The batches of a CSV file's records as the table's columns. A batch
/// that fails is reported by the line of its first failing record, and
/// ends the batches.
#[derive(Debug)]
pub(super) struct CsvBatches {
    file: CsvFile,
    /// The file's columns as they are read.
    schema: SchemaRef,
    reader: BufReader<Counting<File>>,
    decoder: Decoder,
    /// The byte offset where the next batch starts (its line is counted
    /// only if the batch fails, to keep the loading pass free of it).
    next: u64,
    conform: Conform,
    done: bool,
}

/// Why a batch could not be read.
#[derive(Debug)]
enum ReadFailure {
    Io(io::Error),
    Csv(ArrowError),
}

impl CsvBatches {
    /// Decodes the next batch of records (`None` at the end of the file).
    fn read(&mut self) -> Result<Option<RecordBatch>, ReadFailure> {
        loop {
            let buf = self.reader.fill_buf().map_err(ReadFailure::Io)?;
            let n = self.decoder.decode(buf).map_err(ReadFailure::Csv)?;
            self.next += n as u64;
            self.reader.consume(n);
            if n == 0 || self.decoder.capacity() == 0 {
                break;
            }
        }
        self.decoder.flush().map_err(ReadFailure::Csv)
    }
}

impl Iterator for CsvBatches {
    type Item = Result<RecordBatch, CliError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let start = self.next;
        let result = match self.read() {
            Ok(None) => {
                self.done = true;
                return None;
            }
            Ok(Some(batch)) => self.conform.apply(&batch).map_err(|refused| match refused {
                Refused::Value { row, problem } => {
                    match self.file.mark_at(start).and_then(|start| self.file.line_of(start, row)) {
                        Ok(line) => BadRecord { place: Place::Line(line), problem }.into(),
                        Err(e) => e,
                    }
                }
                Refused::Other(e) => e,
            }),
            Err(ReadFailure::Io(e)) => Err(e.into()),
            Err(ReadFailure::Csv(error)) => {
                let start = self.file.mark_at(start);
                let located = start.and_then(|start| self.file.locate(&self.schema, start, Some(BATCH_ROWS + 1)));
                Err(match located {
                    Ok(Some(bad)) => bad.into(),
                    _ => error.into(),
                })
            }
        };
        self.done = result.is_err();
        Some(result)
    }
}

/// A reader that advances a progress bar by the bytes it reads.
#[derive(Debug)]
struct Counting<R> {
    inner: R,
    progress: ProgressBar,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.inc(n as u64);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::path::PathBuf;
    use std::sync::Arc;

    use arrow_schema::{DataType, Field, Schema};

    use super::{CsvFile, CsvFormat, Mark, count_fields, parse_delimiter, skip_line_breaks};

    /// A file in the temporary directory, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, bytes: &[u8]) -> Self {
            let path = std::env::temp_dir().join(format!("quiverdb-load-{}-{name}", std::process::id()));
            std::fs::write(&path, bytes).expect("write a temporary file");
            Self(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// A byte order mark is neither part of the first header name nor of
    /// the first value of a file without a header, and the lines count
    /// from it.
    #[test]
    fn a_byte_order_mark_is_skipped() {
        let text = b"\xEF\xBB\xBFId,label\r\n\r\n1,a\r\n";
        let file = TempFile::new("bom.csv", text);
        let csv = CsvFile::open(&file.0, CsvFormat { delimiter: b',', header: true }, None).expect("opens");
        assert_eq!(csv.header(), Some(&["Id".to_string(), "label".to_string()][..]));
        // The first record is on line 3, after an empty line.
        assert_eq!(csv.line_of(csv.data, 0).expect("reads"), 3);

        let file = TempFile::new("bom_no_header.csv", b"\xEF\xBB\xBF1,a\n2,b\n");
        let csv = CsvFile::open(&file.0, CsvFormat { delimiter: b',', header: false }, None).expect("opens");
        let progress = indicatif::ProgressBar::hidden();
        assert_eq!(csv.infer(&progress).expect("infers"), [DataType::Int64, DataType::Utf8]);
        let schema =
            Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true), Field::new("s", DataType::Utf8, true)]));
        assert!(csv.locate(&schema, csv.data, None).expect("reads").is_none(), "the first value is not 1");
    }

    /// The fields of the first record of `text`, as the csv crate (through
    /// arrow-csv's inference, which reads the first record as the header)
    /// counts them.
    fn reference_fields(text: &str, delimiter: u8) -> usize {
        let format = CsvFormat { delimiter, header: true }.arrow().with_header(true);
        format.infer_schema(Cursor::new(text), Some(0)).expect("a record").0.fields().len()
    }

    #[test]
    fn fields_are_counted_as_csv_splits_them() {
        for (text, delimiter) in [
            ("a,b,c\n1,2\n", b','),
            ("a", b','),
            ("a,", b','),
            (",\r\n", b','),
            ("\"a,b\",c", b','),
            ("\"a\"\"b,\"\"\",c,d\n", b','),
            ("\"multi\nline, still\",x\ny,z", b','),
            ("a\"b,c\",d\n", b','),
            ("\"a\"b,c\n", b','),
            ("\"open,to the end", b','),
            ("a\tb,c\td\r", b'\t'),
            ("a;b;;\n", b';'),
        ] {
            let counted = count_fields(&mut Cursor::new(text), delimiter).expect("read");
            assert_eq!(counted, reference_fields(text, delimiter), "{text:?}");
        }
    }

    #[test]
    fn line_breaks_before_a_record_are_skipped() {
        let mut at = Mark::START;
        let mut reader = Cursor::new("\n\r\n\rx\n");
        assert!(skip_line_breaks(&mut reader, &mut at).expect("read"));
        assert_eq!(at, Mark { offset: 4, line: 3 });
        let mut at = Mark::START;
        assert!(!skip_line_breaks(&mut Cursor::new("\n\n"), &mut at).expect("read"));
        assert_eq!(at, Mark { offset: 2, line: 3 });
    }

    #[test]
    fn delimiters() {
        assert_eq!(parse_delimiter(","), Ok(b','));
        assert_eq!(parse_delimiter(";"), Ok(b';'));
        assert_eq!(parse_delimiter("\\t"), Ok(b'\t'));
        assert_eq!(parse_delimiter("\t"), Ok(b'\t'));
        assert_eq!(parse_delimiter("|"), Ok(b'|'));
        for bad in ["", ",,", "tab", "é", "\"", "\n"] {
            assert!(parse_delimiter(bad).is_err(), "{bad:?}");
        }
    }
}
