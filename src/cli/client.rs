//! Connecting to a quiverdb server as a Flight SQL client.
//!
//! [`connect`] parses the server address, opens the gRPC channel (plain or
//! TLS) and authenticates; [`Session`] does the same and keeps the
//! credentials, and [`Session::run`] runs one SQL statement and collects
//! its result. Every statement takes the same path: DDL and DML
//! run when the server answers `GetFlightInfo` (DML then returns one row
//! with a `UInt64` column `count`, DDL returns nothing), and a query runs
//! when its ticket is fetched.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_flight::HandshakeRequest;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_schema::SchemaRef;
use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use clap::Args;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use quiverdb::server::flight::DEFAULT_MAX_MESSAGE_BYTES;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use super::CliError;

/// Where the server is and how to authenticate.
#[derive(Debug, Clone, Args)]
pub(crate) struct ConnectArgs {
    /// The server's address.
    #[arg(long, default_value = "grpc://127.0.0.1:50051", env = "QUIVERDB_CONNECT")]
    pub(crate) connect: String,
    /// User name (with --password).
    #[arg(long, env = "QUIVERDB_USER", requires = "password")]
    pub(crate) user: Option<String>,
    /// Password (with --user).
    #[arg(long, env = "QUIVERDB_PASSWORD", requires = "user")]
    pub(crate) password: Option<String>,
    /// A static bearer token (instead of a user and password).
    #[arg(long, env = "QUIVERDB_TOKEN", conflicts_with_all = ["user", "password"])]
    pub(crate) token: Option<String>,
}

/// The port of a `grpc://` address without one: `quiverdb serve`'s default.
const DEFAULT_GRPC_PORT: u16 = 50051;

/// How long opening the TCP connection (and the TLS handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The environment variable naming a PEM file of trusted root
/// certificates for TLS connections (the OpenSSL convention).
const CA_FILE_VAR: &str = "SSL_CERT_FILE";

/// A parsed server address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// Whether the connection uses TLS.
    pub(crate) tls: bool,
    /// The host name or IP address (an IPv6 address without brackets).
    pub(crate) host: String,
    /// The TCP port.
    pub(crate) port: u16,
}

impl Target {
    /// Parses `grpc://host:port`, `grpc+tcp://`, `http://` (plain),
    /// `grpc+tls://` or `https://` (TLS), or a bare `host:port` (plain).
    /// A missing port is 50051 for the `grpc` schemes, 80 for `http` and
    /// 443 for `https`.
    pub(crate) fn parse(address: &str) -> Result<Self, String> {
        let (scheme, rest) = match address.split_once("://") {
            Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
            None => ("grpc".to_string(), address),
        };
        let (tls, default_port) = match scheme.as_str() {
            "grpc" | "grpc+tcp" => (false, DEFAULT_GRPC_PORT),
            "http" => (false, 80),
            "grpc+tls" => (true, DEFAULT_GRPC_PORT),
            "https" => (true, 443),
            other => {
                return Err(format!(
                    "unknown scheme '{other}' (use grpc://, grpc+tcp://, http://, grpc+tls:// or https://)"
                ));
            }
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#', '@']) {
            return Err("give only a host and a port, without a path, query or user".into());
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, after) = bracketed.split_once(']').ok_or("an IPv6 address misses its closing ']'")?;
            match after {
                "" => (host, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => return Err(format!("unexpected '{after}' after the IPv6 address")),
                },
            }
        } else {
            match authority.rsplit_once(':') {
                Some((host, _)) if host.contains(':') => {
                    return Err("write an IPv6 address in brackets: grpc://[::1]:50051".into());
                }
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err("the address names no host".into());
        }
        let port = match port {
            None => default_port,
            Some(p) => {
                p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| format!("'{p}' is not a port number"))?
            }
        };
        Ok(Self { tls, host: host.to_string(), port })
    }

    /// The URI tonic connects to.
    fn uri(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        if self.host.contains(':') {
            format!("{scheme}://[{}]:{}", self.host, self.port)
        } else {
            format!("{scheme}://{}:{}", self.host, self.port)
        }
    }
}

