//! [`QuiverScanExec`]: a table scan that streams gathered batches.

use std::fmt;
use std::sync::{Arc, OnceLock};

use arrow_schema::SchemaRef;
use datafusion::common::Statistics;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties, StatisticsArgs};
use quiverdb_mapreducer::{GatherKernel, GatherSpec};
use quiverdb_scan::scan_each;

use super::stream::spawn_producer;
use super::{ScanSource, leaf_plan, shard_groups};
use crate::error::Error;
use crate::stats::statistics;

/// Scans a quiverdb table: the filter runs in the scan's phase 1, and the
/// projected columns of the matching rows are gathered straight from the
/// compressed shards into batches (unprojected columns are never read).
/// Partition `p` scans the `p`-th group of shards.
#[derive(Debug)]
pub struct QuiverScanExec {
    source: ScanSource,
    projection: Vec<usize>,
    limit: Option<usize>,
    groups: Vec<Vec<usize>>,
    spec: Arc<GatherSpec>,
    properties: Arc<PlanProperties>,
    /// Statistics per partition, and of the whole scan at the end.
    stats: Vec<OnceLock<Arc<Statistics>>>,
}

impl QuiverScanExec {
    /// A scan of `projection` (all columns when `None`) split into at most
    /// `partitions` partitions, gathering batches of `batch_size` rows.
    pub(crate) fn try_new(
        source: ScanSource,
        projection: Option<&[usize]>,
        limit: Option<usize>,
        partitions: usize,
        batch_size: usize,
    ) -> Result<Self, Error> {
        let schema = source.snapshot.schema();
        let projection: Vec<usize> = projection.map_or_else(|| (0..schema.len()).collect(), <[usize]>::to_vec);
        let spec = Arc::new(GatherSpec::columns(schema, Some(&projection), batch_size)?);
        let groups = shard_groups(&source.snapshot, partitions);
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(spec.schema())),
            Partitioning::UnknownPartitioning(groups.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        let stats = (0..=groups.len()).map(|_| OnceLock::new()).collect();
        Ok(Self { source, projection, limit, groups, spec, properties, stats })
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
}

impl DisplayAs for QuiverScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if matches!(t, DisplayFormatType::TreeRender) {
            return write!(f, "table={}", self.source.table);
        }
        write!(f, "QuiverScanExec: ")?;
        self.source.fmt_as(f)?;
        let names: Vec<&str> = self.spec.schema().fields().iter().map(|f| f.name().as_str()).collect();
        write!(f, ", projection=[{}]", names.join(", "))?;
        if let Some(l) = self.limit {
            write!(f, ", limit={l}")?;
        }
        write!(f, ", shards={}", self.source.snapshot.num_shards())
    }
}

impl ExecutionPlan for QuiverScanExec {
    fn name(&self) -> &str {
        "QuiverScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    leaf_plan!();

    fn execute(&self, partition: usize, _context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let shards = self.groups.get(partition).cloned().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(format!("QuiverScanExec has no partition {partition}"))
        })?;
        let source = self.source.clone();
        let spec = Arc::clone(&self.spec);
        let limit = self.limit;
        let schema: SchemaRef = Arc::clone(spec.schema());
        Ok(spawn_producer(schema, move |out| {
            let options = source.options(Some(&shards), limit, 1);
            let mut open = true;
            let acc = scan_each(
                &source.snapshot,
                source.filter.as_ref(),
                &options,
                || GatherKernel::new(Arc::clone(&spec)),
                spec.new_acc(),
                |acc| match acc.take_batches() {
                    Ok(batches) => {
                        open = batches.into_iter().all(|b| out.send(b));
                        open
                    }
                    // The error stays in the accumulator; `finish` reports it.
                    Err(_) => false,
                },
            )
            .map_err(Error::from)?;
            if open {
                for batch in acc.finish().map_err(Error::from)? {
                    if !out.send(batch) {
                        break;
                    }
                }
            }
            Ok(())
        }))
    }

    fn statistics_from_inputs(&self, _input_stats: &[Arc<Statistics>], args: &StatisticsArgs) -> Result<Arc<Statistics>> {
        let (slot, shards) = match args.partition() {
            Some(p) if p < self.groups.len() => (&self.stats[p], self.groups[p].clone()),
            Some(p) => return datafusion::common::internal_err!("QuiverScanExec has no partition {p}"),
            None => (&self.stats[self.groups.len()], self.groups.concat()),
        };
        let stats = slot.get_or_init(|| {
            let inexact = self.source.filtered() || self.limit.is_some();
            let mut s = statistics(&self.source.snapshot, &shards, &self.projection, inexact);
            if let Some(l) = self.limit {
                s.num_rows = s.num_rows.min(&datafusion::common::stats::Precision::Inexact(l));
            }
            Arc::new(s)
        });
        Ok(Arc::clone(stats))
    }

    fn supports_limit_pushdown(&self) -> bool {
        false
    }
}
