//! Run-end encoding: runs of equal keys.
//!
//! ```text
//!   keys    5 5 5 5 9 9 2 2 2
//!   ends    4     6     9        (exclusive end row of each run)
//!   values  5     9     2
//! ```
//!
//! Row `r` belongs to the first run whose end is greater than `r`
//! (a binary search); decoding a block walks the runs that overlap it.

use crate::block::BLOCK_SIZE;

/// Runs of equal keys.
#[derive(Debug, Clone)]
pub(crate) struct RunEnd {
    ends: Box<[u32]>,
    values: Box<[u64]>,
}

impl RunEnd {
    /// Encodes `keys`, or returns `None` as soon as more than `max_runs`
    /// runs would be needed.
    pub(crate) fn encode(keys: &[u64], max_runs: usize) -> Option<Self> {
        let mut ends = Vec::new();
        let mut values = Vec::new();
        let mut i = 0;
        while i < keys.len() {
            if values.len() == max_runs {
                return None;
            }
            let v = keys[i];
            let mut j = i + 1;
            while j < keys.len() && keys[j] == v {
                j += 1;
            }
            ends.push(j as u32);
            values.push(v);
            i = j;
        }
        Some(Self { ends: ends.into(), values: values.into() })
    }

    /// Runs from their parts, for decoding a checkpoint
    /// ([`crate::durable::checkpoint`]), which validates before calling
    /// this that there is one value per end and the ends ascend strictly.
    pub(crate) fn from_parts(ends: Box<[u32]>, values: Box<[u64]>) -> Self {
        debug_assert_eq!(ends.len(), values.len());
        debug_assert!(ends.first().is_none_or(|&e| e > 0) && ends.windows(2).all(|w| w[0] < w[1]));
        Self { ends, values }
    }

    /// The number of runs `keys` has (a cheap pass used to size candidates).
    pub(crate) fn count_runs(keys: &[u64]) -> usize {
        let breaks = keys.windows(2).filter(|w| w[0] != w[1]).count();
        if keys.is_empty() { 0 } else { breaks + 1 }
    }

    /// Bytes a run-end column of `runs` runs occupies.
    pub(crate) fn size_for_runs(runs: usize) -> usize {
        runs * (size_of::<u32>() + size_of::<u64>())
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.ends.last().map_or(0, |&e| e as usize)
    }

    /// Exclusive end row of each run.
    pub(crate) fn ends(&self) -> &[u32] {
        &self.ends
    }

    /// Key of each run.
    pub(crate) fn values(&self) -> &[u64] {
        &self.values
    }

    /// Index of the run containing `row`.
    #[inline]
    pub(crate) fn run_of(&self, row: usize) -> usize {
        self.ends.partition_point(|&e| e as usize <= row)
    }

    /// The key at `row`.
    #[inline]
    pub(crate) fn get(&self, row: usize) -> u64 {
        self.values[self.run_of(row)]
    }

    /// Decodes block `block` into `out`.
    pub(crate) fn decode_block(&self, block: usize, out: &mut [u64; BLOCK_SIZE]) {
        let start = block * BLOCK_SIZE;
        let end = (start + BLOCK_SIZE).min(self.len());
        let mut r = self.run_of(start);
        let mut row = start;
        while row < end {
            let run_end = (self.ends[r] as usize).min(end);
            out[row - start..run_end - start].fill(self.values[r]);
            row = run_end;
            r += 1;
        }
    }

    /// Heap bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        Self::size_for_runs(self.values.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_decode() {
        let keys: Vec<u64> = (0..5000u64).map(|i| i / 700).collect();
        assert_eq!(RunEnd::count_runs(&keys), 8);
        let r = RunEnd::encode(&keys, 8).unwrap();
        assert_eq!(r.len(), keys.len());
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(r.get(i), k);
        }
        let mut buf = [0; BLOCK_SIZE];
        r.decode_block(4, &mut buf);
        assert_eq!(&buf[..5000 - 4096], &keys[4096..]);
        assert!(RunEnd::encode(&keys, 7).is_none());
    }
}
