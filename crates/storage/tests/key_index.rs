//! The primary-key index, seen through `get`, `multi_get` and `locate`:
//! random interleavings of appends (batches and single rows, some with
//! duplicate keys), deletes, updates and rebuilds are checked against a
//! `BTreeMap` model of the live rows, for packed keys (integers, dates,
//! timestamps, two integer columns, a boolean with an integer) and
//! byte-string keys (strings, decimals beyond the `i64` range, a string
//! with an integer); old snapshots must keep answering from the state they
//! were taken in. Also: keys rewritten many times, readers racing a writer
//! with background rebuilds, lookups after reopening a data directory, the
//! index's memory, errors, casts, column changes and projections.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::*;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use quiverdb_storage::{
    Database, DurableOptions, Error, RecId, ShardId, SyncMode, Table, TableOptions, TableSnapshot, Value,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------
// Key shapes
// ---------------------------------------------------------------------------

/// A primary key's columns, and keys of that shape numbered by integers
/// (distinct numbers give distinct keys), as arrays and as scalars.
trait Shape {
    type K: Ord + Clone + Debug;
    const NAME: &'static str;
    /// The key columns; the tables add a nullable Int32 column `v` after them.
    fn key_fields() -> Vec<Field>;
    /// The key numbered `i` (`i >= 0`).
    fn key(i: i64) -> Self::K;
    /// One array per key column.
    fn arrays(keys: &[Self::K]) -> Vec<ArrayRef>;
    /// One value per key column, as `get` and `append_row` take them.
    fn scalars(key: &Self::K) -> Vec<Value<'_>>;
}

/// `Int64`, with both extremes among the keys.
struct I64Key;

impl Shape for I64Key {
    type K = i64;
    const NAME: &'static str = "int64";
    fn key_fields() -> Vec<Field> {
        vec![Field::new("k", DataType::Int64, false)]
    }
    fn key(i: i64) -> i64 {
        match i {
            0 => i64::MIN,
            1 => i64::MAX,
            _ => (i - 300) * 7919,
        }
    }
    fn arrays(keys: &[i64]) -> Vec<ArrayRef> {
        vec![Arc::new(Int64Array::from(keys.to_vec()))]
    }
    fn scalars(key: &i64) -> Vec<Value<'_>> {
        vec![Value::Int(*key)]
    }
}

/// `Utf8`: the empty string, short, long and non-ASCII strings.
struct StrKey;

impl Shape for StrKey {
    type K = String;
    const NAME: &'static str = "utf8";
    fn key_fields() -> Vec<Field> {
        vec![Field::new("s", DataType::Utf8, false)]
    }
    fn key(i: i64) -> String {
        match (i, i % 3) {
            (0, _) => String::new(),
            (_, 0) => format!("{i}"),
            (_, 1) => format!("customer number {i:06} with a longer tail"),
            _ => format!("ключ-{i}"),
        }
    }
    fn arrays(keys: &[String]) -> Vec<ArrayRef> {
        vec![Arc::new(StringArray::from_iter_values(keys))]
    }
    fn scalars(key: &String) -> Vec<Value<'_>> {
        vec![Value::Str(key)]
    }
}

/// (`Int32`, `Int64`): packed into 128 bits; few distinct first values, so
/// every shard's range of the first column holds most keys.
struct PairKey;

impl Shape for PairKey {
    type K = (i32, i64);
    const NAME: &'static str = "int32+int64";
    fn key_fields() -> Vec<Field> {
        vec![Field::new("a", DataType::Int32, false), Field::new("b", DataType::Int64, false)]
    }
    fn key(i: i64) -> (i32, i64) {
        match i {
            0 => (i32::MIN, i64::MIN),
            _ => ((i % 5) as i32 - 2, (i / 5) * 1_000_003 - 50_000_000),
        }
    }
    fn arrays(keys: &[(i32, i64)]) -> Vec<ArrayRef> {
        vec![
            Arc::new(Int32Array::from_iter_values(keys.iter().map(|k| k.0))),
            Arc::new(Int64Array::from_iter_values(keys.iter().map(|k| k.1))),
        ]
    }
    fn scalars(key: &(i32, i64)) -> Vec<Value<'_>> {
        vec![Value::Int(key.0.into()), Value::Int(key.1)]
    }
}

/// `Decimal128(20, 2)`: half the keys small, most of the others beyond
/// the `i64` range (up to ±9.5e19 unscaled). Numbers must stay below 1000.
struct DecKey;

impl Shape for DecKey {
    type K = i128;
    const NAME: &'static str = "decimal(20,2)";
    fn key_fields() -> Vec<Field> {
        vec![Field::new("d", DataType::Decimal128(20, 2), false)]
    }
    fn key(i: i64) -> i128 {
        assert!(i < 1000, "decimal keys are numbered below 1000");
        let centred = i128::from(i) - 500;
        if i % 2 == 0 { centred * 12_345 } else { centred * 190_000_000_000_000_001 }
    }
    fn arrays(keys: &[i128]) -> Vec<ArrayRef> {
        vec![Arc::new(Decimal128Array::from(keys.to_vec()).with_precision_and_scale(20, 2).unwrap())]
    }
    fn scalars(key: &i128) -> Vec<Value<'_>> {
        vec![Value::Decimal(*key)]
    }
}

/// `Date32`, dates before and after the epoch.
struct DateKey;

impl Shape for DateKey {
    type K = i32;
    const NAME: &'static str = "date32";
    fn key_fields() -> Vec<Field> {
        vec![Field::new("day", DataType::Date32, false)]
    }
    fn key(i: i64) -> i32 {
        (i as i32 - 400) * 37
    }
    fn arrays(keys: &[i32]) -> Vec<ArrayRef> {
        vec![Arc::new(Date32Array::from(keys.to_vec()))]
    }
    fn scalars(key: &i32) -> Vec<Value<'_>> {
        vec![Value::Int((*key).into())]
    }
}

/// `Timestamp(Microsecond)`.
struct TsKey;

impl Shape for TsKey {
    type K = i64;
    const NAME: &'static str = "timestamp(us)";
    fn key_fields() -> Vec<Field> {
        vec![Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), false)]
    }
    fn key(i: i64) -> i64 {
        1_700_000_000_000_000 + (i - 200) * 3_600_000_001
    }
    fn arrays(keys: &[i64]) -> Vec<ArrayRef> {
        vec![Arc::new(TimestampMicrosecondArray::from(keys.to_vec()))]
    }
    fn scalars(key: &i64) -> Vec<Value<'_>> {
        vec![Value::Int(*key)]
    }
}

/// (`Utf8`, `Int32`): a byte-string key whose string column has four
/// values (constant in many shards).
struct StrIntKey;

impl Shape for StrIntKey {
    type K = (String, i32);
    const NAME: &'static str = "utf8+int32";
    fn key_fields() -> Vec<Field> {
        vec![Field::new("g", DataType::Utf8, false), Field::new("n", DataType::Int32, false)]
    }
    fn key(i: i64) -> (String, i32) {
        (format!("group-{}", i % 4), (i / 4) as i32 - 20)
    }
    fn arrays(keys: &[(String, i32)]) -> Vec<ArrayRef> {
        vec![
            Arc::new(StringArray::from_iter_values(keys.iter().map(|k| k.0.as_str()))),
            Arc::new(Int32Array::from_iter_values(keys.iter().map(|k| k.1))),
        ]
    }
    fn scalars(key: &(String, i32)) -> Vec<Value<'_>> {
        vec![Value::Str(&key.0), Value::Int(key.1.into())]
    }
}

