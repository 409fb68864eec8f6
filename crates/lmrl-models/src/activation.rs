//! Activation functions of the MLP blocks, named as in Hugging Face `activation_function`.
use burn::tensor::Tensor;
use burn::tensor::activation::{gelu, sigmoid};
use serde::{Deserialize, Serialize};

/// The MLP non-linearity (`activation_function`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Activation {
    /// `gelu_new` / `gelu_pytorch_tanh` / `gelu_fast`: `0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))`.
    GeluTanh,
    /// `gelu`: `x·Φ(x)` with the exact erf.
    GeluErf,
}

impl Activation {
    /// Maps an HF `activation_function` name; `None` if unsupported.
    pub fn from_hf(name: &str) -> Option<Self> {
        match name {
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some(Self::GeluTanh),
            "gelu" => Some(Self::GeluErf),
            _ => None,
        }
    }

    pub(crate) fn apply(self, x: Tensor<3>) -> Tensor<3> {
        match self {
            Self::GeluTanh => gelu_tanh(x),
            Self::GeluErf => gelu(x),
        }
    }
}

/// HF `gelu_new`: `0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))`, computed as the identical
/// `x·σ(2√(2/π)·x·(1 + 0.044715x²))` (since `(1 + tanh u)/2 = σ(2u)`).
///
/// Why not burn's `gelu_approximate`: it composes `powf_scalar(3)` and `tanh`, two
/// single-threaded libm calls per element on flex, and cost ~6× the sigmoid form (74 ms against
/// 13 ms on `[8, 64, 3072]`). On the CPU backend (this crate's `flex` feature) the sigmoid form
/// is one fused multi-threaded pass with a hand-written backward (`crate::fused`), which keeps
/// only its input for the backward instead of the six intermediates of the composite below.
/// Agrees with `gelu_approximate` to < 1e-6 absolute.
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    /// `2·√(2/π)`.
    const C: f64 = 2.0 * 0.797_884_560_802_865_4;
    #[cfg(feature = "flex")]
    if crate::fused::takes(&x) {
        return crate::fused::gelu_tanh(x);
    }
    let u = (x.clone() * x.clone())
        .mul_scalar(C * 0.044_715)
        .add_scalar(C)
        * x.clone();
    x * sigmoid(u)
}

/// Llama's SiLU, `x·σ(x)` (HF `silu`).
///
/// Why not burn's `silu` alone: on flex it is a single-threaded libm pass for the sigmoid and a
/// second pass for the product, and under autodiff it keeps both `x` and `σ(x)` for the
/// backward and runs three more passes there; on SmolLM2-135M that is every MLP's
/// `[tokens, 1536]` gate. On the CPU backend (this crate's `flex` feature) it is one fused
/// multi-threaded pass forward and one backward, keeping only `x`, computed with burn's own
/// sigmoid and operation order: the same bits forward and backward.
pub fn silu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    #[cfg(feature = "flex")]
    if crate::fused::takes(&x) {
        return crate::fused::silu(x);
    }
    burn::tensor::activation::silu(x)
}
