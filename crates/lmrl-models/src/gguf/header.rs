//! Parsing the GGUF header, in the order the file lays it out: magic and version, the two
//! counts, the metadata key/value pairs, the alignment they set, the tensor infos, then where
//! the data section starts and whether every tensor fits in it. Every read goes through a
//! [`Cursor`] that checks it against the file's length first, so a corrupt count is an error
//! naming it, not an allocation.
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use crate::error::{ModelError, Result};

use super::dequant::GgmlType;
use super::reader::{
    DEFAULT_ALIGNMENT, GgufMetadata, GgufTensorInfo, GgufValue, format_err, tensor_len,
};

/// ggml tensors have at most four dimensions (`GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;
/// Nested metadata arrays deeper than this are rejected (protects the stack on crafted input).
const MAX_ARRAY_DEPTH: usize = 8;
/// The format's limit on metadata keys (`docs/gguf.md`: at most 2^16 − 1 bytes).
const MAX_KEY_LEN: u64 = (1 << 16) - 1;
/// The format's limit on tensor names (`docs/gguf.md`: at most 64 bytes).
const MAX_TENSOR_NAME_LEN: u64 = 64;
/// Smallest encodings, used to reject counts the rest of the file cannot hold: a key/value
/// pair is a key length, a type and at least one byte of value; a tensor info is a name
/// length, a rank, one dim, a type and an offset.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;
/// Vectors sized from a count in the file start at most this large and grow with what is
/// actually parsed, so a count that passed the bounds check still cannot reserve more memory
/// than the elements that follow it take.
const MAX_PREALLOC: usize = 1 << 16;

/// A stream over the file whose every read is checked against the file's length first.
struct Cursor<'a, R> {
    path: &'a Path,
    src: R,
    pos: u64,
    len: u64,
}

impl<R: Read> Cursor<'_, R> {
    fn remaining(&self) -> u64 {
        self.len - self.pos
    }

    fn truncated(&self, what: &str, n: u64) -> ModelError {
        format_err(
            self.path,
            format!(
                "truncated: {what} needs {n} bytes at offset {}, file has {}",
                self.pos, self.len
            ),
        )
    }

    /// Reads exactly `buf.len()` bytes, which the caller has checked are within the file.
    fn fill(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        let n = buf.len() as u64;
        if n > self.remaining() {
            return Err(self.truncated(what, n));
        }
        match self.src.read_exact(buf) {
            Ok(()) => {
                self.pos += n;
                Ok(())
            }
            // The file was shorter than its length said: it changed while being read.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(self.truncated(what, n)),
            Err(source) => Err(ModelError::Io {
                path: self.path.to_path_buf(),
                source,
            }),
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        self.fill(&mut a, what)?;
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A length-prefixed UTF-8 string (u64 length) of at most `max` bytes.
    fn string(&mut self, what: &str, max: u64) -> Result<String> {
        let len = self.u64(what)?;
        if len > max {
            return Err(format_err(
                self.path,
                format!(
                    "{what}: string length {len} at offset {} exceeds the limit of {max} bytes",
                    self.pos - 8
                ),
            ));
        }
        if len > self.remaining() {
            return Err(format_err(
                self.path,
                format!(
                    "{what}: string length {len} at offset {} exceeds the {} bytes left",
                    self.pos - 8,
                    self.remaining()
                ),
            ));
        }
        // `len` is at most the bytes left in the file, so the buffer is backed by real data.
        let mut raw = vec![0u8; len as usize];
        self.fill(&mut raw, what)?;
        String::from_utf8(raw)
            .map_err(|e| format_err(self.path, format!("{what}: invalid UTF-8: {e}")))
    }

    /// A count of items that each take at least `min_size` bytes, checked against what is left.
    fn count(&mut self, what: &str, min_size: u64) -> Result<u64> {
        let count = self.u64(what)?;
        if count > self.remaining() / min_size {
            return Err(format_err(
                self.path,
                format!(
                    "{what}: count {count} exceeds what the {} bytes left can hold",
                    self.remaining()
                ),
            ));
        }
        Ok(count)
    }

    fn value(&mut self, ty: u32, what: &str, depth: usize) -> Result<GgufValue> {
        Ok(match ty {
            0 => GgufValue::U8(u8::from_le_bytes(self.array(what)?)),
            1 => GgufValue::I8(i8::from_le_bytes(self.array(what)?)),
            2 => GgufValue::U16(u16::from_le_bytes(self.array(what)?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.array(what)?)),
            4 => GgufValue::U32(u32::from_le_bytes(self.array(what)?)),
            5 => GgufValue::I32(i32::from_le_bytes(self.array(what)?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array(what)?)),
            7 => {
                let [b] = self.array::<1>(what)?;
                match b {
                    0 => GgufValue::Bool(false),
                    1 => GgufValue::Bool(true),
                    other => {
                        return Err(format_err(
                            self.path,
                            format!("{what}: invalid BOOL byte {other}"),
                        ));
                    }
                }
            }
            8 => GgufValue::String(self.string(what, u64::MAX)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(format_err(
                        self.path,
                        format!("{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}"),
                    ));
                }
                let elem_ty = self.u32(what)?;
                let min_size = match elem_ty {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    // A nested array: element type and count.
                    _ => 12,
                };
                let count = self.count(&format!("{what}: array length"), min_size)?;
                let mut items = Vec::with_capacity((count as usize).min(MAX_PREALLOC));
                for _ in 0..count {
                    items.push(self.value(elem_ty, what, depth + 1)?);
                }
                GgufValue::Array(items)
            }
            10 => GgufValue::U64(u64::from_le_bytes(self.array(what)?)),
            11 => GgufValue::I64(i64::from_le_bytes(self.array(what)?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array(what)?)),
            other => {
                return Err(format_err(
                    self.path,
                    format!("{what}: unknown metadata value type {other}"),
                ));
            }
        })
    }
}

