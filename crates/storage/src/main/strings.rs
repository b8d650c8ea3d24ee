//! Encodings of variable-length bytes (strings and binary).
//!
//! ```text
//!   dictionary                         plain
//!   dict bytes  "apple" "kiwi" "pear"  bytes    "pearapplepear"
//!   dict offs   0 5 9 13               offsets  0 4 9 13   (bit-packed)
//!   codes       2 0 2  (bit-packed)
//! ```
//!
//! The dictionary is sorted bytewise, so code order is value order and
//! string comparisons become code comparisons. Dictionary bytes live in one
//! Arrow [`Buffer`], so a `Utf8View` decode points its views into it instead
//! of copying strings. Plain strings keep their offsets bit-packed per block
//! (consecutive offsets differ by a string's length, so a block of short
//! strings needs few bits per offset).

use arrow_buffer::Buffer;
use hashbrown::HashMap;

use super::bitpacked::BitPacked;

/// Sorted byte-string dictionary plus bit-packed codes. Every entry is the
/// value of at least one row (a null row holds the code of its placeholder
/// value, `""`): aggregation by code relies on it, and checkpoint
/// validation checks it.
#[derive(Debug, Clone)]
pub(crate) struct StrDict {
    offsets: Box<[u32]>,
    bytes: Buffer,
    codes: BitPacked,
}

/// Offsets + bytes, offsets bit-packed.
#[derive(Debug, Clone)]
pub(crate) struct StrPlain {
    offsets: BitPacked,
    bytes: Buffer,
}

/// A column of byte strings gathered for encoding: `offsets.len() == len + 1`.
#[derive(Debug, Default)]
pub(crate) struct RawBytes {
    pub(crate) offsets: Vec<u64>,
    pub(crate) bytes: Vec<u8>,
}

impl RawBytes {
    pub(crate) fn with_capacity(rows: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Self { offsets, bytes: Vec::with_capacity(bytes) }
    }

    pub(crate) fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        &self.bytes[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    #[inline]
    pub(crate) fn push(&mut self, v: &[u8]) {
        self.bytes.extend_from_slice(v);
        self.offsets.push(self.bytes.len() as u64);
    }
}

/// Distinct strings of `raw`, each mapped to its first-seen code, or `None`
/// once the dictionary bytes would exceed `byte_limit`.
pub(crate) fn distinct_bytes(raw: &RawBytes, byte_limit: usize) -> Option<HashMap<&[u8], u32>> {
    let mut map: HashMap<&[u8], u32> = HashMap::new();
    let mut dict_bytes = 0usize;
    for i in 0..raw.len() {
        let v = raw.get(i);
        let next = map.len() as u32;
        map.entry(v).or_insert_with(|| {
            dict_bytes += v.len() + 4;
            next
        });
        if dict_bytes > byte_limit {
            return None;
        }
    }
    Some(map)
}

impl StrDict {
    /// Encodes `raw` with its distinct values from [`distinct_bytes`].
    /// Returns `None` if the dictionary bytes exceed `u32` offsets.
    pub(crate) fn encode(raw: &RawBytes, distinct: &HashMap<&[u8], u32>) -> Option<Self> {
        let mut values: Vec<(&[u8], u32)> = distinct.iter().map(|(k, v)| (*k, *v)).collect();
        values.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let total: usize = values.iter().map(|v| v.0.len()).sum();
        u32::try_from(total).ok()?;
        let mut remap = vec![0u64; values.len()];
        let mut offsets = Vec::with_capacity(values.len() + 1);
        let mut bytes = Vec::with_capacity(total);
        offsets.push(0u32);
        for (sorted, (v, first_code)) in values.iter().enumerate() {
            remap[*first_code as usize] = sorted as u64;
            bytes.extend_from_slice(v);
            offsets.push(bytes.len() as u32);
        }
        let codes: Vec<u64> = (0..raw.len()).map(|i| remap[distinct[raw.get(i)] as usize]).collect();
        Some(Self { offsets: offsets.into(), bytes: Buffer::from_vec(bytes), codes: BitPacked::encode(&codes) })
    }

    /// A dictionary from its parts, for decoding a checkpoint
    /// ([`crate::durable::checkpoint`]), which validates before calling
    /// this that `offsets` (one more than the entries) start at 0, never
    /// descend and end at `bytes.len()`, that the entries ascend strictly
    /// (and are UTF-8 for string columns), and that every code, padding
    /// slots included, is below the number of entries.
    pub(crate) fn from_parts(offsets: Box<[u32]>, bytes: Buffer, codes: BitPacked) -> Self {
        debug_assert!(offsets.first() == Some(&0));
        debug_assert!(offsets.last().is_some_and(|&e| e as usize == bytes.len()));
        Self { offsets, bytes, codes }
    }

