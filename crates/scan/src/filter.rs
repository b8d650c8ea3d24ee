//! Phase 1 of a scan: a predicate compiled against one shard's encodings.
//!
//! ```text
//!   Predicate ──compile(shard)──▶ Node tree
//!     numeric column vs literal ─▶ key range / key set   (keys order like values)
//!         bit-packed: compare deltas with [lo-ref, hi-ref], no decode to values
//!         dictionary: key range → code range, IN → code bitset (once per shard)
//!         run-end:    one test per run;  constant: one test per block
//!     string column ─────────────▶ dictionary: code range / code bitset / prefix range
//!                                  plain and delta: byte comparisons per row
//!     computed expression ───────▶ evaluate the vector, compare per lane
//!
//!   per block:  zone(block) → can it be TRUE / FALSE / NULL?
//!               never TRUE          → skip the block
//!               only TRUE           → the whole block, no evaluation
//!               otherwise           → eval(block) → (true lanes, false lanes)
//! ```
//!
//! Results are three-valued: a lane is TRUE, FALSE or neither (NULL).
//! `NOT` swaps TRUE and FALSE; `AND` is TRUE when all are TRUE and FALSE
//! when any is FALSE; `OR` the converse. Only TRUE rows pass.

use std::cmp::Ordering;

use arrow_buffer::ArrowNativeType;
use quiverdb_mapreducer::{kernels, Bits, CompiledExpr, Domain, LANES, MapExpr, Num, Operand, Scalar, Scratch, Sel, ShardColumns, Side, Values};
use quiverdb_storage::main::strings::StrDict;
use quiverdb_storage::main::{Encoding, KeyEncoding, Zone};
use quiverdb_storage::types::{KeyNative, PhysicalType, prefix_key};
use quiverdb_storage::{ShardSnapshot, TableSchema};

use crate::error::{Error, Result};
use crate::predicate::{CmpOp, Predicate};

/// An IN-list over keys whose span is at most this many is tested with a
/// bitset (one load per row) instead of a binary search; 2^20 bits = 128 KiB.
const DENSE_SET_SPAN: u64 = 1 << 20;

/// What a zone map allows a predicate to be on a block (each flag may
/// over-approximate: "possible", never "certain").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Maybe {
    pub(crate) t: bool,
    pub(crate) f: bool,
    pub(crate) n: bool,
}

impl Maybe {
    const ANY: Maybe = Maybe { t: true, f: true, n: true };
}

/// Per-lane outcome: TRUE lanes and FALSE lanes; the rest are NULL.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tri {
    pub(crate) t: Bits,
    pub(crate) f: Bits,
}

/// Inclusive range of ordinals (see [`ordinal`]); empty when `lo > hi`.
#[derive(Debug, Clone, Copy)]
struct OrdRange {
    lo: i128,
    hi: i128,
}

/// A test on ordinals: a range, or a set (IN-list).
#[derive(Debug, Clone)]
enum OrdTest {
    Range(OrdRange),
    Set { values: Vec<i128>, null_in_list: bool },
}

/// A test on u64 keys of one column.
#[derive(Debug, Clone)]
enum KeyTest {
    Range { lo: u64, hi: u64, empty: bool },
    Set(KeySet),
}

#[derive(Debug, Clone)]
struct KeySet {
    keys: Vec<u64>,
    dense: Option<(u64, Vec<u64>)>,
    null_in_list: bool,
}

/// A test on byte strings.
#[derive(Debug, Clone)]
enum ByteTest {
    /// Bounds: (value, inclusive).
    Range { lo: Option<(Vec<u8>, bool)>, hi: Option<(Vec<u8>, bool)> },
    Set { values: Vec<Vec<u8>>, null_in_list: bool },
    Prefix(Vec<u8>),
}

#[derive(Debug)]
enum Node {
    /// A constant; `None` is NULL.
    Const(Option<bool>),
    /// A numeric column (not decimal) by keys; `codes` is the test on a
    /// dictionary-encoded main column's codes.
    Keys { col: usize, physical: PhysicalType, test: KeyTest, codes: Option<KeyTest> },
    /// A string or binary column; `codes` for a dictionary-encoded main.
    Bytes { col: usize, test: ByteTest, codes: Option<KeyTest> },
    /// `column IS NULL`.
    IsNull { col: usize },
    /// A computed (or decimal) numeric expression.
    Expr { expr: CompiledExpr, test: OrdTest },
    /// `expr IS NULL` for a computed expression.
    ExprIsNull(CompiledExpr),
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
}

