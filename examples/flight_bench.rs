//! Flight SQL figures: a quiverdb server in this process, measured from
//! Python through ADBC (examples/flight_bench.py), next to the same queries
//! run in-process.
//!
//! ```text
//! cargo run --release --example flight_bench -- [--rows 2000000] [--python PATH]
//! ```
//!
//! Python needs pyarrow and adbc-driver-flightsql (tests/python/requirements.txt);
//! by default the virtual environment the test suite creates is used when
//! it exists, else `python3`.
//!
//! Reports, as a markdown table: ingest of the seed table through
//! `adbc_ingest` (rows/s, median of three after a warm-up), the round trip
//! of Q2, Q4 and Q9 from Python against their in-process time, the
//! full-table export rate (Arrow bytes/s) and a 1,000-row × 250-column
//! result end to end. Every client figure is measured twice: through ADBC
//! (the Flight SQL driver, written in Go) and through pyarrow's C++ Flight
//! client; the round trip of `SELECT 1` shows each client's fixed cost.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use quiverdb::Database;
use quiverdb::server::flight::{FlightOptions, serve};

const QUERIES: [(&str, &str); 4] = [
    ("floor", "SELECT 1"),
    ("Q2", "SELECT SUM(value) FROM t"),
    ("Q4", "SELECT COUNT(*) FROM t WHERE value > 500000"),
    ("Q9", "SELECT id, value FROM t WHERE id BETWEEN 1000000 AND 1000100"),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let rows: usize = flag("--rows").map_or(Ok(2_000_000), |r| r.parse())?;
    let runs: usize = flag("--runs").map_or(Ok(31), |r| r.parse())?;
    let python = flag("--python").map_or_else(default_python, PathBuf::from);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/flight_bench.py");

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let db = Database::new();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = runtime.spawn(serve(db.clone(), listener, FlightOptions::default(), async {
        let _ = stopped.await;
    }));

    eprintln!("server on {addr}; client: {}", python.display());
    let mut child = Command::new(&python)
        .args([script, "--uri", &format!("grpc://{addr}"), "--rows", &rows.to_string(), "--runs", &runs.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", python.display()))?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let ingested = lines.next().ok_or("the client stopped before ingesting")??;
    eprintln!("client: {ingested}");

    // In-process reference on the same table, once the background rebuilds
    // have moved the ingested rows into main storage.
    db.wait_for_background_rebuilds();
    let ctx = quiverdb::session_context(&db);
    let mut in_process = Vec::new();
    for (name, sql) in QUERIES {
        let mut times = Vec::with_capacity(runs);
        for _ in 0..=runs {
            let start = Instant::now();
            runtime.block_on(async { ctx.sql(sql).await?.collect().await })?;
            times.push(start.elapsed().as_secs_f64() * 1000.0);
        }
        times.remove(0);
        times.sort_by(f64::total_cmp);
        in_process.push((name, times[times.len() / 2]));
    }

    child.stdin.take().ok_or("no stdin")?.write_all(b"\n")?;
    let figures = lines.next().ok_or("the client stopped early")??;
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the client failed: {status}").into());
    }
    let _ = stop.send(());
    runtime.block_on(server)??;

    println!("client figures: {figures}");
    let figure = |key: &str| -> Result<f64, String> {
        let pattern = format!("\"{key}\": ");
        figures
            .split(&pattern)
            .nth(1)
            .and_then(|rest| rest.split([',', '}']).next())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .ok_or(format!("no {key} in the client's figures"))
    };
    println!();
    println!("| figure | in-process | ADBC (Go driver) | pyarrow.flight (C++) | target |");
    println!("|---|---|---|---|---|");
    for (name, ms) in in_process {
        let (adbc, flight) = (figure(&format!("adbc_{name}_ms"))?, figure(&format!("flight_{name}_ms"))?);
        let target = if name == "floor" { "(the client's fixed cost)" } else { "within 1 ms of in-process" };
        println!(
            "| {name} round trip | {ms:.2} ms | {adbc:.2} ms ({:+.2}) | {flight:.2} ms ({:+.2}) | {target} |",
            adbc - ms,
            flight - ms
        );
    }
    println!(
        "| full-table export ({:.0} MB) | | {:.2} GB/s | {:.2} GB/s | ≥ 1 GB/s |",
        figure("export_bytes")? / 1e6,
        figure("adbc_export_gb_per_s")?,
        figure("flight_export_gb_per_s")?
    );
    println!(
        "| 1,000 × 250 result | | {:.2} ms | {:.2} ms | ≤ 4 ms |",
        figure("adbc_wide_ms")?,
        figure("flight_wide_ms")?
    );
    println!("| ingest ({rows} rows) | | {:.2}M rows/s | | ≥ 10M rows/s |", figure("ingest_rows_per_s")? / 1e6);
    Ok(())
}

/// The test suite's virtual environment if it exists, else `python3`.
fn default_python() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"), PathBuf::from);
    let venv = target.join("tmp/python-venv/bin/python");
    if venv.exists() { venv } else { PathBuf::from("python3") }
}
