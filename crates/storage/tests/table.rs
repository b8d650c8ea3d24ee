//! Tables against a plain reference: appends, deletes, updates, truncates
//! and rebuilds in random orders over tiny and default shard capacities;
//! bad input; snapshot stability; the catalog.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::*;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use quiverdb_storage::{Database, EncodingKind, Error, RecId, ShardId, Table, TableOptions, TableSnapshot, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A reference row: key, nullable value, string.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    k: i64,
    v: Option<i32>,
    s: Option<String>,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int32, true),
        Field::new("s", DataType::Utf8, true),
    ]))
}

fn batch(rows: &[Row]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.k))),
            Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.v))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.s.clone()))),
        ],
    )
    .expect("valid batch")
}

fn rows_of(batch: &RecordBatch) -> Vec<Row> {
    let k = batch.column(0).as_primitive::<Int64Type>();
    let v = batch.column(1).as_primitive::<arrow_array::types::Int32Type>();
    let s = batch.column(2).as_string::<i32>();
    (0..batch.num_rows())
        .map(|i| Row {
            k: k.value(i),
            v: v.is_valid(i).then(|| v.value(i)),
            s: s.is_valid(i).then(|| s.value(i).to_string()),
        })
        .collect()
}

fn contents(snapshot: &TableSnapshot) -> Vec<Row> {
    snapshot.to_record_batches(None).expect("decode").iter().flat_map(rows_of).collect()
}

fn random_rows(rng: &mut StdRng, next_key: &mut i64, n: usize) -> Vec<Row> {
    (0..n)
        .map(|_| {
            *next_key += 1;
            Row {
                k: *next_key,
                v: (rng.random_range(0..5) > 0).then(|| rng.random_range(-50..50)),
                s: (rng.random_range(0..5) > 0).then(|| format!("s{}", rng.random_range(0..30))),
            }
        })
        .collect()
}

/// Picks about `fraction` of the live rows of `snapshot`: the selection and the keys it covers.
fn pick(snapshot: &TableSnapshot, rng: &mut StdRng, fraction: f64) -> (Vec<(ShardId, Vec<RecId>)>, Vec<i64>) {
    let mut selection = Vec::new();
    let mut keys = Vec::new();
    for shard in snapshot.shards() {
        let ids: Vec<RecId> = shard.live_ids().into_iter().filter(|_| rng.random_bool(fraction)).collect();
        if ids.is_empty() {
            continue;
        }
        let gathered = shard.gather(&ids, Some(&[0])).expect("gather");
        keys.extend(gathered.column(0).as_primitive::<Int64Type>().values().iter().copied());
        selection.push((shard.id(), ids));
    }
    (selection, keys)
}

fn new_table(capacity: usize, background: bool) -> (Database, Table) {
    let db = Database::new();
    let options = TableOptions::default().with_shard_capacity(capacity).with_background_rebuild(background);
    let table = db.create_table("t", &schema(), options).expect("create");
    (db, table)
}

