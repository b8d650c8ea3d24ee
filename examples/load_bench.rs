//! The server's memory under steady load, as users see it: the resident
//! set (RSS) of a real `quiverdb serve` process while many clients query
//! and change the seed table for a while, and after they stop.
//!
//! ```text
//! cargo build --release --bin quiverdb --example load_bench
//! target/release/examples/load_bench [--seconds 60] [--clients 16] [--rows 2000000] [--writes 1] [--binary target/release/quiverdb]
//! ```
//!
//! Starts the binary (in memory, on a free loopback port), ingests the
//! seed table, and runs `--clients` clients for `--seconds`, each on its
//! own connection going round a mix of statements: aggregates, GROUP BY,
//! point and range lookups, a top-k, a prepared lookup with bound
//! parameters, a metadata call and (with `--writes 1`) an INSERT and a
//! DELETE into a second table. RSS is sampled every 10 s. Reports RSS
//! settled before the load, its peak during it, at its end, and after
//! 30 s idle; the statements run per kind and their failures; then a JSON
//! line with the figures.
//!
//! ```text
//! target/release/examples/load_bench --flood 48
//! ```
//!
//! With `--flood N`: N clients each start a cross join of two 200,000-row
//! tables that would run for hours, and after 3 s another client times
//! `SELECT 1` ten times and a `SUM` over a 3-row table ten times (median
//! and slowest), and counts the joins refused so far.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;

#[path = "common/seed.rs"]
mod seed;
#[path = "common/server.rs"]
mod server;

use server::{BoxError, Client, mib};

/// The kinds of statement each client goes round.
const KINDS: [&str; 9] = [
    "SELECT SUM(value) FROM seed",
    "SELECT category, COUNT(*), AVG(value) FROM seed GROUP BY category",
    "SELECT * FROM seed WHERE id = {k}",
    "SELECT * FROM seed WHERE id BETWEEN {k} AND {k} + 9999",
    "SELECT id, value FROM seed ORDER BY value DESC LIMIT 10",
    "prepared: SELECT name, value FROM seed WHERE id = $1 (8 parameter rows)",
    "metadata: GetTables",
    "INSERT INTO events VALUES ({k}, {k})",
    "DELETE FROM events WHERE id < {k}",
];

