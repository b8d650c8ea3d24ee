//! The leaf tests of a compiled filter: ranges and sets of ordinals
//! (numbers), of keys (a column's order-preserving `u64` keys, or a
//! dictionary's codes), and of byte strings.

use std::cmp::Ordering;

use quiverdb_mapreducer::{Domain, Num, Scalar};
use quiverdb_storage::block::KeyTest;
use quiverdb_storage::main::StrDictionary;
use quiverdb_storage::main::Zone;
use quiverdb_storage::types::{KeyNative, PhysicalType, prefix_key};

use crate::like::{LikeMatcher, LikePattern};
use crate::predicate::CmpOp;

/// Inclusive range of ordinals (see [`ordinal`]); empty when `lo > hi`.
#[derive(Debug, Clone, Copy)]
pub(super) struct OrdRange {
    pub(super) lo: i128,
    pub(super) hi: i128,
}

/// A test on ordinals: a range, or a set (IN-list).
#[derive(Debug, Clone)]
pub(super) enum OrdTest {
    Range(OrdRange),
    Set { values: Vec<i128>, null_in_list: bool },
}

/// A test on byte strings.
#[derive(Debug, Clone)]
pub(super) enum ByteTest {
    /// Bounds: (value, inclusive).
    Range {
        lo: Option<(Vec<u8>, bool)>,
        hi: Option<(Vec<u8>, bool)>,
    },
    Set {
        values: Vec<Vec<u8>>,
        null_in_list: bool,
    },
    Prefix(Vec<u8>),
    /// A LIKE pattern with a wildcard not only at its end; `prefix` is its
    /// required prefix.
    Like {
        prefix: Vec<u8>,
        matcher: LikeMatcher,
    },
}

/// An order-preserving i128 of a domain value (floats by IEEE total order).
#[inline]
pub(super) fn ordinal(n: Num) -> i128 {
    match n {
        Num::I64(v) => v as i128,
        Num::U64(v) => v as i128,
        Num::F64(v) => v.to_key() as i128,
        Num::I128(v) => v,
    }
}

pub(super) fn cmp_range(op: CmpOp, c: i128) -> OrdRange {
    match op {
        CmpOp::Eq | CmpOp::NotEq => OrdRange { lo: c, hi: c },
        CmpOp::Lt => OrdRange { lo: i128::MIN, hi: c.saturating_sub(1) },
        CmpOp::LtEq => OrdRange { lo: i128::MIN, hi: c },
        CmpOp::Gt => OrdRange { lo: c.saturating_add(1), hi: i128::MAX },
        CmpOp::GtEq => OrdRange { lo: c, hi: i128::MAX },
    }
}

/// The value range of a physical type, in ordinals.
pub(super) fn type_range(p: PhysicalType) -> (i128, i128) {
    match p {
        PhysicalType::Boolean => (0, 1),
        PhysicalType::Int8 => (i8::MIN as i128, i8::MAX as i128),
        PhysicalType::Int16 => (i16::MIN as i128, i16::MAX as i128),
        PhysicalType::Int32 => (i32::MIN as i128, i32::MAX as i128),
        PhysicalType::Int64 => (i64::MIN as i128, i64::MAX as i128),
        PhysicalType::UInt8 => (0, u8::MAX as i128),
        PhysicalType::UInt16 => (0, u16::MAX as i128),
        PhysicalType::UInt32 => (0, u32::MAX as i128),
        PhysicalType::UInt64 => (0, u64::MAX as i128),
        PhysicalType::Float32 => (0, u32::MAX as i128),
        PhysicalType::Float64 => (0, u64::MAX as i128),
        PhysicalType::Decimal128 | PhysicalType::Bytes => (i128::MIN, i128::MAX),
    }
}

/// The key of an in-range ordinal of a column of `p`.
pub(super) fn ord_to_key(p: PhysicalType, o: i128) -> u64 {
    match p {
        PhysicalType::Float32 => o as u64,
        PhysicalType::Float64 => o as u64,
        PhysicalType::UInt64
        | PhysicalType::UInt32
        | PhysicalType::UInt16
        | PhysicalType::UInt8
        | PhysicalType::Boolean => o as u64,
        _ => (o as i64).to_key(),
    }
}

