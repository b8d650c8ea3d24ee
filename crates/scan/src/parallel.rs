//! Running per-shard work on a thread pool of a chosen size.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rayon::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::error::{Error, Result};

/// The number of threads `requested` means (0 = available parallelism).
pub(crate) fn effective_threads(requested: usize) -> usize {
    if requested == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { requested }
}

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
            .build()
            .map_err(|e| Error::Internal(format!("starting {threads} scan threads: {e}")))?,
    );
    pools.insert(threads, Arc::clone(&p));
    Ok(p)
}

/// Maps `items` (in parallel on `threads` threads; inline with one) and
/// merges the results; `None` when there are no items.
pub(crate) fn map_reduce<I: Sync, T: Send>(
    threads: usize,
    items: &[I],
    map: impl Fn(&I) -> Result<T> + Sync,
    merge: impl Fn(T, T) -> T + Sync,
) -> Result<Option<T>> {
    let threads = effective_threads(threads);
    if threads <= 1 || items.len() <= 1 {
        let mut acc: Option<T> = None;
        for item in items {
            let r = map(item)?;
            acc = Some(match acc {
                None => r,
                Some(a) => merge(a, r),
            });
        }
        return Ok(acc);
    }
    pool(threads)?
        .install(|| items.par_iter().map(&map).try_reduce_with(|a, b| Ok(merge(a, b))))
        .transpose()
}

/// Maps `items` (in parallel on `threads` threads; inline with one),
/// keeping the results in item order.
pub(crate) fn map_collect<I: Sync, T: Send>(threads: usize, items: &[I], map: impl Fn(&I) -> Result<T> + Sync) -> Result<Vec<T>> {
    let threads = effective_threads(threads);
    if threads <= 1 || items.len() <= 1 {
        return items.iter().map(map).collect();
    }
    pool(threads)?.install(|| items.par_iter().map(&map).collect())
}