/// A predicate compiled for one shard, with its column readers.
#[derive(Debug)]
pub(crate) struct ShardFilter<'a> {
    cols: ShardColumns<'a>,
    root: Node,
    /// Allocated on the first evaluation (zone maps often spare it).
    scratch: Option<Scratch>,
}

/// An order-preserving i128 of a domain value (floats by IEEE total order).
#[inline]
fn ordinal(n: Num) -> i128 {
    match n {
        Num::I64(v) => v as i128,
        Num::U64(v) => v as i128,
        Num::F64(v) => v.to_key() as i128,
        Num::I128(v) => v,
    }
}

fn cmp_range(op: CmpOp, c: i128) -> OrdRange {
    match op {
        CmpOp::Eq | CmpOp::NotEq => OrdRange { lo: c, hi: c },
        CmpOp::Lt => OrdRange { lo: i128::MIN, hi: c.saturating_sub(1) },
        CmpOp::LtEq => OrdRange { lo: i128::MIN, hi: c },
        CmpOp::Gt => OrdRange { lo: c.saturating_add(1), hi: i128::MAX },
        CmpOp::GtEq => OrdRange { lo: c, hi: i128::MAX },
    }
}

/// The value range of a physical type, in ordinals.
fn type_range(p: PhysicalType) -> (i128, i128) {
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
fn ord_to_key(p: PhysicalType, o: i128) -> u64 {
    match p {
        PhysicalType::Float32 => o as u64,
        PhysicalType::Float64 => o as u64,
        PhysicalType::UInt64 | PhysicalType::UInt32 | PhysicalType::UInt16 | PhysicalType::UInt8 | PhysicalType::Boolean => o as u64,
        _ => (o as i64).to_key(),
    }
}

/// The ordinal of a literal of a column of `p` (floats: their f32/f64 key;
/// integers exactly, even beyond the column type's range).
fn literal_ordinal(p: PhysicalType, domain: Domain, v: &Scalar) -> Option<i128> {
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

impl KeyTest {
    fn range(p: PhysicalType, r: OrdRange) -> Self {
        let (tmin, tmax) = type_range(p);
        let (lo, hi) = (r.lo.max(tmin), r.hi.min(tmax));
        if lo > hi {
            return KeyTest::Range { lo: 1, hi: 0, empty: true };
        }
        KeyTest::Range { lo: ord_to_key(p, lo), hi: ord_to_key(p, hi), empty: false }
    }

    fn set(mut keys: Vec<u64>, null_in_list: bool) -> Self {
        keys.sort_unstable();
        keys.dedup();
        let dense = match (keys.first(), keys.last()) {
            (Some(&lo), Some(&hi)) if hi - lo < DENSE_SET_SPAN => {
                let mut words = vec![0u64; ((hi - lo) / 64 + 1) as usize];
                for k in &keys {
                    let o = k - lo;
                    words[(o / 64) as usize] |= 1 << (o % 64);
                }
                Some((lo, words))
            }
            _ => None,
        };
        KeyTest::Set(KeySet { keys, dense, null_in_list })
    }

    #[inline(always)]
    fn test(&self, k: u64) -> bool {
        match self {
            KeyTest::Range { empty: true, .. } => false,
            KeyTest::Range { lo, hi, .. } => k.wrapping_sub(*lo) <= hi.wrapping_sub(*lo),
            KeyTest::Set(s) => s.contains(k),
        }
    }

    /// Whether some key in `[min, max]` passes, and whether some fails.
    fn zone(&self, min: u64, max: u64) -> (bool, bool) {
        match self {
            KeyTest::Range { empty: true, .. } => (false, true),
            KeyTest::Range { lo, hi, .. } => (min <= *hi && max >= *lo, !(*lo <= min && max <= *hi)),
            KeyTest::Set(s) => {
                let i = s.keys.partition_point(|&k| k < min);
                let any = s.keys.get(i).is_some_and(|&k| k <= max);
                (any, !(min == max && any))
            }
        }
    }

    fn null_in_list(&self) -> bool {
        matches!(self, KeyTest::Set(s) if s.null_in_list)
    }

    /// Mask of `keys[0..n]` that pass.
    #[inline]
    fn mask(&self, keys: &[u64; LANES], n: usize) -> Bits {
        let mut out = Bits::EMPTY;
        match self {
            KeyTest::Range { empty: true, .. } => {}
            KeyTest::Range { lo, hi, .. } => {
                out = kernels::range_mask(keys, n, *lo, hi.wrapping_sub(*lo));
            }
            KeyTest::Set(s) => match &s.dense {
                Some((lo, words)) => out = kernels::bitset_mask(keys, n, *lo, words),
                None => {
                    for (i, &k) in keys[..n].iter().enumerate() {
                        if s.keys.binary_search(&k).is_ok() {
                            out.set(i);
                        }
                    }
                }
            },
        }
        out
    }
}

impl KeySet {
    #[inline(always)]
    fn contains(&self, k: u64) -> bool {
        match &self.dense {
            Some((lo, words)) => {
                let o = k.wrapping_sub(*lo);
                (o / 64) < words.len() as u64 && words[(o / 64) as usize] >> (o % 64) & 1 == 1
            }
            None => self.keys.binary_search(&k).is_ok(),
        }
    }
}

impl OrdTest {
    #[inline(always)]
    fn test(&self, o: i128) -> bool {
        match self {
            OrdTest::Range(r) => o >= r.lo && o <= r.hi,
            OrdTest::Set { values, .. } => values.binary_search(&o).is_ok(),
        }
    }

    fn null_in_list(&self) -> bool {
        matches!(self, OrdTest::Set { null_in_list: true, .. })
    }
}

/// The smallest byte string greater than every string starting with `p`,
/// or `None` if there is none (empty prefix or all 0xFF).
fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
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
    fn test(&self, v: &[u8]) -> bool {
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
        }
    }

    fn null_in_list(&self) -> bool {
        matches!(self, ByteTest::Set { null_in_list: true, .. })
    }

    /// The test on a dictionary's codes.
    fn codes(&self, dict: &StrDict) -> KeyTest {
        let n = dict.dict_len() as u64;
        let upper = |v: &[u8]| {
            let i = dict.lower_bound(v);
            if i < dict.dict_len() && dict.dict_value(i) == v { i + 1 } else { i }
        };
        let code_range = |lo: u64, hi_excl: u64| {
            if lo >= hi_excl {
                KeyTest::Range { lo: 1, hi: 0, empty: true }
            } else {
                KeyTest::Range { lo, hi: hi_excl - 1, empty: false }
            }
        };
        match self {
            ByteTest::Range { lo, hi } => {
                let clo = lo.as_ref().map_or(0, |(v, incl)| if *incl { dict.lower_bound(v) } else { upper(v) }) as u64;
                let chi = hi.as_ref().map_or(n, |(v, incl)| (if *incl { upper(v) } else { dict.lower_bound(v) }) as u64);
                code_range(clo, chi)
            }
            ByteTest::Set { values, null_in_list } => {
                let codes = values
                    .iter()
                    .filter_map(|v| {
                        let i = dict.lower_bound(v);
                        (i < dict.dict_len() && dict.dict_value(i) == v.as_slice()).then_some(i as u64)
                    })
                    .collect();
                KeyTest::set(codes, *null_in_list)
            }
            ByteTest::Prefix(p) => {
                let lo = dict.lower_bound(p) as u64;
                let hi = prefix_successor(p).map_or(n, |s| dict.lower_bound(&s) as u64);
                code_range(lo, hi)
            }
        }
    }

    /// Zone test on plain strings' 8-byte prefix keys (a bound, never exact).
    fn prefix_zone(&self, z: &Zone) -> bool {
        match self {
            ByteTest::Range { lo, hi } => {
                lo.as_ref().is_none_or(|(v, _)| z.max >= prefix_key(v)) && hi.as_ref().is_none_or(|(v, _)| z.min <= prefix_key(v))
            }
            ByteTest::Set { values, .. } => values.iter().any(|v| (z.min..=z.max).contains(&prefix_key(v))),
            ByteTest::Prefix(p) => {
                let lo = prefix_key(p);
                z.max >= lo && prefix_successor(p).is_none_or(|s| z.min <= prefix_key(&s))
            }
        }
    }
}

