//! The forwards of a GRPO or RLOO step, as TRL 1.16's `_get_per_token_logps_and_entropies`
//! takes them: the logits at the response positions, log-probabilities at the sampling
//! temperature, the full-vocabulary KL and entropy at temperature 1; and the no-grad pre-pass
//! over the whole batch (policy and reference).

use burn::tensor::{Device, Int, Tensor};
use lmrl_models::{
    CausalLm, QueryResponseBatch, entropy_rows, kl_rows, log_softmax, response_hidden_states,
};

use crate::error::Result;
use crate::group::agent::GroupAgent;
use crate::util::{check_finite_host, to_vec};

/// What the no-grad pre-pass fixes for the whole step, on the host, `[N, T]` row-major.
pub(super) struct Prepass {
    pub(super) t_max: usize,
    /// ℓ^old at the sampling temperature.
    pub(super) old_logps: Vec<f32>,
    /// ℓ^ref at the sampling temperature.
    pub(super) ref_logps: Vec<f32>,
    /// Σ_t full KL per completion (temperature 1).
    pub(super) kl: Vec<f32>,
    /// Σ_t entropy per completion (temperature 1).
    pub(super) entropy: Vec<f32>,
}

/// The logits at the positions that predict each response token: `[B·T, V]` rows (row
/// `b·T + t` predicts `y_b[t]`; padding rows are masked by the caller), and the `[B·T, 1]`
/// response ids. Each distinct query of the batch (a group's G completions share theirs) is
/// run once ([`response_hidden_states`]).
pub(super) fn response_logits<M: CausalLm>(
    model: &M,
    batch: &QueryResponseBatch,
    device: &Device,
) -> (Tensor<2>, Tensor<2, Int>) {
    let hidden = response_hidden_states(model, batch, device);
    let [b, t, h] = hidden.dims();
    (
        model.lm_head(hidden.reshape([b * t, h])),
        batch.response_id_column(device),
    )
}

/// The log-softmax rows at temperature 1 and at `temperature` (the same tensor when it is 1).
pub(super) fn log_softmaxes(logits: Tensor<2>, temperature: f64) -> (Tensor<2>, Tensor<2>) {
    let ls1 = log_softmax(logits.clone());
    let lst = if temperature == 1.0 {
        ls1.clone()
    } else {
        log_softmax(logits.div_scalar(temperature as f32))
    };
    (ls1, lst)
}

/// `[B, T]` gathered log-probabilities (0 on padding) from `[B·T, V]` rows.
pub(super) fn gather(ls: Tensor<2>, ids: Tensor<2, Int>, mask: &Tensor<2>) -> Tensor<2> {
    let [b, t] = mask.dims();
    ls.gather(1, ids).reshape([b, t]) * mask.clone()
}

/// Per-token full KL Σ_v p(v)(log p(v) − log p_ref(v)) and entropy −Σ_v p log p, `[B, T]`,
/// from `[B·T, V]` rows (no gradient).
pub(super) fn kl_and_entropy(
    ls: Tensor<2>,
    ref_ls: Tensor<2>,
    b: usize,
    t: usize,
) -> (Tensor<2>, Tensor<2>) {
    let kl = kl_rows(ls.clone(), ref_ls).reshape([b, t]);
    (kl, entropy_rows(ls).reshape([b, t]))
}

/// Masked row sums of a `[B, T]` tensor, on the host.
pub(super) fn row_sums(what: &str, x: Tensor<2>, mask: &Tensor<2>) -> Result<Vec<f32>> {
    to_vec(what, (x * mask.clone()).sum_dim(1))
}

/// Rows `idx` of a row-major `[N, t]` host matrix, cut or zero-padded to `t_new` columns.
pub(super) fn select_rows(host: &[f32], t: usize, idx: &[usize], t_new: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(idx.len() * t_new);
    for &i in idx {
        let row = &host[i * t..i * t + t];
        out.extend(row.iter().take(t_new));
        out.extend(std::iter::repeat_n(0.0, t_new.saturating_sub(t)));
    }
    out
}

impl<M: CausalLm> GroupAgent<M> {
    /// The no-grad forward of policy and reference over `queries`/`responses` in chunks of
    /// `forward_batch_size`: tempered log-probs of both, and the full KL and entropy at
    /// temperature 1 per completion.
    pub(super) fn prepass(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<Prepass> {
        let plain = self.plain_device();
        let policy = self.model.valid();
        let reference = reference.valid();
        let temp = self.algorithm.temperature();
        let t_max = responses.iter().map(Vec::len).max().unwrap_or(0);
        let fbs = self.algorithm.sizes().forward_batch_size;
        let mut out = Prepass {
            t_max,
            old_logps: Vec::with_capacity(queries.len() * t_max),
            ref_logps: Vec::with_capacity(queries.len() * t_max),
            kl: Vec::with_capacity(queries.len()),
            entropy: Vec::with_capacity(queries.len()),
        };
        for start in (0..queries.len()).step_by(fbs) {
            let end = (start + fbs).min(queries.len());
            let batch = QueryResponseBatch::new(
                &queries[start..end],
                &responses[start..end],
                self.pad_id,
                &plain,
            )?;
            let (b, t) = (end - start, batch.max_response_len());
            let mask = batch.response_mask(&plain);
            let (logits, ids) = response_logits(&policy, &batch, &plain);
            let (ls1, lst) = log_softmaxes(logits, temp);
            let old = gather(lst, ids.clone(), &mask);
            let (rlogits, _) = response_logits(&reference, &batch, &plain);
            let (rls1, rlst) = log_softmaxes(rlogits, temp);
            let refp = gather(rlst, ids, &mask);
            let (kl, ent) = kl_and_entropy(ls1, rls1, b, t);
            out.kl.extend(row_sums("objective/kl_dist", kl, &mask)?);
            out.entropy.extend(row_sums("entropy", ent, &mask)?);
            let old = to_vec("old_per_token_logps", old)?;
            let refp = to_vec("ref_per_token_logps", refp)?;
            out.old_logps
                .extend(select_rows(&old, t, &(0..b).collect::<Vec<_>>(), t_max));
            out.ref_logps
                .extend(select_rows(&refp, t, &(0..b).collect::<Vec<_>>(), t_max));
        }
        check_finite_host(
            "old_per_token_logps",
            &[queries.len(), t_max],
            &out.old_logps,
        )?;
        check_finite_host(
            "ref_per_token_logps",
            &[queries.len(), t_max],
            &out.ref_logps,
        )?;
        Ok(out)
    }

    /// Σ_t full-vocabulary KL_t (temperature 1) of each response under the current policy
    /// against `reference` (no grad): the KL of a batch the learner does not train on.
    pub fn kl_to_reference(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<Vec<f32>> {
        self.check_inputs(queries, responses, reference)?;
        Ok(self.prepass(queries, responses, reference)?.kl)
    }
}
