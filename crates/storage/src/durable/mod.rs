//! Building blocks of durability: the file operations of a data
//! directory behind a trait ([`io::StorageIo`], with a crash- and
//! fault-simulating implementation for tests), the self-checking
//! framed-record format ([`frame`]) and the write-ahead log built on it
//! ([`wal`]: segments, sync modes, group commit, read-only after a failed
//! write), the log's records ([`record`]: catalog changes, transactions,
//! truncates and rebuilds), and the lock that keeps a data directory to
//! one process ([`lock`]).
//!
//! Nothing in quiverdb writes a data directory yet: writing these records
//! as tables change, shard checkpoints, the catalog file and recovery on
//! open are still to come.

pub mod checkpoint;
pub mod frame;
pub mod io;
pub mod lock;
pub mod record;
pub mod store;
pub mod wal;
