//! `SUM` of integers that fails on overflow instead of wrapping.
//!
//! DataFusion's `sum` adds `BIGINT`s (and the smaller integers it widens to
//! them) with Arrow's wrapping kernels: `SUM` of 9223372036854775807 and 1
//! was -9223372036854775808. quiverdb's own scans check (an aggregation
//! pushed into them reports overflow); [`CheckedSum`] replaces DataFusion's
//! `sum` in every quiverdb session so that the aggregations DataFusion runs
//! itself (over a join, an expression, a subquery, a window) check too.
//! It keeps the name `sum`, so quiverdb's pushdown still finds it; only
//! sums of `Int64` and `UInt64` change (with or without DISTINCT, except
//! `SUM(DISTINCT …)` over a sliding window frame, which stays DataFusion's
//! and wraps), everything else (decimals, floats, intervals) is
//! DataFusion's own.
//!
//! Sums are kept in 128 bits and checked when they are handed on (a
//! partial sum to the final aggregation, or the result), so values that
//! cancel out do not fail the sum in one order and pass in another; only
//! a partial sum that does not fit its type fails early.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, ArrowNumericType, BooleanArray};
use arrow_schema::{DataType, FieldRef};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion::functions_aggregate::sum::Sum;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, ReversedUDAF, SetMonotonicity, Signature,
};

/// Makes `sum` in `state` [`CheckedSum`].
pub(crate) fn check_sums(state: &mut SessionState) {
    if let Err(e) = state.register_udaf(Arc::new(AggregateUDF::new_from_impl(CheckedSum::default()))) {
        tracing::warn!("SUM of integers stays unchecked: {e}");
    }
}

/// DataFusion's `sum`, failing on integer overflow.
#[derive(Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct CheckedSum {
    inner: Sum,
}

/// The error of an overflowing sum.
fn overflow(data_type: &DataType) -> DataFusionError {
    DataFusionError::Execution(format!("integer overflow in SUM: the sum does not fit in {data_type}"))
}

/// Whether `args` are a sum this module checks.
fn checked(args: &AccumulatorArgs<'_>) -> bool {
    !args.is_distinct && integer(args)
}

/// A checked sum of the integer type `args` return.
fn sum_accumulator(args: &AccumulatorArgs<'_>) -> Box<dyn Accumulator> {
    match args.return_field.data_type() {
        DataType::Int64 => Box::new(SumAccumulator::<Int64Type>::default()),
        _ => Box::new(SumAccumulator::<UInt64Type>::default()),
    }
}

/// Whether `args` sum integers.
fn integer(args: &AccumulatorArgs<'_>) -> bool {
    matches!(args.return_field.data_type(), DataType::Int64 | DataType::UInt64)
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs<'_>) -> Result<Box<dyn Accumulator>> {
        if args.is_distinct && integer(&args) {
            return Ok(match args.return_field.data_type() {
                DataType::Int64 => Box::new(DistinctSum::<Int64Type>::default()),
                _ => Box::new(DistinctSum::<UInt64Type>::default()),
            });
        }
        if !checked(&args) {
            return self.inner.accumulator(args);
        }
        Ok(sum_accumulator(&args))
    }

    fn state_fields(&self, args: StateFieldsArgs<'_>) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs<'_>) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs<'_>) -> Result<Box<dyn GroupsAccumulator>> {
        if !checked(&args) {
            return self.inner.create_groups_accumulator(args);
        }
        Ok(match args.return_field.data_type() {
            DataType::Int64 => Box::new(GroupSums::<Int64Type>::default()),
            _ => Box::new(GroupSums::<UInt64Type>::default()),
        })
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs<'_>) -> Result<Box<dyn Accumulator>> {
        if !checked(&args) {
            return self.inner.create_sliding_accumulator(args);
        }
        Ok(sum_accumulator(&args))
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        self.inner.reverse_expr()
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }

    fn value_from_stats(&self, statistics_args: &datafusion::logical_expr::StatisticsArgs<'_>) -> Option<ScalarValue> {
        self.inner.value_from_stats(statistics_args)
    }

    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        self.inner.documentation()
    }
}

/// The integer types summed here, widened to 128 bits and back.
trait Wide: ArrowNumericType {
    fn widen(v: Self::Native) -> i128;
    fn narrow(v: i128) -> Option<Self::Native>;
}

impl Wide for Int64Type {
    fn widen(v: i64) -> i128 {
        i128::from(v)
    }

    fn narrow(v: i128) -> Option<i64> {
        i64::try_from(v).ok()
    }
}

