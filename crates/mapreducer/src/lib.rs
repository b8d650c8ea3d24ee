//! quiverdb-mapreducer: the batched map+reduce interface every scan runs
//! through, and its typed implementation over compressed shards.
//!
//! # Model
//!
//! A scan hands a reducer the record ids of one shard in batches; the
//! reducer folds them into an accumulator (MemCP's `ShardMapReducer`):
//!
//! ```text
//!   trait MapReducer { type Acc; fn stream(&mut self, acc, recids) -> acc }
//!
//!   ShardMapReducer::open(shard, kernel)      column readers + buffers, once
//!     stream(acc, ids)  ──▶ runs of main ids / delta ids ──▶ per block:
//!        process_main_block(block, sel)   reads the encoded columns directly
//!        process_delta_block(chunk, sel)  reads the delta's slices
//!     finish(acc)       ──▶ kernel.close: what it kept for the shard's end
//!   merge(acc_a, acc_b)                       MemCP's reduce2, across shards
//! ```
//!
//! Kernels: [`AggregateKernel`] (COUNT, SUM, MIN, MAX, AVG, with or without
//! GROUP BY over [`MapExpr`] keys) and [`GatherKernel`] (materialises
//! expressions as Arrow `RecordBatch`es). They read encoded data directly
//! where the encoding allows: the sum of a bit-packed block is
//! `count·reference + Σ deltas`, constant and sequence blocks sum in O(1),
//! MIN/MAX of a whole block come from its zone map, and dictionary
//! strings group by code (whole blocks fold into per-code states, mapped
//! to groups once per shard), as integer functions of a narrow integer
//! column do by value. Nothing under `stream` allocates per row, and
//! errors (overflow, division by zero) travel inside the accumulator, so
//! `(acc, recids)` could be shipped to another process.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{Int64Array, RecordBatch, cast::AsArray, types::Int64Type};
//! use arrow_schema::{DataType, Field, Schema};
//! use quiverdb_storage::{Database, TableOptions};
//! use quiverdb_mapreducer::{AggFunc, Aggregate, AggregateKernel, AggregateSpec, MapExpr, MapReducer, ShardMapReducer};
//!
//! let db = Database::new();
//! let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
//! let table = db.create_table("t", &schema, TableOptions::default())?;
//! table.append(&RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(1..=100))])?)?;
//! table.rebuild()?;
//!
//! let spec = Arc::new(AggregateSpec::new(vec![], vec![Aggregate::new(AggFunc::Sum, MapExpr::col(0))], table.schema())?);
//! let snapshot = table.snapshot();
//! let shard = snapshot.shard(0);
//! let mut reducer = ShardMapReducer::open(shard, AggregateKernel::new(Arc::clone(&spec))?)?;
//! let ids: Vec<u32> = (0..100).collect();
//! let acc = reducer.stream(spec.new_acc(), &ids);
//! let acc = reducer.finish(acc); // the shard is done
//! let out = acc.finish()?;
//! assert_eq!(out.values[0].as_primitive::<Int64Type>().value(0), 5050);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What this crate is not
//!
//! It does not choose which rows to read: filtering, ordering and
//! parallelism are `quiverdb-scan`'s. It knows no SQL and no DataFusion.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod aggregate;
mod columns;
mod error;
mod expr;
mod gather;
mod output;
mod scalar;
mod shard;
#[cfg(test)]
mod test_tables;
mod vector;

pub use aggregate::{AggFunc, Aggregate, AggregateAcc, AggregateKernel, AggregateOutput, AggregateSpec, MemoryBudget};
pub use columns::{ColumnSource, MainBlockBytes, Scratch, ShardColumns, domain_of, key_to_num};
pub use error::{Error, Result};
pub use expr::{ArithOp, CompiledExpr, MapExpr, Operand, Side};
pub use gather::{GatherAcc, GatherKernel, GatherSpec, RECORD_COLUMN, SHARD_COLUMN};
pub use quiverdb_storage::RecId;
pub use quiverdb_storage::block::{Bits, LANES, Sel, WORDS};
pub use scalar::{Domain, Num, Scalar};
pub use shard::{Kernel, ShardMapReducer};
pub use vector::{NumVector, Values};

/// A batched map+reduce over the records of one shard.
pub trait MapReducer {
    /// The accumulator.
    type Acc;

    /// Folds the records `recids` (ids of this reducer's shard, any order)
    /// into `acc`.
    fn stream(&mut self, acc: Self::Acc, recids: &[RecId]) -> Self::Acc;

    /// Folds one block's worth of records given without ids: a range, or a
    /// bitmask over a block. The default materialises the ids and calls
    /// [`MapReducer::stream`]; block-aware reducers read the block directly.
    fn stream_block(&mut self, acc: Self::Acc, sel: BlockSelection<'_>) -> Self::Acc {
        let mut ids = [0 as RecId; LANES];
        let n = sel.write_ids(&mut ids);
        self.stream(acc, &ids[..n])
    }

    /// Completes the shard: called once after the last
    /// [`MapReducer::stream`] or [`MapReducer::stream_block`] of this
    /// reducer, it folds into `acc` whatever the reducer kept back until
    /// the shard was done (the default keeps nothing back). Accumulators a
    /// shard was not finished into report an error instead of a result.
    fn finish(&mut self, acc: Self::Acc) -> Self::Acc {
        acc
    }

    /// Combines two accumulators (MemCP's `reduce2`).
    fn merge(a: Self::Acc, b: Self::Acc) -> Self::Acc;
}

/// Records of one main block or one delta chunk, without ids.
#[derive(Debug, Clone, Copy)]
pub enum BlockSelection<'a> {
    /// Records `start .. end`, all within one block or chunk.
    Range {
        /// First record.
        start: RecId,
        /// One past the last record.
        end: RecId,
    },
    /// Records `start + i` for every set bit `i < len` of `mask`; `start`
    /// is the first record of a block or chunk.
    Mask {
        /// First record of the block or chunk.
        start: RecId,
        /// Records in the block or chunk.
        len: u32,
        /// Selected records, bit `i` for record `start + i`.
        mask: &'a [u64; WORDS],
    },
}

impl BlockSelection<'_> {
    /// The first record the selection can cover.
    pub fn start(&self) -> RecId {
        match *self {
            BlockSelection::Range { start, .. } | BlockSelection::Mask { start, .. } => start,
        }
    }

    /// Number of selected records.
    pub fn count(&self) -> usize {
        match *self {
            BlockSelection::Range { start, end } => (end - start) as usize,
            BlockSelection::Mask { mask, .. } => quiverdb_storage::block::count_bits(mask),
        }
    }

    /// Writes the selected ids to `out`; returns how many.
    pub fn write_ids(&self, out: &mut [RecId; LANES]) -> usize {
        match *self {
            BlockSelection::Range { start, end } => {
                for (slot, id) in out.iter_mut().zip(start..end) {
                    *slot = id;
                }
                (end - start) as usize
            }
            BlockSelection::Mask { start, mask, .. } => {
                let mut n = 0;
                Bits(*mask).for_each_one(|i| {
                    out[n] = start + i as RecId;
                    n += 1;
                });
                n
            }
        }
    }
}
