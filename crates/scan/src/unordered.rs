//! The unordered scan (MemCP's `scan`): per shard, in parallel, filter then
//! map+reduce; the shards' accumulators are merged.
//!
//! ```text
//!   shard k (a rayon task)
//!     for each main block, then each delta chunk:
//!       phase 1 ─ zone map: never TRUE → skip;  only TRUE → whole block
//!               ─ else evaluate the filter columns → TRUE lanes
//!               ─ minus deleted records
//!       emit    ─ every row          → stream_block(Range)
//!               ─ many rows          → stream_block(Mask)
//!               ─ few rows           → ids into a [RecId; 1024] buffer,
//!                                      stream(buffer) when full
//!     phase 2 runs in the shard's reducer, reading only its map columns
//!   accumulators ──merge──▶ result
//! ```
//!
//! A limit is a budget shared by all shard tasks: every emitted selection
//! takes rows from it, the last one is cut to what is left, and a shard
//! stops when the budget is spent, so exactly `limit` rows are streamed
//! (or all, if fewer match).

use std::sync::atomic::{AtomicUsize, Ordering};

use quiverdb_mapreducer::{
    Bits, BlockSelection, Kernel, LANES, MapReducer, RecId, Scratch, ShardMapReducer, Side, WORDS,
};
use quiverdb_storage::{ShardSnapshot, TableSnapshot};

use crate::error::Result;
use crate::filter::{PreparedFilter, ShardFilter};
use crate::predicate::Predicate;
use crate::{ScanOptions, parallel};

/// Below this many selected rows in a block, phase 1 passes ids rather
/// than a bitmask: a reducer then reads the few rows one by one instead of
/// decoding the whole block (the same crossover as the gather threshold,
/// see `quiverdb_storage::main::decode`, scaled by the 4 columns a typical
/// map reads).
const SPARSE_ROWS: usize = 64;

/// Selected records of one step of phase 1.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Selection<'a> {
    /// A block or chunk selected without ids.
    Block(BlockSelection<'a>),
    /// Ids in ascending order.
    Ids(&'a [RecId]),
}

impl Selection<'_> {
    pub(crate) fn count(&self) -> usize {
        match self {
            Selection::Block(b) => b.count(),
            Selection::Ids(ids) => ids.len(),
        }
    }
}

/// What phase 1 did on the shards it scanned, for `EXPLAIN ANALYZE`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanCounts {
    /// Shards scanned.
    pub shards: usize,
    /// Main blocks skipped by their zone maps (no record could pass).
    pub blocks_pruned: usize,
    /// Main blocks taken whole by their zone maps (every record passes).
    pub blocks_whole: usize,
    /// Main blocks and delta chunks the filter was evaluated on.
    pub blocks_filtered: usize,
    /// Records selected for the reducer (before a limit cuts them).
    pub rows_selected: usize,
}

impl ScanCounts {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &ScanCounts) {
        self.shards += other.shards;
        self.blocks_pruned += other.blocks_pruned;
        self.blocks_whole += other.blocks_whole;
        self.blocks_filtered += other.blocks_filtered;
        self.rows_selected += other.rows_selected;
    }
}

/// Whether phase 1 goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Stop,
}

