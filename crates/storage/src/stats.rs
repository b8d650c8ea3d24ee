//! What a shard's stored rows say about a column without a scan: the
//! bounds of its values, its nulls, and a bound on its distinct values.
//!
//! ```text
//!   main   zone maps: exact keys for every key encoding, exact codes for
//!          dictionary strings (looked up in the dictionary); plain strings
//!          and wide decimals: unknown (their zones hold only bounds)
//!   delta  read directly (deltas are small), validity 64 rows at a time
//! ```
//!
//! Deleted rows count: these describe the stored rows, a superset of the
//! live ones.

use arrow_buffer::ArrowNativeType;

use crate::block::{BLOCK_SIZE, WORDS};
use crate::delta::DeltaColumnReader;
use crate::sketch::DistinctSketch;
use crate::snapshot::{ShardSnapshot, TableSnapshot};
use crate::types::{KeyNative, PhysicalType};

/// The smallest and largest non-null value of a column over some rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueRange {
    /// No non-null value.
    Empty,
    /// Keys of a fixed-width column ([`KeyNative`]: keys order like values).
    Keys {
        /// The smallest key.
        min: u64,
        /// The largest key.
        max: u64,
    },
    /// Byte strings of a string or binary column.
    Bytes {
        /// The smallest value.
        min: Vec<u8>,
        /// The largest value.
        max: Vec<u8>,
    },
    /// Not known from what storage keeps (plain strings' zone maps hold
    /// only prefixes; decimals beyond the `i64` key domain have no exact key).
    Unknown,
}

impl ValueRange {
    /// The range covering both.
    pub fn union(self, other: ValueRange) -> ValueRange {
        match (self, other) {
            (ValueRange::Empty, r) | (r, ValueRange::Empty) => r,
            (ValueRange::Keys { min: a, max: b }, ValueRange::Keys { min: c, max: d }) => {
                ValueRange::Keys { min: a.min(c), max: b.max(d) }
            }
            (ValueRange::Bytes { min: a, max: b }, ValueRange::Bytes { min: c, max: d }) => {
                ValueRange::Bytes { min: a.min(c), max: b.max(d) }
            }
            _ => ValueRange::Unknown,
        }
    }

    fn key(k: u64) -> ValueRange {
        ValueRange::Keys { min: k, max: k }
    }
}

/// What a shard's stored rows say about one column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnStats {
    /// Bounds of the non-null values.
    pub range: ValueRange,
    /// Null values.
    pub null_count: usize,
}

impl ShardSnapshot<'_> {
    /// Bounds and nulls of column `c` over the shard's stored rows (main
    /// and the snapshot's delta rows, deleted rows included).
    pub fn column_stats(&self, c: usize) -> ColumnStats {
        let (main_range, main_nulls) = match self.main().column(c) {
            None => (ValueRange::Empty, 0),
            Some(col) => {
                let range = match (col.keys(), col.string_dictionary(), col.key_range()) {
                    (_, _, None) => ValueRange::Empty,
                    (Some(_), _, Some((lo, hi))) if self.schema().physical(c) != PhysicalType::Bytes => {
                        ValueRange::Keys { min: lo, max: hi }
                    }
                    (_, Some(dict), Some((lo, hi))) => ValueRange::Bytes {
                        min: dict.value(lo as usize).to_vec(),
                        max: dict.value(hi as usize).to_vec(),
                    },
                    _ => ValueRange::Unknown,
                };
                (range, col.null_count())
            }
        };
        let (delta_range, delta_nulls) = self.delta_stats(c);
        ColumnStats { range: main_range.union(delta_range), null_count: main_nulls + delta_nulls }
    }

    /// An upper bound on the distinct values of column `c` over the
    /// shard's stored rows, NULL counted as one: per main column the span
    /// of its keys (integer-like columns and dictionary strings, whose keys
    /// are exact) or else its rows; one per delta row.
    pub fn distinct_bound(&self, c: usize) -> u64 {
        let mut bound = self.delta_len() as u64 + 1;
        if let Some(col) = self.main().column(c) {
            let exact_keys = !matches!(
                self.schema().physical(c),
                PhysicalType::Float32 | PhysicalType::Float64 | PhysicalType::Decimal128 | PhysicalType::Bytes
            );
            bound = bound.saturating_add(match col.key_range() {
                None => 0,
                Some((lo, hi)) if col.string_dictionary().is_some() => hi - lo + 1,
                Some((lo, hi)) if col.keys().is_some() && exact_keys => (hi - lo).saturating_add(1),
                Some(_) => col.len() as u64,
            });
        }
        bound
    }

    /// The distinct-value sketch of column `c` over the shard's main
    /// rows (see [`crate::MainColumn::distinct_sketch`]); `None` when the
    /// column's encoding has none. The delta's rows are not in it.
    pub fn main_sketch(&self, c: usize) -> Option<&DistinctSketch> {
        match self.main().column(c) {
            Some(col) => col.distinct_sketch(),
            None => Some(empty_sketch()),
        }
    }

    /// Bounds and nulls of column `c` over the snapshot's delta rows.
    fn delta_stats(&self, c: usize) -> (ValueRange, usize) {
        let len = self.delta_len();
        if len == 0 {
            return (ValueRange::Empty, 0);
        }
        let reader = self.delta().reader(len);
        let col = reader.column(c);
        let physical = self.schema().physical(c);
        let mut range = ValueRange::Empty;
        let mut nulls = 0;
        let mut words = [0u64; WORDS];
        for chunk in 0..reader.num_chunks() {
            let rows = reader.chunk_len(chunk);
            let valid = if col.validity(chunk, &mut words) {
                mask_rows(&mut words, rows);
                nulls += rows - words.iter().map(|w| w.count_ones() as usize).sum::<usize>();
                Some(&words)
            } else {
                None
            };
            range = range.union(chunk_range(&col, physical, chunk, rows, valid));
        }
        (range, nulls)
    }
}

