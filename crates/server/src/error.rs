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
            // A scan that passed the memory limit fails as DataFusion's
            // operators do.
            Error::MapReduce(quiverdb_mapreducer::Error::ResourcesExhausted(msg))
            | Error::Scan(quiverdb_scan::Error::MapReduce(quiverdb_mapreducer::Error::ResourcesExhausted(msg))) => {
                DataFusionError::ResourcesExhausted(msg)
            }
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
            S::TableNotFound(_)
            | S::ViewNotFound(_)
            | S::SchemaNotFound(_)
            | S::ColumnNotFound { .. }
            | S::RecordNotFound { .. } => Self::NotFound,
            S::TableExists(_) | S::SchemaExists(_) | S::DuplicateKey { .. } => Self::AlreadyExists,
            S::SchemaNotEmpty { .. } => Self::ConstraintViolation,
            S::NullInNonNullable { .. } => Self::ConstraintViolation,
            S::Conflict { .. } => Self::Conflict,
            S::UnsupportedType { .. }
            | S::InvalidSchema(_)
            | S::InvalidOption { .. }
            | S::SchemaMismatch { .. }
            | S::TypeMismatch { .. } => Self::InvalidInput,
            S::Arrow(e) => Self::of_arrow(e),
            S::Io { .. } | S::ReadOnly(_) | S::DirectoryInUse { .. } | S::NoSpace { .. } => Self::Unavailable,
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
            M::ResourcesExhausted(_) => Self::ResourceExhausted,
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

/// The message a client sees for `e`: the problem in its own words,
/// without DataFusion's and Arrow's category prefixes ("Error during
/// planning: ", "External error: ", "Arrow error: ", "Cast error: "), the
/// parser's debug form (`ParserError("…")`) or the name of the planning
/// rule that failed. Syntax errors start with "syntax error", with the
/// position when the parser knows it. A context DataFusion added stays in
/// front ("UPDATE operation on table 't': …"), and a bug keeps its note
/// that it is one.
pub fn error_message(e: &DataFusionError) -> String {
    use datafusion::sql::sqlparser::parser::ParserError;
    match e {
        DataFusionError::SQL(e, _) => match e.as_ref() {
            ParserError::ParserError(m) | ParserError::TokenizerError(m) => syntax_message(m),
            ParserError::RecursionLimitExceeded => "syntax error: the statement nests too deeply".into(),
        },
        DataFusionError::External(inner) => external_message(inner.as_ref()),
        DataFusionError::ArrowError(e, _) => arrow_message(e),
        // Which planning rule failed is no news to a user.
        DataFusionError::Context(context, inner) if is_rule_context(context) => error_message(inner),
        DataFusionError::Context(context, inner) => format!("{context}: {}", error_message(inner)),
        DataFusionError::Diagnostic(_, inner) => error_message(inner),
        DataFusionError::Collection(errors) => errors.first().map_or_else(|| e.to_string(), error_message),
        DataFusionError::Shared(inner) => error_message(inner),
        DataFusionError::SchemaError(e, _) => e.to_string(),
        DataFusionError::Plan(m)
        | DataFusionError::Execution(m)
        | DataFusionError::NotImplemented(m)
        | DataFusionError::ResourcesExhausted(m) => m.clone(),
        DataFusionError::Configuration(m) => format!("invalid configuration: {m}"),
        // An internal error says it is a bug; I/O errors say what failed.
        other => other.to_string(),
    }
}

/// Whether a context DataFusion put around an error only names the
/// planning rule it came from: the optimizer's "Optimizer rule 'x'
/// failed", or the analyzer's bare rule name (a snake_case identifier,
/// such as `type_coercion`; the contexts that say something are phrases).
fn is_rule_context(context: &str) -> bool {
    let optimizer = context.starts_with("Optimizer rule '") && context.ends_with("' failed");
    let analyzer =
        !context.is_empty() && context.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    optimizer || analyzer
}

