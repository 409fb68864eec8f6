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
//! The step is written in TRL's parts: `_generate_and_score_completions` (lengths, truncation,
//! loss masks, then the advantages, here), the forwards (`forward.rs`), the optimisation loop
//! with `_compute_loss` (`train.rs`), the logged statistics (`stats.rs`); what a data-parallel
//! rank gathers and reduces is in `parallel.rs`.
//!
//! The reported `kl` ([`GroupStats::objective_kl`]) is the batch mean of Σ_t of the
//! full-vocabulary KL(π_θ ‖ π_ref) at temperature 1 before the update, the same measure as
//! PPO's `objective/kl`, so KL is comparable across algorithms; the estimator each algorithm
//! optimises (k3 for GRPO, k1 for RLOO) is logged under TRL's key `kl`.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use burn::module::{Flag, ModuleMapper, Param};
use burn::optim::ModuleOptimizer;
use burn::tensor::{Device, Tensor, TensorData};
use lmrl_models::{AutoLm, CausalLm, Generation, GenerationConfig, generate};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::dist::{Collective, all_gather_f32, shard};
use crate::error::{Result, RlError};
use crate::group::advantages::{RewardStats, grpo_advantages, rloo_advantages, rloo_rewards};
use crate::group::algorithm::GroupAlgorithm;
use crate::group::config::{GrpoConfig, RlooConfig, ScaleRewards};
use crate::group::forward::Prepass;
use crate::group::kl::rloo_sequence_kl;
use crate::group::loss::LossNormalisation;
use crate::group::parallel::{gather_completions, rloo_kl_across_ranks};
use crate::group::stats::{Collected, GroupStats, PerCompletion};
use crate::group::train::StepInputs;
use crate::ppo::ResponseMask;
use crate::ppo::state::{
    AGENT_STATE_FILE, load_optimizer_record, param_ids_hex, read_toml, restore_param_ids,
    save_optimizer, state_err, write_toml,
};
use crate::util::{check_finite_host, mix_seed, to_vec};

/// Turns every module-owned training flag off (dropout), keeping autodiff on: TRL's GRPO and
/// RLOO trainers disable dropout (`disable_dropout=True` by default).
struct EvalMode;

