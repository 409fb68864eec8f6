//! Llama (HF `LlamaForCausalLM`): RMSNorm, RoPE (rotate-half layout), grouped-query attention,
//! SwiGLU MLP. Field names follow the HF checkpoint. The same trunk runs Mistral, Qwen2 and
//! Qwen3, whose differences are options of [`LlamaConfig`] (biases, per-head q/k norms, RoPE
//! scaling, window): see `mistral.rs`, `qwen2.rs`, `qwen3.rs`.
//!
//! HF `nn.Linear` weights are `[out, in]`; burn's `Linear` is `[in, out]`, so they are
//! transposed once at load time (and back when saving).
use burn::module::Module;
use burn::nn::{Embedding, Linear, RmsNorm, RmsNormConfig};
use burn::tensor::{Device, Int, Tensor};

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
use crate::rope::Rope;
use crate::tensors::{RawTensor, TensorMap};

/// HF `LlamaAttention` (biases where the config asks for them), with Qwen3's per-head
/// `q_norm` and `k_norm`.
#[derive(Module, Debug)]
pub struct LlamaAttention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    pub q_norm: Option<RmsNorm>,
    pub k_norm: Option<RmsNorm>,
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
        // Packed rows take the padded layout for attention alone (crate::packing); the
        // per-head norms act on each token alone, so they run on the packed rows.
        let q = per_head_norm(
            &self.q_norm,
            apply_linear(&self.q_proj, x.clone()),
            self.num_heads,
        );
        let k = per_head_norm(
            &self.k_norm,
            apply_linear(&self.k_proj, x.clone()),
            self.num_kv_heads,
        );
        let q = rope.apply(split_heads(padded(packing, q), self.num_heads));
        let mut k = rope.apply(split_heads(padded(packing, k), self.num_kv_heads));
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

/// Qwen3's RMSNorm over each head's slice of `x`: `[B, S, heads·head_dim]`.
fn per_head_norm(norm: &Option<RmsNorm>, x: Tensor<3>, heads: usize) -> Tensor<3> {
    match norm {
        None => x,
        Some(norm) => {
            let [b, s, width] = x.dims();
            let x = norm.forward(x.reshape([b, s, heads, width / heads]));
            x.reshape([b, s, width])
        }
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
        let lin = |i, o, bias| model::linear_init(i, o, bias, device);
        let norm_of = |width| {
            RmsNormConfig::new(width)
                .with_epsilon(c.rms_norm_eps)
                .init(device)
        };
        let norm = || norm_of(e);
        let (qkv, mlp) = (c.qkv_bias, c.mlp_bias);
        let layer = |_| LlamaDecoderLayer {
            self_attn: LlamaAttention {
                q_proj: lin(e, nh * hd, qkv),
                k_proj: lin(e, nkv * hd, qkv),
                v_proj: lin(e, nkv * hd, qkv),
                o_proj: lin(nh * hd, e, c.o_bias),
                q_norm: c.qk_norm.then(|| norm_of(hd)),
                k_norm: c.qk_norm.then(|| norm_of(hd)),
                num_heads: nh,
                num_kv_heads: nkv,
            },
            mlp: LlamaMlp {
                gate_proj: lin(e, inter, mlp),
                up_proj: lin(e, inter, mlp),
                down_proj: lin(inter, e, mlp),
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
            lm_head: (!c.tie_word_embeddings).then(|| lin(e, c.vocab_size, false)),
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
            false => Some(torch_linear(t, "lm_head", e, c.vocab_size, false, device)?),
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
                if let Some(b) = &layer.bias {
                    out.push((format!("{p}.{name}.bias"), raw(b.val())));
                }
            }
            for (name, norm) in [("q_norm", &a.q_norm), ("k_norm", &a.k_norm)] {
                if let Some(n) = norm {
                    out.push((format!("{p}.self_attn.{name}.weight"), raw(n.gamma.val())));
                }
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

/// An HF `nn.Linear` (`[out, in]`, with its `[out]` bias if `bias`), transposed to burn's
/// `[in, out]`.
fn torch_linear(
    t: &mut TensorMap,
    p: &str,
    d_in: usize,
    d_out: usize,
    bias: bool,
    device: &Device,
) -> Result<Linear> {
    let w = t.take(&format!("{p}.weight"), &[d_out, d_in])?;
    let b = match bias {
        true => Some(t.take(&format!("{p}.bias"), &[d_out])?),
        false => None,
    };
    Ok(model::linear(w.transposed(), b, device))
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
    let (qkv, o) = (c.qkv_bias, c.o_bias);
    let mut head_norm = |name: &str| -> Result<Option<RmsNorm>> {
        match c.qk_norm {
            true => {
                let gamma = t.take(&format!("{p}.{name}.weight"), &[hd])?;
                Ok(Some(model::rms_norm(gamma, c.rms_norm_eps, device)))
            }
            false => Ok(None),
        }
    };
    let (q_norm, k_norm) = (head_norm("q_norm")?, head_norm("k_norm")?);
    Ok(LlamaAttention {
        q_proj: torch_linear(t, &format!("{p}.q_proj"), e, nh * hd, qkv, device)?,
        k_proj: torch_linear(t, &format!("{p}.k_proj"), e, nkv * hd, qkv, device)?,
        v_proj: torch_linear(t, &format!("{p}.v_proj"), e, nkv * hd, qkv, device)?,
        o_proj: torch_linear(t, &format!("{p}.o_proj"), nh * hd, e, o, device)?,
        q_norm,
        k_norm,
        num_heads: nh,
        num_kv_heads: nkv,
    })
}

fn mlp_from(c: &LlamaConfig, t: &mut TensorMap, p: &str, device: &Device) -> Result<LlamaMlp> {
    let (e, i, b) = (c.hidden_size, c.intermediate_size, c.mlp_bias);
    Ok(LlamaMlp {
        gate_proj: torch_linear(t, &format!("{p}.mlp.gate_proj"), e, i, b, device)?,
        up_proj: torch_linear(t, &format!("{p}.mlp.up_proj"), e, i, b, device)?,
        down_proj: torch_linear(t, &format!("{p}.mlp.down_proj"), i, e, b, device)?,
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
        let rope = Rope::from_inv_freq(position_ids, &self.config.rope_inv_freq());
        self.trunk(input_ids, &rope, bias, cache, None)
    }

    fn packed_hidden_states(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        packing: &Packing,
    ) -> Tensor<3> {
        let bias = attention_bias(packing.attention_mask(), 0, packing.seq_len());
        let rope =
            Rope::from_inv_freq(packing.pad_ints(position_ids), &self.config.rope_inv_freq());
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
        self.config.context_length()
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
