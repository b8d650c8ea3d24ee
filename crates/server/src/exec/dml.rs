//! [`DmlExec`]: INSERT, DELETE, UPDATE and TRUNCATE on a quiverdb table.
//!
//! Each statement is one storage transaction: its rows become visible all
//! at once when it commits, or not at all if any step fails. The work
//! happens when the plan is executed, never when it is planned or
//! EXPLAINed. The plan yields one row, `count: UInt64`, the rows affected.
//!
//! ```text
//!   INSERT    input partitions ──(all, concurrently)──▶ channel ──▶ transaction: append each batch
//!   DELETE    transaction: snapshot ─ scan(filter) ─▶ ids ─[residual]─▶ delete
//!   UPDATE    transaction: snapshot ─ scan(filter) ─▶ rows + ids ─[residual]─▶ SET ─▶ delete + append
//!   UPDATE×n  transaction: snapshot ─ scan(any step's filter) ─▶ rows + ids
//!               ─▶ for each step in order: WHERE ─▶ SET on the rows it matches
//!               ─▶ delete the rows some step changed + append their last versions
//!   TRUNCATE  transaction: remove every shard
//! ```
//!
//! The filter is what the scan evaluates exactly; the residual is the rest
//! of the WHERE clause, evaluated by DataFusion on the gathered rows.
//!
//! `UPDATE×n` is one UPDATE run with many parameter rows (`executemany`):
//! each step sees the rows as the steps before it left them, as if the
//! statements ran one after another, and all of them commit or none.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::compute::{CastOptions, cast_with_options, concat_batches, filter_record_batch, interleave};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PhysicalExpr, PlanProperties,
    ReplaceChildrenOptions,
};
use futures::TryStreamExt;
use quiverdb_mapreducer::{GatherKernel, GatherSpec, RecId};
use quiverdb_scan::{Predicate, ScanOptions, matching_records, scan};
use quiverdb_storage::types::ingest_compatible;
use quiverdb_storage::{ShardId, Table, TableSnapshot, Transaction};
use tokio::sync::mpsc;

use crate::error::Error;
use crate::limits::TableMemoryLimit;
use crate::retained::row_bytes;

/// Rows per batch gathered by DELETE and UPDATE.
const DML_BATCH_ROWS: usize = 8192;

/// Which rows a DELETE or UPDATE touches.
#[derive(Debug, Clone)]
pub(crate) struct DmlFilter {
    /// Evaluated by the scan.
    pub(crate) predicate: Option<Predicate>,
    /// Evaluated by DataFusion on the gathered `columns`; a row is
    /// touched when every expression is true.
    pub(crate) residual: Vec<Arc<dyn PhysicalExpr>>,
    /// The table columns the residual reads (positions in the table).
    pub(crate) columns: Vec<usize>,
    /// The conjuncts the scan evaluates, as DataFusion wrote them.
    pub(crate) pushed_text: Vec<String>,
    /// The residual conjuncts, as DataFusion wrote them.
    pub(crate) residual_text: Vec<String>,
}

/// A statement.
#[derive(Debug, Clone)]
pub(crate) enum DmlOp {
    /// `INSERT INTO` (or `INSERT OVERWRITE`: truncate, then append).
    Insert { input: Arc<dyn ExecutionPlan>, overwrite: bool },
    /// `DELETE FROM ... WHERE ...`.
    Delete(DmlFilter),
    /// `UPDATE ... SET ... WHERE ...`: `assignments` are over the table's
    /// columns (all gathered), each already of its column's type.
    Update { filter: DmlFilter, step: UpdateStep, text: Vec<String> },
    /// One UPDATE bound to many parameter rows: `steps` in order, over the
    /// rows `gather` finds (every row any step could change).
    UpdateSteps { gather: DmlFilter, steps: Vec<UpdateStep> },
    /// `TRUNCATE`.
    Truncate,
}

/// What one UPDATE does to a row.
#[derive(Debug, Clone)]
pub(crate) struct UpdateStep {
    /// The whole WHERE over the table's columns: a row is updated when
    /// every expression is true.
    pub(crate) condition: Vec<Arc<dyn PhysicalExpr>>,
    /// The SET, over the table's columns, each value already of its
    /// column's type.
    pub(crate) assignments: Vec<(usize, Arc<dyn PhysicalExpr>)>,
}

/// Runs one INSERT, DELETE, UPDATE or TRUNCATE.
#[derive(Debug)]
pub struct DmlExec {
    table: Table,
    op: DmlOp,
    threads: usize,
    properties: Arc<PlanProperties>,
}

