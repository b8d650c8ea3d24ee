//! Map expressions: column references, literals, arithmetic and numeric
//! casts, evaluated a block at a time.
//!
//! ```text
//!   MapExpr (tree, typed)  ──compile──▶  CompiledExpr (one vector per node,
//!                                         allocated once per shard reducer)
//!   eval(block, sel):  post-order; a column node fetches, a literal stays a
//!                      scalar, an operator runs one tight loop over the lanes
//! ```
//!
//! Semantics follow Arrow's checked arithmetic kernels, which quiverdb's
//! SQL runs: an integer result that leaves its type's width is an overflow
//! error, and so is integer division or remainder by zero (on active,
//! non-null lanes only); floats follow IEEE; `Float32` is rounded after every operation,
//! which gives exactly `f32` arithmetic. Decimals support `+`, `-` and `*`
//! with Arrow's result types (see [`decimal_result`]), and fail on leaving
//! the result's precision. Casts fail
//! when a value does not fit the target type (as SQL `CAST` does).

use arrow_schema::DataType;
use quiverdb_storage::TableSchema;

use crate::columns::{Scratch, ShardColumns};
use crate::error::{Error, Result};
use crate::scalar::{Domain, IntWidth, Num, Scalar, wrap_i64};
use crate::vector::{NumVector, Values};
use quiverdb_storage::block::{Bits, LANES, Sel};

/// An arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (integer division truncates toward zero)
    Div,
    /// `%` (sign of the dividend)
    Rem,
}

impl std::fmt::Display for ArithOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Rem => "%",
        })
    }
}

/// A typed expression over the columns of one table row.
#[derive(Debug, Clone, PartialEq)]
pub enum MapExpr {
    /// The value of table column `i`.
    Column(usize),
    /// A constant of `data_type` (NULL allowed).
    Literal {
        /// The value.
        value: Scalar,
        /// Its type.
        data_type: DataType,
    },
    /// `left op right`; both sides have the same type, and so has the result.
    Arith {
        /// The operator.
        op: ArithOp,
        /// Left operand.
        left: Box<MapExpr>,
        /// Right operand.
        right: Box<MapExpr>,
    },
    /// A numeric cast.
    Cast {
        /// The operand.
        expr: Box<MapExpr>,
        /// The target type.
        to: DataType,
    },
}

impl std::fmt::Display for MapExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MapExpr::Column(i) => write!(f, "#{i}"),
            MapExpr::Literal { value, .. } => match value {
                Scalar::Null => f.write_str("NULL"),
                Scalar::Boolean(b) => write!(f, "{b}"),
                Scalar::Int(v) => write!(f, "{v}"),
                Scalar::UInt(v) => write!(f, "{v}"),
                Scalar::Float(v) => write!(f, "{v}"),
                Scalar::Decimal(v) => write!(f, "{v}d"),
                Scalar::Bytes(b) => write!(f, "'{}'", String::from_utf8_lossy(b)),
            },
            MapExpr::Arith { op, left, right } => write!(f, "({left} {op} {right})"),
            MapExpr::Cast { expr, to } => write!(f, "CAST({expr} AS {to})"),
        }
    }
}

impl MapExpr {
    /// A column reference.
    pub fn col(i: usize) -> Self {
        MapExpr::Column(i)
    }

    /// A literal.
    pub fn lit(value: Scalar, data_type: DataType) -> Self {
        MapExpr::Literal { value, data_type }
    }

    /// `self op right`.
    pub fn arith(self, op: ArithOp, right: MapExpr) -> Self {
        MapExpr::Arith { op, left: Box::new(self), right: Box::new(right) }
    }

    /// `CAST(self AS to)`.
    pub fn cast(self, to: DataType) -> Self {
        MapExpr::Cast { expr: Box::new(self), to }
    }

    /// The column index if this is a plain column reference.
    pub fn as_column(&self) -> Option<usize> {
        match self {
            MapExpr::Column(i) => Some(*i),
            _ => None,
        }
    }

    /// Appends the columns the expression reads to `out`.
    pub fn columns(&self, out: &mut Vec<usize>) {
        match self {
            MapExpr::Column(i) => out.push(*i),
            MapExpr::Literal { .. } => {}
            MapExpr::Arith { left, right, .. } => {
                left.columns(out);
                right.columns(out);
            }
            MapExpr::Cast { expr, .. } => expr.columns(out),
        }
    }

    /// True if the expression can be NULL (it reads a nullable column or
    /// contains a NULL literal; failing arithmetic is an error, not NULL).
    pub fn nullable(&self, schema: &TableSchema) -> bool {
        match self {
            MapExpr::Column(i) => *i >= schema.len() || schema.field(*i).is_nullable(),
            MapExpr::Literal { value, .. } => value.is_null(),
            MapExpr::Arith { left, right, .. } => left.nullable(schema) || right.nullable(schema),
            MapExpr::Cast { expr, .. } => expr.nullable(schema),
        }
    }