impl<'a> ShardFilter<'a> {
    /// Compiles `pred` for `shard`.
    pub(crate) fn compile(shard: ShardSnapshot<'a>, pred: &Predicate) -> Result<Self> {
        let mut columns = Vec::new();
        pred.columns(&mut columns);
        let cols = ShardColumns::open(shard, columns)?;
        let root = compile_node(pred, shard.schema(), &cols)?;
        Ok(Self { cols, root, scratch: None })
    }

    /// What the zone maps of main block `block` allow.
    pub(crate) fn zone(&self, block: usize) -> Maybe {
        zone(&self.root, &self.cols, block)
    }

    /// Per-row outcome on main block `block` or delta chunk `chunk`;
    /// `live` (when some rows are deleted) are the lanes whose expression
    /// errors count: a deleted row never fails a query.
    pub(crate) fn eval(&mut self, side: Side, live: Option<&Bits>) -> Result<Tri> {
        let len = match side {
            Side::Main(b) => self.cols.block_len(b),
            Side::Delta(c) => self.cols.chunk_len(c),
        };
        let scratch = self.scratch.get_or_insert_with(Scratch::default);
        let sel = match live {
            Some(l) => Sel::Mask(&l.0, len),
            None => Sel::Range(0, len),
        };
        eval(&mut self.root, &self.cols, side, len, sel, scratch)
    }
}

