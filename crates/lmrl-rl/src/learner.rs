//! [`Learner`]: one trainable copy of a language model together with its RL algorithm — what
//! CORY and a training loop need, whatever the algorithm: PPO ([`PpoAgent`]) or the
//! group-relative GRPO and RLOO ([`GroupAgent`]).
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use burn::tensor::Device;
use lmrl_models::{CausalLm, Generation, GenerationConfig, ValueHead, generate};
use serde::Serialize;

use crate::dist::Collective;
use crate::error::{Result, RlError};
use crate::group::{GroupAgent, GroupStats};
use crate::{PpoAgent, PpoStats};

/// What every learner reports after a step, for logs and metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepStats {
    /// Batch mean of Σ_t KL_t(π_θ ‖ π_ref) over each response (TRL `objective/kl`); for the
    /// group learners the full-vocabulary KL at temperature 1 before the update, so it compares
    /// across algorithms.
    pub kl: f32,
    /// Σ_t KL_t per sample (TRL `objective/kl_dist`).
    pub kl_per_sample: Vec<f32>,
    /// The KL coefficient β this step used.
    pub kl_coef: f64,
    /// Mean per-token entropy of the policy over the response tokens (TRL `policy/entropy`).
    pub entropy: f32,
    /// The policy-gradient loss, averaged over the step's minibatches.
    pub policy_loss: f32,
    /// The value loss (before any coefficient), for learners with a critic.
    pub value_loss: Option<f32>,
    /// Fraction of groups whose rewards were all equal (TRL `frac_reward_zero_std`), for
    /// learners that sample groups.
    pub frac_reward_zero_std: Option<f32>,
    /// ½·mean (ℓ^new − ℓ^old)² (TRL `policy/approxkl`).
    pub approxkl: f32,
    /// Fraction of tokens where the ratio clip was active (TRL `policy/clipfrac`).
    pub clipfrac: f32,
    /// Mean response length in tokens.
    pub response_len_mean: f32,
    /// Every statistic under the key TRL logs it with.
    pub trl: BTreeMap<String, f64>,
}

impl From<&PpoStats> for StepStats {
    fn from(s: &PpoStats) -> Self {
        Self {
            kl: s.objective_kl,
            kl_per_sample: s.objective_kl_dist.clone(),
            kl_coef: s.objective_kl_coef,
            entropy: s.train.policy_entropy,
            policy_loss: s.train.loss_policy,
            value_loss: Some(s.train.loss_value),
            frac_reward_zero_std: None,
            approxkl: s.train.policy_approxkl,
            clipfrac: s.train.policy_clipfrac,
            response_len_mean: s.responses_len_mean,
            trl: s.to_trl_map(),
        }
    }
}

impl From<&GroupStats> for StepStats {
    fn from(s: &GroupStats) -> Self {
        Self {
            kl: s.objective_kl,
            kl_per_sample: s.objective_kl_dist.clone(),
            kl_coef: s.beta,
            entropy: s.entropy,
            policy_loss: s.loss,
            value_loss: None,
            frac_reward_zero_std: Some(s.rewards.frac_reward_zero_std),
            approxkl: s.approxkl,
            clipfrac: s.clip_ratio_region_mean,
            response_len_mean: s.completion_mean_length,
            trl: s.to_trl_map(),
        }
    }
}

/// One trainable copy of an LM with its optimiser and algorithm state.
///
/// A batch handed to [`Learner::step`] holds [`Learner::samples_per_prompt`] consecutive
/// responses per prompt (1 for PPO; the group size for group-relative methods), so group
/// statistics are taken over each prompt's samples.
pub trait Learner<M: CausalLm>: Send {
    /// The algorithm's name in logs and checkpoints (`ppo`, `grpo`, `rloo`).
    fn algorithm(&self) -> &'static str;

    /// Responses sampled per prompt in one batch.
    fn samples_per_prompt(&self) -> usize {
        1
    }

    /// Samples responses from the current policy (no gradient, KV cache).
    fn generate(&self, prompts: &[Vec<u32>], config: &GenerationConfig) -> Result<Generation>;

