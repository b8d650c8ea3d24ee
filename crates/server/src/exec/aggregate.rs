//! [`QuiverAggregateExec`]: an aggregation run inside the scan.

use std::fmt;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PhysicalExpr, PlanProperties,
};
use quiverdb_mapreducer::{AggFunc, AggregateKernel, AggregateSpec, MapExpr, MemoryBudget};
use quiverdb_scan::scan_counted;
use quiverdb_storage::TableSchema;

use super::stream::once_stream;
use super::{ScanMetrics, ScanSource, leaf_plan, with_dynamic_filters, write_dynamic_filters, write_shards};
use crate::error::Error;

/// A [`MemoryBudget`] drawn from DataFusion's memory pool (released when
/// the aggregation's stream is done with it).
#[derive(Debug)]
struct PoolBudget(MemoryReservation);

impl MemoryBudget for PoolBudget {
    fn resize(&self, from: usize, to: usize) -> std::result::Result<(), String> {
        if to > from {
            self.0.try_grow(to - from).map_err(|e| crate::error::error_message(&e))
        } else {
            self.0.shrink((from - to).min(self.0.size()));
            Ok(())
        }
    }
}

/// What an aggregation emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AggregateOutputMode {
    /// DataFusion's partial states, one row per group and partition.
    States,
    /// Final values, one row per group, in one partition.
    Final,
}

/// Runs an aggregation's reducers per shard inside the scan and emits
/// either the partial states of the `AggregateExec` it replaced (one
/// partition per group of shards) or its final values (one partition,
/// the shards scanned in parallel).
#[derive(Debug)]
pub struct QuiverAggregateExec {
    source: ScanSource,
    spec: Arc<AggregateSpec>,
    mode: AggregateOutputMode,
    groups: Vec<Vec<usize>>,
    threads: usize,
    /// The aggregate and group expressions, as DataFusion wrote them.
    text: String,
    properties: Arc<PlanProperties>,
    /// What the partitions did, for `EXPLAIN ANALYZE`.
    metrics: ExecutionPlanMetricsSet,
    /// The dynamic filters the scan this aggregation replaced had taken
    /// (a hash join's build keys, pushed through the final aggregate and
    /// the partial one onto the group keys), over the scan's output
    /// columns `dynamic_inputs`: a partition evaluates them when it
    /// starts, so only rows of groups that can join are aggregated.
    dynamic: Vec<Arc<dyn PhysicalExpr>>,
    dynamic_inputs: Vec<Option<MapExpr>>,
}

impl QuiverAggregateExec {
    /// The live rows of the shards this aggregation reads.
    pub(crate) fn rows_read(&self) -> usize {
        self.source.rows_in(self.groups.iter().flatten())
    }

    pub(crate) fn new(
        source: ScanSource,
        spec: Arc<AggregateSpec>,
        mode: AggregateOutputMode,
        groups: Vec<Vec<usize>>,
        threads: usize,
        text: String,
        schema: SchemaRef,
    ) -> Self {
        let groups = match mode {
            AggregateOutputMode::States => groups,
            AggregateOutputMode::Final => vec![groups.concat()],
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(groups.len()),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Self {
            source,
            spec,
            mode,
            groups,
            threads: threads.max(1),
            text,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
            dynamic: Vec::new(),
            dynamic_inputs: Vec::new(),
        }
    }

    /// The aggregation with the dynamic filters `dynamic` of the scan it
    /// replaces, whose output columns are `inputs`.
    pub(crate) fn with_scan_dynamic_filters(
        mut self,
        dynamic: Vec<Arc<dyn PhysicalExpr>>,
        inputs: Vec<Option<MapExpr>>,
    ) -> Self {
        self.dynamic = dynamic;
        self.dynamic_inputs = inputs;
        self
    }

    /// The types of the columns this aggregation emits in `mode`.
    pub(crate) fn output_types(spec: &AggregateSpec, mode: AggregateOutputMode, table: &TableSchema) -> Vec<DataType> {
        let mut types = spec.key_types().to_vec();
        for (agg, out) in spec.aggregates().iter().zip(spec.output_types()) {
            if mode == AggregateOutputMode::States && agg.func == AggFunc::Avg {
                // AVG's state is (count, sum); a decimal sum keeps the
                // input's scale at full precision (see `finish_states`).
                types.push(DataType::UInt64);
                types.push(match agg.input.as_ref().and_then(|e| e.data_type(table).ok()) {
                    Some(DataType::Decimal128(_, s)) => DataType::Decimal128(38, s),
                    _ => DataType::Float64,
                });
            } else {
                types.push(out.clone());
            }
        }
        types
    }
}

impl DisplayAs for QuiverAggregateExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if matches!(t, DisplayFormatType::TreeRender) {
            return write!(f, "table={}", self.source.table);
        }
        let mode = match self.mode {
            AggregateOutputMode::States => "partial",
            AggregateOutputMode::Final => "final",
        };
        write!(f, "QuiverAggregateExec: mode={mode}, {}, ", self.text)?;
        self.source.fmt_as(f)?;
        write_dynamic_filters(f, &self.dynamic)?;
        write_shards(f, &self.groups, self.source.snapshot.num_shards())
    }
}

