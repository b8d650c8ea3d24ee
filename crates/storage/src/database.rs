//! The catalog: named tables and the background rebuild worker they share,
//! in memory or backed by a data directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use arrow_schema::Schema;

use crate::durable::io::{FileSystem, StorageIo};
use crate::durable::lock::DirLock;
use crate::durable::record::LogRecord;
use crate::durable::store::{self, Durable, DurableOptions, RecoveryReport};
use crate::durable::wal::LogStats;
use crate::error::{Error, Result};
use crate::rebuild::RebuildQueue;
use crate::table::{Table, TableLog, TableOptions};
use crate::types::TableSchema;

/// A quiverdb database: a catalog of tables. Cheap to clone; clones share it.
///
/// [`Database::new`] keeps everything in memory; [`Database::open`] keeps
/// it in a data directory, logging every change before acknowledging it.
#[derive(Debug, Clone)]
pub struct Database {
    pub(crate) inner: Arc<DbInner>,
}

#[derive(Debug)]
pub(crate) struct DbInner {
    pub(crate) tables: RwLock<BTreeMap<String, Table>>,
    /// Bumped whenever a table is created, replaced or dropped.
    catalog_version: AtomicU64,
    pub(crate) rebuilds: RebuildQueue,
    /// Set once a data directory is open (after recovery).
    pub(crate) durable: OnceLock<Durable>,
}

impl Default for Database {
    fn default() -> Self {
        Self::new()
    }
}

