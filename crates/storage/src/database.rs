//! The catalog: named tables and the background worker they share, in
//! memory or backed by a data directory.
//!
//! ```text
//!   Database ── tables: RwLock<name → Table>     creates, drops, lookups
//!            ├─ background worker                shard rebuilds
//!            └─ durable (a data directory)       what recovery handed over:
//!                                                the log every table writes
//!                                                to, checkpoints
//! ```
//!
//! The catalog sits on top of storage: opening a data directory recovers
//! its tables (`durable::store::recover`) and the catalog composes them.

use std::collections::{BTreeMap, BTreeSet};

use crate::names::{Alteration, ColumnChange, altered, check_new_schema, schema_contents};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::Duration;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema};

use crate::background::Background;
use crate::change::TableLog;
use crate::durable::io::{FileSystem, StorageIo};
use crate::durable::lock::DirLock;
use crate::durable::record::LogRecord;
use crate::durable::store::{self, Cut, Durable, DurableOptions, RecoveryReport, TableCut};
use crate::durable::wal::LogStats;
use crate::error::{Error, Result};
use crate::rebuild;
use crate::state::TableOptions;
use crate::table::Table;

/// How often the checkpoint thread looks at the log's growth.
const CHECKPOINT_POLL: Duration = Duration::from_millis(100);

/// A quiverdb database: a catalog of tables. Cheap to clone; clones share it.
///
/// [`Database::new`] keeps everything in memory; [`Database::open`] keeps
/// it in a data directory, logging every change before acknowledging it.
#[derive(Debug, Clone)]
pub struct Database {
    inner: Arc<DbInner>,
}

/// Everything with a name: tables and views share one namespace. A table
/// or view in a schema is named `schema.name` (see [`schema_of`]).
#[derive(Debug, Default)]
struct Catalog {
    tables: BTreeMap<String, Table>,
    /// Views: name and definition text (which storage does not interpret).
    views: BTreeMap<String, String>,
    /// Schemas besides the default one.
    schemas: BTreeSet<String>,
}

impl Catalog {
    fn contains(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.views.contains_key(name)
    }
}

#[derive(Debug, Default)]
struct DbInner {
    catalog: RwLock<Catalog>,
    /// Bumped whenever a table or view is created, replaced or dropped.
    catalog_version: AtomicU64,
    background: Background,
    /// Set once a data directory is open (after recovery).
    durable: OnceLock<Durable>,
}

impl Default for Database {
    fn default() -> Self {
        Self::new()
    }
}

impl Database {
    /// An empty in-memory database. Its background worker (one thread)
    /// starts with the first background rebuild.
    pub fn new() -> Self {
        Self { inner: Arc::new(DbInner::default()) }
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
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let lock = DirLock::acquire(dir)?;
        Self::open_through(Arc::new(FileSystem), dir, options, Some(lock))
    }