fn compile_node(p: &Predicate, schema: &TableSchema, cols: &ShardColumns<'_>) -> Result<Node> {
    let not = |n: Node| Node::Not(Box::new(n));
    Ok(match p {
        Predicate::Const(b) => Node::Const(Some(*b)),
        Predicate::And(v) => Node::And(v.iter().map(|p| compile_node(p, schema, cols)).collect::<Result<_>>()?),
        Predicate::Or(v) => Node::Or(v.iter().map(|p| compile_node(p, schema, cols)).collect::<Result<_>>()?),
        Predicate::Not(p) => not(compile_node(p, schema, cols)?),
        Predicate::IsNull(e) | Predicate::IsNotNull(e) => {
            let node = match e.as_column() {
                Some(col) => Node::IsNull { col },
                None => Node::ExprIsNull(CompiledExpr::compile(e, schema)?),
            };
            if matches!(p, Predicate::IsNotNull(_)) { not(node) } else { node }
        }
        Predicate::Compare { expr, op, value } => {
            if value.is_null() {
                return Ok(Node::Const(None));
            }
            let node = leaf(expr, schema, cols, |ctx| match ctx {
                Ctx::Ord(p, d) => literal_ordinal(p, d, value).map(|c| Test::Ord(OrdTest::Range(cmp_range(*op, c)))),
                Ctx::Bytes => value.as_bytes().map(|b| {
                    let v = (b.to_vec(), true);
                    let excl = (b.to_vec(), false);
                    Test::Bytes(match op {
                        CmpOp::Eq | CmpOp::NotEq => ByteTest::Range { lo: Some(v.clone()), hi: Some(v) },
                        CmpOp::Lt => ByteTest::Range { lo: None, hi: Some(excl) },
                        CmpOp::LtEq => ByteTest::Range { lo: None, hi: Some(v) },
                        CmpOp::Gt => ByteTest::Range { lo: Some(excl), hi: None },
                        CmpOp::GtEq => ByteTest::Range { lo: Some(v), hi: None },
                    })
                }),
            })?;
            if *op == CmpOp::NotEq { not(node) } else { node }
        }
        Predicate::Between { expr, low, high, negated } if low.is_null() || high.is_null() => {
            // `x BETWEEN l AND h` is `x >= l AND x <= h`: a NULL bound makes
            // its half NULL, but the other half can still make it FALSE.
            let both = Predicate::And(vec![
                Predicate::cmp(expr.clone(), CmpOp::GtEq, low.clone()),
                Predicate::cmp(expr.clone(), CmpOp::LtEq, high.clone()),
            ]);
            let node = compile_node(&both, schema, cols)?;
            if *negated { not(node) } else { node }
        }
        Predicate::Between { expr, low, high, negated } => {
            let node = leaf(expr, schema, cols, |ctx| match ctx {
                Ctx::Ord(p, d) => Some(Test::Ord(OrdTest::Range(OrdRange {
                    lo: literal_ordinal(p, d, low)?,
                    hi: literal_ordinal(p, d, high)?,
                }))),
                Ctx::Bytes => Some(Test::Bytes(ByteTest::Range {
                    lo: Some((low.as_bytes()?.to_vec(), true)),
                    hi: Some((high.as_bytes()?.to_vec(), true)),
                })),
            })?;
            if *negated { not(node) } else { node }
        }
        Predicate::InList { expr, values, negated } => {
            let null_in_list = values.iter().any(Scalar::is_null);
            let node = leaf(expr, schema, cols, |ctx| match ctx {
                Ctx::Ord(p, d) => {
                    let mut v = values
                        .iter()
                        .filter(|v| !v.is_null())
                        .map(|v| literal_ordinal(p, d, v))
                        .collect::<Option<Vec<i128>>>()?;
                    v.sort_unstable();
                    v.dedup();
                    Some(Test::Ord(OrdTest::Set { values: v, null_in_list }))
                }
                Ctx::Bytes => {
                    let mut v = values
                        .iter()
                        .filter(|v| !v.is_null())
                        .map(|v| v.as_bytes().map(<[u8]>::to_vec))
                        .collect::<Option<Vec<_>>>()?;
                    v.sort_unstable();
                    v.dedup();
                    Some(Test::Bytes(ByteTest::Set { values: v, null_in_list }))
                }
            })?;
            if *negated { not(node) } else { node }
        }
        Predicate::LikePrefix { expr, prefix, negated } => {
            let node = leaf(expr, schema, cols, |ctx| match ctx {
                Ctx::Bytes => Some(Test::Bytes(ByteTest::Prefix(prefix.clone()))),
                Ctx::Ord(..) => None,
            })?;
            if *negated { not(node) } else { node }
        }
    })
}

