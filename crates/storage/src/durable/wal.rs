//! The write-ahead log: records appended in order to numbered segment
//! files (`wal-<first lsn>.log`, framed by [`frame`]), made durable by the
//! [`SyncMode`].
//!
//! Writers [`Wal::append`] a record (getting its log sequence number, LSN)
//! and then [`Wal::commit`] it before acknowledging. With
//! [`SyncMode::Always`] commits share syncs (group commit): while one
//! writer writes and syncs everything buffered so far, the others keep
//! appending, and the next sync covers all of them. A failed write or sync
//! makes the log refuse every later append with [`Error::ReadOnly`]: what
//! reached the disk is unknown, so it never retries and carries on.
//!
//! Segments are prepared ahead: written full of zeros (by a background
//! thread once the current segment is half full), so that appending a
//! record writes over pages the operating system already holds. Writing
//! a new file costs a page allocation and a block reservation per 4 KiB,
//! which made the write several times slower than the copy. With
//! [`SyncMode::Always`] the zeros are synced too, so a commit's sync
//! writes over disk blocks already allocated and need not update the
//! file's size; the other modes leave them to the sync that closes the
//! segment, which then writes each page once.
//!
//! A record's batches are not copied into the log's buffer: their Arrow
//! buffers are held by reference ([`FrameBuf`]) and written from where
//! they are, with one vectored write per flush. On open, writing goes on
//! in the last segment after its last complete record.
//!
//! A frame holds at most 1 GiB. A larger record (a bulk load sent in one
//! request) is split into [`frame::CONTINUED`] frames and a last frame of
//! its own type, appended together and so written in one flush to one
//! segment; reading joins them back into one record. Each frame takes an
//! LSN, and a record's LSN is its last frame's. Parts without their last
//! frame at the end of the log are a torn tail.
//!
//! A transaction may write its appends ahead of its commit (staged parts,
//! see [`super::record`]): it [`Wal::pin`]s the log first, and
//! [`Wal::remove_through`] keeps the segments from the pin on, whatever a
//! checkpoint covers, until the record that commits the parts is appended.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::frame::{self, End, FrameBuf};
use super::io::{AppendFile, StorageIo, create_zeroed, remove_temporary};
use super::lock::DirLock;
use crate::error::{Error, Result};

/// The default size of a log segment: a new one starts once the current
/// one holds this many bytes.
pub(crate) const SEGMENT_BYTES: u64 = 64 << 20;

/// The smallest segment size a log accepts.
pub(crate) const MIN_SEGMENT_BYTES: u64 = 4 << 10;

/// Writeback of the segment is started each time this many bytes were
/// written, so the sync that ends a full segment (or, with `always`, the
/// commit after a bulk load's staged parts) finds little left to write.
const WRITEBACK_BYTES: u64 = 4 << 20;

/// The next segment, prepared (full of zeros; synced with `always`) but not in use yet.
const PREPARED: &str = "next-segment";

/// A transaction holding this many bytes of appends not logged yet writes
/// them to the log ahead of its commit (see [`crate::change::ChangeLog::stage`]):
/// large enough that the parts cost little, small enough that a bulk
/// load's log is written while its rows arrive.
const STAGE_BYTES: usize = 8 << 20;

/// A flushed buffer up to this size is kept for the next flush.
const SPARE_BYTES: usize = 64 << 20;

/// When a committed record becomes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// Synced before the commit is acknowledged; concurrent commits share syncs.
    Always,
    /// Written at commit and synced by a background thread every interval:
    /// a power loss can lose the commits of the last interval (a process
    /// crash loses nothing, the operating system holds the writes).
    Batch(Duration),
    /// Written at commit, synced only when a segment is full: a power
    /// loss can lose anything the operating system had not written back.
    Off,
}

/// One record read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// Its log sequence number (the first record of a log is 1): its last
    /// frame's.
    pub lsn: u64,
    /// Its first frame's LSN: `lsn` unless the record was split.
    pub first_lsn: u64,
    /// Its type.
    pub kind: u8,
    /// Its payload.
    pub payload: Vec<u8>,
    /// The segment file holding it, and the offset of its frame there.
    pub segment: Arc<Path>,
    pub offset: u64,
}

/// What [`read_log`] found.
#[derive(Debug, Default)]
pub(crate) struct LogContents {
    /// Every complete record, in order.
    pub records: Vec<Record>,
    /// A write cut short at the end of the log: the segment, the offset
    /// and the number of bytes dropped.
    pub torn: Option<(PathBuf, u64, u64)>,
    /// Damage in the last segment dropped because the caller said to
    /// (see [`read_log`]): the segment, the offset, the bytes dropped and
    /// what was wrong.
    pub dropped: Option<(PathBuf, u64, u64, String)>,
    /// The last segment, and where its last complete record ends.
    pub end: Option<(PathBuf, u64)>,
}

fn segment_name(first_lsn: u64) -> String {
    format!("wal-{first_lsn:020}.log")
}

/// The segments of the log in `dir` with the LSN of their first record, in order.
fn segments(io: &dyn StorageIo, dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for name in io.list(dir).map_err(|e| Error::io(dir, e))? {
        let first = name.strip_prefix("wal-").and_then(|n| n.strip_suffix(".log")).and_then(|n| n.parse::<u64>().ok());
        if let Some(first) = first {
            out.push((first, dir.join(name)));
        }
    }
    out.sort();
    Ok(out)
}

