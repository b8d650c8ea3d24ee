//! [`QuiverScanExec`]: a table scan that streams gathered batches.

use std::fmt;
use std::sync::{Arc, OnceLock};

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::SchemaRef;
use datafusion::arrow::compute::filter_record_batch;
use datafusion::common::Statistics;
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown,
};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PhysicalExpr, PlanProperties, StatisticsArgs,
};
use quiverdb_mapreducer::MapExpr;
use quiverdb_mapreducer::{GatherKernel, GatherSpec};
use quiverdb_scan::ScanCursor;

use super::dml::residual_mask;
use super::stream::{Step, stepped_stream};
use super::{
    ScanMetrics, ScanSource, leaf_plan, shard_groups, with_dynamic_filters, write_dynamic_filters, write_shards,
};
use crate::error::Error;
use crate::stats::statistics;

/// Main blocks (1,024 rows each) that a filtered scan's row estimate
/// evaluates per partition (see [`quiverdb_scan::estimate_matches`]).
pub(crate) const ESTIMATE_BLOCKS: usize = 16;

/// Filters handed to a scan that quiverdb cannot evaluate exactly, run by
/// DataFusion on the gathered rows. DataFusion may rewrite a filter it was
/// told the scan handles exactly (`f IN (true)` becomes `f`) and then drop
/// its own copy, so every filter a scan receives is applied, one way or
/// the other.
#[derive(Debug, Clone, Default)]
pub(crate) struct Residual {
    /// Over the gathered columns: the projection, then `extra`.
    pub(crate) exprs: Vec<Arc<dyn PhysicalExpr>>,
    /// Table columns gathered only for the residual.
    pub(crate) extra: Vec<usize>,
    /// The filters, as DataFusion wrote them.
    pub(crate) text: Vec<String>,
}

/// Scans a quiverdb table: the filter runs in the scan's phase 1, and the
/// projected columns of the matching rows are gathered straight from the
/// compressed shards into batches (unprojected columns are never read).
/// Partition `p` scans the `p`-th group of shards.
#[derive(Debug)]
pub struct QuiverScanExec {
    source: ScanSource,
    projection: Vec<usize>,
    residual: Residual,
    limit: Option<usize>,
    groups: Vec<Vec<usize>>,
    spec: Arc<GatherSpec>,
    properties: Arc<PlanProperties>,
    /// Statistics per partition, and of the whole scan at the end.
    stats: Vec<OnceLock<Arc<Statistics>>>,
    /// Filters a hash join (or a TopK) pushed down after planning, over
    /// the scan's output columns: what its build side holds, known only at
    /// run time. Read when the scan starts (after the build side is done),
    /// and applied as far as quiverdb can evaluate them: rows that fail
    /// cannot join, so dropping them early is exact whatever is left out.
    dynamic: Vec<Arc<dyn PhysicalExpr>>,
    /// What the partitions did, for `EXPLAIN ANALYZE`.
    metrics: ExecutionPlanMetricsSet,
}

impl QuiverScanExec {
    /// The live rows of the shards this scan reads.
    pub(crate) fn rows_read(&self) -> usize {
        self.source.rows_in(self.groups.iter().flatten())
    }

