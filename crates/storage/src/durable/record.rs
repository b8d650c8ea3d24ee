//! The records of the write-ahead log: every change to the catalog or to
//! a table's rows, in a form replay can apply in order.
//!
//! Deletes name record ids, which a rebuild renumbers; so a rebuild is
//! logged too ([`TableChange::Rebuild`], written when it publishes, with the
//! delta length and the deleted ids of the snapshot it was built from).
//! Replaying it at the same place renumbers the rows exactly as the
//! original did, so every delete logged after it names the same rows
//! (rebuilds are deterministic in the ids they assign, whatever encodings
//! they pick).
//!
//! A transaction's appends are written in its commit record, or, once
//! they grow large (a bulk load), ahead of it as it runs: as staged parts
//! ([`LogRecord::Stage`]) tagged with the transaction's id in the log (its
//! first part's LSN), which its commit names with their count and rows.
//! Replay applies the parts with the commit, in its place; parts of a
//! transaction that never committed (aborted, or cut off by a crash) are
//! applied by nothing.
//!
//! Payloads are little-endian, length-prefixed fields; batches are Arrow
//! IPC streams. Decoding checks every length: a payload that does not
//! parse is an error, never a panic.

use std::io::Cursor;

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::{StreamEncoder, StreamWriter};
use arrow_schema::{ArrowError, SchemaRef};

use super::damage::Damage;
use super::frame::FrameBuf;
use super::wal::{LogPin, Wal};
use crate::change::{ChangeLog, ShardDeletes, Staged, Staging, TableChange};
use crate::error::{Error, Result};
use crate::names::ColumnChange;
use crate::state::TableOptions;

/// A change to log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LogRecord {
    /// A table was created (replacing one of that name if `replace`), with
    /// the changes of `fill` (commits and rebuilds, in order) already made
    /// to it when it was published.
    CreateTable { name: String, schema: SchemaRef, options: TableOptions, replace: bool, fill: Vec<TableChange> },
    /// A table was dropped.
    DropTable { name: String },
    /// A view was created (replacing one of that name if `replace`):
    /// its definition's text.
    CreateView { name: String, definition: String, replace: bool },
    /// A view was dropped.
    DropView { name: String },
    /// A table was redefined over the same rows (renamed, or a column
    /// renamed): its new name and definition.
    AlterTable { name: String, new_name: String, schema: SchemaRef, options: TableOptions, change: ColumnChange },
    /// A schema was created.
    CreateSchema { name: String },
    /// A schema was dropped (with its tables and views if `cascade`).
    DropSchema { name: String, cascade: bool },
    /// A change to the rows of table `table`.
    Change { table: String, change: TableChange },
    /// Appends to table `table` that the open transaction `txn` staged
    /// ahead of its commit ([`ChangeLog::stage`]); `txn` 0 in its first
    /// part, whose LSN is the transaction's id.
    Stage { table: String, txn: u64, appends: Vec<RecordBatch> },
}

/// A table's creation, with options as format version 1 wrote them (no
/// column defaults); read, never written.
const CREATE_TABLE_V1: u8 = 1;
const DROP_TABLE: u8 = 2;
const COMMIT: u8 = 3;
const REBUILD: u8 = 5;
/// A table's creation, its options with column defaults (format 2); read,
/// never written.
const CREATE_TABLE_V2: u8 = 6;
/// A table's creation, its options with column defaults and UNIQUE
/// constraints (format 3).
const CREATE_TABLE: u8 = 11;
const CREATE_VIEW: u8 = 7;
const DROP_VIEW: u8 = 8;
const CREATE_SCHEMA: u8 = 9;
const ALTER_TABLE: u8 = 12;
const DROP_SCHEMA: u8 = 10;
/// A commit naming parts staged ahead of it.
const COMMIT_STAGED: u8 = 13;
/// A staged part of an open transaction's appends.
pub(crate) const STAGE: u8 = 14;

/// Why a payload did not decode (where the reader was is added by
/// [`LogRecord::decode`]).
pub(crate) type DecodeError = String;

impl LogRecord {
    /// The frame type and payload of this record.
    #[cfg(test)]
    pub(crate) fn encode(&self) -> Result<(u8, Vec<u8>), ArrowError> {
        let mut out = FrameBuf::contiguous();
        let kind = self.encode_into(&mut out)?;
        Ok((kind, out.into_bytes()))
    }

