//! Bounds on client connections: how many may be open at once, and how
//! long a new one may take to start speaking HTTP/2.
//!
//! A connection beyond [`FlightOptions::max_connections`] is closed as
//! soon as it is accepted (the client sees its connection reset, and the
//! server keeps descriptors for the clients it serves). A connection that
//! has not sent the 24-byte HTTP/2 preface (or, with TLS, as many bytes of
//! its handshake) within [`FlightOptions::handshake_timeout`] is closed.
//! Once a connection speaks HTTP/2, the server's keepalive pings close it
//! when its peer stops answering.
//!
//! [`FlightOptions::max_connections`]: super::FlightOptions::max_connections
//! [`FlightOptions::handshake_timeout`]: super::FlightOptions::handshake_timeout

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tonic::transport::server::Connected;

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
/// each closed unless it sends its preface within `handshake`.
pub(crate) fn limited(
    listener: TcpListener,
    max: usize,
    handshake: Duration,
) -> impl Stream<Item = io::Result<Limited>> + Send + 'static {
    let permits = Arc::new(Semaphore::new(max));
    futures::stream::unfold((listener, permits), move |(listener, permits)| async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was
                    // accepted: not the server's end.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                tracing::warn!(
                    "refused a connection from {}: {max} are open (--max-connections)",
                    stream.peer_addr().map_or_else(|_| "?".to_string(), |a| a.to_string())
                );
                continue;
            };
            let _ = stream.set_nodelay(true);
            let io = Limited {
                io: stream,
                _permit: permit,
                deadline: Some(Box::pin(tokio::time::sleep(handshake))),
                read: 0,
            };
            return Some((Ok(io), (listener, permits)));
        }
    })
}

/// An accepted connection: holds its place among the open ones, and has a
/// deadline until its first [`PREFACE_BYTES`] bytes arrive.
#[derive(Debug)]
pub(crate) struct Limited {
    io: TcpStream,
    _permit: OwnedSemaphorePermit,
    deadline: Option<Pin<Box<Sleep>>>,
    read: usize,
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
