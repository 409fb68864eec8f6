//! GRPO and RLOO — the group-relative policy-gradient methods — with TRL 1.16 semantics
//! (`trl.GRPOTrainer`, `trl.RLOOTrainer`), as pure functions on tensors, one TRL quantity per
//! function, each checked against TRL's own numbers (`tests/fixtures/group-trl`,
//! `tests/group_parity.rs`). Formulas, references and the choice of defaults:
//! `docs/algorithms.md`.
//!
//! | TRL 1.16 | here |
//! |---|---|
//! | `GRPOTrainer._generate_and_score_completions`: `mean_grouped_rewards`, `std_rewards` (`nanstd`), `advantages`, `scale_rewards` | [`grpo_advantages`] |
//! | `GRPOTrainer._compute_loss`: `coef_1` | [`importance_ratio`] |
//! | `GRPOTrainer._compute_loss`: `per_token_kl` (k3) | [`k3_kl`] |
//! | `GRPOTrainer._compute_loss`: `-min(coef_1·A, coef_2·A)` | [`clipped_objective`] |
//! | `GRPOTrainer._compute_loss`: `loss_type` reductions | [`aggregate_loss`], [`LossNormalisation`] |
//! | `GRPOTrainer._compute_loss` (whole, with `kl` and `clip_ratio/*`) | [`grpo_loss`] |
//! | `RLOOTrainer._generate_and_score_completions`: `per_token_kl`, `kl` (k1) | [`rloo_sequence_kl`] |
//! | `RLOOTrainer._generate_and_score_completions`: `reward_clip_range`, `rewards − β·kl` | [`rloo_rewards`] |
//! | `RLOOTrainer._generate_and_score_completions`: `baselines`, `advantages`, `normalize_advantages` | [`rloo_advantages`] |
//! | `(per_token_logps * completion_mask).sum(1)` | [`sequence_logps`] |
//! | `RLOOTrainer._compute_loss` | [`rloo_loss`] |
//! | `mask_truncated_completions` | [`mask_truncated_completions`] |
//! | DAPO's dynamic sampling (one round), `frac_reward_zero_std` | [`informative_groups`], [`informative_samples`], [`equal_reward_share`] |
//! | `GRPOConfig`, `RLOOConfig` | [`GroupConfig`]: [`GrpoConfig`] (with [`GrpoSettings`]), [`RlooConfig`] (with [`RlooSettings`]) |
//! | `GRPOTrainer` / `RLOOTrainer` training step (`_prepare_inputs`, `compute_loss`, accumulation) | [`GroupAgent`] |
//!
//! Not implemented: TRL's other GRPO loss types (`cispo`, `sapo`, `luspo`, `vespo`),
//! sequence-level importance sampling (GSPO), `delta` two-sided clipping, the entropy mask and
//! bonus, the off-policy sequence mask, vLLM importance-sampling correction, and
//! `multi_objective_aggregation="normalize_then_sum"`.

mod advantages;
mod agent;
mod algorithm;
mod config;
#[cfg(feature = "cli")]
mod config_cli;
mod forward;
mod kl;
mod loss;
mod mask;
mod parallel;
mod selection;
mod stats;
mod train;

pub use advantages::{
    GroupAdvantages, RewardStats, RlooAdvantages, grpo_advantages, rloo_advantages, rloo_rewards,
};
pub use agent::{GROUP_STATE_FORMAT, GroupAgent, GroupAgentState};
pub use algorithm::GroupAlgorithm;
pub use config::{
    GroupConfig, GroupKind, GroupSizes, GrpoConfig, GrpoLossType, GrpoSettings, KindArgs,
    RlooConfig, RlooSettings, ScaleRewards,
};
pub use kl::{RlooKl, k3_kl, rloo_sequence_kl};
pub use loss::{
    GrpoLoss, GrpoLossInputs, GrpoLossParams, GrpoLossStats, LossNormalisation, RlooLoss,
    RlooLossParams, RlooLossStats, aggregate_loss, clipped_objective, grpo_loss, importance_ratio,
    rloo_loss, sequence_logps,
};
pub use mask::mask_truncated_completions;
pub use selection::{equal_reward_share, informative_groups, informative_samples};
pub use stats::GroupStats;
