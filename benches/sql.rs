//! SQL execution on quiverdb against DataFusion's `MemTable`, side by side:
//! a subset of the seed-table queries of `examples/seed_bench.rs` (Q2 sum,
//! Q4 filtered count, Q6 grouped sum by string, Q8 string equality, Q9 id
//! range), on 500,000 rows with one partition. Each iteration runs an
//! already planned physical plan to completion, so the figures are
//! execution only.
//!
//! ```text
//! cargo bench --bench sql
//! ```

#[path = "../examples/common/seed.rs"]
mod seed;

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use datafusion::catalog::MemTable;
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};
use quiverdb::{Database, SessionOptions};

const ROWS: usize = 500_000;

const QUERIES: [(&str, &str); 5] = [
    ("Q2", "SELECT SUM(value) FROM t"),
    ("Q4", "SELECT COUNT(*) FROM t WHERE value > 500000"),
    ("Q6", "SELECT name, SUM(value) FROM t GROUP BY name"),
    ("Q8", "SELECT COUNT(*) FROM t WHERE name = 'name_0042'"),
    ("Q9", "SELECT id, value FROM t WHERE id BETWEEN 100000 AND 100100"),
];

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let batches = seed::batches(ROWS);

    let db = Database::new();
    seed::load_sql_table(&db, &batches).expect("seed table");
    let quiver =
        quiverdb::session_context_with(&db, SessionOptions { target_partitions: 1, ..SessionOptions::default() });

    let memtable = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
    memtable
        .register_table("t", Arc::new(MemTable::try_new(seed::schema(), vec![batches]).expect("memtable")))
        .expect("register");

    let mut group = c.benchmark_group("sql");
    group.sample_size(20);
    for (name, sql) in QUERIES {
        for (engine, ctx) in [("quiverdb", &quiver), ("memtable", &memtable)] {
            let plan = runtime.block_on(async { ctx.sql(sql).await?.create_physical_plan().await }).expect("plan");
            // The task context is made once, as with the plan: each
            // iteration times the plan's run alone.
            let task = ctx.task_ctx();
            group.bench_with_input(BenchmarkId::new(name, engine), &plan, |b, plan| {
                b.iter(|| runtime.block_on(collect(Arc::clone(plan), Arc::clone(&task))).expect("run"));
            });
        }
    }
    group.finish();
    black_box(&db);
}

criterion_group!(benches, bench);
criterion_main!(benches);
