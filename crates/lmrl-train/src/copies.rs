//! What a run trains — one learner (PPO, GRPO or RLOO), or CORY's two over any of them — and
//! how each copy is written to and read back from a checkpoint: per copy a subdirectory
//! (`policy`, or `llm1`/`llm2`) holding its Hugging Face weights (LoRA adapters merged in), its
//! value head (PPO only: the group learners have no critic), the tokenizer, the learner's
//! training state, and for LoRA runs the unmerged adapters; CORY adds `cory_state.toml`; the
//! run adds `state.toml`.
use std::path::Path;

use burn::tensor::Device;
use lmrl_models::{LmTokenizer, LoraConfig, VALUE_HEAD_FILE, ValueHead, apply_lora, merge_lora};
use lmrl_rl::{CoryTrainer, GrpoConfig, Learner, PpoConfig, RlooConfig};
use lmrl_runs::{AgentState, CheckpointDir, STATE_FORMAT, TrainState};

use crate::algorithms::{Algo, DynLearner, LearnerAlgo, LearnerSettings};
use crate::error::{Result, TrainError, saving, setting};
use crate::model::TrainModel;
use crate::settings::RunSettings;

/// Checkpoint subdirectory of a single learner.
pub const POLICY: &str = "policy";

/// Where CORY's llm2 trains when it is not on the run's device (`--llm2-device`): that device
/// and the frozen reference copied onto it. llm2 is still made on the run's device (its value
/// head and LoRA adapters drawn from that device's generator, as in a run on one device) and
/// then moved, so the placement changes no initial weight.
pub struct Llm2Device<M> {
    /// llm2's training device (autodiff).
    pub device: Device,
    /// The frozen reference on that device (without autodiff).
    pub reference: M,
}

/// What is trained.
pub enum Copies<M: TrainModel> {
    /// One learner (PPO, GRPO or RLOO).
    Single(DynLearner<M>),
    /// CORY's pioneer and observer.
    Cory(Box<CoryTrainer<M, DynLearner<M>>>),
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

impl CopySpec {
    /// The spec of a run's settings; LoRA targets follow the model's architecture
    /// ([`TrainModel::lora_targets`]; a LoRA run of a model that names none is refused).
    pub fn new<M: TrainModel>(
        run: &RunSettings,
        learners: LearnerSettings<'_>,
        model: &M,
    ) -> Result<Self> {
        let lora = match run.lora_rank {
            0 => None,
            rank => Some(LoraConfig {
                dropout: run.lora_dropout,
                rslora: run.lora_rslora,
                ..model.lora_targets(rank, run.lora_alpha).ok_or_else(|| {
                    setting(
                        "run.lora_rank",
                        "this model names no LoRA targets (TrainModel::lora_targets); use 0",
                    )
                })?
            }),
        };
        Ok(Self {
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
            lora,
            head: run.value_head_init,
        })
    }

    fn learners(&self) -> LearnerSettings<'_> {
        LearnerSettings {
            ppo: &self.ppo,
            grpo: &self.grpo,
            rloo: &self.rloo,
            cory: &self.cory,
        }
    }

    /// Prompts per iteration ([`LearnerSettings::prompts_per_step`] of the copies' learner).
    pub fn prompts_per_iteration(&self) -> usize {
        self.learners().prompts_per_step(self.learner)
    }

    /// Responses sampled per prompt (1 for PPO, G for the group learners).
    pub fn samples_per_prompt(&self) -> usize {
        self.learners().samples_per_prompt(self.learner)
    }

    /// The policy a fresh learner starts from: `base`, with LoRA adapters when asked.
    ///
    /// Forked rather than cloned: a clone shares its parameters' autodiff nodes with `base` and
    /// with every other clone, so the graphs of two copies stepping on two threads (CORY's
    /// concurrent updates) would be one graph, which burn 0.22's autodiff deadlocks on (its
    /// global graph lock and a graph's own lock are taken in opposite orders by `register` and
    /// `backward`). A fork has fresh leaves holding the same values.
    fn policy<M: TrainModel>(&self, base: &M, device: &Device) -> Result<M> {
        let own = base.clone().fork(device);
        match &self.lora {
            None => Ok(own),
            Some(l) => Ok(apply_lora(own, l)?),
        }
    }