/// Clears the bits of `words` at and past `rows`.
fn mask_rows(words: &mut [u64; WORDS], rows: usize) {
    for (i, w) in words.iter_mut().enumerate() {
        let first = i * 64;
        if rows <= first {
            *w = 0;
        } else if rows < first + 64 {
            *w &= (1u64 << (rows - first)) - 1;
        }
    }
}

/// Calls `f` with each row of a chunk of `rows` rows set in `valid` (every
/// row when `None`), reading the bitmap 64 rows at a time.
fn for_each_valid(rows: usize, valid: Option<&[u64; WORDS]>, mut f: impl FnMut(usize)) {
    match valid {
        None => (0..rows).for_each(f),
        Some(words) => {
            for (i, &word) in words.iter().enumerate() {
                let mut w = word;
                while w != 0 {
                    f(i * 64 + w.trailing_zeros() as usize);
                    w &= w - 1;
                }
            }
        }
    }
}

/// Bounds of the valid values of one delta chunk of `rows` rows.
fn chunk_range(
    col: &DeltaColumnReader<'_>,
    physical: PhysicalType,
    chunk: usize,
    rows: usize,
    valid: Option<&[u64; WORDS]>,
) -> ValueRange {
    fn keys<T: KeyNative + ArrowNativeType>(values: &[T], rows: usize, valid: Option<&[u64; WORDS]>) -> ValueRange {
        let values = &values[..rows.min(values.len())];
        // Branch-free folds the compiler vectorises; no value leaves lo > hi.
        let bounds = |(lo, hi): (u64, u64), k: u64| (lo.min(k), hi.max(k));
        let (lo, hi) = match valid {
            None => values.iter().map(|v| v.to_key()).fold((u64::MAX, u64::MIN), bounds),
            Some(_) => {
                let mut acc = (u64::MAX, u64::MIN);
                for_each_valid(values.len(), valid, |i| acc = bounds(acc, values[i].to_key()));
                acc
            }
        };
        if lo <= hi { ValueRange::Keys { min: lo, max: hi } } else { ValueRange::Empty }
    }
    match physical {
        PhysicalType::Boolean => {
            let mut bits = [0u64; WORDS];
            col.booleans(chunk, &mut bits);
            let mut all = [0u64; WORDS];
            all.iter_mut().for_each(|w| *w = u64::MAX);
            mask_rows(&mut all, rows);
            let valid = valid.unwrap_or(&all);
            let any_true = bits.iter().zip(valid).any(|(b, v)| b & v != 0);
            let any_false = bits.iter().zip(valid).any(|(b, v)| !b & v != 0);
            match (any_false, any_true) {
                (false, false) => ValueRange::Empty,
                (false, true) => ValueRange::key(1),
                (true, false) => ValueRange::key(0),
                (true, true) => ValueRange::Keys { min: 0, max: 1 },
            }
        }
        PhysicalType::Int8 => keys::<i8>(col.values(chunk), rows, valid),
        PhysicalType::Int16 => keys::<i16>(col.values(chunk), rows, valid),
        PhysicalType::Int32 => keys::<i32>(col.values(chunk), rows, valid),
        PhysicalType::Int64 => keys::<i64>(col.values(chunk), rows, valid),
        PhysicalType::UInt8 => keys::<u8>(col.values(chunk), rows, valid),
        PhysicalType::UInt16 => keys::<u16>(col.values(chunk), rows, valid),
        PhysicalType::UInt32 => keys::<u32>(col.values(chunk), rows, valid),
        PhysicalType::UInt64 => keys::<u64>(col.values(chunk), rows, valid),
        PhysicalType::Float32 => keys::<f32>(col.values(chunk), rows, valid),
        PhysicalType::Float64 => keys::<f64>(col.values(chunk), rows, valid),
        PhysicalType::Decimal128 => {
            // Decimals beyond the i64 range have no exact key.
            let values: &[i128] = col.values(chunk);
            let values = &values[..rows.min(values.len())];
            let mut wide = false;
            for_each_valid(values.len(), valid, |i| wide |= i64::try_from(values[i]).is_err());
            if wide { ValueRange::Unknown } else { keys::<i128>(values, rows, valid) }
        }
        PhysicalType::Bytes => {
            let bytes = col.bytes(chunk);
            let mut bounds: Option<(&[u8], &[u8])> = None;
            for_each_valid(rows.min(BLOCK_SIZE), valid, |i| {
                let v = bytes.get(i);
                bounds = Some(match bounds {
                    None => (v, v),
                    Some((lo, hi)) => (lo.min(v), hi.max(v)),
                });
            });
            bounds.map_or(ValueRange::Empty, |(lo, hi)| ValueRange::Bytes { min: lo.to_vec(), max: hi.to_vec() })
        }
    }
}