    /// A scan of `projection` (all columns when `None`) split into at most
    /// `partitions` partitions, gathering batches of `batch_size` rows.
    pub(crate) fn try_new(
        source: ScanSource,
        projection: Vec<usize>,
        residual: Residual,
        limit: Option<usize>,
        partitions: usize,
        batch_size: usize,
    ) -> Result<Self, Error> {
        let schema = source.snapshot.schema();
        let gathered: Vec<usize> = projection.iter().chain(&residual.extra).copied().collect();
        let spec = Arc::new(GatherSpec::columns(schema, Some(&gathered), batch_size)?);
        let output = Arc::new(spec.schema().project(&(0..projection.len()).collect::<Vec<_>>())?);
        let groups = shard_groups(&source.snapshot, &source.shards(partitions), partitions);
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(output),
            Partitioning::UnknownPartitioning(groups.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        let stats = (0..=groups.len()).map(|_| OnceLock::new()).collect();
        Ok(Self {
            source,
            projection,
            residual,
            limit,
            groups,
            spec,
            properties,
            stats,
            dynamic: Vec::new(),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The same scan with the dynamic filters `more` added.
    fn with_dynamic(&self, more: impl IntoIterator<Item = Arc<dyn PhysicalExpr>>) -> Self {
        Self {
            source: self.source.clone(),
            projection: self.projection.clone(),
            residual: self.residual.clone(),
            limit: self.limit,
            groups: self.groups.clone(),
            spec: Arc::clone(&self.spec),
            properties: Arc::clone(&self.properties),
            stats: (0..self.stats.len()).map(|_| OnceLock::new()).collect(),
            dynamic: self.dynamic.iter().cloned().chain(more).collect(),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// The dynamic filters the scan took, over its output columns.
    pub(crate) fn dynamic_filters(&self) -> &[Arc<dyn PhysicalExpr>] {
        &self.dynamic
    }

    /// True if DataFusion evaluates some of the scan's filters on its rows.
    pub(crate) fn has_residual(&self) -> bool {
        !self.residual.exprs.is_empty()
    }

    /// The table columns this scan outputs.
    pub fn projection(&self) -> &[usize] {
        &self.projection
    }

    /// The row limit pushed into the scan.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    pub(crate) fn source(&self) -> &ScanSource {
        &self.source
    }

    /// The shards the scan reads (see [`ScanSource::shards`]), in order.
    pub(crate) fn shards(&self) -> Vec<usize> {
        self.groups.concat()
    }
}

impl DisplayAs for QuiverScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if matches!(t, DisplayFormatType::TreeRender) {
            return write!(f, "table={}", self.source.table);
        }
        write!(f, "QuiverScanExec: ")?;
        self.source.fmt_as(f)?;
        write_output(f, &self.residual, &self.properties, self.limit)?;
        write_dynamic_filters(f, &self.dynamic)?;
        write_shards(f, &self.groups, self.source.snapshot.num_shards())
    }
}

impl QuiverScanExec {
    /// Statistics of partition `p`'s shards (computed once).
    fn group_statistics(&self, p: usize) -> Arc<Statistics> {
        let stats = self.stats[p].get_or_init(|| {
            let inexact = self.source.filtered() || self.has_residual() || self.limit.is_some();
            let mut s = statistics(&self.source.snapshot, &self.groups[p], &self.projection, inexact);
            // A filtered scan's rows, estimated (the planner picks join
            // sides by them); an estimate that fails leaves all the rows.
            if let Some(filter) = &self.source.filter
                && let Ok(n) =
                    quiverdb_scan::estimate_matches(&self.source.snapshot, &self.groups[p], filter, ESTIMATE_BLOCKS)
            {
                s.num_rows = s.num_rows.min(&datafusion::common::stats::Precision::Inexact(n.ceil() as usize));
            }
            if let Some(l) = self.limit {
                s.num_rows = s.num_rows.min(&datafusion::common::stats::Precision::Inexact(l));
            }
            // A column has no more distinct values than the rows that pass.
            if !matches!(s.num_rows, datafusion::common::stats::Precision::Exact(_)) {
                for c in &mut s.column_statistics {
                    c.distinct_count = c.distinct_count.min(&s.num_rows.to_inexact());
                }
            }
            Arc::new(s)
        });
        Arc::clone(stats)
    }
}

impl ExecutionPlan for QuiverScanExec {
    fn name(&self) -> &str {
        "QuiverScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    leaf_plan!(expressions = dynamic);

    fn execute(&self, partition: usize, _context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let shards = self.groups.get(partition).cloned().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(format!("QuiverScanExec has no partition {partition}"))
        })?;
        let mut source = self.source.clone();
        let spec = Arc::clone(&self.spec);
        let residual = self.residual.clone();
        let width = self.projection.len();
        let schema = self.schema();
        // With a residual the scan's rows are not the output rows: the
        // limit is applied after it.
        let scan_limit = if residual.exprs.is_empty() { self.limit } else { None };
        let mut left = self.limit.unwrap_or(usize::MAX);
        let options = source.options(Some(&shards), scan_limit, 1);
        let kernel = move || GatherKernel::new(Arc::clone(&spec));
        // The partition's live rows bound what it gathers: a small result
        // reserves no more than it holds.
        let live: usize = shards.iter().map(|&s| source.snapshot.shard(s).live_rows()).sum();
        let acc = self.spec.new_acc_for(scan_limit.map_or(live, |l| l.min(live)));
        // Opened on the first poll: a hash join polls its probe side once
        // its build side is done, so its dynamic filter is then known.
        let (dynamic, projection) = (self.dynamic.clone(), self.projection.clone());
        let mut open = Some(move || {
            let inputs: Vec<Option<MapExpr>> = projection.iter().map(|&c| Some(MapExpr::Column(c))).collect();
            source.filter = with_dynamic_filters(source.filter, source.snapshot.schema(), &inputs, &dynamic);
            ScanCursor::new(source.snapshot, source.filter, &options, kernel, acc).map_err(Error::from)
        });
        let mut cursor = None;
        let mut metrics = ScanMetrics::new(&self.metrics, partition);
        // One shard per step: its batches go out before the next is read.
        Ok(stepped_stream(Arc::clone(&schema), move |queue| {
            let elapsed = metrics.baseline.elapsed_compute().clone();
            let _timer = elapsed.timer();
            if let Some(open) = open.take() {
                cursor = Some(open()?);
            }
            let Some(mut c) = cursor.take().filter(|_| left > 0) else { return Ok(Step::Done) };
            let more = c.advance().map_err(Error::from)?;
            metrics.update(c.counts());
            let batches = if more {
                let batches = c.acc_mut().map_err(Error::from)?.take_batches().map_err(Error::from)?;
                cursor = Some(c);
                batches
            } else {
                c.into_acc().map_err(Error::from)?.finish().map_err(Error::from)?
            };
            for batch in batches {
                let batch = finish_batch(batch, &residual, width, &schema)?;
                let batch = if batch.num_rows() > left { batch.slice(0, left) } else { batch };
                left -= batch.num_rows();
                if batch.num_rows() > 0 {
                    metrics.baseline.record_output(batch.num_rows());
                    queue.push_back(batch);
                }
                if left == 0 {
                    return Ok(Step::Done);
                }
            }
            Ok(if cursor.is_some() { Step::More } else { Step::Done })
        }))
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match args.partition() {
            Some(p) if p < self.groups.len() => Ok(self.group_statistics(p)),
            Some(p) => datafusion::common::internal_err!("QuiverScanExec has no partition {p}"),
            // The whole scan: its partitions' statistics merged, so each
            // group's shards are read once however the optimizer asks.
            None => {
                let slot = &self.stats[self.groups.len()];
                if let Some(s) = slot.get() {
                    return Ok(Arc::clone(s));
                }
                let parts: Vec<Arc<Statistics>> = (0..self.groups.len()).map(|p| self.group_statistics(p)).collect();
                let mut merged = Statistics::try_merge_iter(parts.iter().map(|s| s.as_ref()), self.schema().as_ref())?;
                if let Some(l) = self.limit {
                    merged.num_rows = merged.num_rows.min(&datafusion::common::stats::Precision::Inexact(l));
                }
                Ok(Arc::clone(slot.get_or_init(|| Arc::new(merged))))
            }
        }
    }

    fn supports_limit_pushdown(&self) -> bool {
        false
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    /// Takes the dynamic filters pushed after planning (see `dynamic`);
    /// other filters stay where they are. A scan with a limit takes none:
    /// filtering before the limit would change which rows it keeps.
    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let filters: Vec<Arc<dyn PhysicalExpr>> =
            child_pushdown_result.parent_filters.into_iter().map(|f| f.filter).collect();
        let take = |f: &Arc<dyn PhysicalExpr>| {
            phase == FilterPushdownPhase::Post
                && self.limit.is_none()
                && f.downcast_ref::<DynamicFilterPhysicalExpr>().is_some()
        };
        let pushed = filters.iter().map(|f| if take(f) { PushedDown::Yes } else { PushedDown::No }).collect();
        let taken: Vec<Arc<dyn PhysicalExpr>> = filters.iter().filter(|f| take(f)).cloned().collect();
        let updated: Option<Arc<dyn ExecutionPlan>> =
            (!taken.is_empty()).then(|| Arc::new(self.with_dynamic(taken)) as Arc<dyn ExecutionPlan>);
        Ok(FilterPushdownPropagation { filters: pushed, updated_node: updated })
    }
}

/// Writes `, residual=[...], projection=[...], limit=n` for EXPLAIN.
pub(super) fn write_output(
    f: &mut fmt::Formatter<'_>,
    residual: &Residual,
    properties: &PlanProperties,
    limit: Option<usize>,
) -> fmt::Result {
    if !residual.text.is_empty() {
        write!(f, ", residual=[{}]", residual.text.join(", "))?;
    }
    let names: Vec<&str> = properties.eq_properties.schema().fields().iter().map(|f| f.name().as_str()).collect();
    write!(f, ", projection=[{}]", names.join(", "))?;
    if let Some(l) = limit {
        write!(f, ", limit={l}")?;
    }
    Ok(())
}

/// A gathered batch as output: the residual applied, the columns gathered
/// only for it dropped.
pub(super) fn finish_batch(
    batch: RecordBatch,
    residual: &Residual,
    width: usize,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    if residual.exprs.is_empty() {
        return Ok(batch);
    }
    let keep = residual_mask(&batch, &residual.exprs)?;
    let batch = filter_record_batch(&batch, &keep)?;
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(Arc::clone(schema), batch.columns()[..width].to_vec(), &options)?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use datafusion::physical_plan::{ExecutionPlan, collect};
    use quiverdb_storage::{Database, TableOptions};

    use super::QuiverScanExec;
    use crate::SessionOptions;

    /// Table `name` of one column `k` holding `keys`, rebuilt into main.
    fn table(db: &Database, name: &str, keys: impl IntoIterator<Item = i64>) {
        let schema = Schema::new(vec![Field::new("k", DataType::Int64, false)]);
        let t = db.create_table(name, &schema, TableOptions::default()).expect("create");
        let batch =
            RecordBatch::try_new(Arc::new(schema), vec![Arc::new(Int64Array::from_iter_values(keys))]).expect("batch");
        t.append(&batch).expect("append");
        t.rebuild().expect("rebuild");
    }

    /// The metric `name` summed over the scans of `table` in `plan`.
    fn scan_metric(plan: &Arc<dyn ExecutionPlan>, table: &str, name: &str) -> usize {
        let mut sum = 0;
        if let Some(scan) = plan.downcast_ref::<QuiverScanExec>()
            && scan.source().table == table
        {
            let metrics = scan.metrics().expect("scan metrics");
            sum += match name {
                "output_rows" => metrics.output_rows().unwrap_or(0),
                _ => metrics.sum_by_name(name).map_or(0, |v| v.as_usize()),
            };
        }
        plan.children().into_iter().map(|c| scan_metric(c, table, name)).sum::<usize>() + sum
    }

    #[tokio::test]
    async fn explain_analyze_counts_what_the_scan_skipped() {
        let db = Database::new();
        // In order: zone maps separate the blocks.
        table(&db, "t", 0..100_000);
        let ctx =
            crate::session_context_with(&db, SessionOptions { target_partitions: 1, ..SessionOptions::default() });
        let plan = ctx.sql("SELECT k FROM t WHERE k >= 50000 AND k % 2 = 0").await.expect("plans");
        let plan = plan.create_physical_plan().await.expect("plans");
        let rows: usize =
            collect(Arc::clone(&plan), ctx.task_ctx()).await.expect("runs").iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 25_000);
        assert_eq!(scan_metric(&plan, "t", "output_rows"), 25_000);
        assert_eq!(scan_metric(&plan, "t", "rows_selected"), 25_000);
        // 98 blocks of 1,024: the 48 below 50,000 (49,152 rows) pruned, the
        // rest (the 49th, and the ones above) filtered for `k % 2`.
        assert_eq!(scan_metric(&plan, "t", "blocks_pruned"), 48);
        assert_eq!(scan_metric(&plan, "t", "blocks_filtered"), 50);
        assert!(scan_metric(&plan, "t", "shards_scanned") >= 1);
    }

    #[tokio::test]
    async fn a_hash_joins_keys_prune_its_probe_scan() {
        let db = Database::new();
        table(&db, "probe", 0..200_000);
        table(&db, "build", [7, 150_000, 150_001, 999_999]);
        let ctx =
            crate::session_context_with(&db, SessionOptions { target_partitions: 2, ..SessionOptions::default() });
        let (keys, plan) = sorted_keys(&ctx, "SELECT p.k FROM build b JOIN probe p ON b.k = p.k").await;
        assert_eq!(keys, [7, 150_000, 150_001]);
        // The probe scan read the blocks holding 7 and 150,000–150,001 of
        // its 196, and selected only the three keys.
        let pruned = scan_metric(&plan, "probe", "blocks_pruned");
        assert!(pruned >= 190, "{pruned} blocks pruned");
        assert_eq!(scan_metric(&plan, "probe", "rows_selected"), 3);
    }

    /// The metric `name` summed over every operator of `plan`.
    fn plan_metric(plan: &Arc<dyn ExecutionPlan>, name: &str) -> usize {
        let own = plan.metrics().and_then(|m| m.sum_by_name(name)).map_or(0, |v| v.as_usize());
        plan.children().into_iter().map(|c| plan_metric(c, name)).sum::<usize>() + own
    }

    /// The keys `sql` returns (one Int64 column), sorted.
    async fn sorted_keys(ctx: &datafusion::prelude::SessionContext, sql: &str) -> (Vec<i64>, Arc<dyn ExecutionPlan>) {
        let plan = ctx.sql(sql).await.expect("plans").create_physical_plan().await.expect("plans");
        let mut keys: Vec<i64> = collect(Arc::clone(&plan), ctx.task_ctx())
            .await
            .expect("runs")
            .iter()
            .flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().expect("k").values().to_vec())
            .collect();
        keys.sort_unstable();
        (keys, plan)
    }

