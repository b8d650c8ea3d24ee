//! Distinct-value sketches: how many different values a column holds,
//! estimated in 1 KiB per column and shard and merged across shards.
//!
//! ```text
//!   value ──hash──▶ 64 bits ──▶ register = top 10 bits
//!                               rank     = leading zeros of the rest + 1
//!   registers[r] = max(registers[r], rank)       (HyperLogLog, 1,024 registers)
//!   merge: register-wise max     estimate: harmonic mean, linear counting when small
//! ```
//!
//! A main column's sketch is built with the column, by a rebuild or when
//! a checkpoint is read, so no query waits for it (see
//! [`crate::MainColumn::distinct_sketch`]). It is built from what the
//! encoding already holds: a dictionary's entries (each distinct value
//! once), or every key of the other key encodings. Adding a value twice changes nothing, so
//! null slots (which hold a neighbour's key) and repeated values cost no
//! accuracy. The standard error is about 1.04 / √1024 ≈ 3.3 %.

/// Bits of the hash that pick a register.
const PRECISION: u32 = 10;

/// Number of registers.
const REGISTERS: usize = 1 << PRECISION;

/// A HyperLogLog sketch of a set of values.
#[derive(Clone, PartialEq, Eq)]
pub struct DistinctSketch {
    registers: Box<[u8; REGISTERS]>,
}

impl std::fmt::Debug for DistinctSketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistinctSketch").field("estimate", &self.estimate()).finish()
    }
}

impl Default for DistinctSketch {
    fn default() -> Self {
        Self::new()
    }
}

impl DistinctSketch {
    /// An empty sketch.
    pub fn new() -> Self {
        Self { registers: Box::new([0; REGISTERS]) }
    }

    /// Adds a fixed-width value by its key.
    #[inline]
    pub fn add_key(&mut self, key: u64) {
        self.add_hash(mix(key));
    }

    /// Adds a byte-string value.
    pub fn add_bytes(&mut self, bytes: &[u8]) {
        // FNV-1a over the bytes, then the key mixer: a well-spread hash,
        // the same on every run and machine.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.add_hash(mix(h ^ bytes.len() as u64));
    }

    #[inline]
    fn add_hash(&mut self, h: u64) {
        let register = (h >> (64 - PRECISION)) as usize;
        // The rank of the remaining bits: a sentinel bit keeps it bounded.
        let rank = ((h << PRECISION) | (1 << (PRECISION - 1))).leading_zeros() as u8 + 1;
        let slot = &mut self.registers[register];
        *slot = (*slot).max(rank);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &DistinctSketch) {
        for (a, &b) in self.registers.iter_mut().zip(other.registers.iter()) {
            *a = (*a).max(b);
        }
    }

    /// True if no value was added.
    pub fn is_empty(&self) -> bool {
        self.registers.iter().all(|&r| r == 0)
    }

    /// The estimated number of distinct values added.
    pub fn estimate(&self) -> u64 {
        let m = REGISTERS as f64;
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let (mut sum, mut zeros) = (0.0f64, 0usize);
        for &r in self.registers.iter() {
            // 2^-r exactly, built from its exponent bits (any u8 r is in range).
            sum += f64::from_bits((1023 - u64::from(r)) << 52);
            zeros += usize::from(r == 0);
        }
        let raw = alpha * m * m / sum;
        let estimate = if raw <= 2.5 * m && zeros > 0 { m * (m / zeros as f64).ln() } else { raw };
        estimate.round() as u64
    }

    /// Heap bytes held.
    pub fn size_bytes(&self) -> usize {
        REGISTERS
    }
}

/// A 64-bit finalizer (MurmurHash3's `fmix64`): every input bit affects
/// every output bit, so consecutive keys land in unrelated registers.
#[inline]
fn mix(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::DistinctSketch;

    /// Within `tolerance` (a fraction) of `exact`.
    fn close(estimate: u64, exact: usize, tolerance: f64) -> bool {
        (estimate as f64 - exact as f64).abs() <= tolerance * exact as f64
    }

    #[test]
    fn estimates_distinct_keys_small_and_large() {
        for n in [1usize, 10, 100, 1_000, 10_000, 100_000, 1_000_000] {
            let mut s = DistinctSketch::new();
            // Each value several times: repeats change nothing.
            for _ in 0..3 {
                (0..n as u64).for_each(|k| s.add_key(k * 7));
            }
            let e = s.estimate();
            assert!(close(e, n, 0.1), "{n} distinct keys estimated as {e}");
        }
        assert_eq!(DistinctSketch::new().estimate(), 0);
        assert!(DistinctSketch::new().is_empty());
    }

    #[test]
    fn merged_sketches_estimate_the_union() {
        // Two overlapping sets: 0..60,000 and 40,000..100,000.
        let (mut a, mut b) = (DistinctSketch::new(), DistinctSketch::new());
        (0..60_000u64).for_each(|k| a.add_key(k));
        (40_000..100_000u64).for_each(|k| b.add_key(k));
        let mut union = a.clone();
        union.merge(&b);
        let mut direct = DistinctSketch::new();
        (0..100_000u64).for_each(|k| direct.add_key(k));
        assert_eq!(union, direct, "a merge is the sketch of the union");
        assert!(close(union.estimate(), 100_000, 0.1), "{}", union.estimate());
    }

    #[test]
    fn estimates_distinct_byte_strings() {
        let values: Vec<String> = (0..50_000).map(|i| format!("customer#{:09}", i % 20_000)).collect();
        let exact = values.iter().collect::<HashSet<_>>().len();
        let mut s = DistinctSketch::new();
        values.iter().for_each(|v| s.add_bytes(v.as_bytes()));
        assert!(close(s.estimate(), exact, 0.1), "{} for {exact}", s.estimate());
        // The empty string and a string of zero bytes are different values.
        let mut t = DistinctSketch::new();
        t.add_bytes(b"");
        t.add_bytes(b"\0");
        t.add_bytes(b"\0\0");
        assert_eq!(t.estimate(), 3);
    }
}
