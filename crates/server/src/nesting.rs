//! Bounds on how deeply a statement may nest, so that no statement can
//! overflow a thread's stack.
//!
//! The SQL parser bounds parentheses and subqueries, but an operator
//! chain (`1 + 1 + … + 1`, `a AND b AND …`, `x || y || …`) and a chain of
//! set operations (`SELECT 0 UNION ALL SELECT 1 …`) come out of it as
//! trees as deep as they are long, and so does a query over views defined
//! over views. DataFusion walks its trees by recursion: where it protects
//! the recursion (its `recursive_protection`), the stack grows on the
//! heap, but cloning, dropping, comparing, printing and evaluating a tree
//! recurse unprotected, one frame or more per level. A 4 KB chain
//! overflowed a 2 MiB stack and aborted the process.
//!
//! So quiverdb bounds the depth and gives its threads room for it:
//!
//! - [`parse`] rebalances long chains of an associative set operation
//!   (`UNION ALL` of thousands of `SELECT`s becomes a tree of logarithmic
//!   depth), then checks the statement's expressions and set operations
//!   against [`MAX_EXPRESSION_DEPTH`] and [`MAX_SET_OPERATION_BRANCHES`],
//!   and the width of each `CASE` against [`MAX_CASE_BRANCHES`] (its
//!   planning time grows with the square of its branches).
//!   A statement past a bound is refused with an error naming it, and its
//!   syntax tree is taken apart iteratively (dropping a tree of a million
//!   levels would recurse a million times);
//! - [`check_plan`] bounds a planned statement's depth (views are inlined
//!   by then, so views over views count) by [`MAX_PLAN_DEPTH`], walking it
//!   without recursion;
//! - the server's threads (its runtime's and the scan pool's) get
//!   [`THREAD_STACK_BYTES`] of stack: address space, of which only the
//!   pages a deep statement touches become resident.
//!
//! The bounds were chosen by measurement: statements at each bound answer
//! through the server, in a debug build too (`tests/cli.rs`).

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr as PlanExpr, LogicalPlan};
use datafusion::sql::parser::{CopyToSource, Statement};
use datafusion::sql::sqlparser::ast::{
    Expr, Ident, Query, SetExpr, SetOperator, SetQuantifier, Values, Visit, VisitMut, Visitor, VisitorMut,
};

/// How deeply expressions may nest in a statement (operators, function
/// calls, subqueries in expressions), e.g. the terms of `1 + 1 + … + 1`.
/// DataFusion's planning of an operator chain takes time quadratic in its
/// length (each level's name and type are derived from the whole subtree
/// below it): 2,048 integer terms plan in about 5 s in a release build.
pub const MAX_EXPRESSION_DEPTH: usize = 2_048;

/// How many branches the set operations of one query may join, e.g. the
/// `SELECT`s of `SELECT 0 UNION ALL SELECT 1 …` (planned in about 3 s at
/// the bound).
pub const MAX_SET_OPERATION_BRANCHES: usize = 4_096;

/// How many `WHEN` branches one `CASE` may have. DataFusion's planning of
/// a `CASE` takes time quadratic in its branches: 4,096 plan in about
/// 1.3 s in a release build, 200,000 took minutes of a server thread.
pub const MAX_CASE_BRANCHES: usize = 4_096;

/// How deeply set operations may nest in a query once long chains of one
/// operation are rebalanced (alternating `UNION` and `UNION ALL`, or
/// `EXCEPT`, which is not associative, stay as deep as they are long).
pub const MAX_SET_OPERATION_DEPTH: usize = 1_024;

/// How deep a planned statement may be, counting the plan nodes of every
/// view it reads, inlined (a view over a view over a table is a few
/// levels per view).
pub const MAX_PLAN_DEPTH: usize = 4_096;

/// The stack of each thread that plans or runs statements in the server
/// (the same as the scan threads').
pub const THREAD_STACK_BYTES: usize = quiverdb_scan::THREAD_STACK_BYTES;

