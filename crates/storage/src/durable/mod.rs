//! Durability: a database kept in a data directory ([`store`]: the data
//! directory, checkpoints, recovery; opened by [`crate::Database::open`],
//! whose catalog composes what `store::recover` hands it). Its parts: the
//! file operations of a data directory behind a trait ([`io::StorageIo`],
//! with a crash- and fault-simulating implementation for tests), the self-checking
//! framed-record format ([`frame`]) and the write-ahead log built on it
//! ([`wal`]: segments, sync modes, group commit, read-only after a failed
//! write), the log's records ([`record`]: catalog changes, transactions
//! and rebuilds), shard checkpoint files ([`checkpoint`]), the lock
//! that keeps a data directory to one process ([`lock`]), the catalog
//! file ([`catalog`]) and the one shape of damage every reader reports
//! ([`damage`]).

mod catalog;
mod checkpoint;
mod damage;
mod frame;
pub(crate) mod io;
pub(crate) mod lock;
pub(crate) mod record;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod simulated;
pub(crate) mod store;
pub(crate) mod wal;
