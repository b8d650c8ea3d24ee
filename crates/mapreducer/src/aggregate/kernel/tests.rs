//! `AggregateKernel` end to end through `ShardMapReducer`, against a
//! `BTreeMap` aggregation of the rows storage decodes.
//!
//! ```text
//!   shard 0: 4,096 main rows            shard 1: 2,500 main + 1,500 delta rows
//!   each block / chunk streamed whole (main: by code or by value), as a
//!   partial range, a mask, ids, or skipped; or a shard as unsorted ids
//!   one accumulator across shards (kernel reused) │ one per shard, merged
//!                                               │ two per shard, merged
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use quiverdb_storage::block::WORDS;
use quiverdb_storage::{Database, EncodingKind, RecId, Table, TableSnapshot};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::super::acc::AggregateOutput;
use super::super::spec::Aggregate;
use super::*;
use crate::scalar::Scalar;
use crate::test_tables::{Cell, cell, ints, table};
use crate::{ArithOp, BlockSelection, MapReducer, ShardMapReducer};

const K: usize = 0;
const S: usize = 1;
const CAT: usize = 2;
const V: usize = 3;
const F: usize = 4;
const D: usize = 5;
const U: usize = 6;
const NAME: usize = 7;
const SEQ: usize = 8;
const RUNS: usize = 9;
const KONST: usize = 10;
const CAT_NULL: usize = 11;
const WIDE: usize = 12;
const BIG: usize = 13;

const SHARD_CAPACITY: usize = 4096;
const FIRST_ROWS: usize = 6596;
const LATER_ROWS: usize = 1500;

const NAMES: [&str; 25] = [
    "ash", "birch", "cedar", "dogwood", "elm", "fir", "ginkgo", "hazel", "ironwood", "juniper", "katsura", "larch",
    "maple", "nutmeg", "oak", "pine", "quince", "rowan", "spruce", "teak", "umbrella", "viburnum", "willow", "yew",
    "zelkova",
];

struct Fixture {
    _db: Database,
    table: Table,
    /// Each shard's rows, decoded by storage.
    batches: Vec<RecordBatch>,
}

