//! The GGUF container: header, metadata key/value pairs, tensor infos, alignment, and the
//! bytes of one tensor.
//!
//! File layout (all little-endian), see llama.cpp's `docs/gguf.md`:
//! `"GGUF"`, `u32` version, `u64` tensor count, `u64` metadata count, the metadata key/value
//! pairs, one info record per tensor (name, dims innermost first, ggml type, offset relative to
//! the data section), padding to `general.alignment` (default 32), then the tensor data.
//!
//! The header is parsed from a stream that knows the file's length, so every count, length
//! and offset is checked against the bytes that are actually there before anything is
//! allocated for it: a truncated or corrupt file gives [`ModelError::Format`], never a panic
//! or an allocation the file cannot back. Opening a file reads only the header; tensor data
//! is read (seek + read) when a tensor is asked for, so start-up reads each byte once.
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{ModelError, Result};
use crate::tensors::RawTensor;

use super::dequant::{GgmlType, dequantize};

/// `general.alignment` when the file does not set it.
pub const DEFAULT_ALIGNMENT: u64 = 32;
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
/// Buffer of the header read: large enough that a tokenizer-sized header takes a few reads.
const HEADER_BUF_BYTES: usize = 1 << 20;

/// One metadata value. Arrays keep their elements as values (GGUF arrays are homogeneous).
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValue {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, if it is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// The value as a float, for float and integer values.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            // The f64 whose shortest decimal form is the f32's (1e-6, not 9.99999997e-7): the
            // value the converter wrote before GGUF narrowed it to f32.
            GgufValue::F32(v) => Some(v.to_string().parse().unwrap_or(v.into())),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// GGUF's name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            GgufValue::U8(_) => "UINT8",
            GgufValue::I8(_) => "INT8",
            GgufValue::U16(_) => "UINT16",
            GgufValue::I16(_) => "INT16",
            GgufValue::U32(_) => "UINT32",
            GgufValue::I32(_) => "INT32",
            GgufValue::F32(_) => "FLOAT32",
            GgufValue::Bool(_) => "BOOL",
            GgufValue::String(_) => "STRING",
            GgufValue::Array(_) => "ARRAY",
            GgufValue::U64(_) => "UINT64",
            GgufValue::I64(_) => "INT64",
            GgufValue::F64(_) => "FLOAT64",
        }
    }
}

/// One tensor record of the file.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensorInfo {
    /// llama.cpp's name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions as stored, innermost (fastest-varying) first: `ne[0], ne[1], …`.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Byte offset of the data, relative to [`GgufMetadata::data_offset`].
    pub offset: u64,
}

impl GgufTensorInfo {
    /// Row-major shape (outermost first): the reverse of the stored dims.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// Number of elements; saturates for dims that were edited after parsing to overflow
    /// (parsing rejects those), so that the size checks downstream refuse them.
    pub fn num_elements(&self) -> usize {
        self.dims
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
            .unwrap_or(usize::MAX)
    }
}

/// Everything in a GGUF file except the tensor data.
#[derive(Debug, Clone)]
pub struct GgufMetadata {
    pub path: PathBuf,
    pub version: u32,
    /// Data alignment (`general.alignment`, default 32).
    pub alignment: u64,
    /// Absolute offset of the tensor data section in the file.
    pub data_offset: u64,
    pub kv: BTreeMap<String, GgufValue>,
    pub tensors: Vec<GgufTensorInfo>,
}

impl GgufMetadata {
    /// Reads only the header of `path` (metadata and tensor infos, not the tensor data): what
    /// the tokenizer and the configuration need.
    pub fn read(path: &Path) -> Result<Self> {
        open_header(path).map(|(meta, ..)| meta)
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.kv.get(key)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(GgufValue::as_str)
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// `general.architecture` (e.g. `llama`).
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    /// A required unsigned integer; the error names the key.
    pub fn require_u64(&self, key: &str) -> Result<u64> {
        match self.get(key) {
            None => Err(self.config_err(key, "missing")),
            Some(v) => v.as_u64().ok_or_else(|| {
                self.config_err(
                    key,
                    format!("expected an unsigned integer, found {}", v.type_name()),
                )
            }),
        }
    }

    /// An optional unsigned integer: missing is `None`, a wrong type is an error.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                self.config_err(
                    key,
                    format!("expected an unsigned integer, found {}", v.type_name()),
                )
            }),
        }
    }

    /// An optional float: missing is `None`, a wrong type is an error.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                self.config_err(key, format!("expected a number, found {}", v.type_name()))
            }),
        }
    }

    /// A required array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn string_array(&self, key: &str) -> Result<Vec<&str>> {
        let v = self
            .get(key)
            .ok_or_else(|| self.config_err(key, "missing"))?;
        let arr = v.as_array().ok_or_else(|| {
            self.config_err(
                key,
                format!("expected an array of strings, found {}", v.type_name()),
            )
        })?;
        arr.iter()
            .enumerate()
            .map(|(i, e)| {
                e.as_str().ok_or_else(|| {
                    self.config_err(
                        key,
                        format!("element {i} is {}, expected STRING", e.type_name()),
                    )
                })
            })
            .collect()
    }

    pub(crate) fn config_err(&self, field: &str, reason: impl Into<String>) -> ModelError {
        ModelError::Config {
            path: self.path.clone(),
            field: field.to_string(),
            reason: reason.into(),
        }
    }
}

