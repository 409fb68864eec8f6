//! CORY (Ma et al., "Coevolving with the Other You", arXiv 2410.06101): two copies of the same
//! pretrained LM cooperate as pioneer and observer, both trained on the sum of their task
//! rewards, and periodically exchange roles (the paper's Algorithm 1; `docs/cory.md`).
//!
//! Each copy is a [`Learner`] — PPO in the paper, but any algorithm that implements the trait
//! (the group-relative ones included) runs under CORY unchanged. Text handling (decoding, the
//! observer template) belongs to the application and plugs in through [`CoryEnv`]; the task
//! reward is an `lmrl_rewards::Reward` over each prompt's own context.

use std::error::Error;
use std::path::Path;

use lmrl_models::{AutoLm, CausalLm, GenerationConfig};
use lmrl_rewards::Reward;
use serde::{Deserialize, Serialize};

use crate::error::{Result, RlError};
use crate::group::informative_samples;
use crate::learner::{Learner, StepStats};
use crate::ppo::state::{read_toml, state_err, write_toml};
use crate::rollout::{repeat_each, score_texts};
use crate::{PpoAgent, PpoConfig};

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

/// A prompt of a batch: its token ids, its text, and the context its reward needs (the plain
/// query for the IMDB sentiment rewards, the ground truth for GSM8K).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prompt<C> {
    pub ids: Vec<u32>,
    pub text: String,
    pub context: C,
}

/// What the application supplies besides the reward: the tokenizer (text ↔ ids), the observer
/// template, and optionally its own way of running generation (chunking, progress display).
pub trait CoryEnv<M: CausalLm, C> {
    /// Token ids → text (the reference keeps special tokens such as `<|endoftext|>`).
    fn decode(&self, ids: &[u32]) -> std::result::Result<String, EnvError>;
    /// Text → token ids (the observer prompt is re-encoded without truncation).
    fn encode(&self, text: &str) -> std::result::Result<Vec<u32>, EnvError>;
    /// The observer's prompt from the pioneer's prompt and response text (IMDB:
    /// `I can make this sentence "{q}{y1}" more positive: {q}`; GSM8K: `Reference: {y1}`
    /// before the final `Answer:`).
    fn observer_prompt(
        &self,
        prompt: &Prompt<C>,
        pioneer_response: &str,
    ) -> std::result::Result<String, EnvError>;
    /// Samples one response per prompt from `learner` with `config` (whose seed the trainer
    /// has already made distinct per `purpose`). The default is one [`Learner::generate`] call;
    /// an application may split the batch into chunks or show progress, as long as the result
    /// is a deterministic function of its arguments (which exact resume relies on).
    fn generate(
        &mut self,
        learner: &dyn Learner<M>,
        prompts: &[Vec<u32>],
        config: &GenerationConfig,
        purpose: GenerationPurpose,
    ) -> std::result::Result<Vec<Vec<u32>>, EnvError> {
        let _ = purpose;
        Ok(learner.generate(prompts, config)?.tokens)
    }
}

pub(crate) fn ext<T>(component: &str, r: std::result::Result<T, EnvError>) -> Result<T> {
    r.map_err(|e| RlError::External {
        component: component.to_string(),
        message: e.to_string(),
    })
}

/// How the task rewards of the two responses become each learner's score.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardMode {
    /// R = r(q, y₁) + r(q, y₂) for both agents (paper Eq. 4, the reference code).
    #[default]
    Sum,
    /// R_self + λ·R_other (camera-ready appendix E.2; λ < 0 is competitive).
    SelfPlusOther {
        /// λ.
        lambda: f32,
    },
}

