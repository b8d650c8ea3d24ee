//! Aggregate states: one column of per-group accumulators per aggregate,
//! with the accumulate / merge / finish shape.
//!
//! Integer sums accumulate exactly in 128 bits and are checked against the
//! result type when finished; decimal sums are checked on every addition.
//! MIN and MAX of floats follow IEEE total order (-0.0 < 0.0 < NaN), as
//! Arrow's sort and comparison kernels do.

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_schema::DataType;
use quiverdb_storage::block::{Bits, LANES};
use quiverdb_storage::types::KeyNative;

use crate::error::{Error, Result};
use crate::output::{bytes_array, f64_array, i64_array, native_array, nulls_from};
use crate::scalar::Num;

/// How one aggregate accumulates.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StateKind {
    /// COUNT(*) or COUNT(expr).
    Count,
    /// SUM or AVG over an input domain. `implied` is set for a grouped
    /// SUM whose input is never NULL: every group then has a value, so
    /// per-group counts are not kept (one fewer write per row).
    Sum { domain: SumDomain, avg: bool, implied: bool },
    /// MIN or MAX.
    MinMax { max: bool, domain: MinMaxDomain },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SumDomain {
    /// Signed integers (and booleans); result Int64.
    Signed,
    /// Unsigned integers; result UInt64.
    Unsigned,
    /// Floats; result Float64.
    Float,
    /// Decimals of precision `p`, scale `s`.
    Decimal(u8, i8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MinMaxDomain {
    I64,
    U64,
    F64,
    I128,
    Bytes,
}

/// Exact signed sums: per-group `i64` partials flushed into `i128` totals
/// before they could overflow.
///
/// `headroom` bounds what may still be added to any partial: every block
/// spends `rows × max |value|` of it, so no partial can leave the i64
/// range before the next flush. With values below 2^20 that is 2^43 rows.
#[derive(Debug, Clone, Default)]
pub(crate) struct SignedSums {
    pub(crate) partial: Vec<i64>,
    pub(crate) total: Vec<i128>,
    headroom: u64,
}

impl SignedSums {
    fn size_bytes(&self) -> usize {
        self.partial.capacity() * 8 + self.total.capacity() * 16
    }

    fn resize(&mut self, groups: usize) {
        self.partial.resize(groups, 0);
        self.total.resize(groups, 0);
    }

    /// Moves the partials into the totals.
    pub(crate) fn flush(&mut self) {
        for (t, p) in self.total.iter_mut().zip(&mut self.partial) {
            *t += *p as i128;
            *p = 0;
        }
        self.headroom = i64::MAX as u64;
    }

    /// Reserves room for `rows` values of magnitude at most `max_abs`;
    /// false if even empty partials could overflow (add to totals then).
    #[inline]
    pub(crate) fn reserve(&mut self, rows: usize, max_abs: u64) -> bool {
        let need = (rows as u64).saturating_mul(max_abs);
        if need > self.headroom {
            self.flush();
            if need > self.headroom {
                return false;
            }
        }
        self.headroom -= need;
        true
    }

    /// The exact sum of group `g`.
    pub(crate) fn get(&self, g: usize) -> i128 {
        self.total[g] + self.partial[g] as i128
    }
}

/// Per-group accumulators of one aggregate.
#[derive(Debug, Clone)]
pub(crate) enum StateColumn {
    Count(Vec<u64>),
    SumI { sum: SignedSums, n: Vec<u64> },
    SumU { sum: Vec<u128>, n: Vec<u64> },
    SumF { sum: Vec<f64>, n: Vec<u64> },
    SumD { sum: Vec<i128>, n: Vec<u64> },
    MinMaxI { v: Vec<i64>, has: Vec<bool> },
    MinMaxU { v: Vec<u64>, has: Vec<bool> },
    MinMaxF { v: Vec<f64>, has: Vec<bool> },
    MinMaxD { v: Vec<i128>, has: Vec<bool> },
    MinMaxB { v: Vec<Vec<u8>>, has: Vec<bool> },
}

impl StateColumn {
    /// Heap bytes held (by capacity; a MIN or MAX of strings adds an
    /// estimate of 32 bytes a value rather than a pass over every group).
    pub(crate) fn size_bytes(&self) -> usize {
        fn cap<T>(v: &Vec<T>) -> usize {
            v.capacity() * size_of::<T>()
        }
        match self {
            StateColumn::Count(n) => cap(n),
            StateColumn::SumI { sum, n } => sum.size_bytes() + cap(n),
            StateColumn::SumU { sum, n } => cap(sum) + cap(n),
            StateColumn::SumF { sum, n } => cap(sum) + cap(n),
            StateColumn::SumD { sum, n } => cap(sum) + cap(n),
            StateColumn::MinMaxI { v, has } => cap(v) + cap(has),
            StateColumn::MinMaxU { v, has } => cap(v) + cap(has),
            StateColumn::MinMaxF { v, has } => cap(v) + cap(has),
            StateColumn::MinMaxD { v, has } => cap(v) + cap(has),
            StateColumn::MinMaxB { v, has } => cap(v) + cap(has) + v.len() * 32,
        }
    }
}

/// True when `a` should replace `b` as the best (smaller for MIN, larger for MAX).
#[inline(always)]
pub(crate) fn better<T: PartialOrd>(a: T, b: T, max: bool) -> bool {
    if max { a > b } else { a < b }
}

/// Total order of floats, as Arrow sorts them.
#[inline(always)]
pub(crate) fn f64_better(a: f64, b: f64, max: bool) -> bool {
    better(a.to_key(), b.to_key(), max)
}

impl StateColumn {
    pub(crate) fn new(kind: &StateKind) -> Self {
        match kind {
            StateKind::Count => StateColumn::Count(Vec::new()),
            StateKind::Sum { domain: SumDomain::Signed, .. } => {
                StateColumn::SumI { sum: SignedSums { headroom: i64::MAX as u64, ..Default::default() }, n: Vec::new() }
            }
            StateKind::Sum { domain: SumDomain::Unsigned, .. } => StateColumn::SumU { sum: Vec::new(), n: Vec::new() },
            StateKind::Sum { domain: SumDomain::Float, .. } => StateColumn::SumF { sum: Vec::new(), n: Vec::new() },
            StateKind::Sum { domain: SumDomain::Decimal(..), .. } => {
                StateColumn::SumD { sum: Vec::new(), n: Vec::new() }
            }
            StateKind::MinMax { domain, .. } => match domain {
                MinMaxDomain::I64 => StateColumn::MinMaxI { v: Vec::new(), has: Vec::new() },
                MinMaxDomain::U64 => StateColumn::MinMaxU { v: Vec::new(), has: Vec::new() },
                MinMaxDomain::F64 => StateColumn::MinMaxF { v: Vec::new(), has: Vec::new() },
                MinMaxDomain::I128 => StateColumn::MinMaxD { v: Vec::new(), has: Vec::new() },
                MinMaxDomain::Bytes => StateColumn::MinMaxB { v: Vec::new(), has: Vec::new() },
            },
        }
    }

    /// Grows to `groups` accumulators.
    pub(crate) fn ensure(&mut self, groups: usize) {
        match self {
            StateColumn::Count(c) => c.resize(groups, 0),
            StateColumn::SumI { sum, n } => {
                sum.resize(groups);
                n.resize(groups, 0);
            }
            StateColumn::SumD { sum, n } => {
                sum.resize(groups, 0);
                n.resize(groups, 0);
            }
            StateColumn::SumU { sum, n } => {
                sum.resize(groups, 0);
                n.resize(groups, 0);
            }
            StateColumn::SumF { sum, n } => {
                sum.resize(groups, 0.0);
                n.resize(groups, 0);
            }
            StateColumn::MinMaxI { v, has } => {
                v.resize(groups, 0);
                has.resize(groups, false);
            }
            StateColumn::MinMaxU { v, has } => {
                v.resize(groups, 0);
                has.resize(groups, false);
            }
            StateColumn::MinMaxF { v, has } => {
                v.resize(groups, 0.0);
                has.resize(groups, false);
            }
            StateColumn::MinMaxD { v, has } => {
                v.resize(groups, 0);
                has.resize(groups, false);
            }
            StateColumn::MinMaxB { v, has } => {
                v.resize_with(groups, Vec::new);
                has.resize(groups, false);
            }
        }
    }

    /// Empties to no groups, keeping the capacity (for states reused
    /// shard after shard).
    pub(crate) fn clear(&mut self) {
        self.ensure(0);
        if let StateColumn::SumI { sum, .. } = self {
            sum.headroom = i64::MAX as u64;
        }
    }

    /// Adds a count to group `g`.
    #[inline]
    pub(crate) fn add_count(&mut self, g: usize, k: u64) {
        if let StateColumn::Count(c) = self {
            c[g] += k;
        }
    }

    /// Offers a byte string to MIN/MAX group `g`.
    pub(crate) fn offer_bytes(&mut self, g: usize, value: &[u8], max: bool) {
        if let StateColumn::MinMaxB { v, has } = self
            && (!has[g] || better(value, v[g].as_slice(), max))
        {
            v[g].clear();
            v[g].extend_from_slice(value);
            has[g] = true;
        }
    }

    /// Merges accumulator `h` of `other` into accumulator `g` of `self`.
    pub(crate) fn merge_entry(&mut self, g: usize, other: &StateColumn, h: usize, kind: &StateKind) -> Result<()> {
        self.merge_entries(other, &[(g as u32, h as u32)], kind)
    }

    /// Merges accumulator `h` of `other` into accumulator `g` of `self`
    /// for every `(g, h)` of `pairs`.
    pub(crate) fn merge_entries(&mut self, other: &StateColumn, pairs: &[(u32, u32)], kind: &StateKind) -> Result<()> {
        let max = matches!(kind, StateKind::MinMax { max: true, .. });
        let each = pairs.iter().map(|&(g, h)| (g as usize, h as usize));
        match (self, other) {
            (StateColumn::Count(a), StateColumn::Count(b)) => each.for_each(|(g, h)| a[g] += b[h]),
            (StateColumn::SumI { sum, n }, StateColumn::SumI { sum: s2, n: n2 }) => each.for_each(|(g, h)| {
                sum.total[g] += s2.get(h);
                n[g] += n2[h];
            }),
            (StateColumn::SumU { sum, n }, StateColumn::SumU { sum: s2, n: n2 }) => each.for_each(|(g, h)| {
                sum[g] += s2[h];
                n[g] += n2[h];
            }),
            (StateColumn::SumF { sum, n }, StateColumn::SumF { sum: s2, n: n2 }) => each.for_each(|(g, h)| {
                sum[g] += s2[h];
                n[g] += n2[h];
            }),
            (StateColumn::SumD { sum, n }, StateColumn::SumD { sum: s2, n: n2 }) => {
                for (g, h) in each {
                    sum[g] = sum[g].checked_add(s2[h]).ok_or_else(|| Error::Overflow("decimal SUM".into()))?;
                    n[g] += n2[h];
                }
            }
            (StateColumn::MinMaxI { v, has }, StateColumn::MinMaxI { v: v2, has: h2 }) => each.for_each(|(g, h)| {
                if h2[h] && (!has[g] || better(v2[h], v[g], max)) {
                    (v[g], has[g]) = (v2[h], true);
                }
            }),
            (StateColumn::MinMaxU { v, has }, StateColumn::MinMaxU { v: v2, has: h2 }) => each.for_each(|(g, h)| {
                if h2[h] && (!has[g] || better(v2[h], v[g], max)) {
                    (v[g], has[g]) = (v2[h], true);
                }
            }),
            (StateColumn::MinMaxF { v, has }, StateColumn::MinMaxF { v: v2, has: h2 }) => each.for_each(|(g, h)| {
                if h2[h] && (!has[g] || f64_better(v2[h], v[g], max)) {
                    (v[g], has[g]) = (v2[h], true);
                }
            }),
            (StateColumn::MinMaxD { v, has }, StateColumn::MinMaxD { v: v2, has: h2 }) => each.for_each(|(g, h)| {
                if h2[h] && (!has[g] || better(v2[h], v[g], max)) {
                    (v[g], has[g]) = (v2[h], true);
                }
            }),
            (s @ StateColumn::MinMaxB { .. }, StateColumn::MinMaxB { v: v2, has: h2 }) => each.for_each(|(g, h)| {
                if h2[h] {
                    s.offer_bytes(g, &v2[h], max);
                }
            }),
            _ => return Err(Error::Internal("merging states of different aggregates".into())),
        }
        Ok(())
    }

    /// The final values, one per group, as an array of `output`.
    pub(crate) fn finish(&self, kind: &StateKind, output: &DataType) -> Result<ArrayRef> {
        Ok(match (self, kind) {
            (StateColumn::Count(c), _) => {
                native_array(output, c.iter().map(|&v| v as i64).collect::<Vec<i64>>(), None)?
            }
            (StateColumn::SumI { sum, n }, StateKind::Sum { avg: false, implied, .. }) => {
                let nulls = if *implied { None } else { nulls_from(&has_rows(n)) };
                let overflow = |s: i128| Error::Overflow(format!("SUM = {s} does not fit {output}"));
                if *output == DataType::UInt64 {
                    let values = (0..n.len())
                        .map(|g| u64::try_from(sum.get(g)).map_err(|_| overflow(sum.get(g))))
                        .collect::<Result<Vec<u64>>>()?;
                    native_array(output, values, nulls)?
                } else {
                    let values = (0..n.len())
                        .map(|g| i64::try_from(sum.get(g)).map_err(|_| overflow(sum.get(g))))
                        .collect::<Result<Vec<i64>>>()?;
                    native_array(output, values, nulls)?
                }
            }
            (StateColumn::SumU { sum, n }, StateKind::Sum { avg: false, .. }) => {
                let values = sum
                    .iter()
                    .map(|&s| u64::try_from(s).map_err(|_| Error::Overflow(format!("SUM = {s} does not fit UInt64"))))
                    .collect::<Result<Vec<u64>>>()?;
                native_array(output, values, nulls_from(&has_rows(n)))?
            }
            (StateColumn::SumF { sum, n }, StateKind::Sum { avg: false, .. }) => {
                f64_array(output, sum.clone(), nulls_from(&has_rows(n)))?
            }
            (StateColumn::SumD { sum, n }, StateKind::Sum { avg: false, implied, .. }) => {
                let DataType::Decimal128(p, _) = output else {
                    return Err(Error::Internal("decimal SUM of a non-decimal type".into()));
                };
                let limit = 10i128.checked_pow(*p as u32).unwrap_or(i128::MAX);
                if let Some(s) = sum.iter().find(|s| **s <= -limit || **s >= limit) {
                    return Err(Error::Overflow(format!("SUM = {s} does not fit {output}")));
                }
                let nulls = if *implied { None } else { nulls_from(&has_rows(n)) };
                native_array(output, sum.clone(), nulls)?
            }
            (StateColumn::SumI { sum, n }, StateKind::Sum { avg: true, .. }) => {
                avg_f64((0..n.len()).map(|g| sum.get(g) as f64), n)?
            }
            (StateColumn::SumU { sum, n }, StateKind::Sum { avg: true, .. }) => {
                avg_f64(sum.iter().map(|&s| s as f64), n)?
            }
            (StateColumn::SumF { sum, n }, StateKind::Sum { avg: true, .. }) => avg_f64(sum.iter().copied(), n)?,
            (StateColumn::SumD { sum, n }, StateKind::Sum { avg: true, domain: SumDomain::Decimal(_, s), .. }) => {
                let DataType::Decimal128(out_precision, out_scale) = output else {
                    return Err(Error::Internal("decimal AVG of a non-decimal type".into()));
                };
                let shift = 10i128.pow((*out_scale - *s).max(0) as u32);
                let limit = 10i128.checked_pow(*out_precision as u32).unwrap_or(i128::MAX);
                let overflow = || Error::Overflow(format!("decimal AVG does not fit {output}"));
                let values = sum
                    .iter()
                    .zip(n)
                    .map(|(&total, &count)| {
                        if count == 0 {
                            return Ok(0);
                        }
                        // Truncated toward zero, as DataFusion's AVG does.
                        let avg = total.checked_mul(shift).ok_or_else(overflow)? / count as i128;
                        if avg <= -limit || avg >= limit {
                            return Err(overflow());
                        }
                        Ok(avg)
                    })
                    .collect::<Result<Vec<i128>>>()?;
                native_array(output, values, nulls_from(&has_rows(n)))?
            }
            (StateColumn::MinMaxI { v, has }, _) => i64_array(output, v.clone(), nulls_from(has))?,
            (StateColumn::MinMaxU { v, has }, _) => native_array(output, v.clone(), nulls_from(has))?,
            (StateColumn::MinMaxF { v, has }, _) => f64_array(output, v.clone(), nulls_from(has))?,
            (StateColumn::MinMaxD { v, has }, _) => native_array(output, v.clone(), nulls_from(has))?,
            (StateColumn::MinMaxB { v, has }, _) => {
                bytes_array(output, v.iter().zip(has).map(|(b, h)| h.then_some(b.as_slice())))?
            }
            _ => return Err(Error::Internal("state and aggregate disagree".into())),
        })
    }
}

impl StateColumn {
    /// The partial state of the aggregate, as DataFusion's partial
    /// aggregates lay it out: AVG is `[count: UInt64, sum]`, every other
    /// aggregate is its final value.
    pub(crate) fn finish_state(&self, kind: &StateKind, output: &DataType) -> Result<Vec<ArrayRef>> {
        let StateKind::Sum { avg: true, domain, .. } = kind else {
            return Ok(vec![self.finish(kind, output)?]);
        };
        let (sum, n): (ArrayRef, &Vec<u64>) = match (self, domain) {
            (StateColumn::SumI { sum, n }, _) => {
                let v: Vec<f64> = (0..n.len()).map(|g| sum.get(g) as f64).collect();
                (f64_array(&DataType::Float64, v, nulls_from(&has_rows(n)))?, n)
            }
            (StateColumn::SumU { sum, n }, _) => {
                let v: Vec<f64> = sum.iter().map(|&s| s as f64).collect();
                (f64_array(&DataType::Float64, v, nulls_from(&has_rows(n)))?, n)
            }
            (StateColumn::SumF { sum, n }, _) => {
                (f64_array(&DataType::Float64, sum.clone(), nulls_from(&has_rows(n)))?, n)
            }
            (StateColumn::SumD { sum, n }, SumDomain::Decimal(_, s)) => {
                (native_array(&DataType::Decimal128(38, *s), sum.clone(), nulls_from(&has_rows(n)))?, n)
            }
            _ => return Err(Error::Internal("AVG state of another aggregate".into())),
        };
        // A group without values has a NULL count too: DataFusion's merge
        // counts a group as seen when its count is not NULL.
        let count = native_array(&DataType::UInt64, n.clone(), nulls_from(&has_rows(n)))?;
        Ok(vec![count, sum])
    }
}

fn has_rows(n: &[u64]) -> Vec<bool> {
    n.iter().map(|&c| c > 0).collect()
}

fn avg_f64(sums: impl Iterator<Item = f64>, n: &[u64]) -> Result<ArrayRef> {
    let values: Vec<f64> = sums.zip(n).map(|(s, &c)| if c == 0 { 0.0 } else { s / c as f64 }).collect();
    Ok(Arc::new(arrow_array::Float64Array::new(values.into(), nulls_from(&has_rows(n)))))
}

/// The largest magnitude among `lanes` of `x`.
#[inline]
pub(super) fn max_abs(x: &[i64; LANES], lanes: &Bits) -> u64 {
    match lanes.dense_len() {
        Some(n) => x[..n].iter().fold(0u64, |m, v| m.max(v.unsigned_abs())),
        None => {
            let mut m = 0u64;
            lanes.for_each_one(|l| m = m.max(x[l].unsigned_abs()));
            m
        }
    }
}

/// Offers `n` to group `g` of a MIN (or, with `max`, MAX) state.
#[inline]
pub(super) fn offer_num_at(state: &mut StateColumn, g: usize, n: Num, max: bool) {
    match (state, n) {
        (StateColumn::MinMaxI { v, has }, Num::I64(x)) if (!has[g] || better(x, v[g], max)) => {
            (v[g], has[g]) = (x, true);
        }
        (StateColumn::MinMaxU { v, has }, Num::U64(x)) if (!has[g] || better(x, v[g], max)) => {
            (v[g], has[g]) = (x, true);
        }
        (StateColumn::MinMaxF { v, has }, Num::F64(x)) if (!has[g] || f64_better(x, v[g], max)) => {
            (v[g], has[g]) = (x, true);
        }
        (StateColumn::MinMaxD { v, has }, Num::I128(x)) if (!has[g] || better(x, v[g], max)) => {
            (v[g], has[g]) = (x, true);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