    /// [`Learner::generate`] on each `(prompts, config)` chunk, in order. PPO and the group
    /// learners run the chunks concurrently, one thread each: a decoding step alternates
    /// memory-bound products with short single-threaded work (sampling, the cache), and a
    /// second chunk fills the gaps. Each chunk's sampling and arithmetic are its own, so the
    /// result is the sequential one exactly.
    fn generate_chunks(
        &self,
        chunks: &[(&[Vec<u32>], GenerationConfig)],
    ) -> Result<Vec<Generation>> {
        chunks.iter().map(|(p, c)| self.generate(p, c)).collect()
    }

    /// One optimisation step on scored samples: `queries[i]` answered by `responses[i]` got
    /// `scores[i]`; the KL penalty is measured against `reference`.
    fn step(
        &mut self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
        reference: &M,
    ) -> Result<StepStats>;

    /// Σ_t KL_t of each response under the current policy against `reference`, without a step
    /// (the KL of a batch the learner does not train on).
    fn kl_to_reference(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<Vec<f32>>;

    /// The current KL coefficient β.
    fn kl_coef(&self) -> f64;

    /// Back to the state a freshly built learner has (optimiser moments, β, statistics, RNG
    /// counters), keeping the weights.
    fn reset_state(&mut self);

    /// Writes everything besides the weights that the next step depends on into `dir`.
    fn save_state(&self, dir: &Path) -> Result<()>;

    /// Restores what [`Learner::save_state`] wrote, into a learner that already holds the
    /// weights saved with it.
    fn load_state(&mut self, dir: &Path) -> Result<()>;

    /// The policy.
    fn policy(&self) -> &M;

    /// The critic, for learners that have one.
    fn value_head(&self) -> Option<&ValueHead> {
        None
    }

    /// Makes the learner one rank of a data-parallel group (`crate::dist`): from then on
    /// [`Learner::step`] and [`Learner::kl_to_reference`] take this rank's contiguous share
    /// ([`crate::dist::shard`]) of each global batch, and every statistic the algorithm
    /// normalises over the batch, and the gradients, are reduced over the group. A learner
    /// that cannot run data parallel refuses a group of more than one rank (the default).
    fn set_collective(&mut self, collective: Arc<dyn Collective>) -> Result<()> {
        if collective.world() > 1 {
            return Err(RlError::Config {
                field: "ranks".into(),
                reason: format!(
                    "the {} learner does not run data parallel ({} ranks asked for)",
                    self.algorithm(),
                    collective.world()
                ),
            });
        }
        Ok(())
    }
}

impl<M: CausalLm, L: Learner<M> + ?Sized> Learner<M> for Box<L> {
    fn algorithm(&self) -> &'static str {
        (**self).algorithm()
    }
    fn samples_per_prompt(&self) -> usize {
        (**self).samples_per_prompt()
    }
    fn generate(&self, prompts: &[Vec<u32>], config: &GenerationConfig) -> Result<Generation> {
        (**self).generate(prompts, config)
    }
    fn generate_chunks(
        &self,
        chunks: &[(&[Vec<u32>], GenerationConfig)],
    ) -> Result<Vec<Generation>> {
        (**self).generate_chunks(chunks)
    }
    fn step(
        &mut self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
        reference: &M,
    ) -> Result<StepStats> {
        (**self).step(queries, responses, scores, reference)
    }
    fn kl_to_reference(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<Vec<f32>> {
        (**self).kl_to_reference(queries, responses, reference)
    }
    fn kl_coef(&self) -> f64 {
        (**self).kl_coef()
    }
    fn reset_state(&mut self) {
        (**self).reset_state()
    }
    fn save_state(&self, dir: &Path) -> Result<()> {
        (**self).save_state(dir)
    }
    fn load_state(&mut self, dir: &Path) -> Result<()> {
        (**self).load_state(dir)
    }
    fn policy(&self) -> &M {
        (**self).policy()
    }
    fn value_head(&self) -> Option<&ValueHead> {
        (**self).value_head()
    }
    fn set_collective(&mut self, collective: Arc<dyn Collective>) -> Result<()> {
        (**self).set_collective(collective)
    }
}

impl<M: CausalLm> Learner<M> for PpoAgent<M> {
    fn algorithm(&self) -> &'static str {
        "ppo"
    }
    fn generate(&self, prompts: &[Vec<u32>], config: &GenerationConfig) -> Result<Generation> {
        PpoAgent::generate(self, prompts, config)
    }
    fn generate_chunks(
        &self,
        chunks: &[(&[Vec<u32>], GenerationConfig)],
    ) -> Result<Vec<Generation>> {
        generate_concurrently(&self.model().lm, chunks, self.device())
    }
    fn step(
        &mut self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
        reference: &M,
    ) -> Result<StepStats> {
        Ok(StepStats::from(&PpoAgent::step(
            self, queries, responses, scores, reference,
        )?))
    }
    fn kl_to_reference(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<Vec<f32>> {
        PpoAgent::kl_to_reference(self, queries, responses, reference)
    }
    fn kl_coef(&self) -> f64 {
        PpoAgent::kl_coef(self)
    }
    fn reset_state(&mut self) {
        PpoAgent::reset_state(self)
    }
    fn save_state(&self, dir: &Path) -> Result<()> {
        PpoAgent::save_state(self, dir)
    }
    fn load_state(&mut self, dir: &Path) -> Result<()> {
        PpoAgent::load_state(self, dir)
    }
    fn policy(&self) -> &M {
        &self.model().lm
    }
    fn value_head(&self) -> Option<&ValueHead> {
        Some(&self.model().v_head)
    }
    fn set_collective(&mut self, collective: Arc<dyn Collective>) -> Result<()> {
        PpoAgent::set_collective(self, collective)
    }
}

impl<M: CausalLm> Learner<M> for GroupAgent<M> {
    fn algorithm(&self) -> &'static str {
        self.algorithm().name()
    }
    fn samples_per_prompt(&self) -> usize {
        self.group_size()
    }
    fn generate(&self, prompts: &[Vec<u32>], config: &GenerationConfig) -> Result<Generation> {
        GroupAgent::generate(self, prompts, config)
    }
    fn generate_chunks(
        &self,
        chunks: &[(&[Vec<u32>], GenerationConfig)],
    ) -> Result<Vec<Generation>> {
        generate_concurrently(self.model(), chunks, self.device())
    }
    fn step(
        &mut self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
        reference: &M,
    ) -> Result<StepStats> {
        Ok(StepStats::from(&GroupAgent::step(
            self, queries, responses, scores, reference,
        )?))
    }
    fn kl_to_reference(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &M,
    ) -> Result<Vec<f32>> {
        GroupAgent::kl_to_reference(self, queries, responses, reference)
    }
    fn kl_coef(&self) -> f64 {
        GroupAgent::kl_coef(self)
    }
    fn reset_state(&mut self) {
        GroupAgent::reset_state(self)
    }
    fn save_state(&self, dir: &Path) -> Result<()> {
        GroupAgent::save_state(self, dir)
    }
    fn load_state(&mut self, dir: &Path) -> Result<()> {
        GroupAgent::load_state(self, dir)
    }
    fn policy(&self) -> &M {
        self.model()
    }
    fn set_collective(&mut self, collective: Arc<dyn Collective>) -> Result<()> {
        GroupAgent::set_collective(self, collective)
    }
}

/// [`lmrl_models::generate`] of `model` on each chunk, each on a thread of its own; results in
/// chunk order.
fn generate_concurrently<M: CausalLm>(
    model: &M,
    chunks: &[(&[Vec<u32>], GenerationConfig)],
    device: &Device,
) -> Result<Vec<Generation>> {
    std::thread::scope(|s| {
        let running: Vec<_> = chunks
            .iter()
            .map(|(prompts, config)| s.spawn(move || generate(model, prompts, config, device)))
            .collect();
        running
            .into_iter()
            .map(|t| match t.join() {
                Ok(g) => Ok(g?),
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}
