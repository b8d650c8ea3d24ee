//! Scattering vectors into per-group states against a `BTreeMap`
//! reference: every state kind, dense and sparse lanes, NULLs, constant
//! operands; and accumulating in two states then merging them equals
//! accumulating everything in one.

use std::collections::BTreeMap;

use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::super::spec::{AggFunc, state_kind};
use super::super::state::SumDomain;
use super::*;
use crate::scalar::Domain;
use crate::test_tables::{Cell, cell};
use crate::vector::NumVector;

/// Group counts the tests run with: many, and few enough for the
/// interleaved accumulators ([`FEW_GROUPS`]).
const GROUP_COUNTS: [usize; 2] = [40, 5];

fn cells(a: &ArrayRef) -> Vec<Cell> {
    (0..a.len()).map(|i| cell(a.as_ref(), i)).collect()
}

/// The aggregates the test runs, by input type.
fn aggregates() -> Vec<(AggFunc, DataType)> {
    let mut out = Vec::new();
    for t in [DataType::Int64, DataType::UInt32, DataType::UInt64, DataType::Float64, DataType::Decimal128(20, 2)] {
        for f in [AggFunc::Count, AggFunc::Sum, AggFunc::Avg, AggFunc::Min, AggFunc::Max] {
            out.push((f, t.clone()));
        }
    }
    out
}

/// One block of input: values of `t`'s domain with NULLs, group ids, and
/// the active lanes (a dense prefix or sparse), or a constant.
struct Block {
    vector: NumVector,
    scalar: Option<Option<Num>>,
    active: Bits,
    gids: [u32; LANES],
}

fn random_value(rng: &mut StdRng, t: &DataType) -> Num {
    match t {
        // Magnitudes up to 2^52: a block's partials cannot take them
        // all (its sums go to the totals), the groups' sums fit i64.
        DataType::Int64 => Num::I64(match rng.random_range(0..4) {
            0 => rng.random_range(-(1i64 << 52)..1 << 52),
            _ => rng.random_range(-1000..1000),
        }),
        DataType::UInt32 => Num::I64(rng.random_range(0..=u32::MAX as i64)),
        DataType::UInt64 => {
            Num::U64(if rng.random_bool(0.2) { rng.random::<u64>() >> 2 } else { rng.random_range(0..999) })
        }
        // Quarters: sums are exact in any order.
        DataType::Float64 => Num::F64(rng.random_range(-4000..4000) as f64 / 4.0),
        DataType::Decimal128(..) => Num::I128(rng.random_range(-10i128.pow(20) + 1..10i128.pow(20))),
        other => panic!("{other}"),
    }
}

fn random_block(rng: &mut StdRng, t: &DataType, groups: usize) -> Block {
    let domain = Domain::of(t).unwrap();
    let mut vector = NumVector::new(domain);
    vector.len = LANES;
    vector.has_nulls = rng.random_bool(0.5);
    for l in 0..LANES {
        if !vector.has_nulls || rng.random_bool(0.8) {
            vector.validity.set(l);
        }
        match (&mut vector.values, random_value(rng, t)) {
            (Values::I64(x), Num::I64(v)) => x[l] = v,
            (Values::U64(x), Num::U64(v)) => x[l] = v,
            (Values::F64(x), Num::F64(v)) => x[l] = v,
            (Values::I128(x), Num::I128(v)) => x[l] = v,
            _ => unreachable!(),
        }
    }
    let active = match rng.random_range(0..3) {
        0 => Bits::first(LANES),
        1 => Bits::first(rng.random_range(0..=LANES)),
        _ => {
            let mut b = Bits::EMPTY;
            (0..LANES).filter(|_| rng.random_bool(0.4)).for_each(|l| b.set(l));
            b
        }
    };
    let scalar = match rng.random_range(0..12) {
        0 => Some(None),
        1 => Some(Some(random_value(rng, t))),
        _ => None,
    };
    let mut gids = [0u32; LANES];
    // Groups 0..groups-2: the last two get no rows.
    gids.iter_mut().for_each(|g| *g = rng.random_range(0..groups as u32 - 2));
    Block { vector, scalar, active, gids }
}

impl Block {
    fn operand(&self) -> Operand<'_> {
        match self.scalar {
            Some(s) => Operand::Scalar(s),
            None => Operand::Vector(&self.vector),
        }
    }

    /// (group, value) of the rows that count: active, not NULL.
    fn rows(&self) -> Vec<(usize, Num)> {
        let mut out = Vec::new();
        self.active.for_each_one(|l| {
            let v = match self.scalar {
                Some(s) => s,
                None if self.vector.has_nulls && !self.vector.validity.get(l) => None,
                None => Some(match &self.vector.values {
                    Values::I64(x) => Num::I64(x[l]),
                    Values::U64(x) => Num::U64(x[l]),
                    Values::F64(x) => Num::F64(x[l]),
                    Values::I128(x) => Num::I128(x[l]),
                }),
            };
            if let Some(v) = v {
                out.push((self.gids[l] as usize, v));
            }
        });
        out
    }
}

