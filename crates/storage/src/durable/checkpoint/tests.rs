//! Checkpoint codec tests: round trips of every encoding of every type
//! (built by the real encoders and by rebuilds), and damaged files —
//! flipped bytes, truncations, damage behind valid checksums, crafted
//! structures — that must be rejected, or read faithfully, never panic.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Decimal128Array, Float64Array, Int8Array, Int16Array, Int32Array,
    Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};

use super::*;
use crate::main::EncodingKind;
use crate::{Database, Error, TableOptions};

fn schema_of(fields: Vec<Field>) -> TableSchema {
    TableSchema::try_new(&Schema::new(fields), &[]).unwrap()
}

/// Encodes `main`, decodes it, checks the two agree and that re-encoding
/// gives the same bytes; returns the bytes and the decoded main.
fn round_trip(main: &Main, schema: &TableSchema) -> (Vec<u8>, Main) {
    let bytes = encode_main(main);
    let back = decode_main(&bytes, schema).unwrap_or_else(|e| panic!("decode: {e}"));
    assert_eq!(back.rows(), main.rows());
    assert_eq!(back.columns().len(), main.columns().len());
    for (a, b) in main.columns().iter().zip(back.columns()) {
        assert_eq!(a.data_type(), b.data_type());
        assert_eq!(a.physical(), b.physical());
        assert_eq!(a.len(), b.len());
        assert_eq!(a.encoding().kind(), b.encoding().kind());
        assert_eq!(a.zones(), b.zones());
        assert_eq!(a.validity(), b.validity());
        assert_eq!(a.decode_range(0, a.len()).unwrap().to_data(), b.decode_range(0, b.len()).unwrap().to_data());
    }
    assert!(encode_main(&back) == bytes, "re-encoding a decoded checkpoint gives the same bytes");
    (bytes, back)
}

/// Reads every value of `main` every way storage can, so that a column a
/// decoder let through in a bad state panics here rather than in a scan.
fn exercise(main: &Main) {
    main.columns().iter().for_each(exercise_column);
}

/// [`exercise`] of one column and its children.
fn exercise_column(col: &MainColumn) {
    let mut buf = [0u64; BLOCK_SIZE];
    {
        let n = col.len();
        assert_eq!(col.decode_range(0, n).expect("decodes").len(), n);
        let ids: Vec<u32> = (0..n as u32).rev().collect();
        assert_eq!(col.gather(&ids).expect("gathers").len(), n);
        let range = col.key_range();
        match col.encoding() {
            Encoding::Keys(k) => {
                for b in 0..col.num_blocks() {
                    k.decode_block(b, &mut buf);
                }
                let _: u64 = (0..n).map(|r| k.get(r)).fold(0, u64::wrapping_add);
            }
            Encoding::StrDict(d) => {
                for b in 0..col.num_blocks() {
                    d.codes().decode_block(b, &mut buf);
                }
                let _: usize = (0..n).map(|r| d.get(r).len()).sum();
                if let Some((lo, hi)) = range {
                    let _ = (d.dict_value(lo as usize), d.dict_value(hi as usize));
                }
                let _ = d.lower_bound(b"m");
            }
            Encoding::StrPlain(p) => {
                for b in 0..col.num_blocks() {
                    p.offsets().decode_block(b, &mut buf);
                }
                let _: usize = (0..n).map(|r| p.get(r).len()).sum();
            }
            Encoding::StrFsst(f) => {
                for b in 0..col.num_blocks() {
                    f.offsets().decode_block(b, &mut buf);
                }
                let mut value = Vec::new();
                let _: usize = (0..n).map(|r| f.get(r, &mut value).len()).sum();
            }
            Encoding::Wide(_) => {}
            Encoding::Nested(_) => col.children().into_iter().for_each(exercise_column),
        }
    }
}

/// Every Arrow type quiverdb stores.
fn all_types() -> Vec<DataType> {
    vec![
        DataType::Boolean,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Date32,
        DataType::Int64,
        DataType::Timestamp(TimeUnit::Millisecond, None),
        DataType::UInt8,
        DataType::UInt16,
        DataType::UInt32,
        DataType::UInt64,
        DataType::Float32,
        DataType::Float64,
        DataType::Decimal128(18, 2),
        DataType::Utf8,
        DataType::LargeUtf8,
        DataType::Utf8View,
        DataType::Binary,
        DataType::LargeBinary,
        DataType::BinaryView,
    ]
}

/// Value shapes that between them admit every encoding: (name, values).
fn shapes() -> Vec<(&'static str, Vec<Option<i64>>)> {
    let n = 5000i64;
    vec![
        ("mixed", (0..n).map(|i| (i % 9 != 4).then_some(i * 7919 % 120)).collect()),
        ("constant", (0..n).map(|i| (i % 5 != 0).then_some(42)).collect()),
        ("sorted", (0..n).map(|i| Some(i % 120)).collect()),
        ("runs", (0..n).map(|i| (i % 1000 != 999).then_some(i / 700)).collect()),
        ("one block", (0..BLOCK_SIZE as i64).map(|i| Some(i % 3)).collect()),
        ("three rows", vec![Some(7), None, Some(1)]),
        ("all null", vec![None; 1500]),
    ]
}

/// `values` as an array of `data_type` (strings and binary hold the
/// numbers' digits).
fn array_of(data_type: &DataType, values: &[Option<i64>]) -> ArrayRef {
    let ints: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
    let source = match PhysicalType::of(data_type) {
        _ if *data_type == DataType::Date32 => arrow_cast::cast(&ints, &DataType::Int32).unwrap(),
        Some(PhysicalType::Bytes) => arrow_cast::cast(&ints, &DataType::Utf8).unwrap(),
        _ => ints,
    };
    let array = arrow_cast::cast(&source, data_type).unwrap();
    assert_eq!(array.null_count(), values.iter().filter(|v| v.is_none()).count(), "{data_type}: cast kept every value");
    array
}

