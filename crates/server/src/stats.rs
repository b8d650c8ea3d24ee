//! Table statistics for DataFusion, from what storage knows of each shard
//! ([`quiverdb_storage::ShardSnapshot::column_stats`]: zone maps and
//! deltas).
//!
//! Row counts are exact (deletes are exact). A column's min, max and null
//! count are exact when the covered shards have no deleted rows (storage's
//! bounds cover deleted rows too); with deletions they are reported as
//! inexact bounds, and with a pushed filter everything is inexact (the
//! scan then estimates its row count: `QuiverScanExec`'s statistics).
//! Distinct counts are always estimates, from storage's sketches
//! ([`TableSnapshot::distinct_estimate`]; absent for columns without one),
//! which the planner uses for the sizes of join results.

use arrow_schema::DataType;
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, ScalarValue, Statistics};
use quiverdb_mapreducer::key_to_num;
use quiverdb_storage::{TableSnapshot, ValueRange};

use crate::convert::{bytes_to_scalar, num_to_scalar};

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
            let mut range = ValueRange::Empty;
            let mut nulls = 0usize;
            for &s in shards {
                let stats = snapshot.shard(s).column_stats(c);
                range = range.union(stats.range);
                nulls += stats.null_count;
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
            let (min, max) = match &range {
                ValueRange::Keys { min, max } => (
                    num_to_scalar(key_to_num(physical, *min), data_type).map_or(Precision::Absent, wrap),
                    num_to_scalar(key_to_num(physical, *max), data_type).map_or(Precision::Absent, wrap),
                ),
                ValueRange::Bytes { min, max } => (
                    bytes_to_scalar(min, data_type).map_or(Precision::Absent, wrap),
                    bytes_to_scalar(max, data_type).map_or(Precision::Absent, wrap),
                ),
                ValueRange::Empty | ValueRange::Unknown => (Precision::Absent, Precision::Absent),
            };
            let null_count = if exact { Precision::Exact(nulls) } else { Precision::Inexact(nulls) };
            let boolean = *data_type == DataType::Boolean;
            let distinct = snapshot.distinct_estimate(shards, c).map(|n| n.min(rows as u64) as usize);
            ColumnStatistics {
                null_count,
                distinct_count: distinct.map_or(Precision::Absent, Precision::Inexact),
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
        ScalarValue::Date64(Some(x)) | ScalarValue::DurationMillisecond(Some(x)) => within(*x, 1_000_000),
        ScalarValue::DurationSecond(Some(x)) => within(*x, 1_000_000_000),
        ScalarValue::DurationMicrosecond(Some(x)) => within(*x, 1_000),
        ScalarValue::DurationNanosecond(Some(x)) => *x != i64::MIN,
        ScalarValue::TimestampSecond(Some(x), _) => within(*x, 1_000_000_000),
        ScalarValue::TimestampMillisecond(Some(x), _) => within(*x, 1_000_000),
        ScalarValue::TimestampMicrosecond(Some(x), _) => within(*x, 1_000),
        ScalarValue::TimestampNanosecond(Some(x), _) => *x != i64::MIN,
        _ => true,
    }
}
