//! One PPO learner: TRL 0.11 `PPOTrainer.step` on a burn [`LmWithValueHead`] over any
//! [`CausalLm`]: the agent, its construction and training state, and the step written in
//! TRL's own parts, each beside TRL's method of the same name in its own file —
//! `batched_forward_pass` (`forward.rs`), `compute_rewards` and `compute_advantages`
//! (`targets.rs`), the minibatch epochs with `train_minibatch` (`train.rs`, the loss in
//! `loss.rs`), `record_step_stats` (`stats.rs`); what a data-parallel rank reduces is in
//! `parallel.rs`.

use std::path::Path;
use std::sync::Arc;

use burn::module::{Flag, Module, ModuleMapper, Param};

use burn::optim::ModuleOptimizer;
use burn::tensor::Device;
use lmrl_models::{
    AutoLm, CausalLm, Generation, GenerationConfig, LmWithValueHead, Pretrained, ValueHeadInit,
    generate,
};

use crate::dist::{Collective, all_gather_f32, shard};
use crate::error::{Result, RlError};
use crate::ppo::config::PpoConfig;
use crate::ppo::kl_controller::{AdaptiveKlController, FixedKlController, KlController};
use crate::ppo::running_moments::{RunningMoments, normalise_scores};
use crate::ppo::state::{
    AGENT_STATE_FILE, AGENT_STATE_FORMAT, AgentState, load_optimizer_record, param_ids_hex,
    read_toml, restore_param_ids, save_optimizer, state_err, write_toml,
};
use crate::ppo::stats::PpoStats;
use crate::ppo::train::{MinibatchOrder, StepBatch};
use crate::util::check_finite_host;

pub use crate::ppo::forward::Rollout;

/// Turns every module-owned training flag off (dropout, …), keeping autodiff on: TRL's
/// `batched_forward_pass` calls `model.eval()` before the training forward, so PPO trains
/// without dropout.
struct EvalMode;

impl ModuleMapper for EvalMode {
    fn map_flag(&mut self, flag: Param<Flag>) -> Param<Flag> {
        flag.with_value(false)
    }
}

/// A PPO learner: policy with value head on an autodiff device, its Adam optimizer, KL
/// controller, running score statistics and minibatch RNG.
///
/// The minibatch permutation of each step comes from a generator seeded with
/// `(seed, steps since seeding)`, so the whole training state is the weights plus what
/// [`PpoAgent::save_state`] writes, and a reloaded agent continues bit-identically.
#[derive(Clone)]
pub struct PpoAgent<M: CausalLm> {
    pub(super) model: LmWithValueHead<M>,
    pub(super) optimizer: ModuleOptimizer,
    pub(super) kl_ctl: KlController,
    pub(super) running: RunningMoments,
    pub(super) config: PpoConfig,
    /// Steps since the minibatch RNG was seeded with `config.seed`.
    pub(super) rng_steps: usize,
    pub(super) device: Device,
    pub(super) pad_id: u32,
    pub(super) steps: usize,
    /// The data-parallel group this learner is a rank of ([`crate::dist`]); one process by
    /// default.
    pub(super) collective: Arc<dyn Collective>,
}

impl<M: CausalLm> std::fmt::Debug for PpoAgent<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PpoAgent")
            .field("kl_ctl", &self.kl_ctl)
            .field("running", &self.running)
            .field("steps", &self.steps)
            .field("rng_steps", &self.rng_steps)
            .finish_non_exhaustive()
    }
}

fn adam(config: &PpoConfig) -> ModuleOptimizer {
    // PyTorch `torch.optim.Adam` defaults (TRL's optimizer): no weight decay, ε 1e-8.
    crate::optim::adam(config.adam_beta1, config.adam_beta2, config.adam_epsilon)
}

fn kl_controller(config: &PpoConfig) -> KlController {
    if config.adap_kl_ctrl {
        KlController::Adaptive(AdaptiveKlController::new(
            config.init_kl_coef,
            config.target,
            config.horizon,
        ))
    } else {
        KlController::Fixed(FixedKlController::new(config.init_kl_coef))
    }
}

impl<M: CausalLm> PpoAgent<M> {
    /// A learner for `model`, which must live on `device` (an autodiff device, e.g.
    /// `Device::flex().autodiff()`). Validates `config`; switches every dropout off (TRL trains
    /// in `eval()` mode).
    pub fn new(model: LmWithValueHead<M>, config: PpoConfig, device: &Device) -> Result<Self> {
        config.validate()?;
        if !device.is_autodiff() {
            return Err(RlError::Config {
                field: "device".into(),
                reason: "PPO training needs an autodiff device (`device.autodiff()`)".into(),
            });
        }
        let model = model.map(&mut EvalMode);
        let pad_id = model.lm.eos_token_id().unwrap_or(0);
        Ok(Self {
            optimizer: adam(&config),
            kl_ctl: kl_controller(&config),
            running: RunningMoments::new(),
            rng_steps: 0,
            model,
            config,
            device: device.clone(),
            pad_id,
            steps: 0,
            collective: crate::dist::single_process(),
        })
    }

