//! Checks the Arrow IPC messages clients send, before arrow-ipc decodes them.
//!
//! Clients send quiverdb Arrow data as IPC messages: a `DoPut` stream (rows
//! to ingest, or the parameters of a prepared statement) is a schema
//! message, then dictionary and record batches, each a flatbuffer header
//! and a body of buffers. arrow-ipc believes the header. A type parameter
//! it does not know, a field without the children its type needs, a buffer
//! past the end of the body, a validity bitmap shorter than its array, too
//! few buffers or variadic counts, or a compressed buffer declaring 2^60
//! bytes make it panic, or abort the process, where it should return an
//! error. [`IpcChecker`] reads each message first, the way arrow-ipc will,
//! and refuses those with an error naming the field and the problem.
//!
//! What arrow validates on its own (offsets within their values, UTF-8,
//! null counts, dictionary keys, run ends, union type ids) is left to it
//! (or, for flat batches, to `super::incoming`, which builds their arrays
//! before validating them): the checker stands only between a header and
//! the places where arrow would panic, and it bounds what decoding may
//! allocate: buffers lie within the body and hold the values, offsets or
//! views their arrays' lengths need, arrays have fewer than 2^31 values,
//! and what the compressed buffers of a message expand to is capped.

use std::collections::HashMap;

use arrow_array::types::{
    Decimal32Type, Decimal64Type, Decimal128Type, Decimal256Type, validate_decimal_precision_and_scale,
};
use arrow_ipc::{self as ipc, CompressionType, MessageHeader, MetadataVersion, Type};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, UnionFields, UnionMode};

/// The deepest nesting of fields a schema may have; arrow-ipc converts and
/// decodes nested fields recursively.
const MAX_DEPTH: usize = 64;

/// The most values one array of a message may declare (the rows of a
/// batch, the values of a list): arrow's 32-bit offsets address no more,
/// and it keeps the products arrow-data forms (a FixedSizeList's length
/// times its size) far from overflowing.
const MAX_LENGTH: i64 = i32::MAX as i64;

/// The magic number that opens an LZ4 frame (LZ4 frame format, "General
/// Structure of LZ4 Frame format").
const LZ4_MAGIC: u32 = 0x184D_2204;
/// FLG bits of an LZ4 frame descriptor (LZ4 frame format, "FLG byte"): the
/// version, reserved and dictionary-id bits, which must read 01xx_xx00
/// (version 1, no dictionary), then the flags the frame's layout depends on.
const LZ4_FLG_FIXED: u8 = 0b1100_0011;
const LZ4_FLG_VERSION_1: u8 = 0b0100_0000;
const LZ4_INDEPENDENT_BLOCKS: u8 = 0b0010_0000;
const LZ4_BLOCK_CHECKSUMS: u8 = 0b0001_0000;
const LZ4_CONTENT_SIZE: u8 = 0b0000_1000;
const LZ4_CONTENT_CHECKSUM: u8 = 0b0000_0100;
/// The BD bits outside the block-size id, reserved (LZ4 frame format, "BD byte").
const LZ4_BD_RESERVED: u8 = 0b1000_1111;
/// The history a decoder keeps for linked blocks: 64 KiB (LZ4 block format).
const LZ4_WINDOW: usize = 64 << 10;
/// The top bit of a block size: the block is stored uncompressed.
const LZ4_UNCOMPRESSED: u32 = 0x8000_0000;

/// What the checker remembers across the messages of one stream: the
/// schema's field layout (types, from the validated schema message) and
/// the dictionary ids it declares with their value types.
#[derive(Debug)]
pub(crate) struct IpcChecker {
    /// The most bytes the compressed buffers of one message may expand to.
    max_decompressed: usize,
    /// The fields of the stream's schema, once a schema message passed.
    fields: Option<Fields>,
    /// The value type of each dictionary the schema declares, by id.
    dictionaries: HashMap<i64, DataType>,
}

impl IpcChecker {
    /// `max_decompressed`: the most bytes the compressed buffers of one
    /// message may declare in total once decompressed (the buffers LZ4's
    /// decoder sets up for a frame's blocks count too).
    pub(crate) fn new(max_decompressed: usize) -> Self {
        Self { max_decompressed, fields: None, dictionaries: HashMap::new() }
    }

