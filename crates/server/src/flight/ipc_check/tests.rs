//! Tests of the IPC checker: real messages pass and decode, mutated ones
//! are refused or decode without a panic.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, MapBuilder, StringBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, DictionaryArray, FixedSizeListArray,
    Float32Array, Float64Array, Int8Array, Int16Array, Int32Array, Int64Array, LargeStringArray, ListArray, NullArray,
    RecordBatch, RunArray, StringArray, StringViewArray, StructArray, TimestampMicrosecondArray, UInt8Array,
    UInt16Array, UInt32Array, UInt64Array, UnionArray,
};
use arrow_buffer::{Buffer, NullBuffer};
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow_schema::SchemaRef;
use flatbuffers::FlatBufferBuilder;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

/// What the test batches' compressed buffers may expand to: far more
/// than they need, far less than 2^60.
const LIMIT: usize = 16 << 20;

/// One message: its flatbuffer header and its body.
pub(in crate::flight) type Message = (Vec<u8>, Vec<u8>);

/// Six rows with an array of each layout the checker walks, most with nulls.
fn batch() -> RecordBatch {
    let ints: Vec<Option<i64>> = (0..6).map(|i| (i % 3 != 1).then_some(i)).collect();
    let text = vec![Some("a"), None, Some("ccc"), Some(""), None, Some("ünïcode")];
    let long = (0..6).map(|i| (i != 1).then(|| format!("a string longer than twelve bytes, number {i}")));
    let nulls = NullBuffer::from(vec![true, false, true, true, false, true]);
    let mut map = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    for row in 0..6 {
        for k in 0..row % 3 {
            map.keys().append_value(format!("k{k}"));
            map.values().append_value(k);
        }
        map.append(row != 4).unwrap();
    }
    let members = [Field::new("i", DataType::Int32, true), Field::new("s", DataType::Utf8, true)];
    let strukt = StructArray::try_new(
        Fields::from(members.to_vec()),
        vec![Arc::new(Int32Array::from_iter_values(0..6)) as ArrayRef, Arc::new(StringArray::from(text.clone()))],
        Some(nulls.clone()),
    )
    .unwrap();
    let union = UnionArray::try_new(
        UnionFields::try_new([0, 1], members).unwrap(),
        vec![0, 1, 0, 1, 0, 1].into(),
        Some(vec![0, 0, 1, 1, 2, 2].into()),
        vec![Arc::new(Int32Array::from(vec![1, 2, 3])) as ArrayRef, Arc::new(StringArray::from(vec!["x", "y", "z"]))],
    )
    .unwrap();
    let pairs = FixedSizeListArray::try_new(
        Arc::new(Field::new("item", DataType::Int16, false)),
        2,
        Arc::new(Int16Array::from_iter_values(0..12)),
        Some(nulls),
    )
    .unwrap();
    let runs = RunArray::<Int32Type>::try_new(&Int32Array::from(vec![2, 6]), &StringArray::from(vec![Some("r"), None]))
        .unwrap();
    let list = (0..6).map(|i| (i != 2).then(|| (0..i).map(|v| (v != 1).then_some(v))));
    RecordBatch::try_from_iter([
        ("i8", Arc::new(ints.iter().map(|v| v.map(|v| v as i8)).collect::<Int8Array>()) as _),
        ("i16", Arc::new(ints.iter().map(|v| v.map(|v| v as i16)).collect::<Int16Array>()) as _),
        ("i32", Arc::new(ints.iter().map(|v| v.map(|v| v as i32)).collect::<Int32Array>()) as _),
        ("i64", Arc::new(ints.iter().copied().collect::<Int64Array>()) as _),
        ("u8", Arc::new(ints.iter().map(|v| v.map(|v| v as u8)).collect::<UInt8Array>()) as _),
        ("u16", Arc::new(ints.iter().map(|v| v.map(|v| v as u16)).collect::<UInt16Array>()) as _),
        ("u32", Arc::new(ints.iter().map(|v| v.map(|v| v as u32)).collect::<UInt32Array>()) as _),
        ("u64", Arc::new(ints.iter().map(|v| v.map(|v| v as u64)).collect::<UInt64Array>()) as _),
        ("f32", Arc::new(ints.iter().map(|v| v.map(|v| v as f32)).collect::<Float32Array>()) as _),
        ("f64", Arc::new(ints.iter().map(|v| v.map(|v| v as f64)).collect::<Float64Array>()) as _),
        ("bool", Arc::new(ints.iter().map(|v| v.map(|v| v % 2 == 0)).collect::<BooleanArray>()) as _),
        ("utf8", Arc::new(StringArray::from(text.clone())) as _),
        ("large_utf8", Arc::new(text.iter().copied().collect::<LargeStringArray>()) as _),
        ("utf8_view", Arc::new(long.collect::<StringViewArray>()) as _),
        ("binary", Arc::new(text.iter().map(|t| t.map(str::as_bytes)).collect::<BinaryArray>()) as _),
        (
            "decimal",
            Arc::new(
                ints.iter()
                    .map(|v| v.map(i128::from))
                    .collect::<Decimal128Array>()
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ) as _,
        ),
        ("date", Arc::new(ints.iter().map(|v| v.map(|v| v as i32)).collect::<Date32Array>()) as _),
        ("timestamp", Arc::new(ints.iter().copied().collect::<TimestampMicrosecondArray>().with_timezone("UTC")) as _),
        ("list", Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(list)) as _),
        ("struct", Arc::new(strukt) as _),
        ("map", Arc::new(map.finish()) as _),
        ("dictionary", Arc::new(text.iter().copied().collect::<DictionaryArray<Int32Type>>()) as _),
        ("pairs", Arc::new(pairs) as _),
        ("union", Arc::new(union) as _),
        ("runs", Arc::new(runs) as _),
        ("null", Arc::new(NullArray::new(6)) as _),
    ])
    .unwrap()
}

