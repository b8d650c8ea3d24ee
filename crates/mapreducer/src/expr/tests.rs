use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, RecordBatch};
use arrow_schema::{Field, Schema};
use quiverdb_storage::block::WORDS;
use quiverdb_storage::{Database, Table};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::test_tables::{Sels, ints, lane, num, num_cell, steps, table};

#[test]
fn division_by_a_constant_matches_hardware_division() {
    let edges = [0i64, 1, -1, 2, -2, 99, 100, -100, 101, 12_345, -12_345, (1 << 32) - 1, -((1 << 32) - 1)];
    let mut a = [0i64; LANES];
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for (i, x) in a.iter_mut().enumerate() {
        *x = edges.get(i).copied().unwrap_or_else(|| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % (1 << 33)) as i64 - (1 << 32) + 1
        });
    }
    for y in [2i64, 3, 7, 10, 100, 1000, 65_535, 65_536, 1 << 31, (1 << 32) - 1] {
        for op in [ArithOp::Div, ArithOp::Rem] {
            let mut dst = [0i64; LANES];
            assert!(div_by_constant(op, &a, y, LANES, &mut dst), "{op} {y}");
            for (&x, &got) in a.iter().zip(&dst) {
                let want = if op == ArithOp::Div { x / y } else { x % y };
                assert_eq!(got, want, "{x} {op} {y}");
            }
        }
    }
    let mut dst = [0i64; LANES];
    assert!(!div_by_constant(ArithOp::Rem, &a, 1, LANES, &mut dst), "divisor 1 takes the general path");
    assert!(!div_by_constant(ArithOp::Rem, &a, -3, LANES, &mut dst), "negative divisors take the general path");
    a[5] = 1 << 32;
    assert!(!div_by_constant(ArithOp::Rem, &a, 7, LANES, &mut dst), "wide lanes take the general path");
}

#[test]
fn division_by_random_constants_matches_hardware_division() {
    let mut rng = StdRng::seed_from_u64(31);
    let limit = 1i64 << 32;
    for _ in 0..200 {
        let y = rng.random_range(2..limit);
        let mut a = [0i64; LANES];
        for x in a.iter_mut() {
            *x = match rng.random_range(0..4) {
                0 => rng.random_range(-limit + 1..limit),
                1 => rng.random_range(-3 * y..3 * y).clamp(-limit + 1, limit - 1),
                2 => [0, 1, -1, y, -y, y - 1, 1 - y, limit - 1, 1 - limit][rng.random_range(0..9)],
                _ => rng.random_range(-1000..1000),
            };
        }
        let lanes = rng.random_range(0..=LANES);
        for op in [ArithOp::Div, ArithOp::Rem] {
            let mut dst = [7i64; LANES];
            assert!(div_by_constant(op, &a, y, lanes, &mut dst), "{op} {y}");
            for (l, (&x, &got)) in a.iter().zip(&dst).enumerate() {
                let want = match op {
                    _ if l >= lanes => 7,
                    ArithOp::Div => x / y,
                    _ => x % y,
                };
                assert_eq!(got, want, "{x} {op} {y}, lane {l} of {lanes}");
            }
        }
    }
}

/// Why a reference evaluation fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    DivideByZero,
    Overflow,
}

fn fail_of(e: &Error) -> Fail {
    match e {
        Error::DivideByZero => Fail::DivideByZero,
        Error::Overflow(_) => Fail::Overflow,
        other => panic!("unexpected error {other}"),
    }
}

fn as_i128(n: Num) -> i128 {
    match n {
        Num::I64(v) => v as i128,
        Num::U64(v) => v as i128,
        Num::I128(v) => v,
        Num::F64(v) => panic!("float {v} in integer arithmetic"),
    }
}

fn as_f64(n: Num) -> f64 {
    match n {
        Num::F64(v) => v,
        other => panic!("{other:?} in float arithmetic"),
    }
}

