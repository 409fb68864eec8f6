//! Llama (HF `LlamaForCausalLM`): RMSNorm, RoPE (rotate-half layout), grouped-query attention,
//! SwiGLU MLP. Field names follow the HF checkpoint.
//!
//! HF `nn.Linear` weights are `[out, in]`; burn's `Linear` is `[in, out]`, so they are
//! transposed once at load time (and back when saving).
use burn::module::Module;
use burn::nn::{Embedding, Linear, RmsNorm, RmsNormConfig};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::activation::silu;
use crate::attention::attention_bias;
use crate::attention::{attend, split_heads};
use crate::cache::KvCache;
use crate::config::LlamaConfig;
use crate::config::ModelConfig;
use crate::error::Result;
use crate::layers::{self as model, apply_linear, raw, raw_torch_linear};
use crate::lm::CausalLm;
use crate::packing::{Packing, packed, padded};
use crate::pretrained::Pretrained;
use crate::tensors::{RawTensor, TensorMap};

/// HF `LlamaAttention` (no biases).
#[derive(Module, Debug)]
pub struct LlamaAttention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    pub num_heads: usize,
    pub num_kv_heads: usize,
}

/// HF `LlamaMLP`: SwiGLU `down(silu(gate(x)) ⊙ up(x))`.
#[derive(Module, Debug)]
pub struct LlamaMlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

/// HF `LlamaDecoderLayer` (pre-norm residual block).
#[derive(Module, Debug)]
pub struct LlamaDecoderLayer {
    pub self_attn: LlamaAttention,
    pub mlp: LlamaMlp,
    pub input_layernorm: RmsNorm,
    pub post_attention_layernorm: RmsNorm,
}

/// HF `LlamaModel` (the `model.` level).
#[derive(Module, Debug)]
pub struct LlamaModel {
    pub embed_tokens: Embedding,
    pub layers: Vec<LlamaDecoderLayer>,
    pub norm: RmsNorm,
}

/// HF `LlamaForCausalLM`; `lm_head` is `None` when tied to `model.embed_tokens`.
#[derive(Module, Debug)]
pub struct LlamaForCausalLm {
    pub model: LlamaModel,
    pub lm_head: Option<Linear>,
    #[module(skip)]
    pub config: LlamaConfig,
}

/// RoPE tables `cos`, `sin`: `[B, 1, S, head_dim]`, shared by every layer of one forward.
pub struct Rope {
    cos: Tensor<4>,
    sin: Tensor<4>,
}

impl Rope {
    /// HF `LlamaRotaryEmbedding`: angles `pos · θ^(-2i/d)`, duplicated over both halves.
    pub fn new(position_ids: Tensor<2, Int>, head_dim: usize, theta: f64) -> Self {
        let device = position_ids.device();
        let [b, s] = position_ids.dims();
        let half = head_dim / 2;
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| (1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)) as f32)
            .collect();
        let inv_freq = Tensor::<3>::from_data(TensorData::new(inv_freq, [1, 1, half]), &device);
        let freqs = position_ids.float().reshape([b, s, 1]) * inv_freq;
        let emb = Tensor::cat(vec![freqs.clone(), freqs], 2).reshape([b, 1, s, head_dim]);
        Self {
            cos: emb.clone().cos(),
            sin: emb.sin(),
        }
    }

    /// `x·cos + rotate_half(x)·sin` for `x`: `[B, heads, S, head_dim]`.
    pub fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        let d = x.dims()[3];
        let x1 = x.clone().narrow(3, 0, d / 2);
        let x2 = x.clone().narrow(3, d / 2, d / 2);
        let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
        x * self.cos.clone() + rotated * self.sin.clone()
    }
}

impl LlamaAttention {
    fn forward(
        &self,
        x: Tensor<3>,
        rope: &Rope,
        bias: Tensor<4>,
        layer: usize,
        cache: Option<&mut KvCache>,
        packing: Option<&Packing>,
    ) -> Tensor<3> {
        // Packed rows take the padded layout for attention alone (crate::packing).
        let q = rope.apply(split_heads(
            padded(packing, apply_linear(&self.q_proj, x.clone())),
            self.num_heads,
        ));
        let mut k = rope.apply(split_heads(
            padded(packing, apply_linear(&self.k_proj, x.clone())),
            self.num_kv_heads,
        ));
        let mut v = split_heads(
            padded(packing, apply_linear(&self.v_proj, x)),
            self.num_kv_heads,
        );
        if let Some(c) = cache {
            (k, v) = c.append(layer, k, v);
        }
        apply_linear(&self.o_proj, packed(packing, attend(q, k, v, bias)))
    }
}

impl LlamaMlp {
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let gate = silu(apply_linear(&self.gate_proj, x.clone()));
        apply_linear(&self.down_proj, gate * apply_linear(&self.up_proj, x))
    }
}

