//! Scalar functions whose result can be far larger than their arguments,
//! bounded before they build it.
//!
//! `repeat('x', 2000000000)` is a 30-byte statement that asks for 2 GB
//! (and, through the copies on its way, several times that). DataFusion's
//! memory pool bounds operators' state, not the values functions build, so
//! each function whose result grows with an integer argument is wrapped:
//! the wrapper computes how many bytes the call would build from its
//! arguments and refuses (`ResourcesExhausted`, the server unharmed) a call
//! over the session's memory limit — or [`DEFAULT_MAX_RESULT_BYTES`] when
//! the session has none — before anything is allocated.
//!
//! ```text
//!   repeat(s, n)                Σ len(s) × n
//!   lpad / rpad(s, n [, fill])  Σ n × 4 (a character is at most 4 bytes)
//!   array_repeat(v, n)          Σ size(v) × n
//!   array_resize(l, n [, v])    Σ size(v) × n (8 bytes per element at least)
//!   range / generate_series     Σ elements × 8, of integer ranges
//! ```
//!
//! Everything else about a wrapped function (its signature, types,
//! simplification, documentation) is the function's own. Constant
//! arguments are checked when the optimizer folds the call, so such a
//! statement fails at planning.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{DataFusionError, ExprSchema, Result, ScalarValue};
use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::preimage::PreimageResult;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ExpressionPlacement, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, StructFieldMapping,
};

/// The bound on one call's result when the session has no memory limit.
pub(crate) const DEFAULT_MAX_RESULT_BYTES: usize = 1 << 30;

/// How a function's result size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(s, n)`.
    Repeat,
    /// `lpad` / `rpad(s, n [, fill])`.
    Pad,
    /// `array_repeat(v, n)`.
    ArrayRepeat,
    /// `array_resize(l, n [, v])`.
    ArrayResize,
    /// `range` / `generate_series(start, stop [, step])`.
    Range,
}

/// The functions wrapped, by name.
const GROWING: [(&str, Growth); 7] = [
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("array_repeat", Growth::ArrayRepeat),
    ("array_resize", Growth::ArrayResize),
    ("range", Growth::Range),
    ("generate_series", Growth::Range),
];

/// Replaces `state`'s functions that build results larger than their
/// arguments with bounded ones: no call may build more than `limit` bytes
/// (the session's memory limit), or [`DEFAULT_MAX_RESULT_BYTES`].
pub(crate) fn bound_functions(state: &mut SessionState, limit: Option<usize>) {
    let limit = limit.unwrap_or(DEFAULT_MAX_RESULT_BYTES);
    for (name, growth) in GROWING {
        let Some(inner) = state.scalar_functions().get(name).cloned() else { continue };
        let bounded = ScalarUDF::new_from_impl(Bounded { inner, growth, limit });
        if let Err(e) = state.register_udf(Arc::new(bounded)) {
            tracing::warn!("function {name} stays unbounded: {e}");
        }
    }
}

/// A function whose result is checked against `limit` before it is built.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: Arc<ScalarUDF>,
    growth: Growth,
    limit: usize,
}

impl Bounded {
    fn check(&self, args: &[ColumnarValue], rows: usize) -> Result<()> {
        let bytes = self.estimate(args, rows);
        if bytes > self.limit as u128 {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "{}() would build {bytes} bytes, more than the {} bytes a query may use",
                self.inner.name(),
                self.limit
            )));
        }
        Ok(())
    }

    /// Bytes the call would build over `rows` rows (an upper bound, in
    /// u128 so no product overflows).
    fn estimate(&self, args: &[ColumnarValue], rows: usize) -> u128 {
        let counts = |i: usize| counts(args.get(i), rows);
        match self.growth {
            Growth::Repeat => {
                let sizes = value_sizes(args.first(), rows);
                sizes.iter().zip(counts(1)).map(|(&s, n)| s as u128 * n as u128).sum()
            }
            Growth::Pad => counts(1).iter().map(|&n| n as u128 * 4).sum(),
            Growth::ArrayRepeat => {
                let sizes = value_sizes(args.first(), rows);
                sizes.iter().zip(counts(1)).map(|(&s, n)| s.max(1) as u128 * n as u128).sum()
            }
            Growth::ArrayResize => {
                let sizes = value_sizes(args.get(2), rows);
                counts(1)
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| sizes.get(i).copied().unwrap_or(8).max(8) as u128 * n as u128)
                    .sum()
            }
            Growth::Range => range_elements(args, rows) * 8,
        }
    }
}

