//! Aggregation with GROUP BY: per-lane group ids (computed by the
//! kernel), then one scatter loop per aggregate into per-group states.

use super::input::{Input, Step, column_validity};
use super::state::{StateColumn, StateKind, max_abs, offer_num_at};
use crate::columns::{Scratch, ShardColumns, key_to_num};
use crate::error::{Error, Result};
use crate::expr::{Operand, Side};
use crate::scalar::Num;
use crate::vector::Values;
use quiverdb_storage::block::{Bits, LANES, sel_offsets};

/// Folds `sel` into the groups `gids` (per lane) of one aggregate.
pub(super) fn fold(
    state: &mut StateColumn,
    kind: &StateKind,
    input: &mut Input,
    step: Step<'_, '_>,
    scratch: &mut Scratch,
    gids: &[u32; LANES],
) -> Result<()> {
    let Step { cols, side, sel } = step;
    let active = sel.active();
    match (kind, input) {
        (StateKind::Count, Input::CountStar) => {
            let StateColumn::Count(c) = state else { return Err(Error::Internal("count state".into())) };
            let c = c.as_mut_slice();
            match active.dense_len() {
                Some(n) => gids[..n].iter().for_each(|&g| c[g as usize] += 1),
                None => active.for_each_one(|l| c[gids[l] as usize] += 1),
            }
        }
        (StateKind::Count, Input::Bytes(col)) => {
            let StateColumn::Count(c) = state else { return Err(Error::Internal("count state".into())) };
            let valid = column_validity(cols.column(*col), side, sel).map_or(active, |v| v.and(&active));
            valid.for_each_one(|l| c[gids[l] as usize] += 1);
        }
        (StateKind::MinMax { max, .. }, Input::Bytes(col)) => {
            let src = cols.column(*col);
            let valid = column_validity(src, side, sel).map_or(active, |v| v.and(&active));
            match side {
                Side::Main(block) => {
                    src.with_main_block_bytes(block, scratch, |bytes| {
                        sel_offsets(sel, &valid, |l, o| state.offer_bytes(gids[l] as usize, bytes.get(o), *max))
                    });
                }
                Side::Delta(chunk) => {
                    sel_offsets(sel, &valid, |l, o| {
                        state.offer_bytes(gids[l] as usize, src.delta_bytes(chunk, o), *max)
                    });
                }
            }
        }
        (kind, Input::Column { col, expr }) => {
            let bound = zone_magnitude(cols, *col, side);
            let o = expr.eval(cols, side, sel, scratch)?;
            scatter(state, kind, o, &active, gids, bound)?;
        }
        (kind, Input::Expr(expr)) => {
            let o = expr.eval(cols, side, sel, scratch)?;
            scatter(state, kind, o, &active, gids, None)?;
        }
        _ => return Err(Error::Internal("aggregate input and state disagree".into())),
    }
    Ok(())
}

/// The largest |value| of an I64-domain column in main block `block`,
/// from its zone map (exact for key encodings), or `None` when unknown.
fn zone_magnitude(cols: &ShardColumns<'_>, col: usize, side: Side) -> Option<u64> {
    let Side::Main(block) = side else { return None };
    let src = cols.column(col);
    let main = src.main()?;
    main.keys()?;
    let z = main.zones()[block];
    if z.all_null() {
        return Some(0);
    }
    match (key_to_num(src.physical(), z.min), key_to_num(src.physical(), z.max)) {
        (Num::I64(lo), Num::I64(hi)) => Some(lo.unsigned_abs().max(hi.unsigned_abs())),
        _ => None,
    }
}

