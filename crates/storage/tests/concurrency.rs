//! Writers, a deleter, rebuilds (explicit and background) and readers, all
//! at once, for a bounded time.
//!
//! Every operation is stamped from one global clock when it starts and
//! when it is acknowledged. A reader stamps the clock before (t0) and
//! after (t1) taking a snapshot and checks, for every row:
//!   * a batch acknowledged before t0 is present, except rows whose delete
//!     started before t1 (it may have landed);
//!   * a batch that started after t1 is absent;
//!   * a batch is all-or-nothing: if any of its rows is present, every row
//!     not under a delete that started before t1 is present;
//!   * a row whose delete was acknowledged before t0 is absent.
//!
//! At the end the table equals all acknowledged appends minus all
//! acknowledged deletes.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use quiverdb_storage::{Database, RecId, Table, TableOptions, TableSnapshot};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const WRITERS: u64 = 3;
const MAX_BATCHES: u64 = 20_000;
/// Keys of batch `b` are `b * KEY_STRIDE .. b * KEY_STRIDE + len`.
const KEY_STRIDE: i64 = 4096;
const MAX_BATCH_ROWS: usize = 700;
const RUN_FOR: Duration = Duration::from_secs(3);
const UNSET: u64 = u64::MAX;

struct Clock {
    now: AtomicU64,
    /// Highest batch id acknowledged (batches above it may have started).
    max_batch: AtomicU64,
    batch_start: Vec<AtomicU64>,
    batch_ack: Vec<AtomicU64>,
    batch_len: Vec<AtomicU64>,
    /// Delete stamps by key, kept sparse: (key, start, ack).
    deletes: std::sync::Mutex<Vec<(i64, u64, u64)>>,
}

impl Clock {
    fn tick(&self) -> u64 {
        self.now.fetch_add(1, Ordering::SeqCst)
    }
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("s", DataType::Utf8, true)]))
}

