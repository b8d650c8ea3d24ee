//! A table's state: its options, its published shards, and the one
//! operation that changes them.
//!
//! ```text
//!   TableCore
//!   ├─ name, schema, options                     fixed at creation
//!   ├─ state: ArcSwap<TableState>                readers: one pointer load
//!   ├─ pending: Mutex<VecDeque<Pending>>         logged, not durable yet
//!   └─ writer: Mutex<Writer>                     writers: serialised
//!        next shard id · change log · uid
//!
//!   WriterGuard::publish(next)          ── visible now (nothing logged)
//!   WriterGuard::publish_logged(lsn, ..) ─▶ pending ── TableCore::durable(lsn) ─▶ state
//!                                                   └─ TableCore::discard(lsn)  ─▶ dropped
//! ```
//!
//! Transactions, rebuilds and recovery all build a new [`TableState`] and
//! hand it to the writer guard; readers never take the lock. A state whose
//! change was logged becomes visible only once its log record is durable
//! (under the log's sync mode): a write the log fails to make durable is
//! never seen, not even until a restart. Meanwhile the next writer builds
//! on it ([`TableCore::latest`]), so commits to one table still share
//! syncs. This module knows nothing about how a state is built: the
//! modules that do (`table`, `rebuild`, `snapshot`, recovery) build on it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use arc_swap::ArcSwap;

use crate::background::Background;
use crate::change::TableLog;
use crate::error::{Error, Result};
use crate::index::KeyFilter;
use crate::shard::{ShardId, ShardList, ShardState};
use crate::types::TableSchema;

/// Default maximum rows per shard (MemCP's shard size: big enough that
/// per-shard overheads vanish, small enough that a rebuild takes ~10 ms).
pub const DEFAULT_SHARD_CAPACITY: usize = 65_536;

/// Default fraction of deleted rows at which a shard is rebuilt: above it a
/// scan spends more than a fifth of its work skipping dead rows.
pub const DEFAULT_REBUILD_DEAD_FRACTION: f64 = 0.2;

/// Largest shard capacity: record ids are `u32`.
pub const MAX_SHARD_CAPACITY: usize = 1 << 31;

/// Settings of a table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableOptions {
    /// Maximum rows per shard.
    pub shard_capacity: usize,
    /// Fraction of deleted rows (0..=1) at which a shard is rebuilt.
    pub rebuild_dead_fraction: f64,
    /// Rebuild full or mostly-dead shards in the background, and shards
    /// holding delta rows once writes to them have paused for two seconds
    /// (so a table's last rows are compressed too). When false, shards
    /// change only through [`crate::Table::rebuild`].
    pub background_rebuild: bool,
    /// Primary key columns: made NOT NULL, and unique among live rows
    /// (every write is checked when it commits).
    pub primary_key: Vec<String>,
    /// UNIQUE constraints: each a set of columns whose values no two live
    /// rows share (rows with a NULL in any of the columns never conflict).
    /// Checked like the primary key, when every write commits.
    pub unique: Vec<Vec<String>>,
    /// Column defaults, as (column, expression text). Storage keeps them
    /// with the table's definition (logged, checkpointed, recovered) and
    /// does not interpret them: the SQL layer writes and reads the text.
    pub column_defaults: Vec<(String, String)>,
}

impl Default for TableOptions {
    fn default() -> Self {
        Self {
            shard_capacity: DEFAULT_SHARD_CAPACITY,
            rebuild_dead_fraction: DEFAULT_REBUILD_DEAD_FRACTION,
            background_rebuild: true,
            primary_key: Vec::new(),
            unique: Vec::new(),
            column_defaults: Vec::new(),
        }
    }
}

impl TableOptions {
    /// Sets the shard capacity.
    pub fn with_shard_capacity(mut self, capacity: usize) -> Self {
        self.shard_capacity = capacity;
        self
    }

    /// Sets the dead fraction that triggers a rebuild.
    pub fn with_rebuild_dead_fraction(mut self, fraction: f64) -> Self {
        self.rebuild_dead_fraction = fraction;
        self
    }

    /// Enables or disables background rebuilds.
    pub fn with_background_rebuild(mut self, enabled: bool) -> Self {
        self.background_rebuild = enabled;
        self
    }

