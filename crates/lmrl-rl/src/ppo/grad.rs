//! Global gradient-norm clipping (PyTorch `torch.nn.utils.clip_grad_norm_`, which TRL applies
//! through `accelerator.clip_grad_norm_` when `max_grad_norm` is set).
//!
//! burn's `GradientClippingConfig::Norm` clips every parameter tensor by its own norm; PyTorch
//! scales **all** gradients by one factor computed from the norm over all parameters together.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

use crate::error::{Result, RlError};
use crate::util::to_scalar;

struct SquaredNorm<'a> {
    grads: &'a GradientsParams,
    total: Option<Tensor<1>>,
}

impl ModuleVisitor for SquaredNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            let s = g.square().sum();
            self.total = Some(match self.total.take() {
                Some(t) => t + s,
                None => s,
            });
        }
    }
}

struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: f32,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(param.id) {
            self.grads.register(param.id, g.mul_scalar(self.factor));
        }
    }
}

/// The L2 norm of all gradients of `module` taken together, √(Σ_p ‖g_p‖²). `None` when no
/// parameter has a gradient.
pub fn global_grad_norm<M: Module>(module: &M, grads: &GradientsParams) -> Result<Option<f32>> {
    let mut v = SquaredNorm { grads, total: None };
    module.visit(&mut v);
    match v.total {
        None => Ok(None),
        Some(t) => Ok(Some(to_scalar("gradient norm", t.sqrt())?)),
    }
}

/// PyTorch `clip_grad_norm_(params, max_norm)`: with N the global norm, every gradient is
/// multiplied by `min(1, max_norm / (N + 1e-6))`. Returns N (before clipping). A non-finite N is
/// an [`RlError::NonFinite`] (PyTorch's `error_if_nonfinite=True` behaviour; the default would
/// silently write NaN into every parameter).
pub fn clip_grad_norm<M: Module>(
    module: &M,
    grads: &mut GradientsParams,
    max_norm: f32,
) -> Result<f32> {
    let Some(norm) = global_grad_norm(module, grads)? else {
        return Ok(0.0);
    };
    if !norm.is_finite() {
        return Err(RlError::NonFinite {
            what: "gradient norm".into(),
            location: "all parameters".into(),
            value: norm,
        });
    }
    let coef = max_norm / (norm + 1e-6);
    if coef < 1.0 {
        let mut s = Scale {
            grads,
            factor: coef,
        };
        module.visit(&mut s);
    }
    Ok(norm)
}
