//! Durability: random operation sequences survive close and reopen (with
//! and without checkpoints), acknowledged commits survive simulated power
//! loss, and damaged files are refused with the file and offset named.
//! A plain `Vec` of rows per table is the reference.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::*;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use quiverdb_storage::testing::{SimulatedIo, StorageIo, open_with_io, set_log_frame_bytes, set_log_stage_bytes};
use quiverdb_storage::{
    Alteration, Database, DurableOptions, Error, RecId, ShardId, SyncMode, Table, TableOptions, TableSnapshot, Value,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use common::{all_types, gen_array, plain};

type Row = (i64, Option<String>, Option<f64>);

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
    ]))
}

fn batch(rows: &[Row]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1.clone()))),
            Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.2))),
        ],
    )
    .unwrap()
}

/// The live rows of a table, in scan order.
fn rows(table: &Table) -> Vec<Row> {
    let mut out = Vec::new();
    for b in table.snapshot().to_record_batches(None).unwrap() {
        let ids = b.column(0).as_primitive::<Int64Type>();
        let names = b.column(1).as_string::<i32>();
        let scores = b.column(2).as_primitive::<Float64Type>();
        for i in 0..b.num_rows() {
            out.push((
                ids.value(i),
                names.is_valid(i).then(|| names.value(i).to_string()),
                scores.is_valid(i).then(|| scores.value(i)),
            ));
        }
    }
    out
}

/// Every table's rows in scan order: the digest compared across reopens.
fn digest(db: &Database) -> BTreeMap<String, Vec<Row>> {
    db.table_names().into_iter().map(|n| (n.clone(), rows(&db.table(&n).unwrap()))).collect()
}

/// Record ids of the live rows of `snapshot` whose id satisfies `doomed`.
fn select(snapshot: &TableSnapshot, doomed: impl Fn(i64) -> bool) -> Vec<(ShardId, Vec<RecId>)> {
    snapshot
        .shards()
        .map(|shard| {
            let ids = shard.live_ids();
            let b = shard.gather(&ids, Some(&[0])).unwrap();
            let keys = b.column(0).as_primitive::<Int64Type>();
            let chosen = ids.iter().zip(keys.values()).filter(|(_, k)| doomed(**k)).map(|(&id, _)| id).collect();
            (shard.id(), chosen)
        })
        .collect()
}

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by(|a, b| a.partial_cmp(b).unwrap());
    rows
}

fn random_rows(rng: &mut StdRng, next_id: &mut i64, n: usize) -> Vec<Row> {
    (0..n)
        .map(|_| {
            *next_id += 1;
            let name = rng.random_bool(0.8).then(|| format!("name_{}", rng.random_range(0..50)));
            let score = rng.random_bool(0.9).then(|| f64::from(rng.random_range(0..1000)) / 8.0);
            (*next_id, name, score)
        })
        .collect()
}

fn options(rng: &mut StdRng) -> TableOptions {
    TableOptions::default()
        .with_shard_capacity(rng.random_range(20..200))
        .with_background_rebuild(rng.random_bool(0.5))
        .with_rebuild_dead_fraction(0.3)
}

fn durable(sync: SyncMode) -> DurableOptions {
    // Small segments: many are prepared, used, rolled and removed.
    DurableOptions { sync, checkpoint_bytes: 0, log_segment_bytes: 64 << 10, recover_truncate: false }
}

/// One random change to `db`, mirrored in `model`.
fn random_step(db: &Database, model: &mut BTreeMap<String, Vec<Row>>, rng: &mut StdRng, next_id: &mut i64) {
    let names = ["a", "b", "c"];
    let name = names[rng.random_range(0..names.len())];
    let Some(expected) = model.get_mut(name) else {
        let t = db.create_table(name, &schema(), options(rng)).unwrap();
        let rows = {
            let n = rng.random_range(0..300);
            random_rows(rng, next_id, n)
        };
        t.append(&batch(&rows)).unwrap();
        model.insert(name.into(), rows);
        return;
    };
    let t = db.table(name).unwrap();
    match rng.random_range(0..100) {
        0..30 => {
            let rows = {
                let n = rng.random_range(1..400);
                random_rows(rng, next_id, n)
            };
            t.append(&batch(&rows)).unwrap();
            expected.extend(rows);
        }
        30..36 => {
            let row = random_rows(rng, next_id, 1).remove(0);
            let values = [
                Value::Int(row.0),
                row.1.as_deref().map_or(Value::Null, Value::Str),
                row.2.map_or(Value::Null, Value::Float),
            ];
            let (before, after) = {
                let n = rng.random_range(0..50);
                let before = random_rows(rng, next_id, n);
                let n = rng.random_range(0..50);
                (before, random_rows(rng, next_id, n))
            };
            t.transaction(|tx| {
                tx.append(&batch(&before))?;
                tx.append_row(&values)?;
                tx.append(&batch(&after))
            })
            .unwrap();
            expected.extend(before);
            expected.push(row);
            expected.extend(after);
        }
        36..38 => {
            // A transaction that makes shards and then fails changes nothing.
            let rows = {
                let n = rng.random_range(1..400);
                random_rows(rng, next_id, n)
            };
            let failed = t.transaction(|tx| {
                tx.append(&batch(&rows))?;
                Err::<(), _>(Error::Conflict { table: name.into() })
            });
            assert!(matches!(failed, Err(Error::Conflict { .. })));
        }
        38..55 => {
            let (m, r) = (rng.random_range(2..7), rng.random_range(0..2));
            let doomed = move |id: i64| id % m == r;
            // Chosen inside the transaction: a background rebuild cannot
            // renumber the rows in between.
            t.transaction(|tx| {
                let snap = tx.snapshot();
                tx.delete_selection(&snap, &select(&snap, doomed))
            })
            .unwrap();
            expected.retain(|row| !doomed(row.0));
        }
        55..65 => {
            // UPDATE: delete some rows and append them changed, atomically.
            let m = rng.random_range(3..9);
            let doomed = move |id: i64| id % m == 1;
            let changed: Vec<Row> = expected
                .iter()
                .filter(|row| doomed(row.0))
                .map(|row| (row.0, Some("updated".to_string()), row.2.map(|s| s + 1.0)))
                .collect();
            t.transaction(|tx| {
                let snap = tx.snapshot();
                tx.delete_selection(&snap, &select(&snap, doomed))?;
                tx.append(&batch(&changed))
            })
            .unwrap();
            expected.retain(|row| !doomed(row.0));
            expected.extend(changed);
        }
        65..70 => {
            t.truncate().unwrap();
            expected.clear();
        }
        70..74 => {
            // Truncate and refill in one transaction.
            let rows = {
                let n = rng.random_range(0..100);
                random_rows(rng, next_id, n)
            };
            t.transaction(|tx| {
                tx.append(&batch(&random_rows(&mut StdRng::seed_from_u64(1), &mut 0, 5)))?;
                tx.truncate();
                tx.append(&batch(&rows))
            })
            .unwrap();
            *expected = rows;
        }
        74..84 => t.rebuild().unwrap(),
        84..88 => {
            db.drop_table(name).unwrap();
            model.remove(name);
        }
        88..95 => {
            // CREATE OR REPLACE ... AS: a filled table replaces the old one;
            // the fill appends, deletes and rebuilds before it is published.
            let rows = {
                let n = rng.random_range(0..300);
                random_rows(rng, next_id, n)
            };
            let opts = options(rng);
            let kept = db
                .create_table_with(name, &schema(), opts, true, |t| {
                    t.append(&batch(&rows))?;
                    t.rebuild()?;
                    let snap = t.snapshot();
                    t.delete(&snap, &select(&snap, |id| id % 3 == 0))?;
                    Ok::<_, Error>(rows.iter().filter(|r| r.0 % 3 != 0).cloned().collect::<Vec<_>>())
                })
                .unwrap();
            model.insert(name.into(), kept);
        }
        _ => db.checkpoint().unwrap(),
    }
}

