//! Arbitrary bytes as a `model.safetensors` file (header length, JSON header, offsets, dtypes,
//! shapes, data): read into a tensor map, a value or an error.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lmrl_models::TensorMap;

#[path = "input.rs"]
mod input;

fuzz_target!(|data: &[u8]| {
    let p = input::write("model.safetensors", data);
    let _ = TensorMap::from_safetensors(&p);
});
