//! The background worker of a database: one thread that runs queued jobs
//! (shard rebuilds) in order, and lets callers wait until none is left.
//!
//! ```text
//!   submit(job) ──▶ channel ──▶ worker thread: job(); pending -= 1
//!   wait_idle()  blocks until pending == 0
//!   pause(true)  refuses new jobs (while a log is replayed)
//! ```
//!
//! One thread per database, started by the first job: on a 2-core
//! machine it leaves a core for foreground work. It runs at a lower
//! scheduling priority ([`BACKGROUND_NICE`]): while ingests and queries
//! keep the cores busy they go first, and rebuilds take what they leave
//! (a TPC-H load's rebuilds otherwise took two fifths of the machine
//! from the load itself); on an idle machine the priority changes nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, mpsc};

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

/// A queued unit of background work.
type Job = Box<dyn FnOnce() + Send>;

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
    tx: Arc<OnceLock<Option<mpsc::Sender<Job>>>>,
    pending: Arc<Pending>,
    /// Set while a log is replayed: replay makes exactly the rebuilds the
    /// log holds, and no others.
    paused: Arc<AtomicBool>,
}

impl Background {
    /// The worker's queue, starting the worker on first use.
    fn queue(&self) -> Option<&mpsc::Sender<Job>> {
        self.tx
            .get_or_init(|| {
                let (tx, rx) = mpsc::channel::<Job>();
                let pending = Arc::clone(&self.pending);
                std::thread::Builder::new()
                    .name("quiverdb-rebuild".into())
                    .spawn(move || {
                        lower_priority();
                        for job in rx {
                            job();
                            pending.add(-1);
                        }
                    })
                    .ok()
                    .map(|_| tx)
            })
            .as_ref()
    }

    /// Stops (`true`) or resumes accepting jobs.
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
        if queue.send(job).is_err() {
            self.pending.add(-1);
            return false;
        }
        true
    }

    /// Blocks until no job is queued or running.
    pub(crate) fn wait_idle(&self) {
        let mut count = self.pending.count.lock().unwrap_or_else(|e| e.into_inner());
        while *count > 0 {
            count = self.pending.idle.wait(count).unwrap_or_else(|e| e.into_inner());
        }
    }
}
