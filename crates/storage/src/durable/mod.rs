//! Building blocks of durability: the file operations of a data
//! directory behind a trait ([`io::StorageIo`], with a crash- and
//! fault-simulating implementation for tests), and the self-checking
//! framed-record format of the write-ahead log ([`frame`]).
//!
//! Nothing in quiverdb writes a data directory yet: the log, shard
//! checkpoints and recovery that build on these are being written.

pub mod frame;
pub mod io;