impl DmlExec {
    pub(crate) fn new(table: Table, op: DmlOp, threads: usize) -> Self {
        let schema = count_schema();
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Self { table, op, threads: threads.max(1), properties }
    }

    /// The UPDATEs `plans` (one statement bound to each parameter row, each
    /// planned by [`QuiverTable`](crate::provider::QuiverTable)) as one
    /// plan that runs them in order in one transaction; `None` unless every
    /// plan is a quiverdb UPDATE of the same table.
    pub(crate) fn update_steps(plans: &[Arc<dyn ExecutionPlan>]) -> Option<Self> {
        let mut execs = plans.iter().map(|p| dml_exec(p.as_ref()));
        let first = execs.next()??;
        let mut predicate = Some(Vec::with_capacity(plans.len()));
        let mut steps = Vec::with_capacity(plans.len());
        for exec in std::iter::once(Some(first)).chain(execs) {
            let exec = exec?;
            let DmlOp::Update { filter, step, .. } = &exec.op else { return None };
            if !Arc::ptr_eq(exec.table.arrow_schema(), first.table.arrow_schema())
                || exec.table.name() != first.table.name()
            {
                return None;
            }
            // The scan finds every row any step could match: the
            // disjunction of the steps' scan filters (each a superset of
            // its step's rows), or all rows if one step has none.
            match (&mut predicate, &filter.predicate) {
                (Some(all), Some(p)) => all.push(p.clone()),
                (all, _) => *all = None,
            }
            steps.push(step.clone());
        }
        let predicate = predicate.and_then(|all| all.into_iter().reduce(Predicate::or));
        let gather = DmlFilter {
            pushed_text: predicate.iter().map(|_| format!("any of {} steps' filters", steps.len())).collect(),
            predicate,
            residual: Vec::new(),
            columns: (0..first.table.schema().len()).collect(),
            residual_text: Vec::new(),
        };
        Some(Self::new(first.table.clone(), DmlOp::UpdateSteps { gather, steps }, first.threads))
    }
}

/// The schema of every DML result: `count: UInt64`.
fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("count", DataType::UInt64, false)]))
}

impl DisplayAs for DmlExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = self.table.name();
        write!(f, "{}: table={table}", self.name())?;
        let filter = match &self.op {
            DmlOp::Insert { overwrite, .. } => return if *overwrite { write!(f, ", overwrite") } else { Ok(()) },
            DmlOp::Truncate => return Ok(()),
            DmlOp::Delete(filter) => filter,
            DmlOp::Update { filter, text, .. } => {
                write!(f, ", set=[{}]", text.join(", "))?;
                filter
            }
            DmlOp::UpdateSteps { gather, steps } => {
                write!(f, ", steps={}", steps.len())?;
                gather
            }
        };
        if !filter.pushed_text.is_empty() {
            write!(f, ", filters=[{}]", filter.pushed_text.join(", "))?;
        }
        if !filter.residual_text.is_empty() {
            write!(f, ", residual=[{}]", filter.residual_text.join(", "))?;
        }
        Ok(())
    }
}

impl ExecutionPlan for DmlExec {
    fn name(&self) -> &str {
        match self.op {
            DmlOp::Insert { .. } => "QuiverInsertExec",
            DmlOp::Delete(_) => "QuiverDeleteExec",
            DmlOp::Update { .. } | DmlOp::UpdateSteps { .. } => "QuiverUpdateExec",
            DmlOp::Truncate => "QuiverTruncateExec",
        }
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        match &self.op {
            DmlOp::Insert { input, .. } => vec![input],
            _ => Vec::new(),
        }
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let (filter, steps) = match &self.op {
            DmlOp::Delete(filter) => (Some(filter), &[][..]),
            DmlOp::Update { filter, step, .. } => (Some(filter), std::slice::from_ref(step)),
            DmlOp::UpdateSteps { gather, steps } => (Some(gather), steps.as_slice()),
            DmlOp::Insert { .. } | DmlOp::Truncate => (None, &[][..]),
        };
        let steps = steps.iter().flat_map(|s| s.condition.iter().chain(s.assignments.iter().map(|(_, e)| e)));
        for e in filter.into_iter().flat_map(|f| f.residual.iter()).chain(steps) {
            if f(e)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false; self.children().len()]
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match (&self.op, children.len()) {
            (DmlOp::Insert { overwrite, .. }, 1) => {
                let op = DmlOp::Insert { input: children.swap_remove(0), overwrite: *overwrite };
                Ok(Arc::new(DmlExec::new(self.table.clone(), op, self.threads)))
            }
            (DmlOp::Insert { .. }, _) => datafusion::common::internal_err!("QuiverInsertExec has one child"),
            (_, 0) => Ok(self),
            _ => datafusion::common::internal_err!("{} has no children", self.name()),
        }
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!("{} has one partition, not {partition}", self.name())));
        }
        let table = self.table.clone();
        let op = self.op.clone();
        let threads = self.threads;
        let count = async move {
            let n = match op {
                DmlOp::Insert { input, overwrite } => insert(table, input, overwrite, context).await?,
                other => run_blocking(move || mutate(&table, &other, threads)).await?,
            };
            count_batch(n)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(count_schema(), futures::stream::once(count))))
    }
}

