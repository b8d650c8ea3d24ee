//! One process per data directory: an exclusive advisory lock on
//! `<dir>/LOCK`, held for as long as the directory is open and released by
//! the operating system if the process dies.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::Path;

use crate::error::{Error, Result};

/// The lock file's name inside a data directory.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// The lock on a data directory; dropping it releases the directory.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

impl DirLock {
    /// Locks `dir` (which must exist) for this process, or fails with
    /// [`Error::DirectoryInUse`] if another holder has it. The lock file
    /// records the holder's process id, for that error message.
    pub(crate) fn acquire(dir: &Path) -> Result<Self> {
        let path = dir.join(LOCK_FILE);
        let io = |e: std::io::Error| Error::io(&path, e);
        let mut file =
            OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&path).map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(Error::DirectoryInUse {
                    path: dir.display().to_string(),
                    holder: if holder.is_empty() { "unknown".into() } else { holder.to_string() },
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = std::env::temp_dir().join(format!("quiverdb-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = DirLock::acquire(&dir).unwrap();
        // A second open file description conflicts even within one process.
        match DirLock::acquire(&dir) {
            Err(Error::DirectoryInUse { holder, .. }) => assert_eq!(holder, std::process::id().to_string()),
            other => panic!("expected DirectoryInUse, got {other:?}"),
        }
        let message = DirLock::acquire(&dir).unwrap_err().to_string();
        assert!(message.contains("in use") && message.contains(&dir.display().to_string()), "{message}");
        drop(first);
        let again = DirLock::acquire(&dir).unwrap();
        let recorded = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
        assert_eq!(recorded.trim(), std::process::id().to_string());
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
