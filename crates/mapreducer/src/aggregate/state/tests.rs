//! Accumulator states: exact signed sums, MIN/MAX in the order the
//! module defines (IEEE total order for floats), and what `finish` makes
//! of a state: values, NULL for a group without rows, errors for results
//! that do not fit. (Scattering rows into states is tested in `grouped`.)

use std::cmp::Ordering;
use std::collections::BTreeMap;

use arrow_array::ArrayRef;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::super::spec::{AggFunc, state_kind};
use super::*;
use crate::test_tables::{Cell, cell};

fn cells(a: &ArrayRef) -> Vec<Cell> {
    (0..a.len()).map(|i| cell(a.as_ref(), i)).collect()
}

/// The state kind and output type of `func` over `input`.
fn kind_of(func: AggFunc, input: DataType) -> (StateKind, DataType) {
    state_kind(func, Some(&input)).unwrap()
}

/// A state of `kind` with `groups` groups.
fn state(kind: &StateKind, groups: usize) -> StateColumn {
    let mut s = StateColumn::new(kind);
    s.ensure(groups);
    s
}

fn is_overflow<T: std::fmt::Debug>(r: &Result<T>) -> bool {
    matches!(r, Err(Error::Overflow(_)))
}

/// Blocks of values of every magnitude (up to `i64::MIN`, whose magnitude
/// no partial can reserve), added the way the kernels add them: to the
/// `i64` partials when `reserve` grants the room, else to the totals.
/// In a debug build a partial that overflowed would panic; the sums
/// must equal `i128` sums after every block.
#[test]
fn signed_sums_stay_exact_across_flushes() {
    const GROUPS: usize = 7;
    let mut rng = StdRng::seed_from_u64(1);
    let (kind, _) = kind_of(AggFunc::Sum, DataType::Int64);
    let mut s = state(&kind, GROUPS);
    let StateColumn::SumI { sum, .. } = &mut s else { panic!("a signed sum state") };
    let mut want = [0i128; GROUPS];
    let (mut granted, mut refused) = (0, 0);
    for block in 0..1500 {
        let rows = [1, 2, 10, 1024][rng.random_range(0..4)];
        let magnitude = [0, 1, 1 << 20, 1 << 40, i64::MAX - 5, i64::MAX][rng.random_range(0..6)];
        let mut x = [0i64; LANES];
        for v in x.iter_mut().take(rows) {
            *v = match rng.random_range(0..20) {
                0 => i64::MIN,
                1 => i64::MAX,
                _ => rng.random_range(-magnitude..=magnitude),
            };
        }
        let gids: Vec<usize> = (0..rows).map(|_| rng.random_range(0..GROUPS)).collect();
        let lanes = Bits::first(rows);
        if sum.reserve(rows, max_abs(&x, &lanes)) {
            granted += 1;
            for (&g, &v) in gids.iter().zip(&x) {
                sum.partial[g] += v;
            }
        } else {
            refused += 1;
            for (&g, &v) in gids.iter().zip(&x) {
                sum.total[g] += v as i128;
            }
        }
        for (&g, &v) in gids.iter().zip(&x) {
            want[g] += v as i128;
        }
        for (g, w) in want.iter().enumerate() {
            assert_eq!(sum.get(g), *w, "group {g} after block {block}");
        }
    }
    assert!(granted > 100 && refused > 100, "{granted} blocks in partials, {refused} in totals");
}

#[test]
fn max_abs_is_the_largest_magnitude_of_the_lanes() {
    let mut rng = StdRng::seed_from_u64(2);
    for _ in 0..200 {
        let mut x = [0i64; LANES];
        x.iter_mut().for_each(|v| *v = if rng.random_bool(0.01) { i64::MIN } else { rng.random_range(-1000..1000) });
        let mut lanes = Bits::EMPTY;
        let dense = rng.random_bool(0.5);
        let n = rng.random_range(0..=LANES);
        (0..n).filter(|_| dense || rng.random_bool(0.3)).for_each(|l| lanes.set(l));
        let want = (0..LANES).filter(|&l| lanes.get(l)).map(|l| x[l].unsigned_abs()).max().unwrap_or(0);
        assert_eq!(max_abs(&x, &lanes), want);
    }
}

