//! Aggregation by dictionary code or by value: whole main blocks of one
//! group key folded into per-code (or per-value) states, mapped to groups
//! once per shard.

use quiverdb_storage::block::LANES;

use super::acc::AccState;
use super::state::{StateColumn, StateKind};
use crate::error::{Error, Result};

/// Aggregation by dictionary code. With one group key, a dictionary
/// string column without nulls, the rows of whole main blocks are folded
/// into states indexed by the shard's codes: a row's code is its group, so
/// no row looks its group up. The codes that have rows are mapped to
/// groups and their states merged into the accumulator once, when the
/// shard is finished ([`Kernel::close`]) or a block that cannot go by
/// code arrives. When every main row of the shard went by code, every
/// code has rows (each dictionary entry is some row's value, see
/// [`StrDictionary`]); otherwise the codes of the blocks that did are decoded
/// again to find them.
///
/// A group key that is an integer function of one integer column
/// (`category % 100`, see [`KeyMemo`]) folds the same way by the column's
/// value when the shard's values span less than [`groups::DENSE_WINDOW`]
/// and a COUNT(*) is among the aggregates: its per-value counts tell which
/// values have rows, and each of those is mapped to its group once.
///
/// Until then the accumulator counts the shard as deferred, and reports an
/// error rather than a result if it is used before the shard is finished.
#[derive(Debug, Default)]
pub(super) struct ByCode {
    /// Token of the accumulator the states belong to; 0 when none.
    pub(super) token: u64,
    /// One state column per aggregate, indexed by code.
    pub(super) states: Vec<StateColumn>,
    /// Main blocks folded by code, and their rows.
    pub(super) blocks: Vec<u32>,
    pub(super) rows: usize,
    /// Codes with rows, one bit each (when not every row went by code).
    pub(super) present: Vec<u64>,
    /// (group, code) of the codes with rows, when merging.
    pub(super) pairs: Vec<(u32, u32)>,
    /// For a memoised integer key ([`KeyMemo`]) instead of a dictionary:
    /// the least key of the column in the shard (a row's slot is its key
    /// minus it); its COUNT(*) state says which slots have rows.
    pub(super) lo: Option<u64>,
}

impl ByCode {
    /// Starts holding rows of `acc` in `slots` states per aggregate (a
    /// shard of `rows` main rows), unless it already does.
    pub(super) fn begin(
        &mut self,
        acc: &mut AccState,
        kinds: &[StateKind],
        slots: usize,
        rows: usize,
        lo: Option<u64>,
    ) -> Result<()> {
        if self.token == acc.token {
            return Ok(());
        }
        if self.token != 0 {
            return Err(Error::Internal("a kernel holds rows of another aggregate by code".into()));
        }
        self.token = acc.token;
        self.lo = lo;
        self.blocks.clear();
        // One allocation for the shard's blocks, however many.
        self.blocks.reserve(rows.div_ceil(LANES));
        self.rows = 0;
        if self.states.len() != kinds.len() {
            self.states = kinds.iter().map(StateColumn::new).collect();
        }
        for s in &mut self.states {
            s.clear();
            s.ensure(slots);
        }
        acc.deferred += 1;
        Ok(())
    }
}
