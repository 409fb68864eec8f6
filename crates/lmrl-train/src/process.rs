//! What an app sets up for its whole process, first thing in `main` and only because it asks:
//! the heap settings ([`lmrl_models::HostMemory`]), how checkpoint files are written
//! ([`lmrl_models::WriteMode`]), and a logger that prints the libraries' messages to stderr.
//! Each is read from an environment variable, so that a run can change it without a flag on
//! every subcommand; the library crates change none of them on their own.
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use lmrl_models::{AppliedHostMemory, HostMemory, WriteMode};

use crate::error::{Result, TrainError};

/// The heap settings ([`HostMemory::parse`]: `system`, `retain`, `retain,huge-pages`,
/// `retain,huge-pages=SIZE`).
pub const HOST_MEMORY_VAR: &str = "LMRL_HOST_MEMORY";

/// The heap settings of an app when [`HOST_MEMORY_VAR`] is unset: freed memory kept (on the
/// apps' runs it saves the kernel re-zeroing every step's tensors) in transparent huge pages,
/// half of the memory the process may use (physical memory or its cgroup's limit): on a quiet
/// 2-core host generation ran ~10 % faster with them than without (docs/benchmarks.md,
/// "The renovated framework against 96bcfd2").
pub const DEFAULT_HOST_MEMORY: &str = "retain,huge-pages";

/// How checkpoint files are written: `buffered` (the default) or `direct` (`O_DIRECT`, past
/// the page cache).
pub const WRITE_MODE_VAR: &str = "LMRL_WRITE_MODE";

/// The level of this workspace's messages that reach stderr: `off`, `error`, `warn`, `info`
/// (the default), `debug` or `trace`. Other crates' messages are shown from `warn` up.
pub const LOG_VAR: &str = "LMRL_LOG";

/// Process-wide settings an app chooses from the environment ([`ProcessSettings::from_env`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessSettings {
    pub host_memory: HostMemory,
    pub write_mode: WriteMode,
    /// The level of this workspace's log messages printed by [`init_logger`].
    pub log_level: log::LevelFilter,
}

impl ProcessSettings {
    /// The settings [`HOST_MEMORY_VAR`], [`WRITE_MODE_VAR`] and [`LOG_VAR`] choose, with the apps'
    /// defaults for what is unset; a value that cannot be read is an error naming it.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }

    /// [`ProcessSettings::from_env`] with the variables read through `get`.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        let host = get(HOST_MEMORY_VAR);
        let host_memory = HostMemory::parse(host.as_deref().unwrap_or(DEFAULT_HOST_MEMORY))
            .map_err(|e| TrainError::Environment {
                var: HOST_MEMORY_VAR,
                value: host.clone().unwrap_or_default(),
                reason: e.to_string(),
            })?;
        let write_mode = match get(WRITE_MODE_VAR).as_deref().map(str::trim) {
            None | Some("" | "buffered") => WriteMode::Buffered,
            Some("direct") => WriteMode::Direct,
            Some(other) => {
                return Err(TrainError::Environment {
                    var: WRITE_MODE_VAR,
                    value: other.to_string(),
                    reason: "expected buffered or direct".into(),
                });
            }
        };
        let log_level = match get(LOG_VAR) {
            None => log::LevelFilter::Info,
            Some(v) => v.trim().parse().map_err(|_| TrainError::Environment {
                var: LOG_VAR,
                value: v.clone(),
                reason: "expected off, error, warn, info, debug or trace".into(),
            })?,
        };
        Ok(Self {
            host_memory,
            write_mode,
            log_level,
        })
    }

    /// Applies both to this process; call it before any thread allocates.
    pub fn apply(&self) -> AppliedHostMemory {
        let applied = self.host_memory.apply();
        lmrl_models::set_write_mode(self.write_mode);
        applied
    }
}

/// What the apps call first in `main`: [`ProcessSettings::from_env`] applied, then
/// [`init_logger`]. A variable that cannot be read is an error and changes nothing.
pub fn init_process() -> Result<AppliedHostMemory> {
    let settings = ProcessSettings::from_env()?;
    let applied = settings.apply();
    init_logger(settings.log_level);
    log::debug!("{settings:?}: {applied:?}");
    Ok(applied)
}