/// What a leaf compares: ordinals of a numeric type, or byte strings.
#[derive(Clone, Copy)]
enum Ctx {
    Ord(PhysicalType, Domain),
    Bytes,
}

enum Test {
    Ord(OrdTest),
    Bytes(ByteTest),
}

/// Compiles a leaf on `expr`, with `make` building the test for its type.
fn leaf(
    expr: &MapExpr,
    schema: &TableSchema,
    cols: &ShardColumns<'_>,
    make: impl Fn(Ctx) -> Option<Test>,
) -> Result<Node> {
    let t = expr.data_type(schema).map_err(Error::MapReduce)?;
    let invalid = || Error::InvalidPredicate(format!("a literal of the wrong type for {expr} ({t})"));
    match (Domain::of(&t), expr.as_column()) {
        (None, Some(col)) => {
            let Some(Test::Bytes(test)) = make(Ctx::Bytes) else { return Err(invalid()) };
            let codes = match cols.column(col).main().map(|m| m.encoding()) {
                Some(Encoding::StrDict(d)) => Some(test.codes(d)),
                _ => None,
            };
            Ok(Node::Bytes { col, test, codes })
        }
        (None, None) => Err(Error::Unsupported(format!("a predicate on computed {t}"))),
        (Some(domain), Some(col)) if schema.physical(col) != PhysicalType::Decimal128 => {
            let physical = schema.physical(col);
            let Some(Test::Ord(test)) = make(Ctx::Ord(physical, domain)) else { return Err(invalid()) };
            let test = match test {
                OrdTest::Range(r) => KeyTest::range(physical, r),
                OrdTest::Set { values, null_in_list } => {
                    let (tmin, tmax) = type_range(physical);
                    let keys = values.into_iter().filter(|o| (tmin..=tmax).contains(o)).map(|o| ord_to_key(physical, o)).collect();
                    KeyTest::set(keys, null_in_list)
                }
            };
            let codes = match cols.column(col).main().map(|m| m.encoding()) {
                Some(Encoding::Keys(KeyEncoding::Dict(d))) => Some(dict_codes(&test, d.values())),
                _ => None,
            };
            Ok(Node::Keys { col, physical, test, codes })
        }
        (Some(domain), _) => {
            let physical = match Domain::of(&t) {
                Some(Domain::F64) if t == arrow_schema::DataType::Float32 => PhysicalType::Float32,
                Some(Domain::F64) => PhysicalType::Float64,
                _ => PhysicalType::Int64,
            };
            let Some(Test::Ord(test)) = make(Ctx::Ord(physical, domain)) else { return Err(invalid()) };
            // Computed Float32 values are f64 in their vector: compare by f64 keys.
            let test = if physical == PhysicalType::Float32 { widen_f32_test(test) } else { test };
            Ok(Node::Expr { expr: CompiledExpr::compile(expr, schema)?, test })
        }
    }
}

/// Re-keys a test on f32 keys as one on the same values' f64 keys.
fn widen_f32_test(test: OrdTest) -> OrdTest {
    let widen = |o: i128| -> i128 {
        if o == i128::MIN || o == i128::MAX {
            return o;
        }
        (f32::from_key(o as u64) as f64).to_key() as i128
    };
    match test {
        OrdTest::Range(r) => OrdTest::Range(OrdRange { lo: widen(r.lo), hi: widen(r.hi) }),
        OrdTest::Set { values, null_in_list } => OrdTest::Set { values: values.into_iter().map(widen).collect(), null_in_list },
    }
}

