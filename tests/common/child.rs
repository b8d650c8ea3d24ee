//! A `quiverdb serve` child process for end-to-end tests against the real
//! binary: started on `127.0.0.1:0` (the address read from its log),
//! killed when dropped.

// Shared by several test crates, each using part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use arrow_flight::sql::client::FlightSqlServiceClient;
use tonic::transport::{Channel, Endpoint};

/// A `quiverdb serve` child process.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    /// The server's log lines after the startup line.
    pub(crate) log: mpsc::Receiver<String>,
    pub(crate) startup: Vec<String>,
}

impl Server {
    /// `quiverdb serve` on `dir`, with `extra` arguments.
    pub(crate) fn start(dir: &Path, extra: &[&str]) -> Self {
        Self::start_with(&[OsStr::new("--data-dir"), dir.as_os_str()], extra)
    }

    /// `quiverdb serve --in-memory`, with `extra` arguments.
    pub(crate) fn in_memory(extra: &[&str]) -> Self {
        Self::start_with(&[OsStr::new("--in-memory")], extra)
    }

    fn start_with(storage: &[&OsStr], extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_quiverdb"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(storage)
            .args(extra)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, log) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut startup = Vec::new();
        let addr = loop {
            let line = log.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|e| {
                panic!("the server did not start ({e}): {startup:#?}");
            });
            let found =
                line.split("Flight SQL on ").nth(1).and_then(|rest| rest.split_whitespace().next()?.parse().ok());
            startup.push(line);
            if let Some(addr) = found {
                break addr;
            }
        };
        Self { child, addr, log, startup }
    }

    pub(crate) async fn client(&self) -> FlightSqlServiceClient<Channel> {
        let channel = Endpoint::from_shared(format!("http://{}", self.addr)).unwrap().connect().await.unwrap();
        FlightSqlServiceClient::new(channel)
    }

    /// SIGTERM, and waits for a clean exit; the server's log.
    pub(crate) fn stop(mut self) -> Vec<String> {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the server exited with {status}");
        self.log.try_iter().collect()
    }

    /// Whether the process is still running.
    pub(crate) fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGKILL: no shutdown work at all.
    pub(crate) fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
