//! The scan error type.

/// The result type of quiverdb-scan.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a scan.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A predicate does not type-check against the table.
    #[error("invalid predicate: {0}")]
    InvalidPredicate(String),

    /// A predicate, sort key or assignment the scan cannot evaluate; the
    /// caller should evaluate it another way.
    #[error("not supported by the scan layer: {0}")]
    Unsupported(String),

    /// A map expression or reducer failed.
    #[error(transparent)]
    MapReduce(#[from] quiverdb_mapreducer::Error),

    /// A storage operation failed.
    #[error(transparent)]
    Storage(#[from] std::sync::Arc<quiverdb_storage::Error>),

    /// An invariant was violated: this is a bug in quiverdb.
    #[error("internal error (this is a bug in quiverdb, please report it): {0}")]
    Internal(String),
}

impl From<quiverdb_storage::Error> for Error {
    fn from(e: quiverdb_storage::Error) -> Self {
        Error::Storage(std::sync::Arc::new(e))
    }
}
