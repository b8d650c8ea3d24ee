//! The harness of the end-to-end Flight SQL tests: a real server
//! (`quiverdb::server::flight::serve`) on `127.0.0.1:0` over a new
//! database, arrow-rs's `FlightSqlServiceClient` on a real TCP connection,
//! and the calls most tests make.

// Shared by several test crates, each using part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_flight::FlightInfo;
use arrow_flight::error::FlightError;
use arrow_flight::sql::client::FlightSqlServiceClient;
use datafusion::arrow::compute::concat_batches;
use futures::TryStreamExt;
use quiverdb::Database;
use quiverdb::server::flight::{Auth, FlightOptions, ServeError, serve};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

pub(crate) type Client = FlightSqlServiceClient<Channel>;
pub(crate) type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Bound on any single step that could hang (a server that never answers
/// an unknown command, a shutdown that never ends). Generous: it only
/// turns a hang into a failure, it measures nothing.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(30);

/// The user and password of the password-mode servers.
pub(crate) const USER: &str = "alice";
pub(crate) const PASSWORD: &str = "s3cret";
/// `base64("alice:s3cret")` and `base64("alice:wrong")`, for handshakes
/// built by hand (the test crate has no base64 dependency).
pub(crate) const BASIC_GOOD: &str = "YWxpY2U6czNjcmV0";
pub(crate) const BASIC_WRONG: &str = "YWxpY2U6d3Jvbmc=";

/// A server running on a tokio task. Dropping it shuts the server down
/// (the shutdown future completes when its sender is dropped).
pub(crate) struct TestServer {
    pub(crate) addr: SocketAddr,
    pub(crate) db: Database,
    pub(crate) shutdown: Option<oneshot::Sender<()>>,
    pub(crate) task: JoinHandle<Result<(), ServeError>>,
}

impl TestServer {
    /// Starts a server over a new, empty database.
    pub(crate) async fn start(options: FlightOptions) -> Self {
        let db = Database::new();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let (tx, rx) = oneshot::channel::<()>();
        let shutdown = async move {
            // Sent or dropped: either way, stop.
            let _ = rx.await;
        };
        let task = tokio::spawn(serve(db.clone(), listener, options, shutdown));
        Self { addr, db, shutdown: Some(tx), task }
    }

    /// A server with no authentication.
    pub(crate) async fn open() -> Self {
        Self::start(FlightOptions::default()).await
    }

    /// A server with the password [`USER`] / [`PASSWORD`].
    pub(crate) async fn with_password() -> Self {
        let auth = Auth::Password { user: USER.into(), password: PASSWORD.into() };
        Self::start(FlightOptions { auth, ..FlightOptions::default() }).await
    }

    /// A new client on a new connection (not authenticated).
    pub(crate) async fn client(&self) -> Client {
        let channel = Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect to the test server");
        FlightSqlServiceClient::new(channel)
    }

    /// Completes the shutdown future.
    pub(crate) fn trigger_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Shuts the server down and returns what `serve` returned.
    pub(crate) async fn stop(mut self) -> Result<(), ServeError> {
        self.trigger_shutdown();
        tokio::time::timeout(HANG_GUARD, &mut self.task)
            .await
            .expect("serve did not return after shutdown")
            .expect("the serve task panicked")
    }
}

/// The gRPC status of a failed call (a test failure if the call succeeded
/// or failed without a status from the server).
pub(crate) fn status_of<T: std::fmt::Debug>(result: Result<T, FlightError>) -> tonic::Status {
    match result {
        Ok(value) => panic!("expected an error from the server, got {value:?}"),
        Err(FlightError::Tonic(status)) => *status,
        Err(other) => panic!("expected a gRPC status from the server, got {other}"),
    }
}

/// The batches behind every endpoint of `info`, as one batch with the
/// schema `info` announces.
pub(crate) async fn fetch(client: &mut Client, info: &FlightInfo) -> Result<RecordBatch, FlightError> {
    let schema = Arc::new(info.clone().try_decode_schema()?);
    let mut batches = Vec::new();
    for endpoint in &info.endpoint {
        let ticket = endpoint.ticket.clone().ok_or_else(|| FlightError::protocol("an endpoint without a ticket"))?;
        batches.extend(client.do_get(ticket).await?.try_collect::<Vec<_>>().await?);
    }
    Ok(concat_batches(&schema, &batches)?)
}

/// Runs `sql` as `CommandStatementQuery` and fetches its result batches
/// (none for a statement whose result has no columns), as a client that
/// keeps cookies does: `cookie` is the session cookie (`name=value`) to
/// send, replaced by the one a response sets, which `client` then sends
/// with every later request.
pub(crate) async fn run(
    client: &mut Client,
    cookie: &mut Option<String>,
    sql: &str,
) -> Result<Vec<RecordBatch>, FlightError> {
    use arrow_flight::FlightDescriptor;
    use arrow_flight::sql::{CommandStatementQuery, ProstMessageExt};
    use prost::Message;

    let command = CommandStatementQuery { query: sql.into(), transaction_id: None };
    let mut request = tonic::Request::new(FlightDescriptor::new_cmd(command.as_any().encode_to_vec()));
    if let Some(cookie) = cookie {
        request.metadata_mut().insert("cookie", cookie.parse().map_err(|_| FlightError::protocol("a cookie"))?);
    }
    let response = client.inner_mut().get_flight_info(request).await?;
    if let Some(set) = response.metadata().get("set-cookie").and_then(|v| v.to_str().ok()) {
        let pair = set.split(';').next().unwrap_or_default().to_string();
        client.set_header("cookie", pair.clone());
        *cookie = Some(pair);
    }
    let batch = fetch(client, &response.into_inner()).await?;
    Ok(if batch.schema().fields().is_empty() { Vec::new() } else { vec![batch] })
}

/// Runs `sql` as `CommandStatementQuery` and fetches its result.
pub(crate) async fn query(client: &mut Client, sql: &str) -> Result<RecordBatch, FlightError> {
    let info = client.execute(sql.to_string(), None).await?;
    fetch(client, &info).await
}

/// Runs `sql` as `CommandStatementUpdate`; the affected-row count.
pub(crate) async fn update(client: &mut Client, sql: &str) -> Result<i64, FlightError> {
    client.execute_update(sql.to_string(), None).await
}
