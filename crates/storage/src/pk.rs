//! Primary key and UNIQUE constraint uniqueness.
//!
//! A table with a primary key or UNIQUE constraints checks every write
//! transaction before it commits, one key set per constraint:
//!
//! ```text
//!   append(batch)  each row's key ──▶ the transaction's key set
//!                  (a key met twice in one transaction: duplicate)
//!   commit         for every shard the transaction started from whose
//!                  key range holds some of the new keys:
//!                    primary key, few keys: each probes the shard's index
//!                    otherwise: main blocks whose zone map (first key
//!                    column) holds none of the new keys are skipped; the
//!                    others and the delta are decoded, live rows only
//!                    (rows this transaction deleted do not count) ──▶
//!                    probe the set
//! ```
//!
//! Keys arriving in ascending order (loads in key order) are kept in a
//! list, and hashed into a set only once they stop ascending. A
//! transaction that appends a key that exists fails whole: nothing of it
//! becomes visible. A row with a NULL in any column of a UNIQUE constraint
//! conflicts with no row (SQL's rule); primary key columns are NOT NULL.

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use hashbrown::HashSet;

use crate::block::BLOCK_SIZE;
use crate::error::{Error, Result};
use crate::index::{KeyBuf, KeyCodec, KeyValues, pack, packs};
use crate::snapshot::{KeyRange, Probe, ShardSnapshot};
use crate::types::{PhysicalType, RecId, TableSchema};

/// A shard is scanned rather than probed key by key when the keys that may
/// be in it number more than its rows divided by this: a probe (hash,
/// slot, key read back, mostly cache misses) costs about as much as
/// scanning this many rows (measured with `rows_bench`'s shuffled load).
const PROBE_COST_ROWS: usize = 4;

/// The set of keys a transaction appended.
#[derive(Debug)]
enum KeySet {
    /// Packed keys in the order appended (sorted once sealed), and a set of
    /// them once they stopped ascending.
    Packed {
        list: Vec<u128>,
        set: Option<HashSet<u128>>,
    },
    Bytes(HashSet<Box<[u8]>>),
}

/// A transaction's bookkeeping of one primary key or UNIQUE constraint.
#[derive(Debug)]
pub(crate) struct PendingKeys {
    columns: Arc<[usize]>,
    /// `primary key` or `unique key`, for errors.
    constraint: &'static str,
    set: KeySet,
    /// The first key column's keys, for pruning (not for string keys).
    first: Option<Vec<u64>>,
}

impl PendingKeys {
    /// Bookkeeping for `schema`'s primary key and UNIQUE constraints.
    pub(crate) fn of(schema: &TableSchema) -> Vec<Self> {
        let key: Arc<[usize]> = schema.primary_key().into();
        let primary = (!key.is_empty()).then(|| Self::new(schema, key, PRIMARY));
        primary
            .into_iter()
            .chain(schema.unique().iter().map(|set| Self::new(schema, Arc::clone(set), "unique key")))
            .collect()
    }

    fn new(schema: &TableSchema, columns: Arc<[usize]>, constraint: &'static str) -> Self {
        let set = if packs(schema, &columns) {
            KeySet::Packed { list: Vec::new(), set: None }
        } else {
            KeySet::Bytes(HashSet::new())
        };
        let first = (schema.physical(columns[0]) != PhysicalType::Bytes).then(Vec::new);
        Self { columns, constraint, set, first }
    }