/// `(lo, hi)` of an integer type.
fn int_range(t: &DataType) -> (i128, i128) {
    match t {
        DataType::Int8 => (i8::MIN as i128, i8::MAX as i128),
        DataType::Int16 => (i16::MIN as i128, i16::MAX as i128),
        DataType::Int32 => (i32::MIN as i128, i32::MAX as i128),
        DataType::Int64 => (i64::MIN as i128, i64::MAX as i128),
        DataType::UInt8 => (0, u8::MAX as i128),
        DataType::UInt16 => (0, u16::MAX as i128),
        DataType::UInt32 => (0, u32::MAX as i128),
        DataType::UInt64 => (0, u64::MAX as i128),
        other => panic!("int_range of {other}"),
    }
}

/// `v` in integer type `t`, wrapped to its width (two's complement).
fn wrapped(v: i128, t: &DataType) -> Num {
    match t {
        DataType::Int8 => Num::I64(v as i8 as i64),
        DataType::Int16 => Num::I64(v as i16 as i64),
        DataType::Int32 => Num::I64(v as i32 as i64),
        DataType::Int64 => Num::I64(v as i64),
        DataType::UInt8 => Num::I64(v as u8 as i64),
        DataType::UInt16 => Num::I64(v as u16 as i64),
        DataType::UInt32 => Num::I64(v as u32 as i64),
        DataType::UInt64 => Num::U64(v as u64),
        other => panic!("wrapped of {other}"),
    }
}

/// `x op y` of type `t`, computed in `i128` (integers, an overflow when
/// the result leaves the type's range),
/// `f32` or `f64` (floats) or checked against the precision (decimals).
/// `x op y` of type `t`; `scales` are the operands' when they are decimals.
fn arith_ref(op: ArithOp, x: Num, y: Num, t: &DataType, scales: Option<(i8, i8)>) -> Result<Num, Fail> {
    macro_rules! float {
        ($f:ty) => {{
            let (x, y) = (as_f64(x) as $f, as_f64(y) as $f);
            let v = match op {
                ArithOp::Add => x + y,
                ArithOp::Sub => x - y,
                ArithOp::Mul => x * y,
                ArithOp::Div => x / y,
                ArithOp::Rem => x % y,
            };
            Ok(Num::F64(v as f64))
        }};
    }
    let (x, y) = match t {
        DataType::Float32 => return float!(f32),
        DataType::Float64 => return float!(f64),
        _ => (as_i128(x), as_i128(y)),
    };
    if let DataType::Decimal128(p, s) = t {
        // Operands at their own scales: `+` and `-` bring them to the
        // result's (failing if that leaves its precision), `*` adds them.
        let (sx, sy) = scales.unwrap_or((*s, *s));
        let at_scale = |v: i128, from: i8| {
            let w = v.checked_mul(10i128.pow((*s - from) as u32)).ok_or(Fail::Overflow)?;
            if w.abs() < 10i128.pow(*p as u32) { Ok(w) } else { Err(Fail::Overflow) }
        };
        let v = match op {
            ArithOp::Add => at_scale(x, sx)?.checked_add(at_scale(y, sy)?),
            ArithOp::Sub => at_scale(x, sx)?.checked_sub(at_scale(y, sy)?),
            ArithOp::Mul => x.checked_mul(y),
            _ => panic!("decimal {op}"),
        }
        .ok_or(Fail::Overflow)?;
        return if v.abs() < 10i128.pow(*p as u32) { Ok(Num::I128(v)) } else { Err(Fail::Overflow) };
    }
    let v = match op {
        ArithOp::Add => x + y,
        ArithOp::Sub => x - y,
        ArithOp::Mul => x.checked_mul(y).ok_or(Fail::Overflow)?,
        ArithOp::Div | ArithOp::Rem if y == 0 => return Err(Fail::DivideByZero),
        ArithOp::Div => {
            let (lo, hi) = int_range(t);
            let q = x / y;
            if q < lo || q > hi {
                return Err(Fail::Overflow);
            }
            q
        }
        ArithOp::Rem => x % y,
    };
    let (lo, hi) = int_range(t);
    if v < lo || v > hi {
        return Err(Fail::Overflow);
    }
    Ok(wrapped(v, t))
}

