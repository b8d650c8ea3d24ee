//! Admission control: how many statements run at once, how many may wait
//! for their turn, and which of two lanes a statement waits in.
//!
//! A server shares its cores and memory among the statements it runs; past
//! a few per core, running more at once only makes each slower and holds
//! more memory. So a statement runs once it holds a slot of its lane, and
//! waits (first come, first served) while none is free. When
//! [`AdmissionOptions::max_queued`] statements already wait in its lane, or
//! its wait passes [`AdmissionOptions::queue_timeout`], it fails with
//! [`Refused`] (`ResourceExhausted` to a client), naming the bound.
//!
//! ```text
//!   physical plan ──bound──▶ light (≤ LIGHT_ROWS rows through its operators) ──▶ light lane: N slots + queue
//!                       └───▶ heavy (more, or unknown)                        ──▶ heavy lane: N slots + queue
//! ```
//!
//! Small statements are not starved by large ones: an upper bound on the
//! rows through a statement's operators (the rows quiverdb's scans read,
//! the sum of their inputs for filters, aggregates, sorts and the like,
//! the product for joins) puts `SELECT 1`, metadata queries and statements
//! over small tables in their own lane, whose slots large statements never
//! take. A statement whose bound is not known (an `UNNEST`, a table
//! function without statistics) waits in the heavy lane.
//!
//! A heavy statement runs on the heavy lane's own threads (see
//! [`Slot::execute`]), as many as cores, so an operator that computes for
//! long between two yields never holds the threads that read requests and
//! run light statements. A statement holds its slot until its result
//! stream is drained, fails or is dropped: a client that goes away frees
//! the slot at once and cancels the work, which stops at its next yield.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use futures::{FutureExt, StreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::exec::{QuiverAggregateExec, QuiverLookupExec, QuiverScanExec, QuiverTopKExec};

/// The most rows a statement's operators may pass, their bounds added up
/// (see [`Weight::of_plan`]), for it to wait in the light lane.
pub const LIGHT_ROWS: usize = 1 << 17;

/// How many statements run at once and how many may wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionOptions {
    /// Statements running at once, per lane. Default: twice the available
    /// parallelism, at least 4.
    pub max_running: usize,
    /// Statements waiting for a slot, per lane; one more is refused at once.
    pub max_queued: usize,
    /// How long a statement may wait for a slot before it is refused.
    pub queue_timeout: Duration,
}

impl Default for AdmissionOptions {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self { max_running: (2 * cores).max(4), max_queued: 256, queue_timeout: Duration::from_secs(300) }
    }
}

/// Which lane a statement waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// At most [`LIGHT_ROWS`] rows through its operators.
    Light,
    /// More, or not known.
    Heavy,
}

impl Weight {
    /// The weight of a physical plan: light when the rows its operators
    /// output, bounded from below upwards, add up to at most
    /// [`LIGHT_ROWS`] (see [`output_bound`]).
    pub fn of_plan(plan: &Arc<dyn ExecutionPlan>) -> Self {
        if output_bound(plan, &mut 0).is_some() { Self::Light } else { Self::Heavy }
    }

