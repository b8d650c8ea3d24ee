//! What the loader's readers share: the batch size, a record that cannot
//! be loaded (where it is and why), and the conversion of a file's batch
//! to the target table's columns.

use std::fmt;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_cast::cast::{CastOptions, cast_with_options};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, Field, SchemaRef};

use crate::cli::CliError;

/// Rows per batch sent: 64Ki rows keeps a batch of a few narrow columns
/// at a few MiB, well under the server's 64 MiB message bound (and the
/// Flight encoder splits larger batches into 2 MiB messages anyway).
pub(super) const BATCH_ROWS: usize = 65536;

/// What sets the number of fields every record must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WidthFrom {
    /// The header line.
    Header,
    /// The first line (the file has no header).
    FirstLine,
    /// `--schema`.
    Schema,
}

/// A record of the file that cannot be loaded: where it is and why.
#[derive(Debug)]
pub(super) struct BadRecord {
    pub(super) place: Place,
    pub(super) problem: Problem,
}

/// Where a record is in its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// The line a CSV record starts on, from 1 (a header is line 1).
    Line(u64),
    /// The row of a Parquet file, from 1.
    Row(u64),
}

/// Why a record cannot be loaded.
#[derive(Debug)]
pub(super) enum Problem {
    /// It has `found` fields, not `expected`.
    Width { found: usize, expected: usize, from: WidthFrom },
    /// Its text is not UTF-8.
    NotUtf8,
    /// A value does not read as its column's type.
    Value { column: String, value: String, data_type: DataType },
    /// No value for a NOT NULL column.
    Null { column: String },
    /// Anything else, in the reader's words.
    Other(arrow_schema::ArrowError),
}

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = match self.place {
            Place::Line(line) => format!("line {line}"),
            Place::Row(row) => format!("row {row}"),
        };
        match &self.problem {
            Problem::Width { found, expected, from } => {
                let fields = |n: &usize| if *n == 1 { "1 field".to_string() } else { format!("{n} fields") };
                let expected = match from {
                    WidthFrom::Header => format!("the header has {}", fields(expected)),
                    WidthFrom::FirstLine => format!("the first line has {}", fields(expected)),
                    WidthFrom::Schema => format!("--schema gives {expected} columns"),
                };
                write!(f, "{place} has {}, but {expected}", fields(found))
            }
            Problem::NotUtf8 => write!(f, "{place} is not valid UTF-8 text"),
            Problem::Value { column, value, data_type } => {
                write!(f, "{place}, column '{column}': cannot read '{value}' as {data_type}")
            }
            Problem::Null { column } => write!(f, "{place}, column '{column}': no value, but the column is NOT NULL"),
            Problem::Other(e) => write!(f, "{place}: {e}"),
        }
    }
}

impl std::error::Error for BadRecord {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.problem {
            Problem::Other(e) => Some(e),
            _ => None,
        }
    }
}

/// Turns a file batch into a batch of the target's columns: picks each
/// column by [`match_columns`]'s mapping and casts it where the types
/// differ (failing, not nulling, on values that do not convert).
#[derive(Debug)]
pub(super) struct Conform {
    pub(super) target: SchemaRef,
    pub(super) sources: Vec<usize>,
}

/// Why [`Conform`] refused a batch.
#[derive(Debug)]
pub(super) enum Refused {
    /// The value of row `row` (from 0) of the batch.
    Value {
        row: usize,
        problem: Problem,
    },
    Other(CliError),
}

impl Conform {
    pub(super) fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch, Refused> {
        let options = CastOptions { safe: false, ..CastOptions::default() };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.sources.len());
        for (field, &source) in self.target.fields().iter().zip(&self.sources) {
            let column = batch.column(source);
            let column = if column.data_type() == field.data_type() {
                Arc::clone(column)
            } else {
                cast_with_options(column, field.data_type(), &options).map_err(|e| refused_cast(column, field, e))?
            };
            if !field.is_nullable()
                && column.null_count() > 0
                && let Some(row) = (0..column.len()).find(|&i| column.is_null(i))
            {
                return Err(Refused::Value { row, problem: Problem::Null { column: field.name().clone() } });
            }
            columns.push(column);
        }
        RecordBatch::try_new(Arc::clone(&self.target), columns).map_err(|e| Refused::Other(e.into()))
    }
}

/// Why casting `column` to `field`'s type failed: the first value that
/// does not convert (the one a lenient cast makes NULL), else the cast's
/// error.
pub(super) fn refused_cast(column: &ArrayRef, field: &Field, error: arrow_schema::ArrowError) -> Refused {
    let lenient = cast_with_options(column, field.data_type(), &CastOptions::default()).ok();
    let row = lenient.and_then(|lenient| (0..column.len()).find(|&i| column.is_valid(i) && lenient.is_null(i)));
    let formatter = ArrayFormatter::try_new(column.as_ref(), &FormatOptions::default());
    match (row, formatter) {
        (Some(row), Ok(formatter)) => Refused::Value {
            row,
            problem: Problem::Value {
                column: field.name().clone(),
                value: formatter.value(row).to_string(),
                data_type: field.data_type().clone(),
            },
        },
        _ => Refused::Other(format!("column '{}': {error}", field.name()).into()),
    }
}
