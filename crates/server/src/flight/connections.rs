//! Bounds on client connections: how many may be open at once, how long a
//! new one may take to start speaking HTTP/2, and how long one may stay
//! idle.
//!
//! A connection beyond [`FlightOptions::max_connections`] is closed as
//! soon as it is accepted (the client sees its connection reset, and the
//! server keeps descriptors for the clients it serves). A connection that
//! has not sent the 24-byte HTTP/2 preface (or, with TLS, as many bytes of
//! its handshake) within [`FlightOptions::handshake_timeout`] is closed.
//! Once a connection speaks HTTP/2, the server's keepalive pings close it
//! when its peer stops answering, and a connection with no request open
//! for [`FlightOptions::idle_timeout`] is closed (its client reconnects
//! when it needs to): [`ActivityLayer`] counts each connection's open
//! requests, found by the peer address of the request.
//!
//! [`FlightOptions::max_connections`]: super::FlightOptions::max_connections
//! [`FlightOptions::handshake_timeout`]: super::FlightOptions::handshake_timeout
//! [`FlightOptions::idle_timeout`]: super::FlightOptions::idle_timeout

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo};

/// The bytes a client sends first: HTTP/2's connection preface.
const PREFACE_BYTES: usize = 24;

/// The most connections a server allows by default: what the process's
/// descriptor limit leaves after 64 for files and the like, at most 4,096
/// and at least 16.
pub(crate) fn default_max_connections() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the limits into the struct it is given.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    soft.saturating_sub(64).clamp(16, 4096)
}

/// The accepted connections of `listener`, at most `max` open at once,
/// each closed unless it sends its preface within `handshake`, and once
/// no request of it has been open for `idle` (counted by [`ActivityLayer`]
/// over `open`).
pub(crate) fn limited(
    listener: TcpListener,
    max: usize,
    handshake: Duration,
    idle: Duration,
    open: OpenConnections,
) -> impl Stream<Item = io::Result<Limited>> + Send + 'static {
    let permits = Arc::new(Semaphore::new(max));
    futures::stream::unfold((listener, permits), move |(listener, permits)| {
        let open = open.clone();
        async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors, or a connection reset before it
                        // was accepted: not the server's end.
                        tracing::warn!("accepting a connection failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                    tracing::warn!("refused a connection from {peer}: {max} are open (--max-connections)");
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let io = Limited {
                    io: stream,
                    _permit: permit,
                    deadline: Some(Box::pin(tokio::time::sleep(handshake))),
                    read: 0,
                    idle,
                    idle_check: Box::pin(tokio::time::sleep(idle)),
                    activity: open.register(peer),
                    peer,
                    open: open.clone(),
                };
                return Some((Ok(io), (listener, permits)));
            }
        }
    })
}

/// What a connection is doing: how many of its requests are open, and
/// when the last one started or ended.
#[derive(Debug)]
pub(crate) struct Activity {
    requests: AtomicUsize,
    /// Milliseconds from the registry's start.
    last: AtomicU64,
    since: Instant,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Release);
    }

    /// When the connection has been idle for `idle`; `None` while a request
    /// is open.
    fn idle_at(&self, idle: Duration) -> Option<Instant> {
        if self.requests.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(self.since + Duration::from_millis(self.last.load(Ordering::Acquire)) + idle)
    }
}

/// The open connections by peer address, for [`ActivityLayer`] to find a
/// request's connection.
#[derive(Debug, Clone)]
pub(crate) struct OpenConnections {
    by_peer: Arc<Mutex<HashMap<SocketAddr, Weak<Activity>>>>,
    since: Instant,
}

impl Default for OpenConnections {
    fn default() -> Self {
        Self { by_peer: Arc::default(), since: Instant::now() }
    }
}

impl OpenConnections {
    fn register(&self, peer: SocketAddr) -> Arc<Activity> {
        let activity = Arc::new(Activity { requests: AtomicUsize::new(0), last: AtomicU64::new(0), since: self.since });
        activity.touch();
        if let Ok(mut by_peer) = self.by_peer.lock() {
            by_peer.insert(peer, Arc::downgrade(&activity));
        }
        activity
    }

