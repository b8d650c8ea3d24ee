//! [`QuiverTable`]: a quiverdb table as a DataFusion `TableProvider`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_cast::CastOptions;
use arrow_schema::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Constraint, Constraints, DFSchema, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};
use quiverdb_scan::Predicate;
use quiverdb_storage::{PhysicalType, Table};

use crate::exec::{DmlExec, DmlFilter, DmlOp, QuiverLookupExec, QuiverScanExec, Residual, ScanSource, UpdateStep};
use crate::translate::Translator;

/// Settings the SQL layer applies to quiverdb tables.
#[derive(Debug, Clone, Default)]
pub struct ScanSettings {
    /// Ids per reducer call of every scan (0 = the default, 1,024); tests
    /// set it tiny to exercise buffer boundaries.
    pub id_buffer: usize,
}

/// A quiverdb table seen by DataFusion: scans, statistics, filter
/// pushdown, and the DML hooks (INSERT, DELETE, UPDATE, TRUNCATE).
#[derive(Debug, Clone)]
pub struct QuiverTable {
    table: Table,
    defaults: Arc<HashMap<String, Expr>>,
    constraints: Option<Constraints>,
    settings: ScanSettings,
    /// The WHERE clause (and SET list) of the one DELETE or UPDATE this
    /// provider was bound to while it was analysed (see `DmlGuard`).
    statement: Option<Arc<DmlStatementParts>>,
}

/// The parts of a DELETE or UPDATE as written, read before DataFusion's
/// optimizer can drop them: it folds `WHERE 1 = 0` into an empty relation
/// and then hands the table no filter at all, which would mean "every row".
#[derive(Debug, Clone)]
pub(crate) struct DmlStatementParts {
    /// The WHERE clause's conjuncts, unqualified.
    pub(crate) filters: Vec<Expr>,
    /// UPDATE's `column = expr` list (only the changed columns), unqualified.
    pub(crate) assignments: Vec<(String, Expr)>,
}

impl QuiverTable {
    /// A provider for `table`, with the column defaults `defaults`.
    pub fn new(table: Table, defaults: Arc<HashMap<String, Expr>>, settings: ScanSettings) -> Self {
        // quiverdb enforces the primary key and UNIQUE constraints, so
        // DataFusion may rely on them.
        let key = table.schema().primary_key().to_vec();
        let mut all: Vec<Constraint> = (!key.is_empty()).then_some(Constraint::PrimaryKey(key)).into_iter().collect();
        all.extend(table.schema().unique().iter().map(|set| Constraint::Unique(set.to_vec())));
        let constraints = (!all.is_empty()).then(|| Constraints::new_unverified(all));
        Self { table, defaults, constraints, settings, statement: None }
    }

    /// This provider bound to one DELETE or UPDATE: its DML hooks use
    /// `parts` instead of what DataFusion's optimizer passes.
    pub(crate) fn bound_to(&self, parts: DmlStatementParts) -> Self {
        Self { statement: Some(Arc::new(parts)), ..self.clone() }
    }

    /// True once bound to a DELETE or UPDATE ([`QuiverTable::bound_to`]).
    pub(crate) fn is_bound(&self) -> bool {
        self.statement.is_some()
    }

    /// The statement this provider is bound to; a DELETE or UPDATE that
    /// reaches an unbound provider did not pass quiverdb's analysis (a
    /// session without it), and its filters cannot be trusted: DataFusion
    /// hands none for a condition its optimizer folded away, which would
    /// mean every row.
    fn statement(&self, what: &str) -> Result<&DmlStatementParts> {
        self.statement.as_deref().ok_or_else(|| {
            DataFusionError::Plan(format!(
                "{what} on quiverdb table '{}' must be planned by a quiverdb session (quiverdb::session_context), \
                 which binds the statement to its WHERE clause",
                self.table.name()
            ))
        })
    }