/// (`Boolean`, `Int64`): a packed key with a boolean column, read back
/// from the delta's bitmaps.
struct BoolKey;

impl Shape for BoolKey {
    type K = (bool, i64);
    const NAME: &'static str = "boolean+int64";
    fn key_fields() -> Vec<Field> {
        vec![Field::new("flag", DataType::Boolean, false), Field::new("n", DataType::Int64, false)]
    }
    fn key(i: i64) -> (bool, i64) {
        (i % 2 == 1, i / 2 - 100)
    }
    fn arrays(keys: &[(bool, i64)]) -> Vec<ArrayRef> {
        vec![
            Arc::new(BooleanArray::from(keys.iter().map(|k| k.0).collect::<Vec<_>>())),
            Arc::new(Int64Array::from_iter_values(keys.iter().map(|k| k.1))),
        ]
    }
    fn scalars(key: &(bool, i64)) -> Vec<Value<'_>> {
        vec![Value::Boolean(key.0), Value::Int(key.1)]
    }
}

// ---------------------------------------------------------------------------
// Tables and expected results
// ---------------------------------------------------------------------------

type Model<S> = BTreeMap<<S as Shape>::K, i32>;

fn schema_of<S: Shape>() -> SchemaRef {
    let mut fields = S::key_fields();
    fields.push(Field::new("v", DataType::Int32, true));
    Arc::new(Schema::new(fields))
}

fn key_table<S: Shape>(db: &Database, name: &str, options: TableOptions) -> Table {
    let names: Vec<String> = S::key_fields().iter().map(|f| f.name().clone()).collect();
    db.create_table(name, &schema_of::<S>(), options.with_primary_key(names)).unwrap()
}

/// A batch of `rows` (key, v) with schema `schema`.
fn batch_of<S: Shape>(schema: &SchemaRef, rows: &[(S::K, i32)]) -> RecordBatch {
    let keys: Vec<S::K> = rows.iter().map(|r| r.0.clone()).collect();
    let mut columns = S::arrays(&keys);
    columns.push(Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.1))));
    RecordBatch::try_new(Arc::clone(schema), columns).unwrap()
}

/// What `multi_get(keys)` must return under `model`: the rows of the keys
/// it holds, in the order of `keys`, repeated keys repeated.
fn expected<S: Shape>(schema: &SchemaRef, model: &Model<S>, keys: &[S::K]) -> RecordBatch {
    let found: Vec<(S::K, i32)> = keys.iter().filter_map(|k| model.get(k).map(|&v| (k.clone(), v))).collect();
    batch_of::<S>(schema, &found)
}

fn is_duplicate(e: &Error) -> bool {
    matches!(e, Error::DuplicateKey { .. })
}

/// `get(key)` on `snap` agrees with `model`.
fn check_get<S: Shape>(snap: &TableSnapshot, model: &Model<S>, key: &S::K, ctx: &str) {
    let got = snap.get(&S::scalars(key), None).unwrap_or_else(|e| panic!("{ctx}: get {key:?}: {e}"));
    let want = model.get(key).map(|&v| batch_of::<S>(snap.schema().arrow(), &[(key.clone(), v)]));
    assert_eq!(got, want, "{ctx}: get {key:?}");
}

/// `multi_get(keys)` and `locate(keys)` on `snap` agree with `model`.
fn check_multi_get<S: Shape>(snap: &TableSnapshot, model: &Model<S>, keys: &[S::K], ctx: &str) {
    let schema = snap.schema().arrow();
    let arrays = S::arrays(keys);
    let got = snap.multi_get(&arrays, None).unwrap_or_else(|e| panic!("{ctx}: multi_get {keys:?}: {e}"));
    assert_eq!(got, expected::<S>(schema, model, keys), "{ctx}: multi_get {keys:?}");
    let located = snap.locate(&arrays).unwrap_or_else(|e| panic!("{ctx}: locate {keys:?}: {e}"));
    assert_eq!(located.len(), keys.len(), "{ctx}");
    for (key, at) in keys.iter().zip(&located) {
        assert_eq!(at.is_some(), model.contains_key(key), "{ctx}: locate {key:?} gave {at:?}");
        if let Some((pos, id)) = *at {
            let row = snap.shard(pos).gather(&[id], None).unwrap();
            assert_eq!(row, batch_of::<S>(schema, &[(key.clone(), model[key])]), "{ctx}: locate {key:?}");
        }
    }
}

/// Every key of `model` (shuffled, with absent keys mixed in) through
/// `multi_get`, up to 300 of them through `get`, and the scan.
fn full_check<S: Shape>(snap: &TableSnapshot, model: &Model<S>, domain: i64, rng: &mut StdRng, ctx: &str) {
    assert_eq!(snap.row_count(), model.len(), "{ctx}: row count");
    let mut keys: Vec<S::K> = model.keys().cloned().collect();
    keys.extend((0..domain).map(S::key).filter(|k| !model.contains_key(k)).take(20));
    keys.shuffle(rng);
    check_multi_get::<S>(snap, model, &keys, ctx);
    for key in keys.iter().take(300) {
        check_get::<S>(snap, model, key, ctx);
    }
    // The scan (no index) agrees too: tells index bugs from storage bugs.
    let all: Vec<S::K> = model.keys().cloned().collect();
    let scanned = snap.to_record_batches(None).unwrap();
    assert_eq!(
        rows_as_text(&scanned),
        rows_as_text(&[expected::<S>(snap.schema().arrow(), model, &all)]),
        "{ctx}: scan"
    );
}

/// The rows of `batches`, each formatted as text, sorted.
fn rows_as_text(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default();
    let mut rows = Vec::new();
    for batch in batches {
        let formatters: Vec<ArrayFormatter<'_>> =
            batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap()).collect();
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters.iter().map(|f| f.value(row).to_string()).collect();
            rows.push(cells.join("|"));
        }
    }
    rows.sort();
    rows
}

// ---------------------------------------------------------------------------
// The differential run
// ---------------------------------------------------------------------------

/// A table under random writes and its model; snapshots held with the
/// model of their time.
struct Run<S: Shape> {
    table: Table,
    model: Model<S>,
    held: Vec<(TableSnapshot, Model<S>, usize)>,
    rng: StdRng,
    /// Keys are numbered `0..domain`.
    domain: i64,
    name: String,
    step: usize,
}

impl<S: Shape> Run<S> {
    fn new(table: Table, seed: u64, domain: i64) -> Self {
        Self {
            table,
            model: BTreeMap::new(),
            held: Vec::new(),
            rng: StdRng::seed_from_u64(seed),
            domain,
            name: format!("{} seed {seed}", S::NAME),
            step: 0,
        }
    }

    fn ctx(&self) -> String {
        format!("{} step {}", self.name, self.step)
    }

    fn any_key(&mut self) -> S::K {
        S::key(self.rng.random_range(0..self.domain))
    }

    /// A key no live row has (if one is found quickly).
    fn fresh_key(&mut self) -> S::K {
        let mut key = self.any_key();
        for _ in 0..30 {
            if !self.model.contains_key(&key) {
                break;
            }
            key = self.any_key();
        }
        key
    }

    fn present_key(&mut self) -> Option<S::K> {
        let n = self.model.len();
        (n > 0).then(|| self.model.keys().nth(self.rng.random_range(0..n)).unwrap().clone())
    }

