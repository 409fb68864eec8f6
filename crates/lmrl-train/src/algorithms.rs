//! Every algorithm the loop trains, in one place: its name, its `config.toml` section and
//! flags, what one step consumes, how its settings are checked and how a learner of it is
//! built. Adding a learner is its implementation in `lmrl-rl` (a `Learner` and a config
//! struct that is a clap group) plus an entry in each `match` of this file.
use burn::module::Module;
use burn::tensor::Device;
use lmrl_models::{LmWithValueHead, ValueHead, ValueHeadInit};
use lmrl_rl::{CoryConfig, GroupAgent, GrpoConfig, PpoAgent, PpoConfig, RlooConfig};
use serde::{Deserialize, Serialize};

use crate::error::{Result, in_section};
use crate::model::TrainModel;
use crate::sections::{Section, section, section_prefixed};

/// What a run trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Algo {
    /// PPO as TRL runs it: one policy with a value head.
    Ppo,
    /// CORY: a pioneer and an observer copy trained on a shared reward, exchanging roles; each
    /// copy learns with `[run] cory_learner` (PPO, GRPO or RLOO).
    #[default]
    Cory,
    /// GRPO (DeepSeekMath; TRL's `GRPOTrainer`): one policy, G samples per prompt,
    /// group-normalised advantages, no critic.
    Grpo,
    /// RLOO (TRL's `RLOOTrainer`): one policy, k samples per prompt, leave-one-out baseline, no
    /// critic.
    Rloo,
}

impl Algo {
    /// The name in flags, file names and `config.toml`.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ppo => "ppo",
            Algo::Cory => "cory",
            Algo::Grpo => "grpo",
            Algo::Rloo => "rloo",
        }
    }

    /// The algorithm each trained copy learns with: itself, or for CORY `cory_learner`.
    pub fn learner(self, cory_learner: LearnerAlgo) -> LearnerAlgo {
        match self {
            Algo::Ppo => LearnerAlgo::Ppo,
            Algo::Grpo => LearnerAlgo::Grpo,
            Algo::Rloo => LearnerAlgo::Rloo,
            Algo::Cory => cory_learner,
        }
    }
}

/// The base algorithm of one trained copy (`[run] cory_learner` for CORY's two copies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LearnerAlgo {
    /// PPO with a value head (`[ppo]`).
    #[default]
    Ppo,
    /// GRPO (`[grpo]`).
    Grpo,
    /// RLOO (`[rloo]`).
    Rloo,
}

impl LearnerAlgo {
    /// `ppo`, `grpo` or `rloo`.
    pub fn name(self) -> &'static str {
        match self {
            LearnerAlgo::Ppo => "ppo",
            LearnerAlgo::Grpo => "grpo",
            LearnerAlgo::Rloo => "rloo",
        }
    }
}

impl LearnerAlgo {
    /// Every learner, in `config.toml` order.
    pub const ALL: [LearnerAlgo; 3] = [LearnerAlgo::Ppo, LearnerAlgo::Grpo, LearnerAlgo::Rloo];

    /// The prefix of its flags: none for PPO (`--learning-rate`); the group learners share
    /// field names, so theirs carry the section (`--grpo-beta`).
    pub fn flag_prefix(self) -> &'static str {
        match self {
            LearnerAlgo::Ppo => "",
            LearnerAlgo::Grpo => "grpo_",
            LearnerAlgo::Rloo => "rloo_",
        }
    }

    /// Whether its copies have a value head (a critic) to save and restore.
    pub fn has_value_head(self) -> bool {
        self == LearnerAlgo::Ppo
    }

    /// Its `config.toml` section and flags.
    fn section(self) -> Section {
        match self {
            LearnerAlgo::Ppo => section::<PpoConfig>(self.name()),
            LearnerAlgo::Grpo => section_prefixed::<GrpoConfig>(self.name(), self.flag_prefix()),
            LearnerAlgo::Rloo => section_prefixed::<RlooConfig>(self.name(), self.flag_prefix()),
        }
    }
}

/// The learners' sections, then `[cory]`: what every training app reads besides `[run]` and its
/// task's own section.
pub fn learner_sections() -> Vec<Section> {
    let mut s: Vec<Section> = LearnerAlgo::ALL.iter().map(|l| l.section()).collect();
    s.push(section::<CoryConfig>("cory"));
    s
}

