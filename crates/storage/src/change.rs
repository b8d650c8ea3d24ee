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
    /// removed first; then its appends (the parts it `staged` in the log
    /// ahead of its commit, then `appends`), and its deletes (each as
    /// shard, shard version and record ids of the rows it started from).
    Commit { truncate: bool, staged: Option<Staged>, appends: Vec<RecordBatch>, deletes: Vec<ShardDeletes> },
    /// A shard rebuild was published: it was built from shard version
    /// `version` with `delta_len` delta rows and the ids in `deleted` dead.
    ///
    /// Deletes name record ids, which a rebuild renumbers; replaying the
    /// rebuild at the same place renumbers the rows exactly as the original
    /// did, so every delete logged after it names the same rows.
    Rebuild { shard: u64, version: u64, delta_len: u32, deleted: Vec<RecId> },
}

/// The appends a transaction wrote to the log ahead of its commit
/// ([`ChangeLog::stage`]): the transaction's id in the log (its first
/// part's position), and how many parts and rows it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Staged {
    pub(crate) txn: u64,
    pub(crate) parts: u64,
    pub(crate) rows: u64,
}

/// An open transaction's staged appends: what its commit names, and what
/// keeps the log from removing the parts before that commit is logged.
pub(crate) struct Staging {
    pub(crate) staged: Staged,
    /// The log's own (see [`ChangeLog::stage`]).
    pub(crate) hold: Box<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging").field("staged", &self.staged).finish_non_exhaustive()
    }
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

    /// Writes `batches`, appended to table `table` by a transaction not
    /// committed yet, to the log now (not waiting for a sync), so a bulk
    /// load's log is written while its rows still arrive rather than all
    /// at its commit, and its batches need not be held until then.
    /// `staging` is `None` before the transaction's first part; its
    /// commit names what it ends as. Replay applies the parts only with
    /// the commit naming them: a transaction that never commits leaves
    /// parts that nothing applies.
    fn stage(&self, table: &str, staging: &mut Option<Staging>, batches: &[RecordBatch]) -> Result<()>;

    /// The bytes of appends a transaction holds before it stages them.
    fn stage_bytes(&self) -> usize;

    /// Fails with [`crate::Error::ReadOnly`] once the log refuses changes
    /// (after a failed write), so a transaction fails before it begins.
    fn check_writable(&self) -> Result<()>;
}

/// Where a table's changes go.
#[derive(Debug, Default)]
pub(crate) enum TableLog {
    /// Not logged: an in-memory database, or a table being replayed.
    #[default]
    Off,
    /// Kept until the table is published, then logged with its creation
    /// (see [`crate::Database::create_table_with`]); bulk appends are
    /// staged in `log` meanwhile, and `holds` keeps their parts until the
    /// creation is logged.
    Capture { changes: Vec<TableChange>, log: Arc<dyn ChangeLog>, holds: Vec<Staging> },
    /// Written to a log.
    On(Arc<dyn ChangeLog>),
}

impl TableLog {
    /// True unless changes are dropped.
    pub(crate) fn is_on(&self) -> bool {
        !matches!(self, TableLog::Off)
    }

    /// Logs `change` of table `table` (with the staging of the appends it
    /// names, if any); for a log, the position to commit before
    /// acknowledging.
    pub(crate) fn write(&mut self, table: &str, change: TableChange, staging: Option<Staging>) -> Result<Option<u64>> {
        match self {
            TableLog::Off => Ok(None),
            TableLog::Capture { changes, holds, .. } => {
                changes.push(change);
                holds.extend(staging);
                Ok(None)
            }
            // Once the commit is appended, its parts need no hold.
            TableLog::On(log) => log.append(table, &change).map(Some),
        }
    }

    /// Stages `batches` of table `table` in the log (see [`ChangeLog::stage`]).
    pub(crate) fn stage(&self, table: &str, staging: &mut Option<Staging>, batches: &[RecordBatch]) -> Result<()> {
        match self {
            TableLog::Off => Err(crate::error::Error::Internal("staged appends of a table that logs nothing".into())),
            TableLog::Capture { log, .. } | TableLog::On(log) => log.stage(table, staging, batches),
        }
    }

    /// The bytes of appends a transaction holds before it stages them
    /// ([`ChangeLog::stage_bytes`]).
    pub(crate) fn stage_bytes(&self) -> usize {
        match self {
            TableLog::Off => usize::MAX,
            TableLog::Capture { log, .. } | TableLog::On(log) => log.stage_bytes(),
        }
    }

    /// Fails once the log refuses changes ([`ChangeLog::check_writable`]).
    pub(crate) fn check_writable(&self) -> Result<()> {
        match self {
            TableLog::Off => Ok(()),
            TableLog::Capture { log, .. } | TableLog::On(log) => log.check_writable(),
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
