//! One group-relative learner: GRPO or RLOO with TRL 1.16's training step
//! (`GRPOTrainer` / `RLOOTrainer`: `_generate_and_score_completions` after the generation, then
//! `_compute_loss` over micro-batches) on any [`CausalLm`], critic-free.
//!
//! A step receives `prompts_per_step × G` completions laid out prompt by prompt (the G samples
//! of prompt 0, then those of prompt 1, …; [`crate::Learner::samples_per_prompt`] is G) with
//! their rewards, and:
//!
//! 1. computes the advantages from the rewards of each group of G ([`grpo_advantages`]; RLOO:
//!    the k1 KL penalty in the reward, then [`rloo_advantages`]);
//! 2. shuffles the completions once (a generator seeded with `(seed, steps since seeding)`),
//!    cuts them into micro-batches of `mini_batch_size`, and for each of `num_iterations`
//!    passes takes one Adam step per `gradient_accumulation_steps` micro-batches (gradients
//!    summed, optional global-norm clipping);
//! 3. reports TRL's logged statistics and the full-vocabulary KL to the reference.
//!
//! Log-probabilities are those of the logits divided by the sampling temperature, as TRL's
//! `_get_per_token_logps_and_entropies` takes them. On-policy (μ = 1 and one Adam step per
//! pass) the old log-probs are the current ones detached, as TRL does, and no separate no-grad
//! forward of the policy runs: the reference's no-grad forward happens micro-batch by
//! micro-batch next to the training forward. Off-policy, and for RLOO with β ≠ 0 (whose
//! advantages need the KL of every completion before the first update), a no-grad pass over
//! the whole batch comes first.
//!
//! The reported `kl` ([`GroupStats::objective_kl`]) is the batch mean of Σ_t of the
//! full-vocabulary KL(π_θ ‖ π_ref) at temperature 1 before the update, the same measure as
//! PPO's `objective/kl`, so KL is comparable across algorithms; the estimator each algorithm
//! optimises (k3 for GRPO, k1 for RLOO) is logged under TRL's key `kl`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use burn::module::{Flag, ModuleMapper, Param};
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use lmrl_models::{
    AutoLm, CausalLm, Generation, GenerationConfig, QueryResponseBatch, entropy_rows, generate,
    kl_rows, log_softmax, response_hidden_states,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::dist::{Collective, all_gather_f32, all_gather_usize, all_reduce_grads, shard};
use crate::error::{Result, RlError};
use crate::group::advantages::{RewardStats, grpo_advantages, rloo_advantages, rloo_rewards};
use crate::group::config::{GroupSizes, GrpoConfig, RlooConfig, ScaleRewards};
use crate::group::kl::rloo_sequence_kl;
use crate::group::loss::{
    GrpoLossInputs, GrpoLossParams, GrpoLossStats, LossNormalisation, RlooLossStats, grpo_loss,
    rloo_loss, sequence_logps,
};
use crate::group::parallel::{MicroShare, combine_micro_stats};
use crate::ppo::ResponseMask;
use crate::ppo::clip_grad_norm;
use crate::ppo::state::{
    AGENT_STATE_FILE, load_optimizer_record, param_ids_hex, read_toml, restore_param_ids,
    save_optimizer, state_err, write_toml,
};
use crate::util::{check_finite_host, mix_seed, to_scalar, to_vec};

/// Turns every module-owned training flag off (dropout), keeping autodiff on: TRL's GRPO and
/// RLOO trainers disable dropout (`disable_dropout=True` by default).
struct EvalMode;

impl ModuleMapper for EvalMode {
    fn map_flag(&mut self, flag: Param<Flag>) -> Param<Flag> {
        flag.with_value(false)
    }
}

/// Which group-relative algorithm a [`GroupAgent`] runs, with its settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupAlgorithm {
    /// GRPO (DeepSeekMath; TRL `GRPOTrainer`): group-normalised advantages, clipped per-token
    /// ratio, k3 KL in the loss.
    Grpo(GrpoConfig),
    /// RLOO (Ahmadian et al. 2024; TRL `RLOOTrainer`): leave-one-out baseline, k1 KL in the
    /// reward, clipped per-sequence ratio.
    Rloo(RlooConfig),
}

