//! Physical optimizer rule: aggregates and TopK run inside quiverdb scans.
//!
//! ```text
//!   AggregateExec (Partial | Single | SinglePartitioned,        SortExec (fetch = k)
//!                  or Final[Partitioned] over Partial)            [the same wrappers]
//!     [ProjectionExec | FilterExec | CooperativeExec |              QuiverScanExec
//!      RepartitionExec | CoalescePartitionsExec]*
//!       QuiverScanExec (no limit)
//!   ──────────────────────────────────────────────────────────────────────────────
//!   QuiverAggregateExec (states or final values)               QuiverTopKExec
//!   [RepartitionExec by key, for a partitioned final that an
//!    operator above needs partitioned]
//! ```
//!
//! The wrappers between the plan and the scan are folded into map
//! expressions (projections) and predicates (filters) over the table's
//! columns; if any needed expression has no exact quiverdb equivalent, or
//! an aggregate is DISTINCT, filtered, ordered or not one of COUNT, SUM,
//! MIN, MAX, AVG, the plan is left to DataFusion untouched. The rule runs
//! after DataFusion's own rules, so it sees the final plan shape.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_expr::expressions::{Column as PColumn, Literal as PLiteral};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning, PhysicalExpr};
use quiverdb_mapreducer::{AggFunc, Aggregate, AggregateSpec, Domain, GatherSpec, MapExpr};
use quiverdb_scan::{Predicate, SortKey};
use quiverdb_storage::TableSchema;

use crate::exec::{
    AggregateOutputMode, ESTIMATE_BLOCKS, QuiverAggregateExec, QuiverScanExec, QuiverTopKExec, ScanSource, shard_groups,
};
use crate::translate::Translator;

/// Pushes aggregates and TopK into quiverdb scans (see the module docs).
#[derive(Debug, Default)]
pub struct QuiverPushdown;

impl PhysicalOptimizerRule for QuiverPushdown {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let threads = config.execution.target_partitions;
        let skip_ratio = config.execution.skip_partial_aggregation_probe_ratio_threshold;
        let free = unconstrained(&plan);
        let rewritten = plan.transform_down(|node| {
            let replaced = if let Some(agg) = node.downcast_ref::<AggregateExec>() {
                push_aggregate(agg, threads, skip_ratio, free.contains(&address(&node)))?
            } else if let Some(sort) = node.downcast_ref::<SortExec>() {
                push_topk(sort, threads)
            } else {
                None
            };
            Ok(match replaced {
                Some(p) => Transformed::yes(p),
                None => Transformed::no(node),
            })
        })?;
        Ok(rewritten.data)
    }

    fn name(&self) -> &str {
        "quiverdb_pushdown"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A plan node's address, to recognise it while the plan is rewritten.
fn address(node: &Arc<dyn ExecutionPlan>) -> usize {
    Arc::as_ptr(node).cast::<()>() as usize
}

/// The addresses of the nodes of `plan` whose output partitioning no
/// operator above depends on: the root, and from there down through
/// operators that require no distribution of their input and either keep
/// its partitions as they are (projections, filters, sorts, limits) or
/// merge them into one (`CoalescePartitionsExec`,
/// `SortPreservingMergeExec`, which free their input whatever is above
/// them). A join or an aggregate above stops it: their inputs must be
/// partitioned as they say. A node reached by more than one path (a
/// shared subplan) is free only if every path frees it.
fn unconstrained(plan: &Arc<dyn ExecutionPlan>) -> HashSet<usize> {
    fn walk(node: &Arc<dyn ExecutionPlan>, free: bool, found: &mut (HashSet<usize>, HashSet<usize>)) {
        if free { &mut found.0 } else { &mut found.1 }.insert(address(node));
        let merges = node.downcast_ref::<CoalescePartitionsExec>().is_some()
            || node.downcast_ref::<SortPreservingMergeExec>().is_some();
        let keeps = node.downcast_ref::<ProjectionExec>().is_some()
            || node.downcast_ref::<FilterExec>().is_some()
            || node.downcast_ref::<CooperativeExec>().is_some()
            || node.downcast_ref::<SortExec>().is_some()
            || node.downcast_ref::<GlobalLimitExec>().is_some()
            || node.downcast_ref::<LocalLimitExec>().is_some();
        for child in node.children() {
            walk(child, merges || (keeps && free), found);
        }
    }
    let mut found = (HashSet::new(), HashSet::new());
    walk(plan, true, &mut found);
    let (free, constrained) = found;
    free.difference(&constrained).copied().collect()
}

/// A chain of wrappers over a quiverdb scan, folded: the scan, the map
/// expression of each output column (`None` if quiverdb cannot compute
/// it), and the filters met on the way.
struct Folded<'a> {
    scan: &'a QuiverScanExec,
    outputs: Vec<Option<MapExpr>>,
    filters: Vec<Predicate>,
    filter_text: Vec<String>,
}

