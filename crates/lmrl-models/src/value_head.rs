//! TRL `AutoModelForCausalLMWithValueHead`: a causal LM plus a scalar value per position.
//!
//! TRL's `ValueHead` is `dropout(p = 0.1)` then `summary = nn.Linear(hidden, 1)` on the last
//! hidden state. TRL's `batched_forward_pass` calls `model.eval()`, so even the PPO training
//! forward runs without that dropout; it is therefore not applied here.
use std::path::Path;

use burn::module::Module;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor};

use crate::auto::AutoLm;
use crate::error::{ModelError, Result};
use crate::layers;
use crate::lm::{CausalLm, arange_positions, logits_at_every_position};
use crate::loader::write_safetensors;
use crate::pretrained::Pretrained;
use crate::tensors::TensorMap;

/// File holding the value head inside a saved checkpoint directory.
pub const VALUE_HEAD_FILE: &str = "value_head.safetensors";
const WEIGHT: &str = "v_head.summary.weight";
const BIAS: &str = "v_head.summary.bias";

/// How a fresh value head starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueHeadInit {
    /// PyTorch's `nn.Linear` default, U(±1/√H) — what TRL does (`v_head_init_strategy=None`).
    #[default]
    Default,
    /// Weight and bias zero: every value starts at 0, so the first advantages are the plain
    /// λ-returns instead of being dominated by a random head's per-token noise.
    Zeros,
}

/// burn initialises a parameter lazily, from the device's RNG, when it is first read: the
/// head's weight and bias are drawn here instead (in the order a forward pass reads them, so
/// the values are those a sequential run's first forward would draw), so that two heads whose
/// first forwards run on two threads (CORY's concurrent updates) do not race for the RNG.
fn drawn_now(linear: Linear) -> Linear {
    let _ = linear.weight.val();
    if let Some(b) = &linear.bias {
        let _ = b.val();
    }
    linear
}

/// TRL `ValueHead`: `summary` maps the hidden state `[.., H]` to one value.
#[derive(Module, Debug)]
pub struct ValueHead {
    pub summary: Linear,
}

impl ValueHead {
    /// A fresh head started as `init` says. `Default` is PyTorch's `nn.Linear` init,
    /// U(±1/√H) for weight and bias (burn's Kaiming uniform with gain 1/√3 is the same bound),
    /// as TRL leaves the head.
    pub fn new(hidden: usize, init: ValueHeadInit, device: &Device) -> Self {
        let summary = match init {
            ValueHeadInit::Default => LinearConfig::new(hidden, 1).init(device),
            ValueHeadInit::Zeros => LinearConfig::new(hidden, 1)
                .with_initializer(Initializer::Zeros)
                .init(device),
        };
        Self {
            summary: drawn_now(summary),
        }
    }

    /// Values `[B, S]` from hidden states `[B, S, H]`.
    pub fn forward(&self, hidden: Tensor<3>) -> Tensor<2> {
        self.summary.forward(hidden).squeeze_dim(2)
    }

    /// Reads `v_head.summary.weight` `[1, H]` and `.bias` `[1]` (TRL's names and layout).
    pub fn load(path: &Path, hidden: usize, device: &Device) -> Result<Self> {
        let mut t = TensorMap::from_safetensors(path)?;
        let w = t.take(WEIGHT, &[1, hidden])?;
        let b = t.take(BIAS, &[1])?;
        Ok(Self {
            summary: layers::linear(w.transposed(), Some(b), device),
        })
    }

    /// Writes the head in TRL's names and `nn.Linear` layout, atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut tensors = vec![(WEIGHT.to_string(), layers::raw_torch_linear(&self.summary))];
        if let Some(b) = &self.summary.bias {
            tensors.push((BIAS.to_string(), layers::raw(b.val())));
        }
        write_safetensors(path, &tensors)
    }
}

/// TRL `AutoModelForCausalLMWithValueHead`: policy logits and value estimates from one pass
/// over any [`CausalLm`].
#[derive(Module, Debug)]
pub struct LmWithValueHead<M> {
    pub lm: M,
    pub v_head: ValueHead,
}

impl<M: CausalLm> LmWithValueHead<M> {
    /// Wraps `lm` with a fresh value head started as `init` says.
    pub fn new(lm: M, init: ValueHeadInit, device: &Device) -> Self {
        let hidden = lm.hidden_size();
        Self {
            lm,
            v_head: ValueHead::new(hidden, init, device),
        }
    }

