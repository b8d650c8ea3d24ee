//! Snapshots: a consistent, immutable view of a table.
//!
//! A [`TableSnapshot`] holds one `Arc` to a published table state: for every
//! shard its storage version, delta length and deletion set. Taking one is
//! a pointer load; holding one keeps exactly that data alive and unchanged
//! while writers append and rebuilds replace shards. The decode path here
//! ([`TableSnapshot::to_record_batches`]) is the plain one; scans read the
//! shards' columns directly.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_schema::SchemaRef;
use arrow_select::concat::concat;
use arrow_select::interleave::interleave;

use crate::delta::Delta;
use crate::error::{Error, Result};
use crate::index::{KeyBuf, KeyCodec, KeyValues, MainIndex};
use crate::main::Main;
use crate::main::decode::Rows;
use crate::shard::{DeleteSet, ShardId, ShardState};
use crate::state::TableState;
use crate::types::{RecId, TableSchema, Value};

/// A consistent view of all shards of a table.
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    name: Arc<str>,
    schema: TableSchema,
    state: Arc<TableState>,
}

impl TableSnapshot {
    pub(crate) fn new(name: &Arc<str>, schema: TableSchema, state: Arc<TableState>) -> Self {
        Self { name: Arc::clone(name), schema, state }
    }

    pub(crate) fn state(&self) -> &TableState {
        &self.state
    }

    /// The table schema.
    pub fn schema(&self) -> &TableSchema {
        &self.schema
    }

    /// Number of shards.
    pub fn num_shards(&self) -> usize {
        self.state.shards.len()
    }

