//! Adam as TRL runs it (PyTorch's `torch.optim.Adam` without weight decay), with one fused,
//! multi-threaded update pass per parameter on burn's CPU backend.
//!
//! burn's `Adam` updates a parameter through about eleven tensor ops (the two moment updates,
//! the bias-corrected step, the parameter update), each a separate single-threaded pass over the
//! parameter on `flex`: 0.6–0.7 s per optimiser step for GPT-2 small's 124 M parameters, and a
//! PPO step takes one per epoch. [`FusedAdam`] does the same arithmetic, in the same order and
//! precision (so the results are bit-identical), in one pass split over the cores, on the CPU
//! backend with this crate's `flex` feature; every other backend runs burn's `Adam`. Its
//! per-parameter state is burn's `AdamState`, so optimiser checkpoints are interchangeable
//! with burn's.
use burn::optim::{Adam, AdamConfig, AdamState, LearningRate, ModuleOptimizer, Optimizer};
use burn::tensor::{Device, Tensor};

/// Adam with moments `β₁`, `β₂` and `ε` added to `√v̂` (PyTorch's convention), no weight decay,
/// as a module optimiser.
pub fn adam(beta_1: f32, beta_2: f32, epsilon: f32) -> ModuleOptimizer {
    ModuleOptimizer::from(FusedAdam::new(beta_1, beta_2, epsilon))
}

/// The optimiser behind [`adam`]; see the module docs.
#[derive(Clone)]
pub struct FusedAdam {
    // Read by the fused pass only, which exists with the `flex` feature.
    #[cfg_attr(not(feature = "flex"), allow(dead_code))]
    hyper: Hyper,
    /// burn's own Adam with the same settings, for tensors the fused pass does not take.
    composite: Adam,
}

#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "flex"), allow(dead_code))]
struct Hyper {
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
}

impl FusedAdam {
    /// Adam with these moments and ε (no weight decay, no AMSGrad).
    pub fn new(beta_1: f32, beta_2: f32, epsilon: f32) -> Self {
        Self {
            hyper: Hyper {
                beta_1,
                beta_2,
                epsilon,
            },
            composite: AdamConfig::new()
                .with_beta_1(beta_1)
                .with_beta_2(beta_2)
                .with_epsilon(epsilon)
                .build(),
        }
    }
}

impl Optimizer for FusedAdam {
    type State<const D: usize> = AdamState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        #[cfg(feature = "flex")]
        if flex::fits(&tensor, &grad, state.as_ref()) {
            return flex::step(self.hyper, lr, tensor, grad, state);
        }
        self.composite.step(lr, tensor, grad, state)
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        Adam::to_device(state, device)
    }
}

