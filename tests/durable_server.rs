//! Durability through the server: the `quiverdb` binary on a data
//! directory, fed over Flight SQL (ingest, DDL, DML), stopped gracefully
//! (SIGTERM) and killed (SIGKILL), started again on the same directory.
//!
//! The crash test kills a server that is being written to with
//! `--sync always` at random moments, 24 times over, and checks after each
//! restart that every acknowledged write is there and nothing else
//! appeared (only the one write in flight at the kill may go either way).

#![cfg(all(feature = "cli", unix))]
#![allow(clippy::unwrap_used)]

#[path = "common/child.rs"]
mod child;
#[path = "common/ingest.rs"]
mod ingest;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_flight::error::FlightError;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandStatementIngest, TableExistsOption, TableNotExistOption};
use arrow_schema::{DataType, Field, Schema};
use futures::{TryStreamExt, stream};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::transport::{Channel, Endpoint};

use child::Server;

type Client = FlightSqlServiceClient<Channel>;

/// A test's data directory (emptied first), removed when the test passes
/// (its log segments alone take 64 MiB or more); kept for a look when it
/// fails. Declared before the servers using it, so dropped after them.
struct DataDir(PathBuf);

impl std::ops::Deref for DataDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn data_dir(name: &str) -> DataDir {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("durable_server").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    DataDir(dir)
}

fn batch(ids: std::ops::Range<i64>) -> RecordBatch {
    let schema =
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, true)]));
    let names = StringArray::from_iter(ids.clone().map(|i| (i % 3 != 0).then(|| format!("row {i}"))));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(ids)), Arc::new(names)]).unwrap()
}

fn ingest_command(table: &str, create: bool) -> CommandStatementIngest {
    if create {
        ingest::ingest_command(table, TableNotExistOption::Create, TableExistsOption::Fail)
    } else {
        ingest::ingest_command(table, TableNotExistOption::Fail, TableExistsOption::Append)
    }
}

async fn ingest(client: &mut Client, table: &str, create: bool, batch: RecordBatch) -> Result<i64, FlightError> {
    client.execute_ingest(ingest_command(table, create), stream::iter([Ok(batch)])).await
}

/// The ids of `sql`'s first column, in result order.
async fn ids(client: &mut Client, sql: &str) -> Vec<i64> {
    let info = client.execute(sql.into(), None).await.unwrap();
    let mut out = Vec::new();
    for endpoint in &info.endpoint {
        let batches: Vec<RecordBatch> =
            client.do_get(endpoint.ticket.clone().unwrap()).await.unwrap().try_collect().await.unwrap();
        for b in batches {
            out.extend(b.column(0).as_primitive::<Int64Type>().values().iter().copied());
        }
    }
    out
}

/// The whole of table `t`, as text, in id order.
async fn contents(client: &mut Client) -> Vec<(i64, Option<String>)> {
    let info = client.execute("SELECT id, name FROM t ORDER BY id".into(), None).await.unwrap();
    let mut out = Vec::new();
    for endpoint in &info.endpoint {
        let batches: Vec<RecordBatch> =
            client.do_get(endpoint.ticket.clone().unwrap()).await.unwrap().try_collect().await.unwrap();
        for b in batches {
            let (id, name) = (b.column(0).as_primitive::<Int64Type>(), b.column(1).as_string::<i32>());
            out.extend((0..b.num_rows()).map(|i| (id.value(i), name.is_valid(i).then(|| name.value(i).to_string()))));
        }
    }
    out
}

/// A runtime whose worker keeps the client's connections answering (a
/// stopping server waits for its clients to close their connections).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
}

