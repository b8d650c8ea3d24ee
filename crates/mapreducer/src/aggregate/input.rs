//! How a kernel reads one aggregate's input, and the step of a scan it
//! reads it on.

use quiverdb_storage::block::{Bits, Sel};

use crate::columns::{ColumnSource, ShardColumns};
use crate::expr::{CompiledExpr, Side};

/// How the kernel reads one aggregate's input.
#[derive(Debug)]
pub(super) enum Input {
    CountStar,
    /// A numeric column: encoding-aware fast paths, `expr` as fallback.
    Column {
        col: usize,
        expr: CompiledExpr,
    },
    /// A computed numeric expression.
    Expr(CompiledExpr),
    /// A string or binary column.
    Bytes(usize),
}

/// One step of a kernel: the rows `sel` of a main block or delta chunk
/// (`side`) of the shard whose columns are `cols`.
#[derive(Clone, Copy)]
pub(super) struct Step<'s, 'c> {
    pub(super) cols: &'s ShardColumns<'c>,
    pub(super) side: Side,
    pub(super) sel: Sel<'s>,
}

/// The validity of a column's rows `sel`, or `None` when all are valid.
pub(super) fn column_validity(src: &ColumnSource<'_>, side: Side, sel: Sel<'_>) -> Option<Bits> {
    match side {
        Side::Main(b) => src.main_validity(b, sel),
        Side::Delta(c) => src.delta_validity(c, sel),
    }
}
