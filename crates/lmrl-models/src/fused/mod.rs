//! Fused CPU kernels with hand-written backward passes, as a burn backend extension of the
//! `flex` backend (this crate's `flex` feature).
//!
//! burn composes log-softmax, softmax and the tanh GELU from 5–7 element-wise ops each; on
//! `flex` every one is a separate pass over the tensor on one thread, and under autodiff every
//! one records its own backward and keeps its own copy of the tensor. Here each is one
//! multi-threaded pass forward and one backward, keeping one tensor for the backward (the
//! output of the softmaxes, the input of the GELU). The public functions that use them
//! ([`crate::log_softmax`], [`crate::gelu_tanh`], the attention softmax) fall back to burn's
//! composite for any tensor this module does not take (another backend, another dtype); the
//! two compute the same function up to float rounding (`kernels::exp` is a polynomial with a
//! relative error under 2e-7, and sums are taken in another order).
//!
//! Three more ops compute exactly burn's values and gradients, with backward passes that skip
//! burn-flex's costs: the matrix product (its output allocated once, a large product cut into
//! one band of the output per thread, a transposed weight's gradient built in the weight's own
//! layout), the embedding lookup and the per-row gather (their sparse gradients written into one
//! zeroed allocation instead of a zeroed tensor copied into an aligned one and scattered into).
mod kernels;
mod matmul;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, binary, unary};
use burn::backend::ops::FloatTensorOps;
use burn::backend::ops::ModuleOps;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Autodiff, Backend, Dispatch, DispatchTensorKind, Flex, backend_extension};
use burn::tensor::{DType, Int, Shape, Tensor, TensorData};
use burn_flex::FlexTensor;
use rayon::prelude::*;

/// The fused ops. `Flex` runs them; `Autodiff<Flex>` adds the hand-written backward of the
/// differentiable ones (the row statistics carry no gradient).
#[backend_extension(Flex: cfg(feature = "flex"), Autodiff)]
pub trait FusedOps: Backend {
    /// Log-softmax over the last dimension.
    fn fused_log_softmax(x: FloatTensor<Self>) -> FloatTensor<Self>;
    /// Softmax over the last dimension.
    fn fused_softmax(x: FloatTensor<Self>) -> FloatTensor<Self>;
    /// GPT-2's tanh GELU, element-wise.
    fn fused_gelu_tanh(x: FloatTensor<Self>) -> FloatTensor<Self>;
    /// Llama's SiLU `x·σ(x)`, element-wise.
    fn fused_silu(x: FloatTensor<Self>) -> FloatTensor<Self>;
    /// `Σ exp(a)·(a − b)` per row of two `[N, V]` tensors, `[N]`.
    fn fused_kl_rows(a: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self>;
    /// `−Σ exp(a)·a` per row of an `[N, V]` tensor, `[N]`.
    fn fused_entropy_rows(a: FloatTensor<Self>) -> FloatTensor<Self>;
    /// `x·W` for `[m, k]·[k, n]`: the few-row kernels of `matmul` where they apply (a
    /// decoding step without autodiff), burn's matmul otherwise.
    fn fused_matmul(x: FloatTensor<Self>, w: FloatTensor<Self>) -> FloatTensor<Self>;
    /// Rows `indices` `[B, S]` of `weight` `[V, D]`: `[B, S, D]`.
    fn fused_embedding(weight: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self>;
    /// Entry `indices[r]` of each row `r` of an `[N, V]` tensor: `[N, 1]`.
    fn fused_gather_columns(x: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self>;
}

/// Whether the x86 SIMD code (the AVX2 + FMA builds of the row kernels, the few-row matrix
/// kernels) may run. `LMRL_PORTABLE_KERNELS=1` in the environment turns it off for the process,
/// so that the portable code every other CPU runs is what gets executed and tested on this one.
pub fn simd_allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| {
        std::env::var("LMRL_PORTABLE_KERNELS").map_or(true, |v| v.is_empty() || v == "0")
    })
}

/// Elements handed to one rayon task: enough to amortise waking a worker, few enough that two
/// cores share a layer's activations evenly.
const TASK_ELEMENTS: usize = 1 << 15;

/// Whether this module takes `x`: f32, on the CPU backend with or without autodiff,
/// non-empty. The ops below expect tensors it takes.
pub(crate) fn takes<const D: usize>(x: &Tensor<D>) -> bool {
    #[allow(unreachable_patterns)] // with only `flex` compiled in, nothing else can match
    fn on_flex(kind: &DispatchTensorKind) -> bool {
        match kind {
            DispatchTensorKind::Flex(_) => true,
            DispatchTensorKind::Autodiff(inner) => on_flex(inner),
            _ => false,
        }
    }
    x.dtype() == DType::F32
        && x.dims().iter().all(|&d| d > 0)
        && on_flex(&x.clone().into_dispatch().kind)
}

/// Log-softmax over the last dimension.
pub(crate) fn log_softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_log_softmax(x.into_dispatch()))
}

