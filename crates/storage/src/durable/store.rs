//! A durable database: its data directory, the catalog file, checkpoints
//! and recovery.
//!
//! ```text
//!   <dir>/LOCK                                one process at a time
//!   <dir>/CATALOG                             the last checkpoint: tables, shards,
//!                                             their row counts, deleted ids, and its LSN
//!   <dir>/shards/t<uid>-s<shard>-v<version>.main   main storage of one shard version
//!   <dir>/shards/t<uid>-s<shard>-v<version>-d<rows>.delta
//!                                             its first <rows> delta rows (Arrow IPC)
//!   <dir>/wal/wal-<first lsn>.log             the write-ahead log
//! ```
//!
//! Every change is logged before it is acknowledged (see [`super::wal`]).
//! A **checkpoint** takes a consistent cut of every table at one LSN
//! (holding the catalog lock and each table's writer lock for the moment
//! it takes to copy pointers), syncs the log through that LSN, writes the
//! main storage of shard versions, and their delta rows, not written yet
//! to their own files (the catalog stays kilobytes; a delta only grows
//! within a version, so a file named by its row count never changes),
//! writes the catalog (temp file, sync, rename, sync directory), and only
//! then removes the shard files and log segments the new catalog no
//! longer needs. A crash at any point leaves the previous catalog and
//! everything it refers to intact.
//!
//! **Recovery** loads the catalog and the shard files it names (checking
//! every checksum), then replays the log records after the checkpoint's
//! LSN, in order, with background rebuilds paused (a commit after it
//! brings the staged parts it names, which may precede it: the log keeps
//! them, see [`super::wal::Wal::pin`]): the log holds every
//! rebuild that happened, and replaying it renumbers rows as the original
//! did, so logged deletes name the same rows.

use std::collections::{BTreeMap, BTreeSet};

use crate::names::{check_new_schema, schema_contents};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::SchemaRef;

use super::catalog::{CATALOG, CatalogFile, ShardEntry, TableEntry, decode_catalog, encode_catalog};
use super::checkpoint::{decode_main, encode_main};
use super::damage::Damage;
use super::frame::{HEADER as FRAME_HEADER, OVERHEAD as FRAME_OVERHEAD};
use super::io::{StorageIo, remove_temporary, write_atomically};
use super::lock::DirLock;
use super::record::{LogRecord, Reader, STAGE, append_record, from_ipc, ipc};
use super::wal::{LogStats, Record, SEGMENT_BYTES, SyncMode, Wal};
use crate::background::Background;
use crate::change::{ChangeLog, TableChange, TableLog};
use crate::delta::Delta;
use crate::error::{Error, Result};
use crate::ingest::validate_batch;
use crate::main::Main;
use crate::main::decode::Rows;
use crate::rebuild;
use crate::shard::{DeleteSet, ShardData, ShardId, ShardList, ShardState};
use crate::state::{MAX_SHARD_CAPACITY, TableOptions, TableState};
use crate::table::Table;

const SHARDS: &str = "shards";
const WAL: &str = "wal";

/// How a durable database writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableOptions {
    /// When a commit is durable (default [`SyncMode::Always`]).
    pub sync: SyncMode,
    /// A background checkpoint starts once the log has grown by this many
    /// bytes since the last one (default 256 MiB); 0 turns background
    /// checkpoints off (then only [`crate::Database::checkpoint`] and
    /// [`crate::Database::close`] make them).
    pub checkpoint_bytes: u64,
    /// A new log segment starts once the current one holds this many
    /// bytes (default 64 MiB, at least 4 KiB). Segments are prepared
    /// (written full of zeros) ahead of use, so an open data directory
    /// holds up to two segments' worth of log files even when idle.
    pub log_segment_bytes: u64,
    /// Opening drops damage in the last log segment — a record written
    /// whole whose checksum fails, and everything after it — rather than
    /// refusing to open (the default). What it drops is logged and
    /// reported in [`RecoveryReport::dropped`]: acknowledged changes may
    /// be among it. A write cut short at the end of the log is dropped
    /// either way.
    pub recover_truncate: bool,
}

