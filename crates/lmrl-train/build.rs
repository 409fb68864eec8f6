//! Records the commit the crate is built from, so that every run directory can say which code
//! made it (`config.toml`'s first line). Outside a git checkout (a crates.io download) it
//! records nothing.
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    // The commit only: edits not yet committed are not tracked (that would rebuild the crate
    // at every `git add`).
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    println!("cargo:rustc-env=LMRL_SOURCE_COMMIT={commit}");
    // Rebuild the value when HEAD moves or the branch it names gets a new commit.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        for f in ["HEAD", "packed-refs"] {
            println!("cargo:rerun-if-changed={dir}/{f}");
        }
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
    }
}