/// A value for a MIN/MAX state of `domain`, often a repeat or a special one.
fn minmax_value(rng: &mut StdRng, domain: MinMaxDomain) -> (Num, Vec<u8>) {
    let floats = [0.0, -0.0, f64::NAN, -f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MIN_POSITIVE, -1.0];
    let n = match domain {
        MinMaxDomain::I64 => Num::I64(if rng.random_bool(0.1) {
            [i64::MIN, i64::MAX][rng.random_range(0..2)]
        } else {
            rng.random_range(-99..99)
        }),
        MinMaxDomain::U64 => Num::U64(if rng.random_bool(0.1) { u64::MAX } else { rng.random_range(0..200) }),
        MinMaxDomain::F64 => Num::F64(if rng.random_bool(0.3) {
            floats[rng.random_range(0..floats.len())]
        } else {
            rng.random_range(-9.0..9.0)
        }),
        MinMaxDomain::I128 => {
            Num::I128(if rng.random_bool(0.1) { 1 - 10i128.pow(38) } else { rng.random_range(-999..999) })
        }
        MinMaxDomain::Bytes => Num::I64(0),
    };
    let len = rng.random_range(0..4);
    let bytes = (0..len).map(|_| rng.random_range(b'a'..b'e')).collect();
    (n, bytes)
}

/// The order MIN/MAX use: IEEE total order for floats (-NaN < -inf < …
/// < -0.0 < 0.0 < … < inf < NaN), the natural order otherwise.
fn order(a: &(Num, Vec<u8>), b: &(Num, Vec<u8>), domain: MinMaxDomain) -> Ordering {
    match (domain, a.0, b.0) {
        (MinMaxDomain::Bytes, _, _) => a.1.cmp(&b.1),
        (_, Num::I64(x), Num::I64(y)) => x.cmp(&y),
        (_, Num::U64(x), Num::U64(y)) => x.cmp(&y),
        (_, Num::F64(x), Num::F64(y)) => x.total_cmp(&y),
        (_, Num::I128(x), Num::I128(y)) => x.cmp(&y),
        _ => unreachable!(),
    }
}

fn offer(s: &mut StateColumn, g: usize, v: &(Num, Vec<u8>), domain: MinMaxDomain, max: bool) {
    match domain {
        MinMaxDomain::Bytes => s.offer_bytes(g, &v.1, max),
        _ => offer_num_at(s, g, v.0, max),
    }
}

/// Values offered to one state, or split between two states (the second
/// with its groups renumbered) that are then merged, finish as the least
/// (greatest) value of each group by the reference order, NULL for a
/// group offered nothing.
#[test]
fn min_max_states_follow_their_order_and_merge() {
    const GROUPS: usize = 20;
    let mut rng = StdRng::seed_from_u64(3);
    let domains = [
        (MinMaxDomain::I64, DataType::Int64),
        (MinMaxDomain::U64, DataType::UInt64),
        (MinMaxDomain::F64, DataType::Float64),
        (MinMaxDomain::I128, DataType::Decimal128(38, 0)),
        (MinMaxDomain::Bytes, DataType::Utf8),
    ];
    for (domain, input) in domains {
        for func in [AggFunc::Min, AggFunc::Max] {
            let max = func == AggFunc::Max;
            let (kind, output) = kind_of(func, input.clone());
            assert_eq!(kind, StateKind::MinMax { max, domain });
            let (mut whole, mut a, mut b) = (state(&kind, GROUPS), state(&kind, GROUPS), state(&kind, GROUPS));
            // Group g of the whole is group perm[g] of b.
            let mut perm: Vec<usize> = (0..GROUPS).collect();
            perm.reverse();
            perm.swap(3, 11);
            let mut want: BTreeMap<usize, (Num, Vec<u8>)> = BTreeMap::new();
            for _ in 0..3000 {
                // Groups 18 and 19 get nothing.
                let g = rng.random_range(0..GROUPS - 2);
                let v = minmax_value(&mut rng, domain);
                offer(&mut whole, g, &v, domain, max);
                if rng.random_bool(0.5) {
                    offer(&mut a, g, &v, domain, max);
                } else {
                    offer(&mut b, perm[g], &v, domain, max);
                }
                let best = want.entry(g).or_insert_with(|| v.clone());
                let better = order(&v, best, domain);
                if (max && better == Ordering::Greater) || (!max && better == Ordering::Less) {
                    *best = v;
                }
            }
            let pairs: Vec<(u32, u32)> = (0..GROUPS).map(|g| (g as u32, perm[g] as u32)).collect();
            a.merge_entries(&b, &pairs, &kind).unwrap();
            let want: Vec<Cell> = (0..GROUPS)
                .map(|g| match want.get(&g) {
                    None => Cell::Null,
                    Some((_, bytes)) if domain == MinMaxDomain::Bytes => Cell::Bytes(bytes.clone()),
                    Some((Num::F64(v), _)) => Cell::Float(v.to_bits()),
                    Some((Num::I64(v), _)) => Cell::Int(*v as i128),
                    Some((Num::U64(v), _)) => Cell::Int(*v as i128),
                    Some((Num::I128(v), _)) => Cell::Int(*v),
                })
                .collect();
            assert_eq!(cells(&whole.finish(&kind, &output).unwrap()), want, "{func:?} {input}: one state");
            assert_eq!(cells(&a.finish(&kind, &output).unwrap()), want, "{func:?} {input}: merged states");
        }
    }
}