fn assert_matches_model(db: &Database, model: &BTreeMap<String, Vec<Row>>, context: &str) {
    assert_eq!(db.table_names(), model.keys().cloned().collect::<Vec<_>>(), "{context}");
    for (name, expected) in model {
        let got = rows(&db.table(name).unwrap());
        assert_eq!(sorted(got), sorted(expected.clone()), "{context}: table {name}");
    }
}

/// Stops background work so the old instance writes nothing more.
fn quiesce(db: Database) {
    db.wait_for_background_rebuilds();
    drop(db);
}

#[test]
fn random_operations_survive_reopen_with_and_without_checkpoints() {
    let (mut replayed, mut loaded) = (0, 0);
    for seed in 0..10u64 {
        let io = SimulatedIo::default();
        let dir = PathBuf::from("/data");
        let mut rng = StdRng::seed_from_u64(seed);
        let mut next_id = 0;
        let mut model = BTreeMap::new();
        let mut db = open_with_io(Arc::new(io.clone()), &dir, durable(SyncMode::Always)).unwrap();
        for step in 0..160 {
            random_step(&db, &mut model, &mut rng, &mut next_id);
            if step % 40 == 39 {
                db.wait_for_background_rebuilds();
                let before = digest(&db);
                assert_matches_model(&db, &model, &format!("seed {seed} step {step}"));
                let graceful = rng.random_bool(0.5);
                if graceful {
                    db.clone().close().unwrap();
                }
                quiesce(db);
                db = open_with_io(Arc::new(io.clone()), &dir, durable(SyncMode::Always)).unwrap();
                // Same rows in the same order: replay renumbers as the original did.
                assert_eq!(digest(&db), before, "seed {seed} step {step} (closed: {graceful})");
                let report = db.recovery().unwrap();
                replayed += report.replayed;
                loaded += report.shard_files;
                if graceful {
                    assert_eq!(report.replayed, 0, "a closed database reopens from its checkpoint alone");
                }
                assert!(report.torn.is_none());
            }
        }
    }
    assert!(replayed > 100 && loaded > 20, "reopens replayed {replayed} records and loaded {loaded} shard files");
}

#[test]
fn acknowledged_commits_survive_power_loss_and_nothing_else_appears() {
    for torn in [0, 1, 7, 100] {
        let io = SimulatedIo::default();
        let dir = Path::new("/data");
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        let t = db.create_table("t", &schema(), TableOptions::default().with_shard_capacity(64)).unwrap();
        let mut acknowledged = Vec::new();
        let mut next_id = 0;
        let mut rng = StdRng::seed_from_u64(torn as u64);
        for i in 0..30 {
            let rows = random_rows(&mut rng, &mut next_id, 10);
            t.append(&batch(&rows)).unwrap();
            acknowledged.extend(rows);
            if i == 12 {
                db.checkpoint().unwrap();
            }
        }
        db.wait_for_background_rebuilds();
        io.crash(torn);
        drop((t, db));
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        assert_eq!(sorted(rows(&db.table("t").unwrap())), sorted(acknowledged), "torn {torn}");
    }
}

#[test]
fn without_syncs_power_loss_keeps_a_prefix_of_the_commits() {
    let io = SimulatedIo::default();
    let dir = Path::new("/data");
    let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Off)).unwrap();
    let t = db.create_table("t", &schema(), TableOptions::default().with_background_rebuild(false)).unwrap();
    db.checkpoint().unwrap(); // the table itself is durable
    let mut next_id = 0;
    let mut rng = StdRng::seed_from_u64(9);
    let mut states = vec![Vec::new()];
    for _ in 0..20 {
        let rows = random_rows(&mut rng, &mut next_id, 5);
        t.append(&batch(&rows)).unwrap();
        let mut last = states.last().unwrap().clone();
        last.extend(rows);
        states.push(last);
    }
    io.crash(33); // part of the unsynced tail survives, torn mid-record
    drop((t, db));
    let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Off)).unwrap();
    let got = rows(&db.table("t").unwrap());
    assert!(states.contains(&got), "{} rows is not the state after any commit", got.len());
    assert!(db.recovery().unwrap().torn.is_some(), "the torn record is reported");
}

#[test]
fn a_failed_sync_makes_the_database_read_only_and_loses_nothing_acknowledged() {
    let io = SimulatedIo::default();
    let dir = Path::new("/data");
    let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
    let t = db.create_table("t", &schema(), TableOptions::default()).unwrap();
    let first = vec![(1, Some("a".to_string()), None)];
    t.append(&batch(&first)).unwrap();
    io.fail_syncs(true);
    let failed = t.append(&batch(&[(2, None, None)]));
    assert!(matches!(failed, Err(Error::Io { .. })), "{failed:?}");
    io.fail_syncs(false);
    // Never retried, never carried on: every later write is refused.
    for outcome in [
        t.append(&batch(&[(3, None, None)])).map(drop),
        t.truncate().map(drop),
        db.create_table("u", &schema(), TableOptions::default()).map(drop),
        db.drop_table("t"),
        db.checkpoint(),
    ] {
        assert!(matches!(outcome, Err(Error::ReadOnly(_))), "{outcome:?}");
    }
    io.crash(0);
    drop((t, db));
    let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
    assert_eq!(rows(&db.table("t").unwrap()), first);
    assert!(!db.contains_table("u"));
}

/// Every change, under every sync mode, that the log fails to make
/// durable: none of it is seen by readers of the running database, not
/// even until a restart, and the restart agrees.
#[test]
fn a_change_the_log_fails_to_make_durable_is_never_seen() {
    type Change = fn(&Database, &Table) -> quiverdb_storage::Result<()>;
    let changes: [(&str, Change); 8] = [
        ("append", |_, t| t.append(&batch(&[(10, None, None), (11, None, None)])).map(drop)),
        ("delete", |_, t| {
            let snapshot = t.snapshot();
            t.delete(&snapshot, &select(&snapshot, |id| id == 1)).map(drop)
        }),
        ("truncate", |_, t| t.truncate().map(drop)),
        ("create", |db, _| db.create_table("u", &schema(), TableOptions::default()).map(drop)),
        ("create with rows (an ingest)", |db, _| {
            db.create_table_with("u", &schema(), TableOptions::default(), false, |u| {
                u.append(&batch(&[(7, None, None)])).map(drop)
            })
        }),
        ("replace", |db, _| {
            db.create_table_with("t", &schema(), TableOptions::default(), true, |u| {
                u.append(&batch(&[(7, None, None)])).map(drop)
            })
        }),
        ("drop", |db, _| db.drop_table("t")),
        ("rename", |db, _| db.alter_table("t", &Alteration::RenameTo("v".into()))),
    ];
    let first = vec![(1, Some("a".to_string()), None), (2, None, Some(0.5))];
    for sync in [SyncMode::Always, SyncMode::Batch(std::time::Duration::from_secs(3600)), SyncMode::Off] {
        for (what, change) in changes {
            let io = SimulatedIo::default();
            let db = open_with_io(Arc::new(io.clone()), "/data", durable(sync)).unwrap();
            let t = db.create_table("t", &schema(), TableOptions::default()).unwrap();
            t.append(&batch(&first)).unwrap();
            db.checkpoint().unwrap();
            let before = digest(&db);
            // `always` fails at the commit's sync; the others at its write.
            io.fail_syncs(true);
            io.fail_writes(sync != SyncMode::Always);
            let failed = change(&db, &t);
            assert!(matches!(failed, Err(Error::Io { .. })), "{sync:?} {what}: {failed:?}");
            io.fail_syncs(false);
            io.fail_writes(false);
            assert_eq!(digest(&db), before, "{sync:?} {what}: seen after the log failed");
            assert_eq!(t.row_count(), first.len(), "{sync:?} {what}");
            // And a later write through the same table is refused as such.
            let later = t.append(&batch(&[(12, None, None)]));
            assert!(matches!(later, Err(Error::ReadOnly(_))), "{sync:?} {what}: {later:?}");
            assert_eq!(digest(&db), before, "{sync:?} {what}");
            io.crash(0);
            drop((t, db));
            let db = open_with_io(Arc::new(io.clone()), "/data", durable(sync)).unwrap();
            assert_eq!(digest(&db), before, "{sync:?} {what}: after the restart");
        }
    }
}

