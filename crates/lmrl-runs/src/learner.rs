//! What a run trains — one PPO policy or the two CORY LLMs — with the checkpoint layout the
//! apps share: per copy a subdirectory (`policy`, or `llm1`/`llm2`) holding the app's weights
//! and `lmrl_rl`'s training state, CORY's `cory_state.toml`, and the run's `state.toml`
//! ([`TrainState`]). How weights are written and read (full HF weights, merged LoRA, …) is the
//! app's choice, passed in as a closure; everything else is the same for every task.
use std::fmt::Debug;
use std::path::Path;

use burn::tensor::Device;
use lmrl_models::{CausalLm, GenerationConfig, LmWithValueHead};
use lmrl_rl::ppo::{PpoAgent, PpoConfig, PpoStats};
use lmrl_rl::{CoryConfig, CoryIterationStats, CoryTrainer, Role};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::args::Algo;
use crate::checkpoint::{CheckpointDir, FillError};
use crate::error::{Result, RunError};
use crate::metrics::{MetricRow, mean};
use crate::run_state::{AgentState, STATE_FORMAT, TrainState, mix};

/// Checkpoint subdirectory of the PPO policy.
pub const POLICY: &str = "policy";

/// What is trained: one PPO policy, or the two CORY LLMs in [`CoryTrainer`].
pub enum Learner {
    Ppo(Box<PpoAgent>),
    Cory(Box<CoryTrainer>),
}

/// Which learner a checkpoint holds, with what rebuilding a CORY trainer needs.
pub enum LearnerKind {
    Ppo,
    Cory {
        config: CoryConfig,
        /// The frozen reference model the KL penalty is measured against.
        reference: Box<CausalLm>,
    },
}

impl LearnerKind {
    /// What `algo` trains: for CORY, a trainer with `config` measuring KL against (a copy of)
    /// `reference`.
    pub fn new(algo: Algo, config: CoryConfig, reference: &CausalLm) -> Self {
        match algo {
            Algo::Ppo => LearnerKind::Ppo,
            Algo::Cory => LearnerKind::Cory {
                config,
                reference: Box::new(reference.clone()),
            },
        }
    }
}

impl Learner {
    /// Every trained copy by name, sorted (`policy`, or `llm1`, `llm2`).
    pub fn copies(&self) -> Vec<(&'static str, &PpoAgent)> {
        match self {
            Learner::Ppo(a) => vec![(POLICY, a.as_ref())],
            Learner::Cory(t) => (0..2)
                .map(|i| (CoryTrainer::llm_name(i), t.llm(i)))
                .collect(),
        }
    }

    /// The copies in `state.toml` order: `[policy]`, or `[pioneer, observer]` for CORY.
    pub fn agent_names(&self) -> Vec<String> {
        match self {
            Learner::Ppo(_) => vec![POLICY.into()],
            Learner::Cory(t) => {
                let p = if t.role_of(0) == Role::Pioneer { 0 } else { 1 };
                vec![
                    CoryTrainer::llm_name(p).into(),
                    CoryTrainer::llm_name(1 - p).into(),
                ]
            }
        }
    }

    /// A fresh learner of `kind` whose copies come from `make_agent` (each call a new agent
    /// on the initial weights; CORY's llm1 is made first).
    pub fn fresh<E>(
        kind: LearnerKind,
        make_agent: impl Fn() -> std::result::Result<PpoAgent, E>,
    ) -> std::result::Result<Learner, E> {
        Ok(match kind {
            LearnerKind::Ppo => Learner::Ppo(Box::new(make_agent()?)),
            LearnerKind::Cory { config, reference } => {
                let (llm1, llm2) = (make_agent()?, make_agent()?);
                Learner::Cory(Box::new(CoryTrainer::new(llm1, llm2, *reference, config)))
            }
        })
    }

    /// Writes checkpoint `done` of the run `(algo, seed)` and keeps the `keep` newest: per copy
    /// its weights (`save_weights(agent, copy_dir)`) and training state (`lmrl_rl`'s
    /// `optimizer.bpk` + `trainer_state.toml`: Adam moments, β controller, running score
    /// moments, step and minibatch-RNG counters); for CORY also `cory_state.toml` (roles,
    /// iteration counter); and `state.toml`.
    pub fn save_checkpoint<A: Serialize + DeserializeOwned + PartialEq + Debug + Clone>(
        &self,
        ckpts: &CheckpointDir,
        (algo, seed): (&A, u64),
        done: usize,
        keep: usize,
        save_weights: impl Fn(&PpoAgent, &Path) -> std::result::Result<(), FillError>,
    ) -> Result<()> {
        let state = TrainState {
            format: STATE_FORMAT,
            algo: algo.clone(),
            seed,
            completed_iterations: done,
            agents: self
                .agent_names()
                .into_iter()
                .map(|name| AgentState { name })
                .collect(),
        };
        ckpts.save(done, |dir| {
            for (name, agent) in self.copies() {
                save_weights(agent, &dir.join(name))?;
            }
            match self {
                Learner::Ppo(agent) => agent.save_state(&dir.join(POLICY))?,
                Learner::Cory(t) => t.save_state(dir)?,
            }
            state.write(dir)?;
            Ok(())
        })?;
        ckpts.prune(keep)
    }

