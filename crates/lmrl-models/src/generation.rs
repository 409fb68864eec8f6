//! Batched autoregressive generation with a KV cache, as Hugging Face `generate` does it for a
//! decoder-only model (the rollout step of PPO: TRL `PPOTrainer.generate` / `_generate_batched`).
//!
//! Prompts of different lengths are left-padded so that every row's next token sits in the same
//! last column; the attention mask hides the pads and the position ids are
//! `cumsum(mask) - 1` (pads clamped to 0), so a padded row sees exactly the positions it would
//! see alone. One prefill pass fills the cache, then each step feeds one token per row. A row
//! that produced EOS (or a stop sequence) is finished: it records nothing more, and once an
//! eighth of the batch has finished those rows are dropped from the batch and its cache, so the
//! decode steps run only the rows still generating (until then a finished row is fed the pad id
//! with mask 0).
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::cache::KvCache;
use crate::error::{ModelError, Result};
use crate::lm::CausalLm;
use crate::sampling::{
    GenerationConfig, TokenChooser, presence_mask, process_logits, suppress_early_eos,
};

/// What [`generate`] produced for a batch of prompts.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Per row, the new tokens, cut after the first EOS or stop sequence (both kept).
    pub tokens: Vec<Vec<u32>>,
    /// Per row, `log π(token)` under the distribution the token was chosen from: the processed
    /// logits of [`crate::sampling::process_logits`] (greedy without penalty: the raw logits'
    /// `log_softmax`, which is what HF's `output_scores` gives for greedy decoding).
    pub logprobs: Vec<Vec<f32>>,
    /// `[B, N]` new tokens right-padded with the pad id, `N` = the longest row.
    pub padded: Tensor<2, Int>,
    /// `[B, N]` 1 where `padded` holds a generated token (EOS included), else 0.
    pub mask: Tensor<2, Int>,
}

/// Checks prompts against the model (non-empty, ids in the vocabulary, room in the context) and
/// returns the longest prompt length.
pub fn validate_prompts(
    prompts: &[Vec<u32>],
    vocab: usize,
    max_positions: usize,
    max_new_tokens: usize,
) -> Result<usize> {
    if prompts.is_empty() {
        return Err(ModelError::Input("no prompts to generate from".into()));
    }
    for (row, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            return Err(ModelError::Input(format!(
                "prompt {row} is empty (generation needs at least one token to condition on)"
            )));
        }
        if let Some((pos, &id)) = p.iter().enumerate().find(|(_, id)| **id as usize >= vocab) {
            return Err(ModelError::TokenOutOfRange {
                id: id as i64,
                row,
                pos,
                vocab,
            });
        }
    }
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    // Checked: a `max_new_tokens` near usize::MAX must not wrap into a small length.
    match longest.checked_add(max_new_tokens) {
        Some(len) if len <= max_positions => {}
        len => {
            return Err(ModelError::ContextTooLong {
                len: len.unwrap_or(usize::MAX),
                max: max_positions,
            });
        }
    }
    Ok(longest)
}

/// Left-padded `[B, L]` ids, attention mask and position ids (`cumsum(mask) - 1`, pads at 0),
/// as HF `prepare_inputs_for_generation` builds them.
pub fn left_pad(
    prompts: &[Vec<u32>],
    pad_token_id: u32,
    device: &Device,
) -> (Tensor<2, Int>, Tensor<2, Int>, Tensor<2, Int>) {
    let b = prompts.len();
    let l = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = vec![pad_token_id as i64; b * l];
    let mut mask = vec![0i64; b * l];
    let mut pos = vec![0i64; b * l];
    for (r, p) in prompts.iter().enumerate() {
        let offset = l - p.len();
        for (i, &t) in p.iter().enumerate() {
            ids[r * l + offset + i] = t as i64;
            mask[r * l + offset + i] = 1;
            pos[r * l + offset + i] = i as i64;
        }
    }
    let make = |v: Vec<i64>| Tensor::<2, Int>::from_data(TensorData::new(v, [b, l]), device);
    (make(ids), make(mask), make(pos))
}