/// The [`DmlExec`] `plan` runs (the physical optimizer wraps it in a
/// `CooperativeExec`).
fn dml_exec(plan: &dyn ExecutionPlan) -> Option<&DmlExec> {
    if let Some(dml) = plan.downcast_ref::<DmlExec>() {
        return Some(dml);
    }
    dml_exec(plan.downcast_ref::<CooperativeExec>()?.input().as_ref())
}

fn count_batch(n: usize) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(count_schema(), vec![Arc::new(UInt64Array::from(vec![n as u64]))])?)
}

/// Runs `f` on tokio's blocking pool (inline outside a runtime).
async fn run_blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle
            .spawn_blocking(f)
            .await
            .map_err(|e| DataFusionError::Internal(format!("a quiverdb statement panicked: {e}")))?,
        Err(_) => f(),
    }
}

/// What the reading side of a streaming write (an INSERT, a bulk ingest)
/// hands the transaction that writes it. A channel that closes without
/// [`Incoming::End`] means the input failed: the transaction rolls back.
pub(crate) enum Incoming {
    Batch(RecordBatch),
    /// The input ended without error: commit.
    End,
}

/// INSERT: every input partition is read concurrently and each batch is
/// appended inside one transaction, which commits only once all input was
/// read without error.
async fn insert(
    table: Table,
    input: Arc<dyn ExecutionPlan>,
    overwrite: bool,
    context: Arc<TaskContext>,
) -> Result<usize> {
    let partitions = input.properties().partitioning.partition_count();
    let streams = (0..partitions).map(|p| input.execute(p, Arc::clone(&context))).collect::<Result<Vec<_>>>()?;
    let (tx, mut rx) = mpsc::channel::<Incoming>(2);
    let schema = Arc::clone(table.arrow_schema());
    let writer = run_blocking(move || {
        let appended = table.try_transaction(|t: &mut Transaction<'_>| -> Result<usize, Error> {
            if overwrite {
                t.truncate();
            }
            let mut rows = 0;
            loop {
                match rx.blocking_recv() {
                    Some(Incoming::Batch(batch)) => rows += t.append(&relabel(&batch, &schema)?)?,
                    Some(Incoming::End) => return Ok(rows),
                    // The input failed: roll back.
                    None => return Err(Error::Aborted("the INSERT's input failed".into())),
                }
            }
        });
        appended.map_err(DataFusionError::from)
    });
    // The rows the transaction holds until it commits count against the
    // session's memory limit, like any query's.
    let reservation = MemoryConsumer::new("INSERT").register(context.memory_pool());
    let mut budget = TableMemoryLimit::of(context.session_config()).map(|l| l.budget());
    let reader = async move {
        let mut all = futures::stream::select_all(streams);
        while let Some(batch) = all.try_next().await? {
            let bytes = row_bytes(&batch);
            reservation.try_grow(bytes)?;
            if let Some(budget) = &mut budget {
                budget.add(bytes)?;
            }
            if batch.num_rows() > 0 && tx.send(Incoming::Batch(batch)).await.is_err() {
                // The writer failed; its error is reported below.
                return Ok(());
            }
        }
        let _ = tx.send(Incoming::End).await;
        Ok::<(), DataFusionError>(())
    };
    let (read, written) = futures::join!(reader, writer);
    read?;
    written
}