    /// The frame type of this record; its payload is appended to `out`
    /// (its batches' large buffers by reference, unless `out` copies).
    pub(crate) fn encode_into(&self, buf: &mut FrameBuf) -> Result<u8, ArrowError> {
        Ok(match self {
            LogRecord::CreateTable { name, schema, options, replace, fill } => {
                let out = buf.bytes();
                put_str(out, name);
                put_options(out, options);
                out.push(u8::from(*replace));
                put_bytes(out, &ipc(schema, &[])?);
                put_u64(out, fill.len() as u64);
                for change in fill {
                    // Its type, then its payload, length-prefixed.
                    let at = buf.bytes().len();
                    buf.bytes().extend_from_slice(&[0; 9]);
                    let before = buf.len();
                    let kind = encode_change(name, change, buf)?;
                    let len = (buf.len() - before) as u64;
                    buf.bytes()[at] = kind;
                    buf.bytes()[at + 1..at + 9].copy_from_slice(&len.to_le_bytes());
                }
                CREATE_TABLE
            }
            LogRecord::DropTable { name } => {
                put_str(buf.bytes(), name);
                DROP_TABLE
            }
            LogRecord::CreateView { name, definition, replace } => {
                let out = buf.bytes();
                put_str(out, name);
                put_str(out, definition);
                out.push(u8::from(*replace));
                CREATE_VIEW
            }
            LogRecord::DropView { name } => {
                put_str(buf.bytes(), name);
                DROP_VIEW
            }
            LogRecord::CreateSchema { name } => {
                put_str(buf.bytes(), name);
                CREATE_SCHEMA
            }
            LogRecord::AlterTable { name, new_name, schema, options, change } => {
                let out = buf.bytes();
                put_str(out, name);
                put_str(out, new_name);
                put_options(out, options);
                put_bytes(out, &ipc(schema, &[])?);
                match change {
                    ColumnChange::None => out.push(0),
                    ColumnChange::Add(value) => {
                        out.push(1);
                        put_bytes(out, &ipc(&value.schema(), std::slice::from_ref(value))?);
                    }
                    ColumnChange::Drop(index) => {
                        out.push(2);
                        put_u64(out, *index as u64);
                    }
                }
                ALTER_TABLE
            }
            LogRecord::DropSchema { name, cascade } => {
                let out = buf.bytes();
                put_str(out, name);
                out.push(u8::from(*cascade));
                DROP_SCHEMA
            }
            LogRecord::Change { table, change } => encode_change(table, change, buf)?,
            LogRecord::Stage { table, txn, appends } => encode_stage(table, *txn, appends, buf)?,
        })
    }

    /// The record a frame of type `kind` holds; on failure, where in the
    /// payload and what is wrong.
    pub(crate) fn decode(kind: u8, payload: &[u8]) -> Result<Self, Damage> {
        let mut r = Reader { bytes: payload, at: 0 };
        Self::read(kind, &mut r).map_err(|what| Damage::new(r.at, what))
    }