/// Softmax over the last dimension.
pub(crate) fn softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_softmax(x.into_dispatch()))
}

/// GPT-2's tanh GELU.
pub(crate) fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_gelu_tanh(x.into_dispatch()))
}

/// SiLU, `x·σ(x)`.
pub(crate) fn silu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_silu(x.into_dispatch()))
}

/// `x·W` for 2-D operands.
pub(crate) fn matmul(x: Tensor<2>, w: Tensor<2>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_matmul(
        x.into_dispatch(),
        w.into_dispatch(),
    ))
}

/// Rows `ids` of `weight`.
pub(crate) fn embedding(weight: Tensor<2>, ids: Tensor<2, Int>) -> Tensor<3> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_embedding(
        weight.into_dispatch(),
        ids.into_dispatch(),
    ))
}

/// `x.gather(1, ids)` for `x` `[N, V]` and `ids` `[N, 1]`.
pub(crate) fn gather_columns(x: Tensor<2>, ids: Tensor<2, Int>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_gather_columns(
        x.into_dispatch(),
        ids.into_dispatch(),
    ))
}

/// `Σ exp(a)·(a − b)` per row of two same-shape `[N, V]` tensors.
pub(crate) fn kl_rows(a: Tensor<2>, b: Tensor<2>) -> Tensor<1> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_kl_rows(
        a.into_dispatch(),
        b.into_dispatch(),
    ))
}

/// `−Σ exp(a)·a` per row of an `[N, V]` tensor.
pub(crate) fn entropy_rows(a: Tensor<2>) -> Tensor<1> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_entropy_rows(
        a.into_dispatch(),
    ))
}

/// The elements of a tensor in row-major order (a copy only when it is a strided view).
fn contiguous(x: &FlexTensor) -> (FlexTensor, Shape) {
    let x = x.to_contiguous();
    let shape = x.layout().shape().clone();
    (x, shape)
}

fn elements(x: &FlexTensor) -> &[f32] {
    let n = x.layout().shape().num_elements();
    &x.storage::<f32>()[x.layout().start_offset()..][..n]
}

fn last_dim(shape: &Shape) -> usize {
    shape[shape.num_dims() - 1]
}

/// `kernel(row_in, row_out)` for every row of the last dimension, rows in parallel.
fn rowwise(x: FlexTensor, kernel: fn(&[f32], &mut [f32])) -> FlexTensor {
    let (x, shape) = contiguous(&x);
    let v = last_dim(&shape);
    let input = elements(&x);
    let mut out = vec![0.0f32; input.len()];
    let task = TASK_ELEMENTS.div_ceil(v).max(1) * v;
    out.par_chunks_mut(task)
        .zip(input.par_chunks(task))
        .for_each(|(o, i)| {
            for (o, i) in o.chunks_mut(v).zip(i.chunks(v)) {
                kernel(i, o);
            }
        });
    FlexTensor::from_data(TensorData::new(out, shape))
}

/// `kernel(a_row, b_row, out_row)` for every row of two same-shape tensors, rows in parallel.
fn rowwise2(a: &FlexTensor, b: FlexTensor, kernel: fn(&[f32], &[f32], &mut [f32])) -> FlexTensor {
    let ((a, shape), (b, _)) = (contiguous(a), contiguous(&b));
    let v = last_dim(&shape);
    let (a, b) = (elements(&a), elements(&b));
    let mut out = vec![0.0f32; a.len()];
    let task = TASK_ELEMENTS.div_ceil(v).max(1) * v;
    out.par_chunks_mut(task)
        .zip(a.par_chunks(task))
        .zip(b.par_chunks(task))
        .for_each(|((o, a), b)| {
            for ((o, a), b) in o.chunks_mut(v).zip(a.chunks(v)).zip(b.chunks(v)) {
                kernel(a, b, o);
            }
        });
    FlexTensor::from_data(TensorData::new(out, shape))
}