fn as_i128(n: Num) -> i128 {
    match n {
        Num::I64(v) => v as i128,
        Num::U64(v) => v as i128,
        Num::I128(v) => v,
        Num::F64(v) => panic!("{v}"),
    }
}

/// What `func` of `t` finishes as for each group, from the rows of every
/// block; `Err` when a SUM leaves its output type.
fn reference(
    func: AggFunc,
    t: &DataType,
    output: &DataType,
    rows: &[(usize, Num)],
    groups: usize,
) -> Result<Vec<Cell>, ()> {
    let mut by_group: BTreeMap<usize, Vec<Num>> = BTreeMap::new();
    for &(g, v) in rows {
        by_group.entry(g).or_default().push(v);
    }
    let float = matches!(t, DataType::Float64);
    (0..groups)
        .map(|g| {
            let values = by_group.get(&g).map(Vec::as_slice).unwrap_or_default();
            if func == AggFunc::Count {
                return Ok(Cell::Int(values.len() as i128));
            }
            if values.is_empty() {
                return Ok(Cell::Null);
            }
            let n = values.len();
            Ok(match func {
                AggFunc::Sum | AggFunc::Avg if float => {
                    let s: f64 = values.iter().map(|v| if let Num::F64(x) = v { *x } else { unreachable!() }).sum();
                    Cell::Float(if func == AggFunc::Avg { s / n as f64 } else { s }.to_bits())
                }
                AggFunc::Sum | AggFunc::Avg => {
                    let s: i128 = values.iter().map(|&v| as_i128(v)).sum();
                    match (func, output) {
                        (AggFunc::Avg, DataType::Decimal128(_, scale)) => {
                            let DataType::Decimal128(_, input_scale) = t else { unreachable!() };
                            // Truncated toward zero, as DataFusion's AVG.
                            Cell::Int(s * 10i128.pow((scale - input_scale) as u32) / n as i128)
                        }
                        (AggFunc::Avg, _) => Cell::Float((s as f64 / n as f64).to_bits()),
                        (_, DataType::Int64) if i64::try_from(s).is_err() => return Err(()),
                        (_, DataType::UInt64) if u64::try_from(s).is_err() => return Err(()),
                        (_, DataType::Decimal128(p, _)) if s.abs() >= 10i128.pow(*p as u32) => return Err(()),
                        _ => Cell::Int(s),
                    }
                }
                AggFunc::Min | AggFunc::Max => {
                    let best = values.iter().copied().reduce(|a, b| {
                        let b_first = match (a, b) {
                            (Num::F64(x), Num::F64(y)) => y.total_cmp(&x).is_lt(),
                            (a, b) => as_i128(b) < as_i128(a),
                        };
                        if b_first == (func == AggFunc::Min) { b } else { a }
                    });
                    match best.unwrap() {
                        Num::F64(v) => Cell::Float(v.to_bits()),
                        v => Cell::Int(as_i128(v)),
                    }
                }
                _ => unreachable!(),
            })
        })
        .collect()
}

fn new_state(kind: &StateKind, groups: usize) -> StateColumn {
    let mut s = StateColumn::new(kind);
    s.ensure(groups);
    s
}

/// Every aggregate over blocks scattered into one state, and the same
/// blocks split between two states (the second with its groups numbered
/// in reverse) merged afterwards: both finish as the reference.
#[test]
fn scatter_then_merge_equals_scatter_into_one_and_the_reference() {
    let mut rng = StdRng::seed_from_u64(21);
    for groups in GROUP_COUNTS {
        for (i, (func, t)) in aggregates().into_iter().enumerate() {
            let (kind, output) = state_kind(func, Some(&t)).unwrap();
            let (mut whole, mut a, mut b) =
                (new_state(&kind, groups), new_state(&kind, groups), new_state(&kind, groups));
            let mut rows = Vec::new();
            for _ in 0..12 {
                let block = random_block(&mut rng, &t, groups);
                rows.extend(block.rows());
                scatter(&mut whole, &kind, block.operand(), &block.active, &block.gids, None).unwrap();
                if rng.random_bool(0.5) {
                    scatter(&mut a, &kind, block.operand(), &block.active, &block.gids, None).unwrap();
                } else {
                    let mut reversed = block.gids;
                    reversed.iter_mut().for_each(|g| *g = groups as u32 - 1 - *g);
                    scatter(&mut b, &kind, block.operand(), &block.active, &reversed, None).unwrap();
                }
            }
            let pairs: Vec<(u32, u32)> = (0..groups as u32).map(|g| (g, groups as u32 - 1 - g)).collect();
            a.merge_entries(&b, &pairs, &kind).unwrap();
            let want = reference(func, &t, &output, &rows, groups);
            let finish = |s: &StateColumn| {
                s.finish(&kind, &output).map(|a| cells(&a)).map_err(|e| assert!(matches!(e, Error::Overflow(_)), "{e}"))
            };
            assert_eq!(finish(&whole), want, "{i}: {func:?} of {t}, {groups} groups, one state");
            assert_eq!(finish(&a), want, "{i}: {func:?} of {t}, {groups} groups, merged");
        }
    }
}