    /// Forgets `peer`'s connection `activity` (not a newer connection from
    /// the same address).
    fn forget(&self, peer: &SocketAddr, activity: &Arc<Activity>) {
        if let Ok(mut by_peer) = self.by_peer.lock()
            && by_peer.get(peer).is_some_and(|known| std::ptr::eq(known.as_ptr(), Arc::as_ptr(activity)))
        {
            by_peer.remove(peer);
        }
    }

    fn of(&self, peer: &SocketAddr) -> Option<Arc<Activity>> {
        self.by_peer.lock().ok()?.get(peer)?.upgrade()
    }
}

/// An accepted connection: holds its place among the open ones, and has a
/// deadline until its first [`PREFACE_BYTES`] bytes arrive.
#[derive(Debug)]
pub(crate) struct Limited {
    io: TcpStream,
    _permit: OwnedSemaphorePermit,
    deadline: Option<Pin<Box<Sleep>>>,
    read: usize,
    idle: Duration,
    idle_check: Pin<Box<Sleep>>,
    activity: Arc<Activity>,
    peer: SocketAddr,
    open: OpenConnections,
}

impl Drop for Limited {
    fn drop(&mut self) {
        self.open.forget(&self.peer, &self.activity);
    }
}

impl AsyncRead for Limited {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Some(deadline) = &mut this.deadline {
            this.read += buf.filled().len() - before;
            if this.read >= PREFACE_BYTES {
                this.deadline = None;
            } else if polled.is_pending() && deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client did not start speaking HTTP/2 in time",
                )));
            }
        } else if polled.is_pending() {
            // Checked again when idle long enough, or (with a request open)
            // a timeout from now; keepalive pings read here too.
            let due = this.activity.idle_at(this.idle);
            if due.is_some_and(|due| due <= Instant::now()) {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the connection was idle")));
            }
            this.idle_check.as_mut().reset(due.unwrap_or_else(|| Instant::now() + this.idle));
            let _ = this.idle_check.as_mut().poll(cx);
        }
        polled
    }
}

impl AsyncWrite for Limited {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl Connected for Limited {
    type ConnectInfo = <TcpStream as Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// The tower layer that counts each connection's open requests (for the
/// idle timeout of [`limited`]): from a request's arrival to the end of
/// its response body.
#[derive(Debug, Clone)]
pub(crate) struct ActivityLayer {
    open: OpenConnections,
}

impl ActivityLayer {
    pub(crate) fn new(open: OpenConnections) -> Self {
        Self { open }
    }
}

impl<S> tower::Layer<S> for ActivityLayer {
    type Service = ActivityService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ActivityService { inner, open: self.open.clone() }
    }
}

/// See [`ActivityLayer`].
#[derive(Debug, Clone)]
pub(crate) struct ActivityService<S> {
    inner: S,
    open: OpenConnections,
}

impl<S, B> tower::Service<http::Request<B>> for ActivityService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let extensions = request.extensions();
        let peer = extensions
            .get::<TcpConnectInfo>()
            .and_then(TcpConnectInfo::remote_addr)
            .or_else(|| extensions.get::<TlsConnectInfo<TcpConnectInfo>>().and_then(|i| i.get_ref().remote_addr()));
        let open = peer.and_then(|peer| self.open.of(&peer)).map(Open::new);
        self.inner
            .call(request)
            .map(move |response| {
                response.map(|response| match open {
                    Some(open) => response.map(|body| tonic::body::Body::new(Counted { body, _open: open })),
                    None => response,
                })
            })
            .boxed()
    }
}

/// One open request of a connection, counted until dropped.
#[derive(Debug)]
struct Open(Arc<Activity>);

impl Open {
    fn new(activity: Arc<Activity>) -> Self {
        activity.requests.fetch_add(1, Ordering::AcqRel);
        activity.touch();
        Self(activity)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.touch();
        self.0.requests.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted as open.
struct Counted {
    body: tonic::body::Body,
    _open: Open,
}

impl http_body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