impl Wide for UInt64Type {
    fn widen(v: u64) -> i128 {
        i128::from(v)
    }

    fn narrow(v: i128) -> Option<u64> {
        u64::try_from(v).ok()
    }
}

/// The sum of the non-null `values` in 128 bits, and how many there are.
/// (At most 2^64 values of at most 2^64 each: it cannot overflow.)
fn wide_sum<T: Wide>(values: &ArrayRef) -> (i128, u64) {
    let values = values.as_primitive::<T>();
    let sum = values.iter().flatten().map(T::widen).sum();
    (sum, (values.len() - values.null_count()) as u64)
}

/// `sum` as `T`, or the overflow error.
fn narrow<T: Wide>(sum: i128) -> Result<T::Native> {
    T::narrow(sum).ok_or_else(|| overflow(&T::DATA_TYPE))
}

/// A checked integer sum, for aggregates and window frames: its value and
/// how many values it holds (for a sliding frame's retractions).
#[derive(Debug)]
struct SumAccumulator<T> {
    sum: i128,
    count: u64,
    _type: std::marker::PhantomData<fn() -> T>,
}

impl<T> Default for SumAccumulator<T> {
    fn default() -> Self {
        Self { sum: 0, count: 0, _type: std::marker::PhantomData }
    }
}

impl<T: Wide + std::fmt::Debug> Accumulator for SumAccumulator<T> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let (sum, count) = wide_sum::<T>(&values[0]);
        self.sum += sum;
        self.count += count;
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        // States are partial sums, NULL where a partial saw no value.
        self.update_batch(states)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let (sum, count) = wide_sum::<T>(&values[0]);
        self.sum -= sum;
        self.count = self.count.saturating_sub(count);
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let sum = if self.count > 0 { Some(narrow::<T>(self.sum)?) } else { None };
        ScalarValue::new_primitive::<T>(sum, &T::DATA_TYPE)
    }

    fn size(&self) -> usize {
        size_of_val(self)
    }
}

/// A checked `SUM(DISTINCT …)` of integers: the distinct values, summed
/// in 128 bits when the result is asked for. Its state is the list of the
/// values, as DataFusion's.
#[derive(Debug)]
struct DistinctSum<T: ArrowNumericType> {
    values: std::collections::HashSet<T::Native>,
}

impl<T: ArrowNumericType> Default for DistinctSum<T> {
    fn default() -> Self {
        Self { values: std::collections::HashSet::new() }
    }
}

impl<T> Accumulator for DistinctSum<T>
where
    T: Wide + std::fmt::Debug,
    T::Native: std::hash::Hash + Eq,
{
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.values.extend(values[0].as_primitive::<T>().iter().flatten());
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for list in states[0].as_list::<i32>().iter().flatten() {
            self.values.extend(list.as_primitive::<T>().iter().flatten());
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let values: Vec<ScalarValue> = self
            .values
            .iter()
            .map(|v| ScalarValue::new_primitive::<T>(Some(*v), &T::DATA_TYPE))
            .collect::<Result<_>>()?;
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(&values, &T::DATA_TYPE))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let sum = if self.values.is_empty() {
            None
        } else {
            Some(narrow::<T>(self.values.iter().map(|v| T::widen(*v)).sum())?)
        };
        ScalarValue::new_primitive::<T>(sum, &T::DATA_TYPE)
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.values.capacity() * size_of::<T::Native>()
    }
}

/// Checked integer sums per group (in 128 bits), NULL for a group that saw
/// no value.
#[derive(Debug)]
struct GroupSums<T> {
    sums: Vec<i128>,
    seen: Vec<bool>,
    _type: std::marker::PhantomData<fn() -> T>,
}

impl<T> Default for GroupSums<T> {
    fn default() -> Self {
        Self { sums: Vec::new(), seen: Vec::new(), _type: std::marker::PhantomData }
    }
}

impl<T: Wide + Send + Sync> GroupSums<T> {
    fn add(
        &mut self,
        values: &ArrayRef,
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.sums.resize(total_num_groups, 0);
        self.seen.resize(total_num_groups, false);
        let values = values.as_primitive::<T>();
        for (row, &group) in group_indices.iter().enumerate() {
            if values.is_null(row) || opt_filter.is_some_and(|f| !f.is_valid(row) || !f.value(row)) {
                continue;
            }
            self.sums[group] += T::widen(values.value(row));
            self.seen[group] = true;
        }
        Ok(())
    }

