//! How `quiverdb sql` prints results: as they arrive, batch by batch, in
//! one of several formats, with NULL told apart from the empty string.
//!
//! ```text
//!   table     +----+------+      aligned; widths from the first rows
//!             | id | name |      (up to WIDTH_ROWS), which are held
//!             +----+------+      until then; later rows print at once
//!   markdown  | id | name |      csv   id,name      json   [{"id":1,"name":null},
//!             |---|---|                1,                    {"id":2,"name":""}]
//!             | 1 | NULL |             2,""           jsonl  {"id":1,"name":null}
//!   tsv       id<TAB>name (NULL as \N, tabs and newlines escaped)
//! ```
//!
//! Nothing holds the whole result: a printer keeps at most the rows it
//! sizes the table by, so `-c` streams millions of rows in bounded memory.
//! A printer may stop showing rows after `max_rows` (the interactive
//! shell's default) and still counts the rest.

use std::fmt::Write as _;
use std::io::{self, Write};

use arrow_array::{Array, RecordBatch};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, SchemaRef};
use clap::ValueEnum;

/// Rows a table's column widths are taken from (held until then).
const WIDTH_ROWS: usize = 1000;

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// An aligned table with borders.
    Table,
    /// Comma-separated values (RFC 4180 quoting).
    Csv,
    /// Tab-separated values.
    Tsv,
    /// One JSON array of objects.
    Json,
    /// One JSON object a line.
    Jsonl,
    /// A Markdown table.
    Markdown,
}

/// How results print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutputOptions {
    pub(crate) format: Format,
    /// No header and no footer: only the rows.
    pub(crate) tuples_only: bool,
    /// How NULL shows; `None`: the format's own (`NULL` in a table or
    /// Markdown, an empty field in CSV, `\N` in TSV, `null` in JSON).
    pub(crate) null: Option<String>,
    /// Rows shown at most (the rest are counted); `None`: all.
    pub(crate) max_rows: Option<usize>,
}

impl OutputOptions {
    /// The text of NULL in the table-like formats.
    fn null_text(&self) -> &str {
        match (&self.null, self.format) {
            (Some(text), _) => text,
            (None, Format::Csv) => "",
            (None, Format::Tsv) => "\\N",
            (None, _) => "NULL",
        }
    }
}

/// Prints one result to `out` as it arrives.
pub(crate) struct Printer<'o, W: Write> {
    out: W,
    options: &'o OutputOptions,
    schema: SchemaRef,
    /// Table rows held until the widths are known.
    held: Vec<Vec<String>>,
    widths: Option<Vec<usize>>,
    /// Rows seen, and rows shown.
    rows: u64,
    shown: u64,
    /// JSON: whether an object was written (for the commas).
    wrote_object: bool,
}

impl<W: Write> std::fmt::Debug for Printer<'_, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Printer").field("rows", &self.rows).field("shown", &self.shown).finish_non_exhaustive()
    }
}

impl<'o, W: Write> Printer<'o, W> {
    /// Starts printing a result of `schema`.
    pub(crate) fn new(out: W, options: &'o OutputOptions, schema: SchemaRef) -> io::Result<Self> {
        let mut printer =
            Self { out, options, schema, held: Vec::new(), widths: None, rows: 0, shown: 0, wrote_object: false };
        printer.start()?;
        Ok(printer)
    }

    fn names(&self) -> Vec<String> {
        self.schema.fields().iter().map(|f| f.name().clone()).collect()
    }

    fn start(&mut self) -> io::Result<()> {
        let header = !self.options.tuples_only;
        match self.options.format {
            Format::Csv if header => {
                let line = self.names().iter().map(|n| csv_field(n, ',')).collect::<Vec<_>>().join(",");
                writeln!(self.out, "{line}")
            }
            Format::Tsv if header => {
                let line = self.names().iter().map(|n| tsv_field(n)).collect::<Vec<_>>().join("\t");
                writeln!(self.out, "{line}")
            }
            Format::Markdown if header => {
                let names = self.names().iter().map(|n| markdown_cell(n)).collect::<Vec<_>>();
                writeln!(self.out, "| {} |", names.join(" | "))?;
                writeln!(self.out, "|{}", "---|".repeat(names.len()))
            }
            Format::Json => write!(self.out, "["),
            _ => Ok(()),
        }
    }