    /// Makes this agent one rank of a data-parallel group: [`PpoAgent::step`] then takes the
    /// rank's contiguous share ([`crate::dist::shard`]) of the `batch_size` samples and reduces
    /// what the step normalises over the batch, and the gradients, over the group
    /// (`crate::ppo::parallel`), so that every rank ends the step with the weights one process
    /// would have after stepping on the whole batch. Joining copies rank 0's weights to every
    /// rank. Needs `batch_size ≥` the group's ranks.
    pub fn set_collective(&mut self, collective: Arc<dyn Collective>) -> Result<()> {
        if collective.world() > self.config.batch_size {
            return Err(RlError::Config {
                field: "batch_size".into(),
                reason: format!(
                    "{} is smaller than the {} data-parallel ranks that share it",
                    self.config.batch_size,
                    collective.world()
                ),
            });
        }
        // Every rank starts from rank 0's weights (random value-head or LoRA inits may differ).
        self.model = crate::dist::broadcast_module(&*collective, self.model.clone())?;
        self.collective = collective;
        Ok(())
    }

    /// The data-parallel group (one process unless [`PpoAgent::set_collective`] was called).
    pub fn collective(&self) -> &dyn Collective {
        &*self.collective
    }

    pub(super) fn parallel(&self) -> bool {
        self.collective.world() > 1
    }

    /// This rank's `[lo, hi)` of the global batch (the whole batch in one process).
    pub(super) fn local_range(&self) -> std::ops::Range<usize> {
        shard(
            self.config.batch_size,
            self.collective.rank(),
            self.collective.world(),
        )
    }

    /// The policy with its value head.
    pub fn model(&self) -> &LmWithValueHead<M> {
        &self.model
    }

    /// Gives the model back.
    pub fn into_model(self) -> LmWithValueHead<M> {
        self.model
    }

    /// The configuration.
    pub fn config(&self) -> &PpoConfig {
        &self.config
    }

    /// The training device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Current β.
    pub fn kl_coef(&self) -> f64 {
        self.kl_ctl.value()
    }

    /// The KL controller.
    pub fn kl_controller(&self) -> &KlController {
        &self.kl_ctl
    }

    /// The running score statistics.
    pub fn running_moments(&self) -> &RunningMoments {
        &self.running
    }

    /// PPO steps taken.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Restores the state a freshly built TRL `PPOTrainer` has: new Adam moments, β back to
    /// `init_kl_coef`, empty running score statistics, minibatch RNG reseeded with `seed`
    /// (the reference's `set_seed`). The weights are kept. This is what CORY's reference code
    /// does at every role exchange.
    pub fn reset_state(&mut self) {
        self.optimizer = adam(&self.config);
        self.kl_ctl = kl_controller(&self.config);
        self.running = RunningMoments::new();
        self.rng_steps = 0;
    }

    /// The scalar training state (β controller, running moments, counters, parameter ids).
    pub fn training_state(&self) -> Result<AgentState> {
        Ok(AgentState {
            format: AGENT_STATE_FORMAT,
            steps: self.steps,
            rng_steps: self.rng_steps,
            kl_controller: self.kl_ctl,
            running_moments: self.running,
            param_ids: param_ids_hex(&self.model)?,
        })
    }

