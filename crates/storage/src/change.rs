//! A table's changes as they are logged, and the narrow handle a table
//! logs them through.
//!
//! ```text
//!   Transaction::commit ──▶ TableChange::Commit  ─┐
//!   rebuild publish     ──▶ TableChange::Rebuild ─┴─▶ TableLog ──▶ off (in memory)
//!                                                               ├─▶ captured (a table being filled)
//!                                                               └─▶ dyn ChangeLog (the write-ahead log)
//! ```
//!
//! The table knows nothing of files or frames: a durable database hands
//! each table a [`ChangeLog`] (its write-ahead log), and replay turns the
//! logged changes back into the same calls.

use std::sync::Arc;

use arrow_array::RecordBatch;

use crate::error::Result;
use crate::types::RecId;

/// One published change to a table's rows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TableChange {
    /// One transaction: if `truncate`, every row it started from was
    /// removed first; then its appends, and its deletes (each as shard,
    /// shard version and record ids of the rows it started from).
    Commit { truncate: bool, appends: Vec<RecordBatch>, deletes: Vec<ShardDeletes> },
    /// A shard rebuild was published: it was built from shard version
    /// `version` with `delta_len` delta rows and the ids in `deleted` dead.
    ///
    /// Deletes name record ids, which a rebuild renumbers; replaying the
    /// rebuild at the same place renumbers the rows exactly as the original
    /// did, so every delete logged after it names the same rows.
    Rebuild { shard: u64, version: u64, delta_len: u32, deleted: Vec<RecId> },
}

/// Record ids deleted from one shard version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardDeletes {
    pub(crate) shard: u64,
    pub(crate) version: u64,
    pub(crate) ids: Vec<RecId>,
}

/// A log a table writes its changes to, in the order it publishes them
/// (changes are logged under the table's writer lock).
pub(crate) trait ChangeLog: std::fmt::Debug + Send + Sync {
    /// Appends `change` to table `table`; the log position to wait for.
    fn append(&self, table: &str, change: &TableChange) -> Result<u64>;

    /// Waits until everything up to `position` is as durable as the log
    /// promises.
    fn commit(&self, position: u64) -> Result<()>;
}

/// Where a table's changes go.
#[derive(Debug, Default)]
pub(crate) enum TableLog {
    /// Not logged: an in-memory database, or a table being replayed.
    #[default]
    Off,
    /// Kept until the table is published, then logged with its creation
    /// (see [`crate::Database::create_table_with`]).
    Capture(Vec<TableChange>),
    /// Written to a log.
    On(Arc<dyn ChangeLog>),
}

impl TableLog {
    /// True unless changes are dropped.
    pub(crate) fn is_on(&self) -> bool {
        !matches!(self, TableLog::Off)
    }

    /// Logs `change` of table `table`; for a log, the position to commit
    /// before acknowledging.
    pub(crate) fn write(&mut self, table: &str, change: TableChange) -> Result<Option<u64>> {
        match self {
            TableLog::Off => Ok(None),
            TableLog::Capture(changes) => {
                changes.push(change);
                Ok(None)
            }
            TableLog::On(log) => log.append(table, &change).map(Some),
        }
    }

    /// The log a position from [`TableLog::write`] is committed in.
    pub(crate) fn log(&self) -> Option<&Arc<dyn ChangeLog>> {
        match self {
            TableLog::On(log) => Some(log),
            _ => None,
        }
    }
}