/// Why [`connect`] failed; every message names the address.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// The address does not parse.
    Address {
        /// The address as given.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A TLS address, but no root certificates to verify the server with.
    NoTlsRoots {
        /// The address as given.
        address: String,
    },
    /// The file of root certificates cannot be read.
    CaFile {
        /// The address as given.
        address: String,
        /// The file.
        path: String,
        /// The read error.
        source: std::io::Error,
    },
    /// The TCP connection or the TLS handshake failed.
    Transport {
        /// The address as given.
        address: String,
        /// The transport error.
        source: tonic::transport::Error,
    },
    /// The server refused the credentials or the handshake failed.
    Handshake {
        /// The address as given.
        address: String,
        /// The server's answer.
        source: Box<tonic::Status>,
    },
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Address { address, reason } => write!(f, "cannot connect to {address}: bad address: {reason}"),
            Self::NoTlsRoots { address } => write!(
                f,
                "cannot connect to {address}: this build has no built-in root certificates for TLS; \
                 set {CA_FILE_VAR} to a PEM file of the certificates to trust (the server's CA, or e.g. \
                 /etc/ssl/certs/ca-certificates.crt)"
            ),
            Self::CaFile { address, path, source } => {
                write!(f, "cannot connect to {address}: reading {CA_FILE_VAR}={path}: {source}")
            }
            Self::Transport { address, source } => write!(f, "cannot connect to {address}: {}", root_cause(source)),
            Self::Handshake { address, source } => {
                write!(f, "cannot authenticate to {address}: {}", status_message(source))
            }
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Address { .. } | Self::NoTlsRoots { .. } => None,
            Self::CaFile { source, .. } => Some(source),
            Self::Transport { source, .. } => Some(source),
            Self::Handshake { source, .. } => Some(source.as_ref()),
        }
    }
}

/// The innermost error of a chain, whose text says what actually went
/// wrong (tonic's outer errors only say "transport error").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// A gRPC status as a person reads it: its message, or its code's
/// description when it has none.
fn status_message(status: &tonic::Status) -> String {
    if status.message().is_empty() { status.code().description().to_string() } else { status.message().to_string() }
}

/// A failed request, displayed as the server's (or the transport's)
/// message.
#[derive(Debug)]
pub(crate) struct RequestError(pub(crate) FlightError);

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            FlightError::Tonic(status) => f.write_str(&status_message(status)),
            FlightError::Arrow(e) => write!(f, "{e}"),
            FlightError::ExternalError(e) => write!(f, "{e}"),
            other => write!(f, "{other}"),
        }
    }
}

impl std::error::Error for RequestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl From<FlightError> for RequestError {
    fn from(e: FlightError) -> Self {
        Self(e)
    }
}

impl From<arrow_schema::ArrowError> for RequestError {
    fn from(e: arrow_schema::ArrowError) -> Self {
        Self(FlightError::Arrow(e))
    }
}

impl RequestError {
    /// Whether the server refused the call's credentials (an expired token).
    fn is_unauthenticated(&self) -> bool {
        matches!(&self.0, FlightError::Tonic(status) if status.code() == tonic::Code::Unauthenticated)
    }
}

/// Opens a channel to the server `args` names and authenticates: a
/// Basic → Bearer handshake with `--user`/`--password`, or the static
/// bearer token of `--token`.
pub(crate) async fn connect(args: &ConnectArgs) -> Result<FlightSqlServiceClient<Channel>, CliError> {
    Ok(Session::connect(args).await?.client)
}

/// A connected, authenticated client and how it authenticated (to
/// renew an expired token).
#[derive(Debug)]
pub(crate) struct Session {
    client: FlightSqlServiceClient<Channel>,
    args: ConnectArgs,
}

/// The result of one statement, as it arrives.
pub(crate) struct Started {
    /// The result's schema (empty for DDL).
    pub(crate) schema: SchemaRef,
    /// The result's batches, fetched as they are read (dropping the
    /// stream cancels the statement on the server).
    pub(crate) batches: BoxStream<'static, Result<RecordBatch, RequestError>>,
}