    fn read(kind: u8, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let payload = r.bytes;
        let record = match kind {
            CREATE_TABLE | CREATE_TABLE_V2 | CREATE_TABLE_V1 => {
                let name = r.str()?;
                let format = match kind {
                    CREATE_TABLE_V1 => 1,
                    CREATE_TABLE_V2 => 2,
                    _ => 3,
                };
                let options = r.options(format)?;
                let replace = r.flag()?;
                let (schema, _) = from_ipc(r.bytes()?)?;
                let n = r.count(9)?;
                let fill = (0..n)
                    .map(|_| {
                        let kind = r.take(1)?[0];
                        match LogRecord::decode(kind, r.bytes()?).map_err(|d| d.to_string())? {
                            LogRecord::Change { change, .. } => Ok(change),
                            _ => Err("a table's fill holds only commits and rebuilds".to_string()),
                        }
                    })
                    .collect::<Result<Vec<_>, DecodeError>>()?;
                LogRecord::CreateTable { name, schema, options, replace, fill }
            }
            DROP_TABLE => LogRecord::DropTable { name: r.str()? },
            CREATE_VIEW => LogRecord::CreateView { name: r.str()?, definition: r.str()?, replace: r.flag()? },
            DROP_VIEW => LogRecord::DropView { name: r.str()? },
            CREATE_SCHEMA => LogRecord::CreateSchema { name: r.str()? },
            ALTER_TABLE => {
                let (name, new_name, options) = (r.str()?, r.str()?, r.options(3)?);
                let schema = from_ipc(r.bytes()?)?.0;
                let change = match r.take(1)?[0] {
                    0 => ColumnChange::None,
                    1 => match from_ipc(r.bytes()?)?.1.as_slice() {
                        [value] if value.num_rows() == 1 && value.num_columns() == 1 => {
                            ColumnChange::Add(value.clone())
                        }
                        _ => return Err("an added column's value is not one value".into()),
                    },
                    2 => ColumnChange::Drop(usize::try_from(r.u64()?).map_err(|_| "column index out of range")?),
                    other => return Err(format!("unknown column change {other}")),
                };
                LogRecord::AlterTable { name, new_name, schema, options, change }
            }
            DROP_SCHEMA => LogRecord::DropSchema { name: r.str()?, cascade: r.flag()? },
            COMMIT | COMMIT_STAGED => {
                let table = r.str()?;
                let truncate = r.flag()?;
                let staged = match kind {
                    COMMIT_STAGED => Some(Staged { txn: r.u64()?, parts: r.u64()?, rows: r.u64()? }),
                    _ => None,
                };
                let appends = r.runs()?;
                let n = r.count(20)?;
                let deletes = (0..n)
                    .map(|_| Ok(ShardDeletes { shard: r.u64()?, version: r.u64()?, ids: r.ids()? }))
                    .collect::<Result<Vec<_>, DecodeError>>()?;
                LogRecord::Change { table, change: TableChange::Commit { truncate, staged, appends, deletes } }
            }
            STAGE => LogRecord::Stage { table: r.str()?, txn: r.u64()?, appends: r.runs()? },
            REBUILD => {
                let table = r.str()?;
                let (shard, version) = (r.u64()?, r.u64()?);
                let delta_len = u32::try_from(r.u64()?).map_err(|_| "delta length out of range")?;
                let change = TableChange::Rebuild { shard, version, delta_len, deleted: r.ids()? };
                LogRecord::Change { table, change }
            }
            other => return Err(format!("unknown record type {other}")),
        };
        if r.at != payload.len() {
            return Err(format!("{} unread bytes after the record", payload.len() - r.at));
        }
        Ok(record)
    }
}

/// Appends the payload of `change` to table `table` to `buf`; its frame type.
fn encode_change(table: &str, change: &TableChange, buf: &mut FrameBuf) -> Result<u8, ArrowError> {
    Ok(match change {
        TableChange::Commit { truncate, staged, appends, deletes } => {
            put_str(buf.bytes(), table);
            buf.bytes().push(u8::from(*truncate));
            if let Some(staged) = staged {
                put_u64(buf.bytes(), staged.txn);
                put_u64(buf.bytes(), staged.parts);
                put_u64(buf.bytes(), staged.rows);
            }
            put_runs(buf, appends)?;
            let out = buf.bytes();
            put_u64(out, deletes.len() as u64);
            for d in deletes {
                put_u64(out, d.shard);
                put_u64(out, d.version);
                put_ids(out, &d.ids);
            }
            if staged.is_some() { COMMIT_STAGED } else { COMMIT }
        }
        TableChange::Rebuild { shard, version, delta_len, deleted } => {
            let out = buf.bytes();
            put_str(out, table);
            put_u64(out, *shard);
            put_u64(out, *version);
            put_u64(out, u64::from(*delta_len));
            put_ids(out, deleted);
            REBUILD
        }
    })
}

/// Appends the payload of a staged part of transaction `txn` (0: its
/// first) to `buf`; its frame type.
fn encode_stage(table: &str, txn: u64, appends: &[RecordBatch], buf: &mut FrameBuf) -> Result<u8, ArrowError> {
    put_str(buf.bytes(), table);
    put_u64(buf.bytes(), txn);
    put_runs(buf, appends)?;
    Ok(STAGE)
}

/// Appends `batches` as one IPC stream per run of batches with the same
/// schema (appends may differ in string layout or field nullability),
/// after their count.
fn put_runs(buf: &mut FrameBuf, batches: &[RecordBatch]) -> Result<(), ArrowError> {
    let runs = batches.chunk_by(|a, b| a.schema() == b.schema()).collect::<Vec<_>>();
    put_u64(buf.bytes(), runs.len() as u64);
    for run in runs {
        put_ipc(buf, &run[0].schema(), run)?;
    }
    Ok(())
}