impl GroupAlgorithm {
    /// `grpo` or `rloo`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Grpo(_) => "grpo",
            Self::Rloo(_) => "rloo",
        }
    }

    /// The optimisation loop's sizes.
    pub fn sizes(&self) -> GroupSizes {
        match self {
            Self::Grpo(c) => c.sizes(),
            Self::Rloo(c) => c.sizes(),
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<()> {
        match self {
            Self::Grpo(c) => c.validate(),
            Self::Rloo(c) => c.validate(),
        }
    }

    /// β: of the k3 loss term (GRPO) or of the reward penalty (RLOO).
    pub fn beta(&self) -> f64 {
        match self {
            Self::Grpo(c) => c.beta,
            Self::Rloo(c) => c.beta,
        }
    }

    fn learning_rate(&self) -> f64 {
        match self {
            Self::Grpo(c) => c.learning_rate,
            Self::Rloo(c) => c.learning_rate,
        }
    }

    fn temperature(&self) -> f64 {
        match self {
            Self::Grpo(c) => c.temperature,
            Self::Rloo(c) => c.temperature,
        }
    }

    fn max_grad_norm(&self) -> Option<f32> {
        match self {
            Self::Grpo(c) => c.max_grad_norm,
            Self::Rloo(c) => c.max_grad_norm,
        }
    }

    fn max_completion_length(&self) -> usize {
        match self {
            Self::Grpo(c) => c.max_completion_length,
            Self::Rloo(c) => c.max_completion_length,
        }
    }

    fn mask_truncated(&self) -> bool {
        match self {
            Self::Grpo(c) => c.mask_truncated_completions,
            Self::Rloo(c) => c.mask_truncated_completions,
        }
    }

    fn seed(&self) -> u64 {
        match self {
            Self::Grpo(c) => c.seed,
            Self::Rloo(c) => c.seed,
        }
    }

    fn adam(&self) -> ModuleOptimizer {
        let (b1, b2, eps) = match self {
            Self::Grpo(c) => (c.adam_beta1, c.adam_beta2, c.adam_epsilon),
            Self::Rloo(c) => (c.adam_beta1, c.adam_beta2, c.adam_epsilon),
        };
        // PyTorch's Adam(W) with TRL's `weight_decay=0`: β 0.9/0.999, ε 1e-8.
        crate::optim::adam(b1, b2, eps)
    }

    /// A no-grad pass over the whole batch is needed before the first update: off-policy the
    /// old log-probs must come from the policy that sampled; RLOO with β ≠ 0 needs every
    /// completion's KL for its rewards.
    fn needs_prepass(&self) -> bool {
        !self.sizes().on_policy() || matches!(self, Self::Rloo(c) if c.beta != 0.0)
    }
}

/// Layout version of [`GroupAgentState`].
pub const GROUP_STATE_FORMAT: u32 = 1;

/// The scalar training state of a [`GroupAgent`] besides weights and Adam moments
/// (`trainer_state.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupAgentState {
    /// [`GROUP_STATE_FORMAT`].
    pub format: u32,
    /// `grpo` or `rloo`.
    pub algorithm: String,
    /// Steps taken.
    pub steps: usize,
    /// Steps since the micro-batch RNG was seeded (0 after [`GroupAgent::reset_state`]).
    pub rng_steps: usize,
    /// Module path → parameter id (hex) the optimizer state is keyed by.
    pub param_ids: BTreeMap<String, String>,
}

/// What one [`GroupAgent::step`] reports: TRL's logged values under their own names, plus the
/// quantities every learner reports.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct GroupStats {
    /// `grpo` or `rloo`.
    pub algorithm: &'static str,
    /// Reward mean, std and the fraction of groups whose rewards are all equal (of the scores
    /// given to the step, before RLOO's KL penalty), TRL `reward`, `reward_std`,
    /// `frac_reward_zero_std`.
    pub rewards: RewardStats,
    /// Batch mean of Σ_t KL_t(π_θ ‖ π_ref) over the full vocabulary at temperature 1, before
    /// the update (the measure of PPO's `objective/kl`).
    pub objective_kl: f32,
    /// Σ_t KL_t per completion.
    pub objective_kl_dist: Vec<f32>,
    /// The algorithm's own KL estimate as TRL logs it (`kl`): GRPO the token mean of the k3
    /// term (×ρ with the bias correction) over the micro-batches, `None` when β = 0; RLOO the
    /// token mean of k1 = ℓ^old − ℓ^ref.
    pub estimator_kl: Option<f32>,
    /// β.
    pub beta: f64,
    /// Token-mean entropy of the policy at temperature 1 (nats).
    pub entropy: f32,
    /// Mean over micro-batches of the loss each back-propagated (before the accumulation
    /// division).
    pub loss: f32,
    /// ½·token mean of (ℓ − ℓ^old)² over the micro-batches (0 on-policy).
    pub approxkl: f32,
    /// `clip_ratio/low_mean`, `high_mean`, `region_mean` (means over micro-batches),
    /// `low_min`, `high_max` (extremes).
    pub clip_ratio_low_mean: f32,
    pub clip_ratio_high_mean: f32,
    pub clip_ratio_region_mean: f32,
    pub clip_ratio_low_min: f32,
    pub clip_ratio_high_max: f32,
    /// `completions/mean_length`, `min_length`, `max_length` (tokens, EOS included).
    pub completion_mean_length: f32,
    pub completion_min_length: f32,
    pub completion_max_length: f32,
    /// `completions/clipped_ratio`: fraction of completions that reached
    /// `max_completion_length` without EOS.
    pub truncated_fraction: f32,
    /// Mean advantage and its spread (diagnostics).
    pub advantages_mean: f32,
    pub advantages_std: f32,
    /// Adam steps taken.
    pub optimizer_steps: usize,
    /// Mean global gradient norm before clipping (when clipping is on).
    pub grad_norm: Option<f32>,
    pub learning_rate: f64,
}