/// Exact signed sums whatever the magnitudes: values near `i64::MAX`
/// (only the totals can take them), with and without a known bound of
/// the block's values, and for a SUM that counts no rows per group
/// (`implied`, a non-nullable input).
#[test]
fn signed_sums_of_large_values_are_exact() {
    let mut rng = StdRng::seed_from_u64(22);
    for (groups, implied) in GROUP_COUNTS.into_iter().flat_map(|g| [(g, false), (g, true)]) {
        let kind = StateKind::Sum { domain: SumDomain::Signed, avg: false, implied };
        let mut s = new_state(&kind, groups);
        let mut want = vec![0i128; groups];
        for block in 0..40 {
            let mut v = NumVector::new(Domain::I64);
            v.len = LANES;
            let Values::I64(x) = &mut v.values else { unreachable!() };
            let top = [i64::MAX, i64::MAX / 3, 1 << 40, 100][block % 4];
            x.iter_mut().for_each(|x| *x = rng.random_range(-top..=top));
            let active =
                if rng.random_bool(0.5) { Bits::first(rng.random_range(0..=LANES)) } else { Bits(rng.random()) };
            let mut gids = [0u32; LANES];
            gids.iter_mut().for_each(|g| *g = rng.random_range(0..groups as u32));
            active.for_each_one(|l| want[gids[l] as usize] += x[l] as i128);
            let bound = rng.random_bool(0.5).then(|| x.iter().map(|v| v.unsigned_abs()).max().unwrap());
            scatter(&mut s, &kind, Operand::Vector(&v), &active, &gids, bound).unwrap();
        }
        let StateColumn::SumI { sum, .. } = &s else { panic!("a signed sum state") };
        for (g, w) in want.iter().enumerate() {
            assert_eq!(sum.get(g), *w, "group {g} of {groups}, implied {implied}");
        }
        // Sums that fit Int64 finish, the others fail.
        let got = s.finish(&kind, &DataType::Int64);
        let fits = want.iter().all(|w| i64::try_from(*w).is_ok());
        assert_eq!(got.is_ok(), fits, "{got:?}");
        assert!(!fits, "the sums of near-i64::MAX values leave i64");
    }
}

/// A decimal sum that leaves `i128` while scattering is an overflow
/// error (not a wrapped value).
#[test]
fn decimal_sums_leaving_i128_are_overflow_errors() {
    let (kind, _) = state_kind(AggFunc::Sum, Some(&DataType::Decimal128(38, 0))).unwrap();
    for groups in GROUP_COUNTS {
        let mut s = new_state(&kind, groups);
        let mut v = NumVector::new(Domain::I128);
        v.len = 4;
        let Values::I128(x) = &mut v.values else { unreachable!() };
        x[..4].copy_from_slice(&[i128::MAX / 2, i128::MAX / 2, 1, 1]);
        let gids = [0u32; LANES];
        scatter(&mut s, &kind, Operand::Vector(&v), &Bits::first(3), &gids, None).unwrap();
        let err = scatter(&mut s, &kind, Operand::Vector(&v), &Bits::first(4), &gids, None).unwrap_err();
        assert!(matches!(err, Error::Overflow(_)), "{groups} groups: {err}");
        let one = Operand::Scalar(Some(Num::I128(i128::MAX)));
        let err = scatter(&mut s, &kind, one, &Bits::first(1), &gids, None).unwrap_err();
        assert!(matches!(err, Error::Overflow(_)), "{groups} groups: {err}");
    }
}

/// A grouped decimal SUM of an input without NULLs (`implied`) keeps no
/// counts: it finishes without NULLs, at the reference's sums (a group
/// without rows, which a real aggregation never holds, sums to 0).
#[test]
fn implied_decimal_sums_equal_the_reference() {
    let mut rng = StdRng::seed_from_u64(23);
    let t = DataType::Decimal128(20, 2);
    for groups in GROUP_COUNTS {
        let (mut kind, output) = state_kind(AggFunc::Sum, Some(&t)).unwrap();
        let StateKind::Sum { implied, .. } = &mut kind else { panic!("a SUM state") };
        *implied = true;
        let mut s = new_state(&kind, groups);
        let mut want = vec![0i128; groups];
        for _ in 0..12 {
            let mut block = random_block(&mut rng, &t, groups);
            block.vector.has_nulls = false;
            block.vector.validity = Bits::first(LANES);
            block.scalar = None;
            block.rows().into_iter().for_each(|(g, v)| want[g] += as_i128(v));
            scatter(&mut s, &kind, block.operand(), &block.active, &block.gids, None).unwrap();
        }
        let got = cells(&s.finish(&kind, &output).unwrap());
        assert_eq!(got, want.iter().map(|&w| Cell::Int(w)).collect::<Vec<_>>(), "{groups} groups");
    }
}