    /// Declares the primary key.
    pub fn with_primary_key<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
        self.primary_key = columns.into_iter().map(Into::into).collect();
        self
    }

    /// Adds a UNIQUE constraint over `columns`.
    pub fn with_unique<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
        self.unique.push(columns.into_iter().map(Into::into).collect());
        self
    }

    /// Declares the default of `column` (an expression's text; see
    /// [`TableOptions::column_defaults`]).
    pub fn with_column_default(mut self, column: impl Into<String>, expression: impl Into<String>) -> Self {
        self.column_defaults.push((column.into(), expression.into()));
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.shard_capacity == 0 || self.shard_capacity > MAX_SHARD_CAPACITY {
            return Err(Error::InvalidOption {
                option: "shard_capacity",
                reason: format!("must be in 1..={MAX_SHARD_CAPACITY}, got {}", self.shard_capacity),
            });
        }
        if !(self.rebuild_dead_fraction > 0.0 && self.rebuild_dead_fraction <= 1.0) {
            return Err(Error::InvalidOption {
                option: "rebuild_dead_fraction",
                reason: format!("must be in (0, 1], got {}", self.rebuild_dead_fraction),
            });
        }
        Ok(())
    }

    /// True when `shard` is full or has enough dead rows to be rebuilt.
    pub(crate) fn needs_rebuild(&self, shard: &ShardState) -> bool {
        let full = shard.room() == 0 && shard.delta_len > 0;
        let dead = shard.deleted() as f64 > self.rebuild_dead_fraction * shard.rows() as f64;
        full || (dead && shard.deleted() > 0)
    }
}

/// The published state of a table: its shards, each at a delta length and
/// deletion set. Immutable; replaced whole by every publish.
#[derive(Debug, Clone, Default)]
pub(crate) struct TableState {
    pub(crate) shards: ShardList,
}

/// A published state waiting for its log record to become durable.
#[derive(Debug)]
struct Pending {
    lsn: u64,
    state: Arc<TableState>,
    /// Published by a rebuild: the same rows as the state before it.
    rebuild: bool,
}

/// What the writer lock protects.
#[derive(Debug)]
struct Writer {
    next_shard_id: u64,
    log: TableLog,
    /// Names the table's checkpoint files: the log position of the record
    /// that created it (0 for a table that is not durable).
    uid: u64,
    /// The primary key's filter of the newest state's keys, once a large
    /// commit built it (see [`crate::index::KeyFilter`]).
    key_filter: Option<KeyFilter>,
}

/// A table: its definition, its published state, and its writer lock.
#[derive(Debug)]
pub(crate) struct TableCore {
    name: Arc<str>,
    schema: TableSchema,
    options: TableOptions,
    /// The visible state: what readers see.
    state: ArcSwap<TableState>,
    /// States published after `state` whose log records are not known
    /// durable yet, oldest first (see [`WriterGuard::publish_logged`]).
    pending: Mutex<VecDeque<Pending>>,
    writer: Mutex<Writer>,
    dropped: AtomicBool,
    background: Background,
    /// Background rebuilds that failed (each is a bug), and the last error.
    rebuild_failures: AtomicU64,
    /// Bytes of the writer's key filter, for memory figures.
    filter_bytes: AtomicUsize,
    last_rebuild_error: Mutex<Option<String>>,
    self_ref: Weak<TableCore>,
}