    /// Shard `i` (by position).
    pub fn shard(&self, i: usize) -> ShardSnapshot<'_> {
        ShardSnapshot { state: self.state.shards.get(i), schema: &self.schema }
    }

    /// The shards, in order.
    pub fn shards(&self) -> impl Iterator<Item = ShardSnapshot<'_>> {
        self.state.shards.iter().map(|state| ShardSnapshot { state, schema: &self.schema })
    }

    /// Number of live rows.
    pub fn row_count(&self) -> usize {
        self.state.shards.iter().map(ShardState::live).sum()
    }

    /// The live row whose primary key is `key` (one value per key
    /// column), with the columns `projection` (all when `None`); `None`
    /// when no live row has it. Fails for a table without a primary key,
    /// or a value of the wrong kind for its column.
    pub fn get(&self, key: &[Value<'_>], projection: Option<&[usize]>) -> Result<Option<RecordBatch>> {
        let codec = self.codec()?;
        let Some(key) = codec.key_of_scalars(self.table_name(), key)? else { return Ok(None) };
        let mut probe = Probe::default();
        match self.find(&codec, &key, codec.hash(&key), &|_, _| false, &mut probe)? {
            Some((pos, id)) => Ok(Some(self.shard(pos).gather(&[id], projection)?)),
            None => Ok(None),
        }
    }

    /// The live rows whose primary keys are `keys` (one array per key
    /// column, cast to the columns' types: keys that do not convert exactly
    /// are an error), with the columns `projection`
    /// (all when `None`): one row per key found, in the order of `keys`;
    /// keys no live row holds are left out (a key given twice gives its
    /// row twice). Keys are found through the index, then gathered shard
    /// by shard.
    pub fn multi_get(&self, keys: &[ArrayRef], projection: Option<&[usize]>) -> Result<RecordBatch> {
        let found = self.locate(keys)?;
        let mut by_shard: Vec<Vec<RecId>> = vec![Vec::new(); self.num_shards()];
        let mut order = Vec::with_capacity(found.len());
        for &(pos, id) in found.iter().flatten() {
            order.push((pos, by_shard[pos].len()));
            by_shard[pos].push(id);
        }
        let (cols, schema) = self.shard_schema(projection)?;
        if order.is_empty() {
            return Ok(RecordBatch::new_empty(schema));
        }
        let mut parts: Vec<RecordBatch> = Vec::new();
        let mut part_of = vec![usize::MAX; self.num_shards()];
        for (pos, ids) in by_shard.iter().enumerate().filter(|(_, ids)| !ids.is_empty()) {
            part_of[pos] = parts.len();
            parts.push(self.shard(pos).gather(ids, Some(&cols))?);
        }
        if parts.len() == 1 && order.iter().enumerate().all(|(i, &(_, row))| i == row) {
            return Ok(parts.pop().expect("one part"));
        }
        let indices: Vec<(usize, usize)> = order.iter().map(|&(pos, row)| (part_of[pos], row)).collect();
        let columns = (0..cols.len())
            .map(|c| {
                let arrays: Vec<&dyn arrow_array::Array> = parts.iter().map(|p| p.column(c).as_ref()).collect();
                Ok(interleave(&arrays, &indices)?)
            })
            .collect::<Result<Vec<_>>>()?;
        batch(schema, columns, indices.len())
    }

    /// Where the live rows with primary keys `keys` (one array per key
    /// column) are: per key, its shard's position and record id, or
    /// `None`.
    pub fn locate(&self, keys: &[ArrayRef]) -> Result<Vec<Option<(usize, RecId)>>> {
        let codec = self.codec()?;
        let columns = codec.columns();
        if keys.len() != columns.len() {
            return Err(Error::SchemaMismatch {
                table: self.table_name().to_string(),
                reason: format!("the primary key has {} columns, {} key arrays were given", columns.len(), keys.len()),
            });
        }
        let rows = keys.first().map_or(0, |a| a.len());
        let mut cast = Vec::with_capacity(keys.len());
        for (&c, array) in columns.iter().zip(keys) {
            let field = self.schema.field(c);
            if array.len() != rows {
                return Err(Error::SchemaMismatch {
                    table: self.table_name().to_string(),
                    reason: "key arrays of different lengths".into(),
                });
            }
            // Only exact conversions: 1.5 is no key of an integer column.
            let options = arrow_cast::CastOptions { safe: false, ..Default::default() };
            let converted = arrow_cast::cast_with_options(array, field.data_type(), &options)?;
            if array.data_type() != field.data_type() {
                let back = arrow_cast::cast_with_options(&converted, array.data_type(), &options)?;
                if back.as_ref() != array.as_ref() {
                    return Err(Error::TypeMismatch {
                        table: self.table_name().to_string(),
                        column: field.name().clone(),
                        expected: field.data_type().to_string(),
                        found: format!("{} keys that do not convert to it exactly", array.data_type()),
                    });
                }
            }
            cast.push(converted);
        }
        let values = KeyValues::of(&self.schema, columns, &cast);
        let (mut key, mut probe) = (KeyBuf::default(), Probe::default());
        (0..rows)
            .map(|row| {
                if cast.iter().any(|a| a.is_null(row)) {
                    return Ok(None);
                }
                codec.key_of_values(&values, row, &mut key);
                self.find(&codec, &key, codec.hash(&key), &|_, _| false, &mut probe)
            })
            .collect()
    }

    fn codec(&self) -> Result<KeyCodec<'_>> {
        KeyCodec::of(&self.schema).ok_or_else(|| Error::InvalidOption {
            option: "primary_key",
            reason: format!("table '{}' has no primary key to look rows up by", self.table_name()),
        })
    }

    fn table_name(&self) -> &str {
        &self.name
    }

    fn shard_schema(&self, projection: Option<&[usize]>) -> Result<(Vec<usize>, SchemaRef)> {
        match self.state.shards.len() {
            0 => project(&self.schema, projection),
            _ => self.shard(0).schema_for(projection),
        }
    }

    /// The live row with key `key` (hash `hash`), as (shard position,
    /// record id): the shards whose key range may hold it are probed, and
    /// a row counts unless `deleted(position, id)`.
    pub(crate) fn find(
        &self,
        codec: &KeyCodec<'_>,
        key: &KeyBuf,
        hash: u64,
        deleted: &dyn Fn(usize, RecId) -> bool,
        probe: &mut Probe,
    ) -> Result<Option<(usize, RecId)>> {
        for (pos, shard) in self.shards().enumerate() {
            if let Some(id) = shard.find(codec, key, hash, &|id| deleted(pos, id), probe)? {
                return Ok(Some((pos, id)));
            }
        }
        Ok(None)
    }

    /// Decodes every live row, one batch per non-empty shard, with the
    /// columns `projection` (all when `None`) in that order.
    pub fn to_record_batches(&self, projection: Option<&[usize]>) -> Result<Vec<RecordBatch>> {
        self.shards().filter(|s| s.live_rows() > 0).map(|s| s.to_record_batch(projection)).collect()
    }
}