impl LlamaDecoderLayer {
    fn forward(
        &self,
        x: Tensor<3>,
        rope: &Rope,
        bias: Tensor<4>,
        layer: usize,
        cache: Option<&mut KvCache>,
        packing: Option<&Packing>,
    ) -> Tensor<3> {
        let h = self.input_layernorm.forward(x.clone());
        let x = x + self.self_attn.forward(h, rope, bias, layer, cache, packing);
        let h = self.post_attention_layernorm.forward(x.clone());
        x + self.mlp.forward(h)
    }
}

impl LlamaForCausalLm {
    /// Random initialisation (N(0, 0.02) weights as HF; RMSNorms at identity).
    pub fn init(c: &LlamaConfig, device: &Device) -> Self {
        let (e, hd, inter) = (c.hidden_size, c.head_dim(), c.intermediate_size);
        let (nh, nkv) = (c.num_attention_heads, c.num_key_value_heads);
        let lin = |i, o| model::linear_init(i, o, false, device);
        let norm = || {
            RmsNormConfig::new(e)
                .with_epsilon(c.rms_norm_eps)
                .init(device)
        };
        let layer = |_| LlamaDecoderLayer {
            self_attn: LlamaAttention {
                q_proj: lin(e, nh * hd),
                k_proj: lin(e, nkv * hd),
                v_proj: lin(e, nkv * hd),
                o_proj: lin(nh * hd, e),
                num_heads: nh,
                num_kv_heads: nkv,
            },
            mlp: LlamaMlp {
                gate_proj: lin(e, inter),
                up_proj: lin(e, inter),
                down_proj: lin(inter, e),
            },
            input_layernorm: norm(),
            post_attention_layernorm: norm(),
        };
        Self {
            model: LlamaModel {
                embed_tokens: Embedding {
                    weight: model::normal_param([c.vocab_size, e], device),
                },
                layers: (0..c.num_hidden_layers).map(layer).collect(),
                norm: norm(),
            },
            lm_head: (!c.tie_word_embeddings).then(|| lin(e, c.vocab_size)),
            config: c.clone(),
        }
    }

    /// Builds the model from HF tensors (`model.…`, `lm_head.weight` unless tied).
    pub fn from_tensors(c: &LlamaConfig, t: &mut TensorMap, device: &Device) -> Result<Self> {
        let (e, eps) = (c.hidden_size, c.rms_norm_eps);
        let norm = |t: &mut TensorMap, name: &str| -> Result<RmsNorm> {
            Ok(model::rms_norm(t.take(name, &[e])?, eps, device))
        };
        let embed = t.take("model.embed_tokens.weight", &[c.vocab_size, e])?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            let p = format!("model.layers.{i}");
            layers.push(LlamaDecoderLayer {
                self_attn: attention_from(c, t, &p, device)?,
                mlp: mlp_from(c, t, &p, device)?,
                input_layernorm: norm(t, &format!("{p}.input_layernorm.weight"))?,
                post_attention_layernorm: norm(t, &format!("{p}.post_attention_layernorm.weight"))?,
            });
        }
        let norm = norm(t, "model.norm.weight")?;
        let lm_head = match c.tie_word_embeddings {
            true => None,
            false => Some(torch_linear(t, "lm_head", e, c.vocab_size, device)?),
        };
        Ok(Self {
            model: LlamaModel {
                embed_tokens: model::embedding(embed, device),
                layers,
                norm,
            },
            lm_head,
            config: c.clone(),
        })
    }

    /// Tensors under HF names, `nn.Linear` weights in PyTorch's `[out, in]` layout.
    fn hf_tensors_impl(&self) -> Vec<(String, RawTensor)> {
        let m = &self.model;
        let mut out = vec![(
            "model.embed_tokens.weight".to_string(),
            raw(m.embed_tokens.weight.val()),
        )];
        for (i, l) in m.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            let a = &l.self_attn;
            let lin = [
                ("self_attn.q_proj", &a.q_proj),
                ("self_attn.k_proj", &a.k_proj),
                ("self_attn.v_proj", &a.v_proj),
                ("self_attn.o_proj", &a.o_proj),
                ("mlp.gate_proj", &l.mlp.gate_proj),
                ("mlp.up_proj", &l.mlp.up_proj),
                ("mlp.down_proj", &l.mlp.down_proj),
            ];
            for (name, layer) in lin {
                out.push((format!("{p}.{name}.weight"), raw_torch_linear(layer)));
            }
            out.push((
                format!("{p}.input_layernorm.weight"),
                raw(l.input_layernorm.gamma.val()),
            ));
            let post = raw(l.post_attention_layernorm.gamma.val());
            out.push((format!("{p}.post_attention_layernorm.weight"), post));
        }
        out.push(("model.norm.weight".to_string(), raw(m.norm.gamma.val())));
        if let Some(head) = &self.lm_head {
            out.push(("lm_head.weight".to_string(), raw_torch_linear(head)));
        }
        out
    }
}

