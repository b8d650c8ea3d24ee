//! Rebuild: turn a shard's live rows (main + delta, minus deletes) into new
//! main storage, without stopping readers or losing concurrent writes.
//!
//! ```text
//!   1. snapshot S of the shard          (no lock)  main M, delta[..Ls], deletes Ds
//!   2. decode live rows of S, encode    (no lock)  → main M'  (rows renumbered 0..)
//!   3. writer lock; current state C                 delta[..Lc], deletes Dc ⊇ Ds
//!      carry over delta rows Ls..Lc     → new delta rows 0..
//!      carry over deletes Dc \ Ds       → old id mapped to its new id:
//!          id <  |M| + Ls : new id = id − |Ds ∩ [0, id)|      (its rank among S's live rows)
//!          id >= |M| + Ls : new id = |M'| + (id − |M| − Ls)  (a carried delta row)
//!      publish shard version v+1 with one pointer swap
//! ```
//!
//! A shard's rebuilds are serialised by its version's `rebuild_lock`; only
//! rebuilds replace a shard's data, so in step 3 the shard still has the
//! data of step 1 (or was removed by a truncate, and the work is dropped).
//! Appends and deletes during step 2 are neither lost nor resurrected.
//! A rebuilt shard left with no live rows is removed, unless it is the
//! last (append) shard.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::ArrayRef;
use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder};

use crate::change::TableChange;
use crate::delta::Delta;
use crate::error::{Error, Result};
use crate::index::{KeyCodec, MainIndex};
use crate::main::decode::Rows;
use crate::main::{Main, MainColumn};
use crate::shard::{DeleteSet, ShardData, ShardId, ShardState};
use crate::snapshot::ShardSnapshot;
use crate::state::TableCore;

/// Queues a background rebuild of `data`, a shard version of `table`,
/// unless one is queued already (or the database's worker is paused).
pub(crate) fn schedule(table: &TableCore, data: &Arc<ShardData>) {
    if data.rebuild_queued.swap(true, Ordering::AcqRel) {
        return;
    }
    let (weak, shard) = (table.weak(), data.id);
    let job = Box::new(move || {
        if let Some(table) = weak.upgrade()
            && let Err(e) = rebuild_shard(&table, shard, false)
        {
            table.record_rebuild_failure(&e);
        }
    });
    if !table.background().submit(job) {
        data.rebuild_queued.store(false, Ordering::Release);
    }
}

/// Queues a background rebuild of shard `data` for when its delta has
/// stopped growing (see [`crate::background::SETTLE_AFTER`]): a table's
/// last rows, too few to fill a shard, are compressed once writes to it
/// pause, rather than kept in the delta's row format.
pub(crate) fn settle(table: &TableCore, data: &ShardData) {
    let (weak, shard) = (table.weak(), data.id);
    let key = (table as *const TableCore as usize, shard.0);
    table.background().settle(
        key,
        Box::new(move || {
            if let Some(table) = weak.upgrade()
                && let Err(e) = rebuild_shard(&table, shard, false)
            {
                table.record_rebuild_failure(&e);
            }
        }),
    );
}

/// Rebuilds every shard of `table` that has delta rows or deletions, on all
/// cores, and returns when they are done.
pub(crate) fn rebuild_table(table: &TableCore) -> Result<()> {
    let state = table.latest();
    let ids: Vec<ShardId> =
        state.shards.iter().filter(|s| s.delta_len > 0 || s.deleted() > 0).map(|s| s.data.id).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(ids.len());
    let next = AtomicUsize::new(0);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&id) = ids.get(i) else { break };
                    if let Err(e) = rebuild_shard(table, id, true) {
                        let mut slot = first_error.lock().unwrap_or_else(|e| e.into_inner());
                        slot.get_or_insert(e);
                        break;
                    }
                }
            });
        }
    });
    match first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Rebuilds shard `id`. With `thorough`, a shard that another rebuild
