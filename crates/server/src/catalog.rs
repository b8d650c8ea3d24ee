//! Catalog and schema providers: SQL DDL lands in quiverdb storage.
//!
//! DataFusion runs `CREATE TABLE` (with or without `AS SELECT`) by building
//! a `MemTable` and registering it in the current schema;
//! [`QuiverSchema::register_table`] intercepts that and creates a quiverdb
//! table instead, with the declared types, NOT NULL columns, primary key,
//! column defaults and rows. `CREATE VIEW` registers a view: its definition
//! is stored in the database too. `DROP TABLE` and `DROP VIEW` drop them.
//!
//! ```text
//!   storage keeps            the SQL layer makes of it
//!   table + column defaults  QuiverTable, defaults parsed once per catalog version
//!     as expression text
//!   view definition text     ViewTable, planned once per catalog version
//! ```
//!
//! Everything is in storage, so a durable database keeps its defaults and
//! views across restarts, and every session over a database sees the same
//! ones. Other providers an embedder registers (not views) stay in the
//! session that registered them.
//!
//! `CREATE SCHEMA s` creates a schema in storage; its tables and views are
//! stored as `s.name` (see `quiverdb_storage::schema_of`), and
//! `DROP SCHEMA s [CASCADE]` drops it (with its contents) in one step.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use arrow_schema::Schema;
use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, MemTable, SchemaProvider, TableProvider};
use datafusion::common::{Constraint, DFSchema, TableReference};
use datafusion::datasource::ViewTable;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{CreateMemoryTable, CreateView, DdlStatement, Expr, LogicalPlan};
use datafusion::sql::unparser::expr_to_sql;
use quiverdb_storage::{Database, Table, TableOptions};

use crate::error::Error;
use crate::options::SessionOptions;
use crate::provider::QuiverTable;
use crate::system::{SYSTEM_SCHEMA, SystemSchema};

/// The name of the default schema.
pub const DEFAULT_SCHEMA: &str = "public";

/// The name storage keeps table `name` of schema `schema` (the default one
/// when `None`) under, or `None` when there is no such schema.
pub(crate) fn stored_name(db: &Database, schema: Option<&str>, name: &str) -> Option<String> {
    match schema {
        None | Some(DEFAULT_SCHEMA) => {
            quiverdb_storage::schema_of(name, &db.schemas()).is_none().then(|| name.to_string())
        }
        Some(schema) => db.schemas().contains(schema).then(|| format!("{schema}.{name}")),
    }
}

/// Views nested deeper than this are refused: a view that (through
/// others) refers to itself would otherwise be planned forever.
const MAX_VIEW_DEPTH: usize = 16;

/// A table's column defaults, by column.
type Defaults = Arc<HashMap<String, Expr>>;

/// Something parsed from its stored text, valid while the database's
/// catalog stays at `version`.
#[derive(Debug)]
struct Parsed<T> {
    version: u64,
    value: T,
}

/// Makes a session whose catalog serves a schema (given by the session
/// builder, which builds on this module).
pub type SessionMaker = fn(Arc<QuiverSchema>, &SessionOptions) -> datafusion::prelude::SessionContext;

/// The schema provider over a quiverdb [`Database`].
#[derive(Debug)]
pub struct QuiverSchema {
    db: Database,
    /// The schema served: `None` for [`DEFAULT_SCHEMA`].
    namespace: Option<String>,
    options: SessionOptions,
    /// Makes the sessions views are planned in.
    session: SessionMaker,
    /// How deep in view planning this schema serves (0 for a session's).
    depth: usize,
    /// Column defaults parsed from their text, by table.
    defaults: RwLock<HashMap<String, Parsed<Defaults>>>,
    /// Views planned from their definitions, by name.
    views: RwLock<HashMap<String, Parsed<Arc<dyn TableProvider>>>>,
    /// A session state for parsing default expressions.
    parser: OnceLock<SessionState>,
    /// Providers that are neither quiverdb tables nor views, by name.
    foreign: RwLock<HashMap<String, Arc<dyn TableProvider>>>,
    /// Bumped whenever `foreign` changes.
    foreign_version: AtomicU64,
}

fn poisoned() -> DataFusionError {
    DataFusionError::Internal("a thread panicked while holding the quiverdb catalog".into())
}

impl QuiverSchema {
    /// Serves the tables and views of `db`; tables created through SQL get
    /// `options.table_options`, scans `options.scan`; views are planned in
    /// sessions `session` makes.
    pub fn new(db: Database, options: SessionOptions, session: SessionMaker) -> Self {
        Self::at_depth(db, options, session, 0)
    }

