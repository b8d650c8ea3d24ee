//! Errors of the SQL layer and their conversion into DataFusion errors.
//!
//! Storage, map+reduce and scan errors keep their source chain inside
//! `DataFusionError::External`; user errors (a bad value, a missing table)
//! and invariant violations stay distinguishable through it.

use datafusion::error::DataFusionError;

/// The result type of quiverdb-server.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the SQL layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A statement quiverdb does not run (with the reason).
    #[error("{0}")]
    Unsupported(String),

    /// A storage operation failed.
    #[error(transparent)]
    Storage(#[from] quiverdb_storage::Error),

    /// A scan failed.
    #[error(transparent)]
    Scan(#[from] quiverdb_scan::Error),

    /// A map+reduce step failed.
    #[error(transparent)]
    MapReduce(#[from] quiverdb_mapreducer::Error),

    /// DataFusion failed.
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),

    /// A statement was rolled back (with the reason).
    #[error("statement rolled back: {0}")]
    Aborted(String),

    /// An invariant was violated: this is a bug in quiverdb.
    #[error("internal error (this is a bug in quiverdb, please report it): {0}")]
    Internal(String),
}

impl From<Error> for DataFusionError {
    fn from(e: Error) -> Self {
        match e {
            Error::DataFusion(inner) => inner,
            Error::Unsupported(msg) => DataFusionError::NotImplemented(msg),
            other => DataFusionError::External(Box::new(other)),
        }
    }
}

impl From<arrow_schema::ArrowError> for Error {
    fn from(e: arrow_schema::ArrowError) -> Self {
        Error::DataFusion(DataFusionError::ArrowError(Box::new(e), None))
    }
}