/// CORY settings on top of the two learners' own (e.g. [`crate::PpoConfig`]). With the `cli`
/// feature, a clap argument group (`--swap-period`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct CoryConfig {
    /// CORY: exchange roles every this many iterations (T_REx = 5); 0 = never (the "no role
    /// exchange" ablation).
    #[cfg_attr(feature = "cli", arg(long))]
    pub swap_period: usize,
    /// CORY: at each exchange, give both learners a freshly built trainer's state (new Adam
    /// moments, β back to its initial value, empty reward statistics, reseeded minibatch RNG),
    /// as the reference code's reload-from-disk does. Off by default: Algorithm 1 swaps only the
    /// parameters, and every piece of state travels with the weights it belongs to.
    #[cfg_attr(feature = "cli", arg(long, action = clap::ArgAction::Set))]
    pub reset_state_on_swap: bool,
    /// How R is formed from the two task rewards.
    #[cfg_attr(feature = "cli", arg(skip))]
    pub reward_mode: RewardMode,
    /// CORY: also measure the observer answering the plain query (pioneer format), so curves
    /// stay comparable across role exchanges: one extra generation and reward call per
    /// iteration.
    #[cfg_attr(feature = "cli", arg(long, action = clap::ArgAction::Set))]
    pub pioneer_format_metrics: bool,
    /// Run the two copies' updates at the same time, on two threads (they are independent once
    /// the shared reward is known; the results equal the sequential order's bit for bit). The
    /// copies must share no autodiff node: build them separately or `Module::fork` them from one
    /// base (burn 0.22's autodiff deadlocks when two threads' graphs meet; a plain clone shares
    /// its parameters' nodes). With a data-parallel collective of more than one rank the updates
    /// run one after the other.
    #[cfg_attr(feature = "cli", arg(long, action = clap::ArgAction::Set))]
    pub concurrent_updates: bool,
    /// With learners that sample G > 1 responses per prompt: each copy trains on this many of
    /// the iteration's prompt groups, chosen on its own scores by
    /// [`crate::group::informative_groups`] (groups whose R differ first), so that prompts
    /// drawn in excess buy informative groups with generation alone; `None` = every group.
    /// An app sets it from its oversampling setting.
    #[cfg_attr(feature = "cli", arg(skip))]
    #[serde(skip)]
    pub train_groups: Option<usize>,
}

impl Default for CoryConfig {
    fn default() -> Self {
        Self {
            swap_period: 5,
            reset_state_on_swap: false,
            reward_mode: RewardMode::Sum,
            pioneer_format_metrics: true,
            concurrent_updates: true,
            train_groups: None,
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

/// Per-LLM metrics of one iteration (the quantities of the paper's IMDB and GSM8K figures).
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
    /// The statistics of its step.
    pub stats: StepStats,
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

/// Two learners scored against one frozen reference (one copy of it per LLM, on that LLM's
/// device, when the two sit on different devices).
pub struct CoryTrainer<M: CausalLm, L: Learner<M>> {
    /// `[pioneer, observer]`.
    slots: [L; 2],
    /// Which LLM (0 = llm1, 1 = llm2) sits in each slot.
    llm_in_slot: [usize; 2],
    /// The reference of each LLM (`[llm1's, llm2's]`): the same weights, each on its LLM's
    /// device; an LLM keeps its device across role exchanges.
    references: [M; 2],
    config: CoryConfig,
    iteration: usize,
}

impl<M: CausalLm, L: Learner<M>> std::fmt::Debug for CoryTrainer<M, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoryTrainer")
            .field("llm_in_slot", &self.llm_in_slot)
            .field("config", &self.config)
            .field("iteration", &self.iteration)
            .finish_non_exhaustive()
    }
}

const LLM_NAMES: [&str; 2] = ["llm1", "llm2"];

pub(crate) fn mean(x: &[f32]) -> f32 {
    if x.is_empty() {
        0.0
    } else {
        (x.iter().map(|&v| f64::from(v)).sum::<f64>() / x.len() as f64) as f32
    }
}

/// The samples one copy trains on, as indices into `scores` (groups of `g` consecutive
/// samples): every one, or with `train_groups` the samples of that many groups, picked by
/// [`informative_samples`].
fn trained_samples(train_groups: Option<usize>, scores: &[f32], g: usize) -> Vec<usize> {
    match train_groups {
        Some(keep) if g > 1 && keep < scores.len() / g => informative_samples(scores, g, keep),
        _ => (0..scores.len()).collect(),
    }
}

/// The items at `indices`, in that order.
fn pick<T: Clone>(items: &[T], indices: &[usize]) -> Vec<T> {
    indices.iter().map(|&i| items[i].clone()).collect()
}

fn decode_all<M: CausalLm, C, E: CoryEnv<M, C>>(env: &E, seqs: &[Vec<u32>]) -> Result<Vec<String>> {
    crate::rollout::decode_all(&|ids: &[u32]| env.decode(ids), seqs)
}

impl<M: CausalLm, L: Learner<M>> CoryTrainer<M, L> {
    /// `llm1` starts as pioneer, `llm2` as observer; both are scored against `reference`.
    /// Both must sample the same number of responses per prompt.
    pub fn new(llm1: L, llm2: L, reference: M, config: CoryConfig) -> Result<Self> {
        Self::with_references(llm1, llm2, [reference.clone(), reference], config)
    }

