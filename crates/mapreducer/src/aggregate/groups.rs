//! Group keys: value → group id maps that live in the accumulator.
//!
//! ```text
//!   key 0 value ──KeyMap──▶ id0 ┐
//!   key 1 value ──KeyMap──▶ id1 ├─ one key: group = id0
//!   ...                         ┘  several:  group = composite[(id0, id1, ..)]
//! ```
//!
//! Integer keys use a direct-mapped window (array aggregation) for values
//! near the first ones seen, which covers small ranges such as
//! `category % 100` or dictionary codes, and a hash map for the rest.
//! Maps are keyed by values, not by a shard's codes, so accumulators of
//! different shards merge by key value.

use hashbrown::HashMap;

use crate::error::{Error, Result};

/// Width of the direct-mapped window of an integer key map: 8,192 slots
/// (32 KiB) cover the small domains group keys usually have (codes,
/// categories, `x % n`) with one array lookup per row.
pub(crate) const DENSE_WINDOW: usize = 8192;

/// Most group keys a statement may have (composite ids are packed into u128).
pub(crate) const MAX_KEYS: usize = 4;

/// Id of a key value within its [`KeyMap`].
pub(crate) type KeyId = u32;

/// A window slot whose value has no id yet.
const UNASSIGNED: u32 = u32::MAX;

/// A key value, shard-independent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KeyValue<'a> {
    Null,
    I64(i64),
    U64(u64),
    F64(f64),
    I128(i128),
    Bytes(&'a [u8]),
}

/// Values of one group key, by id.
#[derive(Debug, Clone)]
pub(crate) enum KeyMap {
    I64(IntMap),
    U64(HashMapKeys<u64>),
    /// Floats by their bits (so NaN groups with NaN, and -0.0 apart from 0.0).
    F64(HashMapKeys<u64>),
    I128(HashMapKeys<i128>),
    Bytes(BytesMap),
}

/// Integer keys: direct-mapped window, then keys in ascending order,
/// then a hash map.
///
/// A key outside the window and larger than every key assigned before is
/// new: it gets the next id and goes at the end of `ascending`, with no
/// hash lookup. Keys stored in order (TPC-H's 1.5 million order keys of
/// the line items) so never touch the hash map, whose inserts miss the
/// cache once it outgrows it. Any other key is looked up in the hash map,
/// then in `ascending` (a binary search), and is inserted in the hash map
/// when new.
#[derive(Debug, Clone, Default)]
pub(crate) struct IntMap {
    base: i64,
    /// Slot `v - base` holds the id of `v`, or [`UNASSIGNED`].
    window: Vec<u32>,
    hash: HashMap<i64, KeyId>,
    /// Keys that were each larger than every key before them, ascending,
    /// with their ids.
    ascending: Vec<(i64, KeyId)>,
    /// The largest key assigned, by any of the three.
    max: Option<i64>,
    pub(crate) values: Vec<i64>,
    pub(crate) null: Option<KeyId>,
}

/// Keys by hash.
#[derive(Debug, Clone, Default)]
pub(crate) struct HashMapKeys<T> {
    hash: HashMap<T, KeyId>,
    pub(crate) values: Vec<T>,
    pub(crate) null: Option<KeyId>,
}

/// Byte-string keys; values are stored once, in an arena.
#[derive(Debug, Clone, Default)]
pub(crate) struct BytesMap {
    hash: HashMap<Box<[u8]>, KeyId>,
    pub(crate) spans: Vec<(usize, usize)>,
    pub(crate) arena: Vec<u8>,
    pub(crate) null: Option<KeyId>,
}

impl IntMap {
    /// Sets the window to start at `min` (before any key is assigned).
    pub(crate) fn init_window(&mut self, min: i64) {
        if self.window.is_empty() && self.values.is_empty() {
            self.base = min;
            self.window = vec![UNASSIGNED; DENSE_WINDOW];
        }
    }

    /// True once the window is placed.
    pub(crate) fn has_window(&self) -> bool {
        !self.window.is_empty()
    }

    /// Ids of the lanes `lanes` of `x` into `out`: one window lookup per
    /// lane in a tight pass; values the window does not know (new or
    /// outside it) take a second, rare pass through [`IntMap::id`].
    #[inline]
    pub(crate) fn ids(
        &mut self,
        x: &[i64; quiverdb_storage::block::LANES],
        lanes: &quiverdb_storage::block::Bits,
        out: &mut [u32; quiverdb_storage::block::LANES],
    ) {
        #[inline(always)]
        fn lookup(window: &[u32], base: i64, v: i64) -> u32 {
            let slot = v.wrapping_sub(base) as u64 as usize;
            if slot < window.len() { window[slot] } else { UNASSIGNED }
        }
        let base = self.base;
        let window = self.window.as_slice();
        if lookup_lanes(x, lanes, out, |v| lookup(window, base, v)) {
            // Keys stored in order (TPC-H's line items by order key) come
            // in runs: a lane holding the last missed key takes its id
            // without a hash lookup.
            let mut last: Option<(i64, KeyId)> = None;
            lanes.for_each_one(|l| {
                if out[l] == UNASSIGNED {
                    let v = x[l];
                    out[l] = match last {
                        Some((k, id)) if k == v => id,
                        _ => {
                            let id = self.assign(v);
                            last = Some((v, id));
                            id
                        }
                    };
                }
            });
        }
    }