    /// Opens `dir` through `io`, holding `lock` while it is open.
    pub(crate) fn open_through(
        io: Arc<dyn StorageIo>,
        dir: &Path,
        options: DurableOptions,
        lock: Option<DirLock>,
    ) -> Result<Self> {
        let mut inner = DbInner::default();
        inner.background.pause(true);
        let recovered = store::recover(io, dir, options, lock, &inner.background)?;
        inner.background.pause(false);
        for table in recovered.tables.values() {
            if table.options().background_rebuild {
                for shard in table.core().state().shards.iter() {
                    if table.options().needs_rebuild(shard) {
                        rebuild::schedule(table.core(), &shard.data);
                    } else if shard.delta_len > 0 {
                        rebuild::settle(table.core(), &shard.data);
                    }
                }
            }
        }
        *inner.catalog.get_mut().map_err(|_| poisoned())? =
            Catalog { tables: recovered.tables, views: recovered.views, schemas: recovered.schemas };
        inner.durable.set(recovered.durable).map_err(|_| Error::Internal("a database was opened twice".into()))?;
        let db = Self { inner: Arc::new(inner) };
        if options.checkpoint_bytes > 0 {
            let weak = Arc::downgrade(&db.inner);
            std::thread::Builder::new()
                .name("quiverdb-checkpoint".into())
                .spawn(move || background_checkpoints(&weak, options.checkpoint_bytes))
                .map_err(|e| Error::io(dir, e))?;
        }
        Ok(db)
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
        self.durable().and_then(|d| d.log_stats().ok())
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
            Some(durable) => durable.checkpoint(|durable| self.cut(durable)),
            None => Ok(()),
        }
    }

    /// Syncs the log and writes a checkpoint, so the next open is fast.
    /// The directory stays locked until every clone of this database and
    /// every handle to its tables is dropped.
    pub fn close(self) -> Result<()> {
        // No rebuild starts after the checkpoint (one settling a delta
        // would otherwise log behind it).
        self.inner.background.pause(true);
        self.wait_for_background_rebuilds();
        self.checkpoint()
    }

    /// The durable side, for test support ([`crate::testing`]).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn durable_for_tests(&self) -> Option<&Durable> {
        self.durable()
    }

    fn durable(&self) -> Option<&Durable> {
        self.inner.durable.get()
    }

    fn catalog(&self) -> Result<RwLockReadGuard<'_, Catalog>> {
        self.inner.catalog.read().map_err(|_| poisoned())
    }

    fn catalog_mut(&self) -> Result<RwLockWriteGuard<'_, Catalog>> {
        self.inner.catalog.write().map_err(|_| poisoned())
    }

    /// A consistent cut: every table's state and the log position they
    /// reflect. Creates and drops log under the catalog lock, commits and
    /// rebuilds under their table's writer lock; holding all of them,
    /// nothing can log.
    fn cut(&self, durable: &Durable) -> Result<Cut> {
        let catalog = self.catalog()?;
        let mut guards = Vec::with_capacity(catalog.tables.len());
        let mut tables = Vec::with_capacity(catalog.tables.len());
        for table in catalog.tables.values() {
            let writer = table.core().lock()?;
            tables.push(TableCut {
                name: table.name().to_string(),
                uid: writer.uid(),
                schema: Arc::clone(table.arrow_schema()),
                options: table.options().clone(),
                next_shard_id: writer.next_shard_id(),
                state: table.core().latest(),
            });
            guards.push(writer);
        }
        let (lsn, log_bytes) = durable.log_position()?;
        let views = catalog.views.iter().map(|(n, d)| (n.clone(), d.clone())).collect();
        let schemas = catalog.schemas.iter().cloned().collect();
        Ok(Cut { lsn, log_bytes, tables, views, schemas })
    }

    /// Creates a table. Fails if the name is taken, the schema has
    /// unsupported types or duplicate columns, or an option is out of range.
    pub fn create_table(&self, name: &str, schema: &Schema, options: TableOptions) -> Result<Table> {
        let table = Table::create(name, schema, options, self.inner.background.clone())?;
        let mut catalog = self.catalog_mut()?;
        if catalog.contains(name) {
            return Err(Error::TableExists(name.into()));
        }
        let lsn = self.log_creation(&table, false)?;
        self.commit(lsn)?;
        catalog.tables.insert(name.into(), table.clone());
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        Ok(table)
    }

    /// For a durable database, logs the creation of `table` with what its
    /// fill captured and switches it to the log; the log position to
    /// commit. Called with the catalog lock held.
    fn log_creation(&self, table: &Table, replace: bool) -> Result<Option<u64>> {
        let Some(durable) = self.durable() else { return Ok(None) };
        let mut writer = table.core().lock()?;
        let (fill, holds) = match writer.replace_log(TableLog::Off) {
            TableLog::Capture { changes, holds, .. } => (changes, holds),
            _ => (Vec::new(), Vec::new()),
        };
        let record = LogRecord::CreateTable {
            name: table.name().into(),
            schema: Arc::clone(table.arrow_schema()),
            options: table.options().clone(),
            replace,
            fill,
        };
        let lsn = durable.append(&record)?;
        // The creation names the parts its fill staged: they need no hold now.
        drop(holds);
        writer.replace_log(TableLog::On(durable.change_log()));
        writer.set_uid(lsn);
        Ok(Some(lsn))
    }

    /// Waits until the change logged at `lsn` is durable. Catalog changes
    /// wait holding the catalog lock and apply only after it: a change the
    /// log failed to make durable is never seen.
    fn commit(&self, lsn: Option<u64>) -> Result<()> {
        match (self.durable(), lsn) {
            (Some(durable), Some(lsn)) => durable.commit(lsn),
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
        if !name.is_empty() && self.catalog()?.views.contains_key(name) {
            return Err(Error::TableExists(name.into()).into());
        }
        if !name.is_empty() && !replace && self.contains_table(name) {
            return Err(Error::TableExists(name.into()).into());
        }
        let table = Table::create(name, schema, options, self.inner.background.clone())?;
        if let Some(durable) = self.durable() {
            // Its changes are logged with its creation.
            let capture = TableLog::Capture { changes: Vec::new(), log: durable.change_log(), holds: Vec::new() };
            table.core().lock()?.replace_log(capture);
        }
        let out = fill(&table)?;
        let mut catalog = self.catalog_mut()?;
        let old = catalog.tables.get(name).cloned();
        if (!replace && old.is_some()) || catalog.views.contains_key(name) {
            return Err(Error::TableExists(name.into()).into());
        }
        // Hold the replaced table's writer lock so none of its changes is
        // logged after the creation that replaces it.
        let old_writer = match &old {
            Some(old) => Some(old.core().lock()?),
            None => None,
        };
        let lsn = self.log_creation(&table, replace)?;
        self.commit(lsn)?;
        if let Some(mut writer) = old_writer {
            writer.mark_dropped();
        }
        catalog.tables.insert(name.into(), table);
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        Ok(out)
    }

    /// The table named `name`.
    pub fn table(&self, name: &str) -> Result<Table> {
        self.catalog()?.tables.get(name).cloned().ok_or_else(|| Error::TableNotFound(name.into()))
    }

    /// True if a table named `name` exists.
    pub fn contains_table(&self, name: &str) -> bool {
        self.catalog().is_ok_and(|c| c.tables.contains_key(name))
    }

    /// Names of all tables, sorted.
    pub fn table_names(&self) -> Vec<String> {
        self.catalog().map(|c| c.tables.keys().cloned().collect()).unwrap_or_default()
    }

    /// Creates view `name` with `definition` (its text: storage keeps it,
    /// logged and checkpointed like a table's definition, and does not
    /// interpret it), replacing a view of that name if `replace` is set.
    /// Fails if a table has the name, or a view does and `replace` is not
    /// set.
    pub fn create_view(&self, name: &str, definition: &str, replace: bool) -> Result<()> {
        if name.is_empty() {
            return Err(Error::InvalidSchema("a view name cannot be empty".into()));
        }
        let mut catalog = self.catalog_mut()?;
        if catalog.tables.contains_key(name) || (!replace && catalog.views.contains_key(name)) {
            return Err(Error::TableExists(name.into()));
        }
        let lsn = match self.durable() {
            Some(durable) => {
                let record = LogRecord::CreateView { name: name.into(), definition: definition.into(), replace };
                Some(durable.append(&record)?)
            }
            None => None,
        };
        self.commit(lsn)?;
        catalog.views.insert(name.into(), definition.into());
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Drops view `name`.
    pub fn drop_view(&self, name: &str) -> Result<()> {
        let mut catalog = self.catalog_mut()?;
        if !catalog.views.contains_key(name) {
            return Err(Error::ViewNotFound(name.into()));
        }
        let lsn = match self.durable() {
            Some(durable) => Some(durable.append(&LogRecord::DropView { name: name.into() })?),
            None => None,
        };
        self.commit(lsn)?;
        catalog.views.remove(name);
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// The definition of view `name`, if there is one.
    pub fn view(&self, name: &str) -> Option<String> {
        self.catalog().ok().and_then(|c| c.views.get(name).cloned())
    }

    /// Names of all views, sorted.
    pub fn view_names(&self) -> Vec<String> {
        self.catalog().map(|c| c.views.keys().cloned().collect()).unwrap_or_default()
    }

    /// Creates schema `name`: afterwards, tables and views named
    /// `name.something` are in it. Fails if the schema exists, the name is
    /// empty or has a dot, or a table or view name already starts with
    /// `name.`.
    pub fn create_schema(&self, name: &str) -> Result<()> {
        let mut catalog = self.catalog_mut()?;
        let names = catalog.tables.keys().chain(catalog.views.keys());
        check_new_schema(name, &catalog.schemas, names)?;
        let lsn = match self.durable() {
            Some(durable) => Some(durable.append(&LogRecord::CreateSchema { name: name.into() })?),
            None => None,
        };
        self.commit(lsn)?;
        catalog.schemas.insert(name.into());
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Drops schema `name`, and with `cascade` its tables and views, all
    /// at once; without `cascade` a schema that holds any is refused.
    pub fn drop_schema(&self, name: &str, cascade: bool) -> Result<()> {
        let mut catalog = self.catalog_mut()?;
        if !catalog.schemas.contains(name) {
            return Err(Error::SchemaNotFound(name.into()));
        }
        let doomed = schema_contents(name, cascade, catalog.tables.keys().chain(catalog.views.keys()))?;
        let tables: Vec<Table> = doomed.iter().filter_map(|n| catalog.tables.get(n).cloned()).collect();
        // Take their writer locks so no transaction is half-way through.
        let mut writers = tables.iter().map(|t| t.core().lock()).collect::<Result<Vec<_>>>()?;
        let lsn = match self.durable() {
            Some(durable) => Some(durable.append(&LogRecord::DropSchema { name: name.into(), cascade })?),
            None => None,
        };
        self.commit(lsn)?;
        writers.iter_mut().for_each(|w| w.mark_dropped());
        drop(writers);
        for n in &doomed {
            catalog.tables.remove(n);
            catalog.views.remove(n);
        }
        catalog.schemas.remove(name);
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Changes the definition of table `name` without touching its rows
    /// (see [`Alteration`]): one logged step. Handles to the table as it
    /// was still read their snapshots; writes through them fail with
    /// [`Error::TableNotFound`].
    pub fn alter_table(&self, name: &str, alteration: &Alteration) -> Result<()> {
        self.redefine(name, |table| {
            let (new_name, schema, options) = altered(name, table.arrow_schema(), table.options(), alteration)?;
            Ok((new_name, schema, options, ColumnChange::None))
        })
    }

    /// Adds column `field` at the end of table `name`: every existing row
    /// holds `value` (one value of the field's type; NULL for none), and
    /// `default` (expression text, see [`TableOptions::column_defaults`])
    /// is recorded as the column's default. Main storage keeps its encoded
    /// columns and stores the new one constant-encoded; delta rows are
    /// copied. One logged step.
    pub fn add_column(&self, name: &str, field: Field, value: ArrayRef, default: Option<String>) -> Result<()> {
        if value.len() != 1 || value.data_type() != field.data_type() {
            return Err(Error::InvalidSchema(format!(
                "the value of new column '{}' must be one {}, not {} of {}",
                field.name(),
                field.data_type(),
                value.len(),
                value.data_type()
            )));
        }
        self.redefine(name, |table| {
            let old = table.arrow_schema();
            if old.index_of(field.name()).is_ok() {
                return Err(Error::InvalidSchema(format!("table '{name}' already has a column '{}'", field.name())));
            }
            // The rows the change applies to: durable or not (the writer
            // lock is held, so none arrive meanwhile).
            let rows: usize = table.core().latest().shards.iter().map(crate::shard::ShardState::live).sum();
            if !field.is_nullable() && value.is_null(0) && rows > 0 {
                return Err(Error::NullInNonNullable { table: name.into(), column: field.name().clone() });
            }
            let mut options = table.options().clone();
            if let Some(default) = default {
                options.column_defaults.push((field.name().clone(), default));
            }
            let fields: Vec<Field> = old.fields().iter().map(|f| f.as_ref().clone()).chain([field.clone()]).collect();
            let schema = Schema::new_with_metadata(fields, old.metadata().clone());
            let value = RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![value])?;
            Ok((name.to_string(), schema, options, ColumnChange::Add(value)))
        })
    }

    /// Drops column `column` of table `name` (and its default). A column of
    /// the primary key or of a UNIQUE constraint is refused. Main storage
    /// keeps its other encoded columns; delta rows are copied. One logged
    /// step.
    pub fn drop_column(&self, name: &str, column: &str) -> Result<()> {
        self.redefine(name, |table| {
            let old = table.arrow_schema();
            let index = old
                .index_of(column)
                .map_err(|_| Error::ColumnNotFound { table: name.into(), column: column.into() })?;
            let mut options = table.options().clone();
            if options.primary_key.iter().chain(options.unique.iter().flatten()).any(|c| c == column) {
                return Err(Error::InvalidSchema(format!(
                    "column '{column}' of table '{name}' is in its primary key or a UNIQUE constraint"
                )));
            }
            options.column_defaults.retain(|(c, _)| c != column);
            let mut fields: Vec<Field> = old.fields().iter().map(|f| f.as_ref().clone()).collect();
            fields.remove(index);
            let schema = Schema::new_with_metadata(fields, old.metadata().clone());
            Ok((name.to_string(), schema, options, ColumnChange::Drop(index)))
        })
    }

    /// Replaces table `name` by the redefinition `define` makes of it (new
    /// name, schema, options, and the change to its rows), logged as one
    /// record. `define` runs with the catalog and the table's writer lock
    /// held, so it sees the table as the change applies to it.
    fn redefine(
        &self,
        name: &str,
        define: impl FnOnce(&Table) -> Result<(String, Schema, TableOptions, ColumnChange)>,
    ) -> Result<()> {
        let mut catalog = self.catalog_mut()?;
        let table = catalog.tables.get(name).cloned().ok_or_else(|| Error::TableNotFound(name.into()))?;
        // The writer lock: no transaction is half-way through, and none is
        // logged after the change.
        let mut writer = table.core().lock()?;
        let (new_name, schema, options, change) = define(&table)?;
        if new_name != name && catalog.contains(&new_name) {
            return Err(Error::TableExists(new_name));
        }
        if new_name.is_empty() {
            return Err(Error::InvalidSchema("a table name cannot be empty".into()));
        }
        let next = table.redefined(&mut writer, &new_name, &schema, options.clone(), &change)?;
        let record = LogRecord::AlterTable {
            name: name.into(),
            new_name: new_name.clone(),
            schema: schema.into(),
            options,
            change,
        };
        let lsn = match self.durable() {
            Some(durable) => Some(durable.append(&record)?),
            None => None,
        };
        self.commit(lsn)?;
        next.take_log(&mut writer)?;
        writer.mark_dropped();
        drop(writer);
        catalog.tables.remove(name);
        catalog.tables.insert(new_name, next);
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Names of the schemas besides the default one, sorted.
    pub fn schema_names(&self) -> Vec<String> {
        self.catalog().map(|c| c.schemas.iter().cloned().collect()).unwrap_or_default()
    }

    /// The schemas besides the default one.
    pub fn schemas(&self) -> BTreeSet<String> {
        self.catalog().map(|c| c.schemas.clone()).unwrap_or_default()
    }

    /// Drops a table. Handles to it still read their snapshots; writes
    /// through them fail with [`Error::TableNotFound`].
    pub fn drop_table(&self, name: &str) -> Result<()> {
        let mut catalog = self.catalog_mut()?;
        let table = catalog.tables.get(name).cloned().ok_or_else(|| Error::TableNotFound(name.into()))?;
        // Take the writer lock so no transaction is half-way through (and
        // none is logged after the drop).
        let mut writer = table.core().lock()?;
        let lsn = match self.durable() {
            Some(durable) => Some(durable.append(&LogRecord::DropTable { name: name.into() })?),
            None => None,
        };
        self.commit(lsn)?;
        writer.mark_dropped();
        drop(writer);
        catalog.tables.remove(name);
        self.inner.catalog_version.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// A number that changes whenever a table or view is created, replaced
    /// or dropped (never when rows change): a plan that resolved table names
    /// at one version is still valid while the version stays the same.
    pub fn catalog_version(&self) -> u64 {
        self.inner.catalog_version.load(Ordering::Acquire)
    }

    /// Rebuilds every table (see [`Table::rebuild`]) and returns when done.
    pub fn rebuild_all(&self) -> Result<()> {
        let tables: Vec<Table> = self.catalog()?.tables.values().cloned().collect();
        tables.iter().try_for_each(Table::rebuild)
    }

    /// Blocks until no background rebuild is queued or running.
    pub fn wait_for_background_rebuilds(&self) {
        self.inner.background.wait_idle();
    }
}

/// The checkpoint thread: checkpoints whenever the log has grown by
/// `every` bytes, while the database is open.
fn background_checkpoints(db: &Weak<DbInner>, every: u64) {
    loop {
        std::thread::sleep(CHECKPOINT_POLL);
        let Some(inner) = db.upgrade() else { return };
        let db = Database { inner };
        let Some(durable) = db.durable() else { return };
        match durable.checkpoint_due(every) {
            Ok(true) => {
                // Shards that filled up are rebuilt first: a checkpoint
                // then writes their compressed main storage rather than
                // their delta rows (after a bulk load, many times larger).
                db.wait_for_background_rebuilds();
                if db.checkpoint().is_err() {
                    return; // the database is read-only now
                }
            }
            Ok(false) => {}
            Err(_) => return,
        }
    }
}

fn poisoned() -> Error {
    Error::Internal("a thread panicked while holding the catalog lock".into())
}
