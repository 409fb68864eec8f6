//! Typed errors of the RL crate. Every variant names the quantity (and, where it applies, the
//! sample and token) that went wrong, so a diverging run stops with a message that points at the
//! cause instead of a panic deep inside a tensor kernel.

use thiserror::Error;

/// Errors raised by the learners (PPO, GRPO, RLOO) and CORY.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RlError {
    /// A NaN or ±Inf appeared in a quantity that must be finite (scores, log-probabilities,
    /// KL, rewards, values, advantages, the loss, gradients).
    #[error("non-finite value {value} in `{what}` at {location}")]
    NonFinite {
        /// The TRL quantity name, e.g. `rewards` or `ppo/loss/total`.
        what: String,
        /// Where: `sample 3, token 7`, `element 12`, or `scalar`.
        location: String,
        /// The offending value (NaN, inf or -inf).
        value: f32,
    },
    /// A response has no unmasked token: TRL's `mask.nonzero()[-1]` would raise, because
    /// there is no last response token to put the score on.
    #[error("`{what}`: sample {sample} has no unmasked response token")]
    EmptyResponse {
        /// The quantity being computed.
        what: String,
        /// Index of the sample in the batch.
        sample: usize,
    },
    /// A masked statistic needs more unmasked tokens than it got: a masked mean needs one, the
    /// unbiased (Bessel-corrected) masked variance used by whitening needs two. TRL raises a
    /// `ValueError` for zero and divides by zero for one.
    #[error("`{what}` needs at least {needed} unmasked token(s), the mask has {found}")]
    TooFewTokens {
        /// The quantity being computed, e.g. `masked_whiten(advantages)`.
        what: String,
        /// Tokens needed.
        needed: usize,
        /// Tokens present.
        found: usize,
    },
    /// Two inputs that must agree in shape do not.
    #[error("shape mismatch in `{what}`: expected {expected:?}, got {got:?}")]
    Shape {
        /// The quantity whose shape is wrong.
        what: String,
        /// The shape that was needed.
        expected: Vec<usize>,
        /// The shape that was given.
        got: Vec<usize>,
    },
    /// A configuration field is invalid (zero sizes, mini-batch larger than the batch, ...).
    #[error("invalid configuration: `{field}`: {reason}")]
    Config {
        /// The offending field.
        field: String,
        /// Why it is rejected.
        reason: String,
    },
    /// Reading a tensor back to the host failed.
    #[error("could not read `{what}` from the device: {message}")]
    Read {
        /// The quantity being read.
        what: String,
        /// The backend's message.
        message: String,
    },
    /// Saving or loading a training state failed: file unreadable or unwritable, malformed,
    /// or not matching the model it is loaded into.
    #[error("training state {path}: {message}")]
    State {
        /// The file or directory involved.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// An error from the model crate (forward, generation, scoring, loading).
    #[error(transparent)]
    Model(#[from] lmrl_models::ModelError),
    /// An error reported by a caller-supplied component (reward function, template, tokenizer).
    #[error("{component}: {message}")]
    External {
        /// Which plug-in failed, e.g. `reward`, `observer template`.
        component: String,
        /// Its message.
        message: String,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, RlError>;