    /// [`IntMap::id`] out of line, for the rare lanes a lookup misses.
    #[cold]
    #[inline(never)]
    fn assign(&mut self, v: i64) -> KeyId {
        self.id(v)
    }

    #[inline]
    pub(crate) fn id(&mut self, v: i64) -> KeyId {
        let slot = v.wrapping_sub(self.base) as u64;
        if (slot as usize) < self.window.len() {
            let e = self.window[slot as usize];
            if e != UNASSIGNED {
                return e;
            }
            let id = self.values.len() as KeyId;
            self.values.push(v);
            self.window[slot as usize] = id;
            self.max = Some(self.max.map_or(v, |m| m.max(v)));
            return id;
        }
        let next = self.values.len() as KeyId;
        if self.max.is_none_or(|m| v > m) {
            self.values.push(v);
            self.ascending.push((v, next));
            self.max = Some(v);
            return next;
        }
        if let Some(&id) = self.hash.get(&v) {
            return id;
        }
        if let Ok(i) = self.ascending.binary_search_by_key(&v, |&(k, _)| k) {
            return self.ascending[i].1;
        }
        self.hash.insert(v, next);
        self.values.push(v);
        next
    }
}

impl<T: Copy + Eq + std::hash::Hash> HashMapKeys<T> {
    #[inline]
    pub(crate) fn id(&mut self, v: T) -> KeyId {
        let next = self.values.len() as KeyId;
        let id = *self.hash.entry(v).or_insert(next);
        if id == next {
            self.values.push(v);
        }
        id
    }
}

impl BytesMap {
    #[inline]
    pub(crate) fn id(&mut self, v: &[u8]) -> KeyId {
        if let Some(&id) = self.hash.get(v) {
            return id;
        }
        let id = self.spans.len() as KeyId;
        let start = self.arena.len();
        self.arena.extend_from_slice(v);
        self.spans.push((start, v.len()));
        self.hash.insert(v.into(), id);
        id
    }

    pub(crate) fn value(&self, id: KeyId) -> &[u8] {
        let (s, n) = self.spans[id as usize];
        &self.arena[s..s + n]
    }
}

/// `out[l] = lookup(x[l])` for the lanes `lanes`, in one tight pass (no
/// branch, so a dense run vectorises); true if some lane got
/// [`UNASSIGNED`], for the caller's second, rare pass.
#[inline(always)]
pub(crate) fn lookup_lanes<T: Copy>(
    x: &[T; quiverdb_storage::block::LANES],
    lanes: &quiverdb_storage::block::Bits,
    out: &mut [u32; quiverdb_storage::block::LANES],
    lookup: impl Fn(T) -> u32,
) -> bool {
    let mut misses = false;
    match lanes.dense_len() {
        Some(n) => {
            for (o, &v) in out[..n].iter_mut().zip(&x[..n]) {
                *o = lookup(v);
                misses |= *o == UNASSIGNED;
            }
        }
        None => lanes.for_each_one(|l| {
            out[l] = lookup(x[l]);
            misses |= out[l] == UNASSIGNED;
        }),
    }
    misses
}

/// Reserves a values slot for the null key on first use, so that ids stay
/// indexes into `values`; returns the null key's id.
macro_rules! null_slot {
    ($map:expr, $placeholder:expr) => {{
        match $map.null {
            Some(id) => id,
            None => {
                let id = $map.values.len() as KeyId;
                $map.values.push($placeholder);
                $map.null = Some(id);
                id
            }
        }
    }};
}

impl IntMap {
    pub(crate) fn null_id(&mut self) -> KeyId {
        null_slot!(self, 0)
    }
}

impl<T: Copy + Default> HashMapKeys<T> {
    pub(crate) fn null_id(&mut self) -> KeyId {
        null_slot!(self, T::default())
    }
}

impl BytesMap {
    pub(crate) fn null_id(&mut self) -> KeyId {
        match self.null {
            Some(id) => id,
            None => {
                let id = self.spans.len() as KeyId;
                self.spans.push((self.arena.len(), 0));
                self.null = Some(id);
                id
            }
        }
    }
}

