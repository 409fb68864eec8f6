//! Code common to the integration tests (not a test target itself).
#![allow(dead_code)]
use std::path::PathBuf;

/// `tests/fixtures/<rel>` at the workspace root.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

pub fn read_json(rel: &str) -> serde_json::Value {
    let p = fixture(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A named asset from the project's cache, fetched from its registry package when missing
/// (see `lmrl_data::assets`; `LMRL_CACHE` moves the cache, `LMRL_ASSET_<NAME>` points at a file).
pub fn asset(name: &str) -> PathBuf {
    lmrl_data::AssetCache::from_env()
        .and_then(|c| c.resolve(name))
        .unwrap_or_else(|e| panic!("asset `{name}`: {e}"))
}
