//! PPO with TRL 0.11 semantics (`trl.PPOTrainer`), split one quantity per function so that each
//! can be checked against TRL's own numbers (`tests/fixtures/ppo-trl`).
//!
//! | TRL | here |
//! |---|---|
//! | `_kl_penalty` | [`kl::kl_penalty`], [`kl::kl_full`], [`kl::kl_k1`], [`kl::kl_abs`], [`kl::kl_mse`] |
//! | `compute_rewards` | [`rewards::compute_rewards`] |
//! | `compute_advantages` | [`advantages::compute_advantages`] |
//! | `masked_mean` / `masked_var` / `masked_whiten` / `whiten` | [`whiten`] |
//! | `loss`, `entropy_from_logits`, `clip_by_value` | [`loss`] |
//! | `AdaptiveKLController`, `FixedKLController` | [`kl_controller`] |
//! | `RunningMoments`, score scaling in `step` | [`running_moments`] |
//! | `record_step_stats` | [`stats`] |
//! | `PPOConfig` | [`config::PpoConfig`] |
//! | `step`, `batched_forward_pass`, `train_minibatch` | [`agent::PpoAgent`] |
//! | `accelerator.clip_grad_norm_` | [`grad::clip_grad_norm`] |
//! | (checkpoint/resume of the trainer state) | [`state`], [`agent::PpoAgent::save_state`] |

pub mod advantages;
pub mod agent;
pub mod config;
pub mod grad;
pub mod kl;
pub mod kl_controller;
pub mod loss;
pub mod mask;
pub mod rewards;
pub mod running_moments;
pub mod state;
pub mod stats;
pub mod whiten;

pub use advantages::{Advantages, compute_advantages};
pub use agent::{PpoAgent, Rollout};
pub use config::PpoConfig;
pub use grad::{clip_grad_norm, global_grad_norm};
pub use kl::{KlPenalty, TokenLogProbs, kl_penalty};
pub use kl_controller::{AdaptiveKlController, FixedKlController, KlController};
pub use loss::{LossInputs, LossParams, LossStats, PpoLoss, ppo_loss};
pub use mask::ResponseMask;
pub use rewards::{ShapedRewards, compute_rewards};
pub use running_moments::{RunningMoments, normalise_scores};
pub use state::AgentState;
pub use stats::PpoStats;