impl Folded<'_> {
    fn schema(&self) -> &TableSchema {
        self.scan.source().snapshot.schema()
    }

    fn translator(&self) -> Translator<'_> {
        Translator::physical(self.schema(), &self.outputs)
    }

    /// The scan's source with the folded filters added.
    fn source(&self) -> ScanSource {
        let mut source = self.scan.source().clone();
        let mut parts: Vec<Predicate> = source.filter.take().into_iter().collect();
        parts.extend(self.filters.iter().cloned());
        source.filter = match parts.len() {
            0 => None,
            1 => parts.pop(),
            _ => Some(Predicate::And(parts)),
        };
        source.exact_text.extend(self.filter_text.iter().cloned());
        source
    }
}

/// Folds `plan` down to a quiverdb scan without a limit. `hash_ok`
/// allows hash repartitioning on the way (fine when the result is
/// computed whole, not per input partition).
fn fold(plan: &Arc<dyn ExecutionPlan>, hash_ok: bool) -> Option<Folded<'_>> {
    if let Some(scan) = plan.downcast_ref::<QuiverScanExec>() {
        if scan.limit().is_some() || scan.has_residual() {
            return None;
        }
        let outputs = scan.projection().iter().map(|&c| Some(MapExpr::Column(c))).collect();
        return Some(Folded { scan, outputs, filters: Vec::new(), filter_text: Vec::new() });
    }
    if let Some(coop) = plan.downcast_ref::<CooperativeExec>() {
        return fold(coop.input(), hash_ok);
    }
    if let Some(r) = plan.downcast_ref::<RepartitionExec>() {
        let ok = matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)) || hash_ok;
        return if ok { fold(r.input(), hash_ok) } else { None };
    }
    if let Some(c) = plan.downcast_ref::<CoalescePartitionsExec>() {
        return if c.fetch().is_none() { fold(c.input(), hash_ok) } else { None };
    }
    if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        let mut folded = fold(p.input(), hash_ok)?;
        let outputs = {
            let t = folded.translator();
            p.expr().iter().map(|e| t.physical_map(&e.expr)).collect()
        };
        folded.outputs = outputs;
        return Some(folded);
    }
    if let Some(f) = plan.downcast_ref::<FilterExec>() {
        if f.fetch().is_some() {
            return None;
        }
        let mut folded = fold(f.input(), hash_ok)?;
        let predicate = folded.translator().physical_predicate(f.predicate())?;
        folded.filters.push(predicate);
        folded.filter_text.push(f.predicate().to_string());
        if let Some(projection) = f.projection() {
            folded.outputs = projection.iter().map(|&i| folded.outputs.get(i).cloned().flatten()).collect();
        }
        return Some(folded);
    }
    None
}