    /// The weight of a statement that changes data, before it is planned
    /// physically: light when it reads no table (`INSERT … VALUES`, DDL).
    pub fn of_change(plans: &[LogicalPlan]) -> Self {
        let reads = |plan: &LogicalPlan| {
            let mut found = false;
            let _ = plan.apply_with_subqueries(|node| {
                found |= matches!(node, LogicalPlan::TableScan(_));
                Ok(if found { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
            });
            found
        };
        if plans.iter().any(reads) { Self::Heavy } else { Self::Light }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Light => "light",
            Self::Heavy => "heavy",
        }
    }
}

/// Operators that output at most the rows of their inputs together
/// (quiverdb's own scan plans are bounded by [`rows_read`]).
const NO_MORE_THAN_INPUTS: [&str; 16] = [
    "ProjectionExec",
    "FilterExec",
    "AggregateExec",
    "SortExec",
    "PartialSortExec",
    "SortPreservingMergeExec",
    "CoalescePartitionsExec",
    "CoalesceBatchesExec",
    "RepartitionExec",
    "GlobalLimitExec",
    "LocalLimitExec",
    "UnionExec",
    "InterleaveExec",
    "WindowAggExec",
    "BoundedWindowAggExec",
    "CooperativeExec",
];

/// Joins: at most the product of their inputs.
const JOINS: [&str; 6] = [
    "HashJoinExec",
    "NestedLoopJoinExec",
    "CrossJoinExec",
    "SortMergeJoinExec",
    "SymmetricHashJoinExec",
    "PiecewiseMergeJoinExec",
];

/// An upper bound on the rows `plan` outputs, its operators' bounds added
/// to `total` on the way: quiverdb's scans count the rows they read,
/// other leaves their statistics (when exact or estimated), operators that
/// pass on at most their inputs the sum of those, joins the product.
/// `None` when a bound is not known (an operator that may output more than
/// it reads, such as `UNNEST`, or a leaf without statistics), or once
/// `total` passes [`LIGHT_ROWS`].
#[recursive::recursive]
fn output_bound(plan: &Arc<dyn ExecutionPlan>, total: &mut usize) -> Option<usize> {
    let out = if let Some(read) = rows_read(plan.as_ref()) {
        read
    } else if plan.children().is_empty() {
        let stats = StatisticsContext::new().compute(plan.as_ref(), &StatisticsArgs::new()).ok()?;
        *stats.num_rows.get_value()?
    } else {
        let name = plan.name();
        let mut inputs = Vec::with_capacity(plan.children().len());
        for child in plan.children() {
            inputs.push(output_bound(child, total)?);
        }
        if NO_MORE_THAN_INPUTS.contains(&name) {
            inputs.iter().fold(0usize, |a, b| a.saturating_add(*b))
        } else if JOINS.contains(&name) {
            inputs.iter().fold(1usize, |a, b| a.saturating_mul(*b))
        } else {
            return None;
        }
    };
    *total = total.saturating_add(out);
    (*total <= LIGHT_ROWS).then_some(out)
}

/// The rows one of quiverdb's scan plans reads from its table (the live
/// rows of the shards it scans); `None` for other plans.
fn rows_read(plan: &dyn ExecutionPlan) -> Option<usize> {
    if let Some(scan) = plan.downcast_ref::<QuiverScanExec>() {
        return Some(scan.rows_read());
    }
    if let Some(aggregate) = plan.downcast_ref::<QuiverAggregateExec>() {
        return Some(aggregate.rows_read());
    }
    if let Some(lookup) = plan.downcast_ref::<QuiverLookupExec>() {
        return Some(lookup.key_count());
    }
    plan.downcast_ref::<QuiverTopKExec>().map(QuiverTopKExec::rows_read)
}

/// Why a statement was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(String);

/// One lane: its slots, how many wait for them, and the threads its
/// statements run on (`None`: the caller's).
#[derive(Debug)]
struct Lane {
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    threads: Option<Threads>,
}

/// The heavy lane's own tokio runtime. Its statements run on these
/// threads, not on the threads that serve connections: an operator that
/// computes for seconds between two yields (a nested-loop join over large
/// batches) holds one of them, while requests are still read and planned
/// and light statements still run (the OS shares the cores among all
/// threads).
struct Threads {
    /// Taken when dropped.
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

impl fmt::Debug for Threads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Threads").finish_non_exhaustive()
    }
}

impl Threads {
    fn new(name: &str) -> std::io::Result<Self> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cores)
            .thread_name(format!("quiverdb-{name}"))
            // Execution recurses over plans as deep as quiverdb accepts.
            .thread_stack_size(crate::THREAD_STACK_BYTES)
            .enable_all()
            .build()?;
        Ok(Self { handle: runtime.handle().clone(), runtime: Some(runtime) })
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        // Dropped where blocking is not allowed (inside the server's own
        // runtime): running statements are cancelled at their next yield.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The lanes of a server; cheap to share.
#[derive(Debug)]
pub struct Admission {
    options: AdmissionOptions,
    light: Lane,
    heavy: Lane,
}

impl Admission {
    /// Lanes with the bounds of `options` (`max_running` at least 1). The
    /// heavy lane gets a runtime of as many threads as there are cores;
    /// light statements run on the caller's threads (they are small, and
    /// a hop to other threads costs each about half a millisecond).
    pub fn new(options: AdmissionOptions) -> std::io::Result<Self> {
        let lane = |threads| Lane {
            slots: Arc::new(Semaphore::new(options.max_running.max(1))),
            waiting: AtomicUsize::new(0),
            threads,
        };
        Ok(Self { light: lane(None), heavy: lane(Some(Threads::new("heavy")?)), options })
    }

    /// Statements running and waiting in the lane of `weight`.
    pub fn load(&self, weight: Weight) -> (usize, usize) {
        let lane = self.lane(weight);
        let running = self.options.max_running.max(1) - lane.slots.available_permits();
        (running, lane.waiting.load(Ordering::Relaxed))
    }

    fn lane(&self, weight: Weight) -> &Lane {
        match weight {
            Weight::Light => &self.light,
            Weight::Heavy => &self.heavy,
        }
    }