    /// Prints `batch` (or holds it, for a table still sizing its columns).
    pub(crate) fn batch(&mut self, batch: &RecordBatch) -> io::Result<()> {
        let n = batch.num_rows();
        let room = self.options.max_rows.map_or(n, |max| max.saturating_sub(self.shown as usize).min(n));
        self.rows += n as u64;
        if room == 0 {
            return Ok(());
        }
        self.shown += room as u64;
        let batch = batch.slice(0, room);
        match self.options.format {
            Format::Json | Format::Jsonl => self.json_rows(&batch),
            format => {
                let cells = self.cells(&batch)?;
                for row in cells {
                    match format {
                        Format::Table if self.widths.is_none() => {
                            self.held.push(row);
                            if self.held.len() >= WIDTH_ROWS {
                                self.size_table()?;
                            }
                        }
                        Format::Table => self.table_row(&row)?,
                        // Quoted by `cells`.
                        Format::Csv => writeln!(self.out, "{}", row.join(","))?,
                        Format::Tsv => writeln!(self.out, "{}", row.join("\t"))?,
                        _ => writeln!(self.out, "| {} |", row.join(" | "))?,
                    }
                }
                Ok(())
            }
        }
    }

    /// Ends the result; its row count (all of them, shown or not).
    pub(crate) fn finish(mut self) -> io::Result<u64> {
        match self.options.format {
            Format::Table => {
                if self.widths.is_none() {
                    self.size_table()?;
                }
                if !self.options.tuples_only {
                    let line = self.border();
                    writeln!(self.out, "{line}")?;
                }
            }
            Format::Json => writeln!(self.out, "]")?,
            _ => {}
        }
        self.out.flush()?;
        Ok(self.rows)
    }

    /// Rows shown (at most `max_rows`).
    pub(crate) fn shown(&self) -> u64 {
        self.shown
    }

    /// The cells of `batch` as text, escaped for the format (NULL as the
    /// format shows it).
    fn cells(&self, batch: &RecordBatch) -> io::Result<Vec<Vec<String>>> {
        let null = self.options.null_text();
        let options = FormatOptions::default().with_null("");
        let formatters = formatters(batch, &options)?;
        // Logical: a column of type Null has no null buffer, yet is all NULL.
        let nulls: Vec<_> = batch.columns().iter().map(|c| c.logical_nulls()).collect();
        let is_null = |c: usize, r: usize| nulls[c].as_ref().is_some_and(|n| n.is_null(r));
        let mut rows = Vec::with_capacity(batch.num_rows());
        for r in 0..batch.num_rows() {
            let mut row = Vec::with_capacity(formatters.len());
            for (c, f) in formatters.iter().enumerate() {
                if is_null(c, r) {
                    // A CSV empty field stays unquoted: it is NULL.
                    row.push(match self.options.format {
                        Format::Markdown => markdown_cell(null),
                        _ => null.to_string(),
                    });
                    continue;
                }
                let text = value_text(f, r)?;
                row.push(match self.options.format {
                    // One line a row.
                    Format::Table => text.replace('\n', "\\n").replace('\r', "\\r"),
                    Format::Tsv => tsv_field(&text),
                    Format::Markdown => markdown_cell(&text),
                    // Quoted when it must be; the empty string as "", since
                    // an empty unquoted field is NULL.
                    Format::Csv if text.is_empty() => "\"\"".to_string(),
                    Format::Csv => csv_field(&text, ','),
                    _ => text,
                });
            }
            rows.push(row);
        }
        Ok(rows)
    }

