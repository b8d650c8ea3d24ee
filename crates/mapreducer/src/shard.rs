//! `ShardMapReducer`: one shard snapshot's column readers plus a kernel,
//! behind the [`MapReducer`] interface.
//!
//! ```text
//!   stream(acc, ids)                    ids of one shard, in any order
//!     ascending? ── yes: one partition_point splits main ids | delta ids
//!                └─ no:  a run scan cuts maximal runs on one side
//!     each run, block by block:
//!       main ids  ──▶ kernel.process_main_block(block, Sel::Ids)
//!       delta ids ──▶ kernel.process_delta_block(chunk, Sel::Ids)
//!
//!   stream_block(acc, Range | Mask)     one block or chunk, no ids at all
//!       ──▶ process_main_block / process_delta_block (Sel::Range | Sel::Mask)
//!
//!   finish(acc)                         after the shard's last block
//!       ──▶ kernel.close (what the kernel kept back for the shard's end)
//! ```
//!
//! The kernel decides, once per block, how to read each column given its
//! encoding; the per-row loops below it are monomorphic.

use quiverdb_storage::{RecId, ShardSnapshot};

use crate::columns::{Scratch, ShardColumns};
use crate::error::Result;
use crate::{BlockSelection, MapReducer};
use quiverdb_storage::block::{LANES, Sel};

/// The reduce logic a [`ShardMapReducer`] runs on each block.
pub trait Kernel {
    /// The accumulator.
    type Acc;

    /// Table columns the kernel reads (opened once per shard).
    fn columns(&self) -> Vec<usize>;

    /// Called once after the shard's columns are open.
    fn open(&mut self, _cols: &ShardColumns<'_>) -> Result<()> {
        Ok(())
    }

    /// Folds the rows `sel` of main block `block` into `acc`.
    fn process_main_block(
        &mut self,
        cols: &ShardColumns<'_>,
        acc: Self::Acc,
        block: usize,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> Self::Acc;

    /// Folds the rows `sel` of delta chunk `chunk` into `acc`.
    fn process_delta_block(
        &mut self,
        cols: &ShardColumns<'_>,
        acc: Self::Acc,
        chunk: usize,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> Self::Acc;

    /// Called once after the shard's last block (by
    /// [`MapReducer::finish`]): folds into `acc` whatever the kernel kept
    /// back for the end of the shard.
    fn close(&mut self, _cols: &ShardColumns<'_>, acc: Self::Acc, _scratch: &mut Scratch) -> Self::Acc {
        acc
    }

    /// Combines the accumulators of two shards (or two parts of one).
    fn merge(a: Self::Acc, b: Self::Acc) -> Self::Acc;
}

/// A [`MapReducer`] over one shard snapshot.
#[derive(Debug)]
pub struct ShardMapReducer<'a, K> {
    cols: ShardColumns<'a>,
    kernel: K,
    scratch: Scratch,
}

impl<'a, K: Kernel> ShardMapReducer<'a, K> {
    /// Opens the kernel's columns of `shard` and allocates its buffers.
    pub fn open(shard: ShardSnapshot<'a>, kernel: K) -> Result<Self> {
        Self::open_with(shard, kernel, Scratch::default())
    }

    /// Opens `shard` with a kernel and scratch buffers taken back from a
    /// previous shard ([`ShardMapReducer::into_parts`]), so a worker that
    /// scans many shards allocates them once.
    pub fn open_with(shard: ShardSnapshot<'a>, mut kernel: K, scratch: Scratch) -> Result<Self> {
        let cols = ShardColumns::open(shard, kernel.columns())?;
        kernel.open(&cols)?;
        Ok(Self { cols, kernel, scratch })
    }

    /// The kernel and the scratch buffers, for reuse on another shard.
    pub fn into_parts(self) -> (K, Scratch) {
        (self.kernel, self.scratch)
    }

    /// The shard's column readers.
    pub fn columns(&self) -> &ShardColumns<'a> {
        &self.cols
    }

    /// The kernel.
    pub fn kernel(&self) -> &K {
        &self.kernel
    }

    /// Main ids (all `< main_rows`), block by block.
    pub fn process_main_run(&mut self, mut acc: K::Acc, ids: &[RecId]) -> K::Acc {
        let mut i = 0;
        while i < ids.len() {
            let block = ids[i] as usize / LANES;
            let mut j = i + 1;
            while j < ids.len() && ids[j] as usize / LANES == block {
                j += 1;
            }
            let base = (block * LANES) as RecId;
            acc = self.kernel.process_main_block(&self.cols, acc, block, Sel::Ids(&ids[i..j], base), &mut self.scratch);
            i = j;
        }
        acc
    }

    /// Delta ids (all `>= main_rows`), chunk by chunk.
    pub fn process_delta_run(&mut self, mut acc: K::Acc, ids: &[RecId]) -> K::Acc {
        let main = self.cols.main_rows();
        let mut i = 0;
        while i < ids.len() {
            let chunk = (ids[i] as usize - main) / LANES;
            let mut j = i + 1;
            while j < ids.len() && (ids[j] as usize - main) / LANES == chunk {
                j += 1;
            }
            let base = (main + chunk * LANES) as RecId;
            acc =
                self.kernel.process_delta_block(&self.cols, acc, chunk, Sel::Ids(&ids[i..j], base), &mut self.scratch);
            i = j;
        }
        acc
    }
}

impl<K: Kernel> MapReducer for ShardMapReducer<'_, K> {
    type Acc = K::Acc;

    fn stream(&mut self, mut acc: K::Acc, recids: &[RecId]) -> K::Acc {
        let main = self.cols.main_rows() as RecId;
        if recids.windows(2).all(|w| w[0] < w[1]) {
            let split = recids.partition_point(|&id| id < main);
            acc = self.process_main_run(acc, &recids[..split]);
            return self.process_delta_run(acc, &recids[split..]);
        }
        // Unsorted ids (an ordered scan's): maximal runs on one side.
        let mut i = 0;
        while i < recids.len() {
            let in_main = recids[i] < main;
            let mut j = i + 1;
            while j < recids.len() && (recids[j] < main) == in_main {
                j += 1;
            }
            acc = if in_main {
                self.process_main_run(acc, &recids[i..j])
            } else {
                self.process_delta_run(acc, &recids[i..j])
            };
            i = j;
        }
        acc
    }

    fn stream_block(&mut self, acc: K::Acc, sel: BlockSelection<'_>) -> K::Acc {
        let main = self.cols.main_rows();
        let start = sel.start() as usize;
        // First record of the block or chunk holding `start`.
        let base = if start < main { start / LANES * LANES } else { main + (start - main) / LANES * LANES };
        let in_block = match sel {
            BlockSelection::Range { start, end } => Sel::Range(start as usize - base, end as usize - base),
            BlockSelection::Mask { start, len, mask } => {
                debug_assert_eq!(start as usize, base, "a mask starts at its block's first record");
                Sel::Mask(mask, len as usize)
            }
        };
        if start < main {
            self.kernel.process_main_block(&self.cols, acc, base / LANES, in_block, &mut self.scratch)
        } else {
            let chunk = (base - main) / LANES;
            self.kernel.process_delta_block(&self.cols, acc, chunk, in_block, &mut self.scratch)
        }
    }

    fn finish(&mut self, acc: K::Acc) -> K::Acc {
        self.kernel.close(&self.cols, acc, &mut self.scratch)
    }

    fn merge(a: K::Acc, b: K::Acc) -> K::Acc {
        K::merge(a, b)
    }
}