/// Two shards: shard 0 all main storage, shard 1 main storage and a
/// delta. With `same_names`, both shards' dictionaries of `s` are equal
/// (a kernel keeps its code → group cache from one to the next).
fn fixture(seed: u64, same_names: bool) -> Fixture {
    let mut rng = StdRng::seed_from_u64(seed);
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("s", DataType::Utf8, false),
        Field::new("cat", DataType::Int32, false),
        Field::new("v", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new("d", DataType::Decimal128(12, 2), true),
        Field::new("u", DataType::UInt32, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("seq", DataType::Int64, false),
        Field::new("runs", DataType::Int16, false),
        Field::new("konst", DataType::Int32, false),
        Field::new("cat_null", DataType::Int32, true),
        Field::new("wide", DataType::Int64, false),
        Field::new("big", DataType::Int64, false),
    ]));
    let mut batch = |first: usize, n: usize| {
        let r = &mut rng;
        // Each shard's first 20 rows hold all its names (its dictionary);
        // the others a few names that change every 300 rows, so that most
        // blocks have rows of only some codes.
        let names: Vec<&str> = (first..first + n)
            .map(|i| {
                let shift = if i >= SHARD_CAPACITY && !same_names { 5 } else { 0 };
                let local = i % SHARD_CAPACITY;
                let name = if local < 20 { local } else { (local / 300 + r.random_range(0..3)) % 20 };
                NAMES[shift + name]
            })
            .collect();
        let floats: Vec<Option<f64>> =
            (0..n).map(|_| (!r.random_bool(0.1)).then(|| r.random_range(-400..400) as f64 / 4.0)).collect();
        let labels: Vec<Option<String>> =
            (0..n).map(|_| (!r.random_bool(0.1)).then(|| format!("label {}", r.random_range(0..200)))).collect();
        let columns: Vec<ArrayRef> = vec![
            ints(DataType::Int64, r, n, 0.03, |r, _| {
                if r.random_bool(0.02) { r.random_range(-1 << 50..1 << 50) } else { r.random_range(0..60) }
            }),
            Arc::new(StringArray::from(names)),
            ints(DataType::Int32, r, n, 0.0, |r, _| r.random_range(-250..250)),
            ints(DataType::Int64, r, n, 0.1, |r, _| r.random_range(-1_000_000..1_000_000)),
            Arc::new(Float64Array::from(floats)),
            ints(DataType::Decimal128(12, 2), r, n, 0.1, |r, _| r.random_range(-500..500) * 1_000_003),
            // 300 values spread far beyond a group map's window.
            ints(DataType::UInt32, r, n, 0.0, |r, _| r.random_range(0..300) * 3_000_017),
            Arc::new(StringArray::from(labels)),
            ints(DataType::Int64, r, n, 0.0, |_, i| 3 * (first + i) as i64 - 5000),
            ints(DataType::Int16, r, n, 0.0, |_, i| ((first + i) / 100 % 7) as i64 * 1000 - 3000),
            ints(DataType::Int32, r, n, 0.0, |_, i| if first + i < FIRST_ROWS { 7 } else { 9 }),
            ints(DataType::Int32, r, n, 0.05, |r, _| r.random_range(-250..250)),
            ints(DataType::Int64, r, n, 0.0, |r, _| r.random_range(-1_000_000_000_000..1_000_000_000_000)),
            ints(DataType::Int64, r, n, 0.0, |r, _| r.random_range(-(1 << 62)..1 << 62)),
        ];
        RecordBatch::try_new(Arc::clone(&schema), columns).unwrap()
    };
    let (first, later) = (batch(0, FIRST_ROWS), batch(FIRST_ROWS, LATER_ROWS));
    let (db, table) = table(&schema, SHARD_CAPACITY, &first, &later);
    let snap = table.snapshot();
    let layout: Vec<(usize, usize)> = snap.shards().map(|s| (s.main().rows(), s.delta_len())).collect();
    assert_eq!(layout, [(4096, 0), (2500, 1500)]);
    for shard in snap.shards() {
        let kind = |c: usize| shard.main().column(c).unwrap().kind();
        assert_eq!(kind(S), EncodingKind::Dictionary, "s groups by code");
        assert_eq!(kind(SEQ), EncodingKind::Sequence);
        assert_eq!(kind(RUNS), EncodingKind::RunEnd);
        assert_eq!(kind(KONST), EncodingKind::Constant);
        assert_eq!(kind(V), EncodingKind::BitPacked);
    }
    let batches = snap.shards().map(|s| s.to_record_batch(None).unwrap()).collect();
    Fixture { _db: db, table, batches }
}

/// A group key, and how the reference computes it from a row.
#[derive(Debug, Clone, Copy)]
enum Key {
    Col(usize),
    /// `col % m`, `m` a literal of the column's type.
    Rem(usize, i64),
    /// `CAST(col AS UInt64)`.
    U64(usize),
}

impl Key {
    fn expr(self, schema: &Schema) -> MapExpr {
        match self {
            Key::Col(c) => MapExpr::col(c),
            Key::Rem(c, m) => {
                MapExpr::col(c).arith(ArithOp::Rem, MapExpr::lit(Scalar::Int(m), schema.field(c).data_type().clone()))
            }
            Key::U64(c) => MapExpr::col(c).cast(DataType::UInt64),
        }
    }

    fn eval(self, batch: &RecordBatch, row: usize) -> Cell {
        match self {
            Key::Col(c) | Key::U64(c) => cell(batch.column(c).as_ref(), row),
            Key::Rem(c, m) => match cell(batch.column(c).as_ref(), row) {
                Cell::Int(x) => Cell::Int(x % m as i128),
                other => other,
            },
        }
    }
}

/// An aggregate's input, and how the reference computes it from a row.
#[derive(Debug, Clone, Copy)]
enum Input {
    Star,
    Col(usize),
    /// `v * 2 + k`.
    TwiceVPlusK,
}

impl Input {
    fn expr(self) -> Option<MapExpr> {
        match self {
            Input::Star => None,
            Input::Col(c) => Some(MapExpr::col(c)),
            Input::TwiceVPlusK => Some(
                MapExpr::col(V)
                    .arith(ArithOp::Mul, MapExpr::lit(Scalar::Int(2), DataType::Int64))
                    .arith(ArithOp::Add, MapExpr::col(K)),
            ),
        }
    }

