//! Sequence encoding: runs of arithmetic progressions.
//!
//! ```text
//!   keys   10 11 12 13 14 | 20 20 20 | 7 5 3
//!   runs   (start 0, base 10, step 1) (start 5, base 20, step 0) (start 8, base 7, step -2)
//! ```
//!
//! A run covers rows `start .. next run's start`; row `r` of a run is
//! `base + (r - start) * step`, computed with wrapping `u64` arithmetic, so
//! descending runs (negative steps) need no special case. An id column of a
//! shard is one run: 24 bytes for 65,536 rows.
//!
//! Runs are found greedily left to right; a run always takes at least two
//! values (a lone last value is a run of one).

use std::ops::Range;

use crate::block::BLOCK_SIZE;

/// One arithmetic progression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeqRun {
    /// First row of the run.
    pub start: u32,
    /// Key of the first row.
    pub base: u64,
    /// Key increment per row (wrapping).
    pub step: u64,
}

impl SeqRun {
    /// The key of row `row` (which must lie in this run).
    #[inline(always)]
    pub(crate) fn key(&self, row: usize) -> u64 {
        self.base.wrapping_add(((row - self.start as usize) as u64).wrapping_mul(self.step))
    }
}

/// Runs of arithmetic progressions.
#[derive(Debug, Clone)]
pub(crate) struct Sequence {
    len: usize,
    runs: Box<[SeqRun]>,
}

impl Sequence {
    /// Encodes `keys`, or returns `None` as soon as more than `max_runs`
    /// runs would be needed.
    pub(crate) fn encode(keys: &[u64], max_runs: usize) -> Option<Self> {
        let mut runs = Vec::new();
        let mut i = 0;
        while i < keys.len() {
            if runs.len() == max_runs {
                return None;
            }
            let base = keys[i];
            let step = if i + 1 < keys.len() { keys[i + 1].wrapping_sub(base) } else { 0 };
            let mut j = i + 1;
            let mut expect = base.wrapping_add(step);
            while j < keys.len() && keys[j] == expect {
                j += 1;
                expect = expect.wrapping_add(step);
            }
            runs.push(SeqRun { start: i as u32, base, step });
            i = j;
        }
        Some(Self { len: keys.len(), runs: runs.into() })
    }

    /// A sequence from its parts, for decoding a checkpoint
    /// ([`crate::durable::checkpoint`]), which validates before calling
    /// this that the runs start at row 0 (none when `len` is 0) and their
    /// starts ascend strictly below `len`.
    pub(crate) fn from_parts(len: usize, runs: Box<[SeqRun]>) -> Self {
        debug_assert_eq!(runs.is_empty(), len == 0);
        debug_assert!(runs.first().is_none_or(|r| r.start == 0));
        debug_assert!(runs.windows(2).all(|w| w[0].start < w[1].start));
        debug_assert!(runs.last().is_none_or(|r| (r.start as usize) < len));
        Self { len, runs }
    }