#[test]
fn concurrent_writers_share_syncs_and_all_are_durable() {
    let io = SimulatedIo::default();
    let db = open_with_io(Arc::new(io.clone()), "/data", durable(SyncMode::Always)).unwrap();
    let t = db.create_table("t", &schema(), TableOptions::default().with_background_rebuild(false)).unwrap();
    let before = db.log_stats().unwrap();
    std::thread::scope(|s| {
        for w in 0..4i64 {
            let t = t.clone();
            s.spawn(move || {
                for i in 0..50 {
                    t.append(&batch(&[(w * 1000 + i, None, None)])).unwrap();
                }
            });
        }
    });
    let stats = db.log_stats().unwrap();
    assert_eq!(stats.records - before.records, 200);
    assert!(stats.syncs - before.syncs <= 200, "one sync per commit at most: {stats:?}");
    io.crash(0);
    drop((t, db));
    let db = open_with_io(Arc::new(io.clone()), "/data", durable(SyncMode::Always)).unwrap();
    let ids: Vec<i64> = sorted(rows(&db.table("t").unwrap())).into_iter().map(|r| r.0).collect();
    let expected: Vec<i64> = (0..4).flat_map(|w| (0..50).map(move |i| w * 1000 + i)).collect();
    assert_eq!(ids, expected);
}

#[test]
fn a_failed_write_makes_the_database_read_only() {
    let io = SimulatedIo::default();
    let db = open_with_io(Arc::new(io.clone()), "/data", durable(SyncMode::Always)).unwrap();
    let t = db.create_table("t", &schema(), TableOptions::default()).unwrap();
    io.fail_writes(true);
    assert!(matches!(t.append(&batch(&[(1, None, None)])), Err(Error::Io { .. })));
    io.fail_writes(false);
    assert!(matches!(t.append(&batch(&[(2, None, None)])), Err(Error::ReadOnly(_))));
}

/// A database with a checkpoint and log records after it.
fn checkpointed(io: &SimulatedIo) -> Vec<Row> {
    let db = open_with_io(Arc::new(io.clone()), "/data", durable(SyncMode::Always)).unwrap();
    let options = TableOptions::default().with_shard_capacity(2000).with_background_rebuild(false);
    let t = db.create_table("t", &schema(), options).unwrap();
    let mut next_id = 0;
    let mut rng = StdRng::seed_from_u64(3);
    let first = random_rows(&mut rng, &mut next_id, 5000);
    t.append(&batch(&first)).unwrap();
    t.rebuild().unwrap();
    db.checkpoint().unwrap();
    for _ in 0..5 {
        t.append(&batch(&random_rows(&mut rng, &mut next_id, 50))).unwrap();
    }
    let all = rows(&t);
    drop((t, db));
    all
}

fn files_under(io: &SimulatedIo, dir: &str) -> Vec<PathBuf> {
    io.list(Path::new(dir)).unwrap().into_iter().map(|n| Path::new(dir).join(n)).collect()
}

#[test]
fn a_flipped_bit_in_the_log_catalog_or_a_shard_file_refuses_to_open() {
    let io = SimulatedIo::default();
    let expected = checkpointed(&io);
    let reopen = |io: &SimulatedIo| open_with_io(Arc::new(io.clone()), "/data", durable(SyncMode::Always));
    assert_eq!(rows(&reopen(&io).unwrap().table("t").unwrap()), expected);

    let shard_files = files_under(&io, "/data/shards");
    assert_eq!(shard_files.len(), 3, "5,000 rows in shards of 2,000");
    let segments: Vec<PathBuf> =
        files_under(&io, "/data/wal").into_iter().filter(|p| io.read(p).is_ok_and(|b| !b.is_empty())).collect();
    assert!(!segments.is_empty());
    let cases = [
        (PathBuf::from("/data/CATALOG"), 40usize),
        (shard_files[1].clone(), 200),
        (segments[0].clone(), 20), // inside the first record, not the tail
    ];
    for (path, offset) in cases {
        let damaged = SimulatedIo::default();
        checkpointed(&damaged);
        damaged.flip_bit(&path, offset, 3).unwrap();
        match reopen(&damaged) {
            Err(Error::Corrupt { file: named, .. }) => assert_eq!(named.as_path(), path),
            other => panic!("a flipped bit in {} gave {other:?}", path.display()),
        }
    }
}

/// An acknowledged DELETE, the last record of the log, with a bit flipped
/// on the disk: a record written whole whose checksum fails is damage,
/// not a write cut short. Opening refuses (naming the segment and the
/// record's offset) unless told to drop it, and then reports what it dropped.
#[test]
fn a_flipped_bit_in_the_last_record_refuses_to_open_unless_told_to_drop_it() {
    let io = SimulatedIo::default();
    let db = open_with_io(Arc::new(io.clone()), "/data", durable(SyncMode::Always)).unwrap();
    // No background rebuild: on a busy machine one could log its record
    // after the DELETE's.
    let t = db.create_table("t", &schema(), TableOptions::default().with_background_rebuild(false)).unwrap();
    let all = vec![(1, Some("a".to_string()), None), (2, None, Some(0.5)), (3, None, None)];
    t.append(&batch(&all)).unwrap();
    let snapshot = t.snapshot();
    assert_eq!(t.delete(&snapshot, &select(&snapshot, |id| id == 2)).unwrap(), 1);
    drop((t, db));
    // The last non-zero byte of the log ends the DELETE's record.
    let segment =
        files_under(&io, "/data/wal").into_iter().filter(|p| p.to_string_lossy().ends_with(".log")).max().unwrap();
    let bytes = io.read(&segment).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    io.flip_bit(&segment, end - 10, 4).unwrap();

    let open = |recover_truncate: bool| {
        let options = DurableOptions { recover_truncate, ..durable(SyncMode::Always) };
        open_with_io(Arc::new(io.clone()), "/data", options)
    };
    match open(false) {
        Err(Error::Corrupt { file, offset, what }) => {
            assert_eq!(file, segment);
            assert!(offset < (end - 10) as u64 && offset + 64 > (end - 10) as u64, "offset {offset}: {what}");
            assert!(what.contains("checksum"), "{what}");
        }
        other => panic!("a damaged last record opened: {other:?}"),
    }
    // Refusing changed nothing: it refuses again.
    assert!(matches!(open(false), Err(Error::Corrupt { .. })));
    let db = open(true).unwrap();
    let report = db.recovery().unwrap();
    let (file, _, bytes, _) = report.dropped.clone().expect("the dropped record is reported");
    assert_eq!(file, segment);
    assert!(bytes > 0);
    assert!(report.torn.is_none());
    assert_eq!(rows(&db.table("t").unwrap()), all, "the delete is gone, as asked");
    drop(db);
    // The dropped bytes are gone: the next open needs no option.
    assert_eq!(rows(&open(false).unwrap().table("t").unwrap()), all);
}