    fn eval(self, batch: &RecordBatch, row: usize) -> Cell {
        match self {
            Input::Star => Cell::Int(1),
            Input::Col(c) => cell(batch.column(c).as_ref(), row),
            Input::TwiceVPlusK => match (cell(batch.column(V).as_ref(), row), cell(batch.column(K).as_ref(), row)) {
                (Cell::Int(v), Cell::Int(k)) => Cell::Int(v * 2 + k),
                _ => Cell::Null,
            },
        }
    }
}

fn aggregates(count_star: bool) -> Vec<(AggFunc, Input)> {
    use AggFunc::*;
    let mut out = vec![
        (Count, Input::Col(V)),
        (Sum, Input::Col(V)),
        (Min, Input::Col(V)),
        (Max, Input::Col(V)),
        (Avg, Input::Col(V)),
        (Sum, Input::Col(F)),
        (Min, Input::Col(F)),
        (Max, Input::Col(F)),
        (Avg, Input::Col(F)),
        (Sum, Input::Col(D)),
        (Avg, Input::Col(D)),
        (Min, Input::Col(D)),
        (Sum, Input::Col(U)),
        (Max, Input::Col(U)),
        (Min, Input::Col(NAME)),
        (Max, Input::Col(NAME)),
        (Count, Input::Col(NAME)),
        (Max, Input::Col(S)),
        (Sum, Input::Col(SEQ)),
        (Min, Input::Col(SEQ)),
        (Sum, Input::Col(RUNS)),
        (Max, Input::Col(RUNS)),
        (Sum, Input::Col(KONST)),
        (Min, Input::Col(KONST)),
        (Sum, Input::TwiceVPlusK),
        (Count, Input::TwiceVPlusK),
        // Sums of values near 2^62 leave i64 (AVG does not mind): the
        // i64 partials must never take them all.
        (Avg, Input::Col(BIG)),
    ];
    if count_star {
        out.insert(3, (CountStar, Input::Star));
    }
    out
}

fn spec(table: &Table, keys: &[Key], aggs: &[(AggFunc, Input)]) -> Arc<AggregateSpec> {
    let schema = table.arrow_schema();
    let group_by = keys.iter().map(|k| k.expr(schema)).collect();
    let aggregates = aggs
        .iter()
        .map(|&(f, i)| match i.expr() {
            None => Aggregate::count_star(),
            Some(e) => Aggregate::new(f, e),
        })
        .collect();
    Arc::new(AggregateSpec::new(group_by, aggregates, table.schema()).unwrap())
}

/// One aggregate of one group from its input cells (NULLs dropped) and
/// its row count.
fn reduce(func: AggFunc, output: &DataType, values: &[Cell], rows: usize) -> Cell {
    let ints = || values.iter().map(|c| if let Cell::Int(v) = c { *v } else { panic!("{c:?}") });
    let floats = || values.iter().map(|c| if let Cell::Float(b) = c { f64::from_bits(*b) } else { panic!("{c:?}") });
    let float = matches!(values.first(), Some(Cell::Float(_)));
    match func {
        AggFunc::CountStar => return Cell::Int(rows as i128),
        AggFunc::Count => return Cell::Int(values.len() as i128),
        _ if values.is_empty() => return Cell::Null,
        _ => {}
    }
    let n = values.len();
    match func {
        AggFunc::Sum if float => Cell::Float(floats().sum::<f64>().to_bits()),
        AggFunc::Sum => Cell::Int(ints().sum()),
        AggFunc::Avg if float => Cell::Float((floats().sum::<f64>() / n as f64).to_bits()),
        AggFunc::Avg => match output {
            // Four more digits of scale, truncated toward zero (as DataFusion).
            DataType::Decimal128(..) => Cell::Int(ints().sum::<i128>() * 10_000 / n as i128),
            _ => Cell::Float((ints().sum::<i128>() as f64 / n as f64).to_bits()),
        },
        AggFunc::Min if float => Cell::Float(floats().min_by(f64::total_cmp).unwrap().to_bits()),
        AggFunc::Max if float => Cell::Float(floats().max_by(f64::total_cmp).unwrap().to_bits()),
        AggFunc::Min => values.iter().min().unwrap().clone(),
        AggFunc::Max => values.iter().max().unwrap().clone(),
        AggFunc::CountStar | AggFunc::Count => unreachable!(),
    }
}

