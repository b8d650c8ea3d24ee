//! Row estimates for planning: how many records of some shards pass a
//! filter, from the zone maps of every main block and the filter run on a
//! small sample of the blocks they leave.
//!
//! A planner chooses join sides and orders by these numbers: a filter
//! keeping 1,300 of 200,000 parts must say so, or a hash join is built on
//! the wrong side. Zone maps alone cannot tell (an equality on a
//! dictionary column leaves every block a candidate), so the filter runs
//! on at most a fixed number of blocks spread evenly over the candidates:
//! a bounded cost, whatever the table's size.

use quiverdb_mapreducer::{Bits, LANES, Side};
use quiverdb_storage::TableSnapshot;

use crate::error::Result;
use crate::filter::{PreparedFilter, ShardFilter};
use crate::predicate::Predicate;

/// An estimate of the live records of shards `shards` (positions in
/// `snapshot`) passing `filter`: the rows of blocks whose zone maps say
/// every row passes, plus the other candidate rows (blocks whose zone maps
/// allow a match, and delta chunks) times the pass rate of at most
/// `sample` of those blocks, evaluated. Deleted records are discounted in
/// proportion. Exact when no block needs evaluating or all of them are
/// sampled and none is deleted.
pub fn estimate_matches(snapshot: &TableSnapshot, shards: &[usize], filter: &Predicate, sample: usize) -> Result<f64> {
    filter.validate(snapshot.schema())?;
    let prepared = PreparedFilter::new(filter, snapshot.schema())?;
    // Rows that certainly pass (by zone maps), and the blocks to evaluate:
    // (position in `filters`, block or chunk, rows).
    let mut certain = 0usize;
    let mut filters = Vec::new();
    let mut candidates: Vec<(usize, Side, usize)> = Vec::new();
    let (mut live, mut stored) = (0usize, 0usize);
    for &s in shards {
        let shard = snapshot.shard(s);
        if shard.live_rows() == 0 {
            continue;
        }
        live += shard.live_rows();
        let (main_rows, delta_rows) = (shard.main().rows(), shard.delta_len());
        stored += main_rows + delta_rows;
        let f = ShardFilter::new(shard, &prepared)?;
        let at = filters.len();
        for b in 0..main_rows.div_ceil(LANES) {
            let len = (main_rows - b * LANES).min(LANES);
            let z = f.zone(b);
            if !z.t {
                continue;
            }
            if z.f || z.n {
                candidates.push((at, Side::Main(b), len));
            } else {
                certain += len;
            }
        }
        for c in 0..delta_rows.div_ceil(LANES) {
            candidates.push((at, Side::Delta(c), (delta_rows - c * LANES).min(LANES)));
        }
        filters.push(f);
    }
    let candidate_rows: usize = candidates.iter().map(|&(_, _, len)| len).sum();
    let mut passing = certain as f64;
    if candidate_rows > 0 {
        let step = candidates.len().div_ceil(sample.max(1));
        let (mut evaluated, mut passed) = (0usize, 0usize);
        let mut out = Bits::EMPTY;
        for &(at, side, len) in candidates.iter().step_by(step) {
            filters[at].eval(side, None, &mut out)?;
            evaluated += len;
            passed += out.count();
        }
        passing += candidate_rows as f64 * passed as f64 / evaluated as f64;
    }
    Ok(if stored == 0 { 0.0 } else { passing * live as f64 / stored as f64 })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use quiverdb_mapreducer::{MapExpr, Scalar};
    use quiverdb_storage::{Database, TableOptions};

    use super::*;
    use crate::like::LikePattern;
    use crate::predicate::CmpOp;

    /// A rebuilt table of `rows` records: `k` = 0.., `s` = `"v{k % 100}"`,
    /// then `delta` more appended records.
    fn table(rows: i64, delta: i64) -> (Database, quiverdb_storage::Table) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        let db = Database::new();
        let t = db.create_table("t", &schema, TableOptions::default()).expect("table");
        let batch = |from: i64, to: i64| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from_iter_values(from..to)),
                    Arc::new(StringArray::from_iter_values((from..to).map(|k| format!("v{}", k % 100)))),
                ],
            )
            .expect("batch")
        };
        t.append(&batch(0, rows)).expect("append");
        t.rebuild().expect("rebuild");
        t.append(&batch(rows, rows + delta)).expect("append");
        (db, t)
    }

    #[test]
    fn estimates_are_near_the_true_counts() {
        let (_db, t) = table(300_000, 5_000);
        let snapshot = t.snapshot();
        let all: Vec<usize> = (0..snapshot.num_shards()).collect();
        let eq = |s: &str| Predicate::cmp(MapExpr::Column(1), CmpOp::Eq, Scalar::Bytes(s.as_bytes().to_vec()));
        let cases = [
            // Zone maps alone: exact.
            (Predicate::cmp(MapExpr::Column(0), CmpOp::Lt, Scalar::Int(100_000)), 100_000.0, 0.0),
            (Predicate::cmp(MapExpr::Column(0), CmpOp::GtEq, Scalar::Int(1_000_000)), 0.0, 0.0),
            // Sampled: within a few percent.
            (eq("v7"), 3_050.0, 0.1),
            (
                Predicate::Like { expr: MapExpr::Column(1), pattern: LikePattern::prefix(b"v1"), negated: false },
                33_550.0,
                0.1,
            ),
            (eq("v7").or(eq("v8")).negate(), 298_900.0, 0.05),
        ];
        for (filter, truth, tolerance) in cases {
            let estimate = estimate_matches(&snapshot, &all, &filter, 32).expect("estimate");
            assert!(
                (estimate - truth).abs() <= truth * tolerance + 1e-9,
                "{filter}: estimated {estimate}, true {truth}"
            );
        }
    }

    #[test]
    fn a_filter_on_no_shard_estimates_nothing() {
        let (_db, t) = table(10_000, 0);
        let filter = Predicate::cmp(MapExpr::Column(0), CmpOp::Eq, Scalar::Int(5));
        assert_eq!(estimate_matches(&t.snapshot(), &[], &filter, 8).expect("estimate"), 0.0);
    }
}