/// Random operation sequences; after each, the table equals the reference,
/// row for row and in order.
fn run_sequence(capacity: usize, background: bool, seed: u64, steps: usize) {
    let (db, table) = new_table(capacity, background);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut reference: Vec<Row> = Vec::new();
    let mut next_key = 0;
    for step in 0..steps {
        match rng.random_range(0..100) {
            0..=39 => {
                let n = rng.random_range(0..=capacity.min(600) * 3);
                let rows = random_rows(&mut rng, &mut next_key, n);
                assert_eq!(table.append(&batch(&rows)).expect("append"), n);
                reference.extend(rows);
            }
            40..=49 => {
                let row = random_rows(&mut rng, &mut next_key, 1).remove(0);
                let s = row.s.clone();
                table
                    .append_row(&[
                        Value::Int(row.k),
                        row.v.map_or(Value::Null, |v| Value::Int(v as i64)),
                        s.as_deref().map_or(Value::Null, Value::Str),
                    ])
                    .expect("append_row");
                reference.push(row);
            }
            50..=64 => {
                let snapshot = table.snapshot();
                let fraction = rng.random_range(0.0..0.6);
                let (selection, keys) = pick(&snapshot, &mut rng, fraction);
                match table.delete(&snapshot, &selection) {
                    Ok(n) => {
                        assert_eq!(n, keys.len());
                        reference.retain(|r| !keys.contains(&r.k));
                    }
                    // A background rebuild replaced a chosen shard: nothing changed.
                    Err(Error::Conflict { .. }) => assert!(background),
                    Err(e) => panic!("delete: {e}"),
                }
            }
            65..=74 => {
                // Update through a transaction: delete some rows, append
                // their replacements with new values.
                let mut replaced = Vec::new();
                table
                    .transaction(|t| {
                        let snapshot = t.snapshot();
                        let (selection, keys) = pick(&snapshot, &mut rng, 0.1);
                        for (shard, ids) in &selection {
                            t.delete(*shard, ids)?;
                        }
                        replaced = keys.iter().map(|&k| Row { k, v: Some(7777), s: Some("updated".into()) }).collect();
                        t.append(&batch(&replaced))
                    })
                    .expect("update");
                reference.retain(|r| !replaced.iter().any(|x| x.k == r.k));
                reference.extend(replaced);
            }
            75..=89 => table.rebuild().expect("rebuild"),
            90..=92 => {
                let live = reference.len();
                assert_eq!(table.truncate().expect("truncate"), live);
                reference.clear();
            }
            _ => {
                // A delete and an append that must roll back together.
                let snapshot = table.snapshot();
                let (selection, _) = pick(&snapshot, &mut rng, 0.5);
                let bad = Row { k: -1, v: None, s: None };
                let err = table.transaction(|t| {
                    t.delete_selection(&snapshot, &selection)?;
                    t.append(&batch(std::slice::from_ref(&bad)))?;
                    t.append_row(&[Value::Null, Value::Null, Value::Null])
                });
                assert!(matches!(err, Err(Error::NullInNonNullable { .. }) | Err(Error::Conflict { .. })));
            }
        }
        let snapshot = table.snapshot();
        assert_eq!(snapshot.row_count(), reference.len(), "seed {seed} step {step}");
        assert_eq!(contents(&snapshot), reference, "seed {seed} step {step}: contents");
        for shard in snapshot.shards() {
            assert!(shard.rows() <= capacity, "shard over capacity");
        }
    }
    db.wait_for_background_rebuilds();
    assert_eq!(table.background_rebuild_failures().0, 0, "{:?}", table.background_rebuild_failures().1);
    table.rebuild().expect("final rebuild");
    let snapshot = table.snapshot();
    assert_eq!(contents(&snapshot), reference);
    for shard in snapshot.shards() {
        assert_eq!(shard.delta_len(), 0, "rebuild moved everything into main");
        assert!(shard.deletes().is_none(), "rebuild dropped the deleted rows");
    }
}

#[test]
fn sequences_tiny_shards() {
    for seed in 0..12 {
        run_sequence(7, seed % 2 == 0, seed, 60);
    }
}

#[test]
fn sequences_small_shards() {
    for seed in 100..106 {
        run_sequence(1000, seed % 2 == 0, seed, 60);
    }
}

#[test]
fn sequences_default_shards() {
    run_sequence(65_536, true, 7, 40);
}

#[test]
fn appends_split_across_shards() {
    let (_db, table) = new_table(7, false);
    let mut key = 0;
    let mut rng = StdRng::seed_from_u64(1);
    let rows = random_rows(&mut rng, &mut key, 100);
    table.append(&batch(&rows)).expect("append");
    let snapshot = table.snapshot();
    assert_eq!(snapshot.num_shards(), 15);
    assert!(snapshot.shards().take(14).all(|s| s.rows() == 7));
    assert_eq!(snapshot.shard(14).rows(), 2);
    assert_eq!(contents(&snapshot), rows);
}

