//! Test support, with the `testing` feature only (not part of the API): a
//! simulated file system that can crash and fail, and opening a data
//! directory through it.
//!
//! ```text
//!   let io = SimulatedIo::default();
//!   let db = open_with_io(Arc::new(io.clone()), "/db", DurableOptions::default())?;
//!   ... writes ...
//!   io.crash(0);             // keep only what was synced
//!   open_with_io(Arc::new(io), "/db", ..)   // recovers from it
//! ```

use std::path::Path;
use std::sync::Arc;

use crate::database::Database;
use crate::durable::store::DurableOptions;
use crate::error::Result;

pub use crate::durable::io::{AppendFile, StorageIo};
pub use crate::durable::simulated::SimulatedIo;

/// Makes `db`'s log split every record larger than `bytes` into frames of
/// at most `bytes` (as it does records over a gigabyte), so tests reach
/// that path with little data. No effect on an in-memory database.
pub fn set_log_frame_bytes(db: &Database, bytes: usize) {
    if let Some(durable) = db.durable_for_tests() {
        durable.wal().set_frame_bytes(bytes);
    }
}

/// Makes transactions of `db` write their appends to the log ahead of
/// their commit once they hold `bytes` of them (as they do at 8 MiB), so
/// tests reach staged parts with little data. No effect on an in-memory
/// database.
pub fn set_log_stage_bytes(db: &Database, bytes: usize) {
    if let Some(durable) = db.durable_for_tests() {
        durable.wal().set_stage_bytes(bytes);
    }
}

/// Opens the data directory `dir` through `io` (for tests that inject
/// faults), with no directory lock.
pub fn open_with_io(io: Arc<dyn StorageIo>, dir: impl AsRef<Path>, options: DurableOptions) -> Result<Database> {
    Database::open_through(io, dir.as_ref(), options, None)
}
