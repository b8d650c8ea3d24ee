//! Phase 1 of a scan: a predicate compiled against one shard's encodings,
//! in two steps: [`PreparedFilter::new`] once per scan (literals to key
//! tests, IN-lists sorted and made bitsets), [`ShardFilter::new`] per shard
//! (dictionary code tests, expression vectors).
//!
//! ```text
//!   Predicate ──prepare(schema)──▶ Prep tree ──instantiate(shard)──▶ Node tree
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

mod block;
mod leaf;

use quiverdb_mapreducer::{
    Bits, CompiledExpr, Domain, LANES, MapExpr, Operand, Scalar, Scratch, Sel, ShardColumns, Side, Values,
};
use quiverdb_storage::block::KeyTest;
use quiverdb_storage::types::{KeyNative, PhysicalType};
use quiverdb_storage::{ShardSnapshot, TableSchema};

use self::block::{delta_decimals, delta_keys};
use self::leaf::{
    ByteTest, OrdRange, OrdTest, key_range, literal_ordinal, literal_range, ord_to_key, ordinal, type_range,
    widen_f32_test, zero_span,
};
use crate::error::{Error, Result};
use crate::predicate::{CmpOp, Predicate};

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

#[derive(Debug)]
enum Node {
    /// A constant; `None` is NULL.
    Const(Option<bool>),
    /// A numeric column by keys; `codes` is the test on a
    /// dictionary-encoded main column's codes; with `null_in_list` (an
    /// IN-list holding NULL) a key that fails is NULL, not FALSE. A decimal
    /// column is one only in a shard whose main holds it as `i64` keys;
    /// `decimal` is then the test on its delta's `i128` values.
    Keys {
        col: usize,
        physical: PhysicalType,
        test: KeyTest,
        null_in_list: bool,
        codes: Option<KeyTest>,
        decimal: Option<OrdTest>,
    },
    /// A string or binary column; `codes` for a dictionary-encoded main.
    Bytes {
        col: usize,
        test: ByteTest,
        codes: Option<KeyTest>,
    },
    /// `column IS NULL`.
    IsNull {
        col: usize,
    },
    /// A computed (or decimal) numeric expression.
    Expr {
        expr: CompiledExpr,
        test: OrdTest,
    },
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
    /// The validity a lone key or string test found (kept here, so a
    /// block's evaluation copies no bitmap it need not).
    validity: Bits,
}

impl<'a> ShardFilter<'a> {
    /// `pred` (prepared once per scan) for `shard`.
    pub(crate) fn new(shard: ShardSnapshot<'a>, pred: &PreparedFilter) -> Result<Self> {
        let cols = ShardColumns::open(shard, pred.columns.iter().copied())?;
        let root = instantiate(&pred.root, shard.schema(), &cols)?;
        Ok(Self { cols, root, scratch: None, validity: Bits::EMPTY })
    }

    /// What the zone maps of main block `block` allow.
    pub(crate) fn zone(&self, block: usize) -> Maybe {
        zone(&self.root, &self.cols, block)
    }

    /// Writes to `out` the live rows of main block `block` or delta chunk
    /// `chunk` for which the predicate is TRUE; `live` (when some rows are
    /// deleted) are also the lanes whose expression errors count: a
    /// deleted row never fails a query.
    pub(crate) fn eval(&mut self, side: Side, live: Option<&Bits>, out: &mut Bits) -> Result<()> {
        let len = match side {
            Side::Main(b) => self.cols.block_len(b),
            Side::Delta(c) => self.cols.chunk_len(c),
        };
        let Self { cols, root, scratch, validity } = self;
        let scratch = scratch.get_or_insert_with(Scratch::default);
        let sel = match live {
            Some(l) => Sel::Mask(&l.0, len),
            None => Sel::Range(0, len),
        };
        // A key or string test alone (the common filter): its TRUE lanes
        // without the FALSE ones, written in place.
        let step = Step { cols, side, len, sel };
        match leaf_cond(root, step, scratch, out, validity)? {
            Some(leaf) if leaf.has_validity => *out = out.and(validity),
            Some(_) if len < LANES => *out = out.and(&Bits::first(len)),
            Some(_) => {}
            None => *out = eval(root, step, scratch)?.t,
        }
        if let Some(l) = live {
            *out = out.and(l);
        }
        Ok(())
    }
}

