//! Requests that must not take the server down, sent to the real
//! `quiverdb serve` binary (its runtime and stacks, not a test's): each
//! gets an answer or a clear `InvalidArgument`, and the process stays up.
//!
//! Covered: flat operator chains and set-operation chains at quiverdb's
//! nesting bounds (answered) and far past them (refused), through the
//! Flight SQL client; a bulk ingest cancelled mid-stream (nothing of it
//! committed); connections past `--max-connections` and connections that
//! never speak HTTP/2 or go idle (closed, and the server still serves); slow
//! statements past the admission bounds (refused, small ones still served).

#![cfg(all(feature = "cli", unix))]
#![allow(clippy::unwrap_used)]

#[path = "common/child.rs"]
mod child;
#[path = "common/flight.rs"]
mod flight;
#[path = "common/ingest.rs"]
mod ingest;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Int64Array, RecordBatch};
use arrow_flight::error::FlightError;
use arrow_flight::sql::{TableExistsOption, TableNotExistOption};
use arrow_schema::{DataType, Field, Schema};
use child::Server;
use flight::{query, status_of, update};
use futures::StreamExt;
use ingest::ingest_command;
use quiverdb::server::{MAX_EXPRESSION_DEPTH, MAX_SET_OPERATION_BRANCHES};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn chain(n: usize, term: impl Fn(usize) -> String, op: &str) -> String {
    (0..n).map(term).collect::<Vec<_>>().join(op)
}

#[test]
fn deep_statements_answer_up_to_the_bounds_and_are_refused_past_them() {
    let mut server = Server::in_memory(&[]);
    runtime().block_on(async {
        let mut c = server.client().await;
        update(&mut c, "CREATE TABLE t (id BIGINT PRIMARY KEY, s VARCHAR)").await.unwrap();
        update(&mut c, "INSERT INTO t VALUES (1, 'a'), (2, 'b')").await.unwrap();
        let first = |sql: String| {
            let mut c = c.clone();
            async move { query(&mut c, &sql).await.map(|b| b.column(0).as_primitive::<Int64Type>().value(0)) }
        };
        let mut c = c.clone();

        // At the bound (the 4 KB chain that used to abort the server is
        // half of it): answered.
        let plus = |n| format!("SELECT {}", chain(n, |_| "1".into(), " + "));
        assert_eq!(first(plus(MAX_EXPRESSION_DEPTH)).await.unwrap(), MAX_EXPRESSION_DEPTH as i64);
        let and =
            format!("SELECT COUNT(*) FROM t WHERE {}", chain(2_000, |i| format!("id >= {}", -(i as i64)), " AND "));
        assert_eq!(first(and).await.unwrap(), 2);
        let union = chain(MAX_SET_OPERATION_BRANCHES, |i| format!("SELECT {i} AS v"), " UNION ALL ");
        let all = query(&mut c, &union).await.unwrap();
        let got: BTreeSet<i64> = all.column(0).as_primitive::<Int64Type>().iter().flatten().collect();
        assert_eq!(got, (0..MAX_SET_OPERATION_BRANCHES as i64).collect());
        assert_eq!(all.num_rows(), MAX_SET_OPERATION_BRANCHES);

        // Past it, up to 100 times: refused with the bound named.
        for sql in [
            plus(MAX_EXPRESSION_DEPTH + 1),
            plus(200_000),
            format!("SELECT COUNT(*) FROM t WHERE {}", chain(100_000, |i| format!("id = {i}"), " OR ")),
            format!("SELECT {} FROM t", chain(100_000, |_| "s".into(), " || ")),
        ] {
            let status = status_of(query(&mut c, &sql).await);
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            assert!(status.message().contains(&format!("more than {MAX_EXPRESSION_DEPTH} levels deep")), "{status:?}");
        }
        let status = status_of(query(&mut c, &chain(200_000, |i| format!("SELECT {i}"), " UNION ALL ")).await);
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("joins 200000 branches"), "{status:?}");

        assert_eq!(first("SELECT COUNT(*) FROM t".into()).await.unwrap(), 2);
    });
    assert!(server.alive());
}

/// CPU seconds process `pid` has used (user and system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / 100.0
}

/// CPU seconds process `pid` uses in the next second.
fn cpu_in_a_second(pid: u32) -> f64 {
    let before = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(1));
    cpu_seconds(pid) - before
}