impl TableCore {
    /// An empty table whose background work runs on `background`.
    pub(crate) fn new(name: String, schema: TableSchema, options: TableOptions, background: Background) -> Arc<Self> {
        Arc::new_cyclic(|self_ref| TableCore {
            name: name.into(),
            schema,
            options,
            state: ArcSwap::from_pointee(TableState::default()),
            pending: Mutex::new(VecDeque::new()),
            writer: Mutex::new(Writer { next_shard_id: 0, log: TableLog::Off, uid: 0, key_filter: None }),
            filter_bytes: AtomicUsize::new(0),
            dropped: AtomicBool::new(false),
            background,
            rebuild_failures: AtomicU64::new(0),
            last_rebuild_error: Mutex::new(None),
            self_ref: self_ref.clone(),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Bytes of the writer's key filter.
    pub(crate) fn filter_bytes(&self) -> usize {
        self.filter_bytes.load(Ordering::Relaxed)
    }

    /// The name, shared (snapshots name their table in errors).
    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    pub(crate) fn schema(&self) -> &TableSchema {
        &self.schema
    }

    pub(crate) fn options(&self) -> &TableOptions {
        &self.options
    }

    /// The visible state: every change in it is durable.
    pub(crate) fn state(&self) -> Arc<TableState> {
        self.state.load_full()
    }

    /// The newest state, durable or not: what the next change builds on
    /// (and what a checkpoint, which syncs the log first, writes).
    pub(crate) fn latest(&self) -> Arc<TableState> {
        let pending = self.pending();
        match pending.back() {
            Some(p) => Arc::clone(&p.state),
            None => self.state.load_full(),
        }
    }

    fn pending(&self) -> MutexGuard<'_, VecDeque<Pending>> {
        // The queue is consistent after every statement that changes it.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the states whose records are durable through `lsn` visible
    /// (with the rebuilds published right after them, which change no rows).
    pub(crate) fn durable(&self, lsn: u64) {
        let mut pending = self.pending();
        let mut newest = None;
        while pending.front().is_some_and(|p| p.lsn <= lsn || p.rebuild) {
            newest = pending.pop_front();
        }
        if let Some(p) = newest {
            self.state.store(p.state);
        }
    }

    /// Drops the states from the one logged at `lsn` on: its record failed
    /// to become durable, and the log refuses everything after it.
    pub(crate) fn discard(&self, lsn: u64) {
        self.pending().retain(|p| p.lsn < lsn);
    }

    /// Number of live rows of the published state (no reference kept).
    pub(crate) fn live_rows(&self) -> usize {
        self.state.load().shards.iter().map(ShardState::live).sum()
    }

    /// Takes the writer lock.
    pub(crate) fn lock(&self) -> Result<WriterGuard<'_>> {
        let writer =
            self.writer.lock().map_err(|_| Error::Internal(format!("a writer of table '{}' panicked", self.name)))?;
        Ok(WriterGuard { table: self, writer })
    }

    /// True once the table was dropped or replaced.
    pub(crate) fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    /// Where the table's background work runs.
    pub(crate) fn background(&self) -> &Background {
        &self.background
    }

    /// A handle that does not keep the table alive.
    pub(crate) fn weak(&self) -> Weak<TableCore> {
        self.self_ref.clone()
    }

    /// Counts a failed background rebuild.
    pub(crate) fn record_rebuild_failure(&self, e: &Error) {
        self.rebuild_failures.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_rebuild_error.lock() {
            *last = Some(e.to_string());
        }
    }

    /// Failed background rebuilds, and the last error.
    pub(crate) fn rebuild_failures(&self) -> (u64, Option<String>) {
        let last = self.last_rebuild_error.lock().ok().and_then(|e| e.clone());
        (self.rebuild_failures.load(Ordering::Relaxed), last)
    }
}

/// The writer lock of a table, held: the right to change it.
#[derive(Debug)]
pub(crate) struct WriterGuard<'t> {
    table: &'t TableCore,
    writer: MutexGuard<'t, Writer>,
}

impl<'t> WriterGuard<'t> {
    /// The id the next new shard gets.
    pub(crate) fn next_shard_id(&self) -> u64 {
        self.writer.next_shard_id
    }

    /// Sets the id the next new shard gets (handing out again the ids of
    /// shards that were never published, or restoring a checkpoint's).
    pub(crate) fn set_next_shard_id(&mut self, id: u64) {
        self.writer.next_shard_id = id;
    }

    /// Takes an id for a new shard.
    pub(crate) fn take_shard_id(&mut self) -> ShardId {
        let id = ShardId(self.writer.next_shard_id);
        self.writer.next_shard_id += 1;
        id
    }

    /// Where changes are logged.
    pub(crate) fn log(&self) -> &TableLog {
        &self.writer.log
    }

    /// Where changes are logged, to write to.
    pub(crate) fn log_mut(&mut self) -> &mut TableLog {
        &mut self.writer.log
    }