    /// Build keys filling 11 % of their range (each twice, one negative):
    /// sparser than DataFusion's 15 % for an array-indexed join, denser
    /// than quiverdb's 3 %. The join indexes an array by the key, and its
    /// answers equal a reference's, for an inner and an anti join.
    #[tokio::test]
    async fn a_join_on_sparse_keys_indexes_an_array_and_answers_as_a_reference() {
        use std::collections::BTreeMap;
        let db = Database::new();
        let build: Vec<i64> = (0..120).map(|i| (i % 60 + 1) * 17).chain([-40]).collect();
        table(&db, "build", build.iter().copied());
        table(&db, "probe", -100..2_000);
        let mut times: BTreeMap<i64, usize> = BTreeMap::new();
        build.iter().for_each(|k| *times.entry(*k).or_default() += 1);
        let ctx =
            crate::session_context_with(&db, SessionOptions { target_partitions: 2, ..SessionOptions::default() });

        let (joined, plan) = sorted_keys(&ctx, "SELECT p.k FROM build b JOIN probe p ON b.k = p.k").await;
        let want: Vec<i64> =
            (-100..2_000).flat_map(|k| std::iter::repeat_n(k, times.get(&k).copied().unwrap_or(0))).collect();
        assert_eq!(joined, want);
        assert!(plan_metric(&plan, "array_map_created_count") >= 1, "the join indexed no array");

        let anti = "SELECT p.k FROM probe p WHERE NOT EXISTS (SELECT 1 FROM build b WHERE b.k = p.k)";
        let (unmatched, _) = sorted_keys(&ctx, anti).await;
        let want: Vec<i64> = (-100..2_000).filter(|k| !times.contains_key(k)).collect();
        assert_eq!(unmatched, want);
    }