impl Default for DurableOptions {
    fn default() -> Self {
        Self {
            sync: SyncMode::Always,
            checkpoint_bytes: 256 << 20,
            log_segment_bytes: SEGMENT_BYTES,
            recover_truncate: false,
        }
    }
}

/// What opening a data directory found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The LSN the catalog's checkpoint covers (0 without a checkpoint).
    pub checkpoint_lsn: u64,
    /// Tables and shard files loaded from the checkpoint.
    pub checkpoint_tables: usize,
    pub shard_files: usize,
    /// Log records replayed after the checkpoint.
    pub replayed: usize,
    /// An incomplete write at the end of the log, dropped: the segment,
    /// the offset it started at, and its length in bytes.
    pub torn: Option<(PathBuf, u64, u64)>,
    /// Damage dropped from the end of the log because
    /// [`DurableOptions::recover_truncate`] said to: the segment, the
    /// offset of the damaged record, the bytes dropped from it on, and
    /// what was wrong.
    pub dropped: Option<(PathBuf, u64, u64, String)>,
    /// Time taken to open.
    pub elapsed: Duration,
}

/// The durable side of a database: its data directory and log.
#[derive(Debug)]
pub(crate) struct Durable {
    io: Arc<dyn StorageIo>,
    dir: PathBuf,
    wal: Wal,
    report: RecoveryReport,
    /// What the durable catalog holds; held for the whole of a checkpoint.
    checkpointed: Mutex<Checkpointed>,
    /// Bytes of the log after the checkpoint it was opened from.
    replayed_bytes: u64,
}

#[derive(Debug, Default)]
struct Checkpointed {
    /// Shard files the catalog refers to.
    files: BTreeSet<String>,
    /// Bytes logged (see [`Durable::log_position`]) when the cut of the
    /// last checkpoint was taken.
    log_bytes: u64,
}

/// What recovery hands the catalog: the tables as the data directory
/// holds them, and the durable side to keep writing through.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub(crate) tables: BTreeMap<String, Table>,
    pub(crate) views: BTreeMap<String, String>,
    pub(crate) schemas: BTreeSet<String>,
    pub(crate) durable: Durable,
}

/// One table as a checkpoint's cut saw it.
#[derive(Debug)]
pub(crate) struct TableCut {
    pub(crate) name: String,
    pub(crate) uid: u64,
    pub(crate) schema: SchemaRef,
    pub(crate) options: TableOptions,
    pub(crate) next_shard_id: u64,
    pub(crate) state: Arc<TableState>,
}

/// A consistent cut of every table, and the log position it reflects.
#[derive(Debug)]
pub(crate) struct Cut {
    pub(crate) lsn: u64,
    pub(crate) log_bytes: u64,
    pub(crate) tables: Vec<TableCut>,
    pub(crate) views: Vec<(String, String)>,
    pub(crate) schemas: Vec<String>,
}

impl Durable {
    /// Logs a catalog change; the log position to commit.
    pub(crate) fn append(&self, record: &LogRecord) -> Result<u64> {
        append_record(&self.wal, record)
    }

    /// Waits until the change logged at `lsn` is durable.
    pub(crate) fn commit(&self, lsn: u64) -> Result<()> {
        self.wal.commit(lsn)
    }