    /// Keys for a lookup: live ones, absent ones and repeats.
    fn lookup_keys(&mut self, max: usize) -> Vec<S::K> {
        let n = self.rng.random_range(0..=max);
        let mut keys: Vec<S::K> = Vec::with_capacity(n);
        for _ in 0..n {
            let key = match self.rng.random_range(0..4) {
                0 | 1 => self.present_key().unwrap_or_else(|| self.any_key()),
                2 if !keys.is_empty() => keys[self.rng.random_range(0..keys.len())].clone(),
                _ => self.any_key(),
            };
            keys.push(key);
        }
        keys
    }

    fn append_batch(&mut self) {
        // Now and then a batch large enough for the table's key filter
        // (built by a commit of 64 keys or more, then used by every commit).
        let n = if self.rng.random_bool(0.1) { self.rng.random_range(64..=96) } else { self.rng.random_range(1..=16) };
        let mut keys: Vec<S::K> =
            (0..n).map(|_| if self.rng.random_bool(0.97) { self.fresh_key() } else { self.any_key() }).collect();
        if self.rng.random_bool(0.05) {
            let again = keys[self.rng.random_range(0..keys.len())].clone();
            keys.push(again);
        }
        let distinct: BTreeSet<&S::K> = keys.iter().collect();
        let ok = distinct.len() == keys.len() && keys.iter().all(|k| !self.model.contains_key(k));
        let rows: Vec<(S::K, i32)> = keys.into_iter().map(|k| (k, self.rng.random())).collect();
        let ctx = self.ctx();
        match self.table.append(&batch_of::<S>(self.table.arrow_schema(), &rows)) {
            Ok(appended) => {
                assert!(ok, "{ctx}: a batch with a duplicate key was accepted: {rows:?}");
                assert_eq!(appended, rows.len(), "{ctx}");
                self.model.extend(rows);
            }
            Err(e) => assert!(!ok && is_duplicate(&e), "{ctx}: {e} (keys {rows:?})"),
        }
    }

    fn append_row(&mut self) {
        let key = if self.rng.random_bool(0.8) { self.fresh_key() } else { self.any_key() };
        let v: i32 = self.rng.random();
        let ok = !self.model.contains_key(&key);
        let mut row = S::scalars(&key);
        row.push(Value::Int(v.into()));
        let ctx = self.ctx();
        match self.table.append_row(&row) {
            Ok(()) => {
                assert!(ok, "{ctx}: a row with a duplicate key {key:?} was accepted");
                self.model.insert(key, v);
            }
            Err(e) => assert!(!ok && is_duplicate(&e), "{ctx}: {e} (key {key:?})"),
        }
    }

    /// Deletes some live keys (and names absent ones, and repeats), found
    /// with `locate`.
    fn delete(&mut self) {
        let fraction = [0.02, 0.1, 0.3][self.rng.random_range(0..3)];
        let mut doomed: Vec<S::K> = self.model.keys().filter(|_| self.rng.random_bool(fraction)).cloned().collect();
        for _ in 0..self.rng.random_range(0..3) {
            let key = self.any_key();
            doomed.push(key);
        }
        if !doomed.is_empty() && self.rng.random_bool(0.2) {
            doomed.push(doomed[0].clone());
        }
        doomed.shuffle(&mut self.rng);
        let ctx = self.ctx();
        let snap = self.table.snapshot();
        let located = snap.locate(&S::arrays(&doomed)).unwrap();
        let mut by_pos: BTreeMap<usize, Vec<RecId>> = BTreeMap::new();
        for (key, at) in doomed.iter().zip(&located) {
            assert_eq!(at.is_some(), self.model.contains_key(key), "{ctx}: locate {key:?}");
            if let Some((pos, id)) = *at {
                by_pos.entry(pos).or_default().push(id);
            }
        }
        let selection: Vec<(ShardId, Vec<RecId>)> =
            by_pos.into_iter().map(|(pos, ids)| (snap.shard(pos).id(), ids)).collect();
        let deleted = self.table.delete(&snap, &selection).unwrap();
        let live: BTreeSet<&S::K> = doomed.iter().filter(|k| self.model.contains_key(*k)).collect();
        assert_eq!(deleted, live.len(), "{ctx}: deleted");
        for key in &doomed {
            self.model.remove(key);
        }
    }

    /// Rewrites some live keys with new values (delete + append in one
    /// transaction), sometimes inserting a new key along, sometimes moving
    /// a key to a new one, sometimes onto a live one (which must fail and
    /// change nothing).
    fn update(&mut self) {
        let Some(first) = self.present_key() else { return };
        let mut old: Vec<S::K> = vec![first];
        for _ in 0..self.rng.random_range(0..4) {
            let key = self.present_key().unwrap();
            if !old.contains(&key) {
                old.push(key);
            }
        }
        let mut new: Vec<S::K> = old.clone();
        match self.rng.random_range(0..6) {
            // An upsert of a key no row has.
            0 => {
                let key = self.fresh_key();
                if !new.contains(&key) {
                    new.push(key);
                }
            }
            // Move the first key to another.
            1 => new[0] = self.fresh_key(),
            // ... onto a live key the transaction does not delete.
            2 => new[0] = self.present_key().unwrap(),
            _ => {}
        }
        let distinct: BTreeSet<&S::K> = new.iter().collect();
        let ok = distinct.len() == new.len() && new.iter().all(|k| old.contains(k) || !self.model.contains_key(k));
        let rows: Vec<(S::K, i32)> = new.into_iter().map(|k| (k, self.rng.random())).collect();
        let one_row = rows.len() == 1 && self.rng.random_bool(0.5);
        let ctx = self.ctx();
        let result = self.table.transaction(|tx| {
            let snap = tx.snapshot();
            let located = snap.locate(&S::arrays(&old))?;
            let mut deleted = 0;
            for (key, at) in old.iter().zip(located) {
                let (pos, id) = at.unwrap_or_else(|| panic!("{ctx}: locate lost live key {key:?}"));
                deleted += tx.delete(snap.shard(pos).id(), &[id])?;
            }
            if one_row {
                let mut row = S::scalars(&rows[0].0);
                row.push(Value::Int(rows[0].1.into()));
                tx.append_row(&row)?;
            } else {
                tx.append(&batch_of::<S>(snap.schema().arrow(), &rows))?;
            }
            Ok(deleted)
        });
        match result {
            Ok(deleted) => {
                assert!(ok, "{ctx}: update {old:?} → {rows:?} made a duplicate key");
                assert_eq!(deleted, old.len(), "{ctx}");
                for key in &old {
                    self.model.remove(key);
                }
                self.model.extend(rows);
            }
            Err(e) => assert!(!ok && is_duplicate(&e), "{ctx}: update {old:?} → {rows:?}: {e}"),
        }
    }

    /// One random operation, then lookups on the current and held snapshots.
    fn step(&mut self) {
        self.step += 1;
        match self.rng.random_range(0..20) {
            0..=6 => self.append_batch(),
            7 | 8 => self.append_row(),
            9..=11 => self.delete(),
            12..=15 => self.update(),
            16 => self.table.rebuild().unwrap(),
            17 => {
                let snap = self.table.snapshot();
                self.held.push((snap, self.model.clone(), self.step));
                if self.held.len() > 3 {
                    self.held.remove(self.rng.random_range(0..self.held.len()));
                }
            }
            18 => {
                if !self.held.is_empty() {
                    self.held.remove(self.rng.random_range(0..self.held.len()));
                }
            }
            _ => {
                let ctx = self.ctx();
                full_check::<S>(&self.table.snapshot(), &self.model, self.domain, &mut self.rng, &ctx);
            }
        }
        self.lookups();
    }

