//! Predicates: the scan's own typed filter expressions.
//!
//! Comparisons of a map expression with a literal, BETWEEN, IN-lists, IS
//! [NOT] NULL and LIKE with literal text and `%` wildcards, combined with
//! AND, OR and NOT, under SQL's three-valued logic: a comparison with a
//! NULL value is NULL, `NOT NULL` is NULL, and only TRUE rows pass the
//! filter.

use arrow_schema::DataType;
use quiverdb_mapreducer::{Domain, MapExpr, Scalar};
use quiverdb_storage::TableSchema;

use crate::error::{Error, Result};
use crate::like::LikePattern;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `<>`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

impl std::fmt::Display for CmpOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CmpOp::Eq => "=",
            CmpOp::NotEq => "<>",
            CmpOp::Lt => "<",
            CmpOp::LtEq => "<=",
            CmpOp::Gt => ">",
            CmpOp::GtEq => ">=",
        })
    }
}

/// A filter over the rows of one table.
#[derive(Debug, Clone, PartialEq)]
pub enum Predicate {
    /// A constant (from folding); `Const(false)` matches nothing.
    Const(bool),
    /// SQL's NULL as a condition (`WHERE NULL`, `x = 1 OR NULL`): neither
    /// true nor false, and so is its negation.
    Unknown,
    /// `expr op value`.
    Compare {
        /// Left side.
        expr: MapExpr,
        /// Operator.
        op: CmpOp,
        /// A literal of the expression's type.
        value: Scalar,
    },
    /// `expr [NOT] BETWEEN low AND high` (inclusive).
    Between {
        /// The tested expression.
        expr: MapExpr,
        /// Lower bound.
        low: Scalar,
        /// Upper bound.
        high: Scalar,
        /// `NOT BETWEEN`.
        negated: bool,
    },
    /// `expr [NOT] IN (values)`.
    InList {
        /// The tested expression.
        expr: MapExpr,
        /// Literals of the expression's type.
        values: Vec<Scalar>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `expr IS NULL`.
    IsNull(MapExpr),
    /// `expr IS NOT NULL`.
    IsNotNull(MapExpr),
    /// `column [NOT] LIKE pattern` on a string or binary column, for a
    /// pattern of literals and `%` wildcards.
    Like {
        /// The tested column (a plain column reference).
        expr: MapExpr,
        /// The pattern.
        pattern: LikePattern,
        /// `NOT LIKE`.
        negated: bool,
    },
    /// All of them.
    And(Vec<Predicate>),
    /// Any of them.
    Or(Vec<Predicate>),
    /// The negation.
    Not(Box<Predicate>),
}

impl Predicate {
    /// `expr op value`.
    pub fn cmp(expr: MapExpr, op: CmpOp, value: Scalar) -> Self {
        Predicate::Compare { expr, op, value }
    }

    /// `self AND other`, flat: an operand that is itself an AND gives its
    /// terms (a chain of a thousand ANDs is one level, not a thousand).
    pub fn and(self, other: Predicate) -> Self {
        let terms = |p| if let Predicate::And(v) = p { v } else { vec![p] };
        let mut all = terms(self);
        all.extend(terms(other));
        Predicate::And(all)
    }

    /// `self OR other`, flat as [`Self::and`] is.
    pub fn or(self, other: Predicate) -> Self {
        let terms = |p| if let Predicate::Or(v) = p { v } else { vec![p] };
        let mut all = terms(self);
        all.extend(terms(other));
        Predicate::Or(all)
    }

    /// `NOT self`.
    pub fn negate(self) -> Self {
        Predicate::Not(Box::new(self))
    }

    /// Appends the columns the predicate reads to `out`.
    pub fn columns(&self, out: &mut Vec<usize>) {
        match self {
            Predicate::Const(_) | Predicate::Unknown => {}
            Predicate::Compare { expr, .. }
            | Predicate::Between { expr, .. }
            | Predicate::InList { expr, .. }
            | Predicate::IsNull(expr)
            | Predicate::IsNotNull(expr)
            | Predicate::Like { expr, .. } => expr.columns(out),
            Predicate::And(v) | Predicate::Or(v) => v.iter().for_each(|p| p.columns(out)),
            Predicate::Not(p) => p.columns(out),
        }
    }