    /// Fixes the table's widths from the header and the rows held, and
    /// prints them.
    fn size_table(&mut self) -> io::Result<()> {
        let mut widths: Vec<usize> = if self.options.tuples_only {
            vec![0; self.schema.fields().len()]
        } else {
            self.names().iter().map(|n| n.chars().count()).collect()
        };
        for row in &self.held {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(display_width(cell));
            }
        }
        self.widths = Some(widths);
        if !self.options.tuples_only {
            let border = self.border();
            writeln!(self.out, "{border}")?;
            let names = self.names();
            self.table_row(&names)?;
            writeln!(self.out, "{border}")?;
        }
        for row in std::mem::take(&mut self.held) {
            self.table_row(&row)?;
        }
        Ok(())
    }

    fn border(&self) -> String {
        let widths = self.widths.as_deref().unwrap_or_default();
        let mut line = String::from("+");
        for w in widths {
            line.push_str(&"-".repeat(w + 2));
            line.push('+');
        }
        line
    }

    fn table_row(&mut self, row: &[String]) -> io::Result<()> {
        let widths = self.widths.as_deref().unwrap_or_default();
        let mut line = String::new();
        if !self.options.tuples_only {
            line.push('|');
        }
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            let pad = w.saturating_sub(display_width(cell));
            if self.options.tuples_only {
                if i > 0 {
                    line.push_str(" | ");
                }
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push(' ');
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
                line.push_str(" |");
            }
        }
        writeln!(self.out, "{}", line.trim_end())
    }

    fn json_rows(&mut self, batch: &RecordBatch) -> io::Result<()> {
        let options = FormatOptions::default();
        let formatters = formatters(batch, &options)?;
        let names: Vec<String> = self.names().iter().map(|n| json_string(n)).collect();
        let nulls: Vec<_> = batch.columns().iter().map(|c| c.logical_nulls()).collect();
        for r in 0..batch.num_rows() {
            let mut object = String::from("{");
            for (c, f) in formatters.iter().enumerate() {
                if c > 0 {
                    object.push(',');
                }
                object.push_str(&names[c]);
                object.push(':');
                let column = batch.column(c);
                if nulls[c].as_ref().is_some_and(|n| n.is_null(r)) {
                    match &self.options.null {
                        Some(text) => object.push_str(&json_string(text)),
                        None => object.push_str("null"),
                    }
                    continue;
                }
                let text = value_text(f, r)?;
                if json_number(column.data_type(), &text) || column.data_type() == &DataType::Boolean {
                    object.push_str(&text);
                } else {
                    object.push_str(&json_string(&text));
                }
            }
            object.push('}');
            if self.options.format == Format::Json {
                if self.wrote_object {
                    write!(self.out, ",\n{object}")?;
                } else {
                    write!(self.out, "{object}")?;
                }
            } else {
                writeln!(self.out, "{object}")?;
            }
            self.wrote_object = true;
        }
        Ok(())
    }
}

/// A formatter for each column of `batch`.
fn formatters<'a>(batch: &'a RecordBatch, options: &'a FormatOptions<'a>) -> io::Result<Vec<ArrayFormatter<'a>>> {
    batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), options).map_err(io::Error::other)).collect()
}

/// Row `r` of the column `f` formats, as text (a value that cannot be
/// shown is an error, not a panic).
fn value_text(f: &ArrayFormatter<'_>, r: usize) -> io::Result<String> {
    let mut text = String::new();
    write!(text, "{}", f.value(r)).map_err(io::Error::other)?;
    Ok(text)
}

/// Whether `text`, a value of `t`, is written as a JSON number.
fn json_number(t: &DataType, text: &str) -> bool {
    let numeric = t.is_integer() || t.is_floating() || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..));
    // NaN and the infinities are not JSON numbers.
    numeric && text.parse::<f64>().is_ok_and(f64::is_finite)
}

