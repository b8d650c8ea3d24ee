//! The `quiverdb` binary: `serve` runs the Flight SQL server, `sql` is an
//! interactive SQL shell over Flight SQL, `load` bulk-loads a CSV or
//! Parquet file through Flight SQL ingest.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// The server's allocator: jemalloc, with background threads that return
/// freed pages to the operating system a second after they are freed.
///
/// An in-memory database is judged by its resident set. Measured side by
/// side on the 2M-row seed table (`examples/memory_bench.rs`, figures in
/// BENCHMARKS.md): glibc's malloc keeps what loads free (each thread's
/// arena holds its pages): 155 MiB above the start after the table was
/// dropped, 193 MiB after ten load/drop cycles; mimalloc with its defaults
/// 78 and 22 MiB, and a 3× slower ingest; jemalloc 7 and 9 MiB, at the
/// same query speed. Loading TPC-H SF1 (`memory_bench --tpch 1`): glibc
/// grew by 1,810 MiB and kept 958 MiB after every table was dropped;
/// mimalloc 940 and 953 MiB, loading in 5.0 s rather than 2.6–2.9 s;
/// jemalloc 320 and 38 MiB. Muzzy decay is off so purged pages leave RSS
/// at once (`MADV_DONTNEED`) rather than when the kernel needs them
/// (`MADV_FREE`).
///
/// Large allocations (a hash table of a million groups) stay in the
/// ordinary arenas (`oversize_threshold:0`): jemalloc's dedicated arena
/// for them returns their pages at once, so every query faulted its hash
/// tables in afresh. In one build, TPC-H q18 through the server took
/// 90,000 page faults and 215 ms per run with that arena, and 14,000 and
/// 160–171 ms without it. A 5 s decay instead of 1 s kept 6 MiB more RSS
/// after the seed table was dropped, for no gain beyond noise (q18 111
/// against 118 ms in a later build); with 1 s the seed table's RSS growth
/// after ten load/drop cycles stayed at 7.7 MiB.
///
/// Large zeroed allocations are zeroed by writing zeros ([`Allocator`]).
#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

/// Zeroed allocations from this size on (jemalloc's large size classes)
/// are zeroed by writing zeros.
const WRITE_ZEROS_FROM: usize = 16 << 10;

/// jemalloc, except that a large zeroed allocation (`vec![0; n]`) is an
/// ordinary one with zeros written into it. jemalloc zeroes a reused
/// large extent by dropping its pages (`MADV_DONTNEED`), so every page of
/// it faults again when first written: DataFusion's array-indexed hash
/// joins (`vec![0u32; key range]`, 24 MiB for TPC-H's order keys at SF1)
/// took about 27,000 page faults per run of q07, which cost more than the
/// join. Writing zeros into pages already mapped costs a few milliseconds.
#[derive(Debug)]
struct Allocator;

// SAFETY: every call goes to jemalloc's allocator with the same layout;
// `alloc_zeroed` returns memory it allocated and wrote zeros into.
unsafe impl std::alloc::GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe { tikv_jemallocator::Jemalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        if layout.size() < WRITE_ZEROS_FROM {
            // SAFETY: the caller's contract, passed on.
            return unsafe { tikv_jemallocator::Jemalloc.alloc_zeroed(layout) };
        }
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { tikv_jemallocator::Jemalloc.alloc(layout) };
        if !p.is_null() {
            // SAFETY: `p` is a fresh allocation of `layout.size()` bytes.
            unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { tikv_jemallocator::Jemalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe { tikv_jemallocator::Jemalloc.realloc(ptr, layout, new_size) }
    }
}

/// jemalloc's options, read at its first allocation (the C `malloc_conf`
/// under tikv-jemallocator's symbol prefix).
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
static malloc_conf: &[u8; 81] = b"background_thread:true,oversize_threshold:0,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// quiverdb: an in-memory columnar database served over Arrow Flight SQL.
#[derive(Debug, Parser)]
#[command(name = "quiverdb", version, about)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve a quiverdb database over Arrow Flight SQL.
    Serve(cli::serve::ServeArgs),
    /// An interactive SQL shell (or one statement with -c) against a server.
    Sql(cli::shell::SqlArgs),
    /// Load a CSV or Parquet file into a table through Flight SQL ingest.
    Load(cli::load::LoadArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Serve(args) => {
            quiverdb::server::report_allocator(allocator_stats);
            cli::serve::run(args)
        }
        Command::Sql(args) => cli::shell::run(args),
        Command::Load(args) => cli::load::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // A closed stderr loses the message, not the exit status.
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// jemalloc's statistics for `quiverdb.system.memory`: bytes the program
/// holds (`allocated`), in pages it uses (`active`), resident in memory,
/// mapped, retained for reuse (not resident), and jemalloc's metadata.
fn allocator_stats() -> Vec<(&'static str, u64)> {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The statistics are a snapshot taken at each epoch advance.
    if epoch::advance().is_err() {
        return Vec::new();
    }
    let read = |name: &'static str, value: tikv_jemalloc_ctl::Result<usize>| value.ok().map(|v| (name, v as u64));
    [
        read("allocator_allocated", stats::allocated::read()),
        read("allocator_active", stats::active::read()),
        read("allocator_resident", stats::resident::read()),
        read("allocator_mapped", stats::mapped::read()),
        read("allocator_retained", stats::retained::read()),
        read("allocator_metadata", stats::metadata::read()),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests {
    /// Zeroed allocations of every size read as zeros, also when they
    /// reuse blocks just freed with other bytes in them (the allocator
    /// writes the zeros of the large ones itself).
    #[test]
    fn zeroed_allocations_are_zeros_after_reuse() {
        for size in [8usize, 4 << 10, (16 << 10) - 1, 16 << 10, 1 << 20, 24 << 20] {
            for _ in 0..3 {
                let mut dirty = vec![0xA5u8; size];
                dirty[size / 2] = 1;
                drop(dirty);
                let zeroed = vec![0u8; size];
                assert!(zeroed.iter().all(|&b| b == 0), "a zeroed allocation of {size} bytes holds other bytes");
                let words = vec![0u32; size / 4 + 1];
                assert!(words.iter().all(|&w| w == 0), "{size}: vec![0u32; n]");
            }
        }
    }
}
