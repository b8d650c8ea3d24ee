//! Tests of decoding a DoPut's messages: flat batches, decoded without
//! arrow's validation and validated here, come out as arrow decodes them,
//! and whatever arrow's validation refuses is refused too.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryViewArray, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray, Int64Array,
    LargeStringArray, NullArray, RecordBatch, StringArray, StringViewArray,
};
use arrow_schema::{DataType, Field, Schema};

use super::*;

/// Twenty rows of each flat layout, with nulls, multi-byte characters,
/// inline and out-of-line string views.
fn flat_batch() -> RecordBatch {
    let words: Vec<Option<String>> = (0..20)
        .map(|i| match i % 5 {
            0 => None,
            1 => Some(format!("ünï{i}")),
            2 => Some(format!("a value longer than twelve bytes, ✓ {i}")),
            3 => Some(String::new()),
            _ => Some(format!("{i}")),
        })
        .collect();
    let views: StringViewArray = words.iter().map(|w| w.as_deref()).collect();
    RecordBatch::try_from_iter([
        ("i", Arc::new(Int64Array::from_iter((0..20).map(|i| (i % 7 != 0).then_some(i)))) as ArrayRef),
        ("b", Arc::new(BooleanArray::from_iter((0..20).map(|i| (i % 3 != 0).then_some(i % 2 == 0)))) as _),
        (
            "d",
            Arc::new(
                Decimal128Array::from_iter((0..20).map(|i| (i != 4).then_some(i * 1001)))
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ) as _,
        ),
        ("date", Arc::new(Date32Array::from_iter_values(0..20)) as _),
        ("s", Arc::new(words.iter().map(|w| w.as_deref()).collect::<StringArray>()) as _),
        ("ls", Arc::new(words.iter().map(|w| w.as_deref()).collect::<LargeStringArray>()) as _),
        ("v", Arc::new(views) as _),
        ("bv", Arc::new(words.iter().map(|w| w.as_deref().map(str::as_bytes)).collect::<BinaryViewArray>()) as _),
        ("f", Arc::new(FixedSizeBinaryArray::try_from_iter((0..20u32).map(|i| i.to_le_bytes())).unwrap()) as _),
        ("n", Arc::new(NullArray::new(20)) as _),
    ])
    .unwrap()
}

/// `batch` as arrow-ipc writes it: schema, then the batch.
fn messages(batch: &RecordBatch) -> Vec<(Vec<u8>, Vec<u8>)> {
    super::super::ipc_check::tests::stream(batch, None)
}

/// Decodes `messages` as the server does; the last batch.
fn decode(messages: &[(Vec<u8>, Vec<u8>)]) -> Result<Option<RecordBatch>, String> {
    let mut checker = IpcChecker::new(16 << 20);
    let mut decoding = Decoding::default();
    let mut last = None;
    for (header, body) in messages {
        checker.check(header, body)?;
        if let Some(batch) = decoding.decode(header, bytes::Bytes::copy_from_slice(body)).map_err(|e| e.to_string())? {
            last = Some(batch);
        }
    }
    Ok(last)
}

#[test]
fn flat_batches_decode_as_they_were_written() {
    let batch = flat_batch();
    let mut decoding = Decoding::default();
    let all = messages(&batch);
    decoding.decode(&all[0].0, bytes::Bytes::copy_from_slice(&all[0].1)).unwrap();
    assert!(decoding.flat, "the batch is flat");
    assert_eq!(decode(&all).unwrap().unwrap(), batch);
    // A slice: views pointing into the middle of shared data buffers.
    let slice = batch.slice(3, 11);
    assert_eq!(decode(&messages(&slice)).unwrap().unwrap(), slice);
}

/// Rewrites the views of column `v` (index 6 of [`flat_batch`]) and its
/// data with `edit`, then decodes: the verdict must be arrow's own.
fn verdict_on_views(edit: impl Fn(&mut [u128], &mut Vec<u8>)) -> (Result<(), String>, bool) {
    let batch = flat_batch();
    let column = batch.column(6).as_any().downcast_ref::<StringViewArray>().unwrap().clone();
    let (mut views, mut data) = (column.views().to_vec(), column.data_buffers()[0].as_slice().to_vec());
    edit(&mut views, &mut data);
    let edited = arrow_data::ArrayData::builder(DataType::Utf8View)
        .len(views.len())
        .add_buffer(Buffer::from_vec(views))
        .add_buffer(Buffer::from_vec(data))
        .nulls(column.nulls().cloned());
    // SAFETY: built only to be written out and decoded, never read here.
    let edited = unsafe { edited.build_unchecked() };
    let arrow_accepts = edited.validate_full().is_ok();
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Utf8View, true)]));
    let one = RecordBatch::try_new_with_options(
        schema,
        vec![arrow_array::make_array(edited)],
        &arrow_array::RecordBatchOptions::new(),
    );
    let Ok(one) = one else { return (Err("arrow refuses to build it".into()), arrow_accepts) };
    (decode(&messages(&one)).map(|_| ()), arrow_accepts)
}

#[test]
fn string_views_are_refused_where_arrow_refuses_them() {
    let long = |views: &[u128]| views.iter().position(|&v| v as u32 > 12).unwrap();
    let short = |views: &[u128]| views.iter().position(|&v| (1..12).contains(&(v as u32))).unwrap();
    type Edit = Box<dyn Fn(&mut [u128], &mut Vec<u8>)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("unchanged", Box::new(|_, _| {})),
        ("a value past its buffer", Box::new(move |v, _| v[long(v)] += 10_000u128 << 96)),
        ("a bad prefix", Box::new(move |v, _| v[long(v)] ^= 1u128 << 40)),
        ("a bad buffer index", Box::new(move |v, _| v[long(v)] += 1u128 << 64)),
        ("padding after an inline value", Box::new(move |v, _| v[short(v)] |= 1u128 << 120)),
        (
            "an inline value that is not UTF-8",
            Box::new(move |v, _| {
                let i = short(v);
                v[i] = (v[i] & !(0xFFu128 << 32)) | (0xFFu128 << 32);
            }),
        ),
        (
            "a value splitting a character",
            Box::new(move |v, d| {
                // The value "a value longer than twelve bytes, ✓ 2" without its last bytes.
                let i = long(v);
                let view = ByteView::from(v[i]);
                let text = &d[view.offset as usize..(view.offset + view.length) as usize];
                let check = text.windows(3).position(|w| w == "✓".as_bytes()).unwrap();
                v[i] = ByteView { length: check as u32 + 1, ..view }.as_u128();
            }),
        ),
        ("invalid bytes no view reaches", Box::new(|_, d| d.extend_from_slice(&[0xFF, 0xFE]))),
        (
            "invalid bytes a view reaches",
            Box::new(move |v, d| {
                let view = ByteView::from(v[long(v)]);
                d[view.offset as usize + 6] = 0xFF;
            }),
        ),
    ];
    for (case, edit) in cases {
        let (ours, arrow_accepts) = verdict_on_views(edit);
        assert_eq!(ours.is_ok(), arrow_accepts, "{case}: {ours:?}");
    }
}
