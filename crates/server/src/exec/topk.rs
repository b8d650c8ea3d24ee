//! [`QuiverTopKExec`]: `ORDER BY ... LIMIT k` as the ordered scan.

use std::fmt;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use quiverdb_mapreducer::{GatherKernel, GatherSpec};
use quiverdb_scan::{OrderBy, SortKey, scan_order};

use super::stream::once_stream;
use super::{ScanSource, leaf_plan};
use crate::error::Error;

/// The ordered scan with a limit: each shard keeps its best `fetch` rows
/// (skipping main blocks whose zone maps cannot beat the current k-th),
/// a heap merges the shards, and only the winners are gathered. Emits the
/// rows in sort order in partition 0 (other partitions, kept so that the
/// plan above stays valid, are empty).
#[derive(Debug)]
pub struct QuiverTopKExec {
    source: ScanSource,
    sort: Vec<SortKey>,
    fetch: usize,
    spec: Arc<GatherSpec>,
    threads: usize,
    text: String,
    properties: Arc<PlanProperties>,
}

impl QuiverTopKExec {
    /// The live rows of the table this scan reads (it reads every shard).
    pub(crate) fn rows_read(&self) -> usize {
        self.source.snapshot.row_count()
    }

    /// `properties` are those of the `SortExec` this replaces.
    pub(crate) fn new(
        source: ScanSource,
        sort: Vec<SortKey>,
        fetch: usize,
        spec: Arc<GatherSpec>,
        threads: usize,
        text: String,
        properties: Arc<PlanProperties>,
    ) -> Self {
        Self { source, sort, fetch, spec, threads: threads.max(1), text, properties }
    }
}

impl DisplayAs for QuiverTopKExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if matches!(t, DisplayFormatType::TreeRender) {
            return write!(f, "table={}", self.source.table);
        }
        write!(f, "QuiverTopKExec: {}, fetch={}, ", self.text, self.fetch)?;
        self.source.fmt_as(f)?;
        write!(f, ", shards={}", self.source.snapshot.num_shards())
    }
}

impl ExecutionPlan for QuiverTopKExec {
    fn name(&self) -> &str {
        "QuiverTopKExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    leaf_plan!();

    fn execute(&self, partition: usize, _context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let partitions = self.properties.partitioning.partition_count();
        if partition >= partitions {
            return Err(DataFusionError::Internal(format!("QuiverTopKExec has no partition {partition}")));
        }
        let schema: SchemaRef = self.schema();
        if partition > 0 {
            return Ok(once_stream(schema, || Ok(Vec::new())));
        }
        let source = self.source.clone();
        let sort = self.sort.clone();
        let spec = Arc::clone(&self.spec);
        let fetch = self.fetch;
        let threads = self.threads;
        Ok(once_stream(Arc::clone(&schema), move || {
            let options = source.options(None, Some(fetch), threads);
            let acc = scan_order(
                &source.snapshot,
                source.filter.as_ref(),
                OrderBy::new(&sort),
                &options,
                || GatherKernel::new(Arc::clone(&spec)),
                || spec.new_acc(),
            )
            .map_err(Error::from)?;
            let batches = acc.finish().map_err(Error::from)?;
            // The sort's schema: same types, its names and nullability.
            batches
                .into_iter()
                .map(|batch| {
                    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                    Ok(RecordBatch::try_new_with_options(Arc::clone(&schema), batch.columns().to_vec(), &options)?)
                })
                .collect()
        }))
    }
}