type Groups = BTreeMap<Vec<Cell>, Vec<Cell>>;

/// The groups of the rows `selected` (shard, row) of `fx`.
fn reference(
    fx: &Fixture,
    spec: &AggregateSpec,
    keys: &[Key],
    aggs: &[(AggFunc, Input)],
    selected: &[(usize, usize)],
) -> Groups {
    let mut rows: BTreeMap<Vec<Cell>, Vec<(usize, usize)>> = BTreeMap::new();
    for &(shard, row) in selected {
        let batch = &fx.batches[shard];
        rows.entry(keys.iter().map(|k| k.eval(batch, row)).collect()).or_default().push((shard, row));
    }
    if keys.is_empty() {
        rows.entry(Vec::new()).or_default();
    }
    rows.into_iter()
        .map(|(key, rows)| {
            let values = aggs
                .iter()
                .zip(spec.output_types())
                .map(|(&(f, input), out)| {
                    let cells: Vec<Cell> =
                        rows.iter().map(|&(s, r)| input.eval(&fx.batches[s], r)).filter(|c| *c != Cell::Null).collect();
                    reduce(f, out, &cells, rows.len())
                })
                .collect();
            (key, values)
        })
        .collect()
}

fn groups_of(out: &AggregateOutput) -> Groups {
    let n = out.values.first().map_or(0, |v| v.len());
    let mut groups = Groups::new();
    for g in 0..n {
        let key = out.keys.iter().map(|k| cell(k.as_ref(), g)).collect();
        let values = out.values.iter().map(|v| cell(v.as_ref(), g)).collect();
        assert!(groups.insert(key, values).is_none(), "group {g} appears twice");
    }
    groups
}

/// How a unit (a main block or delta chunk) of a shard is streamed.
#[derive(Debug, Clone)]
enum Unit {
    Whole { main: bool, start: RecId, end: RecId },
    Range { start: RecId, end: RecId },
    Mask { start: RecId, len: u32, mask: [u64; WORDS] },
    Ids(Vec<RecId>),
}

/// A random way to stream shard `shard` of `snap`: its units in a random
/// order (or unsorted ids, as ordered scans give), and the rows selected.
fn plan(rng: &mut StdRng, snap: &TableSnapshot, shard: usize) -> (Vec<Unit>, Vec<(usize, usize)>) {
    let s = snap.shard(shard);
    let main = s.main().rows();
    let mut units = Vec::new();
    let mut selected = Vec::new();
    if rng.random_bool(0.15) {
        let mut ids: Vec<RecId> = (0..s.rows() as RecId).filter(|_| rng.random_bool(0.3)).collect();
        ids.shuffle(rng);
        selected.extend(ids.iter().map(|&id| (shard, id as usize)));
        units.extend(ids.chunks(700).map(|c| Unit::Ids(c.to_vec())));
        return (units, selected);
    }
    let blocks = (0..main).step_by(LANES).map(|a| (true, a, (a + LANES).min(main)));
    let chunks = (main..s.rows()).step_by(LANES).map(|a| (false, a, (a + LANES).min(s.rows())));
    for (is_main, a, b) in blocks.chain(chunks) {
        // Whole blocks (40%), prefixes as a scan with a LIMIT reads
        // (15%), other ranges, masks, ids (15% each) or nothing (10%).
        let rows: Vec<usize> = match rng.random_range(0..20) {
            0..8 => {
                units.push(Unit::Whole { main: is_main, start: a as RecId, end: b as RecId });
                (a..b).collect()
            }
            mode @ 8..14 => {
                let lo = if mode < 11 { a } else { rng.random_range(a..b) };
                let hi = rng.random_range(lo + 1..=b);
                units.push(Unit::Range { start: lo as RecId, end: hi as RecId });
                (lo..hi).collect()
            }
            14..17 => {
                let mut mask = [0u64; WORDS];
                let rows: Vec<usize> = (a..b).filter(|_| rng.random_bool(0.5)).collect();
                rows.iter().for_each(|&r| mask[(r - a) / 64] |= 1 << ((r - a) % 64));
                units.push(Unit::Mask { start: a as RecId, len: (b - a) as u32, mask });
                rows
            }
            17..19 => {
                let rows: Vec<usize> = (a..b).filter(|_| rng.random_bool(0.2)).collect();
                units.push(Unit::Ids(rows.iter().map(|&r| r as RecId).collect()));
                rows
            }
            _ => Vec::new(),
        };
        selected.extend(rows.into_iter().map(|r| (shard, r)));
    }
    units.shuffle(rng);
    (units, selected)
}

