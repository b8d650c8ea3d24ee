//! Dictionary encoding of keys: a sorted dictionary plus bit-packed codes.
//!
//! ```text
//!   keys     700 3 700 42 3
//!   dict     [3, 42, 700]          sorted, so code order = value order
//!   codes    2 0 2 1 0             bit-packed per block (frame of reference)
//! ```
//!
//! Because the dictionary is sorted, `key < c` becomes `code < lower_bound(c)`:
//! range predicates, min and max run on codes without touching the values.

use hashbrown::HashMap;

use super::bitpacked::BitPacked;
use crate::block::BLOCK_SIZE;

/// A sorted key dictionary with bit-packed codes.
#[derive(Debug, Clone)]
pub(crate) struct Dict {
    values: Box<[u64]>,
    codes: BitPacked,
}

/// Distinct keys of a column, counted up to a limit.
pub(crate) fn distinct_keys(keys: &[u64], limit: usize) -> Option<HashMap<u64, u32>> {
    let mut map = HashMap::with_capacity(limit.min(keys.len()).min(4096));
    for &k in keys {
        let next = map.len() as u32;
        map.entry(k).or_insert(next);
        if map.len() > limit {
            return None;
        }
    }
    Some(map)
}

impl Dict {
    /// Encodes `keys` with the dictionary `distinct` (every key of `keys`
    /// mapped to an arbitrary unique code, as [`distinct_keys`] returns).
    pub(crate) fn encode(keys: &[u64], distinct: HashMap<u64, u32>) -> Self {
        let mut values: Vec<u64> = distinct.keys().copied().collect();
        values.sort_unstable();
        // Remap insertion codes to sorted codes.
        let mut remap = vec![0u64; values.len()];
        for (sorted, v) in values.iter().enumerate() {
            remap[distinct[v] as usize] = sorted as u64;
        }
        let mut codes = Vec::with_capacity(keys.len());
        codes.extend(keys.iter().map(|k| remap[distinct[k] as usize]));
        Self { values: values.into(), codes: BitPacked::encode(&codes) }
    }

    /// A dictionary from its parts, for decoding a checkpoint
    /// ([`crate::durable::checkpoint`]), which validates before calling
    /// this that `values` ascend strictly and that every code, padding
    /// slots included, is below `values.len()`.
    pub(crate) fn from_parts(values: Box<[u64]>, codes: BitPacked) -> Self {
        debug_assert!(values.windows(2).all(|w| w[0] < w[1]));
        Self { values, codes }
    }

    /// Size of a dictionary of `distinct` values whose codes pack to `codes_bytes`.
    pub(crate) fn size_for(distinct: usize, codes_bytes: usize) -> usize {
        distinct * 8 + codes_bytes
    }

    /// The sorted distinct keys.
    pub(crate) fn values(&self) -> &[u64] {
        &self.values
    }

    /// The codes (indexes into [`Dict::values`]).
    pub(crate) fn codes(&self) -> &BitPacked {
        &self.codes
    }

    /// The key at `row`.
    #[inline]
    pub(crate) fn get(&self, row: usize) -> u64 {
        self.values[self.codes.get(row) as usize]
    }

    /// Decodes block `block` into `out`.
    pub(crate) fn decode_block(&self, block: usize, out: &mut [u64; BLOCK_SIZE]) {
        self.codes.decode_block(block, out);
        for v in out.iter_mut() {
            // Codes of padding slots are the block's reference, a valid code.
            *v = self.values[*v as usize];
        }
    }

    /// Heap bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        Self::size_for(self.values.len(), self.codes.size_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_codes() {
        let keys: Vec<u64> = (0..3000u64).map(|i| (i * 7919) % 13 * 1000).collect();
        let d = Dict::encode(&keys, distinct_keys(&keys, 100).unwrap());
        assert_eq!(d.values().len(), 13);
        assert!(d.values().windows(2).all(|w| w[0] < w[1]));
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(d.get(i), k);
        }
        assert!(distinct_keys(&keys, 12).is_none());
    }
}