    /// The log, as the change log of a table.
    pub(crate) fn change_log(&self) -> Arc<dyn ChangeLog> {
        Arc::new(self.wal.clone())
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The log, for tests that change how it splits records.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn wal(&self) -> &Wal {
        &self.wal
    }

    /// What the log has done since the directory was opened.
    pub(crate) fn log_stats(&self) -> Result<LogStats> {
        self.wal.stats()
    }

    /// The position of the last logged record and the bytes logged since
    /// the checkpoint the directory was opened from (replayed, then
    /// appended). Read while every writer is held, it is the position a
    /// cut reflects.
    pub(crate) fn log_position(&self) -> Result<(u64, u64)> {
        Ok((self.wal.last_lsn()?, self.logged_bytes()?))
    }

    fn logged_bytes(&self) -> Result<u64> {
        Ok(self.replayed_bytes + self.wal.appended_bytes()?)
    }

    /// True once the log holds `every` bytes after the last checkpoint,
    /// counting what earlier processes logged (a server killed again and
    /// again before it checkpoints would otherwise replay more each time).
    pub(crate) fn checkpoint_due(&self, every: u64) -> Result<bool> {
        let since = self.checkpointed.lock().map_err(lock_error)?.log_bytes;
        Ok(self.logged_bytes()?.saturating_sub(since) >= every)
    }

    /// Writes a checkpoint of the cut `cut` takes (see the module
    /// documentation). A failure makes the database read-only: what
    /// reached the disk is unknown.
    pub(crate) fn checkpoint(&self, cut: impl FnOnce(&Self) -> Result<Cut>) -> Result<()> {
        let mut done = self.checkpointed.lock().map_err(lock_error)?;
        let outcome = cut(self).and_then(|cut| self.write_checkpoint(cut, &mut done));
        if let Err(e) = &outcome
            && !matches!(e, Error::ReadOnly(_))
        {
            self.wal.fail(format!("a checkpoint failed: {e}"));
        }
        outcome
    }

    fn write_checkpoint(&self, cut: Cut, done: &mut Checkpointed) -> Result<()> {
        // The catalog must never be ahead of the log: a reopened log numbers
        // its records after the checkpoint's.
        self.wal.sync()?;

        let io = self.io.as_ref();
        let shards_dir = self.dir.join(SHARDS);
        let mut files = BTreeSet::new();
        let mut catalog = CatalogFile {
            lsn: cut.lsn,
            tables: Vec::with_capacity(cut.tables.len()),
            views: cut.views,
            schemas: cut.schemas,
        };
        let mut wrote = false;
        for table in cut.tables {
            let mut shards = Vec::with_capacity(table.state.shards.len());
            for shard in table.state.shards.iter() {
                let data = &shard.data;
                let main_rows = data.main.rows();
                if main_rows > 0 {
                    let name = shard_file(table.uid, data.id, data.version);
                    if !done.files.contains(&name) && !files.contains(&name) {
                        write_file(io, &shards_dir.join(&name), &encode_main(&data.main))?;
                        wrote = true;
                    }
                    files.insert(name);
                }
                if shard.delta_len > 0 {
                    let name = delta_file(table.uid, data.id, data.version, shard.delta_len);
                    if !done.files.contains(&name) && !files.contains(&name) {
                        let columns = (0..table.schema.fields().len())
                            .map(|c| data.delta.column(c).decode(shard.delta_len, Rows::Range(0, shard.delta_len)))
                            .collect::<Result<Vec<_>>>()?;
                        // The row count too: a table may have no columns.
                        let options = RecordBatchOptions::new().with_row_count(Some(shard.delta_len));
                        let rows = RecordBatch::try_new_with_options(Arc::clone(&table.schema), columns, &options)?;
                        let bytes = encode_delta_file(&ipc(&table.schema, &[rows])?);
                        write_file(io, &shards_dir.join(&name), &bytes)?;
                        wrote = true;
                    }
                    files.insert(name);
                }
                let deleted = shard.deletes.as_ref().map_or_else(Vec::new, |d| d.ids(shard.rows()));
                shards.push(ShardEntry {
                    id: data.id.0,
                    version: data.version,
                    capacity: data.capacity as u64,
                    main_rows: main_rows as u64,
                    delta_rows: shard.delta_len as u64,
                    inline_delta: Vec::new(),
                    deleted,
                });
            }
            catalog.tables.push(TableEntry {
                name: table.name,
                uid: table.uid,
                schema: table.schema,
                options: table.options,
                next_shard_id: table.next_shard_id,
                shards,
            });
        }
        if wrote {
            io.sync_dir(&shards_dir).map_err(|e| Error::io(&shards_dir, e))?;
        }
        let bytes = encode_catalog(&catalog)?;
        write_atomically(io, &self.dir, CATALOG, &bytes).map_err(|e| Error::io(self.dir.join(CATALOG), e))?;

        // The new catalog is durable: what only the old one needed can go.
        for name in io.list(&shards_dir).map_err(|e| Error::io(&shards_dir, e))? {
            if !files.contains(&name) {
                let path = shards_dir.join(&name);
                io.remove(&path).map_err(|e| Error::io(&path, e))?;
            }
        }
        self.wal.remove_through(cut.lsn)?;
        done.files = files;
        done.log_bytes = cut.log_bytes;
        Ok(())
    }
}

fn lock_error<T>(_: T) -> Error {
    Error::Internal("a thread panicked while holding a lock of the data directory".into())
}

/// The name of the file holding shard `shard` at `version` of the table
/// whose creation was logged at `uid`.
fn shard_file(uid: u64, shard: ShardId, version: u64) -> String {
    format!("t{uid}-s{shard}-v{version}.main")
}

/// The first bytes of a delta file.
const DELTA_MAGIC: &[u8; 8] = b"QVDELTA\0";
/// Bytes of a delta file's header: magic, body length, body CRC32C.
const DELTA_HEADER: usize = 8 + 8 + 4;

/// A delta file: `"QVDELTA\0" | body length u64 | body CRC32C u32 | body`,
/// the body an Arrow IPC stream of the rows.
fn encode_delta_file(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(DELTA_HEADER + body.len());
    out.extend_from_slice(DELTA_MAGIC);
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// The IPC body of a delta file, checked against its length and checksum.
fn decode_delta_file(bytes: &[u8]) -> std::result::Result<&[u8], Damage> {
    if bytes.len() < DELTA_HEADER || &bytes[..8] != DELTA_MAGIC {
        return Err(Damage::new(0, "not a quiverdb delta file"));
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    if (bytes.len() - DELTA_HEADER) as u64 != len {
        return Err(Damage::new(
            8,
            format!("the body should be {len} bytes, the file holds {}", bytes.len() - DELTA_HEADER),
        ));
    }
    if crc32c::crc32c(&bytes[DELTA_HEADER..]) != crc {
        return Err(Damage::new(DELTA_HEADER, "checksum mismatch"));
    }
    Ok(&bytes[DELTA_HEADER..])
}

/// The name of the file holding the first `rows` delta rows of shard
/// `shard` at `version` of the table whose creation was logged at `uid`.
fn delta_file(uid: u64, shard: ShardId, version: u64, rows: usize) -> String {
    format!("t{uid}-s{shard}-v{version}-d{rows}.delta")
}

// ---------------------------------------------------------------------------
// Opening and recovery
// ---------------------------------------------------------------------------

/// Opens (creating if needed) the data directory `dir` through `io`:
/// loads the checkpoint and replays the log after it, with `background`
/// paused (the log holds every rebuild that happened). The tables come
/// back logging to the directory's log.
/// How often recovery reports how far it has replayed the log.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

pub(crate) fn recover(
    io: Arc<dyn StorageIo>,
    dir: &Path,
    options: DurableOptions,
    lock: Option<DirLock>,
    background: &Background,
) -> Result<Recovered> {
    let started = Instant::now();
    let shards_dir = dir.join(SHARDS);
    io.create_dir_all(&shards_dir).map_err(|e| Error::io(&shards_dir, e))?;
    remove_temporary(io.as_ref(), dir, CATALOG).map_err(|e| Error::io(dir, e))?;
    io.sync_dir(dir).map_err(|e| Error::io(dir, e))?;

    let catalog_path = dir.join(CATALOG);
    let catalog = match io.read(&catalog_path) {
        Ok(bytes) => {
            let catalog = decode_catalog(&bytes).map_err(|d| d.in_file(&catalog_path))?;
            tracing::info!(
                "recovery: checkpoint of log record {} read from {} ({} bytes): {} tables to load",
                catalog.lsn,
                catalog_path.display(),
                bytes.len(),
                catalog.tables.len()
            );
            catalog
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => CatalogFile::default(),
        Err(e) => return Err(Error::io(&catalog_path, e)),
    };
    let views = catalog.views.into_iter().collect();
    let schemas = catalog.schemas.into_iter().collect();
    let mut replay = Replay { tables: BTreeMap::new(), views, schemas, background };
    let mut files = BTreeSet::new();
    let checkpoint_tables = catalog.tables.len();
    for (i, entry) in catalog.tables.into_iter().enumerate() {
        let loading = Instant::now();
        let table = load_table(io.as_ref(), &shards_dir, entry, background, &mut files)?;
        tracing::info!(
            "recovery: table {}/{checkpoint_tables} '{}' loaded: {} rows in {} shards ({:.2} s)",
            i + 1,
            table.name(),
            table.row_count(),
            table.snapshot().num_shards(),
            loading.elapsed().as_secs_f64()
        );
        if replay.tables.insert(table.name().to_string(), table).is_some() {
            return Err(Damage::new(0, "the catalog names a table twice").in_file(&catalog_path));
        }
    }

    let wal_dir = dir.join(WAL);
    let drop_damage = options.recover_truncate.then_some(catalog.lsn);
    let (wal, contents) = Wal::open(Arc::clone(&io), &wal_dir, options.sync, options.log_segment_bytes, drop_damage)?;
    if let Some((segment, offset, bytes, what)) = &contents.dropped {
        tracing::warn!(
            "recovery: dropped {bytes} bytes of the log from offset {offset} of {} ({what}), as asked",
            segment.display()
        );
    }
    if let Some(lock) = lock {
        wal.hold(lock);
    }
    // (A split record's LSN is its last frame's: the log starts at its first.)
    if let Some(first) = contents.records.first()
        && first.first_lsn > catalog.lsn + 1
    {
        let what = format!(
            "the log starts at record {}, but the checkpoint covers only records up to {}",
            first.first_lsn, catalog.lsn
        );
        return Err(Damage::new(0, what).in_file(&first.segment));
    }
    if wal.last_lsn()? < catalog.lsn {
        let what = format!("the log ends at record {}, before the checkpoint's {}", wal.last_lsn()?, catalog.lsn);
        return Err(Damage::new(0, what).in_file(&wal_dir));
    }
    let mut replayed = 0;
    let to_replay = contents.records.iter().filter(|r| r.lsn > catalog.lsn && r.kind != STAGE).count();
    if to_replay > 0 {
        tracing::info!("recovery: replaying {to_replay} log records after record {}", catalog.lsn);
    }
    let mut reported = Instant::now();
    // Staged parts are applied with the commit naming them, which may
    // follow the checkpoint while they precede it (the log keeps them).
    let mut staged = StagedParts::default();
    for record in &contents.records {
        if record.kind == STAGE {
            staged.add(record)?;
            continue;
        }
        if record.lsn <= catalog.lsn {
            continue;
        }
        if reported.elapsed() >= PROGRESS_EVERY {
            tracing::info!("recovery: {replayed} of {to_replay} log records replayed");
            reported = Instant::now();
        }
        let payload_at = record.offset + FRAME_HEADER as u64;
        let mut decoded = LogRecord::decode(record.kind, &record.payload)
            .map_err(|d| d.shifted(payload_at).in_file(&record.segment))?;
        staged.resolve(&mut decoded).map_err(|what| {
            let what = format!("log record {}: {what}", record.lsn);
            Damage { offset: record.offset, what }.in_file(&record.segment)
        })?;
        replay.apply(record.lsn, decoded).map_err(|e| {
            let what = format!("log record {} cannot be replayed: {e}", record.lsn);
            Damage { offset: record.offset, what }.in_file(&record.segment)
        })?;
        replayed += 1;
    }

    let replayed_bytes: u64 = contents
        .records
        .iter()
        .filter(|r| r.lsn > catalog.lsn)
        .map(|r| (r.payload.len() + (r.lsn - r.first_lsn + 1) as usize * FRAME_OVERHEAD) as u64)
        .sum();
    let orphans = staged.unfinished(catalog.lsn);
    if orphans > 0 {
        tracing::info!("recovery: {orphans} staged parts of transactions that never committed are not applied");
    }
    tracing::info!(
        "recovery: done in {:.2} s ({} tables from the checkpoint, {replayed} log records replayed{})",
        started.elapsed().as_secs_f64(),
        checkpoint_tables,
        if contents.torn.is_some() { ", a torn last record dropped" } else { "" }
    );
    let report = RecoveryReport {
        checkpoint_lsn: catalog.lsn,
        checkpoint_tables,
        shard_files: files.len(),
        replayed,
        torn: contents.torn,
        dropped: contents.dropped,
        elapsed: started.elapsed(),
    };
    let durable = Durable {
        io,
        dir: dir.to_path_buf(),
        wal,
        report,
        checkpointed: Mutex::new(Checkpointed { files, log_bytes: 0 }),
        replayed_bytes,
    };
    // From here on every change is logged.
    for table in replay.tables.values() {
        table.core().lock()?.replace_log(TableLog::On(durable.change_log()));
    }
    Ok(Recovered { tables: replay.tables, views: replay.views, schemas: replay.schemas, durable })
}

/// Builds a table from its catalog entry and its shard files.
fn load_table(
    io: &dyn StorageIo,
    shards_dir: &Path,
    entry: TableEntry,
    background: &Background,
    files: &mut BTreeSet<String>,
) -> Result<Table> {
    let table = Table::create(&entry.name, &entry.schema, entry.options.clone(), background.clone())?;
    let schema = table.schema().clone();
    let catalog = shards_dir.with_file_name(CATALOG);
    let bad = |what: String| Damage::new(0, format!("table '{}': {what}", entry.name)).in_file(&catalog);
    let mut shards = ShardList::default();
    let mut last_id = None;
    for s in entry.shards {
        if last_id.is_some_and(|last| s.id <= last) || s.id >= entry.next_shard_id {
            return Err(bad(format!("shard {} is out of order", s.id)));
        }
        last_id = Some(s.id);
        let capacity = usize::try_from(s.capacity)
            .ok()
            .filter(|&c| c > 0 && c <= MAX_SHARD_CAPACITY)
            .ok_or_else(|| bad(format!("shard {} has capacity {}", s.id, s.capacity)))?;
        let main_rows = usize::try_from(s.main_rows)
            .ok()
            .filter(|&r| r <= capacity)
            .ok_or_else(|| bad(format!("shard {} has {} main rows in {capacity}", s.id, s.main_rows)))?;
        let main = if main_rows == 0 {
            Main::empty(schema.len())
        } else {
            let name = shard_file(entry.uid, ShardId(s.id), s.version);
            let path = shards_dir.join(&name);
            let bytes = io.read(&path).map_err(|e| Error::io(&path, e))?;
            let main = decode_main(&bytes, &schema).map_err(|d| d.in_file(&path))?;
            if main.rows() != main_rows {
                return Err(bad(format!("shard {} has {} rows in its file, not {main_rows}", s.id, main.rows())));
            }
            files.insert(name);
            main
        };
        let delta = Delta::new(&schema, capacity - main_rows);
        let mut delta_len = 0;
        let file;
        let delta_ipc: &[u8] = if s.delta_rows > 0 {
            let name = delta_file(entry.uid, ShardId(s.id), s.version, s.delta_rows as usize);
            let path = shards_dir.join(&name);
            file = io.read(&path).map_err(|e| Error::io(&path, e))?;
            files.insert(name);
            decode_delta_file(&file).map_err(|d| d.in_file(&path))?
        } else {
            &s.inline_delta
        };
        if !delta_ipc.is_empty() {
            let (_, batches) = from_ipc(delta_ipc).map_err(|e| bad(format!("shard {} delta: {e}", s.id)))?;
            for batch in &batches {
                // By position: a column renamed since the file was written
                // keeps its place, type and rows (and the file its name).
                let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                let batch =
                    RecordBatch::try_new_with_options(Arc::clone(&entry.schema), batch.columns().to_vec(), &options)
                        .map_err(|e| bad(format!("shard {} delta: {e}", s.id)))?;
                validate_batch(&entry.name, &schema, &batch)?;
                if delta_len + batch.num_rows() > delta.capacity() {
                    return Err(bad(format!("shard {} has more delta rows than room", s.id)));
                }
                delta.write_batch(delta_len, batch.columns(), 0, batch.num_rows())?;
                delta_len += batch.num_rows();
            }
        }
        if s.delta_rows > 0 && delta_len as u64 != s.delta_rows {
            return Err(bad(format!("shard {} has {delta_len} delta rows in its file, not {}", s.id, s.delta_rows)));
        }
        delta.commit(delta_len);
        let rows = main_rows + delta_len;
        let deletes = DeleteSet::from_ids(capacity, rows, &s.deleted)
            .map_err(|id| bad(format!("shard {} deletes record {id} twice or past its {rows} rows", s.id)))?;
        let data = ShardData::new(ShardId(s.id), s.version, capacity, main, delta);
        shards.push(ShardState { data: Arc::new(data), delta_len, deletes });
    }
    let mut writer = table.core().lock()?;
    writer.publish(TableState { shards });
    writer.set_next_shard_id(entry.next_shard_id);
    writer.set_uid(entry.uid);
    drop(writer);
    Ok(table)
}

/// The catalog while a log is replayed.
struct Replay<'b> {
    tables: BTreeMap<String, Table>,
    views: BTreeMap<String, String>,
    schemas: BTreeSet<String>,
    background: &'b Background,
}

impl Replay<'_> {
    /// Applies one log record.
    fn apply(&mut self, lsn: u64, record: LogRecord) -> Result<()> {
        match record {
            LogRecord::CreateTable { name, schema, options, replace, fill } => {
                if (!replace && self.tables.contains_key(&name)) || self.views.contains_key(&name) {
                    return Err(Error::TableExists(name));
                }
                let table = Table::create(&name, &schema, options, self.background.clone())?;
                fill.iter().try_for_each(|change| replay_on(&table, change))?;
                table.core().lock()?.set_uid(lsn);
                if let Some(old) = self.tables.insert(name, table) {
                    old.core().lock()?.mark_dropped();
                }
                Ok(())
            }
            LogRecord::DropTable { name } => match self.tables.remove(&name) {
                Some(old) => old.core().lock().map(|mut w| w.mark_dropped()),
                None => Err(Error::TableNotFound(name)),
            },
            LogRecord::CreateView { name, definition, replace } => {
                if self.tables.contains_key(&name) || (!replace && self.views.contains_key(&name)) {
                    return Err(Error::TableExists(name));
                }
                self.views.insert(name, definition);
                Ok(())
            }
            LogRecord::DropView { name } => match self.views.remove(&name) {
                Some(_) => Ok(()),
                None => Err(Error::ViewNotFound(name)),
            },
            LogRecord::AlterTable { name, new_name, schema, options, change } => {
                let old = self.tables.get(&name).cloned().ok_or_else(|| Error::TableNotFound(name.clone()))?;
                if new_name != name && (self.tables.contains_key(&new_name) || self.views.contains_key(&new_name)) {
                    return Err(Error::TableExists(new_name));
                }
                let mut writer = old.core().lock()?;
                let table = old.redefined(&mut writer, &new_name, &schema, options, &change)?;
                table.take_log(&mut writer)?;
                writer.mark_dropped();
                drop(writer);
                self.tables.remove(&name);
                self.tables.insert(new_name, table);
                Ok(())
            }
            LogRecord::CreateSchema { name } => {
                check_new_schema(&name, &self.schemas, self.tables.keys().chain(self.views.keys()))?;
                self.schemas.insert(name);
                Ok(())
            }
            LogRecord::DropSchema { name, cascade } => {
                if !self.schemas.remove(&name) {
                    return Err(Error::SchemaNotFound(name));
                }
                for doomed in schema_contents(&name, cascade, self.tables.keys().chain(self.views.keys()))? {
                    self.views.remove(&doomed);
                    if let Some(old) = self.tables.remove(&doomed) {
                        old.core().lock()?.mark_dropped();
                    }
                }
                Ok(())
            }
            LogRecord::Change { table, change } => {
                let table = self.tables.get(&table).ok_or(Error::TableNotFound(table))?;
                replay_on(table, &change)
            }
            // Applied with the commit naming it (see `StagedParts`).
            LogRecord::Stage { .. } => Ok(()),
        }
    }
}

/// The staged parts of the log ([`LogRecord::Stage`]) while it is replayed:
/// by transaction id, the records holding them, in order.
#[derive(Default)]
struct StagedParts<'r> {
    parts: std::collections::HashMap<u64, Vec<&'r Record>>,
}

impl<'r> StagedParts<'r> {
    /// Notes a staged part (decoding only its table and transaction).
    fn add(&mut self, record: &'r Record) -> Result<()> {
        let mut r = Reader { bytes: &record.payload, at: 0 };
        let txn = r.str().and_then(|_| r.u64()).map_err(|what| {
            Damage::new(r.at, what).shifted(record.offset + FRAME_HEADER as u64).in_file(&record.segment)
        })?;
        self.parts.entry(if txn == 0 { record.lsn } else { txn }).or_default().push(record);
        Ok(())
    }

