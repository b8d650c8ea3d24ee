//! End-to-end tests of the `quiverdb` binary's client commands: each test
//! starts the real Flight SQL server in-process on `127.0.0.1:0` (with a
//! user and password) and runs the built binary against it.
//!
//! Covered: `sql -c` (DDL, DML, queries, several statements, errors, wrong
//! or missing credentials, an unreachable server), the interactive shell
//! fed through a pipe (multi-line statements, help, quit, errors), and
//! `load` of CSV and Parquet files (create, append, column matching and
//! casting, bad input, and that a file failing half-way applies nothing),
//! and TLS (with the test CA of `tests/fixtures/tls`).
//! What the commands did is checked through the database handle and SQL
//! run in-process on the same database.

#![cfg(feature = "cli")]
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Float64Array, Int32Array, RecordBatch, StringArray};
use arrow_cast::pretty::pretty_format_batches;
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use quiverdb::Database;
use quiverdb::server::flight::{Auth, FlightOptions, TlsConfig, serve};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

const USER: &str = "alice";
const PASSWORD: &str = "s3cret";

/// A server on its own runtime; dropping it stops the server.
struct TestServer {
    addr: SocketAddr,
    db: Database,
    shutdown: Option<oneshot::Sender<()>>,
    runtime: Runtime,
}

impl TestServer {
    fn start() -> Self {
        Self::start_with(password_options())
    }

    fn start_with(options: FlightOptions) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let db = Database::new();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        runtime.spawn(serve(db.clone(), listener, options, async move {
            let _ = rx.await;
        }));
        Self { addr, db, shutdown: Some(tx), runtime }
    }

    /// The binary with `args` and this server's address and credentials.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = bare_command();
        command.args(args).args([
            "--connect",
            &format!("grpc://{}", self.addr),
            "--user",
            USER,
            "--password",
            PASSWORD,
        ]);
        command
    }

    /// Runs the binary with `args` (and this server's address and credentials).
    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `sql -c <sql>`, which must succeed; returns its stdout.
    fn sql(&self, sql: &str) -> String {
        let out = self.run(&["sql", "-c", sql]);
        assert!(out.status.success(), "`{sql}` failed: {}", stderr(&out));
        stdout(&out)
    }

    /// The result of `sql` run in-process on the server's database, as a
    /// pretty table.
    fn query(&self, sql: &str) -> String {
        let ctx = quiverdb::session_context(&self.db);
        let batches = self.runtime.block_on(async { ctx.sql(sql).await.unwrap().collect().await.unwrap() });
        pretty_format_batches(&batches).unwrap().to_string()
    }

    fn rows(&self, table: &str) -> usize {
        self.db.table(table).unwrap().row_count()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Options of a server with the user [`USER`] and password [`PASSWORD`].
fn password_options() -> FlightOptions {
    FlightOptions { auth: Auth::Password { user: USER.into(), password: PASSWORD.into() }, ..FlightOptions::default() }
}

/// The binary, without any connection settings from the environment.
fn bare_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_quiverdb"));
    for var in ["QUIVERDB_CONNECT", "QUIVERDB_USER", "QUIVERDB_PASSWORD", "QUIVERDB_TOKEN", "RUST_LOG"] {
        command.env_remove(var);
    }
    command.stdin(Stdio::null());
    command
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh path for `name` in the target's scratch directory (each test
/// uses its own names; a rerun overwrites the files of the last run).
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn write_file(name: &str, contents: &str) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// A table as `pretty_format_batches` prints it, from its lines.
fn table(lines: &[&str]) -> String {
    lines.join("\n")
}

#[test]
fn sql_command_runs_ddl_dml_and_queries() {
    let server = TestServer::start();
    assert!(server.sql("CREATE TABLE t (a BIGINT NOT NULL, b VARCHAR)").starts_with("OK ("));

    let out = server.sql("INSERT INTO t VALUES (1,'x'),(2,NULL)");
    assert!(out.starts_with("2 rows affected ("), "{out}");
    assert_eq!(server.rows("t"), 2);

    let out = server.sql("SELECT * FROM t ORDER BY a");
    let expected = table(&[
        "+---+------+",
        "| a | b    |",
        "+---+------+",
        "| 1 | x    |",
        "| 2 | NULL |",
        "+---+------+",
        "2 rows (",
    ]);
    assert!(out.starts_with(&expected), "{out}");

    // An empty result still shows its columns.
    let out = server.sql("SELECT a FROM t WHERE a > 5");
    assert!(out.starts_with(&table(&["+---+", "| a |", "+---+", "+---+", "0 rows ("])), "{out}");

    // Several statements run in order.
    let out = server.sql("UPDATE t SET b = 'y' WHERE a = 2; DELETE FROM t WHERE a = 1; SELECT b FROM t;");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("1 row affected ("), "{out}");
    assert!(lines[1].starts_with("1 row affected ("), "{out}");
    assert_eq!(lines[2..6], ["+---+", "| b |", "+---+", "| y |"], "{out}");
    assert_eq!(
        server.query("SELECT * FROM t"),
        table(&["+---+---+", "| a | b |", "+---+---+", "| 2 | y |", "+---+---+"])
    );
}