/// `kernel(chunk_in, chunk_out)` over chunks of a tensor, in parallel: for element-wise
/// kernels, to which any chunking is the same.
fn elementwise(x: FlexTensor, kernel: fn(&[f32], &mut [f32])) -> FlexTensor {
    let (x, shape) = contiguous(&x);
    let input = elements(&x);
    let mut out = vec![0.0f32; input.len()];
    out.par_chunks_mut(TASK_ELEMENTS)
        .zip(input.par_chunks(TASK_ELEMENTS))
        .for_each(|(o, i)| kernel(i, o));
    FlexTensor::from_data(TensorData::new(out, shape))
}

/// `[N]` from `f(row of a, row of b)` for each of the N rows of `[N, V]` tensors.
fn row_reduce(
    a: FlexTensor,
    b: Option<FlexTensor>,
    f: impl Fn(&[f32], &[f32]) -> f32 + Sync,
) -> FlexTensor {
    let (a, shape) = contiguous(&a);
    let b = b.map(|b| contiguous(&b).0);
    let (n, v) = (shape[0], shape[1]);
    let a = elements(&a);
    let b = b.as_ref().map_or(&[][..], elements);
    let mut out = vec![0.0f32; n];
    out.par_iter_mut().enumerate().for_each(|(r, o)| {
        let other = if b.is_empty() {
            &[][..]
        } else {
            &b[r * v..][..v]
        };
        *o = f(&a[r * v..][..v], other);
    });
    FlexTensor::from_data(TensorData::new(out, [n]))
}

impl FusedOps for Flex {
    fn fused_log_softmax(x: FlexTensor) -> FlexTensor {
        rowwise(x, kernels::log_softmax)
    }

    fn fused_softmax(x: FlexTensor) -> FlexTensor {
        rowwise(x, kernels::softmax)
    }

    fn fused_gelu_tanh(x: FlexTensor) -> FlexTensor {
        elementwise(x, kernels::gelu_tanh)
    }

    fn fused_silu(x: FlexTensor) -> FlexTensor {
        elementwise(x, kernels::silu)
    }

    fn fused_kl_rows(a: FlexTensor, b: FlexTensor) -> FlexTensor {
        row_reduce(a, Some(b), kernels::kl)
    }

    fn fused_entropy_rows(a: FlexTensor) -> FlexTensor {
        row_reduce(a, None, |a, _| -kernels::expected(a))
    }

    fn fused_matmul(x: FlexTensor, w: FlexTensor) -> FlexTensor {
        matmul::small_matmul(&x, &w)
            .or_else(|| matmul::gemm_2d(&x, &w))
            .unwrap_or_else(|| Flex::float_matmul(x, w))
    }

    fn fused_embedding(weight: FlexTensor, indices: FlexTensor) -> FlexTensor {
        Flex::embedding(weight, indices)
    }

    fn fused_gather_columns(x: FlexTensor, indices: FlexTensor) -> FlexTensor {
        Flex::float_gather(1, x, indices)
    }
}

/// `x·w` by [`matmul::gemm_2d`], or burn-flex's matmul for operands it does not take.
fn product(x: &FlexTensor, w: &FlexTensor) -> FlexTensor {
    matmul::gemm_2d(x, w).unwrap_or_else(|| Flex::float_matmul(x.clone(), w.clone()))
}

/// The backward of `x·w`: its state is `x` if `w` needs a gradient and `w` if `x` does.
#[derive(Debug)]
struct MatmulBackward {
    /// `w` is the transposed view of a row-major `[n, k]` matrix (a tied vocabulary head,
    /// `h·Eᵀ`).
    w_transposed: bool,
}

impl MatmulBackward {
    fn of(w: &FlexTensor) -> Self {
        let k = w.layout().shape()[0];
        Self {
            w_transposed: k > 1 && w.layout().strides() == [1, k as isize],
        }
    }
}