/// Appends `record` to `wal`, encoded in place; its log position.
pub(crate) fn append_record(wal: &Wal, record: &LogRecord) -> Result<u64> {
    wal.append_with(|out| record.encode_into(out).map_err(Error::from))
}

/// The write-ahead log is the change log of every table of a durable
/// database.
impl ChangeLog for Wal {
    fn append(&self, table: &str, change: &TableChange) -> Result<u64> {
        self.append_with(|out| encode_change(table, change, out).map_err(Error::from))
    }

    fn commit(&self, position: u64) -> Result<()> {
        Wal::commit(self, position)
    }

    fn stage(&self, table: &str, staging: &mut Option<Staging>, batches: &[RecordBatch]) -> Result<()> {
        // The log is pinned before the first part is appended, so no
        // checkpoint removes it before the commit naming it is logged.
        let open = match staging.take() {
            Some(s) => s,
            None => Staging { staged: Staged { txn: 0, parts: 0, rows: 0 }, hold: Box::new(self.pin()?) },
        };
        let staged = open.staged;
        let Some(log_pin) = open.hold.downcast_ref::<LogPin>() else {
            return Err(Error::Internal("a staged part of another log".into()));
        };
        let lsn = self.append_staged(log_pin, |out| encode_stage(table, staged.txn, batches, out).map_err(Error::from));
        // A failed part leaves the transaction as it was.
        let lsn = match lsn {
            Ok(lsn) => lsn,
            Err(e) => {
                *staging = (staged.parts > 0).then_some(open);
                return Err(e);
            }
        };
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum::<u64>();
        let txn = if staged.parts == 0 { lsn } else { staged.txn };
        *staging = Some(Staging { staged: Staged { txn, parts: staged.parts + 1, rows: staged.rows + rows }, ..open });
        // Written now, while the rest of the transaction still arrives.
        self.write_through(lsn)
    }

    fn stage_bytes(&self) -> usize {
        Wal::stage_bytes(self)
    }

    fn check_writable(&self) -> Result<()> {
        Wal::check_writable(self)
    }
}

/// A table's options (format 3): shard capacity, dead fraction, background
/// rebuild flag, primary key columns, column defaults (column, text),
/// UNIQUE constraints (each a list of columns).
pub(crate) fn put_options(out: &mut Vec<u8>, options: &TableOptions) {
    put_u64(out, options.shard_capacity as u64);
    out.extend_from_slice(&options.rebuild_dead_fraction.to_le_bytes());
    out.push(u8::from(options.background_rebuild));
    put_strs(out, &options.primary_key);
    put_u64(out, options.column_defaults.len() as u64);
    for (column, default) in &options.column_defaults {
        put_str(out, column);
        put_str(out, default);
    }
    put_u64(out, options.unique.len() as u64);
    for columns in &options.unique {
        put_strs(out, columns);
    }
}

