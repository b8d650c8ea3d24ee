//! Tables: a schema, a list of shards, and the protocol that makes every
//! write atomic and every read a consistent snapshot.
//!
//! ```text
//!   writers ──▶ writer lock ──▶ Transaction                    readers
//!                               ├ copy of the state (cheap)    │
//!                               ├ appends: copy into deltas    │ state.load()
//!                               │   past the committed length  │   = one pointer
//!                               ├ deletes: copy-on-write sets  ▼
//!                               └ commit: delta.commit(len),  TableSnapshot
//!                                  then publish(new) ────────▶ (Arc<TableState>)
//! ```
//!
//! All of a transaction (a multi-shard append, an update's delete and
//! append) becomes visible with one pointer swap, or not at all if it
//! fails. Readers never take the lock; writers hold it only while they copy
//! their own data. A rebuild builds its new shard version without the lock
//! and takes it only to carry over what changed meanwhile and publish.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_buffer::BooleanBufferBuilder;
use arrow_schema::{Schema, SchemaRef};

use crate::background::Background;
use crate::change::{ShardDeletes, Staging, TableChange, TableLog};
use crate::delta::Delta;
use crate::error::{Error, Result};
use crate::index::{KeyCodec, KeyFilter};
use crate::ingest::{decoded, encode_value, validate_batch};
use crate::main::decode::Rows;
use crate::main::{Main, MainColumn};
use crate::names::ColumnChange;
use crate::pk::PendingKeys;
use crate::rebuild;
use crate::shard::{DeleteSet, ShardData, ShardId, ShardList, ShardState};
use crate::snapshot::{KeyRange, Probe, TableSnapshot};
use crate::state::{TableCore, TableOptions, TableState, WriterGuard};
use crate::types::{RecId, TableSchema, Value};

/// Appended keys from which a commit builds the table's key filter (fewer
/// are probed shard by shard, which costs less than a pass over the table).
const FILTER_MIN_KEYS: usize = 64;

/// A transaction's changes, as they will be logged.
#[derive(Debug, Default)]
struct PendingLog {
    truncate: bool,
    /// Appends written to the log already.
    staging: Option<Staging>,
    /// Appends not written yet, and their size in memory.
    appends: Vec<RecordBatch>,
    append_bytes: usize,
    /// Shard id → (shard version, ids).
    deletes: BTreeMap<u64, (u64, Vec<RecId>)>,
}

impl PendingLog {
    fn is_empty(&self) -> bool {
        !self.truncate && self.staging.is_none() && self.appends.is_empty() && self.deletes.is_empty()
    }

    fn push(&mut self, batch: RecordBatch) {
        self.append_bytes += batch.get_array_memory_size();
        self.appends.push(batch);
    }

    /// Writes the appends held to `log` once they are large enough.
    fn stage_if_large(&mut self, table: &str, log: &TableLog) -> Result<()> {
        if self.append_bytes < log.stage_bytes() {
            return Ok(());
        }
        log.stage(table, &mut self.staging, &self.appends)?;
        self.appends.clear();
        self.append_bytes = 0;
        Ok(())
    }

    /// The change to log, and the staging its commit names.
    fn into_change(self) -> (TableChange, Option<Staging>) {
        let deletes =
            self.deletes.into_iter().map(|(shard, (version, ids))| ShardDeletes { shard, version, ids }).collect();
        let staged = self.staging.as_ref().map(|s| s.staged);
        (TableChange::Commit { truncate: self.truncate, staged, appends: self.appends, deletes }, self.staging)
    }
}

/// A table handle. Cheap to clone; all clones share the table.
#[derive(Debug, Clone)]
pub struct Table {
    core: Arc<TableCore>,
}