/// `CAST(x AS to)` of the casts the tests use.
fn cast_ref(x: Num, from: &DataType, to: &DataType) -> Result<Num, Fail> {
    if from == to {
        return Ok(x);
    }
    let fits = |v: i128| {
        let (lo, hi) = int_range(to);
        if (lo..=hi).contains(&v) { Ok(wrapped(v, to)) } else { Err(Fail::Overflow) }
    };
    match (x, to) {
        (Num::F64(v), DataType::Float32) => Ok(Num::F64(v as f32 as f64)),
        (Num::F64(v), _) => {
            let t = v.trunc();
            if t.is_nan() || t < int_range(to).0 as f64 || t > int_range(to).1 as f64 {
                Err(Fail::Overflow)
            } else {
                fits(t as i128)
            }
        }
        (x, DataType::Float32) => Ok(Num::F64(as_i128(x) as f32 as f64)),
        (x, DataType::Float64) => Ok(Num::F64(as_i128(x) as f64)),
        (x, DataType::Decimal128(p, s)) => {
            // From a decimal, by the difference of the scales.
            let from_scale = if let DataType::Decimal128(_, fs) = from { *fs } else { 0 };
            match as_i128(x).checked_mul(10i128.pow((*s - from_scale) as u32)) {
                Some(v) if v.abs() < 10i128.pow(*p as u32) => Ok(Num::I128(v)),
                _ => Err(Fail::Overflow),
            }
        }
        (x, _) => fits(as_i128(x)),
    }
}

/// Evaluates `e` on one row, as a plain interpreter: errors of both
/// operands count (each is evaluated on the row whatever the other is),
/// then NULL propagates.
fn reference(e: &MapExpr, schema: &TableSchema, row: &[Option<Num>]) -> Result<Option<Num>, Fail> {
    match e {
        MapExpr::Column(c) => Ok(row[*c]),
        MapExpr::Literal { value, data_type } => Ok(value.to_num(Domain::of(data_type).unwrap())),
        MapExpr::Arith { op, left, right } => {
            let t = e.data_type(schema).unwrap();
            let (l, r) = (reference(left, schema, row)?, reference(right, schema, row)?);
            let (Some(x), Some(y)) = (l, r) else { return Ok(None) };
            let scale = |e: &MapExpr| match e.data_type(schema).unwrap() {
                DataType::Decimal128(_, s) => Some(s),
                _ => None,
            };
            arith_ref(*op, x, y, &t, scale(left).zip(scale(right))).map(Some)
        }
        MapExpr::Cast { expr, to } => {
            let from = expr.data_type(schema).unwrap();
            match reference(expr, schema, row)? {
                None => Ok(None),
                Some(x) => cast_ref(x, &from, to).map(Some),
            }
        }
    }
}

fn col(c: usize) -> MapExpr {
    MapExpr::col(c)
}

fn int(v: i64, t: DataType) -> MapExpr {
    MapExpr::lit(Scalar::Int(v), t)
}

