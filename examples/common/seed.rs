#![allow(dead_code)]
//! The seed table shared by the examples: `id` = 0..N-1, `value` uniform
//! in [0, 1,000,000], `category` uniform in [0, 999], `name` uniform over
//! `name_0000` .. `name_0999` (Int64, Int64, Int64, Utf8), from a fixed
//! RNG seed, in 8,192-row batches.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Rows per batch (DataFusion's default batch size).
pub(crate) const BATCH_ROWS: usize = 8192;
/// The fixed RNG seed of the seed table.
pub(crate) const SEED: u64 = 42;

/// The seed table's schema.
pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("value", DataType::Int64, false),
        Field::new("category", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]))
}

/// The seed table in 8,192-row batches.
pub(crate) fn batches(rows: usize) -> Vec<RecordBatch> {
    let schema = schema();
    let mut rng = StdRng::seed_from_u64(SEED);
    let names: Vec<String> = (0..1000).map(|i| format!("name_{i:04}")).collect();
    (0..rows)
        .step_by(BATCH_ROWS)
        .map(|start| {
            let n = BATCH_ROWS.min(rows - start);
            let id = Int64Array::from_iter_values(start as i64..(start + n) as i64);
            let value = Int64Array::from_iter_values((0..n).map(|_| rng.random_range(0..=1_000_000)));
            let category = Int64Array::from_iter_values((0..n).map(|_| rng.random_range(0..1000)));
            let name = StringArray::from_iter_values((0..n).map(|_| &names[rng.random_range(0..1000)]));
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(id), Arc::new(value), Arc::new(category), Arc::new(name)],
            )
            .expect("seed batch matches its schema")
        })
        .collect()
}

/// Creates the seed table `t` in `db` as the SQL figures use it (`name` as
/// `Utf8View`), appends `batches` and rebuilds it into main storage.
pub(crate) fn load_sql_table(db: &quiverdb::Database, batches: &[RecordBatch]) -> quiverdb::Result<()> {
    let fields: Vec<Field> = schema()
        .fields()
        .iter()
        .map(|f| if f.name() == "name" { Field::new("name", DataType::Utf8View, false) } else { f.as_ref().clone() })
        .collect();
    let table = db.create_table("t", &Schema::new(fields), quiverdb::TableOptions::default())?;
    for b in batches {
        table.append(b)?;
    }
    table.rebuild()?;
    db.wait_for_background_rebuilds();
    Ok(())
}

/// Parses `--name value` flags into (name, value) pairs.
pub(crate) fn flags() -> Result<Vec<(String, String)>, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.len().is_multiple_of(2) {
        return Err(format!("flags come in pairs: {args:?}"));
    }
    args.chunks(2)
        .map(|p| match p[0].strip_prefix("--") {
            Some(name) => Ok((name.to_string(), p[1].clone())),
            None => Err(format!("expected a --flag, got {}", p[0])),
        })
        .collect()
}

/// The value of flag `name` parsed as a number, or `default`.
pub(crate) fn flag(flags: &[(String, String)], name: &str, default: usize) -> Result<usize, String> {
    match flags.iter().find(|(n, _)| n == name) {
        None => Ok(default),
        Some((_, v)) => v.replace('_', "").parse().map_err(|e| format!("--{name} {v}: {e}")),
    }
}
