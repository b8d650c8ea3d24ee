//! Aggregation without GROUP BY: each aggregate reads its column the
//! cheapest way the encoding allows.
//!
//! ```text
//!   SUM              Σ keys read from the encoding (storage's `Keys::sum_block`):
//!                    bit-packed n·reference + Σ deltas (a whole block from its
//!                    frame, O(1)), constant n·value, sequence arithmetic series,
//!                    run-end Σ run value × selected rows
//!   MIN/MAX          a whole block without nulls: its zone map, O(1);
//!                    otherwise the best key of the block (key order = value order)
//!   strings          dictionary: the best code, one lookup; else byte compares
//!   anything else    evaluate the expression, reduce the vector
//! ```

use quiverdb_storage::types::PhysicalType;

use super::input::{Input, Step, column_validity};
use super::state::{MinMaxDomain, StateColumn, StateKind, SumDomain, better, max_abs, offer_num_at};
use crate::columns::{ColumnSource, Scratch, gather_keys, key_to_num};
use crate::error::{Error, Result};
use crate::expr::{Operand, Side};
use crate::scalar::Num;
use crate::vector::Values;
use quiverdb_storage::block::{Bits, LANES, Sel, sel_offsets};

/// Folds `sel` into the single group of an aggregate without keys.
pub(super) fn fold(
    state: &mut StateColumn,
    kind: &StateKind,
    input: &mut Input,
    step: Step<'_, '_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let Step { cols, side, sel } = step;
    // Built only where an input needs it (not for COUNT(*)).
    let active = || sel.active();
    match (kind, input) {
        (StateKind::Count, Input::CountStar) => state.add_count(0, sel.count() as u64),
        (StateKind::Count, Input::Column { col, .. } | Input::Bytes(col)) => {
            let n = match column_validity(cols.column(*col), side, sel) {
                None => sel.count(),
                Some(v) => v.and(&active()).count(),
            };
            state.add_count(0, n as u64);
        }
        (StateKind::Sum { domain, .. }, Input::Column { col, expr }) if !matches!(domain, SumDomain::Float) => {
            let src = cols.column(*col);
            if let (Side::Main(block), Some(keys)) = (side, src.main().and_then(|m| m.keys())) {
                let valid = src.main_validity(block, sel).map(|v| v.and(&active()));
                let len = cols.block_len(block);
                let (sum_keys, n) = keys.sum_block(block, len, sel, valid, &mut scratch.block);
                let signed = !matches!(
                    src.physical(),
                    PhysicalType::UInt8
                        | PhysicalType::UInt16
                        | PhysicalType::UInt32
                        | PhysicalType::UInt64
                        | PhysicalType::Boolean
                );
                add_key_sum(state, sum_keys, n, signed)?;
            } else {
                let o = expr.eval(cols, side, sel, scratch)?;
                sum_operand(state, o, &active())?;
            }
        }
        (StateKind::MinMax { max, domain }, Input::Column { col, expr }) if *domain != MinMaxDomain::Bytes => {
            let src = cols.column(*col);
            if let (Side::Main(block), Some(main)) = (side, src.main())
                && let Some(keys) = main.keys()
            {
                let valid = src.main_validity(block, sel).map(|v| v.and(&active()));
                let full = matches!(sel, Sel::Range(0, b) if b == cols.block_len(block));
                let key = if full && valid.is_none() {
                    let z = main.zones()[block];
                    (!z.all_null()).then_some(if *max { z.max } else { z.min })
                } else {
                    let lanes = valid.unwrap_or_else(active);
                    gather_keys(&keys, block, sel, scratch);
                    best_key(&scratch.keys, &lanes, *max)
                };
                if let Some(k) = key {
                    offer_num(state, key_to_num(src.physical(), k), *max);
                }
            } else {
                let o = expr.eval(cols, side, sel, scratch)?;
                minmax_operand(state, o, &active(), *max);
            }
        }
        (StateKind::MinMax { max, .. }, Input::Bytes(col)) => {
            let src = cols.column(*col);
            let valid = column_validity(src, side, sel).map_or_else(active, |v| v.and(&active()));
            best_bytes(src, side, sel, &valid, *max, scratch, |best| state.offer_bytes(0, best, *max));
        }
        (StateKind::Count, Input::Expr(e)) => {
            let n = match e.eval(cols, side, sel, scratch)? {
                Operand::Scalar(None) => 0,
                Operand::Scalar(Some(_)) => active().count(),
                Operand::Vector(v) => v.valid(&active()).count(),
            };
            state.add_count(0, n as u64);
        }
        (StateKind::Sum { .. }, Input::Column { expr, .. } | Input::Expr(expr)) => {
            let o = expr.eval(cols, side, sel, scratch)?;
            sum_operand(state, o, &active())?;
        }
        (StateKind::MinMax { max, .. }, Input::Column { expr, .. } | Input::Expr(expr)) => {
            let o = expr.eval(cols, side, sel, scratch)?;
            minmax_operand(state, o, &active(), *max);
        }
        _ => return Err(Error::Internal("aggregate input and state disagree".into())),
    }
    Ok(())
}