/// Reads the log in `dir` up to its last complete record. A torn write is
/// accepted only at the very end of the last segment; damage anywhere
/// else, or a gap between segments, is [`Error::Corrupt`] — except, with
/// `drop_damage` = `Some(n)`, damage in the last segment after record `n`
/// (the one a checkpoint covers through), where the log then ends:
/// everything from the damaged frame on is dropped and reported.
pub(crate) fn read_log(io: &dyn StorageIo, dir: &Path, drop_damage: Option<u64>) -> Result<LogContents> {
    let segments = segments(io, dir)?;
    let mut out = LogContents::default();
    let mut next: Option<u64> = None;
    for (i, (first, path)) in segments.iter().enumerate() {
        let corrupt = |offset: u64, what: String| Error::Corrupt { file: path.clone(), offset, what };
        if let Some(expected) = next
            && *first != expected
        {
            return Err(corrupt(0, format!("segment starts at record {first}, expected {expected}")));
        }
        let (mut bytes, len) = io.read_data(path).map_err(|e| Error::io(path, e))?;
        frame::restore_zeros(&mut bytes, len);
        let (frames, end) = frame::scan_all(&bytes);
        let last = i + 1 == segments.len();
        match end {
            End::Torn { offset, bytes } => {
                if !last {
                    return Err(corrupt(offset, "incomplete record before the last segment".into()));
                }
                out.torn = Some((path.clone(), offset, bytes));
            }
            End::Damaged { offset, bytes, what } => {
                let damaged_lsn = *first + frames.len() as u64;
                match drop_damage {
                    Some(covered) if last && damaged_lsn > covered => {
                        out.dropped = Some((path.clone(), offset, bytes, what.to_string()));
                    }
                    Some(covered) if last => {
                        return Err(corrupt(
                            offset,
                            format!(
                                "{what} (in log record {damaged_lsn}, which the checkpoint through record {covered} needs the records after: it cannot be dropped)"
                            ),
                        ));
                    }
                    _ => {
                        let hint = if last { " (a record written whole whose bytes changed since)" } else { "" };
                        return Err(corrupt(offset, format!("{what}{hint}")));
                    }
                }
            }
            End::Clean { .. } => {}
        }
        out.end = Some((path.clone(), end.offset()));
        let mut lsn = *first;
        let segment: Arc<Path> = Arc::from(path.as_path());
        // The parts of a split record read so far: its first frame's
        // offset, their payloads, and how many.
        let mut parts: Option<(u64, Vec<u8>, u64)> = None;
        for f in frames {
            if f.kind == frame::CONTINUED {
                let (_, payload, n) = parts.get_or_insert_with(|| (f.offset, Vec::new(), 0));
                payload.extend_from_slice(f.payload);
                *n += 1;
                lsn += 1;
                continue;
            }
            let (offset, payload, first_lsn) = match parts.take() {
                Some((offset, mut payload, n)) => {
                    payload.extend_from_slice(f.payload);
                    (offset, payload, lsn - n)
                }
                None => (f.offset, f.payload.to_vec(), lsn),
            };
            out.records.push(Record { lsn, first_lsn, kind: f.kind, payload, segment: Arc::clone(&segment), offset });
            lsn += 1;
        }
        if let Some((offset, _, n)) = parts {
            // Parts of a record whose last frame was never written: a
            // split record is written at once, so only a crash leaves this,
            // and only at the end of the log.
            if i + 1 != segments.len() {
                return Err(corrupt(offset, "incomplete split record before the last segment".into()));
            }
            let data = frame::data_end(&bytes[offset as usize..]) as u64;
            out.torn = Some((path.clone(), offset, data));
            out.end = Some((path.clone(), offset));
            lsn -= n;
        }
        next = Some(lsn);
    }
    Ok(out)
}

/// An open write-ahead log.
#[derive(Debug, Clone)]
pub(crate) struct Wal {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    io: Arc<dyn StorageIo>,
    dir: PathBuf,
    mode: SyncMode,
    segment_bytes: u64,
    /// The preparation of the next segment.
    prepared: Arc<Prepared>,
    preparer: Mutex<Option<JoinHandle<()>>>,
    state: Mutex<State>,
    /// Signalled whenever a flush ends.
    flushed: Condvar,
    /// The data directory's lock, held while anything can still append.
    lock: OnceLock<DirLock>,
    /// The largest frame payload written: a larger record is split
    /// ([`frame::MAX_PAYLOAD`]; tests lower it).
    frame_bytes: AtomicUsize,
    /// [`STAGE_BYTES`] (tests lower it).
    stage_bytes: AtomicUsize,
    /// Pinned LSNs (each with its number of pins): segments holding them
    /// or anything after are kept.
    pins: Mutex<BTreeMap<u64, usize>>,
}

/// Keeps the log's segments from an LSN on (see [`Wal::pin`]) until
/// dropped, and counts the bytes of the parts staged under it.
#[derive(Debug)]
pub(crate) struct LogPin {
    inner: Weak<Inner>,
    lsn: u64,
    staged: AtomicU64,
}

impl Drop for LogPin {
    fn drop(&mut self) {
        let Some(inner) = self.inner.upgrade() else { return };
        if let Ok(mut pins) = inner.pins.lock()
            && let Some(n) = pins.get_mut(&self.lsn)
        {
            *n -= 1;
            if *n == 0 {
                pins.remove(&self.lsn);
            }
        }
        // The parts now count towards the next checkpoint (their commit
        // is logged, or nothing will apply them).
        if let Ok(mut state) = inner.lock() {
            state.staged_open = state.staged_open.saturating_sub(*self.staged.get_mut());
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Frames appended but not written yet, and the LSN of the last one.
    buffer: FrameBuf,
    /// The buffer of the last flush, emptied, for the next one (so its
    /// memory is reused rather than allocated and faulted in again).
    spare: FrameBuf,
    last_lsn: u64,
    /// Records handed to the file, and records known durable.
    written_lsn: u64,
    durable_lsn: u64,
    /// The segment being written; `None` while a flush has it.
    segment: Option<Segment>,
    failed: Option<String>,
    /// Bytes of frames appended since open, and of those the bytes of
    /// staged parts whose pin is still held.
    appended_bytes: u64,
    staged_open: u64,
    /// Records appended and syncs made since open.
    appended: u64,
    syncs: u64,
    /// A sync is in flight (on a second handle of the segment).
    syncing: bool,
}

/// What a log has done since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Records appended.
    pub records: u64,
    /// Bytes appended (frames: headers and payloads).
    pub bytes: u64,
    /// Syncs of the log file: with [`SyncMode::Always`] and concurrent
    /// writers, fewer than records (group commit).
    pub syncs: u64,
}

/// Where the next segment stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Preparation {
    #[default]
    None,
    Running,
    /// Its file ([`PREPARED`]) is whole (and synced, with `always`).
    Ready,
}