/// Decimals beyond the i64 range, which only the wide encoding stores.
fn wide_decimals() -> ArrayRef {
    let values = (0..3000i128).map(|i| (i % 7 != 3).then_some((i - 1500) * (i128::MAX / 5000)));
    Arc::new(Decimal128Array::from_iter(values).with_precision_and_scale(38, 0).unwrap())
}

/// Every encoding `array` admits (the chooser's pick and every forced
/// kind), each round-tripped alone and compared with `array`.
fn round_trip_encodings(array: &ArrayRef, seen: &mut HashSet<(PhysicalType, EncodingKind)>) {
    let schema = schema_of(vec![Field::new("c", array.data_type().clone(), true)]);
    for force in std::iter::once(None).chain(EncodingKind::ALL.map(Some)) {
        let col = match MainColumn::from_array_with(array.as_ref(), force) {
            Ok(col) => col,
            Err(Error::InvalidOption { .. }) => continue,
            Err(e) => panic!("{e}"),
        };
        seen.insert((col.physical(), col.encoding().kind()));
        let sketch = col.distinct_sketch().cloned();
        let main = Main::new(array.len(), vec![col]);
        let (_, back) = round_trip(&main, &schema);
        let decoded = back.columns()[0].decode_range(0, array.len()).unwrap();
        assert_eq!(decoded.to_data(), array.to_data(), "{} forced {force:?}", array.data_type());
        // A column read back has the distinct-value sketch it was written with.
        assert_eq!(back.columns()[0].distinct_sketch(), sketch.as_ref(), "{} forced {force:?}", array.data_type());
        exercise(&back);
    }
}

#[test]
fn every_encoding_of_every_type_round_trips() {
    let mut seen = HashSet::new();
    for data_type in all_types() {
        for (_, values) in shapes() {
            round_trip_encodings(&array_of(&data_type, &values), &mut seen);
        }
    }
    round_trip_encodings(&wide_decimals(), &mut seen);
    let physical: HashSet<PhysicalType> = all_types().iter().filter_map(PhysicalType::of).collect();
    // Every encoding but FSST applies to fixed-width values.
    let fixed: Vec<EncodingKind> = EncodingKind::ALL.into_iter().filter(|&k| k != EncodingKind::Fsst).collect();
    for p in physical {
        let kinds: &[EncodingKind] = if p == PhysicalType::Bytes {
            &[EncodingKind::Dictionary, EncodingKind::Plain, EncodingKind::Fsst]
        } else {
            &fixed
        };
        for &kind in kinds {
            assert!(seen.contains(&(p, kind)), "{p:?} never took {kind}");
        }
    }
}

#[test]
fn long_strings_round_trip() {
    let values: Vec<Option<String>> = (0..3000usize)
        .map(|i| match i % 11 {
            0 => None,
            1 => Some("日本語のテキスト é".repeat(i % 400)),
            _ => Some(format!("{i:05}").repeat(i % 700)),
        })
        .chain([Some("x".repeat(100_000)), Some(String::new())])
        .collect();
    let mut seen = HashSet::new();
    let strings: ArrayRef = Arc::new(StringArray::from(values));
    for data_type in [DataType::Utf8, DataType::LargeUtf8, DataType::Utf8View, DataType::Binary, DataType::BinaryView] {
        round_trip_encodings(&arrow_cast::cast(&strings, &data_type).unwrap(), &mut seen);
    }
    assert!(seen.contains(&(PhysicalType::Bytes, EncodingKind::Dictionary)));
    assert!(seen.contains(&(PhysicalType::Bytes, EncodingKind::Plain)));
    assert!(seen.contains(&(PhysicalType::Bytes, EncodingKind::Fsst)));
}

#[test]
fn tables_rebuilt_by_the_database_round_trip() {
    let fields = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("note", DataType::Utf8View, true),
        Field::new("price", DataType::Decimal128(12, 2), true),
        Field::new("flag", DataType::Boolean, false),
        Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("score", DataType::Float64, true),
        Field::new("step", DataType::Int16, false),
        Field::new("blob", DataType::Binary, true),
    ];
    let arrow = Arc::new(Schema::new(fields.clone()));
    let n = 10_000usize;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(0..n as i64)),
        Arc::new(StringArray::from_iter((0..n).map(|i| (i % 13 != 0).then(|| format!("name {}", i % 10))))),
        Arc::new(
            arrow_cast::cast(
                &StringArray::from_iter_values((0..n).map(|i| format!("note number {i} of many"))),
                &DataType::Utf8View,
            )
            .unwrap(),
        ),
        Arc::new(
            Decimal128Array::from_iter((0..n as i128).map(|i| (i % 17 != 0).then_some(i * 7919 % 100_000)))
                .with_precision_and_scale(12, 2)
                .unwrap(),
        ),
        Arc::new(BooleanArray::from(vec![true; n])),
        Arc::new(TimestampMicrosecondArray::from_iter(
            (0..n as i64).map(|i| Some(1_700_000_000_000_000 + i / 1000 * 1_000_000)),
        )),
        Arc::new(Float64Array::from_iter((0..n).map(|i| (i % 3 != 0).then_some((i as f64 * 0.37).sin())))),
        Arc::new(Int16Array::from_iter_values((0..n).map(|i| [3i16, -9, 27, 1000][i % 4]))),
        // Bytes that do not compress: they stay plain.
        Arc::new(BinaryArray::from_iter((0..n).map(|i| {
            (i % 5 != 0).then(|| {
                (0..i % 40)
                    .map(|j| {
                        let (i, j) = (i as u64, j as u64);
                        ((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ j.wrapping_mul(0xBF58_476D_1CE4_E5B9))
                            .wrapping_mul(0x94D0_49BB_1331_11EB)
                            >> 56) as u8
                    })
                    .collect::<Vec<u8>>()
            })
        }))),
    ];
    let batch = RecordBatch::try_new(arrow.clone(), columns).unwrap();
    let db = Database::new();
    let options = TableOptions::default().with_shard_capacity(4096).with_background_rebuild(false);
    let table = db.create_table("t", &arrow, options.clone()).unwrap();
    table.append(&batch).unwrap();
    table.rebuild().unwrap();
    let snapshot = table.snapshot();
    assert_eq!(snapshot.num_shards(), 3);
    let mut kinds = HashSet::new();
    for shard in snapshot.shards() {
        assert!(shard.main().rows() > 0, "rebuilt into main storage");
        let (_, back) = round_trip(shard.main(), table.schema());
        exercise(&back);
        kinds.extend(back.columns().iter().map(|c| c.encoding().kind()));
    }
    assert_eq!(kinds, EncodingKind::ALL.into_iter().collect(), "the rebuild used every encoding");

    // Shards that were never rebuilt have empty main storage.
    let fresh = db.create_table("fresh", &arrow, options).unwrap();
    fresh.append(&batch.slice(0, 10)).unwrap();
    let snapshot = fresh.snapshot();
    let (bytes, back) = round_trip(snapshot.shard(0).main(), fresh.schema());
    assert_eq!((bytes.len(), back.rows(), back.columns().len()), (HEADER_LEN, 0, 0));
}

