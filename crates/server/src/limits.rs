//! `--max-table-memory`: a bound on the bytes every table together holds
//! (main storage, deltas, deletion bitmaps), checked before writes add to
//! them.
//!
//! A write that would take the tables past the bound is refused with a
//! resources-exhausted error before anything of it is applied: a bulk
//! ingest by the Arrow bytes it sends; an `INSERT … SELECT` or `CREATE
//! TABLE … AS` batch by batch as its rows arrive (its transaction rolls
//! back). Reads, deletes and drops keep working, so a full database can be
//! queried and made smaller. The incoming rows count at their Arrow size,
//! which the delta holds them at until a rebuild compresses them.

use std::sync::Arc;

use datafusion::error::DataFusionError;
use datafusion::prelude::SessionConfig;
use quiverdb_storage::Database;

/// The bound, kept in the session's configuration.
#[derive(Debug)]
pub(crate) struct TableMemoryLimit {
    db: Database,
    limit: usize,
}

impl TableMemoryLimit {
    pub(crate) fn new(db: Database, limit: usize) -> Self {
        Self { db, limit }
    }

    /// The bound of a session, if it has one.
    pub(crate) fn of(config: &SessionConfig) -> Option<Arc<Self>> {
        config.get_extension::<Self>()
    }

    /// A budget for one write, starting from what the tables hold now.
    pub(crate) fn budget(&self) -> WriteBudget {
        WriteBudget { used: self.db.table_bytes(), limit: self.limit }
    }
}

/// What one write may still add.
#[derive(Debug)]
pub(crate) struct WriteBudget {
    used: usize,
    limit: usize,
}

impl WriteBudget {
    /// Counts `bytes` more; an error once they pass the bound.
    pub(crate) fn add(&mut self, bytes: usize) -> Result<(), DataFusionError> {
        self.used = self.used.saturating_add(bytes);
        if self.used > self.limit {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "the write would take table data to {} bytes, past --max-table-memory ({} bytes); nothing of it was \
                 applied (drop or delete data, or raise the limit)",
                self.used, self.limit
            )));
        }
        Ok(())
    }
}
