//! `imdb-app`: with no arguments it trains CORY on SmolLM2-135M with the IMDB bag-of-words
//! classifier as reward, fetching every asset through the asset cache.
use std::process::ExitCode;

fn main() -> ExitCode {
    let matches = imdb_app::cli::command().get_matches();
    match imdb_app::run(&matches) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