/// The ordinal of a literal of a column of `p` (floats: their f32/f64 key;
/// integers exactly, even beyond the column type's range).
pub(super) fn literal_ordinal(p: PhysicalType, domain: Domain, v: &Scalar) -> Option<i128> {
    match (domain, v) {
        (Domain::I64 | Domain::U64, Scalar::Int(x)) if p != PhysicalType::Boolean => return Some(*x as i128),
        (Domain::I64 | Domain::U64, Scalar::UInt(x)) if p != PhysicalType::Boolean => return Some(*x as i128),
        _ => {}
    }
    let n = v.to_num(domain)?;
    Some(match (p, n) {
        (PhysicalType::Float32, Num::F64(x)) => (x as f32).to_key() as i128,
        _ => ordinal(n),
    })
}

/// For a float literal equal to zero, the ordinals of `-0.0` and `+0.0`:
/// SQL (and DataFusion) compare the two zeros as equal, while ordinals
/// follow IEEE total order, where they are adjacent but distinct; a
/// comparison with zero therefore spans both.
#[allow(clippy::redundant_guards)] // `x == 0.0` reads as the test it is: -0.0 passes it
pub(super) fn zero_span(p: PhysicalType, domain: Domain, v: &Scalar) -> Option<(i128, i128)> {
    if domain != Domain::F64 {
        return None;
    }
    match v.to_num(domain)? {
        Num::F64(x) if x == 0.0 => Some(match p {
            PhysicalType::Float32 => ((-0.0f32).to_key() as i128, 0.0f32.to_key() as i128),
            _ => ((-0.0f64).to_key() as i128, 0.0f64.to_key() as i128),
        }),
        _ => None,
    }
}

/// The ordinal range of `value op c` for a literal `c` (zeros span both
/// signs, see [`zero_span`]).
pub(super) fn literal_range(p: PhysicalType, domain: Domain, op: CmpOp, v: &Scalar) -> Option<OrdRange> {
    Some(match zero_span(p, domain, v) {
        Some((neg, pos)) => match op {
            CmpOp::Eq | CmpOp::NotEq => OrdRange { lo: neg, hi: pos },
            CmpOp::Lt => cmp_range(CmpOp::Lt, neg),
            CmpOp::LtEq => cmp_range(CmpOp::LtEq, pos),
            CmpOp::Gt => cmp_range(CmpOp::Gt, pos),
            CmpOp::GtEq => cmp_range(CmpOp::GtEq, neg),
        },
        None => cmp_range(op, literal_ordinal(p, domain, v)?),
    })
}

/// The key test of a comparison of a column of `p` with the ordinal range
/// `r` (clamped to the type's range).
pub(super) fn key_range(p: PhysicalType, r: OrdRange) -> KeyTest {
    let (tmin, tmax) = type_range(p);
    let (lo, hi) = (r.lo.max(tmin), r.hi.min(tmax));
    if lo > hi {
        return KeyTest::nothing();
    }
    KeyTest::range(ord_to_key(p, lo), ord_to_key(p, hi))
}

impl OrdTest {
    #[inline(always)]
    pub(super) fn test(&self, o: i128) -> bool {
        match self {
            OrdTest::Range(r) => o >= r.lo && o <= r.hi,
            OrdTest::Set { values, .. } => values.binary_search(&o).is_ok(),
        }
    }

    pub(super) fn null_in_list(&self) -> bool {
        matches!(self, OrdTest::Set { null_in_list: true, .. })
    }
}

/// The smallest byte string greater than every string starting with `p`,
/// or `None` if there is none (empty prefix or all 0xFF).
pub(super) fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut s = p.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

impl ByteTest {
    #[inline]
    pub(super) fn test(&self, v: &[u8]) -> bool {
        match self {
            ByteTest::Range { lo, hi } => {
                lo.as_ref().is_none_or(|(b, incl)| match v.cmp(b) {
                    Ordering::Greater => true,
                    Ordering::Equal => *incl,
                    Ordering::Less => false,
                }) && hi.as_ref().is_none_or(|(b, incl)| match v.cmp(b) {
                    Ordering::Less => true,
                    Ordering::Equal => *incl,
                    Ordering::Greater => false,
                })
            }
            ByteTest::Set { values, .. } => values.binary_search_by(|x| x.as_slice().cmp(v)).is_ok(),
            ByteTest::Prefix(p) => v.starts_with(p),
            ByteTest::Like { matcher, .. } => matcher.test(v),
        }
    }

