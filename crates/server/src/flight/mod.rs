//! quiverdb over Arrow Flight SQL.
//!
//! [`serve`] runs quiverdb's Flight SQL service on a TCP listener until a
//! shutdown future completes; requests in flight finish first.
//!
//! - Authentication ([`Auth`]): none, a user and password exchanged for a
//!   bearer token by the `Handshake`, or one static bearer token. Every
//!   call but the handshake is checked.
//! - Statements: `CommandStatementQuery` (a query is planned by
//!   `GetFlightInfo` and runs, streamed batch by batch, when its ticket is
//!   fetched; DDL and DML run at `GetFlightInfo` and report their
//!   affected-row count as `total_records`), `CommandStatementUpdate`, and
//!   prepared statements with parameters (`$1, $2, ...` or `?`) bound by
//!   `DoPut`. Results go out with string and binary views as plain Utf8
//!   and Binary.
//! - Metadata: catalogs, schemas, tables (with their Arrow schemas), table
//!   types, SqlInfo, XDBC type info and primary keys.
//! - `CommandStatementIngest`: Arrow batches go straight into the table's
//!   delta, validated against its schema, all or nothing per request.
//! - Statement handles and tickets carry the SQL (and bound parameters)
//!   themselves, so the server keeps no state per statement; only bearer
//!   tokens and client sessions (the settings of `SET`, named by a cookie
//!   or by the connection) are remembered, and both expire. The logical
//!   plans of recent query texts in the shared session are cached
//!   (bounded, dropped whenever a table, view or schema is created,
//!   altered or dropped), so a query's `GetFlightInfo`, its `DoGet` and its
//!   repetitions parse and plan the SQL once. Repetitions of a query whose
//!   optimization cannot change (no stable or volatile functions,
//!   variables or parameters) also skip logical optimization.
//! - Limits: messages in both directions are bounded by
//!   [`FlightOptions::max_message_bytes`]; the memory DataFusion operators
//!   hold is bounded by [`SessionOptions::memory_limit`]; connections by
//!   [`FlightOptions::max_connections`], a new one must start speaking
//!   within [`FlightOptions::handshake_timeout`], peers that stop
//!   answering keepalive pings are disconnected, and so are connections
//!   with no request open for [`FlightOptions::idle_timeout`]. HTTP/2
//!   frames are up to 2 MiB, and a connection buffers at most 8 MiB its
//!   server has not read yet (4 MiB per stream).
//! - Admission ([`FlightOptions::admission`]): at most so many statements
//!   run at once, in two lanes (small statements apart from large ones, so
//!   they are not starved); the rest wait in a bounded queue, and one that
//!   finds it full, or waits too long, fails with `ResourceExhausted`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use quiverdb_storage::Database;
use tokio::net::TcpListener;
use tonic::transport::{Identity, Server, ServerTlsConfig};

use crate::admission::{Admission, AdmissionOptions};
use crate::options::SessionOptions;
use crate::running::RunningQueries;
use crate::session::session_parts;

mod auth;
mod connections;
mod dispatch;
mod handle;
mod incoming;
mod ipc_check;
mod metadata;
mod plans;
mod results;
mod service;
mod sessions;
mod status;

pub use auth::{Auth, MIN_PASSWORD_CHARS, MIN_TOKEN_CHARS};

use auth::{AuthLayer, Authenticator};
use connections::ActivityLayer;
use dispatch::QuiverFlightService;
use service::QuiverFlightSql;

/// Default bound on a gRPC message, in either direction: 64 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;

/// The largest HTTP/2 frame a client may send: 2 MiB (HTTP/2's default,
/// and hyper's, is 16 KiB). A record batch of a bulk load is a message of
/// megabytes; in 16 KiB frames each is a hundred frames and as many wakeups
/// of the connection task, and the load waits on them: TPC-H SF1 through
/// two ingest streams took 2.7 s with 16 KiB frames, 2.1 s with 2 MiB
/// (BENCHMARKS.md). Larger frames gained nothing more.
const MAX_FRAME_BYTES: u32 = 2 << 20;

/// The HTTP/2 flow-control windows: what a client may send on one stream
/// (4 MiB), and on one connection (8 MiB: two such streams), before the
/// server has read it. They bound what a connection buffers, and must hold
/// at least a frame.
const STREAM_WINDOW_BYTES: u32 = 4 << 20;
const CONNECTION_WINDOW_BYTES: u32 = 8 << 20;

/// A certificate chain and private key, both PEM.
#[derive(Clone)]
pub struct TlsConfig {
    /// The certificate chain (PEM).
    pub cert_pem: Vec<u8>,
    /// The private key (PEM).
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig").finish_non_exhaustive()
    }
}

/// How the Flight SQL server runs.
#[derive(Debug, Clone)]
pub struct FlightOptions {
    /// How clients authenticate.
    pub auth: Auth,
    /// TLS; `None` serves plain HTTP/2.
    pub tls: Option<TlsConfig>,
    /// Largest gRPC message accepted or sent.
    pub max_message_bytes: usize,
    /// How long a bearer token issued by the handshake stays valid
    /// without use.
    pub token_ttl: Duration,
    /// The SQL session every request runs in (partitions, batch size,
    /// memory limit, options of created tables).
    pub session: SessionOptions,
    /// After shutdown is asked for, how long requests in flight (and
    /// clients slow to close their connections) get before the server
    /// stops anyway.
    pub shutdown_grace: Duration,
    /// How long a client's session (the settings its `SET` statements
    /// made) lives without use.
    pub session_idle: Duration,
    /// How many client connections may be open at once; one more is
    /// closed as soon as it is accepted. Default: what the process's
    /// descriptor limit leaves after 64, between 16 and 4,096.
    pub max_connections: usize,
    /// How long a new connection may take to send its first bytes (the
    /// HTTP/2 preface, or the start of its TLS handshake) before it is
    /// closed.
    pub handshake_timeout: Duration,
    /// How often the server pings a connection's peer over HTTP/2; a peer
    /// that does not answer within as long again is disconnected.
    pub keepalive_interval: Duration,
    /// How long a connection may go without an open request before it is
    /// closed (a gRPC client reconnects when it next needs to).
    pub idle_timeout: Duration,
    /// How many statements run at once and how many wait (see
    /// [`crate::admission`]).
    pub admission: AdmissionOptions,
}