    /// Puts the staged appends of every commit `record` holds before its
    /// own, checking that the parts are all there.
    fn resolve(&mut self, record: &mut LogRecord) -> std::result::Result<(), String> {
        match record {
            LogRecord::Change { table, change } => self.resolve_change(table, change),
            LogRecord::CreateTable { name, fill, .. } => fill.iter_mut().try_for_each(|c| self.resolve_change(name, c)),
            _ => Ok(()),
        }
    }

    fn resolve_change(&mut self, table: &str, change: &mut TableChange) -> std::result::Result<(), String> {
        let TableChange::Commit { staged, appends, .. } = change else { return Ok(()) };
        let Some(wanted) = staged.take() else { return Ok(()) };
        let parts = self.parts.remove(&wanted.txn).unwrap_or_default();
        if parts.len() as u64 != wanted.parts {
            return Err(format!(
                "it commits {} staged parts of transaction {}, the log holds {}",
                wanted.parts,
                wanted.txn,
                parts.len()
            ));
        }
        let mut batches = Vec::new();
        for part in parts {
            let damaged =
                |what: String| format!("its staged part, log record {} at offset {}: {what}", part.lsn, part.offset);
            match LogRecord::decode(STAGE, &part.payload).map_err(|d| damaged(d.to_string()))? {
                LogRecord::Stage { table: of, appends, .. } if of == table => batches.extend(appends),
                LogRecord::Stage { table: of, .. } => {
                    return Err(damaged(format!("the part is of table '{of}', the commit of '{table}'")));
                }
                _ => return Err(damaged("not a staged part".into())),
            }
        }
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum::<u64>();
        if rows != wanted.rows {
            return Err(format!(
                "it commits {} staged rows of transaction {}, its parts hold {rows}",
                wanted.rows, wanted.txn
            ));
        }
        batches.append(appends);
        *appends = batches;
        Ok(())
    }