/// DELETE, UPDATE or TRUNCATE inside one transaction.
fn mutate(table: &Table, op: &DmlOp, threads: usize) -> Result<usize> {
    let n = table.try_transaction(|t: &mut Transaction<'_>| -> Result<usize, Error> {
        let snapshot = t.snapshot();
        let options = ScanOptions::default().with_threads(threads);
        match op {
            DmlOp::Truncate => Ok(t.truncate()),
            DmlOp::Delete(filter) if filter.residual.is_empty() => {
                let selection = matching_records(&snapshot, filter.predicate.as_ref(), &options)?;
                Ok(t.delete_selection(&snapshot, &selection)?)
            }
            DmlOp::Delete(filter) => {
                let mut selection = Selection::default();
                for batch in gather(&snapshot, filter, &filter.columns, &options)? {
                    let keep = residual_mask(&batch, &filter.residual)?;
                    selection.add(&batch, &keep);
                }
                Ok(t.delete_selection(&snapshot, &selection.into_vec())?)
            }
            DmlOp::Update { filter, step, .. } => {
                let all: Vec<usize> = (0..snapshot.schema().len()).collect();
                let arrow = Arc::clone(snapshot.schema().arrow());
                let mut selection = Selection::default();
                let mut updated = Vec::new();
                for batch in gather(&snapshot, filter, &all, &options)? {
                    let keep = residual_mask(&batch, &filter.residual)?;
                    let batch = filter_record_batch(&batch, &keep)?;
                    selection.add(&batch, &BooleanArray::from(vec![true; batch.num_rows()]));
                    updated.push(set(&batch, &step.assignments, &arrow)?);
                }
                // Delete first: the ids refer to the snapshot, appends come after it.
                let n = t.delete_selection(&snapshot, &selection.into_vec())?;
                for batch in &updated {
                    t.append(batch)?;
                }
                Ok(n)
            }
            DmlOp::UpdateSteps { gather: filter, steps } => {
                let all: Vec<usize> = (0..snapshot.schema().len()).collect();
                let arrow = Arc::clone(snapshot.schema().arrow());
                let gathered = gather(&snapshot, filter, &all, &options)?;
                let Some(first) = gathered.first() else { return Ok(0) };
                let mut rows = concat_batches(&first.schema(), &gathered)?;
                let mut changed = vec![false; rows.num_rows()];
                let mut n = 0;
                for step in steps {
                    let matched = residual_mask(&rows, &step.condition)?;
                    n += matched.true_count();
                    if matched.true_count() > 0 {
                        rows = apply_step(&rows, &matched, &step.assignments, &arrow)?;
                        for (c, m) in changed.iter_mut().zip(matched.values()) {
                            *c |= m;
                        }
                    }
                }
                let changed = filter_record_batch(&rows, &BooleanArray::from(changed))?;
                let mut selection = Selection::default();
                selection.add(&changed, &BooleanArray::from(vec![true; changed.num_rows()]));
                t.delete_selection(&snapshot, &selection.into_vec())?;
                t.append(&table_columns(&changed, &arrow)?)?;
                Ok(n)
            }
            DmlOp::Insert { .. } => Err(Error::Internal("INSERT is not a blocking statement".into())),
        }
    });
    Ok(n?)
}

/// `rows` (table columns, then record ids) after one UPDATE step: the rows
/// `matched` get the step's SET (evaluated on them only), the others stay.
fn apply_step(
    rows: &RecordBatch,
    matched: &BooleanArray,
    assignments: &[(usize, Arc<dyn PhysicalExpr>)],
    table: &SchemaRef,
) -> Result<RecordBatch> {
    let updated = set(&filter_record_batch(rows, matched)?, assignments, table)?;
    let mut next = 0;
    let indices: Vec<(usize, usize)> = (0..rows.num_rows())
        .map(|i| {
            if matched.value(i) {
                next += 1;
                (1, next - 1)
            } else {
                (0, i)
            }
        })
        .collect();
    let strict = CastOptions { safe: false, ..CastOptions::default() };
    let mut columns = rows.columns().to_vec();
    for (c, (old, new)) in columns.iter_mut().zip(updated.columns()).enumerate() {
        if !assignments.iter().any(|(a, _)| *a == c) {
            // Unchanged by SET: the updated rows hold the same values.
            continue;
        }
        let new = if new.data_type() == old.data_type() {
            Arc::clone(new)
        } else {
            cast_with_options(new, old.data_type(), &strict)?
        };
        *old = interleave(&[old.as_ref(), new.as_ref()], &indices)?;
    }
    // Nullable: a SET may write a NULL into a NOT NULL column, which the
    // append then refuses, naming the column.
    let fields: Vec<Field> = rows.schema().fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?)
}

