//! Scoring query–response pairs: TRL `PPOTrainer.batched_forward_pass`, restricted to the
//! response tokens.
//!
//! TRL concatenates each query `q` and response `y` into one right-padded sequence, runs the
//! policy (with value head) once, and takes `logprobs_from_logits(logits[:, :-1], ids[:, 1:])`
//! and `values[:, :-1]` under a mask that starts at `len(q) - 1` and spans `len(y)` positions.
//! Here the same quantities come out already aligned to the response: entry `t` of row `b`
//! is read at sequence position `len(q_b) + t - 1`, the hidden state that predicts `y_b[t]`.
//! The gather is [`response_logprobs`], which is differentiable, so the PPO loss can call it on
//! an autodiff forward pass. The forward itself leaves the padding out ([`Packing`]): every
//! layer but attention runs on the real tokens only.
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::cache::KvCache;
use crate::error::{ModelError, Result};
use crate::generation::left_pad;
use crate::lm::CausalLm;
use crate::log_softmax::{gather_columns, log_softmax};
use crate::packing::Packing;
use crate::value_head::LmWithValueHead;

/// A batch of `[q; y]` sequences, right-padded, with what is needed to find the response tokens.
#[derive(Debug, Clone)]
pub struct QueryResponseBatch {
    /// `[B, S]` ids of `q_b ++ y_b`, right-padded with the pad id; `S = max_b(|q_b| + |y_b|)`.
    pub input_ids: Tensor<2, Int>,
    /// `[B, S]` 1 on real tokens, 0 on padding.
    pub attention_mask: Tensor<2, Int>,
    /// `|q_b|` per row (≥ 1).
    pub query_lens: Vec<usize>,
    /// `|y_b|` per row (≥ 1).
    pub response_lens: Vec<usize>,
    /// The query and response ids per row (host copies, for the gather and the shared-query
    /// forward).
    queries: Vec<Vec<u32>>,
    responses: Vec<Vec<u32>>,
    pad_id: u32,
    seq_len: usize,
}

impl QueryResponseBatch {
    /// Builds the right-padded batch on `device`. Errors on an empty batch, an empty query (no
    /// position would predict the first response token), an empty response, or unequal numbers
    /// of queries and responses.
    pub fn new(
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        pad_id: u32,
        device: &Device,
    ) -> Result<Self> {
        if queries.len() != responses.len() {
            return Err(ModelError::Input(format!(
                "{} queries but {} responses",
                queries.len(),
                responses.len()
            )));
        }
        if queries.is_empty() {
            return Err(ModelError::Input("empty query/response batch".into()));
        }
        for (r, (q, y)) in queries.iter().zip(responses).enumerate() {
            if q.is_empty() {
                return Err(ModelError::Input(format!("query {r} is empty")));
            }
            if y.is_empty() {
                return Err(ModelError::Input(format!("response {r} is empty")));
            }
        }
        let b = queries.len();
        let seq_len = queries
            .iter()
            .zip(responses)
            .map(|(q, y)| q.len() + y.len())
            .max()
            .unwrap_or(0);
        let mut ids = vec![pad_id as i64; b * seq_len];
        let mut mask = vec![0i64; b * seq_len];
        for (r, (q, y)) in queries.iter().zip(responses).enumerate() {
            for (i, &t) in q.iter().chain(y).enumerate() {
                ids[r * seq_len + i] = t as i64;
                mask[r * seq_len + i] = 1;
            }
        }
        Ok(Self {
            input_ids: Tensor::from_data(TensorData::new(ids, [b, seq_len]), device),
            attention_mask: Tensor::from_data(TensorData::new(mask, [b, seq_len]), device),
            query_lens: queries.iter().map(Vec::len).collect(),
            response_lens: responses.iter().map(Vec::len).collect(),
            queries: queries.to_vec(),
            responses: responses.to_vec(),
            pad_id,
            seq_len,
        })
    }

    /// Number of rows.
    pub fn batch_size(&self) -> usize {
        self.query_lens.len()
    }

    /// `T`, the longest response: the width of every per-response-token output.
    pub fn max_response_len(&self) -> usize {
        self.response_lens.iter().copied().max().unwrap_or(0)
    }

    /// `S`, the padded `[q; y]` length.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// The response ids of every row.
    pub fn responses(&self) -> &[Vec<u32>] {
        &self.responses
    }

    /// Checks every id against the vocabulary size (before a forward pass would index out of
    /// range).
    pub fn check_vocab(&self, vocab: usize) -> Result<()> {
        let ids = self
            .input_ids
            .clone()
            .try_into_vec_as::<i64>()
            .map_err(|e| ModelError::Input(format!("reading input ids: {e:?}")))?;
        for (k, &id) in ids.iter().enumerate() {
            if id < 0 || id as usize >= vocab {
                return Err(ModelError::TokenOutOfRange {
                    id,
                    row: k / self.seq_len,
                    pos: k % self.seq_len,
                    vocab,
                });
            }
        }
        Ok(())
    }

