//! `quiverdb serve`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use quiverdb::server::admission::AdmissionOptions;
use quiverdb::server::flight::{Auth, DEFAULT_MAX_MESSAGE_BYTES, FlightOptions, TlsConfig, serve};
use quiverdb::storage::{DurableOptions, SyncMode};
use quiverdb::{Database, SessionOptions};
use tracing::{info, warn};

use super::CliError;

/// Arguments of `quiverdb serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on. A non-loopback address needs --user/--password or --token.
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// User name clients authenticate with (Basic → Bearer handshake); not empty.
    #[arg(long, env = "QUIVERDB_USER", requires = "password")]
    user: Option<String>,
    /// Password clients authenticate with: at least 8 characters.
    #[arg(long, env = "QUIVERDB_PASSWORD", requires = "user")]
    password: Option<String>,
    /// A static bearer token clients send (instead of a user and password):
    /// at least 16 characters.
    #[arg(long, env = "QUIVERDB_TOKEN", conflicts_with_all = ["user", "password"])]
    token: Option<String>,
    /// TLS certificate chain (PEM).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Largest gRPC message accepted or sent, in bytes (suffixes K, M, G; powers of 1024).
    #[arg(long, value_parser = parse_bytes, default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    max_message_bytes: usize,
    /// Memory all running queries may hold in DataFusion operators (sorts,
    /// joins, hash aggregates), in bytes (suffixes K, M, G); no limit if absent.
    #[arg(long, value_parser = parse_bytes)]
    memory_limit: Option<usize>,
    /// Bytes all tables together may hold (suffixes K, M, G): writes that
    /// would pass it are refused, reads keep working; no limit if absent.
    #[arg(long, value_parser = parse_bytes)]
    max_table_memory: Option<usize>,
    /// DataFusion partitions per query (0: one per core).
    #[arg(long, default_value_t = 0)]
    partitions: usize,
    /// The data directory: created if missing, locked while serving.
    #[arg(long, default_value = "quiverdb-data", conflicts_with = "in_memory")]
    data_dir: PathBuf,
    /// Keep everything in memory (nothing survives the process).
    #[arg(long)]
    in_memory: bool,
    /// When a write is durable before it is acknowledged: `always` (synced
    /// to disk; concurrent writers share syncs), `batch` (synced every
    /// --sync-interval: a power loss can lose that much, a crash of the
    /// process nothing), `off` (synced only when a log segment is full:
    /// a power loss can lose anything the OS had not written back).
    #[arg(long, value_enum, default_value_t = SyncArg::Always)]
    sync: SyncArg,
    /// Sync interval of `--sync batch`, in milliseconds.
    #[arg(long, default_value_t = 100)]
    sync_interval_ms: u64,
    /// Write a checkpoint whenever the log has grown by this many bytes
    /// (suffixes K, M, G); 0: only at shutdown.
    #[arg(long, value_parser = parse_bytes, default_value = "256M")]
    checkpoint_bytes: usize,
    /// Size of a log segment (suffixes K, M, G; at least 4K). Each is
    /// written full of zeros ahead of use, so the data directory needs
    /// room for two of them to open.
    #[arg(long, value_parser = parse_bytes, default_value = "64M")]
    log_segment_bytes: usize,
    /// Open a data directory whose last log segment is damaged (a record
    /// whose checksum fails) by dropping the damaged record and everything
    /// after it, rather than refusing to start. Changes that were
    /// acknowledged may be lost: the server logs what it drops.
    #[arg(long, conflicts_with = "in_memory")]
    recover_truncate: bool,
    /// Client connections open at once; more are closed as they are
    /// accepted. Default: what the descriptor limit (ulimit -n) leaves
    /// after 64, between 16 and 4096.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Seconds a new connection may take to start speaking HTTP/2 (or
    /// TLS) before it is closed.
    #[arg(long, default_value_t = 10)]
    handshake_timeout_secs: u64,
    /// Seconds a connection may go without an open request before it is
    /// closed (clients reconnect when they next need to).
    #[arg(long, default_value_t = 600)]
    idle_timeout_secs: u64,
    /// Statements running at once in each of the two lanes (small
    /// statements, large ones). Default: twice the cores, at least 4.
    #[arg(long)]
    max_running_queries: Option<usize>,
    /// Statements waiting for a slot in each lane; one more fails at once
    /// with ResourceExhausted.
    #[arg(long, default_value_t = 256)]
    max_queued_queries: usize,
    /// Seconds a statement may wait for a slot before it fails with
    /// ResourceExhausted.
    #[arg(long, default_value_t = 300)]
    queue_timeout_secs: u64,
    /// Seconds requests in flight get to finish once the server is asked
    /// to stop (SIGTERM, Ctrl-C); queries still running then are
    /// cancelled, and the shutdown checkpoint is written.
    #[arg(long, default_value_t = 30)]
    shutdown_grace_secs: u64,
    /// How log lines are written to stderr: `text` (coloured only on a
    /// terminal, and never with NO_COLOR set) or `json` (one object a line).
    /// RUST_LOG sets what is logged (default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// What is logged when RUST_LOG does not say: quiverdb's `info` lines.
