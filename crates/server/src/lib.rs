//! quiverdb-server: quiverdb over DataFusion SQL and Arrow Flight SQL.
//!
//! ```text
//!   SQL ──DataFusion──▶ logical plan ──▶ physical plan ──quiverdb rules──▶ execution
//!                          │                 │                  │
//!                 QuiverSchema (DDL)   QuiverTable::scan   AggregateExec → QuiverAggregateExec
//!                 DmlGuard (DML)       DML hooks → DmlExec SortExec(k)   → QuiverTopKExec
//! ```
//!
//! - [`session_context`] turns a quiverdb [`Database`](quiverdb_storage::Database)
//!   into a ready `SessionContext`: `CREATE TABLE`, `CREATE TABLE ... AS
//!   SELECT`, `DROP TABLE`, `CREATE`/`DROP SCHEMA`, `CREATE`/`DROP VIEW`,
//!   `INSERT`, `DELETE`, `UPDATE`, `TRUNCATE`, `SHOW TABLES` and
//!   `information_schema` all act on quiverdb tables. [`sql`] runs SQL in
//!   such a session and also `ALTER TABLE`, which DataFusion does not
//!   plan.
//! - [`QuiverTable`] is the `TableProvider`: scans decode only the
//!   projected columns, run the filters DataFusion pushes (exactly where
//!   quiverdb can, or to prune), and report exact statistics from zone
//!   maps, so `COUNT(*)`, `MIN` and `MAX` are answered without a scan.
//! - [`QuiverPushdown`] replaces aggregates (COUNT, SUM, MIN, MAX, AVG,
//!   with GROUP BY keys quiverdb can compute) and `ORDER BY ... LIMIT`
//!   over a quiverdb scan with scans that run them in quiverdb's
//!   map+reduce kernels.
//! - [`flight::serve`] serves a database over Arrow Flight SQL
//!   (authentication, statements, prepared statements, metadata, bulk
//!   ingest), each request running in such a session.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> datafusion::error::Result<()> {
//! use quiverdb_storage::Database;
//!
//! let db = Database::new();
//! let ctx = quiverdb_server::session_context(&db);
//! ctx.sql("CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, PRIMARY KEY (id))").await?;
//! ctx.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, NULL)").await?.collect().await?;
//! let rows = ctx.sql("SELECT COUNT(name) FROM t WHERE id >= 2").await?.collect().await?;
//! assert_eq!(datafusion::arrow::util::pretty::pretty_format_batches(&rows)?.to_string().lines().nth(3), Some("| 1             |"));
//! assert_eq!(db.table("t").unwrap().row_count(), 3);
//! # Ok(())
//! # }
//! ```

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod admission;
mod alter;
mod bounded;
mod catalog;
mod checked;
mod checked_sum;
mod convert;
mod error;
mod exec;
mod execute;
pub mod flight;
mod limits;
mod many;
mod nesting;
mod options;
mod provider;
mod retained;
mod rules;
pub mod running;
mod session;
mod stats;
mod system;
mod translate;
mod version;

pub use alter::sql;
pub use catalog::{DEFAULT_SCHEMA, QuiverCatalog, QuiverSchema, SessionMaker};
pub use error::{Error, ErrorKind, Result, error_message};
pub use exec::{DmlExec, QuiverAggregateExec, QuiverLookupExec, QuiverScanExec, QuiverTopKExec};
pub use nesting::{
    MAX_CASE_BRANCHES, MAX_EXPRESSION_DEPTH, MAX_PLAN_DEPTH, MAX_SET_OPERATION_BRANCHES, MAX_SET_OPERATION_DEPTH,
    THREAD_STACK_BYTES,
};
pub use options::SessionOptions;
pub use provider::{QuiverTable, ScanSettings};
pub use rules::QuiverPushdown;
pub use session::{DEFAULT_CATALOG, session_context, session_context_with};
pub use system::{SYSTEM_SCHEMA, report_allocator};
pub use version::version_string;