/// An `AggregateExec` as a [`QuiverAggregateExec`], if it qualifies.
///
/// An aggregate that DataFusion split into a final over a partial one
/// (one partial per partition, their states repartitioned by key for the
/// final) is replaced whole, by one that computes the final values over
/// every shard in parallel: its threads take shards as they finish them
/// (fixed groups of shards in partitions wait for the slowest), and
/// merge their accumulators directly, with no states turned into Arrow
/// and back (the seed table's `SELECT SUM(value) FROM t` at 2
/// partitions: 4.2–8.9× MemTable's speed instead of 3.6–4.4×). With GROUP BY, only when the zone maps bound the groups
/// by [`FEW_GROUPS`] ([`group_bound`]): many groups are merged faster by
/// DataFusion's final aggregates, one per partition, in parallel. The
/// result is repartitioned by key as the final's was, unless nothing
/// above depends on its partitioning (`free`: see [`unconstrained`]), as
/// when the aggregate is the plan's result: then it is one partition.
/// (Measured at 2 partitions on the seed table, without the
/// repartitioning's tasks: `SELECT category % 100, COUNT(*) … GROUP BY
/// category % 100` from 1.08–1.48 to 0.81–0.87 ms, `SELECT name,
/// SUM(value) … GROUP BY name` from 1.9–2.1 to 1.17–1.82 ms.)
///
/// A grouped partial aggregate is pushed only if it is expected to reduce
/// its rows ([`reduces`]).
fn push_aggregate(
    agg: &AggregateExec,
    threads: usize,
    skip_ratio: f64,
    free: bool,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    match agg.mode() {
        AggregateMode::Partial => {
            push_aggregate_of(agg, agg, AggregateOutputMode::States, false, threads, Some(skip_ratio), free)
        }
        AggregateMode::Single | AggregateMode::SinglePartitioned => {
            push_aggregate_of(agg, agg, AggregateOutputMode::Final, true, threads, None, free)
        }
        AggregateMode::Final | AggregateMode::FinalPartitioned => match partial_below(agg.input()) {
            Some(partial)
                if partial.group_expr().expr().len() == agg.group_expr().expr().len()
                    && (*agg.mode() == AggregateMode::Final) == agg.group_expr().is_empty()
                    && partial.aggr_expr().len() == agg.aggr_expr().len()
                    && agg.limit_options().is_none() =>
            {
                push_aggregate_of(agg, partial, AggregateOutputMode::Final, true, threads, None, free)
            }
            _ => Ok(None),
        },
        AggregateMode::PartialReduce => Ok(None),
    }
}

/// Groups at most for which a grouped final aggregate is computed whole
/// in quiverdb rather than by DataFusion's partitioned finals.
const FEW_GROUPS: u64 = 1 << 16;

/// An upper bound on the groups of `keys` over the scanned shards, from
/// the zone maps: each key takes at most the product of the distinct
/// values of the columns it reads; a column has, per shard, at most the
/// span of its main keys (integer columns and dictionary strings, whose
/// keys are exact) or else one value per main row, one per delta row,
/// and NULL.
fn group_bound(folded: &Folded<'_>, keys: &[MapExpr]) -> u64 {
    let snapshot = &folded.scan.source().snapshot;
    let shards = folded.scan.shards();
    let rows: u64 = shards.iter().map(|&s| snapshot.shard(s).rows() as u64).sum();
    let mut columns = Vec::new();
    keys.iter().for_each(|k| k.columns(&mut columns));
    columns.sort_unstable();
    columns.dedup();
    let mut bound = 1u64;
    for c in columns {
        let distinct = shards.iter().fold(0u64, |sum, &s| sum.saturating_add(snapshot.shard(s).distinct_bound(c)));
        bound = bound.saturating_mul(distinct);
    }
    bound.min(rows.saturating_add(1))
}