/// What `SHOW TABLES` runs: the tables and views users made, not the
/// `information_schema` views or quiverdb's `system` tables; `SHOW TABLES
/// FROM <schema>` (or `IN`) lists one schema's, those too.
fn show_tables(schema: Option<&str>) -> String {
    let filter = match schema {
        Some(schema) => format!("table_schema = '{}'", schema.replace('\'', "''")),
        None => "table_schema NOT IN ('information_schema', 'system')".to_string(),
    };
    format!(
        "SELECT table_catalog, table_schema, table_name, table_type FROM information_schema.tables \
         WHERE {filter} ORDER BY table_schema, table_name"
    )
}

/// Parses `sql` as `state` does, then checks the statement's depth.
pub(crate) fn parse(state: &SessionState, sql: &str) -> Result<Statement> {
    let dialect = state.config().options().sql_parser.dialect;
    let mut statement = state.sql_to_statement(sql, &dialect)?;
    if let Some(schema) = show_tables_of(&statement, state.config().options().sql_parser.enable_ident_normalization) {
        statement = state.sql_to_statement(&show_tables(schema.as_deref()), &dialect)?;
    }
    let _ = visit_mut(&mut statement, &mut Rebalance);
    if let Err(e) = check_statement(&statement) {
        dismantle(&mut statement);
        return Err(e);
    }
    Ok(statement)
}

/// If `statement` is `SHOW TABLES` (nothing after it, or only `FROM`/`IN`
/// a schema), the schema it names (`Some(None)`: none).
fn show_tables_of(statement: &Statement, normalize: bool) -> Option<Option<String>> {
    use datafusion::sql::sqlparser::ast::Statement as Sql;
    let Statement::Statement(inner) = statement else { return None };
    let Sql::ShowTables { terse: false, history: false, extended: false, full: false, external: false, show_options } =
        inner.as_ref()
    else {
        return None;
    };
    let plain = show_options.starts_with.is_none()
        && show_options.limit.is_none()
        && show_options.limit_from.is_none()
        && show_options.filter_position.is_none();
    if !plain {
        return None;
    }
    match &show_options.show_in {
        None => Some(None),
        Some(within) if within.parent_type.is_none() => {
            let name = within.parent_name.as_ref()?;
            let [part] = &name.0[..] else { return None };
            let ident = part.as_ident()?;
            let value =
                if ident.quote_style.is_none() && normalize { ident.value.to_lowercase() } else { ident.value.clone() };
            Some(Some(value))
        }
        Some(_) => None,
    }
}

/// Refuses a statement whose expressions or set operations nest past the
/// bounds.
fn check_statement(statement: &Statement) -> Result<()> {
    match visit(statement, &mut Depth::default()) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// Visits the SQL of `statement` (what an `EXPLAIN` explains; the query
/// of a `COPY`).
fn visit<V: Visitor>(mut statement: &Statement, visitor: &mut V) -> ControlFlow<V::Break> {
    while let Statement::Explain(e) = statement {
        statement = &e.statement;
    }
    match statement {
        Statement::Statement(s) => s.visit(visitor),
        Statement::CopyTo(copy) => match &copy.source {
            CopyToSource::Query(q) => q.visit(visitor),
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
        },
        _ => ControlFlow::Continue(()),
    }
}

/// [`visit`], changing the statement.
fn visit_mut<V: VisitorMut>(mut statement: &mut Statement, visitor: &mut V) -> ControlFlow<V::Break> {
    while let Statement::Explain(e) = statement {
        statement = &mut e.statement;
    }
    match statement {
        Statement::Statement(s) => s.visit(visitor),
        Statement::CopyTo(copy) => match &mut copy.source {
            CopyToSource::Query(q) => q.visit(visitor),
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
        },
        _ => ControlFlow::Continue(()),
    }
}

/// Chains of one associative set operation (`UNION [ALL]`, `INTERSECT
/// [ALL]`) longer than this are rebalanced into a tree of logarithmic
/// depth; shorter ones keep the parser's left-deep shape (and their
/// `EXPLAIN`).
const REBALANCE_SET_OPERATIONS: usize = 16;

/// Rebalances long set-operation chains: `SELECT 0 UNION ALL SELECT 1 …`
/// with ten thousand branches is ten thousand levels deep as parsed, and
/// fourteen after. The same rows either way: these operations are
/// associative, and the branches keep their order (the first still names
/// the columns).
struct Rebalance;

impl VisitorMut for Rebalance {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        rebalance(&mut query.body, 0);
        ControlFlow::Continue(())
    }
}

