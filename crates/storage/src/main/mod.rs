//! Main storage: immutable, compressed columns built by a rebuild.
//!
//! A shard's main storage holds one [`MainColumn`] per table column. Each
//! column is split into blocks of [`BLOCK_SIZE`] values; every block has a
//! [`Zone`] (min, max, null count). The rebuild analyses the values of a
//! column (not its declared type) and keeps the smallest encoding:
//!
//! ```text
//!   fixed-width values ──to_key──▶ u64 keys ──▶ Constant | Sequence | BitPacked
//!                                               | RunEnd | Dict | Plain
//!   decimals beyond i64 ─────────────────────▶ Wide (plain i128)
//!   strings / binary ────────────────────────▶ StrDict | StrFsst | StrPlain
//!   structs, lists, maps ────────────────────▶ Nested: child columns, each
//!                                               encoded as above ([`nested`])
//! ```
//!
//! Nulls are a validity bitmap, present only when the column has nulls;
//! the key of a null slot repeats its neighbour's so runs and frames stay
//! tight. Decoding ([`MainColumn::decode_range`], [`MainColumn::gather`])
//! produces the Arrow type of the table schema, whatever the encoding.

mod access;
pub(crate) mod bitpacked;
mod build;
pub(crate) mod column;
pub(crate) mod decode;
pub(crate) mod dict;
pub(crate) mod encoding;
pub(crate) mod fsst;
mod kind;
pub(crate) mod nested;
pub(crate) mod run_end;
pub(crate) mod sequence;
pub(crate) mod strings;
mod unpack;
mod zone;

pub use crate::block::BLOCK_SIZE;
pub use access::{BlockBytes, Codes, KeySource, Keys, StrDictionary};
pub use column::{Main, MainColumn};
pub use kind::EncodingKind;
pub use zone::Zone;
