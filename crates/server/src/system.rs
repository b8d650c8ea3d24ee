//! `quiverdb.system`: what the database holds and what the process uses,
//! as tables any client can query.
//!
//! ```text
//!   system.tables    one row per table: rows, shards, main and delta rows,
//!                    bytes of main storage, deltas and deletion bitmaps
//!   system.columns   one row per table column: its encodings (by main
//!                    rows) and bytes of values, dictionaries, zone maps,
//!                    validity and deltas
//!   system.memory    one row per figure of the process: resident set,
//!                    table bytes, query memory reserved now, and the
//!                    allocator's own statistics when the program reports
//!                    them (the quiverdb binary does)
//!   system.queries   one row per statement running on the server: its id
//!                    (for `CANCEL <id>`), client, state, start, time so
//!                    far, rows sent, whether it changes data, and its SQL
//! ```
//!
//! Each is computed when it is scanned, from the tables' current state.
//! The schema name `system` is reserved: it cannot be created or dropped.

use std::sync::{Arc, OnceLock};

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{MemTable, SchemaProvider, Session, TableProvider};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use quiverdb_storage::Database;

use crate::running::{QueryState, RunningQueries};

/// The name of the system schema.
pub const SYSTEM_SCHEMA: &str = "system";

/// Statistics of the process's allocator, as `(name, bytes)`: what a
/// program registers with [`report_allocator`].
type AllocatorStats = fn() -> Vec<(&'static str, u64)>;

static ALLOCATOR: OnceLock<AllocatorStats> = OnceLock::new();

/// Registers the function `system.memory` asks for the allocator's
/// statistics (bytes allocated, resident, retained, …); the first
/// registration stands.
pub fn report_allocator(stats: AllocatorStats) {
    let _ = ALLOCATOR.set(stats);
}

/// The `system` schema of a database.
#[derive(Debug)]
pub(crate) struct SystemSchema {
    db: Database,
    /// The schema of tables whose stored name has no schema prefix.
    default_schema: &'static str,
}

impl SystemSchema {
    pub(crate) fn new(db: Database, default_schema: &'static str) -> Self {
        Self { db, default_schema }
    }
}

/// The system tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tables,
    Columns,
    Memory,
    Queries,
}

impl Kind {
    const ALL: [(&'static str, Kind); 4] =
        [("tables", Kind::Tables), ("columns", Kind::Columns), ("memory", Kind::Memory), ("queries", Kind::Queries)];

    fn schema(self) -> SchemaRef {
        let text = |name: &str| Field::new(name, DataType::Utf8, false);
        let int = |name: &str| Field::new(name, DataType::Int64, false);
        Arc::new(Schema::new(match self {
            Kind::Tables => vec![
                text("table_schema"),
                text("table_name"),
                int("rows"),
                int("shards"),
                int("main_rows"),
                int("delta_rows"),
                int("main_bytes"),
                int("delta_bytes"),
                int("delete_bytes"),
                int("index_bytes"),
                int("total_bytes"),
            ],
            Kind::Columns => vec![
                text("table_schema"),
                text("table_name"),
                text("column_name"),
                text("data_type"),
                text("encodings"),
                int("main_bytes"),
                int("dictionary_bytes"),
                int("zone_map_bytes"),
                int("validity_bytes"),
                int("delta_bytes"),
                int("total_bytes"),
            ],
            Kind::Memory => vec![text("name"), Field::new("bytes", DataType::Int64, true), text("description")],
            Kind::Queries => vec![
                int("id"),
                text("client"),
                text("state"),
                Field::new("started", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
                Field::new("seconds", DataType::Float64, false),
                int("rows"),
                Field::new("changes_data", DataType::Boolean, false),
                text("sql"),
            ],
        }))
    }

    /// `system.queries`: the statements of the server whose registry the
    /// session holds (none in a session of its own).
    fn queries(state: &dyn Session) -> Result<RecordBatch> {
        let running = state.config().get_extension::<RunningQueries>().map(|r| r.list()).unwrap_or_default();
        let micros = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        };
        let state_name = |s: QueryState| match s {
            QueryState::Queued => "queued",
            QueryState::Running => "running",
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(running.iter().map(|q| i64::try_from(q.id).unwrap_or(i64::MAX)))),
            Arc::new(StringArray::from_iter_values(running.iter().map(|q| q.client.as_str()))),
            Arc::new(StringArray::from_iter_values(running.iter().map(|q| state_name(q.state)))),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(running.iter().map(|q| micros(q.started)))
                    .with_timezone("UTC"),
            ),
            Arc::new(Float64Array::from_iter_values(running.iter().map(|q| q.seconds))),
            Arc::new(Int64Array::from_iter_values(running.iter().map(|q| i64::try_from(q.rows).unwrap_or(i64::MAX)))),
            Arc::new(BooleanArray::from_iter(running.iter().map(|q| Some(q.changes)))),
            Arc::new(StringArray::from_iter_values(running.iter().map(|q| q.sql.as_str()))),
        ];
        Ok(RecordBatch::try_new(Kind::Queries.schema(), columns)?)
    }

