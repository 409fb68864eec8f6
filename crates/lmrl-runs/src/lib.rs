//! Files a training run leaves behind, so a user can open them: the resolved config
//! (`config.toml`), one metrics row per iteration and agent (`metrics.csv`), sampled
//! generations (`samples.jsonl`) and plots (PNG + SVG).
//!
//! Every file is written so that an interrupted run never leaves a half-written file behind:
//! whole files go through [`atomic_write`]; append-only logs are flushed row by row and
//! truncated back to the last complete row on resume.
pub mod args;
pub mod assets;
pub mod checkpoint;
pub mod error;
pub mod files;
pub mod learner;
pub mod metrics;
pub mod plots;
pub mod run_state;
pub mod session;
pub mod settings;

pub use args::{Algo, PpoArgs, RunArgs, SharedSettingsMut};
pub use assets::{asset_cache, load_tokenizer, model_config, pad_id, resolve_path_or_asset};
pub use checkpoint::{CheckpointDir, FillError};
pub use error::{Result, RunError};
pub use files::{atomic_write, write_toml};
pub use learner::{Learner, LearnerKind, POLICY, cory_rows, generate_chunked, metric_row};
pub use metrics::{MetricRow, MetricsLog, SamplesLog, final_rows, mean, read_rows};
pub use plots::{
    CurveGroup, FrontierPoint, draw_run, mean_std, mean_std_by_x, plot_curves, plot_frontier,
    plot_run,
};
pub use run_state::{AgentState, DataOrder, STATE_FILE, STATE_FORMAT, TrainState, iter_rng, mix};
pub use session::{
    Outcome, SUMMARY_FILE, announce_start, checkpoint_due, finish_run, install_ctrlc, interrupted,
    open_logs, open_run, run_training, stop_interrupted,
};
pub use settings::{
    CONFIG_FILE, ConfigError, RunConfigFile, check_batching, check_cadence, check_positive,
    read_config, resolve_run,
};