fn main() -> Result<(), BoxError> {
    let flags = seed::flags()?;
    let binary = server::binary(&flags)?;
    let seconds = seed::flag(&flags, "seconds", 60)?;
    let clients = seed::flag(&flags, "clients", 16)?;
    let rows = seed::flag(&flags, "rows", 2_000_000)?;
    let writes = seed::flag(&flags, "writes", 1)? != 0;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    if let Some((_, n)) = flags.iter().find(|(name, _)| name == "flood") {
        let n: usize = n.parse().map_err(|e| format!("--flood {n}: {e}"))?;
        return runtime.block_on(flood(&binary, n));
    }
    let (server, port) = server::start(&binary, &["--in-memory"])?;
    let mut client = runtime.block_on(server::connect(port))?;
    runtime.block_on(server::ingest(&mut client, "seed", seed::batches(rows)))?;
    runtime.block_on(server::update(&mut client, "CREATE TABLE events (id BIGINT PRIMARY KEY, v BIGINT)"))?;
    let before = server.settled_rss()?;
    eprintln!("RSS before the load: {:.1} MiB", mib(before));

    let counts: Arc<Vec<(AtomicU64, AtomicU64)>> =
        Arc::new(KINDS.iter().map(|_| (AtomicU64::new(0), AtomicU64::new(0))).collect());
    let deadline = Instant::now() + Duration::from_secs(seconds as u64);
    let next_key = Arc::new(AtomicU64::new(0));
    let load = runtime.spawn({
        let counts = Arc::clone(&counts);
        async move {
            let runs = (0..clients).map(|c| {
                let counts = Arc::clone(&counts);
                let next_key = Arc::clone(&next_key);
                async move {
                    let mut client = server::connect(port).await.map_err(|e| e.to_string())?;
                    let mut turn = c;
                    while Instant::now() < deadline {
                        let kind = turn % KINDS.len();
                        turn += 1;
                        if !writes && kind >= 7 {
                            continue;
                        }
                        let k = next_key.fetch_add(1, Ordering::Relaxed) as i64;
                        let ok = run(&mut client, kind, k, rows as i64).await.is_ok();
                        let slot = &counts[kind];
                        if ok { &slot.0 } else { &slot.1 }.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok::<_, String>(())
                }
            });
            futures::future::join_all(runs).await.into_iter().collect::<Result<Vec<_>, _>>().map(|_| ())
        }
    });
    let mut samples = Vec::new();
    while !load.is_finished() {
        std::thread::sleep(
            Duration::from_secs(10)
                .min(deadline.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(100)),
        );
        let rss = server.rss()?;
        samples.push(rss);
        eprintln!(
            "{:>4.0} s: RSS {:.1} MiB",
            seconds as f64 - deadline.saturating_duration_since(Instant::now()).as_secs_f64(),
            mib(rss)
        );
    }
    runtime.block_on(load).map_err(|e| e.to_string())??;
    let at_end = server.rss()?;
    std::thread::sleep(Duration::from_secs(30));
    let idle = server.rss()?;
    let peak = samples.iter().copied().max().unwrap_or(at_end);
    for (name, bytes) in runtime.block_on(server::memory_figures(&mut client)).unwrap_or_default() {
        eprintln!("system.memory {name}: {:.1} MiB", mib(bytes.max(0) as u64));
    }

    println!("| {clients} clients, {seconds} s | RSS, MiB |");
    println!("|---|---:|");
    println!("| before the load (seed table of {rows} rows loaded) | {:.1} |", mib(before));
    println!("| peak during the load (sampled every 10 s) | {:.1} |", mib(peak));
    println!("| at the end of the load | {:.1} |", mib(at_end));
    println!("| after 30 s idle | {:.1} |", mib(idle));
    println!();
    println!("| statement | runs | failed |");
    println!("|---|---:|---:|");
    let mut total = 0;
    let mut failed = 0;
    for (kind, (ok, err)) in KINDS.iter().zip(counts.iter()) {
        let (ok, err) = (ok.load(Ordering::Relaxed), err.load(Ordering::Relaxed));
        total += ok + err;
        failed += err;
        println!("| `{kind}` | {} | {err} |", ok + err);
    }
    println!(
        "{{\"clients\":{clients},\"seconds\":{seconds},\"rss_before\":{before},\"rss_peak\":{peak},\
         \"rss_end\":{at_end},\"rss_idle\":{idle},\"statements\":{total},\"failed\":{failed}}}"
    );
    drop(server);
    Ok(())
}

/// Runs statement kind `kind` with key `k`.
async fn run(client: &mut Client, kind: usize, k: i64, rows: i64) -> Result<(), BoxError> {
    let key = k.wrapping_mul(7919).rem_euclid(rows);
    match kind {
        5 => {
            let mut prepared = client.prepare("SELECT name, value FROM seed WHERE id = $1".into(), None).await?;
            let schema = Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, false)]));
            let ids = Int64Array::from_iter_values((0..8).map(|i| (key + i * 1013).rem_euclid(rows)));
            prepared.set_parameters(RecordBatch::try_new(schema, vec![Arc::new(ids)])?)?;
            let info = prepared.execute().await?;
            for endpoint in info.endpoint {
                let ticket = endpoint.ticket.ok_or("no ticket")?;
                let got: Vec<_> = client.do_get(ticket).await?.try_collect().await?;
                if got.iter().map(RecordBatch::num_rows).sum::<usize>() != 8 {
                    return Err("a prepared lookup lost rows".into());
                }
            }
            prepared.close().await?;
        }
        6 => {
            let info = client
                .get_tables(arrow_flight::sql::CommandGetTables {
                    catalog: None,
                    db_schema_filter_pattern: None,
                    table_name_filter_pattern: Some("seed".into()),
                    table_types: vec![],
                    include_schema: true,
                })
                .await?;
            for endpoint in info.endpoint {
                let ticket = endpoint.ticket.ok_or("no ticket")?;
                let _: Vec<_> = client.do_get(ticket).await?.try_collect().await?;
            }
        }
        7 | 8 => {
            let sql = KINDS[kind].replace("{k}", &k.to_string());
            server::update(client, &sql).await?;
        }
        _ => {
            let sql = KINDS[kind].replace("{k}", &key.to_string());
            server::rows_of(client, &sql).await?;
        }
    }
    Ok(())
}

/// `n` endless cross joins, and the latency of small statements beside them.
async fn flood(binary: &std::path::Path, n: usize) -> Result<(), BoxError> {
    let (server, port) = server::start(binary, &["--in-memory"])?;
    let mut client = server::connect(port).await?;
    server::update(&mut client, "CREATE TABLE big AS SELECT value AS v FROM generate_series(1, 200000)").await?;
    server::update(&mut client, "CREATE TABLE small (v BIGINT)").await?;
    server::update(&mut client, "INSERT INTO small VALUES (1), (2), (3)").await?;
    let refused = Arc::new(AtomicU64::new(0));
    let mut joins = Vec::new();
    for _ in 0..n {
        let mut c = server::connect(port).await?;
        let refused = Arc::clone(&refused);
        joins.push(tokio::spawn(async move {
            let join = "SELECT COUNT(*) FROM big a CROSS JOIN big b WHERE a.v + b.v = 0";
            if server::rows_of(&mut c, join).await.is_err() {
                refused.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut ms = Vec::new();
    for sql in ["SELECT 1"; 10].into_iter().chain(["SELECT SUM(v) FROM small"; 10]) {
        let start = Instant::now();
        server::rows_of(&mut client, sql).await?;
        ms.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    let (median, slowest) = (ms[ms.len() / 2], ms[ms.len() - 1]);
    let refused = refused.load(Ordering::Relaxed);
    println!("| {n} cross joins running or waiting | ms |");
    println!("|---|---:|");
    println!("| small statements, median of 20 | {median:.1} |");
    println!("| small statements, slowest | {slowest:.1} |");
    println!("{{\"joins\":{n},\"refused\":{refused},\"median_ms\":{median:.2},\"max_ms\":{slowest:.2}}}");
    for join in joins {
        join.abort();
    }
    drop(server);
    Ok(())
}