/// One shard of a [`TableSnapshot`].
#[derive(Debug, Clone, Copy)]
pub struct ShardSnapshot<'a> {
    state: &'a ShardState,
    schema: &'a TableSchema,
}

impl<'a> ShardSnapshot<'a> {
    pub(crate) fn new(state: &'a ShardState, schema: &'a TableSchema) -> Self {
        Self { state, schema }
    }

    /// The table schema.
    pub fn schema(&self) -> &'a TableSchema {
        self.schema
    }

    /// The shard's id.
    pub fn id(&self) -> ShardId {
        self.state.data.id
    }

    /// The shard's storage version (incremented by each rebuild).
    pub fn version(&self) -> u64 {
        self.state.data.version
    }

    /// Maximum rows of this shard version.
    pub fn capacity(&self) -> usize {
        self.state.data.capacity
    }

    /// Main storage (record ids `0 .. main().rows()`).
    pub fn main(&self) -> &'a Main {
        &self.state.data.main
    }

    /// The delta; rows `0 .. delta_len()` of it belong to this snapshot.
    pub fn delta(&self) -> &'a Delta {
        &self.state.data.delta
    }

    /// Delta rows visible in this snapshot.
    pub fn delta_len(&self) -> usize {
        self.state.delta_len
    }

    /// Rows (live and deleted): record ids are `0 .. rows()`.
    pub fn rows(&self) -> usize {
        self.state.rows()
    }

    /// Live rows.
    pub fn live_rows(&self) -> usize {
        self.state.live()
    }

    /// The deleted record ids, if any.
    pub fn deletes(&self) -> Option<&'a DeleteSet> {
        self.state.deletes.as_ref()
    }

    /// True if record `id` is deleted.
    pub fn is_deleted(&self, id: RecId) -> bool {
        self.deletes().is_some_and(|d| d.contains(id))
    }

    /// Live record ids in ascending order.
    pub fn live_ids(&self) -> Vec<RecId> {
        let rows = self.rows();
        match self.deletes() {
            None => (0..rows as RecId).collect(),
            Some(d) => {
                let mut ids = Vec::with_capacity(rows - d.count());
                let mut next = 0;
                for (start, end) in d.bits().slice(0, rows).set_slices() {
                    ids.extend(next as RecId..start as RecId);
                    next = end;
                }
                ids.extend(next as RecId..rows as RecId);
                ids
            }
        }
    }

    /// Bytes of this shard version's primary-key index (main and delta).
    pub fn index_bytes(&self) -> usize {
        self.state.data.index.size_bytes()
    }

    /// This shard version's main index, built now if no rebuild built it.
    pub(crate) fn main_index(&self, codec: &KeyCodec<'_>) -> Result<&'a MainIndex> {
        let slot = &self.state.data.index.main;
        if let Some(index) = slot.get() {
            return Ok(index);
        }
        let built = codec.build_main(self.main())?;
        Ok(slot.get_or_init(|| built))
    }

    /// The first key column's range over main and the delta rows of this
    /// snapshot (`Any` for a string column), after catching the delta
    /// index's range up with them.
    pub(crate) fn key_range(&self, codec: &KeyCodec<'_>) -> Result<KeyRange> {
        let main = self.main();
        let main_range = match main.rows() {
            0 => KeyRange::Empty,
            _ => match main.column(codec.columns()[0]).and_then(|c| c.key_range()) {
                Some((lo, hi)) if codec.ranged() => KeyRange::Within(lo, hi),
                _ => KeyRange::Any,
            },
        };
        let delta = &self.state.data.index.delta;
        codec.catch_up_range(delta, self.delta(), self.delta_len())?;
        let delta_range = match (self.delta_len(), delta.range()?) {
            (0, _) => KeyRange::Empty,
            (_, Some((lo, hi))) if codec.ranged() => KeyRange::Within(lo, hi),
            _ => KeyRange::Any,
        };
        Ok(main_range.union(delta_range))
    }

    /// The record with key `key` (hash `hash`) live in this snapshot and
    /// not `deleted`.
    pub(crate) fn find(
        &self,
        codec: &KeyCodec<'_>,
        key: &KeyBuf,
        hash: u64,
        deleted: &dyn Fn(RecId) -> bool,
        probe: &mut Probe,
    ) -> Result<Option<RecId>> {
        let live = |id: RecId| !self.is_deleted(id) && !deleted(id);
        let route = codec.route(key);
        let main = self.main();
        let in_range = |range: Option<(u64, u64)>| match (route, range) {
            (Some(r), Some((lo, hi))) => lo <= r && r <= hi,
            _ => true,
        };
        if main.rows() > 0 && in_range(main.column(codec.columns()[0]).and_then(|c| c.key_range())) {
            let index = self.main_index(codec)?;
            let mut found = None;
            index.probe(hash, |id| {
                codec.key_of_main(main, id as usize, &mut probe.key, &mut probe.scratch)?;
                if probe.key != *key {
                    return Ok(false);
                }
                // Main holds each key once: a dead one may live on in the delta.
                found = live(id).then_some(id);
                Ok(true)
            })?;
            if found.is_some() {
                return Ok(found);
            }
        }
        let len = self.delta_len();
        if len == 0 {
            return Ok(None);
        }
        let index = &self.state.data.index.delta;
        codec.catch_up_range(index, self.delta(), len)?;
        if !in_range(index.range()?) {
            return Ok(None);
        }
        codec.catch_up(index, self.delta(), len)?;
        let reader = self.delta().reader(len);
        let base = main.rows() as RecId;
        let mut found = None;
        index.probe(hash, len, |row| {
            codec.key_of_delta(&reader, row as usize, &mut probe.key);
            if probe.key == *key && live(base + row) {
                found = Some(base + row);
                return Ok(true);
            }
            Ok(false)
        })?;
        Ok(found)
    }

    fn schema_for(&self, projection: Option<&[usize]>) -> Result<(Vec<usize>, SchemaRef)> {
        project(self.schema, projection)
    }

    /// Decodes the shard's live rows.
    pub fn to_record_batch(&self, projection: Option<&[usize]>) -> Result<RecordBatch> {
        let (cols, schema) = self.schema_for(projection)?;
        let main_rows = self.main().rows();
        let ids = self.deletes().map(|_| self.live_ids());
        let (main_ids, delta_ids): (Option<&[RecId]>, Option<Vec<RecId>>) = match &ids {
            None => (None, None),
            Some(ids) => {
                let split = ids.partition_point(|&id| (id as usize) < main_rows);
                let delta: Vec<RecId> = ids[split..].iter().map(|&id| id - main_rows as RecId).collect();
                (Some(&ids[..split]), Some(delta))
            }
        };
        let columns = cols
            .iter()
            .map(|&c| {
                let mut parts: Vec<ArrayRef> = Vec::with_capacity(2);
                if let Some(col) = self.main().column(c) {
                    parts.push(match main_ids {
                        None => col.decode_range(0, main_rows)?,
                        Some(ids) => col.gather(ids)?,
                    });
                }
                let delta_rows = match &delta_ids {
                    None => Rows::Range(0, self.delta_len()),
                    Some(ids) => Rows::Ids(ids),
                };
                if delta_rows.len() > 0 || parts.is_empty() {
                    parts.push(self.delta().column(c).decode(self.delta_len(), delta_rows)?);
                }
                concat_parts(parts)
            })
            .collect::<Result<Vec<_>>>()?;
        batch(schema, columns, self.live_rows())
    }

    /// Gathers records `ids` (any order, main and delta ids mixed) with the
    /// columns `projection`.
    pub fn gather(&self, ids: &[RecId], projection: Option<&[usize]>) -> Result<RecordBatch> {
        let (cols, schema) = self.schema_for(projection)?;
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.rows()) {
            return Err(Error::Internal(format!("gather of record {bad} from a shard of {} rows", self.rows())));
        }
        let main_rows = self.main().rows() as RecId;
        let main_ids: Vec<RecId> = ids.iter().copied().filter(|&id| id < main_rows).collect();
        let delta_ids: Vec<RecId> = ids.iter().filter(|&&id| id >= main_rows).map(|&id| id - main_rows).collect();
        let columns = cols
            .iter()
            .map(|&c| {
                let main_column = self.main().column(c).filter(|_| !main_ids.is_empty());
                if let (Some(col), true) = (main_column, delta_ids.is_empty()) {
                    return col.gather(&main_ids);
                }
                let delta = self.delta().column(c).decode(self.delta_len(), Rows::Ids(&delta_ids))?;
                let Some(col) = main_column else {
                    return Ok(delta);
                };
                let main = col.gather(&main_ids)?;
                // Re-interleave in the requested order.
                let (mut m, mut d) = (0, 0);
                let order: Vec<(usize, usize)> = ids
                    .iter()
                    .map(|&id| {
                        if id < main_rows {
                            m += 1;
                            (0, m - 1)
                        } else {
                            d += 1;
                            (1, d - 1)
                        }
                    })
                    .collect();
                Ok(interleave(&[main.as_ref(), delta.as_ref()], &order)?)
            })
            .collect::<Result<Vec<_>>>()?;
        batch(schema, columns, ids.len())
    }
}