/// A key test translated to the codes of a sorted key dictionary.
fn dict_codes(test: &KeyTest, values: &[u64]) -> KeyTest {
    match test {
        KeyTest::Range { empty: true, .. } => test.clone(),
        KeyTest::Range { lo, hi, .. } => {
            let clo = values.partition_point(|&v| v < *lo) as u64;
            let chi = values.partition_point(|&v| v <= *hi) as u64;
            if clo >= chi { KeyTest::Range { lo: 1, hi: 0, empty: true } } else { KeyTest::Range { lo: clo, hi: chi - 1, empty: false } }
        }
        KeyTest::Set(s) => {
            let codes = s.keys.iter().filter_map(|k| values.binary_search(k).ok().map(|c| c as u64)).collect();
            KeyTest::set(codes, s.null_in_list)
        }
    }
}

fn zone(node: &Node, cols: &ShardColumns<'_>, block: usize) -> Maybe {
    let len = cols.block_len(block);
    let zone_of = |col: usize| cols.column(col).main().map(|m| m.zones()[block]);
    match node {
        Node::Const(None) => Maybe { t: false, f: false, n: true },
        Node::Const(Some(b)) => Maybe { t: *b, f: !*b, n: false },
        Node::Keys { col, test, .. } => match zone_of(*col) {
            None => Maybe::ANY,
            Some(z) if z.all_null() => Maybe { t: false, f: false, n: true },
            Some(z) => {
                let (t, f) = test.zone(z.min, z.max);
                let nil = z.null_count > 0;
                // With a NULL in an IN-list, non-matches are NULL, not FALSE.
                if test.null_in_list() { Maybe { t, f: false, n: nil || f } } else { Maybe { t, f, n: nil } }
            }
        },
        Node::Bytes { col, test, codes } => match zone_of(*col) {
            None => Maybe::ANY,
            Some(z) if z.all_null() => Maybe { t: false, f: false, n: true },
            Some(z) => {
                let nil = z.null_count > 0;
                let (t, f) = match codes {
                    Some(c) => c.zone(z.min, z.max),
                    None => (test.prefix_zone(&z), true),
                };
                if test.null_in_list() { Maybe { t, f: false, n: nil || f } } else { Maybe { t, f, n: nil } }
            }
        },
        Node::IsNull { col } => match zone_of(*col) {
            None => Maybe::ANY,
            Some(z) => Maybe { t: z.null_count > 0, f: (z.null_count as usize) < len, n: false },
        },
        Node::Expr { .. } | Node::ExprIsNull(_) => Maybe::ANY,
        Node::And(v) => v.iter().fold(Maybe { t: true, f: false, n: false }, |acc, c| {
            let z = zone(c, cols, block);
            Maybe { t: acc.t && z.t, f: acc.f || z.f, n: acc.n || z.n }
        }),
        Node::Or(v) => v.iter().fold(Maybe { t: false, f: true, n: false }, |acc, c| {
            let z = zone(c, cols, block);
            Maybe { t: acc.t || z.t, f: acc.f && z.f, n: acc.n || z.n }
        }),
        Node::Not(c) => {
            let z = zone(c, cols, block);
            Maybe { t: z.f, f: z.t, n: z.n }
        }
    }
}

/// TRUE / FALSE lanes from a condition over valid lanes.
#[inline]
fn tri(cond: Bits, valid: Bits, null_in_list: bool) -> Tri {
    let t = cond.and(&valid);
    // With a NULL in an IN-list, a non-match is NULL.
    let f = if null_in_list { Bits::EMPTY } else { valid.and_not(&cond) };
    Tri { t, f }
}