    /// Bytes a sequence of `runs` runs occupies.
    pub(crate) fn size_for_runs(runs: usize) -> usize {
        runs * size_of::<SeqRun>()
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The runs, ordered by start row.
    pub(crate) fn runs(&self) -> &[SeqRun] {
        &self.runs
    }

    /// Index of the run containing `row`.
    #[inline]
    pub(crate) fn run_of(&self, row: usize) -> usize {
        self.runs.partition_point(|r| r.start as usize <= row) - 1
    }

    /// The key at `row`.
    #[inline]
    pub(crate) fn get(&self, row: usize) -> u64 {
        self.runs[self.run_of(row)].key(row)
    }

    /// Decodes block `block` into `out`.
    pub(crate) fn decode_block(&self, block: usize, out: &mut [u64; BLOCK_SIZE]) {
        let start = block * BLOCK_SIZE;
        let end = (start + BLOCK_SIZE).min(self.len);
        let mut r = self.run_of(start);
        let mut row = start;
        while row < end {
            let run = self.runs[r];
            let run_end = self.runs.get(r + 1).map_or(self.len, |n| n.start as usize).min(end);
            let mut k = run.key(row);
            for slot in &mut out[row - start..run_end - start] {
                *slot = k;
                k = k.wrapping_add(run.step);
            }
            row = run_end;
            r += 1;
        }
    }

    /// Appends rows `rows` of block `block` to `dst` as `i64` values,
    /// `map(key)` each: `map` must be additive (`map(k + d) = map(k) + d`,
    /// wrapping), as the flip of a signed key's sign bit is, so that a run
    /// is computed as a progression of values, written straight into
    /// `dst`.
    pub(crate) fn extend_block_i64(
        &self,
        block: usize,
        map: impl Fn(u64) -> u64,
        rows: Range<usize>,
        dst: &mut Vec<i64>,
    ) {
        let start = block * BLOCK_SIZE;
        let (mut row, end) = (start + rows.start, (start + rows.end).min(self.len));
        if row >= end {
            return;
        }
        dst.reserve(end - row);
        let mut r = self.run_of(row);
        while row < end {
            let run = self.runs[r];
            let run_end = self.runs.get(r + 1).map_or(self.len, |n| n.start as usize).min(end);
            // An induction (`k += step`), which vectorises; a product per
            // row does not on the baseline target (no 64-bit vector
            // multiply).
            let (mut k, step) = (map(run.key(row)), run.step);
            dst.extend((row..run_end).map(|_| {
                let v = k as i64;
                k = k.wrapping_add(step);
                v
            }));
            row = run_end;
            r += 1;
        }
    }

    /// Heap bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        Self::size_for_runs(self.runs.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_decode() {
        let keys: Vec<u64> = (0..3000u64)
            .chain(std::iter::repeat_n(7, 100))
            .chain((0..50u64).map(|i| 1000u64.wrapping_sub(3 * i)))
            .collect();
        let s = Sequence::encode(&keys, 100).unwrap();
        assert_eq!(s.runs().len(), 3);
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(s.get(i), k);
        }
        let mut buf = [0; BLOCK_SIZE];
        for b in 0..keys.len().div_ceil(BLOCK_SIZE) {
            s.decode_block(b, &mut buf);
            let end = ((b + 1) * BLOCK_SIZE).min(keys.len());
            assert_eq!(&buf[..end - b * BLOCK_SIZE], &keys[b * BLOCK_SIZE..end]);
        }
        assert!(Sequence::encode(&[1, 5, 2, 9, 3], 2).is_none());
    }

    #[test]
    fn blocks_extend_as_mapped_values() {
        // Runs that cross blocks and end inside one; a descending run.
        let keys: Vec<u64> = (0..1500u64)
            .map(|i| (1 << 63) + i)
            .chain(std::iter::repeat_n(7, 700))
            .chain((0..900u64).map(|i| (1u64 << 63).wrapping_sub(3 * i)))
            .collect();
        let s = Sequence::encode(&keys, 100).unwrap();
        let flip = |k: u64| k ^ (1 << 63);
        for b in 0..keys.len().div_ceil(BLOCK_SIZE) {
            let rows = (keys.len() - b * BLOCK_SIZE).min(BLOCK_SIZE);
            for (a, z) in [(0, rows), (5.min(rows), rows), (0, 1), (rows / 2, (rows / 2 + 40).min(rows)), (rows, rows)]
            {
                let mut dst = vec![42i64];
                s.extend_block_i64(b, flip, a..z, &mut dst);
                let expected: Vec<i64> = std::iter::once(42)
                    .chain(keys[b * BLOCK_SIZE + a..b * BLOCK_SIZE + z].iter().map(|&k| flip(k) as i64))
                    .collect();
                assert_eq!(dst, expected, "block {b} rows {a}..{z}");
            }
        }
    }
}