impl Table {
    /// A new, empty table, after checking its definition: a name, options
    /// in range, and a schema of types quiverdb stores with a valid key.
    pub(crate) fn create(name: &str, schema: &Schema, options: TableOptions, background: Background) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::InvalidSchema("a table name cannot be empty".into()));
        }
        options.validate()?;
        let key: Vec<&str> = options.primary_key.iter().map(String::as_str).collect();
        let schema = TableSchema::try_new(schema, &key)?.with_unique(&options.unique)?;
        let mut seen = std::collections::BTreeSet::new();
        for (column, _) in &options.column_defaults {
            if schema.arrow().index_of(column).is_err() {
                return Err(Error::InvalidSchema(format!(
                    "a default is declared for column '{column}', which the table does not have"
                )));
            }
            if !seen.insert(column) {
                return Err(Error::InvalidSchema(format!("column '{column}' has two defaults")));
            }
        }
        Ok(Self { core: TableCore::new(name.into(), schema, options, background) })
    }

    /// This table under a new definition (`name`, `schema`, `options`)
    /// over the same rows: its shards are shared, not copied, so the new
    /// schema must have the same column types in the same order. The
    /// caller holds this table's writer lock (`writer`) and marks it
    /// dropped once the new table is in the catalog; the new table takes
    /// over its durable identity and shard numbering now, and its log at
    /// [`Table::take_log`].
    pub(crate) fn redefined(
        &self,
        writer: &mut WriterGuard<'_>,
        name: &str,
        schema: &Schema,
        options: TableOptions,
        change: &ColumnChange,
    ) -> Result<Self> {
        let old = self.arrow_schema().fields();
        let kept: Vec<&arrow_schema::FieldRef> = match change {
            ColumnChange::Drop(index) => old.iter().enumerate().filter(|(i, _)| i != index).map(|(_, f)| f).collect(),
            _ => old.iter().collect(),
        };
        let added = usize::from(matches!(change, ColumnChange::Add(_)));
        let same_types = schema.fields().len() == kept.len() + added
            && schema
                .fields()
                .iter()
                .zip(&kept)
                .all(|(a, b)| a.data_type() == b.data_type() && a.is_nullable() == b.is_nullable());
        if !same_types {
            return Err(Error::Internal("a redefined table must keep the types of the columns it keeps".into()));
        }
        let table = Self::create(name, schema, options, self.core.background().clone())?;
        let mut state = (*self.core.latest()).clone();
        if *change != ColumnChange::None {
            let mut shards = ShardList::default();
            for shard in state.shards.iter() {
                shards.push(reshaped(shard, table.schema(), change)?);
            }
            state.shards = shards;
        }
        let mut next = table.core.lock()?;
        next.set_next_shard_id(writer.next_shard_id());
        next.set_uid(writer.uid());
        next.publish(state);
        drop(next);
        Ok(table)
    }

    /// Moves the log of the table whose writer lock is `from` to this one.
    pub(crate) fn take_log(&self, from: &mut WriterGuard<'_>) -> Result<()> {
        self.core.lock()?.replace_log(from.replace_log(TableLog::Off));
        Ok(())
    }

    /// The table itself.
    pub(crate) fn core(&self) -> &Arc<TableCore> {
        &self.core
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        self.core.name()
    }

    /// The validated schema.
    pub fn schema(&self) -> &TableSchema {
        self.core.schema()
    }

    /// The Arrow schema.
    pub fn arrow_schema(&self) -> &SchemaRef {
        self.core.schema().arrow()
    }

    /// The table's options.
    pub fn options(&self) -> &TableOptions {
        self.core.options()
    }

    /// A consistent view of every shard as of now. It stays valid (and
    /// unchanged) while writers and rebuilds continue.
    pub fn snapshot(&self) -> TableSnapshot {
        TableSnapshot::new(self.core.shared_name(), self.core.schema().clone(), self.core.state())
    }

    /// Number of live rows.
    pub fn row_count(&self) -> usize {
        self.core.live_rows()
    }

    /// The live row whose primary key is `key`, as of now: see
    /// [`TableSnapshot::get`].
    pub fn get(&self, key: &[Value<'_>], projection: Option<&[usize]>) -> Result<Option<RecordBatch>> {
        self.snapshot().get(key, projection)
    }

    /// The live rows whose primary keys are `keys`, as of now: see
    /// [`TableSnapshot::multi_get`].
    pub fn multi_get(&self, keys: &[ArrayRef], projection: Option<&[usize]>) -> Result<RecordBatch> {
        self.snapshot().multi_get(keys, projection)
    }

    /// Runs `f` as one atomic write: everything it appends and deletes
    /// becomes visible together when it returns `Ok`, and nothing does if it
    /// returns `Err`. Writers are serialised; readers are never blocked.
    pub fn transaction<R>(&self, f: impl FnOnce(&mut Transaction<'_>) -> Result<R>) -> Result<R> {
        self.try_transaction(f)
    }

    /// [`Table::transaction`] for callers with their own error type (any
    /// type storage errors convert into).
    pub fn try_transaction<R, E: From<Error>>(
        &self,
        f: impl FnOnce(&mut Transaction<'_>) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        let mut txn = Transaction::begin(&self.core)?;
        match f(&mut txn) {
            Ok(out) => {
                txn.commit()?;
                Ok(out)
            }
            Err(e) => Err(txn.abort(e)),
        }
    }

    /// Replays a logged transaction: as [`Table::transaction`], but its
    /// keys are not checked again (they were when it was logged; checking
    /// each replayed commit against the table made replaying many small
    /// ones quadratic).
    pub(crate) fn replay_transaction(&self, f: impl FnOnce(&mut Transaction<'_>) -> Result<()>) -> Result<()> {
        let mut txn = Transaction::begin(&self.core)?;
        txn.keys.clear();
        // Its keys are not added to the key filter: it is built anew.
        txn.writer.set_key_filter(None);
        match f(&mut txn) {
            Ok(()) => txn.commit(),
            Err(e) => Err(txn.abort(e)),
        }
    }

    /// Appends a batch; returns the number of rows appended. The batch is
    /// validated whole first (column names, types, NOT NULL, decimal
    /// precision) and rejected whole on any error.
    pub fn append(&self, batch: &RecordBatch) -> Result<usize> {
        self.transaction(|t| t.append(batch))
    }

    /// Appends one row given as one [`Value`] per column.
    pub fn append_row(&self, row: &[Value<'_>]) -> Result<()> {
        self.transaction(|t| t.append_row(row))
    }

    /// Deletes records chosen on `snapshot`: for each shard id, the record
    /// ids to delete. Returns the number of rows deleted (records already
    /// deleted are not counted). Fails with [`Error::Conflict`] if a chosen
    /// shard was rebuilt or removed since the snapshot.
    pub fn delete(&self, snapshot: &TableSnapshot, selection: &[(ShardId, Vec<RecId>)]) -> Result<usize> {
        self.transaction(|t| t.delete_selection(snapshot, selection))
    }

    /// Replaces records chosen on `snapshot` by the rows of `rows`,
    /// atomically (a delete plus an append in one transaction). Returns the
    /// number of rows deleted.
    pub fn update(
        &self,
        snapshot: &TableSnapshot,
        selection: &[(ShardId, Vec<RecId>)],
        rows: &RecordBatch,
    ) -> Result<usize> {
        self.transaction(|t| {
            let deleted = t.delete_selection(snapshot, selection)?;
            t.append(rows)?;
            Ok(deleted)
        })
    }

    /// Removes every row; returns how many were live.
    pub fn truncate(&self) -> Result<usize> {
        self.transaction(|t| Ok(t.truncate()))
    }

    /// Rebuilds every shard that has delta rows or deletions into fresh
    /// main storage, in parallel, and returns when all are done.
    pub fn rebuild(&self) -> Result<()> {
        rebuild::rebuild_table(&self.core)
    }

    /// Number of background rebuilds that failed, and the last error. A
    /// failure leaves the shard as it was (still correct, just not
    /// compacted); any failure is a bug in quiverdb.
    pub fn background_rebuild_failures(&self) -> (u64, Option<String>) {
        self.core.rebuild_failures()
    }
}

/// An atomic write in progress; see [`Table::transaction`].
#[derive(Debug)]
pub struct Transaction<'t> {
    table: &'t TableCore,
    writer: WriterGuard<'t>,
    base: Arc<TableState>,
    work: TableState,
    /// Copy-on-write delete bitmaps of touched shards: position → (bits, newly deleted).
    deletes: BTreeMap<usize, (BooleanBufferBuilder, usize)>,
    /// Positions of shards whose delta grew (or that are new).
    appended: Vec<usize>,
    /// Keys appended, one set per primary key or UNIQUE constraint.
    keys: Vec<PendingKeys>,
    /// What to log at commit, for a logged table.
    log: Option<PendingLog>,
    /// The table's next shard id when the transaction began.
    first_shard_id: u64,
}

impl<'t> Transaction<'t> {
    fn begin(table: &'t TableCore) -> Result<Self> {
        let writer = table.lock()?;
        if table.is_dropped() {
            return Err(Error::TableNotFound(table.name().to_string()));
        }
        writer.log().check_writable()?;
        let base = table.latest();
        let work = (*base).clone();
        let keys = PendingKeys::of(table.schema());
        let log = writer.log().is_on().then(PendingLog::default);
        let first_shard_id = writer.next_shard_id();
        Ok(Self {
            table,
            writer,
            base,
            work,
            deletes: BTreeMap::new(),
            appended: Vec::new(),
            keys,
            log,
            first_shard_id,
        })
    }

    /// The table as it was when the transaction began: the snapshot that
    /// record ids passed to [`Transaction::delete`] refer to.
    pub fn snapshot(&self) -> TableSnapshot {
        TableSnapshot::new(self.table.shared_name(), self.table.schema().clone(), Arc::clone(&self.base))
    }

    /// The version of shard `shard` when the transaction began.
    pub(crate) fn shard_version(&self, shard: ShardId) -> Option<u64> {
        self.base.shards.position(shard).map(|p| self.base.shards.get(p).data.version)
    }

    /// The tail shard, with room for at least one row (creating a shard if needed).
    fn tail_with_room(&mut self) -> usize {
        if self.work.shards.last().is_none_or(|s| s.room() == 0) {
            let id = self.writer.take_shard_id();
            let capacity = self.table.options().shard_capacity;
            let schema = self.table.schema();
            let data = ShardData::new(id, 0, capacity, Main::empty(schema.len()), Delta::new(schema, capacity));
            self.work.shards.push(ShardState { data: Arc::new(data), delta_len: 0, deletes: None });
        }
        self.work.shards.len() - 1
    }

    /// Appends a batch (validated whole first); returns its row count.
    pub fn append(&mut self, batch: &RecordBatch) -> Result<usize> {
        let batch = &*decoded(batch)?;
        validate_batch(self.table.name(), self.table.schema(), batch)?;
        let n = batch.num_rows();
        for keys in &mut self.keys {
            let arrays: Vec<ArrayRef> = keys.columns().iter().map(|&c| Arc::clone(batch.column(c))).collect();
            keys.add(self.table.name(), self.table.schema(), &arrays, n)?;
        }
        let mut done = 0;
        while done < n {
            let idx = self.tail_with_room();
            let shard = self.work.shards.get_mut(idx);
            let k = shard.room().min(n - done);
            shard.data.delta.write_batch(shard.delta_len, batch.columns(), done, k)?;
            shard.delta_len += k;
            done += k;
            self.appended.push(idx);
        }
        if let Some(log) = &mut self.log
            && n > 0
        {
            log.push(crate::durable::record::log_form(batch));
            log.stage_if_large(self.table.name(), self.writer.log())?;
        }
        Ok(n)
    }

    /// Appends one row (validated whole first).
    pub fn append_row(&mut self, row: &[Value<'_>]) -> Result<()> {
        let schema = self.table.schema();
        if row.len() != schema.len() {
            return Err(Error::SchemaMismatch {
                table: self.table.name().to_string(),
                reason: format!("the table has {} columns, the row has {}", schema.len(), row.len()),
            });
        }
        let cell = |i: usize| encode_value(self.table.name(), schema.field(i), schema.physical(i), &row[i]);
        for i in 0..row.len() {
            cell(i)?;
        }
        let idx = self.tail_with_room();
        let shard = self.work.shards.get(idx);
        let at = shard.delta_len;
        shard.data.delta.write_row(at, cell)?;
        for keys in &mut self.keys {
            // Read the key back from the (not yet counted) row.
            let arrays = keys
                .columns()
                .iter()
                .map(|&c| shard.data.delta.column(c).decode(at + 1, Rows::Ids(&[at as RecId])))
                .collect::<Result<Vec<_>>>()?;
            keys.add(self.table.name(), self.table.schema(), &arrays, 1)?;
        }
        if let Some(log) = &mut self.log {
            // Log the row as stored (one-row batch read back from the delta).
            let columns = (0..schema.len())
                .map(|c| shard.data.delta.column(c).decode(at + 1, Rows::Ids(&[at as RecId])))
                .collect::<Result<Vec<_>>>()?;
            let one = arrow_array::RecordBatchOptions::new().with_row_count(Some(1));
            let batch = RecordBatch::try_new_with_options(Arc::clone(schema.arrow()), columns, &one)?;
            log.push(batch);
            log.stage_if_large(self.table.name(), self.writer.log())?;
        }
        self.work.shards.get_mut(idx).delta_len += 1;
        self.appended.push(idx);
        Ok(())
    }

    /// Deletes records of shard `shard` given by ids of this transaction's
    /// snapshot; returns how many were live.
    pub fn delete(&mut self, shard: ShardId, ids: &[RecId]) -> Result<usize> {
        let missing = || Error::RecordNotFound {
            table: self.table.name().to_string(),
            shard: shard.0,
            record: ids.first().copied().unwrap_or(0),
        };
        let pos = self.base.shards.position(shard).ok_or_else(missing)?;
        let base = self.base.shards.get(pos);
        // A truncate earlier in this transaction removed the shard.
        if pos >= self.work.shards.len() || !Arc::ptr_eq(&self.work.shards.get(pos).data, &base.data) {
            return Err(missing());
        }
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= base.rows()) {
            return Err(Error::RecordNotFound { table: self.table.name().to_string(), shard: shard.0, record: bad });
        }
        // Ids refer to the base; the shard keeps its position in `work`
        // (shards are only removed by rebuilds, which hold this lock to publish).
        let (bits, newly) = self.deletes.entry(pos).or_insert_with(|| {
            let cur = self.work.shards.get(pos);
            let bits = match &cur.deletes {
                Some(d) => d.to_builder(),
                None => {
                    let mut b = BooleanBufferBuilder::new(cur.data.capacity);
                    b.append_n(cur.data.capacity, false);
                    b
                }
            };
            (bits, 0)
        });
        let before = *newly;
        for &id in ids {
            if !bits.get_bit(id as usize) {
                bits.set_bit(id as usize, true);
                *newly += 1;
            }
        }
        if let Some(log) = &mut self.log {
            let (_, logged) = log.deletes.entry(shard.0).or_insert_with(|| (base.data.version, Vec::new()));
            logged.extend_from_slice(ids);
        }
        Ok(*newly - before)
    }

    /// Deletes a selection made on `snapshot` (which may be older than this
    /// transaction): fails with [`Error::Conflict`] if a chosen shard was
    /// rebuilt or removed since.
    pub fn delete_selection(&mut self, snapshot: &TableSnapshot, selection: &[(ShardId, Vec<RecId>)]) -> Result<usize> {
        let mut total = 0;
        for (shard, ids) in selection {
            if ids.is_empty() {
                continue;
            }
            let conflict = || Error::Conflict { table: self.table.name().to_string() };
            let then = snapshot.state().shards.position(*shard).map(|p| snapshot.state().shards.get(p));
            let now = self.base.shards.position(*shard).map(|p| self.base.shards.get(p));
            match (then, now) {
                (Some(t), Some(n)) if Arc::ptr_eq(&t.data, &n.data) => {
                    if let Some(&bad) = ids.iter().find(|&&id| id as usize >= t.rows()) {
                        return Err(Error::RecordNotFound {
                            table: self.table.name().to_string(),
                            shard: shard.0,
                            record: bad,
                        });
                    }
                    total += self.delete(*shard, ids)?;
                }
                (Some(_), _) => return Err(conflict()),
                (None, _) => {
                    return Err(Error::RecordNotFound {
                        table: self.table.name().to_string(),
                        shard: shard.0,
                        record: ids[0],
                    });
                }
            }
        }
        Ok(total)
    }

    /// Removes every shard; returns the number of live rows removed.
    pub fn truncate(&mut self) -> usize {
        let live: usize = self.work.shards.iter().map(ShardState::live).sum::<usize>()
            - self.deletes.values().map(|(_, n)| n).sum::<usize>();
        self.work.shards = ShardList::default();
        self.deletes.clear();
        self.appended.clear();
        // The shards this transaction made are gone unpublished: their ids
        // are handed out again, as the log's replay (which never sees them) will.
        self.writer.set_next_shard_id(self.first_shard_id);
        // The keys are gone (a filter that still held them would only let
        // more keys through; it is built anew when needed).
        self.writer.set_key_filter(None);
        if let Some(log) = &mut self.log {
            *log = PendingLog { truncate: true, ..PendingLog::default() };
        }
        live
    }

    /// Fails if a key this transaction appended is held by a live row it
    /// started from (rows it deleted do not count).
    fn check_keys(&mut self) -> Result<()> {
        for i in 0..self.keys.len() {
            if self.keys[i].is_empty() {
                continue;
            }
            self.keys[i].seal();
            if self.keys[i].is_primary() && self.check_filtered(i)? {
                continue;
            }
            let keys = &self.keys[i];
            let snapshot = self.snapshot();
            for pos in 0..self.base.shards.len() {
                if !self.kept(pos) {
                    continue;
                }
                let deleted = self.deletes.get(&pos).map(|(bits, _)| bits);
                let deleted_here = |id: RecId| deleted.is_some_and(|b| b.get_bit(id as usize));
                keys.check_shard(self.table.name(), self.table.schema(), &snapshot.shard(pos), &deleted_here)?;
            }
        }
        Ok(())
    }

    /// How many of the keys `self.keys[i]` appended lie in the range of the
    /// first key column over every shard it started from.
    fn in_range(&self, codec: &KeyCodec<'_>, i: usize) -> Result<usize> {
        let snapshot = self.snapshot();
        let mut range = KeyRange::Empty;
        for pos in (0..self.base.shards.len()).filter(|&pos| self.kept(pos)) {
            range = range.union(snapshot.shard(pos).key_range(codec)?);
        }
        Ok(self.keys[i].count_in(range))
    }

    /// True when shard `pos` of the base is in the transaction's state
    /// too (a truncate in this transaction removes every shard).
    fn kept(&self, pos: usize) -> bool {
        pos < self.work.shards.len() && Arc::ptr_eq(&self.work.shards.get(pos).data, &self.base.shards.get(pos).data)
    }

    /// Checks the primary key's appended keys (`self.keys[i]`) through the
    /// table's key filter: only the keys it does not rule out probe the
    /// shards. The filter is built by the first commit of at least
    /// [`FILTER_MIN_KEYS`] keys (from the state it starts from, in one
    /// pass), built anew when full, and takes every appended key. False,
    /// having checked nothing, when there is no filter and too few keys to
    /// build one: the shards are then probed (or scanned) key by key.
    fn check_filtered(&mut self, i: usize) -> Result<bool> {
        let schema = self.table.schema();
        let Some(codec) = KeyCodec::of(schema) else { return Ok(false) };
        let keys = &self.keys[i];
        let filter = self.writer.key_filter();
        if filter.as_ref().is_none_or(KeyFilter::is_full) {
            // Keys beyond every shard's key range (a load in key order)
            // are ruled out by the ranges alone: no filter is built for them.
            if filter.is_none() && (keys.len() < FILTER_MIN_KEYS || self.in_range(&codec, i)? < FILTER_MIN_KEYS) {
                return Ok(false);
            }
            // Every row goes in, dead ones too: room for them all, twice over.
            let rows: usize = self.base.shards.iter().map(ShardState::rows).sum();
            let shards = self.base.shards.iter().map(|s| (&s.data.main, &s.data.delta, s.delta_len));
            let built = codec.build_filter(shards, 2 * (rows + keys.len()))?;
            self.writer.set_key_filter(Some(built));
        }
        let Some(filter) = self.writer.key_filter().as_mut() else { return Ok(false) };
        let mut hashes = Vec::with_capacity(keys.len());
        let mut candidates = Vec::new();
        keys.for_each_key(|key| {
            let hash = codec.hash(key);
            if filter.may_contain(hash) {
                candidates.push((key.clone(), hash));
            }
            hashes.push(hash);
            Ok(())
        })?;
        for hash in hashes {
            filter.insert(hash);
        }
        if candidates.is_empty() {
            return Ok(true);
        }
        let snapshot = self.snapshot();
        let deleted = |pos: usize, id: RecId| {
            !self.kept(pos) || self.deletes.get(&pos).is_some_and(|(bits, _)| bits.get_bit(id as usize))
        };
        let mut probe = Probe::default();
        for (key, hash) in &candidates {
            if let Some((pos, id)) = snapshot.find(&codec, key, *hash, &deleted, &mut probe)? {
                return Err(keys.duplicate_of(self.table.name(), schema, &snapshot.shard(pos), id));
            }
        }
        Ok(true)
    }

    /// Ends the transaction without publishing anything; passes `e` on.
    /// Shard ids it took are handed out again: nothing saw those shards,
    /// and the log (whose replay must number shards as the original did)
    /// never mentions them.
    fn abort<E>(mut self, e: E) -> E {
        self.writer.set_next_shard_id(self.first_shard_id);
        e
    }

    /// Checks the primary key, logs the transaction, publishes everything
    /// at once, and (for a logged table) waits until the log makes it as
    /// durable as its sync mode promises: only then do readers see it.
    fn commit(mut self) -> Result<()> {
        if let Err(e) = self.check_keys() {
            return Err(self.abort(e));
        }
        let table: &'t TableCore = self.table;
        let lsn = match self.log.take() {
            Some(log) if !log.is_empty() => {
                let (change, staging) = log.into_change();
                match self.writer.log_mut().write(table.name(), change, staging) {
                    Ok(lsn) => lsn,
                    Err(e) => return Err(self.abort(e)),
                }
            }
            // A logged table's transaction that logged nothing changed
            // nothing; publishing its copy of the newest state would show
            // changes that are not durable yet.
            Some(_) => return self.abort(Ok(())),
            None => None,
        };
        let durable = lsn.zip(self.writer.log().log().cloned());
        let mut touched = std::mem::take(&mut self.appended);
        for (pos, (mut bits, newly)) in std::mem::take(&mut self.deletes) {
            if newly == 0 {
                continue;
            }
            let shard = self.work.shards.get_mut(pos);
            let count = shard.deleted() + newly;
            shard.deletes = Some(DeleteSet::new(bits.finish(), count));
            touched.push(pos);
        }
        touched.sort_unstable();
        touched.dedup();
        let options = table.options();
        // Shards to rebuild now, and shards with delta rows to rebuild once
        // writes to them pause.
        let (mut to_rebuild, mut to_settle) = (Vec::new(), Vec::new());
        for &pos in &touched {
            let shard = self.work.shards.get(pos);
            shard.data.delta.commit(shard.delta_len);
            if options.needs_rebuild(shard) {
                to_rebuild.push(Arc::clone(&shard.data));
            } else if shard.delta_len > 0 {
                to_settle.push(Arc::clone(&shard.data));
            }
        }
        let Self { mut writer, work, .. } = self;
        match &durable {
            Some((lsn, _)) => writer.publish_logged(*lsn, work, false),
            None => writer.publish(work),
        }
        drop(writer);
        if options.background_rebuild {
            for data in to_rebuild {
                rebuild::schedule(table, &data);
            }
            for data in to_settle {
                rebuild::settle(table, &data);
            }
        }
        // Visible once durable; a change the log failed to make durable
        // is never seen (the log refuses every change after it).
        match durable {
            Some((lsn, log)) => match log.commit(lsn) {
                Ok(()) => {
                    table.durable(lsn);
                    Ok(())
                }
                Err(e) => {
                    table.discard(lsn);
                    Err(e)
                }
            },
            None => Ok(()),
        }
    }
}

/// `shard` with the column change `change` made to its rows, for a table
/// of `schema` (the new one): main columns are kept as they are encoded
/// (shared, not copied; an added column is constant-encoded), delta rows
/// are copied into a new delta, and the deletes stay. The new shard has the next version, so a
/// checkpoint writes it to a file of its own.
fn reshaped(shard: &ShardState, schema: &TableSchema, change: &ColumnChange) -> Result<ShardState> {
    let data = &shard.data;
    let main_rows = data.main.rows();
    // Every row of `rows` holding the added value.
    let repeated = |value: &RecordBatch, rows: usize| -> Result<ArrayRef> {
        let zeros = arrow_array::UInt32Array::from(vec![0u32; rows]);
        Ok(arrow_select::take::take(value.column(0).as_ref(), &zeros, None)?)
    };
    let main = if main_rows == 0 {
        Main::empty(schema.len())
    } else {
        let mut columns: Vec<MainColumn> = data.main.columns().to_vec();
        match change {
            ColumnChange::Add(value) => columns.push(MainColumn::from_array(repeated(value, main_rows)?.as_ref())?),
            ColumnChange::Drop(index) => {
                columns.remove(*index);
            }
            ColumnChange::None => {}
        }
        Main::new(main_rows, columns)
    };
    let delta = Delta::new(schema, data.capacity - main_rows);
    let len = shard.delta_len;
    if len > 0 {
        let mut columns = (0..data.delta.num_columns())
            .map(|c| data.delta.column(c).decode(len, Rows::Range(0, len)))
            .collect::<Result<Vec<_>>>()?;
        match change {
            ColumnChange::Add(value) => columns.push(repeated(value, len)?),
            ColumnChange::Drop(index) => {
                columns.remove(*index);
            }
            ColumnChange::None => {}
        }
        delta.write_batch(0, &columns, 0, len)?;
        delta.commit(len);
    }
    let data = ShardData::new(data.id, data.version + 1, data.capacity, main, delta);
    Ok(ShardState { data: Arc::new(data), delta_len: len, deletes: shard.deletes.clone() })
}