    /// Checks one message (`header`: the flatbuffer Message bytes, `body`:
    /// its body) before arrow-ipc decodes it: Ok(()) means arrow-ipc 59.3.2
    /// can decode it without panicking or allocating more than the message
    /// holds (plus `max_decompressed`); Err names the problem in plain
    /// words (e.g. "field 'x': an Int of 7 bits").
    ///
    /// A record batch's body is decoded from 64-byte aligned memory (the
    /// Flight decoder copies it there when it is not); a dictionary
    /// batch's body is decoded where it lies.
    pub(crate) fn check(&mut self, header: &[u8], body: &[u8]) -> Result<(), String> {
        let message = ipc::root_as_message(header).map_err(|e| format!("not a valid IPC message: {e}"))?;
        let legacy_unions = message.version() < MetadataVersion::V5;
        match message.header_type() {
            MessageHeader::Schema => {
                self.fields = None;
                self.dictionaries.clear();
                let schema = message.header_as_schema().ok_or("a schema message without a schema")?;
                let (fields, dictionaries) = check_schema(schema)?;
                self.fields = Some(fields);
                self.dictionaries = dictionaries;
                Ok(())
            }
            MessageHeader::RecordBatch => {
                let fields = self.fields.as_ref().ok_or("a record batch before the schema")?;
                let batch = message.header_as_record_batch().ok_or("a record batch message without a record batch")?;
                check_batch(batch, fields, body, legacy_unions, false, self.max_decompressed)
            }
            MessageHeader::DictionaryBatch => {
                if self.fields.is_none() {
                    return Err("a dictionary batch before the schema".into());
                }
                let dictionary =
                    message.header_as_dictionary_batch().ok_or("a dictionary batch message without its batch")?;
                let id = dictionary.id();
                let value_type = self
                    .dictionaries
                    .get(&id)
                    .ok_or_else(|| format!("a batch for dictionary {id}, which the schema does not declare"))?;
                let batch =
                    dictionary.data().ok_or_else(|| format!("the batch for dictionary {id} holds no values"))?;
                let fields = Fields::from(vec![Field::new(format!("dictionary {id}"), value_type.clone(), true)]);
                check_batch(batch, &fields, body, legacy_unions, true, self.max_decompressed)
            }
            other => Err(format!("an unexpected {} message", other.variant_name().unwrap_or("unknown"))),
        }
    }
}

/// Checks a schema message; returns its fields and the value type of each
/// dictionary it declares.
fn check_schema(schema: ipc::Schema<'_>) -> Result<(Fields, HashMap<i64, DataType>), String> {
    if schema.endianness() != ipc::Endianness::Little {
        return Err("a big-endian schema: quiverdb reads little-endian Arrow data".into());
    }
    for field in schema.fields().ok_or("a schema without a field list")?.iter() {
        check_ipc_field(field, 1)?;
    }
    let schema = ipc::convert::fb_to_schema(schema);
    let mut dictionaries = HashMap::new();
    for field in schema.fields() {
        check_field(field, &mut dictionaries)?;
    }
    Ok((schema.fields().clone(), dictionaries))
}