/// Runs phase 1 over a shard, calling `emit` with the selected records of
/// each block in record order.
///
/// `prune(block)` is asked before each main block is read; returning true
/// skips it (an ordered scan's top-k threshold uses this). Returns what it
/// did (see [`ScanCounts`]).
pub(crate) fn select(
    shard: ShardSnapshot<'_>,
    mut filter: Option<&mut ShardFilter<'_>>,
    id_buffer: usize,
    mut prune: impl FnMut(usize) -> bool,
    mut emit: impl FnMut(Selection<'_>) -> Result<Flow>,
) -> Result<ScanCounts> {
    let mut counts = ScanCounts { shards: 1, ..ScanCounts::default() };
    let main_rows = shard.main().rows();
    let delta_rows = shard.delta_len();
    let deletes = shard.deletes();
    let mut ids = [0 as RecId; LANES];
    let mut n_ids = 0;
    let mut deleted = [0u64; WORDS];
    let mut mask = Bits::EMPTY;
    let steps = main_rows.div_ceil(LANES) + delta_rows.div_ceil(LANES);
    for step in 0..steps {
        let main_blocks = main_rows.div_ceil(LANES);
        let (side, start, len) = if step < main_blocks {
            (Side::Main(step), step * LANES, (main_rows - step * LANES).min(LANES))
        } else {
            let c = step - main_blocks;
            (Side::Delta(c), main_rows + c * LANES, (delta_rows - c * LANES).min(LANES))
        };
        if let Side::Main(block) = side
            && prune(block)
        {
            continue;
        }
        // Live rows (none deleted, or the block minus its deleted records).
        let live: Option<Bits> = deletes.and_then(|d| {
            d.words(start, len, &mut deleted);
            deleted.iter().any(|&w| w != 0).then(|| Bits::first(len).and_not(&Bits(deleted)))
        });
        // Phase 1: which live rows pass the filter (`masked`: the rows of
        // `mask`, else every row).
        let mut masked = false;
        if let Some(l) = &live {
            mask = *l;
            masked = true;
        }
        if let Some(f) = filter.as_deref_mut() {
            let evaluate = match side {
                Side::Main(block) => {
                    let z = f.zone(block);
                    if !z.t {
                        counts.blocks_pruned += 1;
                        continue;
                    }
                    z.f || z.n
                }
                Side::Delta(_) => true,
            };
            if evaluate {
                f.eval(side, live.as_ref(), &mut mask)?;
                masked = true;
                counts.blocks_filtered += 1;
            } else {
                counts.blocks_whole += 1;
            }
        }
        let count = if masked { mask.count() } else { len };
        if count == 0 {
            continue;
        }
        counts.rows_selected += count;
        let start_id = start as RecId;
        let dense = count == len || (count >= SPARSE_ROWS && id_buffer == LANES);
        if dense && n_ids > 0 {
            // Keep record order: what was buffered goes first.
            if emit(Selection::Ids(&ids[..n_ids]))? == Flow::Stop {
                return Ok(counts);
            }
            n_ids = 0;
        }
        let flow = match masked {
            _ if count == len => {
                emit(Selection::Block(BlockSelection::Range { start: start_id, end: start_id + len as RecId }))?
            }
            true if dense => {
                emit(Selection::Block(BlockSelection::Mask { start: start_id, len: len as u32, mask: &mask.0 }))?
            }
            true => {
                let mut flow = Flow::Continue;
                let mut err = None;
                mask.for_each_one(|i| {
                    if flow == Flow::Stop || err.is_some() {
                        return;
                    }
                    ids[n_ids] = start_id + i as RecId;
                    n_ids += 1;
                    if n_ids == id_buffer {
                        match emit(Selection::Ids(&ids[..n_ids])) {
                            Ok(f) => flow = f,
                            Err(e) => err = Some(e),
                        }
                        n_ids = 0;
                    }
                });
                if let Some(e) = err {
                    return Err(e);
                }
                flow
            }
            false => unreachable!("count < len implies a mask"),
        };
        if flow == Flow::Stop {
            return Ok(counts);
        }
    }
    if n_ids > 0 {
        emit(Selection::Ids(&ids[..n_ids]))?;
    }
    Ok(counts)
}

/// Rows a limited scan may still stream, shared by its shard tasks.
#[derive(Debug)]
pub(crate) struct Budget(Option<AtomicUsize>);

impl Budget {
    pub(crate) fn new(limit: Option<usize>) -> Self {
        Self(limit.map(AtomicUsize::new))
    }

    /// Takes up to `want` rows; returns how many were granted.
    pub(crate) fn take(&self, want: usize) -> usize {
        match &self.0 {
            None => want,
            Some(left) => {
                let mut granted = 0;
                let _ = left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| {
                    granted = l.min(want);
                    Some(l - granted)
                });
                granted
            }
        }
    }

    /// True when a limit is set.
    pub(crate) fn is_limited(&self) -> bool {
        self.0.is_some()
    }

    /// True when a limit is set and spent.
    pub(crate) fn exhausted(&self) -> bool {
        self.0.as_ref().is_some_and(|left| left.load(Ordering::Acquire) == 0)
    }
}

