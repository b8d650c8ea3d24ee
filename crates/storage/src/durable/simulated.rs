//! A simulated file system for tests: it remembers what is durable, so a
//! test can crash the "machine" and fail the "disk" (see [`super::io`]).
//! Compiled for the crate's tests and with the `testing` feature.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::io::{AppendFile, StorageIo};

/// An in-memory file system that remembers what is durable, for tests:
/// [`SimulatedIo::crash`] keeps only that, and faults can be switched on.
#[derive(Debug, Default, Clone)]
pub struct SimulatedIo {
    state: Arc<Mutex<SimState>>,
}

#[derive(Debug, Default)]
struct SimState {
    /// Files by id: (current bytes, bytes as of the last sync).
    files: Vec<(Vec<u8>, Vec<u8>)>,
    /// Paths as they are now, and as of their directory's last sync.
    names: BTreeMap<PathBuf, usize>,
    durable_names: BTreeMap<PathBuf, usize>,
    dirs: Vec<PathBuf>,
    fail_syncs: bool,
    fail_writes: bool,
    /// Bytes all files together may hold (a small disk), if limited.
    capacity: Option<usize>,
}

impl SimState {
    fn used(&self) -> usize {
        self.names.values().map(|&id| self.files[id].0.len()).sum()
    }
}

#[derive(Debug)]
struct SimFile {
    state: Arc<Mutex<SimState>>,
    id: usize,
    /// Where the next write goes.
    at: usize,
}

fn lock(state: &Mutex<SimState>) -> io::Result<std::sync::MutexGuard<'_, SimState>> {
    state.lock().map_err(|_| io::Error::other("simulated file system poisoned"))
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{} not found", path.display()))
}

impl AppendFile for SimFile {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut state = lock(&self.state)?;
        if state.fail_writes {
            return Err(io::Error::other("simulated write failure"));
        }
        let end = self.at + bytes.len();
        let growth = end.saturating_sub(state.files[self.id].0.len());
        if state.capacity.is_some_and(|c| state.used() + growth > c) {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "simulated disk full"));
        }
        let file = &mut state.files[self.id].0;
        if file.len() < end {
            file.resize(end, 0);
        }
        file[self.at..end].copy_from_slice(bytes);
        self.at = end;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut state = lock(&self.state)?;
        if state.fail_syncs {
            return Err(io::Error::other("simulated fsync failure"));
        }
        let file = &mut state.files[self.id];
        file.1 = file.0.clone();
        Ok(())
    }

    fn try_clone(&self) -> io::Result<Box<dyn AppendFile>> {
        Ok(Box::new(SimFile { state: Arc::clone(&self.state), id: self.id, at: self.at }))
    }
}

impl SimulatedIo {
    /// A power loss: every file goes back to its last sync, every
    /// directory to its last sync. Of what each file had written since,
    /// `torn` bytes from the first one changed survive (a write cut short).
    pub fn crash(&self, torn: usize) {
        let Ok(mut state) = self.state.lock() else { return };
        for (now, synced) in &mut state.files {
            let first = now.iter().zip(synced.iter()).position(|(a, b)| a != b).unwrap_or(synced.len().min(now.len()));
            let kept = &now[first..(first + torn).min(now.len())];
            let mut after = synced.clone();
            if after.len() < first + kept.len() {
                after.resize(first + kept.len(), 0);
            }
            after[first..first + kept.len()].copy_from_slice(kept);
            now.clone_from(&after);
            *synced = after;
        }
        state.names = state.durable_names.clone();
    }

    /// Makes every later sync fail (or succeed again).
    pub fn fail_syncs(&self, fail: bool) {
        if let Ok(mut state) = self.state.lock() {
            state.fail_syncs = fail;
        }
    }

    /// Makes every later write fail (or succeed again).
    pub fn fail_writes(&self, fail: bool) {
        if let Ok(mut state) = self.state.lock() {
            state.fail_writes = fail;
        }
    }

    /// Makes the disk hold at most `bytes` of files (writes past it fail
    /// as on a full disk), or any amount.
    pub fn set_capacity(&self, bytes: Option<usize>) {
        if let Ok(mut state) = self.state.lock() {
            state.capacity = bytes;
        }
    }

    /// Flips bit `bit` of byte `offset` of `path`, durably (a disk error).
    pub fn flip_bit(&self, path: &Path, offset: usize, bit: u8) -> io::Result<()> {
        let mut state = lock(&self.state)?;
        let id = *state.names.get(path).ok_or_else(|| not_found(path))?;
        let (now, synced) = &mut state.files[id];
        for bytes in [now, synced] {
            if let Some(b) = bytes.get_mut(offset) {
                *b ^= 1 << (bit % 8);
            }
        }
        Ok(())
    }
}

impl StorageIo for SimulatedIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = lock(&self.state)?;
        for d in dir.ancestors().filter(|d| !d.as_os_str().is_empty()) {
            if !state.dirs.iter().any(|known| known == d) {
                state.dirs.push(d.to_path_buf());
            }
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = lock(&self.state)?;
        if !state.dirs.iter().any(|d| d == dir) {
            return Err(not_found(dir));
        }
        Ok(state
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = lock(&self.state)?;
        let id = *state.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(state.files[id].0.clone())
    }

    fn append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        let mut state = lock(&self.state)?;
        let parent = path.parent().unwrap_or(Path::new(""));
        if !state.dirs.iter().any(|d| d == parent) {
            return Err(not_found(parent));
        }
        let id = match state.names.get(path) {
            Some(&id) => id,
            None => {
                state.files.push((Vec::new(), Vec::new()));
                let id = state.files.len() - 1;
                state.names.insert(path.to_path_buf(), id);
                id
            }
        };
        let at = state.files[id].0.len();
        Ok(Box::new(SimFile { state: Arc::clone(&self.state), id, at }))
    }

    fn open_at(&self, path: &Path, offset: u64) -> io::Result<Box<dyn AppendFile>> {
        let state = lock(&self.state)?;
        let id = *state.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(Box::new(SimFile { state: Arc::clone(&self.state), id, at: offset as usize }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = lock(&self.state)?;
        let id = state.names.remove(from).ok_or_else(|| not_found(from))?;
        state.names.insert(to.to_path_buf(), id);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut state = lock(&self.state)?;
        state.names.remove(path).map(|_| ()).ok_or_else(|| not_found(path))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = lock(&self.state)?;
        if state.fail_syncs {
            return Err(io::Error::other("simulated fsync failure"));
        }
        let in_dir = |p: &PathBuf| p.parent() == Some(dir);
        let mut durable: BTreeMap<PathBuf, usize> =
            state.durable_names.iter().filter(|(p, _)| !in_dir(p)).map(|(p, &id)| (p.clone(), id)).collect();
        durable.extend(state.names.iter().filter(|(p, _)| in_dir(p)).map(|(p, &id)| (p.clone(), id)));
        state.durable_names = durable;
        Ok(())
    }

    fn available_bytes(&self, _dir: &Path) -> io::Result<Option<u64>> {
        let state = lock(&self.state)?;
        Ok(state.capacity.map(|c| c.saturating_sub(state.used()) as u64))
    }
}
