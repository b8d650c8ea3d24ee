//! Statements running on a server: what `system.queries` lists, what
//! `CANCEL <id>` and Flight SQL's `CancelFlightInfo` stop, and the one log
//! line each statement writes when it ends.
//!
//! ```text
//!   statement ──RunningQueries::start──▶ Running (id, client, SQL, state, rows)
//!        │                                   ▲ listed by system.queries
//!        ▼                                   │ cancelled by CANCEL / CancelFlightInfo / shutdown
//!   result stream ──cancellable──▶ client    │
//!        ends, fails, is cancelled or dropped ──▶ entry removed, "statement N: …" logged
//! ```
//!
//! Cancelling a query makes its result stream fail with `Cancelled` at its
//! next poll and drops the execution under it, which stops at its next
//! yield (see [`crate::admission::Slot::execute`]); a client that goes
//! away drops the stream the same way. A statement that changes data runs
//! to its end: stopping it half-way could not tell its client whether it
//! committed.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use arrow_array::RecordBatch;
use bytes::Bytes;
use futures::Stream;
use futures::stream::BoxStream;
use futures::task::AtomicWaker;

/// Tickets of cancelled statements remembered (so that fetching one after
/// its `CancelFlightInfo` fails); the oldest are forgotten first.
const CANCELLED_TICKETS: usize = 4096;

/// Characters of a statement's text shown and logged.
const SHOWN_SQL_CHARS: usize = 2000;

/// The statements running on a server.
#[derive(Debug, Default)]
pub struct RunningQueries {
    next_id: AtomicU64,
    running: Mutex<BTreeMap<u64, Arc<Running>>>,
    /// (ticket, owner) of statements cancelled before or while they ran.
    cancelled: Mutex<VecDeque<(Bytes, Option<String>)>>,
}

/// What a statement is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryState {
    /// Waiting for a slot (see [`crate::admission`]).
    Queued,
    /// Running, or sending its results.
    Running,
}

/// One running statement, as `system.queries` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryInfo {
    pub id: u64,
    /// The client's address.
    pub client: String,
    pub sql: String,
    pub started: SystemTime,
    pub seconds: f64,
    pub state: QueryState,
    /// Rows sent so far (for a query) or changed (for a statement that
    /// changes data, once it ends).
    pub rows: u64,
    /// True for a statement that changes data (it cannot be cancelled).
    pub changes: bool,
}

/// Why a statement was not cancelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelError {
    /// No statement with the id runs.
    NotRunning(u64),
    /// It changes data: it runs to its end.
    ChangesData(u64),
}

impl std::fmt::Display for CancelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CancelError::NotRunning(id) => write!(f, "no statement with id {id} is running (see system.queries)"),
            CancelError::ChangesData(id) => write!(
                f,
                "statement {id} changes data and runs to its end: stopping it half-way could not tell its client whether it committed"
            ),
        }
    }
}

impl std::error::Error for CancelError {}

#[derive(Debug)]
struct Running {
    id: u64,
    client: String,
    /// The authorization the request carried: who may cancel it by ticket.
    owner: Option<String>,
    sql: String,
    ticket: Option<Bytes>,
    started: SystemTime,
    start: Instant,
    changes: bool,
    /// A [`QueryState`] as a number.
    state: AtomicU8,
    rows: AtomicU64,
    cancelled: AtomicBool,
    waker: AtomicWaker,
}

/// A statement being registered: who sent it, and what.
#[derive(Debug, Clone, Default)]
pub(crate) struct Statement {
    pub(crate) client: Option<std::net::SocketAddr>,
    pub(crate) owner: Option<String>,
    pub(crate) sql: String,
    /// The ticket a query runs from (what `CancelFlightInfo` names).
    pub(crate) ticket: Option<Bytes>,
    pub(crate) changes: bool,
}