    /// Rebuilds the learner of checkpoint `dir` of the run `(algo, seed)` exactly: weights
    /// (`load_model(copy_dir)`, on the training device), value heads, Adam moments, β, running
    /// score moments, step counters, roles and the CORY iteration counter. Returns it with the
    /// number of iterations the checkpoint had finished.
    pub fn restore<A: Serialize + DeserializeOwned + PartialEq + Debug>(
        dir: &Path,
        (algo, seed): (&A, u64),
        kind: LearnerKind,
        ppo: &PpoConfig,
        train_device: &Device,
        load_model: impl Fn(&Path) -> std::result::Result<LmWithValueHead, FillError>,
    ) -> Result<(Learner, usize)> {
        let state = TrainState::read_for_run(dir, algo, seed)?;
        let agent = |name: &str| -> Result<PpoAgent> {
            let d = dir.join(name);
            let model = load_model(&d).map_err(|source| RunError::Restore {
                what: "the weights",
                path: d.clone(),
                source,
            })?;
            PpoAgent::new(model, ppo.clone(), train_device).map_err(|e| RunError::Restore {
                what: "the agent",
                path: d,
                source: e.into(),
            })
        };
        let learner = match kind {
            LearnerKind::Ppo => {
                let mut a = agent(POLICY)?;
                let d = dir.join(POLICY);
                a.load_state(&d).map_err(|e| RunError::Restore {
                    what: "the training state",
                    path: d,
                    source: e.into(),
                })?;
                Learner::Ppo(Box::new(a))
            }
            LearnerKind::Cory { config, reference } => {
                let (llm1, llm2) = (
                    agent(CoryTrainer::llm_name(0))?,
                    agent(CoryTrainer::llm_name(1))?,
                );
                let mut t = CoryTrainer::new(llm1, llm2, *reference, config);
                t.load_state(dir).map_err(|e| RunError::Restore {
                    what: "the CORY state",
                    path: dir.to_path_buf(),
                    source: e.into(),
                })?;
                if t.iterations() != state.completed_iterations {
                    return Err(RunError::Resume {
                        path: dir.join(crate::run_state::STATE_FILE),
                        reason: format!(
                            "says {} iterations, {} says {}",
                            state.completed_iterations,
                            dir.join(lmrl_rl::cory::CORY_STATE_FILE).display(),
                            t.iterations()
                        ),
                    });
                }
                Learner::Cory(Box::new(t))
            }
        };
        Ok((learner, state.completed_iterations))
    }
}

/// The metrics rows of a CORY iteration, `[llm1, llm2]`: each copy's task reward is the batch
/// mean reward of its own responses in its training role; an observer's plain-query (pioneer
/// format) reward and KL fill the `pioneer_*` columns when the trainer measured them.
pub fn cory_rows(it: usize, stats: &CoryIterationStats) -> Vec<MetricRow> {
    let t = &stats.texts;
    stats
        .agents
        .iter()
        .map(|m| {
            let (own, role) = match m.role {
                Role::Pioneer => (&t.pioneer_rewards, "pioneer"),
                Role::Observer => (&t.observer_rewards, "observer"),
            };
            let plain = m
                .query_only_reward
                .zip(m.query_only_kl)
                .filter(|_| m.role == Role::Observer)
                .map(|(r, k)| (f64::from(r), f64::from(k)));
            metric_row(it, m.llm, role, mean(own), &m.ppo, plain)
        })
        .collect()
}

/// Samples responses to `prompts` in chunks of `chunk_size`; chunk `k` uses the seed
/// `mix(base.seed, k)`, so the result depends only on the arguments (exact resume).
/// `progress(n)` is called after each chunk of `n` prompts.
pub fn generate_chunked(
    agent: &PpoAgent,
    prompts: &[Vec<u32>],
    base: &GenerationConfig,
    chunk_size: usize,
    mut progress: impl FnMut(usize),
) -> lmrl_rl::Result<Vec<Vec<u32>>> {
    let mut out = Vec::with_capacity(prompts.len());
    for (k, chunk) in prompts.chunks(chunk_size).enumerate() {
        let cfg = GenerationConfig {
            seed: mix(&[base.seed, k as u64]),
            ..base.clone()
        };
        out.extend(agent.generate(chunk, &cfg)?.tokens);
        progress(chunk.len());
    }
    Ok(out)
}

/// One metrics row of an agent's PPO step. `task` is the batch mean of r(q, y) of the agent's
/// own responses; `pioneer` its (reward, KL) answering the plain query, when measured
/// separately (otherwise the training-role values are repeated). `combined_reward` is the
/// KL-penalised objective r − β·KL with TRL's `objective/kl` and `objective/kl_coef`.
pub fn metric_row(
    it: usize,
    name: &str,
    role: &str,
    task: f64,
    s: &PpoStats,
    pioneer: Option<(f64, f64)>,
) -> MetricRow {
    let kl = f64::from(s.objective_kl);
    let (ptr, pkl) = pioneer.unwrap_or((task, kl));
    MetricRow {
        iteration: it,
        agent: name.into(),
        role: role.into(),
        task_reward: task,
        kl,
        beta: s.objective_kl_coef,
        combined_reward: task - s.objective_kl_coef * kl,
        policy_loss: f64::from(s.train.loss_policy),
        value_loss: f64::from(s.train.loss_value),
        entropy: f64::from(s.train.policy_entropy),
        approxkl: f64::from(s.train.policy_approxkl),
        clipfrac: f64::from(s.train.policy_clipfrac),
        response_len: f64::from(s.responses_len_mean),
        pioneer_task_reward: ptr,
        pioneer_kl: pkl,
        seconds: 0.0,
    }
}