/// The preparation of the next segment, shared with the thread doing it.
#[derive(Debug, Default)]
struct Prepared {
    state: Mutex<Preparation>,
    /// Asks a running preparation to stop (the log is closing).
    cancel: AtomicBool,
}

impl Prepared {
    fn get(&self) -> Preparation {
        self.state.lock().map_or(Preparation::None, |s| *s)
    }

    fn set(&self, to: Preparation) {
        if let Ok(mut state) = self.state.lock() {
            *state = to;
        }
    }
}

/// The segment file being appended to.
#[derive(Debug)]
struct Segment {
    file: Box<dyn AppendFile>,
    path: PathBuf,
    /// Bytes written to it so far, and since its writeback last started.
    bytes: u64,
    unsynced: u64,
}

impl Wal {
    /// Opens the log in `dir` (created if missing) for appending after its
    /// existing records, which it returns for replay; a new segment starts
    /// once the current one holds `segment_bytes`. A torn tail (and, with
    /// `drop_damage`, damage at the end of the log: see [`read_log`]) is
    /// reported in the contents and zeroed; writing goes on where it starts.
    pub(crate) fn open(
        io: Arc<dyn StorageIo>,
        dir: &Path,
        mode: SyncMode,
        segment_bytes: u64,
        drop_damage: Option<u64>,
    ) -> Result<(Self, LogContents)> {
        if segment_bytes < MIN_SEGMENT_BYTES {
            return Err(Error::InvalidOption {
                option: "log segment bytes",
                reason: format!("{segment_bytes} is less than the smallest segment, {MIN_SEGMENT_BYTES} bytes"),
            });
        }
        io.create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let contents = read_log(io.as_ref(), dir, drop_damage)?;
        let dropped = contents.dropped.as_ref().map(|(path, offset, bytes, _)| (path, offset, bytes));
        if let Some((path, offset, bytes)) = contents.torn.as_ref().map(|(p, o, b)| (p, o, b)).or(dropped) {
            let zeroed = io.open_at(path, *offset).and_then(|mut file| {
                file.write(&vec![0; *bytes as usize])?;
                file.sync()
            });
            zeroed.map_err(|e| Error::io(path, e))?;
        }
        let last_lsn = contents.records.last().map_or_else(
            || segments(io.as_ref(), dir).map(|s| s.last().map_or(0, |(first, _)| first - 1)),
            |r| Ok(r.lsn),
        )?;
        remove_temporary(io.as_ref(), dir, PREPARED).map_err(|e| Error::io(dir, e))?;
        let ready = io.list(dir).map_err(|e| Error::io(dir, e))?.iter().any(|n| n == PREPARED);
        // Room for what opening writes: a new segment unless the last one
        // has room, and the next one, prepared full of zeros. Refused
        // here, not at the first write after the server said it serves.
        let continues = matches!(&contents.end, Some((_, offset)) if *offset < segment_bytes);
        let needed = segment_bytes * (u64::from(!ready) + u64::from(!continues));
        if let Some(available) = io.available_bytes(dir).map_err(|e| Error::io(dir, e))?
            && available < needed
        {
            return Err(Error::NoSpace { dir: dir.display().to_string(), available, needed, segment_bytes });
        }
        if ready && mode == SyncMode::Always {
            // It may have been prepared without a sync (in another mode).
            let path = dir.join(PREPARED);
            io.open_at(&path, 0).and_then(|mut file| file.sync()).map_err(|e| Error::io(&path, e))?;
        }
        let prepared = Prepared::default();
        prepared.set(if ready { Preparation::Ready } else { Preparation::None });
        let inner = Inner {
            io,
            dir: dir.to_path_buf(),
            mode,
            segment_bytes,
            prepared: Arc::new(prepared),
            preparer: Mutex::default(),
            state: Mutex::default(),
            flushed: Condvar::new(),
            lock: OnceLock::new(),
            frame_bytes: AtomicUsize::new(frame::MAX_PAYLOAD),
            stage_bytes: AtomicUsize::new(STAGE_BYTES),
            pins: Mutex::default(),
        };
        let segment = match &contents.end {
            Some((path, offset)) if *offset < segment_bytes => {
                let file = inner.io.open_at(path, *offset).map_err(|e| Error::io(path, e))?;
                Segment { file, path: path.clone(), bytes: *offset, unsynced: 0 }
            }
            _ => {
                if inner.prepared.get() == Preparation::None {
                    // Not on a writer's path: prepare it here.
                    inner.prepare(false);
                }
                inner.new_segment(last_lsn + 1)?
            }
        };
        if segment.bytes >= segment_bytes / 2 {
            inner.prepare(true);
        }
        *inner.lock()? = State {
            buffer: FrameBuf::default(),
            spare: FrameBuf::default(),
            last_lsn,
            written_lsn: last_lsn,
            durable_lsn: last_lsn,
            segment: Some(segment),
            failed: None,
            appended_bytes: 0,
            staged_open: 0,
            appended: 0,
            syncs: 0,
            syncing: false,
        };
        let inner = Arc::new(inner);
        if let SyncMode::Batch(interval) = mode {
            let weak = Arc::downgrade(&inner);
            std::thread::Builder::new()
                .name("quiverdb-wal-sync".into())
                .spawn(move || batch_syncs(&weak, interval))
                .map_err(|e| Error::io(dir, e))?;
        }
        Ok((Self { inner }, contents))
    }

