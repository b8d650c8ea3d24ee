//! Blocking scan work as an async `RecordBatch` stream.
//!
//! ```text
//!   execute() ──▶ stream polled ──▶ producer on a blocking thread
//!                      ▲                 │ scan shard by shard
//!                      └── channel (2) ◀─┘ send each finished batch
//! ```
//!
//! The producer starts on the first poll, so planning never scans. The
//! channel is bounded: a slow consumer stalls the producer after two
//! batches instead of letting results pile up. Dropping the stream closes
//! the channel, and the producer stops at its next send. A panic in the
//! producer becomes an error on the stream, never a silently short result.

use std::panic::AssertUnwindSafe;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;
use tokio::sync::mpsc;

/// Batches in flight between producer and consumer.
const CHANNEL_BATCHES: usize = 2;

/// The producer's end of the channel.
#[derive(Debug)]
pub(crate) struct BatchSender {
    tx: mpsc::Sender<Result<RecordBatch>>,
}

impl BatchSender {
    /// Sends a batch; false once the consumer has gone (stop producing).
    pub(crate) fn send(&self, batch: RecordBatch) -> bool {
        self.tx.blocking_send(Ok(batch)).is_ok()
    }
}

/// A stream of the batches `produce` sends from a blocking thread.
pub(crate) fn spawn_producer<F>(schema: SchemaRef, produce: F) -> SendableRecordBatchStream
where
    F: FnOnce(&BatchSender) -> Result<()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
    let mut produce = Some(produce);
    let start = futures::stream::once(async move {
        if let Some(produce) = produce.take() {
            spawn_blocking(move || {
                let sender = BatchSender { tx };
                let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| produce(&sender)))
                    .unwrap_or_else(|panic| Err(DataFusionError::Internal(format!("a quiverdb scan panicked: {}", panic_message(&panic)))));
                if let Err(e) = outcome {
                    let _ = sender.tx.blocking_send(Err(e));
                }
            });
        }
        rx
    });
    let batches = start.flat_map(|rx| futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) }));
    Box::pin(RecordBatchStreamAdapter::new(schema, batches))
}

/// Runs `f` on tokio's blocking pool, or on a new thread outside a runtime.
fn spawn_blocking(f: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn_blocking(f);
        }
        Err(_) => {
            std::thread::spawn(f);
        }
    }
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
