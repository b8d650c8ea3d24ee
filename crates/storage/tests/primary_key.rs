//! Primary key uniqueness: every write path (batch and single-row appends,
//! updates, overwrites) against a model of the live keys, across shard
//! boundaries, main storage and deltas, for packed and byte-string keys.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::*;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use quiverdb_storage::{Database, Error, RecId, ShardId, Table, TableOptions, TableSnapshot, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn int_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Int32, true)]))
}

fn int_batch(keys: &[i64]) -> RecordBatch {
    let values = Int32Array::from_iter_values(keys.iter().map(|&k| k as i32));
    RecordBatch::try_new(int_schema(), vec![Arc::new(Int64Array::from(keys.to_vec())), Arc::new(values)]).unwrap()
}

fn keyed_table(capacity: usize) -> (Database, Table) {
    let db = Database::new();
    let options =
        TableOptions::default().with_shard_capacity(capacity).with_background_rebuild(false).with_primary_key(["k"]);
    let t = db.create_table("t", &int_schema(), options).unwrap();
    (db, t)
}

fn live_keys(t: &Table) -> Vec<i64> {
    let mut keys: Vec<i64> = t
        .snapshot()
        .to_record_batches(Some(&[0]))
        .unwrap()
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    keys.sort_unstable();
    keys
}

fn is_duplicate(e: &Error) -> bool {
    matches!(e, Error::DuplicateKey { .. })
}

/// Record ids of the live rows whose key is in `keys`.
fn select(snapshot: &TableSnapshot, keys: &HashSet<i64>) -> Vec<(ShardId, Vec<RecId>)> {
    snapshot
        .shards()
        .map(|shard| {
            let ids = shard.live_ids();
            let batch = shard.gather(&ids, Some(&[0])).unwrap();
            let col = batch.column(0).as_primitive::<Int64Type>();
            let chosen = ids.iter().zip(col.values()).filter(|(_, k)| keys.contains(k)).map(|(&id, _)| id).collect();
            (shard.id(), chosen)
        })
        .collect()
}

#[test]
fn duplicates_are_rejected_whole() {
    let (_db, t) = keyed_table(4);
    t.append(&int_batch(&[1, 2, 3, 4, 5])).unwrap();
    // Within one batch.
    let e = t.append(&int_batch(&[10, 11, 10])).unwrap_err();
    assert!(is_duplicate(&e), "{e}");
    assert_eq!(e.to_string(), "duplicate primary key (k) = (10) in table 't'");
    // Against the delta.
    assert!(is_duplicate(&t.append(&int_batch(&[20, 3])).unwrap_err()));
    // Against main storage.
    t.rebuild().unwrap();
    assert!(is_duplicate(&t.append(&int_batch(&[21, 22, 5])).unwrap_err()));
    // Across two batches of one transaction.
    let e = t.transaction(|tx| {
        tx.append(&int_batch(&[30, 31]))?;
        tx.append(&int_batch(&[31]))
    });
    assert!(is_duplicate(&e.unwrap_err()));
    // A single-row append.
    assert!(is_duplicate(&t.append_row(&[Value::Int(4), Value::Null]).unwrap_err()));
    t.append_row(&[Value::Int(6), Value::Null]).unwrap();
    assert!(is_duplicate(&t.append_row(&[Value::Int(6), Value::Null]).unwrap_err()));
    // Nothing of the failed writes is visible.
    assert_eq!(live_keys(&t), vec![1, 2, 3, 4, 5, 6]);
}

#[test]
fn deleted_keys_can_return() {
    let (_db, t) = keyed_table(3);
    t.append(&int_batch(&[1, 2, 3, 4, 5, 6, 7])).unwrap();
    t.rebuild().unwrap();
    let snap = t.snapshot();
    t.delete(&snap, &select(&snap, &HashSet::from([2, 6]))).unwrap();
    t.append(&int_batch(&[2, 6])).unwrap();
    assert_eq!(live_keys(&t), vec![1, 2, 3, 4, 5, 6, 7]);
    // An update rewrites rows under their own keys.
    let snap = t.snapshot();
    t.update(&snap, &select(&snap, &HashSet::from([1, 7])), &int_batch(&[1, 7])).unwrap();
    // ... but not onto another live key.
    let snap = t.snapshot();
    let e = t.update(&snap, &select(&snap, &HashSet::from([1])), &int_batch(&[3])).unwrap_err();
    assert!(is_duplicate(&e), "{e}");
    // Truncate and refill in one transaction (INSERT OVERWRITE).
    t.transaction(|tx| {
        tx.truncate();
        tx.append(&int_batch(&[1, 2, 3]))
    })
    .unwrap();
    assert_eq!(live_keys(&t), vec![1, 2, 3]);
}