    /// Bytes a dictionary of `distinct` entries and `dict_bytes` bytes whose
    /// codes pack to `codes_bytes` occupies.
    pub(crate) fn size_for(distinct: usize, dict_bytes: usize, codes_bytes: usize) -> usize {
        dict_bytes + (distinct + 1) * 4 + codes_bytes
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.codes.len()
    }

    /// True when there are no values.
    pub(crate) fn is_empty(&self) -> bool {
        self.codes.is_empty()
    }

    /// Number of dictionary entries.
    pub(crate) fn dict_len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Dictionary entry `code`.
    #[inline]
    pub(crate) fn dict_value(&self, code: usize) -> &[u8] {
        &self.bytes[self.offsets[code] as usize..self.offsets[code + 1] as usize]
    }

    /// Dictionary offsets (`dict_len() + 1` entries).
    pub(crate) fn dict_offsets(&self) -> &[u32] {
        &self.offsets
    }

    /// Dictionary bytes.
    pub(crate) fn dict_bytes(&self) -> &Buffer {
        &self.bytes
    }

    /// The codes.
    pub(crate) fn codes(&self) -> &BitPacked {
        &self.codes
    }

    /// The first code whose value is `>= v` (dictionary size if none).
    pub(crate) fn lower_bound(&self, v: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.dict_len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.dict_value(mid) < v { lo = mid + 1 } else { hi = mid }
        }
        lo
    }

    /// The value at `row`.
    #[inline]
    pub(crate) fn get(&self, row: usize) -> &[u8] {
        self.dict_value(self.codes.get(row) as usize)
    }

    /// Heap bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        Self::size_for(self.dict_len(), self.bytes.len(), self.codes.size_bytes())
    }

    /// Bytes of the dictionary itself (values and offsets).
    pub(crate) fn dictionary_bytes(&self) -> usize {
        self.bytes.len() + self.offsets.len() * 4
    }
}

impl StrPlain {
    /// Encodes `raw`.
    pub(crate) fn encode(raw: RawBytes) -> Self {
        Self { offsets: BitPacked::encode(&raw.offsets), bytes: Buffer::from_vec(raw.bytes) }
    }

    /// Plain strings from their parts, for decoding a checkpoint
    /// ([`crate::durable::checkpoint`]), which validates before calling
    /// this that `offsets` (one more than the values) start at 0, never
    /// descend and end at `bytes.len()` (and for string columns fall on
    /// UTF-8 character boundaries of valid UTF-8 `bytes`).
    pub(crate) fn from_parts(offsets: BitPacked, bytes: Buffer) -> Self {
        debug_assert!(!offsets.is_empty());
        Self { offsets, bytes }
    }

    /// The size [`StrPlain::encode`] produces for `raw`.
    pub(crate) fn estimate_size(raw: &RawBytes) -> usize {
        BitPacked::estimate_size(&raw.offsets) + raw.bytes.len()
    }

    /// Offsets of the values (`len() + 1` entries).
    pub(crate) fn offsets(&self) -> &BitPacked {
        &self.offsets
    }

    /// The bytes of all values.
    pub(crate) fn bytes(&self) -> &Buffer {
        &self.bytes
    }

    /// Byte range of `row` within [`StrPlain::bytes`].
    #[inline]
    pub(crate) fn range(&self, row: usize) -> (usize, usize) {
        (self.offsets.get(row) as usize, self.offsets.get(row + 1) as usize)
    }

    /// The value at `row`.
    #[inline]
    pub(crate) fn get(&self, row: usize) -> &[u8] {
        let (s, e) = self.range(row);
        &self.bytes[s..e]
    }

    /// Heap bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        self.offsets.size_bytes() + self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(values: &[&str]) -> RawBytes {
        let mut r = RawBytes::with_capacity(values.len(), 0);
        for v in values {
            r.push(v.as_bytes());
        }
        r
    }

    #[test]
    fn dictionary_is_sorted() {
        let r = raw(&["pear", "apple", "pear", "", "kiwi"]);
        let d = StrDict::encode(&r, &distinct_bytes(&r, usize::MAX).unwrap()).unwrap();
        assert_eq!(d.dict_len(), 4);
        assert_eq!(d.dict_value(0), b"");
        assert_eq!(d.dict_value(3), b"pear");
        for i in 0..r.len() {
            assert_eq!(d.get(i), r.get(i));
        }
        assert_eq!(d.lower_bound(b"b"), 2);
        assert_eq!(d.lower_bound(b"zzz"), 4);
        assert!(distinct_bytes(&r, 5).is_none());
    }

    #[test]
    fn plain_round_trip() {
        let values: Vec<String> = (0..2500).map(|i| "x".repeat(i % 37)).collect();
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        let r = raw(&refs);
        let est = StrPlain::estimate_size(&r);
        let p = StrPlain::encode(r);
        assert_eq!(est, p.size_bytes());
        for (i, v) in refs.iter().enumerate() {
            assert_eq!(p.get(i), v.as_bytes());
        }
    }
}