/// Checks what arrow-ipc's `convert::get_data_type` reads of `field` and of
/// its children: it unwraps each parameter and panics on any value it does
/// not know.
fn check_ipc_field(field: ipc::Field<'_>, depth: usize) -> Result<(), String> {
    let bad = |what: &str| format!("field '{}': {what}", field.name().unwrap_or_default());
    let check = |ok: bool, what: String| if ok { Ok(()) } else { Err(bad(&what)) };
    check(depth <= MAX_DEPTH, format!("nested more than {MAX_DEPTH} levels deep"))?;
    if let Some(dictionary) = field.dictionary() {
        let index = dictionary.indexType().ok_or_else(|| bad("a dictionary without an index type"))?;
        let bits = index.bitWidth();
        check(matches!(bits, 8 | 16 | 32 | 64), format!("a dictionary index of {bits} bits"))?;
    }
    let kind = field.type_type().variant_name().unwrap_or("unknown");
    let missing = || bad(&format!("type {kind} without its parameters"));
    let children = field.children().map_or(0, |c| c.len());
    let arity = |n: usize| {
        check(field.children().is_some() && children == n, format!("type {kind} with {children} children, not {n}"))
    };
    let time_unit = |unit: ipc::TimeUnit| {
        use ipc::TimeUnit as T;
        check(
            matches!(unit, T::SECOND | T::MILLISECOND | T::MICROSECOND | T::NANOSECOND),
            format!("a {kind} unit of {}", unit.0),
        )
    };
    field.children().into_iter().flatten().try_for_each(|child| check_ipc_field(child, depth + 1))?;
    match field.type_type() {
        Type::Null
        | Type::Bool
        | Type::Binary
        | Type::LargeBinary
        | Type::BinaryView
        | Type::Utf8
        | Type::LargeUtf8
        | Type::Utf8View
        | Type::Struct_ => Ok(()),
        Type::Int => {
            let bits = field.type_as_int().ok_or_else(missing)?.bitWidth();
            check(matches!(bits, 8 | 16 | 32 | 64), format!("an Int of {bits} bits"))
        }
        Type::FloatingPoint => {
            use ipc::Precision as P;
            let precision = field.type_as_floating_point().ok_or_else(missing)?.precision();
            check(matches!(precision, P::HALF | P::SINGLE | P::DOUBLE), format!("a float precision of {}", precision.0))
        }
        Type::Date => {
            let unit = field.type_as_date().ok_or_else(missing)?.unit();
            check(matches!(unit, ipc::DateUnit::DAY | ipc::DateUnit::MILLISECOND), format!("a Date unit of {}", unit.0))
        }
        Type::Time => {
            use ipc::TimeUnit as T;
            let time = field.type_as_time().ok_or_else(missing)?;
            let (bits, unit) = (time.bitWidth(), time.unit());
            let known = matches!((bits, unit), (32, T::SECOND | T::MILLISECOND) | (64, T::MICROSECOND | T::NANOSECOND));
            check(known, format!("a Time of {bits} bits in unit {}", unit.0))
        }
        Type::Timestamp => time_unit(field.type_as_timestamp().ok_or_else(missing)?.unit()),
        Type::Duration => time_unit(field.type_as_duration().ok_or_else(missing)?.unit()),
        Type::Interval => {
            use ipc::IntervalUnit as I;
            let unit = field.type_as_interval().ok_or_else(missing)?.unit();
            check(
                matches!(unit, I::YEAR_MONTH | I::DAY_TIME | I::MONTH_DAY_NANO),
                format!("an Interval unit of {}", unit.0),
            )
        }
        Type::FixedSizeBinary => field.type_as_fixed_size_binary().map(|_| ()).ok_or_else(missing),
        Type::Decimal => {
            let decimal = field.type_as_decimal().ok_or_else(missing)?;
            let (bits, precision, scale) = (decimal.bitWidth(), decimal.precision(), decimal.scale());
            let known =
                matches!(bits, 32 | 64 | 128 | 256) && u8::try_from(precision).is_ok() && i8::try_from(scale).is_ok();
            check(known, format!("a Decimal of {bits} bits, precision {precision} and scale {scale}"))
        }
        Type::List | Type::LargeList | Type::ListView | Type::LargeListView => arity(1),
        Type::FixedSizeList => field.type_as_fixed_size_list().ok_or_else(missing).and_then(|_| arity(1)),
        Type::Map => field.type_as_map().ok_or_else(missing).and_then(|_| arity(1)),
        Type::RunEndEncoded => arity(2),
        Type::Union => {
            let union = field.type_as_union().ok_or_else(missing)?;
            let mode = union.mode();
            check(
                matches!(mode, ipc::UnionMode::Sparse | ipc::UnionMode::Dense),
                format!("a union mode of {}", mode.0),
            )?;
            match union.typeIds() {
                // arrow-ipc numbers the members itself, in an i8.
                None => check(children <= 128, format!("a union of {children} members")),
                Some(ids) => {
                    check(ids.len() == children, format!("{} union type ids for {children} members", ids.len()))?;
                    let mut seen = 0u128;
                    for id in ids.iter() {
                        let bit = u32::try_from(id).ok().filter(|&bit| bit < 128);
                        let bit = bit.ok_or_else(|| bad(&format!("a union type id of {id}")))?;
                        check(seen & (1 << bit) == 0, format!("the union type id {id} twice"))?;
                        seen |= 1 << bit;
                    }
                    Ok(())
                }
            }
        }
        other => Err(bad(&format!("the unsupported type {}", other.variant_name().unwrap_or("of an unknown code")))),
    }
}

