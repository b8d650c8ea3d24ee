//! A durable database: its data directory, the catalog file, checkpoints
//! and recovery.
//!
//! ```text
//!   <dir>/LOCK                                one process at a time
//!   <dir>/CATALOG                             the last checkpoint: tables, shards,
//!                                             delta rows, deleted ids, and its LSN
//!   <dir>/shards/t<uid>-s<shard>-v<version>.main   main storage of one shard version
//!   <dir>/wal/wal-<first lsn>.log             the write-ahead log
//! ```
//!
//! Every change is logged before it is acknowledged (see [`super::wal`]).
//! A **checkpoint** takes a consistent cut of every table at one LSN
//! (holding the catalog lock and each table's writer lock for the moment
//! it takes to copy pointers), syncs the log through that LSN, writes the
//! main storage of shard versions not written yet to their own files,
//! writes the catalog (temp file, sync, rename, sync directory), and only
//! then removes the shard files and log segments the new catalog no
//! longer needs. A crash at any point leaves the previous catalog and
//! everything it refers to intact.
//!
//! **Recovery** loads the catalog and the shard files it names (checking
//! every checksum), then replays the log records after the checkpoint's
//! LSN, in order, with background rebuilds paused: the log holds every
//! rebuild that happened, and replaying it renumbers rows as the original
//! did, so logged deletes name the same rows.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::checkpoint::{decode_main, encode_main};
use super::io::{StorageIo, write_atomically};
use super::lock::DirLock;
use super::record::{LogRecord, Reader, from_ipc, ipc, put_bytes, put_ids, put_options, put_str, put_u64};
use super::wal::{SEGMENT_BYTES, SyncMode, Wal, io_error};
use crate::database::{Database, DbInner};
use crate::delta::Delta;
use crate::error::{Error, Result};
use crate::ingest::validate_batch;
use crate::main::Main;
use crate::main::decode::Rows;
use crate::rebuild;
use crate::shard::{DeleteSet, ShardData, ShardId, ShardList, ShardState};
use crate::table::{MAX_SHARD_CAPACITY, Table, TableLog, TableOptions, TableState, append_record, needs_rebuild};
use crate::types::TableSchema;

const CATALOG: &str = "CATALOG";
const CATALOG_MAGIC: &[u8; 8] = b"QVCATLG\0";
const CATALOG_VERSION: u32 = 1;
/// Magic, version, body length, body CRC32C.
const CATALOG_HEADER: usize = 8 + 4 + 8 + 4;
const SHARDS: &str = "shards";
const WAL: &str = "wal";

/// How a durable database writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableOptions {
    /// When a commit is durable (default [`SyncMode::Always`]).
    pub sync: SyncMode,
    /// A background checkpoint starts once the log has grown by this many
    /// bytes since the last one (default 256 MiB); 0 turns background
    /// checkpoints off (then only [`Database::checkpoint`] and
    /// [`Database::close`] make them).
    pub checkpoint_bytes: u64,
    /// A new log segment starts once the current one holds this many
    /// bytes (default 64 MiB, at least 4 KiB). Segments are prepared
    /// (written full of zeros) ahead of use, so an open data directory
    /// holds up to two segments' worth of log files even when idle.
    pub log_segment_bytes: u64,
}