/// A GGUF file: its parsed header, and the source its tensors are read from on demand.
#[derive(Debug)]
pub struct GgufFile {
    pub meta: GgufMetadata,
    data: Data,
}

#[derive(Debug)]
enum Data {
    Memory(Vec<u8>),
    /// The open file and its length when the header was read. A mutex, not `&mut self`, so
    /// that tensors can be read while `meta` is borrowed.
    File {
        file: Mutex<File>,
        len: u64,
    },
}

impl GgufFile {
    /// Reads the header of `path` and keeps the file open for [`GgufFile::tensor_bytes`].
    ///
    /// Tensor data is read with `read`, not memory-mapped, so that a file truncated by
    /// someone else while in use gives an error instead of a `SIGBUS`.
    pub fn open(path: &Path) -> Result<Self> {
        let (meta, file, len) = open_header(path)?;
        Ok(Self {
            meta,
            data: Data::File {
                file: Mutex::new(file),
                len,
            },
        })
    }

    /// Parses GGUF bytes held in memory; `path` is only used in error messages.
    pub fn parse(path: &Path, bytes: Vec<u8>) -> Result<Self> {
        let meta = parse_header(path, &mut bytes.as_slice(), bytes.len() as u64)?;
        Ok(Self {
            meta,
            data: Data::Memory(bytes),
        })
    }

    /// The raw bytes of one tensor. Bounds were checked when the header was parsed and are
    /// checked again here, since `meta` is public and may have been edited.
    pub fn tensor_bytes(&self, info: &GgufTensorInfo) -> Result<Cow<'_, [u8]>> {
        let len = tensor_len(&self.meta.path, info)?.ok_or_else(|| self.unsupported(info))?;
        let file_len = match &self.data {
            Data::Memory(b) => b.len() as u64,
            Data::File { len, .. } => *len,
        };
        let start = self.meta.data_offset.checked_add(info.offset);
        let range = start
            .and_then(|s| Some((s, s.checked_add(len)?)))
            .filter(|&(_, e)| e <= file_len)
            .ok_or_else(|| {
                format_err(
                    &self.meta.path,
                    format!("data of tensor `{}` lies outside the file", info.name),
                )
            })?;
        match &self.data {
            // Both ends are at most the length of the slice, so they fit in usize.
            Data::Memory(b) => Ok(Cow::Borrowed(&b[range.0 as usize..range.1 as usize])),
            Data::File { file, .. } => {
                let io = |source| ModelError::Io {
                    path: self.meta.path.clone(),
                    source,
                };
                let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
                f.seek(SeekFrom::Start(range.0)).map_err(io)?;
                // `len` ends within the file's length, so the buffer is backed by real data.
                let mut buf = vec![0u8; len as usize];
                match f.read_exact(&mut buf) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                        return Err(format_err(
                            &self.meta.path,
                            format!(
                                "truncated while reading: tensor `{}` needs {len} bytes at offset {}",
                                info.name, range.0
                            ),
                        ));
                    }
                    Err(e) => return Err(io(e)),
                }
                Ok(Cow::Owned(buf))
            }
        }
    }

    /// Dequantises one tensor to f32, keeping llama.cpp's name and giving a row-major shape.
    pub fn tensor_f32(&self, info: &GgufTensorInfo) -> Result<RawTensor> {
        let bytes = self.tensor_bytes(info)?;
        // `tensor_bytes` refused unsupported types and gave exactly the tensor's size, so a
        // refusal here can only be a byte count that does not match the element count.
        let n = info.num_elements();
        let data = dequantize(info.ggml_type, &bytes, n).ok_or_else(|| {
            format_err(
                &self.meta.path,
                format!(
                    "tensor `{}` ({}): {} bytes do not hold {n} elements",
                    info.name,
                    info.ggml_type.name(),
                    bytes.len()
                ),
            )
        })?;
        Ok(RawTensor::new(info.shape(), data))
    }

    fn unsupported(&self, info: &GgufTensorInfo) -> ModelError {
        ModelError::UnsupportedDtype {
            path: self.meta.path.clone(),
            tensor: info.name.clone(),
            dtype: info.ggml_type.name(),
        }
    }
}