/// What evaluating `expr` on every step and selection of `table` gave,
/// against [`reference`]: (selections evaluated, selections that failed).
/// Lanes must agree value for value; a selection fails with the
/// reference's error when some active lane does (division by zero
/// before overflow).
fn check(
    table: &Table,
    rows: &[Vec<Option<Num>>],
    expr: &MapExpr,
    extra_mask: Option<&[bool]>,
    seed: u64,
) -> (usize, usize) {
    let snap = table.snapshot();
    let shard = snap.shard(0);
    let schema = snap.schema();
    let mut compiled = CompiledExpr::compile(expr, schema).unwrap();
    let memo_col = compiled.integer_function_of();
    let cols = ShardColumns::open(shard, 0..schema.len()).unwrap();
    let mut scratch = Scratch::default();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut evaluated, mut failed) = (0, 0);
    for (side, first, len) in steps(&cols) {
        let sels = Sels::new(&mut rng, len, first);
        let mut extra = [0u64; WORDS];
        if let Some(keep) = extra_mask {
            for o in (0..len).filter(|&o| keep[first + o]) {
                extra[o / 64] |= 1 << (o % 64);
            }
        }
        let extra_sel = extra_mask.map(|_| Sel::Mask(&extra, len));
        for sel in sels.each(len, first).into_iter().chain(extra_sel) {
            let mut want: Vec<(usize, Option<Num>)> = Vec::new();
            let mut want_err = None;
            sel.for_each(|l, offset| {
                let r = &rows[first + offset];
                let v = reference(expr, schema, r);
                if let Some(c) = memo_col {
                    let one = compiled.eval_one(r[c]).map_err(|e| fail_of(&e));
                    assert_eq!(one.map(num_cell), v.map(num_cell), "eval_one of {expr} at {r:?}");
                }
                match v {
                    Ok(v) => want.push((l, v)),
                    Err(f) => want_err = want_err.max(Some(f == Fail::DivideByZero)),
                }
            });
            evaluated += 1;
            let got = compiled.eval(&cols, side, sel, &mut scratch);
            match (got, want_err) {
                (Err(e), Some(zero)) => {
                    failed += 1;
                    let f = if zero { Fail::DivideByZero } else { Fail::Overflow };
                    assert_eq!(fail_of(&e), f, "{expr}: {side:?} {sel:?}");
                }
                (Err(e), None) => panic!("{expr}: {side:?} {sel:?} failed with {e}, the reference did not"),
                (Ok(_), Some(_)) => panic!("{expr}: {side:?} {sel:?} did not fail, the reference did"),
                (Ok(o), None) => {
                    for (l, v) in want {
                        let got = match o {
                            Operand::Scalar(s) => s,
                            Operand::Vector(vec) => {
                                assert_eq!(vec.len, sel.lanes());
                                lane(vec, l)
                            }
                        };
                        assert_eq!(num_cell(got), num_cell(v), "{expr}: {side:?} lane {l} of {sel:?}");
                    }
                }
            }
        }
    }
    (evaluated, failed)
}

/// Every row of the table's one shard, decoded by storage.
fn decoded_rows(table: &Table) -> Vec<Vec<Option<Num>>> {
    let batch = table.snapshot().shard(0).to_record_batch(None).unwrap();
    (0..batch.num_rows()).map(|r| batch.columns().iter().map(|a| num(a.as_ref(), r)).collect()).collect()
}

/// Columns of the value fixture: none makes the expressions of
/// [`arithmetic_on_vectors_equals_a_plain_interpreter`] fail.
fn values_table() -> (Database, Table) {
    let mut rng = StdRng::seed_from_u64(37);
    let nonzero = |r: &mut StdRng, lo: i64, hi: i64| loop {
        let v = r.random_range(lo..=hi);
        if v != 0 && v != -1 {
            break v;
        }
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int8, false),
        Field::new("b", DataType::Int8, true),
        Field::new("c", DataType::Int32, true),
        Field::new("d", DataType::UInt8, false),
        Field::new("e", DataType::UInt64, false),
        Field::new("f", DataType::Float32, true),
        Field::new("h", DataType::Decimal128(9, 2), true),
        Field::new("s", DataType::Int64, false),
        Field::new("u", DataType::UInt32, true),
        Field::new("n", DataType::Int16, true),
    ]));
    let mut batch = |n: usize| {
        let r = &mut rng;
        let limit = (1i64 << 32) - 1;
        let floats: Vec<Option<f32>> = (0..n)
            .map(|_| match r.random_range(0..12) {
                0 => None,
                1 => Some([f32::NAN, -0.0, 0.0, f32::INFINITY, -1.5][r.random_range(0..5)]),
                _ => Some(r.random_range(-1e4f32..1e4)),
            })
            .collect();
        let columns: Vec<ArrayRef> = vec![
            ints(DataType::Int8, r, n, 0.0, |r, _| r.random_range(-128..128)),
            ints(DataType::Int8, r, n, 0.1, |r, _| nonzero(r, -128, 127)),
            ints(DataType::Int32, r, n, 0.1, |r, _| r.random_range(i32::MIN as i64..=i32::MAX as i64)),
            ints(DataType::UInt8, r, n, 0.0, |r, _| r.random_range(0..256)),
            ints(DataType::UInt64, r, n, 0.0, |r, _| r.random::<i64>() | 1),
            Arc::new(Float32Array::from(floats)),
            ints(DataType::Decimal128(9, 2), r, n, 0.1, |r, _| r.random_range(-499_999_999..500_000_000)),
            // The first 1,024 rows of each batch (main block 0, delta chunk
            // 0) within 2^32 (division by a constant multiplies), the others
            // anywhere.
            ints(DataType::Int64, r, n, 0.0, |r, i| match (i < LANES, r.random_range(0..8)) {
                (true, 0) => [limit, -limit, 0, 1, -1][r.random_range(0..5)],
                (true, _) => r.random_range(-limit..=limit),
                (false, _) => r.random(),
            }),
            ints(DataType::UInt32, r, n, 0.1, |r, _| r.random_range(0..=u32::MAX as i64)),
            ints(DataType::Int16, r, n, 0.1, |r, _| nonzero(r, -32768, 32767)),
        ];
        RecordBatch::try_new(Arc::clone(&schema), columns).unwrap()
    };
    let (main, delta) = (batch(2100), batch(1300));
    table(&schema, 1 << 16, &main, &delta)
}

