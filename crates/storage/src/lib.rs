//! quiverdb-storage: tables kept as shards of compressed, immutable main
//! storage plus an append-only columnar delta, rebuilt in the background.
//!
//! # Data model
//!
//! ```text
//!   Database ── Table (Arrow schema, primary key, options)
//!                 └── shards (≤ shard_capacity rows each, default 65,536)
//!                       ├── main    encoded columns in 1,024-value blocks with zone maps
//!                       ├── delta   columnar chunks, appended to in place
//!                       └── deletes bitmap of dead record ids
//! ```
//!
//! * Appends copy Arrow column slices into the last shard's delta; a batch
//!   larger than the shard's room spills into new shards.
//! * A **rebuild** re-encodes a shard's live rows into new main storage,
//!   choosing per column the smallest of constant, sequence, bit-packing,
//!   run-end, dictionary and plain ([`main`]). It runs in the background
//!   when a shard fills up or accumulates deletions, or on demand.
//! * Every write is atomic: [`Table::transaction`] publishes all its
//!   appends and deletes with one pointer swap. A [`TableSnapshot`] is a
//!   consistent view that stays valid while writers and rebuilds continue.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{Int64Array, RecordBatch, StringArray};
//! use arrow_schema::{DataType, Field, Schema};
//! use quiverdb_storage::{Database, TableOptions};
//!
//! let db = Database::new();
//! let schema = Schema::new(vec![
//!     Field::new("id", DataType::Int64, false),
//!     Field::new("name", DataType::Utf8, true),
//! ]);
//! let table = db.create_table("people", &schema, TableOptions::default())?;
//! let batch = RecordBatch::try_new(
//!     Arc::new(schema),
//!     vec![
//!         Arc::new(Int64Array::from(vec![1, 2, 3])),
//!         Arc::new(StringArray::from(vec![Some("ada"), None, Some("grace")])),
//!     ],
//! )?;
//! table.append(&batch)?;
//! table.rebuild()?; // compress the delta into main storage
//!
//! let snapshot = table.snapshot();
//! assert_eq!(snapshot.row_count(), 3);
//! let batches = snapshot.to_record_batches(None)?;
//! assert_eq!(batches[0].column(1).null_count(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What this crate is not
//!
//! It evaluates no predicates and runs no queries: filtering, aggregation
//! and ordered scans live in `quiverdb-mapreducer` and `quiverdb-scan`,
//! SQL in `quiverdb-server`. Data lives in memory; a database opened on a
//! data directory ([`Database::open`], with [`DurableOptions`]) also logs
//! every change and checkpoints its shards, so it survives crashes. A
//! primary key is indexed (per shard, `index`): commits check new keys
//! through it, and [`TableSnapshot::get`] and [`TableSnapshot::multi_get`]
//! find rows by key.

// `main` is main storage (as opposed to the delta), not a binary's entry point.
#![allow(special_module_name)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod background;
pub mod block;
mod change;
mod database;
pub mod delta;
mod durable;
mod error;
mod index;
mod ingest;
pub mod main;
mod memory;
mod names;
mod output;
mod pk;
mod rebuild;
pub mod row_encoded;
mod shard;
mod sketch;
mod snapshot;
mod state;
mod stats;
mod table;
#[cfg(feature = "testing")]
pub mod testing;
pub mod types;

pub use database::Database;
pub use delta::{DeltaBytes, DeltaColumnReader, DeltaReader};
pub use durable::store::{DurableOptions, RecoveryReport};
pub use durable::wal::{LogStats, SyncMode};
pub use error::{Error, Result};
pub use main::{BLOCK_SIZE, BlockBytes, EncodingKind, MainColumn};
pub use memory::{ColumnMemory, EncodingUsage, MemoryUsage};
pub use names::{Alteration, schema_of};
pub use output::primitive_array;
pub use shard::{DeleteSet, ShardId};
pub use sketch::DistinctSketch;
pub use snapshot::{ShardSnapshot, TableSnapshot};
pub use state::{DEFAULT_REBUILD_DEAD_FRACTION, DEFAULT_SHARD_CAPACITY, MAX_SHARD_CAPACITY, TableOptions};
pub use stats::{ColumnStats, ValueRange};
pub use table::{Table, Transaction};
pub use types::{PhysicalType, RecId, TableSchema, Value};