    /// The expression's type, or why it does not type-check.
    pub fn data_type(&self, schema: &TableSchema) -> Result<DataType> {
        match self {
            MapExpr::Column(i) => {
                if *i >= schema.len() {
                    return Err(Error::InvalidExpression(format!(
                        "column #{i} does not exist (the table has {} columns)",
                        schema.len()
                    )));
                }
                Ok(schema.field(*i).data_type().clone())
            }
            MapExpr::Literal { value, data_type } => {
                let fits = match Domain::of(data_type) {
                    _ if value.is_null() => true,
                    Some(d) => value.to_num(d).is_some(),
                    None => value.as_bytes().is_some(),
                };
                if !fits {
                    return Err(Error::InvalidExpression(format!(
                        "literal {value:?} is not a value of type {data_type}"
                    )));
                }
                Ok(data_type.clone())
            }
            MapExpr::Arith { op, left, right } => {
                let (l, r) = (left.data_type(schema)?, right.data_type(schema)?);
                if let (DataType::Decimal128(..), DataType::Decimal128(..)) = (&l, &r) {
                    return decimal_result(*op, &l, &r);
                }
                if l != r {
                    return Err(Error::InvalidExpression(format!(
                        "operands of {op} have different types: {l} and {r} (cast one first)"
                    )));
                }
                if !arithmetic_type(&l) {
                    return Err(Error::Unsupported(format!("arithmetic on {l}")));
                }
                Ok(l)
            }
            MapExpr::Cast { expr, to } => {
                let from = expr.data_type(schema)?;
                cast_supported(&from, to)?;
                Ok(to.clone())
            }
        }
    }
}

/// The type of `l op r` for two decimals, by Arrow's rules (which
/// DataFusion's plans follow): `+` and `-` at the larger scale, with one
/// more integer digit than the wider operand; `*` at the sum of the scales
/// with the sum of the precisions plus one; precisions capped at 38.
/// Division and remainder are left to DataFusion.
fn decimal_result(op: ArithOp, l: &DataType, r: &DataType) -> Result<DataType> {
    const MAX: u8 = 38;
    let (DataType::Decimal128(p1, s1), DataType::Decimal128(p2, s2)) = (l, r) else {
        return Err(Error::Internal("decimal_result of non-decimals".into()));
    };
    let (p1, s1, p2, s2) = (*p1 as i16, *s1 as i16, *p2 as i16, *s2 as i16);
    let (p, s) = match op {
        ArithOp::Add | ArithOp::Sub => {
            let s = s1.max(s2);
            (s + (p1 - s1).max(p2 - s2) + 1, s)
        }
        ArithOp::Mul => (p1 + p2 + 1, s1 + s2),
        ArithOp::Div | ArithOp::Rem => return Err(Error::Unsupported(format!("decimal {op}"))),
    };
    if !(0..=MAX as i16).contains(&s) || s1 < 0 || s2 < 0 {
        return Err(Error::Unsupported(format!("{l} {op} {r}: a scale outside 0..=38")));
    }
    Ok(DataType::Decimal128(p.clamp(1, MAX as i16) as u8, s as i8))
}

/// Types arithmetic is defined on.
fn arithmetic_type(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float32
            | DataType::Float64
            | DataType::Decimal128(..)
    )
}

fn cast_supported(from: &DataType, to: &DataType) -> Result<()> {
    let numeric = |t: &DataType| arithmetic_type(t) || matches!(t, DataType::Boolean);
    let ok = match (from, to) {
        (f, t) if f == t => true,
        (DataType::Decimal128(_, s1), DataType::Decimal128(_, s2)) => s2 >= s1,
        (DataType::Decimal128(..), DataType::Float32 | DataType::Float64) => true,
        (DataType::Decimal128(..), _) => false,
        (f, DataType::Decimal128(..)) => numeric(f) && !matches!(f, DataType::Float32 | DataType::Float64),
        (f, t) => numeric(f) && numeric(t) && !matches!(t, DataType::Boolean),
    };
    if ok { Ok(()) } else { Err(Error::Unsupported(format!("CAST from {from} to {to}"))) }
}

/// Where a step reads from.
#[derive(Debug, Clone, Copy)]
pub enum Side {
    /// Main block `b`.
    Main(usize),
    /// Delta chunk `c`.
    Delta(usize),
}

/// A compiled expression with its vectors allocated.
#[derive(Debug)]
pub struct CompiledExpr {
    root: Node,
}

#[derive(Debug)]
struct Node {
    kind: NodeKind,
    data_type: DataType,
    domain: Domain,
    width: IntWidth,
    out: NumVector,
}

#[derive(Debug)]
enum NodeKind {
    Column(usize),
    Literal(Option<Num>),
    Arith { op: ArithOp, left: Box<Node>, right: Box<Node> },
    Cast(Box<Node>),
}

/// An evaluated operand: a vector, or a constant for all lanes.
#[derive(Debug, Clone, Copy)]
pub enum Operand<'v> {
    /// One value per lane.
    Vector(&'v NumVector),
    /// The same value in every lane (`None` = NULL).
    Scalar(Option<Num>),
}