/// Polls `done` for up to 30 s.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    done()
}

/// A table's last rows, too few to fill a shard, are compressed by a
/// background rebuild once writes to the table pause, and again after
/// each later write.
#[test]
fn a_tables_last_rows_are_compressed_once_writes_pause() {
    let (db, table) = new_table(65_536, true);
    let mut rows: Vec<Row> = (0..20_000)
        .map(|i| Row { k: i, v: Some((i % 100) as i32), s: Some(format!("name_{:04}", i % 1000)) })
        .collect();
    table.append(&batch(&rows)).expect("append");
    let before = table.memory_usage();
    assert!(eventually(|| table.memory_usage().delta_rows == 0), "{}", table.memory_usage());
    let after = table.memory_usage();
    assert_eq!(after.main_rows, 20_000);
    assert!(after.total_bytes() * 4 < before.total_bytes(), "{after}\nvs\n{before}");
    assert_eq!(contents(&table.snapshot()), rows);

    // A later write (rows and a delete) settles too; the rows stay as they were.
    let more: Vec<Row> = (20_000..20_010).map(|i| Row { k: i, v: None, s: Some("late".into()) }).collect();
    table.append(&batch(&more)).expect("append");
    rows.extend(more);
    let snapshot = table.snapshot();
    let first = snapshot.shards().next().map(|s| s.id()).expect("a shard");
    table.delete(&snapshot, &[(first, vec![0 as RecId, 7])]).expect("delete");
    rows.retain(|r| r.k != 0 && r.k != 7);
    assert!(eventually(|| {
        let usage = table.memory_usage();
        usage.delta_rows == 0 && usage.main_rows == rows.len()
    }));
    assert_eq!(contents(&table.snapshot()), rows);
    db.wait_for_background_rebuilds();
    assert_eq!(table.background_rebuild_failures().0, 0, "{:?}", table.background_rebuild_failures().1);
}

#[test]
fn rebuild_compresses_and_reports_memory() {
    let (_db, table) = new_table(65_536, false);
    let rows: Vec<Row> = (0..20_000)
        .map(|i| Row { k: i, v: Some((i % 100) as i32), s: Some(format!("name_{:04}", i % 1000)) })
        .collect();
    table.append(&batch(&rows)).expect("append");
    let before = table.memory_usage();
    assert_eq!(before.delta_rows, 20_000);
    table.rebuild().expect("rebuild");
    let after = table.memory_usage();
    assert_eq!((after.main_rows, after.delta_rows), (20_000, 0));
    assert_eq!(after.columns[0].dominant_encoding(), Some(EncodingKind::Sequence));
    assert_eq!(after.columns[2].dominant_encoding(), Some(EncodingKind::Dictionary));
    assert!(after.columns[2].dictionary_bytes > 0);
    assert!(after.total_bytes() * 4 < before.total_bytes(), "{after}\nvs\n{before}");
    assert_eq!(contents(&table.snapshot()), rows);
}

#[test]
fn snapshots_do_not_change() {
    let (_db, table) = new_table(10, false);
    let mut key = 0;
    let mut rng = StdRng::seed_from_u64(3);
    let first = random_rows(&mut rng, &mut key, 35);
    table.append(&batch(&first)).expect("append");
    let snapshot = table.snapshot();
    table.append(&batch(&random_rows(&mut rng, &mut key, 20))).expect("append");
    let (selection, _) = pick(&table.snapshot(), &mut rng, 0.5);
    table.delete(&table.snapshot(), &selection).expect("delete");
    table.rebuild().expect("rebuild");
    assert_eq!(contents(&snapshot), first, "an old snapshot sees the old contents");
    table.truncate().expect("truncate");
    assert_eq!(contents(&snapshot), first);
    assert_eq!(table.snapshot().row_count(), 0);
}

