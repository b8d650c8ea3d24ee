//! A DataFusion `SessionContext` over a quiverdb database, in one call.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::catalog::{CatalogProviderList, MemoryCatalogProviderList};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DFSchemaRef};
use datafusion::datasource::{DefaultTableSource, provider_as_source};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Expr, LogicalPlan, Values, WriteOp};
use datafusion::optimizer::AnalyzerRule;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::prelude::{SessionConfig, SessionContext};
use quiverdb_storage::Database;

use crate::catalog::{DEFAULT_SCHEMA, QuiverCatalog, QuiverSchema};
use crate::limits::TableMemoryLimit;
use crate::options::SessionOptions;
use crate::provider::{DmlStatementParts, QuiverTable};
use crate::rules::QuiverPushdown;

/// The name of quiverdb's catalog.
pub const DEFAULT_CATALOG: &str = "quiverdb";

/// A `SessionContext` whose catalog is `db`: `SELECT`, `INSERT`,
/// `CREATE TABLE` and the rest act on quiverdb tables, and quiverdb's
/// optimizer rules push aggregates and TopK into its scans.
pub fn session_context(db: &Database) -> SessionContext {
    session_context_with(db, SessionOptions::default())
}

/// Build-side keys per partition a hash join's dynamic filter lists
/// (DataFusion's default is 150). TPC-H q09's 10,660 green parts then
/// select 319,000 of 6 million line items in the scan (172 → 146 ms
/// through the server), q08's 1,300 steel parts likewise (64 → 42 ms).
/// DataFusion makes the list an expression per key: 65,536 made q10
/// 90 → 156 ms.
const INLIST_PUSHDOWN_KEYS: usize = 16_384;

/// The list's bytes (DataFusion's default is 128 KiB): 16,384 keys of
/// two 8-byte columns fit.
const INLIST_PUSHDOWN_BYTES: usize = 1 << 20;

/// Build sides up to this many rows (estimated) are hashed once and
/// shared by every partition of a hash join (DataFusion's `CollectLeft`;
/// its default is 131,072): the probe side is then read by the scan's own
/// partitions, not hash-repartitioned first. TPC-H q05 joins 6 million
/// line items to 227,000 orders: 118 → 77 ms through the server; q03 67 →
/// 42 ms. Four million rows made q07 and q10 slower (a build of that size
/// on one thread).
const COLLECT_LEFT_ROWS: usize = 1 << 20;

/// The same bound in bytes (DataFusion's default is 1 MiB).
const COLLECT_LEFT_BYTES: usize = 64 << 20;

/// A hash join on one integer key indexes an array by the key instead of
/// hashing it when its build side's rows number more than this share of
/// their keys' range (DataFusion's default is 0.15). The array costs 4
/// bytes per key of the range, so at most about 130 bytes per build row
/// (a hash table about 40), reserved from the session's memory pool like
/// the table. TPC-H q05's 227,000 orders of the year span 6 million keys
/// (0.038): 60 → 37 ms in-process; q22's 19,000 customers (0.127) 19 → 16 ms.
const PERFECT_HASH_DENSITY: f64 = 0.03;

/// [`session_context`] with options.
pub fn session_context_with(db: &Database, options: SessionOptions) -> SessionContext {
    session_parts(db, options).0
}

/// [`session_context_with`], and the schema provider its catalog serves.
pub(crate) fn session_parts(db: &Database, options: SessionOptions) -> (SessionContext, Arc<QuiverSchema>) {
    let schema = Arc::new(QuiverSchema::new(db.clone(), options.clone(), session_over));
    (session_over(Arc::clone(&schema), &options), schema)
}