    /// As [`CoryTrainer::new`] with the two LLMs on different devices: `references` holds the
    /// frozen reference once on llm1's device and once on llm2's (the same weights), so that
    /// each LLM's generation, KL and update run on its own device; the two updates then run
    /// concurrently there with [`CoryConfig::concurrent_updates`]. Only token ids, texts and
    /// rewards pass between the two.
    pub fn with_references(
        llm1: L,
        llm2: L,
        references: [M; 2],
        config: CoryConfig,
    ) -> Result<Self> {
        if llm1.samples_per_prompt() != llm2.samples_per_prompt() {
            return Err(RlError::Config {
                field: "samples_per_prompt".into(),
                reason: format!(
                    "llm1 samples {} responses per prompt, llm2 {}: CORY pairs them one to one",
                    llm1.samples_per_prompt(),
                    llm2.samples_per_prompt()
                ),
            });
        }
        Ok(Self {
            slots: [llm1, llm2],
            llm_in_slot: [0, 1],
            references,
            config,
            iteration: 0,
        })
    }

    /// The learner currently in the pioneer role.
    pub fn pioneer(&self) -> &L {
        &self.slots[0]
    }

    /// The learner currently in the observer role.
    pub fn observer(&self) -> &L {
        &self.slots[1]
    }

    /// The learner holding LLM `i` (0 = llm1, 1 = llm2), wherever it is.
    pub fn llm(&self, i: usize) -> &L {
        let slot = if self.llm_in_slot[0] == i { 0 } else { 1 };
        &self.slots[slot]
    }