impl CompiledExpr {
    /// Type-checks and compiles `expr` for a table of `schema`. The
    /// expression must be numeric (string columns are read directly by the
    /// reducers and predicates that support them).
    pub fn compile(expr: &MapExpr, schema: &TableSchema) -> Result<Self> {
        let data_type = expr.data_type(schema)?;
        if Domain::of(&data_type).is_none() {
            return Err(Error::Unsupported(format!("numeric evaluation of {data_type}")));
        }
        Ok(Self { root: Node::compile(expr, schema)? })
    }

    /// The result type.
    pub fn data_type(&self) -> &DataType {
        &self.root.data_type
    }

    /// The result domain.
    pub fn domain(&self) -> Domain {
        self.root.domain
    }

    /// Evaluates the rows `sel` of `side`; `active` are the lanes whose
    /// errors count (division by zero, overflow).
    pub fn eval<'s>(
        &'s mut self,
        cols: &ShardColumns<'_>,
        side: Side,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> Result<Operand<'s>> {
        let active = sel.active();
        self.root.eval(cols, side, sel, &active, scratch)
    }
}

impl CompiledExpr {
    /// The one column this expression reads, when it reads exactly one,
    /// is more than that column alone, and stays in the signed integer
    /// domain throughout: then [`CompiledExpr::eval_one`] gives, for one
    /// value of the column, exactly what [`CompiledExpr::eval`] gives its
    /// lane (the same operations, the same errors).
    pub(crate) fn integer_function_of(&self) -> Option<usize> {
        fn walk(n: &Node, col: &mut Option<usize>) -> bool {
            if n.domain != Domain::I64 {
                return false;
            }
            match &n.kind {
                NodeKind::Column(c) => col.replace(*c).is_none_or(|prev| prev == *c),
                NodeKind::Literal(_) => true,
                NodeKind::Arith { left, right, .. } => walk(left, col) && walk(right, col),
                NodeKind::Cast(child) => walk(child, col),
            }
        }
        if matches!(self.root.kind, NodeKind::Column(_)) {
            return None;
        }
        let mut col = None;
        if walk(&self.root, &mut col) { col } else { None }
    }

    /// Evaluates the expression for one row whose column (see
    /// [`CompiledExpr::integer_function_of`]) holds `v`.
    pub(crate) fn eval_one(&self, v: Option<Num>) -> Result<Option<Num>> {
        self.root.eval_one(v)
    }
}

impl Node {
    fn eval_one(&self, v: Option<Num>) -> Result<Option<Num>> {
        match &self.kind {
            NodeKind::Column(_) => Ok(v),
            NodeKind::Literal(l) => Ok(*l),
            NodeKind::Arith { op, left, right } => {
                scalar_arith(*op, left.eval_one(v)?, right.eval_one(v)?, self.width, &self.data_type)
            }
            NodeKind::Cast(child) => match child.eval_one(v)? {
                None => Ok(None),
                Some(n) => Ok(Some(cast_one(n, &child.data_type, &self.data_type)?)),
            },
        }
    }

    fn compile(expr: &MapExpr, schema: &TableSchema) -> Result<Self> {
        let data_type = expr.data_type(schema)?;
        let domain =
            Domain::of(&data_type).ok_or_else(|| Error::Unsupported(format!("numeric evaluation of {data_type}")))?;
        let kind = match expr {
            MapExpr::Column(i) => NodeKind::Column(*i),
            MapExpr::Literal { value, .. } => NodeKind::Literal(value.to_num(domain)),
            MapExpr::Arith { op, left, right } => {
                // Decimal operands of `+` and `-` are first brought to the
                // result's scale (a cast, exact or failing).
                let operand = |e: &MapExpr| -> Result<Node> {
                    match (&data_type, e.data_type(schema)?) {
                        (DataType::Decimal128(_, s), DataType::Decimal128(_, es))
                            if matches!(op, ArithOp::Add | ArithOp::Sub) && es != *s =>
                        {
                            Node::compile(&e.clone().cast(data_type.clone()), schema)
                        }
                        _ => Node::compile(e, schema),
                    }
                };
                NodeKind::Arith { op: *op, left: Box::new(operand(left)?), right: Box::new(operand(right)?) }
            }
            MapExpr::Cast { expr, .. } => NodeKind::Cast(Box::new(Node::compile(expr, schema)?)),
        };
        // Literals never fill their vector; don't allocate one.
        let out = if matches!(kind, NodeKind::Literal(_)) {
            NumVector { len: 0, values: Values::I64(Box::new([0; LANES])), validity: Bits::EMPTY, has_nulls: false }
        } else {
            NumVector::new(domain)
        };
        Ok(Self { width: IntWidth::of(&data_type), kind, data_type, domain, out })
    }