impl TableSnapshot {
    /// The estimated number of distinct non-null values of column `c` over
    /// the stored rows of `shards`: the shards' main sketches merged, plus
    /// the delta rows drawn like the main rows were (see
    /// [`grown_distinct`]; each delta row a new value when no shard has
    /// main rows), and never more than [`ShardSnapshot::distinct_bound`]
    /// allows. `None` when a shard's main column keeps no sketch (plain or
    /// FSST strings, wide decimals, nested columns).
    pub fn distinct_estimate(&self, shards: &[usize], c: usize) -> Option<u64> {
        let mut merged = DistinctSketch::new();
        let (mut main, mut delta, mut bound) = (0u64, 0u64, 0u64);
        for &s in shards {
            let shard = self.shard(s);
            merged.merge(shard.main_sketch(c)?);
            main += shard.main().rows() as u64;
            delta += shard.delta_len() as u64;
            bound = bound.saturating_add(shard.distinct_bound(c));
        }
        let estimate = match main {
            0 => delta,
            main => grown_distinct(merged.estimate() as f64, main as f64, delta as f64).round() as u64,
        };
        Some(estimate.min(bound))
    }
}

/// The sketch of a shard without main rows.
fn empty_sketch() -> &'static DistinctSketch {
    static EMPTY: std::sync::OnceLock<DistinctSketch> = std::sync::OnceLock::new();
    EMPTY.get_or_init(DistinctSketch::new)
}

/// The distinct values expected among `rows + more` rows when `rows` rows
/// held `distinct`, the rows drawn uniformly from a domain of N values:
/// `distinct = N (1 - e^(-rows / N))` gives N, then `N (1 - e^(-(rows +
/// more) / N))`. Rows of a few flags bring no new flags; rows whose values
/// were all distinct bring a new value each.
fn grown_distinct(distinct: f64, rows: f64, more: f64) -> f64 {
    let seen = |domain: f64, rows: f64| -domain * (-rows / domain).exp_m1();
    if rows <= 0.0 || distinct <= 0.0 {
        return distinct;
    }
    // Within a thousandth of all distinct (and a sketch may overshoot):
    // a domain too large to tell from unbounded.
    if distinct >= rows * 0.999 {
        return distinct.min(rows) + more;
    }
    // seen(N, rows) grows with N from below `distinct` (at N = distinct)
    // towards `rows`: bisect for it.
    let (mut lo, mut hi) = (distinct, distinct * 2.0);
    while seen(hi, rows) < distinct {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if seen(mid, rows) < distinct { lo = mid } else { hi = mid }
    }
    seen(hi, rows + more)
}

#[cfg(test)]
mod tests {
    use super::grown_distinct;

    /// The model against draws from a known domain: `rows` draws of
    /// `domain` values seen `distinct` times, then `more` draws.
    #[test]
    fn delta_rows_grow_the_distinct_count_as_the_main_rows_did() {
        let close = |got: f64, want: f64| (got - want).abs() <= 0.02 * want.max(1.0);
        // All distinct (keys): each further row is a new value.
        assert_eq!(grown_distinct(100_000.0, 100_000.0, 30_000.0), 130_000.0);
        // A sketch overshooting the row count counts as all distinct.
        assert_eq!(grown_distinct(103_000.0, 100_000.0, 30_000.0), 130_000.0);
        // Three flags over six million rows: no new flags.
        assert!(close(grown_distinct(3.0, 6_000_000.0, 40_000.0), 3.0));
        // 3,000 values drawn 100,000 times: the domain is saturated.
        assert!(close(grown_distinct(3_000.0, 100_000.0, 30_000.0), 3_000.0));
        // A domain of 1,000,000 drawn 100,000 times shows 95,163 values;
        // 200,000 draws show 181,269.
        assert!(close(grown_distinct(95_163.0, 100_000.0, 100_000.0), 181_269.0));
        assert_eq!(grown_distinct(0.0, 100.0, 50.0), 0.0, "an all-null column stays without values");
    }
}
