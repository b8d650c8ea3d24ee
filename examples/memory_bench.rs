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

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandStatementIngest, TableDefinitionOptions, TableExistsOption, TableNotExistOption};
use futures::TryStreamExt;
use tonic::transport::Endpoint;

#[path = "common/seed.rs"]
mod seed;

type Client = FlightSqlServiceClient<tonic::transport::Channel>;

/// Queries timed after the first load, through the client.
const QUERIES: [(&str, &str); 4] = [
    ("SUM", "SELECT SUM(value) FROM seed"),
    ("GROUP BY name", "SELECT name, COUNT(*) FROM seed GROUP BY name"),
    ("10,000-row range", "SELECT * FROM seed WHERE id BETWEEN 1000000 AND 1009999"),
    ("SELECT * (every row)", "SELECT * FROM seed"),
];

/// Runs of each query.
const QUERY_RUNS: usize = 9;

/// The server process, stopped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Server {
    /// Resident set size in bytes.
    fn rss(&self) -> Result<u64, Box<dyn std::error::Error>> {
        self.status("VmRSS:")
    }

    /// Resident anonymous memory (the heap and stacks, not the binary's
    /// code pages) in bytes.
    fn anon(&self) -> Result<u64, Box<dyn std::error::Error>> {
        self.status("RssAnon:")
    }

    fn status(&self, field: &str) -> Result<u64, Box<dyn std::error::Error>> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id()))?;
        let kb = status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .ok_or_else(|| format!("no {field}"))?;
        Ok(kb * 1024)
    }

    /// RSS once it has not changed by more than 1 MiB for two seconds (at
    /// most a minute): background rebuilds and allocator purges done.
    fn settled_rss(&self) -> Result<u64, Box<dyn std::error::Error>> {
        let start = Instant::now();
        let mut last = self.rss()?;
        let mut stable_since = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(250));
            let now = self.rss()?;
            if now.abs_diff(last) > 1 << 20 {
                stable_since = Instant::now();
                last = now;
            } else if stable_since.elapsed() >= Duration::from_secs(2) {
                return Ok(now);
            }
        }
        Ok(last)
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let flags = seed::flags()?;
    let rows = seed::flag(&flags, "rows", 2_000_000)?;
    let cycles = seed::flag(&flags, "cycles", 10)?;
    let binary = match flags.iter().find(|(name, _)| name == "binary") {
        Some((_, path)) => std::path::PathBuf::from(path),
        // target/release/examples/memory_bench → target/release/quiverdb
        None => std::env::current_exe()?.parent().and_then(|p| p.parent()).ok_or("no target dir")?.join("quiverdb"),
    };
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let server = Server(
        Command::new(&binary)
            .args(["serve", "--in-memory", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut client = runtime.block_on(connect(port))?;
    let batches = seed::batches(rows);
    let arrow_bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();

    // Warm up: the code of ingest, the queries and DROP paged in (the
    // binary's pages count in RSS once run), as on a server in use.
    runtime.block_on(ingest(&mut client, seed::batches(10_000)))?;
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
        runtime.block_on(ingest(&mut client, batches.clone()))?;
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

async fn connect(port: u16) -> Result<Client, Box<dyn std::error::Error>> {
    let endpoint = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))?;
    let start = Instant::now();
    loop {
        match endpoint.connect().await {
            Ok(channel) => {
                return Ok(FlightSqlServiceClient::new(channel));
            }
            Err(_) if start.elapsed() < Duration::from_secs(20) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => return Err(format!("the server did not start: {e}").into()),
        }
    }
}

async fn ingest(
    client: &mut Client,
    batches: Vec<arrow_array::RecordBatch>,
) -> Result<i64, Box<dyn std::error::Error>> {
    let command = CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Create.into(),
            if_exists: TableExistsOption::Fail.into(),
        }),
        table: "seed".into(),
        schema: None,
        catalog: None,
        temporary: false,
        transaction_id: None,
        options: Default::default(),
    };
    let stream = futures::stream::iter(batches.into_iter().map(Ok));
    Ok(client.execute_ingest(command, stream).await?)
}

async fn update(client: &mut Client, sql: &str) -> Result<i64, Box<dyn std::error::Error>> {
    Ok(client.execute_update(sql.into(), None).await?)
}

async fn rows_of(client: &mut Client, sql: &str) -> Result<usize, Box<dyn std::error::Error>> {
    let info = client.execute(sql.into(), None).await?;
    let mut rows = 0;
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.ok_or("no ticket")?;
        let batches: Vec<_> = client.do_get(ticket).await?.try_collect().await?;
        rows += batches.iter().map(|b| b.num_rows()).sum::<usize>();
    }
    Ok(rows)
}

async fn memory_figures(client: &mut Client) -> Result<Vec<(String, i64)>, Box<dyn std::error::Error>> {
    let info = client.execute("SELECT name, bytes FROM quiverdb.system.memory".into(), None).await?;
    let ticket = info.endpoint.first().and_then(|e| e.ticket.clone()).ok_or("no ticket")?;
    let batches: Vec<_> = client.do_get(ticket).await?.try_collect().await?;
    let mut out = Vec::new();
    for b in batches {
        let (names, bytes) = (b.column(0).as_string::<i32>(), b.column(1).as_primitive::<Int64Type>());
        out.extend((0..b.num_rows()).map(|i| (names.value(i).to_string(), bytes.value(i))));
    }
    Ok(out)
}

async fn scalar(client: &mut Client, sql: &str) -> Result<i64, Box<dyn std::error::Error>> {
    let info = client.execute(sql.into(), None).await?;
    let ticket = info.endpoint.first().and_then(|e| e.ticket.clone()).ok_or("no ticket")?;
    let batches: Vec<_> = client.do_get(ticket).await?.try_collect().await?;
    let batch = batches.first().ok_or("no rows")?;
    Ok(batch.column(0).as_primitive::<Int64Type>().value(0))
}

/// The server's eight largest mappings by resident bytes (from
/// `/proc/PID/smaps`): what holds the RSS that is not the allocator's.
fn largest_mappings(pid: u32) -> Result<Vec<(u64, String)>, Box<dyn std::error::Error>> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut maps = Vec::new();
    let mut name = String::new();
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            let fields: Vec<&str> = line.split_whitespace().collect();
            name = format!("{} {}", fields[0], fields.get(5).copied().unwrap_or("[anon]"));
        } else if let Some(kb) = line.strip_prefix("Rss:") {
            let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse()?;
            maps.push((kb * 1024, name.clone()));
        }
    }
    maps.sort_by_key(|m| std::cmp::Reverse(m.0));
    maps.truncate(8);
    Ok(maps)
}