/// Evaluates `node` on every row of a block; `sel` is `Range(0, len)`, or
/// a mask of the live rows (expressions are still computed for every lane,
/// but only live lanes can raise errors).
fn eval(node: &mut Node, cols: &ShardColumns<'_>, side: Side, len: usize, sel: Sel<'_>, scratch: &mut Scratch) -> Result<Tri> {
    let all = Bits::first(len);
    Ok(match node {
        Node::Const(None) => Tri { t: Bits::EMPTY, f: Bits::EMPTY },
        Node::Const(Some(true)) => Tri { t: all, f: Bits::EMPTY },
        Node::Const(Some(false)) => Tri { t: Bits::EMPTY, f: all },
        Node::Keys { col, physical, test, codes } => {
            let src = cols.column(*col);
            let (cond, validity) = match side {
                Side::Main(block) => {
                    let main = src.main().ok_or_else(|| Error::Internal("main block without a main column".into()))?;
                    let Encoding::Keys(enc) = main.encoding() else {
                        return Err(Error::Internal("key test on a non-key encoding".into()));
                    };
                    (key_block(enc, block, len, test, codes.as_ref(), scratch), src.main_validity(block, sel))
                }
                Side::Delta(chunk) => (delta_keys(src.delta(), *physical, chunk, len, test, scratch), src.delta_validity(chunk, sel)),
            };
            tri(cond, validity.unwrap_or(all), test.null_in_list())
        }
        Node::Bytes { col, test, codes } => {
            let src = cols.column(*col);
            let (cond, validity) = match side {
                Side::Main(block) => {
                    let main = src.main().ok_or_else(|| Error::Internal("main block without a main column".into()))?;
                    let cond = match (main.encoding(), codes.as_ref()) {
                        (Encoding::StrDict(d), Some(c)) => {
                            let keys = scratch.keys_mut();
                            d.codes().decode_block(block, keys);
                            c.mask(keys, len)
                        }
                        _ => {
                            let start = block * LANES;
                            let mut m = Bits::EMPTY;
                            for i in 0..len {
                                if test.test(src.main_bytes(start + i)) {
                                    m.set(i);
                                }
                            }
                            m
                        }
                    };
                    (cond, src.main_validity(block, sel))
                }
                Side::Delta(chunk) => {
                    let mut m = Bits::EMPTY;
                    for i in 0..len {
                        if test.test(src.delta_bytes(chunk, i)) {
                            m.set(i);
                        }
                    }
                    (m, src.delta_validity(chunk, sel))
                }
            };
            tri(cond, validity.unwrap_or(all), test.null_in_list())
        }
        Node::IsNull { col } => {
            let src = cols.column(*col);
            let validity = match side {
                Side::Main(b) => src.main_validity(b, sel),
                Side::Delta(c) => src.delta_validity(c, sel),
            }
            .unwrap_or(all);
            Tri { t: all.and_not(&validity), f: validity }
        }
        Node::Expr { expr, test } => {
            let null_in_list = test.null_in_list();
            match expr.eval(cols, side, sel, scratch)? {
                Operand::Scalar(None) => Tri { t: Bits::EMPTY, f: Bits::EMPTY },
                Operand::Scalar(Some(n)) => {
                    let cond = if test.test(ordinal(n)) { all } else { Bits::EMPTY };
                    tri(cond, all, null_in_list)
                }
                Operand::Vector(v) => {
                    let mut cond = Bits::EMPTY;
                    match &v.values {
                        Values::I64(x) => (0..len).for_each(|i| if test.test(x[i] as i128) { cond.set(i) }),
                        Values::U64(x) => (0..len).for_each(|i| if test.test(x[i] as i128) { cond.set(i) }),
                        Values::F64(x) => (0..len).for_each(|i| if test.test(x[i].to_key() as i128) { cond.set(i) }),
                        Values::I128(x) => (0..len).for_each(|i| if test.test(x[i]) { cond.set(i) }),
                    }
                    let valid = if v.has_nulls { v.validity.and(&all) } else { all };
                    tri(cond, valid, null_in_list)
                }
            }
        }
        Node::ExprIsNull(expr) => match expr.eval(cols, side, sel, scratch)? {
            Operand::Scalar(None) => Tri { t: all, f: Bits::EMPTY },
            Operand::Scalar(Some(_)) => Tri { t: Bits::EMPTY, f: all },
            Operand::Vector(v) => {
                let valid = if v.has_nulls { v.validity.and(&all) } else { all };
                Tri { t: all.and_not(&valid), f: valid }
            }
        },
        Node::And(children) => {
            let mut acc = Tri { t: all, f: Bits::EMPTY };
            for c in children {
                let r = eval(c, cols, side, len, sel, scratch)?;
                acc = Tri { t: acc.t.and(&r.t), f: acc.f.or(&r.f) };
                if acc.f == all {
                    break;
                }
            }
            acc
        }
        Node::Or(children) => {
            let mut acc = Tri { t: Bits::EMPTY, f: all };
            for c in children {
                let r = eval(c, cols, side, len, sel, scratch)?;
                acc = Tri { t: acc.t.or(&r.t), f: acc.f.and(&r.f) };
                if acc.t == all {
                    break;
                }
            }
            acc
        }
        Node::Not(c) => {
            let r = eval(c, cols, side, len, sel, scratch)?;
            Tri { t: r.f, f: r.t }
        }
    })
}

