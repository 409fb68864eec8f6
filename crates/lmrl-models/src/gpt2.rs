//! GPT-2 (HF `GPT2LMHeadModel`), with fields named as in the HF checkpoint.
//!
//! HF GPT-2 uses `Conv1D`, whose weights are stored `[in, out]` — burn's `Linear` layout — so
//! checkpoint weights load without a transpose. The LM head is tied to `wte`.
use burn::module::Module;
use burn::nn::{Embedding, LayerNorm, LayerNormConfig, Linear};
use burn::tensor::{Device, Int, Tensor};

use crate::activation::Activation;
use crate::attention::attention_bias;
use crate::attention::{attend, split_heads};
use crate::cache::KvCache;
use crate::config::Gpt2Config;
use crate::config::ModelConfig;
use crate::error::Result;
use crate::layers::{self as model, apply_linear, raw};
use crate::lm::CausalLm;
use crate::packing::{Packing, packed, padded};
use crate::pretrained::Pretrained;
use crate::tensors::{RawTensor, TensorMap};

/// HF `GPT2Attention`: fused QKV projection `c_attn` and output projection `c_proj`.
#[derive(Module, Debug)]
pub struct Gpt2Attention {
    pub c_attn: Linear,
    pub c_proj: Linear,
    pub n_head: usize,
}

/// HF `GPT2MLP`: `c_proj(act(c_fc(x)))`.
#[derive(Module, Debug)]
pub struct Gpt2Mlp {
    pub c_fc: Linear,
    pub c_proj: Linear,
    #[module(skip)]
    pub act: Activation,
}

/// HF `GPT2Block` (pre-norm residual block).
#[derive(Module, Debug)]
pub struct Gpt2Block {
    pub ln_1: LayerNorm,
    pub attn: Gpt2Attention,
    pub ln_2: LayerNorm,
    pub mlp: Gpt2Mlp,
}

/// HF `GPT2LMHeadModel` (the `transformer.` level is flattened into this struct).
#[derive(Module, Debug)]
pub struct Gpt2LmHeadModel {
    /// Token embeddings `[V, H]`, also the (tied) LM head.
    pub wte: Embedding,
    /// Learned position embeddings `[n_positions, H]`.
    pub wpe: Embedding,
    pub h: Vec<Gpt2Block>,
    pub ln_f: LayerNorm,
    #[module(skip)]
    pub config: Gpt2Config,
}

impl Gpt2Attention {
    fn forward(
        &self,
        x: Tensor<3>,
        bias: Tensor<4>,
        layer: usize,
        cache: Option<&mut KvCache>,
        packing: Option<&Packing>,
    ) -> Tensor<3> {
        let [_, _, e] = x.dims();
        // Packed rows take the padded layout for attention alone (crate::packing).
        let qkv = padded(packing, apply_linear(&self.c_attn, x));
        let mut qkv = qkv.split(e, 2).into_iter();
        let mut next = || split_heads(qkv.next().expect("c_attn gives q, k, v"), self.n_head);
        let (q, mut k, mut v) = (next(), next(), next());
        if let Some(c) = cache {
            (k, v) = c.append(layer, k, v);
        }
        apply_linear(&self.c_proj, packed(packing, attend(q, k, v, bias)))
    }
}

impl Gpt2Block {
    /// One pre-norm block: `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`.
    pub fn forward(
        &self,
        x: Tensor<3>,
        bias: Tensor<4>,
        layer: usize,
        cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        self.run(x, bias, layer, cache, None)
    }

    /// [`Gpt2Block::forward`], on packed rows when `packing` is given.
    fn run(
        &self,
        x: Tensor<3>,
        bias: Tensor<4>,
        layer: usize,
        cache: Option<&mut KvCache>,
        packing: Option<&Packing>,
    ) -> Tensor<3> {
        let a = self
            .attn
            .forward(self.ln_1.forward(x.clone()), bias, layer, cache, packing);
        let x = x + a;
        let m = apply_linear(&self.mlp.c_fc, self.ln_2.forward(x.clone()));
        x + apply_linear(&self.mlp.c_proj, self.mlp.act.apply(m))
    }
}