/// A session whose catalog serves `schema` (how a [`QuiverSchema`] plans
/// its views, in sessions of their own).
fn session_over(schema: Arc<QuiverSchema>, options: &SessionOptions) -> SessionContext {
    let mut config = SessionConfig::new()
        .with_information_schema(true)
        .with_default_catalog_and_schema(DEFAULT_CATALOG, DEFAULT_SCHEMA)
        .with_create_default_catalog_and_schema(false)
        .with_batch_size(options.batch_size.max(1));
    if options.target_partitions > 0 {
        config = config.with_target_partitions(options.target_partitions);
    }
    // A hash join hands its build side's keys to the probe scan as a list
    // (rather than a hash-table lookup the scan cannot evaluate) up to this
    // many per partition: quiverdb's scans test such a list on zone maps
    // and on encoded keys (a bitset when the keys span at most 2^20, or
    // 64 per key).
    config.options_mut().optimizer.hash_join_inlist_pushdown_max_distinct_values = INLIST_PUSHDOWN_KEYS;
    config.options_mut().optimizer.hash_join_inlist_pushdown_max_size = INLIST_PUSHDOWN_BYTES;
    config.options_mut().optimizer.hash_join_single_partition_threshold_rows = COLLECT_LEFT_ROWS;
    config.options_mut().optimizer.hash_join_single_partition_threshold = COLLECT_LEFT_BYTES;
    config.options_mut().execution.perfect_hash_join_min_key_density = PERFECT_HASH_DENSITY;
    if let Some(limit) = options.max_table_memory {
        config = config.with_extension(Arc::new(TableMemoryLimit::new(schema.database().clone(), limit)));
    }
    let catalogs = Arc::new(MemoryCatalogProviderList::new());
    catalogs.register_catalog(DEFAULT_CATALOG.to_string(), Arc::new(QuiverCatalog::new(schema)));
    let mut runtime = RuntimeEnvBuilder::new()
        .with_disk_manager_builder(DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled));
    if let Some(limit) = options.memory_limit {
        runtime = runtime.with_memory_limit(limit, 1.0);
    }
    // Only creating a disk manager's temporary directory can fail, and
    // there is none.
    let runtime = runtime.build_arc().unwrap_or_else(|e| {
        tracing::warn!("DataFusion runtime without spilling failed to build ({e}); using the default runtime");
        Default::default()
    });
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        // Nothing a client sends may read or write files: no CREATE
        // EXTERNAL TABLE, no COPY.
        .with_table_factories(HashMap::new())
        .with_file_formats(Vec::new())
        .with_catalog_list(catalogs)
        // Before DmlGuard, which keeps the WHERE and SET of DML as they are.
        .with_analyzer_rule(Arc::new(crate::checked::CheckedIntegers))
        .with_analyzer_rule(Arc::new(DmlGuard))
        .with_physical_optimizer_rule(Arc::new(QuiverPushdown))
        .build();
    let mut state = state;
    crate::bounded::bound_functions(&mut state, options.memory_limit);
    crate::checked_sum::check_sums(&mut state);
    crate::version::register(&mut state);
    SessionContext::new_with_state(state)
}

/// Makes DELETE and UPDATE act on exactly the rows their WHERE clause
/// names. Runs after DataFusion's analyzer rules, on the typed plan:
///
/// - rejects what DataFusion would not hand to the table: a subquery (IN,
///   EXISTS, scalar) in WHERE, which the optimizer turns into a join so the
///   table would be asked to change every row (apache/datafusion#24654),
///   and `UPDATE ... FROM`, whose other table's conditions are dropped;
/// - binds the target quiverdb table to the statement's WHERE conjuncts
///   and SET list as written, because the optimizer may fold a false
///   condition (`WHERE 1 = 0`) into an empty input, after which the table
///   would be handed no filter, meaning every row;
/// - binds it once: a plan analysed again (optimized, then executed, as
///   `execute_logical_plan` of an optimized plan does) keeps the binding
///   of its first analysis, when the WHERE was still a `Filter` (the
///   optimizer moves it into the scan, and reading the plan again would
///   find a different WHERE, or none).
#[derive(Debug)]
struct DmlGuard;

impl AnalyzerRule for DmlGuard {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let config = Arc::new(config.clone());
        let bound = plan.transform_down(|node| {
            let LogicalPlan::Dml(dml) = &node else { return Ok(Transformed::no(node)) };
            let provider = dml
                .target
                .downcast_ref::<DefaultTableSource>()
                .and_then(|s| s.table_provider.downcast_ref::<QuiverTable>());
            if matches!(dml.op, WriteOp::Insert(_)) && provider.is_some() {
                return nullable_values(node);
            }
            if !matches!(dml.op, WriteOp::Delete | WriteOp::Update) {
                return Ok(Transformed::no(node));
            }
            if provider.is_some_and(QuiverTable::is_bound) {
                return Ok(Transformed::no(node));
            }
            let parts = dml_parts(&dml.op, &dml.input, &config)?;
            let Some(table) = provider else { return Ok(Transformed::no(node)) };
            let mut dml = dml.clone();
            dml.target = provider_as_source(Arc::new(table.bound_to(parts)));
            Ok(Transformed::yes(LogicalPlan::Dml(dml)))
        })?;
        Ok(bound.data)
    }

    fn name(&self) -> &str {
        "quiverdb_dml_guard"
    }
}