impl KeyMap {
    /// Number of ids assigned (values plus the null key's slot).
    pub(crate) fn len(&self) -> usize {
        match self {
            KeyMap::I64(m) => m.values.len(),
            KeyMap::U64(m) | KeyMap::F64(m) => m.values.len(),
            KeyMap::I128(m) => m.values.len(),
            KeyMap::Bytes(m) => m.spans.len(),
        }
    }

    /// The id of the null key (ids index the values; the null key's slot
    /// holds a placeholder).
    pub(crate) fn null(&mut self) -> KeyId {
        match self {
            KeyMap::I64(m) => m.null_id(),
            KeyMap::U64(m) | KeyMap::F64(m) => m.null_id(),
            KeyMap::I128(m) => m.null_id(),
            KeyMap::Bytes(m) => m.null_id(),
        }
    }

    /// The id of `v` (assigning one if new).
    pub(crate) fn id_of(&mut self, v: &KeyValue<'_>) -> Result<KeyId> {
        Ok(match (self, v) {
            (m, KeyValue::Null) => m.null(),
            (KeyMap::I64(m), KeyValue::I64(x)) => m.id(*x),
            (KeyMap::U64(m), KeyValue::U64(x)) => m.id(*x),
            (KeyMap::F64(m), KeyValue::F64(x)) => m.id(float_group_bits(*x)),
            (KeyMap::I128(m), KeyValue::I128(x)) => m.id(*x),
            (KeyMap::Bytes(m), KeyValue::Bytes(b)) => m.id(b),
            _ => return Err(Error::Internal("group key of another type".into())),
        })
    }

    /// The value of id `id`.
    pub(crate) fn value(&self, id: KeyId) -> KeyValue<'_> {
        let i = id as usize;
        match self {
            KeyMap::I64(m) if m.null != Some(id) => KeyValue::I64(m.values[i]),
            KeyMap::U64(m) if m.null != Some(id) => KeyValue::U64(m.values[i]),
            KeyMap::F64(m) if m.null != Some(id) => KeyValue::F64(f64::from_bits(m.values[i])),
            KeyMap::I128(m) if m.null != Some(id) => KeyValue::I128(m.values[i]),
            KeyMap::Bytes(m) if m.null != Some(id) => KeyValue::Bytes(m.value(id)),
            _ => KeyValue::Null,
        }
    }
}

/// The groups of an accumulator: per-key maps and, for several keys, the
/// composite map.
#[derive(Debug, Clone)]
pub(crate) struct Groups {
    pub(crate) keys: Vec<KeyMap>,
    composite: HashMap<[KeyId; MAX_KEYS], u32>,
    tuples: Vec<[KeyId; MAX_KEYS]>,
    /// Number of groups (1 for an aggregate without keys).
    pub(crate) len: usize,
}

/// Heap bytes of a hash map of `capacity` entries of `entry` bytes (its
/// buckets and one control byte each).
fn table_bytes(capacity: usize, entry: usize) -> usize {
    capacity * (entry + 1)
}

impl KeyMap {
    /// Heap bytes held (estimated from capacities).
    pub(crate) fn size_bytes(&self) -> usize {
        match self {
            KeyMap::I64(m) => {
                m.window.capacity() * 4
                    + table_bytes(m.hash.capacity(), size_of::<(i64, KeyId)>())
                    + m.ascending.capacity() * size_of::<(i64, KeyId)>()
                    + m.values.capacity() * 8
            }
            KeyMap::U64(m) | KeyMap::F64(m) => m.size_bytes(),
            KeyMap::I128(m) => m.size_bytes(),
            KeyMap::Bytes(m) => {
                // Each key is boxed once in the table (with the
                // allocator's rounding) and copied once into the arena.
                table_bytes(m.hash.capacity(), size_of::<(Box<[u8]>, KeyId)>())
                    + m.arena.len().next_multiple_of(16)
                    + m.spans.len() * 16
                    + m.arena.capacity()
                    + m.spans.capacity() * size_of::<(usize, usize)>()
            }
        }
    }
}

impl<T> HashMapKeys<T> {
    fn size_bytes(&self) -> usize {
        table_bytes(self.hash.capacity(), size_of::<(T, KeyId)>()) + self.values.capacity() * size_of::<T>()
    }

    fn growth_bytes(&self, rows: usize) -> usize {
        table_growth(self.hash.len(), self.hash.capacity(), rows, size_of::<(T, KeyId)>())
            + vec_growth(self.values.len(), self.values.capacity(), rows, size_of::<T>())
    }
}