    /// The storage table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The scan of `filters`: what quiverdb's predicate evaluates (exact
    /// filters, plus pruning conditions for the others), with the texts
    /// EXPLAIN shows; and the residual — every filter not evaluated
    /// exactly, run by DataFusion on the gathered rows.
    fn scan_filter(
        &self,
        state: &dyn Session,
        filters: &[Expr],
        projection: &[usize],
    ) -> Result<(ScanFilter, Residual)> {
        let schema = self.table.schema();
        let translator = Translator::logical(schema);
        let mut parts = Vec::new();
        let (mut exact, mut pruning) = (Vec::new(), Vec::new());
        let mut rest = Vec::new();
        for f in filters {
            if let Some(p) = translator.predicate(f) {
                parts.push(p);
                exact.push(f.to_string());
                continue;
            }
            if let Some(p) = translator.necessary(f) {
                parts.push(p);
                pruning.push(f.to_string());
            }
            rest.push(f);
        }
        let residual = self.residual(state, &rest, projection)?;
        Ok(((combine(parts), exact, pruning), residual))
    }

    /// The rows a DELETE or UPDATE with `filters` touches: translated
    /// filters run in the scan, the rest as DataFusion expressions over
    /// the columns they read (over every column with `all_columns`).
    fn dml_filter(&self, state: &dyn Session, filters: &[Expr], all_columns: bool) -> Result<DmlFilter> {
        let schema = self.table.schema();
        let translator = Translator::logical(schema);
        let mut parts = Vec::new();
        let mut pushed_text = Vec::new();
        let mut residual_exprs = Vec::new();
        for f in filters {
            match translator.predicate(f) {
                Some(p) => {
                    parts.push(p);
                    pushed_text.push(f.to_string());
                }
                None => residual_exprs.push(f.clone()),
            }
        }
        let mut columns: Vec<usize> = if all_columns {
            (0..schema.len()).collect()
        } else {
            residual_exprs
                .iter()
                .flat_map(|e| e.column_refs())
                .map(|c| schema.arrow().index_of(&c.name))
                .collect::<Result<_, _>>()?
        };
        columns.sort_unstable();
        columns.dedup();
        let projected = DFSchema::try_from(schema.arrow().project(&columns)?)?;
        let residual = residual_exprs
            .iter()
            .map(|e| state.create_physical_expr(e.clone(), &projected))
            .collect::<Result<Vec<_>>>()?;
        let residual_text = residual_exprs.iter().map(ToString::to_string).collect();
        Ok(DmlFilter { predicate: combine(parts), residual, columns, pushed_text, residual_text })
    }

    /// The residual of `filters` over the gathered columns: `projection`,
    /// then the columns only the filters read.
    fn residual(&self, state: &dyn Session, filters: &[&Expr], projection: &[usize]) -> Result<Residual> {
        let schema = self.table.schema();
        let mut residual = Residual::default();
        if filters.is_empty() {
            return Ok(residual);
        }
        for c in filters.iter().flat_map(|e| e.column_refs()) {
            let i = schema.arrow().index_of(&c.name)?;
            if !projection.contains(&i) && !residual.extra.contains(&i) {
                residual.extra.push(i);
            }
        }
        let gathered: Vec<usize> = projection.iter().chain(&residual.extra).copied().collect();
        let df_schema = DFSchema::try_from(schema.arrow().project(&gathered)?)?;
        for e in filters {
            residual.exprs.push(state.create_physical_expr((*e).clone(), &df_schema)?);
            residual.text.push(e.to_string());
        }
        Ok(residual)
    }

