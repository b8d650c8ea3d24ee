//! The server's memory as users see it: the resident set (RSS) of a real
//! `quiverdb serve` process while the seed table is loaded through Flight
//! SQL bulk ingest, rebuilt, dropped, and loaded again.
//!
//! ```text
//! cargo build --release --bin quiverdb --example memory_bench
//! target/release/examples/memory_bench [--rows 2000000] [--cycles 10] [--binary target/release/quiverdb]
//! ```
//!
//! Starts the binary (in memory, on a free loopback port), reads its
//! `VmRSS` from `/proc`, and reports: RSS at start; after the first ingest
//! once background rebuilds settle (RSS unchanged for two seconds); after
//! `DROP TABLE`; and after each further load/drop cycle. Next to it, the
//! table's main storage bytes (`quiverdb.system.tables`), the Arrow bytes
//! sent, and the time of the first load and of a few queries through the
//! client (to compare allocators by speed as well). The last line is a
//! JSON object with the figures.
//!
//! ```text
//! target/release/examples/memory_bench --tpch 1 [--data-dir /tmp/tpch-data]
//! ```
//!
//! With `--tpch SF`: TPC-H at scale factor SF, generated in-process by
//! `tpchgen-arrow`, ingested through two Flight SQL streams at once; prints
//! each table's load time and rows/s, its main storage and bytes/row, every
//! column's encodings and bytes/row, and the RSS growth after the load and
//! after dropping every table. With `--data-dir`, the server is durable
//! (`--sync always`); the data directory's size and its `CATALOG`'s are
//! printed, and the server is killed and restarted from it, timed until it
//! answers a query. With `--memory-limit 256M` (passed to the server), a
//! few memory-hungry queries (a sort of every comment, a group by order,
//! a join, a 1 GB string) run after the load, each with the server's RSS
//! sampled every 5 ms: the peak growth shows whether the limit holds.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[path = "common/seed.rs"]
mod seed;
#[path = "common/server.rs"]
mod server;
#[path = "common/tpch.rs"]
mod tpch;

use server::{Client, connect, ingest, largest_mappings, memory_figures, mib, query, rows_of, scalar, start, update};

/// Queries timed after the first load, through the client.
const QUERIES: [(&str, &str); 4] = [
    ("SUM", "SELECT SUM(value) FROM seed"),
    ("GROUP BY name", "SELECT name, COUNT(*) FROM seed GROUP BY name"),
    ("10,000-row range", "SELECT * FROM seed WHERE id BETWEEN 1000000 AND 1009999"),
    ("SELECT * (every row)", "SELECT * FROM seed"),
];

/// Runs of each query.
const QUERY_RUNS: usize = 9;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let flags = seed::flags()?;
    let binary = server::binary(&flags)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    match flags.iter().find(|(name, _)| name == "tpch") {
        Some((_, sf)) => {
            let sf: f64 = sf.parse().map_err(|e| format!("--tpch {sf}: {e}"))?;
            let data_dir = flags.iter().find(|(name, _)| name == "data-dir").map(|(_, d)| PathBuf::from(d));
            let memory_limit = flags.iter().find(|(name, _)| name == "memory-limit").map(|(_, l)| l.clone());
            tpch(&runtime, &binary, sf, data_dir, memory_limit)
        }
        None => seed_cycles(&runtime, &binary, &flags),
    }
}

