//! A run's configuration the same way in every app: built-in defaults, overridden by
//! `--config FILE`, overridden by flags — or, with `--resume DIR`, the run's own
//! `DIR/config.toml` with only its length and logging cadence changed ([`resolve_run`]). Also
//! the checks of the PPO settings every app shares, so a bad value is refused before any work
//! starts, naming the `config.toml` key.
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::args::{Algo, PpoArgs, RunArgs, SharedSettingsMut};
use crate::error::{Result, RunError};

/// `config.toml` of a run directory: the fully resolved settings, read back on resume.
pub const CONFIG_FILE: &str = "config.toml";

/// A setting that contradicts another, or is out of range.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting `{field}`: {reason}")]
pub struct ConfigError {
    /// The `config.toml` key.
    pub field: &'static str,
    pub reason: String,
}

/// An app's run configuration (`config.toml`, unknown keys refused by the app's serde
/// attributes).
pub trait RunConfigFile: DeserializeOwned + Default {
    /// Names fresh runs' default output directory: `runs/<APP>-<algo>-<seed>`.
    const APP: &'static str;

    /// Fills the settings whose default depends on others, so `config.toml` shows what ran.
    fn resolve(&mut self);

    /// Rejects contradictory or meaningless settings before any work starts.
    fn validate(&self) -> Result<(), ConfigError>;

    /// The settings the shared flags set (usually `lmrl_runs::shared_settings_mut!(self)`).
    fn shared_mut(&mut self) -> SharedSettingsMut<'_>;
}