    /// `[B·T]` flat indices into the `[B·S]` positions: row `b`, response token `t` ↦
    /// `b·S + |q_b| + t − 1`; padding entries (`t ≥ |y_b|`) point at the last query position and
    /// are masked out.
    fn flat_positions(&self) -> Vec<i64> {
        let t_max = self.max_response_len();
        let mut idx = Vec::with_capacity(self.batch_size() * t_max);
        for (b, (&q, &r)) in self.query_lens.iter().zip(&self.response_lens).enumerate() {
            for t in 0..t_max {
                let p = if t < r { q + t - 1 } else { q - 1 };
                idx.push((b * self.seq_len + p) as i64);
            }
        }
        idx
    }

    /// The packing of the batch's `[q; y]` rows ([`Packing`]): the forward passes of scoring and
    /// training run on the real tokens only.
    pub fn packing(&self, device: &Device) -> Packing {
        let lengths: Vec<usize> = self
            .query_lens
            .iter()
            .zip(&self.response_lens)
            .map(|(q, y)| q + y)
            .collect();
        Packing::new(&lengths, self.seq_len, device)
    }

    /// `[1, N]` ids and positions of the packed `[q; y]` rows.
    fn packed_inputs(&self, device: &Device) -> (Tensor<2, Int>, Tensor<2, Int>) {
        let mut ids = Vec::new();
        let mut pos = Vec::new();
        for (q, y) in self.queries.iter().zip(&self.responses) {
            for (i, &t) in q.iter().chain(y).enumerate() {
                ids.push(i64::from(t));
                pos.push(i as i64);
            }
        }
        let n = ids.len();
        let make = |v| Tensor::<2, Int>::from_data(TensorData::new(v, [1, n]), device);
        (make(ids), make(pos))
    }

    /// `[B·T]` packed rows (see [`Packing`]) of the positions that predict the response tokens,
    /// as [`QueryResponseBatch::flat_positions`] does for the padded layout.
    fn packed_positions(&self, packing: &Packing) -> Vec<i64> {
        let t_max = self.max_response_len();
        let mut idx = Vec::with_capacity(self.batch_size() * t_max);
        for (b, (&q, &r)) in self.query_lens.iter().zip(&self.response_lens).enumerate() {
            for t in 0..t_max {
                let p = if t < r { q + t - 1 } else { q - 1 };
                idx.push(packing.row(b, p) as i64);
            }
        }
        idx
    }

    /// `[B·T, 1]` response ids for a gather from `[B·T, V]` rows (row `b·T + t` holds
    /// `y_b[t]`), 0 on padding entries.
    pub fn response_id_column(&self, device: &Device) -> Tensor<2, Int> {
        let t_max = self.max_response_len();
        let mut ids = Vec::with_capacity(self.batch_size() * t_max);
        for y in &self.responses {
            for t in 0..t_max {
                ids.push(y.get(t).map_or(0, |&v| i64::from(v)));
            }
        }
        Tensor::from_data(TensorData::new(ids, [self.batch_size() * t_max, 1]), device)
    }

    /// `[B, T]` float mask: 1 on response tokens, 0 on padding.
    pub fn response_mask(&self, device: &Device) -> Tensor<2> {
        let t_max = self.max_response_len();
        let mut m = Vec::with_capacity(self.batch_size() * t_max);
        for &r in &self.response_lens {
            for t in 0..t_max {
                m.push(if t < r { 1.0f32 } else { 0.0 });
            }
        }
        Tensor::from_data(TensorData::new(m, [self.batch_size(), t_max]), device)
    }
}

/// Per-response-token quantities of the policy with value head.
#[derive(Debug, Clone)]
pub struct Scored {
    /// `[B, T]` `log π(y_t | q, y_<t)` (TRL `all_logprobs`, response part); 0 on padding.
    pub logprobs: Tensor<2>,
    /// `[B, T, V]` full-vocabulary `log_softmax` at the same positions, for TRL's `"full"` KL
    /// penalty `Σ_v p(v)(log p(v) − log p_ref(v))`.
    pub log_softmax: Tensor<3>,
    /// `[B, T]` value-head outputs `V(q, y_<t)` (TRL `values[:, :-1]`, response part); 0 on padding.
    pub values: Tensor<2>,
    /// `[B, T]` 1 on response tokens, 0 on padding.
    pub mask: Tensor<2>,
}

/// The frozen reference model's per-response-token quantities.
#[derive(Debug, Clone)]
pub struct RefScored {
    /// `[B, T]` `log π_ref(y_t | q, y_<t)`; 0 on padding.
    pub logprobs: Tensor<2>,
    /// `[B, T, V]` full `log_softmax` of the reference at the same positions.
    pub log_softmax: Tensor<3>,
    /// `[B, T]` 1 on response tokens, 0 on padding.
    pub mask: Tensor<2>,
}