/// The seed table loaded, rebuilt and dropped `--cycles` times.
fn seed_cycles(
    runtime: &tokio::runtime::Runtime,
    binary: &Path,
    flags: &[(String, String)],
) -> Result<(), Box<dyn std::error::Error>> {
    let rows = seed::flag(flags, "rows", 2_000_000)?;
    let cycles = seed::flag(flags, "cycles", 10)?;
    let (server, port) = start(binary, &["--in-memory"])?;
    let mut client = runtime.block_on(connect(port))?;
    let batches = seed::batches(rows);
    let arrow_bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();

    // Warm up: the code of ingest, the queries and DROP paged in (the
    // binary's pages count in RSS once run), as on a server in use.
    runtime.block_on(ingest(&mut client, "seed", seed::batches(10_000)))?;
    for (_, sql) in QUERIES {
        runtime.block_on(rows_of(&mut client, sql))?;
    }
    runtime.block_on(update(&mut client, "DROP TABLE seed"))?;
    let start = server.settled_rss()?;
    let start_anon = server.anon()?;
    let mut loads = Vec::new();
    let mut after_load = Vec::new();
    let mut after_drop = Vec::new();
    let (mut after_load_anon, mut after_drop_anon) = (Vec::new(), Vec::new());
    let mut main_bytes = 0;
    let mut query_ms = Vec::new();
    for cycle in 0..cycles.max(1) {
        let t = Instant::now();
        runtime.block_on(ingest(&mut client, "seed", batches.clone()))?;
        loads.push(t.elapsed().as_secs_f64());
        after_load.push(server.settled_rss()?);
        after_load_anon.push(server.anon()?);
        if cycle == 0 {
            for (name, sql) in QUERIES {
                let mut ms = Vec::new();
                for _ in 0..QUERY_RUNS {
                    let t = Instant::now();
                    runtime.block_on(rows_of(&mut client, sql))?;
                    ms.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                ms.sort_by(f64::total_cmp);
                query_ms.push((name, ms[ms.len() / 2]));
            }
            main_bytes = runtime
                .block_on(scalar(
                    &mut client,
                    "SELECT CAST(main_bytes AS BIGINT) FROM quiverdb.system.tables WHERE table_name = 'seed'",
                ))
                .unwrap_or(-1);
        }
        runtime.block_on(update(&mut client, "DROP TABLE seed"))?;
        after_drop.push(server.settled_rss()?);
        after_drop_anon.push(server.anon()?);
        eprintln!(
            "cycle {cycle}: load {:.2} s, RSS after load {:.1} MiB, after drop {:.1} MiB",
            loads[cycle],
            mib(after_load[cycle]),
            mib(after_drop[cycle])
        );
    }
    // Where the remaining bytes are, as the server sees them.
    for (name, bytes) in runtime.block_on(memory_figures(&mut client)).unwrap_or_default() {
        eprintln!("system.memory {name}: {:.1} MiB", mib(bytes.max(0) as u64));
    }
    if let Ok(maps) = largest_mappings(server.0.id()) {
        for (rss, name) in maps {
            eprintln!("mapping {name}: {:.1} MiB resident", mib(rss));
        }
    }
    let growth = |v: u64| mib(v) - mib(start);
    let anon = |v: u64| mib(v) - mib(start_anon);
    println!("| | RSS, MiB | anonymous RSS, MiB |");
    println!("|---|---:|---:|");
    println!("| at start (after a warm-up load, queries and drop) | {:.1} | {:.1} |", mib(start), mib(start_anon));
    println!(
        "| growth after the first load and rebuild | {:.1} | {:.1} |",
        growth(after_load[0]),
        anon(after_load_anon[0])
    );
    println!("| growth after DROP TABLE | {:.1} | {:.1} |", growth(after_drop[0]), anon(after_drop_anon[0]));
    println!(
        "| growth after {} load/drop cycles | {:.1} | {:.1} |",
        after_drop.len(),
        growth(*after_drop.last().unwrap_or(&start)),
        anon(*after_drop_anon.last().unwrap_or(&start_anon))
    );
    println!();
    println!("| | MiB |");
    println!("|---|---:|");
    println!("| main storage of the table | {:.1} |", main_bytes as f64 / (1u64 << 20) as f64);
    println!("| Arrow bytes ingested | {:.1} |", mib(arrow_bytes as u64));
    println!();
    println!("| query (through Flight SQL, median of {QUERY_RUNS}) | ms |");
    println!("|---|---:|");
    println!("| first load (ingest of {rows} rows) | {:.0} |", loads[0] * 1000.0);
    for (name, ms) in &query_ms {
        println!("| {name} | {ms:.2} |");
    }
    println!(
        "{{\"rows\":{rows},\"rss_start\":{start},\"rss_after_load\":{},\"rss_after_drop\":{},\"rss_after_cycles\":{},\
         \"main_bytes\":{main_bytes},\"arrow_bytes\":{arrow_bytes},\"load_secs\":{:.3}}}",
        after_load[0],
        after_drop[0],
        after_drop.last().unwrap_or(&start),
        loads[0]
    );
    drop(server);
    Ok(())
}

/// TPC-H at scale factor `sf` loaded through Flight SQL bulk ingest (two
/// streams at once), measured, and dropped; with `data_dir`, into a
/// durable server (`--sync always`), then killed and restarted from its
/// data directory.
fn tpch(
    runtime: &tokio::runtime::Runtime,
    binary: &Path,
    sf: f64,
    data_dir: Option<PathBuf>,
    memory_limit: Option<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    let t = Instant::now();
    // Batches of 8,192 rows: one Flight message each (arrow-flight splits
    // larger ones by rows, and each part of a string view column then
    // carries all of its buffers).
    let tables = tpch::generate(sf, 8192, 2);
    let rows: usize = tables.iter().map(tpch::Table::rows).sum();
    let arrow_bytes: usize = tables.iter().map(tpch::Table::arrow_bytes).sum();
    eprintln!(
        "generated TPC-H SF {sf}: {rows} rows, {:.1} MiB of Arrow in {:.1} s",
        mib(arrow_bytes as u64),
        t.elapsed().as_secs_f64()
    );
    let warm_up = tpch::generate(0.01, 8192, 2);
    let dir = data_dir.as_ref().map(|d| d.display().to_string());
    let mut args: Vec<&str> = match &dir {
        Some(d) => {
            if Path::new(d).exists() {
                std::fs::remove_dir_all(d)?;
            }
            vec!["--data-dir", d, "--sync", "always"]
        }
        None => vec!["--in-memory"],
    };
    if let Some(limit) = &memory_limit {
        args.extend(["--memory-limit", limit.as_str()]);
    }
    let (mut server, port) = start(binary, &args)?;
    let client = runtime.block_on(connect(port))?;
    runtime.block_on(load_all(&client, &warm_up))?;
    runtime.block_on(drop_all(&client))?;
    let start_rss = server.settled_rss()?;
    let start_anon = server.anon()?;

    let t = Instant::now();
    let load_times = runtime.block_on(load_all(&client, &tables))?;
    let load_secs = t.elapsed().as_secs_f64();
    let after_load = server.settled_rss()?;
    let after_load_anon = server.anon()?;
    let mut client = client;
    let table_stats = runtime.block_on(query(
        &mut client,
        "SELECT table_name, CAST(rows AS BIGINT), CAST(main_bytes AS BIGINT), CAST(total_bytes AS BIGINT), \
         CAST(main_rows AS BIGINT) FROM quiverdb.system.tables",
    ))?;
    let column_stats = runtime.block_on(query(
        &mut client,
        "SELECT table_name, column_name, data_type, encodings, CAST(main_bytes AS BIGINT) \
         FROM quiverdb.system.columns",
    ))?;

    println!("TPC-H SF {sf}: {rows} rows, {:.1} MiB of Arrow", mib(arrow_bytes as u64));
    println!();
    println!("| table | rows | load s (2 streams) | rows/s | rows in main | main MB | main bytes/row | all MB |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let (mut main_total, mut all_total) = (0i64, 0i64);
    let mut table_rows = std::collections::HashMap::new();
    for table in tpch::TABLES {
        let Some(stat) = table_stats.iter().find(|r| r[0] == table) else { continue };
        let (n, main, total, main_rows) =
            (stat[1].parse::<i64>()?, stat[2].parse::<i64>()?, stat[3].parse::<i64>()?, stat[4].parse::<i64>()?);
        table_rows.insert(table, main_rows);
        main_total += main;
        all_total += total;
        let secs = load_times.iter().find(|(name, _)| *name == table).map_or(f64::NAN, |(_, s)| *s);
        println!(
            "| {table} | {n} | {secs:.2} | {:.2}M | {main_rows} | {:.1} | {:.2} | {:.1} |",
            n as f64 / secs / 1e6,
            main as f64 / 1e6,
            main as f64 / main_rows.max(1) as f64,
            total as f64 / 1e6
        );
    }
    println!(
        "| all | {rows} | {load_secs:.2} | {:.2}M | | {:.1} | | {:.1} |",
        rows as f64 / load_secs / 1e6,
        main_total as f64 / 1e6,
        all_total as f64 / 1e6
    );
    println!();
    println!("| column | type | encodings | main MB | main bytes/row |");
    println!("|---|---|---|---:|---:|");
    for table in tpch::TABLES {
        for c in column_stats.iter().filter(|r| r[0] == table) {
            let main = c[4].parse::<i64>()?;
            let n = table_rows.get(table).copied().unwrap_or(1).max(1);
            println!(
                "| {table}.{} | {} | {} | {:.1} | {:.2} |",
                c[1],
                c[2],
                c[3],
                main as f64 / 1e6,
                main as f64 / n as f64
            );
        }
    }

    if let Some(limit) = &memory_limit {
        println!();
        println!("| query (--memory-limit {limit}) | outcome | ms | peak RSS growth, MiB |");
        println!("|---|---|---:|---:|");
        for (name, sql) in HEAVY_QUERIES {
            let before = server.settled_rss()?;
            let t = Instant::now();
            let (outcome, peak) = peak_rss_during(server.0.id(), || runtime.block_on(rows_of(&mut client, sql)));
            let outcome = match outcome {
                Ok(rows) => format!("{rows} rows"),
                Err(e) => {
                    let text = e.to_string();
                    let cut: String = text.chars().take(90).collect();
                    format!("error: {}", cut.replace('|', "/").replace('\n', " "))
                }
            };
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            println!("| {name} | {outcome} | {ms:.0} | {:.1} |", mib(peak.saturating_sub(before)));
        }
    }

    let mut restart = None;
    if let Some(d) = &data_dir {
        let catalog = std::fs::metadata(d.join("CATALOG")).map(|m| m.len()).unwrap_or(0);
        let total = dir_bytes(d)?;
        drop(server);
        let t = Instant::now();
        let (restarted, port) = start(binary, &args)?;
        let mut c = runtime.block_on(connect(port))?;
        let lineitem = runtime.block_on(scalar(&mut c, "SELECT COUNT(*) FROM lineitem"))?;
        let secs = t.elapsed().as_secs_f64();
        let rss = restarted.settled_rss()?;
        restart = Some((catalog, total, secs, rss, lineitem));
        server = restarted;
        client = c;
    }
    runtime.block_on(drop_all(&client))?;
    let after_drop = server.settled_rss()?;

    println!();
    println!("| server RSS | MiB | anonymous, MiB |");
    println!("|---|---:|---:|");
    println!("| at start (after a warm-up load and drop) | {:.1} | {:.1} |", mib(start_rss), mib(start_anon));
    println!(
        "| growth after the load and rebuild | {:.1} | {:.1} |",
        mib(after_load) - mib(start_rss),
        mib(after_load_anon) - mib(start_anon)
    );
    println!("| growth after dropping every table | {:.1} | |", mib(after_drop) - mib(start_rss));
    if let Some((catalog, total, secs, rss, lineitem)) = restart {
        println!(
            "| after a restart from the data directory ({secs:.2} s to answer, {lineitem} lineitem rows) | {:.1} | |",
            mib(rss)
        );
        println!();
        println!("data directory: {:.1} MB, CATALOG {:.1} KB", total as f64 / 1e6, catalog as f64 / 1e3);
    }
    println!(
        "{{\"sf\":{sf},\"rows\":{rows},\"arrow_bytes\":{arrow_bytes},\"load_secs\":{load_secs:.3},\"main_bytes\":{main_total},\
         \"rss_start\":{start_rss},\"rss_after_load\":{after_load},\"rss_after_drop\":{after_drop},\"durable\":{}}}",
        data_dir.is_some()
    );
    Ok(())
}

/// Queries that need much memory (sorts, hash tables, a huge value), run
/// with `--memory-limit` to see how far each raises the server's RSS.
const HEAVY_QUERIES: [(&str, &str); 6] = [
    ("sort every lineitem comment", "SELECT l_comment, l_orderkey FROM lineitem ORDER BY l_comment"),
    ("group lineitem by order", "SELECT l_orderkey, SUM(l_quantity), COUNT(*) FROM lineitem GROUP BY l_orderkey"),
    (
        "join lineitem with orders",
        "SELECT o_orderpriority, COUNT(*) FROM lineitem JOIN orders ON l_orderkey = o_orderkey GROUP BY o_orderpriority",
    ),
    ("distinct lineitem comments", "SELECT COUNT(DISTINCT l_comment) FROM lineitem"),
    ("a 1 GB string", "SELECT length(repeat('x', 1000000000))"),
    ("every lineitem row", "SELECT * FROM lineitem"),
];

/// Runs `f` while a thread samples the RSS of process `pid` every 5 ms;
/// returns what `f` returned and the highest RSS seen.
fn peak_rss_during<R>(pid: u32, f: impl FnOnce() -> R) -> (R, u64) {
    let stop = std::sync::atomic::AtomicBool::new(false);
    let rss = || -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(0, |kb| kb * 1024)
    };
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = rss();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss());
                std::thread::sleep(Duration::from_millis(5));
            }
            peak.max(rss())
        });
        let out = f();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (out, sampler.join().unwrap_or(0))
    })
}