/// Scatters an operand's valid, active lanes into per-group states;
/// `bound`, when known, is the largest |value| of the lanes.
fn scatter(
    state: &mut StateColumn,
    kind: &StateKind,
    o: Operand<'_>,
    active: &Bits,
    gids: &[u32; LANES],
    bound: Option<u64>,
) -> Result<()> {
    let (lanes, vec) = match o {
        Operand::Scalar(None) => return Ok(()),
        Operand::Scalar(Some(x)) => {
            // Rare (a constant input): one offer per lane.
            let mut err = None;
            active.for_each_one(|l| {
                let g = gids[l] as usize;
                if let Err(e) = add_one(state, kind, g, x) {
                    err.get_or_insert(e);
                }
            });
            return err.map_or(Ok(()), Err);
        }
        Operand::Vector(v) => (v.valid(active), v),
    };
    match (state, &vec.values) {
        (StateColumn::Count(c), _) if few_groups(c.len(), &lanes) => count_few(&lanes, gids, c),
        (StateColumn::Count(c), _) => {
            let c = c.as_mut_slice();
            lanes.for_each_one(|l| c[gids[l] as usize] += 1)
        }
        (StateColumn::SumI { sum, n }, Values::I64(x)) => {
            let implied = matches!(kind, StateKind::Sum { implied: true, .. });
            if sum.reserve(lanes.count(), bound.unwrap_or_else(|| max_abs(x, &lanes))) {
                let (partial, n) = (sum.partial.as_mut_slice(), n.as_mut_slice());
                match lanes.dense_len() {
                    _ if few_groups(partial.len(), &lanes) => {
                        sum_few(&lanes, gids, x, partial);
                        if !implied {
                            count_few(&lanes, gids, n);
                        }
                    }
                    Some(k) if implied => {
                        for (&g, &v) in gids[..k].iter().zip(&x[..k]) {
                            partial[g as usize] += v;
                        }
                    }
                    Some(k) => {
                        for (&g, &v) in gids[..k].iter().zip(&x[..k]) {
                            partial[g as usize] += v;
                            n[g as usize] += 1;
                        }
                    }
                    None => lanes.for_each_one(|l| {
                        let g = gids[l] as usize;
                        partial[g] += x[l];
                        n[g] += 1;
                    }),
                }
            } else {
                let total = &mut sum.total;
                lanes.for_each_one(|l| {
                    let g = gids[l] as usize;
                    total[g] += x[l] as i128;
                    n[g] += 1;
                });
            }
        }
        (StateColumn::SumU { sum, n }, Values::U64(x)) => lanes.for_each_one(|l| {
            let g = gids[l] as usize;
            sum[g] += x[l] as u128;
            n[g] += 1;
        }),
        (StateColumn::SumF { sum, n }, Values::F64(x)) => lanes.for_each_one(|l| {
            let g = gids[l] as usize;
            sum[g] += x[l];
            n[g] += 1;
        }),
        (StateColumn::SumD { sum, n }, Values::I128(x)) if few_groups(sum.len(), &lanes) => {
            if !checked_sum_few(&lanes, gids, x, sum) {
                return Err(Error::Overflow("decimal SUM".into()));
            }
            // A SUM of a column without NULLs needs no counts (see
            // `StateKind::Sum`); an AVG does.
            if !matches!(kind, StateKind::Sum { implied: true, .. }) {
                count_few(&lanes, gids, n);
            }
        }
        (StateColumn::SumD { sum, n }, Values::I128(x)) => {
            let mut overflow = false;
            lanes.for_each_one(|l| {
                let g = gids[l] as usize;
                match sum[g].checked_add(x[l]) {
                    Some(v) => sum[g] = v,
                    None => overflow = true,
                }
                n[g] += 1;
            });
            if overflow {
                return Err(Error::Overflow("decimal SUM".into()));
            }
        }
        (
            state @ (StateColumn::MinMaxI { .. }
            | StateColumn::MinMaxU { .. }
            | StateColumn::MinMaxF { .. }
            | StateColumn::MinMaxD { .. }),
            values,
        ) => {
            let StateKind::MinMax { max, .. } = kind else {
                return Err(Error::Internal("min/max state of another aggregate".into()));
            };
            lanes.for_each_one(|l| {
                let n = match values {
                    Values::I64(x) => Num::I64(x[l]),
                    Values::U64(x) => Num::U64(x[l]),
                    Values::F64(x) => Num::F64(x[l]),
                    Values::I128(x) => Num::I128(x[l]),
                };
                offer_num_at(state, gids[l] as usize, n, *max);
            });
        }
        _ => return Err(Error::Internal("scatter into a state of another domain".into())),
    }
    Ok(())
}

/// Group counts up to this (a power of two) may add a block's lanes
/// through [`sum_few`] and its siblings. With few groups, consecutive lanes
/// mostly add into one slot, and each add waits for the store of the one
/// before (TPC-H q01: four groups, eight aggregates over six million rows).
const FEW_GROUPS: usize = 16;

