//! The primary-key index: the live row holding a key, found without a scan.
//!
//! ```text
//!   find(key) in a shard snapshot
//!   ├─ main index   one per shard version, built by its rebuild (or on
//!   │               first use): open addressing over u32 slots,
//!   │               slot = hash tag | (record id + 1), 1.5 slots per row
//!   │               (6 bytes a row); main rows hold each key at most once
//!   └─ delta index  hash → newest delta row, and per row the previous
//!                   row of the same hash; caught up on demand with the
//!                   committed rows a probe needs (committed rows never
//!                   change), so commits do no index work of their own
//!   a candidate counts when its key, read back from main or delta (the
//!   index stores no keys), equals the probe, and the snapshot sees it live
//!   (below its delta length, not deleted): each snapshot sees its own
//!   version's index
//! ```
//!
//! A table finds a key's shards by range: the first key column's range in
//! main (its zone maps) and in the indexed delta rows. Tables loaded in key
//! order probe one shard; otherwise the main index's tag (up to 15 hash
//! bits) rejects a shard without the key in one cache line.
//!
//! Keys of at most two columns of up to 64 bits each pack into a `u128`
//! (the columns' order-preserving keys, exact for these types); other keys
//! (strings, decimals, more columns) are byte strings: per column an 8-byte
//! key, a 16-byte decimal, or a length-prefixed string.

use std::hash::BuildHasher;
use std::sync::{LazyLock, OnceLock, RwLock};

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, GenericBinaryType};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use hashbrown::{DefaultHashBuilder, HashMap};

use crate::block::BLOCK_SIZE;
use crate::delta::{DELTA_CHUNK_ROWS, Delta, DeltaReader};
use crate::error::{Error, Result};
use crate::main::{KeySource, Main};
use crate::types::{KeyNative, PhysicalType, RecId, TableSchema, Value, with_native};

/// One hasher for every index of the process: main indexes are built by
/// rebuilds and probed by readers and writers, which must agree. Seeded at
/// random, so clients cannot choose keys that collide.
static HASHER: LazyLock<DefaultHashBuilder> = LazyLock::new(DefaultHashBuilder::default);

/// Marks the end of a delta hash chain.
const NONE: u32 = u32::MAX;

/// A key in the form it is hashed and compared in.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct KeyBuf {
    packed: u128,
    bytes: Vec<u8>,
}

impl KeyBuf {
    /// Makes this the packed key `key`.
    pub(crate) fn set_packed(&mut self, key: u128) {
        self.packed = key;
    }

    /// Makes this the byte-string key `key`.
    pub(crate) fn set_bytes(&mut self, key: &[u8]) {
        self.bytes.clear();
        self.bytes.extend_from_slice(key);
    }

    fn clear(&mut self) {
        self.packed = 0;
        self.bytes.clear();
    }
}

/// How a table's primary key is read, hashed and compared.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyCodec<'a> {
    schema: &'a TableSchema,
    columns: &'a [usize],
    packed: bool,
}

/// True when keys over `columns` of `schema` pack into a `u128`.
pub(crate) fn packs(schema: &TableSchema, columns: &[usize]) -> bool {
    let narrow = |c: &usize| !matches!(schema.physical(*c), PhysicalType::Bytes | PhysicalType::Decimal128);
    columns.len() <= 2 && columns.iter().all(narrow)
}

impl<'a> KeyCodec<'a> {
    /// The codec of `schema`'s primary key; `None` without one.
    pub(crate) fn of(schema: &'a TableSchema) -> Option<Self> {
        let columns = schema.primary_key();
        (!columns.is_empty()).then(|| Self { schema, columns, packed: packs(schema, columns) })
    }

