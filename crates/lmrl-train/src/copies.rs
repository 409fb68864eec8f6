//! What a run trains — one learner (PPO, GRPO or RLOO), or CORY's two over any of them — and
//! how each copy is written to and read back from a checkpoint: per copy a subdirectory
//! (`policy`, or `llm1`/`llm2`) holding its Hugging Face weights (LoRA adapters merged in), its
//! value head (PPO only: the group learners have no critic), the tokenizer, the learner's
//! training state, and for LoRA runs the unmerged adapters; CORY adds `cory_state.toml`; the
//! run adds `state.toml`.
use std::path::Path;

use burn::module::Module;
use burn::tensor::Device;
use lmrl_models::{
    AutoLm, LmTokenizer, LmWithValueHead, LoraConfig, ModelConfig, Pretrained, VALUE_HEAD_FILE,
    ValueHead, apply_lora, merge_lora,
};
use lmrl_rl::{CoryTrainer, GroupAgent, GrpoConfig, Learner, PpoAgent, PpoConfig, RlooConfig};
use lmrl_runs::{AgentState, CheckpointDir, STATE_FORMAT, TrainState};

use crate::error::{Result, TrainError, saving};
use crate::settings::{Algo, LearnerAlgo, RunSettings};

/// Checkpoint subdirectory of a single learner.
pub const POLICY: &str = "policy";

/// LoRA runs only: burn's record of the whole adapted policy with its value head (frozen base,
/// adapter factors A and B), next to the merged Hugging Face weights; exact resume needs the
/// adapters, which the merged weights cannot give back.
pub const LORA_FILE: &str = "lora_model.bpk";

/// Where CORY's llm2 trains when it is not on the run's device (`--llm2-device`): that device
/// and the frozen reference copied onto it. llm2 is still made on the run's device (its value
/// head and LoRA adapters drawn from that device's generator, as in a run on one device) and
/// then moved, so the placement changes no initial weight.
pub struct Llm2Device {
    /// llm2's training device (autodiff).
    pub device: Device,
    /// The frozen reference on that device (without autodiff).
    pub reference: AutoLm,
}

/// `module` on llm2's device if `to` is given (fresh autodiff leaves there), else as it is.
fn moved<T: Module>(module: T, to: Option<&Llm2Device>) -> T {
    match to {
        None => module,
        Some(p) => module.fork(&p.device),
    }
}

/// A learner of this crate's models, chosen at run time.
pub type DynLearner = Box<dyn Learner<AutoLm>>;

/// What is trained.
pub enum Copies {
    /// One learner (PPO, GRPO or RLOO).
    Single(DynLearner),
    /// CORY's pioneer and observer.
    Cory(Box<CoryTrainer<AutoLm, DynLearner>>),
}

/// How the copies of a run are built: the algorithm (and CORY's base learner), every
/// learner's settings, LoRA and the value head's init.
#[derive(Debug, Clone)]
pub struct CopySpec {
    pub algo: Algo,
    /// What each copy learns with (the algorithm itself, or CORY's `cory_learner`).
    pub learner: LearnerAlgo,
    pub ppo: PpoConfig,
    pub grpo: GrpoConfig,
    pub rloo: RlooConfig,
    pub cory: lmrl_rl::CoryConfig,
    pub lora: Option<LoraConfig>,
    pub head: lmrl_models::ValueHeadInit,
}

/// The learners' sections of a run's settings.
#[derive(Debug, Clone, Copy)]
pub struct LearnerSettings<'a> {
    pub ppo: &'a PpoConfig,
    pub grpo: &'a GrpoConfig,
    pub rloo: &'a RlooConfig,
    pub cory: &'a lmrl_rl::CoryConfig,
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
}

impl CopySpec {
    /// The spec of a run's settings; LoRA targets follow the model's architecture.
    pub fn new(run: &RunSettings, learners: LearnerSettings<'_>, model: &ModelConfig) -> Self {
        Self {
            algo: run.algo,
            learner: run.algo.learner(run.cory_learner),
            ppo: learners.ppo.clone(),
            grpo: learners.grpo.clone(),
            rloo: learners.rloo.clone(),
            // CORY's copies pick `prompts_per_step` groups of the oversampled prompts.
            cory: lmrl_rl::CoryConfig {
                train_groups: (run.oversample > 1)
                    .then(|| learners.prompts_per_step(run.algo.learner(run.cory_learner))),
                ..learners.cory.clone()
            },
            lora: (run.lora_rank > 0).then(|| lora_targets(run.lora_rank, run.lora_alpha, model)),
            head: run.value_head_init,
        }
    }

    /// Prompts per iteration ([`LearnerSettings::prompts_per_step`] of the copies' learner).
    pub fn prompts_per_iteration(&self) -> usize {
        let learners = LearnerSettings {
            ppo: &self.ppo,
            grpo: &self.grpo,
            rloo: &self.rloo,
            cory: &self.cory,
        };
        learners.prompts_per_step(self.learner)
    }