/// What streaming observed: whole main blocks after which the
/// accumulator held rows by code (or by value) for the shard's end.
#[derive(Debug, Default)]
struct Seen {
    whole_main: usize,
    deferred: usize,
}

fn stream(
    r: &mut ShardMapReducer<'_, AggregateKernel>,
    mut acc: AggregateAcc,
    units: &[Unit],
    seen: &mut Seen,
) -> AggregateAcc {
    for unit in units {
        acc = match unit {
            Unit::Whole { main, start, end } => {
                let acc = r.stream_block(acc, BlockSelection::Range { start: *start, end: *end });
                if *main {
                    seen.whole_main += 1;
                    seen.deferred += (acc.0.deferred > 0) as usize;
                }
                acc
            }
            Unit::Range { start, end } => r.stream_block(acc, BlockSelection::Range { start: *start, end: *end }),
            Unit::Mask { start, len, mask } => {
                r.stream_block(acc, BlockSelection::Mask { start: *start, len: *len, mask })
            }
            Unit::Ids(ids) => r.stream(acc, ids),
        };
    }
    r.finish(acc)
}

/// How accumulators are used across shards.
#[derive(Debug, Clone, Copy, PartialEq)]
enum How {
    /// One accumulator; one kernel moved from shard to shard.
    OneAcc,
    /// One accumulator per shard, merged.
    PerShard,
    /// Two accumulators per shard (its units split), merged.
    Split,
}

/// Runs `spec` over `fx` as `how` says, with random plans; returns the
/// output, the reference, what streaming saw, and the kernel used last.
fn run(
    fx: &Fixture,
    spec: &Arc<AggregateSpec>,
    keys: &[Key],
    aggs: &[(AggFunc, Input)],
    how: How,
    seed: u64,
) -> (AggregateOutput, Groups, Seen, AggregateKernel) {
    let mut rng = StdRng::seed_from_u64(seed);
    let snap = fx.table.snapshot();
    let mut seen = Seen::default();
    let mut selected = Vec::new();
    let mut kernel = AggregateKernel::new(Arc::clone(spec)).unwrap();
    let mut scratch = Scratch::default();
    let mut total = spec.new_acc();
    for shard in 0..snap.num_shards() {
        let (units, rows) = plan(&mut rng, &snap, shard);
        selected.extend(rows);
        let acc = match how {
            How::OneAcc => {
                let mut r = ShardMapReducer::open_with(snap.shard(shard), kernel, scratch).unwrap();
                total = stream(&mut r, total, &units, &mut seen);
                (kernel, scratch) = r.into_parts();
                continue;
            }
            How::PerShard => {
                let mut r =
                    ShardMapReducer::open(snap.shard(shard), AggregateKernel::new(Arc::clone(spec)).unwrap()).unwrap();
                let acc = stream(&mut r, spec.new_acc(), &units, &mut seen);
                (kernel, _) = r.into_parts();
                acc
            }
            How::Split => {
                let cut = rng.random_range(0..=units.len());
                let mut r1 =
                    ShardMapReducer::open(snap.shard(shard), AggregateKernel::new(Arc::clone(spec)).unwrap()).unwrap();
                let mut r2 =
                    ShardMapReducer::open(snap.shard(shard), AggregateKernel::new(Arc::clone(spec)).unwrap()).unwrap();
                let a = stream(&mut r1, spec.new_acc(), &units[..cut], &mut seen);
                let b = stream(&mut r2, spec.new_acc(), &units[cut..], &mut seen);
                (kernel, _) = r2.into_parts();
                a.merge(b)
            }
        };
        total = total.merge(acc);
    }
    assert!(total.error().is_none(), "{:?}", total.error());
    let want = reference(fx, spec, keys, aggs, &selected);
    (total.finish().unwrap(), want, seen, kernel)
}