impl GroupStats {
    /// Every statistic under the key TRL's trainer logs it with (plus `objective/kl`, the
    /// cross-algorithm KL).
    pub fn to_trl_map(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: f64| {
            m.insert(k.to_string(), v);
        };
        put("reward", f64::from(self.rewards.reward));
        put("reward_std", f64::from(self.rewards.reward_std));
        put(
            "frac_reward_zero_std",
            f64::from(self.rewards.frac_reward_zero_std),
        );
        put("objective/kl", f64::from(self.objective_kl));
        if let Some(k) = self.estimator_kl {
            put("kl", f64::from(k));
        }
        put("beta", self.beta);
        put("entropy", f64::from(self.entropy));
        put("loss", f64::from(self.loss));
        put("clip_ratio/low_mean", f64::from(self.clip_ratio_low_mean));
        put("clip_ratio/high_mean", f64::from(self.clip_ratio_high_mean));
        put(
            "clip_ratio/region_mean",
            f64::from(self.clip_ratio_region_mean),
        );
        put("clip_ratio/low_min", f64::from(self.clip_ratio_low_min));
        put("clip_ratio/high_max", f64::from(self.clip_ratio_high_max));
        put(
            "completions/mean_length",
            f64::from(self.completion_mean_length),
        );
        put(
            "completions/min_length",
            f64::from(self.completion_min_length),
        );
        put(
            "completions/max_length",
            f64::from(self.completion_max_length),
        );
        put(
            "completions/clipped_ratio",
            f64::from(self.truncated_fraction),
        );
        put("advantages/mean", f64::from(self.advantages_mean));
        put("advantages/std", f64::from(self.advantages_std));
        put("learning_rate", self.learning_rate);
        if let Some(g) = self.grad_norm {
            put("grad_norm", f64::from(g));
        }
        m
    }
}

/// A GRPO or RLOO learner: the policy on an autodiff device and its Adam optimizer. No value
/// head.
#[derive(Clone)]
pub struct GroupAgent<M: CausalLm> {
    model: M,
    optimizer: ModuleOptimizer,
    algorithm: GroupAlgorithm,
    device: Device,
    pad_id: u32,
    eos_id: Option<u32>,
    steps: usize,
    rng_steps: usize,
    collective: Arc<dyn Collective>,
}

impl<M: CausalLm> std::fmt::Debug for GroupAgent<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupAgent")
            .field("algorithm", &self.algorithm)
            .field("steps", &self.steps)
            .field("rng_steps", &self.rng_steps)
            .finish_non_exhaustive()
    }
}

/// What the no-grad pre-pass fixes for the whole step, on the host, `[N, T]` row-major.
struct Prepass {
    t_max: usize,
    /// ℓ^old at the sampling temperature.
    old_logps: Vec<f32>,
    /// ℓ^ref at the sampling temperature.
    ref_logps: Vec<f32>,
    /// Σ_t full KL per completion (temperature 1).
    kl: Vec<f32>,
    /// Σ_t entropy per completion (temperature 1).
    entropy: Vec<f32>,
}

/// Per-completion quantities the step gathers for its statistics.
#[derive(Default)]
pub(super) struct Collected {
    pub(super) kl: Vec<Option<f32>>,
    pub(super) entropy: Vec<Option<f32>>,
    pub(super) loss: Vec<f32>,
    pub(super) approxkl: Vec<f32>,
    pub(super) estimator_kl: Vec<f32>,
    pub(super) low_mean: Vec<f32>,
    pub(super) high_mean: Vec<f32>,
    pub(super) region_mean: Vec<f32>,
    pub(super) low_min: Vec<f32>,
    pub(super) high_max: Vec<f32>,
    pub(super) grad_norm_sum: f64,
    pub(super) optimizer_steps: usize,
}