    fn lookups(&mut self) {
        let ctx = self.ctx();
        assert_eq!(self.table.row_count(), self.model.len(), "{ctx}: row count");
        let snap = self.table.snapshot();
        let keys = self.lookup_keys(3);
        for key in &keys {
            check_get::<S>(&snap, &self.model, key, &ctx);
        }
        // Through the table too.
        if let Some(key) = self.present_key() {
            let got = self.table.get(&S::scalars(&key), None).unwrap();
            let want = batch_of::<S>(self.table.arrow_schema(), &[(key.clone(), self.model[&key])]);
            assert_eq!(got, Some(want), "{ctx}: Table::get {key:?}");
        }
        let keys = self.lookup_keys(12);
        check_multi_get::<S>(&snap, &self.model, &keys, &ctx);
        // Held snapshots answer from the state they were taken in.
        for i in 0..self.held.len() {
            let keys = {
                let model = &self.held[i].1;
                let n = model.len();
                let mut keys: Vec<S::K> = (0..self.rng.random_range(0..6))
                    .map(|_| match n {
                        0 => S::key(self.rng.random_range(0..self.domain)),
                        _ if self.rng.random_bool(0.6) => {
                            model.keys().nth(self.rng.random_range(0..n)).unwrap().clone()
                        }
                        _ => S::key(self.rng.random_range(0..self.domain)),
                    })
                    .collect();
                // A key live now but maybe not then, and the other way round.
                keys.extend(self.present_key());
                keys
            };
            let (old, model, taken) = &self.held[i];
            let ctx = format!("{ctx}, snapshot of step {taken}");
            for key in &keys {
                check_get::<S>(old, model, key, &ctx);
            }
            check_multi_get::<S>(old, model, &keys, &ctx);
        }
    }

    fn finish(&mut self) {
        let ctx = format!("{} at the end", self.name);
        full_check::<S>(&self.table.snapshot(), &self.model, self.domain, &mut self.rng, &ctx);
        let held = std::mem::take(&mut self.held);
        for (snap, model, taken) in &held {
            full_check::<S>(snap, model, self.domain, &mut self.rng, &format!("{ctx}, snapshot of step {taken}"));
        }
        self.table.rebuild().unwrap();
        full_check::<S>(&self.table.snapshot(), &self.model, self.domain, &mut self.rng, &format!("{ctx}, rebuilt"));
    }
}

/// `seeds` random runs of `steps` operations on keys of shape `S`, in
/// shards of 16 to 64 rows.
fn differential<S: Shape>(seeds: std::ops::Range<u64>, steps: usize, domain: i64) {
    differential_in::<S>(&[16, 24, 40, 64], seeds, steps, domain);
}

/// `seeds` random runs of `steps` operations on keys of shape `S`, in
/// shards of `capacities[seed % capacities.len()]` rows.
fn differential_in<S: Shape>(capacities: &[usize], seeds: std::ops::Range<u64>, steps: usize, domain: i64) {
    for seed in seeds {
        let capacity = capacities[seed as usize % capacities.len()];
        let db = Database::new();
        let options = TableOptions::default().with_shard_capacity(capacity).with_background_rebuild(false);
        let table = key_table::<S>(&db, "t", options);
        let mut run = Run::<S>::new(table, seed, domain);
        for _ in 0..steps {
            run.step();
        }
        run.finish();
    }
}

#[test]
fn int64_keys_match_a_model() {
    differential::<I64Key>(0..8, 300, 400);
}

#[test]
fn string_keys_match_a_model() {
    differential::<StrKey>(0..3, 150, 300);
}

#[test]
fn two_column_integer_keys_match_a_model() {
    differential::<PairKey>(0..3, 150, 300);
}

#[test]
fn wide_decimal_keys_match_a_model() {
    differential::<DecKey>(0..3, 150, 300);
}

#[test]
fn date_and_timestamp_keys_match_a_model() {
    differential::<DateKey>(0..2, 150, 300);
    differential::<TsKey>(0..2, 150, 300);
}

#[test]
fn boolean_and_integer_keys_match_a_model() {
    // Shards beyond 64 rows: delta rows past the first bitmap word.
    differential_in::<BoolKey>(&[16, 300], 0..2, 200, 400);
}

#[test]
fn string_and_integer_keys_match_a_model() {
    differential::<StrIntKey>(0..2, 150, 300);
}

// ---------------------------------------------------------------------------
// Keys rewritten many times
// ---------------------------------------------------------------------------

/// Three keys rewritten 180 times between other rows, in shards of 8 rows:
/// the newest version is always the one found, whether the rewrite
/// deleted and appended in one transaction or two, by batch or by row,
/// and with or without rebuilds (foreground, or in the background).
#[test]
fn keys_rewritten_many_times_find_the_newest_row() {
    for background in [false, true] {
        let db = Database::new();
        let options = TableOptions::default().with_shard_capacity(8).with_background_rebuild(background);
        let t = key_table::<I64Key>(&db, "t", options);
        let schema = Arc::clone(t.arrow_schema());
        let hot = [-5i64, 0, 7];
        let mut model: Model<I64Key> = hot.iter().map(|&k| (k, 0)).collect();
        t.append(&batch_of::<I64Key>(&schema, &hot.map(|k| (k, 0)))).unwrap();
        let mut held: Vec<(TableSnapshot, Model<I64Key>)> = Vec::new();
        let mut filler = 1000i64;
        for i in 1..=180i32 {
            let ctx = format!("background {background}, rewrite {i}");
            let key = hot[i as usize % 3];
            let locate = |snap: &TableSnapshot| snap.locate(&I64Key::arrays(&[key])).unwrap()[0].unwrap();
            match i % 4 {
                // Delete and append in one transaction, by batch.
                0 => {
                    t.transaction(|tx| {
                        let snap = tx.snapshot();
                        let (pos, id) = locate(&snap);
                        assert_eq!(tx.delete(snap.shard(pos).id(), &[id])?, 1);
                        tx.append(&batch_of::<I64Key>(&schema, &[(key, i)]))
                    })
                    .unwrap();
                }
                // ... by row.
                1 => t
                    .transaction(|tx| {
                        let snap = tx.snapshot();
                        let (pos, id) = locate(&snap);
                        assert_eq!(tx.delete(snap.shard(pos).id(), &[id])?, 1);
                        tx.append_row(&[Value::Int(key), Value::Int(i.into())])
                    })
                    .unwrap(),
                // Two transactions: in between, the key is gone.
                2 => {
                    let removed = t
                        .transaction(|tx| {
                            let snap = tx.snapshot();
                            let (pos, id) = locate(&snap);
                            tx.delete(snap.shard(pos).id(), &[id])
                        })
                        .unwrap();
                    assert_eq!(removed, 1, "{ctx}");
                    model.remove(&key);
                    assert_eq!(t.get(&[Value::Int(key)], None).unwrap(), None, "{ctx}: deleted key found");
                    assert!(is_duplicate(
                        &t.append_row(&[Value::Int(hot[(i as usize + 1) % 3]), Value::Null]).unwrap_err()
                    ));
                    t.append_row(&[Value::Int(key), Value::Int(i.into())]).unwrap();
                }
                // A rewrite through Table::update, plus an unrelated row;
                // retried when a background rebuild replaced the shard since
                // the snapshot (Error::Conflict).
                _ => {
                    let rows = batch_of::<I64Key>(&schema, &[(key, i), (filler, -1)]);
                    let updated = loop {
                        let snap = t.snapshot();
                        let (pos, id) = locate(&snap);
                        match t.update(&snap, &[(snap.shard(pos).id(), vec![id])], &rows) {
                            Err(Error::Conflict { .. }) if background => continue,
                            other => break other.unwrap(),
                        }
                    };
                    assert_eq!(updated, 1, "{ctx}");
                    model.insert(filler, -1);
                    filler += 1;
                }
            }
            model.insert(key, i);
            if !background && i % 23 == 0 {
                t.rebuild().unwrap();
            }
            let snap = t.snapshot();
            for k in hot {
                check_get::<I64Key>(&snap, &model, &k, &ctx);
            }
            check_multi_get::<I64Key>(&snap, &model, &[7, -5, 0, 7, 1], &ctx);
            assert_eq!(snap.row_count(), model.len(), "{ctx}");
            if i % 10 == 0 {
                held.push((snap, model.clone()));
            }
            for (j, (old, old_model)) in held.iter().enumerate() {
                check_multi_get::<I64Key>(old, old_model, &hot, &format!("{ctx}, held snapshot {j}"));
            }
        }
        assert!(t.snapshot().num_shards() > 1, "the rewrites crossed shards");
        assert_eq!(t.background_rebuild_failures().0, 0, "{:?}", t.background_rebuild_failures());
    }
}

