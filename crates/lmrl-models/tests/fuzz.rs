//! Property-based fuzzing of the loaders: arbitrary and mutated GGUF files, arbitrary values in
//! `config.json` fields, and mutated safetensors headers. Whatever the input, loading returns
//! a model or a typed [`ModelError`]; a panic fails the property and an abort (e.g. an
//! unbounded allocation) fails the whole test binary.
//!
//! Each property runs a small number of cases by default so that the suite stays fast;
//! `PROPTEST_CASES=N` runs `N` cases of every property instead.
mod common;

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use common::gguf_writer::{Val, micro_llama_gguf};
use lmrl_models::gguf::{GgufFile, GgufMetadata, llama_config, read_gguf};
use lmrl_models::{AutoLm, ModelConfig, TensorMap};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::Value;

fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

/// A fresh directory per test; proptest runs the cases of one test one after another.
fn work_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmrl-fuzz-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

// ---------------------------------------------------------------------------------------------
// GGUF

/// Everything a caller can do with a parsed file: read every tensor, build the config.
fn exercise_parsed(f: &GgufFile) {
    for t in &f.meta.tensors {
        let _ = f.tensor_f32(t);
    }
    let _ = llama_config(&f.meta);
}

/// Every entry point on bytes written to `path`: the header-only read, `read_gguf` and the
/// full model load.
fn exercise_file(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    let _ = GgufMetadata::read(path).map(|m| llama_config(&m));
    let _ = read_gguf(path);
    let _ = AutoLm::from_pretrained(path, &Device::flex());
}

/// A value for a `u64` field that is likely to hit a bound: extremes, powers of two, small.
fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        Just(u64::MAX),
        Just(0),
        (0u32..64).prop_map(|k| 1u64 << k),
        (0u32..64).prop_map(|k| (1u64 << k) - 1),
        0u64..1024,
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(Index),
    SetByte(Index, u8),
    SetU32(Index, u32),
    SetU64(Index, u64),
    Insert(Index, Vec<u8>),
    Remove(Index, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        (any::<Index>(), edge_u64()).prop_map(|(i, v)| Mutation::SetU32(i, v as u32)),
        (any::<Index>(), edge_u64()).prop_map(|(i, v)| Mutation::SetU64(i, v)),
        (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<Index>(), 1usize..64).prop_map(|(i, n)| Mutation::Remove(i, n)),
    ]
}

/// Applies `m` at a position within the first `focus` bytes (the header, where corruption
/// changes how the rest is read) or, if `focus` is 0, anywhere.
fn apply(bytes: &mut Vec<u8>, m: &Mutation, focus: usize) {
    let len = bytes.len();
    if len == 0 {
        return;
    }
    let span = if focus == 0 { len } else { focus.min(len) };
    let put = |bytes: &mut Vec<u8>, i: &Index, v: &[u8]| {
        let at = i.index(span);
        let end = (at + v.len()).min(bytes.len());
        bytes[at..end].copy_from_slice(&v[..end - at]);
    };
    match m {
        Mutation::Truncate(i) => bytes.truncate(i.index(len)),
        Mutation::SetByte(i, b) => put(bytes, i, &[*b]),
        Mutation::SetU32(i, v) => put(bytes, i, &v.to_le_bytes()),
        Mutation::SetU64(i, v) => put(bytes, i, &v.to_le_bytes()),
        Mutation::Insert(i, b) => {
            let at = i.index(span);
            bytes.splice(at..at, b.iter().copied());
        }
        Mutation::Remove(i, n) => {
            let at = i.index(span);
            bytes.drain(at..(at + n).min(len));
        }
    }
}

/// The micro Llama GGUF, the length of its header, and where each numeric metadata value
/// sits (offset, whether it is an `f32`).
struct Micro {
    bytes: Vec<u8>,
    header: usize,
    slots: Vec<(usize, bool)>,
}

fn micro() -> &'static Micro {
    static MICRO: std::sync::OnceLock<Micro> = std::sync::OnceLock::new();
    MICRO.get_or_init(|| {
        let b = micro_llama_gguf();
        let bytes = b.build();
        let header = GgufFile::parse(Path::new("micro.gguf"), bytes.clone())
            .expect("the micro GGUF is valid")
            .meta
            .data_offset as usize;
        let slots =
            b.kv.iter()
                .filter_map(|(k, v)| {
                    let is_f32 = match v {
                        Val::U32(_) => false,
                        Val::F32(_) => true,
                        _ => return None,
                    };
                    // The key with its length prefix is unique in the file; the value follows
                    // its 4-byte type.
                    let mut needle = (k.len() as u64).to_le_bytes().to_vec();
                    needle.extend(k.as_bytes());
                    let at = bytes.windows(needle.len()).position(|w| w == needle)?;
                    Some((at + needle.len() + 4, is_f32))
                })
                .collect();
        Micro {
            bytes,
            header,
            slots,
        }
    })
}