/// Checks what decoding batches of `field` assumes of its type beyond what
/// [`check_ipc_field`] checked, and records the dictionaries it declares.
fn check_field(field: &Field, dictionaries: &mut HashMap<i64, DataType>) -> Result<(), String> {
    #[allow(deprecated)] // arrow-ipc still finds the field a dictionary batch is for by this id.
    let dict_id = field.dict_id();
    check_type(field.name(), field.data_type(), dict_id, dictionaries)
}

/// [`check_field`] for a field named `name` of type `data_type`.
fn check_type(
    name: &str,
    data_type: &DataType,
    dict_id: Option<i64>,
    dictionaries: &mut HashMap<i64, DataType>,
) -> Result<(), String> {
    let bad = |what: String| Err(format!("field '{name}': {what}"));
    let decimal = |checked: Result<(), ArrowError>| checked.or_else(|e| bad(format!("{data_type}: {e}")));
    match data_type {
        DataType::FixedSizeBinary(size) if *size < 0 => return bad(format!("a FixedSizeBinary of {size} bytes")),
        DataType::FixedSizeList(_, size) if *size < 0 => return bad(format!("a FixedSizeList of {size} values")),
        DataType::Decimal32(p, s) => decimal(validate_decimal_precision_and_scale::<Decimal32Type>(*p, *s))?,
        DataType::Decimal64(p, s) => decimal(validate_decimal_precision_and_scale::<Decimal64Type>(*p, *s))?,
        DataType::Decimal128(p, s) => decimal(validate_decimal_precision_and_scale::<Decimal128Type>(*p, *s))?,
        DataType::Decimal256(p, s) => decimal(validate_decimal_precision_and_scale::<Decimal256Type>(*p, *s))?,
        // arrow-array expects a map's entries to be a struct of two fields, and panics when they are not.
        DataType::Map(entries, _) if !matches!(entries.data_type(), DataType::Struct(kv) if kv.len() == 2) => {
            return bad("a map whose entries are not a struct of a key and a value".into());
        }
        DataType::RunEndEncoded(ends, _) if !ends.data_type().is_run_ends_type() => {
            return bad(format!("run ends of type {}", ends.data_type()));
        }
        // arrow-data builds empty unions from their first member.
        DataType::Union(members, _) if members.is_empty() => return bad("a union without members".into()),
        DataType::Dictionary(_, values) => {
            let Some(id) = dict_id else { return bad("a dictionary without an id".into()) };
            if dictionaries.insert(id, values.as_ref().clone()).is_some() {
                return bad(format!("the dictionary id {id}, which another field has too"));
            }
            return check_type(name, values, None, dictionaries);
        }
        _ => {}
    }
    match data_type {
        DataType::List(child)
        | DataType::LargeList(child)
        | DataType::ListView(child)
        | DataType::LargeListView(child)
        | DataType::FixedSizeList(child, _)
        | DataType::Map(child, _) => check_field(child, dictionaries),
        DataType::Struct(children) => children.iter().try_for_each(|child| check_field(child, dictionaries)),
        DataType::Union(members, _) => members.iter().try_for_each(|(_, member)| check_field(member, dictionaries)),
        DataType::RunEndEncoded(ends, values) => {
            check_field(ends, dictionaries)?;
            check_field(values, dictionaries)
        }
        _ => Ok(()),
    }
}