/// `batch` as arrow-ipc writes it: the schema, the dictionaries, the batch.
pub(in crate::flight) fn stream(batch: &RecordBatch, compression: Option<CompressionType>) -> Vec<Message> {
    let options = IpcWriteOptions::default().try_with_compression(compression).unwrap();
    let generator = IpcDataGenerator::default();
    let mut tracker = DictionaryTracker::new(false);
    let schema = generator.schema_to_bytes_with_dictionary_tracker(&batch.schema(), &mut tracker, &options);
    let (dictionaries, batch) =
        generator.encode(batch, &mut tracker, &options, &mut IpcWriteContext::default()).unwrap();
    std::iter::once(schema).chain(dictionaries).chain([batch]).map(|m| (m.ipc_message, m.arrow_data)).collect()
}

/// Decodes messages as the Flight decoder does, with arrow-ipc.
#[derive(Default)]
struct Decoder {
    schema: Option<SchemaRef>,
    dictionaries: HashMap<i64, ArrayRef>,
    batch: Option<RecordBatch>,
}

impl Decoder {
    fn decode(&mut self, header: &[u8], body: &[u8]) -> Result<(), ArrowError> {
        let message = ipc::root_as_message(header).map_err(|e| ArrowError::ParseError(e.to_string()))?;
        let body = Buffer::from_slice_ref(body);
        let missing = || ArrowError::ParseError("no schema, or no batch in the message".into());
        match message.header_type() {
            MessageHeader::Schema => {
                self.schema = Some(Arc::new(ipc::convert::try_schema_from_flatbuffer_bytes(header)?));
                self.dictionaries.clear();
            }
            MessageHeader::DictionaryBatch => {
                let schema = self.schema.as_ref().ok_or_else(missing)?;
                let batch = message.header_as_dictionary_batch().ok_or_else(missing)?;
                ipc::reader::read_dictionary(&body, batch, schema, &mut self.dictionaries, &message.version())?;
            }
            MessageHeader::RecordBatch => {
                let schema = self.schema.clone().ok_or_else(missing)?;
                let batch = message.header_as_record_batch().ok_or_else(missing)?;
                let version = message.version();
                self.batch =
                    Some(ipc::reader::read_record_batch(&body, batch, schema, &self.dictionaries, None, &version)?);
            }
            _ => return Err(missing()),
        }
        Ok(())
    }
}

