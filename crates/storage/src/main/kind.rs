//! The kinds of encoding main storage uses, by name (for statistics,
//! memory reports and forcing an encoding in tests and benchmarks).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The encodings of main storage, in order of decoding cost (ties in size
/// go to the earlier one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EncodingKind {
    /// One value for all rows.
    Constant,
    /// Runs of arithmetic progressions.
    Sequence,
    /// Frame-of-reference bit-packing per block.
    BitPacked,
    /// Runs of equal values.
    RunEnd,
    /// Sorted dictionary plus bit-packed codes.
    Dictionary,
    /// Uncompressed values.
    Plain,
    /// Strings compressed with a symbol table (FSST).
    Fsst,
    /// Child columns of a struct, list or map, each with its own encoding
    /// (see [`crate::main`]); not an encoding a column can be forced to.
    Nested,
}

impl EncodingKind {
    /// Every encoding of values (a column can be forced to each where it
    /// applies); [`EncodingKind::Nested`] describes a column's layout
    /// instead.
    pub const ALL: [EncodingKind; 7] =
        [Self::Constant, Self::Sequence, Self::BitPacked, Self::RunEnd, Self::Dictionary, Self::Plain, Self::Fsst];

    /// The encoding's name, as printed in statistics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Constant => "constant",
            Self::Sequence => "sequence",
            Self::BitPacked => "bitpacked",
            Self::RunEnd => "run_end",
            Self::Dictionary => "dictionary",
            Self::Plain => "plain",
            Self::Fsst => "fsst",
            Self::Nested => "nested",
        }
    }
}

impl fmt::Display for EncodingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EncodingKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| Error::InvalidOption { option: "encoding", reason: format!("unknown encoding '{s}'") })
    }
}