#[test]
fn stale_snapshot_conflicts() {
    let (_db, table) = new_table(100, false);
    let mut key = 0;
    let mut rng = StdRng::seed_from_u64(4);
    table.append(&batch(&random_rows(&mut rng, &mut key, 50))).expect("append");
    let stale = table.snapshot();
    let (selection, _) = pick(&stale, &mut rng, 0.5);
    table.rebuild().expect("rebuild");
    assert!(matches!(table.delete(&stale, &selection), Err(Error::Conflict { .. })));
    assert_eq!(table.snapshot().row_count(), 50);
}

#[test]
fn bad_input_is_rejected_whole() {
    let (_db, table) = new_table(7, false);
    let mut key = 0;
    let mut rng = StdRng::seed_from_u64(5);
    let good = random_rows(&mut rng, &mut key, 10);
    table.append(&batch(&good)).expect("append");
    let check_unchanged = |table: &Table| assert_eq!(contents(&table.snapshot()), good);

    // Wrong column count.
    let narrow = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from(vec![1]))],
    )
    .expect("batch");
    assert!(matches!(table.append(&narrow), Err(Error::SchemaMismatch { .. })));
    // Wrong column name.
    let renamed = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("x", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
        ])),
        batch(&good).columns().to_vec(),
    )
    .expect("batch");
    assert!(matches!(table.append(&renamed), Err(Error::SchemaMismatch { .. })));
    // Wrong type in the last column of a 20-row batch that spans shards.
    let wrong = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int32, true),
            Field::new("s", DataType::Int64, true),
        ])),
        vec![
            Arc::new(Int64Array::from_iter_values(100..120)),
            Arc::new(Int32Array::from_iter_values(0..20)),
            Arc::new(Int64Array::from_iter_values(0..20)),
        ],
    )
    .expect("batch");
    let err = table.append(&wrong).expect_err("type mismatch");
    assert!(err.to_string().contains("column 's'"), "{err}");
    // NULL in the NOT NULL column.
    let nullable_k = Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int32, true),
        Field::new("s", DataType::Utf8, true),
    ]);
    let nulls = RecordBatch::try_new(
        Arc::new(nullable_k),
        vec![
            Arc::new(Int64Array::from(vec![Some(1), None])),
            Arc::new(Int32Array::from(vec![1, 2])),
            Arc::new(StringArray::from(vec!["a", "b"])),
        ],
    )
    .expect("batch");
    assert!(matches!(table.append(&nulls), Err(Error::NullInNonNullable { .. })));
    // Single rows: arity, type, range, NULL.
    assert!(matches!(table.append_row(&[Value::Int(1)]), Err(Error::SchemaMismatch { .. })));
    assert!(matches!(table.append_row(&[Value::Str("x"), Value::Null, Value::Null]), Err(Error::TypeMismatch { .. })));
    assert!(matches!(
        table.append_row(&[Value::Int(1), Value::Int(1 << 40), Value::Null]),
        Err(Error::TypeMismatch { .. })
    ));
    assert!(matches!(table.append_row(&[Value::Null, Value::Null, Value::Null]), Err(Error::NullInNonNullable { .. })));
    // Deleting a record that does not exist changes nothing, even with a valid one beside it.
    let snapshot = table.snapshot();
    let shard = snapshot.shard(0).id();
    assert!(matches!(
        table.delete(&snapshot, &[(shard, vec![0]), (shard, vec![999])]),
        Err(Error::RecordNotFound { .. })
    ));
    // An update whose replacement is bad deletes nothing.
    assert!(table.update(&snapshot, &[(shard, vec![0, 1])], &narrow).is_err());
    check_unchanged(&table);
}