#[test]
fn data_survives_a_graceful_stop_and_a_kill() {
    let dir = data_dir("restart");
    let rt = runtime();
    let server = Server::start(&dir, &[]);
    let before = rt.block_on(async {
        let mut c = server.client().await;
        ingest(&mut c, "t", true, batch(0..50_000)).await.unwrap();
        ingest(&mut c, "t", false, batch(50_000..60_000)).await.unwrap();
        assert_eq!(c.execute_update("DELETE FROM t WHERE id % 7 = 0".into(), None).await.unwrap(), 8572);
        c.execute_update("UPDATE t SET name = 'changed' WHERE id < 10".into(), None).await.unwrap();
        c.execute_update("CREATE TABLE gone (x BIGINT)".into(), None).await.unwrap();
        c.execute_update("DROP TABLE gone".into(), None).await.unwrap();
        contents(&mut c).await
    });
    assert_eq!(before.len(), 60_000 - 8572);
    let log = server.stop();
    assert!(log.iter().any(|l| l.contains("checkpoint written")), "{log:#?}");

    // Restarted from the shutdown checkpoint alone.
    let server = Server::start(&dir, &[]);
    assert!(server.startup.iter().any(|l| l.contains("0 log records replayed")), "{:#?}", server.startup);
    // Recovery says what it loads, table by table.
    let loaded = "recovery: table 1/1 't' loaded: 51428 rows in 1 shards";
    assert!(server.startup.iter().any(|l| l.contains(loaded)), "{:#?}", server.startup);
    let after = rt.block_on(async {
        let mut c = server.client().await;
        let after = contents(&mut c).await;
        let tables = ids(&mut c, "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'gone'").await;
        assert_eq!(tables, [0]);
        ingest(&mut c, "t", false, batch(60_000..61_000)).await.unwrap();
        c.execute_update("DELETE FROM t WHERE id BETWEEN 100 AND 199".into(), None).await.unwrap();
        after
    });
    assert_eq!(after, before);
    let expected: Vec<_> = rt.block_on(async { contents(&mut server.client().await).await });
    server.kill();

    // Restarted from the checkpoint plus the log.
    let server = Server::start(&dir, &[]);
    assert!(!server.startup.iter().any(|l| l.contains(" 0 log records replayed")), "{:#?}", server.startup);
    assert!(server.startup.iter().any(|l| l.contains("recovery: replaying ")), "{:#?}", server.startup);
    let got = rt.block_on(async { contents(&mut server.client().await).await });
    assert_eq!(got, expected);
    server.stop();
}

/// `quiverdb serve` on `dir`, which must refuse to start: its stderr.
fn refused_start(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_quiverdb"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_second_server_on_the_same_directory_is_refused() {
    let dir = data_dir("locked");
    let first = Server::start(&dir, &[]);
    let stderr = refused_start(&dir);
    assert!(
        stderr.contains("in use by another quiverdb") && stderr.contains(&first.child.id().to_string()),
        "{stderr}"
    );
    first.stop();
}

/// The reproduction: an acknowledged DELETE (`--sync always`) is
/// the last record of the log, and a bit of it flips on the disk. The
/// server refuses to start, naming the segment and the offset, and leaves
/// the directory as it is; `--recover-truncate` starts it without the
/// damaged record, saying so.
#[test]
fn a_damaged_last_log_record_is_refused_unless_recover_truncate_drops_it() {
    let dir = data_dir("damaged-tail");
    let rt = runtime();
    let server = Server::start(&dir, &[]);
    rt.block_on(async {
        let mut c = server.client().await;
        ingest(&mut c, "t", true, batch(0..100)).await.unwrap();
        assert_eq!(c.execute_update("DELETE FROM t WHERE id < 10".into(), None).await.unwrap(), 10);
    });
    server.kill();
    // The last non-zero byte of the newest segment ends the DELETE's record.
    let segment = std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    bytes[end - 6] ^= 0x08;
    std::fs::write(&segment, &bytes).unwrap();

    let stderr = refused_start(&dir);
    let name = segment.file_name().unwrap().to_string_lossy().to_string();
    assert!(stderr.contains(&name) && stderr.contains("checksum") && stderr.contains("--recover-truncate"), "{stderr}");
    assert_eq!(std::fs::read(&segment).unwrap(), bytes, "refusing changed nothing");

    let server = Server::start(&dir, &["--recover-truncate"]);
    assert!(server.startup.iter().any(|l| l.contains("--recover-truncate: dropped")), "{:#?}", server.startup);
    let left = rt.block_on(async { ids(&mut server.client().await, "SELECT COUNT(*) FROM t").await });
    assert_eq!(left, [100], "the damaged DELETE was dropped, as asked");
    server.stop();
}

