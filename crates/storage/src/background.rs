//! The background worker of a database: one thread that runs queued jobs
//! (shard rebuilds) in order, and lets callers wait until none is left.
//!
//! ```text
//!   submit(job)      ──▶ channel ──▶ worker thread: job(); pending -= 1
//!   settle(key, job) ──▶ channel ──▶ worker: run job once no settle(key)
//!                                    came for SETTLE_AFTER (the latest job)
//!   wait_idle()  blocks until pending == 0 (settling jobs not yet due do not count)
//!   pause(true)  refuses new jobs (while a log is replayed)
//! ```
//!
//! One thread per database, started by the first job: on a 2-core
//! machine it leaves a core for foreground work. It runs at a lower
//! scheduling priority ([`BACKGROUND_NICE`]): while ingests and queries
//! keep the cores busy they go first, and rebuilds take what they leave
//! (a TPC-H load's rebuilds otherwise took two fifths of the machine
//! from the load itself); on an idle machine the priority changes nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The nice value of the background thread (0 is the default, 19 the lowest).
const BACKGROUND_NICE: i32 = 10;

/// Lowers the calling thread's scheduling priority to [`BACKGROUND_NICE`]
/// (best effort: a failure leaves it where it was).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority reads no memory; on Linux `PRIO_PROCESS` with
    // `who` 0 applies to the calling thread only.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, BACKGROUND_NICE);
    }
}

/// How long a settling job waits for its key to be quiet (see
/// [`Background::settle`]).
pub(crate) const SETTLE_AFTER: Duration = Duration::from_secs(2);

/// A queued unit of background work.
type Job = Box<dyn FnOnce() + Send>;

/// What names a settling job: a later one with the same key replaces it.
pub(crate) type SettleKey = (usize, u64);

/// What the worker receives.
enum Message {
    Run(Job),
    Settle(SettleKey, Job),
}

/// The worker thread's loop: jobs in order; settling jobs once due,
/// between them.
fn work(rx: &mpsc::Receiver<Message>, pending: &Pending, paused: &AtomicBool) {
    let mut settling: HashMap<SettleKey, (Instant, Job)> = HashMap::new();
    loop {
        let now = Instant::now();
        let due: Vec<SettleKey> = settling.iter().filter(|(_, (at, _))| *at <= now).map(|(k, _)| *k).collect();
        for key in due {
            // While paused (a log replayed, a database closed) no
            // rebuild but the log's may run: settling jobs are dropped.
            if let Some((_, job)) = settling.remove(&key)
                && !paused.load(Ordering::Acquire)
            {
                pending.add(1);
                job();
                pending.add(-1);
            }
        }
        let message = match settling.values().map(|(at, _)| *at).min() {
            None => rx.recv().ok(),
            Some(next) => match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(message) => Some(message),
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => None,
            },
        };
        match message {
            Some(Message::Run(job)) => {
                job();
                pending.add(-1);
            }
            Some(Message::Settle(key, job)) => {
                settling.insert(key, (Instant::now() + SETTLE_AFTER, job));
            }
            // Every handle is gone: jobs not yet due are dropped with them.
            None => return,
        }
    }
}

/// Jobs queued or running, with a condition variable to wait for zero.
#[derive(Debug, Default)]
struct Pending {
    count: Mutex<usize>,
    idle: Condvar,
}

impl Pending {
    fn add(&self, n: isize) {
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        *count = count.saturating_add_signed(n);
        if *count == 0 {
            self.idle.notify_all();
        }
    }
}

/// The handle that queues background jobs. The worker thread lives while
/// any handle does.
#[derive(Debug, Clone, Default)]
pub(crate) struct Background {
    /// The worker's queue, once it started (`None` inside: it could not).
    tx: Arc<OnceLock<Option<mpsc::Sender<Message>>>>,
    pending: Arc<Pending>,
    /// Set while a log is replayed: replay makes exactly the rebuilds the
    /// log holds, and no others.
    paused: Arc<AtomicBool>,
}

impl Background {
    /// The worker's queue, starting the worker on first use.
    fn queue(&self) -> Option<&mpsc::Sender<Message>> {
        self.tx
            .get_or_init(|| {
                let (tx, rx) = mpsc::channel::<Message>();
                let (pending, paused) = (Arc::clone(&self.pending), Arc::clone(&self.paused));
                std::thread::Builder::new()
                    .name("quiverdb-rebuild".into())
                    .spawn(move || {
                        lower_priority();
                        work(&rx, &pending, &paused);
                    })
                    .ok()
                    .map(|_| tx)
            })
            .as_ref()
    }

    /// Stops (`true`) or resumes accepting jobs (settling jobs due while
    /// stopped are dropped).
    pub(crate) fn pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
    }

    /// Queues `job`; false (and `job` dropped) while paused, or when the
    /// worker thread could not be started.
    pub(crate) fn submit(&self, job: Job) -> bool {
        if self.paused.load(Ordering::Acquire) {
            return false;
        }
        let Some(queue) = self.queue() else { return false };
        self.pending.add(1);
        if queue.send(Message::Run(job)).is_err() {
            self.pending.add(-1);
            return false;
        }
        true
    }

    /// Queues `job` to run once [`SETTLE_AFTER`] has passed without
    /// another `settle` of `key`, which replaces it; false (and `job`
    /// dropped) while paused, or when the worker could not be started.
    pub(crate) fn settle(&self, key: SettleKey, job: Job) -> bool {
        if self.paused.load(Ordering::Acquire) {
            return false;
        }
        self.queue().is_some_and(|queue| queue.send(Message::Settle(key, job)).is_ok())
    }

    /// Blocks until no job is queued or running.
    pub(crate) fn wait_idle(&self) {
        let mut count = self.pending.count.lock().unwrap_or_else(|e| e.into_inner());
        while *count > 0 {
            count = self.pending.idle.wait(count).unwrap_or_else(|e| e.into_inner());
        }
    }
}
