//! The app's own checkpoint record (`state.toml`: which run, how far, which copies), the
//! deterministic data order, and the per-iteration random streams. The training state of the
//! learners themselves (Adam moments, β, running moments, counters, roles) is written by
//! `lmrl_rl` next to each copy's weights.
//!
//! Every random choice of an iteration (batch, sampling noise) comes from a stream seeded by
//! `(seed, iteration, purpose)`, not from one long-lived generator, so a resumed run reproduces
//! them without saving any generator state.
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::config::Algo;

/// `state.toml` of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Bumped when the layout changes.
    pub format: u32,
    pub algo: Algo,
    pub seed: u64,
    /// Iterations finished when the checkpoint was taken (the next one to run).
    pub completed_iterations: usize,
    /// One entry per trained copy, in the order `[pioneer, observer]` (CORY) or `[policy]`.
    pub agents: Vec<AgentState>,
}

/// One trained copy. Its weights, value head, tokenizer and training state
/// (`lmrl_rl::ppo::PpoAgent::save_state`) are in the checkpoint subdirectory `name`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    /// `policy`, `llm1` or `llm2`.
    pub name: String,
}

/// 2: the learners' state moved to `lmrl_rl`'s files (format 1 held β and running moments
/// here and could not resume exactly).
pub const STATE_FORMAT: u32 = 2;
/// TOML, not JSON: serde_json's default float parser is not bit-exact, TOML's is.
pub const STATE_FILE: &str = "state.toml";

/// SplitMix64 finaliser: a well-mixed 64-bit seed from several inputs.
pub fn mix(parts: &[u64]) -> u64 {
    let mut h: u64 = 0x9E37_79B9_7F4A_7C15;
    for &p in parts {
        h ^= p.wrapping_add(0x9E37_79B9_7F4A_7C15);
        h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^= h >> 31;
        h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 29;
    }
    h
}

/// Purposes of the per-iteration streams.
pub mod stream {
    /// Sampling noise. CORY's observer uses this seed + 1 (`lmrl_rl::CoryTrainer::iteration`).
    pub const GEN_PIONEER: u64 = 2;
    pub const EPOCH_ORDER: u64 = 5;
    pub const EVAL: u64 = 6;
}

/// The reference's DataLoader (`shuffle=True, drop_last=True`): each epoch is a fresh seeded
/// permutation of the training problems cut into whole batches; iteration `i` takes batch
/// `i mod batches_per_epoch` of epoch `i div batches_per_epoch`.
#[derive(Debug, Clone)]
pub struct DataOrder {
    n: usize,
    batch: usize,
    seed: u64,
}

impl DataOrder {
    pub fn new(n: usize, batch: usize, seed: u64) -> Self {
        Self { n, batch, seed }
    }

    pub fn batches_per_epoch(&self) -> usize {
        self.n / self.batch
    }

    /// Problem indices of iteration `it` (needs `n ≥ batch`).
    pub fn batch(&self, it: usize) -> Vec<usize> {
        let per = self.batches_per_epoch().max(1);
        let (epoch, k) = (it / per, it % per);
        let mut idx: Vec<usize> = (0..self.n).collect();
        idx.shuffle(&mut StdRng::seed_from_u64(mix(&[
            self.seed,
            epoch as u64,
            stream::EPOCH_ORDER,
        ])));
        idx[k * self.batch..((k + 1) * self.batch).min(self.n)].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_order_covers_each_problem_once_per_epoch_and_drops_the_rest() {
        let o = DataOrder::new(10, 3, 7);
        assert_eq!(o.batches_per_epoch(), 3);
        let mut seen: Vec<usize> = (0..3).flat_map(|i| o.batch(i)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 9, "one epoch = 3 disjoint batches of 3");
        assert_eq!(o.batch(4), DataOrder::new(10, 3, 7).batch(4));
        let e0: Vec<_> = (0..3).flat_map(|i| o.batch(i)).collect();
        let e1: Vec<_> = (3..6).flat_map(|i| o.batch(i)).collect();
        assert_ne!(e0, e1);
    }

    #[test]
    fn state_round_trips_through_toml() {
        let s = TrainState {
            format: STATE_FORMAT,
            algo: Algo::Cory,
            seed: 3,
            completed_iterations: 5,
            agents: vec![
                AgentState {
                    name: "llm2".into(),
                },
                AgentState {
                    name: "llm1".into(),
                },
            ],
        };
        let text = toml::to_string(&s).unwrap();
        assert_eq!(toml::from_str::<TrainState>(&text).unwrap(), s);
    }
}