#[test]
fn float_order_is_ieee_total_order() {
    let values =
        [-f64::NAN, f64::NEG_INFINITY, -1.0, -f64::MIN_POSITIVE, -0.0, 0.0, 1e-300, 2.5, f64::INFINITY, f64::NAN];
    for (i, &a) in values.iter().enumerate() {
        for (j, &b) in values.iter().enumerate() {
            assert_eq!(f64_better(a, b, false), i < j, "MIN: {a} before {b}");
            assert_eq!(f64_better(a, b, true), i > j, "MAX: {a} after {b}");
        }
    }
}

/// COUNT finishes as Int64 (0 for a group without rows), merges by
/// adding; SUM is NULL for a group without rows.
#[test]
fn counts_add_and_sums_of_no_rows_are_null() {
    let (kind, output) = kind_of(AggFunc::Count, DataType::Utf8);
    let mut a = state(&kind, 4);
    let mut b = state(&kind, 4);
    a.add_count(0, 5);
    a.add_count(2, 1);
    b.add_count(2, 7);
    b.add_count(1, 1 << 40);
    a.merge_entries(&b, &[(0, 0), (1, 1), (2, 2), (3, 3)], &kind).unwrap();
    let want = [5i128, 1 << 40, 8, 0].map(Cell::Int);
    assert_eq!(cells(&a.finish(&kind, &output).unwrap()), want);

    for input in [DataType::Int32, DataType::UInt32, DataType::UInt64, DataType::Float32, DataType::Decimal128(9, 2)] {
        for func in [AggFunc::Sum, AggFunc::Avg] {
            let (kind, output) = kind_of(func, input.clone());
            let got = state(&kind, 3).finish(&kind, &output).unwrap();
            assert_eq!(got.data_type(), &output);
            assert_eq!(cells(&got), [Cell::Null, Cell::Null, Cell::Null], "{func:?} of {input}");
        }
    }
}

/// Sets group 0 of a SUM state of `input` to `total` over one row.
fn sum_state(input: DataType, avg: bool, total: i128) -> (StateColumn, StateKind, DataType) {
    let (kind, output) = kind_of(if avg { AggFunc::Avg } else { AggFunc::Sum }, input);
    let mut s = state(&kind, 1);
    match &mut s {
        StateColumn::SumI { sum, n } => (sum.total[0], n[0]) = (total, 1),
        StateColumn::SumU { sum, n } => (sum[0], n[0]) = (total as u128, 1),
        StateColumn::SumD { sum, n } => (sum[0], n[0]) = (total, 1),
        other => panic!("{other:?}"),
    }
    (s, kind, output)
}

fn finish_sum(input: DataType, total: i128) -> Result<Vec<Cell>> {
    let (s, kind, output) = sum_state(input, false, total);
    s.finish(&kind, &output).map(|a| cells(&a))
}