    fn at_depth(db: Database, options: SessionOptions, session: SessionMaker, depth: usize) -> Self {
        Self {
            db,
            namespace: None,
            options,
            session,
            depth,
            defaults: RwLock::default(),
            views: RwLock::default(),
            parser: OnceLock::new(),
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

    /// This schema's sibling `namespace` (a schema created in the
    /// database), over the same database and options.
    fn sibling(&self, namespace: &str) -> Self {
        let mut schema = Self::at_depth(self.db.clone(), self.options.clone(), self.session, self.depth);
        schema.namespace = Some(namespace.to_string());
        schema
    }

    /// The name storage keeps table or view `name` of this schema under
    /// (see [`stored_name`]): `None` when this schema was dropped, or when
    /// `name` of the default schema would fall in another schema.
    fn stored(&self, name: &str) -> Option<String> {
        stored_name(&self.db, self.namespace.as_deref(), name)
    }

    /// [`Self::stored`] for a new table or view, with the reason when there
    /// is none.
    fn stored_new(&self, name: &str) -> Result<String> {
        self.stored(name).ok_or_else(|| match &self.namespace {
            Some(namespace) => DataFusionError::Plan(format!("schema '{namespace}' was dropped")),
            None => DataFusionError::Plan(format!(
                "a table or view of schema '{DEFAULT_SCHEMA}' cannot be named '{name}' while a schema of that \
                 prefix exists"
            )),
        })
    }

    async fn provider(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let Some(stored) = &self.stored(name) else { return Ok(None) };
        if let Ok(table) = self.db.table(stored) {
            let defaults = self.defaults_of(name, &table)?;
            return Ok(Some(Arc::new(QuiverTable::new(table, defaults, self.options.scan.clone()))));
        }
        if let Some(definition) = self.db.view(stored) {
            return self.view(name, definition).await.map(Some);
        }
        Ok(self.foreign.read().map_err(|_| poisoned())?.get(name).cloned())
    }

    /// The column defaults of `table`, parsed from their text.
    fn defaults_of(&self, name: &str, table: &Table) -> Result<Defaults> {
        let version = self.db.catalog_version();
        if let Some(p) = self.defaults.read().map_err(|_| poisoned())?.get(name).filter(|p| p.version == version) {
            return Ok(Arc::clone(&p.value));
        }
        let stored = &table.options().column_defaults;
        let mut defaults = HashMap::with_capacity(stored.len());
        if !stored.is_empty() {
            let schema = DFSchema::try_from(Schema::clone(table.arrow_schema()))?;
            let parser = self.parser.get_or_init(|| SessionStateBuilder::new().with_default_features().build());
            for (column, text) in stored {
                let expr = parser.create_logical_expr(text, &schema).map_err(|e| {
                    DataFusionError::Plan(format!("the default of column '{column}' of table '{name}' ({text}): {e}"))
                })?;
                defaults.insert(column.clone(), expr);
            }
        }
        let defaults = Arc::new(defaults);
        let parsed = Parsed { version, value: Arc::clone(&defaults) };
        self.defaults.write().map_err(|_| poisoned())?.insert(name.to_string(), parsed);
        Ok(defaults)
    }

    /// View `name`, planned from its stored `definition` (a `CREATE VIEW`
    /// statement) in a session over the same database.
    async fn view(&self, name: &str, definition: String) -> Result<Arc<dyn TableProvider>> {
        let version = self.db.catalog_version();
        if let Some(p) = self.views.read().map_err(|_| poisoned())?.get(name).filter(|p| p.version == version) {
            return Ok(Arc::clone(&p.value));
        }
        if self.depth >= MAX_VIEW_DEPTH {
            return Err(DataFusionError::Plan(format!(
                "views nest more than {MAX_VIEW_DEPTH} deep (quiverdb's limit) at view '{name}', or a view refers to \
                 itself through others"
            )));
        }
        let inner = Arc::new(Self::at_depth(self.db.clone(), self.options.clone(), self.session, self.depth + 1));
        let state = (self.session)(inner, &self.options).state();
        let statement = crate::nesting::parse(&state, &definition)?;
        let input = match state.statement_to_plan(statement).await? {
            LogicalPlan::Ddl(DdlStatement::CreateView(CreateView { input, .. })) => input,
            other => {
                return Err(DataFusionError::Plan(format!(
                    "the stored definition of view '{name}' is not a CREATE VIEW: {}",
                    other.display()
                )));
            }
        };
        let view: Arc<dyn TableProvider> = Arc::new(ViewTable::new(input.as_ref().clone(), Some(definition)));
        let parsed = Parsed { version, value: Arc::clone(&view) };
        self.views.write().map_err(|_| poisoned())?.insert(name.to_string(), parsed);
        Ok(view)
    }

    /// Refuses a `CREATE OR REPLACE` that would replace a table with a
    /// view or a view with a table. DataFusion replaces by dropping the old
    /// one first, and a table's rows would go with it.
    pub(crate) fn check_replace(&self, plan: &LogicalPlan) -> Result<()> {
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateView(CreateView { name, or_replace: true, .. })) => {
                self.check_replace_by(name, "a view")
            }
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(CreateMemoryTable { name, or_replace: true, .. })) => {
                self.check_replace_by(name, "a table")
            }
            _ => Ok(()),
        }
    }

    /// [`Self::check_replace`] of a `CREATE OR REPLACE` that makes `name`
    /// `creates` ("a table" or "a view").
    pub(crate) fn check_replace_by(&self, name: &TableReference, creates: &str) -> Result<()> {
        let schema = name.schema().or(self.namespace.as_deref());
        let name = name.table();
        let Some(stored) = stored_name(&self.db, schema, name) else { return Ok(()) };
        let replaces = if self.db.contains_table(&stored) {
            "a table"
        } else if self.db.view(&stored).is_some() {
            "a view"
        } else {
            return Ok(());
        };
        if replaces == creates {
            return Ok(());
        }
        Err(DataFusionError::Plan(format!(
            "'{name}' is {replaces}: CREATE OR REPLACE cannot make it {creates}; drop it first"
        )))
    }

    /// Creates quiverdb table `name` from a `MemTable`: its schema, primary
    /// key, defaults and rows, all or nothing; with `replace`, in place of
    /// the table of that name, in the same step.
    pub(crate) fn create_from(&self, name: &str, mem: &MemTable, replace: bool) -> Result<()> {
        let schema = mem.schema();
        let mut key = Vec::new();
        let mut unique = Vec::new();
        let names = |cols: &[usize]| cols.iter().map(|&i| schema.field(i).name().clone()).collect::<Vec<_>>();
        for c in mem.constraints().map(|c| c.iter()).into_iter().flatten() {
            match c {
                Constraint::PrimaryKey(cols) if key.is_empty() => key = names(cols),
                Constraint::PrimaryKey(_) => {
                    return Err(DataFusionError::Plan(format!("table '{name}' declares two primary keys")));
                }
                Constraint::Unique(cols) => unique.push(names(cols)),
            }
        }
        let mut options: TableOptions = self.options.table_options.clone().with_primary_key(key);
        for columns in unique {
            options = options.with_unique(columns);
        }
        for field in schema.fields() {
            if let Some(default) = mem.get_column_default(field.name()) {
                let text = expr_to_sql(default).map_err(|e| {
                    DataFusionError::NotImplemented(format!(
                        "the default of column '{}' ({default}) cannot be stored: {e}",
                        field.name()
                    ))
                })?;
                options = options.with_column_default(field.name().clone(), text.to_string());
            }
        }
        let mut partitions = Vec::with_capacity(mem.batches.len());
        for p in &mem.batches {
            let batches = p
                .try_read()
                .map_err(|_| DataFusionError::Execution(format!("the rows of new table '{name}' are locked")))?;
            partitions.push(batches.clone());
        }
        // Created and filled as one step: a failed fill leaves no table.
        self.db
            .create_table_with(&self.stored_new(name)?, &schema, options, replace, |table| {
                table.transaction(|t| {
                    for batch in partitions.iter().flatten() {
                        t.append(batch)?;
                    }
                    Ok(())
                })
            })
            .map_err(Error::from)?;
        Ok(())
    }
}

