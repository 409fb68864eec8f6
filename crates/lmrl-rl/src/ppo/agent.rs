//! One PPO learner: TRL 0.11 `PPOTrainer.step` on a burn [`LmWithValueHead`] over any
//! [`CausalLm`]. `step` is written in TRL's own parts — `batched_forward_pass`,
//! `compute_rewards`, `compute_advantages`, `train_minibatch`, `record_step_stats` — so each can
//! be read next to TRL's method of the same name.

use std::path::Path;
use std::sync::Arc;

use burn::module::{Flag, Module, ModuleMapper, Param};

use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use lmrl_models::{
    AutoLm, CausalLm, Generation, GenerationConfig, LmWithValueHead, Pretrained,
    QueryResponseBatch, Scored, ValueHeadInit, generate, response_hidden_and_values,
    response_token_logprobs, score, score_reference,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::dist::{Collective, all_gather_f32, all_gather_usize, all_reduce_grads, shard};
use crate::error::{Result, RlError};
use crate::ppo::advantages::compute_advantages_with;
use crate::ppo::config::PpoConfig;
use crate::ppo::grad::clip_grad_norm;
use crate::ppo::kl::{TokenLogProbs, kl_penalty};
use crate::ppo::kl_controller::{AdaptiveKlController, FixedKlController, KlController};
use crate::ppo::loss::{LossInputs, LossStats, PpoLoss, ppo_loss};
use crate::ppo::mask::ResponseMask;
use crate::ppo::parallel::{combine_loss_stats, global_masked_mean, global_masked_whiten};
use crate::ppo::rewards::compute_rewards;
use crate::ppo::running_moments::{RunningMoments, normalise_scores};
use crate::ppo::state::{
    AGENT_STATE_FILE, AGENT_STATE_FORMAT, AgentState, load_optimizer_record, param_ids_hex,
    read_toml, restore_param_ids, save_optimizer, state_err, write_toml,
};
use crate::ppo::stats::{LossStatsMean, PpoStats, mean_std};
use crate::ppo::whiten::masked_whiten;
use crate::util::{check_finite_host, mix_seed, to_vec};

/// Turns every module-owned training flag off (dropout, …), keeping autodiff on: TRL's
/// `batched_forward_pass` calls `model.eval()` before the training forward, so PPO trains
/// without dropout.
struct EvalMode;

impl ModuleMapper for EvalMode {
    fn map_flag(&mut self, flag: Param<Flag>) -> Param<Flag> {
        flag.with_value(false)
    }
}

/// The no-grad pass over a batch: TRL `batched_forward_pass` of policy and reference plus the
/// per-token KL, padded to the batch's longest response `T`.
#[derive(Debug, Clone)]
pub struct Rollout {
    /// `[B, T]` ℓ_t of the policy.
    pub logprobs: Tensor<2>,
    /// `[B, T]` ℓ^ref_t.
    pub ref_logprobs: Tensor<2>,
    /// `[B, T]` V_t.
    pub values: Tensor<2>,
    /// `[B, T]` KL_t (estimator `kl_penalty`), not masked.
    pub kls: Tensor<2>,
    /// `[B, T]` response mask.
    pub mask: ResponseMask,
}

impl Rollout {
    /// Σ_t KL_t·mask per sample (TRL `objective/kl_dist`).
    pub fn kl_per_sample(&self) -> Result<Vec<f32>> {
        let s = (self.kls.clone() * self.mask.tensor()).sum_dim(1);
        to_vec("objective/kl_dist", s)
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
    model: LmWithValueHead<M>,
    optimizer: ModuleOptimizer,
    kl_ctl: KlController,
    running: RunningMoments,
    config: PpoConfig,
    /// Steps since the minibatch RNG was seeded with `config.seed`.
    rng_steps: usize,
    device: Device,
    pad_id: u32,
    steps: usize,
    /// The data-parallel group this learner is a rank of ([`crate::dist`]); one process by
    /// default.
    collective: Arc<dyn Collective>,
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

fn host_tensor(v: Vec<f32>, dims: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(v, dims), device)
}

/// Rows `idx` of a row-major `[B, T]` host matrix, cut to the first `t_new` columns.
fn select_rows(host: &[f32], t: usize, idx: &[usize], t_new: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(idx.len() * t_new);
    for &i in idx {
        out.extend_from_slice(&host[i * t..i * t + t_new]);
    }
    out
}

/// Pads `[b, t]` to `[b, t_max]` with zeros on the right.
fn pad_cols(x: Tensor<2>, t_max: usize) -> Tensor<2> {
    let [b, t] = x.dims();
    if t == t_max {
        return x;
    }
    let z = Tensor::<2>::zeros([b, t_max - t], &x.device());
    Tensor::cat(vec![x, z], 1)
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

    fn parallel(&self) -> bool {
        self.collective.world() > 1
    }

    /// This rank's `[lo, hi)` of the global batch (the whole batch in one process).
    fn local_range(&self) -> std::ops::Range<usize> {
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

    fn plain_device(&self) -> Device {
        self.device.clone().without_autodiff()
    }

    /// TRL `batched_forward_pass` of policy and reference (no grad, chunks of
    /// `forward_batch_size`) and the per-token KL penalty.
    pub fn rollout(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<Rollout> {
        Ok(self.rollout_keeping(queries, responses, reference, &[])?.0)
    }

    /// [`PpoAgent::rollout`], with the samples `keep` (if any) scored by the training forward
    /// itself, whose graph is returned for their minibatch's loss: in the first minibatch of a
    /// step the weights are still those of the rollout, so TRL's second forward of those
    /// samples would compute the same numbers again. The other samples go through in forward
    /// batches, in order. A sample's scores do not depend on the batch it is scored in, up to
    /// float rounding (padding is left out of the forward and masked in attention).
    fn rollout_keeping(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
        keep: &[usize],
    ) -> Result<(Rollout, Option<MinibatchForward>)> {
        if queries.len() != responses.len() {
            return Err(RlError::Shape {
                what: "responses".into(),
                expected: vec![queries.len()],
                got: vec![responses.len()],
            });
        }
        if let Some(i) = responses.iter().position(Vec::is_empty) {
            return Err(RlError::EmptyResponse {
                what: "rollout".into(),
                sample: i,
            });
        }
        crate::util::check_fits(&self.model.lm, queries, responses, self.pad_id)?;
        crate::util::check_fits(reference, queries, responses, self.pad_id)?;
        let device = self.plain_device();
        let t_max = responses.iter().map(Vec::len).max().unwrap_or(0);
        let fbs = self.config.forward_batch_size();
        let rest: Vec<usize> = (0..queries.len()).filter(|i| !keep.contains(i)).collect();
        let mut parts = Vec::new();
        let mut kept = None;
        if !keep.is_empty() {
            let fwd = self.forward_minibatch(queries, responses, keep)?;
            let policy = Scored {
                logprobs: fwd.logprobs.clone().inner(),
                log_softmax: fwd.log_softmax.clone().inner(),
                values: fwd.vpreds.clone().inner(),
                mask: fwd.batch.response_mask(&device),
            };
            parts.push(self.rollout_part(policy, &fwd.batch, reference, t_max)?);
            kept = Some(fwd);
        }
        for chunk in rest.chunks(fbs) {
            let pick =
                |v: &[Vec<u32>]| -> Vec<Vec<u32>> { chunk.iter().map(|&i| v[i].clone()).collect() };
            let batch =
                QueryResponseBatch::new(&pick(queries), &pick(responses), self.pad_id, &device)?;
            let policy = score(&self.model, &batch);
            parts.push(self.rollout_part(policy, &batch, reference, t_max)?);
        }
        // Back to sample order when the kept samples went first: row `p` of the parts is
        // sample `order[p]`.
        let reorder = (!keep.is_empty()).then(|| {
            let order: Vec<usize> = keep.iter().chain(&rest).copied().collect();
            let mut at = vec![0i64; order.len()];
            for (p, &i) in order.iter().enumerate() {
                at[i] = p as i64;
            }
            Tensor::<1, Int>::from_data(TensorData::new(at, [order.len()]), &device)
        });
        let cat = |f: fn(&RolloutPart) -> Tensor<2>| -> Tensor<2> {
            let rows = Tensor::cat(parts.iter().map(f).collect(), 0);
            match &reorder {
                Some(at) => rows.select(0, at.clone()),
                None => rows,
            }
        };
        let lengths: Vec<usize> = responses.iter().map(Vec::len).collect();
        let rollout = Rollout {
            logprobs: cat(|p| p.logprobs.clone()),
            ref_logprobs: cat(|p| p.ref_logprobs.clone()),
            values: cat(|p| p.values.clone()),
            kls: cat(|p| p.kls.clone()),
            mask: ResponseMask::from_lengths(&lengths, t_max, &device)?,
        };
        crate::util::check_finite("logprobs", &rollout.logprobs)?;
        crate::util::check_finite("ref_logprobs", &rollout.ref_logprobs)?;
        Ok((rollout, kept))
    }

    /// One forward batch of the rollout: the policy's scores, the reference's on the same
    /// batch, the KL penalty per token, each padded to `t_max` columns.
    fn rollout_part(
        &self,
        policy: Scored,
        batch: &QueryResponseBatch,
        reference: &M,
        t_max: usize,
    ) -> Result<RolloutPart> {
        let needs_full = self.config.kl_penalty.needs_full_distribution();
        let r = score_reference(reference, batch);
        let p = TokenLogProbs {
            gathered: policy.logprobs,
            full: needs_full.then_some(policy.log_softmax),
        };
        let refp = TokenLogProbs {
            gathered: r.logprobs,
            full: needs_full.then_some(r.log_softmax),
        };
        let kl = kl_penalty(self.config.kl_penalty, &p, &refp)?;
        Ok(RolloutPart {
            logprobs: pad_cols(p.gathered, t_max),
            ref_logprobs: pad_cols(refp.gathered, t_max),
            values: pad_cols(policy.values, t_max),
            kls: pad_cols(kl, t_max),
        })
    }

    /// Σ_t KL_t of each response under this policy vs `reference` on the given contexts (no
    /// grad): the KL metric of a batch the agent did not train on.
    pub fn kl_to_reference(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<Vec<f32>> {
        self.rollout(queries, responses, reference)?.kl_per_sample()
    }

    /// TRL `PPOTrainer.step(queries, responses, scores)`:
    ///
    /// 1. score normalisation (`use_score_scaling`/`use_score_norm`/`score_clip`);
    /// 2. [`PpoAgent::rollout`] (`batched_forward_pass`): no-grad forward of policy and
    ///    reference → ℓ, ℓ^ref, V, KL_t;
    /// 3. `compute_rewards`, then `compute_advantages` (GAE and whitening);
    /// 4. `ppo_epochs` × seeded permutation × backward batches of
    ///    `mini_batch_size·gradient_accumulation_steps`: [`PpoAgent::train_minibatch`] per
    ///    minibatch, then optional global-norm clipping and one Adam step per backward batch
    ///    (with `skip_equal_scores` and all raw scores equal: one pass, no Adam step);
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
        // Data parallel: this rank holds samples `local` of the global batch.
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
        // Score statistics are over the global batch: every rank normalises all of it.
        let raw_scores = all_gather_f32(&*self.collective, scores)?;
        let all_scores = normalise_scores(
            &raw_scores,
            &mut self.running,
            self.config.use_score_scaling,
            self.config.use_score_norm,
            self.config.score_clip,
        )?;
        let scores = &all_scores[local.clone()];

        let mut inds: Vec<usize> = (0..bs).collect();
        // The minibatch order of this step: a generator derived from (seed, steps since
        // seeding), so that a restored agent draws the same permutations.
        let mut rng = StdRng::seed_from_u64(mix_seed(&[self.config.seed, self.rng_steps as u64]));
        inds.shuffle(&mut rng);
        // Every rank sees the global scores, so all of them take the same decision.
        let update =
            !(self.config.skip_equal_scores && raw_scores.iter().all(|&s| s == raw_scores[0]));
        // The first minibatch trains on the rollout's weights: its rollout forward is the
        // training forward, kept for its loss (one process only: a rank holds a share of it).
        let first = &inds[..self.config.mini_batch_size.min(bs)];
        let keep = if update && self.config.ppo_epochs > 0 && !self.parallel() {
            first
        } else {
            &[]
        };

        // Under torch.no_grad() in TRL.
        let (rollout, mut kept) = self.rollout_keeping(queries, responses, reference, keep)?;
        let beta = self.kl_ctl.value();
        let targets = self.targets(&rollout, scores, beta)?;

        let mut train = TrainStats::default();
        for epoch in 0..self.config.ppo_epochs {
            if epoch > 0 {
                inds.shuffle(&mut rng);
            }
            for bb in inds.chunks(self.config.backward_batch_size()) {
                let batch = TrainBatch {
                    queries,
                    responses,
                    targets: &targets,
                    samples: bb,
                };
                self.train_backward_batch(batch, &mut kept, &mut train, update)?;
            }
            if !update {
                break;
            }
        }

        let (stats, objective_kl) = self.record_step_stats(
            queries,
            responses,
            (&raw_scores, &all_scores),
            &rollout,
            &targets,
            beta,
            &train,
        )?;
        self.kl_ctl.update(objective_kl, bs);
        self.steps += 1;
        self.rng_steps += 1;
        Ok(PpoStats {
            kl_coef_next: self.kl_ctl.value(),
            ..stats
        })
    }

    /// TRL `compute_rewards` and `compute_advantages` on the rollout: the per-token shaped
    /// rewards r_t = −β·KL_t (+ s at the last token), GAE, returns and whitened advantages, kept
    /// on the host for the minibatch loop.
    fn targets(&self, rollout: &Rollout, scores: &[f32], beta: f64) -> Result<Targets> {
        let plain = self.plain_device();
        let bs = scores.len();
        let score_t = Tensor::<1>::from_data(TensorData::new(scores.to_vec(), [bs]), &plain);
        let shaped = compute_rewards(score_t, rollout.kls.clone(), &rollout.mask, beta)?;
        if !self.parallel() {
            let adv = compute_advantages_with(
                rollout.values.clone(),
                shaped.rewards.clone(),
                &rollout.mask,
                &self.config.gae(),
                &masked_whiten,
            )?;
            return Self::targets_from(rollout, adv, shaped.non_score_rewards);
        }
        // Data parallel: whitening over every token of the global batch, and GAE over the
        // global batch's padded length. TRL's GAE runs over the padding too, and with
        // `whiten_rewards` the whitened padding is not zero (−μ/σ + μ), so it reaches the
        // advantages of the real tokens by an amount that depends on how many padded columns a
        // row has: a rank pads its share to the longest response of the whole batch, as one
        // process does, and drops the extra columns afterwards.
        let c = &*self.collective;
        let [b, t_local] = rollout.mask.dims();
        let t_global = all_gather_usize(c, &[t_local])?
            .into_iter()
            .max()
            .unwrap_or(t_local);
        let mask = ResponseMask::from_tensor(pad_cols(rollout.mask.tensor(), t_global))?;
        let global_whiten = |what: &str, x: Tensor<2>, m: &ResponseMask, shift: bool| {
            global_masked_whiten(c, what, x, m, shift)
        };
        let adv = compute_advantages_with(
            pad_cols(rollout.values.clone(), t_global),
            pad_cols(shaped.rewards.clone(), t_global),
            &mask,
            &self.config.gae(),
            &global_whiten,
        )?;
        let local = |x: Tensor<2>| x.slice([0..b, 0..t_local]);
        let adv = crate::ppo::advantages::Advantages {
            values: local(adv.values),
            advantages: local(adv.advantages),
            returns: local(adv.returns),
        };
        Self::targets_from(rollout, adv, shaped.non_score_rewards)
    }

    fn targets_from(
        rollout: &Rollout,
        adv: crate::ppo::advantages::Advantages,
        non_score_rewards: Tensor<2>,
    ) -> Result<Targets> {
        Ok(Targets {
            t_max: rollout.mask.dims()[1],
            old_logprobs: to_vec("logprobs", rollout.logprobs.clone())?,
            old_values: to_vec("values", adv.values.clone())?,
            advantages: to_vec("advantages", adv.advantages.clone())?,
            returns: to_vec("returns", adv.returns.clone())?,
            non_score_rewards,
        })
    }

    /// One optimizer step on the samples `bb`: [`PpoAgent::train_minibatch`] on each minibatch
    /// of `mini_batch_size`, gradients summed (accelerate's accumulation), optional global-norm
    /// clipping, one Adam step. Data parallel, `bb` are global sample indices: each rank trains
    /// on its own samples of every minibatch and the gradients are summed over the ranks before
    /// the clipping. Without `update` the minibatches are only measured (their forward and
    /// statistics, no backward).
    /// `kept` is the training forward the rollout kept, taken by the minibatch it belongs to.
    fn train_backward_batch(
        &mut self,
        batch: TrainBatch<'_>,
        kept: &mut Option<MinibatchForward>,
        train: &mut TrainStats,
        update: bool,
    ) -> Result<()> {
        let TrainBatch {
            queries,
            responses,
            targets,
            samples: bb,
        } = batch;
        let mut accum = GradientsAccumulator::<LmWithValueHead<M>>::new();
        if self.parallel() {
            // Every rank goes through the same minibatches, holding some of their samples (or
            // none) each time.
            let local = self.local_range();
            for mb in bb.chunks(self.config.mini_batch_size) {
                let mine: Vec<usize> = mb
                    .iter()
                    .filter(|i| local.contains(i))
                    .map(|i| i - local.start)
                    .collect();
                let loss = self.train_minibatch_shard(queries, responses, targets, &mine, train)?;
                if let Some(loss) = loss.filter(|_| update) {
                    accum.accumulate(&self.model, self.gradients(loss));
                }
            }
        } else {
            for mb in bb.chunks(self.config.mini_batch_size) {
                let reuse = kept.take_if(|f| f.samples == mb);
                let loss = self.train_minibatch(queries, responses, targets, mb, train, reuse)?;
                if update {
                    accum.accumulate(&self.model, self.gradients(loss));
                }
            }
        }
        if !update {
            return Ok(());
        }
        let mut grads = all_reduce_grads(&*self.collective, &self.model, accum.grads())?;
        if let Some(max_norm) = self.config.max_grad_norm {
            train.grad_norm_sum += f64::from(clip_grad_norm(&self.model, &mut grads, max_norm)?);
        }
        let lr = self.config.learning_rate;
        self.model = self.optimizer.step(lr, self.model.clone(), grads);
        train.optimizer_steps += 1;
        Ok(())
    }

    /// The gradients of a minibatch's loss (accelerate's `backward`).
    fn gradients(&self, loss: Tensor<1>) -> GradientsParams {
        GradientsParams::from_grads(loss.backward(), &self.model)
    }

    /// TRL `train_minibatch` up to the backward: the training forward of the samples `mb`
    /// (dropout off, logits only at the response tokens; `kept` when the rollout already ran
    /// it), TRL's `loss` with its statistics recorded, returned ÷ `gradient_accumulation_steps`
    /// (what accelerate's `backward` sees).
    fn train_minibatch(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        targets: &Targets,
        mb: &[usize],
        train: &mut TrainStats,
        kept: Option<MinibatchForward>,
    ) -> Result<Tensor<1>> {
        let fwd = match kept {
            Some(f) => f,
            None => self.forward_minibatch(queries, responses, mb)?,
        };
        let t_mb = fwd.batch.max_response_len();
        let mask = ResponseMask::from_lengths(&fwd.batch.response_lens, t_mb, &self.device)?;
        let sel = |h: &[f32]| {
            host_tensor(
                select_rows(h, targets.t_max, mb, t_mb),
                [mb.len(), t_mb],
                &self.device,
            )
        };
        let mut params = self.config.loss_params();
        if self.parallel() {
            // Decided on the ratio mean of the whole minibatch, over every rank (below).
            params.ratio_threshold = f64::INFINITY;
        }
        let out = ppo_loss(
            LossInputs {
                old_logprobs: sel(&targets.old_logprobs),
                values: sel(&targets.old_values),
                logits: fwd.log_softmax,
                vpreds: fwd.vpreds,
                logprobs: fwd.logprobs,
                advantages: sel(&targets.advantages),
                returns: sel(&targets.returns),
            },
            &mask,
            &params,
        )?;
        let out = self.reduce_minibatch(Some((out, mask.total())))?.0;
        if out.skipped {
            train.skipped += 1;
        }
        train.loss.push(&out.stats);
        let gas = self.config.gradient_accumulation_steps;
        Ok(if gas > 1 {
            out.loss.div_scalar(gas as f32)
        } else {
            out.loss
        })
    }

    /// The training forward of the samples `mb` (dropout off, with gradients): their `[q; y]`
    /// batch through the policy, log-probabilities and values read at the response tokens.
    fn forward_minibatch(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        mb: &[usize],
    ) -> Result<MinibatchForward> {
        let q: Vec<Vec<u32>> = mb.iter().map(|&i| queries[i].clone()).collect();
        let y: Vec<Vec<u32>> = mb.iter().map(|&i| responses[i].clone()).collect();
        let batch = QueryResponseBatch::new(&q, &y, self.pad_id, &self.device)?;
        let (hidden, vpreds) = response_hidden_and_values(&self.model, &batch, &self.device);
        let (logprobs, log_softmax) = response_token_logprobs(&self.model.lm, hidden, &batch);
        Ok(MinibatchForward {
            samples: mb.to_vec(),
            batch,
            logprobs,
            log_softmax,
            vpreds,
        })
    }

    /// Data parallel [`PpoAgent::train_minibatch`] on this rank's samples `mb` (local indices)
    /// of a global minibatch: a rank holding none of its samples still takes part in the
    /// minibatch's reduction, and contributes no loss.
    fn train_minibatch_shard(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        targets: &Targets,
        mb: &[usize],
        train: &mut TrainStats,
    ) -> Result<Option<Tensor<1>>> {
        if mb.is_empty() {
            let (_, stats, skipped) = self.reduce_minibatch(None)?;
            if skipped {
                train.skipped += 1;
            }
            train.loss.push(&stats);
            return Ok(None);
        }
        Ok(Some(self.train_minibatch(
            queries, responses, targets, mb, train, None,
        )?))
    }

    /// The data-parallel side of one minibatch's loss (identity in one process): this rank's
    /// `(loss, tokens)` (token means over its own samples, or `None` if it has none) becomes its
    /// share of the global minibatch's loss — its token sum ÷ the minibatch's global token
    /// count, so that the gradients summed over ranks are those of the global token mean —,
    /// the ratio threshold is decided on the global ratio mean, and the statistics are the
    /// global minibatch's. Returns the loss, the statistics and whether it was skipped.
    fn reduce_minibatch(
        &self,
        local: Option<(PpoLoss, usize)>,
    ) -> Result<(PpoLoss, LossStats, bool)> {
        if !self.parallel() {
            let (out, _) = local.expect("one process always has the minibatch's samples");
            let (stats, skipped) = (out.stats, out.skipped);
            return Ok((out, stats, skipped));
        }
        let (mut stats, n_global) = combine_loss_stats(
            &*self.collective,
            local.as_ref().map(|(o, n)| (&o.stats, *n)),
        )?;
        let p = self.config.loss_params();
        let skipped = f64::from(stats.policy_ratio_mean) > p.ratio_threshold;
        if skipped {
            stats.loss_policy *= 0.0;
            stats.loss_value *= 0.0;
        }
        stats.loss_total = stats.loss_policy + p.vf_coef as f32 * stats.loss_value;
        let out = match local {
            Some((out, n)) => {
                let share = if skipped {
                    0.0
                } else {
                    n as f32 / n_global.max(1) as f32
                };
                PpoLoss {
                    loss: out.loss.mul_scalar(share),
                    pg_loss: out.pg_loss.mul_scalar(share),
                    vf_loss_weighted: out.vf_loss_weighted.mul_scalar(share),
                    skipped,
                    stats,
                }
            }
            None => {
                let zero = Tensor::<1>::zeros([1], &self.plain_device());
                PpoLoss {
                    loss: zero.clone(),
                    pg_loss: zero.clone(),
                    vf_loss_weighted: zero,
                    skipped,
                    stats,
                }
            }
        };
        Ok((out, stats, skipped))
    }

    /// TRL `record_step_stats`: the KL, entropy and reward statistics of the batch, the token
    /// lengths, and the loss statistics averaged over every minibatch of the step; with
    /// `objective/kl` unrounded, as the KL controller receives it.
    #[allow(clippy::too_many_arguments)]
    fn record_step_stats(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        (raw_scores, scores): (&[f32], &[f32]),
        rollout: &Rollout,
        targets: &Targets,
        beta: f64,
        train: &TrainStats,
    ) -> Result<(PpoStats, f64)> {
        // Data parallel: `scores` are the global batch's, the rest this rank's share; every
        // statistic is the global batch's (per-sample values gathered, sums reduced).
        let c = &*self.collective;
        let bs = scores.len();
        let t_max = targets.t_max;
        let kl_dist = all_gather_f32(c, &rollout.kl_per_sample()?)?;
        check_finite_host("objective/kl_dist", &[bs], &kl_dist)?;
        let objective_kl = kl_dist.iter().map(|&x| f64::from(x)).sum::<f64>() / bs as f64;
        let mask_host = rollout.mask.host();
        let entropy_rows = (0..queries.len()).map(|i| {
            (0..t_max)
                .map(|t| {
                    let k = i * t_max + t;
                    -f64::from(targets.old_logprobs[k]) * f64::from(mask_host[k])
                })
                .sum::<f64>()
        });
        let [entropy_sum] = crate::dist::sum_f64(c, [entropy_rows.sum::<f64>()])?;
        let objective_entropy = entropy_sum / bs as f64;
        let mean_nsr = global_masked_mean(
            c,
            "ppo/mean_non_score_reward",
            targets.non_score_rewards.clone(),
            &rollout.mask,
        )?;
        let (mean_scores, std_scores) = mean_std(scores);
        let (mean_raw, _) = mean_std(raw_scores);
        let lens = |xs: &[Vec<u32>]| -> Result<Vec<f32>> {
            let mine: Vec<usize> = xs.iter().map(Vec::len).collect();
            Ok(all_gather_usize(c, &mine)?
                .into_iter()
                .map(|n| n as f32)
                .collect())
        };
        let ql = lens(queries)?;
        let rl = lens(responses)?;
        let (ql_mean, ql_std) = mean_std(&ql);
        let (rl_mean, rl_std) = mean_std(&rl);
        let loss = train.loss.mean();
        let var_explained = 1.0 - loss.val_error / loss.returns_var;
        let opt_steps = train.optimizer_steps;
        let stats = PpoStats {
            objective_kl: objective_kl as f32,
            objective_kl_dist: kl_dist,
            objective_kl_coef: beta,
            objective_entropy: objective_entropy as f32,
            mean_non_score_reward: mean_nsr,
            mean_scores,
            std_scores,
            mean_raw_scores: mean_raw,
            queries_len_mean: ql_mean,
            queries_len_std: ql_std,
            responses_len_mean: rl_mean,
            responses_len_std: rl_std,
            train: loss,
            val_var_explained: var_explained,
            learning_rate: self.config.learning_rate,
            skipped_minibatches: train.skipped,
            optimizer_steps: opt_steps,
            grad_norm: self
                .config
                .max_grad_norm
                .map(|_| (train.grad_norm_sum / opt_steps.max(1) as f64) as f32),
            kl_coef_next: beta,
        };
        Ok((stats, objective_kl))
    }

    /// The PPO loss statistics of the **current** policy on a whole batch against a fixed
    /// rollout `old` (or a fresh one): rewards with `beta` from `scores` (used as given, no
    /// normalisation), GAE, then [`ppo_loss`] with the current log-probs and values, no update.
    /// Evaluating before and after [`PpoAgent::step`] with the same `old` shows whether the
    /// step lowered the objective it optimised.
    pub fn evaluate_loss(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
        reference: &M,
        beta: f64,
        old: Option<&Rollout>,
    ) -> Result<crate::ppo::loss::LossStats> {
        let rollout = match old {
            Some(r) => r.clone(),
            None => self.rollout(queries, responses, reference)?,
        };
        let plain = self.plain_device();
        let bs = queries.len();
        let score_t = Tensor::<1>::from_data(TensorData::new(scores.to_vec(), [bs]), &plain);
        let shaped = compute_rewards(score_t, rollout.kls.clone(), &rollout.mask, beta)?;
        let adv = compute_advantages_with(
            rollout.values.clone(),
            shaped.rewards,
            &rollout.mask,
            &self.config.gae(),
            &masked_whiten,
        )?;
        let batch = QueryResponseBatch::new(queries, responses, self.pad_id, &plain)?;
        let model = self.model.valid();
        let (hidden, vpreds) = response_hidden_and_values(&model, &batch, &plain);
        let (logprobs, log_softmax) = response_token_logprobs(&model.lm, hidden, &batch);
        let out = ppo_loss(
            LossInputs {
                old_logprobs: rollout.logprobs,
                values: adv.values,
                logits: log_softmax,
                vpreds,
                logprobs,
                advantages: adv.advantages,
                returns: adv.returns,
            },
            &rollout.mask,
            &self.config.loss_params(),
        )?;
        Ok(out.stats)
    }
}

/// What the no-grad pass fixes for the whole step (TRL's `batch_dict` entries), on the host:
/// `[B, T]` row-major, `T` = the batch's longest response.
struct Targets {
    t_max: usize,
    old_logprobs: Vec<f32>,
    old_values: Vec<f32>,
    advantages: Vec<f32>,
    returns: Vec<f32>,
    non_score_rewards: Tensor<2>,
}

/// The samples of one backward batch and what their losses need.
struct TrainBatch<'a> {
    queries: &'a [Vec<u32>],
    responses: &'a [Vec<u32>],
    targets: &'a Targets,
    samples: &'a [usize],
}

/// One forward batch of the rollout, each `[b, T]` padded to the batch's longest response.
struct RolloutPart {
    logprobs: Tensor<2>,
    ref_logprobs: Tensor<2>,
    values: Tensor<2>,
    kls: Tensor<2>,
}

/// The training forward of one minibatch, on the autodiff device.
struct MinibatchForward {
    /// The step's sample indices it holds, in batch order.
    samples: Vec<usize>,
    batch: QueryResponseBatch,
    /// `[b, t]` log π of the response tokens.
    logprobs: Tensor<2>,
    /// `[b, t, V]` log-softmax at the response positions.
    log_softmax: Tensor<3>,
    /// `[b, t]` value predictions.
    vpreds: Tensor<2>,
}

/// What the minibatch loop of one step accumulates for `record_step_stats`.
#[derive(Default)]
struct TrainStats {
    loss: LossStatsMean,
    skipped: usize,
    optimizer_steps: usize,
    grad_norm_sum: f64,
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