impl Backward<Flex, 2> for MatmulBackward {
    type State = (Option<FlexTensor>, Option<FlexTensor>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (x, w) = ops.state;
        let w_transposed = self.w_transposed;
        binary::<Flex, _, _>(
            ops.parents,
            ops.node,
            grads,
            |g| {
                let w = w.expect("w is kept when x needs a gradient");
                product(&g, &Flex::float_transpose(w))
            },
            |g| {
                let x = x.expect("x is kept when w needs a gradient");
                // `w`'s gradient in `w`'s own layout: for a transposed view, `(gᵀ·x)ᵀ`, so that
                // the transpose's backward hands the weight a contiguous `[n, k]` gradient. The
                // other orientation is a strided view, and every later op on it (the sum with
                // the embedding's gradient of a tied head, the optimizer) walks `[n, k]` across
                // its rows. Each element is the same sum of the same products either way.
                match w_transposed {
                    true => Flex::float_transpose(product(&Flex::float_transpose(g), &x)),
                    false => product(&Flex::float_transpose(x), &g),
                }
            },
        );
    }
}

/// The backward of an embedding lookup; its state is the indices and the table's row count.
///
/// burn-flex's builds the `[V, D]` gradient as a zeroed buffer that is then copied into an
/// aligned one (hundreds of MB for a vocabulary table, on one thread, for every backward); here
/// it is allocated zeroed once and the looked-up rows are added into it, token by token in the
/// same order, so the sums are the same.
#[derive(Debug)]
struct EmbeddingBackward;

impl Backward<Flex, 1> for EmbeddingBackward {
    type State = (FlexTensor, usize);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (indices, rows) = ops.state;
        unary::<Flex, _>(ops.parents, ops.node, grads, |g| {
            let (g, shape) = contiguous(&g);
            let d = last_dim(&shape);
            let mut out = vec![0.0f32; rows * d];
            let ids = indices.into_data().convert::<i64>();
            let ids = ids.as_slice::<i64>().expect("indices converted to i64");
            for (&id, g) in ids.iter().zip(elements(&g).chunks_exact(d)) {
                let row = &mut out[id as usize * d..][..d];
                row.iter_mut().zip(g).for_each(|(o, g)| *o += g);
            }
            FlexTensor::from_data(TensorData::new(out, [rows, d]))
        });
    }
}

/// The backward of picking one entry per row; its state is the column indices and `[N, V]`.
///
/// burn's builds the `[N, V]` gradient as a zeroed tensor (on flex: zeroed, then copied into an
/// aligned buffer) and scatters the `N` upstream values into it; here they are written into one
/// zeroed allocation: the same values.
#[derive(Debug)]
struct GatherColumnsBackward;

impl Backward<Flex, 1> for GatherColumnsBackward {
    type State = (FlexTensor, [usize; 2]);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (indices, [n, v]) = ops.state;
        unary::<Flex, _>(ops.parents, ops.node, grads, |g| {
            let (g, _) = contiguous(&g);
            let mut out = vec![0.0f32; n * v];
            let ids = indices.into_data().convert::<i64>();
            let ids = ids.as_slice::<i64>().expect("indices converted to i64");
            for (r, (&id, &g)) in ids.iter().zip(elements(&g)).enumerate() {
                out[r * v + id as usize] += g;
            }
            FlexTensor::from_data(TensorData::new(out, [n, v]))
        });
    }
}

/// The backward of an op whose gradient is `kernel(state, upstream gradient)`, row by row
/// (`ROWS`) or element by element.
#[derive(Debug)]
struct FusedBackward {
    kernel: fn(&[f32], &[f32], &mut [f32]),
    /// The kernel works on whole rows of the last dimension (else on any chunk).
    rows: bool,
}

impl Backward<Flex, 1> for FusedBackward {
    /// The forward's output (softmaxes) or input (GELU).
    type State = FlexTensor;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let state = ops.state;
        let (kernel, rows) = (self.kernel, self.rows);
        unary::<Flex, _>(ops.parents, ops.node, grads, |grad| {
            if rows {
                rowwise2(&state, grad, kernel)
            } else {
                elementwise2(&state, grad, kernel)
            }
        });
    }
}