/// Streams the selected records of one shard through the reducer that
/// `open` returns, opened only once the shard has a record to stream (most
/// shards of a selective scan are skipped by their zone maps and never
/// open one).
pub(crate) fn scan_shard<R: MapReducer>(
    shard: ShardSnapshot<'_>,
    filter: Option<&PreparedFilter>,
    id_buffer: usize,
    open: impl FnOnce() -> Result<R>,
    acc: R::Acc,
    budget: &Budget,
) -> Result<(R::Acc, Option<R>, ScanCounts)> {
    let mut compiled = match filter {
        Some(p) => Some(ShardFilter::new(shard, p)?),
        None => None,
    };
    let mut open = Some(open);
    let mut reducer: Option<R> = None;
    let mut acc = Some(acc);
    let mut ids = [0 as RecId; LANES];
    let counts = select(
        shard,
        compiled.as_mut(),
        id_buffer,
        |_| false,
        |sel| {
            // The rows a limit leaves of the selection, when it cuts it (an
            // unlimited scan does not count them).
            let mut cut = None;
            if budget.is_limited() {
                let want = sel.count();
                let granted = budget.take(want);
                if granted == 0 {
                    return Ok(Flow::Stop);
                }
                cut = (granted < want).then_some(granted);
            }
            if reducer.is_none() {
                let open = open.take().ok_or_else(|| crate::Error::Internal("reducer opened twice".into()))?;
                reducer = Some(open()?);
            }
            let r = reducer.as_mut().ok_or_else(|| crate::Error::Internal("reducer not open".into()))?;
            let a = acc.take().ok_or_else(|| crate::Error::Internal("accumulator lost".into()))?;
            acc = Some(match (cut, sel) {
                (Some(granted), _) => {
                    // The budget's last rows: cut the selection.
                    let n = match sel {
                        Selection::Block(b) => b.write_ids(&mut ids),
                        Selection::Ids(v) => {
                            ids[..v.len()].copy_from_slice(v);
                            v.len()
                        }
                    };
                    r.stream(a, &ids[..n.min(granted)])
                }
                (None, Selection::Block(b)) => r.stream_block(a, b),
                (None, Selection::Ids(v)) => r.stream(a, v),
            });
            Ok(if cut.is_some() { Flow::Stop } else { Flow::Continue })
        },
    )?;
    let mut acc = acc.ok_or_else(|| crate::Error::Internal("accumulator lost".into()))?;
    if let Some(r) = reducer.as_mut() {
        acc = r.finish(acc);
    }
    Ok((acc, reducer, counts))
}

/// The positions of the shards of `snapshot` that may hold a live record
/// passing `filter`, by the zone maps of their main blocks: a shard is
/// left out only when it has no live record, or no delta rows and no main
/// block whose zone map allows a match. For planning: a scan over the
/// shards left is the same scan, over less.
pub fn candidate_shards(snapshot: &TableSnapshot, filter: &Predicate) -> Result<Vec<usize>> {
    filter.validate(snapshot.schema())?;
    let prepared = PreparedFilter::new(filter, snapshot.schema())?;
    let mut out = Vec::new();
    for i in 0..snapshot.num_shards() {
        let shard = snapshot.shard(i);
        if shard.live_rows() == 0 {
            continue;
        }
        let blocks = shard.main().rows().div_ceil(LANES);
        let may = shard.delta_len() > 0 || {
            let f = ShardFilter::new(shard, &prepared)?;
            (0..blocks).any(|b| f.zone(b).t)
        };
        if may {
            out.push(i);
        }
    }
    Ok(out)
}

/// The unordered scan: streams every record of `snapshot` that passes
/// `filter` through a [`ShardMapReducer`] running a fresh `kernel()` per
/// shard. Shards run in parallel on `options.threads` threads; each worker
/// folds the shards it takes into one accumulator started from `init()`,
/// and the workers' accumulators are merged (MemCP's `reduce2`).
pub fn scan<K, F, I>(
    snapshot: &TableSnapshot,
    filter: Option<&Predicate>,
    options: &ScanOptions,
    kernel: F,
    init: I,
) -> Result<K::Acc>
where
    K: Kernel,
    K::Acc: Send,
    F: Fn() -> quiverdb_mapreducer::Result<K> + Sync,
    I: Fn() -> K::Acc + Sync,
{
    scan_counted(snapshot, filter, options, kernel, init).map(|(acc, _)| acc)
}

/// [`scan`], and what its phase 1 did over all its shards.
pub fn scan_counted<K, F, I>(
    snapshot: &TableSnapshot,
    filter: Option<&Predicate>,
    options: &ScanOptions,
    kernel: F,
    init: I,
) -> Result<(K::Acc, ScanCounts)>
where
    K: Kernel,
    K::Acc: Send,
    F: Fn() -> quiverdb_mapreducer::Result<K> + Sync,
    I: Fn() -> K::Acc + Sync,
{
    if let Some(p) = filter {
        p.validate(snapshot.schema())?;
    }
    let shards = options.shard_positions(snapshot);
    if shards.is_empty() {
        return Ok((init(), ScanCounts::default()));
    }
    let prepared = filter.map(|p| PreparedFilter::new(p, snapshot.schema())).transpose()?;
    let filter = prepared.as_ref();
    let budget = Budget::new(options.limit);
    let id_buffer = options.id_buffer();
    let counted = std::sync::Mutex::new(ScanCounts::default());
    // Each worker keeps its kernel and scratch buffers across shards.
    let worker_init = || (init(), None::<(K, Scratch)>);
    let acc = parallel::fold_reduce(
        options.threads,
        &shards,
        worker_init,
        |acc, parts, &i| {
            let shard = snapshot.shard(i);
            let open = || -> Result<ShardMapReducer<'_, K>> {
                Ok(match parts.take() {
                    Some((k, scratch)) => ShardMapReducer::open_with(shard, k, scratch)?,
                    None => ShardMapReducer::open(shard, kernel()?)?,
                })
            };
            let (acc, reducer, counts) = scan_shard(shard, filter, id_buffer, open, acc, &budget)?;
            if let Ok(mut c) = counted.lock() {
                c.add(&counts);
            }
            if let Some(r) = reducer {
                *parts = Some(r.into_parts());
            }
            Ok(acc)
        },
        K::merge,
    )?;
    let counts = counted.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    Ok((acc, counts))
}