/// Runs `keys` with every accumulator layout and several plans, checking
/// the groups against the reference; returns what streaming saw.
fn check(fx: &Fixture, keys: &[Key], count_star: bool, seed: u64) -> (Seen, AggregateKernel) {
    let aggs = aggregates(count_star);
    let spec = spec(&fx.table, keys, &aggs);
    let mut seen = Seen::default();
    let mut last = None;
    for (i, how) in [How::OneAcc, How::PerShard, How::Split].into_iter().enumerate() {
        let (out, want, s, kernel) = run(fx, &spec, keys, &aggs, how, seed + i as u64);
        let got = groups_of(&out);
        assert_eq!(got.len(), want.len(), "{keys:?} {how:?}: groups");
        for ((gk, gv), (wk, wv)) in got.iter().zip(&want) {
            assert_eq!(gk, wk, "{keys:?} {how:?}: keys");
            for (a, ((g, w), (f, input))) in gv.iter().zip(wv).zip(&aggs).enumerate() {
                assert_eq!(g, w, "{keys:?} {how:?}: group {gk:?}, aggregate {a} {f:?}({input:?})");
            }
        }
        seen.whole_main += s.whole_main;
        seen.deferred += s.deferred;
        if how == How::OneAcc {
            last = Some(kernel);
        }
    }
    assert!(seen.whole_main > 0, "{keys:?}: {seen:?}");
    (seen, last.unwrap())
}

#[test]
fn without_keys_every_encoding_and_selection_agrees() {
    let fx = fixture(1, true);
    let (seen, _) = check(&fx, &[], true, 10);
    assert_eq!(seen.deferred, 0, "nothing waits for the shard's end");
}

#[test]
fn group_by_an_integer_column_agrees() {
    let fx = fixture(2, true);
    let (seen, _) = check(&fx, &[Key::Col(K)], true, 20);
    assert_eq!(seen.deferred, 0, "integer columns group row by row");
}

/// UInt32 keys (the I64 domain) and UInt64 keys (hashed).
#[test]
fn group_by_unsigned_keys_agrees() {
    let fx = fixture(12, true);
    check(&fx, &[Key::Col(U)], true, 23);
    check(&fx, &[Key::U64(U)], true, 26);
}

#[test]
fn group_by_float_and_decimal_keys_agrees() {
    let fx = fixture(3, true);
    check(&fx, &[Key::Col(F)], true, 30);
    check(&fx, &[Key::Col(D)], true, 33);
}

/// A nullable string: row by row, with a NULL group.
#[test]
fn group_by_a_nullable_string_agrees() {
    let fx = fixture(13, true);
    let (seen, _) = check(&fx, &[Key::Col(NAME)], true, 36);
    assert_eq!(seen.deferred, 0);
}

/// A dictionary string without NULLs: whole main blocks fold by code,
/// mixed with rows looked up one by one, with or without a COUNT(*).
fn check_dictionary_key(same_names: bool, seed: u64) {
    let fx = fixture(seed, same_names);
    let (seen, _) = check(&fx, &[Key::Col(S)], true, seed);
    assert_eq!(seen.deferred, seen.whole_main, "every whole main block folds by code");
    let (seen, _) = check(&fx, &[Key::Col(S)], false, seed + 5);
    assert_eq!(seen.deferred, seen.whole_main, "by code needs no COUNT(*)");
}

/// Both shards have the same dictionary: the kernel keeps its code →
/// group ids from one shard to the next.
#[test]
fn group_by_a_dictionary_string_agrees() {
    check_dictionary_key(true, 40);
}

/// The shards' dictionaries differ: codes are mapped again.
#[test]
fn group_by_a_dictionary_string_of_other_dictionaries_agrees() {
    check_dictionary_key(false, 50);
}