/// A query abandoned by its client (its call dropped, then its
/// connection) and one cancelled with `CANCEL <id>` stop using the
/// server's CPU at once, rather than computing for hours.
#[test]
fn abandoned_and_cancelled_queries_stop_using_the_servers_cpu() {
    const ENDLESS: &str = "SELECT COUNT(*) FROM generate_series(1, 100000000000) WHERE value < 0";
    let mut server = Server::in_memory(&[]);
    let rt = runtime();
    let running = |c: &flight::Client| {
        let mut c = c.clone();
        async move {
            let sql = "SELECT id FROM system.queries WHERE sql LIKE '%generate_series(1, 100000000000)%' AND sql NOT LIKE '%system.queries%'";
            let batch = query(&mut c, sql).await.unwrap();
            (0..batch.num_rows()).map(|i| batch.column(0).as_primitive::<Int64Type>().value(i)).collect::<Vec<_>>()
        }
    };
    rt.block_on(async {
        let admin = server.client().await;
        for how in ["goes away", "is cancelled"] {
            let mut c = server.client().await;
            let info = c.execute(ENDLESS.into(), None).await.unwrap();
            let ticket = info.endpoint[0].ticket.clone().unwrap();
            let mut stream = c.do_get(ticket).await.unwrap();
            let reading = tokio::spawn(async move { stream.next().await.map(|r| r.map(drop)) });
            let mut ids = Vec::new();
            for _ in 0..200 {
                ids = running(&admin).await;
                if !ids.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(ids.len(), 1, "{how}: the query is listed once");
            let pid = server.child.id();
            let busy = tokio::task::spawn_blocking(move || cpu_in_a_second(pid)).await.unwrap();
            assert!(busy > 0.5, "{how}: the query was not computing ({busy:.2} s of CPU in a second)");
            if how == "goes away" {
                reading.abort();
                drop(c);
            } else {
                update(&mut admin.clone(), &format!("CANCEL {}", ids[0])).await.unwrap();
                let heard = tokio::time::timeout(Duration::from_secs(30), reading).await.unwrap().unwrap();
                assert_eq!(status_of(heard.unwrap()).code(), tonic::Code::Cancelled);
            }
            for _ in 0..200 {
                if running(&admin).await.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(running(&admin).await.is_empty(), "{how}: still listed");
            let pid = server.child.id();
            let idle = tokio::task::spawn_blocking(move || cpu_in_a_second(pid)).await.unwrap();
            assert!(idle < 0.3, "{how}: the server used {idle:.2} s of CPU in a second after the query stopped");
        }
    });
    assert!(server.alive());
}

/// `quiverdb serve --in-memory` with `extra` arguments, its stderr piped
/// and no NO_COLOR.
fn serve_with_stderr(extra: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_quiverdb"))
        .args(["serve", "--in-memory", "--listen", "127.0.0.1:0"])
        .args(extra)
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The lines `reader` (a server's stderr) shows up to the one saying where
/// it serves, and that address.
fn until_serving(reader: &mut std::io::BufReader<std::process::ChildStderr>) -> (Vec<String>, std::net::SocketAddr) {
    use std::io::BufRead;
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the server ended: {lines:#?}");
        let addr = line
            .split("Flight SQL on ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| c.is_whitespace() || c == '"').next()?.parse().ok());
        lines.push(line);
        if let Some(addr) = addr {
            return (lines, addr);
        }
    }
}

async fn client_of(addr: std::net::SocketAddr) -> flight::Client {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    arrow_flight::sql::client::FlightSqlServiceClient::new(channel)
}

/// The server logs one line per statement (its outcome, rows and time),
/// without colours when stderr is not a terminal, as JSON when asked; and
/// a stderr that closes (`quiverdb serve 2>&1 | tee log`, tee gone) loses
/// lines, not the server: it keeps serving and stops cleanly.
#[test]
fn statements_are_logged_and_a_closed_stderr_does_not_stop_the_server() {
    use std::io::BufRead;
    let rt = runtime();
    let mut child = serve_with_stderr(&[]);
    let mut reader = std::io::BufReader::new(child.stderr.take().unwrap());
    let (startup, addr) = until_serving(&mut reader);
    assert!(startup.iter().all(|l| !l.contains('\x1b')), "colours off a terminal: {startup:?}");
    rt.block_on(async {
        let mut c = client_of(addr).await;
        query(&mut c, "SELECT 41 + 1 AS answer").await.unwrap();
        update(&mut c, "CREATE TABLE logged (x BIGINT)").await.unwrap();
        assert_eq!(update(&mut c, "INSERT INTO logged VALUES (1), (2), (3)").await.unwrap(), 3);
        assert!(query(&mut c, "SELECT * FROM nowhere").await.is_err());
    });
    let mut logged = Vec::new();
    while !logged.iter().any(|l: &String| l.contains("failed after")) {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "{logged:#?}");
        logged.push(line);
    }
    let ok = logged.iter().find(|l| l.contains("SELECT 41 + 1 AS answer")).expect("the query's line");
    assert!(ok.contains(" INFO ") && ok.contains(": ok, 1 rows, ") && ok.contains(" ms: "), "{ok}");
    assert!(logged.iter().any(|l| l.contains(" WARN ") && l.contains("nowhere")), "{logged:#?}");
    let insert = logged.iter().find(|l| l.contains("INSERT INTO logged")).expect("the insert's line");
    assert!(insert.contains(": ok, 3 rows, "), "{insert}");

    // The reading end goes away; the server goes on, and stops cleanly.
    drop(reader);
    rt.block_on(async {
        let mut c = client_of(addr).await;
        for _ in 0..20 {
            let answer = query(&mut c, "SELECT 7 AS seven").await.unwrap();
            assert_eq!(answer.column(0).as_primitive::<Int64Type>().value(0), 7);
        }
    });
    assert!(child.try_wait().unwrap().is_none(), "the server died with its stderr");
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    assert!(child.wait().unwrap().success());

    // --log-format json: an object a line.
    let mut child = serve_with_stderr(&["--log-format", "json"]);
    let mut reader = std::io::BufReader::new(child.stderr.take().unwrap());
    let (startup, _) = until_serving(&mut reader);
    for line in &startup {
        assert!(
            line.starts_with('{') && line.trim_end().ends_with('}') && line.contains("\"level\":\"INFO\""),
            "{line}"
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

fn ids(range: std::ops::Range<i64>) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(range))]).unwrap()
}

/// A bulk ingest the client cancels after sending some batches (the call
/// dropped mid-stream: a gRPC cancel) creates no table and adds no rows.
#[test]
fn a_cancelled_ingest_commits_nothing() {
    let mut server = Server::in_memory(&[]);
    runtime().block_on(async {
        let mut c = server.client().await;
        update(&mut c, "CREATE TABLE kept (id BIGINT)").await.unwrap();
        update(&mut c, "INSERT INTO kept VALUES (1), (2)").await.unwrap();
        for (table, if_not_exist, if_exists) in [
            ("gone", TableNotExistOption::Create, TableExistsOption::Fail),
            ("kept", TableNotExistOption::Fail, TableExistsOption::Append),
            ("kept", TableNotExistOption::Fail, TableExistsOption::Replace),
        ] {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch, FlightError>>(4);
            let input = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
            let mut ingesting = server.client().await;
            let command = ingest_command(table, if_not_exist, if_exists);
            let call = tokio::spawn(async move { ingesting.execute_ingest(command, input).await });
            for i in 0..3 {
                tx.send(Ok(ids(i * 1_000..(i + 1) * 1_000))).await.unwrap();
            }
            // The server has read the batches; the client gives up.
            tokio::time::sleep(Duration::from_millis(500)).await;
            call.abort();
            assert!(call.await.is_err(), "the call was cancelled");
            tokio::time::sleep(Duration::from_millis(500)).await;
            let check = |when: &'static str| {
                let mut c = c.clone();
                async move {
                    let tables = "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'gone'";
                    let got = query(&mut c, tables).await.unwrap();
                    assert_eq!(got.column(0).as_primitive::<Int64Type>().value(0), 0, "{table} {when}");
                    let got = query(&mut c, "SELECT SUM(id), COUNT(*) FROM kept").await.unwrap();
                    assert_eq!(got.column(0).as_primitive::<Int64Type>().value(0), 3, "{table} {when}");
                    assert_eq!(got.column(1).as_primitive::<Int64Type>().value(0), 2, "{table} {when}");
                }
            };
            check("while the input is open").await;
            // The abandoned input ends (its producer goes away).
            drop(tx);
            tokio::time::sleep(Duration::from_millis(500)).await;
            check("once the input is gone").await;
        }
    });
    assert!(server.alive());
}

/// A column of `values` (strings, or raw bytes that are not UTF-8) as
/// `data_type` (Utf8 or Utf8View), built without arrow's validation, as a
/// client that does not validate would send it.
fn text_batch(values: &[&[u8]], data_type: DataType) -> RecordBatch {
    let binary: arrow_array::ArrayRef = match data_type {
        DataType::Utf8View => Arc::new(arrow_array::BinaryViewArray::from_iter_values(values.iter().copied())),
        _ => Arc::new(arrow_array::BinaryArray::from_iter_values(values.iter().copied())),
    };
    let data = binary.to_data().into_builder().data_type(data_type.clone());
    // SAFETY: only encoded and sent, never read as strings here.
    let data = unsafe { data.build_unchecked() };
    let schema = Arc::new(Schema::new(vec![Field::new("t", data_type, false)]));
    RecordBatch::try_new(schema, vec![arrow_array::make_array(data)]).unwrap()
}

/// Text that is not UTF-8, sent in either string layout and inline or out
/// of line in a view, is refused with an error naming it, and creates no
/// table; valid text of the same shapes goes in whole.
#[test]
fn ingested_text_that_is_not_utf8_is_refused() {
    let mut server = Server::in_memory(&[]);
    runtime().block_on(async {
        let mut c = server.client().await;
        let cases: [&[u8]; 3] =
            [b"ok\xc3", b"a value longer than twelve bytes \xff", "ünïcode, longer than twelve".as_bytes()];
        for data_type in [DataType::Utf8View, DataType::Utf8] {
            for bad in cases {
                let values: Vec<&[u8]> = vec![b"fine", bad, b"also a fine value, longer than twelve"];
                let command = ingest_command("texts", TableNotExistOption::Create, TableExistsOption::Fail);
                let batch = text_batch(&values, data_type.clone());
                let got = c.execute_ingest(command, futures::stream::iter([Ok(batch)])).await;
                let valid = std::str::from_utf8(bad).is_ok();
                match got {
                    Ok(rows) => {
                        assert!(valid, "{data_type} {bad:?}: {rows} rows went in");
                        let got = query(&mut c, "SELECT t FROM texts ORDER BY t").await.unwrap();
                        let mut expected: Vec<&str> = values.iter().map(|v| std::str::from_utf8(v).unwrap()).collect();
                        expected.sort_unstable();
                        let got = arrow_cast::cast(got.column(0), &DataType::Utf8).unwrap();
                        assert_eq!(got.as_string::<i32>().iter().flatten().collect::<Vec<_>>(), expected);
                        update(&mut c, "DROP TABLE texts").await.unwrap();
                    }
                    Err(e) => {
                        let status = status_of(Err::<(), _>(e));
                        assert!(!valid, "{data_type} {bad:?}: {status:?}");
                        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
                        assert!(status.message().contains("UTF-8") || status.message().contains("utf-8"), "{status:?}");
                        let tables = "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'texts'";
                        let got = query(&mut c, tables).await.unwrap();
                        assert_eq!(got.column(0).as_primitive::<Int64Type>().value(0), 0, "{data_type} {bad:?}");
                    }
                }
            }
        }
    });
    assert!(server.alive());
}

/// Reads from `conn` until the server closes it (end of stream or reset),
/// for at most `within`; whether it did.
fn closed_by_server(conn: &mut std::net::TcpStream, within: Duration) -> bool {
    use std::io::Read;
    conn.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

/// Idle connections that never send the HTTP/2 preface are closed after
/// the handshake timeout, and connections past the limit as they are
/// accepted: neither keeps real clients out.
#[test]
fn silent_and_surplus_connections_are_closed() {
    let mut server = Server::in_memory(&["--max-connections", "3", "--handshake-timeout-secs", "2"]);
    let mut silent: Vec<_> = (0..3).map(|_| std::net::TcpStream::connect(server.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    // The fourth is past the limit: closed at once.
    let mut surplus = std::net::TcpStream::connect(server.addr).unwrap();
    assert!(closed_by_server(&mut surplus, Duration::from_secs(1)), "a connection past the limit stays open");
    // The silent ones are closed once the handshake timeout passes.
    for conn in &mut silent {
        assert!(closed_by_server(conn, Duration::from_secs(5)), "a silent connection stays open");
    }
    runtime().block_on(async {
        let mut c = server.client().await;
        let got = query(&mut c, "SELECT 41 + 1").await.unwrap();
        assert_eq!(got.column(0).as_primitive::<Int64Type>().value(0), 42);
    });
    assert!(server.alive());
}

/// A connection that speaks HTTP/2 and then sends nothing (answering no
/// ping) is closed once idle for `--idle-timeout-secs`, long before the
/// keepalive would; a client whose connection was closed so reconnects on
/// its next request, and a connection streaming a result is not idle.
#[test]
fn idle_connections_are_closed() {
    use std::io::Write;

    let mut server = Server::in_memory(&["--idle-timeout-secs", "2"]);
    let mut quiet = std::net::TcpStream::connect(server.addr).unwrap();
    // The preface and an empty SETTINGS frame.
    quiet.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    quiet.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).unwrap();
    assert!(closed_by_server(&mut quiet, Duration::from_secs(8)), "an idle connection stays open");
    runtime().block_on(async {
        let mut c = server.client().await;
        let got = query(&mut c, "SELECT 41 + 1").await.unwrap();
        assert_eq!(got.column(0).as_primitive::<Int64Type>().value(0), 42);
        tokio::time::sleep(Duration::from_secs(4)).await;
        let got = query(&mut c, "SELECT 43 + 1").await.unwrap();
        assert_eq!(got.column(0).as_primitive::<Int64Type>().value(0), 44);
        // A result read slowly over longer than the timeout arrives whole.
        update(&mut c, "CREATE TABLE t AS SELECT value AS v FROM generate_series(1, 4000000)").await.unwrap();
        let info = c.execute("SELECT v FROM t".into(), None).await.unwrap();
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        let mut stream = c.do_get(ticket).await.unwrap();
        let mut rows = 0;
        let mut batches = 0;
        while let Some(batch) = futures::StreamExt::next(&mut stream).await {
            rows += batch.unwrap().num_rows();
            batches += 1;
            if batches == 1 {
                tokio::time::sleep(Duration::from_secs(4)).await;
            }
        }
        assert_eq!(rows, 4_000_000);
    });
    assert!(server.alive());
}

/// 48 clients each start a cross join that would run for hours. Two run,
/// four wait, the rest are refused at once with `ResourceExhausted`; a
/// large query from another client is refused too, while `SELECT 1` and a
/// query over a small table answer at once (their lane is not the joins').
/// Once the joins' clients go away, their slots are free again.
#[test]
fn slow_statements_wait_their_turn_and_small_ones_are_not_starved() {
    let mut server = Server::in_memory(&["--max-running-queries", "2", "--max-queued-queries", "4"]);
    runtime().block_on(async {
        let mut c = server.client().await;
        update(&mut c, "CREATE TABLE big AS SELECT value AS v FROM generate_series(1, 200000)").await.unwrap();
        update(&mut c, "CREATE TABLE small (v BIGINT)").await.unwrap();
        update(&mut c, "INSERT INTO small VALUES (1), (2), (3)").await.unwrap();
        let join = "SELECT COUNT(*) FROM big a CROSS JOIN big b WHERE a.v + b.v = 0";
        let mut joins = Vec::new();
        for _ in 0..48 {
            let mut client = server.client().await;
            joins.push(tokio::spawn(async move { query(&mut client, join).await }));
        }
        // 42 are refused at once; 6 are still running or waiting.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut refused = 0;
        while refused < 42 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            refused = 0;
            for join in &joins {
                if join.is_finished() {
                    refused += 1;
                }
            }
        }
        let (done, pending): (Vec<_>, Vec<_>) = joins.into_iter().partition(|j| j.is_finished());
        assert_eq!((done.len(), pending.len()), (42, 6));
        for join in done {
            let status = status_of(join.await.unwrap());
            assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
            assert!(status.message().contains("2 heavy statements are running and 4 wait"), "{status:?}");
        }
        let light = |sql: &'static str| {
            let mut c = c.clone();
            async move {
                let answer = tokio::time::timeout(Duration::from_secs(10), query(&mut c, sql)).await;
                answer.unwrap_or_else(|_| panic!("{sql} starved behind the joins")).unwrap()
            }
        };
        assert_eq!(light("SELECT 1").await.column(0).as_primitive::<Int64Type>().value(0), 1);
        assert_eq!(light("SELECT SUM(v) FROM small").await.column(0).as_primitive::<Int64Type>().value(0), 6);
        let status = status_of(query(&mut c, "SELECT SUM(v) FROM big").await);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");

        for join in &pending {
            join.abort();
        }
        for join in pending {
            assert!(join.await.is_err(), "a join was cancelled");
        }
        // The cancelled joins' slots and places in the queue are free: six
        // new joins are admitted or wait; a seventh is refused.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut again = Vec::new();
        for _ in 0..6 {
            let mut client = server.client().await;
            again.push(tokio::spawn(async move { query(&mut client, join).await }));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(again.iter().all(|j| !j.is_finished()), "a new join was refused");
        let status = status_of(query(&mut c, join).await);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        for join in again {
            join.abort();
        }
    });
    assert!(server.alive());
}