    fn eval<'s>(
        &'s mut self,
        cols: &ShardColumns<'_>,
        side: Side,
        sel: Sel<'_>,
        active: &Bits,
        scratch: &mut Scratch,
    ) -> Result<Operand<'s>> {
        match &mut self.kind {
            NodeKind::Column(c) => {
                let src = cols.column(*c);
                match side {
                    Side::Main(b) => src.fetch_main(b, sel, scratch, &mut self.out)?,
                    Side::Delta(ch) => src.fetch_delta(ch, sel, &mut self.out)?,
                }
                Ok(Operand::Vector(&self.out))
            }
            NodeKind::Literal(v) => Ok(Operand::Scalar(*v)),
            NodeKind::Arith { op, left, right } => {
                let l = left.eval(cols, side, sel, active, scratch)?;
                let r = right.eval(cols, side, sel, active, scratch)?;
                if let (Operand::Scalar(a), Operand::Scalar(b)) = (l, r) {
                    return Ok(Operand::Scalar(scalar_arith(*op, a, b, self.width, &self.data_type)?));
                }
                let typed = TypedOp { op: *op, width: self.width, data_type: &self.data_type };
                arith(typed, l, r, sel.lanes(), active, &mut self.out)?;
                Ok(Operand::Vector(&self.out))
            }
            NodeKind::Cast(child) => {
                let from_type = child.data_type.clone();
                match child.eval(cols, side, sel, active, scratch)? {
                    Operand::Scalar(v) => Ok(Operand::Scalar(match v {
                        None => None,
                        Some(n) => Some(cast_one(n, &from_type, &self.data_type)?),
                    })),
                    Operand::Vector(v) => {
                        cast_vector(v, &from_type, &self.data_type, active, &mut self.out)?;
                        Ok(Operand::Vector(&self.out))
                    }
                }
            }
        }
    }
}

/// Power of ten as i128, for decimal scales.
fn pow10(s: i8) -> Result<i128> {
    10i128.checked_pow(s.max(0) as u32).ok_or_else(|| Error::Overflow(format!("10^{s}")))
}

fn decimal_fits(v: i128, t: &DataType) -> bool {
    within(v, decimal_limit(t))
}

/// 10^precision for a decimal type (its values lie strictly between
/// `-limit` and `limit`); `None` for other types. Computed once per
/// vector, not per lane.
fn decimal_limit(t: &DataType) -> Option<i128> {
    match t {
        DataType::Decimal128(p, _) => Some(10i128.checked_pow(u32::from(*p)).unwrap_or(i128::MAX)),
        _ => None,
    }
}

/// True when `v` lies within `limit` (see [`decimal_limit`]).
#[inline(always)]
fn within(v: i128, limit: Option<i128>) -> bool {
    limit.is_none_or(|l| v > -l && v < l)
}

fn scalar_arith(op: ArithOp, a: Option<Num>, b: Option<Num>, width: IntWidth, t: &DataType) -> Result<Option<Num>> {
    let (Some(a), Some(b)) = (a, b) else { return Ok(None) };
    Ok(Some(match (a, b) {
        (Num::I64(x), Num::I64(y)) => Num::I64(i64_op(op, x, y, width).ok_or_else(|| match op {
            ArithOp::Div | ArithOp::Rem => division_error(y == 0, op, t),
            _ => Error::Overflow(format!("{x} {op} {y} does not fit {t}")),
        })?),
        (Num::U64(x), Num::U64(y)) => Num::U64(u64_op(op, x, y).ok_or_else(|| match op {
            ArithOp::Div | ArithOp::Rem => Error::DivideByZero,
            _ => Error::Overflow(format!("{x} {op} {y} does not fit {t}")),
        })?),
        (Num::F64(x), Num::F64(y)) => Num::F64(f64_op(op, x, y, matches!(t, DataType::Float32))),
        (Num::I128(x), Num::I128(y)) => {
            let v = i128_op(op, x, y).filter(|v| decimal_fits(*v, t));
            Num::I128(v.ok_or_else(|| Error::Overflow(format!("{x} {op} {y} does not fit {t}")))?)
        }
        _ => return Err(Error::Internal("operands of different domains".into())),
    }))
}

#[inline(always)]
fn i64_op(op: ArithOp, x: i64, y: i64, width: IntWidth) -> Option<i64> {
    // Overflow is an error (`None`), as in Arrow's checked kernels, which
    // quiverdb's SQL runs: a result must fit the type's width.
    let v = match op {
        ArithOp::Add => x.checked_add(y)?,
        ArithOp::Sub => x.checked_sub(y)?,
        ArithOp::Mul => x.checked_mul(y)?,
        // MIN / -1 overflows (as in Arrow's checked division, which
        // DataFusion runs): `None`, like a zero divisor.
        ArithOp::Div => {
            let q = x.checked_div(y)?;
            if wrap_i64(q, width) != q {
                return None;
            }
            q
        }
        ArithOp::Rem => x.checked_rem(y).or_else(|| (y != 0).then_some(0))?,
    };
    (wrap_i64(v, width) == v).then_some(v)
}

#[inline(always)]
fn u64_op(op: ArithOp, x: u64, y: u64) -> Option<u64> {
    Some(match op {
        ArithOp::Add => x.checked_add(y)?,
        ArithOp::Sub => x.checked_sub(y)?,
        ArithOp::Mul => x.checked_mul(y)?,
        ArithOp::Div => x.checked_div(y)?,
        ArithOp::Rem => x.checked_rem(y)?,
    })
}