const DEFAULT_LOG: &str = "info";

/// Added to RUST_LOG unless it names these crates itself: their `debug`
/// lines (DataFusion's optimizer passes, HTTP/2 frames) drown quiverdb's.
const QUIET_DEPENDENCIES: [&str; 5] = ["datafusion=info", "h2=info", "hyper=info", "tower=info", "tonic=info"];

/// Logs to stderr as `format` says. A stderr that fails (a closed pipe)
/// loses the lines and nothing else: the server keeps serving.
fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let asked = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let mut directives = asked.clone().unwrap_or_else(|| DEFAULT_LOG.to_string());
    for quiet in QUIET_DEPENDENCIES {
        let krate = quiet.split('=').next().unwrap_or_default();
        if !asked.as_deref().is_some_and(|a| a.contains(krate)) {
            directives.push(',');
            directives.push_str(quiet);
        }
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        let _ = writeln!(std::io::stderr(), "RUST_LOG is not a valid filter ({e}): logging at {DEFAULT_LOG}");
        tracing_subscriber::EnvFilter::new(DEFAULT_LOG)
    });
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .log_internal_errors(false);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// `--sync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SyncArg {
    Always,
    Batch,
    Off,
}

/// `1234`, `64K`, `512M`, `4G` (also `KiB`, `MB`, ...: powers of 1024).
fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let number: usize = number.parse().map_err(|_| format!("'{s}' is not a byte count"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        other => return Err(format!("unknown unit '{other}' in '{s}'")),
    };
    number.checked_mul(1 << shift).ok_or_else(|| format!("'{s}' is too large"))
}

/// The authentication `--user`, `--password` and `--token` ask for. A user
/// without a password (or the reverse), both ways at once, and empty or
/// short secrets are refused: each would otherwise start a server with
/// less protection than its command line suggests.
fn auth_of(user: Option<String>, password: Option<String>, token: Option<String>) -> Result<Auth, String> {
    let auth = match (user, password, token) {
        (None, None, None) => Auth::None,
        (Some(user), Some(password), None) => Auth::Password { user, password },
        (None, None, Some(token)) => Auth::Token(token),
        (_, _, Some(_)) => return Err("give either --token or --user and --password, not both".into()),
        (Some(_), None, None) => return Err("--user needs --password".into()),
        (None, Some(_), None) => return Err("--password needs --user".into()),
    };
    auth.check_strength().map_err(|e| format!("refusing to start: {e}"))?;
    Ok(auth)
}

