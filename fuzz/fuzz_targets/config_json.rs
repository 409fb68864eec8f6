//! Arbitrary bytes as a model's `config.json`: parsed (when it is JSON) into a model
//! configuration, whose every number must be bounded before anything is sized from it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lmrl_models::ModelConfig;

#[path = "input.rs"]
mod input;

fuzz_target!(|data: &[u8]| {
    let p = input::write("config.json", data);
    if let Ok(c) = ModelConfig::from_file(&p) {
        let _ = (c.vocab_size(), c.max_positions(), c.eos_token_id());
    }
});