#[inline(always)]
fn f64_op(op: ArithOp, x: f64, y: f64, f32_round: bool) -> f64 {
    let v = match op {
        ArithOp::Add => x + y,
        ArithOp::Sub => x - y,
        ArithOp::Mul => x * y,
        ArithOp::Div => x / y,
        ArithOp::Rem => x % y,
    };
    if f32_round { v as f32 as f64 } else { v }
}

#[inline(always)]
fn i128_op(op: ArithOp, x: i128, y: i128) -> Option<i128> {
    match op {
        ArithOp::Add => x.checked_add(y),
        ArithOp::Sub => x.checked_sub(y),
        ArithOp::Mul => x.checked_mul(y),
        _ => None,
    }
}

/// An arithmetic operator and the type of its result: integers wrap to
/// `width`, and a result must fit `data_type`.
#[derive(Clone, Copy)]
struct TypedOp<'t> {
    op: ArithOp,
    width: IntWidth,
    data_type: &'t DataType,
}

/// Applies `op` to the first `lanes` lanes into `out` (`active`: the lanes
/// whose failures count).
fn arith(
    typed: TypedOp<'_>,
    l: Operand<'_>,
    r: Operand<'_>,
    lanes: usize,
    active: &Bits,
    out: &mut NumVector,
) -> Result<()> {
    let TypedOp { op, width, data_type } = typed;
    // Validity: the AND of the operands'; a NULL scalar makes every lane NULL.
    let mut validity = Bits::first(lanes);
    let mut has_nulls = false;
    for operand in [l, r] {
        match operand {
            Operand::Scalar(None) => {
                out.len = lanes;
                out.validity = Bits::EMPTY;
                out.has_nulls = true;
                return Ok(());
            }
            Operand::Scalar(Some(_)) => {}
            Operand::Vector(v) if v.has_nulls => {
                validity = validity.and(&v.validity);
                has_nulls = true;
            }
            Operand::Vector(_) => {}
        }
    }
    let checked = if has_nulls { active.and(&validity) } else { *active };
    if let (ArithOp::Div | ArithOp::Rem, Operand::Vector(a), Operand::Scalar(Some(Num::I64(y)))) = (op, l, r)
        && let (Values::I64(a), Values::I64(dst)) = (&a.values, &mut out.values)
        && div_by_constant(op, a, y, lanes, dst)
    {
        out.len = lanes;
        out.validity = validity;
        out.has_nulls = has_nulls;
        return Ok(());
    }
    if let DataType::Decimal128(..) = data_type
        && let (Operand::Vector(_), _) | (_, Operand::Vector(_)) = (l, r)
        && decimal_within_range(op, l, r, lanes, decimal_limit(data_type), &mut out.values)?
    {
        out.len = lanes;
        out.validity = validity;
        out.has_nulls = has_nulls;
        return Ok(());
    }
    let failed = match (op, data_type) {
        (_, DataType::Float32 | DataType::Float64) => {
            let round = matches!(data_type, DataType::Float32);
            lanewise::<f64>(l, r, lanes, &checked, &mut out.values, |x, y| Some(f64_op(op, x, y, round)))?
        }
        (_, DataType::UInt64) => lanewise::<u64>(l, r, lanes, &checked, &mut out.values, |x, y| u64_op(op, x, y))?,
        (_, DataType::Decimal128(..)) => {
            let limit = decimal_limit(data_type);
            lanewise::<i128>(l, r, lanes, &checked, &mut out.values, |x, y| {
                i128_op(op, x, y).filter(|v| within(*v, limit))
            })?
        }
        _ => lanewise::<i64>(l, r, lanes, &checked, &mut out.values, |x, y| i64_op(op, x, y, width))?,
    };
    if failed {
        return Err(match (op, data_type) {
            (ArithOp::Div | ArithOp::Rem, t) if !matches!(t, DataType::Decimal128(..)) => {
                division_error(has_zero(r, &checked), op, t)
            }
            _ => Error::Overflow(format!("{op} on {data_type} left its range")),
        });
    }
    out.len = lanes;
    out.validity = validity;
    out.has_nulls = has_nulls;
    Ok(())
}

