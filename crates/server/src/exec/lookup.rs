//! [`QuiverLookupExec`]: rows found by primary key through the table's
//! index, instead of a scan.
//!
//! The provider plans one for a scan whose filters fix every primary key
//! column to a few values (`k = 5`, `k IN (1, 2)`, `k = $1` once bound,
//! `a = 1 AND b IN (2, 3)`): the keys are probed in the snapshot the plan
//! holds, and the other filters run on the rows found.

use std::fmt;
use std::sync::Arc;

use arrow_array::ArrayRef;
use datafusion::common::Statistics;
use datafusion::common::stats::Precision;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties, StatisticsArgs,
};
use quiverdb_storage::TableSnapshot;

use super::leaf_plan;
use super::scan::{Residual, finish_batch, write_output};
use crate::error::Error;

/// Looks rows up by primary key in a snapshot; see the module docs.
#[derive(Debug)]
pub struct QuiverLookupExec {
    table: String,
    snapshot: TableSnapshot,
    /// The keys, one array per key column (distinct keys, no NULLs).
    keys: Vec<ArrayRef>,
    /// The key filters, as DataFusion wrote them.
    key_text: Vec<String>,
    projection: Vec<usize>,
    residual: Residual,
    limit: Option<usize>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl QuiverLookupExec {
    pub(crate) fn try_new(
        table: String,
        snapshot: TableSnapshot,
        keys: Vec<ArrayRef>,
        key_text: Vec<String>,
        projection: Vec<usize>,
        residual: Residual,
        limit: Option<usize>,
    ) -> Result<Self, Error> {
        let output = Arc::new(snapshot.schema().arrow().project(&projection)?);
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(output),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Ok(Self {
            table,
            snapshot,
            keys,
            key_text,
            projection,
            residual,
            limit,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The number of keys looked up.
    pub fn key_count(&self) -> usize {
        self.keys.first().map_or(0, |k| k.len())
    }

    /// The table columns this lookup outputs.
    pub fn projection(&self) -> &[usize] {
        &self.projection
    }
}

impl DisplayAs for QuiverLookupExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if matches!(t, DisplayFormatType::TreeRender) {
            return write!(f, "table={}", self.table);
        }
        write!(f, "QuiverLookupExec: table={}, keys={} [{}]", self.table, self.key_count(), self.key_text.join(", "))?;
        write_output(f, &self.residual, &self.properties, self.limit)
    }
}

impl ExecutionPlan for QuiverLookupExec {
    fn name(&self) -> &str {
        "QuiverLookupExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    leaf_plan!();

    fn execute(&self, partition: usize, _context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return datafusion::common::internal_err!("QuiverLookupExec has no partition {partition}");
        }
        let schema = self.schema();
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let gathered: Vec<usize> = self.projection.iter().chain(&self.residual.extra).copied().collect();
        let (snapshot, keys, residual) = (self.snapshot.clone(), self.keys.clone(), self.residual.clone());
        let (width, limit, out_schema) = (self.projection.len(), self.limit, Arc::clone(&schema));
        let batch = futures::stream::once(async move {
            let timer = baseline.elapsed_compute().timer();
            let found = snapshot.multi_get(&keys, Some(&gathered)).map_err(Error::from)?;
            let batch = finish_batch(found, &residual, width, &out_schema)?;
            let batch = match limit {
                Some(l) if batch.num_rows() > l => batch.slice(0, l),
                _ => batch,
            };
            timer.done();
            baseline.record_output(batch.num_rows());
            baseline.done();
            Ok(batch)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batch)))
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let mut stats = Statistics::new_unknown(&self.schema());
        let bound = self.limit.map_or(self.key_count(), |l| l.min(self.key_count()));
        stats.num_rows = Precision::Inexact(bound);
        Ok(Arc::new(stats))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