/// The response positions of a `[q; y]` batch: returns `[B, T]` log-probs of the response
/// tokens (TRL `logprobs_from_logits`, 0 on padding) and the `[B, T, V]` `log_softmax` there.
///
/// The rows of `hidden` (`[B, S, H]`) that predict a response token are selected first and only
/// they go through `model`'s vocabulary head: TRL projects every position, but for a prompt of
/// `|q|` tokens and a response of `|y|`, the `|q| − 1` positions before the first prediction
/// are never read (≈ 70% of the head for CORY's observer, whose merged prompt is ~80 tokens).
/// Pure tensor ops, so on autodiff tensors the gradient flows back into `hidden` and the head;
/// index tensors are built on `hidden.device()`.
pub fn response_logprobs<M: CausalLm>(
    model: &M,
    hidden: Tensor<3>,
    batch: &QueryResponseBatch,
) -> (Tensor<2>, Tensor<3>) {
    response_token_logprobs(model, at_responses(hidden, batch), batch)
}

/// [`response_logprobs`] of hidden states already read at the response positions (`[B, T, H]`,
/// as [`response_hidden_states`] gives them).
pub fn response_token_logprobs<M: CausalLm>(
    model: &M,
    selected: Tensor<3>,
    batch: &QueryResponseBatch,
) -> (Tensor<2>, Tensor<3>) {
    let device = selected.device();
    let [b, t, h] = selected.dims();
    let ls = log_softmax(model.lm_head(selected.reshape([b * t, h]))); // [B·T, V]
    let v = ls.dims()[1];
    let ids = batch.response_id_column(&device);
    let logprobs = gather_columns(ls.clone(), ids).reshape([b, t]) * batch.response_mask(&device);
    (logprobs, ls.reshape([b, t, v]))
}

/// `[B, T, H]` hidden states at the positions that predict the response tokens (entry `t` of
/// row `b` predicts `y_b[t]`; entries `t ≥ |y_b|` are padding, for the caller to mask), with
/// each distinct query run through `model` once.
///
/// A group learner's batch holds each prompt G times. Its distinct queries go through the
/// model left-padded into a [`KvCache`]; the cache rows are then repeated for the completions
/// that share them (a `select`, whose backward sums those completions' gradients into the
/// shared query, as the full forward would), and the responses run on top of the cache: the
/// repeated prompts' share of the forward and backward is saved (gsm8k-app's GRPO step takes
/// 0.76× the time, docs/benchmarks.md). It is
/// the same function as the right-padded `[q; y]` forward of TRL (masked keys weigh exactly 0,
/// positions are each row's own), equal up to float rounding; a batch without a repeated query
/// takes that forward itself. Runs on `device` (autodiff or not, as the caller needs).
pub fn response_hidden_states<M: CausalLm>(
    model: &M,
    batch: &QueryResponseBatch,
    device: &Device,
) -> Tensor<3> {
    let (distinct, of_row) = distinct_rows(&batch.queries);
    if distinct.len() == batch.batch_size() {
        return full_forward_at_responses(model, batch, device);
    }
    let (b, t) = (batch.batch_size(), batch.max_response_len());
    let (ids, mask, pos) = left_pad(&distinct, batch.pad_id, device);
    let mut cache = KvCache::default();
    let hidden = model.hidden_states(ids, pos, mask.clone(), Some(&mut cache));
    let lq = hidden.dims()[1];
    let rows = Tensor::<1, Int>::from_data(TensorData::new(of_row, [b]), device);
    // The last query position predicts the first response token.
    let first = hidden.narrow(1, lq - 1, 1).select(0, rows.clone()); // [B, 1, H]
    if t == 1 {
        return first;
    }
    cache.select_rows(rows.clone());
    // Every response token but the last is an input (the last predicts nothing).
    let (mut r_ids, mut r_mask, mut r_pos) = (Vec::new(), Vec::new(), Vec::new());
    for (y, &q) in batch.responses.iter().zip(&batch.query_lens) {
        for k in 0..t - 1 {
            let real = k + 1 < y.len();
            r_ids.push(if real {
                i64::from(y[k])
            } else {
                i64::from(batch.pad_id)
            });
            r_mask.push(i64::from(real));
            r_pos.push(if real { (q + k) as i64 } else { 0 });
        }
    }
    let make = |v: Vec<i64>| Tensor::<2, Int>::from_data(TensorData::new(v, [b, t - 1]), device);
    let full_mask = Tensor::cat(vec![mask.select(0, rows), make(r_mask)], 1);
    let rest = model.hidden_states(make(r_ids), make(r_pos), full_mask, Some(&mut cache));
    Tensor::cat(vec![first, rest], 1)
}

