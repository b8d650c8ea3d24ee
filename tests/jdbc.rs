//! JDBC smoke test, the path DBeaver takes: Arrow's Flight SQL JDBC driver
//! (org.apache.arrow:flight-sql-jdbc-driver 18.3.0 on Java 17) against
//! quiverdb's server in this process. `tests/java/JdbcSmoke.java` logs in,
//! creates a table, inserts and deletes (reading the update counts),
//! queries, runs a prepared query with a parameter, and reads
//! `DatabaseMetaData.getTables` and `getColumns`; it prints one line per
//! fact, which this test compares with what the server must answer.
//!
//! Needs `java` (17+) and, the first time, `mvn` with Maven Central
//! reachable: the driver jar is fetched into the local Maven repository.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quiverdb::Database;
use quiverdb::server::flight::{Auth, FlightOptions, serve};

const DRIVER: &str = "org.apache.arrow:flight-sql-jdbc-driver:18.3.0";
const PROGRAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/java/JdbcSmoke.java");
/// Bound on the Java run (a few seconds); it only stops a hang.
const TIMEOUT: Duration = Duration::from_secs(300);
const USER: &str = "jdbc";
const PASSWORD: &str = "jdbc-pass";

/// The driver jar in the local Maven repository, fetched if missing.
fn driver_jar() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    let jar = PathBuf::from(home)
        .join(".m2/repository/org/apache/arrow/flight-sql-jdbc-driver/18.3.0/flight-sql-jdbc-driver-18.3.0.jar");
    if !jar.exists() {
        let status = Command::new("mvn")
            .args(["-q", "dependency:get", &format!("-Dartifact={DRIVER}"), "-Dtransitive=false"])
            .status()
            .expect("running mvn (needed once, to fetch the Flight SQL JDBC driver)");
        assert!(status.success(), "mvn could not fetch {DRIVER}: {status}");
    }
    assert!(jar.exists(), "{} missing after mvn dependency:get", jar.display());
    jar
}

#[test]
fn jdbc_driver_queries_and_reads_metadata() {
    let jar = driver_jar();
    let db = Database::new();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("binding a loopback port");
    let addr = listener.local_addr().expect("listener address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options =
        FlightOptions { auth: Auth::Password { user: USER.into(), password: PASSWORD.into() }, ..Default::default() };
    let server = runtime.spawn(serve(db.clone(), listener, options, async {
        let _ = stopped.await;
    }));

    let mut child = Command::new("java")
        .arg("--add-opens=java.base/java.nio=ALL-UNNAMED")
        .arg("-cp")
        .arg(&jar)
        .args([PROGRAM, &addr.to_string(), USER, PASSWORD])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running java (17 or later is needed)");
    let deadline = Instant::now() + TIMEOUT;
    while child.try_wait().expect("waiting for java").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the JDBC program did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().expect("java output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "JdbcSmoke failed ({}):\n{stdout}\n{stderr}", output.status);

    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "inserted 3",
            "deleted 0",
            "row 1 ada",
            "row 2 NULL",
            "row 3 grace",
            "count 2",
            "session type DECIMAL",
            "other type DOUBLE",
            "table quiverdb.public.jdbc_t TABLE",
            "column id BIGINT",
            "column name VARCHAR",
        ],
        "stderr:\n{stderr}"
    );
    // What JDBC created is a quiverdb table with the rows it inserted.
    assert_eq!(db.table("jdbc_t").expect("the table JDBC created").row_count(), 3);

    let _ = stop.send(());
    runtime.block_on(server).expect("server task").expect("serve");
}
