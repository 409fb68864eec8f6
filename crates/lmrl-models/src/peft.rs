//! LoRA adapters in PEFT's format: a directory with `adapter_config.json` and
//! `adapter_model.safetensors`, which `peft.PeftModel.from_pretrained(base, dir)` loads onto the
//! base model and [`load_peft_adapter`] loads onto an [`AutoLm`](crate::AutoLm) (or any model
//! implementing [`Pretrained`]).
//!
//! Keys follow PEFT's saved names, `base_model.model.<module>.lora_A.weight` (`[r, in]`) and
//! `…lora_B.weight` (`[out, r]`), `<module>` being the Hugging Face name of the projection
//! ([`Pretrained::hf_module_name`]).
use std::collections::HashMap;
use std::path::Path;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{Tensor, TensorData};
use serde_json::{Value, json};

use crate::error::{ModelError, Result};
use crate::layers::raw;
use crate::loader::{write_atomic, write_safetensors};
use crate::lora::{LoraConfig, apply_lora};
use crate::pretrained::Pretrained;
use crate::tensors::{RawTensor, TensorMap};

/// PEFT's adapter configuration file.
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// PEFT's adapter weights file.
pub const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";

/// The prefix PEFT gives every saved key (`PeftModelForCausalLM.base_model.model`).
const KEY_PREFIX: &str = "base_model.model.";

/// Writes `model`'s adapters into `dir` (created if missing) in PEFT's format; `base_model`
/// goes into `base_model_name_or_path` (where PEFT users look for the base; `null` if `None`).
pub fn save_peft_adapter<M: Module + Pretrained>(
    model: &M,
    config: &LoraConfig,
    base_model: Option<&str>,
    dir: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| ModelError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut factors = Factors::default();
    model.visit(&mut factors);
    if factors.found.is_empty() {
        return Err(ModelError::Input(
            "the model has no LoRA adapters to save".into(),
        ));
    }
    let tensors: Vec<(String, RawTensor)> = factors
        .found
        .into_iter()
        .map(|(path, factor, t)| (peft_key(model, &path, factor), raw(t).transposed()))
        .collect();
    write_safetensors(&dir.join(ADAPTER_WEIGHTS_FILE), &tensors)?;
    let text = serde_json::to_string_pretty(&peft_config_json(config, base_model))
        .map_err(|e| ModelError::Input(format!("cannot serialise the adapter config: {e}")))?;
    write_atomic(&dir.join(ADAPTER_CONFIG_FILE), text.as_bytes())
}

/// `base` with the adapters saved in `dir` (PEFT's format): the adapters its
/// `adapter_config.json` describes, their factors read from `adapter_model.safetensors`
/// exactly. Every adapter the config implies must be in the file, with PEFT's shapes.
pub fn load_peft_adapter<M: Module + Pretrained>(base: M, dir: &Path) -> Result<(M, LoraConfig)> {
    let config = read_peft_config(&dir.join(ADAPTER_CONFIG_FILE))?;
    let model = apply_lora(base, &config)?;
    let path = dir.join(ADAPTER_WEIGHTS_FILE);
    let mut fill = Fill {
        names: HashMap::new(),
        file: TensorMap::from_safetensors(&path)?,
        path: Vec::new(),
        error: None,
    };
    // The HF names need the model, which the mapper consumes: collect them first.
    let mut factors = Factors::default();
    model.visit(&mut factors);
    for (p, factor, _) in &factors.found {
        fill.names
            .insert(format!("{p}.{factor}"), peft_key(&model, p, *factor));
    }
    let model = model.map(&mut fill);
    match fill.error {
        Some(e) => Err(e),
        None => Ok((model, config)),
    }
}

