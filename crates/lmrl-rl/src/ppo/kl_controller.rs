//! KL-coefficient controllers: TRL 0.11 `AdaptiveKLController` (Ziegler et al. 2019,
//! arXiv 1909.08593, §2.2) and `FixedKLController`.

use serde::{Deserialize, Serialize};

/// TRL `AdaptiveKLController`: after each PPO step,
/// β ← β·(1 + clip(KL̄/target − 1, −0.2, 0.2)·n_steps/horizon), where KL̄ is the batch mean of
/// Σ_t KL_t (`objective/kl`) and `n_steps` the batch size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveKlController {
    /// Current β (`kl_ctl.value`).
    pub value: f64,
    /// Target KL in nats (`target`, 6).
    pub target: f64,
    /// Horizon (`horizon`, 10000).
    pub horizon: f64,
}

impl AdaptiveKlController {
    /// Starts at `init_kl_coef`.
    pub fn new(init_kl_coef: f64, target: f64, horizon: f64) -> Self {
        Self {
            value: init_kl_coef,
            target,
            horizon,
        }
    }

    /// TRL `update(current, n_steps)`.
    pub fn update(&mut self, current: f64, n_steps: usize) {
        let proportional_error = (current / self.target - 1.0).clamp(-0.2, 0.2);
        let mult = 1.0 + proportional_error * n_steps as f64 / self.horizon;
        self.value *= mult;
    }
}

/// TRL `FixedKLController`: β never changes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FixedKlController {
    /// β.
    pub value: f64,
}

impl FixedKlController {
    /// A constant β.
    pub fn new(kl_coef: f64) -> Self {
        Self { value: kl_coef }
    }

    /// No-op (TRL `FixedKLController.update`).
    pub fn update(&mut self, _current: f64, _n_steps: usize) {}
}

/// Either controller (TRL picks by `adap_kl_ctrl`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum KlController {
    /// `adap_kl_ctrl = true`.
    Adaptive(AdaptiveKlController),
    /// `adap_kl_ctrl = false`.
    Fixed(FixedKlController),
}

impl KlController {
    /// Current β.
    pub fn value(&self) -> f64 {
        match self {
            KlController::Adaptive(c) => c.value,
            KlController::Fixed(c) => c.value,
        }
    }

    /// Updates β from the observed batch KL and the number of samples behind it.
    pub fn update(&mut self, current: f64, n_steps: usize) {
        match self {
            KlController::Adaptive(c) => c.update(current, n_steps),
            KlController::Fixed(c) => c.update(current, n_steps),
        }
    }
}