#[test]
fn arithmetic_on_vectors_equals_a_plain_interpreter() {
    use ArithOp::*;
    use DataType::*;
    let (_db, table) = values_table();
    let rows = decoded_rows(&table);
    let (a, b, c, d, e, f, h, s, u, n) =
        (col(0), col(1), col(2), col(3), col(4), col(5), col(6), col(7), col(8), col(9));
    let uint = |v: u64| MapExpr::lit(Scalar::UInt(v), UInt64);
    let float32 = |v: f64| MapExpr::lit(Scalar::Float(v), Float32);
    let null16 = MapExpr::lit(Scalar::Null, Int16);
    let exprs = [
        // Integers: a result leaving its type's width is an overflow error
        // (random operands overflow on some lanes: the blocks holding them
        // fail, as the reference does).
        a.clone().arith(Add, b.clone()),
        a.clone().arith(Sub, b.clone()),
        a.clone().arith(Mul, b.clone()),
        a.clone().arith(Div, b.clone()),
        a.clone().arith(Rem, b.clone()),
        c.clone().arith(Add, c.clone()),
        c.clone().arith(Mul, c.clone()),
        c.clone().arith(Sub, int(5, Int32)),
        d.clone().arith(Sub, d.clone()),
        d.clone().arith(Mul, d.clone()),
        u.clone().arith(Add, u.clone()),
        u.clone().arith(Mul, u.clone()),
        e.clone().arith(Mul, e.clone()),
        e.clone().arith(Add, e.clone()),
        e.clone().arith(Sub, uint(5)),
        e.clone().arith(Div, e.clone()),
        e.clone().arith(Rem, e.clone()),
        e.clone().arith(Div, uint(3)),
        s.clone().arith(Mul, int(3, Int64)),
        // Division by constants: multiplication where every lane is
        // within 2^32 (main block 0, delta chunk 0), division elsewhere.
        s.clone().arith(Div, int(7, Int64)),
        s.clone().arith(Rem, int(7, Int64)),
        s.clone().arith(Div, int(-7, Int64)),
        s.clone().arith(Rem, int(-7, Int64)),
        s.clone().arith(Div, int(1, Int64)),
        s.clone().arith(Rem, int((1 << 32) - 1, Int64)),
        s.clone().arith(Div, int(1 << 32, Int64)),
        c.clone().arith(Div, int(7, Int32)),
        c.clone().arith(Rem, int(1000, Int32)),
        d.clone().arith(Div, int(3, UInt8)),
        u.clone().arith(Rem, int(1000, UInt32)),
        int(1000, Int16).arith(Div, n.clone()),
        // Floats: Float32 rounds after every step.
        f.clone().arith(Mul, f.clone()),
        f.clone().arith(Add, f.clone()),
        f.clone().arith(Div, f.clone()),
        f.clone().arith(Sub, float32(0.5)),
        // Decimals, with Arrow's result types: TPC-H's
        // `price * (1 - discount) * (1 + tax)`, scales brought together.
        h.clone().arith(Add, h.clone()),
        h.clone().arith(Sub, MapExpr::lit(Scalar::Decimal(12_345), Decimal128(9, 2))),
        h.clone().arith(Mul, h.clone()),
        h.clone()
            .arith(Mul, MapExpr::lit(Scalar::Decimal(1), Decimal128(20, 0)).arith(Sub, h.clone()))
            .arith(Mul, MapExpr::lit(Scalar::Decimal(1), Decimal128(20, 0)).arith(Add, h.clone())),
        h.clone().cast(Decimal128(12, 4)).arith(Sub, h.clone()),
        h.clone().arith(Add, MapExpr::lit(Scalar::Decimal(7), Decimal128(3, 0))),
        // NULL literals make every lane NULL; constants stay constants.
        n.clone().arith(Mul, null16.clone()),
        null16.clone().arith(Div, int(0, Int16)),
        int(3, Int16).arith(Add, int(4, Int16)),
        // Casts and nested expressions.
        a.clone().cast(Int64).arith(Mul, int(1000, Int64)),
        d.clone().cast(Float64).arith(Div, MapExpr::lit(Scalar::Float(2.0), Float64)),
        n.clone().cast(Decimal128(9, 2)).arith(Add, h.clone()),
        c.clone().cast(Float32),
        a.clone().cast(Int16).arith(Mul, a.clone().cast(Int16)),
        a.clone().arith(Mul, int(3, Int8)).arith(Add, int(5, Int8)).arith(Rem, int(7, Int8)),
    ];
    let mut overflowed = 0;
    for (i, expr) in exprs.iter().enumerate() {
        // `check` compares every evaluation, failed or not, with the reference.
        let (evaluated, failed) = check(&table, &rows, expr, None, 100 + i as u64);
        assert_eq!(evaluated, 20, "{expr}");
        overflowed += usize::from(failed > 0);
    }
    // Both outcomes were exercised.
    assert!((1..exprs.len()).contains(&overflowed), "{overflowed} of {} expressions overflowed", exprs.len());
}