/// Whether the partial aggregate `agg` over `folded` is expected to
/// reduce its input: its expected groups below `skip_ratio` (DataFusion's
/// `skip_partial_aggregation_probe_ratio_threshold`) times its expected
/// input rows. DataFusion's own partial aggregate, past that ratio, stops
/// aggregating and passes its rows on as states; one computed in the scan
/// cannot, and would build a table of nearly every row for the final
/// aggregate to build again (TPC-H q20 groups 909K lineitem rows by
/// `(l_partkey, l_suppkey)` into 694K groups: 115 ms pushed, against
/// MemTable's 77 ms). With `d` key combinations over the scan's `rows`
/// (the product of the key columns' distinct estimates from storage's
/// sketches, at most `rows`; a column without an estimate counts as
/// distinct in every row), each combination in `rows / d` rows, the `n`
/// rows that pass the filter are expected to hold `d (1 - (1 - n/rows)^(rows/d))`
/// of them.
fn reduces(folded: &Folded<'_>, agg: &AggregateExec, skip_ratio: f64) -> bool {
    let snapshot = &folded.scan.source().snapshot;
    let shards = folded.scan.shards();
    let rows = folded.scan.source().rows_in(&shards) as f64;
    if rows < 1.0 {
        return true;
    }
    let source = folded.source();
    let input = match &source.filter {
        Some(filter) => quiverdb_scan::estimate_matches(snapshot, &shards, filter, ESTIMATE_BLOCKS).unwrap_or(rows),
        None => rows,
    };
    let t = folded.translator();
    let mut columns = Vec::new();
    for (e, _) in agg.group_expr().expr() {
        match t.physical_map(e) {
            Some(key) => key.columns(&mut columns),
            None => return true,
        }
    }
    columns.sort_unstable();
    columns.dedup();
    let combinations = columns
        .iter()
        .fold(1.0f64, |d, &c| d * snapshot.distinct_estimate(&shards, c).map_or(rows, |n| n.max(1) as f64))
        .min(rows);
    let passing = (input / rows).min(1.0);
    let groups = if passing >= 1.0 {
        combinations
    } else {
        combinations * -((rows / combinations) * (-passing).ln_1p()).exp_m1()
    };
    groups < skip_ratio * input.max(1.0)
}

/// The partial aggregate under a final one, through the partitioning
/// between them.
fn partial_below(plan: &Arc<dyn ExecutionPlan>) -> Option<&AggregateExec> {
    if let Some(agg) = plan.downcast_ref::<AggregateExec>() {
        return (*agg.mode() == AggregateMode::Partial).then_some(agg);
    }
    if let Some(r) = plan.downcast_ref::<RepartitionExec>() {
        return partial_below(r.input());
    }
    if let Some(c) = plan.downcast_ref::<CoalescePartitionsExec>() {
        return if c.fetch().is_none() { partial_below(c.input()) } else { None };
    }
    if let Some(coop) = plan.downcast_ref::<CooperativeExec>() {
        return partial_below(coop.input());
    }
    None
}