/// Checks a record batch (a batch message's, or a dictionary batch's
/// values) against `fields`.
fn check_batch(
    batch: ipc::RecordBatch<'_>,
    fields: &Fields,
    body: &[u8],
    legacy_unions: bool,
    dictionary: bool,
    max_decompressed: usize,
) -> Result<(), String> {
    let rows = batch.length();
    if !(0..=MAX_LENGTH).contains(&rows) {
        return Err(format!("a batch of {rows} rows"));
    }
    let codec = match batch.compression().map(|c| c.codec()) {
        None => None,
        Some(codec @ (CompressionType::LZ4_FRAME | CompressionType::ZSTD)) => Some(codec),
        Some(codec) => return Err(format!("an unknown compression codec ({})", codec.0)),
    };
    // Copies of what the header holds, so no more than the message's size.
    let nodes: Vec<(i64, i64)> = batch
        .nodes()
        .ok_or("a record batch without field nodes")?
        .iter()
        .map(|node| (node.length(), node.null_count()))
        .collect();
    let buffers: Vec<(i64, i64)> = batch
        .buffers()
        .ok_or("a record batch without buffers")?
        .iter()
        .map(|buffer| (buffer.offset(), buffer.length()))
        .collect();
    let counts: Vec<i64> = batch.variadicBufferCounts().into_iter().flatten().collect();
    let mut walk = Walk {
        nodes: nodes.iter(),
        buffers: buffers.iter(),
        variadic_counts: counts.iter(),
        body,
        codec,
        legacy_unions,
        dictionary,
        max_decompressed,
        decompressed: 0,
        expanded: 0,
    };
    fields.iter().try_for_each(|field| walk.array(field))?;
    // arrow-ipc asserts that it used every count.
    if walk.variadic_counts.next().is_some() {
        return Err("more variadic buffer counts than string and binary view arrays".into());
    }
    if walk.expanded > body.len().saturating_add(walk.decompressed) {
        return Err(format!(
            "null masks of FixedSizeLists that expand to {} bytes, more than the message holds",
            walk.expanded
        ));
    }
    Ok(())
}

/// A record batch's field nodes, buffers and variadic buffer counts,
/// consumed in the order arrow-ipc's `RecordBatchDecoder::create_array`
/// consumes them.
struct Walk<'a> {
    nodes: std::slice::Iter<'a, (i64, i64)>,
    buffers: std::slice::Iter<'a, (i64, i64)>,
    variadic_counts: std::slice::Iter<'a, i64>,
    body: &'a [u8],
    codec: Option<CompressionType>,
    /// Unions carry a validity buffer (metadata versions before V5).
    legacy_unions: bool,
    /// The batch holds a dictionary's values, which are decoded from the
    /// body where it lies, at whatever alignment.
    dictionary: bool,
    max_decompressed: usize,
    /// What the compressed buffers walked so far expand to.
    decompressed: usize,
    /// The bytes of the null masks arrow-data expands to the values of
    /// FixedSizeLists whose values may not be null.
    expanded: usize,
}

/// A buffer as arrow-ipc reads it.
struct Region {
    /// Its length, decompressed.
    len: usize,
    /// Where it starts in the body, when it is read in place.
    in_place: Option<usize>,
}