impl Hyper {
    /// The scalars of step `t` (1-based), as burn's `AdaptiveMomentum::transform` forms them:
    /// `√(1 − β₂ᵗ)` and `√(1 − β₂ᵗ) / (1 − β₁ᵗ)`.
    #[cfg_attr(not(feature = "flex"), allow(dead_code))]
    fn corrections(&self, t: usize) -> (f32, f32) {
        let t = t as i32;
        let bc2_sqrt = (1.0 - self.beta_2.powi(t)).sqrt();
        (bc2_sqrt, bc2_sqrt / (1.0 - self.beta_1.powi(t)))
    }
}

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::{
        BackendTensor, DispatchAutodiffContext, DispatchTensor, DispatchTensorKind,
    };
    use burn::optim::{AdamState, AdaptiveMomentumState, LearningRate};
    use burn::tensor::{DType, Shape, Tensor, TensorData};
    use burn_flex::FlexTensor;
    use rayon::prelude::*;

    use super::Hyper;

    /// Elements per rayon task: large enough to amortise the task, small enough to split a
    /// 2.4 M-element matrix over the cores.
    const CHUNK: usize = 1 << 16;

    /// Whether the fused pass takes these: the parameter, its gradient and its moments are f32
    /// tensors of one shape on the CPU backend (without autodiff, as an optimiser sees them),
    /// without AMSGrad's extra moment.
    pub(super) fn fits<const D: usize>(
        tensor: &Tensor<D>,
        grad: &Tensor<D>,
        state: Option<&AdamState<D>>,
    ) -> bool {
        let dims = tensor.dims();
        let eligible = |t: &Tensor<D>| t.dtype() == DType::F32 && t.dims() == dims && is_flex(t);
        eligible(tensor)
            && eligible(grad)
            && state.map(|s| &s.momentum).is_none_or(|m| {
                eligible(&m.moment_1) && eligible(&m.moment_2) && m.max_moment_2.is_none()
            })
    }

    /// The fused step, for inputs that [`fits`] took.
    pub(super) fn step<const D: usize>(
        hyper: Hyper,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<AdamState<D>>,
    ) -> (Tensor<D>, Option<AdamState<D>>) {
        let (moments, time) = match state {
            Some(s) => {
                let m = s.momentum;
                (
                    Some((into_vec(m.moment_1), into_vec(m.moment_2))),
                    m.time + 1,
                )
            }
            None => (None, 1),
        };
        let shape = Shape::from(tensor.dims().to_vec());
        let (p, m1, m2) = update(hyper, lr, time, into_vec(tensor), &into_vec(grad), moments);
        let make = |v: Vec<f32>| tensor_of::<D>(v, shape.clone());
        let momentum = AdaptiveMomentumState::new(time, make(m1), make(m2));
        (make(p), Some(AdamState::new(momentum)))
    }

    /// One pass over every element: the moment updates, the bias-corrected step and the
    /// parameter update of burn's `Adam` (`optim/adam.rs`), op for op in f32.
    fn update(
        hyper: Hyper,
        lr: LearningRate,
        time: usize,
        mut p: Vec<f32>,
        g: &[f32],
        moments: Option<(Vec<f32>, Vec<f32>)>,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let n = p.len();
        let (mut m1, mut m2, fresh) = match moments {
            Some((a, b)) => (a, b, false),
            None => (vec![0.0f32; n], vec![0.0f32; n], true),
        };
        let (b1, b2) = (hyper.beta_1, hyper.beta_2);
        let (f1, f2) = (1.0 - b1, 1.0 - b2);
        let (bc2_sqrt, factor) = hyper.corrections(time);
        let eps = hyper.epsilon * bc2_sqrt;
        let lr = lr as f32;
        p.par_chunks_mut(CHUNK)
            .zip(m1.par_chunks_mut(CHUNK))
            .zip(m2.par_chunks_mut(CHUNK))
            .zip(g.par_chunks(CHUNK))
            .for_each(|(((p, m1), m2), g)| {
                for i in 0..p.len() {
                    let gi = g[i];
                    // burn's first step sets the moments from the gradient alone.
                    let (a, b) = if fresh {
                        (gi * f1, (gi * gi) * f2)
                    } else {
                        (m1[i] * b1 + gi * f1, m2[i] * b2 + (gi * gi) * f2)
                    };
                    m1[i] = a;
                    m2[i] = b;
                    let step = (a * factor) / (b.sqrt() + eps);
                    p[i] -= step * lr;
                }
            });
        (p, m1, m2)
    }

    fn is_flex<const D: usize>(t: &Tensor<D>) -> bool {
        matches!(
            t.clone().into_dispatch(),
            DispatchTensor {
                kind: DispatchTensorKind::Flex(BackendTensor::Float(_)),
                autodiff: DispatchAutodiffContext::Disabled,
            }
        )
    }

    /// The elements of an f32 tensor in row-major order (moved out of a contiguous buffer the
    /// tensor alone owns, copied otherwise).
    fn into_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        let flex = match t.into_dispatch().kind {
            DispatchTensorKind::Flex(BackendTensor::Float(f)) => f,
            // `fits` checked the backend before anything was taken apart.
            _ => unreachable!("a CPU-backend tensor, checked by `fits`"),
        };
        flex.into_data()
            .try_into_vec::<f32>()
            .unwrap_or_else(|e| unreachable!("an f32 tensor, checked by `fits`: {e:?}"))
    }

    fn tensor_of<const D: usize>(v: Vec<f32>, shape: Shape) -> Tensor<D> {
        Tensor::from_dispatch(DispatchTensor {
            kind: DispatchTensorKind::Flex(BackendTensor::Float(FlexTensor::from_data(
                TensorData::new(v, shape),
            ))),
            autodiff: DispatchAutodiffContext::Disabled,
        })
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::optim::{Adam, AdamConfig, Optimizer};
    use burn::tensor::{Device, Distribution, Tensor};

    use super::{FusedAdam, flex};

    fn values(t: &Tensor<2>) -> Vec<f32> {
        t.to_data().try_to_vec::<f32>().unwrap()
    }

    /// Five steps of the fused pass and of burn's `Adam` from the same start, with a different
    /// gradient each step: parameters and both moments bit for bit (the same f32 arithmetic in
    /// the same order), and the step counter.
    #[test]
    fn fused_steps_equal_burns_adam_bit_for_bit() {
        let device = Device::flex();
        device.seed(3);
        let (b1, b2, eps, lr) = (0.9, 0.999, 1e-8, 3e-4);
        let fused = FusedAdam::new(b1, b2, eps);
        let burn: Adam = AdamConfig::new()
            .with_beta_1(b1)
            .with_beta_2(b2)
            .with_epsilon(eps)
            .build();
        // More elements than one rayon task takes, so the chunks split.
        let start = Tensor::<2>::random([301, 517], Distribution::Normal(0.0, 1.0), &device);
        let (mut p_fused, mut p_burn) = (start.clone(), start);
        let (mut s_fused, mut s_burn) = (None, None);
        for step in 0..5 {
            let grad = Tensor::<2>::random([301, 517], Distribution::Normal(0.0, 0.1), &device);
            assert!(
                flex::fits(&p_fused, &grad, s_fused.as_ref()),
                "step {step}: the fused pass declined a CPU tensor"
            );
            let (p, s) = flex::step(fused.hyper, lr, p_fused, grad.clone(), s_fused);
            (p_fused, s_fused) = (p, s);
            (p_burn, s_burn) = burn.step(lr, p_burn, grad, s_burn);
            assert_eq!(
                values(&p_fused),
                values(&p_burn),
                "parameters after step {step}"
            );
        }
        let (f, b) = (s_fused.unwrap().momentum, s_burn.unwrap().momentum);
        assert_eq!(f.time, b.time);
        assert_eq!(values(&f.moment_1), values(&b.moment_1));
        assert_eq!(values(&f.moment_2), values(&b.moment_2));
        // And through the optimiser trait, as a module optimiser calls it.
        let g = Tensor::<2>::ones([301, 517], &device);
        let (a, _) = fused.step(
            lr,
            p_fused.clone(),
            g.clone(),
            Some(super::AdamState::new(f)),
        );
        let (c, _) = burn.step(lr, p_burn, g, Some(super::AdamState::new(b)));
        assert_eq!(values(&a), values(&c));
    }
}
