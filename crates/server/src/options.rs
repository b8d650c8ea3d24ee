//! How a quiverdb session runs: its settings, shared by the session
//! builder and the catalog.

use quiverdb_storage::TableOptions;

use crate::provider::ScanSettings;

/// How a quiverdb session runs.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// DataFusion partitions per query (0 = the available parallelism);
    /// a scan splits a table's shards into this many groups.
    pub target_partitions: usize,
    /// Rows per batch (DataFusion's `batch_size`).
    pub batch_size: usize,
    /// Options of tables created through SQL.
    pub table_options: TableOptions,
    /// Scan settings.
    pub scan: ScanSettings,
    /// Bytes of memory all queries of the session may hold at once in
    /// DataFusion's operators (sorts, joins, hash aggregates); a query that
    /// needs more fails with a resources-exhausted error. `None`: no limit.
    /// Nothing spills to disk either way.
    pub memory_limit: Option<usize>,
    /// Bytes all tables together may hold (main storage, deltas, deletion
    /// bitmaps): an ingest, `INSERT` or `CREATE TABLE … AS` that would take
    /// them past it is refused with a resources-exhausted error and
    /// applies nothing; reads keep working. `None`: no limit.
    pub max_table_memory: Option<usize>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            target_partitions: 0,
            batch_size: 8192,
            table_options: TableOptions::default(),
            scan: ScanSettings::default(),
            memory_limit: None,
            max_table_memory: None,
        }
    }
}