/// A server asked to stop while a client runs a query that would take
/// hours: the query gets the grace period (`--shutdown-grace-secs`), is
/// then cancelled (its client hears so), and the server writes its
/// checkpoint and exits, within seconds of the grace.
#[test]
fn a_stop_with_a_busy_client_cancels_after_the_grace_and_checkpoints() {
    let dir = data_dir("busy-stop");
    let rt = runtime();
    let server = Server::start(&dir, &["--shutdown-grace-secs", "2"]);
    let mut stream = rt.block_on(async {
        let mut c = server.client().await;
        ingest(&mut c, "t", true, batch(0..1000)).await.unwrap();
        let endless = "SELECT COUNT(*) FROM generate_series(1, 100000000000) WHERE value < 0";
        let info = c.execute(endless.into(), None).await.unwrap();
        c.do_get(info.endpoint[0].ticket.clone().unwrap()).await.unwrap()
    });
    let reading = rt.spawn(async move { futures::StreamExt::next(&mut stream).await });
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(500)).await });
    let asked = std::time::Instant::now();
    let log = server.stop();
    let took = asked.elapsed();
    assert!(took >= Duration::from_secs(2), "the query did not get its grace: {took:?}");
    assert!(took < Duration::from_secs(15), "the stop took {took:?}: {log:#?}");
    assert!(log.iter().any(|l| l.contains("queries still running after")), "{log:#?}");
    assert!(log.iter().any(|l| l.contains("checkpoint written")), "{log:#?}");
    let heard = rt.block_on(reading).unwrap().expect("an error, not the end of the stream");
    match heard {
        Err(FlightError::Tonic(status)) => assert_eq!(status.code(), tonic::Code::Cancelled, "{status}"),
        other => panic!("the client heard {other:?}"),
    }
    // The rows were checkpointed: the next start replays nothing.
    let server = Server::start(&dir, &[]);
    assert!(server.startup.iter().any(|l| l.contains(" 0 log records replayed")), "{:#?}", server.startup);
    server.stop();
}

/// What the writer knows when the server dies.
#[derive(Default)]
struct Acknowledged {
    present: BTreeSet<i64>,
    /// Ids the write in flight at the kill touched: present or not.
    maybe: BTreeSet<i64>,
}

/// One write of the crash test's writer.
#[derive(Debug, Clone)]
enum Op {
    Ingest(std::ops::Range<i64>),
    Delete(std::ops::Range<i64>),
}

impl Acknowledged {
    fn acknowledged(&mut self, op: &Op) {
        match op {
            Op::Ingest(ids) => self.present.extend(ids.clone()),
            Op::Delete(ids) => ids.clone().for_each(|id| {
                self.present.remove(&id);
            }),
        }
    }

    /// The write in flight when the server died may or may not have happened.
    fn in_flight(&mut self, op: &Op) {
        match op {
            Op::Ingest(ids) => self.maybe.extend(ids.clone()),
            Op::Delete(ids) => ids.clone().for_each(|id| {
                if self.present.remove(&id) {
                    self.maybe.insert(id);
                }
            }),
        }
    }
}

