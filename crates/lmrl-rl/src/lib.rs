//! Reinforcement learning for language models on burn: PPO exactly as TRL 0.11 runs it
//! (`trl.PPOTrainer.step`), and CORY (Ma et al., arXiv 2410.06101), which runs two PPO agents —
//! pioneer and observer — that cooperate and periodically exchange roles.
//!
//! Where every formula lives, and every deliberate deviation from the reference code, is listed
//! in `docs/algorithms.md`.

pub mod cory;
pub mod error;
pub mod group;
pub mod ppo;
pub mod util;

pub use cory::{
    CoryConfig, CoryEnv, CoryIterationStats, CoryState, CoryTexts, CoryTrainer, GenerationPurpose,
    RewardMode, Role,
};
pub use error::{Result, RlError};
pub use ppo::{PpoAgent, PpoConfig, PpoStats};
