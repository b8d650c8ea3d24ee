//! Differential tests: quiverdb's scans (filters, aggregates, gathers,
//! ordered scans, predicate DML) against a naive row-at-a-time reference
//! over plain `Vec`s.
//!
//! The reference knows nothing of shards, encodings, zone maps or batches:
//! a row is a `Vec<Option<V>>`, expressions and predicates are interpreted
//! one row at a time with explicit NULLs (SQL three-valued logic), and
//! results are compared as sorted multisets (or, for ordered scans, as the
//! exact sequence of sort keys).
//!
//! Tables are built by random mixes of batch appends, single-row appends,
//! deletes of random live records and rebuilds, over shard capacities of 7,
//! 100, 1,000 and 65,536 with background rebuilds off, so rows sit in main
//! storage (in every encoding the value shapes steer towards), in the
//! delta, and deleted in both.
//!
//! Every random test is deterministic (seeded `StdRng`); a mismatch is
//! reported with the table's seed, the query and the first differences.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type, Float64Type, Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use quiverdb_mapreducer::{
    AggFunc, Aggregate, AggregateKernel, AggregateOutput, AggregateSpec, ArithOp, GatherKernel, GatherSpec, MapExpr,
    Scalar,
};
use quiverdb_scan::{
    CmpOp, LikePattern, OrderBy, Predicate, ScanOptions, SortKey, candidate_shards, delete_where, scan, scan_order,
    update_where,
};
use quiverdb_storage::{Database, EncodingKind, RecId, Table, TableOptions, TableSnapshot, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------
// The table model
// ---------------------------------------------------------------------------

const RID: usize = 0; // Int64 NOT NULL, unique: identifies reference rows
const A: usize = 1; // Int64
const B: usize = 2; // Int32 NOT NULL
const C: usize = 3; // UInt32
const E: usize = 4; // UInt64
const F: usize = 5; // Float64
const S: usize = 6; // Utf8, few distinct values
const T: usize = 7; // Utf8, many distinct values
const FLAG: usize = 8; // Boolean
const D: usize = 9; // Decimal128(18, 2)
const DAY: usize = 10; // Date32 NOT NULL
const NCOLS: usize = 11;

const NAMES: [&str; NCOLS] = ["rid", "a", "b", "c", "e", "f", "s", "t", "flag", "d", "day"];
const NULLABLE: [bool; NCOLS] = [false, true, false, true, true, true, true, true, true, true, false];
const TYS: [Ty; NCOLS] =
    [Ty::I64, Ty::I64, Ty::I32, Ty::U32, Ty::U64, Ty::F64, Ty::Str, Ty::Str, Ty::Bool, Ty::Dec, Ty::Date];

/// Decimal values stay within ±10^17 so `d + literal` never leaves
/// precision 18.
const DEC_LIMIT: i128 = 100_000_000_000_000_000;

/// The types of the model (and of the expressions over it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    I64,
    I32,
    U32,
    U64,
    F64,
    Str,
    Bool,
    Dec,
    Date,
}

impl Ty {
    fn data_type(self) -> DataType {
        match self {
            Ty::I64 => DataType::Int64,
            Ty::I32 => DataType::Int32,
            Ty::U32 => DataType::UInt32,
            Ty::U64 => DataType::UInt64,
            Ty::F64 => DataType::Float64,
            Ty::Str => DataType::Utf8,
            Ty::Bool => DataType::Boolean,
            Ty::Dec => DataType::Decimal128(18, 2),
            Ty::Date => DataType::Date32,
        }
    }

    fn of(t: &DataType) -> Ty {
        match t {
            DataType::Int64 => Ty::I64,
            DataType::Int32 => Ty::I32,
            DataType::UInt32 => Ty::U32,
            DataType::UInt64 => Ty::U64,
            DataType::Float64 => Ty::F64,
            DataType::Utf8 => Ty::Str,
            DataType::Boolean => Ty::Bool,
            DataType::Decimal128(18, 2) => Ty::Dec,
            DataType::Date32 => Ty::Date,
            other => panic!("no model type for {other}"),
        }
    }

    /// The value range of an integer-like type.
    fn int_range(self) -> (i128, i128) {
        match self {
            Ty::I64 => (i64::MIN as i128, i64::MAX as i128),
            Ty::I32 | Ty::Date => (i32::MIN as i128, i32::MAX as i128),
            Ty::U32 => (0, u32::MAX as i128),
            Ty::U64 => (0, u64::MAX as i128),
            Ty::Bool => (0, 1),
            Ty::Dec => (-DEC_LIMIT, DEC_LIMIT),
            Ty::F64 | Ty::Str => panic!("{self:?} is not integer-like"),
        }
    }

    fn summable(self) -> bool {
        matches!(self, Ty::I64 | Ty::I32 | Ty::U32 | Ty::U64 | Ty::F64 | Ty::Dec)
    }

    /// A literal of this type holding `v`.
    fn scalar(self, v: &V) -> Scalar {
        match (self, v) {
            (Ty::I64 | Ty::I32 | Ty::Date, V::I(x)) => Scalar::Int(*x as i64),
            (Ty::U32 | Ty::U64, V::I(x)) => Scalar::UInt(*x as u64),
            (Ty::Bool, V::I(x)) => Scalar::Boolean(*x != 0),
            (Ty::Dec, V::I(x)) => Scalar::Decimal(*x),
            (Ty::F64, V::F(x)) => Scalar::Float(*x),
            (Ty::Str, V::S(b)) => Scalar::Bytes(b.clone()),
            (t, v) => panic!("{v:?} is not a value of {t:?}"),
        }
    }
}

/// One non-NULL value: integers of every width, booleans (0/1), dates
/// (days) and decimals (unscaled) as `I`; floats as `F`; strings as `S`.
#[derive(Debug, Clone)]
enum V {
    I(i128),
    F(f64),
    S(Vec<u8>),
}

impl V {
    fn rank(&self) -> u8 {
        match self {
            V::I(_) => 0,
            V::F(_) => 1,
            V::S(_) => 2,
        }
    }
}

impl Ord for V {
    /// Numbers by value, floats by IEEE total order (-0.0 < 0.0 < NaN),
    /// strings by bytes.
    fn cmp(&self, o: &Self) -> Ordering {
        match (self, o) {
            (V::I(a), V::I(b)) => a.cmp(b),
            (V::F(a), V::F(b)) => a.total_cmp(b),
            (V::S(a), V::S(b)) => a.cmp(b),
            (a, b) => a.rank().cmp(&b.rank()),
        }
    }
}

impl PartialOrd for V {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl PartialEq for V {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl Eq for V {}

/// A value or NULL (`None` sorts first).
type Cell = Option<V>;
/// One row of the model, one cell per column.
type Row = Vec<Cell>;

fn rid_of(row: &Row) -> i64 {
    match &row[RID] {
        Some(V::I(x)) => *x as i64,
        other => panic!("bad rid {other:?}"),
    }
}

fn arrow_schema() -> SchemaRef {
    Arc::new(Schema::new((0..NCOLS).map(|c| Field::new(NAMES[c], TYS[c].data_type(), NULLABLE[c])).collect::<Vec<_>>()))
}

fn int(c: &Cell) -> Option<i128> {
    match c {
        None => None,
        Some(V::I(x)) => Some(*x),
        Some(v) => panic!("{v:?} is not an integer"),
    }
}

fn float(c: &Cell) -> Option<f64> {
    match c {
        None => None,
        Some(V::F(x)) => Some(*x),
        Some(v) => panic!("{v:?} is not a float"),
    }
}

fn string(c: &Cell) -> Option<String> {
    match c {
        None => None,
        Some(V::S(b)) => Some(String::from_utf8(b.clone()).expect("model strings are UTF-8")),
        Some(v) => panic!("{v:?} is not a string"),
    }
}

/// A record batch of model rows.
fn batch_of(rows: &[Row]) -> RecordBatch {
    let col = |c: usize| -> ArrayRef {
        let cells = rows.iter().map(|r| &r[c]);
        match TYS[c] {
            Ty::I64 => Arc::new(Int64Array::from_iter(cells.map(|v| int(v).map(|x| x as i64)))),
            Ty::I32 => Arc::new(Int32Array::from_iter(cells.map(|v| int(v).map(|x| x as i32)))),
            Ty::U32 => Arc::new(UInt32Array::from_iter(cells.map(|v| int(v).map(|x| x as u32)))),
            Ty::U64 => Arc::new(UInt64Array::from_iter(cells.map(|v| int(v).map(|x| x as u64)))),
            Ty::F64 => Arc::new(Float64Array::from_iter(cells.map(float))),
            Ty::Str => Arc::new(StringArray::from_iter(cells.map(string))),
            Ty::Bool => Arc::new(BooleanArray::from_iter(cells.map(|v| int(v).map(|x| x != 0)))),
            Ty::Dec => Arc::new(
                Decimal128Array::from_iter(cells.map(int)).with_precision_and_scale(18, 2).expect("decimal type"),
            ),
            Ty::Date => Arc::new(Date32Array::from_iter(cells.map(|v| int(v).map(|x| x as i32)))),
        }
    };
    RecordBatch::try_new(arrow_schema(), (0..NCOLS).map(col).collect()).expect("valid batch")
}

/// Appends one model row through `append_row`.
fn append_row(table: &Table, row: &Row) {
    let strings: Vec<Option<String>> =
        row.iter().map(|c| if let Some(V::S(_)) = c { string(c) } else { None }).collect();
    let values: Vec<Value<'_>> = (0..NCOLS)
        .map(|c| match (&row[c], TYS[c]) {
            (None, _) => Value::Null,
            (Some(V::I(x)), Ty::I64 | Ty::I32 | Ty::Date) => Value::Int(*x as i64),
            (Some(V::I(x)), Ty::U32 | Ty::U64) => Value::UInt(*x as u64),
            (Some(V::I(x)), Ty::Bool) => Value::Boolean(*x != 0),
            (Some(V::I(x)), Ty::Dec) => Value::Decimal(*x),
            (Some(V::F(x)), _) => Value::Float(*x),
            (Some(V::S(_)), _) => Value::Str(strings[c].as_deref().expect("string")),
            (v, t) => panic!("{v:?} in a {t:?} column"),
        })
        .collect();
    table.append_row(&values).expect("append_row");
}

/// The cells of an output array (any type the scans produce here).
fn cells(a: &dyn Array) -> Vec<Cell> {
    (0..a.len())
        .map(|i| {
            if a.is_null(i) {
                return None;
            }
            Some(match a.data_type() {
                DataType::Int64 => V::I(a.as_primitive::<Int64Type>().value(i) as i128),
                DataType::Int32 => V::I(a.as_primitive::<Int32Type>().value(i) as i128),
                DataType::UInt32 => V::I(a.as_primitive::<UInt32Type>().value(i) as i128),
                DataType::UInt64 => V::I(a.as_primitive::<UInt64Type>().value(i) as i128),
                DataType::Date32 => V::I(a.as_primitive::<Date32Type>().value(i) as i128),
                DataType::Decimal128(..) => V::I(a.as_primitive::<Decimal128Type>().value(i)),
                DataType::Boolean => V::I(a.as_boolean().value(i) as i128),
                DataType::Float64 => V::F(a.as_primitive::<Float64Type>().value(i)),
                DataType::Utf8 => V::S(a.as_string::<i32>().value(i).as_bytes().to_vec()),
                DataType::LargeUtf8 => V::S(a.as_string::<i64>().value(i).as_bytes().to_vec()),
                DataType::Utf8View => V::S(a.as_string_view().value(i).as_bytes().to_vec()),
                other => panic!("unexpected output type {other}"),
            })
        })
        .collect()
}

/// The rows of record batches, as cells.
fn rows_of(batches: &[RecordBatch]) -> Vec<Row> {
    let mut out = Vec::new();
    for b in batches {
        let cols: Vec<Vec<Cell>> = b.columns().iter().map(|a| cells(a.as_ref())).collect();
        for i in 0..b.num_rows() {
            out.push(cols.iter().map(|c| c[i].clone()).collect());
        }
    }
    out
}

/// Every live row of a snapshot, sorted.
fn stored_rows(snapshot: &TableSnapshot) -> Vec<Row> {
    let mut rows = rows_of(&snapshot.to_record_batches(None).expect("decode snapshot"));
    rows.sort();
    rows
}

fn show_row(r: &[Cell]) -> String {
    let cells: Vec<String> = r
        .iter()
        .map(|c| match c {
            None => "NULL".into(),
            Some(V::I(x)) => x.to_string(),
            Some(V::F(x)) => format!("{x:?}"),
            Some(V::S(b)) => format!("{:?}", String::from_utf8_lossy(b)),
        })
        .collect();
    format!("({})", cells.join(", "))
}

// ---------------------------------------------------------------------------
// Random data
// ---------------------------------------------------------------------------

/// Value shapes that steer the encoder toward each encoding.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Constant,
    Sequence,
    Runs,
    SmallRange,
    FewDistinct,
    Random,
    Extremes,
    /// One value per 300 rows, each new (only forced by tests: values
    /// that later blocks have and earlier ones do not).
    Ascending,
}

/// Strings with shared prefixes, multi-byte characters, NUL and a long one.
const POOL: [&str; 13] = [
    "",
    "a",
    "ab",
    "abc",
    "abd",
    "b",
    "ba",
    "bb",
    "ünï",
    "ünïcødé ✓",
    "z\u{0}z",
    "name_0042",
    "a considerably longer string that does not fit a view",
];

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

/// How a table's values are drawn, per column.
#[derive(Debug, Clone)]
struct Profile {
    shapes: [Shape; NCOLS],
    nulls: [f64; NCOLS],
    consts: Vec<Vec<i128>>,
    steps: [i128; NCOLS],
}

impl Profile {
    fn random(rng: &mut StdRng) -> Self {
        let mut shapes = [Shape::Random; NCOLS];
        let mut nulls = [0.0; NCOLS];
        let mut steps = [0i128; NCOLS];
        let mut consts = Vec::new();
        for c in 0..NCOLS {
            // Wide random and extreme values (SUM overflow) are the rarer shapes.
            let r = rng.random_range(0..100);
            shapes[c] = match r {
                0..12 => Shape::Constant,
                12..27 => Shape::Sequence,
                27..42 => Shape::Runs,
                42..60 => Shape::SmallRange,
                60..80 => Shape::FewDistinct,
                80..90 => Shape::Random,
                _ => Shape::Extremes,
            };
            if c == RID {
                shapes[c] = Shape::Sequence;
            }
            if NULLABLE[c] {
                nulls[c] = *pick(rng, &[0.0, 0.0, 0.05, 0.05, 0.3, 0.3, 0.9, 1.0]);
            }
            steps[c] = rng.random_range(-3..=3);
            let k = rng.random_range(1..=6);
            consts.push(
                (0..k)
                    .map(|_| match TYS[c] {
                        Ty::U32 | Ty::U64 => rng.random_range(0..1000),
                        Ty::Dec => rng.random_range(-100_000..100_000),
                        Ty::Date => rng.random_range(18_000..20_000),
                        _ => rng.random_range(-1000..1000),
                    })
                    .collect(),
            );
        }
        Self { shapes, nulls, consts, steps }
    }

