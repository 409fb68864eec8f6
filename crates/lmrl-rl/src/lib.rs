//! Reinforcement learning for language models on burn: PPO exactly as TRL runs it
//! (`trl.PPOTrainer.step`), and CORY (Ma et al., "Coevolving with the Other You",
//! arXiv 2410.06101), in which two copies of the LM — pioneer and observer — cooperate on a
//! shared reward and periodically exchange roles.
//!
//! Everything is generic over `lmrl_models::CausalLm`, so any architecture that implements the
//! trait trains here. A [`Learner`] is one trainable copy with its algorithm ([`PpoAgent`]);
//! [`CoryTrainer`] runs two of them, and [`rollout_step`] one (sample, decode, score with an
//! `lmrl_rewards::Reward`, step). [`ppo`] holds each TRL quantity as its own function.
//!
//! Where every formula lives, and every deliberate deviation from the reference code, is listed
//! in `docs/algorithms.md`; the CORY algorithm is described in `docs/cory.md`.

mod cory;
pub mod dist;
mod error;
pub mod group;
mod learner;
pub mod optim;
#[cfg(feature = "flex")]
mod optim_file;
pub mod ppo;
mod rollout;
mod util;

pub use cory::{
    AgentMetrics, CORY_STATE_FILE, CORY_STATE_FORMAT, CoryConfig, CoryEnv, CoryIterationStats,
    CoryState, CoryTexts, CoryTrainer, EnvError, GenerationPurpose, Prompt, RewardMode, Role,
};
pub use dist::{Collective, LocalGroup, SingleProcess};
pub use error::{Result, RlError};
pub use group::{GroupAgent, GroupAlgorithm, GroupStats, GrpoConfig, RlooConfig};
pub use learner::{Learner, StepStats};
pub use ppo::agent::{PpoAgent, Rollout};
pub use ppo::config::PpoConfig;
pub use ppo::state::{AGENT_STATE_FILE, AGENT_STATE_FORMAT, AgentState, OPTIMIZER_FILE};
pub use ppo::stats::PpoStats;
pub use rollout::{Decode, ScoredBatch, rollout, rollout_step, score_texts};
pub use util::mix_seed;

/// The most samples (PPO) or completions (GRPO, RLOO: prompts × generations) one step may hold:
/// a step keeps every one of them and their per-token tensors at once, so a larger batch is a
/// mistake, refused when the settings are checked rather than an allocation failure later.
pub const MAX_STEP_BATCH: usize = 1 << 24;