impl RunningQueries {
    /// Registers a statement; it is listed until the guard is dropped.
    pub(crate) fn start(self: &Arc<Self>, statement: Statement) -> RunningGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let sql = shown(&statement.sql);
        let running = Arc::new(Running {
            id,
            client: statement.client.map_or_else(|| "in-process".to_string(), |a| a.to_string()),
            owner: statement.owner,
            sql,
            ticket: statement.ticket,
            started: SystemTime::now(),
            start: Instant::now(),
            changes: statement.changes,
            state: AtomicU8::new(0),
            rows: AtomicU64::new(0),
            cancelled: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        lock(&self.running).insert(id, Arc::clone(&running));
        RunningGuard { registry: Arc::clone(self), running, outcome: None }
    }

    /// The statements running now, oldest first.
    pub fn list(&self) -> Vec<QueryInfo> {
        lock(&self.running)
            .values()
            .map(|r| QueryInfo {
                id: r.id,
                client: r.client.clone(),
                sql: r.sql.clone(),
                started: r.started,
                seconds: r.start.elapsed().as_secs_f64(),
                state: if r.state.load(Ordering::Acquire) == 0 { QueryState::Queued } else { QueryState::Running },
                rows: r.rows.load(Ordering::Relaxed),
                changes: r.changes,
            })
            .collect()
    }

    /// Cancels query `id`.
    pub fn cancel(&self, id: u64) -> Result<(), CancelError> {
        let running = lock(&self.running).get(&id).cloned().ok_or(CancelError::NotRunning(id))?;
        if running.changes {
            return Err(CancelError::ChangesData(id));
        }
        running.cancel();
        Ok(())
    }

    /// Cancels the queries running from `ticket` for `owner`, and remembers
    /// the ticket so that fetching it later fails; how many were running.
    pub(crate) fn cancel_ticket(&self, ticket: &Bytes, owner: Option<&str>) -> usize {
        let mut cancelled = lock(&self.cancelled);
        if cancelled.len() >= CANCELLED_TICKETS {
            cancelled.pop_front();
        }
        cancelled.push_back((ticket.clone(), owner.map(str::to_string)));
        drop(cancelled);
        let running: Vec<Arc<Running>> = lock(&self.running)
            .values()
            .filter(|r| !r.changes && r.ticket.as_ref() == Some(ticket) && r.owner.as_deref() == owner)
            .cloned()
            .collect();
        running.iter().for_each(|r| r.cancel());
        running.len()
    }

    /// True if `ticket` was cancelled for `owner` (see [`Self::cancel_ticket`]).
    pub(crate) fn ticket_cancelled(&self, ticket: &Bytes, owner: Option<&str>) -> bool {
        lock(&self.cancelled).iter().any(|(t, o)| t == ticket && o.as_deref() == owner)
    }

    /// Cancels every query (a server stopping); how many.
    pub fn cancel_all(&self) -> usize {
        let running: Vec<Arc<Running>> = lock(&self.running).values().filter(|r| !r.changes).cloned().collect();
        running.iter().for_each(|r| r.cancel());
        running.len()
    }
}

impl Running {
    fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.waker.wake();
    }
}

/// A registered statement: listed while this lives; logs its outcome when
/// dropped.
#[derive(Debug)]
pub(crate) struct RunningGuard {
    registry: Arc<RunningQueries>,
    running: Arc<Running>,
    /// How it ended, once known (`None` when dropped: its client went away).
    outcome: Option<Result<(), String>>,
}

impl RunningGuard {
    /// The statement's id.
    pub(crate) fn id(&self) -> u64 {
        self.running.id
    }

    /// The statement was admitted and runs.
    pub(crate) fn set_running(&self) {
        self.running.state.store(1, Ordering::Release);
    }

    /// Counts `rows` sent or changed.
    pub(crate) fn add_rows(&self, rows: u64) {
        self.running.rows.fetch_add(rows, Ordering::Relaxed);
    }

