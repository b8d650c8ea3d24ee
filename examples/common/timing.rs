#![allow(dead_code)]
//! Timing SQL side by side, shared by the benchmark examples: planning
//! and execution measured apart, medians, and answers as text rows.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::SessionContext;

pub(crate) type BoxError = Box<dyn std::error::Error>;

/// The median of `v`.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Milliseconds since `start`.
pub(crate) fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// Plans `sql` (SQL → optimized physical plan).
pub(crate) async fn plan(ctx: &SessionContext, sql: &str) -> Result<Arc<dyn ExecutionPlan>, BoxError> {
    Ok(ctx.sql(sql).await?.create_physical_plan().await?)
}

/// Median planning and execution times over `runs` runs after `warm_up`
/// runs, and the last run's answer.
pub(crate) async fn measure(
    ctx: &SessionContext,
    sql: &str,
    warm_up: usize,
    runs: usize,
) -> Result<(f64, f64, Vec<RecordBatch>), BoxError> {
    for _ in 0..warm_up {
        let warm = plan(ctx, sql).await?;
        collect(warm, ctx.task_ctx()).await?;
    }
    let (mut plans, mut execs) = (Vec::new(), Vec::new());
    let mut answer = Vec::new();
    for _ in 0..runs {
        // The task context (a copy of the session's settings and function
        // registries) is made with the plan, as `DataFrame::collect` does,
        // so that execution times the plan's run alone.
        let start = Instant::now();
        let task = ctx.task_ctx();
        let physical = plan(ctx, sql).await?;
        plans.push(ms(start));
        let start = Instant::now();
        answer = collect(physical, task).await?;
        execs.push(ms(start));
    }
    Ok((median(plans), median(execs), answer))
}

/// The rows of `batches` as text, one string per row.
pub(crate) fn rows(batches: &[RecordBatch]) -> Result<Vec<String>, BoxError> {
    let options = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in batches {
        let formatters =
            b.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options)).collect::<Result<Vec<_>, _>>()?;
        for r in 0..b.num_rows() {
            out.push(formatters.iter().map(|f| f.value(r).to_string()).collect::<Vec<_>>().join("|"));
        }
    }
    Ok(out)
}
