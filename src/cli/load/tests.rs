use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::record::{BadRecord, Conform, Place, Problem, Refused, WidthFrom};
use super::{FileKind, format_rate, like_pattern, match_columns};

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[test]
fn file_kinds() {
    assert_eq!(FileKind::of(Path::new("a/b.csv")), Ok(FileKind::Csv { delimiter: b',' }));
    assert_eq!(FileKind::of(Path::new("b.CSV")), Ok(FileKind::Csv { delimiter: b',' }));
    assert_eq!(FileKind::of(Path::new("b.txt")), Ok(FileKind::Csv { delimiter: b',' }));
    assert_eq!(FileKind::of(Path::new("b.tsv")), Ok(FileKind::Csv { delimiter: b'\t' }));
    assert_eq!(FileKind::of(Path::new("b.parquet")), Ok(FileKind::Parquet));
    assert_eq!(FileKind::of(Path::new("b.parq")), Ok(FileKind::Parquet));
    assert!(FileKind::of(Path::new("b.json")).expect_err("json").contains("unknown file type '.json'"));
    assert!(FileKind::of(Path::new("b")).expect_err("no extension").contains("no extension"));
}

/// Names compare exactly: the file's were folded as SQL folds them
/// before, so a table column `B` (created as `"B"`) takes only a file
/// column that kept its case.
#[test]
fn columns_match_by_name() {
    let table = Schema::new(vec![Field::new("a", DataType::Int64, false), Field::new("B", DataType::Utf8, true)]);
    assert_eq!(match_columns(&names(&["a", "B"]), &table), Ok(vec![0, 1]));
    assert_eq!(match_columns(&names(&["B", "a"]), &table), Ok(vec![1, 0]));
    let folded = match_columns(&names(&["a", "b"]), &table).expect_err("b is not B");
    assert!(folded.contains("the file has no column 'B'") && folded.contains("\"B\" in double quotes"), "{folded}");
    assert!(match_columns(&names(&["a"]), &table).expect_err("missing").contains("the file has no column 'B'"));
    let extra = match_columns(&names(&["a", "B", "c"]), &table).expect_err("extra");
    assert!(extra.contains("the table has no column 'c'"), "{extra}");
    let twice = Schema::new(vec![Field::new("a", DataType::Int64, false)]);
    let error = match_columns(&names(&["a", "x", "a"]), &twice).expect_err("twice");
    assert!(error.contains("more than one column named 'a'"), "{error}");
}

#[test]
fn table_names_are_like_patterns_of_themselves() {
    assert_eq!(like_pattern("sales"), "sales");
    assert_eq!(like_pattern("a_b%c\\d"), "a\\_b\\%c\\\\d");
}

fn batch() -> RecordBatch {
    let file =
        Arc::new(Schema::new(vec![Field::new("b", DataType::Utf8, true), Field::new("a", DataType::Int32, true)]));
    RecordBatch::try_new(
        file,
        vec![Arc::new(StringArray::from(vec![Some("7"), None, Some("x9")])), Arc::new(Int32Array::from(vec![1, 2, 3]))],
    )
    .expect("batch")
}

#[test]
fn conform_reorders_and_casts() {
    let table =
        Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false), Field::new("b", DataType::Utf8, true)]));
    let conform = Conform { target: Arc::clone(&table), sources: vec![1, 0] };
    let out = conform.apply(&batch()).expect("conforms");
    assert_eq!(out.schema(), table);
    let a = out.column(0).as_any().downcast_ref::<Int64Array>().expect("Int64");
    assert_eq!(a.values(), &[1, 2, 3]);
    assert!(out.column(1).is_null(1));
}

/// A refused batch names the first row that fails, found by a lenient
/// cast (the reference: the value it makes NULL), and the value.
#[test]
fn conform_names_the_row_and_value_it_refuses() {
    // A NULL into a NOT NULL column is refused, not passed on.
    let strict = Arc::new(Schema::new(vec![Field::new("b", DataType::Utf8, false)]));
    match (Conform { target: strict, sources: vec![0] }).apply(&batch()) {
        Err(Refused::Value { row: 1, problem: Problem::Null { column } }) => assert_eq!(column, "b"),
        other => panic!("{other:?}"),
    }
    // A value that does not convert fails instead of becoming NULL.
    let narrow = Arc::new(Schema::new(vec![Field::new("b", DataType::Int64, true)]));
    match (Conform { target: narrow, sources: vec![0] }).apply(&batch()) {
        Err(Refused::Value { row: 2, problem: Problem::Value { column, value, data_type } }) => {
            assert_eq!((column.as_str(), value.as_str(), data_type), ("b", "x9", DataType::Int64));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_records_read_as_plain_text() {
    let bad = |place, problem| BadRecord { place, problem }.to_string();
    assert_eq!(
        bad(Place::Line(7), Problem::Value { column: "id".into(), value: "oops".into(), data_type: DataType::Int64 }),
        "line 7, column 'id': cannot read 'oops' as Int64"
    );
    assert_eq!(
        bad(Place::Row(3), Problem::Null { column: "k".into() }),
        "row 3, column 'k': no value, but the column is NOT NULL"
    );
    assert_eq!(
        bad(Place::Line(4), Problem::Width { found: 1, expected: 3, from: WidthFrom::Header }),
        "line 4 has 1 field, but the header has 3 fields"
    );
    assert_eq!(
        bad(Place::Line(1), Problem::Width { found: 2, expected: 3, from: WidthFrom::Schema }),
        "line 1 has 2 fields, but --schema gives 3 columns"
    );
    assert_eq!(
        bad(Place::Line(9), Problem::Width { found: 4, expected: 1, from: WidthFrom::FirstLine }),
        "line 9 has 4 fields, but the first line has 1 field"
    );
    assert_eq!(bad(Place::Line(2), Problem::NotUtf8), "line 2 is not valid UTF-8 text");
}

/// Whole rows per second: the rate rounded to the nearest integer.
#[test]
fn rates() {
    for (rows, seconds) in [(1_000_000i64, 1.23), (2_000_000, 0.84), (12_345, 1.0), (950, 1.0), (3, 0.004)] {
        let reference = (rows as f64 / seconds).round() as i64;
        assert_eq!(format_rate(rows, seconds), reference.to_string(), "{rows} rows in {seconds} s");
    }
    assert_eq!(format_rate(1_000_000, 1.23), "813008");
    assert_eq!(format_rate(10, 0.0), "-");
}