    /// Appends a record; its LSN. It is durable once [`Wal::commit`]
    /// of this LSN (or a later one) returns.
    #[cfg(test)]
    pub(crate) fn append(&self, kind: u8, payload: &[u8]) -> Result<u64> {
        self.append_with(|out| {
            out.bytes().extend_from_slice(payload);
            Ok(kind)
        })
    }

    /// [`Wal::append`] of the payload `write` appends to the buffer it is
    /// given (the log's own, so the record is encoded in place, and the
    /// large Arrow buffers it pushes are written to the file from where
    /// they are); `write` returns the record's type. If it fails, nothing
    /// is appended.
    pub(crate) fn append_with(&self, write: impl FnOnce(&mut FrameBuf) -> Result<u8>) -> Result<u64> {
        Ok(self.append_frames(write)?.0)
    }

    /// [`Wal::append_with`] of a staged part under `pin`: its bytes count
    /// towards [`Wal::appended_bytes`] only once the pin is dropped.
    pub(crate) fn append_staged(&self, pin: &LogPin, write: impl FnOnce(&mut FrameBuf) -> Result<u8>) -> Result<u64> {
        let (lsn, bytes) = self.append_frames(write)?;
        pin.staged.fetch_add(bytes, Ordering::Relaxed);
        self.inner.lock()?.staged_open += bytes;
        Ok(lsn)
    }

    /// Appends a record; its LSN and its bytes in the log.
    fn append_frames(&self, write: impl FnOnce(&mut FrameBuf) -> Result<u8>) -> Result<(u64, u64)> {
        let mut state = self.inner.lock()?;
        if let Some(reason) = &state.failed {
            return Err(Error::ReadOnly(reason.clone()));
        }
        let start = state.buffer.start();
        let written = write(&mut state.buffer);
        let len = state.buffer.payload_len(start);
        let kind = match written {
            Ok(kind) => kind,
            Err(e) => {
                state.buffer.truncate(start);
                return Err(e);
            }
        };
        let max = self.inner.frame_bytes.load(Ordering::Relaxed);
        let frames = if len > max {
            // A record too large for one frame (a bulk load in one
            // transaction) goes in parts, all in this one write.
            state.buffer.split(start, kind, max)
        } else {
            state.buffer.seal(start, kind);
            1
        };
        let bytes = (frames * frame::OVERHEAD + len) as u64;
        state.appended_bytes += bytes;
        state.appended += 1;
        state.last_lsn += frames as u64;
        Ok((state.last_lsn, bytes))
    }

    /// Splits records larger than `bytes` into frames of at most `bytes`
    /// (as records over [`frame::MAX_PAYLOAD`] are), so tests can write
    /// split records without gigabytes of data.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn set_frame_bytes(&self, bytes: usize) {
        self.inner.frame_bytes.store(bytes.clamp(1, frame::MAX_PAYLOAD), Ordering::Relaxed);
    }

    /// The bytes of appends a transaction holds before it stages them.
    pub(crate) fn stage_bytes(&self) -> usize {
        self.inner.stage_bytes.load(Ordering::Relaxed)
    }

    /// Makes transactions stage their appends once they hold `bytes`, so
    /// tests stage parts without megabytes of data.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn set_stage_bytes(&self, bytes: usize) {
        self.inner.stage_bytes.store(bytes.max(1), Ordering::Relaxed);
    }

    /// Waits until record `lsn` is as durable as the sync mode promises.
    pub(crate) fn commit(&self, lsn: u64) -> Result<()> {
        let sync = self.inner.mode == SyncMode::Always;
        self.inner.flush_through(lsn, sync)
    }

    /// Writes and syncs everything appended so far, whatever the mode.
    /// A failed log refuses, even with nothing left to sync.
    pub(crate) fn sync(&self) -> Result<()> {
        self.check_writable()?;
        let last = self.inner.lock()?.last_lsn;
        self.inner.flush_through(last, true)
    }

    /// The LSN of the last record known durable.
    #[cfg(test)]
    pub(crate) fn durable_lsn(&self) -> Result<u64> {
        Ok(self.inner.lock()?.durable_lsn)
    }

    /// Keeps the data directory locked until the log and every clone of
    /// it (every handle that can still write) is dropped.
    pub(crate) fn hold(&self, lock: DirLock) {
        let _ = self.inner.lock.set(lock);
    }

    /// Fails with [`Error::ReadOnly`] once the log refuses appends.
    pub(crate) fn check_writable(&self) -> Result<()> {
        match &self.inner.lock()?.failed {
            Some(reason) => Err(Error::ReadOnly(reason.clone())),
            None => Ok(()),
        }
    }

    /// The LSN of the last record appended.
    pub(crate) fn last_lsn(&self) -> Result<u64> {
        Ok(self.inner.lock()?.last_lsn)
    }

    /// What the log has done since it was opened.
    pub(crate) fn stats(&self) -> Result<LogStats> {
        let state = self.inner.lock()?;
        Ok(LogStats { records: state.appended, bytes: state.appended_bytes, syncs: state.syncs })
    }

    /// Bytes of records appended since the log was opened, but for staged
    /// parts of transactions still open: what a checkpoint could free.
    pub(crate) fn appended_bytes(&self) -> Result<u64> {
        let state = self.inner.lock()?;
        Ok(state.appended_bytes - state.staged_open)
    }

    /// Makes the log refuse every later append and commit with
    /// [`Error::ReadOnly`] (`reason`): for failures outside the log that
    /// leave the data directory in an unknown state.
    pub(crate) fn fail(&self, reason: String) {
        if let Ok(mut state) = self.inner.lock() {
            state.failed.get_or_insert(reason);
        }
        self.inner.flushed.notify_all();
    }

    /// Pins the log from the next record appended on: until the pin is
    /// dropped, [`Wal::remove_through`] keeps the segments holding it and
    /// everything after.
    pub(crate) fn pin(&self) -> Result<LogPin> {
        let lsn = self.inner.lock()?.last_lsn + 1;
        let mut pins =
            self.inner.pins.lock().map_err(|_| Error::Internal("a thread panicked pinning the log".into()))?;
        *pins.entry(lsn).or_default() += 1;
        Ok(LogPin { inner: Arc::downgrade(&self.inner), lsn, staged: AtomicU64::new(0) })
    }

    /// Writes the records appended so far to the file without waiting for
    /// a sync (with [`SyncMode::Always`], the next commit's sync covers them).
    pub(crate) fn write_through(&self, lsn: u64) -> Result<()> {
        self.inner.flush_through(lsn, false)
    }

    /// Removes the segments that hold only records up to `lsn` (which a
    /// checkpoint covers) and before every pin. The segment being written
    /// is always kept.
    pub(crate) fn remove_through(&self, lsn: u64) -> Result<()> {
        let pinned = self.inner.pins.lock().map_err(|_| Error::Internal("a thread panicked pinning the log".into()))?;
        let lsn = pinned.keys().next().map_or(lsn, |&first| lsn.min(first - 1));
        drop(pinned);
        let io = self.inner.io.as_ref();
        let dir = &self.inner.dir;
        let segments = segments(io, dir)?;
        let mut removed = false;
        for pair in segments.windows(2) {
            let ((_, path), (next_first, _)) = (&pair[0], &pair[1]);
            if *next_first > lsn + 1 {
                break;
            }
            io.remove(path).map_err(|e| Error::io(path, e))?;
            removed = true;
        }
        if removed {
            io.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
        }
        Ok(())
    }
}