    fn gen_int(&self, rng: &mut StdRng, c: usize, i: i128) -> i128 {
        let (lo, hi) = TYS[c].int_range();
        let k = &self.consts[c];
        let v = match self.shapes[c] {
            Shape::Constant => k[0],
            Shape::Sequence => k[0] + self.steps[c] * i,
            Shape::Ascending => k[0] + i / 300,
            Shape::Runs => k[(i / 37) as usize % k.len()],
            Shape::SmallRange => k[0] + rng.random_range(0..100),
            Shape::FewDistinct => *pick(rng, k),
            Shape::Random => rng.random_range(lo..=hi),
            Shape::Extremes => *pick(rng, &[lo, hi, 0, 1, lo + 1, hi - 1, if lo < 0 { -1 } else { 2 }]),
        };
        v.clamp(lo, hi)
    }

    fn gen_cell(&self, rng: &mut StdRng, c: usize, i: i128) -> Cell {
        if NULLABLE[c] && rng.random_bool(self.nulls[c]) {
            return None;
        }
        let k = &self.consts[c];
        Some(match TYS[c] {
            Ty::F64 => V::F(match self.shapes[c] {
                Shape::Extremes => *pick(rng, &[f64::NAN, -0.0, 0.0, f64::INFINITY, f64::NEG_INFINITY, 0.25, -1.5]),
                // Multiples of 1/4 below 2^38: sums of a few thousand are exact.
                Shape::Random => rng.random_range(-(1i64 << 40)..(1i64 << 40)) as f64 / 4.0,
                _ => self.gen_int_f(rng, c, i) as f64 / 4.0,
            }),
            Ty::Str => {
                let s = match self.shapes[c] {
                    Shape::Constant => POOL[k[0].rem_euclid(POOL.len() as i128) as usize].to_string(),
                    Shape::Sequence => format!("s{:06}", i),
                    Shape::Ascending => format!("g{:04}", i / 300),
                    Shape::Runs => POOL[((i / 37) as usize + k[0].unsigned_abs() as usize) % POOL.len()].to_string(),
                    Shape::SmallRange | Shape::FewDistinct => {
                        POOL[pick(rng, k).rem_euclid(POOL.len() as i128) as usize].to_string()
                    }
                    Shape::Random => format!("{}{}", pick(rng, &POOL), rng.random_range(0..100_000)),
                    Shape::Extremes => pick(rng, &["", "\u{0}", "\u{10FFFF}", "ÿ", "a", POOL[12]]).to_string(),
                };
                // `t` has many distinct values (plain rather than dictionary strings).
                let s =
                    if c == T && rng.random_bool(0.8) { format!("{s}{}", rng.random_range(0..1_000_000)) } else { s };
                V::S(s.into_bytes())
            }
            Ty::Bool => V::I(match self.shapes[c] {
                Shape::Constant => k[0] & 1,
                Shape::Runs | Shape::Sequence | Shape::Ascending => (i / 37) & 1,
                _ => rng.random_range(0..2),
            }),
            _ => V::I(self.gen_int(rng, c, i)),
        })
    }

    fn gen_int_f(&self, rng: &mut StdRng, c: usize, i: i128) -> i128 {
        let k = &self.consts[c];
        match self.shapes[c] {
            Shape::Constant => k[0],
            Shape::Sequence => k[0] + self.steps[c] * i,
            Shape::Ascending => k[0] + i / 300,
            Shape::Runs => k[(i / 37) as usize % k.len()],
            Shape::SmallRange => k[0] + rng.random_range(0..100),
            _ => *pick(rng, k),
        }
    }

    fn gen_row(&self, rng: &mut StdRng, rid: i64) -> Row {
        let mut row: Row = (0..NCOLS).map(|c| self.gen_cell(rng, c, rid as i128)).collect();
        row[RID] = Some(V::I(rid as i128));
        row
    }
}

/// A table and its reference: the live rows, in no particular order.
struct Fixture {
    _db: Database,
    table: Table,
    rows: Vec<Row>,
    profile: Profile,
    next_rid: i64,
    desc: String,
}

impl Fixture {
    fn new(seed: u64, capacity: usize, target: usize) -> (Self, StdRng) {
        Self::with_profile(seed, capacity, target, |_| {})
    }

    /// [`Fixture::new`] with the random profile adjusted by `adjust`.
    fn with_profile(seed: u64, capacity: usize, target: usize, adjust: impl FnOnce(&mut Profile)) -> (Self, StdRng) {
        let mut rng = StdRng::seed_from_u64(seed);
        let db = Database::new();
        let options = TableOptions::default().with_shard_capacity(capacity).with_background_rebuild(false);
        let table = db.create_table("t", &arrow_schema(), options).expect("create table");
        let mut profile = Profile::random(&mut rng);
        adjust(&mut profile);
        let mut fx = Fixture {
            _db: db,
            table,
            rows: Vec::new(),
            profile,
            next_rid: 0,
            desc: format!("table seed {seed}, shard capacity {capacity}"),
        };
        let mut appended = 0;
        let mut ops = Vec::new();
        while appended < target {
            match rng.random_range(0..100) {
                0..50 => {
                    let max = *pick(&mut rng, &[1usize, 10, 300, 1500]);
                    let n = rng.random_range(1..=max.min(target - appended));
                    fx.append_batch(&mut rng, n);
                    appended += n;
                    ops.push(format!("append {n}"));
                }
                50..62 => {
                    let n = rng.random_range(1..=3usize).min(target - appended);
                    for _ in 0..n {
                        fx.append_one(&mut rng);
                    }
                    appended += n;
                    ops.push(format!("append_row x{n}"));
                }
                62..80 => {
                    let p = *pick(&mut rng, &[0.01, 0.1, 0.5, 0.9]);
                    let n = fx.random_delete(&mut rng, p);
                    ops.push(format!("delete {n}"));
                }
                _ => {
                    fx.table.rebuild().expect("rebuild");
                    ops.push("rebuild".into());
                }
            }
        }
        match rng.random_range(0..3) {
            0 => {
                fx.table.rebuild().expect("rebuild");
                ops.push("rebuild".into());
            }
            1 => {
                let n = fx.random_delete(&mut rng, 0.2);
                ops.push(format!("delete {n}"));
            }
            _ => {}
        }
        fx.desc = format!("{} ({} live rows; ops: {})", fx.desc, fx.rows.len(), ops.join(", "));
        fx.assert_contents();
        (fx, rng)
    }

    fn new_rows(&mut self, rng: &mut StdRng, n: usize) -> Vec<Row> {
        (0..n)
            .map(|_| {
                self.next_rid += 1;
                self.profile.gen_row(rng, self.next_rid)
            })
            .collect()
    }

    fn append_batch(&mut self, rng: &mut StdRng, n: usize) {
        let rows = self.new_rows(rng, n);
        assert_eq!(self.table.append(&batch_of(&rows)).expect("append"), n);
        self.rows.extend(rows);
    }

    fn append_one(&mut self, rng: &mut StdRng) {
        let row = self.new_rows(rng, 1).pop().expect("one row");
        append_row(&self.table, &row);
        self.rows.push(row);
    }

    /// Deletes about `p` of the live records, chosen by record id; returns
    /// how many.
    fn random_delete(&mut self, rng: &mut StdRng, p: f64) -> usize {
        let snapshot = self.table.snapshot();
        let mut selection = Vec::new();
        let mut gone = HashSet::new();
        for shard in snapshot.shards() {
            let ids: Vec<RecId> = shard.live_ids().into_iter().filter(|_| rng.random_bool(p)).collect();
            if ids.is_empty() {
                continue;
            }
            let rids = shard.gather(&ids, Some(&[RID])).expect("gather rids");
            gone.extend(rids.column(0).as_primitive::<Int64Type>().values().iter().copied());
            selection.push((shard.id(), ids));
        }
        let n = self.table.delete(&snapshot, &selection).expect("delete");
        assert_eq!(n, gone.len(), "{}", self.desc);
        self.rows.retain(|r| !gone.contains(&rid_of(r)));
        n
    }

    /// The table holds exactly the reference rows.
    fn assert_contents(&self) {
        let mut expected = self.rows.clone();
        expected.sort();
        let got = stored_rows(&self.table.snapshot());
        if got != expected {
            panic!("table contents differ from the reference: {}\n{}", self.desc, diff_rows(&expected, &got));
        }
    }
}

/// The first differences between two sorted row multisets.
fn diff_rows(expected: &[Row], got: &[Row]) -> String {
    fn count(rows: &[Row]) -> BTreeMap<&Row, i64> {
        let mut m: BTreeMap<&Row, i64> = BTreeMap::new();
        for r in rows {
            *m.entry(r).or_default() += 1;
        }
        m
    }
    let (e, g) = (count(expected), count(got));
    let missing: Vec<String> =
        e.iter().filter(|(r, n)| g.get(*r).copied().unwrap_or(0) < **n).take(4).map(|(r, _)| show_row(r)).collect();
    let extra: Vec<String> =
        g.iter().filter(|(r, n)| e.get(*r).copied().unwrap_or(0) < **n).take(4).map(|(r, _)| show_row(r)).collect();
    format!(
        "expected {} rows, got {}\n  missing: {}\n  unexpected: {}",
        expected.len(),
        got.len(),
        missing.join(" "),
        extra.join(" ")
    )
}

// ---------------------------------------------------------------------------
// Reference semantics
// ---------------------------------------------------------------------------

fn ty_of(e: &MapExpr) -> Ty {
    match e {
        MapExpr::Column(c) => TYS[*c],
        MapExpr::Literal { data_type, .. } => Ty::of(data_type),
        MapExpr::Arith { left, .. } => ty_of(left),
        MapExpr::Cast { to, .. } => Ty::of(to),
    }
}

fn lit_cell(v: &Scalar) -> Cell {
    Some(match v {
        Scalar::Null => return None,
        Scalar::Boolean(b) => V::I(*b as i128),
        Scalar::Int(x) => V::I(*x as i128),
        Scalar::UInt(x) => V::I(*x as i128),
        Scalar::Float(x) => V::F(*x),
        Scalar::Decimal(x) => V::I(*x),
        Scalar::Bytes(b) => V::S(b.clone()),
    })
}

/// Wraps an exact integer result to the width of `ty` (two's complement).
fn wrap(ty: Ty, v: i128) -> i128 {
    match ty {
        Ty::I64 => v as i64 as i128,
        Ty::I32 => v as i32 as i128,
        Ty::U32 => v as u32 as i128,
        Ty::U64 => v as u64 as i128,
        Ty::Dec => v,
        t => panic!("no arithmetic on {t:?}"),
    }
}

/// Evaluates an expression on one row. The generators never divide by
/// zero and never cast out of range, so this cannot fail.
fn eval(e: &MapExpr, row: &Row) -> Cell {
    match e {
        MapExpr::Column(c) => row[*c].clone(),
        MapExpr::Literal { value, .. } => lit_cell(value),
        MapExpr::Arith { op, left, right } => {
            let ty = ty_of(left);
            let (l, r) = (eval(left, row)?, eval(right, row)?);
            Some(match (l, r) {
                (V::F(x), V::F(y)) => V::F(match op {
                    ArithOp::Add => x + y,
                    ArithOp::Sub => x - y,
                    ArithOp::Mul => x * y,
                    ArithOp::Div => x / y,
                    ArithOp::Rem => x % y,
                }),
                (V::I(x), V::I(y)) => V::I(wrap(
                    ty,
                    match op {
                        ArithOp::Add => x.wrapping_add(y),
                        ArithOp::Sub => x.wrapping_sub(y),
                        ArithOp::Mul => x.wrapping_mul(y),
                        ArithOp::Div => x.checked_div(y).expect("reference: division by zero"),
                        ArithOp::Rem => x.checked_rem(y).expect("reference: division by zero"),
                    },
                )),
                (l, r) => panic!("operands {l:?} and {r:?}"),
            })
        }
        MapExpr::Cast { expr, to } => {
            let from = ty_of(expr);
            let v = eval(expr, row)?;
            Some(match (v, Ty::of(to)) {
                (V::I(x), Ty::F64) => V::F(if from == Ty::U64 { x as u64 as f64 } else { x as i64 as f64 }),
                (V::I(x), Ty::I64) => V::I(x),
                // Decimal to decimal at the same scale (values stay within
                // DEC_LIMIT, so the narrower precision always holds them).
                (V::I(x), Ty::Dec) if from == Ty::Dec => V::I(x),
                (V::F(x), Ty::F64) => V::F(x),
                (v, t) => panic!("the reference does not cast {v:?} to {t:?}"),
            })
        }
    }
}

fn and3(values: impl IntoIterator<Item = Option<bool>>) -> Option<bool> {
    let mut null = false;
    for v in values {
        match v {
            Some(false) => return Some(false),
            None => null = true,
            Some(true) => {}
        }
    }
    if null { None } else { Some(true) }
}

fn or3(values: impl IntoIterator<Item = Option<bool>>) -> Option<bool> {
    let mut null = false;
    for v in values {
        match v {
            Some(true) => return Some(true),
            None => null = true,
            Some(false) => {}
        }
    }
    if null { None } else { Some(false) }
}

/// SQL comparison: as `Ord`, except that the two float zeros are equal.
fn sql_cmp(a: &V, b: &V) -> Ordering {
    match (a, b) {
        (V::F(x), V::F(y)) if *x == 0.0 && *y == 0.0 => Ordering::Equal,
        _ => a.cmp(b),
    }
}

/// A group key: SQL groups the two float zeros together.
#[allow(clippy::redundant_guards)] // `x == 0.0`: -0.0 passes it too
fn group_cell(c: Cell) -> Cell {
    match c {
        Some(V::F(x)) if x == 0.0 => Some(V::F(0.0)),
        other => other,
    }
}

/// SQL three-valued evaluation of a predicate on one row.
fn eval_pred(p: &Predicate, row: &Row) -> Option<bool> {
    let cmp = |x: &Cell, y: &Cell| -> Option<Ordering> { Some(sql_cmp(x.as_ref()?, y.as_ref()?)) };
    let neg = |r: Option<bool>, negated: bool| if negated { r.map(|b| !b) } else { r };
    match p {
        Predicate::Const(b) => Some(*b),
        Predicate::Unknown => None,
        Predicate::Compare { expr, op, value } => {
            let o = cmp(&eval(expr, row), &lit_cell(value))?;
            Some(match op {
                CmpOp::Eq => o == Ordering::Equal,
                CmpOp::NotEq => o != Ordering::Equal,
                CmpOp::Lt => o == Ordering::Less,
                CmpOp::LtEq => o != Ordering::Greater,
                CmpOp::Gt => o == Ordering::Greater,
                CmpOp::GtEq => o != Ordering::Less,
            })
        }
        // `x BETWEEN l AND h` is `x >= l AND x <= h`.
        Predicate::Between { expr, low, high, negated } => {
            let x = eval(expr, row);
            let ge = cmp(&x, &lit_cell(low)).map(|o| o != Ordering::Less);
            let le = cmp(&x, &lit_cell(high)).map(|o| o != Ordering::Greater);
            neg(and3([ge, le]), *negated)
        }
        // `x IN (v1, v2)` is `x = v1 OR x = v2`.
        Predicate::InList { expr, values, negated } => {
            let x = eval(expr, row);
            let r = or3(values.iter().map(|v| cmp(&x, &lit_cell(v)).map(|o| o == Ordering::Equal)));
            neg(r, *negated)
        }
        Predicate::IsNull(e) => Some(eval(e, row).is_none()),
        Predicate::IsNotNull(e) => Some(eval(e, row).is_some()),
        Predicate::Like { expr, pattern, negated } => match eval(expr, row)? {
            V::S(b) => neg(Some(like(pattern.parts(), &b)), *negated),
            v => panic!("LIKE on {v:?}"),
        },
        Predicate::And(v) => and3(v.iter().map(|p| eval_pred(p, row))),
        Predicate::Or(v) => or3(v.iter().map(|p| eval_pred(p, row))),
        Predicate::Not(p) => eval_pred(p, row).map(|b| !b),
    }
}

/// `v LIKE parts[0]%parts[1]%…`, by trying every place each `%` can end.
fn like(parts: &[Vec<u8>], v: &[u8]) -> bool {
    // `v` follows a `%`.
    fn after_wildcard(parts: &[Vec<u8>], v: &[u8]) -> bool {
        match parts {
            [] => true,
            [last] => v.ends_with(last),
            [p, more @ ..] => (0..=v.len()).any(|i| v[i..].starts_with(p) && after_wildcard(more, &v[i + p.len()..])),
        }
    }
    match parts {
        [] => v.is_empty(),
        [only] => v == only.as_slice(),
        [first, more @ ..] => v.starts_with(first) && after_wildcard(more, &v[first.len()..]),
    }
}

/// The rows where `filter` is TRUE.
fn matching<'r>(rows: &'r [Row], filter: Option<&Predicate>) -> Vec<&'r Row> {
    rows.iter().filter(|r| filter.is_none_or(|p| eval_pred(p, r) == Some(true))).collect()
}