#[test]
fn unsupported_types_and_bad_options() {
    let db = Database::new();
    let union = DataType::Union(
        arrow_schema::UnionFields::try_new(vec![0], vec![Field::new("i", DataType::Int32, true)]).expect("fields"),
        arrow_schema::UnionMode::Dense,
    );
    let bad = Schema::new(vec![Field::new("t", union, true)]);
    let err = db.create_table("x", &bad, TableOptions::default()).expect_err("unsupported");
    assert!(matches!(err, Error::UnsupportedType { .. }));
    assert!(err.to_string().contains("Union"), "{err}");
    assert!(matches!(
        db.create_table("x", &schema(), TableOptions::default().with_shard_capacity(0)),
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(
        db.create_table("x", &schema(), TableOptions::default().with_rebuild_dead_fraction(1.5)),
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(
        db.create_table("x", &schema(), TableOptions::default().with_primary_key(["nope"])),
        Err(Error::InvalidSchema(_))
    ));
    assert!(db.table_names().is_empty(), "failed creates leave no table");
}

#[test]
fn catalog() {
    let db = Database::new();
    let t = db.create_table("b", &schema(), TableOptions::default().with_primary_key(["k", "v"])).expect("create");
    db.create_table("a", &schema(), TableOptions::default()).expect("create");
    assert!(matches!(db.create_table("a", &schema(), TableOptions::default()), Err(Error::TableExists(_))));
    assert_eq!(db.table_names(), ["a", "b"]);
    assert_eq!(t.schema().primary_key(), &[0, 1]);
    assert!(!t.arrow_schema().field(1).is_nullable(), "primary key columns are NOT NULL");
    assert_eq!(db.table("b").expect("get").name(), "b");
    db.drop_table("b").expect("drop");
    assert!(matches!(db.table("b"), Err(Error::TableNotFound(_))));
    assert!(matches!(db.drop_table("b"), Err(Error::TableNotFound(_))));
    let mut key = 0;
    let rows = random_rows(&mut StdRng::seed_from_u64(0), &mut key, 3);
    assert!(matches!(t.append(&batch(&rows)), Err(Error::TableNotFound(_))), "writes to a dropped table fail");
}

#[test]
fn catalog_version_changes_with_the_tables_not_their_rows() {
    let db = Database::new();
    let mut seen = vec![db.catalog_version()];
    let mut changed = |db: &Database, what: &str| {
        let v = db.catalog_version();
        assert!(!seen.contains(&v), "{what} left the catalog version at {v}");
        seen.push(v);
    };
    let t = db.create_table("a", &schema(), TableOptions::default()).expect("create");
    changed(&db, "create_table");
    let before = db.catalog_version();
    let mut key = 0;
    t.append(&batch(&random_rows(&mut StdRng::seed_from_u64(1), &mut key, 10))).expect("append");
    t.rebuild().expect("rebuild");
    assert_eq!(db.catalog_version(), before, "rows and rebuilds do not change the catalog");
    assert!(db.create_table("a", &schema(), TableOptions::default()).is_err());
    assert_eq!(db.catalog_version(), before, "a failed create changes nothing");
    db.create_table_with("a", &schema(), TableOptions::default(), true, |_| Ok::<_, Error>(())).expect("replace");
    changed(&db, "a replace");
    db.drop_table("a").expect("drop");
    changed(&db, "drop_table");
}

#[test]
fn schemas_round_trip() {
    let arrow = Schema::new(vec![
        Field::new("a", DataType::Decimal128(20, 3), true),
        Field::new("b", DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("UTC".into())), false),
        Field::new("c", DataType::Utf8View, true),
        Field::new("d", DataType::Binary, true),
    ])
    .with_metadata([("owner".to_string(), "quiverdb".to_string())].into());
    let db = Database::new();
    let t = db.create_table("r", &arrow, TableOptions::default()).expect("create");
    assert_eq!(t.arrow_schema().as_ref(), &arrow);
}

#[test]
fn delta_reader_and_deletion_words() {
    let (_db, table) = new_table(5000, false);
    let mut key = 0;
    let mut rng = StdRng::seed_from_u64(9);
    let rows = random_rows(&mut rng, &mut key, 2500);
    table.append(&batch(&rows)).expect("append");
    let snapshot = table.snapshot();
    let shard = snapshot.shard(0);
    let reader = shard.delta().reader(shard.delta_len());
    assert_eq!((reader.len(), reader.num_chunks(), reader.chunk_len(2)), (2500, 3, 452));
    let mut validity = [0u64; 16];
    for c in 0..reader.num_chunks() {
        let keys: &[i64] = reader.column(0).values(c);
        let values: &[i32] = reader.column(1).values(c);
        assert!(!reader.column(0).validity(c, &mut validity), "NOT NULL column has no bitmap");
        assert!(reader.column(1).validity(c, &mut validity));
        let strings = reader.column(2).bytes(c);
        for (i, row) in rows[c * 1024..c * 1024 + reader.chunk_len(c)].iter().enumerate() {
            assert_eq!(keys[i], row.k);
            assert_eq!(validity[i / 64] >> (i % 64) & 1 == 1, row.v.is_some());
            if let Some(v) = row.v {
                assert_eq!(values[i], v);
            }
            assert_eq!(strings.get(i), row.s.as_deref().unwrap_or("").as_bytes());
        }
        let tail = reader.chunk_len(c);
        if tail < 1024 {
            assert_eq!(validity[tail / 64] >> (tail % 64), 0, "bits past the chunk are zero");
        }
    }
    let doomed: Vec<RecId> = (0..2500).filter(|i| i % 7 == 3 || (1000..1100).contains(i)).collect();
    table.delete(&snapshot, &[(shard.id(), doomed.clone())]).expect("delete");
    let snapshot = table.snapshot();
    let deletes = snapshot.shard(0).deletes().expect("deletes");
    let mut words = [0u64; 16];
    for (start, len) in [(0, 1024), (1000, 1024), (37, 100), (2400, 100)] {
        deletes.words(start, len, &mut words);
        for i in 0..1024 {
            let expected = i < len && doomed.contains(&((start + i) as RecId));
            assert_eq!(words[i / 64] >> (i % 64) & 1 == 1, expected, "start {start} bit {i}");
        }
    }
}

/// Dictionary- and run-end-encoded input is stored as its value type: the
/// table is declared with the values, and appends of either encoding (or
/// of the plain values) read back as the same rows.
#[test]
fn encoded_input_is_stored_as_its_values() {
    let db = Database::new();
    let declared = Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Int32)), true),
        Field::new("s", DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)), true),
    ]);
    let table = db.create_table("enc", &declared, TableOptions::default().with_shard_capacity(3)).expect("created");
    assert_eq!(table.schema().arrow(), &schema(), "stored as the value types");

    let dictionary = RecordBatch::try_new(
        Arc::new(declared.clone()),
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3])),
            Arc::new(DictionaryArray::<arrow_array::types::Int8Type>::new(
                Int8Array::from(vec![Some(0), None, Some(1)]),
                Arc::new(Int32Array::from(vec![10, 20])),
            )),
            Arc::new(DictionaryArray::<arrow_array::types::Int32Type>::from_iter([Some("a"), Some("b"), None])),
        ],
    )
    .expect("a dictionary batch");
    let run_ends = Int32Array::from(vec![2]);
    let run_end_encoded = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int32, true),
            Field::new(
                "s",
                DataType::RunEndEncoded(
                    Arc::new(Field::new("run_ends", DataType::Int32, false)),
                    Arc::new(Field::new("values", DataType::Utf8, true)),
                ),
                true,
            ),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![4, 5])),
            Arc::new(Int32Array::from(vec![Some(40), None])),
            Arc::new(
                RunArray::<arrow_array::types::Int32Type>::try_new(&run_ends, &StringArray::from(vec!["r"]))
                    .expect("a run array"),
            ),
        ],
    )
    .expect("a run-end encoded batch");
    table
        .transaction(|t| {
            t.append(&dictionary)?;
            t.append(&run_end_encoded)?;
            t.append(&batch(&[Row { k: 6, v: Some(60), s: Some("p".into()) }]))
        })
        .expect("appended");
    let expected = vec![
        Row { k: 1, v: Some(10), s: Some("a".into()) },
        Row { k: 2, v: None, s: Some("b".into()) },
        Row { k: 3, v: Some(20), s: None },
        Row { k: 4, v: Some(40), s: Some("r".into()) },
        Row { k: 5, v: None, s: Some("r".into()) },
        Row { k: 6, v: Some(60), s: Some("p".into()) },
    ];
    assert_eq!(contents(&table.snapshot()), expected);
    table.rebuild().expect("rebuilt");
    assert_eq!(contents(&table.snapshot()), expected);

    // A dictionary of another value type is still refused.
    let wrong = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8)), true),
            Field::new("s", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![7])),
            Arc::new(DictionaryArray::<arrow_array::types::Int8Type>::from_iter([Some("x")])),
            Arc::new(StringArray::from(vec!["q"])),
        ],
    )
    .expect("a batch");
    let refused = table.transaction(|t| t.append(&wrong)).expect_err("a string dictionary into an INT column");
    assert!(matches!(refused, Error::TypeMismatch { .. }), "{refused}");
    assert_eq!(contents(&table.snapshot()), expected);
}

