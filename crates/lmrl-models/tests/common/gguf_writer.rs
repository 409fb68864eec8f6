//! A minimal GGUF writer (test-only): enough of the format to write Llama checkpoints and
//! the malformed files the reader must refuse.

#[derive(Clone, Debug)]
pub enum Val {
    U32(u32),
    I32(i32),
    U64(u64),
    F32(f32),
    Bool(bool),
    Str(String),
    StrArr(Vec<String>),
    I32Arr(Vec<i32>),
}

pub struct GgufBuilder {
    pub version: u32,
    pub alignment: Option<u32>,
    pub kv: Vec<(String, Val)>,
    /// name, ggml dims (innermost first), ggml type, data bytes
    pub tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

impl Default for GgufBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufBuilder {
    pub fn new() -> Self {
        Self {
            version: 3,
            alignment: None,
            kv: Vec::new(),
            tensors: Vec::new(),
        }
    }

    pub fn kv(&mut self, k: &str, v: Val) -> &mut Self {
        self.kv.push((k.to_string(), v));
        self
    }

    /// Replaces the value of `k` (or adds it).
    pub fn set(&mut self, k: &str, v: Val) -> &mut Self {
        match self.kv.iter_mut().find(|(key, _)| key == k) {
            Some(entry) => entry.1 = v,
            None => self.kv.push((k.to_string(), v)),
        }
        self
    }

    pub fn remove(&mut self, k: &str) -> &mut Self {
        self.kv.retain(|(key, _)| key != k);
        self
    }

    /// Adds an f32 tensor given in row-major `shape` (stored with reversed dims, as ggml does).
    pub fn f32_tensor(&mut self, name: &str, shape: &[usize], data: &[f32]) -> &mut Self {
        let dims = shape.iter().rev().map(|&d| d as u64).collect();
        let bytes = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.tensors.push((name.to_string(), dims, 0, bytes));
        self
    }

    pub fn raw_tensor(
        &mut self,
        name: &str,
        shape: &[usize],
        ty: u32,
        bytes: Vec<u8>,
    ) -> &mut Self {
        let dims = shape.iter().rev().map(|&d| d as u64).collect();
        self.tensors.push((name.to_string(), dims, ty, bytes));
        self
    }