    /// Hidden states `[B, S, H]` and values `[B, S]`, positions `0..S` (TRL
    /// `batched_forward_pass` before the logits are taken where they are needed).
    pub fn hidden_and_values(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
    ) -> (Tensor<3>, Tensor<2>) {
        let positions = arange_positions(&input_ids);
        let hidden = self
            .lm
            .hidden_states(input_ids, positions, attention_mask, None);
        let values = self.v_head.forward(hidden.clone());
        (hidden, values)
    }

    /// Logits `[B, S, V]` and values `[B, S]` at every position, positions `0..S`.
    pub fn forward(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
    ) -> (Tensor<3>, Tensor<2>) {
        let (hidden, values) = self.hidden_and_values(input_ids, attention_mask);
        (logits_at_every_position(&self.lm, hidden), values)
    }
}

impl<M: CausalLm + Pretrained> LmWithValueHead<M> {
    /// Saves the LM (`save_pretrained`) and the head (`value_head.safetensors`) into `dir`.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        self.lm.save_pretrained(dir)?;
        self.v_head.save(&dir.join(VALUE_HEAD_FILE))
    }
}

impl LmWithValueHead<AutoLm> {
    /// Loads an LM and its value head from `dir`; with `require_head == false` a missing
    /// `value_head.safetensors` gives a fresh head started as `init` says (TRL does this for a
    /// plain LM).
    pub fn from_pretrained(
        dir: &Path,
        require_head: bool,
        init: ValueHeadInit,
        device: &Device,
    ) -> Result<Self> {
        let lm = AutoLm::from_pretrained(dir, device)?;
        let hidden = lm.hidden_size();
        let head_path = dir.join(VALUE_HEAD_FILE);
        let v_head = match (head_path.exists(), require_head) {
            (true, _) => ValueHead::load(&head_path, hidden, device)?,
            (false, false) => ValueHead::new(hidden, init, device),
            (false, true) => {
                return Err(ModelError::MissingTensor {
                    path: head_path,
                    tensor: WEIGHT.to_string(),
                });
            }
        };
        Ok(Self { lm, v_head })
    }
}

#[cfg(test)]
mod init_tests {
    use super::*;
    use std::sync::Mutex;

    /// The flex device's RNG is one per process and the test harness runs tests on several
    /// threads: each test that seeds it holds this lock, or another test's draws land between
    /// its seed and its reads.
    static DEVICE_RNG: Mutex<()> = Mutex::new(());

    #[test]
    fn zero_init_gives_zero_values_and_default_does_not() {
        let _rng = DEVICE_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let d = Device::flex();
        d.seed(3);
        let hidden =
            Tensor::<3>::random([2, 5, 16], burn::tensor::Distribution::Normal(0.0, 1.0), &d);
        let zeros = ValueHead::new(16, ValueHeadInit::Zeros, &d).forward(hidden.clone());
        let v: Vec<f32> = zeros.into_data().try_to_vec::<f32>().unwrap();
        assert!(v.iter().all(|&x| x == 0.0), "{v:?}");
        let dflt = ValueHead::new(16, ValueHeadInit::Default, &d).forward(hidden);
        let v: Vec<f32> = dflt.into_data().try_to_vec::<f32>().unwrap();
        assert!(v.iter().any(|&x| x.abs() > 1e-3), "{v:?}");
    }

    /// The head's parameters exist once it is made, and hold what a first forward pass would
    /// have drawn lazily from the same RNG state (so eager drawing changes no result).
    #[test]
    fn a_new_head_is_drawn_at_once_with_the_lazy_values() {
        let _rng = DEVICE_RNG.lock().unwrap_or_else(|e| e.into_inner());
        let d = Device::flex();
        d.seed(5);
        let head = ValueHead::new(16, ValueHeadInit::Default, &d);
        assert!(head.summary.weight.is_initialized());
        assert!(
            head.summary
                .bias
                .as_ref()
                .is_some_and(|b| b.is_initialized())
        );
        d.seed(5);
        let lazy = LinearConfig::new(16, 1).init(&d);
        assert!(!lazy.weight.is_initialized(), "burn's Linear is lazy");
        let read = |t: Tensor<2>| t.into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(read(head.summary.weight.val()), read(lazy.weight.val()));
        let bias = |l: &Linear| {
            l.bias
                .as_ref()
                .unwrap()
                .val()
                .into_data()
                .try_to_vec::<f32>()
        };
        assert_eq!(bias(&head.summary).unwrap(), bias(&lazy).unwrap());
    }
}