/// Distinct-value estimates against the exact counts of a reference, over
/// shards whose main columns overlap, with rows left in the deltas.
#[test]
fn distinct_estimates_follow_the_values() {
    use std::collections::BTreeSet;
    let (_db, table) = new_table(16_384, false);
    // k: all distinct; v: 3,000 values with nulls, spread over every
    // shard; s: 500 dictionary strings.
    let rows_of = |range: std::ops::Range<i64>| -> Vec<Row> {
        range
            .map(|i| Row {
                k: i * 3,
                v: (i % 7 != 0).then_some(((i * 7_919) % 3_000) as i32),
                s: Some(format!("name_{:04}", i % 500)),
            })
            .collect()
    };
    let rows = rows_of(0..100_000);
    table.append(&batch(&rows)).expect("append");
    table.rebuild().expect("rebuild");
    // Rows in the deltas drawn as the main rows were: new keys, v and s
    // from their domains. Counting each delta row as a new value would
    // make 30,000 of s's 500 names.
    let extra = rows_of(100_000..130_000);
    table.append(&batch(&extra)).expect("append");
    let all: Vec<Row> = rows.iter().chain(&extra).cloned().collect();
    let snapshot = table.snapshot();
    assert!(snapshot.num_shards() > 6);
    let shards: Vec<usize> = (0..snapshot.num_shards()).collect();
    let exact = [
        all.iter().map(|r| r.k).collect::<BTreeSet<_>>().len(),
        all.iter().filter_map(|r| r.v).collect::<BTreeSet<_>>().len(),
        all.iter().filter_map(|r| r.s.clone()).collect::<BTreeSet<_>>().len(),
    ];
    for (c, exact) in exact.into_iter().enumerate() {
        let estimate = snapshot.distinct_estimate(&shards, c).expect("key and dictionary columns are sketched");
        let error = (estimate as f64 - exact as f64).abs() / exact as f64;
        assert!(error < 0.1, "column {c}: {estimate} estimated, {exact} distinct");
    }
    // One shard's estimate is at most its rows.
    let one = snapshot.distinct_estimate(&[0], 1).expect("sketched");
    assert!(one <= snapshot.shard(0).rows() as u64 && one > 2_000, "{one}");
    // Strings that do not fit a dictionary keep no sketch.
    let (_db2, plain) = new_table(65_536, false);
    let distinct: Vec<Row> =
        (0..20_000i64).map(|i| Row { k: i, v: None, s: Some(format!("a long and distinct comment {i:08}")) }).collect();
    plain.append(&batch(&distinct)).expect("append");
    plain.rebuild().expect("rebuild");
    let snapshot = plain.snapshot();
    assert_eq!(snapshot.distinct_estimate(&[0], 1), Some(0), "an all-null column has no values");
    assert_eq!(snapshot.distinct_estimate(&[0], 2), None, "{:?}", plain.memory_usage().columns[2].dominant_encoding());
}
