//! Logical plans of recent queries, by SQL text.
//!
//! A Flight SQL query is planned twice by protocol: GetFlightInfo needs its
//! schema and DoGet runs it. DataFusion's SQL planning costs about a
//! millisecond for a one-table query and grows quadratically with the
//! select list (a 250-column `SELECT *` took 18 ms on a 2-core machine),
//! so the service keeps the unoptimized logical plans of recent queries
//! and plans each text once.
//!
//! Logical optimization (analysis, type coercion, the optimizer's rules)
//! is the next per-execution cost that grows with the select list: about
//! a quarter of the server's CPU for a 1,000-row × 250-column result. An
//! entry also keeps the optimized plan once a query has run, when the
//! optimizer's output depends on nothing but the plan and the catalog:
//! see [`optimization_is_reusable`].
//!
//! A logical plan only names tables: their rows are read when the plan is
//! turned into a physical plan at execution, so a cached plan stays valid
//! until a table or view is created, replaced or dropped — the catalog
//! version each entry records.
//!
//! The cache is bounded in bytes as well as entries: a plan holds its
//! statement's literals, and the optimizer folds constant expressions
//! into literals that can be far larger than the statement
//! (`repeat('x', 200000000)` is 200 MB). An entry costs its text and the
//! literals of its plans; one over [`MAX_ENTRY_BYTES`] is not kept, and
//! the least recently used go until all fit [`MAX_BYTES`].

use std::collections::HashMap;
use std::sync::Mutex;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};

/// Entries kept; the least recently used goes first.
const CAPACITY: usize = 256;

/// SQL texts longer than this are planned every time (a cache of huge
/// statements would hold a lot of memory for little gain).
const MAX_SQL_BYTES: usize = 64 << 10;

/// Bytes of one entry (its text and its plans' literals) beyond which it is
/// not kept.
const MAX_ENTRY_BYTES: usize = 1 << 20;

/// Bytes of all entries.
const MAX_BYTES: usize = 32 << 20;

#[derive(Debug, Default)]
pub(crate) struct PlanCache {
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    /// Advances on every use; an entry's `used` is its last tick.
    tick: u64,
    plans: HashMap<String, Cached>,
    /// Sum of the entries' `bytes`.
    bytes: usize,
    /// The newest catalog version seen.
    version: u64,
}

impl Entries {
    /// Drops every entry made before catalog `version`, once a newer
    /// version is seen: a plan holds its tables (their rows, through the
    /// table providers it names), so a stale entry would keep a dropped
    /// table's memory alive.
    fn at_version(&mut self, version: u64) {
        if version > self.version {
            self.version = version;
            self.plans.retain(|_, c| c.version >= version);
            self.bytes = self.plans.values().map(|c| c.bytes).sum();
        }
    }

    fn remove(&mut self, sql: &str) {
        if let Some(old) = self.plans.remove(sql) {
            self.bytes -= old.bytes;
        }
    }

    /// Removes the least recently used entries until `more` bytes and one
    /// more entry fit.
    fn make_room(&mut self, more: usize) {
        while !self.plans.is_empty() && (self.plans.len() >= CAPACITY || self.bytes + more > MAX_BYTES) {
            let oldest = self.plans.iter().min_by_key(|(_, c)| c.used).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.remove(&oldest);
            }
        }
    }
}

#[derive(Debug)]
struct Cached {
    version: u64,
    plan: LogicalPlan,
    /// Whether `plan`'s optimization may be kept ([`optimization_is_reusable`]).
    reusable: bool,
    /// `plan` optimized, once a run has made it (only when `reusable`).
    optimized: Option<LogicalPlan>,
    used: u64,
    /// What the entry holds: its text and its plans' literals.
    bytes: usize,
    /// `bytes` without the optimized plan's literals.
    unoptimized_bytes: usize,
}

impl PlanCache {
    /// The plan of `sql` made at catalog `version`, if there is one.
    pub(crate) fn get(&self, sql: &str, version: u64) -> Option<LogicalPlan> {
        let mut entries = self.inner.lock().ok()?;
        entries.at_version(version);
        entries.tick += 1;
        let tick = entries.tick;
        let cached = entries.plans.get_mut(sql)?;
        if cached.version != version {
            entries.remove(sql);
            return None;
        }
        cached.used = tick;
        Some(cached.plan.clone())
    }

