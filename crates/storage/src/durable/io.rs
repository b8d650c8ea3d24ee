//! The file operations of the durability layer, behind a trait so tests
//! can crash the "machine" and fail the "disk" (`SimulatedIo`, in the
//! `simulated` module).
//!
//! What `SimulatedIo` models is what a crash may keep: a file's bytes
//! as of its last [`AppendFile::sync`] (plus, optionally, the first bytes
//! of what was written after it: a write cut short), and a directory's
//! entries (files created, renamed or removed) as of its last
//! [`StorageIo::sync_dir`].

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The file operations durability needs.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // public through `testing` only
pub trait StorageIo: Send + Sync + std::fmt::Debug {
    /// Creates `dir` and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names of the files in `dir`, sorted.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// The whole content of `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The content of `path` up to its last non-zero byte, and the file's
    /// length (the rest is zeros): a prepared log segment is mostly zeros
    /// never written, which need not be held in memory.
    fn read_data(&self, path: &Path) -> io::Result<(Vec<u8>, u64)> {
        let mut bytes = self.read(path)?;
        let len = bytes.len() as u64;
        bytes.truncate(crate::durable::frame::data_end(&bytes));
        Ok((bytes, len))
    }
    /// `path` opened for appending (created empty if missing).
    fn append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>>;
    /// The existing file `path` opened for writing at `offset`: writes
    /// replace what is there (and extend the file past its end).
    fn open_at(&self, path: &Path, offset: u64) -> io::Result<Box<dyn AppendFile>>;
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file `path`.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries of `dir` (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Bytes that files in `dir` may still take on its file system, if
    /// known.
    fn available_bytes(&self, _dir: &Path) -> io::Result<Option<u64>> {
        Ok(None)
    }
}

/// A file being written in order, from where it was opened.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // public through `testing` only
pub trait AppendFile: Send + std::fmt::Debug {
    /// Writes `bytes` at the current position and moves past them.
    fn write(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Writes the slices, one after another, as [`AppendFile::write`] of
    /// them joined would (`slices` may be left changed).
    fn write_vectored(&mut self, slices: &mut [IoSlice<'_>]) -> io::Result<()> {
        slices.iter().try_for_each(|slice| self.write(slice))
    }
    /// Makes every byte written so far durable.
    fn sync(&mut self) -> io::Result<()>;
    /// Starts writing the file's first `len` bytes (what was written so
    /// far) to the disk, without waiting for it: a later
    /// [`AppendFile::sync`] finds less to do. (A hint; it promises nothing
    /// about durability.)
    fn start_writeback(&mut self, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// A second handle on the same file (to sync it while this one writes).
    fn try_clone(&self) -> io::Result<Box<dyn AppendFile>>;
}

/// Writes `bytes` as the file `name` in `dir` so that a crash leaves
/// either the old file or the new one: a temporary file, synced, renamed
/// over `name`, then the directory synced.
pub(crate) fn write_atomically(io: &dyn StorageIo, dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    // A temporary file left by a crash is stale.
    match io.remove(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = io.append(&tmp)?;
    file.write(bytes)?;
    file.sync()?;
    drop(file);
    io.rename(&tmp, &dir.join(name))?;
    io.sync_dir(dir)
}

/// Removes the temporary file of `name` in `dir` a crash may have left (a
/// file being written atomically, a log segment being prepared), which
/// takes room (up to a segment) for nothing. Nothing else in `dir` is
/// touched.
pub(crate) fn remove_temporary(io: &dyn StorageIo, dir: &Path, name: &str) -> io::Result<()> {
    match io.remove(&dir.join(format!("{name}.tmp"))) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Creates the file `path` holding `len` zero bytes, written (not a
/// sparse hole) and, if `sync`, synced, through a temporary file renamed
/// into place: `path` exists only once it is whole. Writing over it later
/// allocates no pages (nor, once synced, disk blocks) and does not change
/// the file's size, so those writes and their syncs are cheaper than
/// appends. `cancel` is checked between chunks; a cancelled preparation
/// leaves no `path`.
pub(crate) fn create_zeroed(
    io: &dyn StorageIo,
    path: &Path,
    len: u64,
    sync: bool,
    cancel: &dyn Fn() -> bool,
) -> io::Result<bool> {
    const CHUNK: usize = 1 << 20;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    match io.remove(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = io.append(&tmp)?;
    let zeros = vec![0; CHUNK.min(len as usize)];
    let mut left = len;
    let written = loop {
        if left == 0 {
            break if sync { file.sync() } else { Ok(()) };
        }
        if cancel() {
            drop(file);
            io.remove(&tmp)?;
            return Ok(false);
        }
        let n = left.min(CHUNK as u64) as usize;
        if let Err(e) = file.write(&zeros[..n]) {
            break Err(e);
        }
        left -= n as u64;
    };
    drop(file);
    if let Err(e) = written {
        // A full disk must not stay full of a file nobody will use.
        let _ = io.remove(&tmp);
        return Err(e);
    }
    io.rename(&tmp, path)?;
    Ok(true)
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FileSystem;

#[derive(Debug)]
struct RealFile(File);

impl AppendFile for RealFile {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }

    fn write_vectored(&mut self, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
        while !slices.is_empty() {
            match self.0.write_vectored(slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    #[cfg(target_os = "linux")]
    fn start_writeback(&mut self, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid open descriptor and a byte range of it; the call
        // only schedules writeback of the range's dirty pages.
        let done = unsafe { libc::sync_file_range(self.0.as_raw_fd(), 0, len as i64, libc::SYNC_FILE_RANGE_WRITE) };
        if done == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
    }

    fn try_clone(&self) -> io::Result<Box<dyn AppendFile>> {
        Ok(Box::new(RealFile(self.0.try_clone()?)))
    }
}

impl StorageIo for FileSystem {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn read_data(&self, path: &Path) -> io::Result<(Vec<u8>, u64)> {
        use std::io::Read;
        const CHUNK: usize = 1 << 20;
        let mut file = File::open(path)?;
        let mut bytes = Vec::new();
        let mut chunk = vec![0; CHUNK];
        // Zeros read but not kept yet: kept only if data follows them.
        let mut zeros = 0usize;
        let mut len = 0u64;
        loop {
            let n = match file.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            len += n as u64;
            let data = crate::durable::frame::data_end(&chunk[..n]);
            if data == 0 {
                zeros += n;
                continue;
            }
            bytes.resize(bytes.len() + zeros, 0);
            bytes.extend_from_slice(&chunk[..n]);
            zeros = n - data;
            bytes.truncate(bytes.len() - zeros);
        }
        Ok((bytes, len))
    }

    fn append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        Ok(Box::new(RealFile(OpenOptions::new().create(true).append(true).open(path)?)))
    }

    fn open_at(&self, path: &Path, offset: u64) -> io::Result<Box<dyn AppendFile>> {
        let mut file = OpenOptions::new().write(true).open(path)?;
        file.seek(SeekFrom::Start(offset))?;
        Ok(Box::new(RealFile(file)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    #[cfg(target_os = "linux")]
    fn available_bytes(&self, dir: &Path) -> io::Result<Option<u64>> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
        let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: `path` is a NUL-terminated string and `stats` points to
        // room for one `statvfs`, which the call fills when it returns 0.
        if unsafe { libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the call returned 0, so it filled `stats`.
        let stats = unsafe { stats.assume_init() };
        // Both are `u64` on 64-bit Linux, narrower on some 32-bit targets.
        #[allow(clippy::useless_conversion)]
        let (blocks, size) = (u64::from(stats.f_bavail), u64::from(stats.f_frsize));
        Ok(Some(blocks.saturating_mul(size)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::simulated::SimulatedIo;
    use super::*;

    fn check_atomic_write(io: &dyn StorageIo, dir: &Path) {
        io.create_dir_all(dir).unwrap();
        write_atomically(io, dir, "catalog", b"one").unwrap();
        write_atomically(io, dir, "catalog", b"two").unwrap();
        assert_eq!(io.read(&dir.join("catalog")).unwrap(), b"two");
        assert_eq!(io.list(dir).unwrap(), ["catalog"]);
    }

    #[test]
    fn atomic_write_on_the_real_file_system() {
        let dir = std::env::temp_dir().join(format!("quiverdb-io-{}", std::process::id()));
        check_atomic_write(&FileSystem, &dir);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_crash_keeps_only_what_was_synced() {
        let io = SimulatedIo::default();
        let dir = Path::new("/data");
        check_atomic_write(&io, dir);
        let mut log = io.append(&dir.join("log")).unwrap();
        log.write(b"synced").unwrap();
        log.sync().unwrap();
        io.sync_dir(dir).unwrap();
        log.write(b" lost").unwrap();
        // Renamed but the directory is not synced: the rename is lost too.
        io.rename(&dir.join("catalog"), &dir.join("renamed")).unwrap();
        io.crash(0);
        assert_eq!(io.read(&dir.join("log")).unwrap(), b"synced");
        assert_eq!(io.read(&dir.join("catalog")).unwrap(), b"two");
        assert!(io.read(&dir.join("renamed")).is_err());
    }

    #[test]
    fn a_crash_can_tear_the_last_write_and_forget_unsynced_files() {
        let io = SimulatedIo::default();
        let dir = Path::new("/data");
        io.create_dir_all(dir).unwrap();
        let mut log = io.append(&dir.join("log")).unwrap();
        log.write(b"abc").unwrap();
        log.sync().unwrap();
        io.sync_dir(dir).unwrap();
        log.write(b"defgh").unwrap();
        let mut fresh = io.append(&dir.join("fresh")).unwrap();
        fresh.write(b"x").unwrap();
        fresh.sync().unwrap();
        io.crash(2);
        assert_eq!(io.read(&dir.join("log")).unwrap(), b"abcde");
        assert_eq!(io.list(dir).unwrap(), ["log"], "a file whose directory was never synced is gone");
    }

    #[test]
    fn writing_over_a_zeroed_file_and_tearing_it() {
        let io = SimulatedIo::default();
        let dir = Path::new("/data");
        io.create_dir_all(dir).unwrap();
        let path = dir.join("segment");
        assert!(create_zeroed(&io, &path, 16, true, &|| false).unwrap());
        assert_eq!(io.list(dir).unwrap(), ["segment"], "the temporary file is renamed into place");
        io.sync_dir(dir).unwrap();
        let mut file = io.open_at(&path, 0).unwrap();
        file.write(b"abcd").unwrap();
        file.sync().unwrap();
        file.write(b"efgh").unwrap();
        assert_eq!(io.read(&path).unwrap(), b"abcdefgh\0\0\0\0\0\0\0\0");
        io.crash(2);
        assert_eq!(io.read(&path).unwrap(), b"abcdef\0\0\0\0\0\0\0\0\0\0", "the unsynced write is cut short");
        // Writing past the end extends the file.
        let mut file = io.open_at(&path, 14).unwrap();
        file.write(b"wxyz").unwrap();
        assert_eq!(io.read(&path).unwrap().len(), 18);
        // A cancelled preparation leaves nothing behind.
        assert!(!create_zeroed(&io, &dir.join("other"), 1 << 22, true, &|| true).unwrap());
        assert_eq!(io.list(dir).unwrap(), ["segment"]);
    }

    #[test]
    fn zeroed_file_on_the_real_file_system() {
        let dir = std::env::temp_dir().join(format!("quiverdb-io-zeroed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("segment");
        assert!(create_zeroed(&FileSystem, &path, 3 << 20, true, &|| false).unwrap());
        let mut file = FileSystem.open_at(&path, 5).unwrap();
        file.write(b"xyz").unwrap();
        drop(file);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 3 << 20, "writing over it keeps its size");
        assert_eq!(&bytes[..10], b"\0\0\0\0\0xyz\0\0");
        assert!(bytes[8..].iter().all(|&b| b == 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reading_the_data_of_a_file_leaves_out_its_trailing_zeros() {
        let dir = std::env::temp_dir().join(format!("quiverdb-io-data-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("segment");
        let mut content = vec![0u8; (3 << 20) + 77];
        // Zeros inside the data (a whole chunk of them) are kept.
        content[10] = 1;
        content[(2 << 20) + 5] = 2;
        for (name, io) in [("real", &FileSystem as &dyn StorageIo), ("simulated", &SimulatedIo::default())] {
            io.create_dir_all(&dir).unwrap();
            let mut file = io.append(&path).unwrap();
            file.write(&content).unwrap();
            drop(file);
            let (data, len) = io.read_data(&path).unwrap();
            assert_eq!(len, content.len() as u64, "{name}");
            assert_eq!(data, content[..(2 << 20) + 6], "{name}");
            io.remove(&path).unwrap();
            let mut empty = io.append(&path).unwrap();
            empty.write(&[0; 5000]).unwrap();
            drop(empty);
            assert_eq!(io.read_data(&path).unwrap(), (Vec::new(), 5000), "{name}");
            io.remove(&path).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn faults() {
        let io = SimulatedIo::default();
        let dir = Path::new("/data");
        io.create_dir_all(dir).unwrap();
        let mut log = io.append(&dir.join("log")).unwrap();
        log.write(b"\x01\x02").unwrap();
        io.fail_syncs(true);
        assert!(log.sync().is_err());
        assert!(io.sync_dir(dir).is_err());
        io.fail_syncs(false);
        io.fail_writes(true);
        assert!(log.write(b"more").is_err());
        io.fail_writes(false);
        log.sync().unwrap();
        io.flip_bit(&dir.join("log"), 1, 0).unwrap();
        assert_eq!(io.read(&dir.join("log")).unwrap(), b"\x01\x03");
    }

    #[test]
    fn a_vectored_write_writes_every_slice_in_order() {
        // More slices than one system call takes (1,024 on Linux).
        let chunks: Vec<Vec<u8>> = (0..3000).map(|i| vec![(i % 251) as u8; i % 7]).collect();
        let expected = chunks.concat();
        let dir = std::env::temp_dir().join(format!("quiverdb-io-vectored-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sim = SimulatedIo::default();
        sim.create_dir_all(&dir).unwrap();
        for io in [&FileSystem as &dyn StorageIo, &sim] {
            let path = dir.join("file");
            let _ = io.remove(&path);
            let mut file = io.append(&path).unwrap();
            file.write(b"head").unwrap();
            let mut slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
            file.write_vectored(&mut slices).unwrap();
            drop(file);
            let written = io.read(&path).unwrap();
            assert!(written[..4] == *b"head" && written[4..] == expected[..], "{io:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