#[test]
fn composite_string_and_decimal_keys() {
    let db = Database::new();
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Utf8, false),
        Field::new("b", DataType::Int32, false),
        Field::new("d", DataType::Decimal128(38, 2), false),
    ]));
    let options = TableOptions::default().with_shard_capacity(5).with_primary_key(["a", "b"]);
    let t = db.create_table("c", &schema, options).unwrap();
    let batch = |a: &[&str], b: &[i32]| {
        let d = Decimal128Array::from_iter_values(b.iter().map(|&x| i128::from(x) * 10i128.pow(30)))
            .with_precision_and_scale(38, 2)
            .unwrap();
        RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(StringArray::from(a.to_vec())), Arc::new(Int32Array::from(b.to_vec())), Arc::new(d)],
        )
        .unwrap()
    };
    t.append(&batch(&["x", "x", "y", "", "a long string beyond twelve bytes"], &[1, 2, 1, 1, 1])).unwrap();
    t.rebuild().unwrap();
    t.append(&batch(&["y", "z"], &[2, 1])).unwrap();
    let e = t.append(&batch(&["q", "a long string beyond twelve bytes"], &[1, 1])).unwrap_err();
    assert_eq!(e.to_string(), "duplicate primary key (a, b) = (a long string beyond twelve bytes, 1) in table 'c'");
    assert!(is_duplicate(&t.append(&batch(&["z"], &[1])).unwrap_err()));
    assert!(is_duplicate(&t.append(&batch(&[""], &[1])).unwrap_err()));
    t.append(&batch(&["", "x"], &[2, 3])).unwrap();
    assert_eq!(t.row_count(), 9);

    // A decimal key beyond the i64 range, in main storage and the delta.
    let options = TableOptions::default().with_shard_capacity(4).with_primary_key(["d"]);
    let w = db.create_table("w", &schema, options).unwrap();
    w.append(&batch(&["a", "b", "c"], &[1, 2, 3])).unwrap();
    w.rebuild().unwrap();
    w.append(&batch(&["d"], &[4])).unwrap();
    assert!(is_duplicate(&w.append(&batch(&["e"], &[2])).unwrap_err()));
    assert!(is_duplicate(&w.append(&batch(&["e"], &[4])).unwrap_err()));
    w.append(&batch(&["e"], &[-2])).unwrap();
}

#[test]
fn two_integer_columns_pack() {
    let db = Database::new();
    let schema =
        Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false), Field::new("b", DataType::UInt8, false)]));
    let t = db
        .create_table("p", &schema, TableOptions::default().with_shard_capacity(7).with_primary_key(["a", "b"]))
        .unwrap();
    let batch = |a: Vec<i64>, b: Vec<u8>| {
        RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(a)), Arc::new(UInt8Array::from(b))])
            .unwrap()
    };
    t.append(&batch(vec![-1, -1, 0, i64::MIN, i64::MAX], vec![0, 255, 0, 1, 1])).unwrap();
    t.rebuild().unwrap();
    t.append(&batch(vec![-1, 1], vec![1, 0])).unwrap();
    assert!(is_duplicate(&t.append(&batch(vec![i64::MAX], vec![1])).unwrap_err()));
    assert!(is_duplicate(&t.append(&batch(vec![-1], vec![255])).unwrap_err()));
    t.append(&batch(vec![i64::MAX, i64::MIN], vec![0, 0])).unwrap();
    assert_eq!(t.row_count(), 9);
}