/// The bytes a hash map of `len` entries of `entry` bytes in `capacity`
/// allocates while `rows` more keys go in: its next table, which the old
/// one is copied into (both are held meanwhile); 0 if they fit.
fn table_growth(len: usize, capacity: usize, rows: usize, entry: usize) -> usize {
    if len + rows <= capacity { 0 } else { table_bytes((2 * capacity).max(len + rows), entry) }
}

/// [`table_growth`] of a vector of `len` items of `item` bytes growing by up to `rows`.
fn vec_growth(len: usize, capacity: usize, rows: usize, item: usize) -> usize {
    if len + rows <= capacity { 0 } else { (2 * capacity).max(len + rows) * item }
}

impl KeyMap {
    /// The bytes this map's containers allocate on top of what they hold
    /// while up to `rows` new keys go in (see [`table_growth`]).
    pub(crate) fn growth_bytes(&self, rows: usize) -> usize {
        match self {
            KeyMap::I64(m) => {
                // A new key goes to the hash map or to `ascending`, not both.
                table_growth(m.hash.len(), m.hash.capacity(), rows, size_of::<(i64, KeyId)>()).max(vec_growth(
                    m.ascending.len(),
                    m.ascending.capacity(),
                    rows,
                    size_of::<(i64, KeyId)>(),
                )) + vec_growth(m.values.len(), m.values.capacity(), rows, 8)
            }
            KeyMap::U64(m) | KeyMap::F64(m) => m.growth_bytes(rows),
            KeyMap::I128(m) => m.growth_bytes(rows),
            KeyMap::Bytes(m) => {
                // New keys as long as the average so far.
                let average = m.arena.len().div_ceil(m.spans.len().max(1)).max(1);
                table_growth(m.hash.len(), m.hash.capacity(), rows, size_of::<(Box<[u8]>, KeyId)>())
                    + vec_growth(m.spans.len(), m.spans.capacity(), rows, size_of::<(usize, usize)>())
                    + vec_growth(m.arena.len(), m.arena.capacity(), rows * average, 1)
            }
        }
    }
}

impl Groups {
    /// The bytes the keys and the composite-key table allocate on top of
    /// what they hold while up to `rows` new groups go in.
    pub(crate) fn growth_bytes(&self, rows: usize) -> usize {
        let composite = if self.keys.len() > 1 {
            table_growth(self.composite.len(), self.composite.capacity(), rows, size_of::<([KeyId; MAX_KEYS], u32)>())
                + vec_growth(self.tuples.len(), self.tuples.capacity(), rows, size_of::<[KeyId; MAX_KEYS]>())
        } else {
            0
        };
        self.keys.iter().map(|k| k.growth_bytes(rows)).sum::<usize>() + composite
    }

    /// Heap bytes held by the keys and the composite-key table.
    pub(crate) fn size_bytes(&self) -> usize {
        self.keys.iter().map(KeyMap::size_bytes).sum::<usize>()
            + table_bytes(self.composite.capacity(), size_of::<([KeyId; MAX_KEYS], u32)>())
            + self.tuples.capacity() * size_of::<[KeyId; MAX_KEYS]>()
    }

    pub(crate) fn new(keys: Vec<KeyMap>) -> Self {
        let len = if keys.is_empty() { 1 } else { 0 };
        Self { keys, composite: HashMap::new(), tuples: Vec::new(), len }
    }

    /// The group of a tuple of key ids (assigning one if new).
    #[inline]
    pub(crate) fn group(&mut self, ids: &[KeyId]) -> u32 {
        if ids.len() == 1 {
            let g = ids[0];
            self.len = self.len.max(g as usize + 1);
            return g;
        }
        // A fixed-length copy: `copy_from_slice` of the runtime length
        // was a call to `memcpy` per row, whose 8-byte store the hash then
        // read back in halves (a store-forwarding stall): a fifth of
        // TPC-H q20's time, grouping lineitem by two keys.
        let tuple: [KeyId; MAX_KEYS] = std::array::from_fn(|k| ids.get(k).copied().unwrap_or(0));
        let next = self.tuples.len() as u32;
        let g = *self.composite.entry(tuple).or_insert(next);
        if g == next {
            self.tuples.push(tuple);
            self.len += 1;
        }
        g
    }

    /// The key ids of group `g`.
    pub(crate) fn tuple(&self, g: u32) -> [KeyId; MAX_KEYS] {
        if self.keys.len() == 1 {
            let mut t = [0; MAX_KEYS];
            t[0] = g;
            return t;
        }
        self.tuples[g as usize]
    }
}

/// The grouping identity of a float: its bits, with `-0.0` as `+0.0` (SQL
/// groups the two zeros together, as DataFusion does; NaNs group by bits).
#[inline(always)]
pub(super) fn float_group_bits(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits << 1 == 0 { 0 } else { bits }
}

#[cfg(test)]
mod tests;