// ---------------------------------------------------------------------------
// Readers racing a writer
// ---------------------------------------------------------------------------

/// Sets the flag when dropped (also when the thread holding it panics).
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A writer appends keys 0, 1, 2, … in batches and rewrites random old
/// keys (delete + append in one transaction), with background rebuilds;
/// readers take snapshots and find every key acknowledged before (keys
/// are never deleted for good, so a snapshot of `n` rows holds exactly
/// the keys `0..n`). A row's value encodes its key: `v >> 4 == k`.
#[test]
fn readers_find_every_acknowledged_key_while_a_writer_runs() {
    let db = Database::new();
    let options = TableOptions::default().with_shard_capacity(256).with_background_rebuild(true);
    let t = key_table::<I64Key>(&db, "t", options);
    let schema = Arc::clone(t.arrow_schema());
    let acked = AtomicI64::new(0);
    let done = AtomicBool::new(false);
    let lookups = AtomicUsize::new(0);
    let limit = Duration::from_secs(2);
    let written = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let _done = SetOnDrop(&done);
            let mut rng = StdRng::seed_from_u64(99);
            let start = Instant::now();
            let (mut next, mut generation) = (0i64, 0i32);
            while start.elapsed() < limit && next < 200_000 {
                if next == 0 || rng.random_bool(0.7) {
                    let n = rng.random_range(1..=64);
                    let rows: Vec<(i64, i32)> = (next..next + n).map(|k| (k, (k as i32) << 4)).collect();
                    t.append(&batch_of::<I64Key>(&schema, &rows)).unwrap();
                    next += n;
                    acked.store(next, Ordering::Release);
                } else {
                    generation += 1;
                    let keys: BTreeSet<i64> = (0..rng.random_range(1..=8)).map(|_| rng.random_range(0..next)).collect();
                    let keys: Vec<i64> = keys.into_iter().collect();
                    let rows: Vec<(i64, i32)> =
                        keys.iter().map(|&k| (k, ((k as i32) << 4) | (generation & 15))).collect();
                    t.transaction(|tx| {
                        let snap = tx.snapshot();
                        for at in snap.locate(&I64Key::arrays(&keys))? {
                            let (pos, id) = at.expect("a written key is live");
                            tx.delete(snap.shard(pos).id(), &[id])?;
                        }
                        tx.append(&batch_of::<I64Key>(&schema, &rows))
                    })
                    .unwrap();
                }
            }
            next
        });
        for r in 0..2u64 {
            let (t, acked, done, lookups) = (&t, &acked, &done, &lookups);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(r);
                let mut old: Option<(TableSnapshot, i64)> = None;
                while !done.load(Ordering::Acquire) {
                    let n = acked.load(Ordering::Acquire);
                    let snap = t.snapshot();
                    let rows = snap.row_count() as i64;
                    assert!(rows >= n, "a snapshot after {n} acknowledged keys holds {rows} rows");
                    if rows == 0 {
                        continue;
                    }
                    let mut keys: Vec<i64> = (0..20).map(|_| rng.random_range(0..rows)).collect();
                    keys.extend([rows - 1, n.max(1) - 1]);
                    for &k in keys.iter().take(5) {
                        let got = snap.get(&[Value::Int(k)], None).unwrap();
                        let b = got.unwrap_or_else(|| panic!("key {k} not found, snapshot of {rows} rows"));
                        assert_eq!(b.column(0).as_primitive::<Int64Type>().value(0), k);
                        assert_eq!(i64::from(b.column(1).as_primitive::<Int32Type>().value(0) >> 4), k);
                    }
                    assert_eq!(snap.get(&[Value::Int(rows)], None).unwrap(), None, "key {rows} beyond the snapshot");
                    let mut asked = keys.clone();
                    asked.extend([-1, rows, rows + 1000]);
                    let b = snap.multi_get(&I64Key::arrays(&asked), None).unwrap();
                    let found = b.column(0).as_primitive::<Int64Type>().values().to_vec();
                    assert_eq!(found, keys, "multi_get of a snapshot of {rows} rows");
                    let values = b.column(1).as_primitive::<Int32Type>();
                    assert!(keys.iter().zip(values.values()).all(|(&k, &v)| i64::from(v >> 4) == k));
                    // Now and then, every acknowledged key at once.
                    if n > 0 && rng.random_bool(0.02) {
                        let all: Vec<i64> = (0..n).collect();
                        let b = snap
                            .multi_get(&I64Key::arrays(&all), Some(&[0]))
                            .unwrap_or_else(|e| panic!("multi_get of the keys 0..{n}: {e}"));
                        assert_eq!(b.column(0).as_primitive::<Int64Type>().values().to_vec(), all);
                    }
                    // An older snapshot still finds exactly its keys.
                    if let Some((old_snap, old_rows)) = &old {
                        let k = rng.random_range(0..*old_rows);
                        assert!(old_snap.get(&[Value::Int(k)], None).unwrap().is_some(), "old snapshot lost {k}");
                        assert_eq!(old_snap.get(&[Value::Int(*old_rows)], None).unwrap(), None);
                    }
                    if rng.random_bool(0.05) {
                        old = Some((snap, rows));
                    }
                    lookups.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        writer.join().unwrap()
    });
    assert!(lookups.load(Ordering::Relaxed) > 0, "the readers ran");
    assert_eq!(t.background_rebuild_failures().0, 0, "{:?}", t.background_rebuild_failures());
    let all: Vec<i64> = (0..written).collect();
    let b = t.multi_get(&I64Key::arrays(&all), Some(&[0])).unwrap();
    assert_eq!(b.column(0).as_primitive::<Int64Type>().values().to_vec(), all);
    assert_eq!(t.row_count() as i64, written);
}

// ---------------------------------------------------------------------------
// Durability
// ---------------------------------------------------------------------------