    fn values<'a>(&self, schema: &TableSchema, arrays: &'a [ArrayRef]) -> Vec<KeyValues<'a>> {
        KeyValues::of(schema, &self.columns, arrays)
    }

    /// The primary key's columns.
    pub(crate) fn columns(&self) -> &[usize] {
        &self.columns
    }

    /// Adds the keys of `rows` new rows (`arrays`: the key columns); fails
    /// on a key this transaction already appended (or one they hold twice).
    pub(crate) fn add(&mut self, table: &str, schema: &TableSchema, arrays: &[ArrayRef], rows: usize) -> Result<()> {
        let values = self.values(schema, arrays);
        let mut buf = Vec::new();
        for row in 0..rows {
            if has_null(arrays, row) {
                continue;
            }
            let fresh = match &mut self.set {
                KeySet::Packed { list, set } => {
                    let key = pack(&values, row);
                    match set {
                        None if list.last().is_none_or(|&last| last < key) => {
                            list.push(key);
                            true
                        }
                        _ => {
                            let set = set.get_or_insert_with(|| list.iter().copied().collect());
                            let fresh = set.insert(key);
                            list.push(key);
                            fresh
                        }
                    }
                }
                KeySet::Bytes(set) => {
                    buf.clear();
                    values.iter().for_each(|v| v.append_bytes(row, &mut buf));
                    set.insert(buf.as_slice().into())
                }
            };
            if !fresh {
                return Err(duplicate(table, schema, self, arrays, row));
            }
            if let Some(first) = &mut self.first {
                first.push(values[0].key(row));
            }
        }
        Ok(())
    }

    fn contains(&self, values: &[KeyValues<'_>], row: usize, buf: &mut Vec<u8>) -> bool {
        match &self.set {
            KeySet::Packed { set: Some(set), .. } => set.contains(&pack(values, row)),
            // Ascending, or sorted by `seal`.
            KeySet::Packed { list, set: None } => list.binary_search(&pack(values, row)).is_ok(),
            KeySet::Bytes(set) => {
                buf.clear();
                values.iter().for_each(|v| v.append_bytes(row, buf));
                set.contains(buf.as_slice())
            }
        }
    }

    /// How many appended keys (sealed) have a first key column in `range`
    /// (all of them for string keys, which have no range).
    pub(crate) fn count_in(&self, range: KeyRange) -> usize {
        match (range, &self.first) {
            (KeyRange::Empty, _) => 0,
            (KeyRange::Within(lo, hi), Some(first)) => {
                first.partition_point(|&k| k <= hi) - first.partition_point(|&k| k < lo)
            }
            _ => self.len(),
        }
    }

    /// True for the primary key (which the table indexes).
    pub(crate) fn is_primary(&self) -> bool {
        self.constraint == PRIMARY
    }

    /// Calls `f` with every key appended.
    pub(crate) fn for_each_key(&self, f: impl FnMut(&KeyBuf) -> Result<()>) -> Result<()> {
        self.for_each_key_in(KeyRange::Any, f)
    }

    /// Calls `f` with the keys appended (sealed) whose first column may be
    /// in `range` (every string key).
    fn for_each_key_in(&self, range: KeyRange, mut f: impl FnMut(&KeyBuf) -> Result<()>) -> Result<()> {
        let mut key = KeyBuf::default();
        match &self.set {
            KeySet::Packed { list, .. } => {
                // Sorted: the keys whose first column is in range are a slice.
                let (lo, hi) = match range {
                    KeyRange::Empty => return Ok(()),
                    KeyRange::Within(lo, hi) => (lo, hi),
                    KeyRange::Any => (0, u64::MAX),
                };
                let shift = if self.columns.len() == 2 { 64 } else { 0 };
                let (from, to) = ((lo as u128) << shift, ((hi as u128) << shift) | ((1u128 << shift) - 1));
                let start = list.partition_point(|&k| k < from);
                for &k in list[start..].iter().take_while(|&&k| k <= to) {
                    key.set_packed(k);
                    f(&key)?;
                }
            }
            KeySet::Bytes(set) => {
                for k in set {
                    key.set_bytes(k);
                    f(&key)?;
                }
            }
        }
        Ok(())
    }

    /// The error for an appended key that record `id` of `shard` holds.
    pub(crate) fn duplicate_of(
        &self,
        table: &str,
        schema: &TableSchema,
        shard: &ShardSnapshot<'_>,
        id: RecId,
    ) -> Error {
        match shard.gather(&[id], Some(&self.columns)) {
            Ok(found) => duplicate(table, schema, self, found.columns(), 0),
            Err(e) => e,
        }
    }

    /// Number of keys appended.
    pub(crate) fn len(&self) -> usize {
        match &self.set {
            KeySet::Packed { list, .. } => list.len(),
            KeySet::Bytes(s) => s.len(),
        }
    }

    /// True when nothing was appended.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sorts the keys for pruning and for membership tests.
    pub(crate) fn seal(&mut self) {
        if let KeySet::Packed { list, set } = &mut self.set
            && set.take().is_some()
        {
            list.sort_unstable();
        }
        if let Some(first) = &mut self.first {
            first.sort_unstable();
            first.dedup();
        }
    }

    /// Fails if a live row of `shard` (not deleted, and not `deleted` by
    /// the transaction) has one of the appended keys (sealed).
    pub(crate) fn check_shard(
        &self,
        table: &str,
        schema: &TableSchema,
        shard: &ShardSnapshot<'_>,
        deleted: &dyn Fn(RecId) -> bool,
    ) -> Result<()> {
        let codec = KeyCodec::of(schema).filter(|_| self.constraint == PRIMARY);
        let Some(codec) = codec else { return self.scan_shard(table, schema, shard, deleted) };
        let (lo, hi) = match shard.key_range(&codec)? {
            KeyRange::Empty => return Ok(()),
            KeyRange::Within(lo, hi) => (lo, hi),
            KeyRange::Any => (0, u64::MAX),
        };
        let candidates = self.count_in(KeyRange::Within(lo, hi));
        if candidates == 0 {
            return Ok(());
        }
        if candidates.saturating_mul(PROBE_COST_ROWS) > shard.rows() {
            return self.scan_shard(table, schema, shard, deleted);
        }
        let mut probe = Probe::default();
        self.for_each_key_in(KeyRange::Within(lo, hi), |key| {
            if codec.route(key).is_some_and(|r| r < lo || r > hi) {
                return Ok(());
            }
            match shard.find(&codec, key, codec.hash(key), deleted, &mut probe)? {
                Some(id) => Err(self.duplicate_of(table, schema, shard, id)),
                None => Ok(()),
            }
        })
    }

    /// [`PendingKeys::check_shard`] by decoding the shard's key columns
    /// (where the zone maps allow) and probing the appended keys.
    fn scan_shard(
        &self,
        table: &str,
        schema: &TableSchema,
        shard: &ShardSnapshot<'_>,
        deleted: &dyn Fn(RecId) -> bool,
    ) -> Result<()> {
        let live = |id: RecId| !shard.is_deleted(id) && !deleted(id);
        let main = shard.main();
        let mut buf = Vec::new();
        let mut check = |arrays: &[ArrayRef], ids: &mut dyn Iterator<Item = (usize, RecId)>| -> Result<()> {
            let values = self.values(schema, arrays);
            for (row, id) in ids {
                if live(id) && !has_null(arrays, row) && self.contains(&values, row, &mut buf) {
                    return Err(duplicate(table, schema, self, arrays, row));
                }
            }
            Ok(())
        };
        if main.rows() > 0 {
            let zones = main.column(self.columns[0]).map(|c| c.zones());
            for block in 0..main.rows().div_ceil(BLOCK_SIZE) {
                if let (Some(first), Some(zones)) = (&self.first, zones) {
                    let z = zones[block];
                    let at = first.partition_point(|&k| k < z.min);
                    if first.get(at).is_none_or(|&k| k > z.max) {
                        continue;
                    }
                }
                let start = block * BLOCK_SIZE;
                let len = BLOCK_SIZE.min(main.rows() - start);
                let arrays = self
                    .columns
                    .iter()
                    .map(|&c| match main.column(c) {
                        Some(col) => col.decode_range(start, len),
                        None => Err(Error::Internal(format!("main storage lacks key column {c}"))),
                    })
                    .collect::<Result<Vec<_>>>()?;
                check(&arrays, &mut (0..len).map(|r| (r, (start + r) as RecId)))?;
            }
        }
        if shard.delta_len() > 0 {
            let ids: Vec<RecId> = (main.rows()..shard.rows()).map(|i| i as RecId).filter(|&id| live(id)).collect();
            let batch = shard.gather(&ids, Some(&self.columns))?;
            check(batch.columns(), &mut ids.iter().enumerate().map(|(r, &id)| (r, id)))?;
        }
        Ok(())
    }
}

/// The constraint name of the primary key.
const PRIMARY: &str = "primary key";

/// True when row `row` has a NULL in any of `arrays` (a key that conflicts
/// with nothing).
fn has_null(arrays: &[ArrayRef], row: usize) -> bool {
    arrays.iter().any(|a| a.is_null(row))
}

fn duplicate(table: &str, schema: &TableSchema, keys: &PendingKeys, arrays: &[ArrayRef], row: usize) -> Error {
    let names: Vec<&str> = keys.columns.iter().map(|&c| schema.field(c).name().as_str()).collect();
    let options = FormatOptions::default();
    let values: Vec<String> = arrays
        .iter()
        .map(|a| {
            ArrayFormatter::try_new(a.as_ref(), &options).map_or_else(|e| e.to_string(), |f| f.value(row).to_string())
        })
        .collect();
    Error::DuplicateKey {
        table: table.to_string(),
        constraint: keys.constraint,
        key: format!("({}) = ({})", names.join(", "), values.join(", ")),
    }
}