/// Runs `messages` through the checker and, where it accepts them,
/// arrow-ipc and the server's decoding: fails if either panics on a
/// message the checker accepted, or if the server's decoding (which skips
/// arrow's validation for flat batches and validates them itself)
/// accepts what arrow refuses, refuses what it accepts, or decodes a
/// batch arrow's full validation finds invalid.
fn assert_no_panic(messages: &[Message], case: &str) {
    let mut checker = IpcChecker::new(LIMIT);
    let mut decoder = Decoder::default();
    let mut decoding = super::super::incoming::Decoding::default();
    for (header, body) in messages {
        if checker.check(header, body).is_err() {
            return;
        }
        let arrow = match catch_unwind(AssertUnwindSafe(|| decoder.decode(header, body))) {
            Ok(outcome) => outcome,
            Err(_) => panic!("arrow-ipc panicked on a message the checker accepted: {case}"),
        };
        let ours = match catch_unwind(AssertUnwindSafe(|| decoding.decode(header, bytes::Bytes::copy_from_slice(body))))
        {
            Ok(outcome) => outcome,
            Err(_) => panic!("the server's decoding panicked on a message the checker accepted: {case}"),
        };
        assert_eq!(ours.is_ok(), arrow.is_ok(), "{case}: ours {ours:?}, arrow's {arrow:?}");
        match ours {
            Ok(Some(batch)) => {
                for column in batch.columns() {
                    column.to_data().validate_full().unwrap_or_else(|e| panic!("{case}: decoded, but invalid: {e}"));
                }
                assert_eq!(Some(&batch), decoder.batch.as_ref(), "{case}");
            }
            Ok(None) => {}
            Err(_) => return,
        }
    }
}

/// The columns of [`batch`] the server decodes without arrow's validation.
fn flat_batch() -> RecordBatch {
    let batch = batch();
    let flat: Vec<usize> = (0..batch.num_columns())
        .filter(|&i| super::super::incoming::is_flat(batch.schema().field(i).data_type()))
        .collect();
    assert!(flat.len() > 10, "most columns are flat");
    batch.project(&flat).unwrap()
}

/// Whether arrow-ipc, unchecked, panics decoding `messages`.
fn arrow_panics(messages: &[Message]) -> bool {
    let mut decoder = Decoder::default();
    catch_unwind(AssertUnwindSafe(|| messages.iter().try_for_each(|(header, body)| decoder.decode(header, body))))
        .is_err()
}

/// The checker's verdict on the last of `messages`, after the others passed.
fn verdict(messages: &[Message]) -> Result<(), String> {
    let mut checker = IpcChecker::new(LIMIT);
    let ((header, body), earlier) = messages.split_last().unwrap();
    for (header, body) in earlier {
        checker.check(header, body).unwrap();
    }
    checker.check(header, body)
}

/// `header`, a record batch message, rebuilt after `edit` changed its
/// field nodes, buffers and variadic buffer counts.
fn edited(header: &[u8], edit: impl FnOnce(&mut Vec<ipc::FieldNode>, &mut Vec<ipc::Buffer>, &mut Vec<i64>)) -> Vec<u8> {
    let message = ipc::root_as_message(header).unwrap();
    let batch = message.header_as_record_batch().unwrap();
    let mut nodes: Vec<_> = batch.nodes().unwrap().iter().copied().collect();
    let mut buffers: Vec<_> = batch.buffers().unwrap().iter().copied().collect();
    let mut counts: Vec<i64> = batch.variadicBufferCounts().into_iter().flatten().collect();
    edit(&mut nodes, &mut buffers, &mut counts);
    let mut fbb = FlatBufferBuilder::new();
    let nodes = fbb.create_vector(&nodes);
    let buffers = fbb.create_vector(&buffers);
    let counts = fbb.create_vector(&counts);
    let compression = batch.compression().map(|c| {
        let mut compression = ipc::BodyCompressionBuilder::new(&mut fbb);
        compression.add_codec(c.codec());
        compression.finish()
    });
    let mut record = ipc::RecordBatchBuilder::new(&mut fbb);
    record.add_length(batch.length());
    record.add_nodes(nodes);
    record.add_buffers(buffers);
    record.add_variadicBufferCounts(counts);
    if let Some(compression) = compression {
        record.add_compression(compression);
    }
    let record = record.finish();
    let mut out = ipc::MessageBuilder::new(&mut fbb);
    out.add_version(message.version());
    out.add_header_type(MessageHeader::RecordBatch);
    out.add_header(record.as_union_value());
    out.add_bodyLength(message.bodyLength());
    let out = out.finish();
    fbb.finish(out, None);
    fbb.finished_data().to_vec()
}

