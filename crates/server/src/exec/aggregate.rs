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
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use quiverdb_mapreducer::{AggFunc, AggregateKernel, AggregateSpec, MemoryBudget};
use quiverdb_scan::scan_counted;
use quiverdb_storage::TableSchema;

use super::stream::once_stream;
use super::{ScanMetrics, ScanSource, leaf_plan, write_shards};
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
        }
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

    leaf_plan!();

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let shards =
            self.groups.get(partition).cloned().ok_or_else(|| {
                DataFusionError::Internal(format!("QuiverAggregateExec has no partition {partition}"))
            })?;
        let source = self.source.clone();
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
        let plan = limited.sql(sql).await.expect("plans").create_physical_plan().await.expect("plans");
        let text = displayable(plan.as_ref()).indent(false).to_string();
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
}