    fn llm_mut(&mut self, i: usize) -> &mut L {
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

    /// Writes both learners' training states ([`Learner::save_state`], in `dir/llm1` and
    /// `dir/llm2`) and `cory_state.toml` ([`CoryState`]); no weights.
    pub fn save_state(&self, dir: &Path) -> Result<()> {
        for (i, name) in LLM_NAMES.iter().enumerate() {
            self.llm(i).save_state(&dir.join(name))?;
        }
        write_toml(&dir.join(CORY_STATE_FILE), &self.state())
    }

    /// Restores what [`CoryTrainer::save_state`] wrote into a trainer built with
    /// [`CoryTrainer::new`] from learners that already hold the saved weights of llm1 and llm2:
    /// their optimiser/β/normaliser state, the roles and the iteration counter.
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

    /// Makes both learners ranks of the data-parallel group `collective` (see
    /// [`Learner::set_collective`]), each with its own split of it (llm1's first), so that
    /// their collectives never pair up even if they step concurrently. The trainer then takes
    /// each rank's share of the batch.
    pub fn set_collective(&mut self, collective: &dyn crate::dist::Collective) -> Result<()> {
        if collective.world() > 1 {
            // Two threads' collectives on one rank need an MPI that allows concurrent calls;
            // stepping one after the other needs nothing and computes the same.
            self.config.concurrent_updates = false;
        }
        for i in 0..2 {
            let own = collective.split()?;
            self.llm_mut(i).set_collective(own)?;
        }
        Ok(())
    }

    /// Role of LLM `i` now.
    pub fn role_of(&self, i: usize) -> Role {
        if self.llm_in_slot[0] == i {
            Role::Pioneer
        } else {
            Role::Observer
        }
    }

    /// The frozen reference LLM `i` (0 = llm1, 1 = llm2) is scored against, on its device.
    pub fn reference(&self, i: usize) -> &M {
        &self.references[i.min(1)]
    }

    /// Iterations run so far.
    pub fn iterations(&self) -> usize {
        self.iteration
    }

    /// The settings.
    pub fn config(&self) -> &CoryConfig {
        &self.config
    }

    /// Role exchange: the two learners (weights, value heads, and their optimiser/β/normaliser
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
    pub fn into_learners(self) -> (L, L) {
        let [s0, s1] = self.slots;
        if self.llm_in_slot[0] == 0 {
            (s0, s1)
        } else {
            (s1, s0)
        }
    }

    /// One CORY iteration (Algorithm 1): the pioneer samples y₁ ~ π_pio(·|q); the observer
    /// prompt m = template(q, y₁) is re-encoded; the observer samples y₂ ~ π_obs(·|m);
    /// r₁ = r(q, y₁) and r₂ = r(q, y₂) are scored with each prompt's own context; both learners
    /// take a step on their own context with the combined score R (Eq. 4); the roles are
    /// exchanged every `swap_period` iterations.
    ///
    /// With learners that sample G > 1 responses per prompt, each prompt is answered G times
    /// by the pioneer, the observer answers each of those answers once, and each learner's
    /// groups are the G samples of one prompt; with [`CoryConfig::train_groups`] each learner
    /// then trains on that many of the groups, picked on its own scores.
    ///
    /// `generation` is used as given for the pioneer; the observer's sampler seed is
    /// `generation.seed + 1` and the query-only evaluation's `generation.seed + 2`, so the three
    /// sample streams differ. All three use the same `max_new_tokens` (the reference draws one
    /// `gen_len` for all).
    pub fn iteration<C, E: CoryEnv<M, C>>(
        &mut self,
        prompts: &[Prompt<C>],
        generation: &GenerationConfig,
        env: &mut E,
        reward: &dyn Reward<C>,
    ) -> Result<CoryIterationStats> {
        let g = self.slots[0].samples_per_prompt();
        let expanded = repeat_each(prompts, g);
        let queries: Vec<Vec<u32>> = expanded.iter().map(|p| p.ids.clone()).collect();
        let q_text: Vec<&str> = expanded.iter().map(|p| p.text.as_str()).collect();
        let contexts: Vec<&C> = expanded.iter().map(|p| &p.context).collect();

        // Pioneer.
        let pioneer: &dyn Learner<M> = &self.slots[0];
        let y1 = ext(
            "generate",
            env.generate(pioneer, &queries, generation, GenerationPurpose::Pioneer),
        )?;
        let y1_text = decode_all(env, &y1)?;

        // Observer on the merged prompt.
        let m_text = expanded
            .iter()
            .zip(&y1_text)
            .map(|(p, y)| ext("observer template", env.observer_prompt(p, y)))
            .collect::<Result<Vec<_>>>()?;
        let m_ids = m_text
            .iter()
            .map(|m| ext("encode", env.encode(m)))
            .collect::<Result<Vec<_>>>()?;
        let gen_obs = GenerationConfig {
            seed: generation.seed.wrapping_add(1),
            ..generation.clone()
        };
        let observer: &dyn Learner<M> = &self.slots[1];
        let y2 = ext(
            "generate",
            env.generate(observer, &m_ids, &gen_obs, GenerationPurpose::Observer),
        )?;
        let y2_text = decode_all(env, &y2)?;

        // Task rewards, both with the plain prompt's context.
        let r1 = score_texts(reward, &q_text, &y1_text, &contexts)?;
        let m_refs: Vec<&str> = m_text.iter().map(String::as_str).collect();
        let r2 = score_texts(reward, &m_refs, &y2_text, &contexts)?;

        let obs_query_only = if self.config.pioneer_format_metrics {
            Some(self.observer_on_queries(prompts, generation, env, reward)?)
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

        let keep = |s: &[f32]| trained_samples(self.config.train_groups, s, g);
        let (k1, k2) = (keep(&s1), keep(&s2));
        let (st1, st2) = self.update_both(
            &pick(&queries, &k1),
            &pick(&y1, &k1),
            &pick(&s1, &k1),
            &pick(&m_ids, &k2),
            &pick(&y2, &k2),
            &pick(&s2, &k2),
        )?;

        let pioneer = self.metrics(0, Role::Pioneer, &r1, &s1, st1, None);
        let observer = self.metrics(1, Role::Observer, &r2, &s2, st2, obs_query_only);
        let agents = if self.llm_in_slot[0] == 0 {
            [pioneer, observer]
        } else {
            [observer, pioneer]
        };
        let index = self.iteration;
        self.iteration += 1;
        let swap =
            self.config.swap_period > 0 && self.iteration.is_multiple_of(self.config.swap_period);
        if swap {
            self.swap_roles();
        }
        Ok(CoryIterationStats {
            iteration: index,
            agents,
            swapped_after: swap,
            texts: CoryTexts {
                queries: q_text.iter().map(|q| q.to_string()).collect(),
                pioneer_responses: y1_text,
                observer_prompts: m_text,
                observer_responses: y2_text,
                pioneer_rewards: r1,
                observer_rewards: r2,
            },
        })
    }

    /// Both learners' steps: once R is known they depend on nothing the other changes (each has
    /// its own weights, optimiser, statistics, RNG and collective split; the reference is only
    /// read), so with `concurrent_updates` the observer's runs on a second thread and the
    /// results are those of the sequential order, bit for bit (see that setting for what the
    /// copies must not share).
    #[allow(clippy::too_many_arguments)]
    fn update_both(
        &mut self,
        q1: &[Vec<u32>],
        y1: &[Vec<u32>],
        s1: &[f32],
        q2: &[Vec<u32>],
        y2: &[Vec<u32>],
        s2: &[f32],
    ) -> Result<(StepStats, StepStats)> {
        let [ref1, ref2] = self.llm_in_slot.map(|i| &self.references[i]);
        let [pioneer, observer] = &mut self.slots;
        if !self.config.concurrent_updates {
            let st1 = pioneer.step(q1, y1, s1, ref1)?;
            return Ok((st1, observer.step(q2, y2, s2, ref2)?));
        }
        std::thread::scope(|scope| {
            let second = std::thread::Builder::new()
                .name("cory-observer-step".into())
                .spawn_scoped(scope, || observer.step(q2, y2, s2, ref2))
                .map_err(|e| RlError::External {
                    component: "the observer's update thread".into(),
                    message: format!("cannot start it: {e}"),
                })?;
            let st1 = pioneer.step(q1, y1, s1, ref1);
            let st2 = second.join().map_err(|_| RlError::External {
                component: "the observer's update thread".into(),
                message: "it panicked".into(),
            })?;
            Ok((st1?, st2?))
        })
    }

    /// The observer answering the plain prompts (pioneer format, one sample each), before its
    /// update: mean task reward and mean Σ_t KL_t.
    fn observer_on_queries<C, E: CoryEnv<M, C>>(
        &self,
        prompts: &[Prompt<C>],
        generation: &GenerationConfig,
        env: &mut E,
        reward: &dyn Reward<C>,
    ) -> Result<(f32, f32)> {
        let queries: Vec<Vec<u32>> = prompts.iter().map(|p| p.ids.clone()).collect();
        let texts: Vec<&str> = prompts.iter().map(|p| p.text.as_str()).collect();
        let contexts: Vec<&C> = prompts.iter().map(|p| &p.context).collect();
        let gen_eval = GenerationConfig {
            seed: generation.seed.wrapping_add(2),
            ..generation.clone()
        };
        let observer: &dyn Learner<M> = &self.slots[1];
        let yq = ext(
            "generate",
            env.generate(observer, &queries, &gen_eval, GenerationPurpose::QueryOnly),
        )?;
        let yq_text = decode_all(env, &yq)?;
        let rq = score_texts(reward, &texts, &yq_text, &contexts)?;
        let own_reference = &self.references[self.llm_in_slot[1]];
        let klq = self.slots[1].kl_to_reference(&queries, &yq, own_reference)?;
        Ok((mean(&rq), mean(&klq)))
    }

    /// The metrics of the learner in `slot` after its step: its own task reward (not R), its
    /// KL, r − β·KL, and its plain-query measurement (the pioneer's training role is already
    /// the plain query).
    fn metrics(
        &self,
        slot: usize,
        role: Role,
        task_rewards: &[f32],
        trained_scores: &[f32],
        stats: StepStats,
        query_only: Option<(f32, f32)>,
    ) -> AgentMetrics {
        let (task, kl, beta) = (mean(task_rewards), stats.kl, stats.kl_coef as f32);
        let plain = match role {
            Role::Pioneer => Some((task, kl)),
            Role::Observer => query_only,
        };
        AgentMetrics {
            llm: LLM_NAMES[self.llm_in_slot[slot]],
            role,
            task_reward: task,
            kl,
            combined_reward: task - beta * kl,
            query_only_reward: plain.map(|(r, _)| r),
            query_only_kl: plain.map(|(_, k)| k),
            query_only_combined: plain.map(|(r, k)| r - beta * k),
            trained_score: mean(trained_scores),
            stats,
        }
    }
}

impl CoryTrainer<AutoLm, PpoAgent<AutoLm>> {
    /// Weights and training state of both PPO learners ([`PpoAgent::save`], in `dir/llm1`
    /// and `dir/llm2`) and the trainer's own state: everything to continue exactly.
    pub fn save(&self, dir: &Path) -> Result<()> {
        for (i, name) in LLM_NAMES.iter().enumerate() {
            self.llm(i).save(&dir.join(name))?;
        }
        write_toml(&dir.join(CORY_STATE_FILE), &self.state())
    }

    /// The trainer [`CoryTrainer::save`] wrote to `dir`: both PPO learners on `device`
    /// (autodiff) continuing with `ppo`, scored against `reference`, with the CORY settings
    /// `config`.
    pub fn load(
        dir: &Path,
        ppo: &PpoConfig,
        reference: AutoLm,
        config: CoryConfig,
        device: &burn::tensor::Device,
    ) -> Result<Self> {
        let llm1 = PpoAgent::load(&dir.join(LLM_NAMES[0]), ppo.clone(), device)?;
        let llm2 = PpoAgent::load(&dir.join(LLM_NAMES[1]), ppo.clone(), device)?;
        let mut t = Self::new(llm1, llm2, reference, config)?;
        t.load_roles(dir)?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::trained_samples;

    #[test]
    fn each_copy_trains_on_the_groups_its_own_scores_tell_apart() {
        // Three prompts × G 2. R = r₁ + r₂ differs in groups 1 and 2; with λ-weighted own
        // scores the observer's differ only in group 0.
        let shared = [1.0, 1.0, 0.0, 2.0, 1.0, 0.0];
        let own = [0.5, 1.0, 0.0, 0.0, 1.0, 1.0];
        assert_eq!(trained_samples(Some(1), &shared, 2), vec![2, 3]);
        assert_eq!(trained_samples(Some(2), &shared, 2), vec![2, 3, 4, 5]);
        assert_eq!(trained_samples(Some(1), &own, 2), vec![0, 1]);
        // Too few differ: equal groups fill up in prompt order.
        assert_eq!(trained_samples(Some(2), &own, 2), vec![0, 1, 2, 3]);
        // Off, every group, or one sample per prompt: every sample.
        assert_eq!(
            trained_samples(None, &shared, 2),
            (0..6).collect::<Vec<_>>()
        );
        assert_eq!(
            trained_samples(Some(3), &shared, 2),
            (0..6).collect::<Vec<_>>()
        );
        assert_eq!(
            trained_samples(Some(1), &shared, 1),
            (0..6).collect::<Vec<_>>()
        );
    }
}
