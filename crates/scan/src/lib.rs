//! quiverdb-scan (documentation below is completed with the crate)

mod error;
mod filter;
mod mutate;
mod ordered;
mod parallel;
mod predicate;
mod unordered;

pub use error::{Error, Result};
pub use predicate::{CmpOp, Predicate};
pub use mutate::{delete_where, matching_records, update_where};
pub use ordered::{SortKey, scan_order};
pub use unordered::scan;

use quiverdb_storage::TableSnapshot;

/// How a scan runs.
#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    /// Worker threads; 0 means the available parallelism.
    pub threads: usize,
    /// Stop after this many records.
    pub limit: Option<usize>,
    /// Scan only these shards (positions in the snapshot); all when `None`.
    pub shards: Option<Vec<usize>>,
    /// Ids buffered before a reducer's `stream` is called (1..=1024;
    /// 0 means 1,024): phase 1's buffer of sparse matches, and the ordered
    /// scan's run of one shard's consecutive ids. Tests set it tiny.
    pub id_buffer: usize,
}

impl ScanOptions {
    /// Sets the thread count (0 = available parallelism).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// Sets a limit.
    pub fn with_limit(mut self, limit: Option<usize>) -> Self {
        self.limit = limit;
        self
    }

    /// Sets the id buffer size (see [`ScanOptions::id_buffer`]).
    pub fn with_id_buffer(mut self, ids: usize) -> Self {
        self.id_buffer = ids;
        self
    }

    pub(crate) fn id_buffer(&self) -> usize {
        if self.id_buffer == 0 { quiverdb_mapreducer::LANES } else { self.id_buffer.min(quiverdb_mapreducer::LANES) }
    }

    /// Restricts the scan to some shards.
    pub fn with_shards(mut self, shards: Vec<usize>) -> Self {
        self.shards = Some(shards);
        self
    }

    pub(crate) fn shard_positions(&self, snapshot: &TableSnapshot) -> Vec<usize> {
        match &self.shards {
            Some(s) => s.iter().copied().filter(|&i| i < snapshot.num_shards()).collect(),
            None => (0..snapshot.num_shards()).collect(),
        }
    }
}
