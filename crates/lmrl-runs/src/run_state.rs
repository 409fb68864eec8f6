//! A run's own checkpoint record (`state.toml`: which run, how far, which copies). The
//! training state of the learners themselves (optimiser moments, β, running moments, counters,
//! roles) is written by the RL crate next to each copy's weights.
use std::fmt::Debug;
use std::path::Path;

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
/// (the learner's `save_state`) are in the checkpoint subdirectory `name`.
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
        let text = std::fs::read_to_string(&path).map_err(crate::error::io("read", &path))?;
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
        std::fs::write(&path, text).map_err(crate::error::io("write", &path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