/// The table columns of `rows` (dropping the record ids after them).
fn table_columns(rows: &RecordBatch, table: &SchemaRef) -> Result<RecordBatch> {
    let columns = rows.columns()[..table.fields().len()].to_vec();
    let fields: Vec<Field> =
        table.fields().iter().zip(&columns).map(|(f, a)| Field::new(f.name(), a.data_type().clone(), true)).collect();
    let options = RecordBatchOptions::new().with_row_count(Some(rows.num_rows()));
    Ok(RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)?)
}

/// The rows of `snapshot` passing `filter.predicate`: table columns
/// `columns`, then `__shard` and `__record`.
fn gather(
    snapshot: &TableSnapshot,
    filter: &DmlFilter,
    columns: &[usize],
    options: &ScanOptions,
) -> Result<Vec<RecordBatch>, Error> {
    let spec = Arc::new(GatherSpec::columns(snapshot.schema(), Some(columns), DML_BATCH_ROWS)?.with_record_ids());
    let acc =
        scan(snapshot, filter.predicate.as_ref(), options, || GatherKernel::new(Arc::clone(&spec)), || spec.new_acc())?;
    Ok(acc.finish()?)
}

/// True for the rows where every residual expression is true (not NULL).
pub(super) fn residual_mask(batch: &RecordBatch, residual: &[Arc<dyn PhysicalExpr>]) -> Result<BooleanArray> {
    let mut keep = vec![true; batch.num_rows()];
    for e in residual {
        let value = e.evaluate(batch)?.into_array(batch.num_rows())?;
        let Some(b) = value.as_boolean_opt() else {
            return Err(DataFusionError::Plan(format!(
                "the WHERE clause {e} is not a boolean ({})",
                value.data_type()
            )));
        };
        for (k, v) in keep.iter_mut().zip(b.iter()) {
            *k &= v == Some(true);
        }
    }
    Ok(BooleanArray::from(keep))
}

/// The new versions of `batch`'s rows (table columns first).
fn set(batch: &RecordBatch, assignments: &[(usize, Arc<dyn PhysicalExpr>)], table: &SchemaRef) -> Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = batch.columns()[..table.fields().len()].to_vec();
    let strict = CastOptions { safe: false, ..CastOptions::default() };
    for (c, e) in assignments {
        let value = e.evaluate(batch)?.into_array(batch.num_rows())?;
        let declared = table.field(*c).data_type();
        columns[*c] = if ingest_compatible(declared, value.data_type()) {
            value
        } else {
            cast_with_options(&value, declared, &strict)?
        };
    }
    let fields: Vec<Field> =
        table.fields().iter().zip(&columns).map(|(f, a)| Field::new(f.name(), a.data_type().clone(), true)).collect();
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)?)
}

/// `batch` under the table's column names (DataFusion names INSERT input
/// columns after their expressions), each column cast to its table type
/// where DataFusion left another one (it types an INSERT's input before
/// coercing a UNION in it); a value that does not fit fails the cast.
fn relabel(batch: &RecordBatch, table: &SchemaRef) -> Result<RecordBatch, Error> {
    if batch.num_columns() != table.fields().len() {
        return Err(Error::Internal(format!(
            "INSERT input has {} columns, the table {}",
            batch.num_columns(),
            table.fields().len()
        )));
    }
    let strict = CastOptions { safe: false, ..CastOptions::default() };
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (f, a) in table.fields().iter().zip(batch.columns()) {
        let a = if ingest_compatible(f.data_type(), a.data_type()) {
            Arc::clone(a)
        } else {
            cast_with_options(a, f.data_type(), &strict)?
        };
        fields.push(Field::new(f.name(), a.data_type().clone(), true));
        columns.push(a);
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)?)
}

/// Record ids chosen for deletion, per shard.
#[derive(Debug, Default)]
struct Selection(BTreeMap<u64, Vec<RecId>>);

impl Selection {
    /// Adds the ids of `batch`'s rows where `keep` is true.
    fn add(&mut self, batch: &RecordBatch, keep: &BooleanArray) {
        let n = batch.num_columns();
        let shards = batch.column(n - 2).as_primitive::<UInt64Type>();
        let records = batch.column(n - 1).as_primitive::<UInt32Type>();
        for i in (0..batch.num_rows()).filter(|&i| keep.value(i)) {
            self.0.entry(shards.value(i)).or_default().push(records.value(i));
        }
    }

    fn into_vec(self) -> Vec<(ShardId, Vec<RecId>)> {
        self.0.into_iter().map(|(s, ids)| (ShardId(s), ids)).collect()
    }
}
