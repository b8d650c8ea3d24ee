//! Snapshots: a consistent, immutable view of a table.
//!
//! A [`TableSnapshot`] holds one `Arc` to a published table state: for every
//! shard its storage version, delta length and deletion set. Taking one is
//! a pointer load; holding one keeps exactly that data alive and unchanged
//! while writers append and rebuilds replace shards. The decode path here
//! ([`TableSnapshot::to_record_batches`]) is the plain one; scans read the
//! shards' columns directly.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_schema::SchemaRef;
use arrow_select::concat::concat;
use arrow_select::interleave::interleave;

use crate::delta::Delta;
use crate::error::{Error, Result};
use crate::main::Main;
use crate::main::decode::Rows;
use crate::shard::{DeleteSet, ShardId, ShardState};
use crate::state::TableState;
use crate::types::RecId;
use crate::types::TableSchema;

/// A consistent view of all shards of a table.
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    schema: TableSchema,
    state: Arc<TableState>,
}

impl TableSnapshot {
    pub(crate) fn new(schema: TableSchema, state: Arc<TableState>) -> Self {
        Self { schema, state }
    }

    pub(crate) fn state(&self) -> &TableState {
        &self.state
    }

    /// The table schema.
    pub fn schema(&self) -> &TableSchema {
        &self.schema
    }

    /// Number of shards.
    pub fn num_shards(&self) -> usize {
        self.state.shards.len()
    }

    /// Shard `i` (by position).
    pub fn shard(&self, i: usize) -> ShardSnapshot<'_> {
        ShardSnapshot { state: self.state.shards.get(i), schema: &self.schema }
    }

    /// The shards, in order.
    pub fn shards(&self) -> impl Iterator<Item = ShardSnapshot<'_>> {
        self.state.shards.iter().map(|state| ShardSnapshot { state, schema: &self.schema })
    }

    /// Number of live rows.
    pub fn row_count(&self) -> usize {
        self.state.shards.iter().map(ShardState::live).sum()
    }

    /// Decodes every live row, one batch per non-empty shard, with the
    /// columns `projection` (all when `None`) in that order.
    pub fn to_record_batches(&self, projection: Option<&[usize]>) -> Result<Vec<RecordBatch>> {
        self.shards().filter(|s| s.live_rows() > 0).map(|s| s.to_record_batch(projection)).collect()
    }
}

/// One shard of a [`TableSnapshot`].
#[derive(Debug, Clone, Copy)]
pub struct ShardSnapshot<'a> {
    state: &'a ShardState,
    schema: &'a TableSchema,
}

impl<'a> ShardSnapshot<'a> {
    pub(crate) fn new(state: &'a ShardState, schema: &'a TableSchema) -> Self {
        Self { state, schema }
    }

