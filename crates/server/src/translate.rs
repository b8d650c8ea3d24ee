//! DataFusion expressions → quiverdb map expressions and predicates.
//!
//! Two sources: the logical filters a table scan receives (`Expr`), and
//! the physical expressions the pushdown rules meet (`PhysicalExpr`, whose
//! columns are positions in their input, mapped back to table columns).
//! Anything without an exact quiverdb equivalent translates to `None`, and
//! the caller leaves it to DataFusion.

use std::sync::Arc;

use arrow_array::Array;
use arrow_schema::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::{Between, Cast, InList, Like};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use datafusion::physical_expr::expressions::{
    BinaryExpr as PBinary, CaseExpr, CastExpr, Column as PColumn, DynamicFilterPhysicalExpr, InListExpr, IsNotNullExpr,
    IsNullExpr, LikeExpr, Literal as PLiteral, NotExpr,
};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use quiverdb_mapreducer::{ArithOp, MapExpr, Scalar};
use quiverdb_scan::{CmpOp, LikePattern, Predicate};
use quiverdb_storage::TableSchema;

use crate::checked::udf_op;
use crate::convert::scalar_for;

fn cmp_op(op: Operator) -> Option<CmpOp> {
    Some(match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::NotEq,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::LtEq,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::GtEq,
        _ => return None,
    })
}

/// `a op b` as `b op' a`.
fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::LtEq => CmpOp::GtEq,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::GtEq => CmpOp::LtEq,
        other => other,
    }
}

fn arith_op(op: Operator) -> Option<ArithOp> {
    Some(match op {
        Operator::Plus => ArithOp::Add,
        Operator::Minus => ArithOp::Sub,
        Operator::Multiply => ArithOp::Mul,
        Operator::Divide => ArithOp::Div,
        Operator::Modulo => ArithOp::Rem,
        _ => return None,
    })
}

/// Translates DataFusion expressions over one table.
pub(crate) struct Translator<'a> {
    schema: &'a TableSchema,
    /// For physical expressions: the map expression of each input column
    /// (`None` for a column quiverdb cannot compute).
    inputs: Option<&'a [Option<MapExpr>]>,
}

impl<'a> Translator<'a> {
    /// For logical expressions whose columns are table columns by name.
    pub(crate) fn logical(schema: &'a TableSchema) -> Self {
        Self { schema, inputs: None }
    }

    /// For physical expressions whose column `i` is `inputs[i]`.
    pub(crate) fn physical(schema: &'a TableSchema, inputs: &'a [Option<MapExpr>]) -> Self {
        Self { schema, inputs: Some(inputs) }
    }

    fn validated(&self, p: Predicate) -> Option<Predicate> {
        p.validate(self.schema).is_ok().then_some(p)
    }

    fn typed(&self, e: MapExpr) -> Option<(MapExpr, DataType)> {
        let t = e.data_type(self.schema).ok()?;
        Some((e, t))
    }

    // ---------------------------------------------------------------- logical

    /// A logical filter as a predicate, if quiverdb evaluates it exactly.
    pub(crate) fn predicate(&self, e: &Expr) -> Option<Predicate> {
        let p = self.predicate_inner(e)?;
        self.validated(p)
    }

