//! One RL fine-tuning loop for language models, behind a task trait.
//!
//! A [`Task`] supplies prompts that carry their own context, a reward over that context
//! (`lmrl_rewards::Reward`), CORY's observer template and the sampler settings; the loop
//! ([`Trainer`]) does the rest the same way for every task: PPO or CORY learners
//! ([`Copies`]), per-iteration random streams, metrics, sample logs, plots, checkpoints in
//! Hugging Face format, exact resume, a stop with a checkpoint through the caller's
//! [`StopToken`] and a lock per run directory. Settings are declared once, as config structs
//! that are both `config.toml` sections and clap flags ([`Config`], [`resolve`]). An app is a
//! task plus a thin `main` ([`train_command`]); [`select_device`] is the one place that picks
//! the device.
//!
//! Nothing process-wide happens unless the program asks: [`init_process`] (heap settings,
//! checkpoint write mode and a stderr logger, from the environment) and [`stop_on_signals`] /
//! [`install_stop_handler`] (SIGINT, SIGTERM, SIGHUP to a [`StopToken`]) are what the apps
//! call.
mod app;
mod assets;
mod burn_collective;
mod copies;
mod device;
mod error;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod parallel;
mod process;
mod rows;
mod session;
mod settings;
mod streams;
mod task;
mod trainer;

pub use app::{TaskEnv, TrainConfig, chain, train_command, train_resolved};
pub use assets::{
    asset_cache, load_tokenizer, model_config, pad_id, resolve_path_or_asset, verify_checkpoint,
    verify_model,
};
pub use copies::{Copies, CopySpec, DynLearner, LORA_FILE, LearnerSettings, POLICY, lora_targets};
pub use device::{backend_name, select_device, select_devices, select_rank_device};
pub use error::{Result, TaskError, TrainError, setting};
pub use process::{
    DEFAULT_HOST_MEMORY, HOST_MEMORY_VAR, LOG_VAR, ProcessSettings, WRITE_MODE_VAR, init_logger,
    init_process,
};
pub use rows::{cory_rows, metric_row};
pub use session::{
    LOCK_FILE, RunDir, Start, StopToken, checkpoint_due, install_stop_handler, stop_on_signals,
};
pub use settings::{
    Algo, CONFIG_FILE, Config, LearnerAlgo, MAX_INTEGER_SETTING, RESUMABLE, Resolved, RunArgs,
    RunSettings, Section, app_sections, checked_integers, in_section, read_config, resolve,
    resolve_with, section, section_prefixed, to_toml, validate_learners, with_defaults,
};
pub use streams::{DataOrder, iter_rng, mix, stream};
pub use task::{Stage, Task};
pub use trainer::{Outcome, SUMMARY_FILE, Trainer, generate_chunked};
