//! A run's own checkpoint record (`state.toml`: which run, how far, which copies), the
//! deterministic data order, and the per-iteration random streams, shared by the task apps.
//! The training state of the learners themselves (Adam moments, β, running moments, counters,
//! roles) is written by `lmrl_rl` next to each copy's weights.
//!
//! Every random choice of an iteration (batch, response length, sampling noise) is drawn from a
//! stream seeded by `(seed, iteration, purpose)`, not from one long-lived generator, so a
//! resumed run reproduces them without saving any generator state.
use std::fmt::Debug;
use std::path::Path;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Result, RunError};

/// `state.toml` of a checkpoint. `A` is the app's algorithm choice (PPO or CORY).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainState<A> {
    /// Bumped when the layout changes.
    pub format: u32,
    pub algo: A,
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

impl<A: Serialize + DeserializeOwned + PartialEq + Debug> TrainState<A> {
    /// Reads `dir/state.toml` and checks that it belongs to the run `(algo, seed)` and has the
    /// layout this build resumes; a checkpoint of another run is refused rather than mixed in.
    pub fn read_for_run(dir: &Path, algo: &A, seed: u64) -> Result<Self> {
        let path = dir.join(STATE_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| RunError::Io {
            path: path.clone(),
            source,
        })?;
        let state: Self = toml::from_str(&text).map_err(|e| RunError::Format {
            path: path.clone(),
            reason: format!("invalid checkpoint state: {e}"),
        })?;
        if state.format != STATE_FORMAT || state.algo != *algo || state.seed != seed {
            return Err(RunError::Resume {
                path,
                reason: format!(
                    "does not belong to this run (format {}, algo {:?}, seed {}; this build \
                     resumes format {STATE_FORMAT})",
                    state.format, state.algo, state.seed
                ),
            });
        }
        Ok(state)
    }

    /// Writes this record to `dir/state.toml`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(STATE_FILE);
        let text = toml::to_string(self).map_err(|e| RunError::Format {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        std::fs::write(&path, text).map_err(|source| RunError::Io { path, source })
    }
}

/// SplitMix64 finaliser: a well-mixed 64-bit seed from several inputs (`lmrl_rl`'s
/// [`lmrl_rl::util::mix_seed`], so the apps' streams and the learners' use one mixer).
pub use lmrl_rl::util::mix_seed as mix;

/// Purpose of the per-epoch data-order stream (the apps' other purposes must differ from it).
pub const EPOCH_ORDER: u64 = 5;

/// A generator for one purpose of one iteration.
pub fn iter_rng(seed: u64, iteration: usize, purpose: u64) -> StdRng {
    StdRng::seed_from_u64(mix(&[seed, iteration as u64, purpose]))
}

/// The reference's DataLoader (`shuffle=True, drop_last=True`): each epoch is a fresh seeded
/// permutation of the items (prompts, problems) cut into whole batches; iteration `i` takes
/// batch `i mod batches_per_epoch` of epoch `i div batches_per_epoch`. Unlike the reference
/// (which stops after one epoch) runs may go on for more epochs.
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

    /// Item indices of iteration `it` (needs `n ≥ batch` for a whole batch).
    pub fn batch(&self, it: usize) -> Vec<usize> {
        let per = self.batches_per_epoch().max(1);
        let (epoch, k) = (it / per, it % per);
        let mut idx: Vec<usize> = (0..self.n).collect();
        idx.shuffle(&mut StdRng::seed_from_u64(mix(&[
            self.seed,
            epoch as u64,
            EPOCH_ORDER,
        ])));
        idx[k * self.batch..((k + 1) * self.batch).min(self.n)].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_order_covers_each_item_once_per_epoch_and_drops_the_rest() {
        let o = DataOrder::new(10, 3, 7);
        assert_eq!(o.batches_per_epoch(), 3);
        let mut seen: Vec<usize> = (0..3).flat_map(|i| o.batch(i)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 9, "one epoch = 3 disjoint batches of 3");
        // Deterministic, and a new permutation in the next epoch.
        assert_eq!(o.batch(4), DataOrder::new(10, 3, 7).batch(4));
        let e0: Vec<_> = (0..3).flat_map(|i| o.batch(i)).collect();
        let e1: Vec<_> = (3..6).flat_map(|i| o.batch(i)).collect();
        assert_ne!(e0, e1);
    }

    #[test]
    fn streams_differ_by_purpose_and_iteration() {
        assert_ne!(mix(&[0, 1, 2]), mix(&[0, 2, 1]));
        assert_ne!(mix(&[0, 1, 2]), mix(&[1, 1, 2]));
        assert_eq!(mix(&[3, 4]), mix(&[3, 4]));
    }

    #[test]
    fn state_round_trips_through_toml() {
        let s = TrainState {
            format: STATE_FORMAT,
            algo: "cory".to_string(),
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
        assert_eq!(toml::from_str::<TrainState<String>>(&text).unwrap(), s);
    }

    #[test]
    fn state_of_another_run_is_refused() {
        let dir = std::env::temp_dir().join(format!("lmrl-runs-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s = TrainState {
            format: STATE_FORMAT,
            algo: "cory".to_string(),
            seed: 3,
            completed_iterations: 5,
            agents: vec![AgentState {
                name: "llm2".into(),
            }],
        };
        s.write(&dir).unwrap();
        assert_eq!(
            TrainState::read_for_run(&dir, &"cory".to_string(), 3).unwrap(),
            s
        );
        let err = TrainState::read_for_run(&dir, &"ppo".to_string(), 3).unwrap_err();
        assert!(
            err.to_string().contains("does not belong to this run"),
            "{err}"
        );
        assert!(TrainState::read_for_run(&dir, &"cory".to_string(), 4).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn state_text_is_the_same_written_pretty_or_not() {
        // Earlier builds of imdb-app wrote `state.toml` with `to_string_pretty`; the shared
        // writer uses `to_string`. The layout must not change between them.
        let s = TrainState {
            format: STATE_FORMAT,
            algo: "ppo".to_string(),
            seed: 11,
            completed_iterations: 2,
            agents: vec![
                AgentState {
                    name: "llm1".into(),
                },
                AgentState {
                    name: "llm2".into(),
                },
            ],
        };
        assert_eq!(
            toml::to_string(&s).unwrap(),
            toml::to_string_pretty(&s).unwrap()
        );
    }
}
