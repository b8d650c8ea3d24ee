//! The map+reduce error type.

use arrow_schema::ArrowError;

/// The result type of quiverdb-mapreducer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while mapping and reducing.
///
/// Errors raised while streaming (division by zero, overflow) travel inside
/// the accumulator, so a shard's result can be shipped between processes.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A map expression does not type-check against the table.
    #[error("invalid expression: {0}")]
    InvalidExpression(String),

    /// A reducer or expression is not available for these types; the
    /// caller should evaluate it another way.
    #[error("not supported by the map+reduce layer: {0}")]
    Unsupported(String),

    /// Integer division or remainder by zero.
    #[error("division by zero")]
    DivideByZero,

    /// An integer result does not fit its type.
    #[error("arithmetic overflow: {0}")]
    Overflow(String),

    /// A storage operation failed.
    #[error(transparent)]
    Storage(#[from] std::sync::Arc<quiverdb_storage::Error>),

    /// An Arrow kernel failed.
    #[error(transparent)]
    Arrow(#[from] std::sync::Arc<ArrowError>),

    /// The memory the aggregation's groups take would pass its budget
    /// (see [`crate::MemoryBudget`]).
    #[error("resources exhausted: {0}")]
    ResourcesExhausted(String),

    /// An invariant was violated: this is a bug in quiverdb.
    #[error("internal error (this is a bug in quiverdb, please report it): {0}")]
    Internal(String),
}

impl From<quiverdb_storage::Error> for Error {
    fn from(e: quiverdb_storage::Error) -> Self {
        Error::Storage(std::sync::Arc::new(e))
    }
}

impl From<ArrowError> for Error {
    fn from(e: ArrowError) -> Self {
        Error::Arrow(std::sync::Arc::new(e))
    }
}
