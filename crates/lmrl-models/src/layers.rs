//! Building blocks shared by the architectures: dense projections, and parameters built from
//! host tensors (loading) or at random (initialisation), and copied back (saving).
use burn::module::Param;
use burn::nn::{Embedding, LayerNorm, LayerNormConfig, Linear, RmsNorm, RmsNormConfig};
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};

use crate::tensors::RawTensor;

/// `x·W + b` for `x`: `[B, S, in]` as one 2-D matmul over `B·S` rows.
///
/// burn's `Linear::forward` keeps a `[B, S, in] @ [in, out]` product batched when `S` fills its
/// row tiles, which re-reads the weight once per batch row; folding the batch into the rows is
/// markedly faster for the large projections and the vocabulary head.
pub fn dense(x: Tensor<3>, weight: Tensor<2>, bias: Option<Tensor<1>>) -> Tensor<3> {
    let [b, s, d_in] = x.dims();
    let d_out = weight.dims()[1];
    let y = matmul(x.reshape([b * s, d_in]), weight);
    let y = match bias {
        Some(bias) => y + bias.reshape([1, d_out]),
        None => y,
    };
    y.reshape([b, s, d_out])
}

/// `x·w` for 2-D operands. On the CPU backend (`flex` feature) a product of at most
/// 32 rows without autodiff — each projection of a decoding step, the vocabulary
/// head's included — takes the memory-bound kernels of `crate::fused` (1.5–2× burn's GEMM
/// there); every other product is burn-flex's GEMM call without its output copies, with or
/// without autodiff (`crate::fused`). Elsewhere it is burn's matmul.
pub(crate) fn matmul(x: Tensor<2>, w: Tensor<2>) -> Tensor<2> {
    #[cfg(feature = "flex")]
    if crate::fused::takes(&x) && crate::fused::takes(&w) {
        return crate::fused::matmul(x, w);
    }
    x.matmul(w)
}

/// The rows `ids` `[B, S]` of an embedding table: `[B, S, D]`. On the CPU backend (`flex`
/// feature) its backward builds the table's gradient in one zeroed allocation
/// (`crate::fused`); elsewhere it is burn's `Embedding::forward`.
pub(crate) fn lookup(table: &Embedding, ids: Tensor<2, Int>) -> Tensor<3> {
    #[cfg(feature = "flex")]
    {
        let weight = table.weight.val();
        if crate::fused::takes(&weight) {
            return crate::fused::embedding(weight, ids);
        }
    }
    table.forward(ids)
}

/// [`dense`] through a burn `Linear` (its weight is `[in, out]`); a LoRA-adapted one adds its
/// side path to the frozen product (`crate::lora`).
pub fn apply_linear(l: &Linear, x: Tensor<3>) -> Tensor<3> {
    crate::lora::linear_forward(l, x)
}

/// A trainable parameter holding `raw` reshaped to rank `D`.
pub(crate) fn param<const D: usize>(raw: RawTensor, device: &Device) -> Param<Tensor<D>> {
    Param::from_tensor(Tensor::from_data(
        TensorData::new(raw.data, raw.shape),
        device,
    ))
}

/// `Linear` from a weight already in burn's `[in, out]` layout and an optional bias.
pub(crate) fn linear(weight: RawTensor, bias: Option<RawTensor>, device: &Device) -> Linear {
    Linear {
        weight: param(weight, device),
        bias: bias.map(|b| param(b, device)),
    }
}

/// `Linear` with N(0, 0.02) weights `[d_in, d_out]` and zero bias (HF `_init_weights`).
pub(crate) fn linear_init(d_in: usize, d_out: usize, bias: bool, device: &Device) -> Linear {
    Linear {
        weight: normal_param([d_in, d_out], device),
        bias: bias.then(|| Param::from_tensor(Tensor::zeros([d_out], device))),
    }
}

pub(crate) fn normal_param(shape: [usize; 2], device: &Device) -> Param<Tensor<2>> {
    Param::from_tensor(Tensor::random(
        shape,
        Distribution::Normal(0.0, 0.02),
        device,
    ))
}

pub(crate) fn embedding(weight: RawTensor, device: &Device) -> Embedding {
    Embedding {
        weight: param(weight, device),
    }
}

pub(crate) fn layer_norm(
    gamma: RawTensor,
    beta: RawTensor,
    eps: f64,
    device: &Device,
) -> LayerNorm {
    let mut ln = LayerNormConfig::new(gamma.shape[0])
        .with_epsilon(eps)
        .init(device);
    ln.gamma = param(gamma, device);
    ln.beta = Some(param(beta, device));
    ln
}

pub(crate) fn rms_norm(gamma: RawTensor, eps: f64, device: &Device) -> RmsNorm {
    let mut n = RmsNormConfig::new(gamma.shape[0])
        .with_epsilon(eps)
        .init(device);
    n.gamma = param(gamma, device);
    n
}

/// Copies a parameter back to the host as f32.
pub(crate) fn raw<const D: usize>(t: Tensor<D>) -> RawTensor {
    let shape = t.dims().to_vec();
    let data = t.into_data().convert::<f32>().try_into_vec::<f32>();
    RawTensor::new(
        shape,
        data.expect("data converted to f32 reads back as f32"),
    )
}

/// A `Linear` weight in PyTorch `nn.Linear` layout `[out, in]`.
pub(crate) fn raw_torch_linear(l: &Linear) -> RawTensor {
    raw(l.weight.val().transpose())
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::*;
    use burn::nn::EmbeddingConfig;

    fn bits<const D: usize>(t: Tensor<D>) -> Vec<u32> {
        let v = t.into_data().try_to_vec::<f32>().expect("f32 tensor");
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn lookup_is_burns_embedding_to_the_bit_with_gradients() {
        let device = Device::flex().autodiff();
        let table = EmbeddingConfig::new(50, 24).init(&device);
        // Repeated ids: their rows' gradients are summed in token order by both.
        let ids = [[3i64, 7, 3, 49, 0], [7, 7, 12, 3, 1]];
        let ids = Tensor::<2, Int>::from_data(TensorData::from(ids), &device);
        let up = Tensor::<3>::random([2, 5, 24], Distribution::Normal(0.0, 1.0), &device);
        let run = |ours: bool| {
            let y = match ours {
                true => lookup(&table, ids.clone()),
                false => table.forward(ids.clone()),
            };
            let grads = (y.clone() * up.clone()).sum().backward();
            let grad = table.weight.grad(&grads).expect("the table is trainable");
            (bits(y.inner()), bits(grad))
        };
        let (ours, burns) = (run(true), run(false));
        assert!(ours.0 == burns.0, "rows differ");
        assert!(ours.1 == burns.1, "table gradients differ");
    }
}