/// [`push_aggregate`] of `top`, whose input, groups and aggregates are
/// those of `agg` (`top` itself, or the partial aggregate under it). With
/// `skip_ratio`, a grouped `agg` is pushed only if it [`reduces`] its rows.
fn push_aggregate_of(
    top: &AggregateExec,
    agg: &AggregateExec,
    mode: AggregateOutputMode,
    hash_ok: bool,
    threads: usize,
    skip_ratio: Option<f64>,
    free: bool,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if agg.group_expr().has_grouping_set()
        || agg.limit_options().is_some()
        || agg.filter_expr().iter().any(Option::is_some)
    {
        return Ok(None);
    }
    let Some(folded) = fold(agg.input(), hash_ok) else { return Ok(None) };
    if let Some(ratio) = skip_ratio
        && !agg.group_expr().is_empty()
        && !reduces(&folded, agg, ratio)
    {
        return Ok(None);
    }
    let t = folded.translator();
    let Some(keys) = agg.group_expr().expr().iter().map(|(e, _)| t.physical_map(e)).collect::<Option<Vec<_>>>() else {
        return Ok(None);
    };
    // Values compared or combined: the group keys and the inputs of every
    // aggregate but COUNT (which only tests for NULL).
    let mut compared: Vec<MapExpr> = keys.clone();
    let mut aggregates = Vec::with_capacity(agg.aggr_expr().len());
    for a in agg.aggr_expr() {
        if a.is_distinct() || !a.order_bys().is_empty() {
            return Ok(None);
        }
        let args = a.expressions();
        let [arg] = args.as_slice() else { return Ok(None) };
        let func = match a.fun().name() {
            "count" => AggFunc::Count,
            "sum" => AggFunc::Sum,
            "min" => AggFunc::Min,
            "max" => AggFunc::Max,
            "avg" => AggFunc::Avg,
            _ => return Ok(None),
        };
        // COUNT of a non-NULL constant (COUNT(*) arrives as COUNT(1)) counts rows.
        let constant = arg.downcast_ref::<PLiteral>().is_some_and(|l| !l.value().is_null());
        aggregates.push(if func == AggFunc::Count && constant {
            Aggregate::count_star()
        } else {
            let Some(input) = t.physical_map(arg) else { return Ok(None) };
            if func != AggFunc::Count {
                compared.push(input.clone());
            }
            Aggregate::new(func, input)
        });
    }
    if reads_row_encoded(&compared, folded.schema()) {
        return Ok(None);
    }
    // A grouped final computed whole (see `push_aggregate`): all shards in
    // one partition, on `threads` threads, its result repartitioned by
    // key. (A SinglePartitioned one too: its input was partitioned by key,
    // which the shards are not.)
    let whole = matches!(top.mode(), AggregateMode::FinalPartitioned | AggregateMode::SinglePartitioned);
    if *top.mode() == AggregateMode::FinalPartitioned && group_bound(&folded, &keys) > FEW_GROUPS {
        return Ok(None);
    }
    let table = folded.schema();
    let Ok(spec) = AggregateSpec::new(keys, aggregates, table) else { return Ok(None) };
    let schema = top.schema();
    let types = QuiverAggregateExec::output_types(&spec, mode, table);
    let same =
        types.len() == schema.fields().len() && types.iter().zip(schema.fields()).all(|(t, f)| t == f.data_type());
    if !same {
        return Ok(None);
    }
    let mut text =
        vec![format!("aggr=[{}]", agg.aggr_expr().iter().map(|a| a.name().to_string()).collect::<Vec<_>>().join(", "))];
    if !agg.group_expr().is_empty() {
        text.push(format!(
            "group_by=[{}]",
            agg.group_expr().expr().iter().map(|(e, name)| format!("{e} as {name}")).collect::<Vec<_>>().join(", ")
        ));
    }
    // The scan's dynamic filters (on the group keys, pushed through the
    // aggregates this replaces) stay with the rows they filter.
    let scan_columns = folded.scan.projection().iter().map(|&c| Some(MapExpr::Column(c))).collect();
    let exec: Arc<dyn ExecutionPlan> = Arc::new(
        QuiverAggregateExec::new(
            folded.source(),
            Arc::new(spec),
            mode,
            groups_for(&folded, if whole { 1 } else { top.properties().partitioning.partition_count() }),
            threads,
            text.join(", "),
            Arc::clone(&schema),
        )
        .with_scan_dynamic_filters(folded.scan.dynamic_filters().to_vec(), scan_columns),
    );
    // A SinglePartitioned or FinalPartitioned aggregate's output is
    // hash-partitioned on its keys; keep that promise for the plan above,
    // if anything there depends on it.
    if whole && free {
        return Ok(Some(exec));
    }
    let partitioning = top.properties().partitioning.clone();
    if let Partitioning::Hash(_, n) = partitioning
        && n > 1
    {
        let keys: Vec<Arc<dyn PhysicalExpr>> = (0..top.group_expr().expr().len())
            .map(|i| Arc::new(PColumn::new(schema.field(i).name(), i)) as Arc<dyn PhysicalExpr>)
            .collect();
        return Ok(Some(Arc::new(RepartitionExec::try_new(exec, Partitioning::Hash(keys, n))?)));
    }
    if exec.properties().partitioning.partition_count() != top.properties().partitioning.partition_count()
        && mode == AggregateOutputMode::Final
    {
        return Ok(None);
    }
    Ok(Some(exec))
}

/// True when `exprs` read a column stored in Arrow's row format (structs,
/// lists, maps, ...): quiverdb's kernels would compare their encoded bytes,
/// whose order need not be DataFusion's, so such work stays in DataFusion.
fn reads_row_encoded(exprs: &[MapExpr], table: &TableSchema) -> bool {
    let mut columns = Vec::new();
    exprs.iter().for_each(|e| e.columns(&mut columns));
    columns.iter().any(|&c| quiverdb_storage::row_encoded::is_row_encoded(table.field(c).data_type()))
}