    /// The sums of the groups `emit_to` names, taken out.
    fn emit(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let sums = emit_to.take_needed(&mut self.sums);
        let seen = emit_to.take_needed(&mut self.seen);
        let values = sums
            .into_iter()
            .zip(seen)
            .map(|(sum, seen)| if seen { narrow::<T>(sum).map(Some) } else { Ok(None) })
            .collect::<Result<arrow_array::PrimitiveArray<T>>>()?;
        Ok(Arc::new(values))
    }
}

impl<T: Wide + Send + Sync> GroupsAccumulator for GroupSums<T> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.add(&values[0], group_indices, opt_filter, total_num_groups)
    }

    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        self.add(&values[0], group_indices, None, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.emit(emit_to)
    }

    /// Each row as its own group: its value, NULL where filtered out.
    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let values = values[0].as_primitive::<T>();
        let kept = (0..values.len()).map(|row| {
            let passes = opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
            (passes && values.is_valid(row)).then(|| values.value(row))
        });
        Ok(vec![Arc::new(kept.collect::<arrow_array::PrimitiveArray<T>>())])
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.emit(emit_to)?])
    }

    fn size(&self) -> usize {
        self.sums.capacity() * size_of::<i128>() + self.seen.capacity()
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::prelude::SessionContext;

    use super::*;

    async fn run(ctx: &SessionContext, sql: &str) -> Result<String> {
        let batches = ctx.sql(sql).await?.collect().await?;
        Ok(pretty_format_batches(&batches)?.to_string())
    }

    #[tokio::test]
    async fn integer_sums_fail_on_overflow_in_every_form() {
        let mut state = SessionContext::new().state();
        check_sums(&mut state);
        let ctx = SessionContext::new_with_state(state);
        ctx.sql("CREATE TABLE t (g INT, v BIGINT, u BIGINT UNSIGNED) AS VALUES (1, 9223372036854775807, 18446744073709551615), (1, 1, 1), (2, 5, 2), (2, 7, 3), (3, -9, 4)")
            .await
            .unwrap();
        for sql in [
            "SELECT SUM(v) FROM t",
            "SELECT g, SUM(v) FROM t GROUP BY g",
            "SELECT SUM(u) FROM t",
            "SELECT g, SUM(u) FROM t GROUP BY g",
            "SELECT SUM(v) OVER (ORDER BY g, v ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) FROM t",
            "SELECT SUM(v) OVER (ORDER BY v ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t",
            "SELECT SUM(DISTINCT v) FROM t",
            "SELECT g, SUM(DISTINCT u) FROM t GROUP BY g",
        ] {
            let err = run(&ctx, sql).await.unwrap_err();
            assert!(err.to_string().contains("integer overflow in SUM"), "{sql}: {err}");
        }
        // Sums that fit are DataFusion's: exact, NULL for no rows, grouped.
        let fits = run(&ctx, "SELECT g, SUM(v) AS s FROM t WHERE g = 2 GROUP BY g").await.unwrap();
        assert!(fits.contains("| 2 | 12 |"), "{fits}");
        let none = run(&ctx, "SELECT SUM(v) AS s FROM t WHERE g = 4").await.unwrap();
        assert!(none.contains("|   |"), "{none}");
        let window = run(
            &ctx,
            "SELECT SUM(v) OVER (ORDER BY v ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM t WHERE g = 2",
        )
        .await
        .unwrap();
        assert!(window.contains("| 5  |") && window.contains("| 12 |"), "{window}");
        // Near the bound, exactly, though the first two values alone pass it.
        let max = run(&ctx, "SELECT SUM(v) AS s FROM t WHERE v > 6 OR v < 0").await.unwrap();
        assert!(max.contains("9223372036854775805"), "{max}");
        let grouped = run(&ctx, "SELECT SUM(v) AS s FROM t WHERE v > 6 OR v < 0 GROUP BY g > 0").await.unwrap();
        assert!(grouped.contains("9223372036854775805"), "{grouped}");
        let distinct = run(
            &ctx,
            "SELECT SUM(DISTINCT v) AS s FROM (SELECT v FROM t UNION ALL SELECT v FROM t) WHERE v > 6 OR v < 0",
        )
        .await
        .unwrap();
        assert!(distinct.contains("9223372036854775805"), "{distinct}");
        // Not integers: DataFusion's own.
        let float = run(&ctx, "SELECT SUM(CAST(v AS DOUBLE)) AS s FROM t").await.unwrap();
        assert!(float.contains("9.223372036854776e18"), "{float}");
        let decimal = run(&ctx, "SELECT SUM(CAST(v AS DECIMAL(38, 0))) AS s FROM t").await.unwrap();
        assert!(decimal.contains("9223372036854775811"), "{decimal}");
    }
}