/// Rows of the failure fixture that make one expression fail: row `i`
/// triggers `t` when `i % 541 == t` (three rows of each 1,100, in both
/// blocks of main storage and both chunks of the delta).
fn trigger(i: usize, t: usize) -> bool {
    i % 541 == t
}

const X_MIN: usize = 17;
const Y_ZERO: usize = 60;
const A_MIN: usize = 101;
const H_BIG: usize = 230;
const E_ZERO: usize = 333;

/// Columns whose values make expressions fail only at trigger rows.
fn failures_table() -> (Database, Table) {
    let mut rng = StdRng::seed_from_u64(41);
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("y", DataType::Int64, true),
        Field::new("a", DataType::Int8, false),
        Field::new("b", DataType::Int8, false),
        Field::new("h", DataType::Decimal128(5, 2), false),
        Field::new("e", DataType::UInt64, false),
    ]));
    let mut batch = |n: usize| {
        let r = &mut rng;
        let signed = |r: &mut StdRng, lo: i64, hi: i64| r.random_range(lo..=hi) * if r.random() { 1 } else { -1 };
        // y is 0 at its triggers and NULL just after them: a NULL slot
        // of main storage holds the value before it (0), of the delta 0.
        let y: Vec<Option<i64>> = (0..n)
            .map(|i| match i {
                _ if trigger(i, Y_ZERO) => Some(0),
                _ if trigger(i, Y_ZERO + 1) || r.random_bool(0.05) => None,
                _ => Some(signed(r, 2, 50)),
            })
            .collect();
        let columns: Vec<ArrayRef> = vec![
            ints(
                DataType::Int64,
                r,
                n,
                0.05,
                |r, i| if trigger(i, X_MIN) { i64::MIN } else { r.random_range(-1000..=1000) },
            ),
            crate::test_tables::int_array(&DataType::Int64, &y),
            ints(DataType::Int8, r, n, 0.0, |r, i| if trigger(i, A_MIN) { -128 } else { r.random_range(-127..=127) }),
            ints(DataType::Int8, r, n, 0.0, |r, i| if trigger(i, A_MIN) { -1 } else { signed(r, 2, 100) }),
            ints(DataType::Decimal128(5, 2), r, n, 0.0, |r, i| {
                if trigger(i, H_BIG) { 60_000 } else { r.random_range(-40_000..=40_000) }
            }),
            ints(DataType::UInt64, r, n, 0.0, |r, i| if trigger(i, E_ZERO) { 0 } else { r.random_range(1..=i64::MAX) }),
        ];
        RecordBatch::try_new(Arc::clone(&schema), columns).unwrap()
    };
    let (main, delta) = (batch(1100), batch(1100));
    table(&schema, 1 << 16, &main, &delta)
}