    /// Responses sampled per prompt (1 for PPO, G for the group learners).
    pub fn samples_per_prompt(&self) -> usize {
        match self.learner {
            LearnerAlgo::Ppo => 1,
            LearnerAlgo::Grpo => self.grpo.num_generations,
            LearnerAlgo::Rloo => self.rloo.num_generations,
        }
    }

    /// Whether the copies have a value head (PPO).
    pub fn has_value_head(&self) -> bool {
        self.learner == LearnerAlgo::Ppo
    }

    /// The policy a fresh learner starts from: `base`, with LoRA adapters when asked.
    ///
    /// Forked rather than cloned: a clone shares its parameters' autodiff nodes with `base` and
    /// with every other clone, so the graphs of two copies stepping on two threads (CORY's
    /// concurrent updates) would be one graph, which burn 0.22's autodiff deadlocks on (its
    /// global graph lock and a graph's own lock are taken in opposite orders by `register` and
    /// `backward`). A fork has fresh leaves holding the same values.
    fn policy(&self, base: &AutoLm, device: &Device) -> Result<AutoLm> {
        let own = base.clone().fork(device);
        match &self.lora {
            None => Ok(own),
            Some(l) => Ok(apply_lora(own, l)?),
        }
    }

    /// The learner of `policy` (with `head` for PPO; a fresh one drawn on `device` if `None`),
    /// on `device` or, with `to`, moved to llm2's device.
    fn learner(
        &self,
        policy: AutoLm,
        head: Option<ValueHead>,
        device: &Device,
        to: Option<&Llm2Device>,
    ) -> Result<DynLearner> {
        let on = to.map_or(device, |p| &p.device);
        Ok(match self.learner {
            LearnerAlgo::Ppo => {
                let v_head = head.unwrap_or_else(|| {
                    let hidden = lmrl_models::CausalLm::hidden_size(&policy);
                    ValueHead::new(hidden, self.head, device)
                });
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

    /// A fresh learner on `base` (each call gives an independent copy, with its own head for
    /// PPO), made on `device` and then moved to `to`'s device if given.
    fn fresh_learner(
        &self,
        base: &AutoLm,
        device: &Device,
        to: Option<&Llm2Device>,
    ) -> Result<DynLearner> {
        self.learner(self.policy(base, device)?, None, device, to)
    }
}

/// The LoRA adapters of `rank`: every attention and MLP projection (Llama) or every GPT-2
/// projection, scale α / rank.
pub fn lora_targets(rank: usize, alpha: f64, model: &ModelConfig) -> LoraConfig {
    match model {
        ModelConfig::Llama(_) => LoraConfig::attention_and_mlp(rank, alpha),
        ModelConfig::Gpt2(_) => LoraConfig {
            rank,
            alpha,
            target_modules: ["c_attn", "c_proj", "c_fc"].map(String::from).to_vec(),
            init_std: None,
        },
    }
}

impl Copies {
    /// Fresh copies of `base` (CORY's llm1 is made first, then llm2, which then moves to
    /// `llm2_device` if given), scored against `reference`.
    pub fn fresh(
        spec: &CopySpec,
        base: &AutoLm,
        reference: &AutoLm,
        device: &Device,
        llm2_device: Option<&Llm2Device>,
    ) -> Result<Self> {
        Ok(match spec.algo {
            Algo::Ppo | Algo::Grpo | Algo::Rloo => {
                Copies::Single(spec.fresh_learner(base, device, None)?)
            }
            Algo::Cory => {
                let llm1 = spec.fresh_learner(base, device, None)?;
                let llm2 = spec.fresh_learner(base, device, llm2_device)?;
                Copies::Cory(Box::new(cory(spec, llm1, llm2, reference, llm2_device)?))
            }
        })
    }

    /// Every trained copy by name, sorted (`policy`, or `llm1`, `llm2`).
    pub fn named(&self) -> Vec<(&'static str, &DynLearner)> {
        match self {
            Copies::Single(l) => vec![(POLICY, l)],
            Copies::Cory(t) => (0..2)
                .map(|i| (CoryTrainer::<AutoLm, DynLearner>::llm_name(i), t.llm(i)))
                .collect(),
        }
    }

    /// The copies in `state.toml` order: `[policy]`, or `[pioneer, observer]` for CORY.
    fn state_names(&self) -> Vec<String> {
        match self {
            Copies::Single(_) => vec![POLICY.into()],
            Copies::Cory(t) => {
                let p = if t.role_of(0) == lmrl_rl::Role::Pioneer {
                    0
                } else {
                    1
                };
                [p, 1 - p]
                    .map(|i| CoryTrainer::<AutoLm, DynLearner>::llm_name(i).to_string())
                    .to_vec()
            }
        }
    }

    /// Writes checkpoint `done` of the run `(algo, seed)` and keeps the `keep` newest.
    pub fn save(
        &self,
        spec: &CopySpec,
        ckpts: &CheckpointDir,
        (algo, seed): (Algo, u64),
        done: usize,
        keep: usize,
        tokenizer: &LmTokenizer,
    ) -> Result<()> {
        let state = TrainState {
            format: STATE_FORMAT,
            algo,
            seed,
            completed_iterations: done,
            agents: self
                .state_names()
                .into_iter()
                .map(|name| AgentState { name })
                .collect(),
        };
        ckpts.save(done, |dir| {
            for (name, learner) in self.named() {
                let d = dir.join(name);
                save_weights(spec, learner.as_ref(), &d)?;
                tokenizer.save(&d).map_err(saving)?;
            }
            match self {
                Copies::Single(l) => l.save_state(&dir.join(POLICY))?,
                Copies::Cory(t) => t.save_state(dir)?,
            }
            state.write(dir)?;
            Ok(())
        })?;
        Ok(ckpts.prune(keep)?)
    }

    /// Rebuilds the copies of checkpoint `dir` exactly: weights (on `base` for LoRA runs),
    /// value heads, optimiser moments, β, running moments, counters, roles and CORY's
    /// iteration counter.
    pub fn restore(
        spec: &CopySpec,
        dir: &Path,
        base: &AutoLm,
        reference: &AutoLm,
        device: &Device,
        llm2_device: Option<&Llm2Device>,
    ) -> Result<Self> {
        let learner = |name: &str, to: Option<&Llm2Device>| -> Result<DynLearner> {
            let d = dir.join(name);
            let (policy, head) =
                load_weights(spec, base, &d, device).map_err(|source| TrainError::Restore {
                    what: "the weights",
                    path: d.clone(),
                    source,
                })?;
            spec.learner(policy, head, device, to)
        };
        let restore_err = |what, path: &Path| {
            let path = path.to_path_buf();
            move |e: lmrl_rl::RlError| TrainError::Restore {
                what,
                path,
                source: Box::new(e),
            }
        };
        Ok(match spec.algo {
            Algo::Ppo | Algo::Grpo | Algo::Rloo => {
                let mut l = learner(POLICY, None)?;
                let d = dir.join(POLICY);
                l.load_state(&d)
                    .map_err(restore_err("the training state", &d))?;
                Copies::Single(l)
            }
            Algo::Cory => {
                let names = [0, 1].map(CoryTrainer::<AutoLm, DynLearner>::llm_name);
                let llm1 = learner(names[0], None)?;
                let llm2 = learner(names[1], llm2_device)?;
                let mut t = cory(spec, llm1, llm2, reference, llm2_device)?;
                t.load_state(dir)
                    .map_err(restore_err("the CORY state", dir))?;
                Copies::Cory(Box::new(t))
            }
        })
    }
}

/// CORY's trainer of `llm1` and `llm2`, each scored against the reference on its own device.
fn cory(
    spec: &CopySpec,
    llm1: DynLearner,
    llm2: DynLearner,
    reference: &AutoLm,
    llm2_device: Option<&Llm2Device>,
) -> Result<CoryTrainer<AutoLm, DynLearner>> {
    let second = llm2_device.map_or(reference, |p| &p.reference);
    let references = [reference.clone(), second.clone()];
    Ok(CoryTrainer::with_references(
        llm1,
        llm2,
        references,
        spec.cory.clone(),
    )?)
}

/// Writes one copy's weights into `d` as a Hugging Face checkpoint (LoRA adapters merged, so
/// other tools read a plain model) with its value head; LoRA runs add [`LORA_FILE`] with the
/// unmerged adapters for resume.
fn save_weights(
    spec: &CopySpec,
    learner: &dyn Learner<AutoLm>,
    d: &Path,
) -> std::result::Result<(), lmrl_runs::FillError> {
    let policy = learner.policy();
    match &spec.lora {
        None => policy.save_pretrained(d).map_err(saving)?,
        Some(_) => merge_lora(policy.clone())
            .save_pretrained(d)
            .map_err(saving)?,
    }
    if let Some(head) = learner.value_head() {
        head.save(&d.join(VALUE_HEAD_FILE)).map_err(saving)?;
    }
    if spec.lora.is_some() {
        let f = d.join(LORA_FILE);
        policy
            .clone()
            .save_file(&f)
            .map_err(|e| format!("cannot write {}: {e:?}", f.display()))?;
    }
    Ok(())
}

/// The model [`save_weights`] wrote to `d`, on `device`: the HF weights (or for LoRA runs
/// `base` with the saved adapters), and the value head of a PPO copy.
fn load_weights(
    spec: &CopySpec,
    base: &AutoLm,
    d: &Path,
    device: &Device,
) -> std::result::Result<(AutoLm, Option<ValueHead>), lmrl_runs::FillError> {
    let policy = match &spec.lora {
        None => AutoLm::from_pretrained(d, device)?,
        Some(l) => {
            let f = d.join(LORA_FILE);
            apply_lora(base.clone(), l)?
                .try_load_file(&f)
                .map_err(|e| format!("cannot load the LoRA policy {}: {e:?}", f.display()))?
        }
    };
    if !spec.has_value_head() {
        return Ok((policy, None));
    }
    let head_path = d.join(VALUE_HEAD_FILE);
    let v_head = ValueHead::load(
        &head_path,
        lmrl_models::CausalLm::hidden_size(&policy),
        device,
    )?;
    Ok((policy, Some(v_head)))
}