/// Sums accumulate exactly beyond the output type and fail when
/// finished if they do not fit it: Int64 for signed inputs, UInt64 for
/// unsigned ones, the output precision (input + 10 digits, at most 38)
/// for decimals. Decimal sums also fail on leaving `i128` when merged.
#[test]
fn sums_that_do_not_fit_their_type_are_overflow_errors() {
    let i64_max = i64::MAX as i128;
    let u64_max = u64::MAX as i128;
    assert_eq!(finish_sum(DataType::Int64, i64_max).unwrap(), [Cell::Int(i64_max)]);
    assert_eq!(finish_sum(DataType::Int8, i64::MIN as i128).unwrap(), [Cell::Int(i64::MIN as i128)]);
    assert!(is_overflow(&finish_sum(DataType::Int64, i64_max + 1)));
    assert!(is_overflow(&finish_sum(DataType::Int16, i64::MIN as i128 - 1)));
    // Narrow unsigned inputs sum in the signed state, reported as UInt64.
    assert_eq!(finish_sum(DataType::UInt32, u64_max).unwrap(), [Cell::Int(u64_max)]);
    assert!(is_overflow(&finish_sum(DataType::UInt32, u64_max + 1)));
    assert_eq!(finish_sum(DataType::UInt64, u64_max).unwrap(), [Cell::Int(u64_max)]);
    assert!(is_overflow(&finish_sum(DataType::UInt64, u64_max + 1)));
    for (p, s) in [(9u8, 2i8), (28, 0), (38, 10)] {
        let limit = 10i128.pow((p as u32 + 10).min(38));
        let input = DataType::Decimal128(p, s);
        assert_eq!(finish_sum(input.clone(), limit - 1).unwrap(), [Cell::Int(limit - 1)], "{input}");
        assert_eq!(finish_sum(input.clone(), 1 - limit).unwrap(), [Cell::Int(1 - limit)], "{input}");
        assert!(is_overflow(&finish_sum(input.clone(), limit)), "{input}");
        assert!(is_overflow(&finish_sum(input.clone(), -limit)), "{input}");
    }
    let input = DataType::Decimal128(38, 0);
    let (mut a, kind, _) = sum_state(input.clone(), false, i128::MAX - 5);
    let (b, _, _) = sum_state(input.clone(), false, 5);
    a.merge_entries(&b, &[(0, 0)], &kind).unwrap();
    let (c, _, _) = sum_state(input, false, 1);
    assert!(is_overflow(&a.merge_entries(&c, &[(0, 0)], &kind)), "i128::MAX + 1");
}

/// AVG is the sum over the count: Float64 for numbers, and for decimals
/// four more digits of scale, truncated toward zero (as DataFusion's AVG),
/// an error when it does not fit its type.
#[test]
fn averages_divide_the_sum_by_the_count() {
    let mut rng = StdRng::seed_from_u64(4);
    for (input, scale) in
        [(DataType::Decimal128(10, 2), 2i8), (DataType::Decimal128(30, 0), 0), (DataType::Decimal128(38, 36), 36)]
    {
        let (kind, output) = kind_of(AggFunc::Avg, input.clone());
        let DataType::Decimal128(_, out_scale) = output else { panic!("{output}") };
        let shift = 10i128.pow((out_scale - scale) as u32);
        let mut s = state(&kind, 300);
        let StateColumn::SumD { sum, n } = &mut s else { panic!("a decimal sum state") };
        for g in 0..300 {
            // Halves (count 2, 8: exact ties), thirds, and the rest.
            n[g] = [0, 1, 2, 3, 7, 8, 1000][g % 7];
            sum[g] = if n[g] == 0 { 0 } else { rng.random_range(-1_000_000_000..1_000_000_000) };
        }
        let want: Vec<Cell> =
            (0..300).map(|g| if n[g] == 0 { Cell::Null } else { Cell::Int(sum[g] * shift / n[g] as i128) }).collect();
        assert_eq!(cells(&s.finish(&kind, &output).unwrap()), want, "AVG of {input}");
    }
    for input in [DataType::Int64, DataType::UInt16, DataType::UInt64, DataType::Float64] {
        let (kind, output) = kind_of(AggFunc::Avg, input.clone());
        assert_eq!(output, DataType::Float64);
        let mut s = state(&kind, 50);
        let mut want = Vec::new();
        for g in 0..50 {
            let count = [0u64, 1, 3, 10][g % 4];
            let total = if count == 0 { 0 } else { rng.random_range(0..1_000_000i64) };
            match &mut s {
                StateColumn::SumI { sum, n } => (sum.partial[g], sum.total[g], n[g]) = (total, 1 << 70, count),
                StateColumn::SumU { sum, n } => (sum[g], n[g]) = (total as u128 + (1 << 70), count),
                StateColumn::SumF { sum, n } => (sum[g], n[g]) = (total as f64 + 2f64.powi(70), count),
                other => panic!("{other:?}"),
            }
            let exact = total as i128 + (1 << 70);
            want.push(if count == 0 { Cell::Null } else { Cell::Float((exact as f64 / count as f64).to_bits()) });
        }
        assert_eq!(cells(&s.finish(&kind, &output).unwrap()), want, "AVG of {input}");
    }
    // A decimal average whose scaled sum leaves i128.
    let (s, kind, output) = sum_state(DataType::Decimal128(38, 0), true, i128::MAX / 1000);
    assert!(is_overflow(&s.finish(&kind, &output)));
    // One whose value does not fit its type: AVG of 1.5 as DECIMAL(38, 36)
    // is DECIMAL(38, 38), which holds only magnitudes below 1.
    let (s, kind, output) = sum_state(DataType::Decimal128(38, 36), true, 15 * 10i128.pow(35));
    assert_eq!(output, DataType::Decimal128(38, 38));
    assert!(is_overflow(&s.finish(&kind, &output)));
}

