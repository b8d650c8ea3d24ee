//! Errors as gRPC statuses: the code says what the error means (its
//! [`ErrorKind`]: the client's mistake or the server's fault), the message
//! is the error's own text ([`error_message`], without DataFusion's
//! wrappers).
//!
//! ```text
//!   InvalidInput ─▶ InvalidArgument       NotSupported      ─▶ Unimplemented
//!   NotFound     ─▶ NotFound              ResourceExhausted ─▶ ResourceExhausted
//!   AlreadyExists ▶ AlreadyExists         Unavailable       ─▶ Unavailable
//!   ConstraintViolation ─▶ FailedPrecondition
//!   Conflict     ─▶ Aborted               Internal          ─▶ Internal
//! ```

use arrow_flight::error::FlightError;
use datafusion::error::DataFusionError;
use tonic::{Code, Status};

use crate::error::{ErrorKind, error_message};

/// The gRPC code of an error of `kind`.
pub(crate) fn code(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::InvalidInput => Code::InvalidArgument,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::AlreadyExists => Code::AlreadyExists,
        ErrorKind::ConstraintViolation => Code::FailedPrecondition,
        ErrorKind::Conflict => Code::Aborted,
        ErrorKind::NotSupported => Code::Unimplemented,
        ErrorKind::ResourceExhausted => Code::ResourceExhausted,
        ErrorKind::Unavailable => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// A DataFusion error (holding quiverdb's, when it came from quiverdb) as
/// a status.
pub(crate) fn df_status(e: DataFusionError) -> Status {
    Status::new(code(ErrorKind::of(&e)), error_message(&e))
}

/// A storage error as a status.
pub(crate) fn storage_status(e: quiverdb_storage::Error) -> Status {
    let code = code(ErrorKind::of_storage(&e));
    Status::new(code, error_message(&DataFusionError::External(Box::new(e))))
}

/// An Arrow error (in data a client sent) as a status.
pub(crate) fn arrow_status(e: arrow_schema::ArrowError) -> Status {
    df_status(DataFusionError::ArrowError(Box::new(e), None))
}

/// A Flight error as a status: a status passes through, anything else by
/// its kind.
pub(crate) fn flight_status(e: FlightError) -> Status {
    match e {
        FlightError::Tonic(status) => *status,
        FlightError::ExternalError(inner) => match inner.downcast::<DataFusionError>() {
            Ok(df) => df_status(*df),
            Err(other) => df_status(DataFusionError::External(other)),
        },
        FlightError::Arrow(e) => arrow_status(e),
        other => Status::internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use datafusion::common::{Column, SchemaError};
    use quiverdb_storage::Error as S;

    use super::*;
    use crate::error::Error;

    /// The status of a storage error as it reaches the service: inside
    /// the SQL layer's error, inside DataFusion's.
    fn through_sql(e: S) -> Status {
        let wrapped = DataFusionError::Context("executing".into(), Box::new(DataFusionError::from(Error::from(e))));
        df_status(wrapped)
    }

    fn assert_code(status: Status, expected: Code) {
        assert_eq!(status.code(), expected, "{}", status.message());
    }

    #[test]
    fn bad_sql_and_bad_values_are_invalid_arguments() {
        assert_code(df_status(DataFusionError::Plan("syntax error at or near 'SELEC'".into())), Code::InvalidArgument);
        let type_mismatch =
            S::TypeMismatch { table: "t".into(), column: "a".into(), expected: "Int64".into(), found: "Utf8".into() };
        assert_code(through_sql(type_mismatch), Code::InvalidArgument);
        let by_zero = Error::from(quiverdb_mapreducer::Error::DivideByZero);
        assert_code(df_status(DataFusionError::from(by_zero)), Code::InvalidArgument);
    }

    #[test]
    fn missing_tables_and_columns_are_not_found() {
        assert_code(through_sql(S::TableNotFound("t".into())), Code::NotFound);
        assert_code(storage_status(S::TableNotFound("t".into())), Code::NotFound);
        assert_code(df_status(DataFusionError::Plan("table 'quiverdb.public.t' not found".into())), Code::NotFound);
        assert_code(df_status(DataFusionError::Execution("Table 't' doesn't exist.".into())), Code::NotFound);
        // Other planning errors that mention a table are not about its existence.
        assert_code(df_status(DataFusionError::Plan("table 't' has no column 'x'".into())), Code::InvalidArgument);
        let field = SchemaError::FieldNotFound { field: Box::new(Column::from_name("nope")), valid_fields: vec![] };
        assert_code(df_status(DataFusionError::SchemaError(Box::new(field), Box::new(None))), Code::NotFound);
    }

    #[test]
    fn existing_tables_and_duplicate_keys_already_exist() {
        assert_code(through_sql(S::TableExists("t".into())), Code::AlreadyExists);
        assert_code(df_status(DataFusionError::Execution("Table 'k' already exists".into())), Code::AlreadyExists);
        assert_code(
            through_sql(S::DuplicateKey { table: "t".into(), constraint: "primary key", key: "(id) = (1)".into() }),
            Code::AlreadyExists,
        );
    }

    #[test]
    fn a_null_in_a_not_null_column_is_a_failed_precondition() {
        assert_code(
            through_sql(S::NullInNonNullable { table: "t".into(), column: "a".into() }),
            Code::FailedPrecondition,
        );
    }

    #[test]
    fn a_conflict_or_rollback_is_aborted() {
        assert_code(through_sql(S::Conflict { table: "t".into() }), Code::Aborted);
        assert_code(df_status(DataFusionError::from(Error::Aborted("the input failed".into()))), Code::Aborted);
    }

    #[test]
    fn what_quiverdb_does_not_do_is_unimplemented() {
        assert_code(df_status(DataFusionError::from(Error::Unsupported("COPY".into()))), Code::Unimplemented);
        assert_code(df_status(DataFusionError::NotImplemented("window frames".into())), Code::Unimplemented);
    }

    #[test]
    fn exhausted_memory_is_resource_exhausted() {
        assert_code(df_status(DataFusionError::ResourcesExhausted("64 MiB".into())), Code::ResourceExhausted);
    }

    #[test]
    fn io_failures_and_a_read_only_database_are_unavailable() {
        let io = S::Io {
            path: PathBuf::from("/data/wal/wal-1.log"),
            offset: Some(4096),
            source: std::io::Error::other("no space left on device"),
        };
        assert_code(through_sql(io), Code::Unavailable);
        assert_code(through_sql(S::ReadOnly("a sync failed".into())), Code::Unavailable);
    }

    #[test]
    fn damage_and_bugs_are_internal() {
        let corrupt = S::Corrupt { file: PathBuf::from("/data/CATALOG"), offset: 24, what: "checksum mismatch".into() };
        assert_code(through_sql(corrupt), Code::Internal);
        assert_code(through_sql(S::Internal("a bug".into())), Code::Internal);
        assert_code(df_status(DataFusionError::Internal("a bug".into())), Code::Internal);
        let scan = quiverdb_scan::Error::Storage(Arc::new(S::Internal("a bug".into())));
        assert_code(df_status(DataFusionError::from(Error::from(scan))), Code::Internal);
    }

    #[test]
    fn statuses_keep_the_error_text() {
        let status = through_sql(S::TableNotFound("sales".into()));
        assert!(status.message().contains("table 'sales' does not exist"), "{}", status.message());
    }

    #[test]
    fn storage_statuses_lose_arrow_categories() {
        let compute = arrow_schema::ArrowError::ComputeError("a list longer than 2^31 values".into());
        let status = storage_status(S::Arrow(compute));
        assert_eq!(status.message(), "a list longer than 2^31 values");
        assert_code(status, Code::InvalidArgument);
    }
}