impl Default for DurableOptions {
    fn default() -> Self {
        Self { sync: SyncMode::Always, checkpoint_bytes: 256 << 20, log_segment_bytes: SEGMENT_BYTES }
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
    /// Time taken to open.
    pub elapsed: Duration,
}

/// The durable side of a [`Database`].
#[derive(Debug)]
pub(crate) struct Durable {
    io: Arc<dyn StorageIo>,
    dir: PathBuf,
    pub(crate) wal: Wal,
    report: RecoveryReport,
    /// What the durable catalog holds; held for the whole of a checkpoint.
    checkpointed: Mutex<Checkpointed>,
}

#[derive(Debug, Default)]
struct Checkpointed {
    /// Shard files the catalog refers to.
    files: BTreeSet<String>,
    /// Bytes the log had been appended when the cut was taken.
    log_bytes: u64,
}

impl Durable {
    /// Logs a catalog change; the LSN to commit.
    pub(crate) fn append(&self, record: &LogRecord) -> Result<u64> {
        append_record(&self.wal, record)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn report(&self) -> &RecoveryReport {
        &self.report
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

// ---------------------------------------------------------------------------
// The catalog file
// ---------------------------------------------------------------------------

/// The catalog file's contents.
#[derive(Debug, Default)]
struct CatalogFile {
    lsn: u64,
    tables: Vec<TableEntry>,
}

#[derive(Debug)]
struct TableEntry {
    name: String,
    uid: u64,
    schema: SchemaRef,
    options: TableOptions,
    next_shard_id: u64,
    shards: Vec<ShardEntry>,
}

#[derive(Debug)]
struct ShardEntry {
    id: u64,
    version: u64,
    capacity: u64,
    /// Main rows, in the file [`shard_file`] names (none when 0).
    main_rows: u64,
    /// The delta rows as one Arrow IPC stream; empty when there are none.
    delta: Vec<u8>,
    deleted: Vec<u32>,
}

/// ```text
///   "QVCATLG\0" | version u32 | body length u64 | body CRC32C u32 | body
///   body: lsn u64, tables u64, per table:
///         name, uid u64, schema (IPC), options, next shard id u64, shards u64,
///         per shard: id, version, capacity, main rows (u64 each),
///                    delta rows (IPC), deleted ids
/// ```
fn encode_catalog(catalog: &CatalogFile) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    put_u64(&mut body, catalog.lsn);
    put_u64(&mut body, catalog.tables.len() as u64);
    for t in &catalog.tables {
        put_str(&mut body, &t.name);
        put_u64(&mut body, t.uid);
        put_bytes(&mut body, &ipc(&t.schema, &[])?);
        put_options(&mut body, &t.options);
        put_u64(&mut body, t.next_shard_id);
        put_u64(&mut body, t.shards.len() as u64);
        for s in &t.shards {
            for v in [s.id, s.version, s.capacity, s.main_rows] {
                put_u64(&mut body, v);
            }
            put_bytes(&mut body, &s.delta);
            put_ids(&mut body, &s.deleted);
        }
    }
    let mut out = Vec::with_capacity(CATALOG_HEADER + body.len());
    out.extend_from_slice(CATALOG_MAGIC);
    out.extend_from_slice(&CATALOG_VERSION.to_le_bytes());
    put_u64(&mut out, body.len() as u64);
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Parses a catalog file; on failure, the offset and what is wrong.
fn decode_catalog(bytes: &[u8]) -> std::result::Result<CatalogFile, (u64, String)> {
    if bytes.len() < CATALOG_HEADER || &bytes[..8] != CATALOG_MAGIC {
        return Err((0, "not a quiverdb catalog file".into()));
    }
    let u32_at = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let version = u32_at(8);
    if version != CATALOG_VERSION {
        return Err((
            8,
            format!("catalog format version {version} is not supported (this quiverdb reads {CATALOG_VERSION})"),
        ));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[12..20]);
    let len = u64::from_le_bytes(len);
    let body = &bytes[CATALOG_HEADER..];
    if body.len() as u64 != len {
        return Err((12, format!("the body should be {len} bytes, the file holds {}", body.len())));
    }
    if crc32c::crc32c(body) != u32_at(20) {
        return Err((CATALOG_HEADER as u64, "checksum mismatch".into()));
    }
    let mut r = Reader { bytes: body, at: 0 };
    let at = |r: &Reader<'_>, e: String| ((CATALOG_HEADER + r.at) as u64, e);
    let mut catalog = CatalogFile { lsn: r.u64().map_err(|e| at(&r, e))?, tables: Vec::new() };
    let tables = r.count(8).map_err(|e| at(&r, e))?;
    for _ in 0..tables {
        let entry = (|| {
            let name = r.str()?;
            let uid = r.u64()?;
            let (schema, _) = from_ipc(r.bytes()?)?;
            let options = r.options()?;
            let next_shard_id = r.u64()?;
            let n = r.count(40)?;
            let mut shards = Vec::with_capacity(n);
            for _ in 0..n {
                let (id, version, capacity, main_rows) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                let delta = r.bytes()?.to_vec();
                let deleted = r.ids()?;
                shards.push(ShardEntry { id, version, capacity, main_rows, delta, deleted });
            }
            Ok::<_, String>(TableEntry { name, uid, schema, options, next_shard_id, shards })
        })()
        .map_err(|e| at(&r, e))?;
        catalog.tables.push(entry);
    }
    if r.at != body.len() {
        return Err(at(&r, "unread bytes after the last table".into()));
    }
    Ok(catalog)
}

// ---------------------------------------------------------------------------
// Opening and recovery
// ---------------------------------------------------------------------------

/// Opens (creating if needed) the data directory `dir` through `io`.
pub(crate) fn open(
    io: Arc<dyn StorageIo>,
    dir: &Path,
    options: DurableOptions,
    lock: Option<DirLock>,
) -> Result<Database> {
    let started = Instant::now();
    let shards_dir = dir.join(SHARDS);
    io.create_dir_all(&shards_dir).map_err(|e| io_error(&shards_dir, &e))?;
    io.sync_dir(dir).map_err(|e| io_error(dir, &e))?;
    let db = Database::new();
    db.inner.rebuilds.pause(true);

    let catalog_path = dir.join(CATALOG);
    let catalog = match io.read(&catalog_path) {
        Ok(bytes) => decode_catalog(&bytes).map_err(|(offset, reason)| Error::Corrupt {
            path: catalog_path.display().to_string(),
            offset,
            reason,
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => CatalogFile::default(),
        Err(e) => return Err(io_error(&catalog_path, &e)),
    };
    let mut files = BTreeSet::new();
    let checkpoint_tables = catalog.tables.len();
    for entry in catalog.tables {
        load_table(&db, io.as_ref(), &shards_dir, entry, &mut files)?;
    }

    let wal_dir = dir.join(WAL);
    let (wal, contents) = Wal::open(Arc::clone(&io), &wal_dir, options.sync, options.log_segment_bytes)?;
    if let Some(lock) = lock {
        wal.hold(lock);
    }
    if let Some(first) = contents.records.first()
        && first.lsn > catalog.lsn + 1
    {
        return Err(Error::Corrupt {
            path: first.segment.display().to_string(),
            offset: 0,
            reason: format!(
                "the log starts at record {}, but the checkpoint covers only records up to {}",
                first.lsn, catalog.lsn
            ),
        });
    }
    if wal.last_lsn()? < catalog.lsn {
        return Err(Error::Corrupt {
            path: wal_dir.display().to_string(),
            offset: 0,
            reason: format!("the log ends at record {}, before the checkpoint's {}", wal.last_lsn()?, catalog.lsn),
        });
    }
    let mut replayed = 0;
    for record in contents.records.iter().filter(|r| r.lsn > catalog.lsn) {
        replay(&db, record.lsn, record.kind, &record.payload).map_err(|e| Error::Corrupt {
            path: record.segment.display().to_string(),
            offset: record.offset,
            reason: format!("log record {} cannot be replayed: {e}", record.lsn),
        })?;
        replayed += 1;
    }

    // From here on every change is logged.
    let tables: Vec<Table> = db.inner.tables.read().map_err(lock_error)?.values().cloned().collect();
    for table in &tables {
        table.inner.writer.lock().map_err(lock_error)?.log = TableLog::Wal(wal.clone());
    }
    let report = RecoveryReport {
        checkpoint_lsn: catalog.lsn,
        checkpoint_tables,
        shard_files: files.len(),
        replayed,
        torn: contents.torn,
        elapsed: started.elapsed(),
    };
    let durable = Durable {
        io,
        dir: dir.to_path_buf(),
        wal,
        report,
        checkpointed: Mutex::new(Checkpointed { files, log_bytes: 0 }),
    };
    db.inner.durable.set(durable).map_err(|_| Error::Internal("a database was opened twice".into()))?;
    db.inner.rebuilds.pause(false);
    for table in &tables {
        if table.options().background_rebuild {
            for shard in table.inner.state.load().shards.iter() {
                if needs_rebuild(table.options(), shard) {
                    table.inner.rebuilds.schedule(&table.inner.self_ref, &shard.data);
                }
            }
        }
    }
    if options.checkpoint_bytes > 0 {
        let weak = Arc::downgrade(&db.inner);
        std::thread::Builder::new()
            .name("quiverdb-checkpoint".into())
            .spawn(move || background_checkpoints(&weak, options.checkpoint_bytes))
            .map_err(|e| Error::Io {
                path: dir.display().to_string(),
                message: format!("starting the checkpoint thread: {e}"),
            })?;
    }
    Ok(db)
}

/// Builds a table from its catalog entry and its shard files.
fn load_table(
    db: &Database,
    io: &dyn StorageIo,
    shards_dir: &Path,
    entry: TableEntry,
    files: &mut BTreeSet<String>,
) -> Result<()> {
    let key: Vec<&str> = entry.options.primary_key.iter().map(String::as_str).collect();
    let schema = TableSchema::try_new(&entry.schema, &key)?;
    entry.options.validate()?;
    let table = Table::new(entry.name.clone(), schema.clone(), entry.options.clone(), db.inner.rebuilds.clone());
    let bad = |reason: String| Error::Corrupt {
        path: shards_dir.with_file_name(CATALOG).display().to_string(),
        offset: 0,
        reason: format!("table '{}': {reason}", entry.name),
    };
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
            let bytes = io.read(&path).map_err(|e| io_error(&path, &e))?;
            let main = decode_main(&bytes, &schema).map_err(|e| Error::Corrupt {
                path: path.display().to_string(),
                offset: e.offset,
                reason: e.reason,
            })?;
            if main.rows() != main_rows {
                return Err(bad(format!("shard {} has {} rows in its file, not {main_rows}", s.id, main.rows())));
            }
            files.insert(name);
            main
        };
        let delta = Delta::new(&schema, capacity - main_rows);
        let mut delta_len = 0;
        if !s.delta.is_empty() {
            let (_, batches) = from_ipc(&s.delta).map_err(|e| bad(format!("shard {} delta: {e}", s.id)))?;
            for batch in &batches {
                validate_batch(&entry.name, &schema, batch)?;
                if delta_len + batch.num_rows() > delta.capacity() {
                    return Err(bad(format!("shard {} has more delta rows than room", s.id)));
                }
                delta.write_batch(delta_len, batch.columns(), 0, batch.num_rows())?;
                delta_len += batch.num_rows();
            }
        }
        delta.commit(delta_len);
        let rows = main_rows + delta_len;
        let deletes = DeleteSet::from_ids(capacity, rows, &s.deleted)
            .map_err(|id| bad(format!("shard {} deletes record {id} twice or past its {rows} rows", s.id)))?;
        let data = ShardData::new(ShardId(s.id), s.version, capacity, main, delta);
        shards.push(ShardState { data: Arc::new(data), delta_len, deletes });
    }
    table.inner.state.store(Arc::new(TableState { shards }));
    {
        let mut writer = table.inner.writer.lock().map_err(lock_error)?;
        writer.next_shard_id = entry.next_shard_id;
        writer.uid = entry.uid;
    }
    let mut tables = db.inner.tables.write().map_err(lock_error)?;
    if tables.insert(entry.name.clone(), table).is_some() {
        return Err(bad("the catalog names it twice".into()));
    }
    Ok(())
}

/// Applies one log record to a database being recovered.
fn replay(db: &Database, lsn: u64, kind: u8, payload: &[u8]) -> Result<()> {
    let record = LogRecord::decode(kind, payload).map_err(Error::Internal)?;
    match record {
        LogRecord::CreateTable { name, schema, options, replace, fill } => {
            let table = db.create_table_with(&name, &schema, options, replace, |t| {
                fill.iter().try_for_each(|r| replay_on(t, r))?;
                Ok::<_, Error>(t.clone())
            })?;
            table.inner.writer.lock().map_err(lock_error)?.uid = lsn;
            Ok(())
        }
        LogRecord::DropTable { name } => db.drop_table(&name),
        ref change @ (LogRecord::Commit { ref table, .. } | LogRecord::Rebuild { ref table, .. }) => {
            replay_on(&db.table(table)?, change)
        }
    }
}

/// Applies a commit or rebuild record to `table`.
fn replay_on(table: &Table, record: &LogRecord) -> Result<()> {
    match record {
        LogRecord::Commit { truncate, appends, deletes, .. } => table.transaction(|t| {
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
        LogRecord::Rebuild { shard, version, delta_len, deleted, .. } => {
            rebuild::replay_rebuild(&table.inner, ShardId(*shard), *version, *delta_len as usize, deleted)
        }
        _ => Err(Error::Internal("only commits and rebuilds apply to a table".into())),
    }
}

// ---------------------------------------------------------------------------
// Checkpoints
// ---------------------------------------------------------------------------

/// One table as the checkpoint's cut saw it.
struct Cut {
    table: Table,
    state: Arc<TableState>,
    next_shard_id: u64,
    uid: u64,
}

/// Writes a checkpoint of `db` (see the module documentation). A failure
/// makes the database read-only: what reached the disk is unknown.
pub(crate) fn checkpoint(db: &Database, durable: &Durable) -> Result<()> {
    let mut done = durable.checkpointed.lock().map_err(lock_error)?;
    let outcome = write_checkpoint(db, durable, &mut done);
    if let Err(e) = &outcome
        && !matches!(e, Error::ReadOnly(_))
    {
        durable.wal.fail(format!("a checkpoint failed: {e}"));
    }
    outcome
}

fn write_checkpoint(db: &Database, durable: &Durable, done: &mut MutexGuard<'_, Checkpointed>) -> Result<()> {
    let (lsn, log_bytes, cuts) = cut(db, durable)?;
    // The catalog must never be ahead of the log: a reopened log numbers
    // its records after the checkpoint's.
    durable.wal.sync()?;

    let io = durable.io.as_ref();
    let shards_dir = durable.dir.join(SHARDS);
    let mut files = BTreeSet::new();
    let mut catalog = CatalogFile { lsn, tables: Vec::with_capacity(cuts.len()) };
    let mut wrote = false;
    for cut in &cuts {
        let mut shards = Vec::with_capacity(cut.state.shards.len());
        for shard in cut.state.shards.iter() {
            let data = &shard.data;
            let main_rows = data.main.rows();
            if main_rows > 0 {
                let name = shard_file(cut.uid, data.id, data.version);
                if !done.files.contains(&name) && !files.contains(&name) {
                    write_file(io, &shards_dir.join(&name), &encode_main(&data.main))?;
                    wrote = true;
                }
                files.insert(name);
            }
            let delta = if shard.delta_len == 0 {
                Vec::new()
            } else {
                let schema = cut.table.arrow_schema();
                let columns = (0..schema.fields().len())
                    .map(|c| data.delta.column(c).decode(shard.delta_len, Rows::Range(0, shard.delta_len)))
                    .collect::<Result<Vec<_>>>()?;
                ipc(schema, &[RecordBatch::try_new(Arc::clone(schema), columns)?])?
            };
            let deleted = shard.deletes.as_ref().map_or_else(Vec::new, |d| d.ids(shard.rows()));
            shards.push(ShardEntry {
                id: data.id.0,
                version: data.version,
                capacity: data.capacity as u64,
                main_rows: main_rows as u64,
                delta,
                deleted,
            });
        }
        catalog.tables.push(TableEntry {
            name: cut.table.name().to_string(),
            uid: cut.uid,
            schema: Arc::clone(cut.table.arrow_schema()),
            options: cut.table.options().clone(),
            next_shard_id: cut.next_shard_id,
            shards,
        });
    }
    if wrote {
        io.sync_dir(&shards_dir).map_err(|e| io_error(&shards_dir, &e))?;
    }
    let bytes = encode_catalog(&catalog)?;
    write_atomically(io, &durable.dir, CATALOG, &bytes).map_err(|e| io_error(&durable.dir.join(CATALOG), &e))?;

    // The new catalog is durable: what only the old one needed can go.
    for name in io.list(&shards_dir).map_err(|e| io_error(&shards_dir, &e))? {
        if !files.contains(&name) {
            let path = shards_dir.join(&name);
            io.remove(&path).map_err(|e| io_error(&path, &e))?;
        }
    }
    durable.wal.remove_through(lsn)?;
    done.files = files;
    done.log_bytes = log_bytes;
    Ok(())
}

/// A consistent cut: every table's state and the LSN of the last record
/// they reflect. Creates and drops log under the catalog lock, commits and
/// rebuilds under their table's writer lock; holding all of them, nothing
/// can log.
fn cut(db: &Database, durable: &Durable) -> Result<(u64, u64, Vec<Cut>)> {
    let catalog = db.inner.tables.read().map_err(lock_error)?;
    let tables: Vec<Table> = catalog.values().cloned().collect();
    let mut guards = Vec::with_capacity(tables.len());
    let mut cuts = Vec::with_capacity(tables.len());
    for table in &tables {
        let writer = table.inner.writer.lock().map_err(lock_error)?;
        cuts.push(Cut {
            table: table.clone(),
            state: table.inner.state.load_full(),
            next_shard_id: writer.next_shard_id,
            uid: writer.uid,
        });
        guards.push(writer);
    }
    let lsn = durable.wal.last_lsn()?;
    let log_bytes = durable.wal.appended_bytes()?;
    drop(guards);
    drop(catalog);
    Ok((lsn, log_bytes, cuts))
}

/// Writes `bytes` as the whole of `path` and syncs it (its directory entry
/// is synced by the caller).
fn write_file(io: &dyn StorageIo, path: &Path, bytes: &[u8]) -> Result<()> {
    match io.remove(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(path, &e)),
    }
    let mut file = io.append(path).map_err(|e| io_error(path, &e))?;
    file.write(bytes).map_err(|e| io_error(path, &e))?;
    file.sync().map_err(|e| io_error(path, &e))
}

/// The checkpoint thread: checkpoints whenever the log has grown by
/// `every` bytes, while the database is open.
fn background_checkpoints(db: &Weak<DbInner>, every: u64) {
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let Some(inner) = db.upgrade() else { return };
        let db = Database { inner };
        let Some(durable) = db.inner.durable.get() else { return };
        let Ok(since) = durable.checkpointed.lock().map(|c| c.log_bytes) else { return };
        let Ok(now) = durable.wal.appended_bytes() else { return };
        if now.saturating_sub(since) >= every && checkpoint(&db, durable).is_err() {
            return; // the database is read-only now
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_catalogs_are_refused_with_an_offset() {
        let bytes = encode_catalog(&CatalogFile { lsn: 7, tables: Vec::new() }).unwrap();
        assert_eq!(decode_catalog(&bytes).unwrap().lsn, 7);
        for cut in 0..bytes.len() {
            assert!(decode_catalog(&bytes[..cut]).is_err());
        }
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(decode_catalog(&damaged).is_err(), "flip at {at}");
        }
    }
}