/// A server killed again and again, each time before its own appends
/// reach the checkpoint threshold: the log since the last checkpoint
/// (replayed at each start) counts, so a checkpoint comes after a long
/// enough recovery and the next start replays little.
#[test]
fn a_crash_loop_still_checkpoints() {
    let io = SimulatedIo::default();
    let options = DurableOptions { checkpoint_bytes: 48 << 10, ..durable(SyncMode::Always) };
    let (mut rng, mut next_id, mut expected) = (StdRng::seed_from_u64(8), 0, Vec::new());
    let mut replayed = Vec::new();
    for _ in 0..4 {
        let db = open_with_io(Arc::new(io.clone()), "/data", options).unwrap();
        replayed.push(db.recovery().unwrap().replayed);
        if !db.contains_table("t") {
            db.create_table("t", &schema(), TableOptions::default()).unwrap();
        }
        let t = db.table("t").unwrap();
        assert_eq!(rows(&t), expected);
        // About 30 KiB of log: under the threshold within one process.
        for _ in 0..30 {
            let rows = random_rows(&mut rng, &mut next_id, 20);
            t.append(&batch(&rows)).unwrap();
            expected.extend(rows);
        }
        // Long enough for the checkpoint thread to look twice.
        std::thread::sleep(std::time::Duration::from_millis(300));
        io.crash(0);
        drop((t, db));
    }
    // Without the earlier processes' log counted, each start replays
    // more: 31, 61, 91 records.
    assert_eq!(replayed[..2], [0, 31], "{replayed:?}");
    assert!(replayed[2..].iter().all(|&n| n <= 31), "a checkpoint after the second start: {replayed:?}");
    let db = open_with_io(Arc::new(io.clone()), "/data", options).unwrap();
    assert_eq!(rows(&db.table("t").unwrap()), expected);
}

/// A small disk: opening refuses, saying what it needs, rather than
/// serving and failing at the first write; temporary files a crash left
/// are removed on open; a segment preparation that fills the disk leaves
/// no file behind; a write that meets the full disk fails and is not seen.
#[test]
fn a_small_disk_is_refused_at_open_and_never_left_full_of_temporary_files() {
    let io = SimulatedIo::default();
    let options = durable(SyncMode::Always); // 64 KiB segments
    io.set_capacity(Some(100 << 10));
    match open_with_io(Arc::new(io.clone()), "/data", options) {
        Err(Error::NoSpace { available, needed, .. }) => {
            assert_eq!(needed, 128 << 10, "a first segment and the next, prepared");
            assert!(available <= 100 << 10);
        }
        other => panic!("opened on a disk too small: {other:?}"),
    }
    assert!(files_under(&io, "/data/wal").is_empty(), "{:?}", files_under(&io, "/data/wal"));

    // Leftovers of a crash: a segment half prepared, a catalog half written.
    io.set_capacity(None);
    for leftover in ["/data/wal/next-segment.tmp", "/data/CATALOG.tmp"] {
        let mut file = io.append(Path::new(leftover)).unwrap();
        file.write(&[0; 50 << 10]).unwrap();
        file.sync().unwrap();
    }
    io.set_capacity(Some(200 << 10));
    let db = open_with_io(Arc::new(io.clone()), "/data", options).unwrap();
    let temporary = |io: &SimulatedIo| {
        ["/data", "/data/wal", "/data/shards"]
            .into_iter()
            .flat_map(|d| files_under(io, d))
            .filter(|p| p.to_string_lossy().ends_with(".tmp"))
            .collect::<Vec<_>>()
    };
    assert!(temporary(&io).is_empty(), "{:?}", temporary(&io));

    // The disk fills: the next segment's preparation fails and leaves
    // nothing; writes go on in the current segment, then fail.
    let t = db.create_table("t", &schema(), TableOptions::default()).unwrap();
    let (mut rng, mut next_id, mut acknowledged) = (StdRng::seed_from_u64(5), 0, Vec::new());
    let failure = loop {
        let rows = random_rows(&mut rng, &mut next_id, 40);
        match t.append(&batch(&rows)) {
            Ok(_) => acknowledged.extend(rows),
            Err(e) => break e,
        }
        assert!(acknowledged.len() < 100_000, "the disk never filled");
    };
    assert!(
        matches!(&failure, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull),
        "{failure:?}"
    );
    db.wait_for_background_rebuilds();
    assert!(temporary(&io).is_empty(), "{:?}", temporary(&io));
    assert_eq!(rows(&t), acknowledged, "the failed write is not seen");
    drop((t, db));
    io.set_capacity(None);
    let db = open_with_io(Arc::new(io.clone()), "/data", options).unwrap();
    assert_eq!(rows(&db.table("t").unwrap()), acknowledged);
}

#[test]
fn records_larger_than_a_frame_are_split_and_recovered_whole() {
    let io = SimulatedIo::default();
    let dir = Path::new("/data");
    let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
    // Frames of 1,000 bytes: each commit below is a few dozen frames.
    set_log_frame_bytes(&db, 1000);
    let t = db.create_table("t", &schema(), TableOptions::default().with_shard_capacity(1024)).unwrap();
    let (mut rng, mut next_id) = (StdRng::seed_from_u64(21), 0);
    let mut expected = Vec::new();
    for i in 0..6 {
        let rows = random_rows(&mut rng, &mut next_id, 300 + 100 * i);
        t.append(&batch(&rows)).unwrap();
        expected.extend(rows);
        if i == 2 {
            db.checkpoint().unwrap();
        }
    }
    db.wait_for_background_rebuilds();
    io.crash(0);
    drop((t, db));
    let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
    assert_eq!(sorted(rows(&db.table("t").unwrap())), sorted(expected.clone()));
    assert!(db.recovery().unwrap().torn.is_none());
    // Writing goes on after the split records, and they read back again.
    set_log_frame_bytes(&db, 1000);
    let more = random_rows(&mut rng, &mut next_id, 500);
    db.table("t").unwrap().append(&batch(&more)).unwrap();
    expected.extend(more);
    drop(db);
    let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
    assert_eq!(sorted(rows(&db.table("t").unwrap())), sorted(expected));
}

#[test]
fn a_split_record_can_open_the_log_after_a_checkpoint() {
    // Segments of 4 KiB: every commit below fills one, so the checkpoint
    // leaves only the segment the next record starts, and that record is
    // split: the log starts at its first frame, numbered right after the
    // checkpoint, though the record takes its last frame's number.
    let io = SimulatedIo::default();
    let dir = Path::new("/data");
    let options = DurableOptions {
        sync: SyncMode::Always,
        checkpoint_bytes: 0,
        log_segment_bytes: 4096,
        recover_truncate: false,
    };
    let db = open_with_io(Arc::new(io.clone()), dir, options).unwrap();
    set_log_frame_bytes(&db, 1000);
    let t = db.create_table("t", &schema(), TableOptions::default().with_background_rebuild(false)).unwrap();
    let (mut rng, mut next_id) = (StdRng::seed_from_u64(8), 0);
    let first = random_rows(&mut rng, &mut next_id, 300);
    t.append(&batch(&first)).unwrap();
    db.checkpoint().unwrap();
    let second = random_rows(&mut rng, &mut next_id, 300);
    t.append(&batch(&second)).unwrap();
    io.crash(0);
    drop((t, db));
    let db = open_with_io(Arc::new(io.clone()), dir, options).unwrap();
    assert_eq!(rows(&db.table("t").unwrap()), [first, second].concat());
}