/// An expected aggregate value; `approx` for float sums and averages.
#[derive(Debug, Clone)]
struct Expected {
    cell: Cell,
    approx: bool,
}

/// The output type quiverdb documents for `func` over `ty`.
fn agg_type(func: AggFunc, ty: Option<Ty>) -> DataType {
    match (func, ty) {
        (AggFunc::CountStar | AggFunc::Count, _) => DataType::Int64,
        (AggFunc::Sum, Some(Ty::I64 | Ty::I32)) => DataType::Int64,
        (AggFunc::Sum, Some(Ty::U32 | Ty::U64)) => DataType::UInt64,
        (AggFunc::Sum, Some(Ty::F64)) => DataType::Float64,
        (AggFunc::Sum, Some(Ty::Dec)) => DataType::Decimal128(28, 2),
        (AggFunc::Avg, Some(Ty::Dec)) => DataType::Decimal128(22, 6),
        (AggFunc::Avg, _) => DataType::Float64,
        (AggFunc::Min | AggFunc::Max, Some(t)) => t.data_type(),
        (f, t) => panic!("no type for {f:?} of {t:?}"),
    }
}

/// One aggregate over the rows of one group; `Err` for a SUM that does
/// not fit its result type.
fn ref_aggregate(agg: &Aggregate, rows: &[&Row]) -> Result<Expected, String> {
    let exact = |cell: Cell| Ok(Expected { cell, approx: false });
    let Some(input) = &agg.input else {
        return exact(Some(V::I(rows.len() as i128)));
    };
    let ty = ty_of(input);
    let values: Vec<V> = rows.iter().filter_map(|r| eval(input, r)).collect();
    let n = values.len() as i128;
    let int_sum = || values.iter().map(|v| if let V::I(x) = v { *x } else { panic!("sum of {v:?}") }).sum::<i128>();
    let float_sum = || values.iter().fold(0.0f64, |s, v| if let V::F(x) = v { s + x } else { panic!("sum of {v:?}") });
    match agg.func {
        AggFunc::CountStar => exact(Some(V::I(rows.len() as i128))),
        AggFunc::Count => exact(Some(V::I(n))),
        AggFunc::Min => exact(values.iter().min().cloned()),
        AggFunc::Max => exact(values.iter().max().cloned()),
        AggFunc::Sum if values.is_empty() => Ok(Expected { cell: None, approx: ty == Ty::F64 }),
        AggFunc::Sum => match ty {
            Ty::F64 => Ok(Expected { cell: Some(V::F(float_sum())), approx: true }),
            Ty::I64 | Ty::I32 => {
                let s = int_sum();
                if i64::try_from(s).is_err() {
                    return Err(format!("SUM = {s} overflows Int64"));
                }
                exact(Some(V::I(s)))
            }
            Ty::U32 | Ty::U64 => {
                let s = int_sum();
                if u64::try_from(s).is_err() {
                    return Err(format!("SUM = {s} overflows UInt64"));
                }
                exact(Some(V::I(s)))
            }
            Ty::Dec => {
                let s = int_sum();
                if s.abs() >= 10i128.pow(28) {
                    return Err(format!("SUM = {s} overflows Decimal128(28, 2)"));
                }
                exact(Some(V::I(s)))
            }
            t => panic!("SUM of {t:?}"),
        },
        AggFunc::Avg if values.is_empty() => Ok(Expected { cell: None, approx: ty != Ty::Dec }),
        AggFunc::Avg => match ty {
            Ty::F64 => Ok(Expected { cell: Some(V::F(float_sum() / n as f64)), approx: true }),
            // Truncated toward zero, as DataFusion's decimal AVG divides.
            Ty::Dec => exact(Some(V::I(int_sum() * 10_000 / n))),
            _ => Ok(Expected { cell: Some(V::F(int_sum() as f64 / n as f64)), approx: true }),
        },
    }
}

/// Expected output of an aggregation: (group key, values) sorted by key.
type AggRows = Vec<(Vec<Cell>, Vec<Expected>)>;

fn ref_aggregation(rows: &[&Row], keys: &[MapExpr], aggs: &[Aggregate]) -> Result<AggRows, String> {
    let mut groups: BTreeMap<Vec<Cell>, Vec<&Row>> = BTreeMap::new();
    if keys.is_empty() {
        groups.insert(Vec::new(), Vec::new());
    }
    for r in rows {
        groups.entry(keys.iter().map(|k| group_cell(eval(k, r))).collect()).or_default().push(r);
    }
    let mut out = Vec::new();
    for (key, members) in groups {
        let values = aggs.iter().map(|a| ref_aggregate(a, &members)).collect::<Result<Vec<_>, _>>()?;
        out.push((key, values));
    }
    Ok(out)
}

