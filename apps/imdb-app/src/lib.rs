//! The IMDB experiment: fine-tune a language model to continue IMDB review openings with
//! positive sentiment, with PPO (TRL semantics) or CORY (arXiv 2410.06101), on burn.
//!
//! The task ([`task::ImdbTask`]) supplies prompts, the sentiment reward and CORY's observer
//! template to `lmrl_train`'s loop; `main.rs` dispatches the command line. See
//! `docs/imdb-app.md`.
pub mod analyze;
pub mod cli;
pub mod config;
pub mod eval;
pub mod eval_cmd;
pub mod generate;
pub mod score;
pub mod stats;
pub mod sweep;
pub mod task;

use std::process::ExitCode;

use anyhow::Result;
use clap::{ArgMatches, FromArgMatches};
use lmrl_train::StopToken;

use crate::cli::{Cli, Command, TrainArgs};
use crate::config::ImdbConfig;
use crate::task::ImdbTask;

/// Runs the command line `matches` (of [`cli::command`]).
pub fn run(matches: &ArgMatches) -> Result<ExitCode> {
    let cli = Cli::from_arg_matches(matches)?;
    match (cli.command, matches.subcommand()) {
        (None, _) => train(matches, &cli.train),
        (Some(Command::Train(args)), Some((_, sub))) => train(sub, &args),
        (Some(Command::Score(args)), _) => score::run(&args),
        (Some(Command::Generate(args)), _) => generate::run(&args),
        (Some(Command::Eval(args)), _) => eval_cmd::run(&args),
        (Some(Command::Sweep(args)), Some((_, sub))) => sweep::run(sub, &args),
        (Some(Command::Analyze(args)), _) => analyze::run(&args),
        (Some(_), None) => unreachable!("clap gives a subcommand's matches with the subcommand"),
    }
}

/// The `train` command: `lmrl_train`'s loop on the IMDB task.
pub fn train(matches: &ArgMatches, args: &TrainArgs) -> Result<ExitCode> {
    Ok(lmrl_train::train_command::<
        ImdbConfig,
        lmrl_models::AutoLm,
        _,
    >(
        "imdb-app",
        matches,
        &args.run,
        &stop_on_signals()?,
        ImdbTask::build,
    )?)
}

/// The run's stop token, connected to SIGINT, SIGTERM and SIGHUP: the first signal finishes
/// the iteration with a checkpoint, a second exits at once with status 130 (the last complete
/// checkpoint is intact). A run that could not keep that promise is not started.
pub fn stop_on_signals() -> Result<StopToken> {
    Ok(lmrl_train::stop_on_signals(|| std::process::exit(130))?)
}
