//! Exact save and restore of a PPO learner's training state, so that a run stopped after k
//! steps and resumed continues with bit-identical numbers.
//!
//! What a [`crate::ppo::PpoAgent`] carries besides its weights:
//! - the Adam moments and step counts (burn's [`burn::optim::ModuleOptimizer`] record, written
//!   in burn's own burnpack format: `optimizer.bpk`);
//! - the KL controller (β), the running score moments, the step counter and the number of
//!   steps since the minibatch RNG was last seeded (`trainer_state.toml`).
//!
//! The minibatch permutations are drawn from a generator seeded with
//! `(seed, steps since seeding)` at every step, so no generator state needs saving.
//!
//! burn keys optimizer state by [`ParamId`], and a model rebuilt from a checkpoint gets fresh
//! ids. The state file therefore records, for every parameter, its module path and the id its
//! optimizer state was saved under; loading gives the rebuilt model's parameters those ids back
//! (matched by path), after which burn's own `load_record` applies unchanged.
//!
//! TOML, not JSON, for the scalars: serde_json's default float parser is not exact in the last
//! bit, and an exact β and exact running moments are part of an exact resume.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::{ModuleOptimizer, OptimizerRecord};
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use crate::error::{Result, RlError};
use crate::ppo::kl_controller::KlController;
use crate::ppo::running_moments::RunningMoments;

/// Scalars of an agent's training state, in a checkpoint directory.
pub const AGENT_STATE_FILE: &str = "trainer_state.toml";
/// The Adam state (burnpack), in a checkpoint directory.
pub const OPTIMIZER_FILE: &str = "optimizer.bpk";
/// Layout version of [`AgentState`]; bumped when it changes.
pub const AGENT_STATE_FORMAT: u32 = 1;

/// Everything of a [`crate::ppo::PpoAgent`] except weights and optimizer moments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    /// [`AGENT_STATE_FORMAT`].
    pub format: u32,
    /// PPO steps taken.
    pub steps: usize,
    /// PPO steps since the minibatch RNG was (re)seeded with `seed` (0 after
    /// [`crate::ppo::PpoAgent::reset_state`]).
    pub rng_steps: usize,
    /// KL controller after the last step (β of the next one).
    pub kl_controller: KlController,
    /// Running score statistics after the last step.
    pub running_moments: RunningMoments,
    /// Module path of every float parameter → the [`ParamId`] (16 hex digits) its optimizer
    /// state is keyed by. Hex strings because TOML integers are signed 64-bit.
    pub param_ids: BTreeMap<String, String>,
}

pub(crate) fn state_err(path: &Path, message: impl std::fmt::Display) -> RlError {
    RlError::State {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// Writes `value` as TOML to `path` (through a temporary file, so a crash never leaves half a
/// file under the final name).
pub(crate) fn write_toml<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = toml::to_string_pretty(value).map_err(|e| state_err(path, e))?;
    let tmp = tmp_path(path);
    std::fs::write(&tmp, text).map_err(|e| state_err(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| state_err(path, e))
}

/// Reads TOML from `path`.
pub(crate) fn read_toml<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| state_err(path, e))?;
    toml::from_str(&text).map_err(|e| state_err(path, e))
}

/// Writes the optimizer's record (Adam moments and step counts, burn's burnpack) to
/// `dir/optimizer.bpk` through a temporary file: streamed from the moments' buffers past the
/// page cache where they allow it (`crate::optim_file`), else by burn's own writer.
pub(crate) fn save_optimizer(optimizer: &ModuleOptimizer, dir: &Path) -> Result<()> {
    let opt = dir.join(OPTIMIZER_FILE);
    #[cfg(feature = "flex")]
    if let Some((record, moments)) = crate::optim::record_streamed(optimizer) {
        return crate::optim_file::write_streamed(&opt, record, &moments);
    }
    let tmp = tmp_path(&opt);
    optimizer
        .to_record()
        .save(&tmp)
        .map_err(|e| state_err(&tmp, format!("{e:?}")))?;
    std::fs::rename(&tmp, &opt).map_err(|e| state_err(&opt, e))
}

/// Reads the record [`save_optimizer`] wrote into `dir`.
pub(crate) fn load_optimizer_record(dir: &Path) -> Result<OptimizerRecord> {
    let opt = dir.join(OPTIMIZER_FILE);
    OptimizerRecord::load(&opt).map_err(|e| state_err(&opt, format!("{e:?}")))
}

pub(crate) fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Collects `path → id` of every float parameter.
#[derive(Default)]
struct IdCollector {
    path: Vec<String>,
    ids: BTreeMap<String, ParamId>,
    duplicate: Option<String>,
}

impl ModuleVisitor for IdCollector {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let key = self.path.join(".");
        if let Some(old) = self.ids.insert(key.clone(), param.id)
            && old != param.id
        {
            self.duplicate.get_or_insert(key);
        }
    }
}

/// The module path and id of every float parameter of `module`.
pub fn param_ids<M: Module>(module: &M) -> Result<BTreeMap<String, ParamId>> {
    let mut c = IdCollector::default();
    module.visit(&mut c);
    if let Some(p) = c.duplicate {
        return Err(RlError::State {
            path: PathBuf::new(),
            message: format!("two different parameters share the module path `{p}`"),
        });
    }
    Ok(c.ids)
}

/// [`param_ids`] as the hex strings stored in [`AgentState::param_ids`].
pub fn param_ids_hex<M: Module>(module: &M) -> Result<BTreeMap<String, String>> {
    Ok(param_ids(module)?
        .into_iter()
        .map(|(k, v)| (k, format!("{:016x}", v.val())))
        .collect())
}

/// Gives every float parameter the id stored for its path.
struct IdAssigner<'a> {
    path: Vec<String>,
    ids: &'a BTreeMap<String, ParamId>,
}

impl ModuleMapper for IdAssigner<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        match self.ids.get(&self.path.join(".")) {
            Some(&id) if id != param.id => {
                let (_, tensor, mapper) = param.consume();
                Param::from_mapped_value(id, tensor, mapper)
            }
            _ => param,
        }
    }
}

/// Gives the parameters of `module` the ids in `saved` (path → hex id), after checking that
/// both name exactly the same parameter paths. `file` is named in errors.
pub fn restore_param_ids<M: Module>(
    module: M,
    saved: &BTreeMap<String, String>,
    file: &Path,
) -> Result<M> {
    let current = param_ids(&module)?;
    if let Some(p) = current.keys().find(|p| !saved.contains_key(*p)) {
        return Err(state_err(
            file,
            format!("the model has a parameter `{p}` the saved state does not know"),
        ));
    }
    let mut ids = BTreeMap::new();
    for (p, hex) in saved {
        if !current.contains_key(p) {
            return Err(state_err(
                file,
                format!("the saved state names a parameter `{p}` the model does not have"),
            ));
        }
        let id = u64::from_str_radix(hex, 16)
            .map_err(|e| state_err(file, format!("parameter id `{hex}` of `{p}`: {e}")))?;
        ids.insert(p.clone(), ParamId::from(id));
    }
    // Parameters saved as one (tied) must still be one: two separate tensors under one id
    // would make the optimizer update only one of them.
    let mut by_id: BTreeMap<ParamId, ParamId> = BTreeMap::new();
    for (p, id) in &ids {
        let now = current[p];
        if *by_id.entry(*id).or_insert(now) != now {
            return Err(state_err(
                file,
                format!("`{p}` was tied to another parameter when saved but is not in the model"),
            ));
        }
    }
    Ok(module.map(&mut IdAssigner {
        path: Vec::new(),
        ids: &ids,
    }))
}