/// Rebalances the run of one operation at the top of `body`, then the
/// runs of other operations among its operands, `depth` runs down (past
/// [`MAX_SET_OPERATION_DEPTH`] the statement is refused anyway). Its
/// stack grows on the heap: a level holds set expressions by value.
#[recursive::recursive]
fn rebalance(body: &mut SetExpr, depth: usize) {
    if depth > MAX_SET_OPERATION_DEPTH {
        return;
    }
    let SetExpr::SetOperation { op, set_quantifier, .. } = body else { return };
    let (op, quantifier) = (*op, *set_quantifier);
    let associative = matches!(op, SetOperator::Union | SetOperator::Intersect)
        && matches!(quantifier, SetQuantifier::All | SetQuantifier::Distinct | SetQuantifier::None);
    // The run's operands, rightmost first, taken apart without recursion
    // (a run of a non-associative operation is a run of one).
    let mut operands = Vec::new();
    let mut rest = std::mem::replace(body, empty_set());
    loop {
        match rest {
            SetExpr::SetOperation { left, op: o, set_quantifier: q, right }
                if o == op && q == quantifier && (associative || operands.is_empty()) =>
            {
                operands.push(*right);
                rest = *left;
            }
            other => {
                operands.push(other);
                break;
            }
        }
    }
    operands.reverse();
    for operand in &mut operands {
        rebalance(operand, depth + 1);
    }
    let join = |left, right| SetExpr::SetOperation {
        left: Box::new(left),
        op,
        set_quantifier: quantifier,
        right: Box::new(right),
    };
    *body = if associative && operands.len() > REBALANCE_SET_OPERATIONS {
        balanced(operands, &join)
    } else {
        let mut operands = operands.into_iter();
        let first = operands.next().unwrap_or_else(empty_set);
        operands.fold(first, join)
    };
}

/// `operands` joined into a balanced tree, in order (recursion as deep as
/// the tree: logarithmic).
fn balanced(mut operands: Vec<SetExpr>, join: &impl Fn(SetExpr, SetExpr) -> SetExpr) -> SetExpr {
    if operands.len() <= 1 {
        return operands.pop().unwrap_or_else(empty_set);
    }
    let right = operands.split_off(operands.len().div_ceil(2));
    join(balanced(operands, join), balanced(right, join))
}

/// A set expression without parts, put where one was taken out.
fn empty_set() -> SetExpr {
    SetExpr::Values(Values { explicit_row: false, value_keyword: false, rows: Vec::new() })
}

/// The error for a statement nesting `what` past `limit`.
fn too_deep(what: &str, limit: usize) -> DataFusionError {
    DataFusionError::Plan(format!(
        "the statement nests {what} more than {limit} levels deep (quiverdb's limit); split it, or use IN (…) \
         lists, CASE or a table of values instead of long operator chains"
    ))
}

/// Tracks the expression depth while the visitor walks a statement (the
/// visitor's own recursion grows its stack on the heap).
#[derive(Default)]
struct Depth {
    expressions: usize,
}

