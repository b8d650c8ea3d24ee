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

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{Expr, Filter, LogicalPlan, Union, WriteOp};
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