impl Gpt2LmHeadModel {
    /// Random initialisation (N(0, 0.02) weights as HF; LayerNorms at identity).
    pub fn init(c: &Gpt2Config, device: &Device) -> Self {
        let (e, inner) = (c.n_embd, c.inner_dim());
        let ln = || {
            LayerNormConfig::new(e)
                .with_epsilon(c.layer_norm_epsilon)
                .init(device)
        };
        let act = Activation::from_hf(&c.activation_function).unwrap_or(Activation::GeluTanh);
        let block = |_| Gpt2Block {
            ln_1: ln(),
            attn: Gpt2Attention {
                c_attn: model::linear_init(e, 3 * e, true, device),
                c_proj: model::linear_init(e, e, true, device),
                n_head: c.n_head,
            },
            ln_2: ln(),
            mlp: Gpt2Mlp {
                c_fc: model::linear_init(e, inner, true, device),
                c_proj: model::linear_init(inner, e, true, device),
                act,
            },
        };
        Self {
            wte: Embedding {
                weight: model::normal_param([c.vocab_size, e], device),
            },
            wpe: Embedding {
                weight: model::normal_param([c.n_positions, e], device),
            },
            h: (0..c.n_layer).map(block).collect(),
            ln_f: ln(),
            config: c.clone(),
        }
    }

    /// Builds the model from HF tensors, with or without the `transformer.` prefix.
    ///
    /// `h.N.attn.bias` / `masked_bias` buffers and the tied `lm_head.weight` are not needed.
    pub fn from_tensors(c: &Gpt2Config, t: &mut TensorMap, device: &Device) -> Result<Self> {
        t.strip_prefix("transformer.");
        let (e, inner, eps) = (c.n_embd, c.inner_dim(), c.layer_norm_epsilon);
        let act = Activation::from_hf(&c.activation_function).unwrap_or(Activation::GeluTanh);
        let ln = |t: &mut TensorMap, p: &str| -> Result<LayerNorm> {
            let g = t.take(&format!("{p}.weight"), &[e])?;
            let b = t.take(&format!("{p}.bias"), &[e])?;
            Ok(model::layer_norm(g, b, eps, device))
        };
        let wte = model::embedding(t.take("wte.weight", &[c.vocab_size, e])?, device);
        let wpe = model::embedding(t.take("wpe.weight", &[c.n_positions, e])?, device);
        let mut h = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let p = format!("h.{i}");
            h.push(Gpt2Block {
                ln_1: ln(t, &format!("{p}.ln_1"))?,
                attn: Gpt2Attention {
                    c_attn: conv1d(t, &format!("{p}.attn.c_attn"), e, 3 * e, device)?,
                    c_proj: conv1d(t, &format!("{p}.attn.c_proj"), e, e, device)?,
                    n_head: c.n_head,
                },
                ln_2: ln(t, &format!("{p}.ln_2"))?,
                mlp: Gpt2Mlp {
                    c_fc: conv1d(t, &format!("{p}.mlp.c_fc"), e, inner, device)?,
                    c_proj: conv1d(t, &format!("{p}.mlp.c_proj"), inner, e, device)?,
                    act,
                },
            });
        }
        let ln_f = ln(t, "ln_f")?;
        Ok(Self {
            wte,
            wpe,
            h,
            ln_f,
            config: c.clone(),
        })
    }

    /// Tensors under HF's `GPT2LMHeadModel.save_pretrained` names (`transformer.` prefix,
    /// Conv1D `[in, out]` weights, no `lm_head.weight` since it is tied).
    fn hf_tensors_impl(&self) -> Vec<(String, RawTensor)> {
        let mut out = vec![
            ("wte.weight".to_string(), raw(self.wte.weight.val())),
            ("wpe.weight".to_string(), raw(self.wpe.weight.val())),
        ];
        let push_ln = |out: &mut Vec<_>, p: String, ln: &LayerNorm| {
            out.push((format!("{p}.weight"), raw(ln.gamma.val())));
            if let Some(b) = &ln.beta {
                out.push((format!("{p}.bias"), raw(b.val())));
            }
        };
        for (i, b) in self.h.iter().enumerate() {
            push_ln(&mut out, format!("h.{i}.ln_1"), &b.ln_1);
            push_ln(&mut out, format!("h.{i}.ln_2"), &b.ln_2);
            push_linear(&mut out, format!("h.{i}.attn.c_attn"), &b.attn.c_attn);
            push_linear(&mut out, format!("h.{i}.attn.c_proj"), &b.attn.c_proj);
            push_linear(&mut out, format!("h.{i}.mlp.c_fc"), &b.mlp.c_fc);
            push_linear(&mut out, format!("h.{i}.mlp.c_proj"), &b.mlp.c_proj);
        }
        push_ln(&mut out, "ln_f".to_string(), &self.ln_f);
        out.into_iter()
            .map(|(k, v)| (format!("transformer.{k}"), v))
            .collect()
    }
}

