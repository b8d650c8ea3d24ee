//! Integer arithmetic that fails on overflow instead of wrapping.
//!
//! DataFusion evaluates `+`, `-` and `*` on integers with Arrow's wrapping
//! kernels (its `BinaryExpr` can check, but nothing sets it), and folds
//! constants the same way: `CAST(9223372036854775807 AS BIGINT) + 1` was
//! -9223372036854775808. quiverdb reports overflow instead, as its SUM
//! does: the analyzer rule [`CheckedIntegers`] replaces each such operation
//! (and negation, which wraps `-(-128)` the same way) on integers, after
//! type coercion so on its final types, with a call of
//! [`CheckedArithmetic`], which runs Arrow's checked kernels. The call is
//! named as the operation was (`a + b`), so results look the same;
//! constant folding meets the overflow as an error and leaves the call to
//! fail when the query runs. quiverdb's own kernels check the same way
//! (`quiverdb_mapreducer`'s map expressions), and the scan translation
//! maps the call back to them.

use std::sync::Arc;

use arrow_schema::{DataType, Field, FieldRef};
use datafusion::arrow::compute::kernels::numeric::{add, mul, neg, sub};
use datafusion::common::ScalarValue;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr_common::datum::apply;

/// `left op right` (`checked_add`, `checked_sub`, `checked_mul`) or `-x`
/// (`checked_neg`) on integers, an error on overflow.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct CheckedArithmetic {
    /// The binary operator checked; `None`: negation.
    op: Option<Operator>,
    signature: Signature,
}

impl CheckedArithmetic {
    /// The checked form of binary `op`, if it has one.
    fn binary(op: Operator) -> Option<Self> {
        matches!(op, Operator::Plus | Operator::Minus | Operator::Multiply)
            .then(|| Self { op: Some(op), signature: Signature::any(2, Volatility::Immutable) })
    }

    /// Checked negation.
    fn negation() -> Self {
        Self { op: None, signature: Signature::any(1, Volatility::Immutable) }
    }

    /// The binary operator this function checks (`None` for negation).
    pub(crate) fn op(&self) -> Option<Operator> {
        self.op
    }
}

impl ScalarUDFImpl for CheckedArithmetic {
    fn name(&self) -> &str {
        match self.op {
            Some(Operator::Plus) => "checked_add",
            Some(Operator::Minus) => "checked_sub",
            Some(_) => "checked_mul",
            None => "checked_neg",
        }
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        call_name(self.name(), &self.op.map_or_else(|| "-".to_string(), |op| op.to_string()), args)
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Null))
    }

    /// NULL only where an operand is: the nullability of the operation.
    fn return_field_from_args(&self, args: ReturnFieldArgs<'_>) -> Result<FieldRef> {
        let data_type = args.arg_fields.first().map_or(DataType::Null, |f| f.data_type().clone());
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(Field::new(self.name(), data_type, nullable)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match (self.op, args.args.as_slice()) {
            (Some(Operator::Plus), [left, right]) => apply(left, right, add),
            (Some(Operator::Minus), [left, right]) => apply(left, right, sub),
            (Some(_), [left, right]) => apply(left, right, mul),
            (None, [ColumnarValue::Array(a)]) => Ok(ColumnarValue::Array(neg(a)?)),
            (None, [ColumnarValue::Scalar(v)]) => {
                Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&neg(&v.to_array()?)?, 0)?))
            }
            _ => Err(datafusion::error::DataFusionError::Internal(format!("{}: wrong arguments", self.name()))),
        }
    }
}

/// Replaces integer `+`, `-` and `*` with [`CheckedArithmetic`] calls and
/// integer negation with its `checked_neg` (see the module
/// documentation). Runs after DataFusion's type coercion.
#[derive(Debug)]
pub(crate) struct CheckedIntegers;

