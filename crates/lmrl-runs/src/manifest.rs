//! Checksums of a checkpoint's files: `checksums.xxh128` in the checkpoint directory, one line
//! per file, `HASH  PATH` (XXH3-128 in hex, the path relative to the checkpoint, `/`-separated)
//! — the format of `xxhsum -H2`, so `xxhsum -c checksums.xxh128` checks a checkpoint by hand.
//!
//! [`write_manifest`] is called by [`crate::CheckpointDir::save`] on the filled temporary
//! directory before it is synced and renamed, so the manifest is part of the same atomic
//! checkpoint. [`verify`] checks a checkpoint (or one copy in it) against its manifest before
//! it is loaded: a changed, cut or missing file is an error naming it. Checkpoints written
//! before checksums existed have no manifest; they load as before ([`Verified::NoManifest`]).
use std::io::Read;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::Xxh3;

use crate::error::{Result, RunError, io};

/// The manifest's file name in a checkpoint directory.
pub const MANIFEST_FILE: &str = "checksums.xxh128";

/// Bytes read per call while hashing.
const CHUNK: usize = 8 << 20;

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// Every file of the manifest (under the part asked for) has its recorded checksum.
    Checked { files: usize, bytes: u64 },
    /// The checkpoint has no manifest (written before checksums were): nothing was checked.
    NoManifest,
}

/// XXH3-128 of the file at `path` and its length.
pub fn hash_file(path: &Path) -> Result<(u128, u64)> {
    let mut f = std::fs::File::open(path).map_err(io("open", path))?;
    let mut h = Xxh3::new();
    let mut buf = vec![0u8; CHUNK];
    let mut len = 0u64;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io("read", path)(e)),
        };
        h.update(&buf[..n]);
        len += n as u64;
    }
    Ok((h.digest128(), len))
}

/// Every regular file under `dir`, as paths relative to it, sorted; the manifest itself left out.
fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        let here = root.join(rel);
        for entry in std::fs::read_dir(&here).map_err(io("read", &here))? {
            let entry = entry.map_err(io("read", &here))?;
            let rel = rel.join(entry.file_name());
            let kind = entry.file_type().map_err(io("read", &entry.path()))?;
            if kind.is_dir() {
                walk(root, &rel, out)?;
            } else if kind.is_file() && rel != Path::new(MANIFEST_FILE) {
                out.push(rel);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, Path::new(""), &mut out)?;
    out.sort();
    Ok(out)
}

