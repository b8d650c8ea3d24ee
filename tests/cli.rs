//! End-to-end tests of the `quiverdb` binary's client commands: each test
//! starts the real Flight SQL server in-process on `127.0.0.1:0` (with a
//! user and password) and runs the built binary against it.
//!
//! Covered: `sql -c` (DDL, DML, queries, several statements, errors, wrong
//! or missing credentials, an unreachable server), the interactive shell
//! fed through a pipe (multi-line statements, help, quit, errors), and
//! `load` of CSV and Parquet files (create, append, names read as SQL
//! reads them, column matching and casting, the CSV options, types
//! inferred from every row, the table checked before the file is read,
//! errors naming the file's line, bad input, and that a file failing
//! half-way applies nothing),
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

use arrow_array::{Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
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

/// The shortcuts: `\dt` and `.tables` list what users made, `\d t` a
/// table's columns; `\maxrows` bounds what a result shows (and counts the
/// rest); `SHOW TABLES` leaves out the system's views.
#[test]
fn shell_shortcuts_list_and_describe_tables() {
    let server = TestServer::start();
    server.sql("CREATE TABLE Sales (id BIGINT NOT NULL, region VARCHAR); INSERT INTO sales VALUES (1, 'n'), (2, 's'), (3, 'e')");
    let out =
        shell(&server, "\\dt\n.tables\n\\d Sales\n\\maxrows 2\nSELECT id FROM sales ORDER BY id;\nSHOW TABLES;\n");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // Twice as `\\dt` and `.tables` print it, once inside SHOW TABLES's row.
    assert_eq!(text.matches("| public       | sales      | BASE TABLE |").count(), 3, "{text}");
    assert!(!text.contains("| information_schema"), "{text}");
    assert!(text.contains("| id          | Int64     | NO          |"), "{text}");
    assert!(text.contains("| region      | Utf8View  | YES         |"), "{text}");
    assert!(text.contains("| 2  |") && !text.contains("| 3  |"), "{text}");
    assert!(text.contains("3 rows (2 shown;"), "{text}");
    assert!(text.contains("| quiverdb      | public       | sales      | BASE TABLE |"), "{text}");
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

    // A value that does not fit the table's type is named by its row
    // (from 1) and column; nothing is loaded.
    let big = Arc::new(Schema::new(vec![Field::new("K", DataType::Int64, false)]));
    let path = scratch("big.parquet");
    let mut writer = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), big.clone(), None).unwrap();
    let keys = Int64Array::from(vec![1, 2, 3_000_000_000, 4]);
    writer.write(&RecordBatch::try_new(big, vec![Arc::new(keys)]).unwrap()).unwrap();
    writer.close().unwrap();
    server.sql("CREATE TABLE narrow (k INT NOT NULL)");
    let out = server.run(&["load", "narrow", path.to_str().unwrap()]);
    assert!(!out.status.success());
    assert_eq!(
        stderr(&out),
        format!("error: reading {}: row 3, column 'k': cannot read '3000000000' as Int32\n", path.display())
    );
    assert_eq!(server.rows("narrow"), 0);
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

    // The header is line 1, the 150,000 good rows lines 2 to 150,001.
    let expected = format!("error: reading {bad}: line 150002, column 'id': cannot read 'oops' as Int64\n");
    for _ in 0..2 {
        // --schema: types inferred from the whole file would make `id`
        // text, and the file would load.
        let out = server.run(&["load", "half", bad, "--create", "--schema", "id BIGINT, name TEXT"]);
        assert!(!out.status.success());
        assert_eq!(stderr(&out), expected);
        assert!(server.db.table("half").is_err(), "a failed --create load left a table");
    }

    server.sql("CREATE TABLE half (id BIGINT, name VARCHAR)");
    server.sql("INSERT INTO half VALUES (-1, 'kept')");
    for _ in 0..2 {
        let out = server.run(&["load", "half", bad]);
        assert!(!out.status.success());
        assert_eq!(stderr(&out), expected);
        assert_eq!(server.rows("half"), 1, "a failed load appended rows");
    }
}

