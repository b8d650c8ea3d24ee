//! One statement run with many parameter rows (ADBC `executemany`, JDBC
//! batches) as one transaction: all rows or none.
//!
//! ```text
//!   INSERT INTO t VALUES ($1, $2) × n rows  ──▶  INSERT INTO t (row 1 ∪ … ∪ row n)
//!   DELETE FROM t WHERE p($1)     × n rows  ──▶  DELETE FROM t WHERE p(row 1) OR … OR p(row n)
//! ```
//!
//! Each is one storage transaction, exactly equivalent to running the rows
//! one after another (deletes only remove rows, so their union is the same
//! rows). An UPDATE's rows may change each other's input, so they become
//! one plan that applies them in order inside one transaction
//! ([`as_one_update`]). Other statements run row by row.
//!
//! An INSERT whose rows are one `VALUES` list is planned once: every
//! parameter row is bound straight into one `VALUES` list
//! ([`bind_insert_values`]), so its cost per row is the row's values, not
//! a plan (200,000 rows bound one plan each took minutes and gigabytes).
//! So is a DELETE whose placeholders are all in its WHERE
//! ([`bind_delete_where`]): the rows' WHEREs become one.

use std::sync::Arc;

use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::{Expr, Filter, LogicalPlan, LogicalPlanBuilder, Union, WriteOp};
use datafusion::physical_plan::ExecutionPlan;

use crate::exec::DmlExec;

/// `plans`, one UPDATE of a quiverdb table bound to each parameter row, as
/// one execution plan that applies them in order in one transaction;
/// `None` if they are not that.
pub(crate) async fn as_one_update(
    state: &SessionState,
    plans: &[LogicalPlan],
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let updates = plans.iter().all(|p| matches!(p, LogicalPlan::Dml(d) if d.op == WriteOp::Update));
    if plans.len() < 2 || !updates {
        return Ok(None);
    }
    let mut physical = Vec::with_capacity(plans.len());
    for plan in plans {
        physical.push(state.create_physical_plan(plan).await?);
    }
    Ok(DmlExec::update_steps(&physical).map(|exec| Arc::new(exec) as Arc<dyn ExecutionPlan>))
}

/// `plans` (one statement bound to each parameter row) as one plan when
/// they can run as one transaction, else as they are.
pub(crate) fn as_one_statement(plans: Vec<LogicalPlan>) -> Result<Vec<LogicalPlan>> {
    if plans.len() < 2 {
        return Ok(plans);
    }
    let dmls: Vec<_> = plans.iter().filter_map(|p| if let LogicalPlan::Dml(d) = p { Some(d) } else { None }).collect();
    if dmls.len() != plans.len() {
        return Ok(plans);
    }
    let first = dmls[0].clone();
    match &first.op {
        WriteOp::Insert(_) => {
            // One union of every row's input, flat: a chain of unions
            // would be as deep as there are rows.
            let inputs = dmls.iter().map(|d| Arc::clone(&d.input)).collect();
            let mut one = first;
            one.input = Arc::new(LogicalPlan::Union(Union::try_new_with_loose_types(inputs)?));
            Ok(vec![LogicalPlan::Dml(one)])
        }
        WriteOp::Delete => {
            let predicates: Option<Vec<_>> = dmls.iter().map(|d| where_of(&d.input)).collect();
            let (Some(predicates), LogicalPlan::Filter(filter)) = (predicates, first.input.as_ref()) else {
                return Ok(plans);
            };
            let Some(any) = balanced_disjunction(predicates) else { return Ok(plans) };
            let mut one = first.clone();
            one.input = Arc::new(LogicalPlan::Filter(Filter::try_new(any, Arc::clone(&filter.input))?));
            Ok(vec![LogicalPlan::Dml(one)])
        }
        _ => Ok(plans),
    }
}

/// The WHERE of a DELETE's input (`Filter` over the table scan).
fn where_of(input: &LogicalPlan) -> Option<datafusion::logical_expr::Expr> {
    match input {
        LogicalPlan::Filter(f) => Some(f.predicate.clone()),
        _ => None,
    }
}

/// `predicates` joined by OR into a balanced tree, in order: as deep as
/// the logarithm of their number (a chain would be as deep as there are
/// parameter rows, and trees are cloned and dropped by recursion).
fn balanced_disjunction(mut predicates: Vec<Expr>) -> Option<Expr> {
    if predicates.len() <= 1 {
        return predicates.pop();
    }
    let right = predicates.split_off(predicates.len().div_ceil(2));
    Some(balanced_disjunction(predicates)?.or(balanced_disjunction(right)?))
}

