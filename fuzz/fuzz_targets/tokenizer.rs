//! Arbitrary tokenizer files: the first byte picks `tokenizer.json` (even) or GPT-2's
//! `vocab.json` + `merges.txt` (odd, the rest split at the first NUL). A tokenizer that loads
//! must encode and decode text without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lmrl_models::LmTokenizer;

#[path = "input.rs"]
mod input;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let dir = input::dir().join(if pick % 2 == 0 { "tj" } else { "gpt2" });
    if pick % 2 == 0 {
        input::write("tj/tokenizer.json", rest);
    } else {
        let cut = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        input::write("gpt2/vocab.json", &rest[..cut]);
        input::write("gpt2/merges.txt", rest.get(cut + 1..).unwrap_or_default());
    }
    if let Ok(tok) = LmTokenizer::load_for_model(&dir) {
        if let Ok(ids) = tok.encode("Hello world, 12 apples!") {
            let _ = tok.decode(&ids);
        }
        let _ = tok.decode(&[0, 1, 2, u32::MAX]);
    }
});