/// Loads every table, two ingest streams at once (the largest tables
/// first, each to the stream with fewer rows so far); returns each table's
/// load time.
async fn load_all(
    client: &Client,
    tables: &[tpch::Table],
) -> Result<Vec<(&'static str, f64)>, Box<dyn std::error::Error>> {
    let mut order: Vec<&tpch::Table> = tables.iter().collect();
    order.sort_by_key(|t| std::cmp::Reverse(t.rows()));
    let mut lanes: [(usize, Vec<&tpch::Table>); 2] = Default::default();
    for t in order {
        let lane = if lanes[0].0 <= lanes[1].0 { 0 } else { 1 };
        lanes[lane].0 += t.rows();
        lanes[lane].1.push(t);
    }
    let runs = lanes.into_iter().map(|(_, tables)| {
        let mut client = client.clone();
        async move {
            let mut times = Vec::new();
            for t in tables {
                let start = Instant::now();
                ingest(&mut client, t.name, t.batches.clone()).await?;
                times.push((t.name, start.elapsed().as_secs_f64()));
            }
            Ok::<_, Box<dyn std::error::Error>>(times)
        }
    });
    Ok(futures::future::try_join_all(runs).await?.into_iter().flatten().collect())
}

async fn drop_all(client: &Client) -> Result<(), Box<dyn std::error::Error>> {
    let mut client = client.clone();
    for t in tpch::TABLES {
        update(&mut client, &format!("DROP TABLE IF EXISTS {t}")).await?;
    }
    Ok(())
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> Result<u64, Box<dyn std::error::Error>> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() { dir_bytes(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}