    /// The primary-key lookup `filters` ask for, when their conjunction
    /// fixes every key column to at most [`MAX_LOOKUP_KEYS`] values
    /// together: the distinct keys (one array per key column, in the
    /// columns' types) and which filters fixed them.
    fn key_lookup(&self, filters: &[Expr]) -> Option<(Vec<ArrayRef>, Vec<usize>)> {
        let schema = self.table.schema();
        let key = schema.primary_key();
        // Floats compare equal where their keys differ (-0.0 and 0.0).
        if key.is_empty()
            || key.iter().any(|&c| matches!(schema.physical(c), PhysicalType::Float32 | PhysicalType::Float64))
        {
            return None;
        }
        let mut values: Vec<Option<Vec<ScalarValue>>> = vec![None; key.len()];
        let mut used = Vec::new();
        for (i, f) in filters.iter().enumerate() {
            let Some((column, list)) = key_values(f) else { continue };
            let Ok(c) = schema.arrow().index_of(column) else { continue };
            let Some(k) = key.iter().position(|&kc| kc == c) else { continue };
            // In the column's type (compared and deduplicated there); a NULL
            // matches no row.
            let target = schema.field(c).data_type();
            let mut list = list
                .iter()
                .filter(|v| !v.is_null())
                .map(|v| exact_cast(v, target))
                .collect::<Option<Vec<ScalarValue>>>()?;
            let mut seen = std::collections::HashSet::new();
            list.retain(|v| seen.insert(v.clone()));
            let slot = &mut values[k];
            *slot = Some(match slot.take() {
                // Two filters on one column: the values both allow.
                Some(before) => before.into_iter().filter(|v| seen.contains(v)).collect(),
                None => list,
            });
            used.push(i);
        }
        let values: Vec<Vec<ScalarValue>> = values.into_iter().collect::<Option<_>>()?;
        let combinations = values.iter().try_fold(1usize, |n, v| n.checked_mul(v.len()))?;
        if combinations > MAX_LOOKUP_KEYS {
            return None;
        }
        // Every combination once: each column's values are distinct.
        let mut rows: Vec<Vec<ScalarValue>> = vec![Vec::new()];
        for column in &values {
            rows = rows
                .iter()
                .flat_map(|r| column.iter().map(move |v| r.iter().cloned().chain([v.clone()]).collect::<Vec<_>>()))
                .collect();
        }
        let mut arrays = Vec::with_capacity(key.len());
        for (k, &c) in key.iter().enumerate() {
            let column: Vec<ScalarValue> = rows.iter().map(|r| r[k].clone()).collect();
            let target = schema.field(c).data_type();
            arrays.push(if column.is_empty() {
                arrow_array::new_empty_array(target)
            } else {
                ScalarValue::iter_to_array(column).ok()?
            });
        }
        Some((arrays, used))
    }

    fn threads(state: &dyn Session) -> usize {
        state.config().target_partitions()
    }
}

/// `value` in type `target`, when it converts exactly (and back to the
/// same value): a value that changes on the way is left to the scan.
fn exact_cast(value: &ScalarValue, target: &DataType) -> Option<ScalarValue> {
    let strict = CastOptions { safe: false, ..CastOptions::default() };
    let cast = value.cast_to_with_options(target, &strict).ok()?;
    let back = cast.cast_to_with_options(&value.data_type(), &strict).ok()?;
    (back == *value).then_some(cast)
}

/// Most keys a lookup probes; more are left to a scan.
const MAX_LOOKUP_KEYS: usize = 100_000;

/// The column `filter` fixes and the values it allows: `c = v`, `v = c`,
/// `c IN (v, …)`, or an OR of those on one column.
fn key_values(filter: &Expr) -> Option<(&str, Vec<ScalarValue>)> {
    match filter {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) => match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), Expr::Literal(v, _)) | (Expr::Literal(v, _), Expr::Column(c)) => {
                Some((c.name.as_str(), vec![v.clone()]))
            }
            _ => None,
        },
        Expr::InList(InList { expr, list, negated: false }) => {
            let Expr::Column(c) = expr.as_ref() else { return None };
            let values = list
                .iter()
                .map(|e| match e {
                    Expr::Literal(v, _) => Some(v.clone()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            Some((c.name.as_str(), values))
        }
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
            let (a, mut x) = key_values(left)?;
            let (b, y) = key_values(right)?;
            (a == b).then(|| {
                x.extend(y);
                (a, x)
            })
        }
        _ => None,
    }
}

/// A scan's predicate, and the texts of its exact and pruning filters.
type ScanFilter = (Option<Predicate>, Vec<String>, Vec<String>);

/// The conjunction of `parts` (`None` when empty).
fn combine(mut parts: Vec<Predicate>) -> Option<Predicate> {
    match parts.len() {
        0 => None,
        1 => parts.pop(),
        _ => Some(Predicate::And(parts)),
    }
}