/// A float likely to be outside a domain.
fn edge_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        any::<f32>(),
        Just(f32::NAN),
        Just(f32::INFINITY),
        Just(f32::NEG_INFINITY),
        Just(-1.0),
        Just(0.0),
        Just(-0.0),
        Just(f32::MIN_POSITIVE),
        Just(1e-5),
    ]
}

#[derive(Debug, Clone)]
enum GgufEdit {
    /// A byte-level mutation, within the header if the flag is set.
    Raw(Mutation, bool),
    /// One numeric metadata value (layer count, widths, epsilon, ...) overwritten.
    Meta(Index, u64, f32),
}

fn gguf_edit() -> impl Strategy<Value = GgufEdit> {
    prop_oneof![
        2 => (mutation(), any::<bool>()).prop_map(|(m, h)| GgufEdit::Raw(m, h)),
        1 => (any::<Index>(), edge_u64(), edge_f32()).prop_map(|(i, u, f)| GgufEdit::Meta(i, u, f)),
    ]
}

#[test]
fn micro_llama_gguf_is_valid_and_loads() {
    // The mutations below start from this file, so it must get all the way to a model.
    let path = work_dir("micro-valid").join("micro.gguf");
    std::fs::write(&path, &micro().bytes).unwrap();
    AutoLm::from_pretrained(&path, &Device::flex()).expect("micro GGUF loads");
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn gguf_arbitrary_bytes_never_panic(
        prefix in prop_oneof![
            Just(Vec::new()),
            Just(b"GGUF\x03\0\0\0".to_vec()),
            Just(b"GGUF\x02\0\0\0".to_vec()),
        ],
        tail in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut bytes = prefix;
        bytes.extend(tail);
        if let Ok(f) = GgufFile::parse(Path::new("arb.gguf"), bytes) {
            exercise_parsed(&f);
        }
    }
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn gguf_mutations_never_panic(edits in prop::collection::vec(gguf_edit(), 1..5)) {
        let m = micro();
        let mut bytes = m.bytes.clone();
        for e in &edits {
            match e {
                GgufEdit::Raw(mutation, in_header) => {
                    apply(&mut bytes, mutation, if *in_header { m.header } else { 0 })
                }
                GgufEdit::Meta(i, u, f) => {
                    let (at, is_f32) = *i.get(&m.slots);
                    let v = if is_f32 { f.to_le_bytes() } else { (*u as u32).to_le_bytes() };
                    // Earlier raw edits may have shortened the file.
                    if let Some(dst) = bytes.get_mut(at..at + 4) {
                        dst.copy_from_slice(&v);
                    }
                }
            }
        }
        if let Ok(f) = GgufFile::parse(Path::new("mut.gguf"), bytes.clone()) {
            exercise_parsed(&f);
        }
        exercise_file(&work_dir("gguf-mut").join("mut.gguf"), &bytes);
    }
}

// ---------------------------------------------------------------------------------------------
// config.json and safetensors

/// The `config.json` fields the parser reads, per architecture.
const GPT2_FIELDS: &[&str] = &[
    "model_type",
    "architectures",
    "vocab_size",
    "n_positions",
    "n_embd",
    "n_layer",
    "n_head",
    "n_inner",
    "layer_norm_epsilon",
    "activation_function",
    "bos_token_id",
    "eos_token_id",
];
const LLAMA_FIELDS: &[&str] = &[
    "model_type",
    "architectures",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_theta",
    "max_position_embeddings",
    "tie_word_embeddings",
    "hidden_act",
    "rope_scaling",
    "attention_bias",
    "mlp_bias",
    "bos_token_id",
    "eos_token_id",
];

