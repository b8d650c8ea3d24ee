//! Durability: a database kept in a data directory ([`store`]: the
//! catalog file, checkpoints, recovery; opened by
//! [`crate::Database::open`]). Its parts: the file operations of a data
//! directory behind a trait ([`io::StorageIo`], with a crash- and
//! fault-simulating implementation for tests), the self-checking
//! framed-record format ([`frame`]) and the write-ahead log built on it
//! ([`wal`]: segments, sync modes, group commit, read-only after a failed
//! write), the log's records ([`record`]: catalog changes, transactions
//! and rebuilds), shard checkpoint files ([`checkpoint`]), and the lock
//! that keeps a data directory to one process ([`lock`]).

pub mod checkpoint;
pub mod frame;
pub mod io;
pub mod lock;
pub mod record;
pub mod store;
pub mod wal;
