//! The subcommands of the `quiverdb` binary.

pub(crate) mod client;
pub(crate) mod load;
pub(crate) mod names;
pub(crate) mod output;
pub(crate) mod serve;
pub(crate) mod shell;

/// The error type of the subcommands: anything printable.
pub(crate) type CliError = Box<dyn std::error::Error + Send + Sync>;