/// The unordered scan on the calling thread, a shard at a time, for
/// consumers that hand results on as they come (a stream polled batch by
/// batch): each [`ScanCursor::advance`] scans shards (in the order of
/// `options.shards`, or all shards) until one streams something, then
/// lets the caller take what the accumulator holds. `options.threads` is
/// ignored; the kernel and its buffers are reused from shard to shard.
pub struct ScanCursor<K: Kernel, F> {
    snapshot: TableSnapshot,
    filter: Option<PreparedFilter>,
    shards: std::vec::IntoIter<usize>,
    budget: Budget,
    id_buffer: usize,
    kernel: F,
    parts: Option<(K, Scratch)>,
    /// `None` only after a shard failed.
    acc: Option<K::Acc>,
    /// What phase 1 did so far.
    counts: ScanCounts,
}

impl<K, F> ScanCursor<K, F>
where
    K: Kernel,
    F: Fn() -> quiverdb_mapreducer::Result<K>,
{
    /// A cursor over `snapshot`'s records that pass `filter`, folded into
    /// `acc` by a kernel from `kernel()`.
    pub fn new(
        snapshot: TableSnapshot,
        filter: Option<Predicate>,
        options: &ScanOptions,
        kernel: F,
        acc: K::Acc,
    ) -> Result<Self> {
        if let Some(p) = &filter {
            p.validate(snapshot.schema())?;
        }
        let shards = options.shard_positions(&snapshot).into_iter();
        let filter = filter.map(|p| PreparedFilter::new(&p, snapshot.schema())).transpose()?;
        Ok(Self {
            snapshot,
            filter,
            shards,
            budget: Budget::new(options.limit),
            id_buffer: options.id_buffer(),
            kernel,
            parts: None,
            acc: Some(acc),
            counts: ScanCounts::default(),
        })
    }

    /// What phase 1 did on the shards scanned so far.
    pub fn counts(&self) -> ScanCounts {
        self.counts
    }

    /// Scans shards until one streams a record into the accumulator;
    /// false when no shard is left (or the limit is reached).
    pub fn advance(&mut self) -> Result<bool> {
        while !self.budget.exhausted() {
            let Some(i) = self.shards.next() else { return Ok(false) };
            let shard = self.snapshot.shard(i);
            let parts = &mut self.parts;
            let kernel = &self.kernel;
            let open = || -> Result<ShardMapReducer<'_, K>> {
                Ok(match parts.take() {
                    Some((k, scratch)) => ShardMapReducer::open_with(shard, k, scratch)?,
                    None => ShardMapReducer::open(shard, kernel()?)?,
                })
            };
            let acc = self.acc.take().ok_or_else(|| crate::Error::Internal("a failed scan was resumed".into()))?;
            let (acc, reducer, counts) =
                scan_shard(shard, self.filter.as_ref(), self.id_buffer, open, acc, &self.budget)?;
            self.acc = Some(acc);
            self.counts.add(&counts);
            if let Some(r) = reducer {
                self.parts = Some(r.into_parts());
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The accumulator, to take results from between shards.
    pub fn acc_mut(&mut self) -> Result<&mut K::Acc> {
        self.acc.as_mut().ok_or_else(|| crate::Error::Internal("a failed scan was resumed".into()))
    }

    /// The accumulator, once the caller is done.
    pub fn into_acc(self) -> Result<K::Acc> {
        self.acc.ok_or_else(|| crate::Error::Internal("a failed scan was resumed".into()))
    }
}

impl<K: Kernel, F> std::fmt::Debug for ScanCursor<K, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanCursor").field("shards_left", &self.shards.len()).finish_non_exhaustive()
    }
}
