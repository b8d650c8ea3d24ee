//! The catalog file of a data directory: the last checkpoint's tables,
//! their shards, and the log position it covers.
//!
//! Written whole at every checkpoint (temp file, sync, rename, sync
//! directory); read once when the directory is opened.

use arrow_schema::SchemaRef;

use super::damage::Damage;
use super::record::{Reader, from_ipc, ipc, put_bytes, put_ids, put_options, put_str, put_u64};
use crate::error::Result;
use crate::state::TableOptions;

/// The catalog file's name in a data directory.
pub(super) const CATALOG: &str = "CATALOG";
const CATALOG_MAGIC: &[u8; 8] = b"QVCATLG\0";
/// The format this build writes: version 2 records column defaults and
/// views, version 3 schemas and UNIQUE constraints; versions 1 (no
/// defaults, no views) and 2 are still read.
const CATALOG_VERSION: u32 = 4;
/// Magic, version, body length, body CRC32C.
const CATALOG_HEADER: usize = 8 + 4 + 8 + 4;

/// The catalog file's contents.
#[derive(Debug, Default)]
pub(super) struct CatalogFile {
    pub(super) lsn: u64,
    pub(super) tables: Vec<TableEntry>,
    /// Views: name and definition text.
    pub(super) views: Vec<(String, String)>,
    /// Schemas besides the default one.
    pub(super) schemas: Vec<String>,
}

#[derive(Debug)]
pub(super) struct TableEntry {
    pub(super) name: String,
    pub(super) uid: u64,
    pub(super) schema: SchemaRef,
    pub(super) options: TableOptions,
    pub(super) next_shard_id: u64,
    pub(super) shards: Vec<ShardEntry>,
}

#[derive(Debug)]
pub(super) struct ShardEntry {
    pub(super) id: u64,
    pub(super) version: u64,
    pub(super) capacity: u64,
    /// Main rows, in the file [`shard_file`] names (none when 0).
    pub(super) main_rows: u64,
    /// Delta rows, in the file [`delta_file`] names (none when 0; catalog
    /// version 4 on).
    ///
    /// [`delta_file`]: super::store
    pub(super) delta_rows: u64,
    /// The delta rows as one Arrow IPC stream, as versions 1 to 3 kept them
    /// in the catalog itself; empty when there are none.
    pub(super) inline_delta: Vec<u8>,
    pub(super) deleted: Vec<u32>,
}