    /// Writes the training state besides the weights into `dir` (created if missing):
    /// `optimizer.bpk` (Adam moments and step counts, burn's burnpack record) and
    /// `trainer_state.toml` ([`AgentState`]). Together with the weights (e.g.
    /// [`LmWithValueHead::save_pretrained`]) this is everything [`PpoAgent::step`] depends on.
    pub fn save_state(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| state_err(dir, e))?;
        save_optimizer(&self.optimizer, dir)?;
        write_toml(&dir.join(AGENT_STATE_FILE), &self.training_state()?)
    }

    /// Restores what [`PpoAgent::save_state`] wrote into this agent, whose model must already
    /// hold the weights saved with that state (same architecture; the parameter paths are
    /// checked). The model's parameters get back the ids the optimizer state is keyed by.
    pub fn load_state(&mut self, dir: &Path) -> Result<()> {
        let file = dir.join(AGENT_STATE_FILE);
        let state: AgentState = read_toml(&file)?;
        if state.format != AGENT_STATE_FORMAT {
            return Err(state_err(
                &file,
                format!(
                    "format {} (this build reads {AGENT_STATE_FORMAT})",
                    state.format
                ),
            ));
        }
        let record = load_optimizer_record(dir)?;
        self.model = restore_param_ids(self.model.clone(), &state.param_ids, &file)?;
        self.optimizer = adam(&self.config).load_record(record);
        self.kl_ctl = state.kl_controller;
        self.running = state.running_moments;
        self.steps = state.steps;
        self.rng_steps = state.rng_steps;
        Ok(())
    }

    /// Samples responses from the policy (no gradient, KV cache).
    pub fn generate(&self, prompts: &[Vec<u32>], cfg: &GenerationConfig) -> Result<Generation> {
        Ok(generate(&self.model.lm, prompts, cfg, &self.device)?)
    }

    pub(super) fn plain_device(&self) -> Device {
        self.device.clone().without_autodiff()
    }

    /// TRL `PPOTrainer.step(queries, responses, scores)`:
    ///
    /// 1. score normalisation (`use_score_scaling`/`use_score_norm`/`score_clip`);
    /// 2. [`PpoAgent::rollout`] (`batched_forward_pass`): no-grad forward of policy and
    ///    reference → ℓ, ℓ^ref, V, KL_t;
    /// 3. `compute_rewards`, then `compute_advantages` (GAE and whitening);
    /// 4. `ppo_epochs` × seeded permutation × backward batches of
    ///    `mini_batch_size·gradient_accumulation_steps`: `train_minibatch` per minibatch, then
    ///    optional global-norm clipping and one Adam step per backward batch (with
    ///    `skip_equal_scores` and all raw scores equal: one pass, no Adam step);
    /// 5. `record_step_stats`, and the KL controller update with `objective/kl` and
    ///    `batch_size`.
    ///
    /// `queries`, `responses`, `scores` must each hold `batch_size` entries.
    pub fn step(
        &mut self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
        reference: &M,
    ) -> Result<PpoStats> {
        let bs = self.config.batch_size;
        let local = self.check_step_inputs(queries, responses, scores)?;
        let (raw_scores, all_scores) = self.normalise_step_scores(scores)?;
        let scores = &all_scores[local];

        let mut order = MinibatchOrder::new(self.config.seed, self.rng_steps, bs);
        // Every rank sees the global scores, so all of them take the same decision.
        let update =
            !(self.config.skip_equal_scores && raw_scores.iter().all(|&s| s == raw_scores[0]));
        // The first minibatch trains on the rollout's weights: its rollout forward is the
        // training forward, kept for its loss (one process only: a rank holds a share of it).
        let first = &order.inds[..self.config.mini_batch_size.min(bs)];
        let keep = if update && self.config.ppo_epochs > 0 && !self.parallel() {
            first
        } else {
            &[]
        };

        // Under torch.no_grad() in TRL.
        let (rollout, kept) = self.batched_forward_pass(queries, responses, reference, keep)?;
        let beta = self.kl_ctl.value();
        let shaped = self.compute_rewards(&rollout, scores, beta)?;
        let targets = self.compute_advantages(&rollout, shaped)?;

        let batch = StepBatch {
            queries,
            responses,
            targets: &targets,
        };
        let train = self.train_epochs(batch, &mut order, kept, update)?;
        let (stats, objective_kl) =
            self.record_step_stats(batch, (&raw_scores, &all_scores), &rollout, beta, &train)?;
        self.kl_ctl.update(objective_kl, bs);
        self.steps += 1;
        self.rng_steps += 1;
        Ok(PpoStats {
            kl_coef_next: self.kl_ctl.value(),
            ..stats
        })
    }

    /// Checks that the step got this rank's share of the batch, finite scores included, and
    /// returns that share's range in the global batch (data parallel: this rank holds samples
    /// `local` of it).
    fn check_step_inputs(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
    ) -> Result<std::ops::Range<usize>> {
        let local = self.local_range();
        for (what, n) in [
            ("queries", queries.len()),
            ("responses", responses.len()),
            ("scores", scores.len()),
        ] {
            if n != local.len() {
                return Err(RlError::Shape {
                    what: what.into(),
                    expected: vec![local.len()],
                    got: vec![n],
                });
            }
        }
        check_finite_host("scores", &[local.len()], scores)?;
        Ok(local)
    }

    /// The scores of the whole batch, raw and normalised ([`normalise_scores`], updating the
    /// running moments). Score statistics are over the global batch: every rank gathers and
    /// normalises all of it.
    fn normalise_step_scores(&mut self, scores: &[f32]) -> Result<(Vec<f32>, Vec<f32>)> {
        let raw_scores = all_gather_f32(&*self.collective, scores)?;
        let all_scores = normalise_scores(
            &raw_scores,
            &mut self.running,
            self.config.use_score_scaling,
            self.config.use_score_norm,
            self.config.score_clip,
        )?;
        Ok((raw_scores, all_scores))
    }
}

impl<M: CausalLm + Pretrained> PpoAgent<M> {
    /// Weights (Hugging Face layout plus `value_head.safetensors`, see
    /// [`LmWithValueHead::save_pretrained`]) and training state ([`PpoAgent::save_state`]) in
    /// one directory.
    pub fn save(&self, dir: &Path) -> Result<()> {
        self.model.save_pretrained(dir)?;
        self.save_state(dir)
    }
}

impl PpoAgent<AutoLm> {
    /// The agent [`PpoAgent::save`] wrote to `dir`, on `device` (autodiff), continuing with
    /// `config` (normally the one it was trained with).
    pub fn load(dir: &Path, config: PpoConfig, device: &Device) -> Result<Self> {
        let model = LmWithValueHead::from_pretrained(dir, true, ValueHeadInit::Default, device)?;
        let mut agent = Self::new(model, config, device)?;
        agent.load_state(dir)?;
        Ok(agent)
    }
}