impl Default for FlightOptions {
    fn default() -> Self {
        Self {
            auth: Auth::None,
            tls: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            token_ttl: Duration::from_secs(8 * 3600),
            session: SessionOptions::default(),
            shutdown_grace: Duration::from_secs(30),
            session_idle: Duration::from_secs(3600),
            max_connections: connections::default_max_connections(),
            handshake_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
            admission: AdmissionOptions::default(),
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration is refused (with the reason).
    #[error("{0}")]
    Config(String),
    /// The listener failed.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// The gRPC transport failed.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// quiverdb's Flight SQL service over `db`, as a tonic service with the
/// message-size bounds of `options` (without the authentication layer,
/// which [`serve`] adds).
fn flight_service(
    db: &Database,
    options: &FlightOptions,
    auth: Arc<Authenticator>,
    running: Arc<RunningQueries>,
) -> std::io::Result<FlightServiceServer<QuiverFlightService>> {
    let session = session_parts(db, options.session.clone());
    // What `system.queries` lists.
    session.0.state_ref().write().config_mut().set_extension(Arc::clone(&running));
    let service = QuiverFlightSql::new(
        db.clone(),
        session,
        options.session.table_options.clone(),
        auth,
        options.max_message_bytes,
        options.session_idle,
        (Arc::new(Admission::new(options.admission.clone())?), running),
    );
    Ok(FlightServiceServer::new(QuiverFlightService(service))
        .max_decoding_message_size(options.max_message_bytes)
        .max_encoding_message_size(options.max_message_bytes))
}

/// Serves `db` over Flight SQL on `listener` until `shutdown` completes,
/// then lets requests in flight finish (for at most
/// [`FlightOptions::shutdown_grace`]) and returns.
///
/// Refuses a non-loopback listener with [`Auth::None`].
///
/// Requests are planned and run on the calling runtime's threads: give
/// them [`crate::THREAD_STACK_BYTES`] of stack
/// (`tokio::runtime::Builder::thread_stack_size`), as the `quiverdb`
/// binary does, for the deepest statements quiverdb accepts
/// ([`crate::MAX_EXPRESSION_DEPTH`]) to answer instead of overflowing it.
pub async fn serve(
    db: Database,
    listener: TcpListener,
    options: FlightOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let addr = listener.local_addr()?;
    options.auth.check().map_err(|e| ServeError::Config(format!("refusing to serve: {e}")))?;
    if matches!(options.auth, Auth::None) && !addr.ip().is_loopback() {
        return Err(ServeError::Config(format!(
            "refusing to serve {addr} without authentication: give a user and password or a token, or listen on a loopback address"
        )));
    }
    if options.max_message_bytes < 1024 {
        return Err(ServeError::Config("the message size bound must be at least 1024 bytes".into()));
    }
    let auth = Arc::new(Authenticator::new(options.auth.clone(), options.token_ttl));
    let running = Arc::new(RunningQueries::default());
    let service = flight_service(&db, &options, Arc::clone(&auth), Arc::clone(&running))?;
    if options.max_connections == 0 {
        return Err(ServeError::Config("the connection limit must be at least 1".into()));
    }
    if options.admission.max_running == 0 {
        return Err(ServeError::Config("the running-statement limit must be at least 1".into()));
    }
    let mut server = Server::builder()
        .http2_keepalive_interval(Some(options.keepalive_interval))
        .http2_keepalive_timeout(Some(options.keepalive_interval))
        .tcp_keepalive(Some(options.keepalive_interval))
        .max_frame_size(MAX_FRAME_BYTES)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES);
    if let Some(tls) = &options.tls {
        let identity = Identity::from_pem(&tls.cert_pem, &tls.key_pem);
        server = server.tls_config(ServerTlsConfig::new().identity(identity))?;
    }
    let open = connections::OpenConnections::default();
    let incoming = connections::limited(
        listener,
        options.max_connections,
        options.handshake_timeout,
        options.idle_timeout,
        open.clone(),
    );
    let (asked, stopping) = tokio::sync::oneshot::channel::<()>();
    let serving = server
        .layer(ActivityLayer::new(open))
        .layer(AuthLayer::new(auth))
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, async {
            shutdown.await;
            let _ = asked.send(());
        });
    // Requests in flight get the grace period; then running queries are
    // cancelled (their clients get `Cancelled`), and what is still open
    // after a few more seconds is dropped.
    let grace_over = async {
        match stopping.await {
            Ok(()) => {
                tokio::time::sleep(options.shutdown_grace).await;
                let cancelled = running.cancel_all();
                tracing::warn!(
                    "shutdown: {cancelled} queries still running after {:?} cancelled",
                    options.shutdown_grace
                );
                tokio::time::sleep(CANCELLED_GRACE).await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        served = serving => served?,
        () = grace_over => tracing::warn!(
            "stopping with connections still open {:?} after shutdown was asked for",
            options.shutdown_grace + CANCELLED_GRACE
        ),
    }
    Ok(())
}

/// How long cancelled queries get to end (and their clients to hear so)
/// once the shutdown grace is over.
const CANCELLED_GRACE: Duration = Duration::from_secs(2);