    /// A join on two keys hands its probe scan `struct(a, b) IN (…)`:
    /// the scan keeps the rows whose `a` and whose `b` are among the
    /// build side's (TPC-H q20 aggregated 880,000 line items for 366
    /// pairs).
    #[tokio::test]
    async fn a_two_key_joins_keys_narrow_its_probe_scan() {
        use std::collections::BTreeSet;
        let db = Database::new();
        let two = Schema::new(vec![Field::new("a", DataType::Int64, false), Field::new("b", DataType::Int64, false)]);
        let big = db.create_table("big", &two, TableOptions::default()).expect("create");
        let n = 200_000i64;
        let (a, b): (Vec<i64>, Vec<i64>) = (0..n).map(|i| (i % 1_000, i % 7)).unzip();
        let batch = RecordBatch::try_new(
            Arc::new(two.clone()),
            vec![Arc::new(Int64Array::from(a.clone())), Arc::new(Int64Array::from(b.clone()))],
        )
        .expect("batch");
        big.append(&batch).expect("append");
        big.rebuild().expect("rebuild");
        let small = db.create_table("small", &two, TableOptions::default()).expect("create");
        let pairs = [(5i64, 5i64), (5, 6), (700, 0), (999, 3), (12, 99)];
        let batch = RecordBatch::try_new(
            Arc::new(two),
            vec![
                Arc::new(Int64Array::from_iter_values(pairs.iter().map(|p| p.0))),
                Arc::new(Int64Array::from_iter_values(pairs.iter().map(|p| p.1))),
            ],
        )
        .expect("batch");
        small.append(&batch).expect("append");
        let ctx =
            crate::session_context_with(&db, SessionOptions { target_partitions: 2, ..SessionOptions::default() });
        let sql = "SELECT g.a, g.b FROM small s JOIN big g ON s.a = g.a AND s.b = g.b";
        let plan = ctx.sql(sql).await.expect("plans").create_physical_plan().await.expect("plans");
        let mut got: Vec<(i64, i64)> = Vec::new();
        for batch in collect(Arc::clone(&plan), ctx.task_ctx()).await.expect("runs") {
            let column = |i: usize| batch.column(i).as_any().downcast_ref::<Int64Array>().expect("int").clone();
            let (a, b) = (column(0), column(1));
            got.extend((0..batch.num_rows()).map(|r| (a.value(r), b.value(r))));
        }
        got.sort_unstable();
        let mut expected: Vec<(i64, i64)> =
            a.iter().zip(&b).map(|(&a, &b)| (a, b)).filter(|p| pairs.contains(p)).collect();
        expected.sort_unstable();
        assert_eq!(got, expected);
        // The scan selected the rows whose a and whose b are among the
        // pairs' (a superset of the joining rows), not all 200,000.
        let (sa, sb): (BTreeSet<i64>, BTreeSet<i64>) = pairs.iter().copied().unzip();
        let implied = a.iter().zip(&b).filter(|(a, b)| sa.contains(a) && sb.contains(b)).count();
        let text = datafusion::physical_plan::displayable(plan.as_ref()).indent(false).to_string();
        assert_eq!(scan_metric(&plan, "big", "rows_selected"), implied, "{text}");
        assert!(implied < 1_000 && implied >= expected.len());
    }