impl fmt::Debug for Started {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Started").field("schema", &self.schema).finish_non_exhaustive()
    }
}

impl Session {
    /// Connects and authenticates as `args` says.
    pub(crate) async fn connect(args: &ConnectArgs) -> Result<Self, ConnectError> {
        let address = args.connect.clone();
        let target =
            Target::parse(&address).map_err(|reason| ConnectError::Address { address: address.clone(), reason })?;
        let endpoint = Endpoint::from_shared(target.uri())
            .map_err(|source| ConnectError::Transport { address: address.clone(), source })?
            .connect_timeout(CONNECT_TIMEOUT);
        let endpoint = if target.tls {
            let path =
                std::env::var_os(CA_FILE_VAR).ok_or_else(|| ConnectError::NoTlsRoots { address: address.clone() })?;
            let pem = std::fs::read(&path).map_err(|source| ConnectError::CaFile {
                address: address.clone(),
                path: path.to_string_lossy().into_owned(),
                source,
            })?;
            let tls =
                ClientTlsConfig::new().domain_name(target.host.clone()).ca_certificate(Certificate::from_pem(pem));
            endpoint.tls_config(tls).map_err(|source| ConnectError::Transport { address: address.clone(), source })?
        } else {
            endpoint
        };
        let channel =
            endpoint.connect().await.map_err(|source| ConnectError::Transport { address: address.clone(), source })?;
        let inner = FlightServiceClient::new(channel)
            .max_decoding_message_size(DEFAULT_MAX_MESSAGE_BYTES)
            .max_encoding_message_size(DEFAULT_MAX_MESSAGE_BYTES);
        let mut session = Self { client: FlightSqlServiceClient::new_from_inner(inner), args: args.clone() };
        session.authenticate().await?;
        Ok(session)
    }

    /// Sets the bearer token: the static one, or a fresh one from the
    /// handshake.
    async fn authenticate(&mut self) -> Result<(), ConnectError> {
        match (&self.args.user, &self.args.password, &self.args.token) {
            (_, _, Some(token)) => self.client.set_token(token.clone()),
            (Some(user), Some(password), None) => {
                let token = handshake(self.client.inner_mut(), user, password)
                    .await
                    .map_err(|source| ConnectError::Handshake { address: self.args.connect.clone(), source })?;
                self.client.set_token(token);
            }
            _ => {}
        }
        Ok(())
    }

    /// The address connected to, as given.
    pub(crate) fn address(&self) -> &str {
        &self.args.connect
    }

    /// Runs one SQL statement: `GetFlightInfo` (which runs DDL and DML),
    /// then `DoGet` on each endpoint's ticket as the batches are read.
    ///
    /// If the server refuses `GetFlightInfo` for an expired handshake
    /// token, authenticates again and retries once: the server checks the
    /// token before it runs anything. A failing `DoGet` is never retried
    /// (the statement has run by then).
    pub(crate) async fn start(&mut self, sql: &str) -> Result<Started, RequestError> {
        let info = match self.client.execute(sql.to_string(), None).await.map_err(RequestError) {
            Err(e) if e.is_unauthenticated() && self.args.user.is_some() => {
                if self.authenticate().await.is_err() {
                    return Err(e);
                }
                self.client.execute(sql.to_string(), None).await?
            }
            other => other?,
        };
        let schema: SchemaRef = Arc::new(info.clone().try_decode_schema()?);
        let client = self.client.clone();
        let tickets = info.endpoint.into_iter().filter_map(|e| e.ticket);
        let batches = futures::stream::iter(tickets)
            .then(move |ticket| {
                let mut client = client.clone();
                async move { client.do_get(ticket).await.map(|s| s.map_err(RequestError)).map_err(RequestError) }
            })
            .try_flatten()
            .boxed();
        Ok(Started { schema, batches })
    }
}

