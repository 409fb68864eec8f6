//! LoRA adapters (Hu et al. 2021; PEFT `LoraConfig`) on the projection weights.
//!
//! Built on burn's own reparameterisation (`Module::apply_lora`): each targeted weight
//! `W: [in, out]` becomes `W + (α/r)·A·B` with `A: [in, r]` ~ N(0, σ) and `B: [r, out]` = 0
//! (PEFT's `lora_A`/`lora_B` transposed into burn's `[in, out]` convention). With `B = 0` the
//! model computes exactly the base model. Every base parameter of the LM is frozen; only `A`
//! and `B` require gradients. [`merge_lora`] folds `(α/r)·A·B` into `W`.
use burn::module::{Lora, Module, ModuleVisitor, Param, ParamGroup};
use burn::tensor::Tensor;

use crate::error::{ModelError, Result};

/// Which projections get adapters, with what rank and scale (PEFT `LoraConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    /// Rank `r`.
    pub rank: usize,
    /// `lora_alpha`; the update is scaled by `alpha / rank`.
    pub alpha: f64,
    /// Module names as in PEFT's `target_modules`, e.g. `q_proj`, `v_proj`, `gate_proj`
    /// (Llama) or `c_attn` (GPT-2).
    pub target_modules: Vec<String>,
    /// Standard deviation of `A`'s initialisation; `None` means burn's default `1/r`.
    pub init_std: Option<f64>,
}

impl LoraConfig {
    /// Adapters on Llama's attention projections `q_proj`, `k_proj`, `v_proj`, `o_proj`.
    pub fn attention(rank: usize, alpha: f64) -> Self {
        Self {
            rank,
            alpha,
            target_modules: ["q_proj", "k_proj", "v_proj", "o_proj"]
                .map(String::from)
                .to_vec(),
            init_std: None,
        }
    }

    /// Attention plus MLP (`gate_proj`, `up_proj`, `down_proj`).
    pub fn attention_and_mlp(rank: usize, alpha: f64) -> Self {
        let mut c = Self::attention(rank, alpha);
        c.target_modules
            .extend(["gate_proj", "up_proj", "down_proj"].map(String::from));
        c
    }

    fn param_group(&self) -> Result<ParamGroup> {
        if self.rank == 0 || self.target_modules.is_empty() {
            return Err(ModelError::Input(
                "LoRA needs rank > 0 and target modules".into(),
            ));
        }
        let names: Vec<String> = self
            .target_modules
            .iter()
            .map(|m| regex_escape(m))
            .collect();
        let pattern = format!(r"(^|\.)({})\.weight$", names.join("|"));
        ParamGroup::from_regex(&pattern)
            .map_err(|e| ModelError::Input(format!("LoRA target modules: {e:?}")))
    }
}

/// Attaches adapters to the targeted weights of `model` and freezes all its base parameters.
///
/// Works on any module whose projection weights are named as `target_modules` says (the
/// parameter paths of burn's module tree, e.g. `model.layers.0.self_attn.q_proj.weight`). Fails
/// if no parameter matches.
pub fn apply_lora<M: Module>(model: M, cfg: &LoraConfig) -> Result<M> {
    let mut lora = Lora::new(cfg.rank, cfg.alpha).set_param_group(cfg.param_group()?);
    lora.init_std = cfg.init_std;
    let model = model.apply_lora(lora);
    if lora_parameter_count(&model) == 0 {
        return Err(ModelError::Input(format!(
            "LoRA: no weight matches target modules {:?}",
            cfg.target_modules
        )));
    }
    Ok(model)
}

/// Folds every adapter into its base weight (`W ← W + (α/r)·A·B`) and drops the adapters.
/// The merged weights stay frozen; call `Module::unfreeze` for full fine-tuning.
pub fn merge_lora<M: Module>(model: M) -> M {
    model.materialize()
}

/// Number of adapter parameters (`A` and `B` elements) in `model`.
pub fn lora_parameter_count<M: Module>(model: &M) -> usize {
    let mut count = AdapterCount::default();
    model.visit(&mut count);
    count.total
}

/// Sums the sizes of the parameters inside reparameterizations: burn visits a LoRA-adapted
/// weight as its frozen base, then a `Reparameterization` container holding the factors A and B.
#[derive(Default)]
struct AdapterCount {
    total: usize,
    inside: usize,
}

impl ModuleVisitor for AdapterCount {
    fn enter_module(&mut self, _name: &str, container_type: &str) {
        if container_type == "Reparameterization" {
            self.inside += 1;
        }
    }

    fn exit_module(&mut self, _name: &str, container_type: &str) {
        if container_type == "Reparameterization" {
            self.inside -= 1;
        }
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if self.inside > 0 {
            self.total += param.val().shape().num_elements();
        }
    }
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = r"\.+*?()|[]{}^$#&-~".contains(c);
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect()
}
