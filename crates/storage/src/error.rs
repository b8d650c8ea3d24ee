//! The storage crate's error type.
//!
//! User errors (a bad batch, an unknown table, an unsupported type) are
//! distinct variants from [`Error::Internal`], which always means a bug in
//! quiverdb.

use std::path::{Path, PathBuf};

use arrow_schema::{ArrowError, DataType};

/// The result type of quiverdb-storage.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in quiverdb-storage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A column was declared with an Arrow type quiverdb does not store.
    #[error(
        "column '{column}' has type {data_type}, which quiverdb does not support (supported: Boolean, Int8-64, UInt8-64, Float16/32/64, Decimal32-256, Utf8/LargeUtf8/Utf8View, Binary/LargeBinary/BinaryView/FixedSizeBinary, Date, Time, Timestamp, Duration, Interval, Struct, List/LargeList/FixedSizeList, Map and Null, as such or dictionary- or run-end-encoded)"
    )]
    UnsupportedType {
        /// Column name.
        column: String,
        /// The rejected type.
        data_type: DataType,
    },

    /// A table definition is invalid (no columns, duplicate names, bad key).
    #[error("invalid table definition: {0}")]
    InvalidSchema(String),

    /// A table option is out of range.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// Why it was rejected.
        reason: String,
    },

    /// A table of that name already exists.
    #[error("table '{0}' already exists")]
    TableExists(String),

    /// No table of that name exists.
    #[error("table '{0}' does not exist")]
    TableNotFound(String),

    /// No view of that name exists.
    #[error("view '{0}' does not exist")]
    ViewNotFound(String),

    /// A schema of that name already exists (or a table's name claims it).
    #[error("schema '{0}' already exists")]
    SchemaExists(String),

    /// No schema of that name exists.
    #[error("schema '{0}' does not exist")]
    SchemaNotFound(String),

    /// A schema still holds tables or views (drop them, or drop it with
    /// CASCADE).
    #[error("schema '{schema}' is not empty: it holds '{holds}' (drop the schema with CASCADE to drop its contents)")]
    SchemaNotEmpty {
        /// The schema.
        schema: String,
        /// A table or view in it.
        holds: String,
    },

    /// A column named by the caller does not exist.
    #[error("column '{column}' does not exist in table '{table}'")]
    ColumnNotFound {
        /// Table name.
        table: String,
        /// The missing column.
        column: String,
    },

    /// A batch or row does not have the table's shape.
    #[error("data does not match the schema of table '{table}': {reason}")]
    SchemaMismatch {
        /// Table name.
        table: String,
        /// What differs.
        reason: String,
    },

    /// A value has the wrong type for its column.
    #[error("column '{column}' of table '{table}' expects {expected}, got {found}")]
    TypeMismatch {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
        /// The column's type.
        expected: String,
        /// What was supplied.
        found: String,
    },

    /// A NULL was supplied for a NOT NULL column.
    #[error("column '{column}' of table '{table}' is NOT NULL but the data contains nulls")]
    NullInNonNullable {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
    },

    /// A write would give two live rows the same primary key, or the same
    /// values of a UNIQUE constraint.
    #[error("duplicate {constraint} {key} in table '{table}'")]
    DuplicateKey {
        /// Table name.
        table: String,
        /// `primary key` or `unique key`.
        constraint: &'static str,
        /// The key, as `(columns) = (values)`.
        key: String,
    },

    /// A delete named a record that does not exist in the snapshot it came from.
    #[error("record {record} does not exist in shard {shard} of table '{table}'")]
    RecordNotFound {
        /// Table name.
        table: String,
        /// Shard id.
        shard: u64,
        /// Record id.
        record: u32,
    },

    /// The snapshot a mutation was computed on is no longer current for the
    /// shards it touches (a rebuild or truncate replaced them). Retry on a new
    /// snapshot, or run the mutation inside [`crate::Table::transaction`].
    #[error("table '{table}' changed since the snapshot the operation was computed on; retry with a new snapshot")]
    Conflict {
        /// Table name.
        table: String,
    },

    /// An Arrow kernel failed.
    #[error(transparent)]
    Arrow(#[from] ArrowError),

    /// A file of the data directory could not be read or written.
    #[error("I/O error on {}{}: {source}", path.display(), offset.map(|o| format!(" at byte {o}")).unwrap_or_default())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Where in the file, when the operation had a position.
        offset: Option<u64>,
        /// What the operating system reported.
        #[source]
        source: std::io::Error,
    },

    /// A file of the data directory is damaged before its end (not a
    /// write cut short by a crash): quiverdb refuses to guess.
    #[error("{} is damaged at byte {offset}: {what}", file.display())]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong there.
        what: String,
    },

    /// Another process (or another open database in this one) holds the
    /// data directory.
    #[error("data directory {path} is in use by another quiverdb (process {holder}); stop it first")]
    DirectoryInUse {
        /// The directory.
        path: String,
        /// The holder's process id, as its lock file records it.
        holder: String,
    },

    /// The file system holding the data directory has too little free
    /// space to open it.
    #[error(
        "not enough free disk space for {dir}: {available} bytes free, {needed} needed to open it (log segments of {segment_bytes} bytes are written full of zeros ahead of use; smaller segments need less)"
    )]
    NoSpace {
        /// The log directory.
        dir: String,
        /// Bytes free.
        available: u64,
        /// Bytes needed.
        needed: u64,
        /// The log's segment size.
        segment_bytes: u64,
    },

    /// An earlier write or sync of the log (or a checkpoint) failed, so
    /// nothing more is accepted: whether it reached the disk is unknown.
    /// Restart to recover from what is durable.
    #[error("the database is read-only after a failed log write ({0}); restart it to recover")]
    ReadOnly(String),

    /// An invariant was violated: this is a bug in quiverdb.
    #[error("internal error (this is a bug in quiverdb, please report it): {0}")]
    Internal(String),
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io { path: path.as_ref().to_path_buf(), offset: None, source }
    }
}
