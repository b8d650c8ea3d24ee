//! Errors of the SQL layer and their conversion into DataFusion errors.
//!
//! Storage, map+reduce and scan errors keep their source chain inside
//! `DataFusionError::External`; user errors (a bad value, a missing table)
//! and invariant violations stay distinguishable through it, and
//! [`ErrorKind::of`] tells them apart for the front ends.

use datafusion::common::SchemaError;
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

/// What an error means for whoever sent the request: each front end
/// reports it in its own terms (Flight SQL as a gRPC code). User errors
/// (the first six) are told apart from the database's own faults (the
/// last three).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request is wrong: bad SQL, a type mismatch, an invalid value,
    /// definition or option.
    InvalidInput,
    /// It names a table (or column, or record) that does not exist.
    NotFound,
    /// It would create what exists: a table, a primary key value.
    AlreadyExists,
    /// It would break a constraint of the data (a NULL in a NOT NULL column).
    ConstraintViolation,
    /// It raced a concurrent change (a rebuild) or was rolled back;
    /// retrying can succeed.
    Conflict,
    /// It asks for something quiverdb does not do.
    NotSupported,
    /// It needs more memory than it may take.
    ResourceExhausted,
    /// The database cannot serve it now: an I/O failure, or a database
    /// read-only after a failed write.
    Unavailable,
    /// A fault of quiverdb itself: damaged files, or a bug.
    Internal,
}

impl ErrorKind {
    /// The kind of a DataFusion error, looking through the wrappers to
    /// the quiverdb error inside when there is one.
    pub fn of(e: &DataFusionError) -> Self {
        match e.find_root() {
            DataFusionError::External(inner) => Self::of_external(inner.as_ref()),
            DataFusionError::Collection(errors) => errors.first().map_or(Self::Internal, Self::of),
            DataFusionError::Shared(inner) => Self::of(inner),
            DataFusionError::ArrowError(e, _) => Self::of_arrow(e),
            DataFusionError::ResourcesExhausted(_) => Self::ResourceExhausted,
            DataFusionError::NotImplemented(_) => Self::NotSupported,
            DataFusionError::Internal(_) => Self::Internal,
            DataFusionError::IoError(_) | DataFusionError::ObjectStore(_) => Self::Unavailable,
            DataFusionError::SchemaError(e, _) if matches!(**e, SchemaError::FieldNotFound { .. }) => Self::NotFound,
            DataFusionError::Plan(message) | DataFusionError::Execution(message) => {
                catalog_message_kind(message).unwrap_or(Self::InvalidInput)
            }
            _ => Self::InvalidInput,
        }
    }

    /// The kind of an error from outside DataFusion.
    fn of_external(e: &(dyn std::error::Error + Send + Sync + 'static)) -> Self {
        if let Some(e) = e.downcast_ref::<Error>() {
            return Self::of_server(e);
        }
        if let Some(e) = e.downcast_ref::<quiverdb_storage::Error>() {
            return Self::of_storage(e);
        }
        if let Some(e) = e.downcast_ref::<quiverdb_scan::Error>() {
            return Self::of_scan(e);
        }
        if let Some(e) = e.downcast_ref::<quiverdb_mapreducer::Error>() {
            return Self::of_mapreducer(e);
        }
        if let Some(e) = e.downcast_ref::<DataFusionError>() {
            return Self::of(e);
        }
        if let Some(e) = e.downcast_ref::<arrow_schema::ArrowError>() {
            return Self::of_arrow(e);
        }
        if e.downcast_ref::<std::io::Error>().is_some() {
            return Self::Unavailable;
        }
        Self::Internal
    }

    fn of_server(e: &Error) -> Self {
        match e {
            Error::Unsupported(_) => Self::NotSupported,
            Error::Storage(e) => Self::of_storage(e),
            Error::Scan(e) => Self::of_scan(e),
            Error::MapReduce(e) => Self::of_mapreducer(e),
            Error::DataFusion(e) => Self::of(e),
            Error::Aborted(_) => Self::Conflict,
            Error::Internal(_) => Self::Internal,
        }
    }

    /// The kind of a storage error.
    pub fn of_storage(e: &quiverdb_storage::Error) -> Self {
        use quiverdb_storage::Error as S;
        match e {
            S::TableNotFound(_) | S::ViewNotFound(_) | S::ColumnNotFound { .. } | S::RecordNotFound { .. } => {
                Self::NotFound
            }
            S::TableExists(_) | S::DuplicateKey { .. } => Self::AlreadyExists,
            S::NullInNonNullable { .. } => Self::ConstraintViolation,
            S::Conflict { .. } => Self::Conflict,
            S::UnsupportedType { .. }
            | S::InvalidSchema(_)
            | S::InvalidOption { .. }
            | S::SchemaMismatch { .. }
            | S::TypeMismatch { .. } => Self::InvalidInput,
            S::Arrow(e) => Self::of_arrow(e),
            S::Io { .. } | S::ReadOnly(_) | S::DirectoryInUse { .. } => Self::Unavailable,
            S::Corrupt { .. } | S::Internal(_) => Self::Internal,
            _ => Self::Internal,
        }
    }

    fn of_scan(e: &quiverdb_scan::Error) -> Self {
        use quiverdb_scan::Error as S;
        match e {
            S::InvalidPredicate(_) => Self::InvalidInput,
            S::Unsupported(_) => Self::NotSupported,
            S::MapReduce(e) => Self::of_mapreducer(e),
            S::Storage(e) => Self::of_storage(e),
            _ => Self::Internal,
        }
    }

    fn of_mapreducer(e: &quiverdb_mapreducer::Error) -> Self {
        use quiverdb_mapreducer::Error as M;
        match e {
            M::InvalidExpression(_) | M::DivideByZero | M::Overflow(_) => Self::InvalidInput,
            M::Unsupported(_) => Self::NotSupported,
            M::Storage(e) => Self::of_storage(e),
            M::Arrow(e) => Self::of_arrow(e),
            _ => Self::Internal,
        }
    }

    fn of_arrow(e: &arrow_schema::ArrowError) -> Self {
        use arrow_schema::ArrowError as A;
        match e {
            A::ExternalError(inner) => Self::of_external(inner.as_ref()),
            A::IoError(..) => Self::Unavailable,
            A::MemoryError(_) => Self::ResourceExhausted,
            A::NotYetImplemented(_) => Self::NotSupported,
            _ => Self::InvalidInput,
        }
    }
}

/// The kind of DataFusion's own catalog errors, which carry it only in
/// their text: the planner's "table '…' not found" and the session's
/// "Table '…' already exists" / "Table '…' doesn't exist." (for tables,
/// views, schemas and catalogs).
fn catalog_message_kind(message: &str) -> Option<ErrorKind> {
    let object = ["table '", "Table '", "External table '", "View '", "Schema '", "Catalog '", "No table named '"]
        .iter()
        .any(|prefix| message.starts_with(prefix));
    if !object {
        return None;
    }
    if message.ends_with("' not found")
        || message.ends_with("' doesn't exist.")
        || message.starts_with("No table named")
    {
        Some(ErrorKind::NotFound)
    } else if message.ends_with("' already exists") {
        Some(ErrorKind::AlreadyExists)
    } else {
        None
    }
}
