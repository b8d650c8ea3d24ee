//! Memory accounting: where a table's bytes go, by column and encoding.

use std::collections::BTreeMap;
use std::fmt;

use crate::database::Database;
use crate::main::EncodingKind;
use crate::shard::DeleteSet;
use crate::table::Table;

/// Bytes and rows stored with one encoding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncodingUsage {
    /// Shards whose main column uses the encoding.
    pub shards: usize,
    /// Main rows stored with it.
    pub rows: usize,
    /// Bytes of encoded values (dictionaries included).
    pub bytes: usize,
}

/// Memory of one column over all shards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnMemory {
    /// Column name.
    pub name: String,
    /// Encoded main values, dictionaries excluded.
    pub main_bytes: usize,
    /// Dictionary values of dictionary-encoded shards.
    pub dictionary_bytes: usize,
    /// Zone maps and distinct-value sketches (the main columns' statistics).
    pub zone_map_bytes: usize,
    /// Validity bitmaps of main storage.
    pub validity_bytes: usize,
    /// Delta chunks allocated.
    pub delta_bytes: usize,
    /// Per encoding: shards, rows and bytes (values and dictionaries).
    pub encodings: BTreeMap<EncodingKind, EncodingUsage>,
}

impl ColumnMemory {
    /// All bytes of the column.
    pub fn total_bytes(&self) -> usize {
        self.main_bytes + self.dictionary_bytes + self.zone_map_bytes + self.validity_bytes + self.delta_bytes
    }

    /// The encoding storing the most main rows, if any.
    pub fn dominant_encoding(&self) -> Option<EncodingKind> {
        self.encodings.iter().max_by_key(|(_, u)| u.rows).map(|(k, _)| *k)
    }
}

/// Memory of a table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// One entry per column, in schema order.
    pub columns: Vec<ColumnMemory>,
    /// Deletion bitmaps.
    pub delete_bytes: usize,
    /// The primary-key index: main indexes built so far and delta indexes.
    pub index_bytes: usize,
    /// Rows in main storage.
    pub main_rows: usize,
    /// Rows in deltas.
    pub delta_rows: usize,
}

impl MemoryUsage {
    /// Bytes of main storage (values, dictionaries, zone maps, validity).
    pub fn main_bytes(&self) -> usize {
        self.columns.iter().map(|c| c.main_bytes + c.dictionary_bytes + c.zone_map_bytes + c.validity_bytes).sum()
    }

    /// Bytes of delta chunks.
    pub fn delta_bytes(&self) -> usize {
        self.columns.iter().map(|c| c.delta_bytes).sum()
    }

    /// All bytes.
    pub fn total_bytes(&self) -> usize {
        self.main_bytes() + self.delta_bytes() + self.delete_bytes + self.index_bytes
    }
}

impl fmt::Display for MemoryUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<16} {:>12} {:>10} {:>10} {:>10} {:>12}  encodings",
            "column", "main", "dict", "zones", "validity", "delta"
        )?;
        for c in &self.columns {
            let encodings: Vec<String> = c.encodings.iter().map(|(k, u)| format!("{k}×{}", u.shards)).collect();
            writeln!(
                f,
                "{:<16} {:>12} {:>10} {:>10} {:>10} {:>12}  {}",
                c.name,
                c.main_bytes,
                c.dictionary_bytes,
                c.zone_map_bytes,
                c.validity_bytes,
                c.delta_bytes,
                encodings.join(" ")
            )?;
        }
        write!(
            f,
            "total {} bytes ({} main rows, {} delta rows, {} bytes of deletion bitmaps, {} of key index)",
            self.total_bytes(),
            self.main_rows,
            self.delta_rows,
            self.delete_bytes,
            self.index_bytes
        )
    }
}

impl Database {
    /// Bytes every table holds together: main storage, deltas, deletion
    /// bitmaps and key indexes ([`MemoryUsage::total_bytes`] summed).
    pub fn table_bytes(&self) -> usize {
        self.table_names().iter().filter_map(|t| self.table(t).ok()).map(|t| t.memory_usage().total_bytes()).sum()
    }
}

impl Table {
    /// Memory used by the table's current state, by column and encoding.
    pub fn memory_usage(&self) -> MemoryUsage {
        let snapshot = self.snapshot();
        let schema = snapshot.schema();
        let mut usage = MemoryUsage {
            columns: (0..schema.len())
                .map(|i| ColumnMemory { name: schema.field(i).name().clone(), ..Default::default() })
                .collect(),
            ..Default::default()
        };
        for shard in snapshot.shards() {
            usage.main_rows += shard.main().rows();
            usage.delta_rows += shard.delta_len();
            usage.delete_bytes += shard.deletes().map_or(0, DeleteSet::size_bytes);
            usage.index_bytes += shard.index_bytes();
            for (i, col) in usage.columns.iter_mut().enumerate() {
                col.delta_bytes += shard.delta().column(i).size_bytes();
                let Some(main) = shard.main().column(i) else { continue };
                let dict = main.dictionary_bytes();
                col.main_bytes += main.value_bytes() - dict;
                col.dictionary_bytes += dict;
                col.zone_map_bytes += main.zone_bytes();
                col.validity_bytes += main.validity_bytes();
                let e = col.encodings.entry(main.kind()).or_default();
                e.shards += 1;
                e.rows += main.len();
                e.bytes += main.value_bytes();
            }
        }
        usage.index_bytes += self.core().filter_bytes();
        usage
    }
}