/// Parses the header, metadata and tensor infos from `src`, a stream of a file of `len`
/// bytes, and checks every tensor's data range against `len`.
pub(super) fn parse_header(path: &Path, src: &mut impl Read, len: u64) -> Result<GgufMetadata> {
    let mut c = Cursor {
        path,
        src,
        pos: 0,
        len,
    };
    let version = read_magic_and_version(&mut c)?;
    // Both counts are checked against the bytes left before the loops that consume them, so
    // the error names the count rather than whatever record happens to run off the end.
    let tensor_count = c.u64("tensor count")?;
    let kv_count = c.count("metadata count", MIN_KV_BYTES)?;
    let kv = read_key_values(&mut c, kv_count)?;
    let alignment = alignment_of(path, &kv)?;
    let tensors = read_tensor_infos(&mut c, tensor_count)?;
    let (data_offset, data_len) = data_section(path, c.pos, len, alignment, tensors.is_empty())?;
    check_tensor_ranges(path, &tensors, alignment, data_len)?;
    Ok(GgufMetadata {
        path: path.to_path_buf(),
        version,
        alignment,
        data_offset,
        kv,
        tensors,
    })
}

/// The `"GGUF"` magic and the format version; only little-endian v2 and v3 are read.
fn read_magic_and_version<R: Read>(c: &mut Cursor<'_, R>) -> Result<u32> {
    let magic = c.array::<4>("magic")?;
    if &magic != b"GGUF" {
        return Err(format_err(
            c.path,
            format!("bad magic {magic:02x?}, expected \"GGUF\""),
        ));
    }
    let version = c.u32("version")?;
    match version {
        2 | 3 => Ok(version),
        1 => Err(format_err(
            c.path,
            "GGUF version 1 (32-bit counts) is not supported; convert to v3",
        )),
        v if v.swap_bytes() <= 3 => Err(format_err(
            c.path,
            "big-endian GGUF files are not supported",
        )),
        v => Err(format_err(c.path, format!("unsupported GGUF version {v}"))),
    }
}

/// The `kv_count` metadata key/value pairs; a key given twice is an error.
fn read_key_values<R: Read>(
    c: &mut Cursor<'_, R>,
    kv_count: u64,
) -> Result<BTreeMap<String, GgufValue>> {
    let mut kv = BTreeMap::new();
    for i in 0..kv_count {
        let key = c.string(&format!("metadata key #{i}"), MAX_KEY_LEN)?;
        let ty = c.u32(&format!("type of metadata `{key}`"))?;
        let value = c.value(ty, &format!("metadata `{key}`"), 0)?;
        if kv.insert(key.clone(), value).is_some() {
            return Err(format_err(
                c.path,
                format!("duplicate metadata key `{key}`"),
            ));
        }
    }
    Ok(kv)
}

