//! Table statistics from zone maps and deltas.
//!
//! Row counts are exact (deletes are exact). A column's min, max and null
//! count are exact when the covered shards have no deleted rows: main
//! storage's zone maps are exact for every key encoding and for
//! dictionary strings, and delta values are read directly (deltas are
//! small). With deletions they are reported as inexact bounds, and with a
//! pushed filter everything is inexact.

use arrow_schema::DataType;
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, ScalarValue, Statistics};
use quiverdb_mapreducer::key_to_num;
use quiverdb_storage::main::Encoding;
use quiverdb_storage::types::{KeyNative, PhysicalType};
use quiverdb_storage::{DeltaColumnReader, ShardSnapshot, TableSnapshot};

use crate::convert::{bytes_to_scalar, num_to_scalar};

/// Min and max of one column over some rows: keys for fixed-width
/// columns, bytes for strings; `None` when unknown.
#[derive(Debug, Clone, Default)]
struct Range {
    keys: Option<(u64, u64)>,
    bytes: Option<(Vec<u8>, Vec<u8>)>,
    known: bool,
}

impl Range {
    fn empty() -> Self {
        Self { keys: None, bytes: None, known: true }
    }

    fn add_key(&mut self, k: u64) {
        self.keys = Some(match self.keys {
            None => (k, k),
            Some((a, b)) => (a.min(k), b.max(k)),
        });
    }

    fn add_bytes(&mut self, v: &[u8]) {
        match &mut self.bytes {
            None => self.bytes = Some((v.to_vec(), v.to_vec())),
            Some((a, b)) => {
                if v < a.as_slice() {
                    *a = v.to_vec();
                }
                if v > b.as_slice() {
                    *b = v.to_vec();
                }
            }
        }
    }
}

/// Statistics of `projection` over the shards `shards` of `snapshot`.
pub(crate) fn statistics(
    snapshot: &TableSnapshot,
    shards: &[usize],
    projection: &[usize],
    filtered: bool,
) -> Statistics {
    let schema = snapshot.schema();
    let rows: usize = shards.iter().map(|&s| snapshot.shard(s).live_rows()).sum();
    let any_deletes = shards.iter().any(|&s| snapshot.shard(s).deletes().is_some());
    let exact = !filtered && !any_deletes;
    let columns = projection
        .iter()
        .map(|&c| {
            let data_type = schema.field(c).data_type();
            let physical = schema.physical(c);
            let mut range = Range::empty();
            let mut nulls = 0usize;
            for &s in shards {
                let shard = snapshot.shard(s);
                nulls += main_stats(&shard, c, physical, &mut range);
                nulls += delta_stats(&shard, c, physical, &mut range);
            }
            let wrap = |v: ScalarValue| {
                if !safe_bound(&v) {
                    Precision::Absent
                } else if exact {
                    Precision::Exact(v)
                } else {
                    Precision::Inexact(v)
                }
            };
            let (min, max) = match (range.known, &range.keys, &range.bytes) {
                (true, Some((lo, hi)), _) => (
                    num_to_scalar(key_to_num(physical, *lo), data_type).map_or(Precision::Absent, wrap),
                    num_to_scalar(key_to_num(physical, *hi), data_type).map_or(Precision::Absent, wrap),
                ),
                (true, None, Some((lo, hi))) => (
                    bytes_to_scalar(lo, data_type).map_or(Precision::Absent, wrap),
                    bytes_to_scalar(hi, data_type).map_or(Precision::Absent, wrap),
                ),
                _ => (Precision::Absent, Precision::Absent),
            };
            let null_count = if exact { Precision::Exact(nulls) } else { Precision::Inexact(nulls) };
            let boolean = *data_type == DataType::Boolean;
            ColumnStatistics {
                null_count,
                min_value: if boolean { Precision::Absent } else { min },
                max_value: if boolean { Precision::Absent } else { max },
                ..ColumnStatistics::new_unknown()
            }
        })
        .collect();
    Statistics {
        num_rows: if filtered { Precision::Inexact(rows) } else { Precision::Exact(rows) },
        total_byte_size: Precision::Absent,
        column_statistics: columns,
    }
}

/// False for bounds DataFusion's range analysis cannot handle: it negates
/// a signed column's minimum and converts temporal bounds to nanoseconds
/// with overflow checks, failing a valid query at planning time for a
/// table holding `i64::MIN` or a date before 1677. Such a bound is left
/// unreported (MIN/MAX then scan instead of reading statistics).
fn safe_bound(v: &ScalarValue) -> bool {
    const NANOS_PER_DAY: i64 = 86_400_000_000_000;
    let within = |x: i64, per: i64| x.checked_mul(per).is_some();
    match v {
        ScalarValue::Int8(Some(x)) => *x != i8::MIN,
        ScalarValue::Int16(Some(x)) => *x != i16::MIN,
        ScalarValue::Int32(Some(x)) => *x != i32::MIN,
        ScalarValue::Int64(Some(x)) => *x != i64::MIN,
        ScalarValue::Date32(Some(d)) => within(i64::from(*d), NANOS_PER_DAY),
        ScalarValue::TimestampSecond(Some(x), _) => within(*x, 1_000_000_000),
        ScalarValue::TimestampMillisecond(Some(x), _) => within(*x, 1_000_000),
        ScalarValue::TimestampMicrosecond(Some(x), _) => within(*x, 1_000),
        ScalarValue::TimestampNanosecond(Some(x), _) => *x != i64::MIN,
        _ => true,
    }
}

