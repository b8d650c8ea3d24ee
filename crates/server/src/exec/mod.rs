//! quiverdb's execution plans.
//!
//! | plan | runs | output |
//! |---|---|---|
//! | [`QuiverScanExec`] | the unordered scan with `gather` | the projected columns, one partition per group of shards |
//! | [`QuiverAggregateExec`] | the unordered scan with the aggregate reducers | the partial states (or final values) of an `AggregateExec` |
//! | [`QuiverLookupExec`] | primary-key probes of the table's index | the projected columns of the rows found, one partition |
//! | [`QuiverTopKExec`] | the ordered scan with `gather` | the first `fetch` rows in sort order |
//! | [`DmlExec`] | INSERT, DELETE, UPDATE, TRUNCATE | one row, `count: UInt64` |
//!
//! Every scan plan reads a snapshot taken when the plan was made, so its
//! statistics, its EXPLAIN and its result describe the same table state.

mod aggregate;
mod dml;
mod lookup;
mod scan;
mod stream;
mod topk;

use std::fmt;
use std::sync::Arc;

use datafusion::physical_plan::PhysicalExpr;
use datafusion::physical_plan::metrics::{BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder};
use quiverdb_mapreducer::MapExpr;
use quiverdb_scan::{Predicate, ScanCounts, ScanOptions};
use quiverdb_storage::{TableSchema, TableSnapshot};

use crate::translate::Translator;

pub(crate) use aggregate::AggregateOutputMode;
pub use aggregate::QuiverAggregateExec;
pub use dml::DmlExec;
pub(crate) use dml::{DmlFilter, DmlOp, Incoming, UpdateStep};
pub use lookup::QuiverLookupExec;
pub(crate) use scan::ESTIMATE_BLOCKS;
pub use scan::QuiverScanExec;
pub(crate) use scan::Residual;
pub use topk::QuiverTopKExec;

/// What a quiverdb scan reads: a table snapshot and the filter it applies.
#[derive(Debug, Clone)]
pub(crate) struct ScanSource {
    /// The table's name (for EXPLAIN).
    pub(crate) table: String,
    /// The rows.
    pub(crate) snapshot: TableSnapshot,
    /// The filter the scan evaluates: exact filters and pruning-only ones.
    pub(crate) filter: Option<Predicate>,
    /// The filters evaluated exactly, as DataFusion wrote them.
    pub(crate) exact_text: Vec<String>,
    /// The filters only used to skip rows, as DataFusion wrote them.
    pub(crate) pruning_text: Vec<String>,
    /// Ids per reducer call (0 = the default).
    pub(crate) id_buffer: usize,
}

impl ScanSource {
    /// The live rows of `shards`.
    pub(crate) fn rows_in<'a>(&self, shards: impl IntoIterator<Item = &'a usize>) -> usize {
        shards.into_iter().map(|&s| self.snapshot.shard(s).live_rows()).sum()
    }

    /// Scan options: `shards` (all when `None`) on `threads` threads.
    pub(crate) fn options(&self, shards: Option<&[usize]>, limit: Option<usize>, threads: usize) -> ScanOptions {
        ScanOptions { threads, limit, shards: shards.map(<[usize]>::to_vec), id_buffer: self.id_buffer }
    }

    /// The shards the scan reads: with a filter and more than one
    /// partition to fill, only those whose zone maps allow a match (a
    /// selective scan is then not spread over partitions it would leave
    /// empty, each a task to start); all of them otherwise.
    pub(crate) fn shards(&self, partitions: usize) -> Vec<usize> {
        let all = || (0..self.snapshot.num_shards()).collect();
        match &self.filter {
            // A filter that fails to prepare keeps every shard; the scan
            // itself reports the error.
            Some(filter) if partitions > 1 => {
                quiverdb_scan::candidate_shards(&self.snapshot, filter).unwrap_or_else(|_| all())
            }
            _ => all(),
        }
    }

    /// True if the scan drops rows (so statistics are inexact).
    pub(crate) fn filtered(&self) -> bool {
        self.filter.is_some()
    }

    /// Writes `table=..., filters=[...], pruning=[...]` for EXPLAIN.
    pub(crate) fn fmt_as(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "table={}", self.table)?;
        if !self.exact_text.is_empty() {
            write!(f, ", filters=[{}]", self.exact_text.join(", "))?;
        }
        if !self.pruning_text.is_empty() {
            write!(f, ", pruning=[{}]", self.pruning_text.join(", "))?;
        }
        Ok(())
    }
}