#[test]
fn empty_mains_round_trip() {
    let schema = schema_of(vec![Field::new("a", DataType::Int64, true), Field::new("s", DataType::Utf8, true)]);
    let (bytes, back) = round_trip(&Main::empty(2), &schema);
    assert_eq!((bytes.len(), back.rows(), back.columns().len()), (HEADER_LEN, 0, 0));
    // A main of zero rows that still has (empty) columns.
    let columns = vec![
        MainColumn::from_array(&Int64Array::from(Vec::<i64>::new())).unwrap(),
        MainColumn::from_array(&StringArray::from(Vec::<String>::new())).unwrap(),
    ];
    let (_, back) = round_trip(&Main::new(0, columns), &schema);
    assert_eq!(back.columns().len(), 2);
    exercise(&back);
}

/// A main with one column of every encoding, `rows` rows each, and its schema.
fn sample(rows: usize) -> (Main, TableSchema) {
    let n = rows as i64;
    let columns: Vec<(&str, ArrayRef, Option<EncodingKind>)> = vec![
        ("seq", Arc::new(Int64Array::from_iter_values(0..n)), Some(EncodingKind::Sequence)),
        (
            "packed",
            Arc::new(Int32Array::from_iter((0..n as i32).map(|i| (i % 9 != 4).then_some(i * 7919 % 1000)))),
            Some(EncodingKind::BitPacked),
        ),
        ("runs", Arc::new(Int16Array::from_iter_values((0..n as i16).map(|i| i / 7))), Some(EncodingKind::RunEnd)),
        (
            "dict",
            Arc::new(UInt64Array::from_iter_values((0..rows).map(|i| [5, 1 << 40, 77][i % 3]))),
            Some(EncodingKind::Dictionary),
        ),
        (
            "plain",
            Arc::new(Float64Array::from_iter((0..n).map(|i| (i % 6 != 1).then_some(i as f64 * 1.5)))),
            Some(EncodingKind::Plain),
        ),
        (
            "const",
            Arc::new(Int8Array::from_iter((0..n).map(|i| (i % 4 != 0).then_some(3)))),
            Some(EncodingKind::Constant),
        ),
        (
            "wide",
            Arc::new(
                Decimal128Array::from_iter_values((0..n as i128).map(|i| i * (i128::MAX / 10_000)))
                    .with_precision_and_scale(38, 0)
                    .unwrap(),
            ),
            None,
        ),
        (
            "names",
            Arc::new(StringArray::from_iter((0..rows).map(|i| (i % 6 != 2).then(|| format!("name {}", i % 5))))),
            Some(EncodingKind::Dictionary),
        ),
        (
            "blob",
            Arc::new(BinaryArray::from_iter_values((0..rows).map(|i| vec![i as u8; i % 13]))),
            Some(EncodingKind::Plain),
        ),
        (
            "text",
            Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("é{i}")))),
            Some(EncodingKind::Plain),
        ),
    ];
    let schema = schema_of(columns.iter().map(|(name, a, _)| Field::new(*name, a.data_type().clone(), true)).collect());
    let main = Main::new(
        rows,
        columns.iter().map(|(_, a, force)| MainColumn::from_array_with(a.as_ref(), *force).unwrap()).collect(),
    );
    assert_eq!(main.column(6).unwrap().encoding().kind(), EncodingKind::Plain, "wide decimals");
    (main, schema)
}