/// `insert` with the `VALUES` in its input declared nullable. DataFusion
/// types an INSERT's VALUES as the table's columns, NOT NULL included, so
/// a NULL for a NOT NULL column failed as Arrow's "Column 'column1' is
/// declared as non-nullable", naming neither the column nor the table;
/// quiverdb's own check names both and reports a constraint violation.
/// `CREATE TABLE … (columns) AS VALUES` has the same VALUES. A plan
/// without such VALUES is left as it is.
pub(crate) fn nullable_values(insert: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let not_null = |values: &Values| values.schema.fields().iter().any(|f| !f.is_nullable());
    if !insert.exists(|node| Ok(matches!(node, LogicalPlan::Values(values) if not_null(values))))? {
        return Ok(Transformed::no(insert));
    }
    insert.transform_up(|node| match node {
        LogicalPlan::Values(values) if not_null(&values) => {
            let fields: Vec<_> = values
                .schema
                .iter()
                .map(|(qualifier, f)| (qualifier.cloned(), Arc::new(f.as_ref().clone().with_nullable(true))))
                .collect();
            let schema = DFSchema::new_with_metadata(fields, values.schema.metadata().clone())?;
            let values = Values { schema: Arc::new(schema), values: values.values };
            Ok(Transformed::yes(LogicalPlan::Values(values)))
        }
        // Parents of a changed node take its nullability.
        other => Ok(Transformed::yes(other.recompute_schema()?)),
    })
}

/// The WHERE conjuncts and SET list of a DELETE or UPDATE input plan, or
/// an error if the plan reads anything but the target table.
fn dml_parts(op: &WriteOp, input: &LogicalPlan, config: &Arc<ConfigOptions>) -> Result<DmlStatementParts> {
    let statement = if matches!(op, WriteOp::Delete) { "DELETE" } else { "UPDATE" };
    let mut filters = Vec::new();
    input.apply(|node| {
        match node {
            LogicalPlan::Filter(f) => {
                let simplifier = simplifier(f.input.schema(), config);
                for e in split_conjunction(&f.predicate) {
                    filters.push(simplifier.simplify(e.clone())?);
                }
            }
            // A WHERE already in the scan (a plan built or optimized
            // before quiverdb saw it) is the statement's WHERE too.
            LogicalPlan::TableScan(scan) => {
                // Filters may name columns the scan does not project.
                let full = DFSchema::try_from_qualified_schema(scan.table_name.clone(), &scan.source.schema())?;
                let simplifier = simplifier(&Arc::new(full), config);
                for e in &scan.filters {
                    filters.push(simplifier.simplify(e.clone())?);
                }
            }
            LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => {}
            LogicalPlan::Join(_) | LogicalPlan::Union(_) => {
                return Err(DataFusionError::NotImplemented(format!(
                    "{statement} reading other tables (FROM or USING) is not supported by quiverdb"
                )));
            }
            other => {
                return Err(DataFusionError::NotImplemented(format!(
                    "{statement} over a {} is not supported by quiverdb",
                    other.display()
                )));
            }
        }
        for e in node.expressions() {
            let subquery =
                e.exists(|e| Ok(matches!(e, Expr::Exists(_) | Expr::InSubquery(_) | Expr::ScalarSubquery(_))))?;
            if subquery {
                return Err(DataFusionError::NotImplemented(format!(
                    "{statement} with a subquery (IN, EXISTS or scalar) is not supported: DataFusion would not pass \
                     the condition to the table (apache/datafusion#24654); select the keys first, then {statement} \
                     with a literal IN list"
                )));
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let mut assignments = Vec::new();
    if matches!(op, WriteOp::Update) {
        let LogicalPlan::Projection(p) = input else {
            return Err(DataFusionError::Internal(format!("UPDATE input is not a projection: {}", input.display())));
        };
        let simplifier = simplifier(p.input.schema(), config);
        for e in &p.expr {
            if let Expr::Alias(alias) = e {
                let identity = matches!(alias.expr.as_ref(), Expr::Column(c) if c.name == alias.name);
                if !identity {
                    let value = simplifier.simplify(alias.expr.as_ref().clone())?;
                    assignments.push((alias.name.clone(), unqualified(value)?));
                }
            }
        }
    }
    let filters = filters.into_iter().map(unqualified).collect::<Result<Vec<_>>>()?;
    Ok(DmlStatementParts { filters, assignments })
}

/// Constant folding and literal-cast unwrapping (as DataFusion's optimizer
/// does), so that `name LIKE CAST('a%' AS Utf8View)` reaches the scan as a
/// literal pattern and `1 = 0` as `false`.
pub(crate) fn simplifier(schema: &DFSchemaRef, config: &Arc<ConfigOptions>) -> ExprSimplifier {
    let context =
        SimplifyContext::builder().with_schema(Arc::clone(schema)).with_config_options(Arc::clone(config)).build();
    ExprSimplifier::new(context)
}

/// `e` with its columns' table qualifiers removed.
fn unqualified(e: Expr) -> Result<Expr> {
    Ok(e.transform(|e| match e {
        Expr::Column(c) if c.relation.is_some() => Ok(Transformed::yes(Expr::Column(Column::new_unqualified(c.name)))),
        other => Ok(Transformed::no(other)),
    })?
    .data)
}