/// Partial states for DataFusion: AVG as `[count, sum]` (both NULL for a
/// group without values), other aggregates as their final value.
#[test]
fn partial_states_lay_avg_out_as_count_and_sum() {
    let (kind, output) = kind_of(AggFunc::Avg, DataType::Int32);
    let mut s = state(&kind, 3);
    let StateColumn::SumI { sum, n } = &mut s else { panic!("a signed sum state") };
    (sum.total[0], n[0]) = (-7, 2);
    (sum.partial[2], n[2]) = (40, 5);
    let parts = s.finish_state(&kind, &output).unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].data_type(), &DataType::UInt64);
    assert_eq!(cells(&parts[0]), [Cell::Int(2), Cell::Null, Cell::Int(5)]);
    assert_eq!(cells(&parts[1]), [Cell::Float((-7.0f64).to_bits()), Cell::Null, Cell::Float(40.0f64.to_bits())]);

    let (kind, output) = kind_of(AggFunc::Avg, DataType::Decimal128(12, 3));
    let mut s = state(&kind, 2);
    let StateColumn::SumD { sum, n } = &mut s else { panic!("a decimal sum state") };
    (sum[1], n[1]) = (12_345, 4);
    let parts = s.finish_state(&kind, &output).unwrap();
    assert_eq!(parts[1].data_type(), &DataType::Decimal128(38, 3), "the sum keeps the input's scale");
    assert_eq!(
        (cells(&parts[0]), cells(&parts[1])),
        (vec![Cell::Null, Cell::Int(4)], vec![Cell::Null, Cell::Int(12_345)])
    );

    let (kind, output) = kind_of(AggFunc::Sum, DataType::Int32);
    let (s, _, _) = sum_state(DataType::Int32, false, 9);
    let parts = s.finish_state(&kind, &output).unwrap();
    assert_eq!(parts.iter().map(cells).collect::<Vec<_>>(), [vec![Cell::Int(9)]]);
}

#[test]
fn merging_states_of_different_aggregates_is_an_internal_error() {
    let kinds: Vec<StateKind> = [
        (AggFunc::Count, DataType::Int64),
        (AggFunc::Sum, DataType::Int64),
        (AggFunc::Sum, DataType::UInt64),
        (AggFunc::Sum, DataType::Float64),
        (AggFunc::Sum, DataType::Decimal128(9, 2)),
        (AggFunc::Min, DataType::Int64),
        (AggFunc::Min, DataType::UInt64),
        (AggFunc::Min, DataType::Float64),
        (AggFunc::Min, DataType::Decimal128(9, 2)),
        (AggFunc::Min, DataType::Utf8),
    ]
    .into_iter()
    .map(|(f, t)| kind_of(f, t).0)
    .collect();
    for (i, ki) in kinds.iter().enumerate() {
        for (j, kj) in kinds.iter().enumerate() {
            let mut a = state(ki, 1);
            let got = a.merge_entries(&state(kj, 1), &[(0, 0)], ki);
            assert_eq!(got.is_ok(), i == j, "{ki:?} with {kj:?}");
            if i != j {
                assert!(matches!(got, Err(Error::Internal(_))), "{got:?}");
            }
        }
    }
}
