#![allow(dead_code)]
//! TPC-H data for the examples, generated in-process by `tpchgen-arrow`
//! (the same rows as `dbgen`): the eight tables as Arrow batches, with
//! TPC-H's types (Int64 keys, Decimal128(15, 2) money, Date32 dates,
//! Utf8View text).

use std::sync::Mutex;

use arrow_array::RecordBatch;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator, PartSuppGenerator,
    RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow, SupplierArrow,
};

/// The eight tables, smallest first.
pub(crate) const TABLES: [&str; 8] =
    ["region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"];

/// One table's rows.
pub(crate) struct Table {
    pub(crate) name: &'static str,
    pub(crate) batches: Vec<RecordBatch>,
}

impl Table {
    pub(crate) fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    pub(crate) fn arrow_bytes(&self) -> usize {
        self.batches.iter().map(RecordBatch::get_array_memory_size).sum()
    }
}

/// Parts each table is generated in (so that two threads share the big ones).
fn parts(table: &str, sf: f64) -> i32 {
    match table {
        "lineitem" => (8.0 * sf).ceil().max(1.0) as i32,
        "orders" | "partsupp" => (2.0 * sf).ceil().max(1.0) as i32,
        _ => 1,
    }
}

/// Part `part` (1-based) of `parts` of `table` at scale factor `sf`, in
/// batches of `batch_rows`.
fn generate_part(table: &str, sf: f64, part: i32, parts: i32, batch_rows: usize) -> Vec<RecordBatch> {
    fn all<I: Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>>>(it: I) -> Vec<RecordBatch> {
        it.collect::<Result<_, _>>().expect("tpchgen-arrow builds valid batches")
    }
    match table {
        "region" => all(RegionArrow::new(RegionGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "nation" => all(NationArrow::new(NationGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "supplier" => all(SupplierArrow::new(SupplierGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "customer" => all(CustomerArrow::new(CustomerGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "part" => all(PartArrow::new(PartGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "partsupp" => all(PartSuppArrow::new(PartSuppGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "orders" => all(OrderArrow::new(OrderGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "lineitem" => all(LineItemArrow::new(LineItemGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        other => panic!("no TPC-H table {other}"),
    }
}

/// The eight tables at scale factor `sf` (in [`TABLES`] order), generated
/// on `threads` threads, in batches of at most `batch_rows` rows.
pub(crate) fn generate(sf: f64, batch_rows: usize, threads: usize) -> Vec<Table> {
    let jobs: Vec<(usize, i32, i32)> = TABLES
        .iter()
        .enumerate()
        .flat_map(|(t, name)| {
            let n = parts(name, sf);
            (1..=n).map(move |p| (t, p, n))
        })
        .collect();
    let next = Mutex::new(jobs.into_iter().rev().collect::<Vec<_>>());
    let done: Mutex<Vec<(usize, i32, Vec<RecordBatch>)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let job = next.lock().expect("no panics while held").pop();
                    let Some((t, part, parts)) = job else { break };
                    let batches = generate_part(TABLES[t], sf, part, parts, batch_rows);
                    done.lock().expect("no panics while held").push((t, part, batches));
                }
            });
        }
    });
    let mut done = done.into_inner().expect("no panics while held");
    done.sort_by_key(|(t, part, _)| (*t, *part));
    let mut tables: Vec<Table> = TABLES.iter().map(|&name| Table { name, batches: Vec::new() }).collect();
    for (t, _, batches) in done {
        tables[t].batches.extend(batches);
    }
    tables
}