    /// Checks types against `schema`: operands and literals agree, string
    /// tests are on plain string columns.
    pub fn validate(&self, schema: &TableSchema) -> Result<()> {
        let literal_ok = |t: &DataType, v: &Scalar| -> bool {
            v.is_null()
                || match Domain::of(t) {
                    // Any integer literal compares with an integer type (a
                    // value beyond the type's range is simply never equal).
                    Some(Domain::I64 | Domain::U64) if matches!(v, Scalar::Int(_) | Scalar::UInt(_)) => {
                        !matches!(t, DataType::Boolean)
                    }
                    Some(d) => v.to_num(d).is_some(),
                    None => v.as_bytes().is_some(),
                }
        };
        let expr_type = |e: &MapExpr| -> Result<DataType> {
            let t = e.data_type(schema)?;
            if Domain::of(&t).is_none() && e.as_column().is_none() {
                return Err(Error::Unsupported(format!("a predicate on computed {t}")));
            }
            Ok(t)
        };
        let check = |t: &DataType, v: &Scalar| {
            if literal_ok(t, v) {
                Ok(())
            } else {
                Err(Error::InvalidPredicate(format!("literal {v:?} is not a value of type {t}")))
            }
        };
        match self {
            Predicate::Const(_) | Predicate::Unknown => Ok(()),
            Predicate::Compare { expr, value, .. } => check(&expr_type(expr)?, value),
            Predicate::Between { expr, low, high, .. } => {
                let t = expr_type(expr)?;
                check(&t, low)?;
                check(&t, high)
            }
            Predicate::InList { expr, values, .. } => {
                let t = expr_type(expr)?;
                values.iter().try_for_each(|v| check(&t, v))
            }
            Predicate::IsNull(expr) | Predicate::IsNotNull(expr) => expr_type(expr).map(|_| ()),
            Predicate::Like { expr, .. } => {
                let t = expr_type(expr)?;
                if Domain::of(&t).is_some() {
                    return Err(Error::InvalidPredicate(format!("LIKE on {t}")));
                }
                Ok(())
            }
            Predicate::And(v) | Predicate::Or(v) => v.iter().try_for_each(|p| p.validate(schema)),
            Predicate::Not(p) => p.validate(schema),
        }
    }
}

impl std::fmt::Display for Predicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lit = |v: &Scalar| match v {
            Scalar::Bytes(b) => format!("'{}'", String::from_utf8_lossy(b)),
            Scalar::Null => "NULL".into(),
            Scalar::Boolean(b) => b.to_string(),
            Scalar::Int(x) => x.to_string(),
            Scalar::UInt(x) => x.to_string(),
            Scalar::Float(x) => x.to_string(),
            Scalar::Decimal(x) => format!("{x}d"),
        };
        let join = |v: &[Predicate], sep: &str| v.iter().map(|p| format!("({p})")).collect::<Vec<_>>().join(sep);
        match self {
            Predicate::Const(b) => write!(f, "{b}"),
            Predicate::Unknown => write!(f, "NULL"),
            Predicate::Compare { expr, op, value } => write!(f, "{expr} {op} {}", lit(value)),
            Predicate::Between { expr, low, high, negated } => {
                write!(f, "{expr} {}BETWEEN {} AND {}", if *negated { "NOT " } else { "" }, lit(low), lit(high))
            }
            Predicate::InList { expr, values, negated } => {
                let shown: Vec<String> = values.iter().take(5).map(lit).collect();
                let more = if values.len() > 5 { format!(", … {} values", values.len()) } else { String::new() };
                write!(f, "{expr} {}IN ({}{more})", if *negated { "NOT " } else { "" }, shown.join(", "))
            }
            Predicate::IsNull(e) => write!(f, "{e} IS NULL"),
            Predicate::IsNotNull(e) => write!(f, "{e} IS NOT NULL"),
            Predicate::Like { expr, pattern, negated } => {
                write!(f, "{expr} {}LIKE '{pattern}'", if *negated { "NOT " } else { "" })
            }
            Predicate::And(v) => f.write_str(&join(v, " AND ")),
            Predicate::Or(v) => f.write_str(&join(v, " OR ")),
            Predicate::Not(p) => write!(f, "NOT ({p})"),
        }
    }
}