pub(crate) fn run(args: ServeArgs) -> Result<ExitCode, CliError> {
    init_logging(args.log_format);
    let auth = auth_of(args.user, args.password, args.token)?;
    if matches!(auth, Auth::None) && !args.listen.ip().is_loopback() {
        return Err(format!(
            "refusing to listen on {} without authentication: add --user and --password, or --token, or listen on a loopback address",
            args.listen
        )
        .into());
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsConfig {
            cert_pem: std::fs::read(cert).map_err(|e| format!("reading {}: {e}", cert.display()))?,
            key_pem: std::fs::read(key).map_err(|e| format!("reading {}: {e}", key.display()))?,
        }),
        _ => None,
    };
    let options = FlightOptions {
        auth,
        tls,
        max_message_bytes: args.max_message_bytes,
        handshake_timeout: Duration::from_secs(args.handshake_timeout_secs),
        idle_timeout: Duration::from_secs(args.idle_timeout_secs.max(1)),
        shutdown_grace: Duration::from_secs(args.shutdown_grace_secs),
        max_connections: args.max_connections.unwrap_or_else(|| FlightOptions::default().max_connections),
        admission: AdmissionOptions {
            max_running: args.max_running_queries.unwrap_or_else(|| AdmissionOptions::default().max_running),
            max_queued: args.max_queued_queries,
            queue_timeout: Duration::from_secs(args.queue_timeout_secs),
        },
        session: SessionOptions {
            target_partitions: args.partitions,
            memory_limit: args.memory_limit,
            max_table_memory: args.max_table_memory,
            ..SessionOptions::default()
        },
        ..FlightOptions::default()
    };
    let db = if args.in_memory {
        info!("in-memory database: nothing is kept when the server stops");
        Database::new()
    } else {
        let sync = match args.sync {
            SyncArg::Always => SyncMode::Always,
            SyncArg::Batch => SyncMode::Batch(Duration::from_millis(args.sync_interval_ms.max(1))),
            SyncArg::Off => SyncMode::Off,
        };
        let durable = DurableOptions {
            sync,
            checkpoint_bytes: args.checkpoint_bytes as u64,
            recover_truncate: args.recover_truncate,
            log_segment_bytes: args.log_segment_bytes as u64,
        };
        let db = Database::open(&args.data_dir, durable).map_err(|e| {
            let hint = match &e {
                quiverdb::storage::Error::Corrupt { file, .. } if file.extension().is_some_and(|x| x == "log") => {
                    "; the data directory is left as it is. To start anyway, --recover-truncate drops the damaged log record and everything after it (changes acknowledged to clients may be among them)"
                }
                quiverdb::storage::Error::NoSpace { .. } => {
                    "; free some space, or start with a smaller --log-segment-bytes"
                }
                _ => "",
            };
            format!("opening {}: {e}{hint}", args.data_dir.display())
        })?;
        if let Some(r) = db.recovery() {
            info!(
                "opened {} (sync {:?}): checkpoint through log record {} ({} tables, {} shard files), {} log records replayed, in {:.1} ms",
                args.data_dir.display(),
                args.sync,
                r.checkpoint_lsn,
                r.checkpoint_tables,
                r.shard_files,
                r.replayed,
                r.elapsed.as_secs_f64() * 1e3,
            );
            if let Some((segment, offset, bytes)) = &r.torn {
                warn!(
                    "dropped an incomplete write at the end of the log ({bytes} bytes at byte {offset} of {}): a write cut short by a crash, never acknowledged",
                    segment.display()
                );
            }
            if let Some((segment, offset, bytes, what)) = &r.dropped {
                warn!(
                    "--recover-truncate: dropped {bytes} bytes of the log from byte {offset} of {} ({what}); changes in them are lost",
                    segment.display()
                );
            }
        }
        db
    };
    // Room for the deepest statement quiverdb accepts (see quiverdb_server's MAX_EXPRESSION_DEPTH).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(quiverdb::server::THREAD_STACK_BYTES)
        .enable_all()
        .build()?;
    let served = db.clone();
    let code = runtime.block_on(async move {
        let listener =
            tokio::net::TcpListener::bind(args.listen).await.map_err(|e| format!("binding {}: {e}", args.listen))?;
        let addr = listener.local_addr()?;
        // Handlers first: a signal right after the line below must stop the server gracefully.
        let shutdown = shutdown_signal();
        info!(
            "quiverdb serving Flight SQL on {addr} (auth: {}, TLS: {}, max message {} bytes, memory limit {})",
            options.auth.describe(),
            if options.tls.is_some() { "on" } else { "off" },
            options.max_message_bytes,
            options.session.memory_limit.map_or("none".to_string(), |m| format!("{m} bytes")),
        );
        serve(served, listener, options, shutdown).await?;
        Ok::<_, CliError>(ExitCode::SUCCESS)
    })?;
    // Work the runtime still runs (a statement that changes data runs to
    // its end) gets a few seconds; the checkpoint does not wait longer.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    if db.is_durable() {
        // A checkpoint makes the next start read it instead of replaying the log.
        db.close().map_err(|e| format!("writing the shutdown checkpoint: {e}"))?;
        info!("checkpoint written");
    }
    info!("quiverdb stopped");
    Ok(code)
}

/// How long stopping waits for work left on the runtime after serving ends.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(5);

/// Completes on SIGINT (Ctrl-C) or SIGTERM. The handlers are installed
/// when this is called (inside the runtime), not when it is first polled.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let (ctrl_c, term) = {
        use tokio::signal::unix::{SignalKind, signal};
        let wait = |kind| {
            let installed = signal(kind);
            async move {
                match installed {
                    Ok(mut s) => {
                        s.recv().await;
                    }
                    Err(_) => std::future::pending::<()>().await,
                }
            }
        };
        (wait(SignalKind::interrupt()), wait(SignalKind::terminate()))
    };
    #[cfg(not(unix))]
    let (ctrl_c, term) = (
        async {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        },
        std::future::pending::<()>(),
    );
    async move {
        tokio::select! {
            () = ctrl_c => info!("SIGINT: finishing requests in flight, then stopping"),
            () = term => info!("SIGTERM: finishing requests in flight, then stopping"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{auth_of, parse_bytes};
    use quiverdb::server::flight::Auth;

    #[test]
    fn secrets_must_be_given_whole_and_long_enough() {
        let s = |v: &str| Some(v.to_string());
        assert!(matches!(auth_of(None, None, None), Ok(Auth::None)));
        assert!(matches!(auth_of(s("alice"), s("long-pass"), None), Ok(Auth::Password { .. })));
        assert!(matches!(auth_of(None, None, s("0123456789abcdef")), Ok(Auth::Token(_))));
        for (user, password, token, why) in [
            (None, None, s(""), "empty"),
            (None, None, s("short"), "shorter than 16"),
            (s(""), s(""), None, "empty"),
            (s("alice"), s(""), None, "empty"),
            (s("alice"), s("seven77"), None, "shorter than 8"),
            (s("alice"), None, None, "needs --password"),
            (None, s("long-pass"), None, "needs --user"),
            (s("alice"), s("long-pass"), s("0123456789abcdef"), "not both"),
        ] {
            let err = auth_of(user, password, token).expect_err(why);
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("1234"), Ok(1234));
        assert_eq!(parse_bytes("64K"), Ok(64 << 10));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("4g"), Ok(4 << 30));
        assert!(parse_bytes("4T").is_err());
        assert!(parse_bytes("x").is_err());
        assert!(parse_bytes("99999999999999999999G").is_err());
    }
}
