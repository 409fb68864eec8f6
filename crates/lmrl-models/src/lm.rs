//! The causal language model trait: what generation, scoring, the value head, LoRA and the RL
//! learners need from an architecture, so that a new architecture plugs in without an edit to
//! this crate.
use burn::module::{Module, ModuleDisplay};
use burn::tensor::{Device, Int, Tensor};

use crate::cache::KvCache;
use crate::error::{ModelError, Result};
use crate::log_softmax::{gather_columns, log_softmax};
use crate::packing::Packing;

/// What one full forward pass returns.
#[derive(Debug, Clone)]
pub struct LmOutput {
    /// Next-token logits `[B, S, V]`.
    pub logits: Tensor<3>,
    /// Last hidden state after the final norm `[B, S, H]` (HF `hidden_states[-1]`), the input
    /// of TRL's value head.
    pub hidden: Tensor<3>,
}

/// A decoder-only language model (Hugging Face `*ForCausalLM`).
///
/// An implementor provides the trunk ([`CausalLm::hidden_states`]) and the vocabulary projection
/// ([`CausalLm::lm_head`]) separately: RL needs logits only at some positions (the response
/// tokens when scoring, the last prompt token when generating), and the projection onto the
/// vocabulary is the largest matmul of a small model, so callers apply it only where it is used.
/// [`CausalLm::forward`] composes the two for every position.
///
/// Caching: with `cache: Some(..)`, an implementor appends each layer's new keys and values with
/// [`KvCache::append`] and attends over everything cached; generation then feeds one token per
/// row per step. `attention_mask` always covers the cached positions too (`[B, past + S]`).
/// [`crate::attention`] has the attention bias, head split and attention product GPT-2 and
/// Llama use, for implementors that want them.
///
/// `Module` makes the model trainable and movable between devices; `Sync` lets two learners read
/// one frozen reference from two threads (CORY's concurrent updates). The trait is implemented by
/// [`crate::Gpt2LmHeadModel`], [`crate::LlamaForCausalLm`] and the loader's [`crate::AutoLm`].
pub trait CausalLm: Module + ModuleDisplay + Sync + 'static {
    /// Final hidden states `[B, S, H]` (after the last norm) of `input_ids` `[B, S]` at
    /// `position_ids` `[B, S]`; `attention_mask` `[B, past + S]` is 1 on real tokens.
    fn hidden_states(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        cache: Option<&mut KvCache>,
    ) -> Tensor<3>;

    /// [`CausalLm::hidden_states`] of a right-padded batch without a cache, computed on its
    /// real tokens only: `input_ids` and `position_ids` `[1, N]` packed as `packing` lays them
    /// out, hidden states `[1, N, H]`. The default runs the padded forward and packs its
    /// output; GPT-2 and Llama run their position-wise layers on the `N` rows alone.
    fn packed_hidden_states(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        packing: &Packing,
    ) -> Tensor<3> {
        let hidden = self.hidden_states(
            packing.pad_ints(input_ids),
            packing.pad_ints(position_ids),
            packing.attention_mask(),
            None,
        );
        packing.pack(hidden)
    }

    /// Next-token logits `[N, V]` of hidden states `[N, H]`.
    fn lm_head(&self, hidden: Tensor<2>) -> Tensor<2>;

    /// Vocabulary size `V`.
    fn vocab_size(&self) -> usize;

    /// Width `H` of the hidden states (the value head's input).
    fn hidden_size(&self) -> usize;

    /// Longest context the model accepts (cached positions included).
    fn max_positions(&self) -> usize;

    /// The end-of-sequence id of the model's own configuration, if it names one (the pad id of
    /// the RL batches when the tokenizer has none).
    fn eos_token_id(&self) -> Option<u32> {
        None
    }

    /// Logits and hidden states at every position.
    fn forward(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        cache: Option<&mut KvCache>,
    ) -> LmOutput {
        let hidden = self.hidden_states(input_ids, position_ids, attention_mask, cache);
        LmOutput {
            logits: logits_at_every_position(self, hidden.clone()),
            hidden,
        }
    }

    /// [`CausalLm::forward`] with positions `0..S` and no cache (right padding or none), as HF
    /// computes when `position_ids` is not given (TRL's `batched_forward_pass`).
    fn forward_simple(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
    ) -> LmOutput {
        let positions = arange_positions(&input_ids);
        self.forward(input_ids, positions, attention_mask, None)
    }

    /// Device of the parameters.
    fn device(&self) -> Device {
        self.devices()
            .into_iter()
            .next()
            .expect("a causal LM has parameters, so a device")
    }

    /// [`ModelError::TokenOutOfRange`] / [`ModelError::ContextTooLong`] for `past` cached tokens
    /// followed by each row of `ids`, checked on the host before a forward pass would index out of
    /// range.
    fn validate_ids(&self, ids: &[Vec<u32>], past: usize) -> Result<()> {
        validate_ids(self.vocab_size(), self.max_positions(), ids, past)
    }
}

