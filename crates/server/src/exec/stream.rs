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
//! the stream stops the work at the next step. A panic in a step becomes
//! an error on the stream, never a silently short result.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

/// Whether a step left work for another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    More,
    Done,
}

/// A stream of the batches `step` queues, one step whenever the queue
/// runs dry, until a step says [`Step::Done`] or fails.
pub(crate) fn stepped_stream<F>(schema: SchemaRef, mut step: F) -> SendableRecordBatchStream
where
    F: FnMut(&mut VecDeque<RecordBatch>) -> Result<Step> + Send + 'static,
{
    let mut queue = VecDeque::new();
    let mut more = true;
    let batches = std::iter::from_fn(move || {
        loop {
            if let Some(batch) = queue.pop_front() {
                return Some(Ok(batch));
            }
            if !more {
                return None;
            }
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| step(&mut queue))).unwrap_or_else(|panic| {
                Err(DataFusionError::Internal(format!("a quiverdb scan panicked: {}", panic_message(&panic))))
            });
            match outcome {
                Ok(s) => more = s == Step::More,
                Err(e) => {
                    more = false;
                    queue.clear();
                    return Some(Err(e));
                }
            }
        }
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::iter(batches)))
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
}