/// A `Conv1D` (`[in, out]` weight + bias) as a burn `Linear`, no transpose needed.
fn conv1d(
    t: &mut TensorMap,
    p: &str,
    d_in: usize,
    d_out: usize,
    device: &Device,
) -> Result<Linear> {
    let w = t.take(&format!("{p}.weight"), &[d_in, d_out])?;
    let b = t.take(&format!("{p}.bias"), &[d_out])?;
    Ok(model::linear(w, Some(b), device))
}

fn push_linear(out: &mut Vec<(String, RawTensor)>, p: String, l: &Linear) {
    out.push((format!("{p}.weight"), raw(l.weight.val())));
    if let Some(b) = &l.bias {
        out.push((format!("{p}.bias"), raw(b.val())));
    }
}

impl Gpt2LmHeadModel {
    /// Embeddings, every block and the final norm: the one trunk of
    /// [`CausalLm::hidden_states`] and [`CausalLm::packed_hidden_states`] (`packing` given:
    /// ids and positions are packed rows, `bias` in the padded layout).
    fn trunk(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        bias: Tensor<4>,
        mut cache: Option<&mut KvCache>,
        packing: Option<&Packing>,
    ) -> Tensor<3> {
        let mut x = model::lookup(&self.wte, input_ids) + model::lookup(&self.wpe, position_ids);
        for (i, block) in self.h.iter().enumerate() {
            x = block.run(x, bias.clone(), i, cache.as_deref_mut(), packing);
        }
        self.ln_f.forward(x)
    }
}

impl CausalLm for Gpt2LmHeadModel {
    fn hidden_states(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        let past = cache.as_ref().map_or(0, |c| c.len());
        let bias = attention_bias(attention_mask, past, input_ids.dims()[1]);
        self.trunk(input_ids, position_ids, bias, cache, None)
    }

    fn packed_hidden_states(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        packing: &Packing,
    ) -> Tensor<3> {
        let bias = attention_bias(packing.attention_mask(), 0, packing.seq_len());
        self.trunk(input_ids, position_ids, bias, None, Some(packing))
    }

    /// Tied head: `hidden · wteᵀ` (a strided view of the embedding, no copy).
    fn lm_head(&self, hidden: Tensor<2>) -> Tensor<2> {
        crate::layers::matmul(hidden, self.wte.weight.val().transpose())
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn hidden_size(&self) -> usize {
        self.config.n_embd
    }

    fn max_positions(&self) -> usize {
        self.config.n_positions
    }

    fn eos_token_id(&self) -> Option<u32> {
        self.config.eos_token_id
    }
}

impl Pretrained for Gpt2LmHeadModel {
    fn hf_config(&self) -> serde_json::Value {
        ModelConfig::Gpt2(self.config.clone()).to_hf_json()
    }

    fn hf_tensors(&self) -> Vec<(String, RawTensor)> {
        self.hf_tensors_impl()
    }
}
