//! The catalog: named tables and the background rebuild worker they share.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use arrow_schema::Schema;

use crate::error::{Error, Result};
use crate::rebuild::RebuildQueue;
use crate::table::{Table, TableOptions};
use crate::types::TableSchema;

/// A quiverdb database: a catalog of tables. Cheap to clone; clones share it.
#[derive(Debug, Clone)]
pub struct Database {
    inner: Arc<DbInner>,
}

#[derive(Debug)]
struct DbInner {
    tables: RwLock<BTreeMap<String, Table>>,
    /// Bumped whenever a table is created, replaced or dropped.
    catalog_version: AtomicU64,
    rebuilds: RebuildQueue,
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
            }),
        }
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
        tables.insert(name.into(), table.clone());
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        Ok(table)
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
        let out = fill(&table)?;
        let mut tables = self.inner.tables.write().map_err(|_| poisoned())?;
        if !replace && tables.contains_key(name) {
            return Err(Error::TableExists(name.into()).into());
        }
        if let Some(old) = tables.insert(name.into(), table) {
            let _writer = old.inner.writer.lock().map_err(|_| poisoned())?;
            old.inner.dropped.store(true, Ordering::Release);
        }
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
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
        let table = self
            .inner
            .tables
            .write()
            .map_err(|_| poisoned())?
            .remove(name)
            .ok_or_else(|| Error::TableNotFound(name.into()))?;
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        // Take the writer lock so no transaction is half-way through.
        let _writer = table.inner.writer.lock().map_err(|_| poisoned())?;
        table.inner.dropped.store(true, Ordering::Release);
        Ok(())
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
