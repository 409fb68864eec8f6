//! CORY (Ma et al., "Coevolving with the Other You", arXiv 2410.06101): two PPO agents from the
//! same pretrained LM cooperate as pioneer and observer and periodically exchange roles
//! (paper Algorithm 1; spec §2).
//!
//! Text handling (decoding, the observer template, the task reward) belongs to the
//! application and plugs in through [`CoryEnv`], so this crate stays free of tokenizers and
//! reward models.

use std::error::Error;
use std::path::Path;

use lmrl_models::CausalLm;
use lmrl_models::sampling::GenerationConfig;
use serde::{Deserialize, Serialize};

use crate::error::{Result, RlError};
use crate::ppo::agent::PpoAgent;
use crate::ppo::config::PpoConfig;
use crate::ppo::state::{read_toml, state_err, write_toml};
use crate::ppo::stats::PpoStats;

/// Error type of the application's plug-ins.
pub type EnvError = Box<dyn Error + Send + Sync>;

/// Which of an iteration's samplings a [`CoryEnv::generate`] call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GenerationPurpose {
    /// The pioneer answering the queries.
    Pioneer,
    /// The observer answering the merged prompts.
    Observer,
    /// The observer answering the plain queries (evaluation only, no training).
    QueryOnly,
}

/// What the application supplies: tokenizer, observer template and task reward, and
/// optionally its own way of running generation (chunking, progress display).
pub trait CoryEnv {
    /// Token ids → text (the reference keeps special tokens such as `<|endoftext|>`).
    fn decode(&self, ids: &[u32]) -> std::result::Result<String, EnvError>;
    /// Text → token ids (the observer prompt is re-encoded without truncation).
    fn encode(&self, text: &str) -> std::result::Result<Vec<u32>, EnvError>;
    /// The observer's prompt from the query text and the pioneer's response text (IMDB:
    /// `I can make this sentence "{q}{y1}" more positive: {q}`; GSM8K: `Reference: {y1}`
    /// before the final `Answer:`).
    fn observer_prompt(
        &self,
        query: &str,
        pioneer_response: &str,
    ) -> std::result::Result<String, EnvError>;
    /// Task rewards r(q, y), one per pair, scored on the **plain query** plus the response.
    fn rewards(
        &mut self,
        queries: &[String],
        responses: &[String],
    ) -> std::result::Result<Vec<f32>, EnvError>;
    /// Samples one response per prompt from `agent` with `config` (whose seed the trainer has
    /// already made distinct per `purpose`). The default is one [`PpoAgent::generate`] call;
    /// an application may split the batch into chunks or show progress, as long as the result
    /// is a deterministic function of its arguments (which exact resume relies on).
    fn generate(
        &mut self,
        agent: &PpoAgent,
        prompts: &[Vec<u32>],
        config: &GenerationConfig,
        purpose: GenerationPurpose,
    ) -> std::result::Result<Vec<Vec<u32>>, EnvError> {
        let _ = purpose;
        Ok(agent.generate(prompts, config)?.tokens)
    }
}

fn ext<T>(component: &str, r: std::result::Result<T, EnvError>) -> Result<T> {
    r.map_err(|e| RlError::External {
        component: component.to_string(),
        message: e.to_string(),
    })
}

/// How the task rewards of the two responses become each agent's PPO score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardMode {
    /// R = r(q, y₁) + r(q, y₂) for both agents (paper Eq. 4, the reference code).
    Sum,
    /// R_self + λ·R_other (camera-ready appendix E.2; λ < 0 is competitive).
    SelfPlusOther {
        /// λ.
        lambda: f32,
    },
}

/// CORY settings on top of the two agents' [`crate::ppo::PpoConfig`]s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CoryConfig {
    /// Role exchange every this many iterations (T_REx = 5); 0 = never (the "no role exchange"
    /// ablation).
    pub swap_every: usize,
    /// At each exchange, give both agents a freshly built trainer's state (new Adam moments, β
    /// back to its initial value, empty reward statistics, reseeded minibatch RNG), as the
    /// reference code's reload-from-disk does. Default `false`: the paper's Algorithm 1 swaps
    /// only the parameters, and every piece of state travels with the weights it belongs to.
    pub reset_state_on_swap: bool,
    /// How R is formed.
    pub reward_mode: RewardMode,
    /// Also measure the observer on the plain query (pioneer format): one extra generation and
    /// reward call per iteration.
    pub eval_query_only: bool,
}