/// replaced meanwhile is rebuilt again if it still has delta rows or
/// deletions (so the caller knows the shard is compact when this returns).
pub(crate) fn rebuild_shard(table: &TableCore, id: ShardId, thorough: bool) -> Result<()> {
    loop {
        let Some(data) = current_data(table, id) else { return Ok(()) };
        let _rebuilding = data.rebuild_lock.lock().map_err(|_| Error::Internal("a rebuild panicked".into()))?;
        data.rebuild_queued.store(false, Ordering::Release);
        let state = table.latest();
        let Some(pos) = state.shards.position(id) else { return Ok(()) };
        let snap = state.shards.get(pos).clone();
        if !Arc::ptr_eq(&snap.data, &data) {
            if thorough {
                continue;
            }
            return Ok(());
        }
        if snap.delta_len == 0 && snap.deleted() == 0 {
            return Ok(());
        }
        let main = build_main(table, &snap)?;
        return publish(table, &snap, main);
    }
}

/// Main storage holding the live rows of `snap`, in order, and its
/// primary-key index (built here, off the writer lock, so that no probe
/// waits for it).
fn build_main(table: &TableCore, snap: &ShardState) -> Result<(Main, Option<MainIndex>)> {
    let batch = ShardSnapshot::new(snap, table.schema()).to_record_batch(None)?;
    let columns = batch.columns().iter().map(|a| MainColumn::from_array(a.as_ref())).collect::<Result<Vec<_>>>()?;
    let main = Main::new(batch.num_rows(), columns);
    let index = KeyCodec::of(table.schema()).map(|codec| codec.build_main(&main)).transpose()?;
    Ok((main, index))
}

/// Replays a logged rebuild ([`TableChange::Rebuild`]): rebuilds shard
/// `shard`, which must be at `version`, from the snapshot of it with
/// `delta_len` delta rows and `deleted` dead, exactly as the original did.
pub(crate) fn replay_rebuild(
    table: &TableCore,
    shard: ShardId,
    version: u64,
    delta_len: usize,
    deleted: &[u32],
) -> Result<()> {
    let mismatch = |what: String| {
        Error::Internal(format!("the log rebuilds shard {shard} of table '{}', but {what}", table.name()))
    };
    let state = table.latest();
    let pos = state.shards.position(shard).ok_or_else(|| mismatch("the table has no such shard".into()))?;
    let cur = state.shards.get(pos);
    if cur.data.version != version {
        return Err(mismatch(format!("it is at version {}, not {version}", cur.data.version)));
    }
    if delta_len > cur.delta_len {
        return Err(mismatch(format!("it has {} delta rows, not {delta_len}", cur.delta_len)));
    }
    let not_deleted = |id: u32| mismatch(format!("record {id} is not a deleted row of it"));
    if let Some(&id) = deleted.iter().find(|&&id| !cur.deletes.as_ref().is_some_and(|d| d.contains(id))) {
        return Err(not_deleted(id));
    }
    let deletes =
        DeleteSet::from_ids(cur.data.capacity, cur.data.main.rows() + delta_len, deleted).map_err(not_deleted)?;
    let snap = ShardState { data: Arc::clone(&cur.data), delta_len, deletes };
    let main = build_main(table, &snap)?;
    publish(table, &snap, main)
}

fn current_data(table: &TableCore, id: ShardId) -> Option<Arc<ShardData>> {
    let state = table.latest();
    state.shards.position(id).map(|p| Arc::clone(&state.shards.get(p).data))
}