impl AnalyzerRule for CheckedIntegers {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        let functions: Vec<(Operator, Arc<ScalarUDF>)> = [Operator::Plus, Operator::Minus, Operator::Multiply]
            .into_iter()
            .filter_map(|op| Some((op, Arc::new(ScalarUDF::new_from_impl(CheckedArithmetic::binary(op)?)))))
            .collect();
        let checked = |op: Operator| functions.iter().find(|(o, _)| *o == op).map(|(_, f)| Arc::clone(f));
        let negation = Arc::new(ScalarUDF::new_from_impl(CheckedArithmetic::negation()));
        plan.transform_up_with_subqueries(|node| {
            let mut schema = merge_schema(&node.inputs());
            if let LogicalPlan::TableScan(scan) = &node {
                // A scan's filters read the table's columns.
                schema.merge(scan.projected_schema.as_ref());
            }
            let names = NamePreserver::new(&node);
            node.map_expressions(|e| {
                let name = names.save(&e);
                let rewritten = e.transform_up(|e| {
                    if let Expr::Negative(x) = &e {
                        if !x.get_type(&schema).is_ok_and(|t| t.is_signed_integer()) {
                            return Ok(Transformed::no(e));
                        }
                        let call = ScalarFunction::new_udf(Arc::clone(&negation), vec![x.as_ref().clone()]);
                        return Ok(Transformed::yes(Expr::ScalarFunction(call)));
                    }
                    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else { return Ok(Transformed::no(e)) };
                    let Some(function) = checked(*op) else { return Ok(Transformed::no(e)) };
                    // After type coercion both sides have the result's type.
                    let (l, r) = (left.get_type(&schema).ok(), right.get_type(&schema).ok());
                    if !(l.as_ref().is_some_and(DataType::is_integer) && l == r) {
                        return Ok(Transformed::no(e));
                    }
                    let args = vec![left.as_ref().clone(), right.as_ref().clone()];
                    Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(function, args))))
                })?;
                Ok(rewritten.update_data(|e| name.restore(e)))
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "quiverdb_checked_integers"
    }
}

/// Operations whose operands hold at most this many expression nodes are
/// named as DataFusion names the operation they replace.
const EXACT_NAME_NODES: usize = 64;

/// The name of a checked call: the replaced operation's (`t.a + t.b`,
/// `(- t.a)`) for small operands; for larger ones a short name spelling
/// out only direct columns and constants. DataFusion derives the field of
/// a function call from its arguments' fields, names included, at every
/// level of a nested expression: names spelling out whole operands would
/// make a chain of n operations cost n³. Where a short name is a column's,
/// the rule keeps the operation's own name as an alias.
fn call_name(function: &str, op: &str, args: &[Expr]) -> Result<String> {
    let mut nodes = 0;
    for arg in args {
        arg.apply(|_| {
            nodes += 1;
            Ok(if nodes > EXACT_NAME_NODES { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
        })?;
    }
    if nodes <= EXACT_NAME_NODES {
        return Ok(match args {
            [x] => format!("({op} {})", x.schema_name()),
            [left, right] => format!("{} {op} {}", left.schema_name(), right.schema_name()),
            _ => format!("{function}()"),
        });
    }
    let operand = |e: &Expr| match e {
        Expr::Column(c) => c.flat_name(),
        Expr::Literal(v, _) => format!("{v:?}"),
        other => other.variant_name().to_string(),
    };
    Ok(format!("{function}({})", args.iter().map(operand).collect::<Vec<_>>().join(", ")))
}

/// The operator of a [`CheckedArithmetic`] function.
pub(crate) fn udf_op(f: &ScalarUDF) -> Option<Operator> {
    f.inner().downcast_ref::<CheckedArithmetic>().and_then(CheckedArithmetic::op)
}

#[cfg(test)]
mod tests {
    use quiverdb_storage::Database;

    #[tokio::test]
    async fn checked_operations_keep_names_types_and_nullability() {
        let ctx = crate::session_context(&Database::new());
        ctx.sql("CREATE TABLE t (a BIGINT NOT NULL, b BIGINT, c TINYINT NOT NULL)").await.unwrap();
        let df = ctx.sql("SELECT a + b, a - 1, c * c, -a, -c, a + 1.5, (a + 1) * 2 AS k FROM t").await.unwrap();
        let written = df.schema().clone();
        let optimized = df.into_optimized_plan().unwrap();
        assert_eq!(optimized.schema().as_ref(), &written);
        let text = optimized.display_indent().to_string();
        for f in ["checked_add", "checked_sub", "checked_mul", "checked_neg"] {
            assert!(text.contains(f), "{f} in {text}");
        }
        // Floats keep DataFusion's operator.
        assert!(text.contains("CAST(t.a AS Float64) + Float64(1.5)"), "{text}");
    }
}
