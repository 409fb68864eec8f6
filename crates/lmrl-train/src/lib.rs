//! One RL fine-tuning loop for language models, behind a task trait.
//!
//! A [`Task`] supplies prompts that carry their own context, a reward over that context
//! (`lmrl_rewards::Reward`), CORY's observer template and the sampler settings; the loop
//! ([`Trainer`]) does the rest the same way for every task: PPO, GRPO, RLOO or CORY's two
//! copies over any of them ([`Copies`]), per-iteration random streams, metrics, sample logs,
//! plots, checkpoints, exact resume, a stop with a checkpoint through the caller's
//! [`StopToken`] and a lock per run directory. Settings are declared once, as config structs
//! that are both `config.toml` sections and clap flags ([`Config`], [`resolve`]). An app is a
//! task plus a thin `main` ([`train_command`]); [`select_device`] is the one place that picks
//! the device.
//!
//! The loop is generic over the model: any `lmrl_models::CausalLm` that can be written into a
//! checkpoint and read back ([`TrainModel`]; [`save_record`]/[`load_record`] do it in burn's
//! format) and, for an app's `train` command, found from `[run] model` ([`LoadModel`]).
//! `lmrl_models::AutoLm` (GPT-2 and the Llama family, from Hugging Face files or GGUF) is one
//! implementor; `examples/own_model_app.rs` is an app with a model, reward and task of its own.
//! The algorithms are listed once, in `algorithms.rs` ([`Algo`], [`LearnerAlgo`]): each one's
//! section, flags, batch shape, checks and how its learner is built.
//!
//! Nothing process-wide happens unless the program asks: [`init_process`] (heap settings,
//! checkpoint write mode and a stderr logger, from the environment) and [`stop_on_signals`] /
//! [`install_stop_handler`] (SIGINT, SIGTERM, SIGHUP to a [`StopToken`]) are what the apps
//! call.
mod algorithms;
mod app;
mod assets;
mod burn_collective;
mod copies;
mod device;
mod error;
mod generation;
mod model;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod parallel;
mod process;
mod provenance;
mod rows;
mod sections;
mod session;
mod settings;
mod streams;
mod task;
mod trainer;

pub use algorithms::{
    Algo, DynLearner, LearnerAlgo, LearnerSettings, SamplerSettings, follow_sampler,
    learner_sections,
};
pub use app::{TaskEnv, TrainConfig, train_command, train_resolved};
pub use assets::{
    asset_cache, load_tokenizer, model_config, pad_id, resolve_path_or_asset, verify_checkpoint,
    verify_model,
};
pub use copies::{Copies, CopySpec, Llm2Device, POLICY};
pub use device::{RankContext, backend_name, select_device, select_devices, select_rank_device};
pub use error::{Result, TaskError, TrainError, chain, in_section, setting};
pub use generation::generate_chunked;
pub use model::{
    ADAPTER_DIR, LORA_RECORD_FILE, LoadModel, ModelInfo, ModelIoError, RECORD_FILE, TrainModel,
    load_record, lora_targets, save_record,
};
pub use process::{
    DEFAULT_HOST_MEMORY, HOST_MEMORY_VAR, LOG_VAR, ProcessSettings, WRITE_MODE_VAR, init_logger,
    init_process,
};
pub use provenance::{Provenance, this_commit};
pub use rows::{cory_rows, metric_row, repetition};
pub use sections::{Section, section, section_prefixed};
pub use session::{
    LOCK_FILE, RunDir, Start, StopToken, checkpoint_due, install_stop_handler, stop_on_signals,
};
pub use settings::{
    CONFIG_FILE, Config, MAX_INTEGER_SETTING, RESUMABLE, Resolved, RunArgs, RunSettings,
    app_sections, checked_integers, read_config, read_provenance, resolve, resolve_with, to_toml,
    validate_learners, with_defaults,
};
pub use streams::{DataOrder, iter_rng, mix, stream};
pub use task::{Stage, Task};
pub use trainer::{Outcome, SUMMARY_FILE, Trainer};