/// Splits `shards` (positions in `snapshot`, ascending) into at most
/// `partitions` contiguous, non-empty groups holding about the same number
/// of live rows (no shards give one empty group).
pub(crate) fn shard_groups(snapshot: &TableSnapshot, shards: &[usize], partitions: usize) -> Vec<Vec<usize>> {
    let n = shards.len();
    if n == 0 {
        return vec![Vec::new()];
    }
    let parts = partitions.clamp(1, n);
    let mut prefix = Vec::with_capacity(n + 1);
    prefix.push(0usize);
    for (i, &s) in shards.iter().enumerate() {
        prefix.push(prefix[i] + snapshot.shard(s).live_rows());
    }
    let total = prefix[n];
    let mut groups = Vec::with_capacity(parts);
    let mut start = 0;
    for k in 1..=parts {
        // The first shard of the next group: where the rows reach k/parts
        // of the total, leaving at least one shard per remaining group.
        let end = if k == parts {
            n
        } else {
            let target = total * k / parts;
            let at = prefix.partition_point(|&p| p < target).max(start + 1);
            at.min(n - (parts - k))
        };
        groups.push(shards[start..end].to_vec());
        start = end;
    }
    groups
}

/// A partition's metrics of a scan or an aggregate in the scan:
/// DataFusion's baseline (output rows, time) and what phase 1 did
/// ([`quiverdb_scan::ScanCounts`]).
pub(crate) struct ScanMetrics {
    pub(crate) baseline: BaselineMetrics,
    shards: Count,
    blocks_pruned: Count,
    blocks_whole: Count,
    blocks_filtered: Count,
    rows_selected: Count,
    /// The counts already added.
    seen: ScanCounts,
}

impl ScanMetrics {
    pub(crate) fn new(metrics: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        let count = |name: &'static str| MetricBuilder::new(metrics).counter(name, partition);
        Self {
            baseline: BaselineMetrics::new(metrics, partition),
            shards: count("shards_scanned"),
            blocks_pruned: count("blocks_pruned"),
            blocks_whole: count("blocks_whole"),
            blocks_filtered: count("blocks_filtered"),
            rows_selected: count("rows_selected"),
            seen: ScanCounts::default(),
        }
    }

    /// Adds what `now` counts beyond what was added before.
    pub(crate) fn update(&mut self, now: ScanCounts) {
        let seen = self.seen;
        self.shards.add(now.shards - seen.shards);
        self.blocks_pruned.add(now.blocks_pruned - seen.blocks_pruned);
        self.blocks_whole.add(now.blocks_whole - seen.blocks_whole);
        self.blocks_filtered.add(now.blocks_filtered - seen.blocks_filtered);
        self.rows_selected.add(now.rows_selected - seen.rows_selected);
        self.seen = now;
    }
}

/// The boilerplate of a leaf plan: no children, and no expressions, or
/// those of the field named by `expressions = field` (a `Vec` of physical
/// expressions, which DataFusion looks through to find who consumes a
/// dynamic filter).
macro_rules! leaf_plan {
    () => {
        leaf_plan!(@children);

        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(
                &std::sync::Arc<dyn datafusion::physical_plan::PhysicalExpr>,
            ) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion>,
        ) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion> {
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        }
    };
    (expressions = $field:ident) => {
        leaf_plan!(@children);

        fn apply_expressions(
            &self,
            f: &mut dyn FnMut(
                &std::sync::Arc<dyn datafusion::physical_plan::PhysicalExpr>,
            ) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion>,
        ) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion> {
            use datafusion::common::tree_node::TreeNodeRecursion;
            for e in &self.$field {
                if f(e)? == TreeNodeRecursion::Stop {
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
            Ok(TreeNodeRecursion::Continue)
        }
    };
    (@children) => {
        fn children(&self) -> Vec<&std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            Vec::new()
        }

        fn with_new_children(
            self: std::sync::Arc<Self>,
            children: Vec<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>,
        ) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            if children.is_empty() {
                Ok(self)
            } else {
                datafusion::common::internal_err!("{} has no children", self.name())
            }
        }
    };
}
pub(crate) use leaf_plan;

/// `filter` with what quiverdb can evaluate of the current values of the
/// dynamic filters `dynamic`, whose columns are a plan's output columns,
/// `inputs[i]` the map expression of output column `i` (`None`: not a
/// function of the table's columns, as an aggregate's values).
pub(crate) fn with_dynamic_filters(
    filter: Option<Predicate>,
    schema: &TableSchema,
    inputs: &[Option<MapExpr>],
    dynamic: &[Arc<dyn PhysicalExpr>],
) -> Option<Predicate> {
    if dynamic.is_empty() {
        return filter;
    }
    let translator = Translator::physical(schema, inputs);
    dynamic.iter().filter_map(|d| translator.physical_necessary(d)).fold(filter, |f, p| {
        Some(match f {
            Some(f) => f.and(p),
            None => p,
        })
    })
}

