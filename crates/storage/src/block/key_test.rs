//! Tests on a column's `u64` keys (or a dictionary's codes): an inclusive
//! range, or a set. Keys order like the values they stand for, so a
//! comparison with a literal is a key range and an IN-list a key set; every
//! encoding evaluates them without decoding to values (see
//! [`crate::main::Keys::filter_block`]).
//!
//! ```text
//!   KeyTest::Range { lo, hi }   v - lo <= hi - lo (wrapping: one compare)
//!   KeyTest::Set                sorted keys; a bitset when they span at most
//!                               DENSE_SET_SPAN, or 64 per key (one load per row)
//!   on_dictionary(values)       the same test on a sorted dictionary's codes
//! ```

use super::kernels;
use super::{Bits, LANES};

/// A set whose keys span at most this many is tested with a bitset (one
/// load per row) instead of a binary search; 2^20 bits = 128 KiB.
pub(super) const DENSE_SET_SPAN: u64 = 1 << 20;

/// A larger set gets a bitset too while it costs at most this many bits
/// per key (8 bytes, what the sorted keys take): an IN list of 30,000
/// keys over a span of 1.5 million tests in one load per row, where a
/// binary search takes 15 dependent ones. (A hash join lists at most
/// 16,384 keys per partition, which span 2^20 at 64 bits each.)
const DENSE_BITS_PER_KEY: u64 = 64;

/// A test on `u64` keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyTest {
    /// Keys in `lo..=hi`; nothing when `empty`.
    Range {
        /// Smallest key that passes.
        lo: u64,
        /// Largest key that passes.
        hi: u64,
        /// No key passes (`lo > hi` after clamping to a type's range).
        empty: bool,
    },
    /// Keys in a set.
    Set(KeySet),
}

/// The keys of a [`KeyTest::Set`], sorted, with a bitset when dense.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySet {
    keys: Vec<u64>,
    /// The first key and one bit per key from it, when the keys span at
    /// most [`DENSE_SET_SPAN`] or [`DENSE_BITS_PER_KEY`] per key.
    dense: Option<(u64, Vec<u64>)>,
}

impl KeyTest {
    /// Keys in `lo..=hi` (no key when `lo > hi`).
    pub fn range(lo: u64, hi: u64) -> Self {
        if lo > hi { Self::nothing() } else { KeyTest::Range { lo, hi, empty: false } }
    }

    /// A test no key passes.
    pub fn nothing() -> Self {
        KeyTest::Range { lo: 1, hi: 0, empty: true }
    }

    /// Keys in `keys` (any order, duplicates allowed).
    pub fn set(mut keys: Vec<u64>) -> Self {
        keys.sort_unstable();
        keys.dedup();
        let dense = match (keys.first(), keys.last()) {
            (Some(&lo), Some(&hi))
                if hi - lo < DENSE_SET_SPAN.max((keys.len() as u64).saturating_mul(DENSE_BITS_PER_KEY)) =>
            {
                let mut words = vec![0u64; ((hi - lo) / 64 + 1) as usize];
                for k in &keys {
                    let o = k - lo;
                    words[(o / 64) as usize] |= 1 << (o % 64);
                }
                Some((lo, words))
            }
            _ => None,
        };
        KeyTest::Set(KeySet { keys, dense })
    }

    /// True when key `k` passes.
    #[inline(always)]
    pub fn test(&self, k: u64) -> bool {
        match self {
            KeyTest::Range { empty: true, .. } => false,
            KeyTest::Range { lo, hi, .. } => k.wrapping_sub(*lo) <= hi.wrapping_sub(*lo),
            KeyTest::Set(s) => s.contains(k),
        }
    }

    /// Whether some key in `[min, max]` passes, and whether some fails.
    pub fn zone(&self, min: u64, max: u64) -> (bool, bool) {
        match self {
            KeyTest::Range { empty: true, .. } => (false, true),
            KeyTest::Range { lo, hi, .. } => (min <= *hi && max >= *lo, !(*lo <= min && max <= *hi)),
            KeyTest::Set(s) => {
                let i = s.keys.partition_point(|&k| k < min);
                let any = s.keys.get(i).is_some_and(|&k| k <= max);
                (any, !(min == max && any))
            }
        }
    }

    /// The lanes of `keys[0..n]` that pass.
    #[inline]
    pub fn mask(&self, keys: &[u64; LANES], n: usize) -> Bits {
        let mut out = Bits::EMPTY;
        match self {
            KeyTest::Range { empty: true, .. } => {}
            KeyTest::Range { lo, hi, .. } => {
                out = kernels::range_mask(keys, n, *lo, hi.wrapping_sub(*lo));
            }
            KeyTest::Set(s) => match &s.dense {
                Some((lo, words)) => out = kernels::bitset_mask(keys, n, *lo, words),
                None => {
                    for (i, &k) in keys[..n].iter().enumerate() {
                        if s.keys.binary_search(&k).is_ok() {
                            out.set(i);
                        }
                    }
                }
            },
        }
        out
    }