#[async_trait]
impl SchemaProvider for QuiverSchema {
    fn table_names(&self) -> Vec<String> {
        let schemas = self.db.schemas();
        let mut names: Vec<String> = self
            .db
            .table_names()
            .into_iter()
            .chain(self.db.view_names())
            .filter_map(|stored| match (&self.namespace, quiverdb_storage::schema_of(&stored, &schemas)) {
                (None, None) => Some(stored),
                (Some(namespace), Some(schema)) if namespace == schema => {
                    Some(stored[namespace.len() + 1..].to_string())
                }
                _ => None,
            })
            .collect();
        if let Ok(foreign) = self.foreign.read() {
            names.extend(foreign.keys().cloned());
        }
        names.sort();
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        self.provider(name).await
    }

    fn register_table(&self, name: String, table: Arc<dyn TableProvider>) -> Result<Option<Arc<dyn TableProvider>>> {
        if self.table_exist(&name) {
            return Err(DataFusionError::External(Box::new(quiverdb_storage::Error::TableExists(name))));
        }
        if let Some(mem) = table.downcast_ref::<MemTable>() {
            self.create_from(&name, mem, false)?;
        } else if let Some(definition) = table.downcast_ref::<ViewTable>().and_then(ViewTable::definition) {
            self.db.create_view(&self.stored_new(&name)?, definition, false).map_err(Error::from)?;
        } else {
            self.foreign.write().map_err(|_| poisoned())?.insert(name, table);
            self.foreign_version.fetch_add(1, Ordering::AcqRel);
        }
        Ok(None)
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(p) = self.foreign.write().map_err(|_| poisoned())?.remove(name) {
            self.foreign_version.fetch_add(1, Ordering::AcqRel);
            return Ok(Some(p));
        }
        let Some(stored) = &self.stored(name) else { return Ok(None) };
        if self.db.view(stored).is_some() {
            let old = self.views.write().map_err(|_| poisoned())?.remove(name).map(|p| p.value);
            self.db.drop_view(stored).map_err(Error::from)?;
            return Ok(old.or_else(|| Some(Arc::new(DroppedView) as Arc<dyn TableProvider>)));
        }
        let Ok(table) = self.db.table(stored) else { return Ok(None) };
        let provider: Arc<dyn TableProvider> =
            Arc::new(QuiverTable::new(table, Arc::default(), self.options.scan.clone()));
        self.db.drop_table(stored).map_err(Error::from)?;
        self.defaults.write().map_err(|_| poisoned())?.remove(name);
        Ok(Some(provider))
    }