/// Prints log messages to stderr: this workspace's crates' from `level` up, as
/// `lmrl-data: fetching …` or `lmrl-data: warning: …`; other crates' warnings and errors. Does
/// nothing when the program has a logger already.
pub fn init_logger(level: log::LevelFilter) {
    static LOGGER: StderrLogger = StderrLogger;
    WORKSPACE_LEVEL.store(level as usize, Ordering::Relaxed);
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level.max(log::LevelFilter::Warn));
    }
}

/// [`init_logger`]'s level for this workspace's crates, as a `log::LevelFilter` number.
static WORKSPACE_LEVEL: AtomicUsize = AtomicUsize::new(log::LevelFilter::Info as usize);

struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, meta: &log::Metadata<'_>) -> bool {
        let limit = match meta.target().starts_with("lmrl") {
            true => WORKSPACE_LEVEL.load(Ordering::Relaxed),
            false => log::LevelFilter::Warn as usize,
        };
        meta.level() as usize <= limit
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let source = record.target().split("::").next().unwrap_or_default();
        let source = source.replace('_', "-");
        let kind = match record.level() {
            log::Level::Error => "error: ",
            log::Level::Warn => "warning: ",
            _ => "",
        };
        // One write of the whole line, so lines of threads do not interleave.
        let line = format!("{source}: {kind}{}\n", record.args());
        let _ = std::io::stderr().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use lmrl_models::HugePageHeap;

    fn settings(pairs: &[(&str, &str)]) -> Result<ProcessSettings> {
        ProcessSettings::from_lookup(&|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn unset_variables_give_the_apps_defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.write_mode, WriteMode::Buffered);
        assert_eq!(s.log_level, log::LevelFilter::Info);
        assert_eq!(
            s.host_memory,
            HostMemory {
                retain_freed: true,
                huge_pages: HugePageHeap::HalfOfLimit
            }
        );
    }

    #[test]
    fn each_variable_chooses_its_setting() {
        let s = settings(&[
            (HOST_MEMORY_VAR, "retain,huge-pages=2G"),
            (WRITE_MODE_VAR, "direct"),
        ])
        .unwrap();
        assert_eq!(s.host_memory.huge_pages, HugePageHeap::Bytes(2 << 30));
        assert_eq!(s.write_mode, WriteMode::Direct);
        let s = settings(&[
            (HOST_MEMORY_VAR, "system"),
            (WRITE_MODE_VAR, "buffered"),
            (LOG_VAR, "warn"),
        ])
        .unwrap();
        assert_eq!(s.host_memory, HostMemory::SYSTEM);
        assert_eq!(s.write_mode, WriteMode::Buffered);
        assert_eq!(s.log_level, log::LevelFilter::Warn);
    }

    /// At the default level: this workspace's progress, other crates' warnings only.
    #[test]
    fn the_logger_shows_the_workspace_from_info_and_others_from_warn() {
        use log::Log;
        let shown = |target: &str, level| {
            StderrLogger.enabled(&log::Metadata::builder().target(target).level(level).build())
        };
        assert!(shown("lmrl_data::assets::cache", log::Level::Info));
        assert!(!shown("lmrl_data::assets::cache", log::Level::Debug));
        assert!(!shown("burn_core::module", log::Level::Info));
        assert!(shown("burn_core::module", log::Level::Warn));
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        let e = settings(&[(LOG_VAR, "loud")]).unwrap_err();
        assert!(e.to_string().contains("LMRL_LOG=\"loud\""), "{e}");
        let e = settings(&[(WRITE_MODE_VAR, "odirect")]).unwrap_err();
        assert!(e.to_string().contains("LMRL_WRITE_MODE=\"odirect\""), "{e}");
        let e = settings(&[(HOST_MEMORY_VAR, "huge-pages")]).unwrap_err();
        assert!(
            e.to_string().contains("LMRL_HOST_MEMORY=\"huge-pages\""),
            "{e}"
        );
        assert!(e.to_string().contains("needs retain"), "{e}");
    }
}