impl ExecutionPlan for QuiverAggregateExec {
    fn name(&self) -> &str {
        "QuiverAggregateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    leaf_plan!(expressions = dynamic);

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let shards =
            self.groups.get(partition).cloned().ok_or_else(|| {
                DataFusionError::Internal(format!("QuiverAggregateExec has no partition {partition}"))
            })?;
        let mut source = self.source.clone();
        let (dynamic, inputs) = (self.dynamic.clone(), self.dynamic_inputs.clone());
        // The groups the scan gathers count against the query's memory
        // limit, as DataFusion's own aggregates do.
        let reservation =
            MemoryConsumer::new(format!("QuiverAggregateExec[{partition}]")).register(context.memory_pool());
        let spec = Arc::new(self.spec.with_budget(Arc::new(PoolBudget(reservation))));
        let mode = self.mode;
        let threads = if mode == AggregateOutputMode::Final { self.threads } else { 1 };
        let schema = self.schema();
        let mut metrics = ScanMetrics::new(&self.metrics, partition);
        Ok(once_stream(Arc::clone(&schema), move || {
            let elapsed = metrics.baseline.elapsed_compute().clone();
            let _timer = elapsed.timer();
            // Run on the first poll: a hash join polls its probe side once
            // its build side is done, so its dynamic filter is then known.
            source.filter = with_dynamic_filters(source.filter, source.snapshot.schema(), &inputs, &dynamic);
            let options = source.options(Some(&shards), None, threads);
            let (acc, counts) = scan_counted(
                &source.snapshot,
                source.filter.as_ref(),
                &options,
                || AggregateKernel::new(Arc::clone(&spec)),
                || spec.new_acc(),
            )
            .map_err(Error::from)?;
            metrics.update(counts);
            let output = match mode {
                AggregateOutputMode::States => acc.finish_states(),
                AggregateOutputMode::Final => acc.finish(),
            }
            .map_err(Error::from)?;
            let columns = output.keys.into_iter().chain(output.values).collect();
            let batch = RecordBatch::try_new(schema, columns)?;
            metrics.baseline.record_output(batch.num_rows());
            Ok(vec![batch])
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use datafusion::error::DataFusionError;
    use datafusion::physical_plan::{ExecutionPlan, displayable};
    use quiverdb_storage::{Database, TableOptions};

    use super::QuiverAggregateExec;
    use crate::SessionOptions;

    /// 200,000 rows, every `c` distinct, `k` one of ten.
    fn table(db: &Database) {
        let schema = Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("c", DataType::Utf8, false)]);
        let t = db.create_table("t", &schema, TableOptions::default()).expect("create");
        let n = 200_000i64;
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 10))),
                Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("a distinct comment, number {i}")))),
            ],
        )
        .expect("batch");
        t.append(&batch).expect("append");
        t.rebuild().expect("rebuild");
    }

    #[tokio::test]
    async fn groups_gathered_in_the_scan_count_against_the_memory_limit() {
        let db = Database::new();
        table(&db);
        let sql = "SELECT c, COUNT(*) FROM t GROUP BY c";
        let limited = crate::session_context_with(
            &db,
            SessionOptions { memory_limit: Some(4 << 20), target_partitions: 2, ..SessionOptions::default() },
        );
        // One group per row is left to DataFusion's partial aggregate
        // (see `rules::reduces`) unless skipping partial aggregation is
        // off, as a ratio above 1 makes it: then the scan aggregates.
        let unskipped = "SET datafusion.execution.skip_partial_aggregation_probe_ratio_threshold = 2.0";
        let text = |ctx: datafusion::prelude::SessionContext| async move {
            let plan = ctx.sql(sql).await.expect("plans").create_physical_plan().await.expect("plans");
            displayable(plan.as_ref()).indent(false).to_string()
        };
        let skipped = text(limited.clone()).await;
        assert!(!skipped.contains("QuiverAggregateExec"), "DataFusion aggregates:\n{skipped}");
        limited.sql(unskipped).await.expect("sets");
        let text = text(limited.clone()).await;
        assert!(text.contains("QuiverAggregateExec"), "the scan aggregates:\n{text}");
        let e = limited.sql(sql).await.expect("plans").collect().await.expect_err("200,000 groups in 4 MiB");
        assert!(matches!(e.find_root(), DataFusionError::ResourcesExhausted(_)), "{e}");
        // Few groups fit; without a limit, every group is there.
        let few = limited.sql("SELECT k, COUNT(*) FROM t GROUP BY k").await.expect("plans").collect().await;
        assert_eq!(few.expect("ten groups").iter().map(|b| b.num_rows()).sum::<usize>(), 10);
        let unlimited = crate::session_context_with(&db, SessionOptions::default());
        let all = unlimited.sql(sql).await.expect("plans").collect().await.expect("no limit");
        assert_eq!(all.iter().map(|b| b.num_rows()).sum::<usize>(), 200_000);
    }

    #[tokio::test]
    async fn explain_analyze_counts_what_the_aggregate_scanned() {
        let db = Database::new();
        table(&db);
        let ctx =
            crate::session_context_with(&db, SessionOptions { target_partitions: 2, ..SessionOptions::default() });
        let plan = ctx.sql("SELECT k, COUNT(*) FROM t WHERE k < 3 GROUP BY k").await.expect("plans");
        let plan = plan.create_physical_plan().await.expect("plans");
        let out = datafusion::physical_plan::collect(Arc::clone(&plan), ctx.task_ctx()).await.expect("runs");
        assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 3);
        fn find(plan: &Arc<dyn ExecutionPlan>) -> Option<&QuiverAggregateExec> {
            plan.downcast_ref::<QuiverAggregateExec>().or_else(|| plan.children().into_iter().find_map(find))
        }
        let metrics = find(&plan).expect("pushed into the scan").metrics().expect("metrics");
        let count = |name: &str| metrics.sum_by_name(name).map_or(0, |v| v.as_usize());
        // `k` cycles through ten values: every block is filtered, 3 in 10
        // rows pass, in three groups.
        assert_eq!(count("rows_selected"), 60_000);
        assert_eq!(count("blocks_filtered"), 200_000usize.div_ceil(1024));
        assert_eq!(count("blocks_pruned"), 0);
        assert!(count("shards_scanned") >= 1);
        assert_eq!(metrics.output_rows(), Some(3));
    }

    #[tokio::test]
    async fn a_hash_joins_keys_narrow_the_groups_aggregated() {
        use std::collections::BTreeMap;
        let db = Database::new();
        // 300,000 rows in 100,000 groups of `g`, three rows each.
        let schema =
            Schema::new(vec![Field::new("g", DataType::Int64, false), Field::new("v", DataType::Int64, false)]);
        let big = db.create_table("big", &schema, TableOptions::default()).expect("create");
        let n = 300_000i64;
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| (i * 7_919) % 100_000))),
                Arc::new(Int64Array::from_iter_values(0..n)),
            ],
        )
        .expect("batch");
        big.append(&batch).expect("append");
        big.rebuild().expect("rebuild");
        let schema = Schema::new(vec![Field::new("k", DataType::Int64, false)]);
        let small = db.create_table("small", &schema, TableOptions::default()).expect("create");
        let keys =
            RecordBatch::try_new(Arc::new(schema), vec![Arc::new(Int64Array::from(vec![5, 50_000, 99_999, -1]))])
                .expect("batch");
        small.append(&keys).expect("append");
        let ctx =
            crate::session_context_with(&db, SessionOptions { target_partitions: 2, ..SessionOptions::default() });
        let sql =
            "SELECT s.k, a.total FROM small s JOIN (SELECT g, SUM(v) AS total FROM big GROUP BY g) a ON s.k = a.g";
        let plan = ctx.sql(sql).await.expect("plans").create_physical_plan().await.expect("plans");
        let out = datafusion::physical_plan::collect(Arc::clone(&plan), ctx.task_ctx()).await.expect("runs");
        let mut got = BTreeMap::new();
        for b in &out {
            let (k, total) = (b.column(0).as_primitive::<Int64Type>(), b.column(1).as_primitive::<Int64Type>());
            for r in 0..b.num_rows() {
                got.insert(k.value(r), total.value(r));
            }
        }
        let mut expected = BTreeMap::new();
        for i in 0..n {
            let g = (i * 7_919) % 100_000;
            if [5, 50_000, 99_999].contains(&g) {
                *expected.entry(g).or_insert(0) += i;
            }
        }
        assert_eq!(got, expected);
        fn find(plan: &Arc<dyn ExecutionPlan>) -> Option<&QuiverAggregateExec> {
            plan.downcast_ref::<QuiverAggregateExec>().or_else(|| plan.children().into_iter().find_map(find))
        }
        let text = displayable(plan.as_ref()).indent(false).to_string();
        let agg = find(&plan).unwrap_or_else(|| panic!("the partial aggregate runs in the scan:\n{text}"));
        assert!(text.contains("dynamic_filters=["), "{text}");
        // Only the rows of the three keys that join were aggregated.
        let metrics = agg.metrics().expect("metrics");
        let selected = metrics.sum_by_name("rows_selected").map_or(0, |v| v.as_usize());
        assert_eq!(selected, 9, "{text}");
    }
}