/// Opens `path` and parses its header through a buffered reader, so that only the header
/// (and at most one buffer beyond it) is read; returns the file and its length for later
/// tensor reads.
fn open_header(path: &Path) -> Result<(GgufMetadata, File, u64)> {
    let io = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut reader = BufReader::with_capacity(HEADER_BUF_BYTES, file);
    let meta = parse_header(path, &mut reader, len)?;
    Ok((meta, reader.into_inner(), len))
}

/// Bytes of `t`'s data, or `None` for a type this reader cannot dequantise (its block layout,
/// and so its extent, is unknown). Dims whose product overflows, and a row (`ne[0]`) that is
/// not a whole number of the type's blocks (ggml quantises row by row), are format errors
/// naming the tensor.
fn tensor_len(path: &Path, t: &GgufTensorInfo) -> Result<Option<u64>> {
    let n = t
        .dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| usize::try_from(n).is_ok())
        .ok_or_else(|| {
            format_err(
                path,
                format!("tensor `{}` has implausible dims {:?}", t.name, t.dims),
            )
        })?;
    let Some((elems, _)) = t.ggml_type.block_layout() else {
        return Ok(None);
    };
    let row = t.dims.first().copied().unwrap_or(1);
    if !row.is_multiple_of(elems as u64) {
        return Err(format_err(
            path,
            format!(
                "tensor `{}` ({}) row length {row} is not a multiple of the block size {elems}",
                t.name,
                t.ggml_type.name(),
            ),
        ));
    }
    t.ggml_type.byte_size(n).map(Some).ok_or_else(|| {
        format_err(
            path,
            format!(
                "tensor `{}` ({}) of {n} elements is too large",
                t.name,
                t.ggml_type.name()
            ),
        )
    })
}

pub(crate) fn format_err(path: &Path, reason: impl Into<String>) -> ModelError {
    ModelError::Format {
        path: path.to_path_buf(),
        format: "GGUF",
        reason: reason.into(),
    }
}

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
fn parse_header(path: &Path, src: &mut impl Read, len: u64) -> Result<GgufMetadata> {
    let mut c = Cursor {
        path,
        src,
        pos: 0,
        len,
    };
    let magic = c.array::<4>("magic")?;
    if &magic != b"GGUF" {
        return Err(format_err(
            path,
            format!("bad magic {magic:02x?}, expected \"GGUF\""),
        ));
    }
    let version = c.u32("version")?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(format_err(
                path,
                "GGUF version 1 (32-bit counts) is not supported; convert to v3",
            ));
        }
        v if v.swap_bytes() <= 3 => {
            return Err(format_err(path, "big-endian GGUF files are not supported"));
        }
        v => return Err(format_err(path, format!("unsupported GGUF version {v}"))),
    }
    // Both counts are checked against the bytes left before the loops that consume them, so
    // the error names the count rather than whatever record happens to run off the end.
    let tensor_count = c.u64("tensor count")?;
    let kv_count = c.count("metadata count", MIN_KV_BYTES)?;

    let mut kv = BTreeMap::new();
    for i in 0..kv_count {
        let key = c.string(&format!("metadata key #{i}"), MAX_KEY_LEN)?;
        let ty = c.u32(&format!("type of metadata `{key}`"))?;
        let value = c.value(ty, &format!("metadata `{key}`"), 0)?;
        if kv.insert(key.clone(), value).is_some() {
            return Err(format_err(path, format!("duplicate metadata key `{key}`")));
        }
    }

    let alignment = match kv.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => v.as_u64().filter(|a| a.is_power_of_two()).ok_or_else(|| {
            format_err(
                path,
                format!("general.alignment {v:?} is not a power of two"),
            )
        })?,
    };

    if tensor_count > c.remaining() / MIN_TENSOR_INFO_BYTES {
        return Err(format_err(
            path,
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
                path,
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

    let data_offset = c
        .pos
        .div_ceil(alignment)
        .checked_mul(alignment)
        .ok_or_else(|| format_err(path, format!("alignment {alignment} overflows")))?;
    // A file without tensors (e.g. a vocabulary-only GGUF) may end before the padding.
    let data_len = len
        .checked_sub(data_offset)
        .or(tensors.is_empty().then_some(0))
        .ok_or_else(|| {
            format_err(
                path,
                format!(
                    "truncated: data section should start at {data_offset}, file has {len} bytes"
                ),
            )
        })?;
    let mut seen = std::collections::HashSet::new();
    for t in &tensors {
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

    Ok(GgufMetadata {
        path: path.to_path_buf(),
        version,
        alignment,
        data_offset,
        kv,
        tensors,
    })
}