/// True when `groups` is few enough for [`sum_few`] and `lanes` dense
/// enough (at least half of each 64-lane word it touches, on average)
/// that visiting every lane of those words costs less than one by one.
fn few_groups(groups: usize, lanes: &Bits) -> bool {
    groups <= FEW_GROUPS && lanes.count() * 2 >= lanes.0.iter().filter(|w| **w != 0).count() * 64
}

/// Calls `f(i, l, keep)` for every lane `l` of the 64-lane words of `lanes`
/// that have a lane set, `keep` 1 for the set lanes and 0 for the others,
/// `i` counting from 0: branch-free loops over nearly dense lanes.
#[inline(always)]
fn each_lane_of_words(lanes: &Bits, mut f: impl FnMut(usize, usize, u64)) {
    for (w, &word) in lanes.0.iter().enumerate() {
        if word != 0 {
            for j in 0..64 {
                f(j, w * 64 + j, (word >> j) & 1);
            }
        }
    }
}

/// `sums[g] += x[l]` for each lane `l` of `lanes` in group `g = gids[l]`
/// (every such `g < sums.len() <= FEW_GROUPS`; the caller has checked that
/// the sums cannot overflow), through four sets of accumulators (lane
/// `i` into set `i % 4`), so that consecutive lanes add into independent
/// slots. Lanes not in `lanes` add 0 to a slot of any group.
fn sum_few(lanes: &Bits, gids: &[u32; LANES], x: &[i64; LANES], sums: &mut [i64]) {
    let mut acc = [[0i64; FEW_GROUPS]; 4];
    each_lane_of_words(lanes, |i, l, keep| {
        acc[i % 4][gids[l] as usize % FEW_GROUPS] += x[l] & (keep as i64).wrapping_neg();
    });
    for (g, s) in sums.iter_mut().enumerate() {
        *s += acc[0][g] + acc[1][g] + acc[2][g] + acc[3][g];
    }
}

/// `counts[g] += 1` for each lane of `lanes` in group `g` (as [`sum_few`]).
fn count_few(lanes: &Bits, gids: &[u32; LANES], counts: &mut [u64]) {
    let mut acc = [[0u64; FEW_GROUPS]; 4];
    each_lane_of_words(lanes, |i, l, keep| acc[i % 4][gids[l] as usize % FEW_GROUPS] += keep);
    for (g, c) in counts.iter_mut().enumerate() {
        *c += acc[0][g] + acc[1][g] + acc[2][g] + acc[3][g];
    }
}

/// Decimal `sums[g] += x[l]` (as [`sum_few`]); false if a sum leaves
/// `i128`.
fn checked_sum_few(lanes: &Bits, gids: &[u32; LANES], x: &[i128; LANES], sums: &mut [i128]) -> bool {
    let mut acc = [[0i128; FEW_GROUPS]; 4];
    let mut overflow = false;
    each_lane_of_words(lanes, |i, l, keep| {
        let slot = &mut acc[i % 4][gids[l] as usize % FEW_GROUPS];
        let (sum, o) = slot.overflowing_add(x[l] & i128::from(keep).wrapping_neg());
        *slot = sum;
        overflow |= o;
    });
    for (g, s) in sums.iter_mut().enumerate() {
        match acc.iter().try_fold(*s, |t, a| t.checked_add(a[g])) {
            Some(t) => *s = t,
            None => overflow = true,
        }
    }
    !overflow
}

/// Adds one value to group `g`.
fn add_one(state: &mut StateColumn, kind: &StateKind, g: usize, x: Num) -> Result<()> {
    match (state, x) {
        (StateColumn::Count(c), _) => c[g] += 1,
        (StateColumn::SumI { sum, n }, Num::I64(v)) => {
            sum.total[g] += v as i128;
            n[g] += 1;
        }
        (StateColumn::SumU { sum, n }, Num::U64(v)) => {
            sum[g] += v as u128;
            n[g] += 1;
        }
        (StateColumn::SumF { sum, n }, Num::F64(v)) => {
            sum[g] += v;
            n[g] += 1;
        }
        (StateColumn::SumD { sum, n }, Num::I128(v)) => {
            sum[g] = sum[g].checked_add(v).ok_or_else(|| Error::Overflow("decimal SUM".into()))?;
            n[g] += 1;
        }
        (state, x) => {
            let StateKind::MinMax { max, .. } = kind else {
                return Err(Error::Internal("value of another domain".into()));
            };
            offer_num_at(state, g, x, *max);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
