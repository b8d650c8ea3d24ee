//! A real `quiverdb serve` process for the benchmark examples: started on
//! a free loopback port, measured by its resident set (from `/proc`), and
//! the Flight SQL calls the examples make against it.

// Shared by several examples, each using part of it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandStatementIngest, TableDefinitionOptions, TableExistsOption, TableNotExistOption};
use futures::TryStreamExt;
use tonic::transport::Endpoint;

pub(crate) type Client = FlightSqlServiceClient<tonic::transport::Channel>;
pub(crate) type BoxError = Box<dyn std::error::Error>;

/// The server process, stopped when dropped.
pub(crate) struct Server(pub(crate) Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Server {
    /// Resident set size in bytes.
    pub(crate) fn rss(&self) -> Result<u64, BoxError> {
        self.status("VmRSS:")
    }

    /// Resident anonymous memory (the heap and stacks, not the binary's
    /// code pages) in bytes.
    pub(crate) fn anon(&self) -> Result<u64, BoxError> {
        self.status("RssAnon:")
    }

    fn status(&self, field: &str) -> Result<u64, BoxError> {
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
    pub(crate) fn settled_rss(&self) -> Result<u64, BoxError> {
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

pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// The binary to run: `--binary`, else `quiverdb` next to the example's
/// directory (target/release/examples/x → target/release/quiverdb).
pub(crate) fn binary(flags: &[(String, String)]) -> Result<PathBuf, BoxError> {
    Ok(match flags.iter().find(|(name, _)| name == "binary") {
        Some((_, path)) => PathBuf::from(path),
        None => std::env::current_exe()?.parent().and_then(|p| p.parent()).ok_or("no target dir")?.join("quiverdb"),
    })
}

/// Starts `binary serve` with `args` on a free loopback port.
pub(crate) fn start(binary: &Path, args: &[&str]) -> Result<(Server, u16), BoxError> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let listen = format!("127.0.0.1:{port}");
    let server = Server(
        Command::new(binary)
            .arg("serve")
            .args(args)
            .args(["--listen", &listen])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?,
    );
    Ok((server, port))
}

/// A client of the server on `port`, retrying while it starts.
pub(crate) async fn connect(port: u16) -> Result<Client, BoxError> {
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

/// Bulk ingest of `batches` into a new table `table`.
pub(crate) async fn ingest(
    client: &mut Client,
    table: &str,
    batches: Vec<arrow_array::RecordBatch>,
) -> Result<i64, BoxError> {
    let command = CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Create.into(),
            if_exists: TableExistsOption::Fail.into(),
        }),
        table: table.into(),
        schema: None,
        catalog: None,
        temporary: false,
        transaction_id: None,
        options: Default::default(),
    };
    let stream = futures::stream::iter(batches.into_iter().map(Ok));
    Ok(client.execute_ingest(command, stream).await?)
}

pub(crate) async fn update(client: &mut Client, sql: &str) -> Result<i64, BoxError> {
    Ok(client.execute_update(sql.into(), None).await?)
}

/// Rows of `sql`'s result.
pub(crate) async fn rows_of(client: &mut Client, sql: &str) -> Result<usize, BoxError> {
    let info = client.execute(sql.into(), None).await?;
    let mut rows = 0;
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.ok_or("no ticket")?;
        let batches: Vec<_> = client.do_get(ticket).await?.try_collect().await?;
        rows += batches.iter().map(|b| b.num_rows()).sum::<usize>();
    }
    Ok(rows)
}

/// Every value of every row of `sql`'s result, as text.
pub(crate) async fn query(client: &mut Client, sql: &str) -> Result<Vec<Vec<String>>, BoxError> {
    let info = client.execute(sql.into(), None).await?;
    let mut out = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.ok_or("no ticket")?;
        let batches: Vec<_> = client.do_get(ticket).await?.try_collect().await?;
        for b in batches {
            let columns: Vec<_> = b
                .columns()
                .iter()
                .map(|c| arrow_cast::display::ArrayFormatter::try_new(c.as_ref(), &Default::default()))
                .collect::<Result<_, _>>()?;
            out.extend((0..b.num_rows()).map(|i| columns.iter().map(|c| c.value(i).to_string()).collect()));
        }
    }
    Ok(out)
}

/// `quiverdb.system.memory`: where the server's bytes are, as it sees them.
pub(crate) async fn memory_figures(client: &mut Client) -> Result<Vec<(String, i64)>, BoxError> {
    let rows = query(client, "SELECT name, bytes FROM quiverdb.system.memory").await?;
    // A figure the server cannot tell is NULL: left out.
    Ok(rows.into_iter().filter_map(|r| Some((r[0].clone(), r[1].parse().ok()?))).collect())
}

/// The first value of `sql`'s result, a BIGINT.
pub(crate) async fn scalar(client: &mut Client, sql: &str) -> Result<i64, BoxError> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    let info = client.execute(sql.into(), None).await?;
    let ticket = info.endpoint.first().and_then(|e| e.ticket.clone()).ok_or("no ticket")?;
    let batches: Vec<_> = client.do_get(ticket).await?.try_collect().await?;
    let batch = batches.first().ok_or("no rows")?;
    Ok(batch.column(0).as_primitive::<Int64Type>().value(0))
}

/// The server's eight largest mappings by resident bytes (from
/// `/proc/PID/smaps`): what holds the RSS that is not the allocator's.
pub(crate) fn largest_mappings(pid: u32) -> Result<Vec<(u64, String)>, BoxError> {
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