/// Decimal `+`, `-` or `*` of the first `lanes` lanes into `dst` without a
/// check per lane, when the operands' largest magnitudes show no lane can
/// leave `limit` (TPC-H's prices, discounts and taxes are far from it); a
/// product below 2^63 is one 64-bit multiplication. False, with `dst`
/// untouched, for other operators or when a lane might overflow (the
/// checked loop runs then).
fn decimal_within_range(
    op: ArithOp,
    l: Operand<'_>,
    r: Operand<'_>,
    lanes: usize,
    limit: Option<i128>,
    dst: &mut Values,
) -> Result<bool> {
    fn max_abs(s: Src<'_, i128>, lanes: usize) -> u128 {
        match s {
            Src::Slice(a) => a[..lanes].iter().fold(0u128, |m, x| m.max(x.unsigned_abs())),
            Src::Const(x) => x.unsigned_abs(),
        }
    }
    fn apply(a: Src<'_, i128>, b: Src<'_, i128>, dst: &mut [i128], f: impl Fn(i128, i128) -> i128) {
        match (a, b) {
            (Src::Slice(a), Src::Slice(b)) => {
                dst.iter_mut().zip(a.iter().zip(b)).for_each(|(d, (&x, &y))| *d = f(x, y))
            }
            (Src::Slice(a), Src::Const(y)) => dst.iter_mut().zip(a).for_each(|(d, &x)| *d = f(x, y)),
            (Src::Const(x), Src::Slice(b)) => dst.iter_mut().zip(b).for_each(|(d, &y)| *d = f(x, y)),
            (Src::Const(x), Src::Const(y)) => dst.iter_mut().for_each(|d| *d = f(x, y)),
        }
    }
    if !matches!(op, ArithOp::Add | ArithOp::Sub | ArithOp::Mul) {
        return Ok(false);
    }
    let (a, b) = (src::<i128>(l)?, src::<i128>(r)?);
    let (ma, mb) = (max_abs(a, lanes), max_abs(b, lanes));
    let bound = match op {
        ArithOp::Mul => ma.checked_mul(mb),
        _ => ma.checked_add(mb),
    };
    let limit = limit.map_or(i128::MAX as u128, |l| l as u128);
    let Some(bound) = bound.filter(|b| *b < limit) else { return Ok(false) };
    let dst =
        &mut i128::slice_mut(dst).ok_or_else(|| Error::Internal("arith output of another domain".into()))?[..lanes];
    match op {
        ArithOp::Add => apply(a, b, dst, |x, y| x + y),
        ArithOp::Sub => apply(a, b, dst, |x, y| x - y),
        // A product below 2^63 has factors below it (or a zero one):
        // 64-bit multiplication is exact.
        ArithOp::Mul if bound < 1 << 63 => apply(a, b, dst, |x, y| i128::from((x as i64) * (y as i64))),
        _ => apply(a, b, dst, |x, y| x * y),
    }
    Ok(true)
}

/// `x / y` or `x % y` (truncating, as SQL) of the first `lanes` lanes of
/// `a` by a constant `2 <= y < 2^32`, when every lane is below 2^32 in
/// magnitude, by multiplication instead of a hardware division (Lemire,
/// Kaser & Kurz, "Faster remainder by direct computation", 2019: exact
/// for 32-bit numerators and divisors). Such a division cannot fail, and
/// its result is no wider than `x`. False, with `dst` untouched, when the
/// lanes or the divisor are out of that range.
fn div_by_constant(op: ArithOp, a: &[i64; LANES], y: i64, lanes: usize, dst: &mut [i64; LANES]) -> bool {
    const LIMIT: u64 = 1 << 32;
    if !(2..LIMIT as i64).contains(&y) || a[..lanes].iter().fold(0u64, |m, x| m | x.unsigned_abs()) >= LIMIT {
        return false;
    }
    let d = y as u64;
    let m = u64::MAX / d + 1;
    let sign = |x: i64, v: u64| if x < 0 { (v as i64).wrapping_neg() } else { v as i64 };
    match op {
        ArithOp::Div => {
            for (o, &x) in dst[..lanes].iter_mut().zip(&a[..lanes]) {
                *o = sign(x, ((m as u128 * x.unsigned_abs() as u128) >> 64) as u64);
            }
        }
        _ => {
            for (o, &x) in dst[..lanes].iter_mut().zip(&a[..lanes]) {
                let low = m.wrapping_mul(x.unsigned_abs());
                *o = sign(x, ((low as u128 * d as u128) >> 64) as u64);
            }
        }
    }
    true
}

/// The error of a failed integer division: by zero, or `MIN / -1`.
fn division_error(by_zero: bool, op: ArithOp, t: &DataType) -> Error {
    if by_zero {
        Error::DivideByZero
    } else {
        Error::Overflow(format!("{op} on {t}: the quotient of MIN / -1 does not fit"))
    }
}

/// True if an active lane of the divisor `r` is zero.
fn has_zero(r: Operand<'_>, active: &Bits) -> bool {
    match r {
        Operand::Scalar(Some(n)) => matches!(n, Num::I64(0) | Num::U64(0)),
        Operand::Scalar(None) => false,
        Operand::Vector(v) => {
            let mut zero = false;
            active.for_each_one(|l| {
                zero |= match &v.values {
                    Values::I64(x) => x[l] == 0,
                    Values::U64(x) => x[l] == 0,
                    _ => false,
                };
            });
            zero
        }
    }
}

/// A native type of one numeric domain.
pub(crate) trait DomainValue: Copy + Default {
    fn slice(values: &Values) -> Option<&[Self; LANES]>;
    fn slice_mut(values: &mut Values) -> Option<&mut [Self; LANES]>;
    fn from_num(n: Num) -> Option<Self>;
}