impl Walk<'_> {
    /// Walks the array of `field` and its children.
    fn array(&mut self, field: &Field) -> Result<(), String> {
        let name = field.name();
        match field.data_type() {
            DataType::Null => self.node(name).map(|_| ()),
            DataType::Utf8 | DataType::Binary => self.list(name, size_of::<i32>(), false, None),
            DataType::LargeUtf8 | DataType::LargeBinary => self.list(name, size_of::<i64>(), false, None),
            DataType::List(child) | DataType::Map(child, _) => self.list(name, size_of::<i32>(), false, Some(child)),
            DataType::LargeList(child) => self.list(name, size_of::<i64>(), false, Some(child)),
            DataType::ListView(child) => self.list(name, size_of::<i32>(), true, Some(child)),
            DataType::LargeListView(child) => self.list(name, size_of::<i64>(), true, Some(child)),
            DataType::Utf8View | DataType::BinaryView => {
                let count =
                    *self.variadic_counts.next().ok_or_else(|| format!("field '{name}': no variadic buffer count"))?;
                let count = usize::try_from(count).map_err(|_| format!("field '{name}': {count} data buffers"))?;
                let (len, nulls) = self.node(name)?;
                self.validity(name, len, nulls)?;
                self.values(name, "views", size_of::<u128>(), len)?;
                (0..count).try_for_each(|_| self.buffer(name, "data").map(|_| ()))
            }
            DataType::FixedSizeList(child, size) => {
                let (len, nulls) = self.node(name)?;
                self.validity(name, len, nulls)?;
                let values = usize::try_from(*size)
                    .ok()
                    .and_then(|size| len.checked_mul(size))
                    .ok_or_else(|| format!("field '{name}': {len} lists of {size} values"))?;
                if nulls > 0 && !child.is_nullable() {
                    self.expanded = self.expanded.saturating_add(values.div_ceil(8));
                }
                self.array(child)
            }
            DataType::Struct(children) => {
                let (len, nulls) = self.node(name)?;
                self.validity(name, len, nulls)?;
                children.iter().try_for_each(|child| self.array(child))
            }
            DataType::RunEndEncoded(ends, values) => {
                self.node(name)?;
                self.array(ends)?;
                self.array(values)
            }
            DataType::Dictionary(key, _) => {
                let (len, nulls) = self.node(name)?;
                self.validity(name, len, nulls)?;
                self.values(name, "keys", key.primitive_width().unwrap_or(1), len)
            }
            DataType::Union(members, mode) => self.union(name, members, *mode),
            data_type => {
                let (len, nulls) = self.node(name)?;
                self.validity(name, len, nulls)?;
                match data_type {
                    DataType::Boolean => self.bits(name, len),
                    DataType::FixedSizeBinary(width) => {
                        let width =
                            usize::try_from(*width).map_err(|_| format!("field '{name}': {width}-byte values"))?;
                        self.bytes(name, "values", width, len)
                    }
                    _ => match data_type.primitive_width() {
                        Some(width) => self.values(name, "values", width, len),
                        None => self.buffer(name, "values").map(|_| ()),
                    },
                }
            }
        }
    }

    /// A string, binary, list, map or list view array: validity, offsets
    /// of `width` bytes (and sizes, for a view), then the values: bytes, or
    /// the array of `child`.
    fn list(&mut self, name: &str, width: usize, view: bool, child: Option<&FieldRef>) -> Result<(), String> {
        let (len, nulls) = self.node(name)?;
        self.validity(name, len, nulls)?;
        if view {
            self.values(name, "offsets", width, len)?;
            self.values(name, "sizes", width, len)?;
        } else {
            self.offsets(name, width, len)?;
        }
        match child {
            Some(child) => self.array(child),
            None => self.buffer(name, "values").map(|_| ()),
        }
    }

    /// A union: arrow-ipc slices its type ids and dense offsets to the
    /// union's length, and takes the offsets as `i32`s where they lie.
    fn union(&mut self, name: &str, members: &UnionFields, mode: UnionMode) -> Result<(), String> {
        let (len, _) = self.node(name)?;
        if self.legacy_unions {
            self.buffer(name, "validity")?;
        }
        let ids = self.buffer(name, "type ids")?;
        if ids.len < len {
            return Err(format!("field '{name}': {} type ids for {len} values", ids.len));
        }
        if mode == UnionMode::Dense {
            let offsets = self.buffer(name, "offsets")?;
            if self.dictionary {
                return Err(format!("field '{name}': a dense union among a dictionary's values"));
            }
            if offsets.len / size_of::<i32>() < len {
                return Err(format!("field '{name}': {} bytes of offsets for {len} values", offsets.len));
            }
            if let Some(at) = offsets.in_place.filter(|at| at % align_of::<i32>() != 0) {
                return Err(format!("field '{name}': offsets at byte {at} of the body, not aligned for 32-bit values"));
            }
        }
        members.iter().try_for_each(|(_, member)| self.array(member))
    }

    /// The next field node: its length and null count.
    fn node(&mut self, name: &str) -> Result<(usize, usize), String> {
        let &(len, nulls) =
            self.nodes.next().ok_or_else(|| format!("field '{name}': the batch lists too few field nodes"))?;
        if !(0..=MAX_LENGTH).contains(&len) || !(0..=len).contains(&nulls) {
            return Err(format!("field '{name}': {len} values, {nulls} of them null"));
        }
        // Both within 0..2^31, checked above.
        Ok((len as usize, nulls as usize))
    }

    /// The validity bitmap of `len` values: arrow reads it when some are
    /// null, and asserts it has a bit for each.
    fn validity(&mut self, name: &str, len: usize, nulls: usize) -> Result<(), String> {
        let bitmap = self.buffer(name, "validity")?;
        if nulls > 0 && bitmap.len < len.div_ceil(8) {
            return Err(format!("field '{name}': a validity bitmap of {} bytes for {len} values", bitmap.len));
        }
        Ok(())
    }

    /// A buffer of at least `count` values of `width` bytes, which
    /// arrow-data reads as a slice of them: it panics on a partial one.
    /// Arrow's validation refuses a shorter buffer too; checked here, the
    /// arrays of a flat batch can be built before it runs (see
    /// `super::incoming`).
    fn values(&mut self, name: &str, what: &str, width: usize, count: usize) -> Result<(), String> {
        let len = self.buffer(name, what)?.len;
        whole(name, what, len, width)?;
        enough(name, what, len, width, count)
    }

    /// The offsets of `count` strings or lists: one more than `count`,
    /// or none at all for none.
    fn offsets(&mut self, name: &str, width: usize, count: usize) -> Result<(), String> {
        let len = self.buffer(name, "offsets")?.len;
        whole(name, "offsets", len, width)?;
        if count == 0 && len == 0 { Ok(()) } else { enough(name, "offsets", len, width, count + 1) }
    }

    /// A buffer of at least `count` values of `width` bytes, read as bytes.
    fn bytes(&mut self, name: &str, what: &str, width: usize, count: usize) -> Result<(), String> {
        let len = self.buffer(name, what)?.len;
        enough(name, what, len, width, count)
    }

    /// A bitmap of at least `count` bits.
    fn bits(&mut self, name: &str, count: usize) -> Result<(), String> {
        self.bytes(name, "values", 1, count.div_ceil(8))
    }

    /// The next buffer, as arrow-ipc's `read_buffer` reads it: a slice of
    /// the body and, compressed, an 8-byte length and the compressed bytes
    /// (or -1 and the bytes themselves).
    fn buffer(&mut self, name: &str, what: &str) -> Result<Region, String> {
        let bad = |problem: String| format!("field '{name}': its {what} buffer {problem}");
        let &(offset, length) =
            self.buffers.next().ok_or_else(|| format!("field '{name}': the batch lists too few buffers"))?;
        let body = self.body;
        let outside = || bad(format!("(bytes {offset}..+{length}) lies outside the {}-byte body", body.len()));
        let (Ok(start), Ok(len)) = (usize::try_from(offset), usize::try_from(length)) else { return Err(outside()) };
        let Some(bytes) = start.checked_add(len).and_then(|end| body.get(start..end)) else { return Err(outside()) };
        let Some(codec) = self.codec.filter(|_| !bytes.is_empty()) else {
            return Ok(Region { len, in_place: Some(start) });
        };
        let Some((prefix, data)) = bytes.split_first_chunk::<8>() else {
            return Err(bad("is compressed but shorter than its 8-byte length".into()));
        };
        let declared = i64::from_le_bytes(*prefix);
        if declared == -1 {
            return Ok(Region { len: data.len(), in_place: Some(start + prefix.len()) });
        }
        let max = self.max_decompressed;
        let declared = usize::try_from(declared).map_err(|_| bad(format!("declares {declared} bytes decompressed")))?;
        self.expand(declared).ok_or_else(|| {
            bad(format!("declares {declared} bytes decompressed, more than the {max} the message may expand to"))
        })?;
        // arrow-ipc decompresses an LZ4 buffer to the end of its frames
        // whatever it declares, so the frames must agree with it.
        if codec == CompressionType::LZ4_FRAME && declared > 0 {
            let (content, blocks) = lz4_frames(data).ok_or_else(|| bad("is not a sequence of LZ4 frames".into()))?;
            if content != declared {
                return Err(bad(format!("declares {declared} bytes decompressed, but its LZ4 frames hold {content}")));
            }
            self.expand(blocks).ok_or_else(|| {
                bad(format!("has LZ4 frames whose blocks take the message past the {max} bytes it may expand to"))
            })?;
        }
        Ok(Region { len: declared, in_place: None })
    }

    /// Adds `bytes` to what the message's compressed buffers expand to;
    /// `None` past the bound.
    fn expand(&mut self, bytes: usize) -> Option<()> {
        self.decompressed = self.decompressed.checked_add(bytes).filter(|&total| total <= self.max_decompressed)?;
        Some(())
    }
}