/// `general.alignment` (a power of two), or [`DEFAULT_ALIGNMENT`] when the file sets none.
fn alignment_of(path: &Path, kv: &BTreeMap<String, GgufValue>) -> Result<u64> {
    match kv.get("general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(v) => v.as_u64().filter(|a| a.is_power_of_two()).ok_or_else(|| {
            format_err(
                path,
                format!("general.alignment {v:?} is not a power of two"),
            )
        }),
    }
}

/// The `tensor_count` tensor info records (name, dims, ggml type, offset).
fn read_tensor_infos<R: Read>(
    c: &mut Cursor<'_, R>,
    tensor_count: u64,
) -> Result<Vec<GgufTensorInfo>> {
    if tensor_count > c.remaining() / MIN_TENSOR_INFO_BYTES {
        return Err(format_err(
            c.path,
            format!(
                "tensor count {tensor_count} exceeds what the {} bytes left can hold",
                c.remaining()
            ),
        ));
    }
    let mut tensors = Vec::with_capacity((tensor_count as usize).min(MAX_PREALLOC));
    for i in 0..tensor_count {
        let name = c.string(&format!("name of tensor #{i}"), MAX_TENSOR_NAME_LEN)?;
        let n_dims = c.u32(&format!("rank of tensor `{name}`"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(format_err(
                c.path,
                format!("tensor `{name}` has {n_dims} dims (1..={MAX_DIMS} allowed)"),
            ));
        }
        let mut dims = Vec::with_capacity(MAX_DIMS as usize);
        for _ in 0..n_dims {
            dims.push(c.u64(&format!("dims of tensor `{name}`"))?);
        }
        let ggml_type = GgmlType::from_u32(c.u32(&format!("type of tensor `{name}`"))?);
        let offset = c.u64(&format!("offset of tensor `{name}`"))?;
        tensors.push(GgufTensorInfo {
            name,
            dims,
            ggml_type,
            offset,
        });
    }
    Ok(tensors)
}

/// Where the data section starts (the end of the header `header_end` rounded up to
/// `alignment`) and how many bytes it has in a file of `len` bytes.
fn data_section(
    path: &Path,
    header_end: u64,
    len: u64,
    alignment: u64,
    no_tensors: bool,
) -> Result<(u64, u64)> {
    let data_offset = header_end
        .div_ceil(alignment)
        .checked_mul(alignment)
        .ok_or_else(|| format_err(path, format!("alignment {alignment} overflows")))?;
    // A file without tensors (e.g. a vocabulary-only GGUF) may end before the padding.
    let data_len = len
        .checked_sub(data_offset)
        .or(no_tensors.then_some(0))
        .ok_or_else(|| {
            format_err(
                path,
                format!(
                    "truncated: data section should start at {data_offset}, file has {len} bytes"
                ),
            )
        })?;
    Ok((data_offset, data_len))
}

/// Every tensor named once, aligned, and (when its type's layout is known) within the
/// `data_len` bytes of the data section.
fn check_tensor_ranges(
    path: &Path,
    tensors: &[GgufTensorInfo],
    alignment: u64,
    data_len: u64,
) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for t in tensors {
        if !seen.insert(t.name.as_str()) {
            return Err(format_err(path, format!("duplicate tensor `{}`", t.name)));
        }
        let size = tensor_len(path, t)?;
        if !t.offset.is_multiple_of(alignment) {
            return Err(format_err(
                path,
                format!(
                    "tensor `{}` offset {} is not a multiple of the alignment {alignment}",
                    t.name, t.offset
                ),
            ));
        }
        // Unsupported types are only an error if someone asks for the tensor; their extent
        // cannot be checked without knowing their block layout.
        if let Some(size) = size
            && t.offset.checked_add(size).is_none_or(|e| e > data_len)
        {
            return Err(format_err(
                path,
                format!(
                    "truncated: tensor `{}` needs bytes {}..{} of the data section, which has {data_len}",
                    t.name,
                    t.offset,
                    t.offset.saturating_add(size)
                ),
            ));
        }
    }
    Ok(())
}