/// A parser or tokenizer message as a syntax error in plain words: the
/// parser's "Expected: X, found: Y at Line: 1, Column: 8" becomes
/// "syntax error at line 1, column 8: expected X, found Y", and the end
/// of the statement is "end of input", not "EOF".
fn syntax_message(message: &str) -> String {
    let (text, position) = split_position(message);
    let text = match text.strip_prefix("Expected: ").and_then(|rest| rest.split_once(", found: ")) {
        Some((expected, found)) => {
            let found = if found == "EOF" { "end of input" } else { found };
            format!("expected {}, found {found}", end_of_input(expected))
        }
        None => lowercase_first_word(&end_of_input(text.trim_end_matches('.'))),
    };
    match position {
        Some((line, column)) => format!("syntax error at line {line}, column {column}: {text}"),
        None => format!("syntax error: {text}"),
    }
}

/// `message` without the position the parser appends (" at Line: 1,
/// Column: 8"), and that position as (line, column).
fn split_position(message: &str) -> (&str, Option<(u64, u64)>) {
    let Some((text, position)) = message.rsplit_once(" at Line: ") else { return (message, None) };
    let parsed =
        position.split_once(", Column: ").and_then(|(line, column)| Some((line.parse().ok()?, column.parse().ok()?)));
    match parsed {
        Some(position) => (text, Some(position)),
        None => (message, None),
    }
}

/// `text` with the parser's word "EOF" as "end of input".
fn end_of_input(text: &str) -> String {
    text.split(' ').map(|word| if word == "EOF" { "end of input" } else { word }).collect::<Vec<_>>().join(" ")
}

/// `text` with its first word in lower case when it is an ordinary
/// capitalised word ("Unterminated", not "SQL"), so that it reads on
/// after "syntax error: ".
fn lowercase_first_word(text: &str) -> String {
    let mut chars = text.chars();
    match (chars.next(), chars.next()) {
        (Some(first), Some(second)) if first.is_ascii_uppercase() && !second.is_ascii_uppercase() => {
            format!("{}{}", first.to_ascii_lowercase(), &text[1..])
        }
        _ => text.to_string(),
    }
}

