//! LoRA adapters (Hu et al. 2021) as PEFT's `LoraConfig` builds them, computed as a side path.
//!
//! A targeted projection `y = x·W + b` becomes `y = x·W + b + s·dropout(x)·A·B` with `W` frozen,
//! `A: [in, r]`, `B: [r, out]` (PEFT's `lora_A.weight`/`lora_B.weight` transposed into burn's
//! `[in, out]` convention) and `s = α/r` (`α/√r` with rsLoRA). The product with `W` never
//! involves `A·B`: the forward does not form the `[in, out]` update, and since `W` takes no
//! part in autodiff the backward computes only the input's gradient through `W` plus the small
//! products that `A` and `B` need, never the `[in, out]` gradient a full fine-tune computes.
//! The frozen weights also hold no Adam state, and a clone of an adapted model shares them.
//!
//! The adapters ride on burn's reparameterisation mechanism ([`LoraBranch`] is a
//! `Reparameterization`), so they are ordinary parameters for the optimiser, records and
//! `fork`, and `Param::val()` of an adapted weight is still the merged `W + s·A·B` (used by
//! [`merge_lora`] and by code that reads weights directly).
use burn::module::{Module, ModuleVisitor, Param, ParamGroup, Reparameterization, Reparameterizer};
use burn::nn::{Dropout, DropoutConfig, Linear};
use burn::tensor::{Distribution, Tensor};

use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::layers::dense;

/// Which projections get adapters, with what rank and scale (PEFT `LoraConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    /// Rank `r`.
    pub rank: usize,
    /// `lora_alpha`; the update is scaled by `alpha / rank` (`alpha / √rank` with `rslora`).
    pub alpha: f64,
    /// `lora_dropout`: dropout on the adapter's input while training (0 = none, PEFT's default).
    pub dropout: f64,
    /// `use_rslora`: scale by `alpha / √rank` (Kalajdzievski 2023), which keeps the update's
    /// size independent of the rank.
    pub rslora: bool,
    /// Module names as in PEFT's `target_modules`, e.g. `q_proj`, `v_proj`, `gate_proj`
    /// (Llama) or `c_attn` (GPT-2).
    pub target_modules: Vec<String>,
}