/// Recomputes the header's and every column's checksum of a (damaged) file
/// wherever its lengths still allow, so the damage reaches the checks behind.
fn fix_checksums(bytes: &mut [u8]) {
    if bytes.len() < HEADER_LEN {
        return;
    }
    let crc = crc32c::crc32c(&bytes[..HEADER_LEN - 4]);
    bytes[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    let mut at = HEADER_LEN;
    while at + COLUMN_PREFIX <= bytes.len() {
        let len = u64::from_le_bytes(le(bytes, at));
        let start = at + COLUMN_PREFIX;
        let Some(end) = usize::try_from(len).ok().and_then(|l| start.checked_add(l)).filter(|&e| e <= bytes.len())
        else {
            return;
        };
        let crc = crc32c::crc32c(&bytes[start..end]);
        bytes[at + 8..start].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}

#[test]
fn every_flipped_byte_is_rejected() {
    let (main, schema) = sample(24);
    let bytes = round_trip(&main, &schema).0;
    for at in 0..bytes.len() {
        let masks: &[u8] = if at % 5 == 0 { &[0x01, 0x80, 0xFF] } else { &[0x01] };
        for mask in masks {
            let mut damaged = bytes.clone();
            damaged[at] ^= mask;
            assert!(decode_main(&damaged, &schema).is_err(), "byte {at} ^ {mask:#x} went unnoticed");
        }
    }
    let (main, schema) = sample(5000);
    let bytes = round_trip(&main, &schema).0;
    for at in (0..bytes.len()).step_by(499) {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x10;
        assert!(decode_main(&damaged, &schema).is_err(), "byte {at} of {} went unnoticed", bytes.len());
    }
}

#[test]
fn every_truncation_is_rejected() {
    let (main, schema) = sample(24);
    let bytes = encode_main(&main);
    for len in 0..bytes.len() {
        assert!(decode_main(&bytes[..len], &schema).is_err(), "a file cut to {len} bytes was read");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    let e = decode_main(&longer, &schema).unwrap_err();
    assert_eq!((e.offset, e.what.as_str()), (bytes.len() as u64, "1 bytes after the last column"));
}

#[test]
fn damage_behind_valid_checksums_is_rejected_or_read_faithfully() {
    let (main, schema) = sample(24);
    let bytes = encode_main(&main);
    let (mut rejected, mut read) = (0, 0);
    for at in 0..bytes.len() {
        for damage in [|b: u8| b ^ 0x01, |b: u8| b ^ 0x80, |b: u8| b.wrapping_add(1), |_| 0xFF] {
            let mut damaged = bytes.clone();
            damaged[at] = damage(damaged[at]);
            if damaged == bytes {
                continue;
            }
            fix_checksums(&mut damaged);
            match decode_main(&damaged, &schema) {
                Err(_) => rejected += 1,
                Ok(back) => {
                    // Accepted: only possible for values no check can tell
                    // from others; the result must be sound and faithful.
                    exercise(&back);
                    assert!(encode_main(&back) == damaged, "byte {at}: decoding was not faithful");
                    read += 1;
                }
            }
        }
    }
    // Most damage hits structure, counts, frames and zones; what is read
    // is damage to values no check can tell from others (plain floats,
    // string bytes, wide decimals).
    assert!(rejected > 2 * read, "{rejected} rejected, {read} read");
}

#[test]
fn errors_say_where_and_what() {
    let (main, schema) = sample(24);
    let bytes = encode_main(&main);
    for junk in [&b""[..], b"QVMAIN", b"PAR1 and more bytes than a header"] {
        let e = decode_main(junk, &schema).unwrap_err();
        assert_eq!((e.offset, e.what.as_str()), (0, "not a quiverdb checkpoint file"));
    }
    let mut future = bytes.clone();
    future[8..12].copy_from_slice(&2u32.to_le_bytes());
    let e = decode_main(&future, &schema).unwrap_err();
    assert_eq!(e.to_string(), "at byte 8: unsupported checkpoint format version 2 (this build reads version 1)");

    let mut damaged = bytes.clone();
    damaged[13] ^= 1;
    assert_eq!(decode_main(&damaged, &schema).unwrap_err().to_string(), "at byte 0: header checksum mismatch");

    // Damage in the second column names it and points at its bytes.
    let first = u64::from_le_bytes(le(&bytes, HEADER_LEN)) as usize;
    let second = HEADER_LEN + COLUMN_PREFIX + first + COLUMN_PREFIX;
    let mut damaged = bytes.clone();
    damaged[second + 3] ^= 0x40;
    let e = decode_main(&damaged, &schema).unwrap_err();
    assert_eq!((e.offset, e.what.as_str()), (second as u64, "checksum mismatch in column 'packed'"));

    let narrow = schema_of(vec![Field::new("seq", DataType::Int64, true)]);
    let e = decode_main(&bytes, &narrow).unwrap_err();
    assert_eq!(e.to_string(), "at byte 20: the checkpoint has 10 columns, the table 1");

    let mut fields: Vec<Field> = schema.arrow().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[0] = Field::new("seq", DataType::Utf8, true);
    let e = decode_main(&bytes, &schema_of(fields)).unwrap_err();
    assert_eq!(e.offset, (HEADER_LEN + COLUMN_PREFIX) as u64);
    assert_eq!(e.what, "column 'seq': stored as Int64, but the table declares Utf8 (Bytes)");

    let e = decode_main(&bytes[..HEADER_LEN + 30], &schema).unwrap_err();
    assert!(e.what.starts_with("column 'seq': truncated"), "{e}");
}

#[test]
fn physical_tags_are_stable() {
    for (tag, &physical) in PHYSICAL_TAGS.iter().enumerate() {
        assert_eq!(physical_tag(physical) as usize, tag);
    }
}

// ------------------------------------------------------ crafted columns

/// A file of one column named "c" of `rows` rows whose body holds
/// `physical`, `rows`, no validity unless `validity`, `zones`, `encoding`.
fn crafted(physical: PhysicalType, rows: usize, validity: Option<&[u8]>, zones: &[Zone], encoding: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    put_u32(&mut out, VERSION);
    put_u64(&mut out, rows as u64);
    put_u32(&mut out, 1);
    let crc = crc32c::crc32c(&out);
    put_u32(&mut out, crc);
    put_framed(&mut out, |out| {
        out.push(physical_tag(physical));
        put_u64(out, rows as u64);
        match validity {
            None => out.push(0),
            Some(bits) => {
                out.push(1);
                out.extend_from_slice(bits);
            }
        }
        put_u64(out, zones.len() as u64);
        put_array(out, zones, zone_to_le);
        out.extend_from_slice(encoding);
    });
    out
}

/// Decodes a crafted file as a table of one column "c" of `data_type` and
/// returns the error's reason.
fn rejection(data_type: DataType, file: &[u8]) -> String {
    let schema = schema_of(vec![Field::new("c", data_type, true)]);
    match decode_main(file, &schema) {
        Ok(main) => panic!("a crafted column was read: {:?}", main.column(0)),
        Err(e) => e.what,
    }
}

fn zone(min: u64, max: u64) -> Zone {
    Zone { min, max, null_count: 0 }
}

fn encoding(tag: u8, fill: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = vec![tag];
    fill(&mut out);
    out
}

fn packed_parts(out: &mut Vec<u8>, len: usize, frames: &[Frame], words: &[u64]) {
    put_u64(out, len as u64);
    put_u64(out, frames.len() as u64);
    put_array(out, frames, frame_to_le);
    put_u64(out, words.len() as u64);
    put_array(out, words, u64::to_le_bytes);
}

fn assert_reason(reason: &str, expected: &str) {
    assert!(reason.starts_with("column 'c': ") && reason.contains(expected), "{reason:?} lacks {expected:?}");
}

#[test]
fn crafted_structures_are_rejected() {
    use PhysicalType as P;
    let u64s = |v: &[u64]| {
        encoding(TAG_PLAIN, |o| {
            put_u64(o, v.len() as u64);
            put_array(o, v, u64::to_le_bytes);
        })
    };
    let int64 = DataType::Int64;
    let three = [zone(0, 2)];

    // Counts that disagree with the rows.
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 2000, None, &three, &u64s(&[0; 2000]))),
        "1 zones, expected 2",
    );
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 3, None, &three, &u64s(&[0; 4]))),
        "4 plain keys, expected 3",
    );
    let mut body = crafted(P::Int64, 3, None, &three, &u64s(&[0, 1, 2]));
    body[HEADER_LEN + COLUMN_PREFIX + 1] = 4;
    fix_checksums(&mut body);
    assert_reason(&rejection(int64.clone(), &body), "4 rows, expected 3");

    // Encodings that do not apply to the type, unknown tags.
    let wide = encoding(TAG_WIDE, |o| {
        put_u64(o, 3);
        put_array(o, &[0i128; 3], i128::to_le_bytes);
    });
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 3, None, &three, &wide)),
        "tag 6 does not apply to Int64",
    );
    assert_reason(
        &rejection(DataType::Utf8, &crafted(P::Bytes, 3, None, &three, &u64s(&[0; 3]))),
        "tag 5 does not apply to Utf8",
    );
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 3, None, &three, &[9])),
        "tag 9 does not apply to Int64",
    );
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 3, None, &three, &[12])),
        "tag 12 does not apply to Int64",
    );
    assert_reason(&rejection(int64.clone(), &crafted(P::Int64, 3, None, &three, &[13])), "unknown encoding tag 13");

    // Nested columns: children that disagree with the schema or each other.
    let ints = |v: Vec<i64>| MainColumn::from_array(&Int64Array::from(v)).unwrap();
    let list_type = DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true)));
    let list = |offsets: Vec<i64>, values: Vec<i64>| {
        encoding(TAG_LIST, |o| {
            put_column(o, &ints(offsets));
            put_u64(o, values.len() as u64);
            put_column(o, &ints(values));
        })
    };
    let nested_zone = [crate::main::nested::zone(2, 0)];
    let reject_list = |offsets: Vec<i64>, values: Vec<i64>| {
        rejection(list_type.clone(), &crafted(P::Bytes, 2, None, &nested_zone, &list(offsets, values)))
    };
    assert_reason(&reject_list(vec![0, 3, 1], vec![1, 2, 3]), "list offsets do not ascend");
    assert_reason(&reject_list(vec![1, 2, 3], vec![1, 2, 3]), "list offsets do not ascend");
    assert_reason(&reject_list(vec![0, 1, 2], vec![1, 2, 3]), "from 0 to the 3 values");
    assert_reason(&reject_list(vec![0, 1], vec![1]), "child 'offsets': 2 rows, expected 3");
    let good = list(vec![0, 1, 3], vec![1, 2, 3]);
    let schema = schema_of(vec![Field::new("c", list_type.clone(), true)]);
    let read = decode_main(&crafted(P::Bytes, 2, None, &nested_zone, &good), &schema).unwrap();
    assert_eq!(read.column(0).unwrap().decode_range(0, 2).unwrap().as_list::<i32>().value(1).len(), 2);
    assert_reason(&rejection(list_type.clone(), &crafted(P::Bytes, 2, None, &[zone(0, 2)], &good)), "zone of block 0");
    let pair =
        DataType::Struct(vec![Field::new("a", DataType::Int64, true), Field::new("b", DataType::Int64, true)].into());
    let one_field = encoding(TAG_STRUCT, |o| {
        put_u64(o, 1);
        put_column(o, &ints(vec![1, 2]));
    });
    assert_reason(
        &rejection(pair, &crafted(P::Bytes, 2, None, &nested_zone, &one_field)),
        "1 struct fields, expected 2",
    );
    let triples = encoding(TAG_FIXED_LIST, |o| {
        put_u64(o, 3);
        put_column(o, &ints(vec![0; 6]));
    });
    let pairs = DataType::FixedSizeList(Arc::new(Field::new_list_field(DataType::Int64, true)), 2);
    assert_reason(&rejection(pairs, &crafted(P::Bytes, 2, None, &nested_zone, &triples)), "lists of 3 values");
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 2, None, &nested_zone, &one_field)),
        "tag 9 does not apply to Int64",
    );

    // Bit-packing: frame count, width, words, delta sum, padding, wrap.
    let real = BitPacked::encode(&(0..1024).collect::<Vec<u64>>());
    let f = real.frames()[0];
    let bp =
        |len: usize, frames: &[Frame], words: &[u64]| encoding(TAG_BITPACKED, |o| packed_parts(o, len, frames, words));
    let reject_bp = |len: usize, zones: &[Zone], frames: &[Frame], words: &[u64]| {
        rejection(int64.clone(), &crafted(P::Int64, len, None, zones, &bp(len, frames, words)))
    };
    assert_reason(&reject_bp(2000, &[zone(0, 0); 2], &[f], real.words()), "1 frames, expected 2");
    assert_reason(&reject_bp(10, &[zone(0, 9)], &[Frame { width: 65, ..f }], &[0; 16 * 65]), "width 65");
    assert_reason(
        &reject_bp(10, &[zone(0, 9)], &[Frame { offset: 1, ..f }], real.words()),
        "does not fit the 160 packed words",
    );
    assert_reason(&reject_bp(1024, &[zone(0, 1023)], &[Frame { delta_sum: 1, ..f }], real.words()), "delta sum of 1");
    assert_reason(&reject_bp(10, &[zone(0, 9)], &[f], real.words()), "padding of block 0");
    let two = BitPacked::encode(&[0, 1]);
    let top = Frame { reference: u64::MAX, ..two.frames()[0] };
    assert_reason(&reject_bp(2, &[zone(0, 1)], &[top], two.words()), "wrap past u64::MAX");

    // Dictionaries: sorted values, codes within them.
    let dict = |values: &[u64], codes: &[u64]| {
        encoding(TAG_DICT, |o| {
            put_u64(o, values.len() as u64);
            put_array(o, values, u64::to_le_bytes);
            put_packed(o, &BitPacked::encode(codes));
        })
    };
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 3, None, &three, &dict(&[10, 20, 30], &[0, 1, 3]))),
        "code 3, the dictionary 3 values",
    );
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 3, None, &three, &dict(&[10, 10, 30], &[0, 1, 2]))),
        "value 1 is not above",
    );

    // Runs and sequences.
    let runs = |ends: &[u32]| {
        encoding(TAG_RUN_END, |o| {
            put_u64(o, ends.len() as u64);
            put_array(o, ends, u32::to_le_bytes);
            put_array(o, &vec![7u64; ends.len()], u64::to_le_bytes);
        })
    };
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 5, None, &three, &runs(&[5, 3]))),
        "run 1 ends at row 3, not after 5",
    );
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 5, None, &three, &runs(&[3]))),
        "the runs end at row 3, not 5",
    );
    let seq = |starts: &[u32]| {
        encoding(TAG_SEQUENCE, |o| {
            put_u64(o, 5);
            put_u64(o, starts.len() as u64);
            let runs: Vec<SeqRun> = starts.iter().map(|&start| SeqRun { start, base: 1, step: 1 }).collect();
            put_array(o, &runs, run_to_le);
        })
    };
    for (starts, expected) in [
        (&[1u32][..], "run 0 starts at row 1"),
        (&[0, 2, 2], "run 2 starts at row 2"),
        (&[0, 7], "run 1 starts at row 7"),
        (&[], "0 sequence runs for 5 rows"),
    ] {
        assert_reason(&rejection(int64.clone(), &crafted(P::Int64, 5, None, &three, &seq(starts))), expected);
    }

    // Keys outside their type, zones that disagree with the values.
    assert_reason(
        &rejection(DataType::Int8, &crafted(P::Int8, 3, None, &three, &u64s(&[0, 1, 2]))),
        "outside the Int8 keys",
    );
    assert_reason(
        &rejection(DataType::Boolean, &crafted(P::Boolean, 3, None, &three, &u64s(&[0, 1, 2]))),
        "outside the Boolean keys",
    );
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 3, None, &[zone(0, 3)], &u64s(&[0, 1, 2]))),
        "zone of block 0",
    );

    // Validity.
    let plain = u64s(&[0, 1, 2]);
    assert_reason(&rejection(int64.clone(), &crafted(P::Int64, 3, Some(&[0b111]), &three, &plain)), "without nulls");
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 3, Some(&[0b1011]), &three, &plain)),
        "past the last row",
    );
    let mut flagged = crafted(P::Int64, 3, None, &three, &plain);
    flagged[HEADER_LEN + COLUMN_PREFIX + 9] = 2;
    fix_checksums(&mut flagged);
    assert_reason(&rejection(int64.clone(), &flagged), "validity flag 2");
    assert_reason(&rejection(int64.clone(), &crafted(P::Int64, 3, Some(&[0b101]), &three, &plain)), "zone of block 0");

    // A block with nulls: its zone is exact, or holds every slot (row 1 is
    // null and holds key 9).
    let holey = u64s(&[0, 9, 2]);
    let one_null = |min, max| crafted(P::Int64, 3, Some(&[0b101]), &[Zone { min, max, null_count: 1 }], &holey);
    let int64_schema = schema_of(vec![Field::new("c", int64.clone(), true)]);
    assert!(decode_main(&one_null(0, 2), &int64_schema).is_ok());
    assert!(decode_main(&one_null(0, 9), &int64_schema).is_ok());
    assert_reason(&rejection(int64.clone(), &one_null(1, 2)), "zone of block 0");
    assert_reason(&rejection(int64.clone(), &one_null(0, 5)), "zone of block 0");

    // Zones of runs and constants are derived without decoding.
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 5, None, &[zone(7, 8)], &runs(&[2, 5]))),
        "zone of block 0",
    );
    assert!(decode_main(&crafted(P::Int64, 5, None, &[zone(7, 7)], &runs(&[2, 5])), &int64_schema).is_ok());
    let constant = encoding(TAG_CONSTANT, |o| {
        put_u64(o, 4);
        put_u64(o, 3);
    });
    assert!(decode_main(&crafted(P::Int64, 3, None, &[zone(4, 4)], &constant), &int64_schema).is_ok());
    assert_reason(&rejection(int64.clone(), &crafted(P::Int64, 3, None, &[zone(4, 5)], &constant)), "zone of block 0");
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 3, Some(&[0]), &[zone(4, 4)], &constant)),
        "zone of block 0",
    );
    let constant_rows = encoding(TAG_CONSTANT, |o| {
        put_u64(o, 4);
        put_u64(o, 2);
    });
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 3, None, &[zone(4, 4)], &constant_rows)),
        "2 constant rows, expected 3",
    );

    // Bytes after the encoding, a physical type this build does not know,
    // more rows than a shard holds.
    let mut longer = plain.clone();
    longer.push(0);
    assert_reason(
        &rejection(int64.clone(), &crafted(P::Int64, 3, None, &three, &longer)),
        "1 bytes after the encoding",
    );
    let mut unknown = crafted(P::Int64, 3, None, &three, &plain);
    unknown[HEADER_LEN + COLUMN_PREFIX] = PHYSICAL_TAGS.len() as u8;
    fix_checksums(&mut unknown);
    assert_reason(&rejection(int64.clone(), &unknown), "unknown physical type tag 13");
    let mut huge = crafted(P::Int64, 3, None, &three, &plain);
    huge[12..20].copy_from_slice(&(1u64 << 40).to_le_bytes());
    fix_checksums(&mut huge);
    let e = decode_main(&huge, &int64_schema).unwrap_err();
    assert_eq!(e.to_string(), "at byte 12: 1099511627776 rows exceed a shard's capacity of 2147483648");
}

