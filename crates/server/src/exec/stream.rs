//! Scan work as an async `RecordBatch` stream, computed on the task that
//! polls it.
//!
//! ```text
//!   execute() ──▶ stream polled ──▶ queue empty? run the next step
//!                      ▲                 │ (e.g. scan the next shard)
//!                      └──── queue ◀─────┘ its batches
//! ```
//!
//! Nothing runs before the first poll, so planning never scans. Like
//! DataFusion's own operators, a step computes in `poll_next`: there is no
//! thread hand-off and no channel, which on short queries costs more than
//! the scan itself. A step does a bounded amount of work (one shard of a
//! gathering scan), so at most one step's batches are held, and dropping
//! the stream stops the work at the next step. After a time slice of
//! steps the stream gives its task up for a turn, so that tasks waiting
//! on the same worker run (and an idle worker can take this one). A panic
//! in a step becomes an error on the stream, never a silently short
//! result.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::Stream;

/// Whether a step left work for another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    More,
    Done,
}

/// A step started this long after the stream last gave the task up
/// waits for the task's next turn (see [`Stepped`]).
const TIME_SLICE: Duration = Duration::from_millis(2);

/// A stream of the batches `step` queues, one step whenever the queue
/// runs dry, until a step says [`Step::Done`] or fails.
pub(crate) fn stepped_stream<F>(schema: SchemaRef, step: F) -> SendableRecordBatchStream
where
    F: FnMut(&mut VecDeque<RecordBatch>) -> Result<Step> + Send + 'static,
{
    let stepped = Stepped { queue: VecDeque::new(), more: true, step, slice_start: None };
    Box::pin(RecordBatchStreamAdapter::new(schema, stepped))
}

/// The stream of [`stepped_stream`]. Its steps compute on the polling
/// task, so it gives the task up (wakes it and answers `Pending`) once a
/// time slice has passed: tokio then queues the task where an idle worker
/// can take it, and runs the task that waits in this worker's
/// unstealable next-task slot. Without that, a hash join's second
/// partition, woken when the first built the shared hash table, waited
/// there until the first had probed every row (TPC-H q10: one run in
/// three took the single-partition time, 135 ms instead of 88).
struct Stepped<F> {
    queue: VecDeque<RecordBatch>,
    more: bool,
    step: F,
    /// When the stream last started running for the task.
    slice_start: Option<Instant>,
}

// Nothing in a `Stepped` is pinned: the step is only ever called through
// `&mut`.
impl<F> Unpin for Stepped<F> {}

impl<F> Stream for Stepped<F>
where
    F: FnMut(&mut VecDeque<RecordBatch>) -> Result<Step>,
{
    type Item = Result<RecordBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(batch) = this.queue.pop_front() {
                return Poll::Ready(Some(Ok(batch)));
            }
            if !this.more {
                return Poll::Ready(None);
            }
            let now = Instant::now();
            match this.slice_start {
                Some(start) if now.duration_since(start) >= TIME_SLICE => {
                    this.slice_start = None;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Some(_) => {}
                None => this.slice_start = Some(now),
            }
            let step = &mut this.step;
            let queue = &mut this.queue;
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| step(queue))).unwrap_or_else(|panic| {
                Err(DataFusionError::Internal(format!("a quiverdb scan panicked: {}", panic_message(&panic))))
            });
            match outcome {
                Ok(s) => this.more = s == Step::More,
                Err(e) => {
                    this.more = false;
                    this.queue.clear();
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }
}

/// A stream of the batches `produce` returns, computed at the first poll.
pub(crate) fn once_stream<F>(schema: SchemaRef, produce: F) -> SendableRecordBatchStream
where
    F: FnOnce() -> Result<Vec<RecordBatch>> + Send + 'static,
{
    let mut produce = Some(produce);
    stepped_stream(schema, move |queue| {
        if let Some(produce) = produce.take() {
            queue.extend(produce()?);
        }
        Ok(Step::Done)
    })
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use futures::StreamExt;

    use super::*;

    fn batch(v: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![v]))]).unwrap()
    }

    #[tokio::test]
    async fn steps_run_lazily_in_order_and_panics_become_errors() {
        let schema = batch(0).schema();
        let mut next = 0;
        let mut s = stepped_stream(Arc::clone(&schema), move |q| {
            next += 1;
            match next {
                1 => q.extend([batch(1), batch(2)]),
                2 => {}
                3 => q.push_back(batch(3)),
                _ => panic!("step {next}"),
            }
            Ok(Step::More)
        });
        for want in 1..=3 {
            let got = s.next().await.unwrap().unwrap();
            assert_eq!(got, batch(want));
        }
        let err = s.next().await.unwrap().unwrap_err().to_string();
        assert!(err.contains("a quiverdb scan panicked: step 4"), "{err}");
        assert!(s.next().await.is_none(), "nothing after an error");
    }

    /// Steps longer than a time slice give the task up between them
    /// (woken at once, so nothing is lost).
    #[test]
    fn long_steps_give_the_task_up_between_them() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::{Context, Poll};

        struct Count(AtomicUsize);
        impl futures::task::ArcWake for Count {
            fn wake_by_ref(arc_self: &Arc<Self>) {
                arc_self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let wakes = Arc::new(Count(AtomicUsize::new(0)));
        let waker = futures::task::waker(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        let schema = batch(0).schema();
        let (mut next, mut long) = (0, true);
        let mut s = stepped_stream(Arc::clone(&schema), move |q| {
            next += 1;
            if long {
                std::thread::sleep(TIME_SLICE + Duration::from_millis(1));
            }
            long = next < 3;
            q.push_back(batch(next));
            Ok(if next < 6 { Step::More } else { Step::Done })
        });
        let mut got = Vec::new();
        let mut pending = 0;
        loop {
            match s.poll_next_unpin(&mut cx) {
                Poll::Ready(Some(b)) => got.push(b.unwrap()),
                Poll::Ready(None) => break,
                Poll::Pending => pending += 1,
            }
        }
        assert_eq!(got, (1..=6).map(batch).collect::<Vec<_>>());
        // Steps 1–3 are long: the stream gives up before steps 2, 3 and 4
        // (and after short ones only if the machine stalled them).
        assert!(pending >= 3, "{pending}");
        assert_eq!(wakes.0.load(Ordering::SeqCst), pending, "each Pending wakes its task");
    }
}