impl Inner {
    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| Error::Internal("a thread panicked while writing the log".into()))
    }

    /// Returns once record `lsn` is written (and synced, if `sync`). One
    /// caller at a time writes, everything buffered at once; the others
    /// wait for it and find their records covered, or write next. A sync
    /// runs on a second handle of the segment, so writes (of commits that
    /// need no sync) go on meanwhile; commits that need one wait for the
    /// sync in flight and then share the next (group commit).
    fn flush_through(&self, lsn: u64, sync: bool) -> Result<()> {
        let mut state = self.lock()?;
        loop {
            // A record made durable before a later write failed stays so:
            // its commit succeeded, whatever came after it.
            if state.durable_lsn >= lsn || (!sync && state.written_lsn >= lsn) {
                return Ok(());
            }
            if let Some(reason) = &state.failed {
                return Err(Error::ReadOnly(reason.clone()));
            }
            if state.segment.is_none() || (sync && state.syncing) {
                // Another caller is writing or syncing: wait for it.
                state = self
                    .flushed
                    .wait(state)
                    .map_err(|_| Error::Internal("a thread panicked while writing the log".into()))?;
                continue;
            }
            let Some(segment) = state.segment.take() else { continue };
            let spare = std::mem::take(&mut state.spare);
            let mut bytes = std::mem::replace(&mut state.buffer, spare);
            let target = state.last_lsn;
            drop(state);

            let outcome = self.write(segment, &bytes, target);
            bytes.clear();

            state = self.lock()?;
            if bytes.capacity() <= SPARE_BYTES {
                state.spare = bytes;
            }
            let (segment, rolled) = match outcome {
                Ok(written) => written,
                Err(e) => return Err(self.fail(state, e)),
            };
            state.written_lsn = target;
            if rolled {
                // The full segment holding every record so far was synced.
                state.durable_lsn = state.durable_lsn.max(target);
                state.syncs += 1;
            }
            let handle = if sync && !rolled { Some(segment.file.try_clone()) } else { None };
            state.segment = Some(segment);
            if let Some(handle) = handle {
                let mut handle = match handle {
                    Ok(handle) => handle,
                    Err(e) => return Err(self.fail(state, Error::io(&self.dir, e))),
                };
                state.syncing = true;
                self.flushed.notify_all();
                drop(state);
                let synced = handle.sync();
                state = self.lock()?;
                state.syncing = false;
                if let Err(e) = synced {
                    let path = state.segment.as_ref().map_or_else(|| self.dir.clone(), |s| s.path.clone());
                    return Err(self.fail(state, Error::io(&path, e)));
                }
                state.durable_lsn = state.durable_lsn.max(target);
                state.syncs += 1;
            }
            self.flushed.notify_all();
        }
    }

    /// Records a failed write or sync: this caller gets `e` itself,
    /// everyone after it that the log is read-only.
    fn fail(&self, mut state: MutexGuard<'_, State>, e: Error) -> Error {
        state.failed = Some(e.to_string());
        state.syncing = false;
        drop(state);
        self.flushed.notify_all();
        e
    }

    /// Writes `bytes` (records through `last`) to `segment`; once it is
    /// full, syncs it and starts a new one (`true`: everything through
    /// `last` is durable).
    fn write(&self, mut segment: Segment, bytes: &FrameBuf, last: u64) -> Result<(Segment, bool)> {
        let failed = |e: std::io::Error, at: u64| Error::Io { path: segment.path.clone(), offset: Some(at), source: e };
        if !bytes.is_empty() {
            let at = segment.bytes;
            segment.file.write_vectored(&mut bytes.io_slices()).map_err(|e| failed(e, at))?;
            segment.bytes += bytes.len() as u64;
            segment.unsynced += bytes.len() as u64;
        }
        if segment.unsynced >= WRITEBACK_BYTES {
            let at = segment.bytes;
            segment.file.start_writeback(at).map_err(|e| failed(e, at))?;
            segment.unsynced = 0;
        }
        // A full segment must be durable before records go elsewhere.
        if segment.bytes >= self.segment_bytes {
            let at = segment.bytes;
            segment.file.sync().map_err(|e| failed(e, at))?;
            return Ok((self.new_segment(last + 1)?, true));
        }
        if segment.bytes >= self.segment_bytes / 2 {
            self.prepare(true);
        }
        Ok((segment, false))
    }

    /// A new, empty segment whose first record will be `first_lsn`, its
    /// directory entry durable: the prepared one if it is ready, else a
    /// new empty file (appended to, as fast as writes to a new file go).
    fn new_segment(&self, first_lsn: u64) -> Result<Segment> {
        let path = self.dir.join(segment_name(first_lsn));
        let file = if self.prepared.get() == Preparation::Ready {
            self.prepared.set(Preparation::None);
            // Should the prepared file be gone, a new one will do.
            match self.io.rename(&self.dir.join(PREPARED), &path) {
                Ok(()) => self.io.open_at(&path, 0),
                Err(_) => self.io.append(&path),
            }
        } else {
            self.io.append(&path)
        };
        let file = file.map_err(|e| Error::io(&path, e))?;
        self.io.sync_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        Ok(Segment { file, path, bytes: 0, unsynced: 0 })
    }

    /// Prepares the next segment (in a background thread if `background`)
    /// unless it is ready or being prepared. A preparation that fails
    /// leaves none: the next segment is then a new empty file.
    fn prepare(&self, background: bool) {
        {
            let Ok(mut state) = self.prepared.state.lock() else { return };
            if *state != Preparation::None {
                return;
            }
            *state = Preparation::Running;
        }
        let (io, path, len, prepared) =
            (Arc::clone(&self.io), self.dir.join(PREPARED), self.segment_bytes, Arc::clone(&self.prepared));
        // Only `always` syncs it: its first commit in the segment must not
        // have to write the zeros. In the other modes the sync that closes
        // the segment writes each page once, holding records by then, and
        // the disk is not busy with the zeros meanwhile.
        let sync = self.mode == SyncMode::Always;
        let run = move || {
            let done = create_zeroed(io.as_ref(), &path, len, sync, &|| prepared.cancel.load(Ordering::Relaxed));
            prepared.set(if matches!(done, Ok(true)) { Preparation::Ready } else { Preparation::None });
        };
        if !background {
            return run();
        }
        let Ok(mut preparer) = self.preparer.lock() else { return };
        if let Some(done) = preparer.take() {
            let _ = done.join();
        }
        match std::thread::Builder::new().name("quiverdb-wal-prepare".into()).spawn(run) {
            Ok(handle) => *preparer = Some(handle),
            Err(_) => self.prepared.set(Preparation::None),
        }
    }
}