    /// Forgets every entry made before catalog `version`.
    pub(crate) fn forget_before(&self, version: u64) {
        if let Ok(mut entries) = self.inner.lock() {
            entries.at_version(version);
        }
    }

    /// The optimized plan of `sql` made at catalog `version`, if a run has
    /// kept one.
    pub(crate) fn optimized(&self, sql: &str, version: u64) -> Option<LogicalPlan> {
        let entries = self.inner.lock().ok()?;
        let cached = entries.plans.get(sql).filter(|c| c.version == version)?;
        cached.optimized.clone()
    }

    /// Keeps `optimized`, the optimized form of the entry of `sql` made at
    /// catalog `version`, if that entry is still there and its
    /// optimization is reusable.
    pub(crate) fn set_optimized(&self, sql: &str, version: u64, optimized: &LogicalPlan) {
        let more = literal_bytes(optimized);
        let Ok(mut entries) = self.inner.lock() else { return };
        let fits = entries
            .plans
            .get(sql)
            .is_some_and(|c| c.version == version && c.reusable && c.unoptimized_bytes + more <= MAX_ENTRY_BYTES);
        if !fits {
            return;
        }
        // Out while older entries make room, then back in.
        let Some(mut cached) = entries.plans.remove(sql) else { return };
        entries.bytes -= cached.bytes;
        cached.optimized = Some(optimized.clone());
        cached.bytes = cached.unoptimized_bytes + more;
        entries.make_room(cached.bytes);
        entries.bytes += cached.bytes;
        entries.plans.insert(sql.to_string(), cached);
    }

    /// Keeps `plan`, the plan of `sql` made at catalog `version` (read
    /// before planning started).
    pub(crate) fn insert(&self, sql: &str, version: u64, plan: &LogicalPlan) {
        if sql.len() > MAX_SQL_BYTES {
            return;
        }
        let bytes = sql.len() + literal_bytes(plan);
        if bytes > MAX_ENTRY_BYTES {
            return;
        }
        let reusable = optimization_is_reusable(plan);
        let Ok(mut entries) = self.inner.lock() else { return };
        entries.at_version(version);
        if version < entries.version {
            // Planned before the catalog changed: already stale.
            return;
        }
        entries.tick += 1;
        let used = entries.tick;
        entries.remove(sql);
        entries.make_room(bytes);
        entries.bytes += bytes;
        let cached =
            Cached { version, plan: plan.clone(), reusable, optimized: None, used, bytes, unoptimized_bytes: bytes };
        entries.plans.insert(sql.to_string(), cached);
    }

    /// Bytes the entries hold.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.inner.lock().map_or(0, |e| e.bytes)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().map_or(0, |e| e.plans.len())
    }
}

/// Heap bytes of the literals in `plan` (and its subqueries).
fn literal_bytes(plan: &LogicalPlan) -> usize {
    let mut bytes = 0;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::Literal(value, _) = e {
                    bytes += value.size();
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(TreeNodeRecursion::Continue)
    });
    bytes
}

/// Whether optimizing `plan` gives the same plan every time at one
/// catalog version, so that the result may be kept and run again.
///
/// DataFusion's logical optimizer reads nothing of a table but its schema
/// and which filters its provider takes (quiverdb answers from the schema
/// alone), and only the shared session's plans are cached, whose options
/// do not change (a client's `SET` gives it a session of its own). What it does read per execution is the execution's properties:
/// it folds stable functions (`now()`, `current_date`) to the execution's
/// start time and variables (`@@name`) to their current values. Plans
/// that call any function that is not immutable, read a variable, take
/// parameters, or explain (whose output records the optimizer's passes)
/// are optimized at every execution, and so are plans that read a view
/// whose definition does one of these.
pub(crate) fn optimization_is_reusable(plan: &LogicalPlan) -> bool {
    if matches!(plan, LogicalPlan::Explain(_) | LogicalPlan::Analyze(_)) {
        return false;
    }
    let mut reusable = true;
    let _ = plan.apply_with_subqueries(|node| {
        // A view's definition is inlined during analysis: it counts too.
        if let LogicalPlan::TableScan(scan) = node
            && let Some(view) = scan.source.get_logical_plan()
        {
            reusable &= optimization_is_reusable(&view);
        }
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                let fixed = match e {
                    Expr::ScalarFunction(f) => f.func.signature().volatility == Volatility::Immutable,
                    Expr::AggregateFunction(f) => f.func.signature().volatility == Volatility::Immutable,
                    Expr::WindowFunction(f) => f.fun.signature().volatility == Volatility::Immutable,
                    Expr::ScalarVariable(..) | Expr::Placeholder(_) => false,
                    _ => true,
                };
                reusable &= fixed;
                Ok(if fixed { TreeNodeRecursion::Continue } else { TreeNodeRecursion::Stop })
            })
        })?;
        Ok(if reusable { TreeNodeRecursion::Continue } else { TreeNodeRecursion::Stop })
    });
    reusable
}