/// A schema message of one Int field of `bits` bits, built by hand.
fn int_schema(bits: i32) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let name = fbb.create_string("x");
    let mut int = ipc::IntBuilder::new(&mut fbb);
    int.add_bitWidth(bits);
    int.add_is_signed(true);
    let int = int.finish();
    let mut field = ipc::FieldBuilder::new(&mut fbb);
    field.add_name(name);
    field.add_nullable(true);
    field.add_type_type(Type::Int);
    field.add_type_(int.as_union_value());
    let field = field.finish();
    let fields = fbb.create_vector(&[field]);
    let mut schema = ipc::SchemaBuilder::new(&mut fbb);
    schema.add_fields(fields);
    let schema = schema.finish();
    let mut message = ipc::MessageBuilder::new(&mut fbb);
    message.add_version(MetadataVersion::V5);
    message.add_header_type(MessageHeader::Schema);
    message.add_header(schema.as_union_value());
    let message = message.finish();
    fbb.finish(message, None);
    fbb.finished_data().to_vec()
}

#[test]
fn streams_arrow_ipc_writes_pass_and_decode() {
    let batch = batch();
    for compression in [None, Some(CompressionType::LZ4_FRAME), Some(CompressionType::ZSTD)] {
        let mut checker = IpcChecker::new(LIMIT);
        let mut decoder = Decoder::default();
        for (header, body) in stream(&batch, compression) {
            checker.check(&header, &body).unwrap();
            decoder.decode(&header, &body).unwrap();
        }
        assert_eq!(decoder.batch.unwrap().columns(), batch.columns(), "{compression:?}");
    }
}

#[test]
fn header_byte_flips_never_reach_a_panic() {
    let cases = [(None, &[0x01, 0xFF][..]), (Some(CompressionType::LZ4_FRAME), &[0xFF][..])];
    for ((compression, flips), batch) in cases.into_iter().flat_map(|c| [(c, batch()), (c, flat_batch())]) {
        let messages = stream(&batch, compression);
        for (i, (header, _)) in messages.iter().enumerate() {
            for at in 0..header.len() {
                for &flip in flips {
                    let mut case = messages.clone();
                    case[i].0[at] ^= flip;
                    assert_no_panic(&case, &format!("{compression:?}: message {i}, header byte {at} ^ {flip:#x}"));
                }
            }
        }
    }
}

#[test]
fn body_byte_flips_and_cuts_never_reach_a_panic() {
    let mut rng = StdRng::seed_from_u64(0x1dc);
    let compressions = [None, Some(CompressionType::LZ4_FRAME), Some(CompressionType::ZSTD)];
    for (compression, batch) in compressions.into_iter().flat_map(|c| [(c, batch()), (c, flat_batch())]) {
        let messages = stream(&batch, compression);
        for _ in 0..1500 {
            let mut case = messages.clone();
            let i = rng.random_range(1..case.len());
            let body = &mut case[i].1;
            let at = rng.random_range(0..body.len());
            let what = if rng.random_bool(0.1) {
                body.truncate(at);
                format!("cut to {at} bytes")
            } else {
                let flip = rng.random_range(1..=u8::MAX);
                body[at] ^= flip;
                format!("byte {at} ^ {flip:#x}")
            };
            assert_no_panic(&case, &format!("{compression:?}: message {i}, body {what}"));
        }
    }
}

/// Each of these lengths makes arrow-ipc panic; the checker refuses them first.
#[test]
fn lengths_past_the_body_or_the_array_are_refused() {
    let messages = stream(&batch(), None);
    let (header, body) = messages.last().unwrap().clone();
    let with_last = |last: Message| {
        let mut case = messages.clone();
        *case.last_mut().unwrap() = last;
        case
    };
    // Field 'i8' (two nulls) comes first: buffer 0 is its validity, buffer 1 its values.
    let cases = [
        (edited(&header, |_, b, _| b[1] = ipc::Buffer::new(b[1].offset(), 1 << 60)), body.clone(), "outside"),
        (header.clone(), body[..body.len() / 2].to_vec(), "outside"),
        (edited(&header, |_, b, _| b[0] = ipc::Buffer::new(b[0].offset(), 0)), body.clone(), "validity bitmap"),
        (edited(&header, |_, _, counts| counts.push(0)), body.clone(), "variadic"),
    ];
    for (header, body, expected) in cases {
        let case = with_last((header, body));
        let err = verdict(&case).unwrap_err();
        assert!(err.contains(expected), "{err}");
        assert!(arrow_panics(&case), "{err}");
    }
}

