//! Logical plans of recent queries, by SQL text.
//!
//! A Flight SQL query is planned twice by protocol: GetFlightInfo needs its
//! schema and DoGet runs it. DataFusion's SQL planning costs about a
//! millisecond for a one-table query and grows quadratically with the
//! select list (a 250-column `SELECT *` took 18 ms on a 2-core machine),
//! so the service keeps the unoptimized logical plans of recent queries
//! and plans each text once. A logical plan only names tables: their rows are read when the
//! plan is optimized and turned into a physical plan at execution, so a
//! cached plan stays valid until a table or view is created, replaced or
//! dropped — the catalog version each entry records.

use std::collections::HashMap;
use std::sync::Mutex;

use datafusion::logical_expr::LogicalPlan;

/// Entries kept; the least recently used goes first.
const CAPACITY: usize = 256;

/// SQL texts longer than this are planned every time (a cache of huge
/// statements would hold a lot of memory for little gain).
const MAX_SQL_BYTES: usize = 64 << 10;

#[derive(Debug, Default)]
pub(crate) struct PlanCache {
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    /// Advances on every use; an entry's `used` is its last tick.
    tick: u64,
    plans: HashMap<String, Cached>,
}

#[derive(Debug)]
struct Cached {
    version: u64,
    plan: LogicalPlan,
    used: u64,
}

impl PlanCache {
    /// The plan of `sql` made at catalog `version`, if there is one.
    pub(crate) fn get(&self, sql: &str, version: u64) -> Option<LogicalPlan> {
        let mut entries = self.inner.lock().ok()?;
        entries.tick += 1;
        let tick = entries.tick;
        let cached = entries.plans.get_mut(sql)?;
        if cached.version != version {
            entries.plans.remove(sql);
            return None;
        }
        cached.used = tick;
        Some(cached.plan.clone())
    }

    /// Keeps `plan`, the plan of `sql` made at catalog `version` (read
    /// before planning started).
    pub(crate) fn insert(&self, sql: &str, version: u64, plan: &LogicalPlan) {
        if sql.len() > MAX_SQL_BYTES {
            return;
        }
        let Ok(mut entries) = self.inner.lock() else { return };
        entries.tick += 1;
        let used = entries.tick;
        if entries.plans.len() >= CAPACITY && !entries.plans.contains_key(sql) {
            let oldest = entries.plans.iter().min_by_key(|(_, c)| c.used).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                entries.plans.remove(&oldest);
            }
        }
        entries.plans.insert(sql.to_string(), Cached { version, plan: plan.clone(), used });
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().map_or(0, |e| e.plans.len())
    }
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
    fn does_not_keep_huge_statements() {
        let cache = PlanCache::default();
        let sql = format!("SELECT 1 -- {}", "x".repeat(MAX_SQL_BYTES));
        cache.insert(&sql, 0, &plan(1));
        assert_eq!(cache.get(&sql, 0), None);
    }
}