/// A predicate compiled for a table's schema, before any shard: its
/// literals turned into key tests once per scan (an IN-list of 900 values
/// is converted, sorted and made a bitset once, not once per shard).
/// [`ShardFilter::new`] adds what depends on a shard's encodings.
#[derive(Debug)]
pub(crate) struct PreparedFilter {
    columns: Vec<usize>,
    root: Prep,
}

/// A [`Node`] without its shard-dependent parts (dictionary code tests,
/// expression vectors).
#[derive(Debug)]
enum Prep {
    Const(Option<bool>),
    Keys {
        col: usize,
        physical: PhysicalType,
        test: KeyTest,
        null_in_list: bool,
    },
    Bytes {
        col: usize,
        test: ByteTest,
    },
    IsNull {
        col: usize,
    },
    Expr {
        expr: MapExpr,
        test: OrdTest,
    },
    /// A plain decimal column: `test` on its values, and `keys` the same
    /// test on `i64` keys for shards whose main holds it as keys.
    Decimal {
        col: usize,
        test: OrdTest,
        keys: KeyTest,
        null_in_list: bool,
    },
    ExprIsNull(MapExpr),
    And(Vec<Prep>),
    Or(Vec<Prep>),
    Not(Box<Prep>),
}

impl PreparedFilter {
    /// Compiles `pred` for tables of `schema`.
    pub(crate) fn new(pred: &Predicate, schema: &TableSchema) -> Result<Self> {
        let mut columns = Vec::new();
        pred.columns(&mut columns);
        Ok(Self { columns, root: prepare_node(pred, schema)? })
    }
}

/// The shard's node of a prepared one: tests copied, dictionary codes
/// tests made for the shard's encodings, expressions given vectors.
fn instantiate(p: &Prep, schema: &TableSchema, cols: &ShardColumns<'_>) -> Result<Node> {
    let all = |v: &[Prep]| v.iter().map(|p| instantiate(p, schema, cols)).collect::<Result<Vec<_>>>();
    Ok(match p {
        Prep::Const(c) => Node::Const(*c),
        Prep::Keys { col, physical, test, null_in_list } => {
            let codes = cols.column(*col).main().and_then(|m| m.keys()).and_then(|k| k.code_test(test));
            Node::Keys {
                col: *col,
                physical: *physical,
                test: test.clone(),
                null_in_list: *null_in_list,
                codes,
                decimal: None,
            }
        }
        Prep::Bytes { col, test } => {
            let codes = cols.column(*col).main().and_then(|m| m.string_dictionary()).map(|d| test.codes(d));
            Node::Bytes { col: *col, test: test.clone(), codes }
        }
        Prep::IsNull { col } => Node::IsNull { col: *col },
        Prep::Expr { expr, test } => Node::Expr { expr: CompiledExpr::compile(expr, schema)?, test: test.clone() },
        Prep::Decimal { col, test, keys, null_in_list } => {
            let main = cols.column(*col).main();
            match main.map(|m| m.keys()) {
                // A main too wide for keys: the values, computed.
                Some(None) => {
                    Node::Expr { expr: CompiledExpr::compile(&MapExpr::Column(*col), schema)?, test: test.clone() }
                }
                // Main blocks on their keys (every value fits `i64`, so the
                // `Int64` key test is exact), delta chunks on their values.
                keyed => Node::Keys {
                    col: *col,
                    physical: PhysicalType::Decimal128,
                    test: keys.clone(),
                    null_in_list: *null_in_list,
                    codes: keyed.flatten().and_then(|k| k.code_test(keys)),
                    decimal: Some(test.clone()),
                },
            }
        }
        Prep::ExprIsNull(expr) => Node::ExprIsNull(CompiledExpr::compile(expr, schema)?),
        Prep::And(v) => Node::And(all(v)?),
        Prep::Or(v) => Node::Or(all(v)?),
        Prep::Not(p) => Node::Not(Box::new(instantiate(p, schema, cols)?)),
    })
}