#[test]
fn delta_rows_checkpointed_before_a_column_rename_survive_a_restart() {
    let io = SimulatedIo::default();
    let dir = Path::new("/data");
    let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
    let t = db.create_table("t", &schema(), TableOptions::default().with_background_rebuild(false)).unwrap();
    let (mut rng, mut next_id) = (StdRng::seed_from_u64(4), 0);
    let expected = random_rows(&mut rng, &mut next_id, 50);
    t.append(&batch(&expected)).unwrap();
    db.checkpoint().unwrap(); // the delta rows' file, under the old column name
    let rename = Alteration::RenameColumn { from: "score".into(), to: "points".into() };
    db.alter_table("t", &rename).unwrap();
    db.checkpoint().unwrap(); // the same rows: the file is kept
    drop((t, db));
    io.crash(0);
    let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(t.arrow_schema().field(2).name(), "points");
    assert_eq!(rows(&t), expected);
}

#[test]
fn a_split_record_cut_short_by_a_crash_is_a_torn_tail() {
    // Unsynced, the last commit's first frames survive a power loss but
    // its last does not: it never happened, and the log goes on after it.
    for torn in [13 + 1000, 3 * (13 + 1000), 3 * (13 + 1000) + 500] {
        let io = SimulatedIo::default();
        let dir = Path::new("/data");
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Off)).unwrap();
        set_log_frame_bytes(&db, 1000);
        let options = TableOptions::default().with_background_rebuild(false);
        let t = db.create_table("t", &schema(), options).unwrap();
        let (mut rng, mut next_id) = (StdRng::seed_from_u64(torn as u64), 0);
        let first = random_rows(&mut rng, &mut next_id, 400);
        t.append(&batch(&first)).unwrap();
        db.checkpoint().unwrap(); // syncs the log
        t.append(&batch(&random_rows(&mut rng, &mut next_id, 400))).unwrap();
        io.crash(torn);
        drop((t, db));
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Off)).unwrap();
        assert_eq!(rows(&db.table("t").unwrap()), first, "torn {torn}");
        assert!(db.recovery().unwrap().torn.is_some(), "torn {torn}: the cut record is reported");
        let more = random_rows(&mut rng, &mut next_id, 10);
        db.table("t").unwrap().append(&batch(&more)).unwrap();
        db.checkpoint().unwrap();
        drop(db);
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Off)).unwrap();
        assert_eq!(rows(&db.table("t").unwrap()), [first.clone(), more].concat(), "torn {torn}");
    }
}

#[test]
fn delta_rows_checkpoint_to_their_own_files_and_the_catalog_stays_small() {
    let io = SimulatedIo::default();
    let open = |io: &SimulatedIo| open_with_io(Arc::new(io.clone()), "/data", durable(SyncMode::Always));
    let db = open(&io).unwrap();
    let options = TableOptions::default().with_shard_capacity(4000).with_background_rebuild(false);
    let t = db.create_table("t", &schema(), options).unwrap();
    let (mut rng, mut next_id) = (StdRng::seed_from_u64(5), 0);
    t.append(&batch(&random_rows(&mut rng, &mut next_id, 10_000))).unwrap();
    db.checkpoint().unwrap();
    let delta_files = |io: &SimulatedIo| -> Vec<PathBuf> {
        files_under(io, "/data/shards").into_iter().filter(|p| p.extension().is_some_and(|e| e == "delta")).collect()
    };
    let first = delta_files(&io);
    assert_eq!(first.len(), 3, "10,000 delta rows in shards of 4,000: {first:?}");
    let catalog = io.read(Path::new("/data/CATALOG")).unwrap().len();
    assert!(catalog < 4096, "the catalog holds {catalog} bytes");

    // A second checkpoint rewrites only the shard whose delta grew, and
    // removes the file it replaces.
    t.append(&batch(&random_rows(&mut rng, &mut next_id, 100))).unwrap();
    db.checkpoint().unwrap();
    let second = delta_files(&io);
    assert_eq!(second.len(), 3);
    assert_eq!(first.iter().filter(|f| second.contains(f)).count(), 2, "{first:?} then {second:?}");
    let expected = rows(&t);
    drop((t, db));
    // No log records after the checkpoint: the rows come from the files.
    let db = open(&io).unwrap();
    assert_eq!(rows(&db.table("t").unwrap()), expected);
    drop(db);

    // A damaged delta file is refused by name.
    let victim = second.iter().find(|f| !first.contains(f)).unwrap().clone();
    io.flip_bit(&victim, 100, 2).unwrap();
    match open(&io) {
        Err(Error::Corrupt { file, .. }) => assert_eq!(file, victim),
        other => panic!("a flipped bit in a delta file gave {other:?}"),
    }
}

#[test]
fn every_type_round_trips_through_checkpoints_and_the_log() {
    let types = all_types();
    let fields: Vec<Field> =
        types.iter().enumerate().map(|(i, dt)| Field::new(format!("c{i}"), dt.clone(), true)).collect();
    let schema = Arc::new(Schema::new(fields));
    let shapes = common::SHAPES;
    let io = SimulatedIo::default();
    let db = open_with_io(Arc::new(io.clone()), "/data", durable(SyncMode::Always)).unwrap();
    let options = TableOptions::default().with_shard_capacity(3000).with_background_rebuild(false);
    let t = db.create_table("all", &schema, options).unwrap();
    for (round, shape) in shapes.iter().enumerate() {
        let columns = types.iter().map(|dt| gen_array(dt, *shape, 1500, 100, round as u64)).collect();
        // The log keeps each append as it came: strings in any of their layouts.
        t.append(&RecordBatch::try_new(Arc::clone(&schema), columns).unwrap()).unwrap();
        if round == 3 {
            t.rebuild().unwrap();
            db.checkpoint().unwrap();
        }
    }
    let before = t.snapshot().to_record_batches(None).unwrap();
    let plain_of = |batches: &[RecordBatch]| -> Vec<Vec<common::Plain>> {
        (0..types.len()).map(|c| batches.iter().flat_map(|b| plain(b.column(c).as_ref())).collect()).collect()
    };
    drop((t, db));
    let db = open_with_io(Arc::new(io.clone()), "/data", durable(SyncMode::Always)).unwrap();
    let after = db.table("all").unwrap().snapshot().to_record_batches(None).unwrap();
    assert_eq!(plain_of(&after), plain_of(&before));
    assert!(db.recovery().unwrap().shard_files > 0 && db.recovery().unwrap().replayed > 0);
}

