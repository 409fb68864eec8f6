//! [`Task`]: what an RL fine-tuning task supplies to the training loop — prompts that carry
//! their own context, a reward over that context, the observer template of CORY, the sampler
//! settings of each iteration, what a sample log line holds, and optional evaluations.
use std::path::Path;

use lmrl_models::{CausalLm, GenerationConfig, LmTokenizer, ModelError};
use lmrl_rewards::Reward;
use lmrl_rl::Prompt;

use crate::error::TaskError;

/// When [`Task::evaluate`] is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Before the first iteration of a fresh run, on the base model.
    Before,
    /// After the last iteration, on every trained copy.
    After,
}

/// A task: the IMDB continuation task, GSM8K, or a user's own, for policies of the model type
/// `M` (a task that evaluates nothing, or evaluates through `CausalLm` alone, implements it for
/// every `M`).
pub trait Task<M: CausalLm> {
    /// What each prompt carries for the reward (the plain query, the ground truth, …).
    type Context: Clone + Send + Sync + 'static;

    /// The training prompts, in a fixed order; the loop draws each iteration's batch from them
    /// (a seeded shuffle per epoch).
    fn prompts(&self) -> &[Prompt<Self::Context>];

    /// The task reward.
    fn reward(&self) -> &dyn Reward<Self::Context>;

    /// CORY's observer prompt from the pioneer's prompt and its response text.
    fn observer_prompt(
        &self,
        prompt: &Prompt<Self::Context>,
        pioneer_response: &str,
    ) -> Result<String, TaskError>;

    /// The sampler settings of iteration `iteration`, whose sampling seed the loop chose.
    fn generation(&self, iteration: usize, seed: u64) -> GenerationConfig;

    /// A response's text as the reward and the logs see it (default: with special tokens, as
    /// TRL's `batch_decode` gives them).
    fn decode(&self, tokenizer: &LmTokenizer, ids: &[u32]) -> Result<String, ModelError> {
        tokenizer.decode(ids)
    }

    /// Extra fields of a `samples.jsonl` line for a response to `prompt` (e.g. the extracted
    /// answer and the ground truth).
    fn sample_fields(
        &self,
        prompt: &Prompt<Self::Context>,
        response: &str,
    ) -> serde_json::Map<String, serde_json::Value> {
        let _ = (prompt, response);
        serde_json::Map::new()
    }

    /// Evaluates the base model before training (`copies` = `[("base", model)]`) or every
    /// trained copy after it, writing what it measures into the run directory `out`.
    fn evaluate(&self, stage: Stage, copies: &[(&str, &M)], out: &Path) -> Result<(), TaskError> {
        let _ = (stage, copies, out);
        Ok(())
    }
}