/// Any JSON value, weighted towards numbers near the bounds and the strings the parser knows.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::from),
        2 => any::<i64>().prop_map(Value::from),
        3 => edge_u64().prop_map(Value::from),
        2 => (0u64..=8).prop_map(Value::from),
        2 => prop::sample::select(vec![16u64, 32, 64, 128, 999, 1000, 1001]).prop_map(Value::from),
        1 => any::<f64>().prop_map(Value::from),
        2 => prop::sample::select(vec![-1.0f64, 0.0, 1e-5, 0.5, 1e300, -1e300]).prop_map(Value::from),
        1 => prop::sample::select(vec![
            "gpt2",
            "llama",
            "gelu_new",
            "gelu",
            "silu",
            "relu",
            "GPT2LMHeadModel",
            "LlamaForCausalLM",
            "",
            "none",
        ])
        .prop_map(Value::from),
        1 => "[a-z0-9_.]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            // Mostly scalars: only token ids and rope_scaling take containers at all.
            6 => inner.clone(),
            1 => prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            1 => prop::collection::btree_map("[a-z_]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A directory holding a copy of fixture `name`'s weights, for configs to be written beside.
fn fixture_copy(name: &str, tag: &str) -> PathBuf {
    let dir = work_dir(tag);
    let dst = dir.join("model.safetensors");
    if !dst.exists() {
        std::fs::copy(fixture(name).join("model.safetensors"), &dst).unwrap();
    }
    dir
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn fuzz_config(name: &str, edits: &[(Index, Value)], replace_root: Option<&Value>) {
    let dir = fixture_copy(name, &format!("cfg-{name}"));
    let mut cfg = read_json(&fixture(name).join("config.json"));
    let fields = if name == "llama-tiny" {
        LLAMA_FIELDS
    } else {
        GPT2_FIELDS
    };
    for (i, v) in edits {
        cfg[*i.get(fields)] = v.clone();
    }
    if let Some(root) = replace_root {
        cfg = root.clone();
    }
    let _ = ModelConfig::from_hf_json(&dir.join("config.json"), &cfg);
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let _ = AutoLm::from_pretrained(&dir, &Device::flex());
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn config_json_arbitrary_fields_never_panic(
        llama in any::<bool>(),
        edits in prop::collection::vec((any::<Index>(), json_value()), 1..3),
        root in prop::option::weighted(0.05, json_value()),
    ) {
        let name = if llama { "llama-tiny" } else { "gpt2-tiny" };
        fuzz_config(name, &edits, root.as_ref());
    }
}

#[derive(Debug, Clone)]
enum StMutation {
    /// A byte of the 8-byte length or the JSON header.
    Header(Mutation),
    /// A digit run of the JSON header (a shape, an offset) replaced by another number.
    Number(Index, String),
    /// The length prefix set outright.
    Length(u64),
}

fn st_mutation() -> impl Strategy<Value = StMutation> {
    prop_oneof![
        mutation().prop_map(StMutation::Header),
        (
            any::<Index>(),
            prop_oneof![
                edge_u64().prop_map(|v| v.to_string()),
                Just("-1".to_string()),
                Just("1e30".to_string()),
                Just("0.5".to_string()),
            ]
        )
            .prop_map(|(i, s)| StMutation::Number(i, s)),
        edge_u64().prop_map(StMutation::Length),
    ]
}

fn apply_st(bytes: &mut Vec<u8>, m: &StMutation) {
    let header_end = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        .and_then(|n| usize::try_from(n).ok())
        .and_then(|n| n.checked_add(8))
        .filter(|&e| e <= bytes.len());
    match m {
        StMutation::Header(m) => apply(bytes, m, header_end.unwrap_or(8)),
        StMutation::Length(v) if bytes.len() >= 8 => bytes[..8].copy_from_slice(&v.to_le_bytes()),
        StMutation::Length(_) => {}
        StMutation::Number(i, s) => {
            let Some(end) = header_end else { return };
            let text = &bytes[8..end];
            let mut runs = Vec::new();
            let mut j = 0;
            while j < text.len() {
                if text[j].is_ascii_digit() {
                    let start = j;
                    while j < text.len() && text[j].is_ascii_digit() {
                        j += 1;
                    }
                    runs.push((8 + start, 8 + j));
                } else {
                    j += 1;
                }
            }
            if runs.is_empty() {
                return;
            }
            let (a, b) = *i.get(&runs);
            // Keep the header length consistent with the edited text, so that the edit is
            // read as JSON rather than rejected by the length check alone.
            let grow = s.len() as i64 - (b - a) as i64;
            bytes.splice(a..b, s.bytes());
            let n = (end - 8) as i64 + grow;
            bytes[..8].copy_from_slice(&(n as u64).to_le_bytes());
        }
    }
}

fn safetensors_bytes(name: &str) -> &'static [u8] {
    static GPT2: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    static LLAMA: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let cell = if name == "llama-tiny" { &LLAMA } else { &GPT2 };
    cell.get_or_init(|| std::fs::read(fixture(name).join("model.safetensors")).unwrap())
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn safetensors_mutations_never_panic(
        llama in any::<bool>(),
        muts in prop::collection::vec(st_mutation(), 1..4),
    ) {
        let name = if llama { "llama-tiny" } else { "gpt2-tiny" };
        let dir = work_dir(&format!("st-{name}"));
        std::fs::copy(fixture(name).join("config.json"), dir.join("config.json")).unwrap();
        let mut bytes = safetensors_bytes(name).to_vec();
        for m in &muts {
            apply_st(&mut bytes, m);
        }
        let path = dir.join("model.safetensors");
        std::fs::write(&path, &bytes).unwrap();
        let _ = TensorMap::from_safetensors(&path);
        let _ = AutoLm::from_pretrained(&dir, &Device::flex());
    }
}