    pub fn build(&self) -> Vec<u8> {
        // Lays the file out with a usable alignment even when the declared one is invalid.
        let align = self.alignment.filter(|&a| a > 0).unwrap_or(32) as usize;
        let mut out = Vec::new();
        out.extend(b"GGUF");
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        let n_kv = self.kv.len() + usize::from(self.alignment.is_some());
        out.extend((n_kv as u64).to_le_bytes());
        let mut kvs = self.kv.clone();
        if let Some(a) = self.alignment {
            kvs.push(("general.alignment".into(), Val::U32(a)));
        }
        for (k, v) in &kvs {
            put_str(&mut out, k);
            match v {
                Val::U32(x) => {
                    out.extend(4u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Val::I32(x) => {
                    out.extend(5u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Val::U64(x) => {
                    out.extend(10u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Val::F32(x) => {
                    out.extend(6u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Val::Bool(x) => {
                    out.extend(7u32.to_le_bytes());
                    out.push(u8::from(*x));
                }
                Val::Str(s) => {
                    out.extend(8u32.to_le_bytes());
                    put_str(&mut out, s);
                }
                Val::StrArr(a) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(8u32.to_le_bytes());
                    out.extend((a.len() as u64).to_le_bytes());
                    for s in a {
                        put_str(&mut out, s);
                    }
                }
                Val::I32Arr(a) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(5u32.to_le_bytes());
                    out.extend((a.len() as u64).to_le_bytes());
                    for x in a {
                        out.extend(x.to_le_bytes());
                    }
                }
            }
        }
        let mut offset = 0usize;
        let mut offsets = Vec::new();
        for (_, _, _, bytes) in &self.tensors {
            offsets.push(offset);
            offset = (offset + bytes.len()).div_ceil(align) * align;
        }
        for ((name, dims, ty, _), off) in self.tensors.iter().zip(&offsets) {
            put_str(&mut out, name);
            out.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(ty.to_le_bytes());
            out.extend((*off as u64).to_le_bytes());
        }
        out.resize(out.len().div_ceil(align) * align, 0);
        let base = out.len();
        for ((_, _, _, bytes), off) in self.tensors.iter().zip(&offsets) {
            out.resize(base + off, 0);
            out.extend(bytes);
        }
        out
    }
}

/// The llama.cpp name of an HF Llama tensor (inverse of `hf_tensor_name`).
pub fn gguf_name(hf: &str) -> String {
    let fixed = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = fixed.iter().find(|(h, _)| *h == hf) {
        return g.to_string();
    }
    let rest = hf.strip_prefix("model.layers.").unwrap();
    let (layer, part) = rest.split_once('.').unwrap();
    let g = match part {
        "self_attn.q_proj.weight" => "attn_q",
        "self_attn.k_proj.weight" => "attn_k",
        "self_attn.v_proj.weight" => "attn_v",
        "self_attn.o_proj.weight" => "attn_output",
        "mlp.gate_proj.weight" => "ffn_gate",
        "mlp.up_proj.weight" => "ffn_up",
        "mlp.down_proj.weight" => "ffn_down",
        "input_layernorm.weight" => "attn_norm",
        "post_attention_layernorm.weight" => "ffn_norm",
        other => panic!("unexpected tensor {other}"),
    };
    format!("blk.{layer}.{g}.weight")
}

/// Metadata of a Llama GGUF with the given sizes (no tokenizer), as llama.cpp writes it.
pub fn llama_kv(
    b: &mut GgufBuilder,
    vocab: u32,
    hidden: u32,
    inter: u32,
    layers: u32,
    heads: u32,
    kv_heads: u32,
) {
    b.kv("general.architecture", Val::Str("llama".into()))
        .kv("llama.context_length", Val::U32(64))
        .kv("llama.embedding_length", Val::U32(hidden))
        .kv("llama.block_count", Val::U32(layers))
        .kv("llama.feed_forward_length", Val::U32(inter))
        .kv("llama.attention.head_count", Val::U32(heads))
        .kv("llama.attention.head_count_kv", Val::U32(kv_heads))
        .kv("llama.rope.freq_base", Val::F32(10000.0))
        .kv("llama.attention.layer_norm_rms_epsilon", Val::F32(1e-5))
        .kv("llama.vocab_size", Val::U32(vocab));
}

/// A complete, loadable micro Llama GGUF (vocab 8, hidden 32, 2 heads of 16, 1 KV head, MLP 16,
/// one block) with deterministic weights; the embedding is Q8_0 so that a quantised type is
/// on the path too.
pub fn micro_llama_gguf() -> GgufBuilder {
    let (vocab, hidden, inter, heads, kv_heads) = (8usize, 32usize, 16usize, 2usize, 1usize);
    let hd = hidden / heads;
    let mut b = GgufBuilder::new();
    llama_kv(
        &mut b,
        vocab as u32,
        hidden as u32,
        inter as u32,
        1,
        heads as u32,
        kv_heads as u32,
    );
    let mut seed = 1u32;
    let mut vals = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.2
            })
            .collect()
    };
    // Q8_0 rows of 32: scale 1/64, quants 0..31 shifted.
    let mut embd = Vec::new();
    for r in 0..vocab {
        embd.extend(half::f16::from_f32(1.0 / 64.0).to_le_bytes());
        embd.extend((0..32i32).map(|j| ((j + r as i32) % 32 - 16) as i8 as u8));
    }
    b.raw_tensor("token_embd.weight", &[vocab, hidden], 8, embd);
    b.f32_tensor("output_norm.weight", &[hidden], &vec![1.0; hidden]);
    let p = "blk.0";
    b.f32_tensor(
        &format!("{p}.attn_norm.weight"),
        &[hidden],
        &vec![1.0; hidden],
    );
    b.f32_tensor(
        &format!("{p}.ffn_norm.weight"),
        &[hidden],
        &vec![1.0; hidden],
    );
    b.f32_tensor(
        &format!("{p}.attn_q.weight"),
        &[heads * hd, hidden],
        &vals(heads * hd * hidden),
    );
    b.f32_tensor(
        &format!("{p}.attn_k.weight"),
        &[kv_heads * hd, hidden],
        &vals(kv_heads * hd * hidden),
    );
    b.f32_tensor(
        &format!("{p}.attn_v.weight"),
        &[kv_heads * hd, hidden],
        &vals(kv_heads * hd * hidden),
    );
    b.f32_tensor(
        &format!("{p}.attn_output.weight"),
        &[hidden, heads * hd],
        &vals(hidden * heads * hd),
    );
    b.f32_tensor(
        &format!("{p}.ffn_gate.weight"),
        &[inter, hidden],
        &vals(inter * hidden),
    );
    b.f32_tensor(
        &format!("{p}.ffn_up.weight"),
        &[inter, hidden],
        &vals(inter * hidden),
    );
    b.f32_tensor(
        &format!("{p}.ffn_down.weight"),
        &[hidden, inter],
        &vals(hidden * inter),
    );
    b
}