/// `cat % 10`, an integer function of one narrow column: with a COUNT(*)
/// whole main blocks fold by the column's value; without, each distinct
/// value is evaluated once (memoised).
#[test]
fn group_by_a_memoised_integer_function_agrees() {
    let fx = fixture(5, false);
    let (seen, kernel) = check(&fx, &[Key::Rem(CAT, 10)], true, 60);
    assert_eq!(seen.deferred, seen.whole_main, "every whole main block folds by value");
    let [KeyInput::Memo { memo, .. }] = kernel.keys.as_slice() else { panic!("cat % 10 is memoised") };
    assert!(!memo.off);
    let (seen, _) = check(&fx, &[Key::Rem(CAT, 10)], false, 63);
    assert_eq!(seen.deferred, 0, "by value needs a COUNT(*)");
    // A column with NULLs: memoised row by row, NULL its own group.
    let (seen, _) = check(&fx, &[Key::Rem(CAT_NULL, 7)], true, 66);
    assert_eq!(seen.deferred, 0);
}

/// A function of a column whose values span far more than the memo's
/// window: memoising stops, the key is evaluated as a vector.
#[test]
fn group_by_a_function_of_a_wide_column_agrees() {
    let fx = fixture(6, true);
    let (seen, kernel) = check(&fx, &[Key::Rem(WIDE, 1000)], true, 70);
    assert_eq!(seen.deferred, 0);
    let [KeyInput::Memo { memo, .. }] = kernel.keys.as_slice() else { panic!("wide % 1000 is memoised") };
    assert!(memo.off, "too many values outside the window");
}

#[test]
fn group_by_two_keys_agrees() {
    let fx = fixture(7, false);
    check(&fx, &[Key::Col(S), Key::Rem(CAT, 10)], true, 80);
}

#[test]
fn group_by_three_nullable_keys_agrees() {
    let fx = fixture(14, false);
    check(&fx, &[Key::Col(K), Key::Col(NAME), Key::Rem(CAT_NULL, 3)], true, 83);
}

/// Errors raised while streaming travel in the accumulator and win over
/// any result: a division by zero in a group key or an aggregate input.
#[test]
fn errors_travel_in_the_accumulator() {
    let fx = fixture(8, true);
    let snap = fx.table.snapshot();
    let zero = |t: DataType| MapExpr::lit(Scalar::Int(0), t);
    let cases = [
        (vec![MapExpr::col(CAT).arith(ArithOp::Rem, zero(DataType::Int32))], vec![Aggregate::count_star()]),
        (vec![], vec![Aggregate::new(AggFunc::Sum, MapExpr::col(V).arith(ArithOp::Div, zero(DataType::Int64)))]),
        (
            vec![MapExpr::col(S)],
            vec![Aggregate::new(AggFunc::Max, MapExpr::col(U).arith(ArithOp::Div, zero(DataType::UInt32)))],
        ),
    ];
    for (group_by, aggregates) in cases {
        let spec = Arc::new(AggregateSpec::new(group_by, aggregates, snap.schema()).unwrap());
        let mut acc = spec.new_acc();
        for shard in 0..snap.num_shards() {
            let mut r =
                ShardMapReducer::open(snap.shard(shard), AggregateKernel::new(Arc::clone(&spec)).unwrap()).unwrap();
            acc = r.stream_block(acc, BlockSelection::Range { start: 0, end: LANES as RecId });
            acc = r.finish(acc);
        }
        assert!(matches!(acc.error(), Some(Error::DivideByZero)), "{:?}", acc.error());
        let merged = spec.new_acc().merge(acc);
        assert!(matches!(merged.finish(), Err(Error::DivideByZero)));
    }
}

/// Groups are matched by key value when accumulators merge, whatever ids
/// each gave them.
#[test]
fn merging_matches_groups_by_key_value() {
    let fx = fixture(9, false);
    let snap = fx.table.snapshot();
    let keys = [Key::Col(NAME), Key::Rem(CAT, 10)];
    let aggs = [(AggFunc::CountStar, Input::Star), (AggFunc::Sum, Input::Col(V))];
    let spec = spec(&fx.table, &keys, &aggs);
    // Shard 1 first, then shard 0, into separate accumulators: the same
    // keys get different ids in each.
    let mut accs = Vec::new();
    let mut selected = BTreeSet::new();
    for shard in [1, 0] {
        let s = snap.shard(shard);
        let ids: Vec<RecId> = (0..s.rows() as RecId).rev().collect();
        let mut r = ShardMapReducer::open(s, AggregateKernel::new(Arc::clone(&spec)).unwrap()).unwrap();
        let acc = r.stream(spec.new_acc(), &ids);
        accs.push(r.finish(acc));
        selected.extend(ids.iter().map(|&id| (shard, id as usize)));
    }
    let b = accs.pop().unwrap();
    let a = accs.pop().unwrap();
    let (na, nb) = (a.num_groups(), b.num_groups());
    let merged = a.merge(b);
    assert!(merged.num_groups() < na + nb, "shared keys merge into one group");
    let selected: Vec<(usize, usize)> = selected.into_iter().collect();
    assert_eq!(groups_of(&merged.finish().unwrap()), reference(&fx, &spec, &keys, &aggs, &selected));
}