/// ```text
///   "QVCATLG\0" | version u32 | body length u64 | body CRC32C u32 | body
///   body: lsn u64, tables u64, per table:
///         name, uid u64, schema (IPC), options, next shard id u64, shards u64,
///         per shard: id, version, capacity, main rows, delta rows (u64 each),
///                    deleted ids
///         (versions 1 to 3: the delta rows themselves, an IPC stream, in
///         place of their count; version 4 writes them to their own file)
///         views u64, per view: name, definition          (version 2)
///         schemas u64, per schema: name                   (version 3)
///   options: shard capacity, dead fraction, background flag, key columns,
///            column defaults (version 2), UNIQUE column lists (version 3)
/// ```
pub(super) fn encode_catalog(catalog: &CatalogFile) -> Result<Vec<u8>> {
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
            debug_assert!(s.inline_delta.is_empty(), "version 4 keeps delta rows in their own files");
            for v in [s.id, s.version, s.capacity, s.main_rows, s.delta_rows] {
                put_u64(&mut body, v);
            }
            put_ids(&mut body, &s.deleted);
        }
    }
    put_u64(&mut body, catalog.views.len() as u64);
    for (name, definition) in &catalog.views {
        put_str(&mut body, name);
        put_str(&mut body, definition);
    }
    put_u64(&mut body, catalog.schemas.len() as u64);
    for name in &catalog.schemas {
        put_str(&mut body, name);
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
pub(super) fn decode_catalog(bytes: &[u8]) -> std::result::Result<CatalogFile, Damage> {
    read_catalog(bytes).map_err(|(offset, what)| Damage { offset, what })
}

fn read_catalog(bytes: &[u8]) -> std::result::Result<CatalogFile, (u64, String)> {
    if bytes.len() < CATALOG_HEADER || &bytes[..8] != CATALOG_MAGIC {
        return Err((0, "not a quiverdb catalog file".into()));
    }
    let u32_at = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let version = u32_at(8);
    if !(1..=CATALOG_VERSION).contains(&version) {
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
    let v2 = version >= 2;
    let lsn = r.u64().map_err(|e| at(&r, e))?;
    let mut catalog = CatalogFile { lsn, ..CatalogFile::default() };
    let tables = r.count(8).map_err(|e| at(&r, e))?;
    for _ in 0..tables {
        let entry = (|| {
            let name = r.str()?;
            let uid = r.u64()?;
            let (schema, _) = from_ipc(r.bytes()?)?;
            let options = r.options(u8::try_from(version).unwrap_or(u8::MAX))?;
            let next_shard_id = r.u64()?;
            let n = r.count(40)?;
            let mut shards = Vec::with_capacity(n);
            for _ in 0..n {
                let (id, shard_version, capacity, main_rows) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                let (delta_rows, inline_delta) =
                    if version >= 4 { (r.u64()?, Vec::new()) } else { (0, r.bytes()?.to_vec()) };
                let deleted = r.ids()?;
                shards.push(ShardEntry {
                    id,
                    version: shard_version,
                    capacity,
                    main_rows,
                    delta_rows,
                    inline_delta,
                    deleted,
                });
            }
            Ok::<_, String>(TableEntry { name, uid, schema, options, next_shard_id, shards })
        })()
        .map_err(|e| at(&r, e))?;
        catalog.tables.push(entry);
    }
    if v2 {
        let views = r.count(16).map_err(|e| at(&r, e))?;
        for _ in 0..views {
            let view = (|| Ok::<_, String>((r.str()?, r.str()?)))().map_err(|e| at(&r, e))?;
            catalog.views.push(view);
        }
    }
    if version >= 3 {
        let schemas = r.count(8).map_err(|e| at(&r, e))?;
        for _ in 0..schemas {
            catalog.schemas.push(r.str().map_err(|e| at(&r, e))?);
        }
    }
    if r.at != body.len() {
        return Err(at(&r, "unread bytes after the last table".into()));
    }
    Ok(catalog)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_views() -> CatalogFile {
        let views = vec![("v".to_string(), "CREATE VIEW v AS SELECT 1".to_string())];
        CatalogFile { lsn: 7, tables: Vec::new(), views, schemas: vec!["s".into(), "t".into()] }
    }

    /// A catalog file of format `version` around `body`.
    fn file(version: u32, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(CATALOG_MAGIC);
        out.extend_from_slice(&version.to_le_bytes());
        put_u64(&mut out, body.len() as u64);
        out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn views_and_schemas_round_trip_and_older_files_still_read() {
        let back = decode_catalog(&encode_catalog(&with_views()).unwrap()).unwrap();
        assert_eq!((back.lsn, back.views, back.schemas), (7, with_views().views, with_views().schemas));
        // An empty catalog as versions 1 (no views, no schemas) and 2 (no
        // schemas) wrote it: the same body without the trailing counts.
        let v3 = encode_catalog(&CatalogFile { lsn: 9, ..CatalogFile::default() }).unwrap();
        for (version, trailing) in [(1, 16), (2, 8)] {
            let old = decode_catalog(&file(version, &v3[CATALOG_HEADER..v3.len() - trailing])).unwrap();
            assert_eq!((old.lsn, old.tables.len(), old.views.len(), old.schemas.len()), (9, 0, 0, 0));
        }
    }

    #[test]
    fn version_3_delta_rows_inside_the_catalog_still_read() {
        let schema = std::sync::Arc::new(arrow_schema::Schema::empty());
        let shard = ShardEntry {
            id: 0,
            version: 1,
            capacity: 10,
            main_rows: 0,
            delta_rows: 0,
            inline_delta: Vec::new(),
            deleted: Vec::new(),
        };
        let table = TableEntry {
            name: "t".into(),
            uid: 1,
            schema: schema.clone(),
            options: TableOptions::default(),
            next_shard_id: 1,
            shards: vec![shard],
        };
        let v4 = encode_catalog(&CatalogFile { lsn: 3, tables: vec![table], ..CatalogFile::default() }).unwrap();
        // Version 3 kept an IPC stream where version 4 keeps the row count
        // (the last shard's, before its deleted ids, the view count and the
        // schema count).
        let body = &v4[CATALOG_HEADER..];
        let at = body.len() - 4 * 8;
        let inline = ipc(&schema, &[]).unwrap();
        let mut v3 = body[..at].to_vec();
        put_bytes(&mut v3, &inline);
        v3.extend_from_slice(&body[at + 8..]);
        let old = decode_catalog(&file(3, &v3)).unwrap();
        let shard = &old.tables[0].shards[0];
        assert_eq!((shard.delta_rows, &shard.inline_delta, shard.capacity), (0, &inline, 10));
        let new = decode_catalog(&v4).unwrap();
        assert!(new.tables[0].shards[0].inline_delta.is_empty());
    }

    #[test]
    fn damaged_catalogs_are_refused_with_an_offset() {
        let bytes = encode_catalog(&with_views()).unwrap();
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
