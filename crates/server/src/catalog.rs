//! Catalog and schema providers: SQL DDL lands in quiverdb storage.
//!
//! DataFusion runs `CREATE TABLE` (with or without `AS SELECT`) by building
//! a `MemTable` and registering it in the current schema;
//! [`QuiverSchema::register_table`] intercepts that and creates a quiverdb
//! table instead, with the declared types, NOT NULL columns, primary key,
//! column defaults and rows. `DROP TABLE` drops the quiverdb table. Other
//! providers registered in the schema (views, for instance) are kept beside
//! the database's tables for the life of the session.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, MemTable, SchemaProvider, TableProvider};
use datafusion::common::Constraint;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use quiverdb_storage::{Database, TableOptions};

use crate::error::Error;
use crate::provider::{QuiverTable, ScanSettings};

/// The name of quiverdb's one schema.
pub const DEFAULT_SCHEMA: &str = "public";

/// Column defaults of each table created through SQL.
type Defaults = HashMap<String, Arc<HashMap<String, Expr>>>;

/// The schema provider over a quiverdb [`Database`].
#[derive(Debug)]
pub struct QuiverSchema {
    db: Database,
    options: TableOptions,
    settings: ScanSettings,
    defaults: RwLock<Defaults>,
    /// Providers that are not quiverdb tables (views), by name.
    foreign: RwLock<HashMap<String, Arc<dyn TableProvider>>>,
    /// Bumped whenever `foreign` changes.
    foreign_version: AtomicU64,
}

fn poisoned() -> DataFusionError {
    DataFusionError::Internal("a thread panicked while holding the quiverdb catalog".into())
}

impl QuiverSchema {
    /// Serves the tables of `db`; tables created through SQL get `options`.
    pub fn new(db: Database, options: TableOptions, settings: ScanSettings) -> Self {
        Self {
            db,
            options,
            settings,
            defaults: RwLock::default(),
            foreign: RwLock::default(),
            foreign_version: AtomicU64::new(0),
        }
    }

    /// A number that changes whenever a name in this schema starts or
    /// stops resolving to a table or view (never when rows change), so a
    /// logical plan made at one version stays valid while it holds.
    pub(crate) fn catalog_version(&self) -> u64 {
        // Both counters only grow, so their sum changes when either does.
        self.db.catalog_version().wrapping_add(self.foreign_version.load(Ordering::Acquire))
    }

    /// The database.
    pub fn database(&self) -> &Database {
        &self.db
    }

    fn provider(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let Ok(table) = self.db.table(name) else {
            return Ok(self.foreign.read().map_err(|_| poisoned())?.get(name).cloned());
        };
        let defaults = self.defaults.read().map_err(|_| poisoned())?.get(name).cloned().unwrap_or_default();
        Ok(Some(Arc::new(QuiverTable::new(table, defaults, self.settings.clone()))))
    }

    /// Creates quiverdb table `name` from a `MemTable`: its schema, primary
    /// key, defaults and rows, all or nothing.
    fn create_from(&self, name: &str, mem: &MemTable) -> Result<()> {
        let schema = mem.schema();
        let mut key = Vec::new();
        for c in mem.constraints().map(|c| c.iter()).into_iter().flatten() {
            match c {
                Constraint::PrimaryKey(cols) if key.is_empty() => {
                    key = cols.iter().map(|&i| schema.field(i).name().clone()).collect()
                }
                Constraint::PrimaryKey(_) => {
                    return Err(DataFusionError::Plan(format!("table '{name}' declares two primary keys")));
                }
                Constraint::Unique(_) => {
                    return Err(DataFusionError::NotImplemented(format!(
                        "table '{name}': quiverdb does not support UNIQUE constraints (only a PRIMARY KEY)"
                    )));
                }
            }
        }
        let defaults: HashMap<String, Expr> = schema
            .fields()
            .iter()
            .filter_map(|f| mem.get_column_default(f.name()).map(|e| (f.name().clone(), e.clone())))
            .collect();
        let mut partitions = Vec::with_capacity(mem.batches.len());
        for p in &mem.batches {
            let batches = p
                .try_read()
                .map_err(|_| DataFusionError::Execution(format!("the rows of new table '{name}' are locked")))?;
            partitions.push(batches.clone());
        }
        let options = self.options.clone().with_primary_key(key);
        let table = self.db.create_table(name, &schema, options).map_err(Error::from)?;
        let filled = table.transaction(|t| {
            for batch in partitions.iter().flatten() {
                t.append(batch)?;
            }
            Ok(())
        });
        if let Err(e) = filled {
            // Nobody has seen the table yet: remove it.
            let _ = self.db.drop_table(name);
            return Err(Error::from(e).into());
        }
        self.defaults.write().map_err(|_| poisoned())?.insert(name.to_string(), Arc::new(defaults));
        Ok(())
    }
}

#[async_trait]
impl SchemaProvider for QuiverSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.db.table_names();
        if let Ok(foreign) = self.foreign.read() {
            names.extend(foreign.keys().cloned());
        }
        names.sort();
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        self.provider(name)
    }

    fn register_table(&self, name: String, table: Arc<dyn TableProvider>) -> Result<Option<Arc<dyn TableProvider>>> {
        if self.table_exist(&name) {
            return Err(DataFusionError::External(Box::new(quiverdb_storage::Error::TableExists(name))));
        }
        match table.downcast_ref::<MemTable>() {
            Some(mem) => self.create_from(&name, mem)?,
            None => {
                self.foreign.write().map_err(|_| poisoned())?.insert(name, table);
                self.foreign_version.fetch_add(1, Ordering::AcqRel);
            }
        }
        Ok(None)
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(p) = self.foreign.write().map_err(|_| poisoned())?.remove(name) {
            self.foreign_version.fetch_add(1, Ordering::AcqRel);
            return Ok(Some(p));
        }
        let Some(provider) = self.provider(name)? else { return Ok(None) };
        self.db.drop_table(name).map_err(Error::from)?;
        self.defaults.write().map_err(|_| poisoned())?.remove(name);
        Ok(Some(provider))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.db.contains_table(name) || self.foreign.read().is_ok_and(|f| f.contains_key(name))
    }
}

/// The catalog: one schema, [`DEFAULT_SCHEMA`], over the database.
#[derive(Debug)]
pub struct QuiverCatalog {
    schema: Arc<QuiverSchema>,
}

impl QuiverCatalog {
    /// A catalog whose one schema is `schema`.
    pub fn new(schema: Arc<QuiverSchema>) -> Self {
        Self { schema }
    }
}

impl CatalogProvider for QuiverCatalog {
    fn schema_names(&self) -> Vec<String> {
        vec![DEFAULT_SCHEMA.to_string()]
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        (name == DEFAULT_SCHEMA).then(|| Arc::clone(&self.schema) as Arc<dyn SchemaProvider>)
    }

    fn register_schema(&self, name: &str, _schema: Arc<dyn SchemaProvider>) -> Result<Option<Arc<dyn SchemaProvider>>> {
        Err(DataFusionError::NotImplemented(format!(
            "cannot create schema '{name}': a quiverdb database has one schema, '{DEFAULT_SCHEMA}'"
        )))
    }
}