/// A test on ordinals as one on the keys of a column of `p` (values
/// beyond the type's range pass nothing), and whether a NULL is in its
/// IN-list.
fn key_test(physical: PhysicalType, test: OrdTest) -> (KeyTest, bool) {
    match test {
        OrdTest::Range(r) => (key_range(physical, r), false),
        OrdTest::Set { values, null_in_list } => {
            let (tmin, tmax) = type_range(physical);
            let keys =
                values.into_iter().filter(|o| (tmin..=tmax).contains(o)).map(|o| ord_to_key(physical, o)).collect();
            (KeyTest::set(keys), null_in_list)
        }
    }
}

fn prepare_node(p: &Predicate, schema: &TableSchema) -> Result<Prep> {
    let not = |n: Prep| Prep::Not(Box::new(n));
    Ok(match p {
        Predicate::Const(b) => Prep::Const(Some(*b)),
        Predicate::Unknown => Prep::Const(None),
        Predicate::And(v) => Prep::And(v.iter().map(|p| prepare_node(p, schema)).collect::<Result<_>>()?),
        Predicate::Or(v) => Prep::Or(v.iter().map(|p| prepare_node(p, schema)).collect::<Result<_>>()?),
        Predicate::Not(p) => not(prepare_node(p, schema)?),
        Predicate::IsNull(e) | Predicate::IsNotNull(e) => {
            let node = match e.as_column() {
                Some(col) => Prep::IsNull { col },
                None => {
                    CompiledExpr::compile(e, schema)?; // type-checks it
                    Prep::ExprIsNull(e.clone())
                }
            };
            if matches!(p, Predicate::IsNotNull(_)) { not(node) } else { node }
        }
        Predicate::Compare { expr, op, value } => {
            if value.is_null() {
                return Ok(Prep::Const(None));
            }
            let node = leaf(expr, schema, |ctx| match ctx {
                Ctx::Ord(p, d) => literal_range(p, d, *op, value).map(|r| Test::Ord(OrdTest::Range(r))),
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
            let node = prepare_node(&both, schema)?;
            if *negated { not(node) } else { node }
        }
        Predicate::Between { expr, low, high, negated } => {
            let node = leaf(expr, schema, |ctx| match ctx {
                Ctx::Ord(p, d) => Some(Test::Ord(OrdTest::Range(OrdRange {
                    lo: literal_range(p, d, CmpOp::GtEq, low)?.lo,
                    hi: literal_range(p, d, CmpOp::LtEq, high)?.hi,
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
            let node = leaf(expr, schema, |ctx| match ctx {
                Ctx::Ord(p, d) => {
                    let mut v = Vec::with_capacity(values.len());
                    for value in values.iter().filter(|v| !v.is_null()) {
                        match zero_span(p, d, value) {
                            // Both zeros.
                            Some((neg, pos)) => v.extend([neg, pos]),
                            None => v.push(literal_ordinal(p, d, value)?),
                        }
                    }
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
        Predicate::Like { expr, pattern, negated } => {
            let node = leaf(expr, schema, |ctx| match ctx {
                Ctx::Bytes => Some(Test::Bytes(ByteTest::like(pattern))),
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
fn leaf(expr: &MapExpr, schema: &TableSchema, make: impl Fn(Ctx) -> Option<Test>) -> Result<Prep> {
    let t = expr.data_type(schema).map_err(Error::MapReduce)?;
    let invalid = || Error::InvalidPredicate(format!("a literal of the wrong type for {expr} ({t})"));
    match (Domain::of(&t), expr.as_column()) {
        (None, Some(col)) => {
            let Some(Test::Bytes(test)) = make(Ctx::Bytes) else { return Err(invalid()) };
            Ok(Prep::Bytes { col, test })
        }
        (None, None) => Err(Error::Unsupported(format!("a predicate on computed {t}"))),
        (Some(domain), Some(col)) if schema.physical(col) != PhysicalType::Decimal128 => {
            let physical = schema.physical(col);
            let Some(Test::Ord(test)) = make(Ctx::Ord(physical, domain)) else { return Err(invalid()) };
            let (test, null_in_list) = key_test(physical, test);
            Ok(Prep::Keys { col, physical, test, null_in_list })
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
            CompiledExpr::compile(expr, schema)?; // type-checks it
            Ok(match expr.as_column() {
                // A column here is a decimal one (see the arm above).
                Some(col) => {
                    let (keys, null_in_list) = key_test(PhysicalType::Int64, test.clone());
                    Prep::Decimal { col, test, keys, null_in_list }
                }
                None => Prep::Expr { expr: expr.clone(), test },
            })
        }
    }
}

fn zone(node: &Node, cols: &ShardColumns<'_>, block: usize) -> Maybe {
    let len = cols.block_len(block);
    let zone_of = |col: usize| cols.column(col).main().map(|m| m.zones()[block]);
    match node {
        Node::Const(None) => Maybe { t: false, f: false, n: true },
        Node::Const(Some(b)) => Maybe { t: *b, f: !*b, n: false },
        Node::Keys { col, test, null_in_list, .. } => match zone_of(*col) {
            None => Maybe::ANY,
            Some(z) if z.all_null() => Maybe { t: false, f: false, n: true },
            Some(z) => {
                let (t, f) = test.zone(z.min, z.max);
                let nil = z.null_count > 0;
                // With a NULL in an IN-list, non-matches are NULL, not FALSE.
                if *null_in_list { Maybe { t, f: false, n: nil || f } } else { Maybe { t, f, n: nil } }
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

/// One block of a filter's evaluation: main block or delta chunk `side`
/// of the shard whose columns are `cols`, its `len` rows, and `sel`
/// (`Range(0, len)`, or a mask of the live rows).
#[derive(Clone, Copy)]
struct Step<'s, 'c> {
    cols: &'s ShardColumns<'c>,
    side: Side,
    len: usize,
    sel: Sel<'s>,
}

/// What a key or string test found on a block, besides the bitmaps
/// [`leaf_cond`] writes.
struct Leaf {
    /// The validity of `sel` was written (else all of it is valid).
    has_validity: bool,
    /// A NULL in an IN-list makes non-matches NULL, not FALSE.
    null_in_list: bool,
}

/// A key or string test on main block `block` or delta chunk `chunk`:
/// writes to `cond` the rows whose stored value passes it (valid or not),
/// and to `validity` the validity of `sel` if some of it is NULL; `None`
/// for every other node. (Out-parameters: the bitmaps are written where
/// the caller keeps them, not copied there block after block.)
fn leaf_cond(
    node: &Node,
    step: Step<'_, '_>,
    scratch: &mut Scratch,
    cond: &mut Bits,
    validity: &mut Bits,
) -> Result<Option<Leaf>> {
    let Step { cols, side, len, sel } = step;
    let (col, null_in_list) = match node {
        Node::Keys { col, physical, test, null_in_list, codes, decimal } => {
            let src = cols.column(*col);
            match side {
                Side::Main(block) => {
                    let keys = src
                        .main()
                        .and_then(|m| m.keys())
                        .ok_or_else(|| Error::Internal("key test on a main block without keys".into()))?;
                    keys.filter_block(block, len, test, codes.as_ref(), scratch.keys_mut(), cond);
                }
                Side::Delta(chunk) => {
                    *cond = match decimal {
                        Some(exact) => delta_decimals(src.delta(), chunk, len, exact),
                        None => delta_keys(src.delta(), *physical, chunk, len, test, scratch),
                    }
                }
            }
            (*col, *null_in_list)
        }
        Node::Bytes { col, test, codes } => {
            let src = cols.column(*col);
            match side {
                Side::Main(block) => {
                    let main = src.main().ok_or_else(|| Error::Internal("main block without a main column".into()))?;
                    match (main.string_dictionary(), codes) {
                        (Some(d), Some(c)) => d.codes().filter_block(block, len, c, scratch.keys_mut(), cond),
                        _ => {
                            *cond = Bits::EMPTY;
                            src.with_main_block_bytes(block, scratch, |bytes| {
                                for i in 0..len {
                                    if test.test(bytes.get(i)) {
                                        cond.set(i);
                                    }
                                }
                            });
                        }
                    }
                }
                Side::Delta(chunk) => {
                    *cond = Bits::EMPTY;
                    for i in 0..len {
                        if test.test(src.delta_bytes(chunk, i)) {
                            cond.set(i);
                        }
                    }
                }
            }
            (*col, test.null_in_list())
        }
        _ => return Ok(None),
    };
    let src = cols.column(col);
    let found = match side {
        Side::Main(block) => src.main_validity(block, sel),
        Side::Delta(chunk) => src.delta_validity(chunk, sel),
    };
    let has_validity = found.is_some();
    if let Some(v) = found {
        *validity = v;
    }
    Ok(Some(Leaf { has_validity, null_in_list }))
}

/// Evaluates `node` on every row of a block; `sel` is `Range(0, len)`, or
/// a mask of the live rows (expressions are still computed for every lane,
/// but only live lanes can raise errors).
fn eval(node: &mut Node, step: Step<'_, '_>, scratch: &mut Scratch) -> Result<Tri> {
    let Step { cols, side, len, sel } = step;
    let all = Bits::first(len);
    Ok(match node {
        Node::Const(None) => Tri { t: Bits::EMPTY, f: Bits::EMPTY },
        Node::Const(Some(true)) => Tri { t: all, f: Bits::EMPTY },
        Node::Const(Some(false)) => Tri { t: Bits::EMPTY, f: all },
        Node::Keys { .. } | Node::Bytes { .. } => {
            let (mut cond, mut validity) = (Bits::EMPTY, Bits::EMPTY);
            match leaf_cond(node, step, scratch, &mut cond, &mut validity)? {
                Some(leaf) => tri(cond, if leaf.has_validity { validity } else { all }, leaf.null_in_list),
                None => return Err(Error::Internal("a key or string test without its leaf".into())),
            }
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
                        Values::I64(x) => (0..len).for_each(|i| {
                            if test.test(x[i] as i128) {
                                cond.set(i)
                            }
                        }),
                        Values::U64(x) => (0..len).for_each(|i| {
                            if test.test(x[i] as i128) {
                                cond.set(i)
                            }
                        }),
                        Values::F64(x) => (0..len).for_each(|i| {
                            if test.test(x[i].to_key() as i128) {
                                cond.set(i)
                            }
                        }),
                        Values::I128(x) => (0..len).for_each(|i| {
                            if test.test(x[i]) {
                                cond.set(i)
                            }
                        }),
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
                let r = eval(c, step, scratch)?;
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
                let r = eval(c, step, scratch)?;
                acc = Tri { t: acc.t.or(&r.t), f: acc.f.and(&r.f) };
                if acc.t == all {
                    break;
                }
            }
            acc
        }
        Node::Not(c) => {
            let r = eval(c, step, scratch)?;
            Tri { t: r.f, f: r.t }
        }
    })
}