/// The logits at the positions that predict each response token: `[B·T, V]` rows (row
/// `b·T + t` predicts `y_b[t]`; padding rows are masked by the caller), and the `[B·T, 1]`
/// response ids. Each distinct query of the batch (a group's G completions share theirs) is
/// run once ([`response_hidden_states`]).
fn response_logits<M: CausalLm>(
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
fn log_softmaxes(logits: Tensor<2>, temperature: f64) -> (Tensor<2>, Tensor<2>) {
    let ls1 = log_softmax(logits.clone());
    let lst = if temperature == 1.0 {
        ls1.clone()
    } else {
        log_softmax(logits.div_scalar(temperature as f32))
    };
    (ls1, lst)
}

/// `[B, T]` gathered log-probabilities (0 on padding) from `[B·T, V]` rows.
fn gather(ls: Tensor<2>, ids: Tensor<2, Int>, mask: &Tensor<2>) -> Tensor<2> {
    let [b, t] = mask.dims();
    ls.gather(1, ids).reshape([b, t]) * mask.clone()
}

/// Per-token full KL Σ_v p(v)(log p(v) − log p_ref(v)) and entropy −Σ_v p log p, `[B, T]`,
/// from `[B·T, V]` rows (no gradient).
fn kl_and_entropy(ls: Tensor<2>, ref_ls: Tensor<2>, b: usize, t: usize) -> (Tensor<2>, Tensor<2>) {
    let kl = kl_rows(ls.clone(), ref_ls).reshape([b, t]);
    (kl, entropy_rows(ls).reshape([b, t]))
}

/// Masked row sums of a `[B, T]` tensor, on the host.
fn row_sums(what: &str, x: Tensor<2>, mask: &Tensor<2>) -> Result<Vec<f32>> {
    to_vec(what, (x * mask.clone()).sum_dim(1))
}

/// Rows `idx` of a row-major `[N, t]` host matrix, cut or zero-padded to `t_new` columns.
fn select_rows(host: &[f32], t: usize, idx: &[usize], t_new: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(idx.len() * t_new);
    for &i in idx {
        let row = &host[i * t..i * t + t];
        out.extend(row.iter().take(t_new));
        out.extend(std::iter::repeat_n(0.0, t_new.saturating_sub(t)));
    }
    out
}

fn mean_f32(x: &[f32]) -> f32 {
    if x.is_empty() {
        0.0
    } else {
        (x.iter().map(|&v| f64::from(v)).sum::<f64>() / x.len() as f64) as f32
    }
}

impl<M: CausalLm> GroupAgent<M> {
    /// A learner for `model`, which must live on `device` (an autodiff device). Validates the
    /// settings and switches dropout off.
    pub fn new(model: M, algorithm: GroupAlgorithm, device: &Device) -> Result<Self> {
        algorithm.validate()?;
        if !device.is_autodiff() {
            return Err(RlError::Config {
                field: "device".into(),
                reason: format!(
                    "{} training needs an autodiff device (`device.autodiff()`)",
                    algorithm.name()
                ),
            });
        }
        let model = model.map(&mut EvalMode);
        let eos_id = model.eos_token_id();
        Ok(Self {
            optimizer: algorithm.adam(),
            pad_id: eos_id.unwrap_or(0),
            eos_id,
            model,
            algorithm,
            device: device.clone(),
            steps: 0,
            rng_steps: 0,
            collective: crate::dist::single_process(),
        })
    }

    /// Makes this learner one rank of a data-parallel group: [`GroupAgent::step`] then takes
    /// the completions of the rank's contiguous share ([`crate::dist::shard`]) of the
    /// `prompts_per_step` prompts — whole groups, so each group's baseline is local — and
    /// gathers every completion's score, length and KL, so the advantages, the loss
    /// normalisers and the logged statistics are the whole batch's; each micro-batch of the
    /// shared order is split over the ranks holding its members, with each rank's loss scaled
    /// by its share of the micro-batch, and the gradients are summed before clipping and Adam.
    /// Every rank then ends the step with the weights one process would have (up to float
    /// rounding). Joining copies rank 0's weights to every rank. Needs `prompts_per_step ≥` the
    /// group's ranks.
    pub fn set_collective(&mut self, collective: Arc<dyn Collective>) -> Result<()> {
        let prompts = self.algorithm.sizes().prompts_per_step;
        if collective.world() > prompts {
            return Err(RlError::Config {
                field: "prompts_per_step".into(),
                reason: format!(
                    "{prompts} is smaller than the {} data-parallel ranks that share it",
                    collective.world()
                ),
            });
        }
        // Every rank starts from rank 0's weights (LoRA inits may differ).
        self.model = crate::dist::broadcast_module(&*collective, self.model.clone())?;
        self.collective = collective;
        Ok(())
    }

    /// A GRPO learner.
    pub fn grpo(model: M, config: GrpoConfig, device: &Device) -> Result<Self> {
        Self::new(model, GroupAlgorithm::Grpo(config), device)
    }

    /// An RLOO learner.
    pub fn rloo(model: M, config: RlooConfig, device: &Device) -> Result<Self> {
        Self::new(model, GroupAlgorithm::Rloo(config), device)
    }

    /// The policy.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// Gives the policy back.
    pub fn into_model(self) -> M {
        self.model
    }

    /// The algorithm and its settings.
    pub fn algorithm(&self) -> &GroupAlgorithm {
        &self.algorithm
    }

    /// The training device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Steps taken.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Completions per prompt, G.
    pub fn group_size(&self) -> usize {
        self.algorithm.sizes().num_generations
    }

    /// β (constant: TRL's group trainers have no KL controller).
    pub fn kl_coef(&self) -> f64 {
        self.algorithm.beta()
    }

    /// Fresh Adam moments and a reseeded micro-batch RNG; the weights are kept.
    pub fn reset_state(&mut self) {
        self.optimizer = self.algorithm.adam();
        self.rng_steps = 0;
    }

    /// The scalar training state.
    pub fn training_state(&self) -> Result<GroupAgentState> {
        Ok(GroupAgentState {
            format: GROUP_STATE_FORMAT,
            algorithm: self.algorithm.name().to_string(),
            steps: self.steps,
            rng_steps: self.rng_steps,
            param_ids: param_ids_hex(&self.model)?,
        })
    }

    /// Writes `optimizer.bpk` (Adam moments) and `trainer_state.toml` ([`GroupAgentState`])
    /// into `dir`: with the weights, everything the next step depends on.
    pub fn save_state(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| state_err(dir, e))?;
        save_optimizer(&self.optimizer, dir)?;
        write_toml(&dir.join(AGENT_STATE_FILE), &self.training_state()?)
    }

    /// Restores what [`GroupAgent::save_state`] wrote into this agent, whose model must already
    /// hold the weights saved with it.
    pub fn load_state(&mut self, dir: &Path) -> Result<()> {
        let file = dir.join(AGENT_STATE_FILE);
        let state: GroupAgentState = read_toml(&file)?;
        if state.format != GROUP_STATE_FORMAT {
            return Err(state_err(
                &file,
                format!(
                    "format {} (this build reads {GROUP_STATE_FORMAT})",
                    state.format
                ),
            ));
        }
        if state.algorithm != self.algorithm.name() {
            return Err(state_err(
                &file,
                format!(
                    "holds the state of a {} learner, not {}",
                    state.algorithm,
                    self.algorithm.name()
                ),
            ));
        }
        let record = load_optimizer_record(dir)?;
        self.model = restore_param_ids(self.model.clone(), &state.param_ids, &file)?;
        self.optimizer = self.algorithm.adam().load_record(record);
        self.steps = state.steps;
        self.rng_steps = state.rng_steps;
        Ok(())
    }

    /// Samples responses from the policy (no gradient, KV cache).
    pub fn generate(&self, prompts: &[Vec<u32>], cfg: &GenerationConfig) -> Result<Generation> {
        Ok(generate(&self.model, prompts, cfg, &self.device)?)
    }

    fn plain_device(&self) -> Device {
        self.device.clone().without_autodiff()
    }

    fn check_inputs(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<()> {
        if queries.len() != responses.len() {
            return Err(RlError::Shape {
                what: "responses".into(),
                expected: vec![queries.len()],
                got: vec![responses.len()],
            });
        }
        if let Some(i) = responses.iter().position(Vec::is_empty) {
            return Err(RlError::EmptyResponse {
                what: format!("{} step", self.algorithm.name()),
                sample: i,
            });
        }
        crate::util::check_fits(&self.model, queries, responses, self.pad_id)?;
        crate::util::check_fits(reference, queries, responses, self.pad_id)
    }

    /// The no-grad forward of policy and reference over `queries`/`responses` in chunks of
    /// `forward_batch_size`: tempered log-probs of both, and the full KL and entropy at
    /// temperature 1 per completion.
    fn prepass(
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

    /// One GRPO or RLOO step on `prompts_per_step × G` completions laid out prompt by prompt
    /// (see the module docs); `scores[i]` is the reward of `responses[i]` to `queries[i]`.
    pub fn step(
        &mut self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
        reference: &M,
    ) -> Result<GroupStats> {
        let sizes = self.algorithm.sizes();
        let g = sizes.num_generations;
        let coll = &*self.collective;
        // This rank's completions are the batch's `offset..offset + n`.
        let mine = shard(sizes.prompts_per_step, coll.rank(), coll.world());
        let (offset, n) = (mine.start * g, mine.len() * g);
        let n_all = sizes.completions();
        for (what, len) in [
            ("queries", queries.len()),
            ("responses", responses.len()),
            ("scores", scores.len()),
        ] {
            if len != n {
                return Err(RlError::Shape {
                    what: what.into(),
                    expected: vec![n],
                    got: vec![len],
                });
            }
        }
        self.check_inputs(queries, responses, reference)?;
        check_finite_host("scores", &[n], scores)?;
        let plain = self.plain_device();
        let lengths: Vec<usize> = responses.iter().map(Vec::len).collect();
        let t_max = lengths.iter().copied().max().unwrap_or(0);
        let max_len = self.algorithm.max_completion_length();
        let truncated: Vec<bool> = responses
            .iter()
            .map(|y| y.len() >= max_len && y.last().copied() != self.eos_id)
            .collect();
        // The loss mask (truncated completions zeroed when asked); every completion still
        // counts in its group's reward statistics.
        let mut loss_rows: Vec<Vec<f32>> = lengths
            .iter()
            .map(|&l| (0..t_max).map(|t| f32::from(u8::from(t < l))).collect())
            .collect();
        if self.algorithm.mask_truncated() {
            for (row, &tr) in loss_rows.iter_mut().zip(&truncated) {
                if tr {
                    row.fill(0.0);
                }
            }
        }
        // Every completion's length, truncation and score, in batch order (this rank's alone
        // with one rank).
        let all_lengths = all_gather_usize(coll, &lengths)?;
        let flags: Vec<usize> = truncated.iter().map(|&t| usize::from(t)).collect();
        let all_truncated: Vec<bool> = all_gather_usize(coll, &flags)?
            .into_iter()
            .map(|t| t == 1)
            .collect();
        let all_scores = all_gather_f32(coll, scores)?;
        // The tokens each completion puts in the loss.
        let active: Vec<usize> = all_lengths
            .iter()
            .zip(&all_truncated)
            .map(|(&l, &t)| {
                if t && self.algorithm.mask_truncated() {
                    0
                } else {
                    l
                }
            })
            .collect();
        let active_tokens: usize = active.iter().sum();

        let prepass = if self.algorithm.needs_prepass() {
            Some(self.prepass(queries, responses, reference)?)
        } else {
            None
        };

        // Advantages, of the whole batch.
        let scores_t = Tensor::<1>::from_data(TensorData::new(all_scores, [n_all]), &plain);
        let reward_stats = grpo_advantages(scores_t.clone(), g, ScaleRewards::Group)?.stats;
        let (advantages, estimator_kl_rloo) = match &self.algorithm {
            GroupAlgorithm::Grpo(c) => (
                to_vec(
                    "advantages",
                    grpo_advantages(scores_t, g, c.scale_rewards)?.advantages,
                )?,
                None,
            ),
            GroupAlgorithm::Rloo(c) => {
                let (seq_kl, mean_kl) = match &prepass {
                    Some(p) => {
                        let mask = ResponseMask::from_rows(&loss_rows, &plain)?;
                        let k = rloo_sequence_kl(
                            Tensor::from_data(
                                TensorData::new(p.old_logps.clone(), [n, t_max]),
                                &plain,
                            ),
                            Tensor::from_data(
                                TensorData::new(p.ref_logps.clone(), [n, t_max]),
                                &plain,
                            ),
                            &mask,
                        )?;
                        if coll.world() == 1 {
                            (Some(k.kl), Some(k.mean_kl))
                        } else {
                            let all = all_gather_f32(coll, &to_vec("rloo kl", k.kl)?)?;
                            let mean = all.iter().sum::<f32>() / active_tokens.max(1) as f32;
                            let all = TensorData::new(all, [n_all]);
                            (Some(Tensor::from_data(all, &plain)), Some(mean))
                        }
                    }
                    None => (None, None),
                };
                let r = rloo_rewards(scores_t, seq_kl, c.beta, c.reward_clip_range)?;
                (
                    to_vec(
                        "advantages",
                        rloo_advantages(r, g, c.normalize_advantages)?.advantages,
                    )?,
                    mean_kl,
                )
            }
        };
        check_finite_host("advantages", &[n_all], &advantages)?;

        // The micro-batch order of this step (the same on every rank).
        let mut order: Vec<usize> = (0..n_all).collect();
        let mut rng =
            StdRng::seed_from_u64(mix_seed(&[self.algorithm.seed(), self.rng_steps as u64]));
        order.shuffle(&mut rng);
        let micro: Vec<&[usize]> = order.chunks(sizes.mini_batch_size).collect();
        let gas = sizes.gradient_accumulation_steps;
        let normalisation = match &self.algorithm {
            GroupAlgorithm::Grpo(c) => match c.loss_type {
                crate::group::GrpoLossType::Dapo => {
                    LossNormalisation::dapo(active_tokens, 1, gas, micro.len())
                }
                _ => c.normalisation(active_tokens),
            },
            GroupAlgorithm::Rloo(_) => LossNormalisation::Token,
        };
        let mut col = Collected {
            kl: vec![None; n],
            entropy: vec![None; n],
            ..Collected::default()
        };
        let ctx = StepInputs {
            queries,
            responses,
            loss_rows: &loss_rows,
            advantages: &advantages[offset..offset + n],
            prepass: prepass.as_ref(),
            reference,
            normalisation,
        };
        for pass in 0..sizes.num_iterations {
            for group in micro.chunks(gas) {
                let mut accum = GradientsAccumulator::<M>::new();
                for mb in group {
                    if coll.world() == 1 {
                        let grads = self.train_micro(&ctx, mb, pass, &mut col, None)?;
                        accum.accumulate(&self.model, grads);
                        continue;
                    }
                    let share = MicroShare::new(mb, offset..offset + n, &active);
                    if !share.local.is_empty() {
                        let scale = share.loss_scale(&self.algorithm, ctx.normalisation);
                        let grads =
                            self.train_micro(&ctx, &share.local, pass, &mut col, Some(scale))?;
                        accum.accumulate(&self.model, grads);
                    }
                    combine_micro_stats(
                        coll,
                        &mut col,
                        &share,
                        &self.algorithm,
                        ctx.normalisation,
                    )?;
                }
                let mut grads = all_reduce_grads(coll, &self.model, accum.grads())?;
                if let Some(max) = self.algorithm.max_grad_norm() {
                    col.grad_norm_sum += f64::from(clip_grad_norm(&self.model, &mut grads, max)?);
                }
                let lr = self.algorithm.learning_rate();
                self.model = self.optimizer.step(lr, self.model.clone(), grads);
                col.optimizer_steps += 1;
            }
        }
        self.steps += 1;
        self.rng_steps += 1;
        let (kl, entropy) = match &prepass {
            Some(p) => (p.kl.clone(), p.entropy.clone()),
            None => (
                col.kl.iter().map(|k| k.unwrap_or(0.0)).collect(),
                col.entropy.iter().map(|e| e.unwrap_or(0.0)).collect(),
            ),
        };
        let per_completion = PerCompletion {
            lengths: &all_lengths,
            truncated: &all_truncated,
            advantages: &advantages,
            kl: all_gather_f32(coll, &kl)?,
            entropy: all_gather_f32(coll, &entropy)?,
        };
        self.stats(per_completion, reward_stats, estimator_kl_rloo, col)
    }

    /// One micro-batch: the reference's no-grad forward (on-policy), the training forward at
    /// the sampling temperature, the GRPO or RLOO loss, its gradients ÷ the accumulation steps
    /// where TRL divides (`grpo`/`bnpo`/`dr_grpo`/RLOO; `dapo` has them in its normaliser).
    /// `mb` indexes this rank's completions; with several ranks the loss is multiplied by
    /// `scale`, the rank's share of the whole micro-batch's reduction.
    fn train_micro(
        &self,
        ctx: &StepInputs<'_, M>,
        mb: &[usize],
        pass: usize,
        col: &mut Collected,
        scale: Option<f32>,
    ) -> Result<GradientsParams> {
        let plain = self.plain_device();
        let temp = self.algorithm.temperature();
        let q: Vec<Vec<u32>> = mb.iter().map(|&i| ctx.queries[i].clone()).collect();
        let y: Vec<Vec<u32>> = mb.iter().map(|&i| ctx.responses[i].clone()).collect();
        let batch = QueryResponseBatch::new(&q, &y, self.pad_id, &self.device)?;
        let (b, t) = (mb.len(), batch.max_response_len());
        let rows: Vec<Vec<f32>> = mb.iter().map(|&i| ctx.loss_rows[i][..t].to_vec()).collect();
        let mask = ResponseMask::from_host(rows.concat(), b, t, &self.device)?;
        let mask_t = mask.tensor();
        let host = |v: Vec<f32>, dims: [usize; 2]| -> Tensor<2> {
            Tensor::from_data(TensorData::new(v, dims), &self.device)
        };
        let adv = Tensor::<1>::from_data(
            TensorData::new(mb.iter().map(|&i| ctx.advantages[i]).collect(), [b]),
            &self.device,
        );

        // Training forward.
        let (logits, ids) = response_logits(&self.model, &batch, &self.device);
        let (ls1, lst) = log_softmaxes(logits, temp);
        let logps = gather(lst, ids.clone(), &mask_t);

        // Old and reference log-probs.
        let (old, refp) = match ctx.prepass {
            Some(p) => (
                Some(host(select_rows(&p.old_logps, p.t_max, mb, t), [b, t])),
                Some(host(select_rows(&p.ref_logps, p.t_max, mb, t), [b, t])),
            ),
            None => {
                // On-policy: the reference's forward now, and the statistics of the policy
                // before its update from this (detached) training forward.
                let pbatch = QueryResponseBatch::new(&q, &y, self.pad_id, &plain)?;
                let reference = ctx.reference.valid();
                let (rlogits, rids) = response_logits(&reference, &pbatch, &plain);
                let (rls1, rlst) = log_softmaxes(rlogits, temp);
                let pmask = pbatch.response_mask(&plain);
                let refp = to_vec("ref_per_token_logps", gather(rlst, rids, &pmask))?;
                if pass == 0 {
                    let ls1_plain = ls1.clone().detach().to_device(&plain);
                    let (kl, ent) = kl_and_entropy(ls1_plain, rls1, b, t);
                    let kl = row_sums("objective/kl_dist", kl, &pmask)?;
                    let ent = row_sums("entropy", ent, &pmask)?;
                    for (k, &i) in mb.iter().enumerate() {
                        col.kl[i] = Some(kl[k]);
                        col.entropy[i] = Some(ent[k]);
                    }
                }
                (None, Some(host(refp, [b, t])))
            }
        };
        drop(ls1);

        // ½·(ℓ − ℓ^old)² of the micro-batch (0 when old = ℓ.detach()).
        if let Some(o) = &old {
            let d = (logps.clone().detach() - o.clone()) * mask_t.clone();
            let tokens = mask.total().max(1) as f32;
            col.approxkl
                .push(0.5 * to_scalar("approxkl", d.square().sum())? / tokens);
        } else {
            col.approxkl.push(0.0);
        }

        let gas = self.algorithm.sizes().gradient_accumulation_steps as f32;
        let loss = match &self.algorithm {
            GroupAlgorithm::Grpo(c) => {
                let out = grpo_loss(
                    GrpoLossInputs {
                        logps,
                        old_logps: old,
                        ref_logps: (c.beta != 0.0).then_some(refp).flatten(),
                        advantages: adv,
                    },
                    &mask,
                    &GrpoLossParams {
                        normalisation: ctx.normalisation,
                        ..c.loss_params(1)
                    },
                )?;
                push_grpo_stats(col, &out.stats);
                col.loss.push(to_scalar("loss", out.loss.clone().detach())?);
                let loss = match scale {
                    Some(s) => out.loss.mul_scalar(s),
                    None => out.loss,
                };
                match ctx.normalisation {
                    LossNormalisation::GlobalToken { .. } => loss,
                    _ => loss.div_scalar(gas),
                }
            }
            GroupAlgorithm::Rloo(c) => {
                let old_seq = match old {
                    Some(o) => sequence_logps(o, &mask)?,
                    None => sequence_logps(logps.clone().detach(), &mask)?,
                };
                let out = rloo_loss(logps, old_seq, adv, &mask, &c.loss_params())?;
                push_rloo_stats(col, &out.stats);
                col.loss.push(to_scalar("loss", out.loss.clone().detach())?);
                match scale {
                    Some(s) => out.loss.mul_scalar(s).div_scalar(gas),
                    None => out.loss.div_scalar(gas),
                }
            }
        };
        Ok(GradientsParams::from_grads(loss.backward(), &self.model))
    }

    /// The step's statistics, from every completion of the batch and the micro-batches'
    /// (already reduced) loss statistics.
    fn stats(
        &self,
        all: PerCompletion<'_>,
        rewards: RewardStats,
        rloo_kl: Option<f32>,
        col: Collected,
    ) -> Result<GroupStats> {
        let PerCompletion {
            lengths,
            truncated,
            advantages,
            kl,
            entropy: entropy_sum,
        } = all;
        let n = lengths.len();
        check_finite_host("objective/kl_dist", &[n], &kl)?;
        let tokens: usize = lengths.iter().sum();
        let entropy =
            (entropy_sum.iter().map(|&e| f64::from(e)).sum::<f64>() / tokens.max(1) as f64) as f32;
        let lens: Vec<f32> = lengths.iter().map(|&l| l as f32).collect();
        let adv_mean = mean_f32(advantages);
        let adv_var = advantages
            .iter()
            .map(|&a| f64::from(a - adv_mean).powi(2))
            .sum::<f64>()
            / (n.max(2) - 1) as f64;
        let estimator_kl = match &self.algorithm {
            GroupAlgorithm::Grpo(c) => (c.beta != 0.0).then(|| mean_f32(&col.estimator_kl)),
            GroupAlgorithm::Rloo(_) => rloo_kl,
        };
        let nan_min = |v: &[f32]| v.iter().copied().filter(|x| !x.is_nan()).reduce(f32::min);
        let nan_max = |v: &[f32]| v.iter().copied().filter(|x| !x.is_nan()).reduce(f32::max);
        Ok(GroupStats {
            algorithm: self.algorithm.name(),
            rewards,
            objective_kl: mean_f32(&kl),
            objective_kl_dist: kl,
            estimator_kl,
            beta: self.algorithm.beta(),
            entropy,
            loss: mean_f32(&col.loss),
            approxkl: mean_f32(&col.approxkl),
            clip_ratio_low_mean: mean_f32(&col.low_mean),
            clip_ratio_high_mean: mean_f32(&col.high_mean),
            clip_ratio_region_mean: mean_f32(&col.region_mean),
            clip_ratio_low_min: nan_min(&col.low_min).unwrap_or(f32::NAN),
            clip_ratio_high_max: nan_max(&col.high_max).unwrap_or(f32::NAN),
            completion_mean_length: mean_f32(&lens),
            completion_min_length: lens.iter().copied().fold(f32::INFINITY, f32::min),
            completion_max_length: lens.iter().copied().fold(0.0, f32::max),
            truncated_fraction: truncated.iter().filter(|&&t| t).count() as f32 / n.max(1) as f32,
            advantages_mean: adv_mean,
            advantages_std: adv_var.sqrt() as f32,
            optimizer_steps: col.optimizer_steps,
            grad_norm: self
                .algorithm
                .max_grad_norm()
                .map(|_| (col.grad_norm_sum / col.optimizer_steps.max(1) as f64) as f32),
            learning_rate: self.algorithm.learning_rate(),
        })
    }
}

/// Every completion's quantities for a step's statistics, in batch order (gathered from every
/// rank).
struct PerCompletion<'a> {
    lengths: &'a [usize],
    truncated: &'a [bool],
    advantages: &'a [f32],
    /// Σ_t full KL (temperature 1).
    kl: Vec<f32>,
    /// Σ_t entropy (temperature 1).
    entropy: Vec<f32>,
}

/// What every micro-batch of a step reads.
struct StepInputs<'a, M> {
    queries: &'a [Vec<u32>],
    responses: &'a [Vec<u32>],
    loss_rows: &'a [Vec<f32>],
    advantages: &'a [f32],
    prepass: Option<&'a Prepass>,
    reference: &'a M,
    normalisation: LossNormalisation,
}