#[test]
fn sequences_that_wrap_round_trip() {
    // Runs whose keys wrap around u64 have their zones checked by decoding.
    let values = [u64::MAX - 1, u64::MAX, 0, 1, 2, 7, 5, 3, 1];
    let array: ArrayRef = Arc::new(UInt64Array::from_iter_values(values));
    let col = MainColumn::from_array_with(array.as_ref(), Some(EncodingKind::Sequence)).unwrap();
    let Encoding::Keys(KeyEncoding::Sequence(s)) = col.encoding() else { panic!("a sequence") };
    assert_eq!(s.runs().len(), 2);
    assert_eq!(col.zones()[0], zone(0, u64::MAX));
    let schema = schema_of(vec![Field::new("c", DataType::UInt64, false)]);
    let (_, back) = round_trip(&Main::new(values.len(), vec![col]), &schema);
    assert_eq!(back.columns()[0].decode_range(0, values.len()).unwrap().to_data(), array.to_data());
}

#[test]
fn crafted_strings_are_rejected() {
    use PhysicalType as P;
    let str_dict = |offsets: &[u32], bytes: &[u8], codes: &[u64]| {
        encoding(TAG_STR_DICT, |o| {
            put_u64(o, offsets.len() as u64);
            put_array(o, offsets, u32::to_le_bytes);
            put_u64(o, bytes.len() as u64);
            o.extend_from_slice(bytes);
            put_packed(o, &BitPacked::encode(codes));
        })
    };
    let zones = [zone(0, 1)];
    let reject = |enc: &[u8]| rejection(DataType::Utf8, &crafted(P::Bytes, 2, None, &zones, enc));
    assert_reason(&reject(&str_dict(&[0, 5], b"abc", &[0, 0])), "offset 1 is below the one before or past the 3 bytes");
    assert_reason(&reject(&str_dict(&[1, 3], b"abc", &[0, 0])), "do not start at 0");
    assert_reason(&reject(&str_dict(&[0, 2], b"abc", &[0, 0])), "ends at byte 2, not 3");
    assert_reason(&reject(&str_dict(&[0, 1, 2], b"ba", &[0, 1])), "entry 1 is not above");
    assert_reason(&reject(&str_dict(&[0, 1, 2], b"ab", &[0, 2])), "code 2, the dictionary 2 entries");
    // Every entry is some row's value (aggregation by code relies on it).
    let unused = [zone(0, 0)];
    assert_reason(
        &rejection(DataType::Utf8, &crafted(P::Bytes, 2, None, &unused, &str_dict(&[0, 1, 2], b"ab", &[0, 0]))),
        "dictionary entry 1 is the value of no row",
    );
    // With nulls, a dictionary zone needs the right counts and codes
    // within the dictionary (statistics look them up).
    let entries = str_dict(&[0, 0, 1], b"a", &[0, 1]);
    let with_null = |zone: Zone| crafted(P::Bytes, 2, Some(&[0b10]), &[zone], &entries);
    let utf8 = schema_of(vec![Field::new("c", DataType::Utf8, true)]);
    assert!(decode_main(&with_null(Zone { min: 1, max: 1, null_count: 1 }), &utf8).is_ok());
    let reject_zone = |zone: Zone| rejection(DataType::Utf8, &with_null(zone));
    assert_reason(&reject_zone(Zone { min: 1, max: 2, null_count: 1 }), "reaches code 2, the dictionary 2 entries");
    assert_reason(&reject_zone(Zone { min: 1, max: 1, null_count: 0 }), "has 1 nulls in 2 rows");

    let str_plain = |offsets: &[u64], bytes: &[u8]| {
        encoding(TAG_STR_PLAIN, |o| {
            put_packed(o, &BitPacked::encode(offsets));
            put_u64(o, bytes.len() as u64);
            o.extend_from_slice(bytes);
        })
    };
    assert_reason(&reject(&str_plain(&[0, 3, 2], b"abc")), "do not ascend from 0");
    assert_reason(&reject(&str_plain(&[0, 1, 4], b"abc")), "within the 3 bytes");
    assert_reason(&reject(&str_plain(&[0, 1, 2], b"abc")), "end at byte 2, not 3");
    assert_reason(&reject(&str_plain(&[1, 2, 3], b"abc")), "do not ascend from 0");
    // Prefix-key zones only prune; their counts must still be right.
    let plain = str_plain(&[0, 1, 3], b"abc");
    assert!(decode_main(&crafted(P::Bytes, 2, None, &zones, &plain), &utf8).is_ok());
    let counted = |zone: Zone| rejection(DataType::Utf8, &crafted(P::Bytes, 2, None, &[zone], &plain));
    assert_reason(&counted(Zone { null_count: 1, ..zone(0, 1) }), "has 0 nulls in 2 rows");
    assert_reason(&counted(zone(1, 0)), "has 0 nulls in 2 rows");

    // FSST: symbols of 1 to 8 bytes, every value's codes symbols or whole
    // escapes (a dangling escape would make decompression fail).
    let str_fsst = |symbols: &[(u64, u8)], offsets: &[u64], codes: &[u8]| {
        encoding(TAG_STR_FSST, |o| {
            put_u64(o, symbols.len() as u64);
            symbols.iter().for_each(|(s, _)| put_u64(o, *s));
            o.extend(symbols.iter().map(|(_, l)| *l));
            put_packed(o, &BitPacked::encode(offsets));
            put_u64(o, codes.len() as u64);
            o.extend_from_slice(codes);
        })
    };
    let ab = u64::from_le_bytes(*b"ab\0\0\0\0\0\0");
    let fsst = str_fsst(&[(ab, 2)], &[0, 1, 3], &[0, 255, b'c']);
    assert!(decode_main(&crafted(P::Bytes, 2, None, &zones, &fsst), &utf8).is_ok());
    let fsst_of = |bytes: &[u8]| rejection(DataType::Utf8, &crafted(P::Bytes, 2, None, &zones, bytes));
    assert_reason(&fsst_of(&str_fsst(&[(ab, 0)], &[0, 1, 3], &[0, 255, b'c'])), "symbol 0 is 0 bytes long");
    assert_reason(&fsst_of(&str_fsst(&[(ab, 9)], &[0, 1, 3], &[0, 255, b'c'])), "symbol 0 is 9 bytes long");
    assert_reason(&fsst_of(&str_fsst(&[(ab, 2)], &[0, 2, 3], &[0, 255, b'c'])), "codes of row 0 are neither");
    assert_reason(&fsst_of(&str_fsst(&[(ab, 2)], &[0, 1, 3], &[1, 255, b'c'])), "codes of row 0 are neither");
    assert_reason(&fsst_of(&str_fsst(&[(ab, 2)], &[0, 1, 4], &[0, 255, b'c'])), "within the 3 bytes");
    assert_reason(&fsst_of(&str_fsst(&[(ab, 2)], &[0, 1, 3], &[0, 255, 0xC3])), "row 1 is not UTF-8");

    // Bytes that are fine as binary but not as text: the same file is read
    // for a Binary column and refused for a Utf8 one.
    for (force, expected) in [
        (EncodingKind::Dictionary, "dictionary is not UTF-8"),
        (EncodingKind::Plain, "splits a UTF-8 character"),
        (EncodingKind::Fsst, "is not UTF-8"),
    ] {
        let halves = BinaryArray::from_iter_values([&[0xC3u8][..], &[0xA9][..], &[0xC3, 0xA9]]);
        let col = MainColumn::from_array_with(&halves, Some(force)).unwrap();
        let bytes = encode_main(&Main::new(3, vec![col]));
        let binary = schema_of(vec![Field::new("c", DataType::Binary, true)]);
        exercise(&decode_main(&bytes, &binary).unwrap());
        assert_reason(&rejection(DataType::Utf8View, &bytes), expected);
    }
}