/// `plan`, an INSERT whose only placeholders are in one `VALUES` list, with
/// each of `rows` parameter rows (`row(i)`: the values of `$1`, `$2`, ...)
/// bound into one `VALUES` list, in order; `None` if the plan is not that.
pub(crate) fn bind_insert_values(
    plan: &LogicalPlan,
    rows: usize,
    row: impl Fn(usize) -> Result<Vec<ScalarValue>>,
) -> Result<Option<LogicalPlan>> {
    if !matches!(plan, LogicalPlan::Dml(d) if matches!(d.op, WriteOp::Insert(_))) {
        return Ok(None);
    }
    let Some(LogicalPlan::Values(values)) = only_node_with_placeholders(plan)? else { return Ok(None) };
    let mut bound = Vec::with_capacity(rows.saturating_mul(values.values.len()));
    for i in 0..rows {
        let params = row(i)?;
        for list_row in &values.values {
            bound.push(list_row.iter().map(|e| substitute(e, &params)).collect::<Result<Vec<_>>>()?);
        }
    }
    let list = LogicalPlanBuilder::values(bound)?.build()?;
    let one = plan.clone().transform_up(|node| match node {
        LogicalPlan::Values(_) if node.expressions().iter().any(has_placeholder) => Ok(Transformed::yes(list.clone())),
        LogicalPlan::Values(_) | LogicalPlan::TableScan(_) | LogicalPlan::EmptyRelation(_) => Ok(Transformed::no(node)),
        other => Ok(Transformed::yes(other.recompute_schema()?)),
    })?;
    Ok(Some(one.data))
}

/// Whether `e` holds a placeholder.
fn has_placeholder(e: &Expr) -> bool {
    e.exists(|e| Ok(matches!(e, Expr::Placeholder(_)))).unwrap_or(true)
}

/// `plan`, a DELETE whose only placeholders are in its WHERE, with each of
/// `rows` parameter rows bound into one WHERE: `c IN (v1, …)` when every
/// row's WHERE is `c = v` (the scan tests a sorted set), else the rows'
/// WHEREs joined by OR; `None` if the plan is not that.
pub(crate) fn bind_delete_where(
    plan: &LogicalPlan,
    rows: usize,
    row: impl Fn(usize) -> Result<Vec<ScalarValue>>,
) -> Result<Option<LogicalPlan>> {
    let LogicalPlan::Dml(dml) = plan else { return Ok(None) };
    if dml.op != WriteOp::Delete {
        return Ok(None);
    }
    let Some(LogicalPlan::Filter(filter)) = only_node_with_placeholders(plan)? else { return Ok(None) };
    if !matches!(dml.input.as_ref(), LogicalPlan::Filter(f) if f.predicate == filter.predicate) {
        return Ok(None);
    }
    let mut predicates = Vec::with_capacity(rows);
    for i in 0..rows {
        predicates.push(substitute(&filter.predicate, &row(i)?)?);
    }
    let Some(any) = in_list(&predicates).or_else(|| balanced_disjunction(predicates)) else { return Ok(None) };
    let mut one = dml.clone();
    one.input = Arc::new(LogicalPlan::Filter(Filter::try_new(any, Arc::clone(&filter.input))?));
    Ok(Some(LogicalPlan::Dml(one)))
}

/// `c IN (v1, …)` for predicates that are each `c = v` (or `v = c`) over
/// one column `c`.
fn in_list(predicates: &[Expr]) -> Option<Expr> {
    use datafusion::logical_expr::{BinaryExpr, Operator};
    let mut column = None;
    let mut values = Vec::with_capacity(predicates.len());
    for p in predicates {
        let Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) = p else { return None };
        let (c, v) = match (left.as_ref(), right.as_ref()) {
            (c @ Expr::Column(_), v @ Expr::Literal(..)) | (v @ Expr::Literal(..), c @ Expr::Column(_)) => (c, v),
            _ => return None,
        };
        if *column.get_or_insert(c) != c {
            return None;
        }
        values.push(v.clone());
    }
    Some(column?.clone().in_list(values, false))
}

/// The one node of `plan` (subqueries included) whose expressions hold
/// placeholders; `None` if there are none or several.
fn only_node_with_placeholders(plan: &LogicalPlan) -> Result<Option<LogicalPlan>> {
    let mut found = Vec::new();
    plan.apply_with_subqueries(|node| {
        let mut has = false;
        node.apply_expressions(|e| {
            has |= has_placeholder(e);
            Ok(if has { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
        })?;
        if has {
            found.push(node.clone());
        }
        Ok(if found.len() > 1 { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
    })?;
    Ok(if found.len() == 1 { found.pop() } else { None })
}

/// `e` with each placeholder `$n` replaced by `params[n - 1]`.
fn substitute(e: &Expr, params: &[ScalarValue]) -> Result<Expr> {
    e.clone()
        .transform_up(|e| match e {
            Expr::Placeholder(Placeholder { id, .. }) => {
                let value = id
                    .strip_prefix('$')
                    .and_then(|n| n.parse::<usize>().ok())
                    .and_then(|n| params.get(n.checked_sub(1)?))
                    .ok_or_else(|| DataFusionError::Plan(format!("no value for placeholder {id}")))?;
                Ok(Transformed::yes(Expr::Literal(value.clone(), None)))
            }
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
}