/// A data directory of this test process, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("quiverdb-key-index-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Keyed rows written in many small transactions (appends, duplicate
/// appends, deletes, updates, rebuilds) survive a drop and reopen (log
/// replay) and a close and reopen (checkpoint): lookups match the model,
/// and the reopened table still refuses duplicate keys.
#[test]
fn lookups_survive_reopening() {
    let dir = TempDir::new("reopen");
    let options = DurableOptions {
        sync: SyncMode::Off,
        checkpoint_bytes: 0,
        log_segment_bytes: 64 << 10,
        recover_truncate: false,
    };
    let open = || Database::open(&dir.0, options).unwrap();
    let domain = 500;
    let check_reopened = |run: &mut Run<I64Key>, how: &str| {
        let ctx = format!("after {how}");
        let snap = run.table.snapshot();
        let model = run.model.clone();
        full_check::<I64Key>(&snap, &model, domain, &mut run.rng, &ctx);
        let all: Vec<i64> = (0..domain).map(I64Key::key).collect();
        check_multi_get::<I64Key>(&snap, &model, &all, &ctx);
        let (&live, &v) = model.iter().next().expect("rows survived");
        let e = run.table.append_row(&[Value::Int(live), Value::Int(1)]).unwrap_err();
        assert!(is_duplicate(&e), "{ctx}: {e}");
        let e = run.table.append(&batch_of::<I64Key>(run.table.arrow_schema(), &[(live, 2)])).unwrap_err();
        assert!(is_duplicate(&e), "{ctx}: {e}");
        check_get::<I64Key>(&run.table.snapshot(), &model, &live, &ctx);
        assert_eq!(model[&live], v);
    };

    let db = open();
    let table_options = TableOptions::default().with_shard_capacity(32).with_background_rebuild(false);
    let table = key_table::<I64Key>(&db, "t", table_options);
    let mut run = Run::<I64Key>::new(table, 42, domain);
    for _ in 0..250 {
        run.step();
    }
    // Drop without closing: the log is replayed.
    let Run { table, model, rng, step, .. } = run;
    drop(table);
    drop(db);
    let db = open();
    assert!(db.recovery().unwrap().replayed > 0, "{:?}", db.recovery());
    let table = db.table("t").unwrap();
    let mut run = Run::<I64Key> { table, model, held: Vec::new(), rng, domain, name: "reopened".into(), step };
    check_reopened(&mut run, "log replay");
    for _ in 0..150 {
        run.step();
    }
    // Close: a checkpoint, whose main storage is read back (and indexed on first use).
    let Run { table, model, rng, step, .. } = run;
    drop(table);
    db.close().unwrap();
    let db = open();
    assert!(db.recovery().unwrap().shard_files > 0, "{:?}", db.recovery());
    let table = db.table("t").unwrap();
    let mut run = Run::<I64Key> { table, model, held: Vec::new(), rng, domain, name: "reopened".into(), step };
    check_reopened(&mut run, "checkpoint");
    for _ in 0..50 {
        run.step();
    }
    run.finish();
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

/// 200,000 rows with keys in order in shards of 65,536: once rebuilt, the
/// index takes more than nothing and at most 8 bytes a row.
#[test]
fn the_index_takes_at_most_eight_bytes_a_row() {
    let rows = 200_000i64;
    let db = Database::new();
    let t = key_table::<I64Key>(&db, "t", TableOptions::default().with_background_rebuild(false));
    let schema = Arc::clone(t.arrow_schema());
    for start in (0..rows).step_by(25_000) {
        let batch: Vec<(i64, i32)> = (start..(start + 25_000).min(rows)).map(|k| (k, (k % 1000) as i32)).collect();
        t.append(&batch_of::<I64Key>(&schema, &batch)).unwrap();
    }
    t.rebuild().unwrap();
    let snap = t.snapshot();
    assert!(snap.num_shards() >= 3, "{} shards", snap.num_shards());
    for shard in snap.shards() {
        let first = shard.gather(&[0], Some(&[0])).unwrap();
        let k = first.column(0).as_primitive::<Int64Type>().value(0);
        let got = snap.get(&[Value::Int(k)], None).unwrap().unwrap();
        assert_eq!(got, batch_of::<I64Key>(&schema, &[(k, (k % 1000) as i32)]));
    }
    let usage = t.memory_usage();
    assert_eq!(usage.main_rows, rows as usize);
    assert!(usage.index_bytes > 0, "{usage}");
    assert!(usage.index_bytes <= 8 * rows as usize, "{} bytes of index for {rows} rows", usage.index_bytes);
    assert!(usage.total_bytes() >= usage.index_bytes);
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

#[test]
fn lookups_without_a_primary_key_fail() {
    let db = Database::new();
    let t = db.create_table("plain", &schema_of::<I64Key>(), TableOptions::default()).unwrap();
    t.append(&batch_of::<I64Key>(t.arrow_schema(), &[(1, 1)])).unwrap();
    assert!(t.get(&[Value::Int(1)], None).is_err());
    assert!(t.multi_get(&I64Key::arrays(&[1]), None).is_err());
    assert!(t.snapshot().locate(&I64Key::arrays(&[1])).is_err());
}

#[test]
fn lookups_with_the_wrong_key_shape_fail() {
    let db = Database::new();
    let t = key_table::<PairKey>(&db, "p", TableOptions::default());
    t.append(&batch_of::<PairKey>(t.arrow_schema(), &[((1, 2), 3)])).unwrap();
    // Wrong number of values.
    assert!(matches!(t.get(&[], None), Err(Error::SchemaMismatch { .. })));
    assert!(matches!(t.get(&[Value::Int(1)], None), Err(Error::SchemaMismatch { .. })));
    assert!(matches!(t.get(&[Value::Int(1), Value::Int(2), Value::Int(3)], None), Err(Error::SchemaMismatch { .. })));
    assert!(t.get(&[Value::Int(1), Value::Int(2)], None).unwrap().is_some());
    // A string for an integer column.
    let e = t.get(&[Value::Int(1), Value::Str("2")], None).unwrap_err();
    assert!(matches!(e, Error::TypeMismatch { ref column, .. } if column == "b"), "{e}");
    assert!(matches!(t.get(&[Value::Float(1.0), Value::Int(2)], None), Err(Error::TypeMismatch { .. })));
    assert!(matches!(t.get(&[Value::Null, Value::Int(2)], None), Err(Error::TypeMismatch { .. })));
    // Wrong number of arrays, arrays of different lengths.
    let one = t.multi_get(&PairKey::arrays(&[(1, 2)])[..1], None);
    assert!(matches!(one, Err(Error::SchemaMismatch { .. })), "{one:?}");
    let uneven: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(vec![1, 1])), Arc::new(Int64Array::from(vec![2]))];
    assert!(t.multi_get(&uneven, None).is_err());
    assert!(t.snapshot().locate(&uneven).is_err());

    let s = key_table::<StrKey>(&db, "s", TableOptions::default());
    s.append(&batch_of::<StrKey>(s.arrow_schema(), &[("1".into(), 1)])).unwrap();
    assert!(matches!(s.get(&[Value::Int(1)], None), Err(Error::TypeMismatch { .. })));
    assert!(s.get(&[Value::Str("1")], None).unwrap().is_some());
    assert!(s.get(&[Value::Bytes(b"1")], None).unwrap().is_some());
}

