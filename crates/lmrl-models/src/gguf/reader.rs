//! The GGUF container: header, metadata key/value pairs, tensor infos, alignment, and the
//! bytes of one tensor.
//!
//! File layout (all little-endian), see llama.cpp's `docs/gguf.md`:
//! `"GGUF"`, `u32` version, `u64` tensor count, `u64` metadata count, the metadata key/value
//! pairs, one info record per tensor (name, dims innermost first, ggml type, offset relative to
//! the data section), padding to `general.alignment` (default 32), then the tensor data.
//!
//! The header is parsed (`header.rs`) from a stream that knows the file's length, so every count, length
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
use super::header::parse_header;

/// `general.alignment` when the file does not set it.
pub const DEFAULT_ALIGNMENT: u64 = 32;
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
pub(super) fn tensor_len(path: &Path, t: &GgufTensorInfo) -> Result<Option<u64>> {
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