fn keys(snapshot: &TableSnapshot) -> HashSet<i64> {
    snapshot
        .to_record_batches(Some(&[0]))
        .expect("decode")
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

fn writer(table: &Table, clock: &Clock, w: u64, stop: &AtomicBool) {
    let mut rng = StdRng::seed_from_u64(w);
    let mut b = w;
    while !stop.load(Ordering::Relaxed) && b < MAX_BATCHES {
        let len = rng.random_range(1..=MAX_BATCH_ROWS);
        let keys: Vec<i64> = (0..len as i64).map(|i| b as i64 * KEY_STRIDE + i).collect();
        let strings: Vec<Option<String>> = keys.iter().map(|k| (k % 3 != 0).then(|| format!("v{k}"))).collect();
        let batch = RecordBatch::try_new(
            schema(),
            vec![Arc::new(Int64Array::from(keys)), Arc::new(StringArray::from(strings))],
        )
        .expect("batch");
        clock.batch_len[b as usize].store(len as u64, Ordering::SeqCst);
        clock.batch_start[b as usize].store(clock.tick(), Ordering::SeqCst);
        table.append(&batch).expect("append");
        clock.batch_ack[b as usize].store(clock.tick(), Ordering::SeqCst);
        clock.max_batch.fetch_max(b, Ordering::SeqCst);
        b += WRITERS;
        // Pace the writers so readers can check a table of bounded size.
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn deleter(table: &Table, clock: &Clock, stop: &AtomicBool) {
    let mut rng = StdRng::seed_from_u64(99);
    while !stop.load(Ordering::Relaxed) {
        let mut started = Vec::new();
        table
            .transaction(|t| {
                let snapshot = t.snapshot();
                if snapshot.num_shards() == 0 {
                    return Ok(());
                }
                let shard = snapshot.shard(rng.random_range(0..snapshot.num_shards()));
                let ids: Vec<RecId> = shard.live_ids().into_iter().filter(|_| rng.random_bool(0.05)).collect();
                if ids.is_empty() {
                    return Ok(());
                }
                let gathered = shard.gather(&ids, Some(&[0]))?;
                let start = clock.tick();
                started = gathered.column(0).as_primitive::<Int64Type>().values().iter().map(|&k| (k, start)).collect();
                // Stamp the start before the delete can land.
                clock.deletes.lock().expect("lock").extend(started.iter().map(|&(k, s)| (k, s, UNSET)));
                let deleted = t.delete(shard.id(), &ids)?;
                assert_eq!(deleted, ids.len(), "the snapshot's rows are live");
                Ok(())
            })
            .expect("delete");
        let ack = clock.tick();
        let mut deletes = clock.deletes.lock().expect("lock");
        for d in deletes.iter_mut().filter(|d| d.2 == UNSET) {
            if started.iter().any(|&(k, _)| k == d.0) {
                d.2 = ack;
            }
        }
        drop(deletes);
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn check(snapshot: &TableSnapshot, clock: &Clock, t0: u64, t1: u64) {
    let present = keys(snapshot);
    let deletes = clock.deletes.lock().expect("lock").clone();
    let delete_started_before_t1: HashSet<i64> = deletes.iter().filter(|d| d.1 < t1).map(|d| d.0).collect();
    for d in &deletes {
        if d.2 < t0 {
            assert!(!present.contains(&d.0), "key {} deleted and acknowledged before the snapshot", d.0);
        }
    }
    let last = (clock.max_batch.load(Ordering::SeqCst) + 2 * WRITERS).min(MAX_BATCHES - 1) as usize;
    for b in 0..=last {
        let start = clock.batch_start[b].load(Ordering::SeqCst);
        if start == UNSET {
            continue;
        }
        let ack = clock.batch_ack[b].load(Ordering::SeqCst);
        let len = clock.batch_len[b].load(Ordering::SeqCst) as i64;
        let keys = (0..len).map(|i| b as i64 * KEY_STRIDE + i);
        let live: Vec<i64> = keys.clone().filter(|k| !delete_started_before_t1.contains(k)).collect();
        let any_present = keys.clone().any(|k| present.contains(&k));
        if start > t1 {
            assert!(!any_present, "batch {b} started after the snapshot but is visible");
        }
        if ack < t0 || any_present {
            for k in &live {
                assert!(present.contains(k), "batch {b} (ack {ack}, t0 {t0}) is missing key {k}");
            }
        }
    }
}

#[test]
fn writers_deleter_rebuilds_and_readers() {
    let db = Database::new();
    let options = TableOptions::default().with_shard_capacity(1000).with_rebuild_dead_fraction(0.02);
    let table = db.create_table("t", &schema(), options).expect("create");
    let clock = Clock {
        now: AtomicU64::new(0),
        max_batch: AtomicU64::new(0),
        batch_start: (0..MAX_BATCHES).map(|_| AtomicU64::new(UNSET)).collect(),
        batch_ack: (0..MAX_BATCHES).map(|_| AtomicU64::new(UNSET)).collect(),
        batch_len: (0..MAX_BATCHES).map(|_| AtomicU64::new(0)).collect(),
        deletes: std::sync::Mutex::new(Vec::new()),
    };
    let stop = AtomicBool::new(false);
    let checks = AtomicU64::new(0);
    let deadline = Instant::now() + RUN_FOR;
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (table, clock, stop) = (&table, &clock, &stop);
            s.spawn(move || writer(table, clock, w, stop));
        }
        s.spawn(|| deleter(&table, &clock, &stop));
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                table.rebuild().expect("rebuild");
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let t0 = clock.tick();
                    let snapshot = table.snapshot();
                    let t1 = clock.tick();
                    check(&snapshot, &clock, t0, t1);
                    checks.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    db.wait_for_background_rebuilds();
    assert_eq!(table.background_rebuild_failures().0, 0, "{:?}", table.background_rebuild_failures().1);
    assert!(checks.load(Ordering::Relaxed) > 5, "readers checked snapshots");

    // Final state: every acknowledged append minus every acknowledged delete.
    let deleted: HashSet<i64> = clock.deletes.lock().expect("lock").iter().map(|d| d.0).collect();
    assert!(clock.deletes.lock().expect("lock").iter().all(|d| d.2 != UNSET), "every delete was acknowledged");
    let mut expected = HashSet::new();
    for b in 0..MAX_BATCHES as usize {
        if clock.batch_ack[b].load(Ordering::SeqCst) != UNSET {
            let len = clock.batch_len[b].load(Ordering::SeqCst) as i64;
            expected.extend((0..len).map(|i| b as i64 * KEY_STRIDE + i).filter(|k| !deleted.contains(k)));
        }
    }
    let snapshot = table.snapshot();
    assert_eq!(snapshot.row_count(), expected.len());
    assert_eq!(keys(&snapshot), expected);
    assert!(!deleted.is_empty(), "the deleter deleted something");
    // Values survived every rebuild intact.
    for batch in snapshot.to_record_batches(None).expect("decode") {
        let k = batch.column(0).as_primitive::<Int64Type>();
        let s = batch.column(1).as_string::<i32>();
        for i in 0..batch.num_rows() {
            let key = k.value(i);
            assert_eq!(s.is_valid(i), key % 3 != 0);
            if s.is_valid(i) {
                assert_eq!(s.value(i), format!("v{key}"));
            }
        }
    }
}