macro_rules! domain_value {
    ($t:ty, $variant:ident) => {
        impl DomainValue for $t {
            #[inline]
            fn slice(values: &Values) -> Option<&[Self; LANES]> {
                match values {
                    Values::$variant(s) => Some(s),
                    _ => None,
                }
            }
            #[inline]
            fn slice_mut(values: &mut Values) -> Option<&mut [Self; LANES]> {
                match values {
                    Values::$variant(s) => Some(s),
                    _ => None,
                }
            }
            #[inline]
            fn from_num(n: Num) -> Option<Self> {
                match n {
                    Num::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
domain_value!(i64, I64);
domain_value!(u64, U64);
domain_value!(f64, F64);
domain_value!(i128, I128);

/// One side of a lane-wise operation, resolved before the loop.
#[derive(Clone, Copy)]
enum Src<'a, T> {
    Slice(&'a [T; LANES]),
    Const(T),
}

fn src<T: DomainValue>(o: Operand<'_>) -> Result<Src<'_, T>> {
    let wrong = || Error::Internal("operands of different domains".into());
    match o {
        Operand::Vector(v) => T::slice(&v.values).map(Src::Slice).ok_or_else(wrong),
        Operand::Scalar(Some(n)) => T::from_num(n).map(Src::Const).ok_or_else(wrong),
        Operand::Scalar(None) => Err(wrong()),
    }
}

/// `dst[i] = f(l[i], r[i])` for `lanes` lanes, one monomorphic loop per
/// operand shape. Returns true if `f` failed on a lane in `checked`.
fn lanewise<T: DomainValue>(
    l: Operand<'_>,
    r: Operand<'_>,
    lanes: usize,
    checked: &Bits,
    out: &mut Values,
    f: impl Fn(T, T) -> Option<T>,
) -> Result<bool> {
    let dst = T::slice_mut(out).ok_or_else(|| Error::Internal("arith output of another domain".into()))?;
    let failed = match (src::<T>(l)?, src::<T>(r)?) {
        (Src::Slice(a), Src::Slice(b)) => run_lanes(lanes, dst, |i| (a[i], b[i]), &f),
        (Src::Slice(a), Src::Const(y)) => run_lanes(lanes, dst, |i| (a[i], y), &f),
        (Src::Const(x), Src::Slice(b)) => run_lanes(lanes, dst, |i| (x, b[i]), &f),
        (Src::Const(x), Src::Const(y)) => run_lanes(lanes, dst, |_| (x, y), &f),
    };
    Ok(!failed.and(checked).is_empty())
}

/// The loop of [`lanewise`], monomorphised per operand shape.
#[inline(always)]
fn run_lanes<T: DomainValue>(
    lanes: usize,
    dst: &mut [T; LANES],
    get: impl Fn(usize) -> (T, T),
    f: &impl Fn(T, T) -> Option<T>,
) -> Bits {
    let mut failed = Bits::EMPTY;
    for (i, d) in dst.iter_mut().enumerate().take(lanes) {
        let (x, y) = get(i);
        match f(x, y) {
            Some(v) => *d = v,
            None => {
                *d = T::default();
                failed.set(i);
            }
        }
    }
    failed
}

/// Casts one value.
fn cast_one(v: Num, from: &DataType, to: &DataType) -> Result<Num> {
    let out_of_range = || Error::Overflow(format!("CAST of {v:?} from {from} to {to}"));
    Ok(match (v, to) {
        (_, t) if t == from => v,
        // To floats.
        (Num::I64(x), DataType::Float64) => Num::F64(x as f64),
        (Num::I64(x), DataType::Float32) => Num::F64(x as f32 as f64),
        (Num::U64(x), DataType::Float64) => Num::F64(x as f64),
        (Num::U64(x), DataType::Float32) => Num::F64(x as f32 as f64),
        (Num::F64(x), DataType::Float64) => Num::F64(x),
        (Num::F64(x), DataType::Float32) => Num::F64(x as f32 as f64),
        (Num::I128(x), DataType::Float32 | DataType::Float64) => {
            let DataType::Decimal128(_, s) = from else { return Err(out_of_range()) };
            let f = x as f64 / 10f64.powi(*s as i32);
            Num::F64(if matches!(to, DataType::Float32) { f as f32 as f64 } else { f })
        }
        // To decimals.
        (Num::I128(x), DataType::Decimal128(_, s2)) => {
            let DataType::Decimal128(_, s1) = from else { return Err(out_of_range()) };
            let scaled = x.checked_mul(pow10(s2 - s1)?).filter(|v| decimal_fits(*v, to));
            Num::I128(scaled.ok_or_else(out_of_range)?)
        }
        (Num::I64(x), DataType::Decimal128(_, s)) => {
            let scaled = (x as i128).checked_mul(pow10(*s)?).filter(|v| decimal_fits(*v, to));
            Num::I128(scaled.ok_or_else(out_of_range)?)
        }
        (Num::U64(x), DataType::Decimal128(_, s)) => {
            let scaled = (x as i128).checked_mul(pow10(*s)?).filter(|v| decimal_fits(*v, to));
            Num::I128(scaled.ok_or_else(out_of_range)?)
        }
        // To integers.
        (Num::U64(x), DataType::UInt64) => Num::U64(x),
        (Num::I64(x), DataType::UInt64) => Num::U64(u64::try_from(x).map_err(|_| out_of_range())?),
        (Num::F64(x), DataType::UInt64) => {
            if !(x > -1.0 && x < 18_446_744_073_709_551_616.0) {
                return Err(out_of_range());
            }
            Num::U64(x as u64)
        }
        (Num::U64(x), t) => {
            let (lo, hi) = IntWidth::of(t).range();
            let v = i64::try_from(x).map_err(|_| out_of_range())?;
            if v < lo || v > hi {
                return Err(out_of_range());
            }
            Num::I64(v)
        }
        (Num::I64(x), t) => {
            let (lo, hi) = IntWidth::of(t).range();
            if x < lo || x > hi {
                return Err(out_of_range());
            }
            Num::I64(x)
        }
        (Num::F64(x), t) => {
            let (lo, hi) = IntWidth::of(t).range();
            // Truncate toward zero; NaN and out-of-range values fail.
            let tr = x.trunc();
            if tr.is_nan() || tr < lo as f64 || tr >= hi as f64 + 1.0 {
                return Err(out_of_range());
            }
            Num::I64(tr as i64)
        }
        _ => return Err(Error::Unsupported(format!("CAST from {from} to {to}"))),
    })
}

fn cast_vector(v: &NumVector, from: &DataType, to: &DataType, active: &Bits, out: &mut NumVector) -> Result<()> {
    let checked = v.valid(active);
    // Integers and decimals to a decimal of the same or a larger scale:
    // one multiplication per lane, the factor and range found once. A
    // lane that fails is cast again below, for `cast_one`'s error.
    if let Some(factor) = decimal_upscale(from, to)? {
        let limit = decimal_limit(to);
        let scale = |x: i128| x.checked_mul(factor).filter(|s| within(*s, limit));
        let failed = match (&v.values, &mut out.values) {
            (Values::I128(src), Values::I128(dst)) => Some(scale_lanes(&src[..v.len], &mut dst[..v.len], scale)),
            (Values::I64(src), Values::I128(dst)) => {
                Some(scale_lanes(&src[..v.len], &mut dst[..v.len], |x: i64| scale(i128::from(x))))
            }
            _ => None,
        };
        if let Some(failed) = failed {
            if let Some(i) = (0..v.len).find(|&i| failed.get(i) && checked.get(i)) {
                let n = match &v.values {
                    Values::I128(s) => Num::I128(s[i]),
                    Values::I64(s) => Num::I64(s[i]),
                    _ => return Err(Error::Internal("cast input of another domain".into())),
                };
                // The same lane fails there, with its error.
                return cast_one(n, from, to).and(Err(Error::Internal("a cast failed once only".into())));
            }
            out.len = v.len;
            out.validity = v.validity;
            out.has_nulls = v.has_nulls;
            return Ok(());
        }
    }
    let get = |i: usize| -> Num {
        match &v.values {
            Values::I64(s) => Num::I64(s[i]),
            Values::U64(s) => Num::U64(s[i]),
            Values::F64(s) => Num::F64(s[i]),
            Values::I128(s) => Num::I128(s[i]),
        }
    };
    for i in 0..v.len {
        let c = match cast_one(get(i), from, to) {
            Ok(c) => c,
            Err(e) if checked.get(i) => return Err(e),
            Err(_) => continue,
        };
        match (&mut out.values, c) {
            (Values::I64(d), Num::I64(x)) => d[i] = x,
            (Values::U64(d), Num::U64(x)) => d[i] = x,
            (Values::F64(d), Num::F64(x)) => d[i] = x,
            (Values::I128(d), Num::I128(x)) => d[i] = x,
            _ => return Err(Error::Internal("cast output of another domain".into())),
        }
    }
    out.len = v.len;
    out.validity = v.validity;
    out.has_nulls = v.has_nulls;
    Ok(())
}

/// The factor of a cast from `from` to decimal type `to` that scales each
/// value up by a power of ten: a signed integer type or a decimal of
/// scale at most `to`'s. `None` for other casts.
fn decimal_upscale(from: &DataType, to: &DataType) -> Result<Option<i128>> {
    let DataType::Decimal128(_, s2) = to else { return Ok(None) };
    let s1 = match from {
        DataType::Decimal128(_, s1) => *s1,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => 0,
        _ => return Ok(None),
    };
    if from == to || s1 > *s2 {
        return Ok(None);
    }
    pow10(s2 - s1).map(Some)
}

/// `dst[i] = f(src[i])`, with the lanes where `f` fails set in the result
/// (their `dst` left 0).
fn scale_lanes<T: Copy>(src: &[T], dst: &mut [i128], f: impl Fn(T) -> Option<i128>) -> Bits {
    let mut failed = Bits::EMPTY;
    for (i, (d, &x)) in dst.iter_mut().zip(src).enumerate() {
        match f(x) {
            Some(v) => *d = v,
            None => {
                *d = 0;
                failed.set(i);
            }
        }
    }
    failed
}

#[cfg(test)]
mod tests;