#[test]
fn killed_servers_keep_every_acknowledged_write_and_nothing_else() {
    let dir = data_dir("crash");
    let rt = runtime();
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut known = Acknowledged::default();
    let mut next = 0i64;
    let mut acknowledged_writes = 0;
    for cycle in 0..24 {
        let server = Server::start(&dir, &["--sync", "always"]);
        // What the last incarnation acknowledged must all be there, and
        // nothing it never wrote.
        rt.block_on(async {
            let mut c = server.client().await;
            if cycle == 0 {
                c.execute_update("CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR)".into(), None).await.unwrap();
            } else {
                let got: BTreeSet<i64> = ids(&mut c, "SELECT id FROM t").await.into_iter().collect();
                let missing: Vec<_> = known.present.difference(&got).take(5).collect();
                assert!(missing.is_empty(), "cycle {cycle}: acknowledged ids lost, e.g. {missing:?}");
                let extra: Vec<_> =
                    got.difference(&known.present).filter(|id| !known.maybe.contains(id)).take(5).collect();
                assert!(extra.is_empty(), "cycle {cycle}: ids never acknowledged appeared, e.g. {extra:?}");
                known.present = got;
            }
            known.maybe.clear();
        });
        // A writer thread writes and reports; the test kills the server.
        let addr = server.addr;
        let (tx, rx) = mpsc::channel::<(Op, bool)>();
        let start = next;
        let writer = std::thread::spawn(move || {
            runtime().block_on(async move {
                let channel = Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
                let mut c = FlightSqlServiceClient::new(channel);
                let mut id = start;
                for round in 0.. {
                    let op = if round % 5 == 4 {
                        Op::Delete(id - 300..id - 200)
                    } else {
                        let n = 1 + (round * 37 % 400);
                        id += n;
                        Op::Ingest(id - n..id)
                    };
                    // Announce the write, then report its acknowledgement.
                    if tx.send((op.clone(), false)).is_err() {
                        return;
                    }
                    let outcome = match &op {
                        Op::Ingest(ids) => ingest(&mut c, "t", false, batch(ids.clone())).await.map(drop),
                        Op::Delete(ids) => {
                            let sql = format!("DELETE FROM t WHERE id >= {} AND id < {}", ids.start, ids.end);
                            c.execute_update(sql, None).await.map(drop)
                        }
                    };
                    if outcome.is_err() || tx.send((op, true)).is_err() {
                        return;
                    }
                }
            });
        });
        std::thread::sleep(Duration::from_millis(rng.random_range(50..400)));
        server.kill();
        writer.join().unwrap();
        let mut in_flight = None;
        for (op, acked) in rx.try_iter() {
            if let Op::Ingest(ids) = &op {
                next = next.max(ids.end);
            }
            if acked {
                known.acknowledged(&op);
                acknowledged_writes += 1;
                in_flight = None;
            } else {
                in_flight = Some(op);
            }
        }
        if let Some(op) = in_flight {
            known.in_flight(&op);
        }
    }
    assert!(acknowledged_writes > 100, "only {acknowledged_writes} writes were acknowledged");
}