/// Scratch space of key probes, reused from key to key.
#[derive(Debug, Default)]
pub(crate) struct Probe {
    key: KeyBuf,
    scratch: Vec<u8>,
}

/// Where a shard's keys lie (the first key column's order-preserving keys).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum KeyRange {
    /// No rows.
    Empty,
    /// Keys in `lo..=hi`.
    Within(u64, u64),
    /// Keys anywhere.
    Any,
}

impl KeyRange {
    pub(crate) fn union(self, other: Self) -> Self {
        match (self, other) {
            (KeyRange::Empty, r) | (r, KeyRange::Empty) => r,
            (KeyRange::Within(a, b), KeyRange::Within(c, d)) => KeyRange::Within(a.min(c), b.max(d)),
            _ => KeyRange::Any,
        }
    }
}

/// The columns `projection` of `schema` (all when `None`) and their schema.
fn project(schema: &TableSchema, projection: Option<&[usize]>) -> Result<(Vec<usize>, SchemaRef)> {
    let all = schema.arrow();
    match projection {
        None => Ok(((0..schema.len()).collect(), Arc::clone(all))),
        Some(p) => {
            if let Some(&bad) = p.iter().find(|&&c| c >= schema.len()) {
                return Err(Error::Internal(format!("projection of column {bad} of a {}-column table", schema.len())));
            }
            Ok((p.to_vec(), Arc::new(all.project(p)?)))
        }
    }
}

fn concat_parts(mut parts: Vec<ArrayRef>) -> Result<ArrayRef> {
    if parts.len() == 1 {
        return Ok(parts.pop().expect("one part"));
    }
    let refs: Vec<&dyn arrow_array::Array> = parts.iter().map(|a| a.as_ref()).collect();
    Ok(concat(&refs)?)
}

fn batch(schema: SchemaRef, columns: Vec<ArrayRef>, rows: usize) -> Result<RecordBatch> {
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(schema, columns, &options)?)
}