/// Integer values beyond a key column's type match no row (no error);
/// arrays of a wider type are cast, and fail when the cast would lose
/// values.
#[test]
fn out_of_range_integers_match_nothing() {
    let db = Database::new();
    let schema =
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int8, false), Field::new("u", DataType::UInt8, false)]));
    let options = TableOptions::default().with_shard_capacity(2).with_primary_key(["k"]);
    let t = db.create_table("i8", &schema, options).unwrap();
    let batch = RecordBatch::try_new(
        Arc::clone(t.arrow_schema()),
        vec![Arc::new(Int8Array::from(vec![-128, 0, 127])), Arc::new(UInt8Array::from(vec![1, 2, 3]))],
    )
    .unwrap();
    t.append(&batch).unwrap();
    for found in [-128, 0, 127] {
        assert!(t.get(&[Value::Int(found)], None).unwrap().is_some(), "{found}");
    }
    assert!(t.get(&[Value::UInt(127)], None).unwrap().is_some());
    for missing in [300, -129, 128, 44 + 256, i64::MIN, i64::MAX] {
        assert_eq!(t.get(&[Value::Int(missing)], None).unwrap(), None, "{missing}");
    }
    assert_eq!(t.get(&[Value::UInt(u64::MAX)], None).unwrap(), None);
    // Arrays are cast to the key column's type.
    let wide: ArrayRef = Arc::new(Int64Array::from(vec![127, 5, -128]));
    let got = t.multi_get(&[wide], Some(&[0])).unwrap();
    assert_eq!(got.column(0).as_primitive::<arrow_array::types::Int8Type>().values().to_vec(), vec![127, -128]);
    let lossy: ArrayRef = Arc::new(Int64Array::from(vec![1, 300]));
    assert!(t.multi_get(&[lossy], None).is_err(), "a lossy cast of key arrays must fail");

    // An unsigned key column and a negative value.
    let options = TableOptions::default().with_primary_key(["u"]);
    let u = db.create_table("u8", &schema, options).unwrap();
    u.append(&batch).unwrap();
    assert!(u.get(&[Value::Int(3)], None).unwrap().is_some());
    assert_eq!(u.get(&[Value::Int(-1)], None).unwrap(), None);
    assert_eq!(u.get(&[Value::Int(259)], None).unwrap(), None);
}

/// A NULL in a key array is a key no row has.
#[test]
fn null_keys_are_not_found() {
    let db = Database::new();
    let t = key_table::<I64Key>(&db, "t", TableOptions::default().with_shard_capacity(4));
    let schema = Arc::clone(t.arrow_schema());
    t.append(&batch_of::<I64Key>(&schema, &[(1, 10), (2, 20), (3, 30)])).unwrap();
    let keys: ArrayRef = Arc::new(Int64Array::from(vec![Some(3), None, Some(1), None]));
    let got = t.multi_get(&[Arc::clone(&keys)], None).unwrap();
    assert_eq!(got, batch_of::<I64Key>(&schema, &[(3, 30), (1, 10)]));
    let at = t.snapshot().locate(&[keys]).unwrap();
    assert!(at[0].is_some() && at[1].is_none() && at[2].is_some() && at[3].is_none(), "{at:?}");

    let p = key_table::<PairKey>(&db, "p", TableOptions::default());
    let pschema = Arc::clone(p.arrow_schema());
    p.append(&batch_of::<PairKey>(&pschema, &[((1, 1), 1), ((1, 2), 2)])).unwrap();
    let a: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(1)]));
    let b: ArrayRef = Arc::new(Int64Array::from(vec![None, Some(1), Some(2)]));
    assert_eq!(p.multi_get(&[a, b], None).unwrap(), batch_of::<PairKey>(&pschema, &[((1, 2), 2)]));
}

/// `multi_get` returns an empty batch when no key is found: on a table
/// with rows, on one without, and for no keys at all.
#[test]
fn multi_get_of_only_absent_keys_is_empty() {
    let db = Database::new();
    let t = key_table::<I64Key>(&db, "t", TableOptions::default().with_shard_capacity(4));
    let schema = Arc::clone(t.arrow_schema());
    let none = BTreeMap::new();
    assert_eq!(t.multi_get(&I64Key::arrays(&[1, 2]), None).unwrap(), expected::<I64Key>(&schema, &none, &[]));
    t.append(&batch_of::<I64Key>(&schema, &[(1, 10), (2, 20), (3, 30), (4, 40), (5, 50)])).unwrap();
    for keys in [&[][..], &[9], &[9, 8, 9]] {
        let got = t.multi_get(&I64Key::arrays(keys), None);
        assert_eq!(got.unwrap(), expected::<I64Key>(&schema, &none, &[]), "keys {keys:?}");
        let got = t.multi_get(&I64Key::arrays(keys), Some(&[1])).unwrap();
        assert_eq!((got.num_rows(), got.num_columns()), (0, 1), "keys {keys:?}");
    }
}

/// A decimal key value given as an integer means what it means to
/// `append_row` (a whole number, scaled), so a row appended with it is
/// found with it.
#[test]
fn integer_values_of_decimal_keys_are_scaled_as_in_append_row() {
    let db = Database::new();
    let t = key_table::<DecKey>(&db, "d", TableOptions::default());
    t.append_row(&[Value::Int(5), Value::Int(1)]).unwrap();
    // Stored as 5.00.
    assert!(t.get(&[Value::Decimal(500)], None).unwrap().is_some());
    assert!(is_duplicate(&t.append_row(&[Value::Decimal(500), Value::Int(2)]).unwrap_err()));
    // An integer key array is cast to the decimal type, which scales it too.
    let got = t.multi_get(&[Arc::new(Int64Array::from(vec![5])) as ArrayRef], Some(&[1])).unwrap();
    assert_eq!(got.num_rows(), 1, "multi_get of integer 5 finds 5.00");
    // get alone takes the integer as unscaled: it finds 0.05 (no row) for 5.
    assert!(
        t.get(&[Value::Int(5)], None).unwrap().is_some(),
        "get(Int(5)) does not find the row append_row(Int(5)) wrote"
    );
}

/// Key arrays of other types are cast to the key columns' types.
#[test]
fn key_arrays_are_cast_to_the_key_types() {
    let db = Database::new();
    let s = key_table::<StrKey>(&db, "s", TableOptions::default().with_shard_capacity(2));
    let sschema = Arc::clone(s.arrow_schema());
    let rows: Vec<(String, i32)> = (1..6).map(|i| (StrKey::key(i), i as i32)).collect();
    s.append(&batch_of::<StrKey>(&sschema, &rows)).unwrap();
    let model: Model<StrKey> = rows.iter().cloned().collect();
    let asked = [StrKey::key(3), StrKey::key(9), StrKey::key(1), StrKey::key(3)];
    let want = expected::<StrKey>(&sschema, &model, &asked);
    let large: ArrayRef = Arc::new(LargeStringArray::from_iter_values(&asked));
    let view: ArrayRef = Arc::new(StringViewArray::from_iter_values(&asked));
    assert_eq!(s.multi_get(&[large], None).unwrap(), want);
    assert_eq!(s.multi_get(&[view], None).unwrap(), want);

    let p = key_table::<PairKey>(&db, "p", TableOptions::default().with_shard_capacity(2));
    let pschema = Arc::clone(p.arrow_schema());
    let rows: Vec<((i32, i64), i32)> = (1..6).map(|i| (PairKey::key(i), i as i32)).collect();
    p.append(&batch_of::<PairKey>(&pschema, &rows)).unwrap();
    let model: Model<PairKey> = rows.iter().cloned().collect();
    let asked = [PairKey::key(4), PairKey::key(2), PairKey::key(7)];
    let swapped: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(asked.iter().map(|k| i64::from(k.0)))),
        Arc::new(Int32Array::from_iter_values(asked.iter().map(|k| k.1 as i32))),
    ];
    assert_eq!(p.multi_get(&swapped, None).unwrap(), expected::<PairKey>(&pschema, &model, &asked));

    let d = key_table::<DecKey>(&db, "d", TableOptions::default());
    let dschema = Arc::clone(d.arrow_schema());
    let rows: Vec<(i128, i32)> = (495..505).map(|i| (DecKey::key(i), i as i32)).collect();
    d.append(&batch_of::<DecKey>(&dschema, &rows)).unwrap();
    let model: Model<DecKey> = rows.iter().cloned().collect();
    let asked = [DecKey::key(497), DecKey::key(500), DecKey::key(1)];
    let wider: ArrayRef = Arc::new(Decimal128Array::from(asked.to_vec()).with_precision_and_scale(38, 2).unwrap());
    assert_eq!(d.multi_get(&[wider], None).unwrap(), expected::<DecKey>(&dschema, &model, &asked));
    let finer: ArrayRef = Arc::new(
        Decimal128Array::from(asked.iter().map(|v| v * 10).collect::<Vec<_>>())
            .with_precision_and_scale(21, 3)
            .unwrap(),
    );
    assert_eq!(d.multi_get(&[finer], None).unwrap(), expected::<DecKey>(&dschema, &model, &asked));
}