    fn batch(self, db: &Database, default_schema: &str, state: &dyn Session) -> Result<RecordBatch> {
        if self == Kind::Queries {
            return Self::queries(state);
        }
        let mut text: Vec<Vec<String>> = Vec::new();
        let mut ints: Vec<Vec<Option<i64>>> = Vec::new();
        let mut push = |t: Vec<String>, i: Vec<Option<i64>>| {
            text.resize_with(t.len(), Vec::new);
            ints.resize_with(i.len(), Vec::new);
            text.iter_mut().zip(t).for_each(|(c, v)| c.push(v));
            ints.iter_mut().zip(i).for_each(|(c, v)| c.push(v));
        };
        let n = |v: usize| Some(i64::try_from(v).unwrap_or(i64::MAX));
        match self {
            Kind::Tables | Kind::Columns => {
                let schemas = db.schemas();
                for stored in db.table_names() {
                    let Ok(table) = db.table(&stored) else { continue };
                    let (schema, name) = match quiverdb_storage::schema_of(&stored, &schemas) {
                        Some(schema) => (schema.to_string(), stored[schema.len() + 1..].to_string()),
                        None => (default_schema.to_string(), stored.clone()),
                    };
                    let usage = table.memory_usage();
                    if self == Kind::Tables {
                        let shards = table.snapshot().num_shards();
                        push(
                            vec![schema, name],
                            vec![
                                n(table.row_count()),
                                n(shards),
                                n(usage.main_rows),
                                n(usage.delta_rows),
                                n(usage.main_bytes()),
                                n(usage.delta_bytes()),
                                n(usage.delete_bytes),
                                n(usage.index_bytes),
                                n(usage.total_bytes()),
                            ],
                        );
                        continue;
                    }
                    for (c, column) in usage.columns.iter().enumerate() {
                        let data_type = table.schema().field(c).data_type().to_string();
                        let mut encodings: Vec<_> = column.encodings.iter().collect();
                        encodings.sort_by_key(|(_, u)| std::cmp::Reverse(u.rows));
                        let encodings = encodings
                            .iter()
                            .map(|(k, u)| format!("{k} ({} rows, {} bytes)", u.rows, u.bytes))
                            .collect::<Vec<_>>()
                            .join(", ");
                        push(
                            vec![schema.clone(), name.clone(), column.name.clone(), data_type, encodings],
                            vec![
                                n(column.main_bytes),
                                n(column.dictionary_bytes),
                                n(column.zone_map_bytes),
                                n(column.validity_bytes),
                                n(column.delta_bytes),
                                n(column.total_bytes()),
                            ],
                        );
                    }
                }
            }
            Kind::Queries => {}
            Kind::Memory => {
                let mut row = |name: &str, bytes: Option<u64>, description: &str| {
                    push(
                        vec![name.to_string(), description.to_string()],
                        vec![bytes.map(|b| i64::try_from(b).unwrap_or(i64::MAX))],
                    )
                };
                row("process_rss", resident_bytes(), "resident set of the server process (VmRSS)");
                row(
                    "tables",
                    Some(db.table_bytes() as u64),
                    "main storage, deltas and deletion bitmaps of every table",
                );
                let pool = &state.runtime_env().memory_pool;
                row("query_reserved", Some(pool.reserved() as u64), "memory queries hold in the pool now");
                if let Some(limit) = pool_limit(pool.memory_limit()) {
                    row("query_limit", Some(limit), "the pool's size (--memory-limit)");
                }
                if let Some(stats) = ALLOCATOR.get() {
                    for (name, bytes) in stats() {
                        row(name, Some(bytes), "reported by the allocator");
                    }
                }
            }
        }
        let schema = self.schema();
        let (mut t, mut i) = (text.into_iter(), ints.into_iter());
        let columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| -> ArrayRef {
                match f.data_type() {
                    DataType::Utf8 => Arc::new(StringArray::from(t.next().unwrap_or_default())),
                    _ => Arc::new(Int64Array::from(i.next().unwrap_or_default())),
                }
            })
            .collect();
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

/// The pool's limit, when it has one.
fn pool_limit(limit: datafusion::execution::memory_pool::MemoryLimit) -> Option<u64> {
    match limit {
        datafusion::execution::memory_pool::MemoryLimit::Finite(bytes) => Some(bytes as u64),
        _ => None,
    }
}

/// The process's resident set, from `/proc/self/status` (Linux).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kb * 1024)
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        Kind::ALL.iter().map(|(name, _)| name.to_string()).collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(Kind::ALL.iter().find(|(n, _)| *n == name).map(|&(_, kind)| {
            let table = SystemTable { db: self.db.clone(), default_schema: self.default_schema, kind };
            Arc::new(table) as Arc<dyn TableProvider>
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        Kind::ALL.iter().any(|(n, _)| *n == name)
    }

    fn register_table(&self, name: String, _table: Arc<dyn TableProvider>) -> Result<Option<Arc<dyn TableProvider>>> {
        Err(DataFusionError::Plan(format!(
            "schema '{SYSTEM_SCHEMA}' is quiverdb's own: '{name}' cannot be created in it"
        )))
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Err(DataFusionError::Plan(format!("'{SYSTEM_SCHEMA}.{name}' is quiverdb's own and cannot be dropped")))
    }
}

/// One system table, computed at each scan.
#[derive(Debug)]
struct SystemTable {
    db: Database,
    default_schema: &'static str,
    kind: Kind,
}

#[async_trait]
impl TableProvider for SystemTable {
    fn schema(&self) -> SchemaRef {
        self.kind.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batch = self.kind.batch(&self.db, self.default_schema, state)?;
        MemTable::try_new(self.schema(), vec![vec![batch]])?.scan(state, projection, filters, limit).await
    }
}
