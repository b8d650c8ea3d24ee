//! Running per-shard work on a thread pool of a chosen size.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::error::{Error, Result};

/// The number of threads `requested` means (0 = available parallelism).
pub(crate) fn effective_threads(requested: usize) -> usize {
    if requested == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { requested }
}

/// The stack of each scan thread and of each thread of the server that
/// plans or runs statements: map expressions and predicates are trees
/// evaluated by recursion, and the server bounds how deep a statement may
/// nest (`quiverdb_server`'s `nesting` module) to what this holds. Address
/// space: only the pages a deep expression touches become resident.
pub const THREAD_STACK_BYTES: usize = 64 << 20;

/// A pool of `threads` threads, created once per size and kept.
fn pool(threads: usize) -> Result<Arc<ThreadPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| Error::Internal("a scan thread pool lock was poisoned".into()))?;
    if let Some(p) = pools.get(&threads) {
        return Ok(Arc::clone(p));
    }
    let p = Arc::new(
        ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("quiverdb-scan-{i}"))
            .stack_size(THREAD_STACK_BYTES)
            .build()
            .map_err(|e| Error::Internal(format!("starting {threads} scan threads: {e}")))?,
    );
    pools.insert(threads, Arc::clone(&p));
    Ok(p)
}

/// How long the calling thread, done with its share, polls for the
/// helpers to finish before it blocks. The helpers take items from the
/// same counter, so each is at most one item from done: polling covers
/// the common tail, and blocking (a futex wait, then a wake-up that takes
/// 20–50 µs on a virtual machine) is left for long items.
const TAIL_POLL: Duration = Duration::from_micros(200);

/// Runs `work` on `threads` workers at once: the calling thread is one of
/// them, the others come from a pool of `threads - 1` threads, so a query
/// waits for at most one wake-up and the caller never sits idle.
///
/// The caller, done with its share, polls for the helpers to finish (see
/// [`TAIL_POLL`]) before it leaves the scope.
fn on_workers<T: Send>(threads: usize, work: impl Fn() -> T + Sync) -> Result<Vec<T>> {
    if threads <= 1 {
        return Ok(vec![work()]);
    }
    let results: Mutex<Vec<T>> = Mutex::new(Vec::with_capacity(threads));
    let helpers_done = AtomicUsize::new(0);
    pool(threads - 1)?.in_place_scope(|scope| {
        for _ in 1..threads {
            scope.spawn(|_| {
                let r = work();
                results.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                helpers_done.fetch_add(1, Ordering::Release);
            });
        }
        let r = work();
        results.lock().unwrap_or_else(|e| e.into_inner()).push(r);
        let start = Instant::now();
        while helpers_done.load(Ordering::Acquire) < threads - 1 && start.elapsed() < TAIL_POLL {
            // Yields rather than spins, so that helpers outnumbering the
            // cores still get one.
            std::thread::yield_now();
        }
    });
    Ok(results.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// Folds `items` on `threads` workers: each worker takes the next item
/// from a shared counter (so uneven items balance out) and folds it into
/// its own accumulator, started once from `init()` (so group maps warm up
/// once per worker); the workers' accumulators are merged with `merge`.
pub(crate) fn fold_reduce<I: Sync, T: Send, S>(
    threads: usize,
    items: &[I],
    init: impl Fn() -> (T, S) + Sync,
    fold: impl Fn(T, &mut S, &I) -> Result<T> + Sync,
    merge: impl Fn(T, T) -> T,
) -> Result<T> {
    let threads = effective_threads(threads).min(items.len()).max(1);
    let next = AtomicUsize::new(0);
    let results = on_workers(threads, || -> Result<T> {
        let (mut acc, mut state) = init();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { return Ok(acc) };
            acc = fold(acc, &mut state, item)?;
        }
    })?;
    let mut out: Option<T> = None;
    for r in results {
        let r = r?;
        out = Some(match out {
            None => r,
            Some(a) => merge(a, r),
        });
    }
    out.ok_or_else(|| Error::Internal("a fold ran on no worker".into()))
}

/// Maps `items` on `threads` workers, keeping the results in item order.
pub(crate) fn map_collect<I: Sync, T: Send>(
    threads: usize,
    items: &[I],
    map: impl Fn(&I) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let threads = effective_threads(threads).min(items.len()).max(1);
    if threads <= 1 {
        return items.iter().map(map).collect();
    }
    let next = AtomicUsize::new(0);
    let parts = on_workers(threads, || -> Result<Vec<(usize, T)>> {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { return Ok(done) };
            done.push((i, map(item)?));
        }
    })?;
    let mut all: Vec<(usize, T)> = Vec::with_capacity(items.len());
    for p in parts {
        all.extend(p?);
    }
    all.sort_unstable_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, t)| t).collect())
}