/// Refuses a buffer of `len` bytes that ends inside a `width`-byte value.
fn whole(name: &str, what: &str, len: usize, width: usize) -> Result<(), String> {
    if !len.is_multiple_of(width) {
        return Err(format!(
            "field '{name}': a {what} buffer of {len} bytes, not a whole number of {width}-byte values"
        ));
    }
    Ok(())
}

/// Refuses a buffer of `len` bytes too short for `count` values of `width` bytes.
fn enough(name: &str, what: &str, len: usize, width: usize, count: usize) -> Result<(), String> {
    if count.checked_mul(width).is_none_or(|needed| len < needed) {
        return Err(format!("field '{name}': a {what} buffer of {len} bytes for {count} values of {width} bytes"));
    }
    Ok(())
}

/// What LZ4 frames decompress to, and the block buffers the LZ4 decoder
/// under arrow-ipc (lz4_flex) sets up and fills for them, read from the
/// frame and block headers and the blocks' sequence lengths; `None` unless
/// `input` is a sequence of well-formed frames.
fn lz4_frames(mut input: &[u8]) -> Option<(usize, usize)> {
    let (mut content, mut blocks) = (0usize, 0usize);
    while !input.is_empty() {
        let (magic, rest) = input.split_first_chunk::<4>()?;
        let (&[flags, sizes], rest) = rest.split_first_chunk::<2>()?;
        let size_id = sizes >> 4;
        if u32::from_le_bytes(*magic) != LZ4_MAGIC
            || flags & LZ4_FLG_FIXED != LZ4_FLG_VERSION_1
            || sizes & LZ4_BD_RESERVED != 0
            || size_id < 4
        {
            return None;
        }
        // Ids 4 to 7: blocks of at most 64 KiB, 256 KiB, 1 MiB, 4 MiB.
        let max_block = 1usize << (2 * usize::from(size_id) + 8);
        // Independent blocks decode into one block buffer; linked ones into
        // two and the window before them.
        let buffer = if flags & LZ4_INDEPENDENT_BLOCKS != 0 { max_block } else { 2 * max_block + LZ4_WINDOW };
        blocks = blocks.checked_add(buffer)?;
        let checksum = if flags & LZ4_BLOCK_CHECKSUMS != 0 { 4 } else { 0 };
        // The content size, when present, then the header checksum.
        input = rest.get(if flags & LZ4_CONTENT_SIZE != 0 { 9 } else { 1 }..)?;
        loop {
            let (word, rest) = input.split_first_chunk::<4>()?;
            let word = u32::from_le_bytes(*word);
            if word == 0 {
                input = rest;
                break;
            }
            let len = usize::try_from(word & !LZ4_UNCOMPRESSED).ok().filter(|&len| len <= max_block)?;
            let block = rest.get(..len)?;
            content = content.checked_add(if word & LZ4_UNCOMPRESSED != 0 { len } else { lz4_block(block)? })?;
            input = rest.get(len + checksum..)?;
        }
        if flags & LZ4_CONTENT_CHECKSUM != 0 {
            input = input.get(4..)?;
        }
    }
    Some((content, blocks))
}