/// The prompts' forward pass into a fresh cache: the cache, the `[B, L]` attention mask of the
/// left-padded batch and the `[B, H]` hidden states of its last column (the only ones the next
/// token needs). A prompt that occurs several times (a group learner samples each one G times)
/// is computed once and its cache rows repeated, which is the same computation up to float
/// rounding. The cache keeps room for `new_tokens` more positions.
fn prefill<M: CausalLm>(
    model: &M,
    prompts: &[Vec<u32>],
    pad_token_id: u32,
    new_tokens: usize,
    device: &Device,
) -> (KvCache, Tensor<2, Int>, Tensor<2>) {
    let mut cache = KvCache::with_headroom(new_tokens);
    let (distinct, of_row) = crate::scoring::distinct_rows(prompts);
    let (ids, mask, pos) = left_pad(&distinct, pad_token_id, device);
    let hidden = model.hidden_states(ids, pos, mask.clone(), Some(&mut cache));
    let [u, l, h] = hidden.dims();
    let last = hidden.narrow(1, l - 1, 1).reshape([u, h]);
    if u == prompts.len() {
        return (cache, mask, last);
    }
    let rows = Tensor::<1, Int>::from_data(TensorData::new(of_row, [prompts.len()]), device);
    cache.select_rows(rows.clone());
    (cache, mask.select(0, rows.clone()), last.select(0, rows))
}

/// Generates up to `cfg.max_new_tokens` tokens after each prompt; a row stops at EOS or once
/// its new tokens end with one of `cfg.stop_sequences` (the stop tokens are kept).
///
/// Runs without gradient tracking (`model.valid()` on the device without autodiff), with the KV
/// cache. Reproducible: the same model, prompts and `cfg` (seed included) give the same tokens;
/// each row has its own RNG, seeded from `(cfg.seed, cfg.first_row + r)`
/// ([`crate::sampling::row_seed`]), which draws one uniform per step while the row runs, so a
/// row's samples depend neither on when the other rows stop nor on which other prompts share
/// its batch (up to the float rounding of a differently padded or smaller batch).
///
/// The repetition penalty counts each row's real prompt tokens and its generated tokens (HF
/// would also count the left-padding ids of shorter prompts, which makes the result depend on
/// the batch; we do not).
///
/// Errors: no prompts, an empty prompt, an id ≥ vocabulary size (also for the pad id), longest
/// prompt + `max_new_tokens` > the model's positions, `max_new_tokens` = 0, invalid sampling
/// numbers.
pub fn generate<M: CausalLm>(
    model: &M,
    prompts: &[Vec<u32>],
    cfg: &GenerationConfig,
    device: &Device,
) -> Result<Generation> {
    cfg.validate()?;
    if cfg.max_new_tokens == 0 {
        return Err(ModelError::Input(
            "max_new_tokens must be at least 1".into(),
        ));
    }
    let vocab = model.vocab_size();
    validate_prompts(prompts, vocab, model.max_positions(), cfg.max_new_tokens)?;
    if cfg.pad_token_id as usize >= vocab {
        return Err(ModelError::Input(format!(
            "pad token id {} is outside the vocabulary of size {vocab}",
            cfg.pad_token_id
        )));
    }
    let device = device.clone().without_autodiff();
    let model = model.valid();
    let b = prompts.len();

    let (mut cache, mut mask, last_hidden) = prefill(
        &model,
        prompts,
        cfg.pad_token_id,
        cfg.max_new_tokens,
        &device,
    );
    let h = last_hidden.dims()[1];
    // Only the last column's logits are used: the head runs on `[B, H]`, not `[B, L, H]`.
    let mut last = model.lm_head(last_hidden);

    let penalise = cfg.repetition_penalty != 1.0;
    let mut history: Vec<Vec<u32>> = prompts.to_vec();
    let mut next_pos: Vec<i64> = prompts.iter().map(|p| p.len() as i64).collect();
    let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); b];
    let mut logprobs: Vec<Vec<f32>> = vec![Vec::new(); b];
    let mut chooser = TokenChooser::new(cfg);
    let mut batch = Batch::new(b);

    for step in 0..cfg.max_new_tokens {
        let seen = penalise.then(|| {
            let rows: Vec<Vec<u32>> = batch.rows.iter().map(|&r| history[r].clone()).collect();
            presence_mask(&rows, vocab, &device)
        });
        // Every row still running has generated `step` tokens.
        let logits = suppress_early_eos(last, step, cfg);
        let choice = chooser.choose_rows(process_logits(logits, seen, cfg), &batch.rows)?;
        for (i, &r) in batch.rows.iter().enumerate() {
            if batch.finished[i] {
                continue;
            }
            let t = choice.tokens[i];
            tokens[r].push(t);
            logprobs[r].push(choice.logprobs[i]);
            history[r].push(t);
            batch.finished[i] = cfg.is_eos(t) || cfg.ends_with_stop(&tokens[r]);
        }
        if step + 1 == cfg.max_new_tokens || batch.finished.iter().all(|&f| f) {
            break;
        }
        if let Some(keep) = batch.drop_finished() {
            let keep = Tensor::<1, Int>::from_data(TensorData::new(keep, [batch.len()]), &device);
            cache.select_rows(keep.clone());
            mask = mask.select(0, keep);
        }
        let n = batch.len();
        let mut feed = vec![cfg.pad_token_id as i64; n];
        let mut feed_mask = vec![0i64; n];
        let mut feed_pos = vec![0i64; n];
        for (i, &r) in batch.rows.iter().enumerate() {
            feed_pos[i] = next_pos[r];
            if !batch.finished[i] {
                feed[i] = *tokens[r].last().unwrap_or(&cfg.pad_token_id) as i64;
                feed_mask[i] = 1;
                next_pos[r] += 1;
            }
        }
        let ints = |v: Vec<i64>| Tensor::<2, Int>::from_data(TensorData::new(v, [n, 1]), &device);
        mask = Tensor::cat(vec![mask, ints(feed_mask)], 1);
        let hidden =
            model.hidden_states(ints(feed), ints(feed_pos), mask.clone(), Some(&mut cache));
        last = model.lm_head(hidden.reshape([n, h]));
    }

    let width = tokens.iter().map(Vec::len).max().unwrap_or(0);
    let mut padded = vec![cfg.pad_token_id as i64; b * width];
    let mut out_mask = vec![0i64; b * width];
    for (r, row) in tokens.iter().enumerate() {
        for (i, &t) in row.iter().enumerate() {
            padded[r * width + i] = t as i64;
            out_mask[r * width + i] = 1;
        }
    }
    Ok(Generation {
        tokens,
        logprobs,
        padded: Tensor::from_data(TensorData::new(padded, [b, width]), &device),
        mask: Tensor::from_data(TensorData::new(out_mask, [b, width]), &device),
    })
}