/// A declared length of 2^60 made arrow-ipc allocate it and abort.
#[test]
fn compressed_buffers_declaring_too_much_are_refused() {
    for codec in [CompressionType::LZ4_FRAME, CompressionType::ZSTD] {
        let messages = stream(&batch(), Some(codec));
        let (header, body) = messages.last().unwrap();
        let message = ipc::root_as_message(header).unwrap();
        let at = message
            .header_as_record_batch()
            .unwrap()
            .buffers()
            .unwrap()
            .iter()
            .filter(|b| b.length() >= 8)
            .map(|b| b.offset() as usize)
            .find(|&at| body[at..at + 8] != (-1i64).to_le_bytes())
            .expect("a compressed buffer");
        let declared = i64::from_le_bytes(body[at..at + 8].try_into().unwrap());
        let mut lengths = vec![(1i64 << 60, "more than")];
        if codec == CompressionType::LZ4_FRAME {
            lengths.push((declared + 1, "LZ4 frames hold"));
        }
        for (length, expected) in lengths {
            let mut case = messages.clone();
            case.last_mut().unwrap().1[at..at + 8].copy_from_slice(&length.to_le_bytes());
            let err = verdict(&case).unwrap_err();
            assert!(err.contains(expected), "{err}");
        }
        // With no room to decompress into, the stream is refused.
        let mut checker = IpcChecker::new(0);
        let err = messages.iter().find_map(|(header, body)| checker.check(header, body).err()).unwrap();
        assert!(err.contains("more than"), "{err}");
    }
}

#[test]
fn type_parameters_arrow_ipc_panics_on_are_refused() {
    IpcChecker::new(LIMIT).check(&int_schema(32), &[]).unwrap();
    let seven = int_schema(7);
    let err = IpcChecker::new(LIMIT).check(&seven, &[]).unwrap_err();
    assert_eq!(err, "field 'x': an Int of 7 bits");
    assert!(arrow_panics(&[(seven, vec![])]));
}

#[test]
fn batches_before_the_schema_are_refused() {
    for (header, body) in &stream(&batch(), None)[1..] {
        let err = IpcChecker::new(LIMIT).check(header, body).unwrap_err();
        assert!(err.contains("before the schema"), "{err}");
    }
}

/// A buffer too short for its array is refused before any array is built
/// (arrow's validation refuses it too, later): the server builds the
/// arrays of a flat batch before validating them.
#[test]
fn buffers_short_of_their_arrays_are_refused() {
    let messages = stream(&flat_batch(), None);
    let (header, body) = messages.last().unwrap().clone();
    let buffers: Vec<ipc::Buffer> = ipc::root_as_message(&header)
        .unwrap()
        .header_as_record_batch()
        .unwrap()
        .buffers()
        .unwrap()
        .iter()
        .copied()
        .collect();
    let fields = flat_batch().schema().fields().len();
    let mut refused = 0;
    // Each buffer in turn loses a byte: one the layout needs in full (the
    // values, offsets and views of each field) is refused, naming its
    // field; the others (string data, padded bitmaps) decode or fail as
    // arrow's validation says.
    for at in 0..buffers.len() {
        if buffers[at].length() == 0 {
            continue;
        }
        let shorter = edited(&header, |_, b, _| b[at] = ipc::Buffer::new(b[at].offset(), b[at].length() - 1));
        let mut case = messages.clone();
        *case.last_mut().unwrap() = (shorter, body.clone());
        match verdict(&case) {
            Err(e) => {
                assert!(e.contains(" of ") && e.contains("field '"), "{e}");
                refused += 1;
            }
            Ok(()) => assert_no_panic(&case, &format!("buffer {at} a byte short")),
        }
    }
    assert!(refused >= fields, "{refused} of {} buffers refused", buffers.len());
}