/// The Basic → Bearer handshake: sends `user:password` in an
/// `authorization: Basic` header and returns the bearer token the server
/// answers with (in its `authorization` header, or else as the payload).
///
/// Not [`FlightSqlServiceClient::handshake`], which flattens the server's
/// status into a string.
async fn handshake(
    client: &mut FlightServiceClient<Channel>,
    user: &str,
    password: &str,
) -> Result<String, Box<tonic::Status>> {
    let request = HandshakeRequest { protocol_version: 0, payload: Default::default() };
    let mut request = tonic::Request::new(futures::stream::iter([request]));
    let basic = basic_credentials(user, password);
    let value = basic
        .parse()
        .map_err(|_| tonic::Status::invalid_argument("the user or password cannot be sent in a header"))?;
    request.metadata_mut().insert("authorization", value);
    let response = client.handshake(request).await?;
    let header = response.metadata().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
    let payloads: Vec<_> = response.into_inner().try_collect().await?;
    if let Some(token) = header.as_deref().and_then(|h| h.strip_prefix("Bearer ")) {
        return Ok(token.trim().to_string());
    }
    let payload = payloads.into_iter().next().map(|r| r.payload).unwrap_or_default();
    match std::str::from_utf8(&payload) {
        Ok(token) if !token.is_empty() => Ok(token.to_string()),
        _ => Err(Box::new(tonic::Status::unauthenticated("the server's handshake returned no bearer token"))),
    }
}

/// The `authorization` header value of Basic credentials.
fn basic_credentials(user: &str, password: &str) -> String {
    format!("Basic {}", BASE64_STANDARD.encode(format!("{user}:{password}")))
}

#[cfg(test)]
mod tests {
    use super::{Target, basic_credentials};

    fn target(tls: bool, host: &str, port: u16) -> Target {
        Target { tls, host: host.into(), port }
    }

    #[test]
    fn plain_addresses() {
        assert_eq!(Target::parse("grpc://127.0.0.1:50051"), Ok(target(false, "127.0.0.1", 50051)));
        assert_eq!(Target::parse("grpc+tcp://db.example:7000"), Ok(target(false, "db.example", 7000)));
        assert_eq!(Target::parse("http://localhost:8080/"), Ok(target(false, "localhost", 8080)));
        assert_eq!(Target::parse("GRPC://localhost"), Ok(target(false, "localhost", 50051)));
        assert_eq!(Target::parse("http://localhost"), Ok(target(false, "localhost", 80)));
        assert_eq!(Target::parse("localhost:1234"), Ok(target(false, "localhost", 1234)));
        assert_eq!(Target::parse("grpc://[::1]:5000"), Ok(target(false, "::1", 5000)));
        assert_eq!(Target::parse("grpc://[::1]"), Ok(target(false, "::1", 50051)));
        assert_eq!(target(false, "::1", 5000).uri(), "http://[::1]:5000");
        assert_eq!(target(false, "localhost", 5000).uri(), "http://localhost:5000");
    }

    #[test]
    fn tls_addresses() {
        assert_eq!(Target::parse("grpc+tls://db.example:443"), Ok(target(true, "db.example", 443)));
        assert_eq!(Target::parse("grpc+tls://db.example"), Ok(target(true, "db.example", 50051)));
        assert_eq!(Target::parse("https://db.example"), Ok(target(true, "db.example", 443)));
        assert_eq!(target(true, "db.example", 443).uri(), "https://db.example:443");
    }

    #[test]
    fn bad_addresses() {
        for bad in [
            "ftp://host:1",
            "grpc://",
            "grpc://:50051",
            "grpc://host:0",
            "grpc://host:70000",
            "grpc://host:port",
            "grpc://host:1/path",
            "grpc://user@host:1",
            "grpc://::1:5000",
            "grpc://[::1",
            "grpc://[::1]x",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn basic_credentials_header() {
        assert_eq!(basic_credentials("user", "p\u{e4}ss"), "Basic dXNlcjpww6Rzcw==");
        assert_eq!(basic_credentials("alice", "s3cret"), "Basic YWxpY2U6czNjcmV0");
        assert_eq!(basic_credentials("", ""), "Basic Og==");
    }
}