fn manifest_path(rel: &Path) -> String {
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Hashes every file under `dir` and writes `dir/checksums.xxh128`. Returns the number of
/// files and bytes hashed. The caller syncs the directory (as `CheckpointDir::save` does).
pub fn write_manifest(dir: &Path) -> Result<(usize, u64)> {
    let mut text = String::new();
    let mut bytes = 0;
    let files = files_under(dir)?;
    for rel in &files {
        let (hash, len) = hash_file(&dir.join(rel))?;
        bytes += len;
        text.push_str(&format!("{hash:032x}  {}\n", manifest_path(rel)));
    }
    let path = dir.join(MANIFEST_FILE);
    std::fs::write(&path, text).map_err(io("write", &path))?;
    Ok((files.len(), bytes))
}

/// The manifest's entries, `(relative path, hash)`; errors name the manifest and line.
fn read_manifest(path: &Path) -> Result<Vec<(String, u128)>> {
    let text = std::fs::read_to_string(path).map_err(io("read", path))?;
    let bad = |line: usize, reason: &str| RunError::Format {
        path: path.to_path_buf(),
        reason: format!("line {line}: {reason}"),
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let (hash, file) = line
            .split_once("  ")
            .ok_or_else(|| bad(i + 1, "expected `HASH  PATH`"))?;
        if hash.len() != 32 {
            return Err(bad(i + 1, "expected a 32-digit XXH3-128 hash"));
        }
        let hash = u128::from_str_radix(hash, 16)
            .map_err(|_| bad(i + 1, "expected a 32-digit XXH3-128 hash"))?;
        let escapes = file
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
        if escapes || file.starts_with('/') {
            return Err(bad(i + 1, "a path must stay inside the checkpoint"));
        }
        out.push((file.to_string(), hash));
    }
    Ok(out)
}

/// Checks the files of checkpoint `ckpt` whose paths start with `part` (`""` for all of
/// them; `"llm1"` for one copy) against its manifest. A file whose bytes differ, or that is
/// missing, is an error naming it; a checkpoint without a manifest is [`Verified::NoManifest`].
pub fn verify(ckpt: &Path, part: &str) -> Result<Verified> {
    let manifest = ckpt.join(MANIFEST_FILE);
    if !manifest.is_file() {
        return Ok(Verified::NoManifest);
    }
    let prefix = match part {
        "" => String::new(),
        p => format!("{}/", p.trim_end_matches('/')),
    };
    let (mut files, mut bytes) = (0, 0);
    for (file, want) in read_manifest(&manifest)? {
        if !file.starts_with(&prefix) {
            continue;
        }
        let path = ckpt.join(&file);
        if !path.is_file() {
            return Err(RunError::Checksum {
                path,
                reason: format!("is missing (listed in {})", manifest.display()),
            });
        }
        let (got, len) = hash_file(&path)?;
        if got != want {
            return Err(RunError::Checksum {
                path,
                reason: format!(
                    "does not match its checksum in {} (XXH3-128 {got:032x}, recorded \
                     {want:032x}): the file was changed or damaged after it was written",
                    manifest.display()
                ),
            });
        }
        files += 1;
        bytes += len;
    }
    Ok(Verified::Checked { files, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh3_128_matches_the_reference_implementation() {
        // The reference: the C library (libxxhash 0.8.1, `XXH3_128bits`, canonical form).
        let (h, n) = {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("f");
            std::fs::write(&p, b"checkpoint").unwrap();
            hash_file(&p).unwrap()
        };
        assert_eq!(n, 10);
        assert_eq!(format!("{h:032x}"), REFERENCE_CHECKPOINT);
        assert_eq!(
            format!("{:032x}", xxhash_rust::xxh3::xxh3_128(b"")),
            "99aa06d3014798d86001c324468d497f"
        );
    }

    /// libxxhash's `XXH3_128bits("checkpoint")`, high 64 bits first.
    const REFERENCE_CHECKPOINT: &str = "019d7fae7f707e5802ef56a7e542ab2b";

    fn checkpoint(dir: &Path) -> PathBuf {
        let c = dir.join("iter-000002");
        std::fs::create_dir_all(c.join("llm1")).unwrap();
        std::fs::create_dir_all(c.join("llm2")).unwrap();
        std::fs::write(c.join("state.toml"), "iterations = 2\n").unwrap();
        std::fs::write(c.join("llm1/model.safetensors"), vec![7u8; 3 * CHUNK + 5]).unwrap();
        std::fs::write(c.join("llm2/model.safetensors"), b"llm2 weights").unwrap();
        c
    }

    #[test]
    fn a_written_manifest_verifies_and_names_a_changed_file() {
        let dir = tempfile::tempdir().unwrap();
        let c = checkpoint(dir.path());
        assert_eq!(
            write_manifest(&c).unwrap(),
            (3, 3 * CHUNK as u64 + 5 + 12 + 15)
        );
        let text = std::fs::read_to_string(c.join(MANIFEST_FILE)).unwrap();
        let names: Vec<&str> = text.lines().map(|l| &l[34..]).collect();
        assert_eq!(
            names,
            [
                "llm1/model.safetensors",
                "llm2/model.safetensors",
                "state.toml"
            ]
        );
        assert_eq!(
            verify(&c, "").unwrap(),
            Verified::Checked {
                files: 3,
                bytes: 3 * CHUNK as u64 + 32
            }
        );
        // Four bytes changed in the middle of the large file, its length kept.
        let big = c.join("llm1/model.safetensors");
        let mut bytes = std::fs::read(&big).unwrap();
        bytes[2 * CHUNK + 1..2 * CHUNK + 5].copy_from_slice(b"oops");
        std::fs::write(&big, &bytes).unwrap();
        let e = verify(&c, "").unwrap_err().to_string();
        assert!(
            e.contains("llm1/model.safetensors") && e.contains("checksum"),
            "{e}"
        );
        // The other copy alone still verifies; the damaged one alone does not.
        assert_eq!(
            verify(&c, "llm2").unwrap(),
            Verified::Checked {
                files: 1,
                bytes: 12
            }
        );
        assert!(verify(&c, "llm1").is_err());
        // A missing file is named.
        std::fs::remove_file(c.join("llm2/model.safetensors")).unwrap();
        let e = verify(&c, "llm2").unwrap_err().to_string();
        assert!(
            e.contains("llm2/model.safetensors") && e.contains("missing"),
            "{e}"
        );
    }

    #[test]
    fn no_manifest_is_said_and_a_bad_manifest_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let c = checkpoint(dir.path());
        assert_eq!(verify(&c, "").unwrap(), Verified::NoManifest);
        for bad in [
            "zz  state.toml\n",
            "00000000000000000000000000000000 state.toml\n",
            "00000000000000000000000000000000  ../../etc/passwd\n",
        ] {
            std::fs::write(c.join(MANIFEST_FILE), bad).unwrap();
            let e = verify(&c, "").unwrap_err().to_string();
            assert!(e.contains(MANIFEST_FILE) && e.contains("line 1"), "{e}");
        }
    }
}
