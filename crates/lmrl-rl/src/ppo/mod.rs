//! PPO with TRL 0.11 semantics (`trl.PPOTrainer`), split one quantity per function so that each
//! can be checked against TRL's own numbers (`tests/fixtures/ppo-trl`).
//!
//! | TRL | here |
//! |---|---|
//! | `_kl_penalty` | [`kl_penalty`], [`kl_full`], [`kl_k1`], [`kl_abs`], [`kl_mse`] |
//! | `compute_rewards` | [`compute_rewards`] |
//! | `compute_advantages` | [`compute_advantages`] |
//! | `masked_mean` / `masked_var` / `masked_whiten` / `whiten` | [`masked_mean`], [`masked_var`], [`masked_whiten`], [`whiten()`] |
//! | `loss`, `entropy_from_logits`, `clip_by_value` | [`ppo_loss`], [`entropy_from_logits`], [`clip_by_value`] |
//! | `AdaptiveKLController`, `FixedKLController` | [`AdaptiveKlController`], [`FixedKlController`] |
//! | `RunningMoments`, score scaling in `step` | [`RunningMoments`], [`normalise_scores`] |
//! | `PPOConfig` | [`crate::PpoConfig`] |
//! | `step`, `batched_forward_pass`, `train_minibatch`, `record_step_stats` | [`crate::PpoAgent`] |
//! | `accelerator.clip_grad_norm_` | [`clip_grad_norm`] |
//! | (checkpoint/resume of the trainer state) | [`crate::AgentState`], [`crate::PpoAgent::save_state`] |

mod advantages;
pub(crate) mod agent;
pub(crate) mod config;
mod forward;
mod grad;
mod kl;
mod kl_controller;
mod loss;
mod mask;
pub mod parallel;
mod rewards;
mod running_moments;
pub(crate) mod state;
pub(crate) mod stats;
mod targets;
mod train;
mod whiten;

pub use advantages::{Advantages, Gae, Whiten, compute_advantages, compute_advantages_with};
pub use grad::{clip_grad_norm, global_grad_norm};
pub use kl::{
    KlPenalty, TokenLogProbs, gather_logprobs, kl_abs, kl_full, kl_k1, kl_mse, kl_penalty,
    logprobs_from_logits,
};
pub use kl_controller::{AdaptiveKlController, FixedKlController, KlController};
pub use loss::{
    LossInputs, LossParams, LossStats, PpoLoss, clip_by_value, entropy_from_logits, ppo_loss,
};
pub use mask::ResponseMask;
pub use rewards::{ShapedRewards, compute_rewards};
pub use running_moments::{RunningMoments, normalise_scores};
pub use state::{param_ids, param_ids_hex, restore_param_ids};
pub use whiten::{masked_mean, masked_var, masked_whiten, whiten};