/// The non-negative integer values of argument `arg` over `rows` rows
/// (0 where NULL, negative or not an integer).
fn counts(arg: Option<&ColumnarValue>, rows: usize) -> Vec<u64> {
    let Some(arg) = arg else { return vec![0; rows] };
    let Ok(array) = arg.to_array(rows) else { return vec![0; rows] };
    let Ok(ints) = arrow_cast::cast(&array, &DataType::Int64) else { return vec![0; rows] };
    let ints = ints.as_primitive::<Int64Type>();
    (0..rows).map(|i| if ints.is_null(i) { 0 } else { ints.value(i).max(0) as u64 }).collect()
}

/// Bytes of each row's value of argument `arg` (its string or binary
/// length, or its in-memory size for other values).
fn value_sizes(arg: Option<&ColumnarValue>, rows: usize) -> Vec<usize> {
    match arg {
        None => vec![0; rows],
        Some(ColumnarValue::Scalar(s)) => vec![scalar_bytes(s); rows],
        Some(ColumnarValue::Array(a)) => array_value_sizes(a),
    }
}

fn scalar_bytes(s: &ScalarValue) -> usize {
    match s {
        ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => {
            v.as_ref().map_or(0, String::len)
        }
        ScalarValue::Binary(v) | ScalarValue::LargeBinary(v) | ScalarValue::BinaryView(v) => {
            v.as_ref().map_or(0, Vec::len)
        }
        other => other.size().saturating_sub(size_of::<ScalarValue>()).max(8),
    }
}

fn array_value_sizes(a: &ArrayRef) -> Vec<usize> {
    let len = |i: usize, l: usize| if a.is_null(i) { 0 } else { l };
    match a.data_type() {
        DataType::Utf8 => (0..a.len()).map(|i| len(i, a.as_string::<i32>().value(i).len())).collect(),
        DataType::LargeUtf8 => (0..a.len()).map(|i| len(i, a.as_string::<i64>().value(i).len())).collect(),
        DataType::Utf8View => (0..a.len()).map(|i| len(i, a.as_string_view().value(i).len())).collect(),
        DataType::Binary => (0..a.len()).map(|i| len(i, a.as_binary::<i32>().value(i).len())).collect(),
        DataType::LargeBinary => (0..a.len()).map(|i| len(i, a.as_binary::<i64>().value(i).len())).collect(),
        DataType::BinaryView => (0..a.len()).map(|i| len(i, a.as_binary_view().value(i).len())).collect(),
        _ => {
            // Other values: the array's bytes spread over its rows.
            let per_row = a.get_array_memory_size().div_ceil(a.len().max(1));
            vec![per_row; a.len()]
        }
    }
}

