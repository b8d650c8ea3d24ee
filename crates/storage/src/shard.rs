//! Shards: the unit of storage, rebuild and (later) placement.
//!
//! ```text
//!   ShardState (in a published TableState; cloned per commit, cheap)
//!   ├─ data: Arc<ShardData>        replaced whole by a rebuild
//!   │   ├─ main   rows 0 .. main_rows            immutable, encoded
//!   │   └─ delta  rows main_rows .. capacity     append-only
//!   ├─ delta_len                   rows of the delta this state sees
//!   └─ deletes: DeleteSet          dead record ids (copy-on-write bitmap)
//! ```
//!
//! Record ids are `u32` positions within a shard version: main ids first,
//! then delta ids. A rebuild renumbers them, so ids are only meaningful
//! together with the shard version they came from.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder};

use crate::delta::Delta;
use crate::index::ShardIndex;
use crate::main::Main;
use crate::types::RecId;

/// A shard's identity; stable across rebuilds of the shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardId(pub u64);

impl std::fmt::Display for ShardId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One version of a shard's storage.
#[derive(Debug)]
pub(crate) struct ShardData {
    pub(crate) id: ShardId,
    /// Incremented by every rebuild of the shard.
    pub(crate) version: u64,
    /// Maximum rows (main + delta).
    pub(crate) capacity: usize,
    pub(crate) main: Main,
    pub(crate) delta: Delta,
    /// Held for the whole of a rebuild of this version.
    pub(crate) rebuild_lock: Mutex<()>,
    /// Set while a background rebuild of this version is queued.
    pub(crate) rebuild_queued: AtomicBool,
    /// The primary-key index of this version (empty without a key).
    pub(crate) index: ShardIndex,
}

impl ShardData {
    pub(crate) fn new(id: ShardId, version: u64, capacity: usize, main: Main, delta: Delta) -> Self {
        debug_assert_eq!(main.rows() + delta.capacity(), capacity);
        Self {
            id,
            version,
            capacity,
            main,
            delta,
            rebuild_lock: Mutex::new(()),
            rebuild_queued: AtomicBool::new(false),
            index: ShardIndex::default(),
        }
    }
}

/// The dead record ids of a shard version.
#[derive(Debug, Clone)]
pub struct DeleteSet {
    bits: BooleanBuffer,
    count: usize,
}

impl DeleteSet {
    /// A set over `bits` (set = deleted) holding `count` ids.
    pub(crate) fn new(bits: BooleanBuffer, count: usize) -> Self {
        debug_assert_eq!(bits.count_set_bits(), count);
        Self { bits, count }
    }

    /// The bitmap: bit `id` is set when record `id` is deleted. Its length
    /// is the shard capacity.
    pub fn bits(&self) -> &BooleanBuffer {
        &self.bits
    }

    /// Number of deleted records.
    pub fn count(&self) -> usize {
        self.count
    }

    /// True if `id` is deleted.
    #[inline]
    pub fn contains(&self, id: RecId) -> bool {
        self.bits.value(id as usize)
    }

    /// Bytes used.
    pub fn size_bytes(&self) -> usize {
        self.bits.inner().len()
    }

    /// Writes the deletion bits of records `start .. start + len` (`len <=
    /// 1024`) into `out`, LSB first; bits past `len` are zero.
    pub fn words(&self, start: usize, len: usize, out: &mut [u64; 16]) {
        debug_assert!(len <= 1024);
        let chunks =
            arrow_buffer::bit_chunk_iterator::BitChunks::new(self.bits.values(), self.bits.offset() + start, len);
        out.fill(0);
        for (slot, word) in out.iter_mut().zip(chunks.iter_padded()) {
            *slot = word;
        }
    }