/// Without keys, each selection of a block or chunk alone (the whole
/// block, a prefix, a suffix, a middle range, a mask, ids in or out of
/// order): the encodings' shortcuts (zone maps for MIN/MAX of whole
/// blocks, sums from bit-packed frames, runs and sequences) must give
/// exactly what the selected rows give.
#[test]
fn without_keys_each_selection_alone_agrees() {
    let fx = fixture(10, true);
    let snap = fx.table.snapshot();
    let mut aggs = vec![(AggFunc::CountStar, Input::Star)];
    for c in [K, CAT, V, F, D, U, SEQ, RUNS, KONST, CAT_NULL, WIDE, BIG] {
        for f in [AggFunc::Count, AggFunc::Sum, AggFunc::Min, AggFunc::Max, AggFunc::Avg] {
            // The sums of BIG leave Int64 (an error, tested in `state`).
            if (f, c) != (AggFunc::Sum, BIG) {
                aggs.push((f, Input::Col(c)));
            }
        }
    }
    for c in [S, NAME] {
        for f in [AggFunc::Count, AggFunc::Min, AggFunc::Max] {
            aggs.push((f, Input::Col(c)));
        }
    }
    let spec = spec(&fx.table, &[], &aggs);
    let mut rng = StdRng::seed_from_u64(90);
    let mut checked = 0;
    for shard in 0..snap.num_shards() {
        let s = snap.shard(shard);
        let main = s.main().rows();
        let mut r = ShardMapReducer::open(s, AggregateKernel::new(Arc::clone(&spec)).unwrap()).unwrap();
        let blocks = (0..main).step_by(LANES).map(|a| (a, (a + LANES).min(main)));
        let chunks = (main..s.rows()).step_by(LANES).map(|a| (a, (a + LANES).min(s.rows())));
        for (a, b) in blocks.chain(chunks) {
            let cut = rng.random_range(a + 1..b);
            let mut mask = [0u64; WORDS];
            (0..b - a).filter(|_| rng.random_bool(0.3)).for_each(|o| mask[o / 64] |= 1 << (o % 64));
            let mut ids: Vec<RecId> = (a..b).filter(|_| rng.random_bool(0.1)).map(|r| r as RecId).collect();
            let range =
                |lo: usize, hi: usize| (Unit::Range { start: lo as RecId, end: hi as RecId }, (lo..hi).collect());
            let mut units: Vec<(Unit, Vec<usize>)> = vec![
                range(a, b),
                range(a, cut),
                range(cut, b),
                range(rng.random_range(a..cut), rng.random_range(cut..=b)),
                (
                    Unit::Mask { start: a as RecId, len: (b - a) as u32, mask },
                    (a..b).filter(|r| mask[(r - a) / 64] >> ((r - a) % 64) & 1 == 1).collect(),
                ),
                (Unit::Ids(ids.clone()), ids.iter().map(|&i| i as usize).collect()),
            ];
            ids.shuffle(&mut rng);
            units.push((Unit::Ids(ids.clone()), ids.iter().map(|&i| i as usize).collect()));
            for (unit, rows) in units {
                let acc = stream(&mut r, spec.new_acc(), std::slice::from_ref(&unit), &mut Seen::default());
                let selected: Vec<(usize, usize)> = rows.into_iter().map(|row| (shard, row)).collect();
                let want = reference(&fx, &spec, &[], &aggs, &selected);
                let got = groups_of(&acc.finish().unwrap());
                for (i, (g, w)) in got[&Vec::new()].iter().zip(&want[&Vec::new()]).enumerate() {
                    assert_eq!(g, w, "shard {shard} {unit:?}: aggregate {i} {:?}", aggs[i]);
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 7 * 9);
}