/// The adapter settings of a PEFT `adapter_config.json`: `r`, `lora_alpha`, `target_modules`,
/// `lora_dropout`, `use_rslora`. Settings this implementation does not have (DoRA, biases in
/// the adapters, per-module ranks) are refused by name rather than ignored.
pub fn read_peft_config(path: &Path) -> Result<LoraConfig> {
    let bad = |field: &str, reason: String| ModelError::Config {
        path: path.to_path_buf(),
        field: field.to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| bad("(file)", format!("not JSON: {e}")))?;
    let num = |field: &str| v.get(field).and_then(Value::as_f64);
    let peft_type = v.get("peft_type").and_then(Value::as_str);
    if peft_type != Some("LORA") {
        return Err(bad(
            "peft_type",
            format!("expected \"LORA\", found {peft_type:?}"),
        ));
    }
    let rank = v.get("r").and_then(Value::as_u64).filter(|&r| r > 0);
    let rank = rank.ok_or_else(|| bad("r", "expected a positive integer".into()))? as usize;
    let alpha = num("lora_alpha").ok_or_else(|| bad("lora_alpha", "expected a number".into()))?;
    let target_modules = match v.get("target_modules") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|m| m.as_str().map(String::from))
            .collect::<Option<Vec<_>>>(),
        _ => None,
    }
    .ok_or_else(|| bad("target_modules", "expected a list of module names".into()))?;
    for (field, plain) in [
        ("use_dora", json!(false)),
        ("bias", json!("none")),
        ("rank_pattern", json!({})),
        ("alpha_pattern", json!({})),
    ] {
        let given = v.get(field).filter(|g| !g.is_null());
        if given.is_some_and(|g| *g != plain) {
            return Err(bad(field, format!("only {plain} is supported")));
        }
    }
    Ok(LoraConfig {
        rank,
        alpha,
        dropout: num("lora_dropout").unwrap_or(0.0),
        rslora: v
            .get("use_rslora")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        target_modules,
    })
}

/// The `adapter_config.json` PEFT writes for `config` on a causal LM.
fn peft_config_json(config: &LoraConfig, base_model: Option<&str>) -> Value {
    json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": config.rank,
        "lora_alpha": config.alpha,
        "lora_dropout": config.dropout,
        "use_rslora": config.rslora,
        "target_modules": config.target_modules,
        "bias": "none",
        "fan_in_fan_out": false,
        "init_lora_weights": true,
        "inference_mode": true,
        "modules_to_save": null,
        "use_dora": false,
    })
}

/// Which factor of an adapter a tensor is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Factor {
    A,
    B,
}

impl std::fmt::Display for Factor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Factor::A => "a",
            Factor::B => "b",
        })
    }
}

/// PEFT's key of `factor` of the adapter on the weight at burn's `weight_path`.
fn peft_key<M: Pretrained>(model: &M, weight_path: &str, factor: Factor) -> String {
    let module = weight_path.strip_suffix(".weight").unwrap_or(weight_path);
    let name = match factor {
        Factor::A => "lora_A",
        Factor::B => "lora_B",
    };
    format!("{KEY_PREFIX}{}.{name}.weight", model.hf_module_name(module))
}

/// Where a burn parameter path names an adapter factor (`….weight.lora.a`), that weight's path
/// and the factor.
fn factor_of(path: &[String]) -> Option<(String, Factor)> {
    let [.., weight, lora, f] = path else {
        return None;
    };
    let factor = match f.as_str() {
        "a" => Factor::A,
        "b" => Factor::B,
        _ => return None,
    };
    (weight == "weight" && lora == "lora").then(|| {
        let weight_path = path[..path.len() - 2].join(".");
        (weight_path, factor)
    })
}

/// Every adapter factor of a model with the path of the weight it adapts.
#[derive(Default)]
struct Factors {
    path: Vec<String>,
    found: Vec<(String, Factor, Tensor<2>)>,
}

impl ModuleVisitor for Factors {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let (2, Some((weight, factor))) = (D, factor_of(&self.path)) {
            let t = param.val();
            let dims = t.dims();
            self.found
                .push((weight, factor, t.reshape([dims[0], dims[1]])));
        }
    }
}

/// Replaces every adapter factor with the file's tensor of the same PEFT name.
struct Fill {
    /// `weight_path.factor` → PEFT key.
    names: HashMap<String, String>,
    file: TensorMap,
    path: Vec<String>,
    error: Option<ModelError>,
}

impl ModuleMapper for Fill {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some((weight, factor)) = factor_of(&self.path).filter(|_| D == 2) else {
            return param;
        };
        let key = &self.names[&format!("{weight}.{factor}")];
        let shape = param.val().dims().to_vec();
        // The file holds PEFT's `[r, in]` / `[out, r]`, the transpose of burn's.
        let expected = [shape[1], shape[0]];
        match self.file.take(key, &expected) {
            Ok(t) => {
                let t = t.transposed();
                param.map(|old| {
                    let device = old.device();
                    let grad = old.is_require_grad();
                    Tensor::from_data(TensorData::new(t.data, t.shape), &device)
                        .set_require_grad(grad)
                })
            }
            Err(e) => {
                self.error.get_or_insert(e);
                param
            }
        }
    }
}
