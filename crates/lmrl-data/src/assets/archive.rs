//! Reading package archives: wheels are zip files, sdists and npm packages gzip-compressed tar
//! files.
//!
//! Output paths never come from the archive: an entry is only compared with the member names of
//! the asset table, and what it holds is written to `<asset dir>/<dest>`, with `dest` taken from
//! the table. An entry named `../../x` or `/etc/x` therefore cannot place a file anywhere.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use super::AssetError;
use super::cache::write_verified;
use super::catalogue::{AssetFile, Package};

/// Archive formats the extractor reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ArchiveKind {
    Zip,
    TarGz,
}

impl ArchiveKind {
    pub(super) fn from_name(name: &str) -> Option<Self> {
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

/// The archive of `package` in `dir`, if there is one.
pub(super) fn find_archive(package: &Package, dir: &Path) -> Result<Option<PathBuf>, AssetError> {
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
pub(super) fn extract(
    archive: &Path,
    files: &[&AssetFile],
    asset_dir: &Path,
) -> Result<(), AssetError> {
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
                log::info!("extracting {} -> {}", f.member, f.dest);
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
                    log::info!("extracting {} -> {}", f.member, f.dest);
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