/// The tables the database holds, sorted.
fn table_names(server: &TestServer) -> Vec<String> {
    let mut names = server.db.table_names();
    names.sort();
    names
}

/// Names follow SQL: unquoted ones (the table argument, CSV header names)
/// are folded to lower case as the server's SQL folds them, so SQL
/// reaches them without quotes; a name in double quotes keeps its case.
/// SQL itself, run on the same database, is the reference.
#[test]
fn load_names_follow_sql_identifier_rules() {
    let server = TestServer::start();
    // The third header field's text is "MixedCase", in double quotes.
    let csv = write_file("names.csv", "Id,Name,\"\"\"MixedCase\"\"\"\n1,ann,x\n2,bo,y\n");
    let path = csv.to_str().unwrap();

    let out = server.run(&["load", "MyTable", path, "--create"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("loaded 2 rows into mytable in "), "{}", stdout(&out));
    assert_eq!(table_names(&server), ["mytable"]);
    let expected = table(&[
        "+----+------+-----------+",
        "| id | name | MixedCase |",
        "+----+------+-----------+",
        "| 1  | ann  | x         |",
        "| 2  | bo   | y         |",
        "+----+------+-----------+",
    ]);
    assert_eq!(server.query("SELECT Id, NAME, \"MixedCase\" FROM MyTable ORDER BY id"), expected);

    // In double quotes the name keeps its case: a second table.
    let out = server.run(&["load", "\"MyTable\"", path, "--create"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(table_names(&server), ["MyTable", "mytable"]);
    assert_eq!(server.query("SELECT * FROM \"MyTable\" ORDER BY id"), expected);

    // A table SQL created as `Sales` (stored as `sales`) takes the rows,
    // however the argument spells it; no second table appears.
    server.sql("CREATE TABLE Sales (Id BIGINT, Amount DOUBLE)");
    let sales = write_file("sales.csv", "ID,AMOUNT\n1,2.5\n");
    for spelling in ["Sales", "SALES", "sales"] {
        let out = server.run(&["load", spelling, sales.to_str().unwrap()]);
        assert!(out.status.success(), "{spelling}: {}", stderr(&out));
        assert!(stdout(&out).starts_with("loaded 1 row into sales in "), "{}", stdout(&out));
    }
    assert_eq!(
        server.query("SELECT count(*) AS n, sum(amount) AS s FROM SALES"),
        server.query("SELECT 3 AS n, 7.5 AS s")
    );
    assert_eq!(table_names(&server), ["MyTable", "mytable", "sales"]);

    // Schema-qualified names, as in SQL.
    server.sql("CREATE SCHEMA Reports");
    let out = server.run(&["load", "Reports.Daily", path, "--create"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("loaded 2 rows into reports.daily in "), "{}", stdout(&out));
    let out = server.run(&["load", "REPORTS.daily", path]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.query("SELECT count(*) AS n FROM reports.DAILY"), server.query("SELECT 4 AS n"));
    let out = server.run(&["load", "nowhere.daily", path]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("table 'nowhere.daily' does not exist"), "{}", stderr(&out));

    // Matching an existing table's columns follows the same rule: the
    // table's `MixedCase` (created quoted) takes the quoted header name
    // only, and its `name` takes the header's `Name`.
    server.sql("CREATE TABLE q (id BIGINT, \"MixedCase\" VARCHAR, name VARCHAR)");
    let out = server.run(&["load", "q", path]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.query("SELECT \"MixedCase\" AS m FROM q WHERE id = 2"), server.query("SELECT 'y' AS m"));
    let folded = write_file("folded.csv", "id,MixedCase,name\n1,x,y\n");
    let out = server.run(&["load", "q", folded.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("the file has no column 'MixedCase'"), "{}", stderr(&out));

    // `_` and `%` are wildcards of the server's table filter, not of the
    // name: `a_b` is found, not `axb`.
    server.sql("CREATE TABLE axb (x BIGINT, y BIGINT)");
    server.sql("CREATE TABLE a_b (x BIGINT)");
    let x = write_file("x.csv", "x\n5\n");
    let out = server.run(&["load", "a_b", x.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.rows("a_b"), 1);

    // A name SQL cannot read unquoted is refused before anything is sent.
    let out = server.run(&["load", "my-table", path, "--create"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("'my-table' is not a table name"), "{}", stderr(&out));
}

/// `--delimiter`, `.tsv` and `.txt`, `--no-header` (new columns
/// column_1.., or an existing table's in order) and `--schema`, whose
/// types are the ones `CREATE TABLE` gives the same SQL types.
#[test]
fn load_csv_options() {
    let server = TestServer::start();
    let semicolons = write_file("semi.csv", "a;b\n1;x,y\n2;z\n");
    let out = server.run(&["load", "semi", semicolons.to_str().unwrap(), "--create", "--delimiter", ";"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = table(&["+---+-----+", "| a | b   |", "+---+-----+", "| 1 | x,y |", "| 2 | z   |", "+---+-----+"]);
    assert_eq!(server.query("SELECT * FROM semi ORDER BY a"), expected);

    // A .tsv file is split at tabs; `\t` names a tab.
    let tabs = write_file("tabs.tsv", "a\tb\n1\tx,y\n2\tz\n");
    let out = server.run(&["load", "tabs", tabs.to_str().unwrap(), "--create"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.query("SELECT * FROM tabs ORDER BY a"), expected);
    let text = write_file("tabs.txt", "a\tb\n1\tx,y\n2\tz\n");
    let out = server.run(&["load", "tabs", text.to_str().unwrap(), "--delimiter", "\\t"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.rows("tabs"), 4);
    // A .txt file is CSV: commas unless told otherwise.
    let commas = write_file("commas.txt", "a,b\n3,w\n");
    let out = server.run(&["load", "tabs", commas.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.rows("tabs"), 5);

    // Without a header: columns column_1.. for a new table, types inferred.
    let bare = write_file("bare.csv", "1,x\n2,\n");
    let out = server.run(&["load", "bare", bare.to_str().unwrap(), "--create", "--no-header"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        server.query("SELECT column_1, column_2, arrow_typeof(column_1) AS t FROM bare ORDER BY column_1"),
        table(&[
            "+----------+----------+-------+",
            "| column_1 | column_2 | t     |",
            "+----------+----------+-------+",
            "| 1        | x        | Int64 |",
            "| 2        |          | Int64 |",
            "+----------+----------+-------+",
        ])
    );
    // Appending, the fields are the table's columns in order.
    server.sql("CREATE TABLE pos (k INT, v VARCHAR)");
    let out = server.run(&["load", "pos", bare.to_str().unwrap(), "--no-header"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        server.query("SELECT k, v FROM pos ORDER BY k"),
        server.query("SELECT column_1 AS k, column_2 AS v FROM bare ORDER BY column_1")
    );
    let out = server.run(&["load", "semi", bare.to_str().unwrap(), "--no-header"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.rows("semi"), 4);

    // --schema names and types the columns (the header line is skipped);
    // the reference is the table CREATE TABLE makes of the same text.
    let declared = "A INT NOT NULL, \"B\" VARCHAR(3), c DECIMAL(10, 2), d DATE";
    server.sql(&format!("CREATE TABLE reference ({declared})"));
    let typed = write_file("typed.csv", "w,x,y,z\n1,ab,2.50,2024-02-29\n2,,-1,\n");
    let out = server.run(&["load", "typed", typed.to_str().unwrap(), "--create", "--schema", declared]);
    assert!(out.status.success(), "{}", stderr(&out));
    // (CREATE TABLE keeps text as Utf8View, which the server's clients,
    // the loader among them, are shown as Utf8: the two store alike.)
    let fields = |name: &str| {
        let schema = server.db.table(name).unwrap().arrow_schema().clone();
        let text = |t: &DataType| if t == &DataType::Utf8View { DataType::Utf8 } else { t.clone() };
        schema.fields().iter().map(|f| (f.name().clone(), text(f.data_type()), f.is_nullable())).collect::<Vec<_>>()
    };
    assert_eq!(fields("typed"), fields("reference"));
    assert_eq!(
        server.query("SELECT * FROM typed ORDER BY a"),
        table(&[
            "+---+----+-------+------------+",
            "| a | B  | c     | d          |",
            "+---+----+-------+------------+",
            "| 1 | ab | 2.50  | 2024-02-29 |",
            "| 2 |    | -1.00 |            |",
            "+---+----+-------+------------+",
        ])
    );
    // With --no-header, --schema names the columns of every line.
    let rows = write_file("typed_rows.csv", "3,cd,0.5,2024-03-01\n");
    let out = server.run(&[
        "load",
        "typed",
        rows.to_str().unwrap(),
        "--no-header",
        "--schema",
        "a BIGINT, B TEXT, c TEXT, d TEXT",
    ]);
    assert!(!out.status.success(), "--schema's B is b, which typed does not have");
    assert!(stderr(&out).contains("the file has no column 'B'"), "{}", stderr(&out));
    let out = server.run(&[
        "load",
        "typed",
        rows.to_str().unwrap(),
        "--no-header",
        "--schema",
        "a BIGINT, \"B\" TEXT, c TEXT, d TEXT",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.rows("typed"), 3);

    // A type the server does not know, or a flag for CSV on Parquet.
    let out =
        server.run(&["load", "other", typed.to_str().unwrap(), "--create", "--schema", "a INT, b NOPE, c INT, d INT"]);
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with("error: --schema: column 'b', type 'NOPE': "), "{}", stderr(&out));
    let out = server.run(&["load", "other", typed.to_str().unwrap(), "--create", "--delimiter", "ab"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--delimiter takes one ASCII character"), "{}", stderr(&out));
    let parquet = write_file("not_read.parquet", "");
    let out = server.run(&["load", "other", parquet.to_str().unwrap(), "--create", "--no-header"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--no-header is for CSV files"), "{}", stderr(&out));
    // A new column needs a name SQL can write.
    let unnamed = write_file("unnamed.csv", "a,,c\n1,2,3\n");
    let out = server.run(&["load", "other", unnamed.to_str().unwrap(), "--create"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("column 2 of the file has no name"), "{}", stderr(&out));
    assert!(server.db.table("other").is_err());
}

/// A new table's CSV types come from every row, not the first thousand:
/// an integer column with a float on row 1,501 is Float64, a column empty
/// until row 1,200 takes the type of what follows. The loaded values are
/// checked against sums computed here. The rate is a whole number, the
/// rows over the seconds printed.
#[test]
fn load_infers_types_from_every_row() {
    let server = TestServer::start();
    let mut text = String::from("n,late\n");
    let (mut n_sum, mut late_sum) = (0.0, 0i64);
    for i in 1..=1501i64 {
        let n = if i == 1501 { 0.5 } else { i as f64 };
        let late = if i >= 1200 { Some(i) } else { None };
        n_sum += n;
        late_sum += late.unwrap_or(0);
        text.push_str(&format!("{n},{}\n", late.map(|l| l.to_string()).unwrap_or_default()));
    }
    let csv = write_file("late_float.csv", &text);
    let out = server.run(&["load", "late", csv.to_str().unwrap(), "--create"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        server.query("SELECT arrow_typeof(n) AS n, arrow_typeof(late) AS late FROM late LIMIT 1"),
        table(&[
            "+---------+-------+",
            "| n       | late  |",
            "+---------+-------+",
            "| Float64 | Int64 |",
            "+---------+-------+"
        ])
    );
    assert_eq!(
        server.query("SELECT sum(n) AS n, sum(late) AS late, count(late) AS c FROM late"),
        server.query(&format!("SELECT CAST({n_sum} AS DOUBLE) AS n, CAST({late_sum} AS BIGINT) AS late, 302 AS c"))
    );

    // "loaded 1501 rows into late in 0.01 s (150100 rows/s)"
    let line = stdout(&out);
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..5], ["loaded", "1501", "rows", "into", "late"], "{line}");
    let seconds: f64 = words[6].parse().unwrap();
    let rate = words[8].strip_prefix('(').unwrap();
    assert!(!rate.is_empty() && rate.bytes().all(|b| b.is_ascii_digit()), "{line}");
    if seconds >= 0.1 {
        // The seconds printed are rounded to 0.01.
        let (low, high) = (1501.0 / (seconds + 0.005), 1501.0 / (seconds - 0.005));
        let rate: f64 = rate.parse().unwrap();
        assert!(low - 1.0 <= rate && rate <= high + 1.0, "{line}");
    }
}

/// Whether the table exists is checked before the file is read: the
/// message names the table, not the bad line the file starts with.
#[test]
fn load_checks_the_table_before_reading_the_file() {
    let server = TestServer::start();
    server.sql("CREATE TABLE present (a BIGINT, b BIGINT)");
    server.sql("INSERT INTO present VALUES (1, 2)");
    let bad = write_file("bad_first_line.csv", "a,b\n1\n2,3\n");
    let path = bad.to_str().unwrap();
    let out = server.run(&["load", "Present", path, "--create"]);
    assert!(!out.status.success());
    assert_eq!(stderr(&out), "error: table 'present' already exists (load without --create to append to it)\n");
    assert_eq!(server.rows("present"), 1);
    let out = server.run(&["load", "absent", path]);
    assert!(!out.status.success());
    assert_eq!(stderr(&out), "error: table 'absent' does not exist (give --create to create it from the file)\n");
    // The file is read once the table checks out.
    let out = server.run(&["load", "present", path]);
    assert!(!out.status.success());
    assert_eq!(stderr(&out), format!("error: reading {path}: line 2 has 1 field, but the header has 2 fields\n"));
}

/// Errors name the 1-based line of the file a bad record starts on (the
/// header is line 1), counted here from the file's text: after a quoted
/// field spanning lines, empty lines and CRLF line ends too, in the
/// inference pass and in the loading pass, in plain words.
#[test]
fn load_errors_name_the_line() {
    let server = TestServer::start();
    server.sql("CREATE TABLE nums (id BIGINT NOT NULL, label VARCHAR)");
    let line_of = |text: &str, marker: &str| 1 + text[..text.find(marker).unwrap()].matches('\n').count();
    let fails = |args: &[&str], text: &str, marker: &str, message: &str| {
        let path = write_file(&format!("lines_{}.csv", args[1]), text);
        let path = path.to_str().unwrap();
        let mut full = vec!["load", args[1], path];
        full.extend_from_slice(&args[2..]);
        let out = server.run(&full);
        assert!(!out.status.success(), "{text:?} loaded");
        let line = line_of(text, marker);
        assert_eq!(stderr(&out), format!("error: reading {path}: line {line}{message}\n"), "{text:?}");
    };
    let value = ", column 'id': cannot read 'oops' as Int64";
    fails(&["load", "nums"], "id,label\n1,\"two\nlines\"\n\n2,b\r\noops,c\n3,d\n", "oops", value);
    fails(
        &["load", "nums"],
        "id,label\n1,a\n,NULLED\n",
        ",NULLED",
        ", column 'id': no value, but the column is NOT NULL",
    );
    fails(
        &["load", "wide", "--create"],
        "a,b\n1,2\n\"3\n\",4,EXTRA\n5,6\n",
        "\"3",
        " has 3 fields, but the header has 2 fields",
    );
    fails(
        &["load", "declared", "--create", "--schema", "a INT, b INT, c INT"],
        "a,b\n1,2\n",
        "a,b",
        " has 2 fields, but --schema gives 3 columns",
    );

    let invalid = scratch("lines_utf8.csv");
    std::fs::write(&invalid, b"a,b\n1,2\n3,\xff\n").unwrap();
    let out = server.run(&["load", "utf8", invalid.to_str().unwrap(), "--create"]);
    assert_eq!(stderr(&out), format!("error: reading {}: line 3 is not valid UTF-8 text\n", invalid.display()));

    // Deep in the file, past the first batches, while rows are being sent.
    let mut text = String::from("id,label\n");
    for i in 0..70_000 {
        text.push_str(&format!("{i},\"l\n{i}\"\n"));
    }
    text.push_str("7,x,EXTRA\n");
    fails(&["load", "nums"], &text, "7,x,EXTRA", " has 3 fields, but the header has 2 fields");
    assert_eq!(server.rows("nums"), 0);
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
