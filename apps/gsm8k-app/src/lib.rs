//! The math experiment: fine-tune a language model on math word problems with PPO (TRL
//! semantics) or CORY (arXiv 2410.06101), rewarded by an answer checker; check answers;
//! measure pass@k.
//!
//! The task ([`task::GsmTask`]) supplies prompts, the checker and CORY's observer template to
//! `lmrl_train`'s loop; `main.rs` dispatches the command line. See `docs/gsm8k-app.md`.
pub mod check;
pub mod cli;
pub mod compare;
pub mod config;
pub mod eval;
pub mod setup;
pub mod task;

use std::process::ExitCode;

use anyhow::Result;
use clap::{ArgMatches, FromArgMatches};
use lmrl_train::StopToken;

use crate::cli::{Cli, Command, TrainArgs};
use crate::config::Gsm8kConfig;
use crate::task::GsmTask;

/// Runs the command line `matches` (of [`cli::command`]).
pub fn run(matches: &ArgMatches) -> Result<ExitCode> {
    let cli = Cli::from_arg_matches(matches)?;
    match (cli.command, matches.subcommand()) {
        (None, _) => train(matches, &cli.train),
        (Some(Command::Train(args)), Some((_, sub))) => train(sub, &args),
        (Some(Command::Check(args)), _) => check::run(&args).map(|()| ExitCode::SUCCESS),
        (Some(Command::Eval(args)), _) => eval::run(&args).map(|()| ExitCode::SUCCESS),
        (Some(Command::Compare(args)), _) => compare::run(&args).map(|()| ExitCode::SUCCESS),
        (Some(_), None) => unreachable!("clap gives a subcommand's matches with the subcommand"),
    }
}

/// The `train` command: `lmrl_train`'s loop on the math task.
pub fn train(matches: &ArgMatches, args: &TrainArgs) -> Result<ExitCode> {
    Ok(lmrl_train::train_command::<
        Gsm8kConfig,
        lmrl_models::AutoLm,
        _,
    >(
        "gsm8k-app",
        matches,
        &args.run,
        &stop_on_signals()?,
        GsmTask::build,
    )?)
}

/// The run's stop token, connected to SIGINT, SIGTERM and SIGHUP: the first signal finishes
/// the iteration with a checkpoint, a second exits at once with status 130 (the last complete
/// checkpoint is intact). A run that could not keep that promise is not started.
pub fn stop_on_signals() -> Result<StopToken> {
    Ok(lmrl_train::stop_on_signals(|| std::process::exit(130))?)
}
