//! quiverdb: an in-memory columnar database that keeps tables as shards of
//! compressed main storage plus an append-only delta, and serves its data
//! as Apache Arrow.
//!
//! This facade is the one dependency a Rust program adds. It re-exports the
//! layers: [`storage`] (tables, shards, encodings, snapshots),
//! [`mapreducer`] (the batched map+reduce interface and its reducers) and
//! [`scan`] (predicates, unordered and ordered scans, DELETE/UPDATE by
//! predicate) and [`server`] (SQL through DataFusion: the table provider,
//! catalog, DML and pushdown rules; [`session_context`] is the one call
//! that turns a [`Database`] into a SQL session; `server::flight` serves
//! it over Arrow Flight SQL, as the `quiverdb serve` binary does).
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{Int64Array, RecordBatch};
//! use arrow_schema::{DataType, Field, Schema};
//! use quiverdb::{Database, TableOptions};
//!
//! let db = Database::new();
//! let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
//! let table = db.create_table("t", &schema, TableOptions::default())?;
//! table.append(&RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))])?)?;
//! assert_eq!(table.row_count(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use quiverdb_mapreducer as mapreducer;
pub use quiverdb_scan as scan;
pub use quiverdb_server as server;
pub use quiverdb_server::{SessionOptions, session_context, session_context_with, sql};
pub use quiverdb_storage as storage;
pub use quiverdb_storage::{Database, Error, Result, Table, TableOptions, TableSnapshot, Value};