/// Column defaults and views are part of what a client defined: after a
/// graceful stop and after a kill (replaying the log, or reading the
/// checkpoint a graceful stop writes), `INSERT` uses the defaults and the
/// views answer.
#[test]
fn defaults_and_views_survive_a_graceful_stop_and_a_kill() {
    let dir = data_dir("defaults-and-views");
    let rt = runtime();
    let setup = [
        "CREATE TABLE d (id BIGINT NOT NULL, a BIGINT NOT NULL DEFAULT 5, b BIGINT DEFAULT 7, c VARCHAR DEFAULT 'x')",
        "CREATE VIEW big AS SELECT id FROM d WHERE a > 4",
        "CREATE VIEW big_twice AS SELECT id * 2 AS id FROM big",
    ];
    let server = Server::start(&dir, &[]);
    rt.block_on(async {
        let mut c = server.client().await;
        for sql in setup {
            c.execute_update(sql.into(), None).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        c.execute_update("INSERT INTO d (id) VALUES (1)".into(), None).await.unwrap();
    });
    server.kill();
    let check = |server: &Server, next: i64| {
        rt.block_on(async {
            let mut c = server.client().await;
            c.execute_update(format!("INSERT INTO d (id) VALUES ({next})"), None).await.unwrap();
            let all = ids(&mut c, "SELECT id FROM d WHERE a = 5 AND b = 7 AND c = 'x' ORDER BY id").await;
            assert_eq!(all, (1..=next).collect::<Vec<_>>(), "every row took the defaults");
            assert_eq!(ids(&mut c, "SELECT id FROM big ORDER BY id").await, (1..=next).collect::<Vec<_>>());
            assert_eq!(
                ids(&mut c, "SELECT id FROM big_twice ORDER BY id").await,
                (1..=next).map(|i| 2 * i).collect::<Vec<_>>()
            );
        })
    };
    // After a kill: the log is replayed.
    let server = Server::start(&dir, &[]);
    check(&server, 2);
    server.stop();
    // After a graceful stop: the checkpoint is read.
    let server = Server::start(&dir, &[]);
    check(&server, 3);
    rt.block_on(async {
        let mut c = server.client().await;
        c.execute_update("DROP VIEW big_twice".into(), None).await.unwrap();
    });
    server.stop();
    let server = Server::start(&dir, &[]);
    rt.block_on(async {
        let mut c = server.client().await;
        assert_eq!(ids(&mut c, "SELECT id FROM big ORDER BY id").await, vec![1, 2, 3]);
        let gone = c.execute("SELECT * FROM big_twice".into(), None).await.unwrap_err();
        assert!(gone.to_string().contains("big_twice"), "{gone}");
    });
    server.stop();
}

/// Schemas, UNIQUE constraints and every ALTER TABLE, through the real
/// server: they hold after a kill (the log is replayed) and after a
/// graceful stop (the checkpoint is read).
#[test]
fn schemas_constraints_and_alters_survive_a_graceful_stop_and_a_kill() {
    let dir = data_dir("schemas-and-alters");
    let rt = runtime();
    let setup = [
        "CREATE SCHEMA sales",
        "CREATE TABLE sales.orders (id BIGINT NOT NULL PRIMARY KEY, code VARCHAR UNIQUE, amount DOUBLE)",
        "INSERT INTO sales.orders VALUES (1, 'a', 1.5), (2, 'b', 2.5)",
        "ALTER TABLE sales.orders RENAME COLUMN amount TO total",
        "ALTER TABLE sales.orders ADD COLUMN region VARCHAR DEFAULT 'eu'",
        "ALTER TABLE sales.orders DROP COLUMN total",
        "ALTER TABLE sales.orders RENAME TO bookings",
        "CREATE SCHEMA scratch",
        "CREATE TABLE scratch.tmp (a INT)",
        "DROP SCHEMA scratch CASCADE",
    ];
    let server = Server::start(&dir, &[]);
    rt.block_on(async {
        let mut c = server.client().await;
        for sql in setup {
            c.execute_update(sql.into(), None).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    });
    server.kill();
    let check = |server: &Server, next: i64| {
        rt.block_on(async {
            let mut c = server.client().await;
            c.execute_update(format!("INSERT INTO sales.bookings (id, code) VALUES ({next}, 'c{next}')"), None)
                .await
                .unwrap();
            let all = ids(&mut c, "SELECT id FROM sales.bookings WHERE region = 'eu' ORDER BY id").await;
            assert_eq!(all, (1..=next).collect::<Vec<_>>(), "every row has the added column's default");
            let duplicate = c.execute_update("INSERT INTO sales.bookings (id, code) VALUES (99, 'a')".into(), None);
            let e = duplicate.await.expect_err("a taken code");
            assert!(e.to_string().contains("duplicate unique key"), "{e}");
            let gone = c.execute("SELECT * FROM scratch.tmp".into(), None).await.expect_err("a dropped schema");
            assert!(gone.to_string().contains("scratch"), "{gone}");
            let old = c.execute("SELECT total FROM sales.bookings".into(), None).await.expect_err("a dropped column");
            assert!(old.to_string().contains("total"), "{old}");
        })
    };
    let server = Server::start(&dir, &[]);
    check(&server, 3);
    server.stop();
    let server = Server::start(&dir, &[]);
    check(&server, 4);
    server.stop();
}
