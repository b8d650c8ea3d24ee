//! DELETE and UPDATE driven by a predicate, atomically.
//!
//! Both run inside one storage transaction: the predicate is evaluated on
//! the transaction's snapshot (no other writer can change the table until
//! it commits), the matching records are deleted and, for UPDATE, their
//! new versions appended; everything becomes visible at once, or nothing
//! does if any step fails (a bad value, an overflow).

use std::sync::Arc;

use quiverdb_mapreducer::{GatherKernel, GatherSpec, MapExpr, MapReducer, RecId, ShardMapReducer};
use quiverdb_storage::{ShardId, Table, TableSnapshot};

use crate::error::{Error, Result};
use crate::filter::{PreparedFilter, ShardFilter};
use crate::predicate::Predicate;
use crate::unordered::{Budget, Flow, Selection, select};
use crate::{ScanOptions, parallel};

/// Rows per batch of an UPDATE's new row versions.
const UPDATE_BATCH_ROWS: usize = 8192;

/// The records of `snapshot` that pass `filter`, per shard.
pub fn matching_records(
    snapshot: &TableSnapshot,
    filter: Option<&Predicate>,
    options: &ScanOptions,
) -> Result<Vec<(ShardId, Vec<RecId>)>> {
    if let Some(p) = filter {
        p.validate(snapshot.schema())?;
    }
    let shards = options.shard_positions(snapshot);
    let budget = Budget::new(options.limit);
    let prepared = filter.map(|p| PreparedFilter::new(p, snapshot.schema())).transpose()?;
    let per_shard = parallel::map_collect(options.threads, &shards, |&i| {
        let shard = snapshot.shard(i);
        let mut compiled = prepared.as_ref().map(|p| ShardFilter::new(shard, p)).transpose()?;
        let mut ids: Vec<RecId> = Vec::new();
        let mut buf = [0 as RecId; quiverdb_mapreducer::LANES];
        select(
            shard,
            compiled.as_mut(),
            options.id_buffer(),
            |_| false,
            |sel| {
                let want = sel.count();
                let granted = budget.take(want);
                match sel {
                    Selection::Ids(v) => ids.extend_from_slice(&v[..granted]),
                    Selection::Block(b) => {
                        let n = b.write_ids(&mut buf);
                        ids.extend_from_slice(&buf[..n.min(granted)]);
                    }
                }
                Ok(if granted < want { Flow::Stop } else { Flow::Continue })
            },
        )?;
        Ok((shard.id(), ids))
    })?;
    Ok(per_shard.into_iter().filter(|(_, ids)| !ids.is_empty()).collect())
}

/// `DELETE FROM table WHERE filter`: returns the number of rows deleted.
pub fn delete_where(table: &Table, filter: Option<&Predicate>, options: &ScanOptions) -> Result<usize> {
    table.try_transaction(|t| {
        let selection = matching_records(&t.snapshot(), filter, options)?;
        let mut deleted = 0;
        for (shard, ids) in &selection {
            deleted += t.delete(*shard, ids)?;
        }
        Ok(deleted)
    })
}

/// `UPDATE table SET column = expr, ... WHERE filter`: returns the number
/// of rows updated. Each expression must have its column's type; it sees
/// the row's old values.
pub fn update_where(
    table: &Table,
    assignments: &[(usize, MapExpr)],
    filter: Option<&Predicate>,
    options: &ScanOptions,
) -> Result<usize> {
    let schema = table.schema().clone();
    let mut exprs: Vec<(MapExpr, String)> =
        (0..schema.len()).map(|c| (MapExpr::Column(c), schema.field(c).name().clone())).collect();
    for (col, expr) in assignments {
        let field = (*col < schema.len())
            .then(|| schema.field(*col))
            .ok_or_else(|| Error::InvalidPredicate(format!("UPDATE assigns column #{col}, which does not exist")))?;
        let t = expr.data_type(&schema)?;
        if &t != field.data_type() {
            return Err(Error::InvalidPredicate(format!(
                "UPDATE assigns {t} to column '{}' of type {}",
                field.name(),
                field.data_type()
            )));
        }
        exprs[*col].0 = expr.clone();
    }
    let spec = Arc::new(GatherSpec::new(exprs, &schema, UPDATE_BATCH_ROWS)?);
    table.try_transaction(|t| {
        let snapshot = t.snapshot();
        let selection = matching_records(&snapshot, filter, options)?;
        let mut acc = spec.new_acc();
        for (shard_id, ids) in &selection {
            let pos = (0..snapshot.num_shards())
                .find(|&p| snapshot.shard(p).id() == *shard_id)
                .ok_or_else(|| Error::Internal(format!("shard {shard_id} left its own snapshot")))?;
            let mut reducer = ShardMapReducer::open(snapshot.shard(pos), GatherKernel::new(Arc::clone(&spec))?)?;
            acc = reducer.stream(acc, ids);
            acc = reducer.finish(acc);
        }
        // Evaluate every new row before deleting anything.
        let batches = acc.finish()?;
        let mut updated = 0;
        for (shard, ids) in &selection {
            updated += t.delete(*shard, ids)?;
        }
        for batch in &batches {
            t.append(batch)?;
        }
        Ok(updated)
    })
}