/// Elements of the integer ranges `range(start, stop [, step])` builds
/// over `rows` rows; other ranges (of dates and timestamps) count as their
/// arguments' rows, as DataFusion bounds them by their step.
fn range_elements(args: &[ColumnarValue], rows: usize) -> u128 {
    let ints = |i: usize| -> Option<Vec<Option<i64>>> {
        let array = args.get(i)?.to_array(rows).ok()?;
        if !array.data_type().is_integer() {
            return None;
        }
        let ints = arrow_cast::cast(&array, &DataType::Int64).ok()?;
        let ints = ints.as_primitive::<Int64Type>();
        Some((0..rows).map(|r| ints.is_valid(r).then(|| ints.value(r))).collect())
    };
    let (start, stop, step) = match args.len() {
        1 => (Some(vec![Some(0); rows]), ints(0), Some(vec![Some(1); rows])),
        2 => (ints(0), ints(1), Some(vec![Some(1); rows])),
        _ => (ints(0), ints(1), ints(2)),
    };
    let (Some(start), Some(stop), Some(step)) = (start, stop, step) else { return rows as u128 };
    (0..rows)
        .map(|r| match (start[r], stop[r], step[r]) {
            (Some(a), Some(b), Some(s)) if s != 0 => {
                (i128::from(b) - i128::from(a)).unsigned_abs() / s.unsigned_abs() as u128 + 1
            }
            _ => 0,
        })
        .sum()
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn display_name(&self, args: &[Expr]) -> Result<String> {
        #[expect(deprecated)]
        self.inner.inner().display_name(args)
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.inner().schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.inner().return_type(arg_types)
    }

    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let updated = self.inner.inner().with_updated_config(config)?;
        Some(ScalarUDF::new_from_impl(Bounded { inner: Arc::new(updated), growth: self.growth, limit: self.limit }))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs<'_>) -> Result<FieldRef> {
        self.inner.inner().return_field_from_args(args)
    }

    fn is_nullable(&self, args: &[Expr], schema: &dyn ExprSchema) -> bool {
        #[expect(deprecated)]
        self.inner.inner().is_nullable(args, schema)
    }

    fn is_strict(&self) -> bool {
        self.inner.inner().is_strict()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.check(&args.args, args.number_rows)?;
        self.inner.inner().invoke_with_args(args)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        self.inner.inner().simplify(args, info)
    }

    fn preimage(&self, args: &[Expr], lit_expr: &Expr, info: &SimplifyContext) -> Result<PreimageResult> {
        self.inner.inner().preimage(args, lit_expr, info)
    }

    fn short_circuits(&self) -> bool {
        self.inner.inner().short_circuits()
    }

    fn conditional_arguments<'a>(&self, args: &'a [Expr]) -> Option<(Vec<&'a Expr>, Vec<&'a Expr>)> {
        self.inner.inner().conditional_arguments(args)
    }

    fn struct_field_mapping(&self, literal_args: &[Option<ScalarValue>]) -> Option<StructFieldMapping> {
        self.inner.inner().struct_field_mapping(literal_args)
    }

    fn placement(&self, args: &[ExpressionPlacement]) -> ExpressionPlacement {
        self.inner.inner().placement(args)
    }

    fn evaluate_bounds(&self, input: &[&Interval]) -> Result<Interval> {
        self.inner.inner().evaluate_bounds(input)
    }

    fn propagate_constraints(&self, interval: &Interval, inputs: &[&Interval]) -> Result<Option<Vec<Interval>>> {
        self.inner.inner().propagate_constraints(interval, inputs)
    }

    fn output_ordering(&self, inputs: &[ExprProperties]) -> Result<SortProperties> {
        self.inner.inner().output_ordering(inputs)
    }

    fn preserves_lex_ordering(&self, inputs: &[ExprProperties]) -> Result<bool> {
        self.inner.inner().preserves_lex_ordering(inputs)
    }

    fn strictly_order_preserving(&self, inputs: &[ExprProperties]) -> Result<bool> {
        self.inner.inner().strictly_order_preserving(inputs)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.inner().coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.inner().documentation()
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use crate::SessionOptions;

    async fn run(ctx: &SessionContext, sql: &str) -> datafusion::common::Result<usize> {
        let batches = ctx.sql(sql).await?.collect().await?;
        Ok(batches.iter().map(|b| b.num_rows()).sum())
    }

    #[tokio::test]
    async fn growing_functions_stop_at_the_memory_limit() {
        let db = quiverdb_storage::Database::new();
        let options = SessionOptions { memory_limit: Some(64 << 20), ..SessionOptions::default() };
        let ctx = crate::session_context_with(&db, options);
        for sql in [
            "SELECT repeat('x', 2000000000)",
            "SELECT length(repeat('ab', 40000000))",
            "SELECT lpad('x', 100000000)",
            "SELECT rpad('x', 100000000, 'é')",
            "SELECT array_repeat(1, 100000000)",
            "SELECT array_resize([1], 100000000, 2)",
            "SELECT range(0, 100000000)",
            "SELECT generate_series(1, 9000000000000000000, 1)",
            // Arguments from rows: checked at execution, per batch.
            "SELECT length(repeat('x', n)) FROM (VALUES (10), (100000000)) AS t(n)",
        ] {
            let e = run(&ctx, sql).await.expect_err(sql);
            assert!(matches!(e.find_root(), datafusion::error::DataFusionError::ResourcesExhausted(_)), "{sql}: {e}");
            assert!(e.to_string().contains("more than the 67108864 bytes a query may use"), "{sql}: {e}");
        }
        // Within the limit, every function answers as before.
        for (sql, rows) in [
            ("SELECT repeat('x', 1000), lpad('a', 5, 'xy'), rpad('a', 3)", 1),
            ("SELECT array_repeat('v', 3), array_resize([1, 2], 4), range(1, 10, 3)", 1),
            ("SELECT * FROM generate_series(1, 3000000)", 3_000_000),
            ("SELECT repeat(s, n) FROM (VALUES ('ab', 3), (NULL, 5), ('c', -1)) AS t(s, n)", 3),
        ] {
            assert_eq!(run(&ctx, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")), rows, "{sql}");
        }
        let out =
            ctx.sql("SELECT repeat('ab', 3) AS r, lpad('7', 3, '0') AS p").await.unwrap().collect().await.unwrap();
        let text = arrow_cast::pretty::pretty_format_batches(&out).unwrap().to_string();
        assert!(text.contains("ababab") && text.contains("007"), "{text}");
    }
}