/// The rows of a running generation batch: which prompt each row is, and whether it has
/// finished. A finished row still costs a full row of every decode step (fed the pad id with
/// mask 0) until it is dropped; dropping copies the whole KV cache, so it waits until an eighth
/// of the rows are finished. Rows are independent (their own RNG stream, their own attention
/// row), so the batch they run in changes nothing but float rounding.
struct Batch {
    rows: Vec<usize>,
    finished: Vec<bool>,
}

impl Batch {
    fn new(b: usize) -> Self {
        Self {
            rows: (0..b).collect(),
            finished: vec![false; b],
        }
    }

    fn len(&self) -> usize {
        self.rows.len()
    }

    /// Drops the finished rows once they are an eighth of the batch and returns the batch
    /// positions kept (to select from the cache and the mask), else `None`.
    fn drop_finished(&mut self) -> Option<Vec<i64>> {
        let done = self.finished.iter().filter(|&&f| f).count();
        if done == 0 || done * 8 < self.rows.len() {
            return None;
        }
        let keep: Vec<usize> = (0..self.rows.len())
            .filter(|&i| !self.finished[i])
            .collect();
        self.rows = keep.iter().map(|&i| self.rows[i]).collect();
        self.finished = vec![false; self.rows.len()];
        Some(keep.into_iter().map(|i| i as i64).collect())
    }
}