    pub(super) fn null_in_list(&self) -> bool {
        matches!(self, ByteTest::Set { null_in_list: true, .. })
    }

    /// The test on a dictionary's codes.
    pub(super) fn codes(&self, dict: StrDictionary<'_>) -> KeyTest {
        let n = dict.dict_len() as u64;
        let upper = |v: &[u8]| {
            let i = dict.lower_bound(v);
            if i < dict.dict_len() && dict.value(i) == v { i + 1 } else { i }
        };
        let prefix_codes = |p: &[u8]| {
            let lo = dict.lower_bound(p) as u64;
            (lo, prefix_successor(p).map_or(n, |s| dict.lower_bound(&s) as u64))
        };
        let code_range = |lo: u64, hi_excl: u64| {
            if lo >= hi_excl { KeyTest::nothing() } else { KeyTest::range(lo, hi_excl - 1) }
        };
        match self {
            ByteTest::Range { lo, hi } => {
                let clo = lo.as_ref().map_or(0, |(v, incl)| if *incl { dict.lower_bound(v) } else { upper(v) }) as u64;
                let chi =
                    hi.as_ref().map_or(n, |(v, incl)| (if *incl { upper(v) } else { dict.lower_bound(v) }) as u64);
                code_range(clo, chi)
            }
            ByteTest::Set { values, .. } => {
                let codes = values
                    .iter()
                    .filter_map(|v| {
                        let i = dict.lower_bound(v);
                        (i < dict.dict_len() && dict.value(i) == v.as_slice()).then_some(i as u64)
                    })
                    .collect();
                KeyTest::set(codes)
            }
            ByteTest::Prefix(p) => {
                let (lo, hi) = prefix_codes(p);
                code_range(lo, hi)
            }
            // Each dictionary entry that can match is tested once.
            ByteTest::Like { prefix, matcher } => {
                let (lo, hi) = prefix_codes(prefix);
                KeyTest::set((lo..hi).filter(|&i| matcher.test(dict.value(i as usize))).collect())
            }
        }
    }

    /// Zone test on plain strings' 8-byte prefix keys (a bound, never exact).
    pub(super) fn prefix_zone(&self, z: &Zone) -> bool {
        match self {
            ByteTest::Range { lo, hi } => {
                lo.as_ref().is_none_or(|(v, _)| z.max >= prefix_key(v))
                    && hi.as_ref().is_none_or(|(v, _)| z.min <= prefix_key(v))
            }
            ByteTest::Set { values, .. } => values.iter().any(|v| (z.min..=z.max).contains(&prefix_key(v))),
            ByteTest::Prefix(p) | ByteTest::Like { prefix: p, .. } => {
                let lo = prefix_key(p);
                z.max >= lo && prefix_successor(p).is_none_or(|s| z.min <= prefix_key(&s))
            }
        }
    }

    /// The test of `LIKE pattern`.
    pub(super) fn like(pattern: &LikePattern) -> Self {
        match pattern.as_literal() {
            Some(v) => ByteTest::Range { lo: Some((v.to_vec(), true)), hi: Some((v.to_vec(), true)) },
            None if pattern.is_prefix() => ByteTest::Prefix(pattern.required_prefix().to_vec()),
            None => ByteTest::Like { prefix: pattern.required_prefix().to_vec(), matcher: pattern.matcher() },
        }
    }
}

/// Re-keys a test on f32 keys as one on the same values' f64 keys.
pub(super) fn widen_f32_test(test: OrdTest) -> OrdTest {
    let widen = |o: i128| -> i128 {
        if o == i128::MIN || o == i128::MAX {
            return o;
        }
        (f32::from_key(o as u64) as f64).to_key() as i128
    };
    match test {
        OrdTest::Range(r) => OrdTest::Range(OrdRange { lo: widen(r.lo), hi: widen(r.hi) }),
        OrdTest::Set { values, null_in_list } => {
            OrdTest::Set { values: values.into_iter().map(widen).collect(), null_in_list }
        }
    }
}