    /// Records how the statement ended.
    pub(crate) fn finish<T, E: std::fmt::Display>(&mut self, outcome: &Result<T, E>) {
        self.outcome = Some(outcome.as_ref().map(drop).map_err(|e| first_line(&e.to_string())));
    }

    fn cancelled(&self) -> bool {
        self.running.cancelled.load(Ordering::Acquire)
    }

    /// Completes once the statement is cancelled.
    pub(crate) fn until_cancelled(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            self.running.waker.register(cx.waker());
            if self.cancelled() { Poll::Ready(()) } else { Poll::Pending }
        })
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        lock(&self.registry.running).remove(&self.running.id);
        let r = &self.running;
        let ms = r.start.elapsed().as_secs_f64() * 1e3;
        let rows = r.rows.load(Ordering::Relaxed);
        let (id, client, sql) = (r.id, r.client.as_str(), one_line(&r.sql));
        match &self.outcome {
            Some(Ok(())) => tracing::info!("statement {id} from {client}: ok, {rows} rows, {ms:.1} ms: {sql}"),
            Some(Err(e)) => tracing::warn!("statement {id} from {client}: failed after {ms:.1} ms ({e}): {sql}"),
            None if self.cancelled() => {
                tracing::info!("statement {id} from {client}: cancelled after {ms:.1} ms, {rows} rows sent: {sql}")
            }
            None => tracing::info!(
                "statement {id} from {client}: abandoned by its client after {ms:.1} ms, {rows} rows sent: {sql}"
            ),
        }
    }
}

/// Logs statement `sql` from `client`, which failed after `elapsed`
/// without running (it did not plan): a statement's one line, as
/// [`RunningGuard`] writes for the others.
pub(crate) fn log_refused(client: Option<std::net::SocketAddr>, sql: &str, elapsed: std::time::Duration, error: &str) {
    let client = client.map_or_else(|| "in-process".to_string(), |a| a.to_string());
    let ms = elapsed.as_secs_f64() * 1e3;
    tracing::warn!(
        "statement from {client}: failed after {ms:.1} ms ({}): {}",
        first_line(error),
        one_line(&shown(sql))
    );
}

/// `batches`, failing with `Cancelled` once the statement of `guard` is
/// cancelled (and dropping the work under it then); counts the rows it
/// passes and records how it ended.
pub(crate) fn cancellable<E>(
    batches: BoxStream<'static, Result<RecordBatch, E>>,
    guard: RunningGuard,
    cancelled: impl Fn(u64) -> E + Send + Unpin + 'static,
) -> BoxStream<'static, Result<RecordBatch, E>>
where
    E: std::fmt::Display + Send + 'static,
{
    Box::pin(Cancellable { running: Some((batches, guard)), cancelled })
}

