//! RL fine-tuning of language models on burn, in one dependency.
//!
//! A program depends on `lmrl` alone and picks one backend feature: `flex` (the default, burn's
//! pure-Rust CPU backend), `tch`, `wgpu` or `cuda`. `flex` here switches on burn's backend *and*
//! the fused CPU kernels of [`models`] and [`rl`] (log-softmax, Adam, the matrix products):
//! enabling burn's `flex` without them still runs, only on the slower composite paths, so a
//! program that depends on the member crates one by one has to keep their `flex` features in
//! step by hand. Through this crate it cannot get that wrong.
//!
//! The member crates are modules: [`models`] (`lmrl-models`: the `CausalLm` trait, GPT-2 and
//! the Llama family, loading, tokenizers, generation), [`rl`] (`lmrl-rl`: PPO, GRPO, RLOO,
//! CORY), [`rewards`] (`lmrl-rewards`), [`data`] (`lmrl-data`), [`runs`] (`lmrl-runs`) and
//! [`train`] (`lmrl-train`: the training loop behind a `Task`, as the apps run it); [`burn`] is
//! the burn this build uses. [`prelude`] brings in what a training program names.
//!
//! PPO on a model directory (Hugging Face or `.gguf`) with a reward of your own is then the
//! part only you know — the model, the prompts with their contexts, the reward — around
//! [`rl::rollout_step`]:
//!
//! ```no_run
//! use lmrl::prelude::*;
//! # fn run(reward: &dyn Reward<String>) -> Result<(), Box<dyn std::error::Error>> {
//! let device = Device::default().autodiff();
//! let path = std::path::Path::new("SmolLM2-135M-Instruct");
//! let policy = AutoLm::from_pretrained(path, &device)?;
//! let reference = policy.valid();
//! let tokenizer = LmTokenizer::load_for_model(path)?;
//! let prompts = vec![Prompt::encode(&tokenizer, "The capital of France is", "Paris".to_string())?];
//! let config = PpoConfig { batch_size: prompts.len(), mini_batch_size: 1, ..PpoConfig::default() };
//! let model = LmWithValueHead::new(policy, ValueHeadInit::Zeros, &device);
//! let mut agent = PpoAgent::new(model, config, &device)?;
//! let generation = GenerationConfig::for_tokenizer(&tokenizer).with_max_new_tokens(16);
//! for it in 0..100 {
//!     let generation = generation.clone().with_seed(it);
//!     let (batch, stats) = rollout_step(&mut agent, &prompts, &generation, &tokenizer, reward, &reference)?;
//!     println!("{it}: reward {:.3} kl {:.3}", batch.mean_score(), stats.kl);
//! }
//! agent.policy().save_pretrained_with_tokenizer(&tokenizer, "trained".as_ref())?;
//! # Ok(()) }
//! ```
//!
//! GRPO and RLOO are the same loop with `GroupAgent::grpo` / `GroupAgent::rloo`. Whichever
//! learner runs, `rollout_step` reports one statistics type, [`rl::StepStats`], through the
//! [`rl::Learner`] trait; `PpoAgent::step` and `GroupAgent::step` called directly return each
//! algorithm's full statistics (`PpoStats`, `GroupStats`), from which `StepStats` is built.
//! `cargo run --release -p lmrl --example ppo_quickstart` runs this on a tiny random Llama, or
//! with `-- --model DIR` on a real checkpoint.

pub use burn;
pub use lmrl_data as data;
pub use lmrl_models as models;
pub use lmrl_rewards as rewards;
pub use lmrl_rl as rl;
pub use lmrl_runs as runs;
pub use lmrl_train as train;

// The fused kernels exist only in an lmrl-models built with its own `flex`: this line stops the
// build if the facade's `flex` ever stops reaching it.
#[cfg(feature = "flex")]
const _: fn() -> bool = lmrl_models::simd_kernels_allowed;

/// What a training program names: burn's [`Module`](burn::module::Module) (whose `valid()`
/// gives the frozen reference copy), tensors and devices; the models, tokenizer and
/// generation settings; the learners, CORY and the rollout; the reward trait; the `Task` of
/// the training loop.
pub mod prelude {
    pub use burn::module::Module;
    pub use burn::tensor::{Device, Int, Tensor};
    pub use lmrl_models::{
        AutoLm, CausalLm, GenerationConfig, LlamaConfig, LmTokenizer, LmWithValueHead, LoraConfig,
        ModelConfig, Pretrained, Sampling, ValueHeadInit, apply_lora, generate, load_peft_adapter,
        merge_lora, save_peft_adapter,
    };
    pub use lmrl_rewards::{Reward, RewardError, Sample};
    pub use lmrl_rl::{
        CoryConfig, CoryEnv, CoryTrainer, Decode, GroupAgent, GrpoConfig, Learner, PpoAgent,
        PpoConfig, Prompt, RlooConfig, ScoredBatch, StepStats, rollout, rollout_step,
    };
    pub use lmrl_train::Task;
}