#[async_trait]
impl TableProvider for QuiverTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(self.table.arrow_schema())
    }

    fn constraints(&self) -> Option<&Constraints> {
        self.constraints.as_ref()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults.get(column)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let projection: Vec<usize> = projection.cloned().unwrap_or_else(|| (0..self.table.schema().len()).collect());
        if let Some((keys, used)) = self.key_lookup(filters) {
            let rest: Vec<&Expr> =
                filters.iter().enumerate().filter(|(i, _)| !used.contains(i)).map(|(_, f)| f).collect();
            let residual = self.residual(state, &rest, &projection)?;
            let key_text = used.iter().map(|&i| filters[i].to_string()).collect();
            let name = self.table.name().to_string();
            let exec =
                QuiverLookupExec::try_new(name, self.table.snapshot(), keys, key_text, projection, residual, limit)?;
            return Ok(Arc::new(exec));
        }
        let ((filter, exact_text, pruning_text), residual) = self.scan_filter(state, filters, &projection)?;
        let source = ScanSource {
            table: self.table.name().to_string(),
            snapshot: self.table.snapshot(),
            filter,
            exact_text,
            pruning_text,
            id_buffer: self.settings.id_buffer,
        };
        let config = state.config();
        let exec = QuiverScanExec::try_new(
            source,
            projection,
            residual,
            limit,
            config.target_partitions(),
            config.batch_size(),
        )?;
        Ok(Arc::new(exec))
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> Result<Vec<TableProviderFilterPushDown>> {
        let translator = Translator::logical(self.table.schema());
        Ok(filters
            .iter()
            .map(|f| {
                if translator.predicate(f).is_some() {
                    TableProviderFilterPushDown::Exact
                } else if translator.necessary(f).is_some() {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let overwrite = match insert_op {
            InsertOp::Append => false,
            InsertOp::Overwrite => true,
            InsertOp::Replace => {
                return Err(DataFusionError::NotImplemented("REPLACE INTO is not supported by quiverdb".into()));
            }
        };
        let expected = self.table.schema().len();
        let found = input.schema().fields().len();
        if found != expected {
            return Err(DataFusionError::Plan(format!(
                "INSERT into '{}' gives {found} columns, the table has {expected}",
                self.table.name()
            )));
        }
        let op = DmlOp::Insert { input, overwrite };
        Ok(Arc::new(DmlExec::new(self.table.clone(), op, Self::threads(state))))
    }

    async fn delete_from(&self, state: &dyn Session, _filters: Vec<Expr>) -> Result<Arc<dyn ExecutionPlan>> {
        let filters = self.statement("DELETE")?.filters.clone();
        let filter = self.dml_filter(state, &filters, false)?;
        Ok(Arc::new(DmlExec::new(self.table.clone(), DmlOp::Delete(filter), Self::threads(state))))
    }

    async fn update(
        &self,
        state: &dyn Session,
        _assignments: Vec<(String, Expr)>,
        _filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let statement = self.statement("UPDATE")?;
        let (assignments, filters) = (statement.assignments.clone(), statement.filters.clone());
        let filter = self.dml_filter(state, &filters, true)?;
        let schema = self.table.schema().arrow();
        let full = DFSchema::try_from(Arc::clone(schema))?;
        let mut exprs: Vec<(usize, Arc<dyn PhysicalExpr>)> = Vec::with_capacity(assignments.len());
        let mut text = Vec::with_capacity(assignments.len());
        for (column, expr) in &assignments {
            let c = schema.index_of(column).map_err(|_| {
                DataFusionError::Plan(format!(
                    "UPDATE sets column '{column}', which table '{}' does not have",
                    self.table.name()
                ))
            })?;
            exprs.push((c, state.create_physical_expr(expr.clone(), &full)?));
            text.push(format!("{column} = {expr}"));
        }
        let condition = filters.iter().map(|f| state.create_physical_expr(f.clone(), &full)).collect::<Result<_>>()?;
        let op = DmlOp::Update { filter, step: UpdateStep { condition, assignments: exprs }, text };
        Ok(Arc::new(DmlExec::new(self.table.clone(), op, Self::threads(state))))
    }

    async fn truncate(&self, state: &dyn Session) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(DmlExec::new(self.table.clone(), DmlOp::Truncate, Self::threads(state))))
    }
}
