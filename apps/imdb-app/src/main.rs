//! `imdb-app`: fine-tune a language model to continue IMDB review openings positively, with
//! PPO (TRL semantics) or CORY (arXiv 2410.06101), on burn.
//!
//! With no arguments it trains CORY on SmolLM2-135M with the IMDB bag-of-words classifier as
//! reward, fetching every asset through the `lmrl_data` cache. See `docs/imdb-app.md`.
mod cli;
mod config;
mod generate;
mod score;
mod setup;
mod state;
mod sweep;
mod train;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// The one place that picks the compute device from the enabled cargo feature: `tch` →
/// libtorch (CPU), else `wgpu` → the default wgpu adapter, else `flex` (pure-Rust CPU).
/// Training uses `select_device().autodiff()`.
pub fn select_device() -> burn::tensor::Device {
    #[cfg(feature = "tch")]
    #[allow(deprecated)]
    {
        burn::tensor::Device::libtorch()
    }
    #[cfg(all(feature = "wgpu", not(feature = "tch")))]
    {
        burn::tensor::Device::wgpu(burn::tensor::DeviceKind::DefaultDevice)
    }
    #[cfg(all(feature = "flex", not(feature = "tch"), not(feature = "wgpu")))]
    {
        burn::tensor::Device::flex()
    }
    #[cfg(not(any(feature = "flex", feature = "tch", feature = "wgpu")))]
    {
        compile_error!("enable one backend feature: flex (default), tch or wgpu")
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => train::run_cli(&cli.train),
        Some(Command::Train(args)) => train::run_cli(&args),
        Some(Command::Score(args)) => score::run(&args),
        Some(Command::Generate(args)) => generate::run(&args),
        Some(Command::Sweep(args)) => sweep::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