/// Keys of main block `block` that pass `test`, read from the encoding.
fn key_block(enc: &KeyEncoding, block: usize, len: usize, test: &KeyTest, codes: Option<&KeyTest>, scratch: &mut Scratch) -> Bits {
    let keys = scratch.keys_mut();
    match enc {
        KeyEncoding::Constant { key, .. } => {
            if test.test(*key) { Bits::first(len) } else { Bits::EMPTY }
        }
        KeyEncoding::BitPacked(bp) => {
            let frame = bp.frames()[block];
            match test {
                KeyTest::Range { lo, hi, empty: false } => {
                    // Compare the packed deltas with the range shifted by the
                    // block's reference: no reference is added to any value.
                    if *hi < frame.reference {
                        return Bits::EMPTY;
                    }
                    let shifted = KeyTest::Range {
                        lo: lo.saturating_sub(frame.reference),
                        hi: hi - frame.reference,
                        empty: false,
                    };
                    if frame.width == 0 {
                        return if shifted.test(0) { Bits::first(len) } else { Bits::EMPTY };
                    }
                    bp.decode_block_deltas(block, keys);
                    shifted.mask(keys, len)
                }
                _ => {
                    bp.decode_block(block, keys);
                    test.mask(keys, len)
                }
            }
        }
        KeyEncoding::Dict(d) => {
            d.codes().decode_block(block, keys);
            match codes {
                Some(c) => c.mask(keys, len),
                None => {
                    for k in keys.iter_mut() {
                        *k = d.values()[*k as usize];
                    }
                    test.mask(keys, len)
                }
            }
        }
        KeyEncoding::RunEnd(re) => {
            let start = block * LANES;
            let mut out = Bits::EMPTY;
            let mut r = re.run_of(start);
            let mut row = start;
            while row < start + len {
                let end = (re.ends()[r] as usize).min(start + len);
                if test.test(re.values()[r]) {
                    out = out.or(&Bits::range(row - start, end - start));
                }
                row = end;
                r += 1;
            }
            out
        }
        _ => {
            enc.decode_block(block, keys);
            test.mask(keys, len)
        }
    }
}

/// Delta rows of chunk `chunk` that pass a key test.
fn delta_keys(
    delta: &quiverdb_storage::DeltaColumnReader<'_>,
    physical: PhysicalType,
    chunk: usize,
    len: usize,
    test: &KeyTest,
    scratch: &mut Scratch,
) -> Bits {
    let keys = scratch.keys_mut();
    fn fill<T: ArrowNativeType + KeyNative>(src: &[T], keys: &mut [u64; LANES]) {
        for (k, v) in keys.iter_mut().zip(src) {
            *k = v.to_key();
        }
    }
    match physical {
        PhysicalType::Boolean => {
            let mut words = [0u64; 16];
            delta.booleans(chunk, &mut words);
            for (i, k) in keys.iter_mut().enumerate().take(len) {
                *k = words[i / 64] >> (i % 64) & 1;
            }
        }
        PhysicalType::Int8 => fill::<i8>(delta.values(chunk), keys),
        PhysicalType::Int16 => fill::<i16>(delta.values(chunk), keys),
        PhysicalType::Int32 => fill::<i32>(delta.values(chunk), keys),
        PhysicalType::Int64 => fill::<i64>(delta.values(chunk), keys),
        PhysicalType::UInt8 => fill::<u8>(delta.values(chunk), keys),
        PhysicalType::UInt16 => fill::<u16>(delta.values(chunk), keys),
        PhysicalType::UInt32 => fill::<u32>(delta.values(chunk), keys),
        PhysicalType::UInt64 => fill::<u64>(delta.values(chunk), keys),
        PhysicalType::Float32 => fill::<f32>(delta.values(chunk), keys),
        PhysicalType::Float64 => fill::<f64>(delta.values(chunk), keys),
        PhysicalType::Decimal128 | PhysicalType::Bytes => return Bits::EMPTY,
    }
    test.mask(keys, len)
}
