//! The causal language model as one type, whatever its architecture.
use burn::module::{Module, Param};
use burn::nn::{Embedding, LayerNorm, LayerNormConfig, Linear, RmsNorm, RmsNormConfig};
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};

use crate::attention::attention_bias;
use crate::cache::KvCache;
use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::gpt2::Gpt2LmHeadModel;
use crate::llama::LlamaForCausalLm;
use crate::tensors::RawTensor;

/// A GPT-2 or Llama causal LM (HF `AutoModelForCausalLM`).
#[derive(Module, Debug)]
pub enum CausalLm {
    Gpt2(Gpt2LmHeadModel),
    Llama(LlamaForCausalLm),
}

/// What one forward pass returns.
#[derive(Debug, Clone)]
pub struct LmOutput {
    /// Next-token logits `[B, S, V]`.
    pub logits: Tensor<3>,
    /// Last hidden state after the final norm `[B, S, H]` (HF `hidden_states[-1]`), the input
    /// of TRL's value head.
    pub hidden: Tensor<3>,
}

impl CausalLm {
    /// A randomly initialised model (HF `_init_weights`: N(0, 0.02) weights, zero biases).
    pub fn init(config: &ModelConfig, device: &Device) -> Self {
        match config {
            ModelConfig::Gpt2(c) => Self::Gpt2(Gpt2LmHeadModel::init(c, device)),
            ModelConfig::Llama(c) => Self::Llama(LlamaForCausalLm::init(c, device)),
        }
    }

    /// The hyper-parameters this model was built from.
    pub fn config(&self) -> ModelConfig {
        match self {
            Self::Gpt2(m) => ModelConfig::Gpt2(m.config.clone()),
            Self::Llama(m) => ModelConfig::Llama(m.config.clone()),
        }
    }

    pub fn num_layers(&self) -> usize {
        match self {
            Self::Gpt2(m) => m.h.len(),
            Self::Llama(m) => m.model.layers.len(),
        }
    }

    /// Device of the parameters.
    pub fn device(&self) -> Device {
        match self {
            Self::Gpt2(m) => m.wte.weight.val().device(),
            Self::Llama(m) => m.model.embed_tokens.weight.val().device(),
        }
    }

    /// An empty KV cache sized for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(self.num_layers())
    }

    /// One forward pass.
    ///
    /// `input_ids`, `position_ids`: `[B, S]`; `attention_mask`: `[B, past + S]` with 1 for real
    /// tokens (it masks keys; causal masking over cache slots is applied here). With a cache,
    /// the new keys/values are appended to it. The mask is built once and shared by all layers.
    pub fn forward(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        cache: Option<&mut KvCache>,
    ) -> LmOutput {
        let past = cache.as_ref().map_or(0, |c| c.len());
        let [_, seq] = input_ids.dims();
        let bias = attention_bias(attention_mask, past, seq);
        match self {
            Self::Gpt2(m) => m.forward(input_ids, position_ids, bias, cache),
            Self::Llama(m) => m.forward(input_ids, position_ids, bias, cache),
        }
    }

    /// Forward with positions `0..S` and no cache (right padding or none), as HF computes when
    /// `position_ids` is not given (TRL's `batched_forward_pass`).
    pub fn forward_simple(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
    ) -> LmOutput {
        let [b, s] = input_ids.dims();
        let positions = Tensor::<1, Int>::arange(0..s as i64, &input_ids.device())
            .reshape([1, s])
            .expand([b, s]);
        self.forward(input_ids, positions, attention_mask, None)
    }

    /// Checks token ids against the vocabulary and lengths against the context, on the host.
    pub fn validate_input(&self, ids: &[Vec<u32>]) -> Result<()> {
        validate_ids(&self.config(), ids, 0)
    }

    /// The HF-named, HF-laid-out tensors of this model (what `save_pretrained` writes).
    pub fn hf_tensors(&self) -> Vec<(String, RawTensor)> {
        match self {
            Self::Gpt2(m) => m.hf_tensors(),
            Self::Llama(m) => m.hf_tensors(),
        }
    }
}