impl Visitor for Depth {
    type Break = DataFusionError;

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<DataFusionError> {
        let (depth, branches) = set_operations(&query.body);
        if depth > MAX_SET_OPERATION_DEPTH {
            return ControlFlow::Break(too_deep("set operations (UNION, INTERSECT, EXCEPT)", MAX_SET_OPERATION_DEPTH));
        }
        if branches > MAX_SET_OPERATION_BRANCHES {
            return ControlFlow::Break(DataFusionError::Plan(format!(
                "the query joins {branches} branches with set operations (UNION, INTERSECT, EXCEPT), more than \
                 {MAX_SET_OPERATION_BRANCHES} (quiverdb's limit); split it, or load the rows into a table"
            )));
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<DataFusionError> {
        self.expressions += 1;
        if self.expressions > MAX_EXPRESSION_DEPTH {
            return ControlFlow::Break(too_deep("expressions", MAX_EXPRESSION_DEPTH));
        }
        if let Expr::Case { conditions, .. } = expr
            && conditions.len() > MAX_CASE_BRANCHES
        {
            return ControlFlow::Break(DataFusionError::Plan(format!(
                "a CASE has {} WHEN branches, more than {MAX_CASE_BRANCHES} (quiverdb's limit); join a table of \
                 the mapping instead",
                conditions.len()
            )));
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<DataFusionError> {
        self.expressions -= 1;
        ControlFlow::Continue(())
    }
}

/// How deeply set operations nest in `body` and how many queries they
/// join (1 and 1 for a plain SELECT; a query in parentheses is a level
/// and counts its own branches), walked without recursion.
fn set_operations(body: &SetExpr) -> (usize, usize) {
    let (mut deepest, mut branches) = (0, 0);
    let mut pending = vec![(body, 1)];
    while let Some((e, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        match e {
            SetExpr::SetOperation { left, right, .. } => {
                pending.push((left, depth + 1));
                pending.push((right, depth + 1));
            }
            SetExpr::Query(q) => pending.push((&q.body, depth + 1)),
            _ => branches += 1,
        }
    }
    (deepest, branches)
}

/// Takes a statement's syntax tree apart so that dropping it does not
/// recurse: every expression is replaced by a leaf once its children are
/// (the visitor goes bottom-up), and set-operation trees are split into
/// their branches, the parts kept in lists that drop one shallow part
/// after another.
fn dismantle(statement: &mut Statement) {
    let _ = visit_mut(statement, &mut Dismantle::default());
}

#[derive(Default)]
struct Dismantle {
    exprs: Vec<Expr>,
    sets: Vec<SetExpr>,
}

impl VisitorMut for Dismantle {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        self.exprs.push(std::mem::replace(expr, Expr::Identifier(Ident::new(""))));
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let mut pending = vec![std::mem::replace(&mut *query.body, empty_set())];
        while let Some(mut e) = pending.pop() {
            match &mut e {
                SetExpr::SetOperation { left, right, .. } => {
                    pending.push(std::mem::replace(&mut **left, empty_set()));
                    pending.push(std::mem::replace(&mut **right, empty_set()));
                }
                SetExpr::Query(q) => pending.push(std::mem::replace(&mut *q.body, empty_set())),
                _ => {}
            }
            self.sets.push(e);
        }
        ControlFlow::Continue(())
    }
}

/// Refuses a plan deeper than [`MAX_PLAN_DEPTH`] (inputs and subqueries
/// each count a level), walked without recursion.
pub(crate) fn check_plan(plan: &LogicalPlan) -> Result<()> {
    let mut subqueries = Vec::new();
    walk_plan(plan, 1, &mut subqueries)?;
    while let Some((subquery, depth)) = subqueries.pop() {
        walk_plan(&subquery, depth, &mut subqueries)?;
    }
    Ok(())
}

/// Walks `plan` (at `base` levels deep) by its inputs, collecting the
/// subqueries of its expressions with their depth.
fn walk_plan(plan: &LogicalPlan, base: usize, subqueries: &mut Vec<(Arc<LogicalPlan>, usize)>) -> Result<()> {
    let mut pending = vec![(plan, base)];
    while let Some((node, depth)) = pending.pop() {
        if depth > MAX_PLAN_DEPTH {
            return Err(too_deep("plan nodes (views over views, subqueries, joins)", MAX_PLAN_DEPTH));
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                let subquery = match e {
                    PlanExpr::ScalarSubquery(s) => &s.subquery,
                    PlanExpr::Exists(x) => &x.subquery.subquery,
                    PlanExpr::InSubquery(x) => &x.subquery.subquery,
                    _ => return Ok(TreeNodeRecursion::Continue),
                };
                subqueries.push((Arc::clone(subquery), depth + 1));
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        pending.extend(node.inputs().into_iter().map(|input| (input, depth + 1)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use quiverdb_storage::Database;

    use super::*;

    async fn values(sql: &str) -> Result<Vec<i64>> {
        let ctx = crate::session_context(&Database::new());
        let batches = crate::sql(&ctx, sql).await?.collect().await?;
        Ok(batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().iter().flatten()).collect())
    }

    /// Counts of each value, the reference a multiset result is compared with.
    fn counts(values: impl IntoIterator<Item = i64>) -> BTreeMap<i64, usize> {
        let mut counts = BTreeMap::new();
        for v in values {
            *counts.entry(v).or_default() += 1;
        }
        counts
    }

    fn chain(n: usize, term: impl Fn(usize) -> String, op: &str) -> String {
        (0..n).map(term).collect::<Vec<_>>().join(op)
    }

    #[tokio::test]
    async fn rebalanced_set_operations_keep_their_rows() {
        // UNION ALL keeps every row, UNION and INTERSECT their distinct
        // ones; mixed runs keep the parser's grouping (left to right).
        let n = 300;
        let all = chain(n, |i| format!("SELECT {} AS v", i % 7), " UNION ALL ");
        assert_eq!(counts(values(&all).await.unwrap()), counts((0..n).map(|i| (i % 7) as i64)));
        let distinct = chain(n, |i| format!("SELECT {} AS v", i % 7), " UNION ");
        assert_eq!(counts(values(&distinct).await.unwrap()), counts(0..7));
        // (((0..300 UNION ALL) UNION SELECT 3) UNION ALL SELECT 3 ...): one
        // distinct step in the middle, then 40 more copies of 3.
        let mixed = format!("{all} UNION SELECT 3 UNION ALL {}", chain(40, |_| "SELECT 3".into(), " UNION ALL "));
        let mut expected = counts(0..7);
        *expected.entry(3).or_default() += 40;
        assert_eq!(counts(values(&mixed).await.unwrap()), expected);
        let intersect =
            format!("SELECT 1 AS v UNION ALL SELECT 2 INTERSECT {}", chain(n, |_| "SELECT 2".into(), " INTERSECT "));
        assert_eq!(counts(values(&intersect).await.unwrap()), counts([1, 2]));
        // EXCEPT is not associative: ((1,2,3 EXCEPT 1) EXCEPT 2) = {3}.
        let except = "SELECT 1 AS v UNION SELECT 2 UNION SELECT 3 EXCEPT SELECT 1 EXCEPT SELECT 2";
        assert_eq!(values(except).await.unwrap(), [3]);
    }

    #[tokio::test]
    async fn long_set_operation_chains_are_shallow_after_parsing() {
        let ctx = crate::session_context(&Database::new());
        let state = ctx.state();
        let sql = chain(MAX_SET_OPERATION_BRANCHES, |i| format!("SELECT {i}"), " UNION ALL ");
        let Statement::Statement(s) = parse(&state, &sql).unwrap() else { panic!("a query") };
        let datafusion::sql::sqlparser::ast::Statement::Query(q) = *s else { panic!("a query") };
        assert_eq!(set_operations(&q.body), (13, MAX_SET_OPERATION_BRANCHES));
        // A short chain keeps its shape.
        let Statement::Statement(s) = parse(&state, "SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3").unwrap() else {
            panic!("a query")
        };
        assert_eq!(s.to_string(), "SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3");
    }

    #[test]
    fn statements_past_the_bounds_are_refused() {
        on_server_stack(statements_past_the_bounds);
    }

    fn statements_past_the_bounds() {
        let plus = |n| format!("SELECT {}", chain(n, |_| "1".into(), " + "));
        let ctx = crate::session_context(&Database::new());
        let state = ctx.state();
        assert!(parse(&state, &plus(MAX_EXPRESSION_DEPTH)).is_ok());
        for sql in [
            plus(MAX_EXPRESSION_DEPTH + 1),
            format!("SELECT 1 WHERE {}", chain(300_000, |i| format!("{i} = {i}"), " OR ")),
            format!("SELECT (SELECT {}) + 1", chain(MAX_EXPRESSION_DEPTH, |_| "2".into(), " * ")),
        ] {
            let e = parse(&state, &sql).unwrap_err().to_string();
            assert!(e.contains(&format!("nests expressions more than {MAX_EXPRESSION_DEPTH} levels deep")), "{e}");
        }
        let union = |n, op| chain(n, |i| format!("SELECT {i}"), op);
        assert!(parse(&state, &union(MAX_SET_OPERATION_BRANCHES, " UNION ALL ")).is_ok());
        let e = parse(&state, &union(200_000, " UNION ALL ")).unwrap_err().to_string();
        assert!(e.contains("joins 200000 branches"), "{e}");
        // EXCEPT chains stay deep: refused by depth.
        let e = parse(&state, &union(MAX_SET_OPERATION_DEPTH + 1, " EXCEPT ")).unwrap_err().to_string();
        assert!(e.contains("nests set operations (UNION, INTERSECT, EXCEPT) more than"), "{e}");
        assert!(parse(&state, &union(MAX_SET_OPERATION_DEPTH - 1, " EXCEPT ")).is_ok());
        let case = |n| format!("SELECT CASE 1 {} END", chain(n, |i| format!("WHEN {i} THEN {i}"), " "));
        assert!(parse(&state, &case(MAX_CASE_BRANCHES)).is_ok());
        let e = parse(&state, &case(200_000)).unwrap_err().to_string();
        assert!(e.contains("a CASE has 200000 WHEN branches, more than 4096"), "{e}");
    }

    /// Refusing a statement takes no stack in proportion to its depth: a
    /// hundred thousand levels on a test thread's small stack.
    #[test]
    fn refusing_a_deep_statement_needs_little_stack() {
        let ctx = crate::session_context(&Database::new());
        let sql = format!("SELECT {}", chain(100_000, |_| "1".into(), " + "));
        let e = parse(&ctx.state(), &sql).unwrap_err().to_string();
        assert!(e.contains("nests expressions more than"), "{e}");
        let sql = chain(100_000, |i| format!("SELECT {i}"), " EXCEPT ");
        let e = parse(&ctx.state(), &sql).unwrap_err().to_string();
        assert!(e.contains("nests set operations"), "{e}");
    }

    /// Runs `f` on a thread with the server's stack (a plan at the bound
    /// is built, cloned and dropped by recursion).
    fn on_server_stack(f: impl FnOnce() + Send + 'static) {
        std::thread::Builder::new().stack_size(THREAD_STACK_BYTES).spawn(f).unwrap().join().unwrap();
    }

    #[test]
    fn plans_deeper_than_the_bound_are_refused() {
        on_server_stack(plans_deeper_than_the_bound);
    }

    fn plans_deeper_than_the_bound() {
        use datafusion::logical_expr::LogicalPlanBuilder;
        let mut plan = LogicalPlanBuilder::empty(true).build().unwrap();
        for _ in 1..MAX_PLAN_DEPTH {
            plan = LogicalPlanBuilder::from(plan).limit(0, Some(1)).unwrap().build().unwrap();
        }
        check_plan(&plan).unwrap();
        let deeper = LogicalPlanBuilder::from(plan).limit(0, Some(1)).unwrap().build().unwrap();
        let e = check_plan(&deeper).unwrap_err().to_string();
        assert!(e.contains(&format!("more than {MAX_PLAN_DEPTH} levels deep")), "{e}");
    }

    #[test]
    fn subqueries_count_toward_the_plan_depth() {
        on_server_stack(subqueries_count);
    }

    fn subqueries_count() {
        use datafusion::logical_expr::{LogicalPlanBuilder, lit, scalar_subquery};
        let mut inner = LogicalPlanBuilder::empty(true).build().unwrap();
        for _ in 1..MAX_PLAN_DEPTH - 1 {
            inner = LogicalPlanBuilder::from(inner).limit(0, Some(1)).unwrap().build().unwrap();
        }
        let inner = LogicalPlanBuilder::from(inner).project([lit(1i64)]).unwrap().build().unwrap();
        let outer = LogicalPlanBuilder::empty(true)
            .build()
            .and_then(|p| LogicalPlanBuilder::from(p).project([scalar_subquery(Arc::new(inner))]))
            .and_then(|b| b.build())
            .unwrap();
        let e = check_plan(&outer).unwrap_err().to_string();
        assert!(e.contains("plan nodes"), "{e}");
    }
}