    /// The table schema.
    pub fn schema(&self) -> &'a TableSchema {
        self.schema
    }

    /// The shard's id.
    pub fn id(&self) -> ShardId {
        self.state.data.id
    }

    /// The shard's storage version (incremented by each rebuild).
    pub fn version(&self) -> u64 {
        self.state.data.version
    }

    /// Maximum rows of this shard version.
    pub fn capacity(&self) -> usize {
        self.state.data.capacity
    }

    /// Main storage (record ids `0 .. main().rows()`).
    pub fn main(&self) -> &'a Main {
        &self.state.data.main
    }

    /// The delta; rows `0 .. delta_len()` of it belong to this snapshot.
    pub fn delta(&self) -> &'a Delta {
        &self.state.data.delta
    }

    /// Delta rows visible in this snapshot.
    pub fn delta_len(&self) -> usize {
        self.state.delta_len
    }

    /// Rows (live and deleted): record ids are `0 .. rows()`.
    pub fn rows(&self) -> usize {
        self.state.rows()
    }

    /// Live rows.
    pub fn live_rows(&self) -> usize {
        self.state.live()
    }

    /// The deleted record ids, if any.
    pub fn deletes(&self) -> Option<&'a DeleteSet> {
        self.state.deletes.as_ref()
    }

    /// True if record `id` is deleted.
    pub fn is_deleted(&self, id: RecId) -> bool {
        self.deletes().is_some_and(|d| d.contains(id))
    }

    /// Live record ids in ascending order.
    pub fn live_ids(&self) -> Vec<RecId> {
        let rows = self.rows();
        match self.deletes() {
            None => (0..rows as RecId).collect(),
            Some(d) => {
                let mut ids = Vec::with_capacity(rows - d.count());
                let mut next = 0;
                for (start, end) in d.bits().slice(0, rows).set_slices() {
                    ids.extend(next as RecId..start as RecId);
                    next = end;
                }
                ids.extend(next as RecId..rows as RecId);
                ids
            }
        }
    }

    fn schema_for(&self, projection: Option<&[usize]>) -> Result<(Vec<usize>, SchemaRef)> {
        let all = self.schema.arrow();
        match projection {
            None => Ok(((0..self.schema.len()).collect(), Arc::clone(all))),
            Some(p) => {
                if let Some(&bad) = p.iter().find(|&&c| c >= self.schema.len()) {
                    return Err(Error::Internal(format!(
                        "projection of column {bad} of a {}-column table",
                        self.schema.len()
                    )));
                }
                Ok((p.to_vec(), Arc::new(all.project(p)?)))
            }
        }
    }

    /// Decodes the shard's live rows.
    pub fn to_record_batch(&self, projection: Option<&[usize]>) -> Result<RecordBatch> {
        let (cols, schema) = self.schema_for(projection)?;
        let main_rows = self.main().rows();
        let ids = self.deletes().map(|_| self.live_ids());
        let (main_ids, delta_ids): (Option<&[RecId]>, Option<Vec<RecId>>) = match &ids {
            None => (None, None),
            Some(ids) => {
                let split = ids.partition_point(|&id| (id as usize) < main_rows);
                let delta: Vec<RecId> = ids[split..].iter().map(|&id| id - main_rows as RecId).collect();
                (Some(&ids[..split]), Some(delta))
            }
        };
        let columns = cols
            .iter()
            .map(|&c| {
                let mut parts: Vec<ArrayRef> = Vec::with_capacity(2);
                if let Some(col) = self.main().column(c) {
                    parts.push(match main_ids {
                        None => col.decode_range(0, main_rows)?,
                        Some(ids) => col.gather(ids)?,
                    });
                }
                let delta_rows = match &delta_ids {
                    None => Rows::Range(0, self.delta_len()),
                    Some(ids) => Rows::Ids(ids),
                };
                if delta_rows.len() > 0 || parts.is_empty() {
                    parts.push(self.delta().column(c).decode(self.delta_len(), delta_rows)?);
                }
                concat_parts(parts)
            })
            .collect::<Result<Vec<_>>>()?;
        batch(schema, columns, self.live_rows())
    }

    /// Gathers records `ids` (any order, main and delta ids mixed) with the
    /// columns `projection`.
    pub fn gather(&self, ids: &[RecId], projection: Option<&[usize]>) -> Result<RecordBatch> {
        let (cols, schema) = self.schema_for(projection)?;
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.rows()) {
            return Err(Error::Internal(format!("gather of record {bad} from a shard of {} rows", self.rows())));
        }
        let main_rows = self.main().rows() as RecId;
        let main_ids: Vec<RecId> = ids.iter().copied().filter(|&id| id < main_rows).collect();
        let delta_ids: Vec<RecId> = ids.iter().filter(|&&id| id >= main_rows).map(|&id| id - main_rows).collect();
        let columns = cols
            .iter()
            .map(|&c| {
                let delta = self.delta().column(c).decode(self.delta_len(), Rows::Ids(&delta_ids))?;
                let Some(col) = self.main().column(c).filter(|_| !main_ids.is_empty()) else {
                    return Ok(delta);
                };
                let main = col.gather(&main_ids)?;
                if delta_ids.is_empty() {
                    return Ok(main);
                }
                // Re-interleave in the requested order.
                let (mut m, mut d) = (0, 0);
                let order: Vec<(usize, usize)> = ids
                    .iter()
                    .map(|&id| {
                        if id < main_rows {
                            m += 1;
                            (0, m - 1)
                        } else {
                            d += 1;
                            (1, d - 1)
                        }
                    })
                    .collect();
                Ok(interleave(&[main.as_ref(), delta.as_ref()], &order)?)
            })
            .collect::<Result<Vec<_>>>()?;
        batch(schema, columns, ids.len())
    }
}

fn concat_parts(mut parts: Vec<ArrayRef>) -> Result<ArrayRef> {
    if parts.len() == 1 {
        return Ok(parts.pop().expect("one part"));
    }
    let refs: Vec<&dyn arrow_array::Array> = parts.iter().map(|a| a.as_ref()).collect();
    Ok(concat(&refs)?)
}

fn batch(schema: SchemaRef, columns: Vec<ArrayRef>, rows: usize) -> Result<RecordBatch> {
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(schema, columns, &options)?)
}