    /// The key columns.
    pub(crate) fn columns(&self) -> &'a [usize] {
        self.columns
    }

    /// True when shards can be pruned by the first key column's range
    /// (it is not a string column).
    pub(crate) fn ranged(&self) -> bool {
        self.schema.physical(self.columns[0]) != PhysicalType::Bytes
    }

    /// The hash of `key`.
    #[inline]
    pub(crate) fn hash(&self, key: &KeyBuf) -> u64 {
        if self.packed { HASHER.hash_one(key.packed) } else { HASHER.hash_one(key.bytes.as_slice()) }
    }

    /// The first key column's order-preserving key of `key`, which shards
    /// are pruned by (none for a string column).
    #[inline]
    pub(crate) fn route(&self, key: &KeyBuf) -> Option<u64> {
        if self.packed {
            return Some(if self.columns.len() == 2 { (key.packed >> 64) as u64 } else { key.packed as u64 });
        }
        match self.schema.physical(self.columns[0]) {
            PhysicalType::Bytes => None,
            PhysicalType::Decimal128 => {
                let v = i128::from_le_bytes(key.bytes.get(..16)?.try_into().ok()?);
                Some(v.to_key())
            }
            _ => Some(u64::from_le_bytes(key.bytes.get(..8)?.try_into().ok()?)),
        }
    }

    /// The key of row `row` of `values` (the key columns).
    pub(crate) fn key_of_values(&self, values: &[KeyValues<'_>], row: usize, out: &mut KeyBuf) {
        out.clear();
        if self.packed {
            out.packed = pack(values, row);
        } else {
            values.iter().for_each(|v| v.append_bytes(row, &mut out.bytes));
        }
    }

    /// The key given as one value per key column; `None` when a value is
    /// out of its column's range (no row holds it). A value of the wrong
    /// kind (a string for an integer column) is an error.
    pub(crate) fn key_of_scalars(&self, table: &str, key: &[Value<'_>]) -> Result<Option<KeyBuf>> {
        if key.len() != self.columns.len() {
            return Err(Error::SchemaMismatch {
                table: table.to_string(),
                reason: format!("the primary key has {} columns, the key given has {}", self.columns.len(), key.len()),
            });
        }
        let mut out = KeyBuf::default();
        for (i, (&c, value)) in self.columns.iter().zip(key).enumerate() {
            let physical = self.schema.physical(c);
            let mismatch = || Error::TypeMismatch {
                table: table.to_string(),
                column: self.schema.field(c).name().clone(),
                expected: self.schema.field(c).data_type().to_string(),
                found: value.kind().to_string(),
            };
            macro_rules! int {
                ($t:ty) => {
                    match *value {
                        Value::Int(v) => <$t>::try_from(v).ok().map(KeyNative::to_key),
                        Value::UInt(v) => <$t>::try_from(v).ok().map(KeyNative::to_key),
                        _ => return Err(mismatch()),
                    }
                };
            }
            let k = match physical {
                PhysicalType::Bytes => {
                    match value {
                        Value::Str(s) => append_len_prefixed(s.as_bytes(), &mut out.bytes),
                        Value::Bytes(b) => append_len_prefixed(b, &mut out.bytes),
                        _ => return Err(mismatch()),
                    }
                    continue;
                }
                PhysicalType::Decimal128 => {
                    // As `append_row` takes them: an integer is scaled.
                    let scale = match self.schema.field(c).data_type() {
                        DataType::Decimal128(_, scale) => (*scale).max(0) as u32,
                        _ => 0,
                    };
                    let v = match *value {
                        Value::Decimal(v) => Some(v),
                        Value::Int(v) => 10i128.checked_pow(scale).and_then(|m| (v as i128).checked_mul(m)),
                        _ => return Err(mismatch()),
                    };
                    let Some(v) = v else { return Ok(None) };
                    out.bytes.extend_from_slice(&v.to_le_bytes());
                    continue;
                }
                PhysicalType::Boolean => match value {
                    Value::Boolean(b) => Some(u64::from(*b)),
                    _ => return Err(mismatch()),
                },
                // As `append_row` takes them: an integer is converted.
                PhysicalType::Float32 => match *value {
                    Value::Float(f) => Some((f as f32).to_key()),
                    Value::Int(i) => Some((i as f32).to_key()),
                    _ => return Err(mismatch()),
                },
                PhysicalType::Float64 => match *value {
                    Value::Float(f) => Some(f.to_key()),
                    Value::Int(i) => Some((i as f64).to_key()),
                    _ => return Err(mismatch()),
                },
                PhysicalType::Int8 => int!(i8),
                PhysicalType::Int16 => int!(i16),
                PhysicalType::Int32 => int!(i32),
                PhysicalType::Int64 => int!(i64),
                PhysicalType::UInt8 => int!(u8),
                PhysicalType::UInt16 => int!(u16),
                PhysicalType::UInt32 => int!(u32),
                PhysicalType::UInt64 => int!(u64),
            };
            match k {
                Some(k) => self.push_key(i, k, &mut out),
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// The key of main row `row`.
    pub(crate) fn key_of_main(&self, main: &Main, row: usize, out: &mut KeyBuf, scratch: &mut Vec<u8>) -> Result<()> {
        out.clear();
        for (i, &c) in self.columns.iter().enumerate() {
            let col = main.column(c).ok_or_else(|| Error::Internal(format!("main storage lacks key column {c}")))?;
            let physical = self.schema.physical(c);
            if physical == PhysicalType::Bytes {
                append_len_prefixed(col.bytes(row, scratch), &mut out.bytes);
            } else if physical == PhysicalType::Decimal128 {
                let v = match (col.keys(), col.wide_values()) {
                    (Some(keys), _) => i128::from_key(keys.get(row)),
                    (None, Some(wide)) => wide[row],
                    _ => return Err(Error::Internal("a decimal key column with neither keys nor values".into())),
                };
                out.bytes.extend_from_slice(&v.to_le_bytes());
            } else {
                let keys = col.keys().ok_or_else(|| Error::Internal(format!("key column {c} has no keys")))?;
                self.push_key(i, keys.get(row), out);
            }
        }
        Ok(())
    }

    /// The key of delta row `row` (below `reader`'s length).
    pub(crate) fn key_of_delta(&self, reader: &DeltaReader<'_>, row: usize, out: &mut KeyBuf) {
        out.clear();
        let (chunk, at) = (row / DELTA_CHUNK_ROWS, row % DELTA_CHUNK_ROWS);
        for (i, &c) in self.columns.iter().enumerate() {
            let column = reader.column(c);
            let physical = self.schema.physical(c);
            if physical == PhysicalType::Decimal128 {
                out.bytes.extend_from_slice(&column.values::<i128>(chunk)[at].to_le_bytes());
                continue;
            }
            with_native!(physical,
                T => self.push_key(i, column.values::<T>(chunk)[at].to_key(), out),
                bool => {
                    let mut words = [0u64; 16];
                    column.booleans(chunk, &mut words);
                    self.push_key(i, (words[at / 64] >> (at % 64)) & 1, out);
                },
                bytes => append_len_prefixed(column.bytes(chunk).get(at), &mut out.bytes),
            )
        }
    }

    /// Adds the `i`-th key column's key `k` to `out`.
    #[inline]
    fn push_key(&self, i: usize, k: u64, out: &mut KeyBuf) {
        if self.packed {
            out.packed = if i == 0 { k as u128 } else { (out.packed << 64) | k as u128 };
        } else {
            out.bytes.extend_from_slice(&k.to_le_bytes());
        }
    }

    /// The main index of `main`: every row's key, read block by block.
    pub(crate) fn build_main(&self, main: &Main) -> Result<MainIndex> {
        let mut index = MainIndex::with_rows(main.rows());
        self.main_hashes(main, |row, hash| index.insert(hash, row as RecId))?;
        Ok(index)
    }

    /// Calls `f(row, hash)` for every row of `main`, in order.
    fn main_hashes(&self, main: &Main, mut f: impl FnMut(usize, u64)) -> Result<()> {
        let rows = main.rows();
        if rows == 0 {
            return Ok(());
        }
        if !self.packed {
            let (mut key, mut scratch) = (KeyBuf::default(), Vec::new());
            for row in 0..rows {
                self.key_of_main(main, row, &mut key, &mut scratch)?;
                f(row, self.hash(&key));
            }
            return Ok(());
        }
        let keys = self
            .columns
            .iter()
            .map(|&c| main.column(c).and_then(|col| col.keys()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::Internal("a packed key column without keys".into()))?;
        let mut first = [0u64; BLOCK_SIZE];
        let mut second = [0u64; BLOCK_SIZE];
        for block in 0..rows.div_ceil(BLOCK_SIZE) {
            keys[0].decode_block(block, &mut first);
            if let Some(k) = keys.get(1) {
                k.decode_block(block, &mut second);
            }
            let start = block * BLOCK_SIZE;
            for (lane, &k0) in first.iter().enumerate().take(BLOCK_SIZE.min(rows - start)) {
                let key = if keys.len() == 2 { ((k0 as u128) << 64) | second[lane] as u128 } else { k0 as u128 };
                f(start + lane, HASHER.hash_one(key));
            }
        }
        Ok(())
    }

    /// A filter of every key in `shards` (main and delta rows, dead ones
    /// too), with room for `capacity` keys.
    pub(crate) fn build_filter<'s>(
        &self,
        shards: impl Iterator<Item = (&'s Main, &'s Delta, usize)>,
        capacity: usize,
    ) -> Result<KeyFilter> {
        let mut filter = KeyFilter::with_capacity(capacity);
        for (main, delta, delta_len) in shards {
            self.main_hashes(main, |_, hash| filter.insert(hash))?;
            self.delta_hashes(&delta.reader(delta_len), 0, |_, hash| filter.insert(hash));
        }
        Ok(filter)
    }

    /// Calls `f(row, hash)` for every delta row of `reader` from `from`
    /// on, in order: packed keys are read a chunk at a time, a column's
    /// type matched once per chunk.
    fn delta_hashes(&self, reader: &DeltaReader<'_>, from: usize, mut f: impl FnMut(usize, u64)) {
        let len = reader.len();
        if !self.packed {
            let mut key = KeyBuf::default();
            for row in from..len {
                self.key_of_delta(reader, row, &mut key);
                f(row, self.hash(&key));
            }
            return;
        }
        let mut keys = [[0u64; DELTA_CHUNK_ROWS]; 2];
        let mut row = from;
        while row < len {
            let (chunk, at) = (row / DELTA_CHUNK_ROWS, row % DELTA_CHUNK_ROWS);
            let end = reader.chunk_len(chunk);
            for (out, &c) in keys.iter_mut().zip(self.columns) {
                let column = reader.column(c);
                with_native!(self.schema.physical(c),
                    T => {
                        for (o, v) in out[at..end].iter_mut().zip(&column.values::<T>(chunk)[at..end]) {
                            *o = v.to_key();
                        }
                    },
                    bool => {
                        let mut words = [0u64; 16];
                        column.booleans(chunk, &mut words);
                        for (i, o) in out.iter_mut().enumerate().take(end).skip(at) {
                            *o = (words[i / 64] >> (i % 64)) & 1;
                        }
                    },
                    bytes => unreachable!("packed keys have no string column"),
                )
            }
            let [first, second] = &keys;
            for (i, (&k0, &k1)) in first.iter().zip(second).enumerate().take(end).skip(at) {
                let key = if self.columns.len() == 2 { ((k0 as u128) << 64) | k1 as u128 } else { k0 as u128 };
                f(chunk * DELTA_CHUNK_ROWS + i, HASHER.hash_one(key));
            }
            row = chunk * DELTA_CHUNK_ROWS + end;
        }
    }

    /// Catches `index`'s hashes (and range) up with the committed delta
    /// rows `..len` of `delta`.
    pub(crate) fn catch_up(&self, index: &DeltaIndex, delta: &Delta, len: usize) -> Result<()> {
        if index.indexed()? >= len {
            return Ok(());
        }
        self.catch_up_range(index, delta, len)?;
        let mut keys = index.keys.write().map_err(|_| poisoned())?;
        let from = keys.prev.len();
        self.delta_hashes(&delta.reader(len), from, |row, hash| {
            let previous = keys.heads.insert(hash as u32, row as u32).unwrap_or(NONE);
            keys.prev.push(previous);
        });
        Ok(())
    }

    /// Catches `index`'s range of the first key column up with the
    /// committed delta rows `..len` of `delta`: reads that column alone, so
    /// a commit that only needs to know where the delta's keys lie (a load
    /// in key order) hashes nothing.
    pub(crate) fn catch_up_range(&self, index: &DeltaIndex, delta: &Delta, len: usize) -> Result<()> {
        if !self.ranged() || index.keys.read().map_err(|_| poisoned())?.ranged >= len {
            return Ok(());
        }
        let mut keys = index.keys.write().map_err(|_| poisoned())?;
        let column = delta.reader(len).column(self.columns[0]);
        let physical = self.schema.physical(self.columns[0]);
        let (mut lo, mut hi) = (keys.lo, keys.hi);
        let mut row = keys.ranged;
        while row < len {
            let (chunk, at) = (row / DELTA_CHUNK_ROWS, row % DELTA_CHUNK_ROWS);
            let end = len.min((chunk + 1) * DELTA_CHUNK_ROWS) - chunk * DELTA_CHUNK_ROWS;
            with_native!(physical,
                T => {
                    for v in &column.values::<T>(chunk)[at..end] {
                        let k = v.to_key();
                        lo = lo.min(k);
                        hi = hi.max(k);
                    }
                },
                bool => {
                    lo = 0;
                    hi = hi.max(1);
                },
                bytes => return Err(Error::Internal("a string key column has no range".into())),
            );
            row = chunk * DELTA_CHUNK_ROWS + end;
        }
        (keys.lo, keys.hi, keys.ranged) = (lo, hi, keys.ranged.max(len));
        Ok(())
    }
}

fn append_len_prefixed(b: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn poisoned() -> Error {
    Error::Internal("a thread panicked while updating a delta index".into())
}

/// A shard version's main index: open addressing with linear probing over
/// `u32` slots, each 0 (empty) or a hash tag in the bits above the id
/// bits and the record id plus one below them.
#[derive(Debug)]
pub(crate) struct MainIndex {
    slots: Box<[u32]>,
    id_bits: u32,
}

impl MainIndex {
    fn with_rows(rows: usize) -> Self {
        let id_bits = usize::BITS - rows.leading_zeros();
        Self { slots: vec![0u32; rows + rows / 2 + 1].into_boxed_slice(), id_bits }
    }

    #[inline]
    fn id_mask(&self) -> u32 {
        ((1u64 << self.id_bits) - 1) as u32
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        (((hash as u32) as u64 * self.slots.len() as u64) >> 32) as usize
    }

    #[inline]
    fn tag(&self, hash: u64) -> u32 {
        ((hash >> 32) as u32) & !self.id_mask()
    }

    fn insert(&mut self, hash: u64, id: RecId) {
        let mut at = self.home(hash);
        while self.slots[at] != 0 {
            at = if at + 1 == self.slots.len() { 0 } else { at + 1 };
        }
        self.slots[at] = self.tag(hash) | (id + 1);
    }

    /// The record ids whose hash may be `hash`, until `f` returns true.
    #[inline]
    pub(crate) fn probe(&self, hash: u64, mut f: impl FnMut(RecId) -> Result<bool>) -> Result<()> {
        let (tag, mask) = (self.tag(hash), self.id_mask());
        let mut at = self.home(hash);
        loop {
            let slot = self.slots[at];
            if slot == 0 {
                return Ok(());
            }
            if slot & !mask == tag && f((slot & mask) - 1)? {
                return Ok(());
            }
            at = if at + 1 == self.slots.len() { 0 } else { at + 1 };
        }
    }

    /// Bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        self.slots.len() * 4
    }
}

/// A delta's index; see the module documentation.
#[derive(Debug)]
pub(crate) struct DeltaIndex {
    keys: RwLock<DeltaKeys>,
}

#[derive(Debug)]
struct DeltaKeys {
    /// Low 32 bits of a key hash → the newest row with that hash.
    heads: HashMap<u32, u32>,
    /// Per indexed row: the previous row with the same hash, or [`NONE`].
    prev: Vec<u32>,
    /// Rows whose first key column `lo..=hi` covers (`lo > hi`: none).
    ranged: usize,
    lo: u64,
    hi: u64,
}

impl Default for DeltaIndex {
    fn default() -> Self {
        Self {
            keys: RwLock::new(DeltaKeys { heads: HashMap::new(), prev: Vec::new(), ranged: 0, lo: u64::MAX, hi: 0 }),
        }
    }
}

impl DeltaIndex {
    fn indexed(&self) -> Result<usize> {
        Ok(self.keys.read().map_err(|_| poisoned())?.prev.len())
    }

    /// The delta rows below `len` whose hash may be `hash`, newest first,
    /// until `f` returns true. The index must cover `len` rows.
    pub(crate) fn probe(&self, hash: u64, len: usize, mut f: impl FnMut(RecId) -> Result<bool>) -> Result<()> {
        let keys = self.keys.read().map_err(|_| poisoned())?;
        let mut row = keys.heads.get(&(hash as u32)).copied().unwrap_or(NONE);
        while row != NONE {
            if (row as usize) < len && f(row)? {
                return Ok(());
            }
            row = keys.prev[row as usize];
        }
        Ok(())
    }

    /// The first key column's range over the rows caught up, if any.
    pub(crate) fn range(&self) -> Result<Option<(u64, u64)>> {
        let keys = self.keys.read().map_err(|_| poisoned())?;
        Ok((keys.lo <= keys.hi).then_some((keys.lo, keys.hi)))
    }

    /// Bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        self.keys.read().map_or(0, |k| k.heads.allocation_size() + k.prev.capacity() * 4)
    }
}

/// A table's filter of the keys its rows hold (a blocked Bloom filter:
/// each key sets six bits of one 512-bit block, about ten bits a key at
/// capacity, so a key not held passes about one time in a hundred). Keys
/// are added as commits append them and never removed, so it answers for
/// the newest state: a key it rules out is in no row, and a commit whose
/// new keys it rules out probes no shard.
#[derive(Debug)]
pub(crate) struct KeyFilter {
    blocks: Vec<[u64; 8]>,
    keys: usize,
    capacity: usize,
}

impl KeyFilter {
    fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1024);
        Self { blocks: vec![[0u64; 8]; (capacity * 10).div_ceil(512)], keys: 0, capacity }
    }

    #[inline]
    fn block(&self, hash: u64) -> usize {
        (((hash >> 32) * self.blocks.len() as u64) >> 32) as usize
    }

    /// The six bit positions (0..512) of `hash` within its block.
    #[inline]
    fn bits(hash: u64) -> impl Iterator<Item = usize> {
        let mixed = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (0..6).map(move |i| ((mixed >> (i * 9 + 10)) & 511) as usize)
    }

    /// Adds a key's hash.
    #[inline]
    pub(crate) fn insert(&mut self, hash: u64) {
        let b = self.block(hash);
        let block = &mut self.blocks[b];
        for bit in Self::bits(hash) {
            block[bit / 64] |= 1 << (bit % 64);
        }
        self.keys += 1;
    }

    /// False when no key with this hash was added.
    #[inline]
    pub(crate) fn may_contain(&self, hash: u64) -> bool {
        let block = &self.blocks[self.block(hash)];
        Self::bits(hash).all(|bit| block[bit / 64] & (1 << (bit % 64)) != 0)
    }

    /// True when more keys were added than it was sized for (it then
    /// passes too many keys, and is built anew).
    pub(crate) fn is_full(&self) -> bool {
        self.keys > self.capacity
    }

    /// Bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        self.blocks.len() * 64
    }
}