impl Default for CoryConfig {
    fn default() -> Self {
        Self {
            swap_every: 5,
            reset_state_on_swap: false,
            reward_mode: RewardMode::Sum,
            eval_query_only: true,
        }
    }
}

/// The role an LLM plays in an iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Answers the query alone.
    Pioneer,
    /// Sees the query and the pioneer's response.
    Observer,
}

/// Per-LLM metrics of one iteration (spec §5).
#[derive(Debug, Clone, Serialize)]
pub struct AgentMetrics {
    /// `"llm1"` (started as pioneer) or `"llm2"` (started as observer): follows the weights.
    pub llm: &'static str,
    /// Its role in this iteration.
    pub role: Role,
    /// Batch mean of r(q, y) of its own response in its training role (not R).
    pub task_reward: f32,
    /// Batch mean of Σ_t KL_t in its training context (`objective/kl`).
    pub kl: f32,
    /// r_c = task_reward − β·kl with the β of this step.
    pub combined_reward: f32,
    /// Task reward when answering the plain query (pioneer format); for the pioneer the same
    /// as `task_reward`. `None` if not measured.
    pub query_only_reward: Option<f32>,
    /// Σ_t KL_t on the plain query (pioneer format).
    pub query_only_kl: Option<f32>,
    /// query-only reward − β·query-only KL.
    pub query_only_combined: Option<f32>,
    /// Mean score R the agent was trained on (before normalisation).
    pub trained_score: f32,
    /// The full PPO statistics of its step.
    pub ppo: PpoStats,
}

/// The texts of one iteration, for sample logs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CoryTexts {
    /// Decoded queries q.
    pub queries: Vec<String>,
    /// Pioneer responses y₁.
    pub pioneer_responses: Vec<String>,
    /// Observer prompts m = template(q, y₁).
    pub observer_prompts: Vec<String>,
    /// Observer responses y₂.
    pub observer_responses: Vec<String>,
    /// r(q, y₁).
    pub pioneer_rewards: Vec<f32>,
    /// r(q, y₂).
    pub observer_rewards: Vec<f32>,
}

/// What [`CoryTrainer::iteration`] reports.
#[derive(Debug, Clone, Serialize)]
pub struct CoryIterationStats {
    /// 0-based iteration index.
    pub iteration: usize,
    /// `[llm1, llm2]`.
    pub agents: [AgentMetrics; 2],
    /// Whether the roles were exchanged after this iteration.
    pub swapped_after: bool,
    /// The iteration's queries, prompts, responses and task rewards.
    pub texts: CoryTexts,
}

/// Layout version of [`CoryState`].
pub const CORY_STATE_FORMAT: u32 = 1;
/// [`CoryState`] in a checkpoint directory.
pub const CORY_STATE_FILE: &str = "cory_state.toml";

/// The trainer's own state besides the two agents': who is pioneer, and how many iterations
/// ran (the role-exchange schedule counts them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoryState {
    /// [`CORY_STATE_FORMAT`].
    pub format: u32,
    /// Iterations run.
    pub iteration: usize,
    /// `"llm1"` or `"llm2"`: the LLM now in the pioneer role.
    pub pioneer: String,
}

/// Two PPO agents sharing one frozen reference.
#[derive(Debug)]
pub struct CoryTrainer {
    /// `[pioneer, observer]`.
    slots: [PpoAgent; 2],
    /// Which LLM (0 = llm1, 1 = llm2) sits in each slot.
    llm_in_slot: [usize; 2],
    reference: CausalLm,
    config: CoryConfig,
    iteration: usize,
}

const LLM_NAMES: [&str; 2] = ["llm1", "llm2"];

fn mean(x: &[f32]) -> f32 {
    if x.is_empty() {
        0.0
    } else {
        (x.iter().map(|&v| f64::from(v)).sum::<f64>() / x.len() as f64) as f32
    }
}

