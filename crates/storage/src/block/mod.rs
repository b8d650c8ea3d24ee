//! The 1,024-row block: the unit of zone maps, bit-packing frames, delta
//! chunks and scan steps, and what every operation on a block shares —
//! lane bitmaps ([`Bits`]), selections of a block's rows ([`Sel`]), tests
//! on keys ([`KeyTest`]) and the leaf [`kernels`].
//!
//! A step of a scan covers the rows of one block (main storage) or one
//! chunk (delta), chosen by a [`Sel`]. Values are laid out in *lanes*:
//!
//! ```text
//!   Sel::Range(a, b)   lanes 0..b-a  = rows a..b of the block   (all active)
//!   Sel::Mask(m, n)    lanes 0..n    = rows 0..n of the block   (active where m is set)
//!   Sel::Ids(ids, base) lanes 0..k   = records ids[0..k]         (all active)
//! ```
//!
//! Dense selections keep the block's layout so no compaction is needed;
//! sparse ones (and the unsorted ids of ordered scans) are gathered.

pub mod kernels;
mod key_test;

pub use key_test::{KeySet, KeyTest};

use crate::types::RecId;

/// Values per block: the unit of zone maps, bit-packing frames, delta
/// chunks and scan batches. 1,024 is the FastLanes block (one 1,024-bit
/// register's worth of lanes), so it is fixed.
pub const BLOCK_SIZE: usize = 1024;

/// Lanes of a block-sized vector: one per row of a block.
pub const LANES: usize = BLOCK_SIZE;

/// 64-bit words of a lane bitmap.
pub const WORDS: usize = LANES / 64;

/// The rows of one block or chunk that a step covers.
#[derive(Debug, Clone, Copy)]
pub enum Sel<'s> {
    /// Rows at offsets `start .. end` of the block.
    Range(usize, usize),
    /// Rows whose bit is set, in a block of `len` rows.
    Mask(&'s [u64; WORDS], usize),
    /// Records `ids`, each at offset `id - base` of the block, in this order.
    Ids(&'s [RecId], RecId),
}

impl Sel<'_> {
    /// Number of lanes.
    #[inline]
    pub fn lanes(&self) -> usize {
        match *self {
            Sel::Range(a, b) => b - a,
            Sel::Mask(_, len) => len,
            Sel::Ids(ids, _) => ids.len(),
        }
    }

    /// Number of selected rows.
    #[inline]
    pub fn count(&self) -> usize {
        match *self {
            Sel::Mask(m, _) => count_bits(m),
            _ => self.lanes(),
        }
    }

    /// The active lanes as a bitmap.
    #[inline]
    pub fn active(&self) -> Bits {
        match *self {
            Sel::Mask(m, _) => Bits(*m),
            _ => Bits::first(self.lanes()),
        }
    }

    /// True when every lane is active (no mask).
    #[inline]
    pub fn dense(&self) -> bool {
        !matches!(self, Sel::Mask(..))
    }

    /// Calls `f(lane, offset)` for every active lane in lane order.
    #[inline]
    pub fn for_each(&self, mut f: impl FnMut(usize, usize)) {
        match *self {
            Sel::Range(a, b) => (a..b).enumerate().for_each(|(l, o)| f(l, o)),
            Sel::Mask(m, _) => Bits(*m).for_each_one(|l| f(l, l)),
            Sel::Ids(ids, base) => ids.iter().enumerate().for_each(|(l, &id)| f(l, (id - base) as usize)),
        }
    }
}

/// Calls `f(lane, offset)` for each lane of `sel` that is set in `lanes`.
#[inline]
pub fn sel_offsets(sel: Sel<'_>, lanes: &Bits, mut f: impl FnMut(usize, usize)) {
    match sel {
        Sel::Range(a, _) => lanes.for_each_one(|l| f(l, a + l)),
        Sel::Mask(..) => lanes.for_each_one(|l| f(l, l)),
        Sel::Ids(ids, base) => lanes.for_each_one(|l| f(l, (ids[l] - base) as usize)),
    }
}

/// A bitmap of lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bits(pub [u64; WORDS]);

impl Bits {
    /// No lane set.
    pub const EMPTY: Bits = Bits([0; WORDS]);

    /// Lanes `0..n` set.
    #[inline]
    pub fn first(n: usize) -> Bits {
        let mut w = [0u64; WORDS];
        for (i, word) in w.iter_mut().enumerate() {
            let lo = i * 64;
            *word = if n >= lo + 64 {
                u64::MAX
            } else if n > lo {
                (1u64 << (n - lo)) - 1
            } else {
                0
            };
        }
        Bits(w)
    }

    /// Lanes `a..b` set.
    #[inline]
    pub fn range(a: usize, b: usize) -> Bits {
        Bits::first(b).and_not(&Bits::first(a))
    }

    /// Lane-wise AND.
    #[inline]
    pub fn and(&self, o: &Bits) -> Bits {
        let mut w = self.0;
        for (a, b) in w.iter_mut().zip(&o.0) {
            *a &= *b;
        }
        Bits(w)
    }

    /// Lane-wise OR.
    #[inline]
    pub fn or(&self, o: &Bits) -> Bits {
        let mut w = self.0;
        for (a, b) in w.iter_mut().zip(&o.0) {
            *a |= *b;
        }
        Bits(w)
    }

    /// `self & !o`.
    #[inline]
    pub fn and_not(&self, o: &Bits) -> Bits {
        let mut w = self.0;
        for (a, b) in w.iter_mut().zip(&o.0) {
            *a &= !*b;
        }
        Bits(w)
    }

    /// Number of set lanes.
    #[inline]
    pub fn count(&self) -> usize {
        count_bits(&self.0)
    }

    /// True when no lane is set.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Lane `i`.
    #[inline]
    pub fn get(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }

    /// Sets lane `i`.
    #[inline]
    pub fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    /// Calls `f` for each set lane, in order, 64 lanes at a time; a full
    /// word runs as a plain counted loop.
    #[inline(always)]
    pub fn for_each_one(&self, mut f: impl FnMut(usize)) {
        for (wi, &word) in self.0.iter().enumerate() {
            let base = wi * 64;
            if word == u64::MAX {
                for l in base..base + 64 {
                    f(l);
                }
                continue;
            }
            let mut w = word;
            while w != 0 {
                let bit = w.trailing_zeros() as usize;
                f(base + bit);
                w &= w - 1;
            }
        }
    }

    /// `Some(n)` when exactly lanes `0..n` are set (a dense prefix, the
    /// common case of a full or range selection): callers then loop over a
    /// plain slice, which vectorises.
    #[inline]
    pub fn dense_len(&self) -> Option<usize> {
        let n = self.count();
        (*self == Bits::first(n)).then_some(n)
    }

    /// The lowest set lane.
    pub fn first_one(&self) -> Option<usize> {
        self.0.iter().enumerate().find(|(_, w)| **w != 0).map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
    }
}

/// Set bits of a bitmap (with the CPU's `popcnt` when it has one; the
/// baseline x86-64 target emulates it in ~15 instructions a word).
#[inline]
pub fn count_bits(w: &[u64; WORDS]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: POPCNT is available (checked just above).
        return unsafe { count_popcnt(w) };
    }
    count_words(w)
}

#[inline(always)]
fn count_words(w: &[u64; WORDS]) -> usize {
    w.iter().map(|w| w.count_ones() as usize).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn count_popcnt(w: &[u64; WORDS]) -> usize {
    count_words(w)
}