#[test]
fn nested_columns_round_trip() {
    use arrow_array::{FixedSizeListArray, LargeListArray, ListArray, MapArray, StructArray};
    use arrow_buffer::{NullBuffer, OffsetBuffer};
    let n = 3000usize;
    let ints: ArrayRef = Arc::new(Int64Array::from_iter((0..n as i64).map(|i| (i % 7 != 0).then_some(i % 100))));
    let names: ArrayRef =
        Arc::new(StringArray::from_iter((0..n).map(|i| (i % 5 != 0).then(|| format!("n{}", i % 13)))));
    let nulls = NullBuffer::from((0..n).map(|i| i % 11 != 3).collect::<Vec<bool>>());
    let pair = vec![Field::new("i", DataType::Int64, true), Field::new("s", DataType::Utf8, true)];
    let structs =
        StructArray::try_new(pair.clone().into(), vec![ints.clone(), names.clone()], Some(nulls.clone())).unwrap();
    let lengths = |i: usize| if nulls.is_valid(i) { i % 2 } else { 0 };
    let offsets = OffsetBuffer::<i32>::from_lengths((0..n).map(lengths));
    let total = *offsets.last().unwrap() as usize;
    let item = |t: DataType| Arc::new(Field::new_list_field(t, true));
    let struct_type = DataType::Struct(pair.clone().into());
    let lists_of_structs = ListArray::try_new(
        item(struct_type.clone()),
        offsets.clone(),
        Arc::new(structs.slice(0, total)),
        Some(nulls.clone()),
    )
    .unwrap();
    let large = LargeListArray::try_new(
        item(DataType::Utf8),
        OffsetBuffer::<i64>::from_lengths((0..n).map(lengths)),
        names.slice(0, total),
        Some(nulls.clone()),
    )
    .unwrap();
    let fixed = FixedSizeListArray::try_new(item(DataType::Int64), 1, ints.clone(), Some(nulls.clone())).unwrap();
    let entry_fields = vec![Field::new("keys", DataType::Utf8, false), Field::new("values", DataType::Int64, true)];
    let keys: ArrayRef = Arc::new(StringArray::from_iter_values((0..total).map(|k| format!("k{}", k % 3))));
    let entries = StructArray::try_new(entry_fields.clone().into(), vec![keys, ints.slice(0, total)], None).unwrap();
    let map_field = Arc::new(Field::new("entries", DataType::Struct(entry_fields.into()), false));
    let maps = MapArray::try_new(map_field, offsets, entries, Some(nulls), false).unwrap();
    let arrays: Vec<ArrayRef> =
        vec![Arc::new(structs), Arc::new(lists_of_structs), Arc::new(large), Arc::new(fixed), Arc::new(maps)];
    for array in arrays {
        for force in [None, Some(EncodingKind::Plain), Some(EncodingKind::Dictionary), Some(EncodingKind::BitPacked)] {
            for array in [array.clone(), array.slice(1000, 1500), array.slice(0, 0)] {
                let schema = schema_of(vec![Field::new("c", array.data_type().clone(), true)]);
                let col = MainColumn::from_array_with(array.as_ref(), force).unwrap();
                assert_eq!(col.kind(), EncodingKind::Nested);
                let main = Main::new(array.len(), vec![col]);
                let (_, back) = round_trip(&main, &schema);
                let decoded = back.columns()[0].decode_range(0, array.len()).unwrap();
                assert_eq!(decoded.to_data(), array.to_data(), "{} forced {force:?}", array.data_type());
                exercise(&back);
            }
        }
    }
}
