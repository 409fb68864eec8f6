//! Files a training run leaves behind, so a user can open them — with no ML dependency: the
//! checkpoint directories (`checkpoints/iter-NNNNNN/`, written whole or not at all), the run's
//! own record in each (`state.toml`), one metrics row per iteration and trained copy
//! (`metrics.csv`), sampled generations (`samples.jsonl`) and plots (PNG + SVG).
//!
//! Every file is written so that an interrupted run never leaves a half-written file behind:
//! whole files go through [`atomic_write`]; append-only logs are flushed row by row and
//! truncated back to the last complete row on resume.
mod checkpoint;
mod error;
mod files;
mod manifest;
mod metrics;
mod plots;
mod run_state;

pub use checkpoint::{CheckpointDir, FillError};
pub use error::{Result, RunError};
pub use files::{atomic_write, remove_stale_temporaries, write_toml};
pub use manifest::{MANIFEST_FILE, Verified, hash_file, verify, write_manifest};
pub use metrics::{MetricRow, MetricsLog, SamplesLog, final_rows, mean, read_rows};
pub use plots::{
    CurveGroup, FrontierPoint, LEVELS_FILE, Level, SMOOTHING, draw_run, mean_std, mean_std_by_x,
    plot_curves, plot_frontier, plot_run, read_levels, t975, write_levels,
};
pub use run_state::{AgentState, STATE_FILE, STATE_FORMAT, TrainState};