/// `s` as a JSON string.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `s` as a CSV field: quoted when it holds the delimiter, a quote or a
/// line break.
fn csv_field(s: &str, delimiter: char) -> String {
    if s.contains([delimiter, '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

/// `s` as a TSV field: backslash, tab and line breaks escaped.
fn tsv_field(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n").replace('\r', "\\r")
}

/// `s` in a Markdown table cell: pipes escaped, line breaks as <br>.
fn markdown_cell(s: &str) -> String {
    s.replace('|', "\\|").replace("\r\n", "<br>").replace('\n', "<br>")
}

/// Columns `s` takes in a terminal (one a character; a line break shows
/// as its escape).
fn display_width(s: &str) -> usize {
    s.chars().count()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Float64Array, Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    fn sample() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("x", DataType::Float64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), Some(2), None])),
                Arc::new(StringArray::from(vec![Some("a,b \"q\""), Some(""), None])),
                Arc::new(Float64Array::from(vec![Some(1.5), Some(f64::NAN), None])),
            ],
        )
        .expect("a batch")
    }

    fn print(format: Format, tuples_only: bool, max_rows: Option<usize>, batches: &[RecordBatch]) -> (String, u64) {
        let options = OutputOptions { format, tuples_only, null: None, max_rows };
        let mut out = Vec::new();
        let mut printer = Printer::new(&mut out, &options, batches[0].schema()).expect("start");
        for b in batches {
            printer.batch(b).expect("a batch");
        }
        let rows = printer.finish().expect("finish");
        (String::from_utf8(out).expect("UTF-8"), rows)
    }

    #[test]
    fn every_format_tells_null_from_the_empty_string() {
        let b = sample();
        let (table, rows) = print(Format::Table, false, None, std::slice::from_ref(&b));
        assert_eq!(rows, 3);
        let expected = [
            "+------+---------+------+",
            "| id   | name    | x    |",
            "+------+---------+------+",
            "| 1    | a,b \"q\" | 1.5  |",
            "| 2    |         | NaN  |",
            "| NULL | NULL    | NULL |",
            "+------+---------+------+",
        ];
        assert_eq!(table, expected.join("\n") + "\n");
        let (csv, _) = print(Format::Csv, false, None, std::slice::from_ref(&b));
        assert_eq!(csv, "id,name,x\n1,\"a,b \"\"q\"\"\",1.5\n2,\"\",NaN\n,,\n");
        let (tsv, _) = print(Format::Tsv, true, None, std::slice::from_ref(&b));
        assert_eq!(tsv, "1\ta,b \"q\"\t1.5\n2\t\tNaN\n\\N\t\\N\t\\N\n");
        let (json, _) = print(Format::Json, false, None, std::slice::from_ref(&b));
        assert_eq!(
            json,
            "[{\"id\":1,\"name\":\"a,b \\\"q\\\"\",\"x\":1.5},\n{\"id\":2,\"name\":\"\",\"x\":\"NaN\"},\n{\"id\":null,\"name\":null,\"x\":null}]\n"
        );
        let (jsonl, _) = print(Format::Jsonl, false, None, std::slice::from_ref(&b));
        assert_eq!(jsonl.lines().count(), 3);
        let (markdown, _) = print(Format::Markdown, false, None, std::slice::from_ref(&b));
        assert_eq!(markdown.lines().nth(1), Some("|---|---|---|"));
        assert_eq!(markdown.lines().nth(4), Some("| NULL | NULL | NULL |"));
    }

    #[test]
    fn rows_past_the_limit_are_counted_not_shown_and_tables_stream() {
        let b = sample();
        let (text, rows) = print(Format::Csv, true, Some(4), &[b.clone(), b.clone()]);
        assert_eq!((rows, text.lines().count()), (6, 4));
        // More rows than the table sizes its widths by: all printed, in order.
        let many: Vec<RecordBatch> = (0..3)
            .map(|k| {
                let ids = Int64Array::from_iter_values((0..700).map(|i| k * 700 + i));
                let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
                RecordBatch::try_new(schema, vec![Arc::new(ids)]).expect("a batch")
            })
            .collect();
        let (table, rows) = print(Format::Table, false, None, &many);
        assert_eq!(rows, 2100);
        let ids: Vec<i64> = table.lines().filter_map(|l| l.trim_matches(['|', ' ']).parse::<i64>().ok()).collect();
        assert_eq!(ids, (0..2100).collect::<Vec<_>>());
    }

    #[test]
    fn a_column_of_type_null_prints_as_null() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Null, true)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(arrow_array::NullArray::new(2))]).expect("a batch");
        assert_eq!(print(Format::Csv, true, None, std::slice::from_ref(&batch)).0, "\n\n");
        assert_eq!(print(Format::Jsonl, false, None, std::slice::from_ref(&batch)).0, "{\"n\":null}\n{\"n\":null}\n");
        assert_eq!(print(Format::Table, true, None, std::slice::from_ref(&batch)).0, "NULL\nNULL\n");
    }

    #[test]
    fn an_empty_result_prints_its_header() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let empty = RecordBatch::new_empty(schema);
        assert_eq!(print(Format::Table, false, None, std::slice::from_ref(&empty)).0, "+---+\n| x |\n+---+\n+---+\n");
        assert_eq!(print(Format::Json, false, None, std::slice::from_ref(&empty)).0, "[]\n");
        assert_eq!(print(Format::Csv, false, None, std::slice::from_ref(&empty)).0, "x\n");
    }
}
