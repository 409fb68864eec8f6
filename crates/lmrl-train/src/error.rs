//! Errors of the training loop; each names the file, setting or iteration involved.
use std::path::PathBuf;

/// What a task's own code may fail with (data, templates, evaluation).
pub type TaskError = Box<dyn std::error::Error + Send + Sync>;

/// Errors of settings resolution and of a training run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// A setting out of its domain or contradicting another; `field` is the `config.toml` key.
    #[error("invalid setting `{field}`: {reason}")]
    Setting { field: String, reason: String },
    #[error("cannot read {path}")]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `config.toml` that is not TOML, has unknown keys or values of the wrong type.
    #[error("invalid settings in {path}: {reason}")]
    ConfigSyntax { path: PathBuf, reason: String },
    /// `--resume` given with flags that would change what the run computes.
    #[error(
        "--resume continues {path} with its own config.toml; only --iterations, \
         --checkpoint-every, --keep-checkpoints, --samples-every, --device, --llm2-device and --cache-dir may be given, not {flags}"
    )]
    ResumeSettings { path: PathBuf, flags: String },
    /// A run directory that cannot be started or resumed as asked.
    #[error("{path} {reason}")]
    Run { path: PathBuf, reason: String },
    #[error("cannot locate the asset cache")]
    AssetCache(#[source] lmrl_data::AssetError),
    #[error("`{name}` is neither an existing path nor an asset that could be fetched")]
    Asset {
        name: String,
        #[source]
        source: lmrl_data::AssetError,
    },
    #[error("cannot load the model {path}")]
    Model {
        path: PathBuf,
        #[source]
        source: lmrl_models::ModelError,
    },
    #[error("no tokenizer for the model {path}")]
    Tokenizer {
        path: PathBuf,
        #[source]
        source: lmrl_models::ModelError,
    },
    /// A tokenizer that can produce ids past the model's embedding table.
    #[error(
        "the tokenizer of {path} has {tokenizer} tokens but the model's vocabulary has only \
         {model}: they do not belong together"
    )]
    VocabularyMismatch {
        path: PathBuf,
        tokenizer: usize,
        model: usize,
    },
    /// The device asked for does not exist or its backend is not compiled in.
    #[error("device `{spec}`: {reason}")]
    Device { spec: String, reason: String },
    /// A rank of a data-parallel run failed (its error, or the collective that saw it fail).
    #[error("rank {rank} of {world} failed: {reason}")]
    Rank {
        rank: usize,
        world: usize,
        reason: String,
    },
    /// Restoring a learner from a checkpoint failed.
    #[error("cannot restore {what} from {path}")]
    Restore {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An iteration failed. `iteration` counts from 0 (as `metrics.csv` and `samples.jsonl`
    /// do); the message counts from 1, as the progress lines (`it 2/3`) do.
    #[error("iteration {}: {what} failed", .iteration + 1)]
    Iteration {
        iteration: usize,
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The task's own code failed.
    #[error("{what}")]
    Task {
        what: String,
        #[source]
        source: TaskError,
    },
    /// A file of a checkpoint or a run directory that could not be written.
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The stop-signal handler could not be installed (the program has one already, or the
    /// system refused).
    #[error("cannot handle stop signals (SIGINT, SIGTERM, SIGHUP): {reason}")]
    StopHandler { reason: String },
    /// An environment variable with a value that cannot be used.
    #[error("environment variable {var}={value:?}: {reason}")]
    Environment {
        var: &'static str,
        value: String,
        reason: String,
    },
    #[error(transparent)]
    Rl(#[from] lmrl_rl::RlError),
    #[error(transparent)]
    Runs(#[from] lmrl_runs::RunError),
    #[error(transparent)]
    ModelIo(#[from] lmrl_models::ModelError),
}

/// Result alias of this crate.
pub type Result<T, E = TrainError> = std::result::Result<T, E>;

/// A setting error naming the `config.toml` key `field`.
pub fn setting(field: impl Into<String>, reason: impl Into<String>) -> TrainError {
    TrainError::Setting {
        field: field.into(),
        reason: reason.into(),
    }
}

/// A model-crate error of a save: `lmrl_models::ModelError::Io` says "cannot read" whatever
/// the operation was, and on a save every file operation is a write.
pub(crate) fn saving(e: lmrl_models::ModelError) -> TrainError {
    match e {
        lmrl_models::ModelError::Io { path, source } => TrainError::Write { path, source },
        e => TrainError::ModelIo(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_of_a_save_says_write_with_the_reason_once() {
        let e = saving(lmrl_models::ModelError::Io {
            path: "/r/checkpoints/.tmp-iter-000001-7/policy/model.safetensors".into(),
            source: std::io::Error::from_raw_os_error(30),
        });
        let t = chain(&e);
        assert!(
            t.starts_with(
                "cannot write /r/checkpoints/.tmp-iter-000001-7/policy/model.safetensors: "
            ),
            "{t}"
        );
        assert_eq!(t.matches("(os error 30)").count(), 1, "{t}");
    }
}

/// A library configuration error as a setting error naming the `config.toml` key
/// `section.field`.
pub fn in_section(section: &str, e: lmrl_rl::RlError) -> TrainError {
    match e {
        lmrl_rl::RlError::Config { field, reason } => setting(format!("{section}.{field}"), reason),
        other => setting(section, other.to_string()),
    }
}

/// An error and its causes on one line (`a: b: c`), each cause once: a cause whose text is
/// already there is left out, and one that repeats the text before it (a library that puts
/// its source into its own message) replaces that text.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        let last = parts.last_mut().expect("starts with one");
        if t.contains(last.as_str()) {
            *last = t;
        } else if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        cur = c.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod chain_tests {
    use super::*;

    #[derive(Debug)]
    struct E(String, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    fn e(parts: &[&str]) -> E {
        parts
            .iter()
            .rev()
            .fold(None, |inner, p| Some(E(p.to_string(), inner.map(Box::new))))
            .unwrap()
    }

    #[test]
    fn every_cause_is_shown_once() {
        let os = "Read-only file system (os error 30)";
        assert_eq!(
            chain(&e(&["cannot write /r/config.toml", os])),
            format!("cannot write /r/config.toml: {os}")
        );
        // A library that repeats its source in its message, under a context that names the
        // file too.
        assert_eq!(
            chain(&e(&[
                "cannot load the model /m",
                &format!("cannot read /m/config.json: {os}"),
                os
            ])),
            format!("cannot load the model /m: cannot read /m/config.json: {os}")
        );
        assert_eq!(
            chain(&e(&[
                "cannot read /m",
                &format!("cannot read /m: {os}"),
                os
            ])),
            format!("cannot read /m: {os}")
        );
    }
}