    /// The same test on the codes of a sorted dictionary of keys `values`
    /// (code `i` stands for `values[i]`).
    pub fn on_dictionary(&self, values: &[u64]) -> KeyTest {
        match self {
            KeyTest::Range { empty: true, .. } => self.clone(),
            KeyTest::Range { lo, hi, .. } => {
                let clo = values.partition_point(|&v| v < *lo) as u64;
                let chi = values.partition_point(|&v| v <= *hi) as u64;
                if clo >= chi { Self::nothing() } else { Self::range(clo, chi - 1) }
            }
            KeyTest::Set(s) => {
                KeyTest::set(s.keys.iter().filter_map(|k| values.binary_search(k).ok().map(|c| c as u64)).collect())
            }
        }
    }
}

impl KeySet {
    /// True when `k` is in the set.
    #[inline(always)]
    pub fn contains(&self, k: u64) -> bool {
        match &self.dense {
            Some((lo, words)) => {
                let o = k.wrapping_sub(*lo);
                (o / 64) < words.len() as u64 && words[(o / 64) as usize] >> (o % 64) & 1 == 1
            }
            None => self.keys.binary_search(&k).is_ok(),
        }
    }

    /// The keys, ascending.
    pub fn keys(&self) -> &[u64] {
        &self.keys
    }

    /// The first key and one bit per key from it, when the keys are dense.
    pub fn bitset(&self) -> Option<(u64, &[u64])> {
        self.dense.as_ref().map(|(lo, words)| (*lo, words.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every test agrees with a plain membership check on every key of a
    /// block, through `test`, `mask` and (for a dictionary) its codes.
    #[test]
    fn tests_agree_with_a_plain_reference() {
        let keys: [u64; LANES] = std::array::from_fn(|i| if i % 7 == 0 { u64::MAX - 3 } else { (i as u64 * 37) % 500 });
        let sparse = vec![3, 99, 1 << 40, u64::MAX - 3];
        // Every 50th key up to 1.5 million: over DENSE_SET_SPAN, but few
        // enough bits per key for a bitset.
        let wide: Vec<u64> = (0..30_000u64).map(|k| k * 50 + 1).collect();
        let wide_set = KeyTest::set(wide.clone());
        assert!(matches!(&wide_set, KeyTest::Set(KeySet { dense: Some(_), .. })), "{wide_set:?}");
        assert!(matches!(KeyTest::set(sparse.clone()), KeyTest::Set(KeySet { dense: None, .. })));
        let tests = [
            (KeyTest::range(100, 200), Box::new(|k: u64| (100..=200).contains(&k)) as Box<dyn Fn(u64) -> bool>),
            (KeyTest::range(200, 100), Box::new(|_| false)),
            (KeyTest::nothing(), Box::new(|_| false)),
            (KeyTest::range(0, u64::MAX), Box::new(|_| true)),
            (KeyTest::set(vec![5, 74, 74, 111, 499]), Box::new(|k| [5, 74, 111, 499].contains(&k))),
            (KeyTest::set(sparse.clone()), Box::new(move |k| sparse.contains(&k))),
            (KeyTest::set(vec![]), Box::new(|_| false)),
            (wide_set, Box::new(move |k| wide.binary_search(&k).is_ok())),
        ];
        let mut dictionary: Vec<u64> = keys.to_vec();
        dictionary.sort_unstable();
        dictionary.dedup();
        let codes: [u64; LANES] = std::array::from_fn(|i| dictionary.binary_search(&keys[i]).unwrap() as u64);
        for (test, expected) in &tests {
            let mask = test.mask(&keys, 1000);
            let on_codes = test.on_dictionary(&dictionary);
            let code_mask = on_codes.mask(&codes, 1000);
            for (i, &k) in keys.iter().enumerate() {
                assert_eq!(test.test(k), expected(k), "{test:?} key {k}");
                assert_eq!(mask.get(i), i < 1000 && expected(k), "{test:?} lane {i}");
                assert_eq!(code_mask.get(i), i < 1000 && expected(k), "{test:?} code of lane {i}");
            }
        }
    }

    #[test]
    fn zones_over_approximate_never_under() {
        let tests = [KeyTest::range(10, 20), KeyTest::set(vec![10, 15, 30]), KeyTest::nothing()];
        for test in &tests {
            for min in 0..40u64 {
                for max in min..40 {
                    let (some_pass, some_fail) = test.zone(min, max);
                    let pass = (min..=max).any(|k| test.test(k));
                    let fail = (min..=max).any(|k| !test.test(k));
                    assert!(!pass || some_pass, "{test:?} [{min}, {max}] passes somewhere");
                    assert!(!fail || some_fail, "{test:?} [{min}, {max}] fails somewhere");
                }
            }
        }
    }
}