/// `[B, S, V]` logits of `[B, S, H]` hidden states through `model`'s head.
pub fn logits_at_every_position<M: CausalLm>(model: &M, hidden: Tensor<3>) -> Tensor<3> {
    let [b, s, h] = hidden.dims();
    model
        .lm_head(hidden.reshape([b * s, h]))
        .reshape([b, s, model.vocab_size()])
}

/// `[B, S−1]` next-token log-probabilities `log p(x_{t+1} | x_≤t)` of `input_ids` `[B, S]` under
/// `model` (positions `0..S`, no cache, right padding marked 0 in `attention_mask` `[B, S]`):
/// the per-token terms of the language-modelling loss, of which HF's `labels=input_ids` loss is
/// minus the mean. The vocabulary head runs on the `S − 1` predicting positions only (the last
/// position predicts nothing inside the sequence). Entries whose target is padding are for the
/// caller to mask. Differentiable.
///
/// [`ModelError::Input`] for fewer than two positions or a mask of another shape.
pub fn next_token_logprobs<M: CausalLm>(
    model: &M,
    input_ids: Tensor<2, Int>,
    attention_mask: Tensor<2, Int>,
) -> Result<Tensor<2>> {
    let [b, s] = input_ids.dims();
    if s < 2 || attention_mask.dims() != [b, s] {
        return Err(ModelError::Input(format!(
            "next-token log-probabilities need ids of at least 2 positions and a mask of their \
             shape; got ids {:?} and mask {:?}",
            [b, s],
            attention_mask.dims()
        )));
    }
    let positions = arange_positions(&input_ids);
    let hidden = model.hidden_states(input_ids.clone(), positions, attention_mask, None);
    let h = hidden.dims()[2];
    let predicting = hidden.narrow(1, 0, s - 1).reshape([b * (s - 1), h]);
    let targets = input_ids.narrow(1, 1, s - 1).reshape([b * (s - 1), 1]);
    let log_probs = log_softmax(model.lm_head(predicting));
    Ok(gather_columns(log_probs, targets).reshape([b, s - 1]))
}

/// Positions `0..S` for every row of `[B, S]` ids.
pub fn arange_positions(input_ids: &Tensor<2, Int>) -> Tensor<2, Int> {
    let [b, s] = input_ids.dims();
    Tensor::<1, Int>::arange(0..s as i64, &input_ids.device())
        .reshape([1, s])
        .expand([b, s])
}

/// Checks token ids against a vocabulary of `vocab` and lengths (after `past` cached tokens)
/// against a context of `max_positions`.
pub fn validate_ids(
    vocab: usize,
    max_positions: usize,
    ids: &[Vec<u32>],
    past: usize,
) -> Result<()> {
    for (row, seq) in ids.iter().enumerate() {
        if past + seq.len() > max_positions {
            return Err(ModelError::ContextTooLong {
                len: past + seq.len(),
                max: max_positions,
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