impl ModuleMapper for EvalMode {
    fn map_flag(&mut self, flag: Param<Flag>) -> Param<Flag> {
        flag.with_value(false)
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

/// A GRPO or RLOO learner: the policy on an autodiff device and its Adam optimizer. No value
/// head.
#[derive(Clone)]
pub struct GroupAgent<M: CausalLm> {
    pub(super) model: M,
    pub(super) optimizer: ModuleOptimizer,
    pub(super) algorithm: GroupAlgorithm,
    pub(super) device: Device,
    pub(super) pad_id: u32,
    pub(super) eos_id: Option<u32>,
    pub(super) steps: usize,
    pub(super) rng_steps: usize,
    pub(super) collective: Arc<dyn Collective>,
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

    pub(super) fn plain_device(&self) -> Device {
        self.device.clone().without_autodiff()
    }

    pub(super) fn check_inputs(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<()> {
        crate::util::check_pairs(
            queries,
            responses,
            &format!("{} step", self.algorithm.name()),
        )?;
        crate::util::check_fits(&self.model, queries, responses, self.pad_id)?;
        crate::util::check_fits(reference, queries, responses, self.pad_id)
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
        let mine = self.local_completions();
        self.check_step_inputs(queries, responses, scores, reference, mine.len())?;
        let batch = self.score_completions(responses, scores)?;
        let prepass = if self.algorithm.needs_prepass() {
            Some(self.prepass(queries, responses, reference)?)
        } else {
            None
        };
        let adv = self.compute_advantages(&batch, prepass.as_ref())?;

        let order = self.micro_batch_order(sizes.completions());
        let micro: Vec<&[usize]> = order.chunks(sizes.mini_batch_size).collect();
        let mut col = Collected {
            kl: vec![None; mine.len()],
            entropy: vec![None; mine.len()],
            ..Collected::default()
        };
        let ctx = StepInputs {
            queries,
            responses,
            loss_rows: &batch.loss_rows,
            advantages: &adv.advantages[mine.clone()],
            prepass: prepass.as_ref(),
            reference,
            normalisation: self.loss_normalisation(batch.active_tokens, micro.len()),
            mine,
            active: &batch.active,
        };
        self.optimise(&ctx, &micro, &mut col)?;
        self.steps += 1;
        self.rng_steps += 1;
        let (kl, entropy) = match &prepass {
            Some(p) => (p.kl.clone(), p.entropy.clone()),
            None => (
                col.kl.iter().map(|k| k.unwrap_or(0.0)).collect(),
                col.entropy.iter().map(|e| e.unwrap_or(0.0)).collect(),
            ),
        };
        let coll = &*self.collective;
        let per_completion = PerCompletion {
            lengths: &batch.lengths,
            truncated: &batch.truncated,
            advantages: &adv.advantages,
            kl: all_gather_f32(coll, &kl)?,
            entropy: all_gather_f32(coll, &entropy)?,
        };
        self.stats(per_completion, adv.rewards, adv.rloo_kl, col)
    }

    /// This rank's completions, `offset..offset + n` of the batch: those of its contiguous
    /// share of the prompts (all of them in one process).
    fn local_completions(&self) -> Range<usize> {
        let sizes = self.algorithm.sizes();
        let g = sizes.num_generations;
        let coll = &*self.collective;
        let mine = shard(sizes.prompts_per_step, coll.rank(), coll.world());
        mine.start * g..mine.start * g + mine.len() * g
    }

    /// The step got this rank's `n` completions, each with a finite score.
    fn check_step_inputs(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
        reference: &M,
        n: usize,
    ) -> Result<()> {
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
        check_finite_host("scores", &[n], scores)
    }

    /// The completion side of TRL `_generate_and_score_completions`: each completion's length,
    /// whether it was truncated, its loss mask (truncated completions zeroed when asked; every
    /// completion still counts in its group's reward statistics), and the whole batch's
    /// lengths, truncations and scores.
    fn score_completions(&self, responses: &[Vec<u32>], scores: &[f32]) -> Result<ScoredBatch> {
        let lengths: Vec<usize> = responses.iter().map(Vec::len).collect();
        let t_max = lengths.iter().copied().max().unwrap_or(0);
        let max_len = self.algorithm.max_completion_length();
        let truncated: Vec<bool> = responses
            .iter()
            .map(|y| y.len() >= max_len && y.last().copied() != self.eos_id)
            .collect();
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
        let (lengths, truncated, scores) =
            gather_completions(&*self.collective, &lengths, &truncated, scores)?;
        let active: Vec<usize> = lengths
            .iter()
            .zip(&truncated)
            .map(|(&l, &t)| {
                if t && self.algorithm.mask_truncated() {
                    0
                } else {
                    l
                }
            })
            .collect();
        Ok(ScoredBatch {
            t_max,
            loss_rows,
            active_tokens: active.iter().sum(),
            active,
            lengths,
            truncated,
            scores,
        })
    }

    /// The advantages of the whole batch from its scores (TRL `_generate_and_score_completions`):
    /// GRPO's group-normalised ones, or RLOO's leave-one-out ones of the rewards less β·KL.
    /// The reward statistics are always GRPO's group ones, of the scores as given.
    fn compute_advantages(
        &self,
        batch: &ScoredBatch,
        prepass: Option<&Prepass>,
    ) -> Result<StepAdvantages> {
        let plain = self.plain_device();
        let g = self.algorithm.sizes().num_generations;
        let n_all = self.algorithm.sizes().completions();
        let scores_t =
            Tensor::<1>::from_data(TensorData::new(batch.scores.clone(), [n_all]), &plain);
        let rewards = grpo_advantages(scores_t.clone(), g, ScaleRewards::Group)?.stats;
        let (advantages, rloo_kl) = match &self.algorithm {
            GroupAlgorithm::Grpo(c) => (
                to_vec(
                    "advantages",
                    grpo_advantages(scores_t, g, c.kind.scale_rewards)?.advantages,
                )?,
                None,
            ),
            GroupAlgorithm::Rloo(c) => {
                let (seq_kl, mean_kl) = match prepass {
                    Some(p) => {
                        let (kl, mean) = self.rloo_kl(batch, p)?;
                        (Some(kl), Some(mean))
                    }
                    None => (None, None),
                };
                let r = rloo_rewards(scores_t, seq_kl, c.beta, c.kind.reward_clip_range)?;
                (
                    to_vec(
                        "advantages",
                        rloo_advantages(r, g, c.kind.normalize_advantages)?.advantages,
                    )?,
                    mean_kl,
                )
            }
        };
        check_finite_host("advantages", &[n_all], &advantages)?;
        Ok(StepAdvantages {
            advantages,
            rewards,
            rloo_kl,
        })
    }

    /// RLOO's k1 KL of every completion of the batch (TRL `kl`, from the pre-pass's old and
    /// reference log-probs under the loss mask) and its token mean.
    fn rloo_kl(&self, batch: &ScoredBatch, p: &Prepass) -> Result<(Tensor<1>, f32)> {
        let plain = self.plain_device();
        let dims = [batch.loss_rows.len(), batch.t_max];
        let mask = ResponseMask::from_rows(&batch.loss_rows, &plain)?;
        let k = rloo_sequence_kl(
            Tensor::from_data(TensorData::new(p.old_logps.clone(), dims), &plain),
            Tensor::from_data(TensorData::new(p.ref_logps.clone(), dims), &plain),
            &mask,
        )?;
        if self.collective.world() == 1 {
            return Ok((k.kl, k.mean_kl));
        }
        rloo_kl_across_ranks(&*self.collective, k.kl, batch.active_tokens, &plain)
    }

    /// The micro-batch order of this step (the same on every rank): the batch shuffled by a
    /// generator seeded with `(seed, steps since seeding)`.
    fn micro_batch_order(&self, n_all: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n_all).collect();
        let mut rng =
            StdRng::seed_from_u64(mix_seed(&[self.algorithm.seed(), self.rng_steps as u64]));
        order.shuffle(&mut rng);
        order
    }

    /// How each micro-batch's loss is reduced; `"dapo"` divides by the whole batch's
    /// `active_tokens` over its `micro_batches`.
    fn loss_normalisation(&self, active_tokens: usize, micro_batches: usize) -> LossNormalisation {
        let gas = self.algorithm.sizes().gradient_accumulation_steps;
        match &self.algorithm {
            GroupAlgorithm::Grpo(c) => match c.kind.loss_type {
                crate::group::GrpoLossType::Dapo => {
                    LossNormalisation::dapo(active_tokens, 1, gas, micro_batches)
                }
                _ => c.normalisation(active_tokens),
            },
            GroupAlgorithm::Rloo(_) => LossNormalisation::Token,
        }
    }
}

/// A step's completions as `_generate_and_score_completions` leaves them.
struct ScoredBatch {
    /// This rank's longest completion.
    t_max: usize,
    /// This rank's loss masks, `[n][t_max]`.
    loss_rows: Vec<Vec<f32>>,
    /// Every completion's length, truncation and score, in batch order (this rank's alone
    /// with one rank).
    lengths: Vec<usize>,
    truncated: Vec<bool>,
    scores: Vec<f32>,
    /// The tokens each completion puts in the loss, and their sum.
    active: Vec<usize>,
    active_tokens: usize,
}

/// The advantages of the whole batch and what their computation logs.
struct StepAdvantages {
    advantages: Vec<f32>,
    rewards: RewardStats,
    /// RLOO's logged `kl` (token mean of k1); `None` for GRPO and without a pre-pass.
    rloo_kl: Option<f32>,
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