/// Adds a sum of keys over `n` values to a SUM state.
fn add_key_sum(state: &mut StateColumn, sum_keys: u128, n: u64, signed: bool) -> Result<()> {
    // Signed keys are values + 2^63.
    let values = if signed { sum_keys as i128 - ((n as i128) << 63) } else { sum_keys as i128 };
    match state {
        StateColumn::SumI { sum, n: c } => {
            sum.total[0] += values;
            c[0] += n;
        }
        StateColumn::SumU { sum, n: c } => {
            sum[0] += values as u128;
            c[0] += n;
        }
        StateColumn::SumD { sum, n: c } => {
            sum[0] = sum[0].checked_add(values).ok_or_else(|| Error::Overflow("decimal SUM".into()))?;
            c[0] += n;
        }
        _ => return Err(Error::Internal("key sum into a non-integer state".into())),
    }
    Ok(())
}

/// The smallest (or largest) key among `lanes`.
fn best_key(keys: &[u64; LANES], lanes: &Bits, max: bool) -> Option<u64> {
    let first = lanes.first_one()?;
    let mut best = keys[first];
    if max {
        lanes.for_each_one(|l| best = best.max(keys[l]));
    } else {
        lanes.for_each_one(|l| best = best.min(keys[l]));
    }
    Some(best)
}

/// Offers a number to group 0 of a MIN/MAX state.
fn offer_num(state: &mut StateColumn, n: Num, max: bool) {
    offer_num_at(state, 0, n, max);
}

