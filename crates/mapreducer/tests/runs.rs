//! Run detection in `ShardMapReducer::stream`: ascending ids split once at
//! the main/delta boundary, unsorted ids (as ordered scans produce) are cut
//! into maximal runs on one side, and every run reaches the kernel block
//! by block, in order, with no id lost or repeated.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use quiverdb_mapreducer::{
    AggFunc, Aggregate, AggregateKernel, AggregateSpec, GatherAcc, GatherKernel, GatherSpec, Kernel, LANES, MapExpr,
    MapReducer, RecId, Scratch, Sel, ShardColumns, ShardMapReducer,
};
use quiverdb_storage::{Database, Table, TableOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One kernel call: (is_main, block or chunk, record ids).
type Call = (bool, usize, Vec<RecId>);

/// A kernel that records what it is given.
struct Recorder;

impl Kernel for Recorder {
    type Acc = Vec<Call>;

    fn columns(&self) -> Vec<usize> {
        vec![0]
    }

    fn process_main_block(
        &mut self,
        _: &ShardColumns<'_>,
        mut acc: Vec<Call>,
        block: usize,
        sel: Sel<'_>,
        _: &mut Scratch,
    ) -> Vec<Call> {
        acc.push((true, block, ids_of(sel, block * LANES)));
        acc
    }

    fn process_delta_block(
        &mut self,
        cols: &ShardColumns<'_>,
        mut acc: Vec<Call>,
        chunk: usize,
        sel: Sel<'_>,
        _: &mut Scratch,
    ) -> Vec<Call> {
        acc.push((false, chunk, ids_of(sel, cols.main_rows() + chunk * LANES)));
        acc
    }

    fn merge(mut a: Vec<Call>, b: Vec<Call>) -> Vec<Call> {
        a.extend(b);
        a
    }
}

fn ids_of(sel: Sel<'_>, base: usize) -> Vec<RecId> {
    let mut out = Vec::new();
    sel.for_each(|_, offset| out.push((base + offset) as RecId));
    out
}

/// A shard with 3,000 main rows and 2,500 delta rows; values = 10 × id.
fn shard_table() -> (Database, Table) {
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let db = Database::new();
    let table = db.create_table("t", &schema, TableOptions::default().with_background_rebuild(false)).expect("create");
    let batch = |from: i64, to: i64| {
        RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from_iter_values((from..to).map(|i| i * 10)))],
        )
        .expect("batch")
    };
    table.append(&batch(0, 3000)).expect("append");
    table.rebuild().expect("rebuild");
    table.append(&batch(3000, 5500)).expect("append");
    (db, table)
}

/// The runs `stream` must produce: maximal runs of consecutive ids that
/// share a side and a block (or chunk).
fn expected_runs(ids: &[RecId], main: usize) -> Vec<Call> {
    let key = |id: RecId| {
        let id = id as usize;
        if id < main { (true, id / LANES) } else { (false, (id - main) / LANES) }
    };
    let mut out: Vec<Call> = Vec::new();
    for &id in ids {
        let (side, block) = key(id);
        match out.last_mut() {
            Some((s, b, v)) if *s == side && *b == block => v.push(id),
            _ => out.push((side, block, vec![id])),
        }
    }
    out
}

#[test]
fn ascending_ids_split_at_the_delta_boundary() {
    let (_db, table) = shard_table();
    let snap = table.snapshot();
    let shard = snap.shard(0);
    assert_eq!((shard.main().rows(), shard.delta_len()), (3000, 2500));
    let ids: Vec<RecId> = (0..5500).filter(|i| i % 3 != 1).collect();
    let mut r = ShardMapReducer::open(shard, Recorder).expect("open");
    let calls = r.stream(Vec::new(), &ids);
    assert_eq!(calls, expected_runs(&ids, 3000));
    // Main blocks 0, 1, 2 then delta chunks 0, 1, 2.
    let sides: Vec<(bool, usize)> = calls.iter().map(|c| (c.0, c.1)).collect();
    assert_eq!(sides, [(true, 0), (true, 1), (true, 2), (false, 0), (false, 1), (false, 2)]);
}

#[test]
fn interleaved_ids_keep_their_order() {
    let (_db, table) = shard_table();
    let snap = table.snapshot();
    let shard = snap.shard(0);
    let mut rng = StdRng::seed_from_u64(5);
    for round in 0..200 {
        let len = rng.random_range(0..300);
        // Mostly runs of nearby ids on alternating sides, like merged sort output.
        let mut ids = Vec::with_capacity(len);
        while ids.len() < len {
            let start: RecId = rng.random_range(0..5500);
            for k in 0..rng.random_range(1..20u32) {
                ids.push((start + k).min(5499));
            }
        }
        ids.truncate(len);
        let mut r = ShardMapReducer::open(shard, Recorder).expect("open");
        let calls = r.stream(Vec::new(), &ids);
        assert_eq!(calls, expected_runs(&ids, 3000), "round {round}");
        let flat: Vec<RecId> = calls.iter().flat_map(|c| c.2.clone()).collect();
        assert_eq!(flat, ids, "round {round}: every id exactly once, in order");
    }
}

