//! Running a logical plan in a quiverdb session: as
//! `SessionContext::execute_logical_plan` does, except for
//! `CREATE TABLE … AS`, which quiverdb runs itself.
//!
//! DataFusion collects a `CREATE TABLE … AS` query's whole result before
//! creating the table, with no account of the memory it holds, and for
//! `CREATE OR REPLACE` drops the old table first, so a failing query takes
//! the old table with it. Here the result is counted against the session's
//! memory pool as it arrives (a result larger than `--memory-limit` is
//! `ResourceExhausted`, the server unharmed), and the new table replaces
//! the old one in one step once it is filled: a failure leaves the old
//! table as it was. A NULL in a column the statement declares NOT NULL is
//! refused as a constraint violation naming that column (DataFusion's own
//! check named the VALUES column, `column1`).
//!
//! ```text
//!   CREATE [OR REPLACE] TABLE t AS q ──▶ q's batches ──reserve──▶ memory pool
//!                                                  │ (refused: ResourceExhausted, nothing changed)
//!                                                  ▼
//!                                      Database::create_table_with(t, replace)
//! ```

use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_schema::SchemaRef;
use datafusion::catalog::SchemaProvider;
use datafusion::common::{
    DFSchema, DataFusionError, Result, SchemaError, TableReference, exec_err, not_impl_err, schema_err,
};
use datafusion::datasource::MemTable;
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::logical_expr::{CreateMemoryTable, DdlStatement, EmptyRelation, LogicalPlan};
use datafusion::physical_plan::execute_stream_partitioned;
use datafusion::prelude::{DataFrame, SessionContext};
use futures::TryStreamExt;

use crate::catalog::{QuiverCatalog, QuiverSchema};
use crate::error::Error;
use crate::limits::TableMemoryLimit;
use crate::retained::Retained;
use crate::session::DEFAULT_CATALOG;

/// Runs `plan` in `ctx` (a session over a quiverdb database).
pub(crate) async fn execute(ctx: &SessionContext, plan: LogicalPlan) -> Result<DataFrame> {
    match plan {
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) => match schema_of(ctx, &create.name) {
            Some(schema) => match schema.downcast_ref::<QuiverSchema>() {
                Some(quiver) => create_table_as(ctx, quiver, create).await,
                None => Err(DataFusionError::Internal("a quiverdb schema of another type".into())),
            },
            None => ctx.execute_logical_plan(LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create))).await,
        },
        other => ctx.execute_logical_plan(other).await,
    }
}

/// The quiverdb schema a table named `name` belongs to, if it is one.
fn schema_of(ctx: &SessionContext, name: &TableReference) -> Option<Arc<dyn SchemaProvider>> {
    let state = ctx.state();
    let defaults = &state.config().options().catalog;
    let resolved = name.clone().resolve(&defaults.default_catalog, &defaults.default_schema);
    if resolved.catalog.as_ref() != DEFAULT_CATALOG {
        return None;
    }
    let catalog = ctx.catalog(DEFAULT_CATALOG)?;
    catalog.downcast_ref::<QuiverCatalog>()?;
    let schema = catalog.schema(&resolved.schema)?;
    schema.downcast_ref::<QuiverSchema>().is_some().then_some(schema)
}

/// `CREATE [OR REPLACE] TABLE … AS` (or `… (columns) AS VALUES`): the
/// checks DataFusion makes, the query's result counted against the memory
/// pool, then one step that creates (or replaces) the filled table.
async fn create_table_as(ctx: &SessionContext, schema: &QuiverSchema, create: CreateMemoryTable) -> Result<DataFrame> {
    let CreateMemoryTable { name, input, if_not_exists, or_replace, constraints, column_defaults, temporary } = create;
    if temporary {
        return not_impl_err!("Temporary tables not supported");
    }
    if if_not_exists && or_replace {
        return exec_err!("'IF NOT EXISTS' cannot coexist with 'REPLACE'");
    }
    if or_replace {
        schema.check_replace_by(&name, "a table")?;
    }
    let exists = schema.table_exist(name.table());
    match (exists, if_not_exists, or_replace) {
        (true, true, _) => return Ok(empty(ctx)),
        (true, false, false) => return exec_err!("Table '{name}' already exists"),
        _ => {}
    }
    let state = ctx.state();
    // The columns as declared; the VALUES run nullable, so that a NULL in
    // a NOT NULL column is found below, by the column's name.
    let declared = Arc::clone(input.schema().inner());
    let input = crate::session::nullable_values(Arc::unwrap_or_clone(input))?.data;
    let input = state.optimize(&input)?;
    unique_column_names(input.schema())?;
    let physical = state.create_physical_plan(&input).await?;
    let task = ctx.task_ctx();
    let reservation = MemoryConsumer::new(format!("CREATE TABLE {name} AS")).register(task.memory_pool());
    let mut rows = futures::stream::select_all(execute_stream_partitioned(physical, task)?);
    let mut batches = Vec::new();
    let mut retained = Retained::default();
    let mut budget = TableMemoryLimit::of(state.config()).map(|l| l.budget());
    while let Some(batch) = rows.try_next().await? {
        let batch = as_declared(&batch, &declared, &name)?;
        let bytes = retained.add(&batch);
        reservation.try_grow(bytes)?;
        if let Some(budget) = &mut budget {
            budget.add(bytes)?;
        }
        batches.push(batch);
    }
    let table = MemTable::try_new(declared, vec![batches])?
        .with_constraints(constraints)
        .with_column_defaults(column_defaults.into_iter().collect());
    schema.create_from(name.table(), &table, exists && or_replace)?;
    drop(reservation);
    Ok(empty(ctx))
}

/// `batch` in the schema the new table `name` declares, or the NOT NULL
/// column it holds a NULL in, as the constraint violation it is.
fn as_declared(batch: &RecordBatch, declared: &SchemaRef, name: &TableReference) -> Result<RecordBatch> {
    for (field, column) in declared.fields().iter().zip(batch.columns()) {
        if !field.is_nullable() && column.null_count() > 0 {
            let null =
                quiverdb_storage::Error::NullInNonNullable { table: name.to_string(), column: field.name().clone() };
            return Err(Error::from(null).into());
        }
    }
    Ok(RecordBatch::try_new(Arc::clone(declared), batch.columns().to_vec())?)
}

/// DataFusion's rule for a new table's columns: no name twice (whatever
/// their qualifiers, which the table does not keep).
fn unique_column_names(schema: &DFSchema) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for field in schema.fields() {
        if !seen.insert(field.name()) {
            return schema_err!(SchemaError::DuplicateUnqualifiedField { name: field.name().clone() });
        }
    }
    Ok(())
}

/// The result of a statement that returns no rows.
fn empty(ctx: &SessionContext) -> DataFrame {
    let nothing =
        LogicalPlan::EmptyRelation(EmptyRelation { produce_one_row: false, schema: Arc::clone(DFSchema::empty_ref()) });
    DataFrame::new(ctx.state(), nothing)
}