/// Step 3: carry over what changed since `snap`, publish the new version.
fn publish(table: &TableCore, snap: &ShardState, (main, index): (Main, Option<MainIndex>)) -> Result<()> {
    let data = &snap.data;
    let mut writer = table.lock()?;
    if table.is_dropped() {
        return Ok(()); // nothing reads it any more, and it must not be logged
    }
    let state = table.latest();
    let Some(pos) = state.shards.position(data.id) else {
        return Ok(()); // truncated meanwhile
    };
    let cur = state.shards.get(pos);
    if !Arc::ptr_eq(&cur.data, data) {
        return Err(Error::Internal(format!("shard {} was replaced while its rebuild held the rebuild lock", data.id)));
    }
    if cur.delta_len < snap.delta_len || cur.deleted() < snap.deleted() {
        // Changes the rebuild started from were never durable and are
        // gone (the log failed): nothing to publish.
        return writer.log().check_writable();
    }
    let schema = table.schema();
    let new_rows = main.rows();
    let carried = cur.delta_len - snap.delta_len;
    let delta = Delta::new(schema, data.capacity - new_rows);
    if carried > 0 {
        let arrays = (0..schema.len())
            .map(|c| data.delta.column(c).decode(cur.delta_len, Rows::Range(snap.delta_len, carried)))
            .collect::<Result<Vec<ArrayRef>>>()?;
        delta.write_batch(0, &arrays, 0, carried)?;
    }
    let deletes = carry_deletes(snap, cur, new_rows)?;
    let live = new_rows + carried - deletes.as_ref().map_or(0, DeleteSet::count);
    let lsn = if writer.log().is_on() {
        let deleted = snap.deletes.as_ref().map_or_else(Vec::new, |d| d.ids(snap.rows()));
        let change =
            TableChange::Rebuild { shard: data.id.0, version: data.version, delta_len: snap.delta_len as u32, deleted };
        writer.log_mut().write(table.name(), change, None)?
    } else {
        None
    };
    let new_data = Arc::new(ShardData::new(data.id, data.version + 1, data.capacity, main, delta));
    new_data.delta.commit(carried);
    if let Some(index) = index {
        new_data.index.main.set(index).map_err(|_| Error::Internal("a new shard version had an index".into()))?;
    }
    let mut next = (*state).clone();
    if live == 0 && pos + 1 < next.shards.len() {
        next.shards.remove(pos);
    } else {
        *next.shards.get_mut(pos) = ShardState { data: new_data, delta_len: carried, deletes };
    }
    match lsn {
        Some(lsn) => writer.publish_logged(lsn, next, true),
        None => writer.publish(next),
    }
    Ok(())
}

/// Maps the deletions made since `snap` onto the rebuilt shard's ids.
fn carry_deletes(snap: &ShardState, cur: &ShardState, new_rows: usize) -> Result<Option<DeleteSet>> {
    if cur.deleted() == snap.deleted() {
        return Ok(None);
    }
    let rows = cur.rows();
    let cur_bits = cur
        .deletes
        .as_ref()
        .ok_or_else(|| Error::Internal("deletions counted without a set".into()))?
        .bits()
        .slice(0, rows);
    let snap_bits = match &snap.deletes {
        Some(d) => d.bits().slice(0, rows),
        None => BooleanBuffer::new_unset(rows),
    };
    let newly = &cur_bits & &!&snap_bits;
    // Prefix counts of S's deletions per 64-bit word, for ranks.
    let words: Vec<u64> = snap_bits.bit_chunks().iter_padded().collect();
    let mut before = Vec::with_capacity(words.len() + 1);
    let mut acc = 0usize;
    for w in &words {
        before.push(acc);
        acc += w.count_ones() as usize;
    }
    let snap_rows = snap.rows();
    let mut bits = BooleanBufferBuilder::new(snap.data.capacity);
    bits.append_n(snap.data.capacity, false);
    let mut count = 0;
    for id in newly.set_indices() {
        let new_id = if id < snap_rows {
            let (w, b) = (id / 64, id % 64);
            let dead_before = before[w] + (words[w] & ((1u64 << b) - 1)).count_ones() as usize;
            id - dead_before
        } else {
            new_rows + (id - snap_rows)
        };
        bits.set_bit(new_id, true);
        count += 1;
    }
    Ok(Some(DeleteSet::new(bits.finish(), count)))
}