/// [`error_message`] of an error from outside DataFusion.
fn external_message(e: &(dyn std::error::Error + Send + Sync + 'static)) -> String {
    if let Some(e) = e.downcast_ref::<DataFusionError>() {
        return error_message(e);
    }
    if let Some(Error::DataFusion(e)) = e.downcast_ref::<Error>() {
        return error_message(e);
    }
    if let Some(e) = arrow_inside(e) {
        return arrow_message(e);
    }
    e.to_string()
}

/// The Arrow error that `e` is, or that a quiverdb error passes on as its
/// own (their `Arrow` variants show the Arrow error's text unchanged).
fn arrow_inside<'a>(e: &'a (dyn std::error::Error + Send + Sync + 'static)) -> Option<&'a arrow_schema::ArrowError> {
    use quiverdb_mapreducer::Error as M;
    use quiverdb_scan::Error as Sc;
    use quiverdb_storage::Error as S;
    fn of_storage(e: &S) -> Option<&arrow_schema::ArrowError> {
        match e {
            S::Arrow(e) => Some(e),
            _ => None,
        }
    }
    fn of_mapreducer(e: &M) -> Option<&arrow_schema::ArrowError> {
        match e {
            M::Arrow(e) => Some(e.as_ref()),
            M::Storage(e) => of_storage(e),
            _ => None,
        }
    }
    fn of_scan(e: &Sc) -> Option<&arrow_schema::ArrowError> {
        match e {
            Sc::MapReduce(e) => of_mapreducer(e),
            Sc::Storage(e) => of_storage(e),
            _ => None,
        }
    }
    if let Some(e) = e.downcast_ref::<arrow_schema::ArrowError>() {
        return Some(e);
    }
    if let Some(e) = e.downcast_ref::<Error>() {
        return match e {
            Error::Storage(e) => of_storage(e),
            Error::Scan(e) => of_scan(e),
            Error::MapReduce(e) => of_mapreducer(e),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<S>() {
        return of_storage(e);
    }
    if let Some(e) = e.downcast_ref::<Sc>() {
        return of_scan(e);
    }
    e.downcast_ref::<M>().and_then(of_mapreducer)
}

/// [`error_message`] of an Arrow error: the text of a cast, parse,
/// compute, argument or schema error without its category, which names
/// Arrow's module rather than the problem.
fn arrow_message(e: &arrow_schema::ArrowError) -> String {
    use arrow_schema::ArrowError as A;
    match e {
        A::ExternalError(inner) => external_message(inner.as_ref()),
        A::CastError(m) | A::ParseError(m) | A::ComputeError(m) | A::InvalidArgumentError(m) | A::SchemaError(m) => {
            m.clone()
        }
        other => other.to_string(),
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

#[cfg(test)]
mod tests {
    use quiverdb_storage::Database;

    use super::*;
    use crate::session_context;

    /// The error of running `sql` as quiverdb runs statements
    /// ([`crate::sql`]) on a database with table `t (id BIGINT NOT NULL
    /// PRIMARY KEY, v TINYINT)` holding the row (1, 1).
    async fn failure(sql: &str) -> DataFusionError {
        let ctx = session_context(&Database::new());
        for setup in ["CREATE TABLE t (id BIGINT NOT NULL PRIMARY KEY, v TINYINT)", "INSERT INTO t VALUES (1, 1)"] {
            let run = async { crate::sql(&ctx, setup).await?.collect().await };
            run.await.unwrap_or_else(|e| panic!("{setup}: {e}"));
        }
        match crate::sql(&ctx, sql).await {
            Ok(df) => df.collect().await.expect_err(sql),
            Err(e) => e,
        }
    }

    #[tokio::test]
    async fn messages_name_the_problem_without_wrappers() {
        let cases = [
            ("SELEC 1", "syntax error at line 1, column 1: expected an SQL statement, found SELEC"),
            ("SELECT * FROM missing", "table 'quiverdb.public.missing' not found"),
            ("SELECT nope FROM t", "nope"),
            ("INSERT INTO t VALUES (1, 2)", "duplicate"),
            ("INSERT INTO t VALUES (NULL, 2)", "column 'id' of table 't'"),
            ("INSERT INTO t (v, id) VALUES (2, NULL)", "column 'id' of table 't'"),
            ("INSERT INTO t SELECT NULL, 2", "column 'id' of table 't'"),
            ("CREATE TABLE c (a INT, b INT NOT NULL) AS VALUES (1, 2), (3, NULL)", "column 'b' of table 'c'"),
            ("SELECT CAST(1000 AS TINYINT)", "1000"),
            ("SELECT 1 / 0", "Divide by zero"),
            ("SELECT CAST('x' AS INT)", "Cannot cast string 'x' to value of Int32 type"),
            ("UPDATE t SET v = 1000", "Can't cast value 1000 to type Int8"),
            ("DELETE FROM t WHERE id IN (SELECT id FROM t)", "DELETE with a subquery"),
            ("CREATE TABLE t (a INT)", "already exists"),
            ("CREATE TABLE u (a INTERVAL PRIMARY KEY)", "cannot be in a primary key"),
            ("DROP SCHEMA nowhere", "nowhere"),
        ];
        for (sql, expected) in cases {
            let e = failure(sql).await;
            let message = error_message(&e);
            assert!(message.contains(expected), "{sql}: {message:?} does not say {expected:?}");
            for wrapper in [
                "External error",
                "ParserError(",
                "SQL error",
                "Arrow error",
                "Error during planning",
                "Execution error",
                "Cast error",
                "caused by",
                "Optimizer rule",
                "quiverdb_dml_guard",
                "Expected:",
                "EOF",
                "column1",
            ] {
                assert!(!message.contains(wrapper), "{sql}: {message:?} contains {wrapper:?}");
            }
        }
    }

    #[tokio::test]
    async fn errors_keep_their_kind() {
        let cases = [
            ("SELEC 1", ErrorKind::InvalidInput),
            ("SELECT * FROM missing", ErrorKind::NotFound),
            ("INSERT INTO t VALUES (1, 2)", ErrorKind::AlreadyExists),
            ("INSERT INTO t VALUES (NULL, 2)", ErrorKind::ConstraintViolation),
            ("INSERT INTO t SELECT NULL, 2", ErrorKind::ConstraintViolation),
            ("CREATE TABLE c (a INT NOT NULL) AS VALUES (NULL)", ErrorKind::ConstraintViolation),
            ("CREATE TABLE t (a INT)", ErrorKind::AlreadyExists),
            ("CREATE TABLE u (a INTERVAL PRIMARY KEY)", ErrorKind::InvalidInput),
            ("CREATE SCHEMA public", ErrorKind::AlreadyExists),
        ];
        for (sql, kind) in cases {
            let e = failure(sql).await;
            assert_eq!(ErrorKind::of(&e), kind, "{sql}: {e}");
        }
    }

    #[tokio::test]
    async fn syntax_errors_say_what_was_expected_and_where() {
        let cases = [
            ("SELECT", "syntax error: expected an expression, found end of input"),
            ("SELECT 1 +", "syntax error: expected an expression, found end of input"),
            ("SELEC 1", "syntax error at line 1, column 1: expected an SQL statement, found SELEC"),
            ("SELECT 1\n  2", "syntax error at line 2, column 3: expected end of statement, found 2"),
            ("SELECT 'abc", "syntax error at line 1, column 8: unterminated string literal"),
            ("SELECT \"abc", "syntax error at line 1, column 8: expected close delimiter '\"' before end of input"),
        ];
        for (sql, expected) in cases {
            assert_eq!(error_message(&failure(sql).await), expected, "{sql}");
        }
    }

    #[tokio::test]
    async fn the_rule_that_failed_is_not_named() {
        // quiverdb's own analyzer rule fails UPDATE's SET and DELETE's WHERE.
        assert_eq!(error_message(&failure("UPDATE t SET v = 1000").await), "Can't cast value 1000 to type Int8");
        let message = error_message(&failure("DELETE FROM t WHERE id IN (SELECT id FROM t)").await);
        assert!(message.starts_with("DELETE with a subquery (IN, EXISTS or scalar) is not supported"), "{message}");
        // An optimizer rule.
        let message = error_message(&failure("SELECT * FROM t WHERE id = 'x'").await);
        assert_eq!(message, "Cannot cast string 'x' to value of Int64 type");
        // Any analyzer rule's name goes; a context that says something stays.
        let plan = || Box::new(DataFusionError::Plan("no such thing".into()));
        assert_eq!(error_message(&DataFusionError::Context("type_coercion".into(), plan())), "no such thing");
        let update = DataFusionError::Context("UPDATE operation on table 't'".into(), plan());
        assert_eq!(error_message(&update), "UPDATE operation on table 't': no such thing");
    }

    #[test]
    fn arrow_errors_inside_quiverdb_errors_lose_their_category() {
        use arrow_schema::ArrowError;
        let compute = || ArrowError::ComputeError("a list longer than 2^31 values".into());
        let storage = Error::Storage(quiverdb_storage::Error::Arrow(compute()));
        assert_eq!(error_message(&DataFusionError::from(storage)), "a list longer than 2^31 values");
        let nested = DataFusionError::External(Box::new(DataFusionError::ArrowError(
            Box::new(ArrowError::ExternalError(Box::new(Error::MapReduce(compute().into())))),
            None,
        )));
        assert_eq!(error_message(&nested), "a list longer than 2^31 values");
    }

    #[test]
    fn a_bug_still_says_it_is_one() {
        let message = error_message(&DataFusionError::Internal("lost a row".into()));
        assert!(message.contains("lost a row") && message.contains("bug"), "{message}");
        let ours = DataFusionError::from(Error::Internal("lost a row".into()));
        assert!(error_message(&ours).contains("bug in quiverdb"), "{}", error_message(&ours));
    }
}