/// Random appends (batches and rows), deletes, updates and rebuilds
/// against a model: a write succeeds exactly when it would not duplicate
/// a live key, and the live keys always equal the model's.
#[test]
fn random_writes_match_a_model() {
    for seed in 0..12u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let capacity = [1, 3, 64, 2000][seed as usize % 4];
        let (_db, t) = keyed_table(capacity);
        let mut model: HashSet<i64> = HashSet::new();
        // A domain large enough to spread over many blocks after rebuilds.
        let domain = 5000i64;
        for step in 0..120 {
            match rng.random_range(0..10) {
                0..=4 => {
                    let n = rng.random_range(1..40);
                    let keys: Vec<i64> = (0..n).map(|_| rng.random_range(0..domain)).collect();
                    let distinct: HashSet<i64> = keys.iter().copied().collect();
                    let ok = distinct.len() == keys.len() && distinct.is_disjoint(&model);
                    match t.append(&int_batch(&keys)) {
                        Ok(_) => {
                            assert!(ok, "seed {seed} step {step}: duplicate accepted");
                            model.extend(keys);
                        }
                        Err(e) => assert!(!ok && is_duplicate(&e), "seed {seed} step {step}: {e}"),
                    }
                }
                5 => {
                    let k = rng.random_range(0..domain);
                    let ok = !model.contains(&k);
                    match t.append_row(&[Value::Int(k), Value::Int(1)]) {
                        Ok(()) => {
                            assert!(ok, "seed {seed} step {step}: duplicate row accepted");
                            model.insert(k);
                        }
                        Err(e) => assert!(!ok && is_duplicate(&e), "seed {seed} step {step}: {e}"),
                    }
                }
                6 | 7 => {
                    let doomed: HashSet<i64> = model.iter().copied().filter(|_| rng.random_bool(0.2)).collect();
                    let snap = t.snapshot();
                    let n = t.delete(&snap, &select(&snap, &doomed)).unwrap();
                    assert_eq!(n, doomed.len(), "seed {seed} step {step}");
                    model.retain(|k| !doomed.contains(k));
                }
                8 => {
                    // Update: move some keys by a random offset.
                    let moved: Vec<i64> = model.iter().copied().filter(|_| rng.random_bool(0.1)).collect();
                    let shift = rng.random_range(-3..=3);
                    let new: Vec<i64> = moved.iter().map(|k| k + shift).collect();
                    let rest: HashSet<i64> = model.iter().copied().filter(|k| !moved.contains(k)).collect();
                    let ok = new.iter().all(|k| !rest.contains(k));
                    let snap = t.snapshot();
                    let sel = select(&snap, &moved.iter().copied().collect());
                    match t.update(&snap, &sel, &int_batch(&new)) {
                        Ok(_) => {
                            assert!(ok, "seed {seed} step {step}: update to a live key accepted");
                            model = rest.into_iter().chain(new).collect();
                        }
                        Err(e) => assert!(!ok && is_duplicate(&e), "seed {seed} step {step}: {e}"),
                    }
                }
                _ => t.rebuild().unwrap(),
            }
            let mut expected: Vec<i64> = model.iter().copied().collect();
            expected.sort_unstable();
            assert_eq!(live_keys(&t), expected, "seed {seed} step {step}");
        }
    }
}

fn unique_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("u", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// A row of the UNIQUE tables: (k, u, name).
type UniqueRow = (i64, Option<i32>, Option<String>);

fn unique_batch(rows: &[UniqueRow]) -> RecordBatch {
    RecordBatch::try_new(
        unique_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.2.clone()))),
        ],
    )
    .unwrap()
}