    fn predicate_inner(&self, e: &Expr) -> Option<Predicate> {
        Some(match e {
            Expr::Literal(ScalarValue::Boolean(Some(b)), _) => Predicate::Const(*b),
            Expr::Literal(ScalarValue::Boolean(None) | ScalarValue::Null, _) => Predicate::Unknown,
            // A boolean column as a condition: `WHERE flag`.
            Expr::Column(_) => {
                let (m, t) = self.typed(self.map(e)?)?;
                if t != DataType::Boolean {
                    return None;
                }
                Predicate::cmp(m, CmpOp::Eq, Scalar::Boolean(true))
            }
            // Two-valued tests: IS [NOT] TRUE / FALSE / UNKNOWN.
            Expr::IsTrue(inner) | Expr::IsNotTrue(inner) | Expr::IsFalse(inner) | Expr::IsNotFalse(inner) => {
                let (m, t) = self.typed(self.map(inner)?)?;
                if t != DataType::Boolean {
                    return None;
                }
                let want = matches!(e, Expr::IsTrue(_) | Expr::IsNotTrue(_));
                let is = Predicate::And(vec![
                    Predicate::IsNotNull(m.clone()),
                    Predicate::cmp(m, CmpOp::Eq, Scalar::Boolean(want)),
                ]);
                if matches!(e, Expr::IsNotTrue(_) | Expr::IsNotFalse(_)) { is.negate() } else { is }
            }
            Expr::IsUnknown(inner) => Predicate::IsNull(self.map(inner)?),
            Expr::IsNotUnknown(inner) => Predicate::IsNotNull(self.map(inner)?),
            Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
                Predicate::And(vec![self.predicate_inner(left)?, self.predicate_inner(right)?])
            }
            Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
                Predicate::Or(vec![self.predicate_inner(left)?, self.predicate_inner(right)?])
            }
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let op = cmp_op(*op)?;
                match (left.as_ref(), right.as_ref()) {
                    (Expr::Literal(v, _), other) => {
                        let (m, t) = self.typed(self.map(other)?)?;
                        Predicate::cmp(m, flip(op), scalar_for(v, &t)?)
                    }
                    (other, Expr::Literal(v, _)) => {
                        let (m, t) = self.typed(self.map(other)?)?;
                        Predicate::cmp(m, op, scalar_for(v, &t)?)
                    }
                    _ => return None,
                }
            }
            Expr::Not(inner) => self.predicate_inner(inner)?.negate(),
            Expr::IsNull(inner) => Predicate::IsNull(self.map(inner)?),
            Expr::IsNotNull(inner) => Predicate::IsNotNull(self.map(inner)?),
            Expr::Between(Between { expr, negated, low, high }) => {
                let (m, t) = self.typed(self.map(expr)?)?;
                let (Expr::Literal(lo, _), Expr::Literal(hi, _)) = (low.as_ref(), high.as_ref()) else { return None };
                Predicate::Between { expr: m, low: scalar_for(lo, &t)?, high: scalar_for(hi, &t)?, negated: *negated }
            }
            Expr::InList(InList { expr, list, negated }) => {
                let (m, t) = self.typed(self.map(expr)?)?;
                let values = list
                    .iter()
                    .map(|v| match v {
                        Expr::Literal(v, _) => scalar_for(v, &t),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
                Predicate::InList { expr: m, values, negated: *negated }
            }
            Expr::Like(Like { negated, expr, pattern, escape_char: None, case_insensitive: false }) => {
                let m = self.map(expr)?;
                m.as_column()?;
                let Expr::Literal(p, _) = pattern.as_ref() else { return None };
                let pattern = LikePattern::parse(p.try_as_str().flatten()?)?;
                Predicate::Like { expr: m, pattern, negated: *negated }
            }
            _ => return None,
        })
    }

    /// A condition every row passing `e` also passes, for skipping rows
    /// before DataFusion evaluates `e` itself: `e` when it translates
    /// exactly, the literal prefix of a LIKE pattern, and the parts of an
    /// AND (or both sides of an OR) that have one.
    pub(crate) fn necessary(&self, e: &Expr) -> Option<Predicate> {
        let p = self.necessary_inner(e)?;
        self.validated(p)
    }

    fn necessary_inner(&self, e: &Expr) -> Option<Predicate> {
        if let Some(p) = self.predicate_inner(e) {
            return Some(p);
        }
        match e {
            Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
                match (self.necessary_inner(left), self.necessary_inner(right)) {
                    (Some(l), Some(r)) => Some(Predicate::And(vec![l, r])),
                    (Some(p), None) | (None, Some(p)) => Some(p),
                    (None, None) => None,
                }
            }
            Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
                Some(Predicate::Or(vec![self.necessary_inner(left)?, self.necessary_inner(right)?]))
            }
            Expr::Like(Like { negated: false, expr, pattern, escape_char: None, case_insensitive: false }) => {
                let m = self.map(expr)?;
                m.as_column()?;
                let Expr::Literal(p, _) = pattern.as_ref() else { return None };
                let pattern = LikePattern::necessary(p.try_as_str().flatten()?);
                Some(Predicate::Like { expr: m, pattern, negated: false })
            }
            _ => None,
        }
    }

    /// A logical value expression as a map expression.
    pub(crate) fn map(&self, e: &Expr) -> Option<MapExpr> {
        Some(match e {
            Expr::Column(c) => MapExpr::Column(self.schema.arrow().index_of(&c.name).ok()?),
            Expr::Literal(v, _) => {
                let t = v.data_type();
                MapExpr::lit(scalar_for(v, &t)?, t)
            }
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => self.map(left)?.arith(arith_op(*op)?, self.map(right)?),
            Expr::ScalarFunction(f) => match (udf_op(&f.func), f.args.as_slice()) {
                (Some(op), [left, right]) => self.map(left)?.arith(arith_op(op)?, self.map(right)?),
                _ => return None,
            },
            Expr::Cast(Cast { expr, field }) => self.map(expr)?.cast(field.data_type().clone()),
            _ => return None,
        })
    }

    // --------------------------------------------------------------- physical

    /// A physical value expression as a map expression.
    pub(crate) fn physical_map(&self, e: &Arc<dyn PhysicalExpr>) -> Option<MapExpr> {
        if let Some(c) = e.downcast_ref::<PColumn>() {
            return self.inputs?.get(c.index()).cloned().flatten();
        }
        if let Some(l) = e.downcast_ref::<PLiteral>() {
            let t = l.value().data_type();
            return Some(MapExpr::lit(scalar_for(l.value(), &t)?, t));
        }
        if let Some(b) = e.downcast_ref::<PBinary>() {
            return Some(self.physical_map(b.left())?.arith(arith_op(*b.op())?, self.physical_map(b.right())?));
        }
        if let Some(f) = e.downcast_ref::<ScalarFunctionExpr>()
            && let (Some(op), [left, right]) = (udf_op(f.fun()), f.args())
        {
            return Some(self.physical_map(left)?.arith(arith_op(op)?, self.physical_map(right)?));
        }
        if let Some(c) = e.downcast_ref::<CastExpr>() {
            return Some(self.physical_map(c.expr())?.cast(c.cast_type().clone()));
        }
        None
    }

    /// A condition every row passing the physical `e` passes, for
    /// skipping rows before `e` itself is known or evaluated: `e` when it
    /// translates exactly, the parts of an AND that translate, both sides
    /// of an OR, every branch of a CASE (a row passes one of them), and a
    /// dynamic filter's current expression.
    pub(crate) fn physical_necessary(&self, e: &Arc<dyn PhysicalExpr>) -> Option<Predicate> {
        let p = self.physical_necessary_inner(e)?;
        self.validated(p)
    }

    fn physical_necessary_inner(&self, e: &Arc<dyn PhysicalExpr>) -> Option<Predicate> {
        if let Some(d) = e.downcast_ref::<DynamicFilterPhysicalExpr>() {
            return self.physical_necessary_inner(&d.current().ok()?);
        }
        if let Some(p) = self.physical_predicate(e) {
            return Some(p);
        }
        if let Some(b) = e.downcast_ref::<PBinary>() {
            return match b.op() {
                Operator::And => {
                    match (self.physical_necessary_inner(b.left()), self.physical_necessary_inner(b.right())) {
                        (Some(l), Some(r)) => Some(l.and(r)),
                        (Some(p), None) | (None, Some(p)) => Some(p),
                        (None, None) => None,
                    }
                }
                Operator::Or => {
                    Some(self.physical_necessary_inner(b.left())?.or(self.physical_necessary_inner(b.right())?))
                }
                _ => None,
            };
        }
        if let Some(i) = e.downcast_ref::<InListExpr>() {
            return self.struct_in_list_necessary(i);
        }
        if let Some(c) = e.downcast_ref::<CaseExpr>() {
            // Without an ELSE, a row no WHEN matches is NULL: not passing.
            let mut branches = Vec::new();
            for t in c.when_then_expr().iter().map(|(_, t)| t).chain(c.else_expr()) {
                branches.push(self.physical_necessary_inner(t)?);
            }
            return Some(Predicate::Or(branches));
        }
        None
    }

    /// `struct(a, b, …) IN (SET) ([{c0: …, c1: …}, …])`, a hash join's
    /// dynamic filter on several keys, as what it implies of each key:
    /// `a IN (the c0 values) AND b IN (the c1 values) …`. A key whose
    /// values include a NULL, or that is not a column quiverdb computes,
    /// is left out (its IN would not be implied), as is a NULL entry
    /// (it matches nothing).
    fn struct_in_list_necessary(&self, i: &InListExpr) -> Option<Predicate> {
        if i.negated() {
            return None;
        }
        let f = i.expr().downcast_ref::<ScalarFunctionExpr>()?;
        if f.name() != "struct" {
            return None;
        }
        let mut entries = Vec::with_capacity(i.list().len());
        for v in i.list() {
            match v.downcast_ref::<PLiteral>()?.value() {
                ScalarValue::Struct(s) if s.len() == 1 && s.num_columns() == f.args().len() => {
                    if s.is_valid(0) {
                        entries.push(Arc::clone(s));
                    }
                }
                _ => return None,
            }
        }
        let mut keys = Vec::new();
        for (field, arg) in f.args().iter().enumerate() {
            let Some((m, t)) = self.physical_map(arg).and_then(|m| self.typed(m)) else { continue };
            let values = entries
                .iter()
                .map(|s| ScalarValue::try_from_array(s.column(field), 0).ok().filter(|v| !v.is_null()))
                .map(|v| v.and_then(|v| scalar_for(&v, &t)))
                .collect::<Option<Vec<_>>>();
            if let Some(values) = values {
                keys.push(Predicate::InList { expr: m, values, negated: false });
            }
        }
        match keys.len() {
            0 => None,
            1 => keys.pop(),
            _ => Some(Predicate::And(keys)),
        }
    }

    /// A physical boolean expression as a predicate.
    pub(crate) fn physical_predicate(&self, e: &Arc<dyn PhysicalExpr>) -> Option<Predicate> {
        let p = self.physical_predicate_inner(e)?;
        self.validated(p)
    }

    fn physical_predicate_inner(&self, e: &Arc<dyn PhysicalExpr>) -> Option<Predicate> {
        if let Some(l) = e.downcast_ref::<PLiteral>() {
            return match l.value() {
                ScalarValue::Boolean(Some(b)) => Some(Predicate::Const(*b)),
                ScalarValue::Boolean(None) | ScalarValue::Null => Some(Predicate::Unknown),
                _ => None,
            };
        }
        if e.downcast_ref::<PColumn>().is_some() {
            let (m, t) = self.typed(self.physical_map(e)?)?;
            return (t == DataType::Boolean).then(|| Predicate::cmp(m, CmpOp::Eq, Scalar::Boolean(true)));
        }
        if let Some(b) = e.downcast_ref::<PBinary>() {
            return Some(match b.op() {
                Operator::And => Predicate::And(vec![
                    self.physical_predicate_inner(b.left())?,
                    self.physical_predicate_inner(b.right())?,
                ]),
                Operator::Or => Predicate::Or(vec![
                    self.physical_predicate_inner(b.left())?,
                    self.physical_predicate_inner(b.right())?,
                ]),
                op => {
                    let op = cmp_op(*op)?;
                    if let Some(l) = b.right().downcast_ref::<PLiteral>() {
                        let (m, t) = self.typed(self.physical_map(b.left())?)?;
                        Predicate::cmp(m, op, scalar_for(l.value(), &t)?)
                    } else if let Some(l) = b.left().downcast_ref::<PLiteral>() {
                        let (m, t) = self.typed(self.physical_map(b.right())?)?;
                        Predicate::cmp(m, flip(op), scalar_for(l.value(), &t)?)
                    } else {
                        return None;
                    }
                }
            });
        }
        if let Some(n) = e.downcast_ref::<NotExpr>() {
            return Some(self.physical_predicate_inner(n.arg())?.negate());
        }
        if let Some(n) = e.downcast_ref::<IsNullExpr>() {
            return Some(Predicate::IsNull(self.physical_map(n.arg())?));
        }
        if let Some(n) = e.downcast_ref::<IsNotNullExpr>() {
            return Some(Predicate::IsNotNull(self.physical_map(n.arg())?));
        }
        if let Some(i) = e.downcast_ref::<InListExpr>() {
            let (m, t) = self.typed(self.physical_map(i.expr())?)?;
            let values = i
                .list()
                .iter()
                .map(|v| v.downcast_ref::<PLiteral>().and_then(|l| scalar_for(l.value(), &t)))
                .collect::<Option<Vec<_>>>()?;
            return Some(Predicate::InList { expr: m, values, negated: i.negated() });
        }
        if let Some(l) = e.downcast_ref::<LikeExpr>() {
            if l.case_insensitive() {
                return None;
            }
            let m = self.physical_map(l.expr())?;
            m.as_column()?;
            let pattern = l.pattern().downcast_ref::<PLiteral>()?.value().try_as_str().flatten()?;
            return Some(Predicate::Like { expr: m, pattern: LikePattern::parse(pattern)?, negated: l.negated() });
        }
        None
    }
}
