//! Primary key and UNIQUE constraint uniqueness.
//!
//! A table with a primary key or UNIQUE constraints checks every write
//! transaction before it commits, one key set per constraint, without
//! keeping an index:
//!
//! ```text
//!   append(batch)  each row's key ──▶ the transaction's key set
//!                  (a key met twice in one transaction: duplicate)
//!   commit         for every shard the transaction started from:
//!                    main blocks whose zone map (first key column) holds
//!                    none of the new keys are skipped; the others and the
//!                    delta are decoded, live rows only (rows this
//!                    transaction deleted do not count) ──▶ probe the set
//! ```
//!
//! Keys of at most two columns of up to 64 bits each pack into a `u128`
//! (the columns' order-preserving keys, exact for these types); other keys
//! (strings, decimals, more columns) are byte strings. A transaction that
//! appends a key that exists fails whole: nothing of it becomes visible.
//! A row with a NULL in any column of a UNIQUE constraint conflicts with no
//! row (SQL's rule); primary key columns are NOT NULL.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, GenericBinaryType};
use arrow_array::{Array, ArrayRef};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::DataType;
use hashbrown::HashSet;

use crate::block::BLOCK_SIZE;
use crate::error::{Error, Result};
use crate::snapshot::ShardSnapshot;
use crate::types::{KeyNative, PhysicalType, RecId, TableSchema, with_native};

/// One key column's values in a form rows can be read from.
enum KeyValues<'a> {
    /// Order-preserving `u64` keys (types of up to 64 bits, booleans).
    Keys(Vec<u64>),
    /// Decimals.
    Wide(Vec<i128>),
    /// Strings or binary.
    Bytes(&'a dyn Array),
}

impl<'a> KeyValues<'a> {
    fn new(array: &'a dyn Array, physical: PhysicalType) -> Self {
        if physical == PhysicalType::Decimal128 {
            return KeyValues::Wide(array.as_primitive::<Decimal128Type>().values().to_vec());
        }
        with_native!(physical,
            T => {
                let data = array.to_data();
                KeyValues::Keys(data.buffer::<T>(0)[..array.len()].iter().map(|v| v.to_key()).collect())
            },
            bool => KeyValues::Keys(array.as_boolean().values().iter().map(u64::from).collect()),
            bytes => KeyValues::Bytes(array),
        )
    }

    fn key(&self, row: usize) -> u64 {
        match self {
            KeyValues::Keys(k) => k[row],
            KeyValues::Wide(v) => v[row].to_key(),
            KeyValues::Bytes(_) => 0,
        }
    }

    fn append_bytes(&self, row: usize, out: &mut Vec<u8>) {
        match self {
            KeyValues::Keys(k) => out.extend_from_slice(&k[row].to_le_bytes()),
            KeyValues::Wide(v) => out.extend_from_slice(&v[row].to_le_bytes()),
            KeyValues::Bytes(a) => {
                let b = bytes_at(*a, row);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
        }
    }
}

/// Value `row` of a string or binary array.
fn bytes_at(array: &dyn Array, row: usize) -> &[u8] {
    match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().value(row).as_bytes(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).as_bytes(),
        DataType::Utf8View => array.as_string_view().value(row).as_bytes(),
        DataType::Binary => array.as_bytes::<GenericBinaryType<i32>>().value(row),
        DataType::LargeBinary => array.as_bytes::<GenericBinaryType<i64>>().value(row),
        DataType::BinaryView => array.as_binary_view().value(row),
        _ => &[],
    }
}

/// The set of keys a transaction appended.
#[derive(Debug)]
enum KeySet {
    Packed(HashSet<u128>),
    Bytes(HashSet<Box<[u8]>>),
}

/// A transaction's bookkeeping of one primary key or UNIQUE constraint.
#[derive(Debug)]
pub(crate) struct PendingKeys {
    columns: Arc<[usize]>,
    /// `primary key` or `unique key`, for errors.
    constraint: &'static str,
    set: KeySet,
    /// The first key column's keys, for zone-map pruning (not for string keys).
    first: Option<Vec<u64>>,
}

impl PendingKeys {
    /// Bookkeeping for `schema`'s primary key and UNIQUE constraints.
    pub(crate) fn of(schema: &TableSchema) -> Vec<Self> {
        let key: Arc<[usize]> = schema.primary_key().into();
        let primary = (!key.is_empty()).then(|| Self::new(schema, key, "primary key"));
        primary
            .into_iter()
            .chain(schema.unique().iter().map(|set| Self::new(schema, Arc::clone(set), "unique key")))
            .collect()
    }

    fn new(schema: &TableSchema, columns: Arc<[usize]>, constraint: &'static str) -> Self {
        let narrow = |c: &usize| !matches!(schema.physical(*c), PhysicalType::Bytes | PhysicalType::Decimal128);
        let packed = columns.len() <= 2 && columns.iter().all(narrow);
        let set = if packed { KeySet::Packed(HashSet::new()) } else { KeySet::Bytes(HashSet::new()) };
        let first = (schema.physical(columns[0]) != PhysicalType::Bytes).then(Vec::new);
        Self { columns, constraint, set, first }
    }

    fn values<'a>(&self, schema: &TableSchema, arrays: &'a [ArrayRef]) -> Vec<KeyValues<'a>> {
        self.columns.iter().zip(arrays).map(|(&c, a)| KeyValues::new(a.as_ref(), schema.physical(c))).collect()
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
                KeySet::Packed(set) => set.insert(pack(&values, row)),
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
            KeySet::Packed(set) => set.contains(&pack(values, row)),
            KeySet::Bytes(set) => {
                buf.clear();
                values.iter().for_each(|v| v.append_bytes(row, buf));
                set.contains(buf.as_slice())
            }
        }
    }

    /// True when nothing was appended.
    pub(crate) fn is_empty(&self) -> bool {
        match &self.set {
            KeySet::Packed(s) => s.is_empty(),
            KeySet::Bytes(s) => s.is_empty(),
        }
    }

    /// Sorts the first-column keys for pruning.
    pub(crate) fn seal(&mut self) {
        if let Some(first) = &mut self.first {
            first.sort_unstable();
            first.dedup();
        }
    }

    /// Fails if a live row of `shard` (not deleted, and not `deleted` by
    /// the transaction) has one of the appended keys.
    pub(crate) fn check_shard(
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

/// The packed key of `row` (at most two columns of up to 64 bits).
fn pack(values: &[KeyValues<'_>], row: usize) -> u128 {
    let hi = values[0].key(row) as u128;
    match values.get(1) {
        Some(v) => (hi << 64) | v.key(row) as u128,
        None => hi,
    }
}

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