#[test]
fn a_data_directory_is_locked_to_one_open_database() {
    let dir = std::env::temp_dir().join(format!("quiverdb-lock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = Database::open(&dir, DurableOptions::default()).unwrap();
    let t = db.create_table("t", &schema(), TableOptions::default()).unwrap();
    t.append(&batch(&[(1, Some("x".into()), Some(0.5))])).unwrap();
    match Database::open(&dir, DurableOptions::default()) {
        Err(e @ Error::DirectoryInUse { .. }) => assert!(e.to_string().contains(&std::process::id().to_string())),
        other => panic!("{other:?}"),
    }
    db.close().unwrap();
    // A table handle can still write, so it keeps the directory locked.
    assert!(matches!(Database::open(&dir, DurableOptions::default()), Err(Error::DirectoryInUse { .. })));
    t.append(&batch(&[(2, None, None)])).unwrap();
    drop(t);
    let db = Database::open(&dir, DurableOptions::default()).unwrap();
    assert_eq!(rows(&db.table("t").unwrap()), [(1, Some("x".into()), Some(0.5)), (2, None, None)]);
    drop(db);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Shard ids are part of what the log refers to (a delete names its
/// shard): replay must hand out the same ids as the original, also when a
/// transaction made shards it then truncated, or failed (in its own code
/// or at commit, on a duplicate key) after making one.
#[test]
fn shards_made_by_truncated_or_failed_transactions_do_not_shift_replayed_ids() {
    let io = SimulatedIo::default();
    let dir = Path::new("/data");
    let open = || open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
    let db = open();
    let opts = TableOptions::default().with_shard_capacity(4).with_background_rebuild(false).with_primary_key(["id"]);
    let t = db.create_table("t", &schema(), opts).unwrap();
    let mut next_id = 0;
    let mut rng = StdRng::seed_from_u64(7);
    let first = random_rows(&mut rng, &mut next_id, 6);
    let kept = random_rows(&mut rng, &mut next_id, 6);
    // Makes two shards, truncates them away, and makes two more.
    t.transaction(|tx| {
        tx.append(&batch(&first))?;
        tx.truncate();
        tx.append(&batch(&kept))
    })
    .unwrap();
    // Makes a shard, then fails: nothing of it is published.
    let failed = t.transaction(|tx| {
        tx.append(&batch(&random_rows(&mut rng, &mut next_id, 3)))?;
        Err::<(), _>(Error::Conflict { table: "t".into() })
    });
    assert!(matches!(failed, Err(Error::Conflict { .. })));
    // Makes a shard, then fails at commit: a key the table holds.
    let mut duplicate = random_rows(&mut rng, &mut next_id, 2);
    duplicate.push(kept[0].clone());
    let failed = t.transaction(|tx| tx.append(&batch(&duplicate)));
    assert!(matches!(failed, Err(Error::DuplicateKey { .. })), "{failed:?}");
    let more = random_rows(&mut rng, &mut next_id, 5);
    t.append(&batch(&more)).unwrap();
    // Deletes name every shard.
    let snap = t.snapshot();
    let ids: Vec<ShardId> = snap.shards().map(|s| s.id()).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    t.transaction(|tx| {
        let snap = tx.snapshot();
        tx.delete_selection(&snap, &select(&snap, |id| id % 2 == 0))
    })
    .unwrap();
    let expected: Vec<Row> = kept.into_iter().chain(more).filter(|r| r.0 % 2 != 0).collect();
    assert_eq!(rows(&t), expected);
    let before = digest(&db);
    quiesce(db);
    let db = open();
    assert_eq!(digest(&db), before);
    let reopened: Vec<ShardId> = db.table("t").unwrap().snapshot().shards().map(|s| s.id()).collect();
    assert_eq!(reopened, ids);
}

/// Column defaults and views are part of the database's definition: logged,
/// checkpointed and recovered, from the log alone and from a checkpoint.
#[test]
fn column_defaults_and_views_survive_a_restart() {
    for checkpoint in [false, true] {
        let io = SimulatedIo::default();
        let dir = Path::new("/defaults-and-views");
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        let options = TableOptions::default()
            .with_column_default("name", "'anonymous'")
            .with_column_default("score", "7")
            .with_unique(["name"])
            .with_unique(["name", "score"]);
        db.create_table("t", &schema(), options.clone()).unwrap();
        db.create_view("v", "CREATE VIEW v AS SELECT id FROM t", false).unwrap();
        db.create_view("w", "CREATE VIEW w AS SELECT 1", false).unwrap();
        db.create_view("w", "CREATE VIEW w AS SELECT 2", true).unwrap();
        db.create_view("gone", "CREATE VIEW gone AS SELECT 3", false).unwrap();
        db.drop_view("gone").unwrap();
        // One namespace: a view cannot take a table's name, nor a table a view's.
        assert!(matches!(db.create_view("t", "CREATE VIEW t AS SELECT 1", true), Err(Error::TableExists(_))));
        assert!(matches!(db.create_table("v", &schema(), TableOptions::default()), Err(Error::TableExists(_))));
        assert!(matches!(db.drop_view("gone"), Err(Error::ViewNotFound(_))));
        if checkpoint {
            db.checkpoint().unwrap();
        }
        drop(db);
        io.crash(0);
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        assert_eq!(db.table("t").unwrap().options(), &options, "checkpoint: {checkpoint}");
        assert_eq!(db.view_names(), vec!["v".to_string(), "w".to_string()], "checkpoint: {checkpoint}");
        assert_eq!(db.view("w").as_deref(), Some("CREATE VIEW w AS SELECT 2"));
        assert_eq!(db.view("v").as_deref(), Some("CREATE VIEW v AS SELECT id FROM t"));
    }
    // A default for a column the table lacks is refused.
    let db = Database::new();
    let bad = TableOptions::default().with_column_default("nope", "1");
    assert!(matches!(db.create_table("t", &schema(), bad), Err(Error::InvalidSchema(_))));
}

#[test]
fn schemas_and_their_tables_survive_a_restart_and_drop_whole() {
    for checkpoint in [false, true] {
        let io = SimulatedIo::default();
        let dir = Path::new("/schemas");
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        db.create_schema("sales").unwrap();
        db.create_schema("empty").unwrap();
        db.create_schema("gone").unwrap();
        db.create_table("sales.t", &schema(), TableOptions::default()).unwrap();
        db.table("sales.t")
            .unwrap()
            .transaction(|t| t.append(&batch(&random_rows(&mut StdRng::seed_from_u64(5), &mut 0, 5))))
            .unwrap();
        db.create_view("sales.v", "CREATE VIEW v AS SELECT 1", false).unwrap();
        db.create_table("gone.t", &schema(), TableOptions::default()).unwrap();
        // A table of the default schema may hold a dot.
        db.create_table("other.t", &schema(), TableOptions::default()).unwrap();
        assert!(matches!(db.create_schema("sales"), Err(Error::SchemaExists(_))));
        // "other.t" claims the name "other".
        assert!(matches!(db.create_schema("other"), Err(Error::SchemaExists(_))));
        assert!(matches!(db.create_schema("a.b"), Err(Error::InvalidSchema(_))));
        assert!(matches!(db.drop_schema("gone", false), Err(Error::SchemaNotEmpty { .. })));
        db.drop_schema("gone", true).unwrap();
        assert!(matches!(db.drop_schema("gone", true), Err(Error::SchemaNotFound(_))));
        if checkpoint {
            db.checkpoint().unwrap();
        }
        drop(db);
        io.crash(0);
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        let context = format!("checkpoint: {checkpoint}");
        assert_eq!(db.schema_names(), vec!["empty".to_string(), "sales".to_string()], "{context}");
        assert_eq!(db.table_names(), vec!["other.t".to_string(), "sales.t".to_string()], "{context}");
        assert_eq!(rows(&db.table("sales.t").unwrap()).len(), 5, "{context}");
        assert_eq!(db.view_names(), vec!["sales.v".to_string()], "{context}");
        // CASCADE drops the schema, its table and its view in one record.
        db.drop_schema("sales", true).unwrap();
        drop(db);
        io.crash(0);
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        assert_eq!(db.schema_names(), vec!["empty".to_string()], "{context}");
        assert_eq!(db.table_names(), vec!["other.t".to_string()], "{context}");
        assert!(db.view_names().is_empty(), "{context}");
    }
}

/// A table without columns (`CREATE TABLE t ()`) keeps its row count
/// through appends, deletes, rebuilds, checkpoints and the log.
#[test]
fn a_table_without_columns_survives_a_restart() {
    let empty = Arc::new(Schema::empty());
    let rows = |n: usize| {
        RecordBatch::try_new_with_options(
            Arc::clone(&empty),
            vec![],
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(n)),
        )
        .unwrap()
    };
    for checkpoint in [false, true] {
        let io = SimulatedIo::default();
        let dir = Path::new("/no-columns");
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        let options = TableOptions::default().with_shard_capacity(4).with_background_rebuild(false);
        let t = db.create_table("nothing", &empty, options).unwrap();
        t.append(&rows(3)).unwrap();
        t.append(&rows(4)).unwrap();
        t.rebuild().unwrap();
        let snapshot = t.snapshot();
        let first: Vec<(ShardId, Vec<RecId>)> =
            snapshot.shards().take(1).map(|s| (s.id(), s.live_ids().into_iter().take(2).collect())).collect();
        assert_eq!(t.delete(&snapshot, &first).unwrap(), 2);
        t.append(&rows(1)).unwrap();
        assert_eq!(t.snapshot().row_count(), 6);
        if checkpoint {
            db.checkpoint().unwrap();
        }
        drop((t, db));
        io.crash(0);
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        let t = db.table("nothing").unwrap();
        assert_eq!(t.snapshot().row_count(), 6, "checkpoint: {checkpoint}");
        let batches = t.snapshot().to_record_batches(None).unwrap();
        assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 6, "checkpoint: {checkpoint}");
    }
}

/// Renaming a table or a column keeps the rows, key, UNIQUE constraints
/// and defaults (which follow the column), across writes after it, the log
/// and checkpoints; old handles read their snapshots and cannot write.
#[test]
fn renamed_tables_and_columns_survive_a_restart() {
    for checkpoint in [false, true] {
        let io = SimulatedIo::default();
        let dir = Path::new("/renames");
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        let options = TableOptions::default()
            .with_shard_capacity(3)
            .with_background_rebuild(false)
            .with_primary_key(["id"])
            .with_unique(["name"])
            .with_column_default("score", "7");
        let t = db.create_table("t", &schema(), options).unwrap();
        let first: Vec<Row> = (0..5).map(|i| (i, Some(format!("n{i}")), Some(i as f64))).collect();
        t.append(&batch(&first)).unwrap();
        t.rebuild().unwrap();
        db.alter_table("t", &Alteration::RenameTo("people".into())).unwrap();
        db.alter_table("people", &Alteration::RenameColumn { from: "score".into(), to: "points".into() }).unwrap();
        assert!(matches!(t.append(&batch(&[(9, None, None)])), Err(Error::TableNotFound(_))), "an old handle wrote");
        assert_eq!(rows(&t), first, "an old handle reads its snapshot");
        let people = db.table("people").unwrap();
        let as_people = |rows: &[Row]| {
            RecordBatch::try_new(Arc::clone(people.arrow_schema()), batch(rows).columns().to_vec()).unwrap()
        };
        assert_eq!(people.arrow_schema().field(2).name(), "points");
        assert_eq!(people.options().column_defaults, vec![("points".to_string(), "7".to_string())]);
        // Writes after the renames land in the renamed table, and the key
        // and UNIQUE constraint still hold.
        people.append(&as_people(&[(5, Some("n5".into()), None)])).unwrap();
        assert!(matches!(people.append(&as_people(&[(1, None, None)])), Err(Error::DuplicateKey { .. })));
        assert!(matches!(people.append(&as_people(&[(6, Some("n0".into()), None)])), Err(Error::DuplicateKey { .. })));
        // Refused: a taken name, a missing column, a taken column name.
        db.create_table("other", &schema(), TableOptions::default()).unwrap();
        assert!(matches!(db.alter_table("people", &Alteration::RenameTo("other".into())), Err(Error::TableExists(_))));
        let missing = Alteration::RenameColumn { from: "nope".into(), to: "x".into() };
        assert!(matches!(db.alter_table("people", &missing), Err(Error::ColumnNotFound { .. })));
        let taken = Alteration::RenameColumn { from: "name".into(), to: "id".into() };
        assert!(matches!(db.alter_table("people", &taken), Err(Error::InvalidSchema(_))));
        assert!(matches!(db.alter_table("t", &Alteration::RenameTo("u".into())), Err(Error::TableNotFound(_))));
        let expected: Vec<Row> = first.iter().cloned().chain([(5, Some("n5".to_string()), None)]).collect();
        if checkpoint {
            db.checkpoint().unwrap();
        }
        drop((t, people, db));
        io.crash(0);
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        let context = format!("checkpoint: {checkpoint}");
        assert_eq!(db.table_names(), vec!["other".to_string(), "people".to_string()], "{context}");
        let people = db.table("people").unwrap();
        let mut got = rows(&people);
        got.sort_by_key(|r| r.0);
        assert_eq!(got, expected, "{context}");
        assert_eq!(people.arrow_schema().field(2).name(), "points", "{context}");
        assert_eq!(people.options().unique, vec![vec!["name".to_string()]], "{context}");
        let again =
            RecordBatch::try_new(Arc::clone(people.arrow_schema()), batch(&[(2, None, None)]).columns().to_vec());
        assert!(matches!(people.append(&again.unwrap()), Err(Error::DuplicateKey { .. })), "{context}");
    }
}

/// Adding a column gives every existing row its value (main storage keeps
/// its encodings and holds the new column constant-encoded; delta rows and
/// deletes carry over), and dropping one removes it; both survive writes
/// after them, the log and checkpoints.
#[test]
fn added_and_dropped_columns_survive_a_restart() {
    for checkpoint in [false, true] {
        let io = SimulatedIo::default();
        let dir = Path::new("/columns");
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        let options = TableOptions::default()
            .with_shard_capacity(4)
            .with_background_rebuild(false)
            .with_primary_key(["id"])
            .with_column_default("score", "7");
        let t = db.create_table("t", &schema(), options).unwrap();
        let first: Vec<Row> = (0..6).map(|i| (i, Some(format!("n{i}")), Some(i as f64))).collect();
        t.append(&batch(&first)).unwrap();
        t.rebuild().unwrap();
        t.append(&batch(&[(6, None, None), (7, Some("n7".into()), Some(7.0))])).unwrap();
        let snapshot = t.snapshot();
        let doomed: Vec<(ShardId, Vec<RecId>)> =
            snapshot.shards().take(1).map(|s| (s.id(), s.live_ids().into_iter().take(1).collect())).collect();
        t.delete(&snapshot, &doomed).unwrap();

        let flag = Field::new("flag", DataType::Int32, false);
        let seven: arrow_array::ArrayRef = Arc::new(arrow_array::Int32Array::from(vec![7]));
        db.add_column("t", flag.clone(), Arc::clone(&seven), Some("7".into())).unwrap();
        db.drop_column("t", "name").unwrap();
        // Refused: a key column, a missing one, a taken name, NOT NULL
        // without a value on a table with rows.
        assert!(matches!(db.drop_column("t", "id"), Err(Error::InvalidSchema(_))));
        assert!(matches!(db.drop_column("t", "nope"), Err(Error::ColumnNotFound { .. })));
        assert!(matches!(db.add_column("t", flag.clone(), seven, None), Err(Error::InvalidSchema(_))));
        let none: arrow_array::ArrayRef = Arc::new(arrow_array::Int32Array::from(vec![None::<i32>]));
        let strict = Field::new("strict", DataType::Int32, false);
        assert!(matches!(db.add_column("t", strict, none, None), Err(Error::NullInNonNullable { .. })));

        let t = db.table("t").unwrap();
        let names: Vec<&str> = t.arrow_schema().fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["id", "score", "flag"]);
        let more = RecordBatch::try_new(
            Arc::clone(t.arrow_schema()),
            vec![
                Arc::new(Int64Array::from(vec![8])),
                Arc::new(Float64Array::from(vec![8.5])),
                Arc::new(arrow_array::Int32Array::from(vec![1])),
            ],
        )
        .unwrap();
        t.append(&more).unwrap();
        t.rebuild().unwrap();
        let contents = |t: &Table| -> Vec<(i64, Option<f64>, i32)> {
            let mut out = Vec::new();
            for b in t.snapshot().to_record_batches(None).unwrap() {
                let ids = b.column(0).as_primitive::<Int64Type>();
                let scores = b.column(1).as_primitive::<Float64Type>();
                let flags = b.column(2).as_primitive::<arrow_array::types::Int32Type>();
                for i in 0..b.num_rows() {
                    out.push((ids.value(i), scores.is_valid(i).then(|| scores.value(i)), flags.value(i)));
                }
            }
            out.sort_by_key(|r| r.0);
            out
        };
        let expected: Vec<(i64, Option<f64>, i32)> =
            (1..8).map(|i| (i, (i != 6).then_some(i as f64), 7)).chain([(8, Some(8.5), 1)]).collect();
        assert_eq!(contents(&t), expected);
        assert_eq!(
            t.options().column_defaults,
            vec![("score".to_string(), "7".to_string()), ("flag".to_string(), "7".to_string())]
        );
        if checkpoint {
            db.checkpoint().unwrap();
        }
        drop((t, db));
        io.crash(0);
        let db = open_with_io(Arc::new(io.clone()), dir, durable(SyncMode::Always)).unwrap();
        assert_eq!(contents(&db.table("t").unwrap()), expected, "checkpoint: {checkpoint}");
    }
}

/// A transaction appending `batches` batches of `n` rows; the rows.
fn bulk(t: &mut quiverdb_storage::Transaction<'_>, rng: &mut StdRng, next_id: &mut i64, batches: usize) -> Vec<Row> {
    let mut all = Vec::new();
    for _ in 0..batches {
        let rows = random_rows(rng, next_id, 40);
        t.append(&batch(&rows)).unwrap();
        all.extend(rows);
    }
    all
}

/// A durable database on a simulated disk at `/data` whose transactions
/// stage parts of ~2 KB (dozens per transaction below), and options for
/// its tables.
fn staging_database() -> (SimulatedIo, Database, TableOptions) {
    let io = SimulatedIo::default();
    let db = open_with_io(Arc::new(io.clone()), "/data", durable(SyncMode::Always)).unwrap();
    set_log_stage_bytes(&db, 2000);
    (io, db, TableOptions::default().with_shard_capacity(300).with_background_rebuild(false))
}

#[test]
fn bulk_transactions_stage_their_appends_and_recover_whole() {
    let (io, db, table_options) = staging_database();
    let (dir, options) = (Path::new("/data"), durable(SyncMode::Always));
    let t = db.create_table("t", &schema(), table_options.clone()).unwrap();
    let (mut rng, mut next_id) = (StdRng::seed_from_u64(31), 0);
    let mut expected = Vec::new();

    let records = db.log_stats().unwrap().records;
    expected.extend(t.transaction(|t| Ok(bulk(t, &mut rng, &mut next_id, 30))).unwrap());
    let parts = db.log_stats().unwrap().records - records;
    assert!(parts > 10, "a bulk transaction wrote {parts} log records");

    // Staged, then rolled back: its parts are in the log, nothing applies them.
    let failed = t.transaction(|t| {
        bulk(t, &mut rng, &mut next_id, 20);
        Err::<(), _>(Error::Internal("rolled back".into()))
    });
    assert!(failed.is_err());
    // Staged, then truncated in the same transaction: only what follows counts.
    let kept = t
        .transaction(|t| {
            bulk(t, &mut rng, &mut next_id, 20);
            t.truncate();
            Ok(bulk(t, &mut rng, &mut next_id, 15))
        })
        .unwrap();
    expected = kept;
    let more = random_rows(&mut rng, &mut next_id, 10);
    t.append(&batch(&more)).unwrap();
    expected.extend(more);

    // A table filled while checkpoints run: its first parts precede the
    // checkpoint (in segments it would remove), its creation follows it.
    let mut filled = Vec::new();
    db.create_table_with("u", &schema(), table_options, false, |u| {
        u.transaction(|txn| {
            filled.extend(bulk(txn, &mut rng, &mut next_id, 25));
            db.checkpoint()?;
            let between = random_rows(&mut rng, &mut next_id, 20);
            t.append(&batch(&between))?;
            expected.extend(between);
            filled.extend(bulk(txn, &mut rng, &mut next_id, 25));
            db.checkpoint()?;
            Ok(())
        })
    })
    .unwrap();
    io.crash(0);
    drop((t, db));

    let db = open_with_io(Arc::new(io.clone()), dir, options).unwrap();
    assert_eq!(sorted(rows(&db.table("t").unwrap())), sorted(expected.clone()));
    assert_eq!(sorted(rows(&db.table("u").unwrap())), sorted(filled.clone()));
    // Writing goes on; a checkpoint after it removes what no transaction needs.
    set_log_stage_bytes(&db, 2000);
    let t = db.table("t").unwrap();
    expected.extend(t.transaction(|t| Ok(bulk(t, &mut rng, &mut next_id, 30))).unwrap());
    db.checkpoint().unwrap();
    drop((t, db));
    let db = open_with_io(Arc::new(io.clone()), dir, options).unwrap();
    assert_eq!(sorted(rows(&db.table("t").unwrap())), sorted(expected));
    assert_eq!(sorted(rows(&db.table("u").unwrap())), sorted(filled));
}

#[test]
fn parts_of_a_transaction_cut_off_by_a_crash_are_not_applied() {
    let (io, db, table_options) = staging_database();
    let (dir, options) = (Path::new("/data"), durable(SyncMode::Always));
    let t = db.create_table("t", &schema(), table_options.clone()).unwrap();
    let other = db.create_table("other", &schema(), table_options).unwrap();
    let (mut rng, mut next_id) = (StdRng::seed_from_u64(32), 0);
    let committed = random_rows(&mut rng, &mut next_id, 100);
    t.append(&batch(&committed)).unwrap();
    let other_rows = random_rows(&mut rng, &mut next_id, 5);
    let _ = t.transaction(|txn| {
        bulk(txn, &mut rng, &mut next_id, 30);
        // Another table's commit syncs the log, parts included; then the
        // power goes before this transaction commits.
        other.append(&batch(&other_rows))?;
        io.crash(0);
        Err::<(), _>(Error::Internal("the power went".into()))
    });
    drop((t, other, db));
    let db = open_with_io(Arc::new(io.clone()), dir, options).unwrap();
    assert_eq!(rows(&db.table("t").unwrap()), committed);
    assert_eq!(rows(&db.table("other").unwrap()), other_rows);
}

/// A shard rebuilt because writes to it paused is logged like any
/// rebuild: a reopen after a crash replays it and later deletes find
/// their rows; a closed database rebuilds nothing after its checkpoint.
#[test]
fn rows_compressed_after_writes_pause_survive_a_crash_and_a_close() {
    let io = SimulatedIo::default();
    let open = |io: &SimulatedIo| open_with_io(Arc::new(io.clone()), "/data", durable(SyncMode::Always)).unwrap();
    let db = open(&io);
    let t = db.create_table("t", &schema(), TableOptions::default()).unwrap();
    let (mut rng, mut next_id) = (StdRng::seed_from_u64(11), 0);
    let mut model = random_rows(&mut rng, &mut next_id, 3_000);
    t.append(&batch(&model)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while t.memory_usage().delta_rows > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!((t.memory_usage().main_rows, t.memory_usage().delta_rows), (3_000, 0));
    // A delete by the renumbered ids, then a crash (no close).
    let snapshot = t.snapshot();
    t.delete(&snapshot, &select(&snapshot, |id| id % 3 == 0)).unwrap();
    model.retain(|r| r.0 % 3 != 0);
    drop(t);
    quiesce(db);
    let db = open(&io);
    assert!(db.recovery().unwrap().replayed >= 3, "create, append, rebuild, delete: {:?}", db.recovery());
    let t = db.table("t").unwrap();
    assert_eq!(rows(&t), model);

    // Written and closed at once: the settling rebuild never runs.
    let more = random_rows(&mut rng, &mut next_id, 10);
    t.append(&batch(&more)).unwrap();
    model.extend(more);
    drop(t);
    db.close().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let db = open(&io);
    assert_eq!(db.recovery().unwrap().replayed, 0, "nothing logged after the closing checkpoint");
    assert_eq!(rows(&db.table("t").unwrap()), model);
}