fn unique_rows(t: &Table) -> Vec<UniqueRow> {
    let mut rows: Vec<UniqueRow> = t
        .snapshot()
        .to_record_batches(None)
        .unwrap()
        .iter()
        .flat_map(|b| {
            let k = b.column(0).as_primitive::<Int64Type>().clone();
            let u = b.column(1).as_primitive::<arrow_array::types::Int32Type>().clone();
            let name = b.column(2).as_string::<i32>().clone();
            (0..b.num_rows())
                .map(|i| {
                    (k.value(i), u.is_valid(i).then(|| u.value(i)), name.is_valid(i).then(|| name.value(i).to_string()))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    rows.sort();
    rows
}

/// True when no two rows share a non-NULL `u`, nor a non-NULL `name`.
fn unique_holds(rows: &[UniqueRow]) -> bool {
    let mut us = HashSet::new();
    let mut names = HashSet::new();
    rows.iter().all(|r| r.1.is_none_or(|u| us.insert(u)) && r.2.as_ref().is_none_or(|n| names.insert(n.clone())))
}

/// UNIQUE constraints on nullable columns: no two live rows share a value,
/// NULLs never conflict; batch appends, single rows, deletes, updates and
/// rebuilds against a model.
#[test]
fn unique_constraints_match_a_model() {
    for seed in 0..12u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let capacity = [1, 3, 64, 2000][seed as usize % 4];
        let db = Database::new();
        let options = TableOptions::default()
            .with_shard_capacity(capacity)
            .with_background_rebuild(false)
            .with_unique(["u"])
            .with_unique(["name"]);
        let t = db.create_table("u", &unique_schema(), options).unwrap();
        let mut model: Vec<UniqueRow> = Vec::new();
        let mut next_k = 0i64;
        let mut row = |rng: &mut StdRng| {
            next_k += 1;
            let u = rng.random_bool(0.8).then(|| rng.random_range(0..300));
            let name = rng.random_bool(0.7).then(|| format!("n{}", rng.random_range(0..300)));
            (next_k, u, name)
        };
        for step in 0..150 {
            match rng.random_range(0..10) {
                0..=4 => {
                    let rows: Vec<UniqueRow> = (0..rng.random_range(1..12)).map(|_| row(&mut rng)).collect();
                    let after: Vec<UniqueRow> = model.iter().cloned().chain(rows.iter().cloned()).collect();
                    match t.append(&unique_batch(&rows)) {
                        Ok(_) => {
                            assert!(unique_holds(&after), "seed {seed} step {step}: a duplicate was accepted");
                            model = after;
                        }
                        Err(e) => {
                            assert!(!unique_holds(&after) && is_duplicate(&e), "seed {seed} step {step}: {e}");
                            assert!(e.to_string().contains("duplicate unique key"), "{e}");
                        }
                    }
                }
                5 => {
                    let r = row(&mut rng);
                    let after: Vec<UniqueRow> = model.iter().cloned().chain([r.clone()]).collect();
                    let values = [
                        Value::Int(r.0),
                        r.1.map_or(Value::Null, |u| Value::Int(u.into())),
                        match &r.2 {
                            Some(n) => Value::Str(n),
                            None => Value::Null,
                        },
                    ];
                    match t.append_row(&values) {
                        Ok(()) => {
                            assert!(unique_holds(&after), "seed {seed} step {step}: a duplicate row was accepted");
                            model = after;
                        }
                        Err(e) => assert!(!unique_holds(&after) && is_duplicate(&e), "seed {seed} step {step}: {e}"),
                    }
                }
                6 | 7 => {
                    let doomed: HashSet<i64> = model.iter().map(|r| r.0).filter(|_| rng.random_bool(0.3)).collect();
                    let snap = t.snapshot();
                    let n = t.delete(&snap, &select(&snap, &doomed)).unwrap();
                    assert_eq!(n, doomed.len(), "seed {seed} step {step}");
                    model.retain(|r| !doomed.contains(&r.0));
                }
                8 => {
                    // Update: new u and name values for some rows, in one step.
                    let moved: Vec<UniqueRow> = model.iter().filter(|_| rng.random_bool(0.1)).cloned().collect();
                    let new: Vec<UniqueRow> = moved
                        .iter()
                        .map(|r| {
                            let fresh = row(&mut rng);
                            (r.0, fresh.1, fresh.2)
                        })
                        .collect();
                    let ids: HashSet<i64> = moved.iter().map(|r| r.0).collect();
                    let after: Vec<UniqueRow> =
                        model.iter().filter(|r| !ids.contains(&r.0)).cloned().chain(new.iter().cloned()).collect();
                    let snap = t.snapshot();
                    let sel = select(&snap, &ids);
                    match t.update(&snap, &sel, &unique_batch(&new)) {
                        Ok(_) => {
                            assert!(unique_holds(&after), "seed {seed} step {step}: an update to a taken value");
                            model = after;
                        }
                        Err(e) => assert!(!unique_holds(&after) && is_duplicate(&e), "seed {seed} step {step}: {e}"),
                    }
                }
                _ => t.rebuild().unwrap(),
            }
            model.sort();
            assert_eq!(unique_rows(&t), model, "seed {seed} step {step}");
        }
    }
    // Columns a constraint names must exist, once each.
    let db = Database::new();
    for bad in [TableOptions::default().with_unique(["nope"]), TableOptions::default().with_unique(["u", "u"])] {
        assert!(matches!(db.create_table("bad", &unique_schema(), bad), Err(Error::InvalidSchema(_))));
    }
}