fn push_grpo_stats(col: &mut Collected, s: &GrpoLossStats) {
    if let Some(k) = s.kl {
        col.estimator_kl.push(k);
    }
    col.low_mean.push(s.clip_ratio_low_mean);
    col.high_mean.push(s.clip_ratio_high_mean);
    col.region_mean.push(s.clip_ratio_region_mean);
    col.low_min.push(s.clip_ratio_low_min);
    col.high_max.push(s.clip_ratio_high_max);
}

fn push_rloo_stats(col: &mut Collected, s: &RlooLossStats) {
    col.low_mean.push(s.clip_ratio_low_mean);
    col.high_mean.push(s.clip_ratio_high_mean);
    col.region_mean.push(s.clip_ratio_region_mean);
    col.low_min.push(s.clip_ratio_low_min);
    col.high_max.push(s.clip_ratio_high_max);
}

impl GroupAgent<AutoLm> {
    /// The learner saved in `dir` (Hugging Face weights and [`GroupAgent::save_state`]), on
    /// `device` (autodiff), continuing with `algorithm`.
    pub fn load(dir: &Path, algorithm: GroupAlgorithm, device: &Device) -> Result<Self> {
        let model = AutoLm::from_pretrained(dir, device)?;
        let mut agent = Self::new(model, algorithm, device)?;
        agent.load_state(dir)?;
        Ok(agent)
    }
}

impl<M: CausalLm + lmrl_models::Pretrained> GroupAgent<M> {
    /// Weights (Hugging Face layout) and training state in one directory.
    pub fn save(&self, dir: &Path) -> Result<()> {
        self.model.save_pretrained(dir)?;
        self.save_state(dir)
    }
}