/// [`ModelError::TokenOutOfRange`] / [`ModelError::ContextTooLong`] for `past` cached tokens
/// followed by `ids`.
pub fn validate_ids(config: &ModelConfig, ids: &[Vec<u32>], past: usize) -> Result<()> {
    let (vocab, max) = (config.vocab_size(), config.max_positions());
    for (row, seq) in ids.iter().enumerate() {
        if past + seq.len() > max {
            return Err(ModelError::ContextTooLong {
                len: past + seq.len(),
                max,
            });
        }
        if let Some((pos, &id)) = seq
            .iter()
            .enumerate()
            .find(|(_, id)| **id as usize >= vocab)
        {
            return Err(ModelError::TokenOutOfRange {
                id: id as i64,
                row,
                pos,
                vocab,
            });
        }
    }
    Ok(())
}

/// `x·W + b` for `x`: `[B, S, in]` as one 2-D matmul over `B·S` rows.
///
/// burn's `Linear::forward` keeps a `[B, S, in] @ [in, out]` product batched when `S` fills its
/// row tiles, which re-reads the weight once per batch row; folding the batch into the rows is
/// markedly faster for the large projections and the vocabulary head.
pub fn dense(x: Tensor<3>, weight: Tensor<2>, bias: Option<Tensor<1>>) -> Tensor<3> {
    let [b, s, d_in] = x.dims();
    let d_out = weight.dims()[1];
    let y = x.reshape([b * s, d_in]).matmul(weight);
    let y = match bias {
        Some(bias) => y + bias.reshape([1, d_out]),
        None => y,
    };
    y.reshape([b, s, d_out])
}

/// [`dense`] through a burn `Linear` (its weight is `[in, out]`; LoRA adapters included).
pub fn apply_linear(l: &Linear, x: Tensor<3>) -> Tensor<3> {
    dense(x, l.weight.val(), l.bias.as_ref().map(|b| b.val()))
}

// ---- small builders shared by the architectures -------------------------------------------

/// A trainable parameter holding `raw` reshaped to rank `D`.
pub(crate) fn param<const D: usize>(raw: RawTensor, device: &Device) -> Param<Tensor<D>> {
    Param::from_tensor(Tensor::from_data(
        TensorData::new(raw.data, raw.shape),
        device,
    ))
}

/// `Linear` from a weight already in burn's `[in, out]` layout and an optional bias.
pub(crate) fn linear(weight: RawTensor, bias: Option<RawTensor>, device: &Device) -> Linear {
    Linear {
        weight: param(weight, device),
        bias: bias.map(|b| param(b, device)),
    }
}

/// `Linear` with N(0, 0.02) weights `[d_in, d_out]` and zero bias (HF `_init_weights`).
pub(crate) fn linear_init(d_in: usize, d_out: usize, bias: bool, device: &Device) -> Linear {
    Linear {
        weight: normal_param([d_in, d_out], device),
        bias: bias.then(|| Param::from_tensor(Tensor::zeros([d_out], device))),
    }
}

pub(crate) fn normal_param(shape: [usize; 2], device: &Device) -> Param<Tensor<2>> {
    Param::from_tensor(Tensor::random(
        shape,
        Distribution::Normal(0.0, 0.02),
        device,
    ))
}

pub(crate) fn embedding(weight: RawTensor, device: &Device) -> Embedding {
    Embedding {
        weight: param(weight, device),
    }
}

pub(crate) fn layer_norm(
    gamma: RawTensor,
    beta: RawTensor,
    eps: f64,
    device: &Device,
) -> LayerNorm {
    let mut ln = LayerNormConfig::new(gamma.shape[0])
        .with_epsilon(eps)
        .init(device);
    ln.gamma = param(gamma, device);
    ln.beta = Some(param(beta, device));
    ln
}

pub(crate) fn rms_norm(gamma: RawTensor, eps: f64, device: &Device) -> RmsNorm {
    let mut n = RmsNormConfig::new(gamma.shape[0])
        .with_epsilon(eps)
        .init(device);
    n.gamma = param(gamma, device);
    n
}

/// Copies a parameter back to the host as f32.
pub(crate) fn raw<const D: usize>(t: Tensor<D>) -> RawTensor {
    let shape = t.dims().to_vec();
    let data = t.into_data().convert::<f32>().try_into_vec::<f32>();
    RawTensor::new(
        shape,
        data.expect("data converted to f32 reads back as f32"),
    )
}

/// A `Linear` weight in PyTorch `nn.Linear` layout `[out, in]`.
pub(crate) fn raw_torch_linear(l: &Linear) -> RawTensor {
    raw(l.weight.val().transpose())
}