#[cfg(test)]
mod tests {
    use datafusion::logical_expr::{LogicalPlanBuilder, lit};

    use super::*;

    fn plan(n: i64) -> LogicalPlan {
        LogicalPlanBuilder::empty(true).project(vec![lit(n)]).unwrap().build().unwrap()
    }

    #[test]
    fn hits_only_at_the_version_it_was_planned_at() {
        let cache = PlanCache::default();
        cache.insert("SELECT 1", 7, &plan(1));
        assert_eq!(cache.get("SELECT 1", 7), Some(plan(1)));
        assert_eq!(cache.get("SELECT 2", 7), None);
        // The catalog changed: the entry is gone for good.
        assert_eq!(cache.get("SELECT 1", 8), None);
        assert_eq!(cache.get("SELECT 1", 7), None);
    }

    #[test]
    fn a_catalog_change_drops_every_older_entry() {
        let cache = PlanCache::default();
        cache.insert("SELECT 1", 3, &plan(1));
        cache.insert("SELECT 2", 3, &plan(2));
        assert_eq!(cache.len(), 2);
        // Another text, at a newer version: the old entries (and the
        // tables their plans hold) go at once, not when next asked for.
        assert_eq!(cache.get("SELECT 3", 4), None);
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.bytes(), 0);
        cache.insert("SELECT 1", 3, &plan(1));
        assert_eq!(cache.len(), 0, "a plan made before the change is not kept");
        cache.insert("SELECT 1", 4, &plan(1));
        assert_eq!(cache.get("SELECT 1", 4), Some(plan(1)));
        // A catalog change the service reports (a DROP TABLE) clears them
        // without waiting for another query.
        cache.forget_before(5);
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
    }

    #[test]
    fn evicts_the_least_recently_used() {
        let cache = PlanCache::default();
        for i in 0..CAPACITY {
            cache.insert(&format!("SELECT {i}"), 0, &plan(i as i64));
        }
        // Touch the first entry; the second is now the oldest.
        assert!(cache.get("SELECT 0", 0).is_some());
        cache.insert("SELECT new", 0, &plan(-1));
        assert_eq!(cache.len(), CAPACITY);
        assert!(cache.get("SELECT 0", 0).is_some());
        assert!(cache.get("SELECT 1", 0).is_none());
        assert!(cache.get("SELECT new", 0).is_some());
    }

    #[test]
    fn keeps_the_optimized_plan_of_its_entry_only() {
        let cache = PlanCache::default();
        cache.set_optimized("SELECT 1", 0, &plan(1));
        assert_eq!(cache.optimized("SELECT 1", 0), None, "no entry, nothing kept");
        cache.insert("SELECT 1", 0, &plan(1));
        assert_eq!(cache.optimized("SELECT 1", 0), None);
        cache.set_optimized("SELECT 1", 0, &plan(2));
        assert_eq!(cache.optimized("SELECT 1", 0), Some(plan(2)));
        assert_eq!(cache.optimized("SELECT 1", 1), None, "another catalog version");
        // A new plan of the text starts without an optimized form.
        cache.insert("SELECT 1", 1, &plan(1));
        assert_eq!(cache.optimized("SELECT 1", 1), None);
    }

    #[tokio::test]
    async fn reuses_optimization_only_when_it_reads_nothing_of_the_execution() {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.sql("CREATE TABLE t (a BIGINT, b VARCHAR) AS VALUES (1, 'x')").await.unwrap();
        ctx.sql("CREATE VIEW fixed AS SELECT a * 2 AS d FROM t").await.unwrap();
        ctx.sql("CREATE VIEW clock AS SELECT a, now() AS at FROM t").await.unwrap();
        let cases = [
            ("SELECT a + 1 AS c FROM t WHERE b = 'x' ORDER BY a LIMIT 3", true),
            ("SELECT b, SUM(a) FROM t GROUP BY b", true),
            ("SELECT * FROM t WHERE a IN (SELECT a FROM t WHERE a > abs(-1))", true),
            ("SELECT now()", false),
            ("SELECT a FROM t WHERE CAST(a AS TIMESTAMP) < current_date()", false),
            ("SELECT a FROM t WHERE a > (SELECT MAX(a) FROM t WHERE random() < 0.5)", false),
            ("SELECT a FROM t WHERE a = $1", false),
            ("EXPLAIN SELECT a FROM t", false),
            ("SELECT d FROM fixed", true),
            ("SELECT a FROM clock", false),
            ("SELECT * FROM t WHERE a IN (SELECT a FROM clock)", false),
        ];
        for (sql, reusable) in cases {
            let plan = ctx.state().create_logical_plan(sql).await.unwrap();
            assert_eq!(optimization_is_reusable(&plan), reusable, "{sql}");
        }
        // SQL inlines views as it plans; a scan with filters keeps the view
        // whole until analysis, and its definition still counts.
        for (view, reusable) in [("fixed", true), ("clock", false)] {
            let source = datafusion::datasource::provider_as_source(ctx.table_provider(view).await.unwrap());
            let filter = datafusion::prelude::col("a").gt(lit(0));
            let plan =
                LogicalPlanBuilder::scan_with_filters(view, source, None, vec![filter]).unwrap().build().unwrap();
            assert!(matches!(plan, LogicalPlan::TableScan(_)), "{view}: not inlined");
            assert_eq!(optimization_is_reusable(&plan), reusable, "scan of {view}");
        }
    }

    #[test]
    fn holds_a_bounded_number_of_bytes() {
        let cache = PlanCache::default();
        let big = |i: usize| {
            let text = format!("{i}{}", "x".repeat(MAX_ENTRY_BYTES / 2));
            LogicalPlanBuilder::empty(true).project(vec![lit(text)]).unwrap().build().unwrap()
        };
        for i in 0..3 * MAX_BYTES / MAX_ENTRY_BYTES {
            cache.insert(&format!("SELECT big {i}"), 0, &big(i));
            assert!(cache.bytes() <= MAX_BYTES, "{} bytes after {i} entries", cache.bytes());
        }
        assert!(cache.len() < 2 * MAX_BYTES / MAX_ENTRY_BYTES + 1);
        assert!(cache.get(&format!("SELECT big {}", 3 * MAX_BYTES / MAX_ENTRY_BYTES - 1), 0).is_some(), "the newest");
        assert!(cache.get("SELECT big 0", 0).is_none(), "the oldest went");
        // An entry whose literals alone pass the bound is not kept; nor is
        // an optimized plan that would take its entry past it.
        let huge = LogicalPlanBuilder::empty(true).project(vec![lit("y".repeat(MAX_ENTRY_BYTES))]).unwrap().build();
        cache.insert("SELECT huge", 0, &huge.unwrap());
        assert_eq!(cache.get("SELECT huge", 0), None);
        cache.insert("SELECT small", 0, &plan(1));
        cache.set_optimized("SELECT small", 0, &big(0));
        cache.set_optimized("SELECT small", 0, &big(1));
        assert!(cache.optimized("SELECT small", 0).is_some());
        let before = cache.bytes();
        let folded = LogicalPlanBuilder::empty(true).project(vec![lit("z".repeat(MAX_ENTRY_BYTES))]).unwrap();
        cache.set_optimized("SELECT small", 0, &folded.build().unwrap());
        assert!(cache.optimized("SELECT small", 0) == Some(big(1)), "kept the one that fits");
        assert_eq!(cache.bytes(), before);
        // Removing entries returns their bytes.
        cache.insert("SELECT small", 1, &plan(1));
        assert!(cache.get("SELECT small", 2).is_none());
        assert!(cache.bytes() < before);
    }

    #[test]
    fn does_not_keep_huge_statements() {
        let cache = PlanCache::default();
        let sql = format!("SELECT 1 -- {}", "x".repeat(MAX_SQL_BYTES));
        cache.insert(&sql, 0, &plan(1));
        assert_eq!(cache.get(&sql, 0), None);
    }
}