impl Drop for Inner {
    /// Stops a preparation still running, so nothing touches the directory
    /// once its lock (dropped after this) is released.
    fn drop(&mut self) {
        self.prepared.cancel.store(true, Ordering::Relaxed);
        if let Some(handle) = self.preparer.get_mut().ok().and_then(Option::take) {
            let _ = handle.join();
        }
    }
}

/// The [`SyncMode::Batch`] thread: syncs every `interval` while the log is open.
fn batch_syncs(inner: &Weak<Inner>, interval: Duration) {
    loop {
        std::thread::sleep(interval);
        let Some(inner) = inner.upgrade() else { return };
        let Ok(last) = inner.lock().map(|s| s.last_lsn) else { return };
        if inner.flush_through(last, true).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::simulated::SimulatedIo;
    use super::*;

    fn dir() -> PathBuf {
        PathBuf::from("/db/wal")
    }

    fn open(io: &SimulatedIo, mode: SyncMode) -> Wal {
        Wal::open(Arc::new(io.clone()), &dir(), mode, MIN_SEGMENT_BYTES, None).unwrap().0
    }

    /// Waits for a background preparation of the next segment to end.
    fn wait_prepared(wal: &Wal) {
        while wal.inner.prepared.get() == Preparation::Running {
            std::thread::yield_now();
        }
    }

    fn len(io: &SimulatedIo, path: &Path) -> usize {
        io.read(path).unwrap().len()
    }

    fn payloads(io: &SimulatedIo) -> Vec<Vec<u8>> {
        read_log(io, &dir(), None).unwrap().records.into_iter().map(|r| r.payload).collect()
    }

    #[test]
    fn committed_records_survive_a_crash_and_numbering_continues() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Always);
        for i in 0..3u8 {
            let lsn = wal.append(1, &[i]).unwrap();
            assert_eq!(lsn, u64::from(i) + 1);
            wal.commit(lsn).unwrap();
        }
        wal.append(1, b"appended, never committed").unwrap();
        drop(wal);
        io.crash(0);
        assert_eq!(payloads(&io), [[0], [1], [2]]);

        let wal = open(&io, SyncMode::Always);
        let lsn = wal.append(2, b"after").unwrap();
        assert_eq!(lsn, 4);
        wal.commit(lsn).unwrap();
        io.crash(0);
        let records = read_log(&io, &dir(), None).unwrap().records;
        assert_eq!(records.iter().map(|r| r.lsn).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!((records[3].lsn, records[3].kind, records[3].payload.as_slice()), (4, 2, &b"after"[..]));
        assert_eq!(records[3].offset, 3 * (frame::OVERHEAD as u64 + 1), "writing went on after the last record");
        assert!(records[3].segment.ends_with(segment_name(1)));
    }

    #[test]
    fn segments_are_prepared_ahead_and_rolled_into() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Always);
        let first = dir().join(segment_name(1));
        assert_eq!(len(&io, &first), MIN_SEGMENT_BYTES as usize, "the first segment is prepared on open");
        let payload = [7u8; 1000];
        let mut lsn = 0;
        for _ in 0..12 {
            wait_prepared(&wal);
            lsn = wal.append(1, &payload).unwrap();
            wal.commit(lsn).unwrap();
        }
        let names = io.list(&dir()).unwrap();
        let logs: Vec<_> = segments(&io, &dir()).unwrap();
        assert!(logs.len() >= 3, "{names:?}");
        for (_, path) in &logs {
            assert!(len(&io, path) >= MIN_SEGMENT_BYTES as usize, "{} was prepared", path.display());
        }
        io.crash(0);
        let records = read_log(&io, &dir(), None).unwrap();
        assert_eq!(records.records.iter().map(|r| r.lsn).collect::<Vec<_>>(), (1..=lsn).collect::<Vec<_>>());
        assert!(records.records.iter().all(|r| r.payload == payload));
        assert!(records.torn.is_none(), "the zeros after the last record are not a torn tail");
    }

    #[test]
    fn pinned_segments_stay_and_staged_bytes_count_once_unpinned() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Always);
        let staged = |pin: &LogPin, byte: u8| {
            wal.append_staged(pin, |out| {
                out.bytes().extend_from_slice(&[byte; 3000]);
                Ok(1)
            })
            .unwrap()
        };
        let pin = wal.pin().unwrap();
        let first = staged(&pin, 1);
        assert_eq!(wal.appended_bytes().unwrap(), 0, "staged parts of an open transaction");
        // Segments of 4 KiB: every record below rolls one.
        for byte in 2..6 {
            wal.commit(wal.append(1, &[byte; 3000]).unwrap()).unwrap();
        }
        let settled = wal.appended_bytes().unwrap();
        assert_eq!(settled, 4 * (frame::OVERHEAD + 3000) as u64);
        wal.remove_through(wal.last_lsn().unwrap()).unwrap();
        let kept =
            |io: &SimulatedIo| read_log(io, &dir(), None).unwrap().records.iter().map(|r| r.lsn).collect::<Vec<_>>();
        assert_eq!(kept(&io).first(), Some(&first), "the pinned part is kept");
        drop(pin);
        assert_eq!(wal.appended_bytes().unwrap(), settled + (frame::OVERHEAD + 3000) as u64);
        wal.remove_through(wal.last_lsn().unwrap()).unwrap();
        assert!(kept(&io).first().is_none_or(|&lsn| lsn > first), "unpinned, it goes with the checkpoint");
    }

    #[test]
    fn without_a_prepared_segment_a_new_file_is_appended_to() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Always);
        // The preparation is taken away before the roll.
        wal.commit(wal.append(1, &[1; 3000]).unwrap()).unwrap();
        wait_prepared(&wal);
        io.remove(&dir().join(PREPARED)).unwrap();
        wal.commit(wal.append(1, &[2; 3000]).unwrap()).unwrap();
        wal.commit(wal.append(1, &[3; 10]).unwrap()).unwrap();
        let second = dir().join(segment_name(3));
        assert_eq!(len(&io, &second), frame::OVERHEAD + 10, "a plain file");
        drop(wal);
        io.crash(0);
        let (wal, contents) =
            Wal::open(Arc::new(io.clone()), &dir(), SyncMode::Always, MIN_SEGMENT_BYTES, None).unwrap();
        assert_eq!(contents.records.iter().map(|r| r.payload[0]).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(wal.append(1, b"x").unwrap(), 4);
    }

    #[test]
    fn checkpointed_segments_are_removed_but_never_the_current_one() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Always);
        wal.append(1, &[0; 3000]).unwrap();
        wal.append(1, &[1; 3000]).unwrap();
        wal.sync().unwrap();
        drop(wal);
        let wal = open(&io, SyncMode::Always); // segments start at 1 and 3
        let lsn = wal.append(1, b"b").unwrap();
        wal.commit(lsn).unwrap();
        assert_eq!(wal.last_lsn().unwrap(), 3);
        assert_eq!(wal.appended_bytes().unwrap(), (frame::OVERHEAD + 1) as u64);
        wal.remove_through(0).unwrap();
        assert_eq!(segments(&io, &dir()).unwrap().len(), 2);
        wal.remove_through(3).unwrap();
        let left = segments(&io, &dir()).unwrap();
        assert_eq!(left.iter().map(|(first, _)| *first).collect::<Vec<_>>(), [3]);
        drop(wal);
        // Reopening continues the numbering from the kept segment.
        let wal = open(&io, SyncMode::Always);
        assert_eq!(wal.append(1, b"c").unwrap(), 4);
    }

    #[test]
    fn a_failed_database_refuses_writes() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Always);
        wal.fail("checkpoint failed".into());
        assert!(matches!(wal.append(1, b"x"), Err(Error::ReadOnly(r)) if r == "checkpoint failed"));
        assert!(matches!(wal.sync(), Err(Error::ReadOnly(_))));
    }

    #[test]
    fn a_torn_tail_is_reported_then_zeroed_on_open() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Always);
        wal.commit(wal.append(1, b"kept").unwrap()).unwrap();
        drop(wal);
        // Written but not synced, and 7 of its bytes reach the disk.
        let wal = open(&io, SyncMode::Off);
        wal.commit(wal.append(1, b"cut short by the crash").unwrap()).unwrap();
        drop(wal);
        io.crash(7);
        let contents = read_log(&io, &dir(), None).unwrap();
        assert_eq!(contents.records.len(), 1);
        let (_, offset, bytes) = contents.torn.clone().expect("a torn tail");
        assert_eq!(offset, (frame::OVERHEAD + 4) as u64, "right after the record kept");
        assert!((1..=7).contains(&bytes), "{bytes} bytes of data dropped");

        let (wal, contents) =
            Wal::open(Arc::new(io.clone()), &dir(), SyncMode::Always, MIN_SEGMENT_BYTES, None).unwrap();
        assert!(contents.torn.is_some(), "open reports the torn tail");
        assert!(read_log(&io, &dir(), None).unwrap().torn.is_none(), "and zeroes it");
        wal.commit(wal.append(1, b"next").unwrap()).unwrap();
        io.crash(0);
        let contents = read_log(&io, &dir(), None).unwrap();
        assert_eq!(contents.records.iter().map(|r| r.lsn).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(contents.records[1].payload, b"next");
    }

    #[test]
    fn corruption_before_the_end_names_the_segment_and_offset() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Always);
        for i in 0..3u8 {
            wal.commit(wal.append(1, &[i; 10]).unwrap()).unwrap();
        }
        let segment = dir().join(segment_name(1));
        // Inside the second record's payload.
        io.flip_bit(&segment, frame::OVERHEAD + 10 + frame::HEADER + 3, 2).unwrap();
        match read_log(&io, &dir(), None) {
            Err(Error::Corrupt { file, offset, .. }) => {
                assert!(file.ends_with(segment_name(1)), "{}", file.display());
                assert_eq!(offset, (frame::OVERHEAD + 10) as u64);
            }
            other => panic!("expected corruption, got {other:?}"),
        }
        assert!(matches!(
            Wal::open(Arc::new(io.clone()), &dir(), SyncMode::Always, MIN_SEGMENT_BYTES, None),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn a_failed_sync_makes_the_log_read_only() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Always);
        wal.commit(wal.append(1, b"ok").unwrap()).unwrap();
        io.fail_syncs(true);
        let lsn = wal.append(1, b"unknown fate").unwrap();
        assert!(
            matches!(wal.commit(lsn), Err(Error::Io { source, .. }) if source.to_string().contains("simulated fsync failure"))
        );
        io.fail_syncs(false);
        // It does not retry and carry on.
        assert!(matches!(wal.append(1, b"later"), Err(Error::ReadOnly(_))));
        assert!(matches!(wal.commit(lsn), Err(Error::ReadOnly(_))));
        assert!(matches!(wal.check_writable(), Err(Error::ReadOnly(_))));
        // What was durable before the failure stays committed.
        assert!(wal.commit(lsn - 1).is_ok());
        io.crash(0);
        assert_eq!(payloads(&io), [b"ok".to_vec()]);
    }

    #[test]
    fn concurrent_commits_are_all_durable() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Always);
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let wal = wal.clone();
                s.spawn(move || {
                    for i in 0..50u8 {
                        wal.commit(wal.append(t, &[t, i]).unwrap()).unwrap();
                    }
                });
            }
        });
        io.crash(0);
        let records = read_log(&io, &dir(), None).unwrap().records;
        assert_eq!(records.len(), 200);
        assert_eq!(records.iter().map(|r| r.lsn).collect::<Vec<_>>(), (1..=200).collect::<Vec<_>>());
        for t in 0..4u8 {
            let mine: Vec<u8> = records.iter().filter(|r| r.kind == t).map(|r| r.payload[1]).collect();
            assert_eq!(mine, (0..50).collect::<Vec<_>>(), "writer {t}'s records in order");
        }
    }

    #[test]
    fn batch_mode_syncs_in_the_background_and_off_mode_only_writes() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Off);
        wal.commit(wal.append(1, b"written").unwrap()).unwrap();
        assert_eq!(wal.durable_lsn().unwrap(), 0);
        drop(wal);
        io.crash(0);
        assert!(payloads(&io).is_empty(), "off: a power loss loses unsynced commits");

        let wal = open(&io, SyncMode::Batch(Duration::from_millis(5)));
        let lsn = wal.append(1, b"batched").unwrap();
        wal.commit(lsn).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while wal.durable_lsn().unwrap() < lsn {
            assert!(std::time::Instant::now() < deadline, "the batch thread never synced");
            std::thread::sleep(Duration::from_millis(1));
        }
        io.crash(0);
        assert_eq!(payloads(&io), [b"batched".to_vec()]);
    }

    #[test]
    fn only_always_mode_syncs_a_prepared_segment() {
        for (mode, synced) in
            [(SyncMode::Always, true), (SyncMode::Off, false), (SyncMode::Batch(Duration::from_secs(3600)), false)]
        {
            let io = SimulatedIo::default();
            drop(open(&io, mode));
            io.crash(0);
            let first = len(&io, &dir().join(segment_name(1)));
            assert_eq!(first == MIN_SEGMENT_BYTES as usize, synced, "{mode:?}: {first} bytes after a power loss");
        }
        // Reopened with `always`, a log syncs the segment another mode prepared.
        for (reopen, synced) in [(SyncMode::Off, 0), (SyncMode::Always, MIN_SEGMENT_BYTES as usize)] {
            let io = SimulatedIo::default();
            let wal = open(&io, SyncMode::Off);
            wal.commit(wal.append(1, &[1; 3000]).unwrap()).unwrap();
            wait_prepared(&wal);
            drop(wal);
            drop(open(&io, reopen));
            io.sync_dir(&dir()).unwrap();
            io.crash(0);
            assert_eq!(len(&io, &dir().join(PREPARED)), synced, "reopened {reopen:?}");
        }
    }

    #[test]
    fn off_mode_syncs_a_full_segment_before_the_next_is_used() {
        let io = SimulatedIo::default();
        let wal = open(&io, SyncMode::Off);
        let payload = [5u8; 1000];
        // Five frames of 1,013 bytes fill a 4 KiB segment; the sixth starts the next.
        for i in 1..=6 {
            wait_prepared(&wal);
            let lsn = wal.append(1, &payload).unwrap();
            assert_eq!(lsn, i);
            wal.commit(lsn).unwrap();
        }
        assert_eq!(wal.durable_lsn().unwrap(), 5);
        drop(wal);
        io.crash(0);
        let contents = read_log(&io, &dir(), None).unwrap();
        assert_eq!(contents.records.iter().map(|r| r.lsn).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        assert!(contents.torn.is_none());

        // The next segment, prepared without a sync, lost its zeros too:
        // writing goes on at its start.
        let wal = open(&io, SyncMode::Off);
        assert_eq!(wal.append(1, b"after").unwrap(), 6);
        wal.sync().unwrap();
        io.crash(0);
        let records = read_log(&io, &dir(), None).unwrap().records;
        assert_eq!(records.len(), 6);
        assert_eq!((records[5].payload.as_slice(), records[5].offset), (&b"after"[..], 0));
        assert!(records[5].segment.ends_with(segment_name(6)));
    }
}