    fn table_exist(&self, name: &str) -> bool {
        let Some(stored) = &self.stored(name) else { return false };
        self.db.contains_table(stored)
            || self.db.view(stored).is_some()
            || self.foreign.read().is_ok_and(|f| f.contains_key(name))
    }
}

/// What `deregister_table` returns for a dropped view that was never
/// planned in this session (DataFusion only needs to know it existed).
#[derive(Debug)]
struct DroppedView;

#[async_trait]
impl TableProvider for DroppedView {
    fn schema(&self) -> arrow_schema::SchemaRef {
        Arc::new(Schema::empty())
    }

    fn table_type(&self) -> datafusion::logical_expr::TableType {
        datafusion::logical_expr::TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn datafusion::catalog::Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        Err(DataFusionError::Plan("the view was dropped".into()))
    }
}

/// The catalog: [`DEFAULT_SCHEMA`] and the schemas created in the
/// database.
#[derive(Debug)]
pub struct QuiverCatalog {
    schema: Arc<QuiverSchema>,
    /// [`SYSTEM_SCHEMA`]'s tables.
    system: Arc<SystemSchema>,
    /// Providers of the other schemas, made when first asked for (they
    /// keep parsed defaults and planned views).
    others: RwLock<HashMap<String, Arc<QuiverSchema>>>,
}

impl QuiverCatalog {
    /// A catalog whose default schema is `schema`; the database's other
    /// schemas are served beside it.
    pub fn new(schema: Arc<QuiverSchema>) -> Self {
        let system = Arc::new(SystemSchema::new(schema.db.clone(), DEFAULT_SCHEMA));
        Self { schema, system, others: RwLock::default() }
    }

    /// The database.
    pub fn database(&self) -> &Database {
        &self.schema.db
    }
}

impl CatalogProvider for QuiverCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names = vec![DEFAULT_SCHEMA.to_string(), SYSTEM_SCHEMA.to_string()];
        names.extend(self.schema.db.schema_names().into_iter().filter(|n| n != SYSTEM_SCHEMA));
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if name == DEFAULT_SCHEMA {
            return Some(Arc::clone(&self.schema) as Arc<dyn SchemaProvider>);
        }
        if name == SYSTEM_SCHEMA {
            return Some(Arc::clone(&self.system) as Arc<dyn SchemaProvider>);
        }
        if !self.schema.db.schemas().contains(name) {
            return None;
        }
        if let Some(schema) = self.others.read().ok()?.get(name) {
            return Some(Arc::clone(schema) as Arc<dyn SchemaProvider>);
        }
        let schema = Arc::new(self.schema.sibling(name));
        self.others.write().ok()?.insert(name.to_string(), Arc::clone(&schema));
        Some(schema)
    }

    fn register_schema(&self, name: &str, _schema: Arc<dyn SchemaProvider>) -> Result<Option<Arc<dyn SchemaProvider>>> {
        if name == DEFAULT_SCHEMA || name == SYSTEM_SCHEMA {
            return Err(Error::from(quiverdb_storage::Error::SchemaExists(name.into())).into());
        }
        self.schema.db.create_schema(name).map_err(Error::from)?;
        Ok(None)
    }

    fn deregister_schema(&self, name: &str, cascade: bool) -> Result<Option<Arc<dyn SchemaProvider>>> {
        if name == DEFAULT_SCHEMA || name == SYSTEM_SCHEMA {
            return Err(DataFusionError::Plan(format!("schema '{name}' cannot be dropped")));
        }
        let Some(provider) = self.schema(name) else { return Ok(None) };
        self.schema.db.drop_schema(name, cascade).map_err(Error::from)?;
        self.others.write().map_err(|_| poisoned())?.remove(name);
        Ok(Some(provider))
    }
}