/// `, dynamic_filters=[…]` for a plan holding dynamic filters.
pub(crate) fn write_dynamic_filters(f: &mut fmt::Formatter<'_>, dynamic: &[Arc<dyn PhysicalExpr>]) -> fmt::Result {
    if dynamic.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = dynamic.iter().map(|d| d.to_string()).collect();
    write!(f, ", dynamic_filters=[{}]", shown.join(", "))
}

/// `, shards=N` for a plan whose `groups` hold every shard of its
/// snapshot, `, shards=K of N` for one whose zone maps ruled some out at
/// planning.
fn write_shards(f: &mut std::fmt::Formatter<'_>, groups: &[Vec<usize>], total: usize) -> std::fmt::Result {
    let read: usize = groups.iter().map(Vec::len).sum();
    if read == total { write!(f, ", shards={total}") } else { write!(f, ", shards={read} of {total}") }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use quiverdb_storage::{Database, TableOptions};

    use super::shard_groups;
    use crate::{SessionOptions, session_context_with};

    #[test]
    fn shard_groups_cover_every_shard_once() {
        let db = Database::new();
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let table = db.create_table("t", &schema, TableOptions::default().with_shard_capacity(10)).unwrap();
        for rows in [0usize, 5, 10, 35, 100] {
            if rows > 0 {
                let batch =
                    RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from_iter_values(0..rows as i64))])
                        .unwrap();
                table.append(&batch).unwrap();
            }
            let snapshot = table.snapshot();
            for parts in 1..=12 {
                let n = snapshot.num_shards();
                let groups = shard_groups(&snapshot, &(0..n).collect::<Vec<_>>(), parts);
                assert_eq!(groups.len(), parts.clamp(1, n.max(1)), "rows {rows} parts {parts}");
                let flat: Vec<usize> = groups.iter().flatten().copied().collect();
                assert_eq!(flat, (0..n).collect::<Vec<_>>(), "rows {rows} parts {parts}: {groups:?}");
                if n >= parts {
                    assert!(groups.iter().all(|g| !g.is_empty()), "rows {rows} parts {parts}: {groups:?}");
                }
            }
        }
    }

    #[tokio::test]
    async fn a_filtered_scan_splits_only_the_shards_its_zone_maps_allow() {
        let db = Database::new();
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let table = db.create_table("t", &schema, TableOptions::default().with_shard_capacity(1000)).unwrap();
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from_iter_values(0..10_000))]).unwrap();
        table.append(&batch).unwrap();
        table.rebuild().unwrap();
        let ctx = session_context_with(&db, SessionOptions { target_partitions: 4, ..SessionOptions::default() });
        // (query, partitions of its scan, shards shown by EXPLAIN, rows)
        let cases = [
            ("SELECT v FROM t WHERE v BETWEEN 2500 AND 2600", 1, "shards=1 of 10", 101),
            ("SELECT v FROM t WHERE v BETWEEN 2500 AND 3500", 2, "shards=2 of 10", 1001),
            ("SELECT v FROM t WHERE v > 100000", 1, "shards=0 of 10", 0),
            ("SELECT v FROM t WHERE v % 2 = 0", 4, "shards=10", 5000),
            ("SELECT v FROM t", 4, "shards=10", 10_000),
        ];
        for (sql, partitions, shown, rows) in cases {
            let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
            let mut scans = Vec::new();
            let mut stack = vec![Arc::clone(&plan)];
            while let Some(p) = stack.pop() {
                if p.as_ref().downcast_ref::<super::QuiverScanExec>().is_some() {
                    scans.push(p.properties().partitioning.partition_count());
                }
                stack.extend(p.children().into_iter().cloned());
            }
            assert_eq!(scans, [partitions], "{sql}");
            let text = datafusion::physical_plan::displayable(plan.as_ref()).indent(false).to_string();
            assert!(text.contains(&format!("{shown}\n")), "{sql}: {text}");
            let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx()).await.unwrap();
            assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), rows, "{sql}");
        }
        // A shard with delta rows has no zone maps to rule it out.
        table.append(&RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![2550]))]).unwrap()).unwrap();
        let batches = ctx.sql("SELECT v FROM t WHERE v BETWEEN 2500 AND 2600").await.unwrap().collect().await.unwrap();
        assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 102);
    }
}