/// The distinct rows in order of first appearance, and each row's index among them.
pub(crate) fn distinct_rows(rows: &[Vec<u32>]) -> (Vec<Vec<u32>>, Vec<i64>) {
    let mut seen = std::collections::HashMap::<&[u32], i64>::new();
    let mut distinct = Vec::new();
    let of_row = rows
        .iter()
        .map(|r| {
            *seen.entry(r.as_slice()).or_insert_with(|| {
                distinct.push(r.clone());
                distinct.len() as i64 - 1
            })
        })
        .collect();
    (distinct, of_row)
}

/// The right-padded `[q; y]` forward (TRL `batched_forward_pass`), computed on the real tokens
/// only ([`Packing`]) and read at the response positions: `[B, T, H]`.
fn full_forward_at_responses<M: CausalLm>(
    model: &M,
    batch: &QueryResponseBatch,
    device: &Device,
) -> Tensor<3> {
    let packing = batch.packing(device);
    let (ids, positions) = batch.packed_inputs(device);
    let hidden = model.packed_hidden_states(ids, positions, &packing);
    let [_, n, h] = hidden.dims();
    let t = batch.max_response_len();
    let rows = Tensor::<1, Int>::from_data(
        TensorData::new(batch.packed_positions(&packing), [batch.batch_size() * t]),
        device,
    );
    hidden
        .reshape([n, h])
        .select(0, rows)
        .reshape([batch.batch_size(), t, h])
}

/// The value-head model's hidden states `[B, T, H]` and values `[B, T]` (0 on padding) at the
/// positions that predict the response tokens, on `device` (autodiff or not, as the caller
/// needs): TRL `batched_forward_pass`'s hidden states and `values[:, :-1]` there, with every
/// distinct query run once ([`response_hidden_states`]) and the value head applied only where
/// it is read.
pub fn response_hidden_and_values<M: CausalLm>(
    model: &LmWithValueHead<M>,
    batch: &QueryResponseBatch,
    device: &Device,
) -> (Tensor<3>, Tensor<2>) {
    let hidden = response_hidden_states(&model.lm, batch, device);
    let values = model.v_head.forward(hidden.clone()) * batch.response_mask(device);
    (hidden, values)
}

/// The rows of right-padded `[B, S, H]` hidden states that predict the response tokens,
/// `[B, T, H]` (padding entries read the last query position).
fn at_responses(hidden: Tensor<3>, batch: &QueryResponseBatch) -> Tensor<3> {
    let [b, s, h] = hidden.dims();
    let t = batch.max_response_len();
    let flat = Tensor::<1, Int>::from_data(
        TensorData::new(batch.flat_positions(), [b * t]),
        &hidden.device(),
    );
    hidden
        .reshape([b * s, h])
        .select(0, flat)
        .reshape([b, t, h])
}

/// Takes `[B, S]` per-position values to the response positions (`[B, T]`, 0 on padding): the
/// value at `|q_b| + t − 1` estimates the return from response token `t` on (TRL
/// `values[:, :-1]` masked from `len(q) - 1`). Differentiable like [`response_logprobs`].
pub fn response_values(values: Tensor<2>, batch: &QueryResponseBatch) -> Tensor<2> {
    let [b, s] = values.dims();
    let t = batch.max_response_len();
    let device = values.device();
    let positions =
        Tensor::<1, Int>::from_data(TensorData::new(batch.flat_positions(), [b * t]), &device);
    values.reshape([b * s]).select(0, positions).reshape([b, t]) * batch.response_mask(&device)
}

/// TRL `batched_forward_pass` for the policy: one no-grad forward of the value-head model over
/// the `[q; y]` batch (positions = arange; its padding left out, [`Packing`]), read at the
/// response positions.
pub fn score<M: CausalLm>(model: &LmWithValueHead<M>, batch: &QueryResponseBatch) -> Scored {
    let device = batch.input_ids.device().without_autodiff();
    let model = model.valid();
    let (hidden, values) = response_hidden_and_values(&model, batch, &device);
    let (logprobs, log_softmax) = response_token_logprobs(&model.lm, hidden, batch);
    Scored {
        logprobs,
        log_softmax,
        values,
        mask: batch.response_mask(&device),
    }
}

/// The same for a plain causal LM (the frozen reference policy of the KL penalty).
pub fn score_reference<M: CausalLm>(model: &M, batch: &QueryResponseBatch) -> RefScored {
    let device = batch.input_ids.device().without_autodiff();
    let model = model.valid();
    let hidden = response_hidden_states(&model, batch, &device);
    let (logprobs, log_softmax) = response_token_logprobs(&model, hidden, batch);
    RefScored {
        logprobs,
        log_softmax,
        mask: batch.response_mask(&device),
    }
}