    /// Parts after `lsn` that no commit named.
    fn unfinished(&self, lsn: u64) -> usize {
        self.parts.values().flatten().filter(|r| r.lsn > lsn).count()
    }
}

/// Applies a logged change to `table`.
fn replay_on(table: &Table, change: &TableChange) -> Result<()> {
    match change {
        TableChange::Commit { truncate, appends, deletes, .. } => table.replay_transaction(|t| {
            if *truncate {
                t.truncate();
            }
            for batch in appends {
                t.append(batch)?;
            }
            for d in deletes {
                let shard = ShardId(d.shard);
                match t.shard_version(shard) {
                    Some(v) if v == d.version => {}
                    found => {
                        return Err(Error::Internal(format!(
                            "it deletes from shard {shard} at version {}, the table has it at {found:?}",
                            d.version
                        )));
                    }
                }
                t.delete(shard, &d.ids)?;
            }
            Ok(())
        }),
        TableChange::Rebuild { shard, version, delta_len, deleted } => {
            rebuild::replay_rebuild(table.core(), ShardId(*shard), *version, *delta_len as usize, deleted)
        }
    }
}

/// Writes `bytes` as the whole of `path` and syncs it (its directory entry
/// is synced by the caller).
fn write_file(io: &dyn StorageIo, path: &Path, bytes: &[u8]) -> Result<()> {
    match io.remove(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(path, e)),
    }
    let mut file = io.append(path).map_err(|e| Error::io(path, e))?;
    file.write(bytes).map_err(|e| Error::io(path, e))?;
    file.sync().map_err(|e| Error::io(path, e))
}