struct Cancellable<E, F> {
    /// The stream and its statement's entry, until the stream ends (then
    /// the statement is no longer listed, and logs its line).
    running: Option<(BoxStream<'static, Result<RecordBatch, E>>, RunningGuard)>,
    cancelled: F,
}

impl<E, F> Stream for Cancellable<E, F>
where
    E: std::fmt::Display,
    F: Fn(u64) -> E + Unpin,
{
    type Item = Result<RecordBatch, E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some((inner, guard)) = this.running.as_mut() else { return Poll::Ready(None) };
        guard.running.waker.register(cx.waker());
        if guard.cancelled() {
            // The execution stops as it is dropped; the guard logs it as
            // cancelled.
            let e = (this.cancelled)(guard.id());
            this.running = None;
            return Poll::Ready(Some(Err(e)));
        }
        let polled = inner.as_mut().poll_next(cx);
        match polled {
            Poll::Ready(Some(Ok(batch))) => {
                guard.add_rows(batch.num_rows() as u64);
                Poll::Ready(Some(Ok(batch)))
            }
            Poll::Ready(Some(Err(e))) => {
                guard.finish::<(), _>(&Err(&e));
                this.running = None;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                guard.finish::<(), String>(&Ok(()));
                this.running = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<E, F> Unpin for Cancellable<E, F> {}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section leaves the data consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// At most [`SHOWN_SQL_CHARS`] of `sql`.
fn shown(sql: &str) -> String {
    match sql.char_indices().nth(SHOWN_SQL_CHARS) {
        Some((at, _)) => format!("{}…", &sql[..at]),
        None => sql.to_string(),
    }
}

/// `sql` on one line, for the log.
fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn batch(n: i64) -> RecordBatch {
        let column = Arc::new(arrow_array::Int64Array::from_iter_values(0..n)) as arrow_array::ArrayRef;
        RecordBatch::try_from_iter([("x", column)]).unwrap()
    }

    fn query(sql: &str) -> Statement {
        Statement { sql: sql.into(), ticket: Some(Bytes::from(sql.to_string())), ..Statement::default() }
    }

    #[tokio::test]
    async fn a_cancelled_query_fails_and_leaves_the_list() {
        let registry = Arc::new(RunningQueries::default());
        let guard = registry.start(query("SELECT 1"));
        let id = guard.id();
        guard.set_running();
        // An endless stream: only cancelling ends it.
        let endless = futures::stream::repeat_with(|| Ok::<_, String>(batch(3))).boxed();
        let mut stream = cancellable(endless, guard, |id| format!("statement {id} was cancelled"));
        assert_eq!(stream.next().await.unwrap().unwrap().num_rows(), 3);
        let listed = registry.list();
        assert_eq!((listed.len(), listed[0].id, listed[0].state, listed[0].rows), (1, id, QueryState::Running, 3));
        registry.cancel(id).unwrap();
        assert_eq!(stream.next().await.unwrap().unwrap_err(), format!("statement {id} was cancelled"));
        assert!(stream.next().await.is_none());
        assert!(registry.list().is_empty(), "the work under it was dropped");
        assert_eq!(registry.cancel(id), Err(CancelError::NotRunning(id)));
    }

    #[tokio::test]
    async fn a_dropped_stream_leaves_the_list_and_changes_run_to_their_end() {
        let registry = Arc::new(RunningQueries::default());
        let stream = cancellable(
            futures::stream::pending::<Result<RecordBatch, String>>().boxed(),
            registry.start(query("SELECT 2")),
            |id| id.to_string(),
        );
        assert_eq!(registry.list().len(), 1);
        assert_eq!(registry.list()[0].state, QueryState::Queued);
        drop(stream);
        assert!(registry.list().is_empty());
        let change = registry.start(Statement { changes: true, ..query("DELETE FROM t") });
        assert_eq!(registry.cancel(change.id()), Err(CancelError::ChangesData(change.id())));
        assert_eq!(registry.cancel_all(), 0);
    }

    #[tokio::test]
    async fn a_ticket_is_cancelled_for_its_owner_only() {
        let registry = Arc::new(RunningQueries::default());
        let owned = |owner: &str| Statement { owner: Some(owner.into()), ..query("SELECT 3") };
        let mine = registry.start(owned("Bearer a"));
        let theirs = registry.start(owned("Bearer b"));
        let ticket = Bytes::from("SELECT 3");
        assert_eq!(registry.cancel_ticket(&ticket, Some("Bearer a")), 1);
        assert!(mine.cancelled() && !theirs.cancelled());
        assert!(registry.ticket_cancelled(&ticket, Some("Bearer a")));
        assert!(!registry.ticket_cancelled(&ticket, Some("Bearer b")));
        assert_eq!(registry.cancel_all(), 2);
        assert!(theirs.cancelled());
    }

    #[test]
    fn long_statements_are_shortened_for_the_list_and_the_log() {
        let long = "x".repeat(SHOWN_SQL_CHARS + 10);
        assert_eq!(shown(&long).chars().count(), SHOWN_SQL_CHARS + 1);
        assert_eq!(one_line("SELECT\n  1,\t2"), "SELECT 1, 2");
    }
}
