//! quiverdb-scan: which rows a query reads, in which order, on how many
//! threads — the two scan paths of MemCP, over compressed shards.
//!
//! # Model
//!
//! ```text
//!   scan(snapshot, filter, kernel)            unordered (MemCP `scan`)
//!     per shard, in parallel:  phase 1  filter columns only, zone maps
//!                                       skip blocks, deletes removed
//!                              phase 2  ShardMapReducer(kernel).stream(..)
//!     per-worker accumulators merged (reduce2)
//!
//!   scan_order(snapshot, filter, order by (keys, offset), options (limit), kernel)
//!     per shard: top offset+limit (heap + zone-map pruning) or full sort
//!     global heap merge, ties by (shard, record id), runs of one shard's
//!     ids streamed through that shard's reducer
//!
//!   delete_where / update_where               one storage transaction each
//! ```
//!
//! A [`Predicate`] is compiled per shard against the encodings it meets:
//! bit-packed columns compare packed deltas, dictionary columns compare
//! codes (a range or a bitset), run-end columns test once per run, and
//! every main block is first checked against its zone map. Predicates
//! follow SQL's three-valued logic.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{Int64Array, RecordBatch, cast::AsArray, types::Int64Type};
//! use arrow_schema::{DataType, Field, Schema};
//! use quiverdb_storage::{Database, TableOptions};
//! use quiverdb_mapreducer::{AggFunc, Aggregate, AggregateKernel, AggregateSpec, MapExpr, Scalar};
//! use quiverdb_scan::{CmpOp, Predicate, ScanOptions, scan};
//!
//! let db = Database::new();
//! let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
//! let table = db.create_table("t", &schema, TableOptions::default())?;
//! table.append(&RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..10_000))])?)?;
//! table.rebuild()?;
//!
//! // SELECT SUM(v) FROM t WHERE v >= 9000
//! let snapshot = table.snapshot();
//! let spec = Arc::new(AggregateSpec::new(vec![], vec![Aggregate::new(AggFunc::Sum, MapExpr::col(0))], snapshot.schema())?);
//! let filter = Predicate::cmp(MapExpr::col(0), CmpOp::GtEq, Scalar::Int(9000));
//! let acc = scan(&snapshot, Some(&filter), &ScanOptions::default(), || AggregateKernel::new(spec.clone()), || spec.new_acc())?;
//! let sum = acc.finish()?.values[0].as_primitive::<Int64Type>().value(0);
//! assert_eq!(sum, (9000..10_000).sum::<i64>());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What this crate is not
//!
//! It knows no SQL: translating SQL or DataFusion plans into predicates,
//! map expressions and kernels is `quiverdb-server`'s job.

mod error;
mod estimate;
mod filter;
mod like;
mod mutate;
mod ordered;
mod parallel;
mod predicate;
mod unordered;

pub use error::{Error, Result};
pub use estimate::estimate_matches;
pub use like::LikePattern;
pub use mutate::{delete_where, matching_records, update_where};
pub use ordered::{OrderBy, SortKey, scan_order};
pub use parallel::THREAD_STACK_BYTES;
pub use predicate::{CmpOp, Predicate};
pub use unordered::{ScanCounts, ScanCursor, candidate_shards, scan, scan_counted};

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

    /// Sets the id buffer size (see the `id_buffer` field).
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