/// Tables redefined over the same rows (a column dropped before the key,
/// one added, the key column renamed) still find their rows by key.
#[test]
fn lookups_after_columns_change() {
    let db = Database::new();
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int32, true),
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int32, true),
    ]));
    let options = TableOptions::default().with_shard_capacity(8).with_background_rebuild(false).with_primary_key(["k"]);
    let t = db.create_table("t", &schema, options).unwrap();
    let batch = |keys: std::ops::Range<i64>| {
        RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int32Array::from_iter_values(keys.clone().map(|k| -(k as i32)))),
                Arc::new(Int64Array::from_iter_values(keys.clone())),
                Arc::new(Int32Array::from_iter_values(keys.map(|k| k as i32 * 10))),
            ],
        )
        .unwrap()
    };
    t.append(&batch(0..20)).unwrap();
    t.rebuild().unwrap();
    t.append(&batch(20..30)).unwrap();
    let snap = t.snapshot();
    let (pos, id) = snap.locate(&I64Key::arrays(&[5])).unwrap()[0].unwrap();
    t.delete(&snap, &[(snap.shard(pos).id(), vec![id])]).unwrap();
    let model: Model<I64Key> = (0..30).filter(|&k| k != 5).map(|k| (k, k as i32 * 10)).collect();
    let asked: Vec<i64> = vec![29, 5, 0, 17, 31, 22];

    db.drop_column("t", "x").unwrap();
    let t = db.table("t").unwrap();
    let snap = t.snapshot();
    assert_eq!(snap.schema().arrow().field(0).name(), "k");
    check_multi_get::<I64Key>(&snap, &model, &asked, "x dropped");
    for k in &asked {
        check_get::<I64Key>(&snap, &model, k, "x dropped");
    }

    db.add_column("t", Field::new("w", DataType::Utf8, true), Arc::new(StringArray::from(vec!["w"])), None).unwrap();
    db.alter_table("t", &quiverdb_storage::Alteration::RenameColumn { from: "k".into(), to: "key".into() }).unwrap();
    let t = db.table("t").unwrap();
    let got = t.multi_get(&I64Key::arrays(&asked), Some(&[0, 1])).unwrap();
    let want = expected::<I64Key>(&schema_of::<I64Key>(), &model, &asked);
    assert_eq!(got.columns(), want.columns());
    let got = t.get(&[Value::Int(22)], Some(&[2])).unwrap().unwrap();
    assert_eq!(got.column(0).as_string::<i32>().value(0), "w");
    assert!(is_duplicate(&t.append_row(&[Value::Int(22), Value::Null, Value::Null]).unwrap_err()));
    t.append_row(&[Value::Int(5), Value::Int(1), Value::Str("again")]).unwrap();
    assert_eq!(t.get(&[Value::Int(5)], Some(&[1, 2])).unwrap().unwrap().num_rows(), 1);
}

// ---------------------------------------------------------------------------
// Projections
// ---------------------------------------------------------------------------

#[test]
fn projections_return_those_columns_in_that_order() {
    let db = Database::new();
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
    ]));
    let options = TableOptions::default().with_shard_capacity(4).with_background_rebuild(false).with_primary_key(["k"]);
    let t = db.create_table("t", &schema, options).unwrap();
    let rows = |keys: &[i64]| {
        RecordBatch::try_new(
            Arc::clone(t.arrow_schema()),
            vec![
                Arc::new(Int64Array::from(keys.to_vec())),
                Arc::new(Int32Array::from_iter(keys.iter().map(|&k| (k % 3 != 0).then_some(k as i32 * 10)))),
                Arc::new(StringArray::from_iter_values(keys.iter().map(|k| format!("row {k}")))),
            ],
        )
        .unwrap()
    };
    // Main storage in two shards, then delta rows.
    t.append(&rows(&[1, 2, 3, 4, 5, 6])).unwrap();
    t.rebuild().unwrap();
    t.append(&rows(&[7, 8, 9])).unwrap();
    for projection in [&[1][..], &[1, 0], &[2, 0, 1]] {
        let names: Vec<&str> = projection.iter().map(|&c| schema.field(c).name().as_str()).collect();
        for k in [2, 3, 8] {
            let got = t.get(&[Value::Int(k)], Some(projection)).unwrap().unwrap();
            assert_eq!(got, rows(&[k]).project(projection).unwrap(), "get {k} {projection:?}");
            let schema = got.schema();
            let got_names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            assert_eq!(got_names, names, "get {k} {projection:?}");
        }
        assert_eq!(t.get(&[Value::Int(10)], Some(projection)).unwrap(), None);
        let keys = [9, 1, 10, 5, 9, 7];
        let got = t.multi_get(&I64Key::arrays(&keys), Some(projection)).unwrap();
        assert_eq!(got, rows(&[9, 1, 5, 9, 7]).project(projection).unwrap(), "multi_get {projection:?}");
    }
}

/// Keys given in another type are converted exactly or refused: 1.5 is no
/// key of an integer column (a truncating cast would find key 1), and a
/// float key finds what `append_row` stored for the same value.
#[test]
fn keys_convert_exactly_or_are_refused() {
    let db = Database::new();
    let ints = key_table::<I64Key>(&db, "ints", TableOptions::default());
    ints.append(&batch_of::<I64Key>(&Arc::clone(ints.arrow_schema()), &[(1, 10), (2, 20)])).unwrap();
    let whole: ArrayRef = Arc::new(Float64Array::from(vec![2.0]));
    assert_eq!(ints.multi_get(&[whole], None).unwrap().num_rows(), 1, "2.0 is key 2");
    let half: ArrayRef = Arc::new(Float64Array::from(vec![1.5]));
    match ints.multi_get(&[half], None) {
        Err(Error::TypeMismatch { .. }) => {}
        other => panic!("1.5 looked up in an integer key: {other:?}"),
    }

    let schema = Schema::new(vec![Field::new("f", DataType::Float32, false), Field::new("v", DataType::Int32, true)]);
    let floats = db.create_table("floats", &schema, TableOptions::default().with_primary_key(["f"])).unwrap();
    for (f, v) in [(0.1f64, 1i64), (2.5, 2), (-7.25, 3)] {
        floats.append_row(&[Value::Float(f), Value::Int(v)]).unwrap();
    }
    for (f, v) in [(0.1f64, 1i32), (2.5, 2), (-7.25, 3)] {
        let row = floats.get(&[Value::Float(f)], Some(&[1])).unwrap().expect("the stored key is found");
        assert_eq!(row.column(0).as_primitive::<Int32Type>().value(0), v);
    }
    assert!(floats.get(&[Value::Float(0.2)], None).unwrap().is_none());
}