    /// A slot in the lane of `weight`: at once if one is free, else after
    /// the statements before it; refused when the queue is full or the
    /// wait passes the timeout. Dropping the future leaves the queue.
    pub async fn admit(&self, weight: Weight) -> Result<Slot, Refused> {
        let lane = self.lane(weight);
        let slot = |permit| Slot { permit, threads: lane.threads.as_ref().map(|t| t.handle.clone()) };
        if let Ok(permit) = Arc::clone(&lane.slots).try_acquire_owned() {
            return Ok(slot(permit));
        }
        let AdmissionOptions { max_running, max_queued, queue_timeout } = &self.options;
        let waiting = Waiting::join(&lane.waiting, *max_queued).ok_or_else(|| {
            Refused(format!(
                "the server is busy: {max_running} {} statements are running and {max_queued} wait for their turn \
                 (--max-running-queries, --max-queued-queries); try again later",
                weight.name()
            ))
        })?;
        let permit = tokio::time::timeout(*queue_timeout, Arc::clone(&lane.slots).acquire_owned()).await;
        drop(waiting);
        match permit {
            Ok(Ok(permit)) => Ok(slot(permit)),
            Ok(Err(_)) => Err(Refused("the server is shutting down".into())),
            Err(_) => Err(Refused(format!(
                "the server is busy: waited {} s for one of the {max_running} running {} statements to finish \
                 (--queue-timeout-secs); try again later",
                queue_timeout.as_secs_f64(),
                weight.name()
            ))),
        }
    }
}

/// A place in a lane's queue, given up when dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn join(waiting: &'a AtomicUsize, max: usize) -> Option<Self> {
        waiting.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).ok()?;
        Some(Self(waiting))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An admitted statement's slot, freed when the work it runs ends.
#[derive(Debug)]
pub struct Slot {
    permit: OwnedSemaphorePermit,
    threads: Option<tokio::runtime::Handle>,
}

/// Result batches a lane's thread sends ahead of the reader.
const AHEAD: usize = 2;

impl Slot {
    /// Executes `plan` on the lane's threads (the heavy lane's runtime, or
    /// the caller's for the light lane). The slot is held until the
    /// returned stream ends (drained or failed) or is dropped, which
    /// cancels the execution: it stops at its next yield (an operator may
    /// compute for a while between two).
    pub fn execute(self, plan: Arc<dyn ExecutionPlan>, task: Arc<TaskContext>) -> SendableRecordBatchStream {
        let schema = plan.schema();
        let Some(threads) = self.threads else {
            // Here, holding the slot as long as the stream.
            let permit = self.permit;
            return match execute_stream(plan, task) {
                Ok(stream) => Box::pin(RecordBatchStreamAdapter::new(
                    schema,
                    stream.map(move |batch| {
                        let _held = &permit;
                        batch
                    }),
                )),
                Err(e) => Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::once(async { Err(e) }))),
            };
        };
        let (tx, rx) = tokio::sync::mpsc::channel(AHEAD);
        let driver = threads.spawn(async move {
            let mut stream = match execute_stream(plan, task) {
                Ok(stream) => stream,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            while let Some(batch) = stream.next().await {
                let failed = batch.is_err();
                if tx.send(batch).await.is_err() || failed {
                    return;
                }
            }
        });
        let running = (rx, Cancel(driver), self.permit);
        let batches = futures::stream::unfold(running, |(mut rx, driver, permit)| async move {
            rx.recv().await.map(|batch| (batch, (rx, driver, permit)))
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, batches))
    }

    /// Runs `work` on the lane's threads (as [`Self::execute`]), holding
    /// this slot until it ends;
    /// dropping the returned future cancels it (at its next yield).
    /// `Err` if `work` panicked.
    pub async fn run<T: Send + 'static>(self, work: impl Future<Output = T> + Send + 'static) -> Result<T, String> {
        let done = match self.threads {
            None => std::panic::AssertUnwindSafe(work).catch_unwind().await.map_err(|panic| {
                panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".into())
            }),
            Some(threads) => {
                let mut running = Cancel(threads.spawn(work));
                (&mut running.0).await.map_err(|e| e.to_string())
            }
        };
        drop(self.permit);
        done
    }
}

/// A statement's task on its lane's threads, cancelled when dropped.
struct Cancel<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Cancel<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(max_running: usize, max_queued: usize, wait_ms: u64) -> AdmissionOptions {
        AdmissionOptions { max_running, max_queued, queue_timeout: Duration::from_millis(wait_ms) }
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_a_freed_slot_admits_the_first_waiter() {
        let admission = Arc::new(Admission::new(options(2, 1, 60_000)).unwrap());
        let a = admission.admit(Weight::Heavy).await.unwrap();
        let _b = admission.admit(Weight::Heavy).await.unwrap();
        assert_eq!(admission.load(Weight::Heavy), (2, 0));
        let queued = tokio::spawn({
            let admission = Arc::clone(&admission);
            async move { admission.admit(Weight::Heavy).await }
        });
        while admission.load(Weight::Heavy).1 == 0 {
            tokio::task::yield_now().await;
        }
        let refused = admission.admit(Weight::Heavy).await.unwrap_err();
        assert!(refused.to_string().contains("2 heavy statements are running and 1 wait"), "{refused}");
        // The light lane is not the heavy lane's.
        let light = admission.admit(Weight::Light).await.unwrap();
        assert_eq!(admission.load(Weight::Light), (1, 0));
        drop(light);
        assert_eq!(admission.load(Weight::Light), (0, 0));
        drop(a);
        let admitted = queued.await.unwrap().unwrap();
        assert_eq!(admission.load(Weight::Heavy), (2, 0));
        drop(admitted);
        assert_eq!(admission.load(Weight::Heavy), (1, 0));
    }