/// Division by zero, `MIN / -1`, decimals leaving their precision and
/// casts out of range fail, but only on active lanes that are not NULL:
/// a selection without the failing rows evaluates to the plain values.
#[test]
fn failures_count_only_on_active_non_null_lanes() {
    use ArithOp::*;
    use DataType::*;
    let (_db, table) = failures_table();
    let rows = decoded_rows(&table);
    let (x, y, a, b, h, e) = (col(0), col(1), col(2), col(3), col(4), col(5));
    let dec = |v: i128| MapExpr::lit(Scalar::Decimal(v), Decimal128(5, 2));
    let dec38 = |v: i128| MapExpr::lit(Scalar::Decimal(v), Decimal128(38, 2));
    // (expression, triggers of the rows where it fails; none: never fails)
    let cases = [
        (x.clone().arith(Div, y.clone()), vec![Y_ZERO]),
        (x.clone().arith(Rem, y.clone()), vec![Y_ZERO]),
        (x.clone().arith(Div, int(-1, Int64)), vec![X_MIN]),
        (x.clone().arith(Rem, int(-1, Int64)), vec![]),
        (x.clone().arith(Mul, int(2, Int64)), vec![X_MIN]),
        (x.clone().cast(Int16), vec![X_MIN]),
        // Casts that scale up: i64::MIN * 10^20 leaves 38 digits.
        (x.clone().cast(Decimal128(38, 20)), vec![X_MIN]),
        (h.clone().cast(Decimal128(20, 6)), vec![]),
        (a.clone().arith(Div, b.clone()), vec![A_MIN]),
        (a.clone().arith(Rem, b.clone()), vec![]),
        // `+` and `-` take one more digit than their operands (Arrow's
        // result types): two decimals of a type never overflow it...
        (h.clone().arith(Add, h.clone()), vec![]),
        (h.clone().arith(Sub, dec(-50_000)), vec![]),
        (h.clone().arith(Sub, dec(50_000)), vec![]),
        // ...but the precision is capped at 38 digits.
        (h.clone().cast(Decimal128(38, 2)).arith(Add, dec38(10i128.pow(38) - 50_000)), vec![H_BIG]),
        (h.clone().cast(Decimal128(38, 2)).arith(Sub, dec38(50_000 - 10i128.pow(38))), vec![H_BIG]),
        (h.clone().arith(Mul, MapExpr::lit(Scalar::Decimal(2 * 10i128.pow(33)), Decimal128(38, 0))), vec![H_BIG]),
        (h.clone().arith(Mul, h.clone()), vec![]),
        (e.clone().arith(Div, e.clone()), vec![E_ZERO]),
        (e.clone().arith(Rem, MapExpr::lit(Scalar::UInt(7), UInt64)), vec![]),
        (y.clone().arith(Div, int(0, Int64)), vec![0]),
    ];
    let all = [X_MIN, Y_ZERO, A_MIN, H_BIG, E_ZERO];
    // Every row but the triggers: no expression fails there.
    let calm: Vec<bool> = (0..rows.len()).map(|i| !all.iter().any(|&t| trigger(i % 1100, t))).collect();
    for (i, (expr, fails_at)) in cases.iter().enumerate() {
        let (evaluated, failed) = check(&table, &rows, expr, Some(&calm), 200 + i as u64);
        // Two blocks and two chunks, five selections each.
        assert_eq!(evaluated, 20, "{expr}");
        match fails_at.as_slice() {
            [] => assert_eq!(failed, 0, "{expr}"),
            // Division by a zero constant fails wherever a lane is valid.
            [0] => assert_eq!(failed, 20, "{expr}"),
            // The whole first block and chunk hold triggers, the calm
            // masks none.
            _ => assert!((2..=16).contains(&failed), "{expr}: {failed} of {evaluated} failed"),
        }
    }
}