impl LoraConfig {
    /// Adapters of rank `rank` and scale `alpha / rank` on `target_modules`, without dropout.
    pub fn new(rank: usize, alpha: f64, target_modules: &[&str]) -> Self {
        Self {
            rank,
            alpha,
            dropout: 0.0,
            rslora: false,
            target_modules: target_modules.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Adapters on Llama's attention projections `q_proj`, `k_proj`, `v_proj`, `o_proj`.
    pub fn attention(rank: usize, alpha: f64) -> Self {
        Self::new(rank, alpha, &["q_proj", "k_proj", "v_proj", "o_proj"])
    }

    /// Attention plus MLP (`gate_proj`, `up_proj`, `down_proj`).
    pub fn attention_and_mlp(rank: usize, alpha: f64) -> Self {
        let mut c = Self::attention(rank, alpha);
        c.target_modules
            .extend(["gate_proj", "up_proj", "down_proj"].map(String::from));
        c
    }

    /// Adapters on every projection of `model`'s architecture: attention and MLP for the
    /// Llama family, `c_attn`, `c_proj`, `c_fc` for GPT-2 (the model's every `Linear`).
    pub fn for_model(model: &ModelConfig, rank: usize, alpha: f64) -> Self {
        match model {
            ModelConfig::Llama(_) => Self::attention_and_mlp(rank, alpha),
            ModelConfig::Gpt2(_) => Self::new(rank, alpha, &["c_attn", "c_proj", "c_fc"]),
        }
    }

    /// `s` of `x·W + s·x·A·B`: PEFT's `scaling`.
    pub fn scale(&self) -> f64 {
        match self.rslora {
            true => self.alpha / (self.rank as f64).sqrt(),
            false => self.alpha / self.rank as f64,
        }
    }

    /// Whether `other` makes the same adapters: the same settings, target modules in any order.
    pub fn same_adapters(&self, other: &LoraConfig) -> bool {
        let sorted = |c: &LoraConfig| {
            let mut t = c.target_modules.clone();
            t.sort();
            t
        };
        (self.rank, self.alpha, self.dropout, self.rslora)
            == (other.rank, other.alpha, other.dropout, other.rslora)
            && sorted(self) == sorted(other)
    }

    fn check(&self) -> Result<()> {
        let bad = |what: &str| Err(ModelError::Input(format!("LoRA: {what}")));
        if self.rank == 0 || self.target_modules.is_empty() {
            return bad("needs rank > 0 and at least one target module");
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return bad(&format!("lora_alpha must be positive, got {}", self.alpha));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(&format!(
                "lora_dropout must be in [0, 1), got {}",
                self.dropout
            ));
        }
        Ok(())
    }

    fn param_group(&self) -> Result<ParamGroup> {
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

/// The trainable side path of one adapted projection: `s·dropout(x)·A·B`.
#[derive(Module, Debug)]
pub struct LoraBranch {
    /// Down-projection `[in, r]` (PEFT's `lora_A.weight`, transposed).
    pub a: Param<Tensor<2>>,
    /// Up-projection `[r, out]` (PEFT's `lora_B.weight`, transposed); zero at initialisation.
    pub b: Param<Tensor<2>>,
    /// The scale `s` ([`LoraConfig::scale`]).
    pub scale: f64,
    /// PEFT's `lora_dropout`, active only when training with autodiff.
    pub dropout: Dropout,
}

impl LoraBranch {
    /// `s·dropout(x)·A·B` for `x`: `[B, S, in]`, in two thin products; the scale multiplies
    /// the `[B·S, r]` product between them, the smallest tensor of the three.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let h = dense(self.dropout.forward(x), self.a.val(), None).mul_scalar(self.scale);
        dense(h, self.b.val(), None)
    }
}

impl Reparameterization for LoraBranch {
    const NAME: &'static str = "lora";

    /// The merged weight `W + s·A·B`: what `Param::val()` and [`merge_lora`] give.
    fn apply<const D: usize>(&self, base: Tensor<D>) -> Tensor<D> {
        let delta = self.a.val().matmul(self.b.val()).mul_scalar(self.scale);
        let shape = base.shape();
        base + delta.reshape(shape)
    }
}

/// `x·W + b` of a `Linear`, through the side path when it carries a [`LoraBranch`].
pub(crate) fn linear_forward(l: &Linear, x: Tensor<3>) -> Tensor<3> {
    let bias = l.bias.as_ref().map(|b| b.val());
    match l.weight.reparameterization::<LoraBranch>() {
        Some(branch) => dense(x.clone(), l.weight.base(), bias) + branch.forward(x),
        None => dense(x, l.weight.val(), bias),
    }
}

/// Freezes every parameter and attaches a [`LoraBranch`] to each targeted 2-D weight, with
/// PEFT's default initialisation: `lora_A` Kaiming-uniform with `a = √5` (uniform in
/// `±1/√in`), `lora_B` zero, so the adapted model starts as the base model.
struct PeftInit<'a> {
    config: &'a LoraConfig,
    group: ParamGroup,
}

impl Reparameterizer for PeftInit<'_> {
    type Reparam = LoraBranch;

    fn reparameterize<const D: usize>(
        &mut self,
        path: &str,
        param: Param<Tensor<D>>,
    ) -> (Param<Tensor<D>>, Option<LoraBranch>) {
        let targeted = D == 2 && self.group.matches(&param.id, Some(path));
        let base = param.set_require_grad(false);
        if !targeted {
            return (base, None);
        }
        let tensor = base.base();
        let device = tensor.device();
        let [d_in, d_out] = [tensor.dims()[0], tensor.dims()[1]];
        let bound = 1.0 / (d_in as f64).sqrt();
        let r = self.config.rank;
        let a = Tensor::<2>::random([d_in, r], Distribution::Uniform(-bound, bound), &device);
        let branch = LoraBranch {
            a: Param::from_tensor(a),
            b: Param::from_tensor(Tensor::zeros([r, d_out], &device)),
            scale: self.config.scale(),
            dropout: DropoutConfig::new(self.config.dropout).init(),
        };
        (base, Some(branch))
    }
}

/// Attaches adapters to the targeted weights of `model` and freezes all its base parameters.
///
/// Works on any module whose projection weights are named as `target_modules` says (the
/// parameter paths of burn's module tree, e.g. `model.layers.0.self_attn.q_proj.weight`). Fails
/// if no parameter matches. Only projections computed through a `Linear` take the side path;
/// others fall back to the merged weight.
pub fn apply_lora<M: Module>(model: M, cfg: &LoraConfig) -> Result<M> {
    cfg.check()?;
    let group = cfg.param_group()?;
    let model = model.apply_reparameterization(PeftInit { config: cfg, group });
    if lora_parameter_count(&model) == 0 {
        return Err(ModelError::Input(format!(
            "LoRA: no weight matches target modules {:?}",
            cfg.target_modules
        )));
    }
    Ok(model)
}

/// Folds every adapter into its base weight (`W ← W + s·A·B`) and drops the adapters.
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

/// Sums the sizes of the parameters inside reparameterizations: burn visits an adapted weight
/// as its frozen base, then a `Reparameterization` container holding the factors A and B.
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