    /// The learner of `policy` (with `head` for PPO; a fresh one drawn on `device` if `None`),
    /// on `device` or, with `to`, moved to llm2's device.
    fn learner<M: TrainModel>(
        &self,
        policy: M,
        head: Option<ValueHead>,
        device: &Device,
        to: Option<&Llm2Device<M>>,
    ) -> Result<DynLearner<M>> {
        self.learners().build(
            self.learner,
            policy,
            (head, self.head),
            device,
            to.map(|p| &p.device),
        )
    }

    /// A fresh learner on `base` (each call gives an independent copy, with its own head for
    /// PPO), made on `device` and then moved to `to`'s device if given.
    fn fresh_learner<M: TrainModel>(
        &self,
        base: &M,
        device: &Device,
        to: Option<&Llm2Device<M>>,
    ) -> Result<DynLearner<M>> {
        self.learner(self.policy(base, device)?, None, device, to)
    }
}

impl<M: TrainModel> Copies<M> {
    /// Fresh copies of `base` (CORY's llm1 is made first, then llm2, which then moves to
    /// `llm2_device` if given), scored against `reference`.
    pub fn fresh(
        spec: &CopySpec,
        base: &M,
        reference: &M,
        device: &Device,
        llm2_device: Option<&Llm2Device<M>>,
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
    pub fn named(&self) -> Vec<(&'static str, &DynLearner<M>)> {
        match self {
            Copies::Single(l) => vec![(POLICY, l)],
            Copies::Cory(t) => (0..2)
                .map(|i| (CoryTrainer::<M, DynLearner<M>>::llm_name(i), t.llm(i)))
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
                    .map(|i| CoryTrainer::<M, DynLearner<M>>::llm_name(i).to_string())
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
        base: &M,
        reference: &M,
        device: &Device,
        llm2_device: Option<&Llm2Device<M>>,
    ) -> Result<Self> {
        let learner = |name: &str, to: Option<&Llm2Device<M>>| -> Result<DynLearner<M>> {
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
                let names = [0, 1].map(CoryTrainer::<M, DynLearner<M>>::llm_name);
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
fn cory<M: TrainModel>(
    spec: &CopySpec,
    llm1: DynLearner<M>,
    llm2: DynLearner<M>,
    reference: &M,
    llm2_device: Option<&Llm2Device<M>>,
) -> Result<CoryTrainer<M, DynLearner<M>>> {
    let second = llm2_device.map_or(reference, |p| &p.reference);
    let references = [reference.clone(), second.clone()];
    Ok(CoryTrainer::with_references(
        llm1,
        llm2,
        references,
        spec.cory.clone(),
    )?)
}

/// Writes one copy's weights into `d` ([`TrainModel::save_weights`]: a Hugging Face checkpoint
/// for `AutoLm`, LoRA adapters merged so other tools read a plain model) with its value head;
/// LoRA runs add the unmerged adapters for resume ([`TrainModel::save_adapters`]).
fn save_weights<M: TrainModel>(
    spec: &CopySpec,
    learner: &dyn Learner<M>,
    d: &Path,
) -> std::result::Result<(), lmrl_runs::FillError> {
    std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    let policy = learner.policy();
    match &spec.lora {
        None => policy.save_weights(d)?,
        Some(lora) => {
            merge_lora(policy.clone()).save_weights(d)?;
            policy.save_adapters(lora, d)?;
        }
    }
    if let Some(head) = learner.value_head() {
        head.save(&d.join(VALUE_HEAD_FILE)).map_err(saving)?;
    }
    Ok(())
}

/// The model [`save_weights`] wrote to `d`, on `device`: the saved weights (or for LoRA runs
/// `base` with the saved adapters), and the value head of a PPO copy.
fn load_weights<M: TrainModel>(
    spec: &CopySpec,
    base: &M,
    d: &Path,
    device: &Device,
) -> std::result::Result<(M, Option<ValueHead>), lmrl_runs::FillError> {
    let policy = match &spec.lora {
        None => M::load_weights(base, d, device)?,
        Some(lora) => M::load_adapters(&base.clone().fork(device), lora, d)?,
    };
    if !spec.learner.has_value_head() {
        return Ok((policy, None));
    }
    let head_path = d.join(VALUE_HEAD_FILE);
    let v_head = ValueHead::load(&head_path, policy.hidden_size(), device)?;
    Ok((policy, Some(v_head)))
}