#[test]
fn interleaved_sums_match() {
    let (_db, table) = shard_table();
    let snap = table.snapshot();
    let spec = Arc::new(
        AggregateSpec::new(
            vec![],
            vec![Aggregate::new(AggFunc::Sum, MapExpr::col(0)), Aggregate::count_star()],
            snap.schema(),
        )
        .expect("spec"),
    );
    let mut rng = StdRng::seed_from_u64(6);
    let ids: Vec<RecId> = (0..2000).map(|_| rng.random_range(0..5500)).collect();
    let mut r =
        ShardMapReducer::open(snap.shard(0), AggregateKernel::new(Arc::clone(&spec)).expect("kernel")).expect("open");
    let mut acc = spec.new_acc();
    for chunk in ids.chunks(97) {
        acc = r.stream(acc, chunk);
    }
    let out = acc.finish().expect("finish");
    let sum = out.values[0].as_any().downcast_ref::<Int64Array>().expect("Int64").value(0);
    let count = out.values[1].as_any().downcast_ref::<Int64Array>().expect("Int64").value(0);
    assert_eq!(sum, ids.iter().map(|&i| i as i64 * 10).sum::<i64>());
    assert_eq!(count, 2000);
}

/// A gather accumulator's row bound only sizes its builders: whether the
/// bound is exact, too small or absent, the same rows come out in the
/// same batches.
#[test]
fn gather_row_bounds_do_not_change_the_batches() {
    let (_db, table) = shard_table();
    let snap = table.snapshot();
    let spec = Arc::new(GatherSpec::columns(snap.schema(), None, 1000).expect("spec"));
    let ids: Vec<RecId> = (0..5500).collect();
    let gather = |acc: GatherAcc| {
        let mut r =
            ShardMapReducer::open(snap.shard(0), GatherKernel::new(Arc::clone(&spec)).expect("kernel")).expect("open");
        let mut acc = acc;
        for chunk in ids.chunks(700) {
            acc = r.stream(acc, chunk);
        }
        acc.finish().expect("finish")
    };
    let want = gather(spec.new_acc());
    let values: Vec<i64> = want
        .iter()
        .flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().expect("Int64").values().to_vec())
        .collect();
    assert_eq!(values, (0..5500).map(|i| i * 10).collect::<Vec<_>>());
    for bound in [0, 1, 999, 1000, 2047, 5500, 100_000] {
        assert_eq!(gather(spec.new_acc_for(bound)), want, "bound {bound}");
    }
}

/// GROUP BY a dictionary string without nulls folds whole blocks by code
/// and maps codes to groups when the shard is finished: with `finish` the
/// groups are those of the rows streamed (whole blocks, then a partial
/// one), and an accumulator whose shard was never finished reports an
/// error instead of a result that would lack those rows.
#[test]
fn grouping_by_dictionary_code_needs_the_shard_finished() {
    let schema =
        Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false), Field::new("v", DataType::Int64, false)]));
    let db = Database::new();
    let table = db.create_table("t", &schema, TableOptions::default().with_background_rebuild(false)).expect("create");
    // 3,000 rows over 7 names; name_6 only in the last 952 rows.
    let name = |i: usize| if i >= 2048 { format!("name_{}", i % 7) } else { format!("name_{}", i % 6) };
    let names = arrow_array::StringArray::from_iter_values((0..3000).map(name));
    let values = Int64Array::from_iter_values(0..3000);
    table
        .append(&RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(names), Arc::new(values)]).expect("batch"))
        .expect("append");
    table.rebuild().expect("rebuild");
    let snap = table.snapshot();
    let spec = Arc::new(
        AggregateSpec::new(
            vec![MapExpr::col(0)],
            vec![Aggregate::new(AggFunc::Sum, MapExpr::col(1)), Aggregate::count_star()],
            snap.schema(),
        )
        .expect("spec"),
    );
    // Blocks 0 and 1 whole (by code), then `tail`: the ids 2048..2100 of
    // block 2 (by lookup, after the codes of blocks 0 and 1 are mapped),
    // or block 2 whole (every row by code).
    let stream = |tail: Option<bool>, finish: bool| {
        let mut r = ShardMapReducer::open(snap.shard(0), AggregateKernel::new(Arc::clone(&spec)).expect("kernel"))
            .expect("open");
        let mut acc = spec.new_acc();
        let range = |start: u32, end: u32| quiverdb_mapreducer::BlockSelection::Range { start, end };
        for block in 0..2u32 {
            let start = block * LANES as u32;
            acc = r.stream_block(acc, range(start, start + LANES as u32));
        }
        acc = match tail {
            Some(true) => r.stream(acc, &(2048..2100).collect::<Vec<RecId>>()),
            Some(false) => r.stream_block(acc, range(2048, 3000)),
            None => acc,
        };
        if finish { r.finish(acc) } else { acc }
    };
    let groups = |acc: quiverdb_mapreducer::AggregateAcc| {
        let out = acc.finish().expect("finish");
        let keys = out.keys[0].as_any().downcast_ref::<arrow_array::StringArray>().expect("Utf8");
        let sums = out.values[0].as_any().downcast_ref::<Int64Array>().expect("Int64");
        let counts = out.values[1].as_any().downcast_ref::<Int64Array>().expect("Int64");
        let mut got: Vec<(String, i64, i64)> = (0..arrow_array::Array::len(keys))
            .map(|g| (keys.value(g).to_string(), sums.value(g), counts.value(g)))
            .collect();
        got.sort();
        got
    };
    let reference = |rows: std::ops::Range<usize>| {
        let mut want: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
        for i in rows {
            let e = want.entry(name(i)).or_default();
            e.0 += i as i64;
            e.1 += 1;
        }
        want.into_iter().map(|(k, (s, c))| (k, s, c)).collect::<Vec<_>>()
    };
    assert_eq!(groups(stream(Some(true), true)), reference(0..2100));
    assert_eq!(groups(stream(Some(false), true)), reference(0..3000));
    // Only the whole blocks 0 and 1: name_6 has no row there, and no group.
    assert_eq!(groups(stream(None, true)), reference(0..2048));

    let err = stream(None, false).finish().expect_err("an unfinished shard");
    assert!(err.to_string().contains("MapReducer::finish"), "{err}");
}
