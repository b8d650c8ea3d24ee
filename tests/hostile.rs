//! Requests that must not take the server down, sent to the real
//! `quiverdb serve` binary (its runtime and stacks, not a test's): each
//! gets an answer or a clear `InvalidArgument`, and the process stays up.
//!
//! Covered: flat operator chains and set-operation chains at quiverdb's
//! nesting bounds (answered) and far past them (refused), through the
//! Flight SQL client; a bulk ingest cancelled mid-stream (nothing of it
//! committed); connections past `--max-connections` and connections that
//! never speak HTTP/2 (closed, and the server still serves).

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
