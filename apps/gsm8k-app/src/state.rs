//! The app's side of the run bookkeeping in `lmrl_runs::run_state` (`state.toml` of a
//! checkpoint keyed by this app's `config::Algo`, the deterministic data order): the purposes
//! of the per-iteration random streams.
//!
//! Every random choice of an iteration (batch, sampling noise) is drawn from a stream seeded by
//! `(seed, iteration, purpose)`, not from one long-lived generator, so a resumed run reproduces
//! them without saving any generator state.
pub use lmrl_runs::{DataOrder, STATE_FILE, mix};

/// Purposes of the per-iteration streams (`lmrl_runs::run_state::EPOCH_ORDER` = 5 is taken by
/// the data order).
pub mod stream {
    /// Sampling noise. CORY's observer uses this seed + 1 (`lmrl_rl::CoryTrainer::iteration`).
    pub const GEN_PIONEER: u64 = 2;
    pub const EVAL: u64 = 6;
}