/// The scan's shards in exactly `partitions` groups (some possibly empty),
/// so that the aggregate's replacement keeps its partition count.
fn groups_for(folded: &Folded<'_>, partitions: usize) -> Vec<Vec<usize>> {
    let mut groups = shard_groups(&folded.scan.source().snapshot, &folded.scan.shards(), partitions);
    groups.resize(partitions.max(1), Vec::new());
    groups
}

/// A `SortExec` with a fetch as a [`QuiverTopKExec`], if it qualifies.
fn push_topk(sort: &SortExec, threads: usize) -> Option<Arc<dyn ExecutionPlan>> {
    let fetch = sort.fetch()?;
    let folded = fold(sort.input(), true)?;
    let table = folded.schema();
    let t = folded.translator();
    let mut keys = Vec::new();
    for e in sort.expr().iter() {
        let expr = t.physical_map(&e.expr)?;
        let data_type = expr.data_type(table).ok()?;
        if Domain::of(&data_type).is_none() && expr.as_column().is_none() {
            return None;
        }
        keys.push(SortKey { expr, descending: e.options.descending, nulls_first: e.options.nulls_first });
    }
    let sorted: Vec<MapExpr> = keys.iter().map(|k| k.expr.clone()).collect();
    if reads_row_encoded(&sorted, table) {
        return None;
    }
    let schema = sort.schema();
    let exprs = folded
        .outputs
        .iter()
        .zip(schema.fields())
        .map(|(e, f)| Some((e.clone()?, f.name().clone())))
        .collect::<Option<Vec<_>>>()?;
    let spec = GatherSpec::new(exprs, table, fetch.max(1)).ok()?;
    let same = spec.schema().fields().len() == schema.fields().len()
        && spec.schema().fields().iter().zip(schema.fields()).all(|(a, b)| a.data_type() == b.data_type());
    if !same {
        return None;
    }
    let text = format!("sort=[{}]", sort.expr().iter().map(ToString::to_string).collect::<Vec<_>>().join(", "));
    Some(Arc::new(QuiverTopKExec::new(
        folded.source(),
        keys,
        fetch,
        Arc::new(spec),
        threads,
        text,
        Arc::clone(sort.properties()),
    )))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use arrow_cast::display::{ArrayFormatter, FormatOptions};
    use arrow_schema::{DataType, Field, Schema};
    use quiverdb_storage::{Database, TableOptions};

    use crate::{SessionOptions, session_context_with};

    /// The rows of a grouped query's result: its first `keys` columns
    /// (as text, joined by `|`) and the Int64 columns after them.
    fn groups(batches: &[RecordBatch], keys: usize) -> HashMap<String, Vec<i64>> {
        let mut out = HashMap::new();
        for b in batches {
            let shown: Vec<_> =
                (0..keys).map(|k| ArrayFormatter::try_new(b.column(k), &FormatOptions::default()).unwrap()).collect();
            for i in 0..b.num_rows() {
                let key = shown.iter().map(|f| f.value(i).to_string()).collect::<Vec<_>>().join("|");
                let values =
                    (keys..b.num_columns()).map(|c| b.column(c).as_primitive::<Int64Type>().value(i)).collect();
                assert!(out.insert(key, values).is_none(), "a group twice");
            }
        }
        out
    }

    #[test]
    fn a_shared_subplan_is_free_only_if_every_path_frees_it() {
        use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
        use datafusion::physical_plan::empty::EmptyExec;
        use datafusion::physical_plan::projection::ProjectionExec;
        use datafusion::physical_plan::union::UnionExec;
        use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};

        use super::{address, unconstrained};
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let shared: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(Arc::clone(&schema)));
        let alone: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema));
        // A union's inputs keep their own partitions in its output, so
        // they are not free; a merge frees its input whatever is above.
        let merged: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(Arc::clone(&shared)));
        let merged_alone: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(Arc::clone(&alone)));
        let union =
            UnionExec::try_new(vec![Arc::clone(&shared), Arc::clone(&merged), Arc::clone(&merged_alone)]).unwrap();
        let root: Arc<dyn ExecutionPlan> = Arc::new(
            ProjectionExec::try_new(Vec::<(Arc<dyn PhysicalExpr>, String)>::new(), Arc::clone(&union)).unwrap(),
        );
        let free = unconstrained(&root);
        assert!(free.contains(&address(&root)) && free.contains(&address(&union)));
        assert!(!free.contains(&address(&merged)) && !free.contains(&address(&merged_alone)));
        assert!(free.contains(&address(&alone)), "under a merge only");
        assert!(!free.contains(&address(&shared)), "under a merge, and directly under the union");
    }

    #[tokio::test]
    async fn a_partitioned_final_is_computed_whole_only_for_few_groups() {
        const ROWS: i64 = 70_000;
        let db = Database::new();
        let schema = Arc::new(Schema::new(vec![
            Field::new("v", DataType::Int64, false),
            Field::new("g", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
            Field::new("w", DataType::Int64, false),
        ]));
        let table = db.create_table("t", &schema, TableOptions::default().with_shard_capacity(20_000)).unwrap();
        let batch = |range: std::ops::Range<i64>| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from_iter_values(range.clone())),
                    Arc::new(Int64Array::from_iter_values(range.clone().map(|v| v % 50))),
                    Arc::new(StringArray::from_iter_values(range.clone().map(|v| format!("s{}", v % 30)))),
                    Arc::new(Int64Array::from_iter_values(range.map(|v| v % 20_000))),
                ],
            )
            .unwrap()
        };
        table.append(&batch(0..ROWS - 50)).unwrap();
        table.rebuild().unwrap();
        // Delta rows too (each counts as a value of its own in the bound).
        table.append(&batch(ROWS - 50..ROWS)).unwrap();
        let ctx = session_context_with(&db, SessionOptions { target_partitions: 4, ..SessionOptions::default() });
        let (mut by_g, mut by_sg, mut by_v, mut by_w) =
            (HashMap::new(), HashMap::new(), HashMap::new(), HashMap::new());
        for v in 0..ROWS {
            *by_w.entry((v % 20_000).to_string()).or_insert_with(|| vec![0]).first_mut().unwrap() += 1;
            let e = by_g.entry((v % 50).to_string()).or_insert_with(|| vec![0, 0]);
            (e[0], e[1]) = (e[0] + 1, e[1] + v);
            *by_sg.entry(format!("s{}|{}", v % 30, v % 50)).or_insert_with(|| vec![0]).first_mut().unwrap() += 1;
            by_v.insert(v.to_string(), vec![1, v]);
        }
        // (query, its keys, where it is computed, the expected groups): 50
        // groups; a bound of about 29,000 (the product of two keys', 150
        // groups); a bound of 80,000 on 20,000 groups, 3.5 rows each (a
        // partial aggregate in the scan reduces its rows); 70,000 groups
        // of one row (DataFusion's partial aggregate passes rows through).
        let by_g_again = by_g.clone();
        let cases = [
            ("SELECT g, COUNT(*), SUM(v) FROM t GROUP BY g", 1, "whole", by_g),
            ("SELECT s, g, COUNT(*) FROM t GROUP BY s, g", 2, "whole", by_sg),
            ("SELECT w, COUNT(*) FROM t GROUP BY w", 1, "partial", by_w),
            ("SELECT v, COUNT(*), SUM(v) FROM t GROUP BY v", 1, "datafusion", by_v),
        ];
        for (sql, keys, place, expected) in cases {
            let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
            let text = datafusion::physical_plan::displayable(plan.as_ref()).indent(false).to_string();
            if place == "datafusion" {
                assert!(
                    text.contains("AggregateExec: mode=Partial") && !text.contains("QuiverAggregateExec"),
                    "{sql}: {text}"
                );
            } else if place == "whole" {
                assert!(
                    text.contains("QuiverAggregateExec: mode=final") && !text.contains("FinalPartitioned"),
                    "{sql}: {text}"
                );
                // The plan's result: nothing above needs it partitioned.
                assert!(!text.contains("RepartitionExec"), "{sql}: {text}");
                assert_eq!(plan.properties().partitioning.partition_count(), 1, "{sql}: {text}");
            } else {
                assert!(
                    text.contains("FinalPartitioned") && text.contains("QuiverAggregateExec: mode=partial"),
                    "{sql}: {text}"
                );
            }
            let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx()).await.unwrap();
            assert_eq!(groups(&batches, keys), expected, "{sql}");
        }

        // Under a partitioned join, each side must come hash-partitioned
        // by the key: the whole final is repartitioned as its final was.
        ctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold = 0").await.unwrap();
        ctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 0").await.unwrap();
        let sql = "SELECT a.g, a.c, b.s FROM (SELECT g, COUNT(*) AS c FROM t GROUP BY g) a \
                   JOIN (SELECT g, SUM(v) AS s FROM t GROUP BY g) b ON a.g = b.g";
        let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        let text = datafusion::physical_plan::displayable(plan.as_ref()).indent(false).to_string();
        assert!(text.contains("HashJoinExec: mode=Partitioned"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        let wholes: Vec<usize> =
            (0..lines.len()).filter(|&i| lines[i].contains("QuiverAggregateExec: mode=final")).collect();
        assert_eq!(wholes.len(), 2, "{text}");
        for i in wholes {
            assert!(i > 0 && lines[i - 1].contains("RepartitionExec: partitioning=Hash([g@0], 4)"), "{text}");
        }
        let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx()).await.unwrap();
        let mut joined = HashMap::new();
        for b in &batches {
            let (g, c, s) = (
                b.column(0).as_primitive::<Int64Type>(),
                b.column(1).as_primitive::<Int64Type>(),
                b.column(2).as_primitive::<Int64Type>(),
            );
            for r in 0..b.num_rows() {
                assert!(
                    joined.insert(g.value(r).to_string(), vec![c.value(r), s.value(r)]).is_none(),
                    "group {} twice",
                    g.value(r)
                );
            }
        }
        assert_eq!(joined, by_g_again, "{sql}");
    }

    /// Rows in the deltas do not make few groups look like many: a table
    /// written to keeps a partial aggregate of two low-cardinality keys in
    /// the scan (each delta row counted as a value of its own made 30 × 50
    /// groups look like every row).
    #[tokio::test]
    async fn delta_rows_keep_few_groups_few() {
        // More groups than a whole final takes could come from the rows
        // (190,000), so the partial aggregate is the scan's only if it
        // reduces them.
        const MAIN: i64 = 100_000;
        const ROWS: i64 = 190_000;
        let db = Database::new();
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        let options = TableOptions::default().with_shard_capacity(100_000).with_background_rebuild(false);
        let table = db.create_table("t", &schema, options).unwrap();
        let batch = |range: std::ops::Range<i64>| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from_iter_values(range.clone().map(|v| v % 50))),
                    Arc::new(StringArray::from_iter_values(range.map(|v| format!("s{}", v % 30)))),
                ],
            )
            .unwrap()
        };
        table.append(&batch(0..MAIN)).unwrap();
        table.rebuild().unwrap();
        table.append(&batch(MAIN..ROWS)).unwrap();
        let ctx = session_context_with(&db, SessionOptions { target_partitions: 4, ..SessionOptions::default() });
        let sql = "SELECT s, g, COUNT(*) FROM t GROUP BY s, g";
        let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        let text = datafusion::physical_plan::displayable(plan.as_ref()).indent(false).to_string();
        assert!(text.contains("QuiverAggregateExec: mode=partial"), "{text}");
        let mut expected = HashMap::new();
        for v in 0..ROWS {
            *expected.entry(format!("s{}|{}", v % 30, v % 50)).or_insert_with(|| vec![0]).first_mut().unwrap() += 1;
        }
        let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx()).await.unwrap();
        assert_eq!(groups(&batches, 2), expected);
    }
}
