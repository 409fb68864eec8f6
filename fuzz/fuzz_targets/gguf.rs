//! Arbitrary bytes as a `.gguf` file: its metadata, the Llama configuration made of it, the
//! whole model (tensors dequantised) and its tokenizer must each end in a value or an error.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lmrl_models::LmTokenizer;
use lmrl_models::gguf::{GgufMetadata, llama_config, read_gguf};

#[path = "input.rs"]
mod input;

fuzz_target!(|data: &[u8]| {
    let p = input::write("model.gguf", data);
    if let Ok(meta) = GgufMetadata::read(&p) {
        let _ = llama_config(&meta);
        let _ = LmTokenizer::load_for_model(&p);
        let _ = read_gguf(&p);
    }
});