fn approx_eq(a: f64, b: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn cell_matches(e: &Expected, got: &Cell) -> bool {
    match (&e.cell, got) {
        (Some(V::F(x)), Some(V::F(y))) if e.approx => approx_eq(*x, *y),
        (x, y) => x == y,
    }
}

// ---------------------------------------------------------------------------
// Random queries
// ---------------------------------------------------------------------------

fn col(c: usize) -> MapExpr {
    MapExpr::col(c)
}

fn lit(v: Scalar, ty: Ty) -> MapExpr {
    MapExpr::lit(v, ty.data_type())
}

fn ar(l: MapExpr, op: ArithOp, r: MapExpr) -> MapExpr {
    l.arith(op, r)
}

/// `column % 1,000,000` (`% 1000` for UInt32 and Int32): small enough
/// that the arithmetic on it cannot overflow, which is an error (the
/// columns hold their types' extremes).
fn small(column: usize, ty: Ty) -> MapExpr {
    let m = match ty {
        Ty::U64 => Scalar::UInt(1_000_000),
        Ty::U32 => Scalar::UInt(1_000),
        Ty::I32 => Scalar::Int(1_000),
        _ => Scalar::Int(1_000_000),
    };
    ar(col(column), ArithOp::Rem, lit(m, ty))
}

/// A random numeric expression: a column, or arithmetic (that cannot
/// overflow, with non-zero literal divisors), casts, NULL literals.
fn gen_num_expr(rng: &mut StdRng) -> MapExpr {
    if rng.random_bool(0.55) {
        return col(*pick(rng, &[RID, A, A, B, B, C, E, F, F, FLAG, D, DAY]));
    }
    match rng.random_range(0..20) {
        0 => ar(col(A), ArithOp::Rem, lit(Scalar::Int(7), Ty::I64)),
        1 => ar(small(A, Ty::I64), ArithOp::Add, lit(Scalar::Int(i64::MAX - 1_000_000), Ty::I64)),
        2 => ar(small(A, Ty::I64), ArithOp::Mul, lit(Scalar::Int(-3), Ty::I64)),
        3 => ar(small(A, Ty::I64), ArithOp::Sub, col(RID)),
        4 => ar(small(B, Ty::I32), ArithOp::Mul, lit(Scalar::Int(3), Ty::I32)),
        5 => ar(col(B), ArithOp::Div, lit(Scalar::Int(10), Ty::I32)),
        6 => ar(col(B), ArithOp::Rem, lit(Scalar::Int(-4), Ty::I32)),
        7 => ar(small(C, Ty::U32), ArithOp::Add, lit(Scalar::UInt(5), Ty::U32)),
        8 => ar(col(C), ArithOp::Rem, lit(Scalar::UInt(7), Ty::U32)),
        9 => ar(col(E), ArithOp::Rem, lit(Scalar::UInt(5), Ty::U64)),
        10 => ar(small(E, Ty::U64), ArithOp::Add, lit(Scalar::UInt(100), Ty::U64)),
        11 => ar(col(F), ArithOp::Mul, lit(Scalar::Float(2.0), Ty::F64)),
        12 => ar(col(F), ArithOp::Add, lit(Scalar::Float(0.5), Ty::F64)),
        13 => ar(col(F), ArithOp::Rem, lit(Scalar::Float(3.0), Ty::F64)),
        // Decimal `+` widens by a digit (Arrow's types); cast back.
        14 => ar(col(D), ArithOp::Add, lit(Scalar::Decimal(150), Ty::Dec)).cast(DataType::Decimal128(18, 2)),
        15 => col(B).cast(DataType::Int64),
        16 => col(C).cast(DataType::Int64),
        17 => col(A).cast(DataType::Float64),
        18 => ar(col(A), ArithOp::Add, lit(Scalar::Null, Ty::I64)),
        _ => col(FLAG).cast(DataType::Int64),
    }
}

fn gen_any_expr(rng: &mut StdRng) -> MapExpr {
    if rng.random_bool(0.25) { col(*pick(rng, &[S, S, T])) } else { gen_num_expr(rng) }
}

/// A literal for comparisons with `expr`: often a value from the data,
/// else boundary values, values outside the type's range, or NULL.
fn gen_literal(rng: &mut StdRng, expr: &MapExpr, rows: &[Row]) -> Scalar {
    let ty = ty_of(expr);
    let r = rng.random_range(0..100);
    if r < 4 {
        return Scalar::Null;
    }
    if r < 60
        && !rows.is_empty()
        && let Some(v) = eval(expr, pick(rng, rows))
    {
        return ty.scalar(&v);
    }
    let small = rng.random_range(-1000i64..1000);
    match ty {
        Ty::I64 => Scalar::Int(*pick(rng, &[i64::MIN, i64::MAX, 0, -1, 1, small, small])),
        Ty::I32 => Scalar::Int(*pick(rng, &[i32::MIN as i64, i32::MAX as i64, 1 << 40, -(1 << 40), 0, small, small])),
        Ty::Date => Scalar::Int(*pick(rng, &[i32::MIN as i64, i32::MAX as i64, i64::MAX, i64::MIN, 19_000, small])),
        // (UInt32 computes in i64: a literal above i64::MAX is rejected.)
        Ty::U32 => Scalar::UInt(*pick(rng, &[0, u32::MAX as u64, 1 << 40, i64::MAX as u64, small.unsigned_abs()])),
        Ty::U64 => Scalar::UInt(*pick(rng, &[0, u64::MAX, 1 << 63, small.unsigned_abs()])),
        Ty::F64 => Scalar::Float(*pick(
            rng,
            &[
                f64::NAN,
                -0.0,
                0.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::MAX,
                -f64::MAX,
                f64::MIN_POSITIVE,
                0.25,
                small as f64 / 4.0,
            ],
        )),
        Ty::Dec => Scalar::Decimal(*pick(
            rng,
            &[0, DEC_LIMIT, -DEC_LIMIT, 10i128.pow(20), -(10i128.pow(20)), i128::MAX, i128::MIN, small as i128],
        )),
        Ty::Bool => Scalar::Boolean(rng.random_bool(0.5)),
        Ty::Str => Scalar::Bytes(
            pick(rng, &[&b""[..], b"a", b"ab", b"abc", b"b", b"\xff", "ünï".as_bytes(), b"zzz", b"a\0", b"name_0042"])
                .to_vec(),
        ),
    }
}

fn gen_prefix(rng: &mut StdRng, c: usize, rows: &[Row]) -> Vec<u8> {
    if rng.random_bool(0.6)
        && !rows.is_empty()
        && let Some(V::S(b)) = &pick(rng, rows)[c]
    {
        // Any byte length, also one that cuts a character in two.
        let n = rng.random_range(0..=b.len().min(6));
        return b[..n].to_vec();
    }
    pick(rng, &[&b""[..], b"a", b"ab", b"b", b"n", "ü".as_bytes(), b"\xc3", b"\xff", b"z\0", b"name_", b"s0000"])
        .to_vec()
}

/// A LIKE pattern: a prefix, or one to four literal parts (pieces of the
/// rows' values, or fixed strings) between `%`s.
fn gen_like(rng: &mut StdRng, c: usize, rows: &[Row]) -> LikePattern {
    if rng.random_bool(0.3) {
        return LikePattern::prefix(&gen_prefix(rng, c, rows));
    }
    let n = rng.random_range(1..=4);
    let parts = (0..n)
        .map(|_| {
            if rng.random_bool(0.6)
                && !rows.is_empty()
                && let Some(V::S(b)) = &pick(rng, rows)[c]
            {
                // Any bytes of a value, also ones that cut a character.
                let start = rng.random_range(0..=b.len());
                let len = rng.random_range(0..=(b.len() - start).min(4));
                return b[start..start + len].to_vec();
            }
            pick(rng, &[&b""[..], &b""[..], b"a", b"0", b"_", b"%", "ü".as_bytes(), b"\xff", b"name"]).to_vec()
        })
        .collect();
    LikePattern::from_parts(parts)
}

fn gen_op(rng: &mut StdRng) -> CmpOp {
    *pick(rng, &[CmpOp::Eq, CmpOp::NotEq, CmpOp::Lt, CmpOp::LtEq, CmpOp::Gt, CmpOp::GtEq])
}

fn gen_leaf(rng: &mut StdRng, rows: &[Row]) -> Predicate {
    match rng.random_range(0..100) {
        0..38 => {
            let expr = gen_any_expr(rng);
            let value = gen_literal(rng, &expr, rows);
            Predicate::Compare { expr, op: gen_op(rng), value }
        }
        38..50 => {
            let expr = gen_any_expr(rng);
            let (low, high) = (gen_literal(rng, &expr, rows), gen_literal(rng, &expr, rows));
            Predicate::Between { expr, low, high, negated: rng.random_bool(0.3) }
        }
        50..65 => {
            let expr = gen_any_expr(rng);
            let n = rng.random_range(1..=6);
            let values = (0..n).map(|_| gen_literal(rng, &expr, rows)).collect();
            Predicate::InList { expr, values, negated: rng.random_bool(0.3) }
        }
        65..75 => {
            let expr = gen_any_expr(rng);
            if rng.random_bool(0.5) { Predicate::IsNull(expr) } else { Predicate::IsNotNull(expr) }
        }
        75..90 => {
            let c = *pick(rng, &[S, S, T]);
            Predicate::Like { expr: col(c), pattern: gen_like(rng, c, rows), negated: rng.random_bool(0.3) }
        }
        90..94 => Predicate::Const(rng.random_bool(0.5)),
        _ => {
            // The classic `x % k = r` on an integer column.
            let (c, ty) = *pick(rng, &[(A, Ty::I64), (B, Ty::I32), (RID, Ty::I64)]);
            let k = rng.random_range(2..10i64);
            Predicate::Compare {
                expr: ar(col(c), ArithOp::Rem, lit(Scalar::Int(k), ty)),
                op: gen_op(rng),
                value: Scalar::Int(rng.random_range(-k + 1..k)),
            }
        }
    }
}

fn gen_pred(rng: &mut StdRng, rows: &[Row], depth: u32) -> Predicate {
    if depth == 0 || rng.random_bool(0.45) {
        return gen_leaf(rng, rows);
    }
    match rng.random_range(0..10) {
        0..4 => Predicate::And((0..rng.random_range(2..=3)).map(|_| gen_pred(rng, rows, depth - 1)).collect()),
        4..8 => Predicate::Or((0..rng.random_range(2..=3)).map(|_| gen_pred(rng, rows, depth - 1)).collect()),
        _ => Predicate::Not(Box::new(gen_pred(rng, rows, depth - 1))),
    }
}

fn gen_filter(rng: &mut StdRng, rows: &[Row]) -> Option<Predicate> {
    if rng.random_bool(0.08) {
        return None;
    }
    let depth = rng.random_range(0..=3);
    Some(gen_pred(rng, rows, depth))
}

/// Aggregates: COUNT(*) and a random selection of COUNT, SUM, MIN, MAX
/// and AVG over columns (strings, booleans and dates included where the
/// function takes them) and expressions.
fn gen_aggregates(rng: &mut StdRng) -> Vec<Aggregate> {
    let mut aggs = vec![Aggregate::count_star()];
    for _ in 0..rng.random_range(3..=7) {
        let agg = match rng.random_range(0..5) {
            0 => Aggregate::new(AggFunc::Count, gen_any_expr(rng)),
            1 | 2 => {
                let func = if rng.random_bool(0.5) { AggFunc::Min } else { AggFunc::Max };
                Aggregate::new(func, gen_any_expr(rng))
            }
            _ => {
                let func = if rng.random_bool(0.6) { AggFunc::Sum } else { AggFunc::Avg };
                let mut e = gen_num_expr(rng);
                while !ty_of(&e).summable() {
                    e = gen_num_expr(rng);
                }
                Aggregate::new(func, e)
            }
        };
        aggs.push(agg);
    }
    aggs
}

/// Group keys: one or two, from columns (string ones included) and
/// expressions.
fn gen_keys(rng: &mut StdRng) -> Vec<MapExpr> {
    let candidates = |rng: &mut StdRng| match rng.random_range(0..16) {
        0 => col(A),
        1 => col(B),
        2 => col(C),
        3 => col(E),
        4 => col(F),
        5 | 6 => col(S),
        7 => col(T),
        8 => col(FLAG),
        9 => col(D),
        10 => col(DAY),
        11 => ar(col(A), ArithOp::Rem, lit(Scalar::Int(7), Ty::I64)),
        12 => ar(col(B), ArithOp::Div, lit(Scalar::Int(10), Ty::I32)),
        13 => ar(col(C), ArithOp::Rem, lit(Scalar::UInt(5), Ty::U32)),
        14 => col(FLAG).cast(DataType::Int64),
        _ => ar(col(E), ArithOp::Rem, lit(Scalar::UInt(3), Ty::U64)),
    };
    let n = rng.random_range(1..=2);
    (0..n).map(|_| candidates(rng)).collect()
}

/// Two option sets per query: a full id buffer and a tiny one, on one or
/// two threads.
fn gen_options(rng: &mut StdRng) -> [ScanOptions; 2] {
    let threads = |rng: &mut StdRng| if rng.random_bool(0.5) { 1 } else { 2 };
    let full = ScanOptions::default().with_threads(threads(rng)).with_id_buffer(*pick(rng, &[0, 1024]));
    let tiny = ScanOptions::default().with_threads(threads(rng)).with_id_buffer(*pick(rng, &[1, 3, 7, 64]));
    [full, tiny]
}

fn show_opts(o: &ScanOptions) -> String {
    format!("threads {} id_buffer {} limit {:?}", o.threads, o.id_buffer, o.limit)
}

fn show_exprs(v: &[MapExpr]) -> String {
    v.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ")
}

fn show_aggs(v: &[Aggregate]) -> String {
    v.iter()
        .map(|a| match &a.input {
            None => "COUNT(*)".to_string(),
            Some(e) => format!("{:?}({e})", a.func),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn show_filter(f: Option<&Predicate>) -> String {
    f.map_or("<none>".into(), |p| p.to_string())
}

/// Mismatches collected over a run (so one bug does not hide the others).
#[derive(Default)]
struct Mismatches {
    list: Vec<String>,
    checks: usize,
}

impl Mismatches {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.checks += 1;
        if !ok {
            self.list.push(what());
        }
    }

    fn assert_none(&self, test: &str) {
        if !self.list.is_empty() {
            let shown: Vec<&String> = self.list.iter().take(6).collect();
            panic!(
                "{test}: {} of {} checks failed; the first:\n\n{}",
                self.list.len(),
                self.checks,
                shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n\n")
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Running quiverdb
// ---------------------------------------------------------------------------

fn run_aggregate(
    snapshot: &TableSnapshot,
    filter: Option<&Predicate>,
    keys: &[MapExpr],
    aggs: &[Aggregate],
    options: &ScanOptions,
) -> Result<AggregateOutput, String> {
    let spec =
        Arc::new(AggregateSpec::new(keys.to_vec(), aggs.to_vec(), snapshot.schema()).map_err(|e| e.to_string())?);
    let acc = scan(snapshot, filter, options, || AggregateKernel::new(Arc::clone(&spec)), || spec.new_acc())
        .map_err(|e| format!("scan: {e}"))?;
    acc.finish().map_err(|e| format!("finish: {e}"))
}

fn run_gather(
    snapshot: &TableSnapshot,
    filter: Option<&Predicate>,
    exprs: &[MapExpr],
    batch_size: usize,
    options: &ScanOptions,
) -> Result<Vec<Row>, String> {
    let named = exprs.iter().enumerate().map(|(i, e)| (e.clone(), format!("x{i}"))).collect();
    let spec = Arc::new(GatherSpec::new(named, snapshot.schema(), batch_size).map_err(|e| e.to_string())?);
    let acc = scan(snapshot, filter, options, || GatherKernel::new(Arc::clone(&spec)), || spec.new_acc())
        .map_err(|e| format!("scan: {e}"))?;
    Ok(rows_of(&acc.finish().map_err(|e| format!("finish: {e}"))?))
}

/// Compares an aggregation's output with the reference.
fn compare_aggregation(
    out: &Result<AggregateOutput, String>,
    expected: &Result<AggRows, String>,
    keys: &[MapExpr],
    aggs: &[Aggregate],
) -> Result<(), String> {
    let out = match (out, expected) {
        (Err(_), Err(_)) => return Ok(()),
        (Err(e), Ok(_)) => return Err(format!("quiverdb failed: {e}")),
        (Ok(_), Err(e)) => return Err(format!("expected an error ({e}), quiverdb succeeded")),
        (Ok(o), Ok(_)) => o,
    };
    let expected = expected.as_ref().expect("checked");
    if out.keys.len() != keys.len() || out.values.len() != aggs.len() {
        return Err(format!("{} key and {} value columns", out.keys.len(), out.values.len()));
    }
    for (k, a) in keys.iter().zip(&out.keys) {
        if a.data_type() != &ty_of(k).data_type() {
            return Err(format!("key {k} has type {}", a.data_type()));
        }
    }
    for (agg, a) in aggs.iter().zip(&out.values) {
        let want = agg_type(agg.func, agg.input.as_ref().map(ty_of));
        if a.data_type() != &want {
            return Err(format!(
                "{} has type {}, expected {want}",
                show_aggs(std::slice::from_ref(agg)),
                a.data_type()
            ));
        }
    }
    let n = out.values[0].len();
    let key_cols: Vec<Vec<Cell>> = out.keys.iter().map(|a| cells(a.as_ref())).collect();
    let value_cols: Vec<Vec<Cell>> = out.values.iter().map(|a| cells(a.as_ref())).collect();
    let mut got: Vec<(Vec<Cell>, Vec<Cell>)> = (0..n)
        .map(|i| (key_cols.iter().map(|c| c[i].clone()).collect(), value_cols.iter().map(|c| c[i].clone()).collect()))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    if got.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err("a group key appears twice".into());
    }
    if got.len() != expected.len() {
        let keys_of = |v: Vec<&Vec<Cell>>| v.iter().take(5).map(|k| show_row(k)).collect::<Vec<_>>().join(" ");
        return Err(format!(
            "{} groups, expected {}; got keys {} ; expected keys {}",
            got.len(),
            expected.len(),
            keys_of(got.iter().map(|g| &g.0).collect()),
            keys_of(expected.iter().map(|g| &g.0).collect())
        ));
    }
    for ((gk, gv), (ek, ev)) in got.iter().zip(expected) {
        if gk != ek {
            return Err(format!("group key {} where {} was expected", show_row(gk), show_row(ek)));
        }
        for (i, (g, e)) in gv.iter().zip(ev).enumerate() {
            if !cell_matches(e, g) {
                return Err(format!(
                    "group {}: {} = {}, expected {}",
                    show_row(gk),
                    show_aggs(std::slice::from_ref(&aggs[i])),
                    show_row(std::slice::from_ref(g)),
                    show_row(std::slice::from_ref(&e.cell))
                ));
            }
        }
    }
    Ok(())
}

const CAPACITIES: [usize; 4] = [7, 100, 1000, 65_536];

/// A table size: mostly moderate, sometimes empty or tiny.
fn gen_size(rng: &mut StdRng) -> usize {
    match rng.random_range(0..10) {
        0 => rng.random_range(0..3),
        1 | 2 => rng.random_range(3..100),
        3..7 => rng.random_range(100..1500),
        _ => rng.random_range(1500..=3000),
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// The building blocks themselves: random appends, deletes and rebuilds
/// keep the table equal to the reference (checked inside `Fixture::new`),
/// and full scans count and gather every live row.
#[test]
fn random_tables_match_the_reference() {
    let mut m = Mismatches::default();
    for case in 0..16u64 {
        let mut rng = StdRng::seed_from_u64(1000 + case);
        let (fx, mut rng2) = Fixture::new(1000 + case, CAPACITIES[case as usize % 4], gen_size(&mut rng));
        let snapshot = fx.table.snapshot();
        assert_eq!(snapshot.row_count(), fx.rows.len(), "{}", fx.desc);
        for options in gen_options(&mut rng2) {
            let out = run_aggregate(&snapshot, None, &[], &[Aggregate::count_star()], &options);
            let n = out.map(|o| cells(o.values[0].as_ref())[0].clone());
            m.check(n == Ok(Some(V::I(fx.rows.len() as i128))), || format!("{}: COUNT(*) = {n:?}", fx.desc));
            let all: Vec<MapExpr> = (0..NCOLS).map(col).collect();
            let mut got = run_gather(&snapshot, None, &all, 1000, &options).expect("gather all");
            got.sort();
            let mut expected = fx.rows.clone();
            expected.sort();
            m.check(got == expected, || format!("{}: gather of all rows\n{}", fx.desc, diff_rows(&expected, &got)));
        }
    }
    m.assert_none("random_tables_match_the_reference");
}

/// Random predicates × every reducer: ungrouped aggregates, grouped
/// aggregates (one or two keys, expressions and strings among them) and
/// gathers (all columns plus computed expressions), each on a full and a
/// tiny id buffer, one or two threads; plus limited scans.
#[test]
fn random_predicates_and_reducers_match_the_reference() {
    let mut m = Mismatches::default();
    let mut partial = 0; // filters that select some but not all rows
    let mut sizable = 0; // queries on tables of 10 rows or more
    let mut expected_errors = 0;
    let mut pruned = 0; // filters that let planning leave shards out
    let mut cases = 0;
    let mut string_encodings = HashSet::new(); // of the main storage of `s` and `t`
    for t in 0..24u64 {
        let seed = 2000 + t;
        let mut size_rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let (fx, mut rng) = Fixture::new(seed, CAPACITIES[t as usize % 4], gen_size(&mut size_rng));
        let snapshot = fx.table.snapshot();
        for shard in snapshot.shards() {
            for c in [S, T] {
                string_encodings.extend(shard.main().column(c).map(|col| col.kind()));
            }
        }
        for q in 0..20 {
            cases += 1;
            let filter = gen_filter(&mut rng, &fx.rows);
            let f = filter.as_ref();
            let rows = matching(&fx.rows, f);
            if fx.rows.len() >= 10 {
                sizable += 1;
                if !rows.is_empty() && rows.len() < fx.rows.len() {
                    partial += 1;
                }
            }
            let ctx = |what: &str, o: &ScanOptions| {
                format!("{} query {q}: {what}\n  WHERE {}\n  {}", fx.desc, show_filter(f), show_opts(o))
            };
            let [full, tiny] = gen_options(&mut rng);

            // Ungrouped aggregates.
            let aggs = gen_aggregates(&mut rng);
            let expected = ref_aggregation(&rows, &[], &aggs);
            if expected.is_err() {
                expected_errors += 1;
            }
            for o in [&full, &tiny] {
                let out = run_aggregate(&snapshot, f, &[], &aggs, o);
                let r = compare_aggregation(&out, &expected, &[], &aggs);
                m.check(r.is_ok(), || {
                    format!(
                        "{}\n  SELECT {}\n  {}",
                        ctx("aggregate", o),
                        show_aggs(&aggs),
                        r.clone().expect_err("a mismatch")
                    )
                });
            }

            // COUNT(*) alone: a kernel that reads no column, only how many
            // rows each block selects.
            for o in [&full, &tiny] {
                let out = run_aggregate(&snapshot, f, &[], &[Aggregate::count_star()], o);
                let n = out.as_ref().map(|o| cells(o.values[0].as_ref())[0].clone());
                m.check(n == Ok(Some(V::I(rows.len() as i128))), || {
                    format!("{}\n  COUNT(*) = {n:?}, expected {}", ctx("count", o), rows.len())
                });
            }

            // Grouped aggregates.
            let keys = gen_keys(&mut rng);
            let aggs = gen_aggregates(&mut rng);
            let expected = ref_aggregation(&rows, &keys, &aggs);
            for o in [&full, &tiny] {
                let out = run_aggregate(&snapshot, f, &keys, &aggs, o);
                let r = compare_aggregation(&out, &expected, &keys, &aggs);
                m.check(r.is_ok(), || {
                    format!(
                        "{}\n  SELECT {} GROUP BY {}\n  {}",
                        ctx("grouped aggregate", o),
                        show_aggs(&aggs),
                        show_exprs(&keys),
                        r.clone().expect_err("a mismatch")
                    )
                });
            }

            // Gather: every column plus computed expressions.
            let mut exprs: Vec<MapExpr> = (0..NCOLS).map(col).collect();
            for _ in 0..rng.random_range(0..=2) {
                exprs.push(gen_num_expr(&mut rng));
            }
            let mut expected: Vec<Row> = rows.iter().map(|r| exprs.iter().map(|e| eval(e, r)).collect()).collect();
            expected.sort();
            let batch_size = *pick(&mut rng, &[1, 7, 100, 1024, 5000]);
            for o in [&full, &tiny] {
                let got = run_gather(&snapshot, f, &exprs, batch_size, o).map(|mut g| {
                    g.sort();
                    g
                });
                m.check(got.as_ref() == Ok(&expected), || {
                    let detail = match &got {
                        Err(e) => format!("quiverdb failed: {e}"),
                        Ok(g) => diff_rows(&expected, g),
                    };
                    format!(
                        "{}\n  SELECT {} (batch size {batch_size})\n  {detail}",
                        ctx("gather", o),
                        show_exprs(&exprs)
                    )
                });
            }

            // Planning's shard pruning keeps every shard with a match: the
            // gather over the candidate shards alone finds the same rows.
            if let Some(p) = f {
                let kept = candidate_shards(&snapshot, p).map_err(|e| e.to_string());
                if kept.as_ref().is_ok_and(|k| k.len() < snapshot.num_shards()) {
                    pruned += 1;
                }
                let o = full.clone().with_shards(kept.clone().unwrap_or_default());
                let got = kept
                    .as_ref()
                    .map_err(Clone::clone)
                    .and_then(|_| run_gather(&snapshot, f, &exprs, batch_size, &o))
                    .map(|mut g| {
                        g.sort();
                        g
                    });
                m.check(got.as_ref() == Ok(&expected), || {
                    let detail = match &got {
                        Err(e) => format!("quiverdb failed: {e}"),
                        Ok(g) => diff_rows(&expected, g),
                    };
                    format!(
                        "{}
  candidate shards {kept:?}
  {detail}",
                        ctx("gather over candidate shards", &o)
                    )
                });
            }

            // A limited unordered scan streams exactly min(limit, matches)
            // distinct matching rows.
            let limit = rng.random_range(0..=rows.len() + 3);
            let o = tiny.clone().with_limit(Some(limit));
            let got = run_gather(&snapshot, f, &[col(RID)], 1024, &o);
            let want: HashSet<i64> = rows.iter().map(|r| rid_of(r)).collect();
            let ok = got.as_ref().is_ok_and(|g| {
                let rids: HashSet<i64> = g.iter().map(rid_of).collect();
                g.len() == limit.min(rows.len()) && rids.len() == g.len() && rids.is_subset(&want)
            });
            m.check(ok, || {
                format!(
                    "{}\n  LIMIT {limit} of {} matches: got {:?} rows",
                    ctx("limited gather", &o),
                    rows.len(),
                    got.map(|g| g.len())
                )
            });
            let out = run_aggregate(&snapshot, f, &[], &[Aggregate::count_star()], &o);
            let n = out.as_ref().map(|o| cells(o.values[0].as_ref())[0].clone());
            m.check(n == Ok(Some(V::I(limit.min(rows.len()) as i128))), || {
                format!("{}\n  COUNT(*) LIMIT {limit} of {} matches = {n:?}", ctx("limited count", &o), rows.len())
            });
        }
    }
    m.assert_none("random_predicates_and_reducers_match_the_reference");
    // The generators must produce meaningful cases.
    assert!(partial * 10 >= sizable * 3, "only {partial} of {sizable} filters were selective");
    assert!(cases >= 400, "{cases} cases");
    assert!(expected_errors > 0, "no case expected a SUM overflow");
    assert!(pruned > 0, "no filter let planning leave a shard out");
    for kind in [EncodingKind::Dictionary, EncodingKind::Plain, EncodingKind::Fsst] {
        assert!(string_encodings.contains(&kind), "no string column was {kind}: {string_encodings:?}");
    }
}

/// GROUP BY a dictionary string column without nulls, or by an integer
/// function of an integer column without nulls (`b / 10`), the cases the
/// aggregate kernel folds by dictionary code or by value: whole tables
/// (every main row so), deleted rows and filters (some blocks so, the
/// others not), and limits that cut a shard short, against the reference.
#[test]
fn grouping_by_code_or_value_matches_the_reference() {
    let mut m = Mismatches::default();
    let mut by_code_shards = 0; // shards whose `s` is a dictionary without nulls
    for t in 0..16u64 {
        let seed = 7000 + t;
        let mut size_rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let size = size_rng.random_range(10..=500);
        let capacity = [100, 2500, 65_536][t as usize % 3];
        let (mut fx, mut rng) = Fixture::with_profile(seed, capacity, size, |p| {
            p.nulls[S] = 0.0;
            p.shapes[S] = *pick(
                &mut size_rng,
                &[Shape::FewDistinct, Shape::Runs, Shape::Ascending, Shape::Ascending, Shape::Extremes],
            );
            // Integer keys: narrow ranges (folded by value), or a wide
            // sequence (not).
            for c in [A, B, C] {
                p.nulls[c] = 0.0;
                p.shapes[c] = *pick(
                    &mut size_rng,
                    &[Shape::SmallRange, Shape::FewDistinct, Shape::Runs, Shape::Ascending, Shape::Sequence],
                );
            }
        });
        // Main storage of several blocks per shard; a few deleted rows in
        // half the tables.
        let n = rng.random_range(2000..=5000);
        fx.append_batch(&mut rng, n);
        fx.table.rebuild().expect("rebuild");
        let deleted = if t % 2 == 0 { fx.random_delete(&mut rng, 0.002) } else { 0 };
        fx.desc = format!("{}, then append {n}, rebuild, delete {deleted} ({} live rows)", fx.desc, fx.rows.len());
        fx.assert_contents();
        let snapshot = fx.table.snapshot();
        by_code_shards += (0..snapshot.num_shards())
            .filter(|&i| {
                let main = snapshot.shard(i).main();
                main.column(S).is_some_and(|c| c.string_dictionary().is_some() && c.null_count() == 0)
            })
            .count();
        for q in 0..12 {
            let keys = match q % 4 {
                0 | 1 => vec![col(S)],
                2 => vec![
                    pick(
                        &mut rng,
                        &[
                            ar(col(B), ArithOp::Div, lit(Scalar::Int(10), Ty::I32)),
                            ar(col(A), ArithOp::Rem, lit(Scalar::Int(7), Ty::I64)),
                        ],
                    )
                    .clone(),
                ],
                _ => vec![ar(col(C), ArithOp::Rem, lit(Scalar::UInt(5), Ty::U32))],
            };
            // Random filters; a prefix of the ids (whole blocks, then part
            // of one); none.
            let filter = match q % 3 {
                0 => gen_filter(&mut rng, &fx.rows),
                1 => Some(Predicate::cmp(col(RID), CmpOp::Lt, Scalar::Int(rng.random_range(0..=fx.next_rid + 1)))),
                _ => None,
            };
            let f = filter.as_ref();
            let rows = matching(&fx.rows, f);
            let aggs = gen_aggregates(&mut rng);
            let expected = ref_aggregation(&rows, &keys, &aggs);
            for o in gen_options(&mut rng) {
                let out = run_aggregate(&snapshot, f, &keys, &aggs, &o);
                let r = compare_aggregation(&out, &expected, &keys, &aggs);
                m.check(r.is_ok(), || {
                    format!(
                        "{} query {q}\n  SELECT {} GROUP BY {} WHERE {}\n  {}\n  {}",
                        fx.desc,
                        show_aggs(&aggs),
                        show_exprs(&keys),
                        show_filter(f),
                        show_opts(&o),
                        r.clone().expect_err("a mismatch")
                    )
                });
            }

            // A limit cuts a shard short: the groups counted are groups of
            // matching rows, with no more rows than they have, and the
            // counts add up to the limit.
            let limit = rng.random_range(0..=rows.len() + 3);
            let o = ScanOptions::default().with_threads(1).with_limit(Some(limit));
            let out = run_aggregate(&snapshot, f, &keys, &[Aggregate::count_star()], &o);
            let full = ref_aggregation(&rows, &keys, &[Aggregate::count_star()]).expect("COUNT(*) has no error");
            let ok = out.as_ref().is_ok_and(|out| {
                let groups = cells(out.keys[0].as_ref());
                let counts = cells(out.values[0].as_ref());
                let mut total = 0;
                groups.iter().zip(&counts).all(|(g, c)| {
                    let Some(V::I(n)) = c else { return false };
                    total += n;
                    let have = full.iter().find(|(k, _)| k[0] == *g).map(|(_, v)| v[0].cell.clone());
                    *n > 0 && matches!(have, Some(Some(V::I(h))) if h >= *n)
                }) && total == limit.min(rows.len()) as i128
            });
            m.check(ok, || {
                format!(
                    "{} query {q}: COUNT(*) GROUP BY {} WHERE {} LIMIT {limit}: {out:?}",
                    fx.desc,
                    show_exprs(&keys),
                    show_filter(f)
                )
            });
        }
    }
    m.assert_none("grouping_by_code_or_value_matches_the_reference");
    assert!(by_code_shards >= 16, "only {by_code_shards} shards hold `s` as a dictionary without nulls");
}

/// The reference ORDER BY: keys compared with NULLs first or last, values
/// ascending or descending.
fn cmp_keys(a: &[Cell], b: &[Cell], sort: &[SortKey]) -> Ordering {
    for (k, (x, y)) in sort.iter().zip(a.iter().zip(b)) {
        let o = match (x, y) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => {
                if k.nulls_first {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            (Some(_), None) => {
                if k.nulls_first {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            (Some(x), Some(y)) => {
                if k.descending {
                    y.cmp(x)
                } else {
                    x.cmp(y)
                }
            }
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

fn gen_sort_keys(rng: &mut StdRng) -> Vec<SortKey> {
    let n = rng.random_range(1..=2);
    (0..n)
        .map(|_| {
            let expr = match rng.random_range(0..18) {
                0 => col(A),
                1 => col(B),
                2 => col(C),
                3 => col(E),
                4 | 5 => col(F),
                6 | 7 => col(S),
                8 => col(T),
                9 => col(FLAG),
                10 => col(D),
                11 => col(DAY),
                12 => col(RID),
                13 => ar(col(A), ArithOp::Rem, lit(Scalar::Int(7), Ty::I64)),
                14 => ar(small(B, Ty::I32), ArithOp::Mul, lit(Scalar::Int(3), Ty::I32)),
                15 => ar(col(F), ArithOp::Mul, lit(Scalar::Float(2.0), Ty::F64)),
                16 => col(C).cast(DataType::Float64),
                _ => ar(col(E), ArithOp::Rem, lit(Scalar::UInt(5), Ty::U64)),
            };
            SortKey { expr, descending: rng.random_bool(0.5), nulls_first: rng.random_bool(0.5) }
        })
        .collect()
}

fn show_sort(sort: &[SortKey]) -> String {
    sort.iter()
        .map(|k| {
            format!(
                "{} {} NULLS {}",
                k.expr,
                if k.descending { "DESC" } else { "ASC" },
                if k.nulls_first { "FIRST" } else { "LAST" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Ordered scans: random sort keys, filters, offsets and limits. The
/// sequence of sort keys must equal the reference's exactly; every row
/// must be a distinct matching row carrying its own key values (so
/// without a limit the rows are exactly the matching ones). An aggregate
/// over the ordered rows counts them and finds the first key's extremes.
#[test]
fn random_ordered_scans_match_the_reference() {
    let mut m = Mismatches::default();
    let mut cases = 0;
    let mut limited = 0;
    for t in 0..24u64 {
        let seed = 3000 + t;
        let mut size_rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let (fx, mut rng) = Fixture::new(seed, CAPACITIES[t as usize % 4], gen_size(&mut size_rng));
        let snapshot = fx.table.snapshot();
        let by_rid: HashMap<i64, &Row> = fx.rows.iter().map(|r| (rid_of(r), r)).collect();
        for q in 0..20 {
            cases += 1;
            let filter = if rng.random_bool(0.4) { None } else { Some(gen_pred(&mut rng, &fx.rows, 2)) };
            let f = filter.as_ref();
            let sort = gen_sort_keys(&mut rng);
            let rows = matching(&fx.rows, f);
            let offset = if rng.random_bool(0.6) { 0 } else { rng.random_range(0..=rows.len() + 2) };
            let limit = match rng.random_range(0..10) {
                0..3 => None,
                3 => Some(0),
                4..7 => Some(rng.random_range(1..=10)),
                _ => Some(rng.random_range(1..=rows.len() + 5)),
            };
            if limit.is_some() {
                limited += 1;
            }
            let key_exprs: Vec<MapExpr> = sort.iter().map(|k| k.expr.clone()).collect();
            let mut expected: Vec<Vec<Cell>> =
                rows.iter().map(|r| key_exprs.iter().map(|e| eval(e, r)).collect()).collect();
            expected.sort_by(|a, b| cmp_keys(a, b, &sort));
            let expected: Vec<Vec<Cell>> =
                expected.into_iter().skip(offset).take(limit.unwrap_or(usize::MAX)).collect();
            let ctx = |o: &ScanOptions| {
                format!(
                    "{} query {q}: ordered scan\n  WHERE {}\n  ORDER BY {} OFFSET {offset} LIMIT {limit:?}\n  {}",
                    fx.desc,
                    show_filter(f),
                    show_sort(&sort),
                    show_opts(o)
                )
            };
            let nk = sort.len();
            let mut exprs = key_exprs.clone();
            exprs.extend((0..NCOLS).map(col));
            let named: Vec<(MapExpr, String)> =
                exprs.iter().enumerate().map(|(i, e)| (e.clone(), format!("x{i}"))).collect();
            let spec =
                Arc::new(GatherSpec::new(named, snapshot.schema(), *pick(&mut rng, &[3, 1024])).expect("gather spec"));
            for o in gen_options(&mut rng) {
                let out = scan_order(
                    &snapshot,
                    f,
                    OrderBy::new(&sort).with_offset(offset),
                    &o.clone().with_limit(limit),
                    || GatherKernel::new(Arc::clone(&spec)),
                    || spec.new_acc(),
                )
                .map_err(|e| e.to_string())
                .and_then(|acc| acc.finish().map_err(|e| e.to_string()));
                let got = match out {
                    Ok(b) => rows_of(&b),
                    Err(e) => {
                        m.check(false, || format!("{}\n  quiverdb failed: {e}", ctx(&o)));
                        continue;
                    }
                };
                let got_keys: Vec<Vec<Cell>> = got.iter().map(|r| r[..nk].to_vec()).collect();
                m.check(got_keys == expected, || {
                    let first = got_keys.iter().zip(&expected).position(|(g, e)| g != e);
                    format!(
                        "{}\n  {} rows, expected {}; first difference at {first:?}: got {:?}, expected {:?}",
                        ctx(&o),
                        got_keys.len(),
                        expected.len(),
                        first.map(|i| show_row(&got_keys[i])),
                        first.map(|i| show_row(&expected[i]))
                    )
                });
                let mut seen = HashSet::new();
                let bad = got.iter().find(|r| {
                    let row = &r[nk..];
                    let rid = rid_of(&row.to_vec());
                    let Some(reference) = by_rid.get(&rid) else { return true };
                    !seen.insert(rid)
                        || row != reference.as_slice()
                        || f.is_some_and(|p| eval_pred(p, reference) != Some(true))
                        || key_exprs.iter().zip(&r[..nk]).any(|(e, k)| &eval(e, reference) != k)
                });
                m.check(bad.is_none(), || {
                    format!("{}\n  row {} is not a distinct matching row", ctx(&o), show_row(bad.expect("a bad row")))
                });

                // The same ordered scan into an aggregate.
                if q % 3 == 0 {
                    let first_key = sort[0].expr.clone();
                    let aggs = vec![
                        Aggregate::count_star(),
                        Aggregate::new(AggFunc::Min, first_key.clone()),
                        Aggregate::new(AggFunc::Max, first_key),
                    ];
                    let aspec = Arc::new(AggregateSpec::new(vec![], aggs.clone(), snapshot.schema()).expect("spec"));
                    let out = scan_order(
                        &snapshot,
                        f,
                        OrderBy::new(&sort).with_offset(offset),
                        &o.clone().with_limit(limit),
                        || AggregateKernel::new(Arc::clone(&aspec)),
                        || aspec.new_acc(),
                    )
                    .map_err(|e| e.to_string())
                    .and_then(|acc| acc.finish().map_err(|e| e.to_string()));
                    let firsts: Vec<V> = expected.iter().filter_map(|k| k[0].clone()).collect();
                    let want = vec![
                        Some(V::I(expected.len() as i128)),
                        firsts.iter().min().cloned(),
                        firsts.iter().max().cloned(),
                    ];
                    let got = out.map(|o| o.values.iter().map(|a| cells(a.as_ref())[0].clone()).collect::<Vec<_>>());
                    m.check(got.as_ref() == Ok(&want), || {
                        format!("{}\n  {} = {got:?}, expected {}", ctx(&o), show_aggs(&aggs), show_row(&want))
                    });
                }
            }
        }
    }
    m.assert_none("random_ordered_scans_match_the_reference");
    assert!(limited * 2 >= cases, "too few limited ordered scans");
}

/// A random UPDATE assignment: a column and an expression of its type.
fn gen_assignment(rng: &mut StdRng) -> (usize, MapExpr) {
    match rng.random_range(0..14) {
        0 => (A, ar(small(A, Ty::I64), ArithOp::Add, lit(Scalar::Int(1), Ty::I64))),
        1 => (A, lit(Scalar::Null, Ty::I64)),
        2 => (A, col(B).cast(DataType::Int64)),
        3 => (B, ar(small(B, Ty::I32), ArithOp::Mul, lit(Scalar::Int(3), Ty::I32))),
        4 => (C, lit(Scalar::UInt(7), Ty::U32)),
        5 => (E, ar(col(E), ArithOp::Rem, lit(Scalar::UInt(5), Ty::U64))),
        6 => (F, ar(col(F), ArithOp::Mul, lit(Scalar::Float(0.5), Ty::F64))),
        7 => (S, col(T)),
        8 => (T, col(S)),
        9 => (FLAG, lit(Scalar::Boolean(rng.random_bool(0.5)), Ty::Bool)),
        10 => (D, ar(col(D), ArithOp::Sub, lit(Scalar::Decimal(150), Ty::Dec)).cast(DataType::Decimal128(18, 2))),
        11 => (DAY, lit(Scalar::Int(19_000), Ty::Date)),
        12 => (F, lit(Scalar::Null, Ty::F64)),
        _ => (B, ar(col(B), ArithOp::Rem, lit(Scalar::Int(10), Ty::I32))),
    }
}

/// DELETE ... WHERE and UPDATE ... SET ... WHERE with random predicates,
/// interleaved with appends, raw deletes and rebuilds: the reported counts
/// and the table's contents afterwards equal the reference.
#[test]
fn random_delete_and_update_where_match_the_reference() {
    let mut m = Mismatches::default();
    let mut changed = 0;
    for t in 0..16u64 {
        let seed = 4000 + t;
        let mut size_rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let size = gen_size(&mut size_rng).min(1500);
        let (mut fx, mut rng) = Fixture::new(seed, CAPACITIES[t as usize % 4], size);
        for step in 0..16 {
            let options = gen_options(&mut rng)[rng.random_range(0..2)].clone();
            let what = match rng.random_range(0..10) {
                0..4 => {
                    let filter = gen_filter(&mut rng, &fx.rows);
                    let f = filter.as_ref();
                    let expected = matching(&fx.rows, f).len();
                    let got = delete_where(&fx.table, f, &options);
                    m.check(got.as_ref().ok() == Some(&expected), || {
                        format!(
                            "{} step {step}: DELETE WHERE {} ({}) = {got:?}, expected {expected}",
                            fx.desc,
                            show_filter(f),
                            show_opts(&options)
                        )
                    });
                    fx.rows.retain(|r| f.is_some_and(|p| eval_pred(p, r) != Some(true)));
                    changed += expected;
                    format!("DELETE WHERE {}", show_filter(f))
                }
                4..8 => {
                    let filter = gen_filter(&mut rng, &fx.rows);
                    let f = filter.as_ref();
                    let mut assignments = vec![gen_assignment(&mut rng)];
                    if rng.random_bool(0.5) {
                        let a = gen_assignment(&mut rng);
                        if a.0 != assignments[0].0 {
                            assignments.push(a);
                        }
                    }
                    let mut expected = 0;
                    for r in fx.rows.iter_mut() {
                        if f.is_none_or(|p| eval_pred(p, r) == Some(true)) {
                            let new: Vec<(usize, Cell)> = assignments.iter().map(|(c, e)| (*c, eval(e, r))).collect();
                            for (c, v) in new {
                                r[c] = v;
                            }
                            expected += 1;
                        }
                    }
                    let got = update_where(&fx.table, &assignments, f, &options);
                    let set =
                        assignments.iter().map(|(c, e)| format!("{} = {e}", NAMES[*c])).collect::<Vec<_>>().join(", ");
                    m.check(got.as_ref().ok() == Some(&expected), || {
                        format!(
                            "{} step {step}: UPDATE SET {set} WHERE {} ({}) = {got:?}, expected {expected}",
                            fx.desc,
                            show_filter(f),
                            show_opts(&options)
                        )
                    });
                    changed += expected;
                    format!("UPDATE SET {set} WHERE {}", show_filter(f))
                }
                8 => {
                    let n = rng.random_range(1..200);
                    fx.append_batch(&mut rng, n);
                    format!("append {n}")
                }
                _ => {
                    fx.table.rebuild().expect("rebuild");
                    "rebuild".into()
                }
            };
            let mut expected = fx.rows.clone();
            expected.sort();
            let got = stored_rows(&fx.table.snapshot());
            let ok = got == expected;
            m.check(ok, || format!("{} step {step}: after {what}\n{}", fx.desc, diff_rows(&expected, &got)));
            if !ok {
                break; // the reference no longer describes the table
            }
        }
    }
    m.assert_none("random_delete_and_update_where_match_the_reference");
    assert!(changed > 0, "no DELETE or UPDATE changed a row");
}

// ---------------------------------------------------------------------------
// Targeted cases: errors and SQL corner cases
// ---------------------------------------------------------------------------

/// A one-shard table of `rows` (all appended; rebuilt into main storage
/// when `rebuild`).
fn small_table(rows: Vec<Row>, rebuild: bool) -> (Database, Table) {
    let db = Database::new();
    let table = db
        .create_table("t", &arrow_schema(), TableOptions::default().with_background_rebuild(false))
        .expect("create table");
    if !rows.is_empty() {
        table.append(&batch_of(&rows)).expect("append");
    }
    if rebuild {
        table.rebuild().expect("rebuild");
    }
    (db, table)
}

/// A row with `rid` and the given `a` (Int64) and `e` (UInt64); the other
/// columns are fixed.
fn row_ae(rid: i64, a: Option<i64>, e: Option<u64>) -> Row {
    let mut r: Row = vec![None; NCOLS];
    r[RID] = Some(V::I(rid as i128));
    r[A] = a.map(|x| V::I(x as i128));
    r[B] = Some(V::I(rid as i128));
    r[E] = e.map(|x| V::I(x as i128));
    r[DAY] = Some(V::I(0));
    r
}

fn sum_of(table: &Table, keys: Vec<MapExpr>, input: MapExpr) -> Result<Vec<Cell>, String> {
    let out =
        run_aggregate(&table.snapshot(), None, &keys, &[Aggregate::new(AggFunc::Sum, input)], &ScanOptions::default())?;
    Ok(cells(out.values[0].as_ref()))
}

#[test]
fn integer_sum_overflow_is_an_error() {
    for rebuild in [false, true] {
        for keys in [vec![], vec![col(FLAG)]] {
            // i64::MAX twice overflows Int64.
            let (_db, t) = small_table(vec![row_ae(1, Some(i64::MAX), None), row_ae(2, Some(i64::MAX), None)], rebuild);
            let r = sum_of(&t, keys.clone(), col(A));
            assert!(r.is_err(), "SUM(i64::MAX, i64::MAX) = {r:?} (rebuilt: {rebuild}, keys {keys:?})");
            // ... also far below i64::MIN, and through an expression.
            let (_db, t) = small_table(vec![row_ae(1, Some(i64::MIN), None), row_ae(2, Some(-1), None)], rebuild);
            assert!(sum_of(&t, keys.clone(), col(A)).is_err(), "SUM(i64::MIN, -1) (rebuilt: {rebuild})");
            let plus_zero = ar(col(A), ArithOp::Add, lit(Scalar::Int(0), Ty::I64));
            let (_db, t) = small_table(vec![row_ae(1, Some(i64::MAX), None), row_ae(2, Some(1), None)], rebuild);
            assert!(sum_of(&t, keys.clone(), plus_zero).is_err(), "SUM(a + 0) over i64::MAX, 1 (rebuilt: {rebuild})");
            // u64::MAX + 1 overflows UInt64.
            let (_db, t) = small_table(vec![row_ae(1, None, Some(u64::MAX)), row_ae(2, None, Some(1))], rebuild);
            let r = sum_of(&t, keys.clone(), col(E));
            assert!(r.is_err(), "SUM(u64::MAX, 1) = {r:?} (rebuilt: {rebuild})");
            // Partial sums may leave the range as long as the total fits.
            let (_db, t) = small_table(
                vec![
                    row_ae(1, Some(i64::MAX), None),
                    row_ae(2, Some(i64::MAX), None),
                    row_ae(3, Some(-i64::MAX), None),
                    row_ae(4, Some(-i64::MAX), None),
                    row_ae(5, Some(7), None),
                ],
                rebuild,
            );
            let r = sum_of(&t, vec![], col(A));
            assert_eq!(r, Ok(vec![Some(V::I(7))]), "SUM with an in-range total (rebuilt: {rebuild})");
        }
    }
}

fn expect_error<T: std::fmt::Debug>(what: &str, r: Result<T, String>) {
    assert!(r.is_err(), "{what}: expected an error, got {r:?}");
}

#[test]
fn division_by_zero_is_an_error() {
    let rows: Vec<Row> = (1..=50).map(|i| row_ae(i, Some(i), Some(i as u64))).collect();
    for rebuild in [false, true] {
        let (_db, t) = small_table(rows.clone(), rebuild);
        let snapshot = t.snapshot();
        let zero64 = lit(Scalar::Int(0), Ty::I64);
        let o = ScanOptions::default();
        // In a predicate.
        let p = Predicate::cmp(ar(col(A), ArithOp::Div, zero64.clone()), CmpOp::Eq, Scalar::Int(1));
        expect_error("a / 0 = 1", run_aggregate(&snapshot, Some(&p), &[], &[Aggregate::count_star()], &o));
        let p = Predicate::IsNull(ar(col(E), ArithOp::Rem, lit(Scalar::UInt(0), Ty::U64)));
        expect_error("e % 0 IS NULL", run_aggregate(&snapshot, Some(&p), &[], &[Aggregate::count_star()], &o));
        // By a zero computed from the data.
        let p = Predicate::cmp(ar(col(B), ArithOp::Div, ar(col(B), ArithOp::Sub, col(B))), CmpOp::Gt, Scalar::Int(0));
        expect_error("b / (b - b) > 0", run_aggregate(&snapshot, Some(&p), &[], &[Aggregate::count_star()], &o));
        // In aggregates, group keys and gathers.
        expect_error("SUM(a % 0)", sum_of(&t, vec![], ar(col(A), ArithOp::Rem, zero64.clone())));
        expect_error(
            "MAX(b / 0)",
            run_aggregate(
                &snapshot,
                None,
                &[],
                &[Aggregate::new(AggFunc::Max, ar(col(B), ArithOp::Div, lit(Scalar::Int(0), Ty::I32)))],
                &o,
            ),
        );
        expect_error(
            "GROUP BY a / 0",
            run_aggregate(&snapshot, None, &[ar(col(A), ArithOp::Div, zero64.clone())], &[Aggregate::count_star()], &o),
        );
        expect_error("gather a % 0", run_gather(&snapshot, None, &[ar(col(A), ArithOp::Rem, zero64.clone())], 100, &o));
        // In an ordered scan's key.
        let spec = Arc::new(GatherSpec::columns(snapshot.schema(), Some(&[RID]), 100).expect("spec"));
        let r = scan_order(
            &snapshot,
            None,
            OrderBy::new(&[SortKey::asc(ar(col(A), ArithOp::Div, zero64.clone()))]),
            &o.clone().with_limit(Some(5)),
            || GatherKernel::new(Arc::clone(&spec)),
            || spec.new_acc(),
        )
        .map_err(|e| e.to_string())
        .and_then(|a| a.finish().map_err(|e| e.to_string()));
        expect_error("ORDER BY a / 0", r);
        // In an UPDATE: nothing changes.
        let r = update_where(&t, &[(A, ar(col(A), ArithOp::Div, zero64.clone()))], None, &o);
        assert!(r.is_err(), "UPDATE SET a = a / 0: {r:?}");
        let mut expected = rows.clone();
        expected.sort();
        assert_eq!(stored_rows(&t.snapshot()), expected, "a failed UPDATE changed the table");
        // Float division by zero is IEEE, not an error.
        let p =
            Predicate::cmp(ar(col(F), ArithOp::Div, lit(Scalar::Float(0.0), Ty::F64)), CmpOp::Eq, Scalar::Float(1.0));
        let r = run_aggregate(&snapshot, Some(&p), &[], &[Aggregate::count_star()], &o);
        assert!(r.is_ok(), "f / 0.0: {r:?}");
        // A NULL divisor, or NULL dividends only, is no error: NULL.
        let p = Predicate::IsNull(ar(col(A), ArithOp::Div, lit(Scalar::Null, Ty::I64)));
        let r = run_aggregate(&snapshot, Some(&p), &[], &[Aggregate::count_star()], &o)
            .map(|o| cells(o.values[0].as_ref()));
        assert_eq!(r, Ok(vec![Some(V::I(50))]), "a / NULL IS NULL");
        let p = Predicate::IsNull(ar(col(C), ArithOp::Div, lit(Scalar::UInt(0), Ty::U32)));
        let r = run_aggregate(&snapshot, Some(&p), &[], &[Aggregate::count_star()], &o)
            .map(|o| cells(o.values[0].as_ref()));
        assert_eq!(r, Ok(vec![Some(V::I(50))]), "c / 0 over an all-NULL c");
    }
}

/// Deleted rows are not part of the table: a value that would fail an
/// expression must not fail a scan once its row is deleted.
#[test]
fn deleted_rows_do_not_raise_errors() {
    let mut failures = Vec::new();
    for rebuild in [false, true] {
        let mut rows: Vec<Row> = (1..=20).map(|i| row_ae(i, Some(i), None)).collect();
        rows[4][B] = Some(V::I(0)); // record 4 (rid 5) has b = 0
        let (_db, t) = small_table(rows, rebuild);
        let snapshot = t.snapshot();
        let shard = snapshot.shard(0);
        assert_eq!(t.delete(&snapshot, &[(shard.id(), vec![4])]).expect("delete"), 1);
        let snapshot = t.snapshot();
        // 100 / b = 10 holds for b = 10 only.
        let p = Predicate::cmp(ar(lit(Scalar::Int(100), Ty::I32), ArithOp::Div, col(B)), CmpOp::Eq, Scalar::Int(10));
        for threads in [1, 2] {
            let r = run_aggregate(
                &snapshot,
                Some(&p),
                &[],
                &[Aggregate::count_star()],
                &ScanOptions::default().with_threads(threads),
            )
            .map(|o| cells(o.values[0].as_ref()));
            if r != Ok(vec![Some(V::I(1))]) {
                failures.push(format!(
                    "COUNT(*) WHERE {p} over b = 1..20 after deleting the row with b = 0 (rebuilt before the delete: {rebuild}, threads {threads}) = {r:?}, expected 1"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn invalid_predicates_are_errors() {
    let rows: Vec<Row> = (1..=30).map(|i| row_ae(i, Some(i), Some(i as u64))).collect();
    let (_db, t) = small_table(rows.clone(), false);
    let snapshot = t.snapshot();
    let bad = vec![
        Predicate::cmp(col(A), CmpOp::Eq, Scalar::Bytes(b"1".to_vec())),
        Predicate::cmp(col(A), CmpOp::Lt, Scalar::Float(1.5)),
        Predicate::cmp(col(S), CmpOp::Eq, Scalar::Int(1)),
        Predicate::cmp(col(D), CmpOp::Eq, Scalar::Float(1.0)),
        Predicate::cmp(col(F), CmpOp::Eq, Scalar::Bytes(b"x".to_vec())),
        Predicate::cmp(col(FLAG), CmpOp::Eq, Scalar::Float(1.0)),
        Predicate::cmp(col(DAY), CmpOp::Eq, Scalar::Bytes(vec![])),
        Predicate::InList { expr: col(A), values: vec![Scalar::Int(1), Scalar::Bytes(b"2".to_vec())], negated: false },
        Predicate::Between { expr: col(S), low: Scalar::Bytes(b"a".to_vec()), high: Scalar::Int(3), negated: false },
        Predicate::Between { expr: col(B), low: Scalar::Int(1), high: Scalar::Decimal(3), negated: true },
        Predicate::Like { expr: col(A), pattern: LikePattern::prefix(b"1"), negated: false },
        Predicate::Like { expr: ar(col(A), ArithOp::Add, col(A)), pattern: LikePattern::prefix(b"1"), negated: false },
        Predicate::cmp(ar(col(A), ArithOp::Add, col(B)), CmpOp::Eq, Scalar::Int(1)),
        Predicate::cmp(col(99), CmpOp::Eq, Scalar::Int(1)),
        Predicate::IsNull(col(99)),
        Predicate::And(vec![Predicate::Const(true), Predicate::cmp(col(A), CmpOp::Eq, Scalar::Bytes(vec![]))]),
        Predicate::Or(vec![Predicate::Const(true), Predicate::cmp(col(S), CmpOp::Eq, Scalar::UInt(1))]),
        Predicate::Not(Box::new(Predicate::cmp(col(C), CmpOp::Eq, Scalar::Float(2.0)))),
    ];
    let o = ScanOptions::default();
    let spec = Arc::new(GatherSpec::columns(snapshot.schema(), None, 100).expect("spec"));
    for p in &bad {
        expect_error(
            &format!("COUNT(*) WHERE {p}"),
            run_aggregate(&snapshot, Some(p), &[], &[Aggregate::count_star()], &o),
        );
        expect_error(&format!("gather WHERE {p}"), run_gather(&snapshot, Some(p), &[col(RID)], 100, &o));
        let r = scan_order(
            &snapshot,
            Some(p),
            OrderBy::new(&[SortKey::asc(col(A))]),
            &o.clone().with_limit(Some(3)),
            || GatherKernel::new(Arc::clone(&spec)),
            || spec.new_acc(),
        )
        .map(|_| ())
        .map_err(|e| e.to_string());
        expect_error(&format!("ORDER BY WHERE {p}"), r);
        expect_error(&format!("DELETE WHERE {p}"), delete_where(&t, Some(p), &o).map_err(|e| e.to_string()));
        expect_error(
            &format!("UPDATE WHERE {p}"),
            update_where(&t, &[(A, lit(Scalar::Int(0), Ty::I64))], Some(p), &o).map_err(|e| e.to_string()),
        );
    }
    let mut expected = rows;
    expected.sort();
    assert_eq!(stored_rows(&t.snapshot()), expected, "a failed DELETE or UPDATE changed the table");
    // Integer literals beyond the column type's range are valid: such a
    // value is never equal and compares as the number it is.
    let count = |p: Predicate| -> i64 {
        let out = run_aggregate(&snapshot, Some(&p), &[], &[Aggregate::count_star()], &o).expect("a valid predicate");
        out.values[0].as_any().downcast_ref::<arrow_array::Int64Array>().expect("COUNT is Int64").value(0)
    };
    assert_eq!(count(Predicate::cmp(col(A), CmpOp::Eq, Scalar::UInt(u64::MAX))), 0);
    assert_eq!(count(Predicate::cmp(col(A), CmpOp::Lt, Scalar::UInt(u64::MAX))), 30);
    assert_eq!(count(Predicate::cmp(col(E), CmpOp::Gt, Scalar::Int(-1))), 30);
    assert_eq!(count(Predicate::cmp(col(E), CmpOp::Lt, Scalar::Int(-1))), 0);

    // Invalid aggregates, sort keys and assignments.
    let schema = snapshot.schema();
    assert!(AggregateSpec::new(vec![], vec![Aggregate::new(AggFunc::Sum, col(S))], schema).is_err(), "SUM of a string");
    assert!(AggregateSpec::new(vec![], vec![Aggregate::new(AggFunc::Avg, col(S))], schema).is_err(), "AVG of a string");
    assert!(AggregateSpec::new(vec![col(99)], vec![Aggregate::count_star()], schema).is_err(), "GROUP BY #99");
    let r = scan_order(
        &snapshot,
        None,
        OrderBy::new(&[SortKey::asc(col(99))]),
        &o,
        || GatherKernel::new(Arc::clone(&spec)),
        || spec.new_acc(),
    );
    assert!(r.is_err(), "ORDER BY #99");
    assert!(update_where(&t, &[(A, col(B))], None, &o).is_err(), "SET a (Int64) = b (Int32)");
    assert!(update_where(&t, &[(99, col(A))], None, &o).is_err(), "SET #99");
    // NULL into a NOT NULL column fails whole.
    let r = update_where(
        &t,
        &[(B, lit(Scalar::Null, Ty::I32))],
        Some(&Predicate::cmp(col(A), CmpOp::Gt, Scalar::Int(25))),
        &o,
    );
    assert!(r.is_err(), "SET b (NOT NULL) = NULL: {r:?}");
    assert_eq!(stored_rows(&t.snapshot()), expected, "a failed UPDATE changed the table");
}

/// `x BETWEEN l AND h` is `x >= l AND x <= h` (SQL), also when a bound is
/// NULL: `5 BETWEEN NULL AND 3` is FALSE, so `5 NOT BETWEEN NULL AND 3` is
/// TRUE.
#[test]
fn between_with_a_null_bound_follows_sql() {
    let rows: Vec<Row> = (1..=10).map(|i| row_ae(i, Some(i), None)).collect();
    let mut failures = Vec::new();
    for rebuild in [false, true] {
        let (_db, t) = small_table(rows.clone(), rebuild);
        let snapshot = t.snapshot();
        for (low, high, negated) in [
            (Scalar::Null, Scalar::Int(3), true),
            (Scalar::Int(8), Scalar::Null, true),
            (Scalar::Null, Scalar::Int(3), false),
        ] {
            let p = Predicate::Between { expr: col(A), low, high, negated };
            let expected = matching(&rows, Some(&p)).len();
            let got = run_aggregate(&snapshot, Some(&p), &[], &[Aggregate::count_star()], &ScanOptions::default())
                .map(|o| cells(o.values[0].as_ref()));
            if got != Ok(vec![Some(V::I(expected as i128))]) {
                failures.push(format!(
                    "COUNT(*) WHERE {p} over a = 1..10 (rebuilt: {rebuild}) = {got:?}, expected {expected}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Hand-picked three-valued logic cases over a column with NULLs.
#[test]
fn three_valued_logic_corner_cases() {
    let rows: Vec<Row> = (1..=12).map(|i| row_ae(i, if i % 3 == 0 { None } else { Some(i % 4) }, None)).collect();
    let a = || col(A);
    let cases = vec![
        Predicate::InList { expr: a(), values: vec![Scalar::Int(1), Scalar::Null], negated: false },
        Predicate::InList { expr: a(), values: vec![Scalar::Int(1), Scalar::Null], negated: true },
        Predicate::InList { expr: a(), values: vec![Scalar::Int(1), Scalar::Int(2)], negated: true },
        Predicate::Not(Box::new(Predicate::cmp(a(), CmpOp::Eq, Scalar::Null))),
        Predicate::Or(vec![
            Predicate::cmp(a(), CmpOp::Eq, Scalar::Null),
            Predicate::cmp(a(), CmpOp::Eq, Scalar::Int(2)),
        ]),
        Predicate::Not(Box::new(Predicate::And(vec![
            Predicate::cmp(a(), CmpOp::Gt, Scalar::Int(0)),
            Predicate::Const(false),
        ]))),
        Predicate::Not(Box::new(Predicate::Or(vec![
            Predicate::cmp(a(), CmpOp::Gt, Scalar::Int(1)),
            Predicate::IsNull(a()),
        ]))),
        Predicate::cmp(ar(a(), ArithOp::Add, lit(Scalar::Null, Ty::I64)), CmpOp::NotEq, Scalar::Int(0)),
        Predicate::IsNull(ar(a(), ArithOp::Mul, lit(Scalar::Int(2), Ty::I64))),
        Predicate::Not(Box::new(Predicate::Like { expr: col(S), pattern: LikePattern::prefix(b""), negated: false })),
        Predicate::Not(Box::new(Predicate::Like {
            expr: col(S),
            pattern: LikePattern::from_parts(vec![vec![], b"a".to_vec(), vec![]]),
            negated: true,
        })),
    ];
    for rebuild in [false, true] {
        let (_db, t) = small_table(rows.clone(), rebuild);
        let snapshot = t.snapshot();
        for p in &cases {
            let expected: Vec<i64> = matching(&rows, Some(p)).iter().map(|r| rid_of(r)).collect();
            let got = run_gather(&snapshot, Some(p), &[col(RID)], 100, &ScanOptions::default()).map(|g| {
                let mut v: Vec<i64> = g.iter().map(rid_of).collect();
                v.sort();
                v
            });
            assert_eq!(got, Ok(expected), "WHERE {p} (rebuilt: {rebuild})");
        }
    }
}

/// SUM and AVG of UInt32 values: UInt64 and Float64 results, in the delta
/// and in main storage, with and without GROUP BY, of the column and of
/// an expression over it.
#[test]
fn sum_and_avg_of_uint32_values() {
    let mut rows: Vec<Row> = (1..=3).map(|i| row_ae(i, Some(i), None)).collect();
    for (i, r) in rows.iter_mut().enumerate() {
        r[C] = Some(V::I(i as i128 + 1)); // c = 1, 2, 3
    }
    let mut failures = Vec::new();
    for rebuild in [false, true] {
        let (_db, t) = small_table(rows.clone(), rebuild);
        let c_mod_7 = ar(col(C), ArithOp::Rem, lit(Scalar::UInt(7), Ty::U32));
        for keys in [vec![], vec![col(FLAG)]] {
            for (func, input, want) in [
                (AggFunc::Sum, col(C), V::I(6)),
                (AggFunc::Avg, col(C), V::F(2.0)),
                (AggFunc::Sum, c_mod_7.clone(), V::I(6)),
            ] {
                let aggs = [Aggregate::new(func, input.clone())];
                let got = run_aggregate(&t.snapshot(), None, &keys, &aggs, &ScanOptions::default())
                    .map(|o| cells(o.values[0].as_ref()));
                if got != Ok(vec![Some(want.clone())]) {
                    failures.push(format!(
                        "SELECT {} GROUP BY [{}] over c = 1, 2, 3 (rebuilt: {rebuild}) = {got:?}, expected {want:?}",
                        show_aggs(&aggs),
                        show_exprs(&keys)
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// GROUP BY a string column whose shards have different dictionaries of
/// the same size: every string is its own group.
#[test]
fn string_group_keys_across_dictionary_shards() {
    let string_row = |rid: i64, s: &str| {
        let mut r = row_ae(rid, Some(rid), None);
        r[S] = Some(V::S(s.as_bytes().to_vec()));
        r
    };
    let db = Database::new();
    let options = TableOptions::default().with_shard_capacity(4).with_background_rebuild(false);
    let t = db.create_table("t", &arrow_schema(), options).expect("create table");
    let rows: Vec<Row> =
        ["a", "b", "a", "b", "c", "d", "c", "d"].iter().zip(1..).map(|(s, i)| string_row(i, s)).collect();
    t.append(&batch_of(&rows)).expect("append");
    let mut failures = Vec::new();
    for rebuild in [false, true] {
        if rebuild {
            t.rebuild().expect("rebuild"); // two shards, each a 2-string dictionary
        }
        let expected = ref_aggregation(&rows.iter().collect::<Vec<_>>(), &[col(S)], &[Aggregate::count_star()]);
        for threads in [1, 2] {
            let out = run_aggregate(
                &t.snapshot(),
                None,
                &[col(S)],
                &[Aggregate::count_star()],
                &ScanOptions::default().with_threads(threads),
            );
            if let Err(e) = compare_aggregation(&out, &expected, &[col(S)], &[Aggregate::count_star()]) {
                failures.push(format!(
                    "COUNT(*) GROUP BY s over s = a b a b | c d c d (rebuilt: {rebuild}, threads {threads}): {e}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Group keys that are integer functions of one column (`a % 7`) are
/// evaluated once per distinct value through a window of column values:
/// narrow columns, columns whose values leave the window (mostly, or only
/// a few), NULLs, deleted rows and several keys all give the reference's
/// groups, and a zero divisor met only in some rows is still an error.
#[test]
fn memoised_integer_group_keys() {
    let narrow: Vec<Row> =
        (1..=5000).map(|i| row_ae(i, (i % 11 != 0).then_some(i % 300 - 150), Some(i as u64))).collect();
    let wide: Vec<Row> =
        (1..=5000).map(|i| row_ae(i, Some(i.wrapping_mul(1_000_003) % 1_000_000_007), Some(i as u64))).collect();
    // Mostly in the window, with a few far-away values.
    let mixed: Vec<Row> =
        (1..=5000).map(|i| row_ae(i, Some(if i % 97 == 0 { i * 1_000_000 } else { i % 50 }), Some(i as u64))).collect();
    // Values, met twice over, that start above the lowest: the window has
    // to move down (falling), or, wider than it, cannot hold them all
    // (rising).
    let falling: Vec<Row> = (1..=5000).map(|i| row_ae(i, Some(5000 - i % 2500), Some(i as u64))).collect();
    let rising: Vec<Row> = (1..=5000).map(|i| row_ae(i, Some(i % 2500 * 5), Some(i as u64))).collect();
    let keys_sets = [
        vec![ar(col(A), ArithOp::Rem, lit(Scalar::Int(7), Ty::I64))],
        vec![ar(ar(col(A), ArithOp::Div, lit(Scalar::Int(3), Ty::I64)), ArithOp::Add, lit(Scalar::Int(1), Ty::I64))],
        vec![
            ar(col(A), ArithOp::Rem, lit(Scalar::Int(7), Ty::I64)),
            ar(col(B), ArithOp::Rem, lit(Scalar::Int(3), Ty::I32)),
        ],
    ];
    let aggs = [Aggregate::count_star(), Aggregate::new(AggFunc::Sum, col(A)), Aggregate::new(AggFunc::Min, col(B))];
    let mut failures = Vec::new();
    for (name, rows) in
        [("narrow", &narrow), ("wide", &wide), ("mixed", &mixed), ("falling", &falling), ("rising", &rising)]
    {
        for rebuild in [false, true] {
            let (_db, t) = small_table(rows.clone(), rebuild);
            // Delete every 5th row: deleted rows are neither grouped nor evaluated.
            let p = Predicate::cmp(ar(col(RID), ArithOp::Rem, lit(Scalar::Int(5), Ty::I64)), CmpOp::Eq, Scalar::Int(0));
            delete_where(&t, Some(&p), &ScanOptions::default()).expect("delete");
            let live: Vec<&Row> = rows.iter().filter(|r| !matches!(r[RID], Some(V::I(x)) if x % 5 == 0)).collect();
            for keys in &keys_sets {
                let expected = ref_aggregation(&live, keys, &aggs);
                for threads in [1, 2] {
                    let out =
                        run_aggregate(&t.snapshot(), None, keys, &aggs, &ScanOptions::default().with_threads(threads));
                    if let Err(e) = compare_aggregation(&out, &expected, keys, &aggs) {
                        failures.push(format!("{name} (rebuilt: {rebuild}, threads {threads}) GROUP BY {keys:?}: {e}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // `100 / (a - 40)` divides by zero only where a = 40: an error, found
    // even though the value 40 first appears deep in the table.
    let rows: Vec<Row> = (1..=3000).map(|i| row_ae(i, Some(if i == 2500 { 40 } else { i % 30 }), None)).collect();
    for rebuild in [false, true] {
        let (_db, t) = small_table(rows.clone(), rebuild);
        let key =
            ar(lit(Scalar::Int(100), Ty::I64), ArithOp::Div, ar(col(A), ArithOp::Sub, lit(Scalar::Int(40), Ty::I64)));
        expect_error(
            "GROUP BY 100 / (a - 40)",
            run_aggregate(
                &t.snapshot(),
                None,
                std::slice::from_ref(&key),
                &[Aggregate::count_star()],
                &ScanOptions::default(),
            ),
        );
        // Without the row where a = 40, no error.
        delete_where(&t, Some(&Predicate::cmp(col(A), CmpOp::Eq, Scalar::Int(40))), &ScanOptions::default())
            .expect("delete");
        let out = run_aggregate(&t.snapshot(), None, &[key], &[Aggregate::count_star()], &ScanOptions::default());
        assert!(out.is_ok(), "the deleted row still raised an error: {out:?}");
    }
}

/// A comparison that no value of the column's type can satisfy
/// (`b > 2^40` on an Int32, `b BETWEEN 10 AND 1`) is FALSE for every
/// non-NULL row, also inside OR and NOT, whatever the encoding.
#[test]
fn unsatisfiable_comparisons_inside_or_and_not() {
    let rows: Vec<Row> = (1..=10)
        .map(|i| {
            let mut r = row_ae(i, Some(i), None);
            r[B] = Some(V::I(5)); // b is constant: one constant-encoded block
            r
        })
        .collect();
    let never = [
        Predicate::cmp(col(B), CmpOp::Gt, Scalar::Int(1 << 40)),
        Predicate::Between { expr: col(B), low: Scalar::Int(10), high: Scalar::Int(1), negated: false },
        Predicate::cmp(col(B), CmpOp::Eq, Scalar::Int(-(1 << 40))),
    ];
    let mut failures = Vec::new();
    for rebuild in [false, true] {
        let (_db, t) = small_table(rows.clone(), rebuild);
        let snapshot = t.snapshot();
        for n in &never {
            for p in [
                n.clone(),
                Predicate::Or(vec![n.clone(), Predicate::cmp(col(A), CmpOp::Gt, Scalar::Int(8))]),
                Predicate::Or(vec![
                    n.clone(),
                    Predicate::cmp(ar(col(RID), ArithOp::Rem, lit(Scalar::Int(2), Ty::I64)), CmpOp::Eq, Scalar::Int(5)),
                ]),
                Predicate::Not(Box::new(Predicate::And(vec![
                    Predicate::Not(Box::new(n.clone())),
                    Predicate::cmp(col(A), CmpOp::LtEq, Scalar::Int(8)),
                ]))),
            ] {
                let expected = matching(&rows, Some(&p)).len();
                let got = run_aggregate(&snapshot, Some(&p), &[], &[Aggregate::count_star()], &ScanOptions::default())
                    .map(|o| cells(o.values[0].as_ref()));
                if got != Ok(vec![Some(V::I(expected as i128))]) {
                    failures.push(format!("COUNT(*) WHERE {p} over b = 5 (x10), a = 1..10 (rebuilt: {rebuild}) = {got:?}, expected {expected}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
