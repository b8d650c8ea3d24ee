//! Damage found in a file of the data directory: where it is and what is
//! wrong there. Every reader of a format (frames, log records, the
//! catalog, checkpoint files) reports damage in this one shape; whoever
//! read the file names it ([`Damage::in_file`]).

use std::fmt;
use std::path::Path;

use crate::error::Error;

/// Damage at byte `offset` of a file (or of the part of it being read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    pub(crate) offset: u64,
    pub(crate) what: String,
}

impl Damage {
    pub(crate) fn new(offset: usize, what: impl Into<String>) -> Self {
        Self { offset: offset as u64, what: what.into() }
    }

    /// The same damage, `by` bytes further into the file.
    pub(crate) fn shifted(self, by: u64) -> Self {
        Self { offset: self.offset + by, what: self.what }
    }

    /// The error for this damage in `file`.
    pub(crate) fn in_file(self, file: &Path) -> Error {
        Error::Corrupt { file: file.to_path_buf(), offset: self.offset, what: self.what }
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.what)
    }
}