impl CoryTrainer {
    /// `llm1` starts as pioneer, `llm2` as observer; both are scored against `reference`.
    pub fn new(llm1: PpoAgent, llm2: PpoAgent, reference: CausalLm, config: CoryConfig) -> Self {
        Self {
            slots: [llm1, llm2],
            llm_in_slot: [0, 1],
            reference,
            config,
            iteration: 0,
        }
    }

    /// The agent currently in the pioneer role.
    pub fn pioneer(&self) -> &PpoAgent {
        &self.slots[0]
    }

    /// The agent currently in the observer role.
    pub fn observer(&self) -> &PpoAgent {
        &self.slots[1]
    }

    /// The agent holding LLM `i` (0 = llm1, 1 = llm2), wherever it is.
    pub fn llm(&self, i: usize) -> &PpoAgent {
        let slot = if self.llm_in_slot[0] == i { 0 } else { 1 };
        &self.slots[slot]
    }

    fn llm_mut(&mut self, i: usize) -> &mut PpoAgent {
        let slot = if self.llm_in_slot[0] == i { 0 } else { 1 };
        &mut self.slots[slot]
    }

    /// Directory name of LLM `i` inside a saved trainer: `llm1` or `llm2`.
    pub fn llm_name(i: usize) -> &'static str {
        LLM_NAMES[i.min(1)]
    }

    /// Who is pioneer and how many iterations ran.
    pub fn state(&self) -> CoryState {
        CoryState {
            format: CORY_STATE_FORMAT,
            iteration: self.iteration,
            pioneer: LLM_NAMES[self.llm_in_slot[0]].to_string(),
        }
    }

    /// Writes both agents' training states ([`PpoAgent::save_state`], in `dir/llm1` and
    /// `dir/llm2`) and `cory_state.toml` ([`CoryState`]); no weights.
    pub fn save_state(&self, dir: &Path) -> Result<()> {
        for (i, name) in LLM_NAMES.iter().enumerate() {
            self.llm(i).save_state(&dir.join(name))?;
        }
        write_toml(&dir.join(CORY_STATE_FILE), &self.state())
    }

    /// Restores what [`CoryTrainer::save_state`] wrote into a trainer built with
    /// [`CoryTrainer::new`] from agents that already hold the saved weights of llm1 and llm2:
    /// their optimizer/β/normaliser state, the roles and the iteration counter.
    pub fn load_state(&mut self, dir: &Path) -> Result<()> {
        for (i, name) in LLM_NAMES.iter().enumerate() {
            self.llm_mut(i).load_state(&dir.join(name))?;
        }
        self.load_roles(dir)
    }

    /// Reads `cory_state.toml`: puts the saved pioneer in the pioneer slot (without any state
    /// reset) and restores the iteration counter.
    fn load_roles(&mut self, dir: &Path) -> Result<()> {
        let file = dir.join(CORY_STATE_FILE);
        let state: CoryState = read_toml(&file)?;
        if state.format != CORY_STATE_FORMAT {
            return Err(state_err(
                &file,
                format!(
                    "format {} (this build reads {CORY_STATE_FORMAT})",
                    state.format
                ),
            ));
        }
        let pioneer = LLM_NAMES
            .iter()
            .position(|n| *n == state.pioneer)
            .ok_or_else(|| {
                state_err(
                    &file,
                    format!("pioneer `{}` is neither llm1 nor llm2", state.pioneer),
                )
            })?;
        if self.llm_in_slot[0] != pioneer {
            let [a, b] = &mut self.slots;
            std::mem::swap(a, b);
            self.llm_in_slot.swap(0, 1);
        }
        self.iteration = state.iteration;
        Ok(())
    }

    /// Weights and training state of both agents ([`PpoAgent::save`], in `dir/llm1` and
    /// `dir/llm2`) and the trainer's own state: everything to continue exactly.
    pub fn save(&self, dir: &Path) -> Result<()> {
        for (i, name) in LLM_NAMES.iter().enumerate() {
            self.llm(i).save(&dir.join(name))?;
        }
        write_toml(&dir.join(CORY_STATE_FILE), &self.state())
    }

    /// The trainer [`CoryTrainer::save`] wrote to `dir`: both agents on `device` (autodiff)
    /// continuing with `ppo`, scored against `reference`, with the CORY settings `config`.
    pub fn load(
        dir: &Path,
        ppo: &PpoConfig,
        reference: CausalLm,
        config: CoryConfig,
        device: &burn::tensor::Device,
    ) -> Result<Self> {
        let llm1 = PpoAgent::load(&dir.join(LLM_NAMES[0]), ppo.clone(), device)?;
        let llm2 = PpoAgent::load(&dir.join(LLM_NAMES[1]), ppo.clone(), device)?;
        let mut t = Self::new(llm1, llm2, reference, config);
        t.load_roles(dir)?;
        Ok(t)
    }

    /// Role of LLM `i` now.
    pub fn role_of(&self, i: usize) -> Role {
        if self.llm_in_slot[0] == i {
            Role::Pioneer
        } else {
            Role::Observer
        }
    }

    /// The shared frozen reference.
    pub fn reference(&self) -> &CausalLm {
        &self.reference
    }

    /// Iterations run so far.
    pub fn iterations(&self) -> usize {
        self.iteration
    }

    /// The settings.
    pub fn config(&self) -> &CoryConfig {
        &self.config
    }

    /// Role exchange: the two agents (weights, value heads, and their optimizer/β/normaliser
    /// state) trade slots; with `reset_state_on_swap` both states are then reset as the
    /// reference code's rebuild does.
    pub fn swap_roles(&mut self) {
        let [a, b] = &mut self.slots;
        std::mem::swap(a, b);
        self.llm_in_slot.swap(0, 1);
        if self.config.reset_state_on_swap {
            for s in &mut self.slots {
                s.reset_state();
            }
        }
    }

    /// Gives back `(llm1, llm2)`.
    pub fn into_agents(self) -> (PpoAgent, PpoAgent) {
        let [s0, s1] = self.slots;
        if self.llm_in_slot[0] == 0 {
            (s0, s1)
        } else {
            (s1, s0)
        }
    }

    /// One CORY iteration (spec §2, steps 2–8):
    /// pioneer samples y₁ ~ π_pio(·|q); the observer prompt m = template(q, y₁) is re-encoded;
    /// observer samples y₂ ~ π_obs(·|m); r₁ = r(q, y₁), r₂ = r(q, y₂); both agents take a PPO
    /// step on their own context with the combined score; the roles are exchanged every
    /// `swap_every` iterations.
    ///
    /// `generation` is used as given for the pioneer; the observer's sampler seed is `generation.seed + 1`
    /// and the query-only evaluation's `generation.seed + 2`, so the three sample streams differ.
    /// All three use the same `max_new_tokens` (the reference draws one `gen_len` for all).
    pub fn iteration<E: CoryEnv>(
        &mut self,
        queries: &[Vec<u32>],
        generation: &GenerationConfig,
        env: &mut E,
    ) -> Result<CoryIterationStats> {
        let q_text = queries
            .iter()
            .map(|q| ext("decode", env.decode(q)))
            .collect::<Result<Vec<_>>>()?;

        // Pioneer.
        let y1 = ext(
            "generate",
            env.generate(
                &self.slots[0],
                queries,
                generation,
                GenerationPurpose::Pioneer,
            ),
        )?;
        let y1_text = y1
            .iter()
            .map(|y| ext("decode", env.decode(y)))
            .collect::<Result<Vec<_>>>()?;

        // Observer on the merged prompt.
        let m_text = q_text
            .iter()
            .zip(&y1_text)
            .map(|(q, y)| ext("observer template", env.observer_prompt(q, y)))
            .collect::<Result<Vec<_>>>()?;
        let m_ids = m_text
            .iter()
            .map(|m| ext("encode", env.encode(m)))
            .collect::<Result<Vec<_>>>()?;
        let gen_obs = GenerationConfig {
            seed: generation.seed.wrapping_add(1),
            ..generation.clone()
        };
        let y2 = ext(
            "generate",
            env.generate(
                &self.slots[1],
                &m_ids,
                &gen_obs,
                GenerationPurpose::Observer,
            ),
        )?;
        let y2_text = y2
            .iter()
            .map(|y| ext("decode", env.decode(y)))
            .collect::<Result<Vec<_>>>()?;

        // Task rewards, both on the plain query.
        let r1 = ext("reward", env.rewards(&q_text, &y1_text))?;
        let r2 = ext("reward", env.rewards(&q_text, &y2_text))?;
        for (name, r) in [("pioneer rewards", &r1), ("observer rewards", &r2)] {
            if r.len() != queries.len() {
                return Err(RlError::Shape {
                    what: name.into(),
                    expected: vec![queries.len()],
                    got: vec![r.len()],
                });
            }
        }

        // Observer in pioneer format, before its update (like the pioneer's own metrics).
        let obs_query_only = if self.config.eval_query_only {
            let gen_eval = GenerationConfig {
                seed: generation.seed.wrapping_add(2),
                ..generation.clone()
            };
            let yq = ext(
                "generate",
                env.generate(
                    &self.slots[1],
                    queries,
                    &gen_eval,
                    GenerationPurpose::QueryOnly,
                ),
            )?;
            let yq_text = yq
                .iter()
                .map(|y| ext("decode", env.decode(y)))
                .collect::<Result<Vec<_>>>()?;
            let rq = ext("reward", env.rewards(&q_text, &yq_text))?;
            let klq = self.slots[1].kl_to_reference(queries, &yq, &self.reference)?;
            Some((mean(&rq), mean(&klq)))
        } else {
            None
        };

        let (s1, s2): (Vec<f32>, Vec<f32>) = match self.config.reward_mode {
            RewardMode::Sum => {
                let r: Vec<f32> = r1.iter().zip(&r2).map(|(a, b)| a + b).collect();
                (r.clone(), r)
            }
            RewardMode::SelfPlusOther { lambda } => (
                r1.iter().zip(&r2).map(|(a, b)| a + lambda * b).collect(),
                r2.iter().zip(&r1).map(|(a, b)| a + lambda * b).collect(),
            ),
        };

        let st1 = self.slots[0].step(queries, &y1, &s1, &self.reference)?;
        let st2 = self.slots[1].step(&m_ids, &y2, &s2, &self.reference)?;

        let pioneer = {
            let (task, kl, beta) = (mean(&r1), st1.objective_kl, st1.objective_kl_coef as f32);
            AgentMetrics {
                llm: LLM_NAMES[self.llm_in_slot[0]],
                role: Role::Pioneer,
                task_reward: task,
                kl,
                combined_reward: task - beta * kl,
                query_only_reward: Some(task),
                query_only_kl: Some(kl),
                query_only_combined: Some(task - beta * kl),
                trained_score: mean(&s1),
                ppo: st1,
            }
        };
        let observer = {
            let (task, kl, beta) = (mean(&r2), st2.objective_kl, st2.objective_kl_coef as f32);
            AgentMetrics {
                llm: LLM_NAMES[self.llm_in_slot[1]],
                role: Role::Observer,
                task_reward: task,
                kl,
                combined_reward: task - beta * kl,
                query_only_reward: obs_query_only.map(|(r, _)| r),
                query_only_kl: obs_query_only.map(|(_, k)| k),
                query_only_combined: obs_query_only.map(|(r, k)| r - beta * k),
                trained_score: mean(&s2),
                ppo: st2,
            }
        };
        let agents = if self.llm_in_slot[0] == 0 {
            [pioneer, observer]
        } else {
            [observer, pioneer]
        };
        let index = self.iteration;
        self.iteration += 1;
        let swap =
            self.config.swap_every > 0 && self.iteration.is_multiple_of(self.config.swap_every);
        if swap {
            self.swap_roles();
        }
        Ok(CoryIterationStats {
            iteration: index,
            agents,
            swapped_after: swap,
            texts: CoryTexts {
                queries: q_text,
                pioneer_responses: y1_text,
                observer_prompts: m_text,
                observer_responses: y2_text,
                pioneer_rewards: r1,
                observer_rewards: r2,
            },
        })
    }
}