impl Database {
    /// An empty in-memory database with its background rebuild worker.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(DbInner {
                tables: RwLock::new(BTreeMap::new()),
                catalog_version: AtomicU64::new(0),
                rebuilds: RebuildQueue::start(),
                durable: OnceLock::new(),
            }),
        }
    }

    /// Opens the data directory `dir` (creating it if needed): takes its
    /// lock (failing with [`Error::DirectoryInUse`] if another process or
    /// another open database has it), loads the last checkpoint and replays
    /// the log after it. Damage before the end of the log, or in the
    /// catalog or a shard file, fails with [`Error::Corrupt`] naming the
    /// file and offset; an incomplete last write (a crash mid-write) is
    /// dropped and reported in [`Database::recovery`].
    pub fn open(dir: impl AsRef<Path>, options: DurableOptions) -> Result<Self> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Io { path: dir.display().to_string(), message: e.to_string() })?;
        let lock = DirLock::acquire(dir)?;
        store::open(Arc::new(FileSystem), dir, options, Some(lock))
    }

    /// [`Database::open`] through `io` (for tests that inject faults), with
    /// no directory lock.
    pub fn open_with_io(io: Arc<dyn StorageIo>, dir: impl AsRef<Path>, options: DurableOptions) -> Result<Self> {
        store::open(io, dir.as_ref(), options, None)
    }

    /// True for a database backed by a data directory.
    pub fn is_durable(&self) -> bool {
        self.durable().is_some()
    }

    /// The data directory, for a durable database.
    pub fn data_dir(&self) -> Option<&Path> {
        self.durable().map(Durable::dir)
    }

    /// What the write-ahead log has done since the database was opened
    /// (`None` in memory).
    pub fn log_stats(&self) -> Option<LogStats> {
        self.durable().and_then(|d| d.wal.stats().ok())
    }

    /// What opening the data directory found (`None` in memory).
    pub fn recovery(&self) -> Option<&RecoveryReport> {
        self.durable().map(Durable::report)
    }

    /// Writes a checkpoint: every table's current state, so that reopening
    /// reads it instead of replaying the log, which is then cut back. A
    /// no-op in memory. A failure makes the database read-only.
    pub fn checkpoint(&self) -> Result<()> {
        match self.durable() {
            Some(durable) => store::checkpoint(self, durable),
            None => Ok(()),
        }
    }

    /// Syncs the log and writes a checkpoint, so the next open is fast.
    /// The directory stays locked until every clone of this database and
    /// every handle to its tables is dropped.
    pub fn close(self) -> Result<()> {
        self.wait_for_background_rebuilds();
        self.checkpoint()
    }

    fn durable(&self) -> Option<&Durable> {
        self.inner.durable.get()
    }

    fn tables(&self) -> Result<std::sync::RwLockReadGuard<'_, BTreeMap<String, Table>>> {
        self.inner.tables.read().map_err(|_| poisoned())
    }

    /// Creates a table. Fails if the name is taken, the schema has
    /// unsupported types or duplicate columns, or an option is out of range.
    pub fn create_table(&self, name: &str, schema: &Schema, options: TableOptions) -> Result<Table> {
        if name.is_empty() {
            return Err(Error::InvalidSchema("a table name cannot be empty".into()));
        }
        options.validate()?;
        let key: Vec<&str> = options.primary_key.iter().map(String::as_str).collect();
        let schema = TableSchema::try_new(schema, &key)?;
        let mut tables = self.inner.tables.write().map_err(|_| poisoned())?;
        if tables.contains_key(name) {
            return Err(Error::TableExists(name.into()));
        }
        let table = Table::new(name.into(), schema, options, self.inner.rebuilds.clone());
        let lsn = self.log_creation(&table, false)?;
        tables.insert(name.into(), table.clone());
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        drop(tables);
        self.commit(lsn)?;
        Ok(table)
    }

    /// For a durable database, logs the creation of `table` with what its
    /// fill captured and switches it to the log; the LSN to commit. Called
    /// with the catalog lock held.
    fn log_creation(&self, table: &Table, replace: bool) -> Result<Option<u64>> {
        let Some(durable) = self.durable() else { return Ok(None) };
        let mut writer = table.inner.writer.lock().map_err(|_| poisoned())?;
        let fill = match std::mem::take(&mut writer.log) {
            TableLog::Capture(records) => records,
            _ => Vec::new(),
        };
        let record = LogRecord::CreateTable {
            name: table.name().into(),
            schema: Arc::clone(table.arrow_schema()),
            options: table.options().clone(),
            replace,
            fill,
        };
        let lsn = durable.append(&record)?;
        writer.log = TableLog::Wal(durable.wal.clone());
        writer.uid = lsn;
        Ok(Some(lsn))
    }

    /// Waits until the change logged at `lsn` is durable.
    fn commit(&self, lsn: Option<u64>) -> Result<()> {
        match (self.durable(), lsn) {
            (Some(durable), Some(lsn)) => durable.wal.commit(lsn),
            _ => Ok(()),
        }
    }

    /// Creates a table, fills it through `fill` while no one else can see
    /// it, and then publishes it under `name` in one step, replacing a
    /// table of that name if `replace` is set (handles to the replaced
    /// table behave as after [`Database::drop_table`]). If `fill` fails, or
    /// the name is taken and `replace` is not set, nothing changes.
    pub fn create_table_with<R, E: From<Error>>(
        &self,
        name: &str,
        schema: &Schema,
        options: TableOptions,
        replace: bool,
        fill: impl FnOnce(&Table) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        if name.is_empty() {
            return Err(Error::InvalidSchema("a table name cannot be empty".into()).into());
        }
        if !replace && self.contains_table(name) {
            return Err(Error::TableExists(name.into()).into());
        }
        options.validate()?;
        let key: Vec<&str> = options.primary_key.iter().map(String::as_str).collect();
        let schema = TableSchema::try_new(schema, &key)?;
        let table = Table::new(name.into(), schema, options, self.inner.rebuilds.clone());
        if self.durable().is_some() {
            // Its changes are logged with its creation.
            table.inner.writer.lock().map_err(|_| poisoned())?.log = TableLog::Capture(Vec::new());
        }
        let out = fill(&table)?;
        let mut tables = self.inner.tables.write().map_err(|_| poisoned())?;
        let old = tables.get(name).cloned();
        if !replace && old.is_some() {
            return Err(Error::TableExists(name.into()).into());
        }
        // Hold the replaced table's writer lock so none of its changes is
        // logged after the creation that replaces it.
        let old_writer = match &old {
            Some(old) => Some(old.inner.writer.lock().map_err(|_| poisoned())?),
            None => None,
        };
        let lsn = self.log_creation(&table, replace)?;
        if let Some(old) = &old {
            old.inner.dropped.store(true, Ordering::Release);
        }
        drop(old_writer);
        tables.insert(name.into(), table);
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        drop(tables);
        self.commit(lsn)?;
        Ok(out)
    }

    /// The table named `name`.
    pub fn table(&self, name: &str) -> Result<Table> {
        self.tables()?.get(name).cloned().ok_or_else(|| Error::TableNotFound(name.into()))
    }

    /// True if a table named `name` exists.
    pub fn contains_table(&self, name: &str) -> bool {
        self.tables().is_ok_and(|t| t.contains_key(name))
    }

    /// Names of all tables, sorted.
    pub fn table_names(&self) -> Vec<String> {
        self.tables().map(|t| t.keys().cloned().collect()).unwrap_or_default()
    }

    /// Drops a table. Handles to it still read their snapshots; writes
    /// through them fail with [`Error::TableNotFound`].
    pub fn drop_table(&self, name: &str) -> Result<()> {
        let mut tables = self.inner.tables.write().map_err(|_| poisoned())?;
        let table = tables.get(name).cloned().ok_or_else(|| Error::TableNotFound(name.into()))?;
        // Take the writer lock so no transaction is half-way through (and
        // none is logged after the drop).
        let writer = table.inner.writer.lock().map_err(|_| poisoned())?;
        let lsn = match self.durable() {
            Some(durable) => Some(durable.append(&LogRecord::DropTable { name: name.into() })?),
            None => None,
        };
        table.inner.dropped.store(true, Ordering::Release);
        drop(writer);
        tables.remove(name);
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        drop(tables);
        self.commit(lsn)
    }

    /// A number that changes whenever a table is created, replaced or
    /// dropped (never when rows change): a plan that resolved table names
    /// at one version is still valid while the version stays the same.
    pub fn catalog_version(&self) -> u64 {
        self.inner.catalog_version.load(Ordering::Acquire)
    }

    /// Rebuilds every table (see [`Table::rebuild`]) and returns when done.
    pub fn rebuild_all(&self) -> Result<()> {
        let tables: Vec<Table> = self.tables()?.values().cloned().collect();
        tables.iter().try_for_each(Table::rebuild)
    }

    /// Blocks until no background rebuild is queued or running.
    pub fn wait_for_background_rebuilds(&self) {
        self.inner.rebuilds.wait_idle();
    }
}

fn poisoned() -> Error {
    Error::Internal("a thread panicked while holding the catalog lock".into())
}