/// Operations on two constants fold to a constant, with the same errors.
#[test]
fn constant_operations_fold_with_the_same_errors() {
    use ArithOp::*;
    use DataType::*;
    let (_db, table) = failures_table();
    let snap = table.snapshot();
    let cols = ShardColumns::open(snap.shard(0), []).unwrap();
    let mut scratch = Scratch::default();
    let cases = [
        (int(7, Int8).arith(Mul, int(100, Int8)), Err(Fail::Overflow)),
        (int(200, UInt8).arith(Add, int(100, UInt8)), Err(Fail::Overflow)),
        (int(1, UInt8).arith(Sub, int(2, UInt8)), Err(Fail::Overflow)),
        (int(i64::MAX, Int64).arith(Add, int(1, Int64)), Err(Fail::Overflow)),
        (int(7, Int8).arith(Mul, int(18, Int8)), Ok(Some(Num::I64(126)))),
        (int(1, Int32).arith(Div, int(0, Int32)), Err(Fail::DivideByZero)),
        (int(i64::MIN, Int64).arith(Div, int(-1, Int64)), Err(Fail::Overflow)),
        (int(i64::MIN, Int64).arith(Rem, int(-1, Int64)), Ok(Some(Num::I64(0)))),
        (MapExpr::lit(Scalar::Null, Int64).arith(Div, int(0, Int64)), Ok(None)),
        (
            MapExpr::lit(Scalar::Decimal(99_999), Decimal128(5, 2))
                .arith(Add, MapExpr::lit(Scalar::Decimal(1), Decimal128(5, 2))),
            Ok(Some(Num::I128(100_000))),
        ),
        (
            MapExpr::lit(Scalar::Decimal(10i128.pow(38) - 1), Decimal128(38, 0))
                .arith(Add, MapExpr::lit(Scalar::Decimal(1), Decimal128(38, 0))),
            Err(Fail::Overflow),
        ),
        (
            MapExpr::lit(Scalar::Decimal(125), Decimal128(5, 2))
                .arith(Mul, MapExpr::lit(Scalar::Decimal(-3), Decimal128(20, 0))),
            Ok(Some(Num::I128(-375))),
        ),
    ];
    for (expr, want) in cases {
        let schema = snap.schema();
        let row: Vec<Option<Num>> = vec![None; schema.len()];
        assert_eq!(reference(&expr, schema, &row).map(num_cell), want.map(num_cell), "reference of {expr}");
        let mut compiled = CompiledExpr::compile(&expr, schema).unwrap();
        let got = match compiled.eval(&cols, Side::Main(0), Sel::Range(0, 10), &mut scratch) {
            Ok(Operand::Scalar(v)) => Ok(v),
            Ok(Operand::Vector(_)) => panic!("{expr} is a constant"),
            Err(e) => Err(fail_of(&e)),
        };
        assert_eq!(got.map(num_cell), want.map(num_cell), "{expr}");
    }
}