/// A shard version's indexes.
#[derive(Debug, Default)]
pub(crate) struct ShardIndex {
    pub(crate) main: OnceLock<MainIndex>,
    pub(crate) delta: DeltaIndex,
}

impl ShardIndex {
    /// Bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        self.main.get().map_or(0, MainIndex::size_bytes) + self.delta.size_bytes()
    }
}

/// One key column's values in a form rows can be read from.
pub(crate) enum KeyValues<'a> {
    /// Order-preserving `u64` keys (types of up to 64 bits, booleans).
    Keys(Vec<u64>),
    /// Decimals.
    Wide(Vec<i128>),
    /// Strings or binary.
    Bytes(&'a dyn Array),
}

impl<'a> KeyValues<'a> {
    pub(crate) fn new(array: &'a dyn Array, physical: PhysicalType) -> Self {
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

    /// The values of `arrays`, the key columns `columns` of `schema`.
    pub(crate) fn of(schema: &TableSchema, columns: &[usize], arrays: &'a [ArrayRef]) -> Vec<Self> {
        columns.iter().zip(arrays).map(|(&c, a)| Self::new(a.as_ref(), schema.physical(c))).collect()
    }

    /// The order-preserving key of `row` (0 for strings).
    pub(crate) fn key(&self, row: usize) -> u64 {
        match self {
            KeyValues::Keys(k) => k[row],
            KeyValues::Wide(v) => v[row].to_key(),
            KeyValues::Bytes(_) => 0,
        }
    }

    pub(crate) fn append_bytes(&self, row: usize, out: &mut Vec<u8>) {
        match self {
            KeyValues::Keys(k) => out.extend_from_slice(&k[row].to_le_bytes()),
            KeyValues::Wide(v) => out.extend_from_slice(&v[row].to_le_bytes()),
            KeyValues::Bytes(a) => append_len_prefixed(bytes_at(*a, row), out),
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

/// The packed key of `row` (at most two columns of up to 64 bits).
pub(crate) fn pack(values: &[KeyValues<'_>], row: usize) -> u128 {
    let hi = values[0].key(row) as u128;
    match values.get(1) {
        Some(v) => (hi << 64) | v.key(row) as u128,
        None => hi,
    }
}