/// Adds the valid, active lanes of an operand to group 0 of a SUM state.
fn sum_operand(state: &mut StateColumn, o: Operand<'_>, active: &Bits) -> Result<()> {
    match o {
        Operand::Scalar(None) => {}
        Operand::Scalar(Some(x)) => {
            let k = active.count() as u64;
            match (state, x) {
                (StateColumn::SumI { sum, n }, Num::I64(v)) => {
                    sum.total[0] += v as i128 * k as i128;
                    n[0] += k;
                }
                (StateColumn::SumU { sum, n }, Num::U64(v)) => {
                    sum[0] += v as u128 * k as u128;
                    n[0] += k;
                }
                (StateColumn::SumF { sum, n }, Num::F64(v)) => {
                    for _ in 0..k {
                        sum[0] += v;
                    }
                    n[0] += k;
                }
                (StateColumn::SumD { sum, n }, Num::I128(v)) => {
                    let add = v.checked_mul(k as i128).ok_or_else(|| Error::Overflow("decimal SUM".into()))?;
                    sum[0] = sum[0].checked_add(add).ok_or_else(|| Error::Overflow("decimal SUM".into()))?;
                    n[0] += k;
                }
                _ => return Err(Error::Internal("sum of another domain".into())),
            }
        }
        Operand::Vector(vec) => {
            let lanes = vec.valid(active);
            let k = lanes.count() as u64;
            match (state, &vec.values) {
                (StateColumn::SumI { sum, n }, Values::I64(x)) => {
                    if sum.reserve(k as usize, max_abs(x, &lanes)) {
                        let s: i64 = match lanes.dense_len() {
                            Some(n) => x[..n].iter().sum(),
                            None => {
                                let mut s = 0;
                                lanes.for_each_one(|l| s += x[l]);
                                s
                            }
                        };
                        sum.partial[0] += s;
                    } else {
                        let mut s: i128 = 0;
                        lanes.for_each_one(|l| s += x[l] as i128);
                        sum.total[0] += s;
                    }
                    n[0] += k;
                }
                (StateColumn::SumU { sum, n }, Values::U64(x)) => {
                    let mut s: u128 = 0;
                    lanes.for_each_one(|l| s += x[l] as u128);
                    sum[0] += s;
                    n[0] += k;
                }
                (StateColumn::SumF { sum, n }, Values::F64(x)) => {
                    let mut s = 0.0;
                    lanes.for_each_one(|l| s += x[l]);
                    sum[0] += s;
                    n[0] += k;
                }
                (StateColumn::SumD { sum, n }, Values::I128(x)) => {
                    let mut s: i128 = sum[0];
                    let mut overflow = false;
                    lanes.for_each_one(|l| match s.checked_add(x[l]) {
                        Some(v) => s = v,
                        None => overflow = true,
                    });
                    if overflow {
                        return Err(Error::Overflow("decimal SUM".into()));
                    }
                    sum[0] = s;
                    n[0] += k;
                }
                _ => return Err(Error::Internal("sum of another domain".into())),
            }
        }
    }
    Ok(())
}

/// Offers the valid, active lanes of an operand to group 0 of MIN/MAX.
fn minmax_operand(state: &mut StateColumn, o: Operand<'_>, active: &Bits, max: bool) {
    match o {
        Operand::Scalar(None) => {}
        Operand::Scalar(Some(x)) => {
            if !active.is_empty() {
                offer_num(state, x, max);
            }
        }
        Operand::Vector(vec) => {
            let lanes = vec.valid(active);
            lanes.for_each_one(|l| {
                let n = match &vec.values {
                    Values::I64(x) => Num::I64(x[l]),
                    Values::U64(x) => Num::U64(x[l]),
                    Values::F64(x) => Num::F64(x[l]),
                    Values::I128(x) => Num::I128(x[l]),
                };
                offer_num(state, n, max);
            });
        }
    }
}

/// Hands `take` the smallest (or largest) byte string among `lanes`, if
/// any: a dictionary's or the delta's without copying, a main block's
/// other values (which may be decompressed one by one) through a copy of
/// the best so far.
fn best_bytes(
    src: &ColumnSource<'_>,
    side: Side,
    sel: Sel<'_>,
    lanes: &Bits,
    max: bool,
    scratch: &mut Scratch,
    take: impl FnOnce(&[u8]),
) {
    match side {
        Side::Main(block) => {
            let Some(col) = src.main() else { return };
            if let Some(dict) = col.string_dictionary() {
                // Code order is value order: find the best code, then one lookup.
                gather_keys(&dict.codes(), block, sel, scratch);
                if let Some(code) = best_key(&scratch.keys, lanes, max) {
                    take(dict.value(code as usize));
                }
                return;
            }
            src.with_main_block_bytes(block, scratch, |bytes| {
                let mut best: Option<Vec<u8>> = None;
                sel_offsets(sel, lanes, |_, o| {
                    let v = bytes.get(o);
                    if best.as_deref().is_none_or(|b| better(v, b, max)) {
                        let b = best.get_or_insert_with(Vec::new);
                        b.clear();
                        b.extend_from_slice(v);
                    }
                });
                if let Some(b) = best {
                    take(&b);
                }
            });
        }
        Side::Delta(chunk) => {
            let mut best: Option<&[u8]> = None;
            sel_offsets(sel, lanes, |_, o| {
                let v = src.delta_bytes(chunk, o);
                if best.is_none_or(|b| better(v, b, max)) {
                    best = Some(v);
                }
            });
            if let Some(b) = best {
                take(b);
            }
        }
    }
}