/// Output formats for scripts, NULL told apart from '' in each, `-t`,
/// `-f`, and a query whose one column is a UInt64 named `count` printed as
/// rows, not as an affected-row count.
#[test]
fn sql_formats_nulls_scripts_and_count_columns() {
    let server = TestServer::start();
    server.sql("CREATE TABLE f (id BIGINT NOT NULL, s VARCHAR); INSERT INTO f VALUES (1, 'a,b'), (2, ''), (3, NULL)");
    let select = "SELECT id, s FROM f ORDER BY id";
    let format = |format: &str, extra: &[&str]| {
        let mut args = vec!["sql", "--format", format, "-c", select];
        args.extend_from_slice(extra);
        let out = server.run(&args);
        assert!(out.status.success(), "{format}: {}", stderr(&out));
        stdout(&out)
    };
    assert_eq!(format("csv", &[]), "id,s\n1,\"a,b\"\n2,\"\"\n3,\n");
    assert_eq!(format("tsv", &["-t"]), "1\ta,b\n2\t\n3\t\\N\n");
    assert_eq!(format("json", &[]), "[{\"id\":1,\"s\":\"a,b\"},\n{\"id\":2,\"s\":\"\"},\n{\"id\":3,\"s\":null}]\n");
    assert_eq!(format("jsonl", &[]).lines().nth(2), Some("{\"id\":3,\"s\":null}"));
    assert_eq!(format("markdown", &[]), "| id | s |\n|---|---|\n| 1 | a,b |\n| 2 |  |\n| 3 | NULL |\n");
    assert_eq!(format("csv", &["--null", "<null>", "-t"]), "1,\"a,b\"\n2,\"\"\n3,<null>\n");
    let tuples = format("table", &["-t"]);
    assert_eq!(tuples, "1 | a,b\n2 |\n3 | NULL\n");

    // A query's `count` column is data.
    let counted = server.sql("SELECT CAST(COUNT(*) AS BIGINT UNSIGNED) AS count FROM f");
    assert!(counted.starts_with(&table(&["+-------+", "| count |", "+-------+", "| 3     |"])), "{counted}");

    // -f runs a file's statements, stopping at the first error.
    let script = write_file(
        "script.sql",
        "INSERT INTO f VALUES (4, 'd');\nSELECT COUNT(*) AS n FROM f;\nSELECT * FROM nope;\nINSERT INTO f VALUES (5, 'e');\n",
    );
    let out = server.run(&["sql", "-f", script.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stdout(&out).contains("| 4 |"), "{}", stdout(&out));
    assert!(stderr(&out).contains("nope"), "{}", stderr(&out));
    assert_eq!(server.rows("f"), 4, "the statement after the failing one ran");
}

/// `quiverdb sql -c … | head`: the shell ends quietly when its output
/// is closed (no panic, the status a SIGPIPE gives), and streams the
/// rows it prints rather than holding the result.
#[test]
fn a_closed_output_ends_the_shell_quietly() {
    let server = TestServer::start();
    let mut child = server
        .command(&["sql", "--format", "csv", "-c", "SELECT value FROM generate_series(1, 5000000)"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 64];
    std::io::Read::read_exact(&mut out, &mut first).unwrap();
    assert!(first.starts_with(b"value\n1\n2\n"), "{}", String::from_utf8_lossy(&first));
    drop(out);
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(141), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(done.stderr.is_empty(), "{}", String::from_utf8_lossy(&done.stderr));
}

/// The shell on a terminal (a pseudo-terminal driven by
/// `tests/python/shell_pty.py`): Ctrl-D at a continuation prompt discards
/// the unfinished `DELETE` (the table keeps its rows), Ctrl-C cancels a
/// running statement on the server and the shell goes on, and the history
/// is saved.
#[test]
fn the_shell_on_a_terminal_discards_on_ctrl_d_and_cancels_on_ctrl_c() {
    let server = TestServer::start();
    server.sql("CREATE TABLE z (x BIGINT); INSERT INTO z VALUES (1), (2), (3)");
    let home = scratch("shell-home");
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/shell_pty.py");
    let out = Command::new("python3")
        .args([script, env!("CARGO_BIN_EXE_quiverdb"), &format!("grpc://{}", server.addr), USER, PASSWORD])
        .arg(&home)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains("=== ctrl-d exit 0"), "{text}");
    assert!(text.contains("unfinished statement was discarded"), "{text}");
    assert_eq!(server.rows("z"), 3, "Ctrl-D ran the unfinished DELETE");
    assert!(text.contains("=== ctrl-c exit 0"), "{text}");
    assert!(text.contains("| 42"), "{text}");
    let running = server.sql(
        "SELECT COUNT(*) AS n FROM system.queries WHERE sql LIKE '%100000000000%' AND sql NOT LIKE '%system.queries%'",
    );
    assert!(running.contains("| 0 |"), "the cancelled statement still runs: {running}");
    let history = std::fs::read_to_string(home.join(".quiverdb_history")).unwrap();
    assert!(history.contains("SELECT 42 AS answer;"), "{history}");
}

#[test]
fn sql_command_errors_exit_non_zero() {
    let server = TestServer::start();
    let out = server.run(&["sql", "-c", "SELEC 1"]);
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));
    assert!(stderr(&out).contains("SELEC"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());

    let out = server.run(&["sql", "-c", "SELECT * FROM missing"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("missing"), "{}", stderr(&out));

    // The first failing statement stops the rest.
    let out = server.run(&["sql", "-c", "CREATE TABLE u (x INT); INSERT INTO nope VALUES (1); DROP TABLE u"]);
    assert!(!out.status.success());
    assert!(server.db.table("u").is_ok(), "the statement after the failing one ran");

    let out = server.run(&["sql", "-c", "  ;  -- nothing"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no SQL statement"), "{}", stderr(&out));
}

#[test]
fn sql_authentication_and_connection_errors() {
    let server = TestServer::start();
    let address = format!("grpc://{}", server.addr);

    let out = bare_command()
        .args(["sql", "--connect", &address, "--user", USER, "--password", "wrong", "-c", "SELECT 1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(stderr(&out).trim(), format!("error: cannot authenticate to {address}: invalid user or password"));

    let out = bare_command().args(["sql", "--connect", &address, "-c", "SELECT 1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));

    // A bearer token the server never issued.
    let out =
        bare_command().args(["sql", "--connect", &address, "--token", "forged", "-c", "SELECT 1"]).output().unwrap();
    assert!(!out.status.success());

    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let closed = format!("grpc://{closed}");
    let out = bare_command().args(["sql", "--connect", &closed, "-c", "SELECT 1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with(&format!("error: cannot connect to {closed}: ")), "{}", stderr(&out));
    assert!(stderr(&out).to_lowercase().contains("refused"), "{}", stderr(&out));

    let out = bare_command().args(["sql", "--connect", "ftp://127.0.0.1:1", "-c", "SELECT 1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("unknown scheme 'ftp'"), "{}", stderr(&out));
}

/// A file of `tests/fixtures/tls`.
fn tls_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls").join(name)
}

#[test]
fn sql_over_tls() {
    let tls = TlsConfig {
        cert_pem: std::fs::read(tls_fixture("server.pem")).unwrap(),
        key_pem: std::fs::read(tls_fixture("server.key")).unwrap(),
    };
    let server = TestServer::start_with(FlightOptions { tls: Some(tls), ..password_options() });
    let port = server.addr.port();
    let sql = |address: &str, ca: Option<PathBuf>| {
        let mut command = bare_command();
        command.args(["sql", "--connect", address, "--user", USER, "--password", PASSWORD, "-c", "SELECT 7 AS seven"]);
        match ca {
            Some(path) => command.env("SSL_CERT_FILE", path),
            None => command.env_remove("SSL_CERT_FILE"),
        };
        command.output().unwrap()
    };

    for address in [format!("grpc+tls://localhost:{port}"), format!("https://127.0.0.1:{port}")] {
        let out = sql(&address, Some(tls_fixture("ca.pem")));
        assert!(out.status.success(), "{address}: {}", stderr(&out));
        assert!(stdout(&out).contains("| 7     |"), "{}", stdout(&out));
    }

    // No roots to verify the server with: a clear refusal.
    let address = format!("grpc+tls://localhost:{port}");
    let out = sql(&address, None);
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with(&format!("error: cannot connect to {address}: ")), "{}", stderr(&out));
    assert!(stderr(&out).contains("SSL_CERT_FILE"), "{}", stderr(&out));

    // Roots that did not sign the server's certificate.
    let out = sql(&address, Some(tls_fixture("server.pem")));
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with(&format!("error: cannot connect to {address}: ")), "{}", stderr(&out));
    assert!(stderr(&out).contains("certificate"), "{}", stderr(&out));

    // Plain gRPC to a TLS server fails too.
    let out = sql(&format!("grpc://127.0.0.1:{port}"), None);
    assert!(!out.status.success());
}

/// Runs the interactive shell with `input` piped to it.
fn shell(server: &TestServer, input: &str) -> Output {
    let mut child =
        server.command(&["sql"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn interactive_shell_reads_statements_from_a_pipe() {
    let server = TestServer::start();
    let out = shell(
        &server,
        "SELECT 1 AS one;\nSELECT\n  2 AS two\n;\n\\?\nSELECT 'a;b' AS s; SELECT 3 AS three;\n\\q\nSELECT 4 AS four;\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(&table(&["+-----+", "| one |", "+-----+", "| 1   |", "+-----+", "1 row ("])), "{text}");
    assert!(text.contains(&table(&["+-----+", "| two |", "+-----+", "| 2   |", "+-----+"])), "{text}");
    assert!(text.contains("| a;b |"), "{text}");
    assert!(text.contains("| three |"), "{text}");
    assert!(text.contains("\\q, quit, exit"), "the help is missing: {text}");
    assert!(!text.contains("four"), "a statement after \\q ran: {text}");
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

#[test]
fn interactive_shell_continues_after_errors() {
    let server = TestServer::start();
    let out = shell(
        &server,
        "SELECT * FROM nope;\n\\x\nCREATE TABLE t (a INT);\nINSERT INTO t VALUES (1), (2), (3);\nSELECT count(*) AS n FROM t",
    );
    // From a pipe, the exit code reports that a statement failed.
    assert!(!out.status.success());
    let errors = stderr(&out);
    assert!(errors.contains("error: ") && errors.contains("nope"), "{errors}");
    assert!(errors.contains("unknown command '\\x'"), "{errors}");
    let text = stdout(&out);
    assert!(text.contains("3 rows affected ("), "{text}");
    // The statement without ';' at the end of input still runs.
    assert!(text.contains("| 3 |"), "{text}");
    assert_eq!(server.rows("t"), 3);
}

#[test]
fn interactive_shell_renews_an_expired_token() {
    let ttl = Duration::from_millis(500);
    let server = TestServer::start_with(FlightOptions { token_ttl: ttl, ..password_options() });
    let mut child =
        server.command(&["sql"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"SELECT 1 AS before;\n").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(ttl * 3);
    stdin.write_all(b"SELECT 2 AS after;\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("| before |") && stdout(&out).contains("| after |"), "{}", stdout(&out));
}

#[test]
fn load_csv_creates_then_appends() {
    let server = TestServer::start();
    let csv = write_file("people.csv", "id,name,score\n1,ann,1.5\n2,,2.5\n3,cy,\n");
    let path = csv.to_str().unwrap();

    let out = server.run(&["load", "people", path, "--create"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("loaded 3 rows into people in "), "{}", stdout(&out));
    assert_eq!(server.rows("people"), 3);
    let expected = table(&[
        "+----+------+-------+",
        "| id | name | score |",
        "+----+------+-------+",
        "| 1  | ann  | 1.5   |",
        "| 2  |      | 2.5   |",
        "| 3  | cy   |       |",
        "+----+------+-------+",
    ]);
    assert_eq!(server.query("SELECT * FROM people ORDER BY id"), expected);
    let types = server.query("SELECT arrow_typeof(id) AS i, arrow_typeof(score) AS s FROM people LIMIT 1");
    assert!(types.contains("Int64") && types.contains("Float64"), "{types}");

    // Again without --create: appended.
    let out = server.run(&["load", "people", path]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("loaded 3 rows into people"), "{}", stdout(&out));
    assert_eq!(server.rows("people"), 6);

    // --create on an existing table fails and changes nothing.
    let out = server.run(&["load", "people", path, "--create"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));
    assert_eq!(server.rows("people"), 6);
}

#[test]
fn load_csv_into_a_table_matches_columns_by_name_and_type() {
    let server = TestServer::start();
    server.sql("CREATE TABLE m (a INT NOT NULL, b VARCHAR, c DOUBLE)");
    // Columns in another order and case; `a` is INT (Int32), not the
    // Int64 inference would give.
    let csv = write_file("m.csv", "C,b,a\n0.5,x,1\n,y,2\n");
    let out = server.run(&["load", "m", csv.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = table(&[
        "+---+---+-----+",
        "| a | b | c   |",
        "+---+---+-----+",
        "| 1 | x | 0.5 |",
        "| 2 | y |     |",
        "+---+---+-----+",
    ]);
    assert_eq!(server.query("SELECT * FROM m ORDER BY a"), expected);

    // A column the table does not have.
    let csv = write_file("m_extra.csv", "a,b,c,d\n1,x,0.5,9\n");
    let out = server.run(&["load", "m", csv.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("the table has no column 'd'"), "{}", stderr(&out));
    // A NULL for the NOT NULL column.
    let csv = write_file("m_null.csv", "a,b,c\n,x,0.5\n");
    let out = server.run(&["load", "m", csv.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with("error: reading "), "{}", stderr(&out));
    assert_eq!(server.rows("m"), 2);
}

#[test]
fn load_parquet() {
    let server = TestServer::start();
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int32, false),
        Field::new("v", DataType::Utf8, true),
        Field::new("w", DataType::Float64, true),
    ]));
    let path = scratch("kv.parquet");
    let mut writer = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema.clone(), None).unwrap();
    let n = 100_000;
    for chunk in 0..2 {
        let keys: Vec<i32> = (chunk * n / 2..(chunk + 1) * n / 2).collect();
        let values: Vec<Option<String>> = keys.iter().map(|k| (k % 10 != 0).then(|| format!("v{}", k % 7))).collect();
        let weights: Vec<f64> = keys.iter().map(|&k| f64::from(k) / 4.0).collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(keys)),
                Arc::new(StringArray::from(values)),
                Arc::new(Float64Array::from(weights)),
            ],
        )
        .unwrap();
        writer.write(&batch).unwrap();
    }
    writer.close().unwrap();

    let out = server.run(&["load", "kv", path.to_str().unwrap(), "--create"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with(&format!("loaded {n} rows into kv in ")), "{}", stdout(&out));
    assert_eq!(server.rows("kv"), n as usize);
    let expected = table(&[
        "+--------+------------+--------+------------+",
        "| rows   | sum_k      | null_v | sum_w      |",
        "+--------+------------+--------+------------+",
        "| 100000 | 4999950000 | 10000  | 1249987500 |",
        "+--------+------------+--------+------------+",
    ]);
    let got = server.query(
        "SELECT count(*) AS rows, sum(CAST(k AS BIGINT)) AS sum_k, count(*) - count(v) AS null_v, \
         CAST(sum(w) AS BIGINT) AS sum_w FROM kv",
    );
    assert_eq!(got, expected);
    assert_eq!(
        server.query("SELECT k, v, w FROM kv WHERE k IN (10, 11) ORDER BY k"),
        table(&[
            "+----+----+------+",
            "| k  | v  | w    |",
            "+----+----+------+",
            "| 10 |    | 2.5  |",
            "| 11 | v4 | 2.75 |",
            "+----+----+------+"
        ]),
    );

    // Appending to a table whose column is BIGINT: the Parquet Int32 is cast.
    server.sql("CREATE TABLE wide (k BIGINT NOT NULL, v VARCHAR, w DOUBLE)");
    let out = server.run(&["load", "wide", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.rows("wide"), n as usize);
}

#[test]
fn load_refuses_bad_input() {
    let server = TestServer::start();
    let json = write_file("data.json", "{}");
    let out = server.run(&["load", "t", json.to_str().unwrap(), "--create"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("unknown file type '.json'"), "{}", stderr(&out));

    let missing = scratch("missing.csv");
    let out = server.run(&["load", "t", missing.to_str().unwrap(), "--create"]);
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with(&format!("error: reading {}: ", missing.display())), "{}", stderr(&out));

    let not_parquet = write_file("fake.parquet", "id\n1\n");
    let out = server.run(&["load", "t", not_parquet.to_str().unwrap(), "--create"]);
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with("error: reading "), "{}", stderr(&out));

    let csv = write_file("t.csv", "id\n1\n");
    let out = server.run(&["load", "t", csv.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("table 't' does not exist"), "{}", stderr(&out));
    assert!(server.db.table("t").is_err());

    // A header and no rows creates an empty table.
    let empty = write_file("empty.csv", "id,name\n");
    let out = server.run(&["load", "empty", empty.to_str().unwrap(), "--create"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("loaded 0 rows into empty"), "{}", stdout(&out));
    assert_eq!(server.rows("empty"), 0);

    // A column with no value among the first records is text.
    let blank = write_file("blank.csv", "id,note\n1,\n2,\n");
    let out = server.run(&["load", "blank", blank.to_str().unwrap(), "--create"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let types = server.query("SELECT arrow_typeof(note) AS t, count(note) AS n FROM blank GROUP BY 1");
    assert!(types.contains("Utf8") && types.contains("| 0 "), "{types}");
}

/// A CSV of `good` rows `i,n<i>` and then one that does not parse.
fn csv_failing_after(name: &str, good: usize) -> PathBuf {
    let mut text = String::from("id,name\n");
    for i in 0..good {
        text.push_str(&format!("{i},n{i}\n"));
    }
    text.push_str("oops,bad\n");
    write_file(name, &text)
}

#[test]
fn a_load_failing_half_way_applies_nothing() {
    let server = TestServer::start();
    // More than two batches of 64Ki rows are sent before the bad row.
    let bad = csv_failing_after("half.csv", 150_000);
    let bad = bad.to_str().unwrap();

    for _ in 0..2 {
        let out = server.run(&["load", "half", bad, "--create"]);
        assert!(!out.status.success());
        assert!(stderr(&out).contains("line 150001"), "{}", stderr(&out));
        assert!(server.db.table("half").is_err(), "a failed --create load left a table");
    }

    server.sql("CREATE TABLE half (id BIGINT, name VARCHAR)");
    server.sql("INSERT INTO half VALUES (-1, 'kept')");
    for _ in 0..2 {
        let out = server.run(&["load", "half", bad]);
        assert!(!out.status.success());
        assert_eq!(server.rows("half"), 1, "a failed load appended rows");
    }
}

/// `serve` with an empty or short secret exits at once with the reason
/// (an empty `--token` used to start a server that admitted
/// `authorization: Bearer ` with nothing after it).
#[test]
fn serve_refuses_empty_and_short_secrets() {
    let cases: [(&[&str], &str); 3] = [
        (&["--token", ""], "empty"),
        (&["--token", "short"], "shorter than 16"),
        (&["--user", "", "--password", ""], "empty"),
    ];
    for (secret, why) in cases {
        let mut child = bare_command()
            .args(["serve", "--in-memory", "--listen", "127.0.0.1:0"])
            .args(secret)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                panic!("serve {secret:?} started serving");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!status.success(), "serve {secret:?}: {status}");
        assert!(err.contains(why), "serve {secret:?}: {err}");
    }
}
