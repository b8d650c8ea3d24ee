//! TPC-H queries on quiverdb against DataFusion's `MemTable`, side by
//! side: Q1 (a grouped aggregate of decimal expressions), Q6 (a filter on
//! a date and two decimals), Q13 (a NOT LIKE and an outer join with a
//! high-cardinality GROUP BY) and Q19 (a join under an OR of conjunctions),
//! at scale factor 0.1 with two partitions. Each iteration runs an already
//! planned physical plan to completion, so the figures are execution only.
//! `examples/tpch_bench.rs` runs all 22 at any scale factor and checks
//! the answers.
//!
//! ```text
//! cargo bench --bench tpch
//! ```

#[path = "../examples/common/tpch.rs"]
mod tpch;

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};
use quiverdb::{Database, SessionOptions};

const SF: f64 = 0.1;
const PARTITIONS: usize = 2;
const BATCH_ROWS: usize = 8192;
const QUERIES: [i32; 4] = [1, 6, 13, 19];

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let tables = tpch::generate(SF, BATCH_ROWS, 2);

    let db = Database::new();
    let memtable = SessionContext::new_with_config(
        SessionConfig::new().with_target_partitions(PARTITIONS).with_batch_size(BATCH_ROWS),
    );
    for table in &tables {
        tpch::load_quiverdb(&db, table).expect("quiverdb table");
        tpch::register_memtable(&memtable, table, PARTITIONS).expect("memtable");
    }
    let quiver = quiverdb::session_context_with(
        &db,
        SessionOptions { target_partitions: PARTITIONS, batch_size: BATCH_ROWS, ..SessionOptions::default() },
    );

    let mut group = c.benchmark_group("tpch_sf0.1");
    group.sample_size(10);
    for number in QUERIES {
        let query = tpch::query(number, SF).expect("query");
        for (engine, ctx) in [("quiverdb", &quiver), ("memtable", &memtable)] {
            let plan =
                runtime.block_on(async { ctx.sql(&query.select).await?.create_physical_plan().await }).expect("plan");
            let task = ctx.task_ctx();
            group.bench_with_input(BenchmarkId::new(&query.name, engine), &plan, |b, plan| {
                b.iter(|| runtime.block_on(collect(Arc::clone(plan), Arc::clone(&task))).expect("run"));
            });
        }
    }
    group.finish();
    black_box(&db);
}

criterion_group!(benches, bench);
criterion_main!(benches);