/// A count, then the strings.
fn put_strs(out: &mut Vec<u8>, strings: &[String]) {
    put_u64(out, strings.len() as u64);
    for s in strings {
        put_str(out, s);
    }
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

pub(crate) fn put_ids(out: &mut Vec<u8>, ids: &[u32]) {
    put_u64(out, ids.len() as u64);
    for id in ids {
        out.extend_from_slice(&id.to_le_bytes());
    }
}

/// Appends `batches` as a length-prefixed Arrow IPC stream of `schema`,
/// their buffers by reference where `out` takes them so.
fn put_ipc(out: &mut FrameBuf, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<(), arrow_schema::ArrowError> {
    let at = out.bytes().len();
    put_u64(out.bytes(), 0);
    let before = out.len();
    let mut encoder = StreamEncoder::try_new(schema)?;
    for batch in batches {
        encoder.encode(batch)?.into_iter().for_each(|b| out.push_buffer(b));
    }
    encoder.finish()?.into_iter().for_each(|b| out.push_buffer(b));
    let len = (out.len() - before) as u64;
    out.bytes()[at..at + 8].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// `batch` as the log keeps it: string and binary view columns as plain
/// offsets and bytes (the batch itself when it has none). A view takes 16
/// bytes a value where an offset takes 4 (8 for a column of more than
/// 2 GiB), and Arrow IPC writes a view column's data buffers whole: slices
/// of one array share them, so a batch a client split into messages by
/// rows arrives with each message repeating them.
/// Replay appends the values to the same columns, whatever their layout.
pub(crate) fn log_form(batch: &RecordBatch) -> RecordBatch {
    use arrow_array::cast::AsArray;
    use arrow_schema::DataType;
    let plain = |column: &arrow_array::ArrayRef| {
        let small = |bytes: usize| i32::try_from(bytes).is_ok();
        match column.data_type() {
            DataType::Utf8View if small(column.as_string_view().total_bytes_len()) => Some(DataType::Utf8),
            DataType::Utf8View => Some(DataType::LargeUtf8),
            DataType::BinaryView if small(column.as_binary_view().total_bytes_len()) => Some(DataType::Binary),
            DataType::BinaryView => Some(DataType::LargeBinary),
            _ => None,
        }
    };
    let schema = batch.schema();
    if !schema.fields().iter().any(|f| matches!(f.data_type(), DataType::Utf8View | DataType::BinaryView)) {
        return batch.clone();
    }
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        match plain(column).and_then(|to| Some((arrow_cast::cast(column, &to).ok()?, to))) {
            Some((cast, to)) => {
                fields.push(field.as_ref().clone().with_data_type(to));
                columns.push(cast);
            }
            None => {
                fields.push(field.as_ref().clone());
                columns.push(std::sync::Arc::clone(column));
            }
        }
    }
    let schema = std::sync::Arc::new(arrow_schema::Schema::new_with_metadata(fields, schema.metadata().clone()));
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema, columns, &options).unwrap_or_else(|_| batch.clone())
}

/// `batches` as one Arrow IPC stream of `schema`.
pub(crate) fn ipc(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>, arrow_schema::ArrowError> {
    let mut writer = StreamWriter::try_new(Vec::new(), schema)?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.into_inner()
}

pub(crate) fn from_ipc(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>), DecodeError> {
    let reader = StreamReader::try_new(Cursor::new(bytes), None).map_err(|e| format!("batches: {e}"))?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>().map_err(|e| format!("batches: {e}"))?;
    Ok((schema, batches))
}

/// Bounds-checked reads from a payload.
pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or("record ends early")?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| "short integer")?))
    }

    pub(crate) fn flag(&mut self) -> Result<bool, DecodeError> {
        match self.take(1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("bad flag {other}")),
        }
    }

    /// A count of items of at least `min_bytes` each that must fit in
    /// what is left (so a damaged count cannot ask for a huge allocation).
    pub(crate) fn count(&mut self, min_bytes: usize) -> Result<usize, DecodeError> {
        let n = usize::try_from(self.u64()?).map_err(|_| "count out of range")?;
        if n.saturating_mul(min_bytes.max(1)) > self.bytes.len() - self.at {
            return Err(format!("count {n} larger than the record"));
        }
        Ok(n)
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.count(1)?;
        self.take(n)
    }

    pub(crate) fn str(&mut self) -> Result<String, DecodeError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "a name is not UTF-8".into())
    }

    /// A table's options in `format`: 1 without column defaults, 2 with
    /// them, 3 with UNIQUE constraints too.
    pub(crate) fn options(&mut self, format: u8) -> Result<TableOptions, DecodeError> {
        let shard_capacity = usize::try_from(self.u64()?).map_err(|_| "shard capacity out of range")?;
        let rebuild_dead_fraction = f64::from_le_bytes(self.take(8)?.try_into().map_err(|_| "short float")?);
        let background_rebuild = self.flag()?;
        let primary_key = self.strs()?;
        let column_defaults = if format >= 2 {
            let n = self.count(16)?;
            (0..n).map(|_| Ok((self.str()?, self.str()?))).collect::<Result<Vec<_>, DecodeError>>()?
        } else {
            Vec::new()
        };
        let unique = if format >= 3 {
            let n = self.count(8)?;
            (0..n).map(|_| self.strs()).collect::<Result<Vec<_>, DecodeError>>()?
        } else {
            Vec::new()
        };
        Ok(TableOptions {
            shard_capacity,
            rebuild_dead_fraction,
            background_rebuild,
            primary_key,
            unique,
            column_defaults,
        })
    }

    /// A count, then that many strings.
    fn strs(&mut self) -> Result<Vec<String>, DecodeError> {
        let n = self.count(8)?;
        (0..n).map(|_| self.str()).collect()
    }

    /// Batches as [`put_runs`] wrote them.
    pub(crate) fn runs(&mut self) -> Result<Vec<RecordBatch>, DecodeError> {
        let mut batches = Vec::new();
        for _ in 0..self.count(8)? {
            batches.extend(from_ipc(self.bytes()?)?.1);
        }
        Ok(batches)
    }

    pub(crate) fn ids(&mut self) -> Result<Vec<u32>, DecodeError> {
        let n = self.count(4)?;
        let bytes = self.take(n * 4)?;
        Ok(bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn batch(ids: &[i64], names: &[Option<&str>]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(StringArray::from(names.to_vec()))],
        )
        .unwrap()
    }

    /// A batch whose strings are views: a schema of its own.
    fn views() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8View, true),
        ]));
        let names = arrow_array::StringViewArray::from(vec![Some("a long string beyond twelve bytes"), None]);
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![8, 9])), Arc::new(names)]).unwrap()
    }

    fn change(change: TableChange) -> LogRecord {
        LogRecord::Change { table: "t".into(), change }
    }

    fn samples() -> Vec<LogRecord> {
        let b = batch(&[1, 2, 3], &[Some("a"), None, Some("c")]);
        vec![
            LogRecord::CreateTable {
                name: "t".into(),
                schema: b.schema(),
                options: TableOptions::default()
                    .with_primary_key(["id"])
                    .with_shard_capacity(1024)
                    .with_column_default("name", "'anonymous'")
                    .with_unique(["name"])
                    .with_unique(["name", "id"]),
                replace: true,
                fill: vec![
                    TableChange::Commit { truncate: false, staged: None, appends: vec![b.clone()], deletes: vec![] },
                    TableChange::Rebuild { shard: 0, version: 0, delta_len: 3, deleted: vec![] },
                    TableChange::Commit {
                        truncate: true,
                        staged: None,
                        appends: vec![batch(&[4], &[None])],
                        deletes: vec![],
                    },
                    TableChange::Commit {
                        truncate: false,
                        staged: Some(Staged { txn: 7, parts: 2, rows: 20 }),
                        appends: vec![],
                        deletes: vec![],
                    },
                ],
            },
            LogRecord::CreateTable {
                name: "empty".into(),
                schema: b.schema(),
                options: TableOptions::default(),
                replace: false,
                fill: vec![],
            },
            LogRecord::DropTable { name: "t".into() },
            LogRecord::CreateView { name: "v".into(), definition: "CREATE VIEW v AS SELECT 1".into(), replace: true },
            LogRecord::DropView { name: "v".into() },
            LogRecord::CreateSchema { name: "s".into() },
            LogRecord::AlterTable {
                name: "t".into(),
                new_name: "u".into(),
                schema: b.schema(),
                options: TableOptions::default().with_primary_key(["id"]).with_unique(["name"]),
                change: ColumnChange::None,
            },
            LogRecord::AlterTable {
                name: "u".into(),
                new_name: "u".into(),
                schema: b.schema(),
                options: TableOptions::default(),
                change: ColumnChange::Add(batch(&[7], &[Some("seven")]).project(&[1]).unwrap()),
            },
            LogRecord::AlterTable {
                name: "u".into(),
                new_name: "u".into(),
                schema: b.schema(),
                options: TableOptions::default(),
                change: ColumnChange::Drop(1),
            },
            LogRecord::DropSchema { name: "s".into(), cascade: true },
            change(TableChange::Commit {
                truncate: false,
                staged: None,
                appends: vec![b.clone(), b.clone(), views(), b.clone()],
                deletes: vec![ShardDeletes { shard: 0, version: 3, ids: vec![1, 7, 65_535] }],
            }),
            change(TableChange::Commit {
                truncate: true,
                staged: Some(Staged { txn: 41, parts: 3, rows: 9_000 }),
                appends: vec![b.clone()],
                deletes: vec![ShardDeletes { shard: 2, version: 0, ids: vec![4] }],
            }),
            LogRecord::Stage { table: "t".into(), txn: 0, appends: vec![b.clone(), views()] },
            LogRecord::Stage { table: "t".into(), txn: 41, appends: vec![b] },
            change(TableChange::Commit { truncate: true, staged: None, appends: vec![], deletes: vec![] }),
            change(TableChange::Rebuild { shard: 2, version: 1, delta_len: 900, deleted: vec![0, 5] }),
        ]
    }

    #[test]
    fn view_columns_are_logged_as_offsets_and_bytes() {
        use arrow_array::{Int64Array, StringViewArray};
        let values: Vec<String> = (0..1000).map(|i| format!("a value long enough to leave the view {i}")).collect();
        let strings = StringViewArray::from_iter_values(&values);
        let ints = Int64Array::from_iter_values(0..1000);
        let batch = RecordBatch::try_from_iter([
            ("s", std::sync::Arc::new(strings) as arrow_array::ArrayRef),
            ("i", std::sync::Arc::new(ints) as arrow_array::ArrayRef),
        ])
        .unwrap();
        // A tenth of the rows: the slice shares all of the string bytes.
        let slice = batch.slice(100, 100);
        let logged = log_form(&slice);
        assert_eq!(logged.column(0).data_type(), &DataType::Utf8);
        let back = arrow_cast::cast(logged.column(0), &DataType::Utf8View).unwrap();
        assert_eq!(&back, slice.column(0), "the same values");
        assert!(Arc::ptr_eq(logged.column(1), slice.column(1)), "other columns as they are");
        let size = |b: &RecordBatch| ipc(&b.schema(), std::slice::from_ref(b)).unwrap().len();
        assert!(size(&logged) * 4 < size(&slice), "{} of {} bytes", size(&logged), size(&slice));
        // Replay appends them to the view column they came from.
        let db = crate::Database::new();
        let t = db.create_table("t", &batch.schema(), crate::TableOptions::default()).unwrap();
        t.append(&logged).unwrap();
        assert_eq!(t.snapshot().to_record_batches(None).unwrap(), vec![slice]);
    }

    #[test]
    fn every_record_round_trips() {
        for record in samples() {
            let (kind, payload) = record.encode().unwrap();
            assert_eq!(LogRecord::decode(kind, &payload).unwrap(), record);
        }
    }

    #[test]
    fn damaged_payloads_are_errors_not_panics() {
        for record in samples() {
            let (kind, payload) = record.encode().unwrap();
            for cut in 0..payload.len() {
                assert!(LogRecord::decode(kind, &payload[..cut]).is_err(), "{record:?} cut at {cut}");
            }
            let mut longer = payload.clone();
            longer.push(0);
            assert!(LogRecord::decode(kind, &longer).is_err());
            // Huge counts and lengths are refused before allocating.
            for at in 0..payload.len().min(64) {
                let mut damaged = payload.clone();
                damaged[at] = 0xFF;
                let _ = LogRecord::decode(kind, &damaged);
            }
        }
        assert!(LogRecord::decode(99, &[]).is_err());
    }

    #[test]
    fn records_holding_batches_by_reference_encode_as_copied() {
        let ids: Vec<i64> = (0..20_000).collect();
        let names: Vec<String> = (0..20_000).map(|i| format!("name_{i}")).collect();
        let names: Vec<Option<&str>> =
            names.iter().enumerate().map(|(i, n)| (i % 7 != 0).then_some(n.as_str())).collect();
        let big = batch(&ids, &names);
        let commit = TableChange::Commit {
            truncate: false,
            staged: None,
            appends: vec![big.clone(), big.slice(100, 9_000), views(), big.clone()],
            deletes: vec![ShardDeletes { shard: 1, version: 2, ids: vec![3] }],
        };
        let create = LogRecord::CreateTable {
            name: "t".into(),
            schema: big.schema(),
            options: TableOptions::default(),
            replace: true,
            fill: vec![
                commit.clone(),
                TableChange::Rebuild { shard: 0, version: 0, delta_len: 5, deleted: vec![] },
                commit.clone(),
            ],
        };
        for record in [change(commit), create] {
            let (kind, payload) = record.encode().unwrap();
            let mut shared = FrameBuf::default();
            let start = shared.start();
            assert_eq!(record.encode_into(&mut shared).unwrap(), kind);
            shared.seal(start, kind);
            assert!(shared.io_slices().len() > 4, "buffers held by reference");
            let mut copied = Vec::new();
            super::super::frame::encode(kind, &payload, &mut copied);
            assert!(shared.into_bytes() == copied, "the same frame");
            assert_eq!(LogRecord::decode(kind, &payload).unwrap(), record);
        }
    }
}