/// `kernel(a_chunk, b_chunk, out_chunk)` over chunks of two same-shape tensors, in parallel.
fn elementwise2(
    a: &FlexTensor,
    b: FlexTensor,
    kernel: fn(&[f32], &[f32], &mut [f32]),
) -> FlexTensor {
    let ((a, shape), (b, _)) = (contiguous(a), contiguous(&b));
    let (a, b) = (elements(&a), elements(&b));
    let mut out = vec![0.0f32; a.len()];
    out.par_chunks_mut(TASK_ELEMENTS)
        .zip(a.par_chunks(TASK_ELEMENTS))
        .zip(b.par_chunks(TASK_ELEMENTS))
        .for_each(|((o, a), b)| kernel(a, b, o));
    FlexTensor::from_data(TensorData::new(out, shape))
}

/// Records `forward(x)` with a [`FusedBackward`] whose state is the output (`keep_output`) or
/// the input.
fn tracked<C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<Flex, C>>,
    forward: fn(FlexTensor) -> FlexTensor,
    backward: FusedBackward,
    keep_output: bool,
) -> FloatTensor<Autodiff<Flex, C>> {
    match backward.prepare::<C>([x.node()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let input = x.into_primitive();
            if keep_output {
                let out = forward(input);
                prep.finish(out.clone(), out)
            } else {
                let out = forward(input.clone());
                prep.finish(input, out)
            }
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(x.into_primitive())),
    }
}

impl<C: CheckpointStrategy> FusedOps for Autodiff<Flex, C> {
    fn fused_log_softmax(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let backward = FusedBackward {
            kernel: kernels::log_softmax_backward,
            rows: true,
        };
        tracked::<C>(x, Flex::fused_log_softmax, backward, true)
    }

    fn fused_softmax(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let backward = FusedBackward {
            kernel: kernels::softmax_backward,
            rows: true,
        };
        tracked::<C>(x, Flex::fused_softmax, backward, true)
    }

    fn fused_gelu_tanh(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let backward = FusedBackward {
            kernel: kernels::gelu_tanh_backward,
            rows: false,
        };
        tracked::<C>(x, Flex::fused_gelu_tanh, backward, false)
    }

    fn fused_silu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let backward = FusedBackward {
            kernel: kernels::silu_backward,
            rows: false,
        };
        tracked::<C>(x, Flex::fused_silu, backward, false)
    }

    fn fused_kl_rows(a: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
        FloatTensor::<Self>::new(Flex::fused_kl_rows(a.into_primitive(), b.into_primitive()))
    }

    fn fused_entropy_rows(a: FloatTensor<Self>) -> FloatTensor<Self> {
        FloatTensor::<Self>::new(Flex::fused_entropy_rows(a.into_primitive()))
    }

    /// Under autodiff, [`matmul::gemm_2d`] forward and backward, as burn's matmul records
    /// them (`g·wᵀ` for `x`, `xᵀ·g` for `w`, each operand kept only if the other needs its
    /// gradient): the same bits. The few-row kernels serve generation, without autodiff.
    fn fused_matmul(x: FloatTensor<Self>, w: FloatTensor<Self>) -> FloatTensor<Self> {
        let (x_tracked, w_tracked) = (x.is_tracked(), w.is_tracked());
        let backward = MatmulBackward::of(w.primitive());
        match backward
            .prepare::<C>([x.node(), w.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (x, w) = (x.into_primitive(), w.into_primitive());
                let out = product(&x, &w);
                let state = (w_tracked.then_some(x), x_tracked.then_some(w));
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(product(&x.into_primitive(), &w.into_primitive()))
            }
        }
    }

    fn fused_embedding(weight: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> {
        match EmbeddingBackward
            .prepare::<C>([weight.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let weight = weight.into_primitive();
                let rows = weight.layout().shape()[0];
                prep.finish((indices.clone(), rows), Flex::embedding(weight, indices))
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(Flex::embedding(weight.into_primitive(), indices))
            }
        }
    }

    fn fused_gather_columns(x: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> {
        match GatherColumnsBackward
            .prepare::<C>([x.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let x = x.into_primitive();
                let shape = x.layout().shape();
                let dims = [shape[0], shape[1]];
                prep.finish((indices.clone(), dims), Flex::float_gather(1, x, indices))
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(Flex::float_gather(1, x.into_primitive(), indices))
            }
        }
    }
}