/// Adds the main rows of column `c` of a shard to `range`; returns their nulls.
fn main_stats(shard: &ShardSnapshot<'_>, c: usize, physical: PhysicalType, range: &mut Range) -> usize {
    let Some(col) = shard.main().column(c) else { return 0 };
    match col.encoding() {
        Encoding::Keys(_) if physical != PhysicalType::Bytes => {
            if let Some((lo, hi)) = col.key_range() {
                range.add_key(lo);
                range.add_key(hi);
            }
        }
        Encoding::StrDict(dict) => {
            if let Some((lo, hi)) = col.key_range() {
                range.add_bytes(dict.dict_value(lo as usize));
                range.add_bytes(dict.dict_value(hi as usize));
            }
        }
        // Plain strings' zone maps hold only prefixes; wide decimals' keys are clamped.
        _ => range.known = false,
    }
    col.null_count()
}

/// Adds the delta rows of column `c` of a shard to `range`; returns their nulls.
fn delta_stats(shard: &ShardSnapshot<'_>, c: usize, physical: PhysicalType, range: &mut Range) -> usize {
    let len = shard.delta_len();
    if len == 0 {
        return 0;
    }
    let reader = shard.delta().reader(len);
    let col = reader.column(c);
    let mut nulls = 0;
    let mut words = [0u64; 16];
    for chunk in 0..reader.num_chunks() {
        let rows = reader.chunk_len(chunk);
        let mut validity = col.validity(chunk, &mut words).then_some(&words);
        if let Some(bits) = validity {
            let valid: usize =
                (0..rows).step_by(64).map(|i| (bits[i / 64] & low_bits(rows - i)).count_ones() as usize).sum();
            nulls += rows - valid;
            if valid == rows {
                // A nullable column's chunk with no null: read it as one.
                validity = None;
            }
        }
        add_delta_chunk(&col, physical, chunk, rows, validity, range);
    }
    nulls
}

/// Bit `i` of a chunk's validity words.
fn is_set(bits: &[u64; 16], i: usize) -> bool {
    bits[i / 64] >> (i % 64) & 1 == 1
}

/// A mask of the lowest `n` bits (all 64 for `n >= 64`).
fn low_bits(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1 << n) - 1 }
}

/// Adds the valid values of one delta chunk to `range`. `validity` holds
/// one bit per row (`None`: all valid).
fn add_delta_chunk(
    col: &DeltaColumnReader<'_>,
    physical: PhysicalType,
    chunk: usize,
    rows: usize,
    validity: Option<&[u64; 16]>,
    range: &mut Range,
) {
    let valid = |i: usize| validity.is_none_or(|bits| is_set(bits, i));
    fn keys<T: KeyNative>(values: &[T], rows: usize, validity: Option<&[u64; 16]>, range: &mut Range) {
        let values = &values[..rows.min(values.len())];
        // Branch-free folds the compiler vectorizes; no value leaves lo > hi.
        let bounds = |(lo, hi): (u64, u64), k: u64| (lo.min(k), hi.max(k));
        let (lo, hi) = match validity {
            None => values.iter().map(|v| v.to_key()).fold((u64::MAX, u64::MIN), bounds),
            Some(bits) => values
                .iter()
                .enumerate()
                .filter(|&(i, _)| is_set(bits, i))
                .map(|(_, v)| v.to_key())
                .fold((u64::MAX, u64::MIN), bounds),
        };
        if lo <= hi {
            range.add_key(lo);
            range.add_key(hi);
        }
    }
    match physical {
        PhysicalType::Boolean => {
            let mut words = [0u64; 16];
            col.booleans(chunk, &mut words);
            for i in (0..rows).filter(|&i| valid(i)) {
                range.add_key(words[i / 64] >> (i % 64) & 1);
            }
        }
        PhysicalType::Int8 => keys::<i8>(col.values(chunk), rows, validity, range),
        PhysicalType::Int16 => keys::<i16>(col.values(chunk), rows, validity, range),
        PhysicalType::Int32 => keys::<i32>(col.values(chunk), rows, validity, range),
        PhysicalType::Int64 => keys::<i64>(col.values(chunk), rows, validity, range),
        PhysicalType::UInt8 => keys::<u8>(col.values(chunk), rows, validity, range),
        PhysicalType::UInt16 => keys::<u16>(col.values(chunk), rows, validity, range),
        PhysicalType::UInt32 => keys::<u32>(col.values(chunk), rows, validity, range),
        PhysicalType::UInt64 => keys::<u64>(col.values(chunk), rows, validity, range),
        PhysicalType::Float32 => keys::<f32>(col.values(chunk), rows, validity, range),
        PhysicalType::Float64 => keys::<f64>(col.values(chunk), rows, validity, range),
        PhysicalType::Decimal128 => {
            // Decimals beyond the i64 range have no exact key.
            let values: &[i128] = col.values(chunk);
            if values.iter().take(rows).any(|v| *v < i64::MIN as i128 || *v > i64::MAX as i128) {
                range.known = false;
            }
            keys::<i128>(values, rows, validity, range);
        }
        PhysicalType::Bytes => {
            let bytes = col.bytes(chunk);
            for i in (0..rows).filter(|&i| valid(i)) {
                range.add_bytes(bytes.get(i));
            }
        }
    }
}