/// Reads a `config.toml` (unknown keys are errors when `C` says so).
pub fn read_config<C: DeserializeOwned>(path: &Path) -> Result<C> {
    let text = std::fs::read_to_string(path).map_err(|source| RunError::ReadConfig {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| RunError::ConfigSyntax {
        path: path.to_path_buf(),
        source,
    })
}

/// The run's configuration, output directory and whether it resumes. `app_changes` are the
/// app's own flags that were given (refused with `--resume`, like every [`PpoArgs`] flag);
/// `apply_app` applies them (with `--lr` and `--score-norm`) on top of the defaults or
/// `--config`.
pub fn resolve_run<C: RunConfigFile>(
    run: &RunArgs,
    ppo: &PpoArgs,
    app_changes: Vec<&'static str>,
    apply_app: impl FnOnce(&mut C),
) -> Result<(C, PathBuf, bool)> {
    if let Some(dir) = &run.resume {
        let mut changed = ppo.changes_settings();
        changed.extend(app_changes);
        if !changed.is_empty() {
            return Err(RunError::ResumeSettings {
                path: dir.clone(),
                flags: changed.join(", "),
            });
        }
        let mut cfg: C = read_config(&dir.join(CONFIG_FILE))?;
        run.apply(&mut cfg.shared_mut());
        cfg.resolve();
        cfg.validate()?;
        return Ok((cfg, dir.clone(), true));
    }
    let mut cfg: C = match &run.config {
        Some(p) => read_config(p)?,
        None => C::default(),
    };
    {
        let mut shared = cfg.shared_mut();
        ppo.apply(&mut shared);
        run.apply(&mut shared);
    }
    apply_app(&mut cfg);
    cfg.resolve();
    cfg.validate()?;
    let out = run.out.clone().unwrap_or_else(|| {
        let s = cfg.shared_mut();
        PathBuf::from(format!("runs/{}-{}-{}", C::APP, s.algo.name(), s.seed))
    });
    Ok((cfg, out, false))
}

fn err(field: &'static str, reason: String) -> Result<(), ConfigError> {
    Err(ConfigError { field, reason })
}

/// The PPO batch layout (TRL: `batch_size` prompts per iteration, split into minibatches of
/// `mini_batch_size`, `gradient_accumulation_steps` of them per Adam step, so one step takes
/// `mini_batch_size × gradient_accumulation_steps` samples and must divide the batch) and
/// CORY's role-exchange period.
pub fn check_batching(
    algo: Algo,
    batch_size: usize,
    mini_batch_size: usize,
    gradient_accumulation_steps: usize,
    swap_period: usize,
) -> Result<(), ConfigError> {
    if batch_size == 0 {
        return err("batch_size", "must be at least 1".into());
    }
    if mini_batch_size == 0 || mini_batch_size > batch_size {
        return err(
            "mini_batch_size",
            format!("must be in 1..={batch_size} (the batch size)"),
        );
    }
    let per_step = mini_batch_size * gradient_accumulation_steps;
    if gradient_accumulation_steps == 0 || !batch_size.is_multiple_of(per_step) {
        return err(
            "gradient_accumulation_steps",
            format!(
                "batch_size {batch_size} must be a multiple of mini_batch_size × gradient_accumulation_steps = {per_step}"
            ),
        );
    }
    if algo == Algo::Cory && swap_period == 0 {
        return err("swap_period", "must be at least 1 for CORY".into());
    }
    Ok(())
}

/// A positive, finite number (the learning rate, the KL target).
pub fn check_positive(field: &'static str, x: f64) -> Result<(), ConfigError> {
    if !(x > 0.0 && x.is_finite()) {
        return err(field, format!("must be a positive number, got {x}"));
    }
    Ok(())
}

/// The bookkeeping cadence (checkpoints, samples log, checkpoints kept) and the generation
/// chunk size: all at least 1.
pub fn check_cadence(
    checkpoint_every: usize,
    samples_every: usize,
    keep_checkpoints: usize,
    generation_batch_size: usize,
) -> Result<(), ConfigError> {
    if checkpoint_every == 0 || samples_every == 0 || keep_checkpoints == 0 {
        return err(
            "checkpoint_every",
            "checkpoint_every, samples_every and keep_checkpoints must be ≥ 1".into(),
        );
    }
    if generation_batch_size == 0 {
        return err("generation_batch_size", "must be at least 1".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Cfg {
        algo: Algo,
        batch_size: usize,
        mini_batch_size: usize,
        ppo_epochs: usize,
        init_kl_coef: f64,
        target_kl: Option<f64>,
        swap_period: usize,
        reset_state_on_swap: bool,
        seed: u64,
        iterations: usize,
        checkpoint_every: usize,
        samples_every: usize,
        lr: f64,
    }

    impl Default for Cfg {
        fn default() -> Self {
            Cfg {
                algo: Algo::Cory,
                batch_size: 8,
                mini_batch_size: 2,
                ppo_epochs: 4,
                init_kl_coef: 0.2,
                target_kl: Some(6.0),
                swap_period: 5,
                reset_state_on_swap: false,
                seed: 0,
                iterations: 10,
                checkpoint_every: 5,
                samples_every: 1,
                lr: 1e-5,
            }
        }
    }

    impl RunConfigFile for Cfg {
        const APP: &'static str = "test";
        fn resolve(&mut self) {}
        fn validate(&self) -> Result<(), ConfigError> {
            check_batching(
                self.algo,
                self.batch_size,
                self.mini_batch_size,
                1,
                self.swap_period,
            )?;
            check_positive("lr", self.lr)
        }
        fn shared_mut(&mut self) -> SharedSettingsMut<'_> {
            crate::shared_settings_mut!(self)
        }
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lmrl-runs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn flags_override_the_config_file_which_overrides_the_defaults() {
        let d = tmp("settings-fresh");
        let file = d.join("c.toml");
        std::fs::write(&file, "seed = 3\nbatch_size = 4\nppo_epochs = 2\n").unwrap();
        let run = RunArgs {
            config: Some(file),
            iterations: Some(7),
            ..RunArgs::default()
        };
        let ppo = PpoArgs {
            algo: Some(Algo::Ppo),
            batch_size: Some(6),
            fixed_kl: true,
            ..PpoArgs::default()
        };
        let (cfg, out, resume) = resolve_run::<Cfg>(&run, &ppo, vec![], |c| c.lr = 2e-5).unwrap();
        assert!(!resume);
        assert_eq!(out, PathBuf::from("runs/test-ppo-3"));
        let want = Cfg {
            algo: Algo::Ppo,
            batch_size: 6,
            ppo_epochs: 2,
            target_kl: None,
            seed: 3,
            iterations: 7,
            lr: 2e-5,
            ..Cfg::default()
        };
        assert_eq!(cfg, want);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn resume_reads_the_runs_config_and_refuses_setting_flags() {
        let d = tmp("settings-resume");
        std::fs::write(d.join(CONFIG_FILE), "seed = 9\n").unwrap();
        let run = RunArgs {
            resume: Some(d.clone()),
            iterations: Some(20),
            samples_every: Some(4),
            ..RunArgs::default()
        };
        let (cfg, out, resume) =
            resolve_run::<Cfg>(&run, &PpoArgs::default(), vec![], |_| unreachable!()).unwrap();
        assert!(resume);
        assert_eq!(out, d);
        assert_eq!((cfg.seed, cfg.iterations, cfg.samples_every), (9, 20, 4));
        let ppo = PpoArgs {
            lr: Some(0.1),
            ..PpoArgs::default()
        };
        let e = resolve_run::<Cfg>(&run, &ppo, vec!["--model"], |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("may be given, not --lr, --model"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_files_and_settings_are_named() {
        let d = tmp("settings-bad");
        let file = d.join("c.toml");
        std::fs::write(&file, "batchsize = 3\n").unwrap();
        let run = RunArgs {
            config: Some(file.clone()),
            ..RunArgs::default()
        };
        let e = resolve_run::<Cfg>(&run, &PpoArgs::default(), vec![], |_| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("invalid settings in {}", file.display())
        );
        let run = RunArgs::default();
        let ppo = PpoArgs {
            mini_batch_size: Some(16),
            ..PpoArgs::default()
        };
        let e = resolve_run::<Cfg>(&run, &ppo, vec![], |_| {}).unwrap_err();
        assert!(
            matches!(&e, RunError::Config(c) if c.field == "mini_batch_size"),
            "{e}"
        );
        assert_eq!(
            check_batching(Algo::Ppo, 8, 2, 3, 0).unwrap_err().field,
            "gradient_accumulation_steps"
        );
        assert!(check_batching(Algo::Ppo, 8, 2, 4, 0).is_ok());
        assert_eq!(
            check_batching(Algo::Cory, 8, 2, 4, 0).unwrap_err().field,
            "swap_period"
        );
        assert_eq!(
            check_positive("lr", f64::NAN).unwrap_err().to_string(),
            "invalid setting `lr`: must be a positive number, got NaN"
        );
        assert_eq!(
            check_cadence(1, 1, 1, 0).unwrap_err().field,
            "generation_batch_size"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