    #[tokio::test]
    async fn a_wait_past_the_timeout_is_refused_and_leaves_the_queue() {
        let admission = Admission::new(options(1, 4, 50)).unwrap();
        let _held = admission.admit(Weight::Light).await.unwrap();
        let refused = admission.admit(Weight::Light).await.unwrap_err();
        assert!(refused.to_string().contains("waited 0.05 s"), "{refused}");
        assert_eq!(admission.load(Weight::Light), (1, 0));
        // A waiter whose client goes away (its future dropped) leaves too.
        let gave_up = tokio::time::timeout(Duration::from_millis(10), admission.admit(Weight::Light)).await;
        assert!(gave_up.is_err());
        assert_eq!(admission.load(Weight::Light), (1, 0));
    }

    /// Waits until the lane of `weight` runs `running` statements.
    async fn until_running(admission: &Admission, weight: Weight, running: usize) {
        let wait = async {
            while admission.load(weight).0 != running {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), wait).await.unwrap();
    }

    #[tokio::test]
    async fn a_slot_is_held_until_its_execution_ends_or_is_dropped() {
        use datafusion::prelude::{SessionConfig, SessionContext};

        let admission = Admission::new(options(1, 0, 0)).unwrap();
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_batch_size(100));
        let plan = ctx.sql("SELECT * FROM generate_series(1, 1000)").await.unwrap().create_physical_plan().await;
        let plan = plan.unwrap();
        let mut drained = admission.admit(Weight::Heavy).await.unwrap().execute(Arc::clone(&plan), ctx.task_ctx());
        assert_eq!(drained.next().await.unwrap().unwrap().num_rows(), 100);
        assert_eq!(admission.load(Weight::Heavy), (1, 0));
        assert!(admission.admit(Weight::Heavy).await.is_err());
        let mut rows = 100;
        while let Some(batch) = drained.next().await {
            rows += batch.unwrap().num_rows();
        }
        assert_eq!(rows, 1000);
        until_running(&admission, Weight::Heavy, 0).await;

        let mut dropped = admission.admit(Weight::Heavy).await.unwrap().execute(plan, ctx.task_ctx());
        assert!(dropped.next().await.is_some());
        assert_eq!(admission.load(Weight::Heavy), (1, 0));
        drop(dropped);
        until_running(&admission, Weight::Heavy, 0).await;

        // Work that panics frees its slot and reports the panic.
        let slot = admission.admit(Weight::Light).await.unwrap();
        assert!(slot.run(async { panic!("a bug") }).await.is_err());
        until_running(&admission, Weight::Light, 0).await;
        let slot = admission.admit(Weight::Light).await.unwrap();
        assert_eq!(slot.run(async { 7 }).await.unwrap(), 7);
        until_running(&admission, Weight::Light, 0).await;
    }

    #[tokio::test]
    async fn small_plans_are_light_and_large_or_unknown_ones_heavy() {
        use datafusion::prelude::SessionContext;

        let ctx = SessionContext::new();
        let weight = |sql: &'static str| {
            let ctx = ctx.clone();
            async move {
                let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
                Weight::of_plan(&plan)
            }
        };
        assert_eq!(weight("SELECT 1").await, Weight::Light);
        assert_eq!(weight("SELECT * FROM (VALUES (1), (2), (3)) t(x) WHERE x > 1").await, Weight::Light);
        // generate_series' statistics are not known.
        assert_eq!(weight("SELECT count(*) FROM generate_series(1, 10000000000)").await, Weight::Heavy);
        // Joins count the product of their inputs.
        ctx.sql("CREATE TABLE m AS SELECT value AS v FROM generate_series(1, 1000)").await.unwrap();
        assert_eq!(weight("SELECT v, COUNT(*) FROM m GROUP BY v ORDER BY v").await, Weight::Light);
        assert_eq!(weight("SELECT * FROM (VALUES (1), (2)) a(x) JOIN m ON a.x = m.v").await, Weight::Light);
        assert_eq!(weight("SELECT COUNT(*) FROM m a, m b WHERE a.v + b.v = 0").await, Weight::Heavy);
        // An operator that may output more than it reads is not known.
        assert_eq!(weight("SELECT unnest([v, v]) FROM m").await, Weight::Heavy);
    }
}