    /// The set holding `ids` in a shard of `capacity` records of which
    /// `rows` exist (`None` when `ids` is empty); on an id past `rows` or
    /// given twice, that id.
    pub(crate) fn from_ids(capacity: usize, rows: usize, ids: &[RecId]) -> Result<Option<Self>, RecId> {
        if ids.is_empty() {
            return Ok(None);
        }
        let mut bits = BooleanBufferBuilder::new(capacity);
        bits.append_n(capacity, false);
        for &id in ids {
            if id as usize >= rows || bits.get_bit(id as usize) {
                return Err(id);
            }
            bits.set_bit(id as usize, true);
        }
        Ok(Some(Self::new(bits.finish(), ids.len())))
    }

    /// The deleted ids below `rows`, ascending.
    pub(crate) fn ids(&self, rows: usize) -> Vec<RecId> {
        self.bits.slice(0, rows).set_indices().map(|id| id as RecId).collect()
    }

    /// A builder holding this set's bits, for copy-on-write updates.
    pub(crate) fn to_builder(&self) -> BooleanBufferBuilder {
        let mut b = BooleanBufferBuilder::new(self.bits.len());
        b.append_buffer(&self.bits);
        b
    }
}

/// A shard as a table state sees it.
#[derive(Debug, Clone)]
pub(crate) struct ShardState {
    pub(crate) data: Arc<ShardData>,
    pub(crate) delta_len: usize,
    pub(crate) deletes: Option<DeleteSet>,
}

impl ShardState {
    /// Rows (live and dead) visible in this state.
    pub(crate) fn rows(&self) -> usize {
        self.data.main.rows() + self.delta_len
    }

    /// Deleted rows.
    pub(crate) fn deleted(&self) -> usize {
        self.deletes.as_ref().map_or(0, DeleteSet::count)
    }

    /// Live rows.
    pub(crate) fn live(&self) -> usize {
        self.rows() - self.deleted()
    }

    /// Rows that can still be appended.
    pub(crate) fn room(&self) -> usize {
        self.data.delta.capacity() - self.delta_len
    }
}

/// Shards per copy-on-write chunk of a [`ShardList`]: a commit copies the
/// list's chunk pointers plus the one chunk it changes, so a single-row
/// insert into a 10,000-shard table touches ~160 pointers and 64 states
/// instead of 10,000 states.
const SHARD_LIST_CHUNK: usize = 64;

/// The shards of a table state: a persistent vector in chunks, cheap to
/// clone and to change one element of.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShardList {
    chunks: Vec<Arc<Vec<ShardState>>>,
    len: usize,
}

impl ShardList {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn get(&self, i: usize) -> &ShardState {
        &self.chunks[i / SHARD_LIST_CHUNK][i % SHARD_LIST_CHUNK]
    }

    /// Shard `i`, copying its chunk first if another state shares it.
    pub(crate) fn get_mut(&mut self, i: usize) -> &mut ShardState {
        &mut Arc::make_mut(&mut self.chunks[i / SHARD_LIST_CHUNK])[i % SHARD_LIST_CHUNK]
    }

    pub(crate) fn last(&self) -> Option<&ShardState> {
        self.len.checked_sub(1).map(|i| self.get(i))
    }

    pub(crate) fn push(&mut self, shard: ShardState) {
        if self.len.is_multiple_of(SHARD_LIST_CHUNK) {
            self.chunks.push(Arc::new(Vec::with_capacity(SHARD_LIST_CHUNK)));
        }
        let last = self.chunks.last_mut().expect("a chunk was just ensured");
        Arc::make_mut(last).push(shard);
        self.len += 1;
    }

    /// Removes shard `i` (rare: a rebuilt shard left empty).
    pub(crate) fn remove(&mut self, i: usize) {
        let rest: Vec<ShardState> = self.iter().cloned().enumerate().filter(|(j, _)| *j != i).map(|(_, s)| s).collect();
        *self = Self::default();
        for s in rest {
            self.push(s);
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &ShardState> {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    /// Position of the shard with id `id` (ids ascend with position).
    pub(crate) fn position(&self, id: ShardId) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.get(mid).data.id.cmp(&id) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }
}
