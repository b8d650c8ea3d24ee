//! End-to-end test with real Python Flight SQL clients: starts quiverdb's
//! Flight SQL server in-process on a loopback port and runs
//! `tests/python/test_flight_sql.py` (ADBC's Flight SQL driver and
//! `pyarrow.flight`) against it, then checks the tables the script left
//! behind on the Rust side.
//!
//! The clients are the pinned packages of `tests/python/requirements.txt`,
//! installed once per machine into a venv under the cargo target directory
//! (`CARGO_TARGET_TMPDIR/python-venv`). A marker file in the venv holds the
//! requirements it was built from; when they change, the venv is rebuilt.
//! A file lock next to the venv keeps concurrent test processes from
//! building or replacing it under each other.
//!
//! Needs `python3` with the `venv` module, and PyPI reachable the first
//! time (about 60 MB of wheels).

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use quiverdb::Database;
use quiverdb::server::flight::{Auth, FlightOptions, serve};

const VENV: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/python-venv");
const REQUIREMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/requirements.txt");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/test_flight_sql.py");
/// Inside the venv: the requirements text of its last successful install.
const MARKER: &str = "quiverdb-requirements.txt";
/// Bound on the script's run; it takes a few seconds, so this only stops a
/// hung client or server from hanging the whole test run.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

const USER: &str = "quiver";
/// With a colon, and `user:password` 25 bytes long: not a multiple of 3,
/// so ADBC's driver sends its base64 without `=` padding.
const PASSWORD: &str = "s3cret:with-colon!";

#[test]
fn python_flight_sql_clients() {
    let lock = File::create(format!("{VENV}.lock")).expect("creating the venv lock file");
    // Held until the script has run: another process may otherwise rebuild
    // the venv (other requirements, another checkout) while it is in use.
    lock.lock().expect("locking the venv");
    let python = python_venv();

    let db = Database::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("binding a loopback port");
    let addr = listener.local_addr().expect("listener address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options =
        FlightOptions { auth: Auth::Password { user: USER.into(), password: PASSWORD.into() }, ..Default::default() };
    let server = runtime.spawn(serve(db.clone(), listener, options, async {
        // A dropped sender also stops the server.
        let _ = stopped.await;
    }));

    let mut script = Command::new(&python);
    script
        .arg(SCRIPT)
        .env("QUIVERDB_URI", format!("grpc://{addr}"))
        .env("QUIVERDB_USER", USER)
        .env("QUIVERDB_PASSWORD", PASSWORD)
        // No __pycache__ in the source tree, output as it happens.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1");
    // The clients only talk to the loopback server: a proxy from the
    // environment (which gRPC honours) must not get in the way.
    for var in [
        "PYTHONPATH",
        "PYTHONHOME",
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "grpc_proxy",
        "all_proxy",
        "ALL_PROXY",
    ] {
        script.env_remove(var);
    }
    let (status, output) = run_with_timeout(script, SCRIPT_TIMEOUT);
    // libtest shows this only when the test fails (or with --nocapture).
    println!("{output}");

    let _ = stop.send(());
    let served = runtime.block_on(server).expect("the server task panicked");
    drop(lock);
    assert!(status.success(), "test_flight_sql.py failed ({status}); its output:\n{output}");
    served.expect("the server stopped with an error");

    // What the script left behind, seen through the database itself.
    for (table, rows) in [("t", 3), ("params", 3), ("pinsert", 4), ("t2", 4), ("t3", 5), ("meta", 0), ("dup", 1)] {
        let found = db.table(table).unwrap_or_else(|e| panic!("table {table} after the script: {e}"));
        assert_eq!(found.row_count(), rows, "rows of table {table}");
    }
    for missing in ["no_such_ingest_table", "no_such_table_xyz"] {
        assert!(!db.contains_table(missing), "{missing} exists after the script");
    }
}

/// The venv's python, after building the venv if it is missing or was
/// built from other requirements. The caller holds the venv lock.
fn python_venv() -> PathBuf {
    let venv = Path::new(VENV);
    let python = venv.join("bin").join("python");
    let requirements = fs::read_to_string(REQUIREMENTS).expect("reading tests/python/requirements.txt");
    let marker = venv.join(MARKER);
    if python.exists() && fs::read_to_string(&marker).is_ok_and(|m| m == requirements) {
        return python;
    }
    if venv.exists() {
        // Half built, or built from other requirements: start afresh.
        fs::remove_dir_all(venv).expect("removing the old python venv");
    }
    let created = Command::new("python3").args(["-m", "venv"]).arg(venv).output();
    let created = match created {
        Ok(output) => output,
        Err(e) => panic!(
            "cannot run python3 ({e}): this test needs Python 3 (3.10 or newer) with the venv module; \
             install it, e.g. `apt-get install python3 python3-venv`"
        ),
    };
    check(
        &created,
        "python3 -m venv failed: this test needs Python 3 with the venv module (e.g. `apt-get install python3-venv`)",
    );
    let pip = venv.join("bin").join("pip");
    let installed = Command::new(&pip)
        .args(["install", "--disable-pip-version-check", "-q", "-r", REQUIREMENTS])
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", pip.display()));
    check(&installed, "pip could not install tests/python/requirements.txt (PyPI must be reachable the first time)");
    fs::write(&marker, &requirements).expect("writing the venv marker");
    python
}

/// Panics with `what` and the command's output unless it succeeded.
fn check(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} ({})\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
}

/// Runs `command` to completion (killing it after `timeout`) and returns
/// its exit status and its stdout and stderr, one after the other.
fn run_with_timeout(mut command: Command, timeout: Duration) -> (ExitStatus, String) {
    let mut child: Child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    // Drain both pipes while waiting, or a chatty child blocks on a full pipe.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut text = Vec::new();
            let _ = pipe.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the script") {
            break status;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            let _ = child.kill();
            break child.wait().expect("waiting for the killed script");
        }
        thread::sleep(Duration::from_millis(50));
    };
    let mut output = format!(
        "--- stdout ---\n{}--- stderr ---\n{}",
        stdout.join().expect("stdout reader"),
        stderr.join().expect("stderr reader")
    );
    if timed_out {
        output.push_str(&format!("--- killed after {timeout:?} ---\n"));
    }
    (status, output)
}