/// An HF `nn.Linear` without bias (`[out, in]`), transposed to burn's `[in, out]`.
fn torch_linear(
    t: &mut TensorMap,
    p: &str,
    d_in: usize,
    d_out: usize,
    device: &Device,
) -> Result<Linear> {
    let w = t.take(&format!("{p}.weight"), &[d_out, d_in])?;
    Ok(model::linear(w.transposed(), None, device))
}

fn attention_from(
    c: &LlamaConfig,
    t: &mut TensorMap,
    p: &str,
    device: &Device,
) -> Result<LlamaAttention> {
    let (e, hd) = (c.hidden_size, c.head_dim());
    let (nh, nkv) = (c.num_attention_heads, c.num_key_value_heads);
    let p = format!("{p}.self_attn");
    Ok(LlamaAttention {
        q_proj: torch_linear(t, &format!("{p}.q_proj"), e, nh * hd, device)?,
        k_proj: torch_linear(t, &format!("{p}.k_proj"), e, nkv * hd, device)?,
        v_proj: torch_linear(t, &format!("{p}.v_proj"), e, nkv * hd, device)?,
        o_proj: torch_linear(t, &format!("{p}.o_proj"), nh * hd, e, device)?,
        num_heads: nh,
        num_kv_heads: nkv,
    })
}

fn mlp_from(c: &LlamaConfig, t: &mut TensorMap, p: &str, device: &Device) -> Result<LlamaMlp> {
    let (e, i) = (c.hidden_size, c.intermediate_size);
    Ok(LlamaMlp {
        gate_proj: torch_linear(t, &format!("{p}.mlp.gate_proj"), e, i, device)?,
        up_proj: torch_linear(t, &format!("{p}.mlp.up_proj"), e, i, device)?,
        down_proj: torch_linear(t, &format!("{p}.mlp.down_proj"), i, e, device)?,
    })
}

impl LlamaForCausalLm {
    /// Embeddings, every decoder layer and the final norm: the one trunk of
    /// [`CausalLm::hidden_states`] and [`CausalLm::packed_hidden_states`] (`packing` given:
    /// `input_ids` are packed rows, `rope` and `bias` in the padded layout).
    fn trunk(
        &self,
        input_ids: Tensor<2, Int>,
        rope: &Rope,
        bias: Tensor<4>,
        mut cache: Option<&mut KvCache>,
        packing: Option<&Packing>,
    ) -> Tensor<3> {
        let mut x = model::lookup(&self.model.embed_tokens, input_ids);
        for (i, layer) in self.model.layers.iter().enumerate() {
            x = layer.forward(x, rope, bias.clone(), i, cache.as_deref_mut(), packing);
        }
        self.model.norm.forward(x)
    }
}

impl CausalLm for LlamaForCausalLm {
    fn hidden_states(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        let past = cache.as_ref().map_or(0, |c| c.len());
        let bias = attention_bias(attention_mask, past, input_ids.dims()[1]);
        let rope = Rope::new(position_ids, self.config.head_dim(), self.config.rope_theta);
        self.trunk(input_ids, &rope, bias, cache, None)
    }

    fn packed_hidden_states(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        packing: &Packing,
    ) -> Tensor<3> {
        let bias = attention_bias(packing.attention_mask(), 0, packing.seq_len());
        let rope = Rope::new(
            packing.pad_ints(position_ids),
            self.config.head_dim(),
            self.config.rope_theta,
        );
        self.trunk(input_ids, &rope, bias, None, Some(packing))
    }

    /// `lm_head`, or the token embedding transposed when tied (a strided view, no copy).
    fn lm_head(&self, hidden: Tensor<2>) -> Tensor<2> {
        match &self.lm_head {
            Some(head) => {
                let y = crate::layers::matmul(hidden, head.weight.val());
                match &head.bias {
                    Some(b) => y + b.val().unsqueeze_dim(0),
                    None => y,
                }
            }
            None => crate::layers::matmul(hidden, self.model.embed_tokens.weight.val().transpose()),
        }
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn hidden_size(&self) -> usize {
        self.config.hidden_size
    }

    fn max_positions(&self) -> usize {
        self.config.max_position_embeddings
    }

    fn eos_token_id(&self) -> Option<u32> {
        self.config.eos_token_id
    }
}

impl Pretrained for LlamaForCausalLm {
    fn hf_config(&self) -> serde_json::Value {
        ModelConfig::Llama(self.config.clone()).to_hf_json()
    }

    fn hf_tensors(&self) -> Vec<(String, RawTensor)> {
        self.hf_tensors_impl()
    }
}