/// The bytes an LZ4 block decompresses to: the sum of its sequences'
/// literal and match lengths (LZ4 block format); `None` if it is cut short.
fn lz4_block(block: &[u8]) -> Option<usize> {
    let (mut at, mut out) = (0usize, 0usize);
    loop {
        let token = *block.get(at)?;
        at += 1;
        let mut literals = usize::from(token >> 4);
        if literals == 15 {
            literals = literals.checked_add(lz4_length(block, &mut at)?)?;
        }
        at = at.checked_add(literals).filter(|&end| end <= block.len())?;
        out = out.checked_add(literals)?;
        // Only the last sequence ends after its literals.
        if at == block.len() {
            return Some(out);
        }
        // A 2-byte match offset, then a match of at least 4 bytes.
        at += 2;
        let mut matched = 4 + usize::from(token & 0x0F);
        if matched == 19 {
            matched = matched.checked_add(lz4_length(block, &mut at)?)?;
        }
        out = out.checked_add(matched)?;
    }
}

/// An LZ4 length extension at `at`: bytes summed up to the first below 255.
fn lz4_length(block: &[u8], at: &mut usize) -> Option<usize> {
    let mut sum = 0usize;
    loop {
        let byte = *block.get(*at)?;
        *at += 1;
        sum = sum.checked_add(usize::from(byte))?;
        if byte != u8::MAX {
            return Some(sum);
        }
    }
}

#[cfg(test)]
pub(super) mod tests;