/// A learner of the model `M`, chosen at run time.
pub type DynLearner<M> = Box<dyn lmrl_rl::Learner<M>>;

/// The learners' sections of a run's settings.
#[derive(Debug, Clone, Copy)]
pub struct LearnerSettings<'a> {
    pub ppo: &'a PpoConfig,
    pub grpo: &'a GrpoConfig,
    pub rloo: &'a RlooConfig,
    pub cory: &'a CoryConfig,
}

impl LearnerSettings<'_> {
    /// Prompts one step of `learner` takes: PPO's `batch_size` (one response each), or the
    /// group learner's `prompts_per_step` (each answered `num_generations` times).
    pub fn prompts_per_step(&self, learner: LearnerAlgo) -> usize {
        match learner {
            LearnerAlgo::Ppo => self.ppo.batch_size,
            LearnerAlgo::Grpo => self.grpo.prompts_per_step,
            LearnerAlgo::Rloo => self.rloo.prompts_per_step,
        }
    }

    /// Responses sampled per prompt (1 for PPO, G for the group learners).
    pub fn samples_per_prompt(&self, learner: LearnerAlgo) -> usize {
        match learner {
            LearnerAlgo::Ppo => 1,
            LearnerAlgo::Grpo => self.grpo.num_generations,
            LearnerAlgo::Rloo => self.rloo.num_generations,
        }
    }

    /// Checks the section of `learner` alone (a run does not read the others); errors name
    /// the key.
    pub(crate) fn validate(&self, learner: LearnerAlgo) -> Result<()> {
        let checked = match learner {
            LearnerAlgo::Ppo => self.ppo.validate(),
            LearnerAlgo::Grpo => self.grpo.validate(),
            LearnerAlgo::Rloo => self.rloo.validate(),
        };
        checked.map_err(|e| in_section(learner.name(), e))
    }

    /// A learner of `learner` on `policy`, on `device`. PPO's value head is `head`, or a fresh
    /// one of `head_init` drawn on `device` (before any move, so a placement changes no initial
    /// weight).
    pub(crate) fn build<M: TrainModel>(
        &self,
        learner: LearnerAlgo,
        policy: M,
        head: (Option<ValueHead>, ValueHeadInit),
        device: &Device,
        to: Option<&Device>,
    ) -> Result<DynLearner<M>> {
        let on = to.unwrap_or(device);
        Ok(match learner {
            LearnerAlgo::Ppo => {
                let v_head = head
                    .0
                    .unwrap_or_else(|| ValueHead::new(policy.hidden_size(), head.1, device));
                let model = moved(LmWithValueHead { lm: policy, v_head }, to);
                Box::new(PpoAgent::new(model, self.ppo.clone(), on)?)
            }
            LearnerAlgo::Grpo => {
                Box::new(GroupAgent::grpo(moved(policy, to), self.grpo.clone(), on)?)
            }
            LearnerAlgo::Rloo => {
                Box::new(GroupAgent::rloo(moved(policy, to), self.rloo.clone(), on)?)
            }
        })
    }
}

/// The task's sampler, as the learners must know it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerSettings {
    /// The run's seed (`[run] seed`).
    pub seed: u64,
    /// The sampling temperature of the task's generation (1 for pure sampling).
    pub temperature: f64,
    /// The longest response the task's generation asks for.
    pub max_new_tokens: usize,
}

/// What the learners' sections take from the run and the task's sampler, for an app's
/// `Config::finish`: every learner's seed is the run's; the group learners' temperature (their
/// log-probabilities are those of the tempered logits, as TRL's) and longest completion are the
/// sampler's, so that the two cannot disagree.
pub fn follow_sampler(
    sampler: SamplerSettings,
    ppo: &mut PpoConfig,
    grpo: &mut GrpoConfig,
    rloo: &mut RlooConfig,
) {
    ppo.seed = sampler.seed;
    grpo.seed = sampler.seed;
    rloo.seed = sampler.seed;
    grpo.temperature = sampler.temperature;
    rloo.temperature = sampler.temperature;
    grpo.max_completion_length = sampler.max_new_tokens;
    rloo.max_completion_length = sampler.max_new_tokens;
}

/// `module` on `to` if given (fresh autodiff leaves there), else as it is.
fn moved<T: Module>(module: T, to: Option<&Device>) -> T {
    match to {
        None => module,
        Some(d) => module.fork(d),
    }
}