    #[tokio::test]
    async fn statistics_estimate_distinct_values() {
        use datafusion::common::stats::Precision;
        let db = Database::new();
        // 100,000 rows in 1,000 distinct keys, in several shards.
        table(&db, "t", (0..100_000).map(|i| (i * 7_919) % 1_000));
        let ctx =
            crate::session_context_with(&db, SessionOptions { target_partitions: 2, ..SessionOptions::default() });
        let distinct = |sql: &'static str| {
            let ctx = ctx.clone();
            async move {
                let plan = ctx.sql(sql).await.expect("plans").create_physical_plan().await.expect("plans");
                fn scan(plan: &Arc<dyn ExecutionPlan>) -> Option<&QuiverScanExec> {
                    plan.downcast_ref::<QuiverScanExec>().or_else(|| plan.children().into_iter().find_map(scan))
                }
                let stats = datafusion::physical_plan::statistics::StatisticsContext::new()
                    .compute(scan(&plan).expect("a scan"), &Default::default())
                    .expect("statistics");
                (stats.num_rows, stats.column_statistics[0].distinct_count)
            }
        };
        let (rows, keys) = distinct("SELECT k FROM t").await;
        assert_eq!(rows, Precision::Exact(100_000));
        let Precision::Inexact(n) = keys else { panic!("an estimate: {keys:?}") };
        assert!((900..=1_100).contains(&n), "{n} for 1,000 keys");
        // A filter passing ~2 % of the rows: no more distinct keys than rows.
        let (rows, keys) = distinct("SELECT k FROM t WHERE k < 20").await;
        let Precision::Inexact(rows) = rows else { panic!("estimated rows: {rows:?}") };
        let Precision::Inexact(n) = keys else { panic!("an estimate: {keys:?}") };
        assert!(n <= rows && rows < 10_000, "{n} keys in {rows} rows");
    }
}