    /// Replaces where changes are logged; the previous one.
    pub(crate) fn replace_log(&mut self, log: TableLog) -> TableLog {
        std::mem::replace(&mut self.writer.log, log)
    }

    /// The table's durable identity (see `Writer::uid`).
    pub(crate) fn uid(&self) -> u64 {
        self.writer.uid
    }

    pub(crate) fn set_uid(&mut self, uid: u64) {
        self.writer.uid = uid;
    }

    /// The primary key's filter, if built.
    pub(crate) fn key_filter(&mut self) -> &mut Option<KeyFilter> {
        &mut self.writer.key_filter
    }

    /// Replaces the key filter (`None` drops it).
    pub(crate) fn set_key_filter(&mut self, filter: Option<KeyFilter>) {
        self.table.filter_bytes.store(filter.as_ref().map_or(0, KeyFilter::size_bytes), Ordering::Relaxed);
        self.writer.key_filter = filter;
    }

    /// Makes `next`, a change that was not logged, the table's state: one
    /// pointer swap; every snapshot taken from now on sees it, and none
    /// taken before changes. (A table that logs publishes through
    /// [`WriterGuard::publish_logged`]; should logged changes be pending
    /// still, `next`, built on them, waits behind them.)
    pub(crate) fn publish(&mut self, next: TableState) {
        let mut pending = self.table.pending();
        match pending.back().map(|p| p.lsn) {
            None => self.table.state.store(Arc::new(next)),
            Some(lsn) => pending.push_back(Pending { lsn, state: Arc::new(next), rebuild: true }),
        }
    }

    /// Publishes `next`, whose change was logged at `lsn`: the next change
    /// builds on it, and readers see it once [`TableCore::durable`] says
    /// the record is (or at once, for a `rebuild`, which changes no rows,
    /// if nothing is pending before it).
    pub(crate) fn publish_logged(&mut self, lsn: u64, next: TableState, rebuild: bool) {
        let mut pending = self.table.pending();
        if rebuild && pending.is_empty() {
            self.table.state.store(Arc::new(next));
        } else {
            pending.push_back(Pending { lsn, state: Arc::new(next), rebuild });
        }
    }

    /// Marks the table dropped: writes through old handles fail from now on.
    pub(crate) fn mark_dropped(&mut self) {
        self.table.dropped.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Arc<TableCore> {
        let schema = TableSchema::try_new(&arrow_schema::Schema::empty(), &[]).expect("a schema");
        TableCore::new("t".into(), schema, TableOptions::default(), Background::default())
    }

    fn shards(state: &Arc<TableState>) -> usize {
        state.shards.len()
    }

    fn with_shards(n: usize) -> TableState {
        let schema = TableSchema::try_new(&arrow_schema::Schema::empty(), &[]).expect("a schema");
        let mut state = TableState::default();
        for id in 0..n {
            let data = crate::shard::ShardData::new(
                ShardId(id as u64),
                0,
                4,
                crate::main::Main::empty(0),
                crate::delta::Delta::new(&schema, 4),
            );
            state.shards.push(ShardState { data: Arc::new(data), delta_len: 0, deletes: None });
        }
        state
    }

    /// Readers see a logged change only once its record is durable, in
    /// order; a failed one and everything after it are dropped; a change
    /// published without logging while others are pending waits behind them.
    #[test]
    fn logged_states_become_visible_in_order_once_durable() {
        let t = table();
        let mut w = t.lock().expect("the writer lock");
        w.publish_logged(5, with_shards(1), false);
        w.publish_logged(6, with_shards(1), true);
        w.publish_logged(7, with_shards(2), false);
        assert_eq!((shards(&t.state()), shards(&t.latest())), (0, 2));
        t.durable(5);
        assert_eq!(shards(&t.state()), 1, "5 and the rebuild after it");
        w.publish(with_shards(3));
        assert_eq!(shards(&t.state()), 1, "not before 7");
        t.durable(7);
        assert_eq!(shards(&t.state()), 3);
        w.publish_logged(8, with_shards(4), false);
        w.publish_logged(9, with_shards(5), false);
        t.discard(8);
        assert_eq!((shards(&t.state()), shards(&t.latest())), (3, 3));
        t.durable(9);
        assert_eq!(shards(&t.state()), 3, "a dropped state never shows");
    }
}
