//! Numbers in `config.json` are checked against their domain, and against the weights beside
//! it, before anything is sized from them: a bad value is a typed error naming the file and
//! the field, never an abort in an allocation or a panic inside burn.
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use lmrl_models::{AutoLm, ModelConfig, ModelError};
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmrl-bounds-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A copy of fixture `name` whose `config.json` has `field` set to `value` (written as raw
/// JSON text, so that values serde_json would not produce can be tried too).
fn with_field(name: &str, tag: &str, field: &str, value: &str) -> PathBuf {
    let dir = temp_dir(tag);
    std::fs::copy(
        fixture(name).join("model.safetensors"),
        dir.join("model.safetensors"),
    )
    .unwrap();
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(name).join("config.json")).unwrap())
            .unwrap();
    cfg[field] = json!("__PLACEHOLDER__");
    let text = cfg.to_string().replace("\"__PLACEHOLDER__\"", value);
    std::fs::write(dir.join("config.json"), text).unwrap();
    dir
}

enum Expect {
    /// `ModelError::Config` on `config.json`, its reason containing the text.
    Config(&'static str),
    /// `ModelError::WeightsMismatch` on `model.safetensors` naming this field (which may
    /// differ from the one edited), its reason containing the text.
    Weights(&'static str, &'static str),
}

fn check(name: &str, cases: &[(&str, &str, Expect)]) {
    let device = Device::flex();
    for (i, (field, value, expect)) in cases.iter().enumerate() {
        let dir = with_field(name, &format!("{name}-{i}"), field, value);
        let got = AutoLm::from_pretrained(&dir, &device).map(|_| ());
        match (expect, got) {
            (
                Expect::Config(text),
                Err(ModelError::Config {
                    path,
                    field: f,
                    reason,
                }),
            ) => {
                assert_eq!(path, dir.join("config.json"), "{field} = {value}");
                assert_eq!(&f, field, "{field} = {value}: {reason}");
                assert!(reason.contains(text), "{field} = {value}: {reason}");
                // The config alone (as the apps read it before the weights) agrees.
                let alone = ModelConfig::from_file(&dir.join("config.json"));
                assert!(
                    matches!(&alone, Err(ModelError::Config { field: g, .. }) if g == field),
                    "{field} = {value}: {alone:?}"
                );
            }
            (
                Expect::Weights(want, text),
                Err(ModelError::WeightsMismatch {
                    path,
                    field: f,
                    reason,
                }),
            ) => {
                assert_eq!(path, dir.join("model.safetensors"), "{field} = {value}");
                assert_eq!(&f, want, "{field} = {value}: {reason}");
                assert!(reason.contains(text), "{field} = {value}: {reason}");
            }
            (_, other) => panic!("{name}: {field} = {value}: unexpected {other:?}"),
        }
    }
}

#[test]
fn gpt2_config_values_out_of_domain_are_named() {
    use Expect::*;
    check(
        "gpt2-tiny",
        &[
            // The layer count that used to abort the process in `Vec::with_capacity`.
            ("n_layer", "2147483648", Config("outside 1..=65536")),
            ("n_layer", "0", Config("outside 1..=")),
            (
                "n_layer",
                "-1",
                Config("expected a non-negative integer, found -1"),
            ),
            ("n_layer", "2.5", Config("expected a non-negative integer")),
            (
                "n_layer",
                "\"2\"",
                Config("expected a non-negative integer"),
            ),
            ("n_layer", "18446744073709551615", Config("outside 1..=")),
            ("n_embd", "0", Config("outside 1..=")),
            ("n_embd", "1099511627776", Config("outside 1..=")),
            ("n_head", "0", Config("outside 1..=64")),
            ("n_head", "3", Config("3 must divide n_embd 64")),
            ("n_head", "128", Config("outside 1..=64")),
            ("n_inner", "0", Config("outside 1..=")),
            ("n_inner", "1099511627776", Config("outside 1..=")),
            ("n_positions", "0", Config("outside 1..=")),
            ("n_positions", "1099511627776", Config("outside 1..=")),
            ("vocab_size", "0", Config("outside 1..=")),
            ("layer_norm_epsilon", "-1", Config("finite number > 0")),
            ("layer_norm_epsilon", "0", Config("finite number > 0")),
            (
                "layer_norm_epsilon",
                "\"1e-5\"",
                Config("expected a number"),
            ),
            (
                "activation_function",
                "\"relu\"",
                Config("`relu` is not supported"),
            ),
            ("activation_function", "7", Config("expected a string")),
            (
                "eos_token_id",
                "5000",
                Config("outside the vocabulary of 1000"),
            ),
            ("bos_token_id", "-1", Config("expected a token id")),
            ("bos_token_id", "4294967296", Config("expected a token id")),
            // In their domains, but not the weights in model.safetensors.
            ("n_layer", "3", Weights("n_layer", "no tensors for layer 2")),
            (
                "vocab_size",
                "1001",
                Weights("vocab_size", "found [1000, 64]"),
            ),
            (
                "n_positions",
                "128",
                Weights("n_positions", "found [64, 64]"),
            ),
            ("n_embd", "32", Weights("n_embd", "found [1000, 64]")),
        ],
    );
}

#[test]
fn llama_config_values_out_of_domain_are_named() {
    use Expect::*;
    check(
        "llama-tiny",
        &[
            (
                "num_hidden_layers",
                "2147483648",
                Config("outside 1..=65536"),
            ),
            ("num_hidden_layers", "0", Config("outside 1..=")),
            (
                "num_hidden_layers",
                "-3",
                Config("expected a non-negative integer"),
            ),
            ("hidden_size", "0", Config("outside 1..=")),
            ("hidden_size", "1099511627776", Config("outside 1..=")),
            ("intermediate_size", "0", Config("outside 1..=")),
            ("intermediate_size", "1099511627776", Config("outside 1..=")),
            ("num_attention_heads", "0", Config("outside 1..=")),
            (
                "num_key_value_heads",
                "3",
                Config("3 must divide num_attention_heads 4"),
            ),
            ("num_key_value_heads", "0", Config("must divide")),
            ("head_dim", "15", Config("15 must be even")),
            ("head_dim", "0", Config("outside 1..=")),
            ("max_position_embeddings", "0", Config("outside 1..=")),
            (
                "max_position_embeddings",
                "1099511627776",
                Config("outside 1..="),
            ),
            ("vocab_size", "0", Config("outside 1..=")),
            // The epsilon that used to panic inside burn's RMSNorm.
            ("rms_norm_eps", "-1", Config("finite number > 0")),
            ("rms_norm_eps", "0", Config("finite number > 0")),
            ("rms_norm_eps", "[1e-5]", Config("expected a number")),
            ("rope_theta", "0", Config("finite number > 0")),
            ("rope_theta", "-10000", Config("finite number > 0")),
            ("rope_theta", "true", Config("expected a number")),
            (
                "eos_token_id",
                "1000",
                Config("outside the vocabulary of 1000"),
            ),
            ("tie_word_embeddings", "1", Config("expected a boolean")),
            (
                "num_hidden_layers",
                "3",
                Weights("num_hidden_layers", "no tensors for layer 2"),
            ),
            (
                "vocab_size",
                "1001",
                Weights("vocab_size", "found [1000, 64]"),
            ),
            // head_dim is explicit in the fixture, so 32 is a valid width on its own.
            (
                "hidden_size",
                "32",
                Weights("hidden_size", "found [1000, 64]"),
            ),
        ],
    );
}

#[test]
fn a_number_beyond_f64_is_a_typed_error() {
    // serde_json refuses it (Format) or reads infinity (Config): either way, no panic.
    for (name, field) in [
        ("gpt2-tiny", "layer_norm_epsilon"),
        ("llama-tiny", "rms_norm_eps"),
    ] {
        let dir = with_field(name, &format!("{name}-inf"), field, "1e400");
        match AutoLm::from_pretrained(&dir, &Device::flex()) {
            Err(ModelError::Format { path, .. }) => assert_eq!(path, dir.join("config.json")),
            Err(ModelError::Config { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{name}: {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn shard_index_naming_a_path_is_refused() {
    let dir = temp_dir("shard-path");
    std::fs::copy(
        fixture("gpt2-tiny").join("config.json"),
        dir.join("config.json"),
    )
    .unwrap();
    let index = json!({"weight_map": {"wte.weight": "../gpt2-tiny/model.safetensors"}});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    match AutoLm::from_pretrained(&dir, &Device::flex()) {
        Err(ModelError::Format { path, reason, .. }) => {
            assert!(path.ends_with("model.safetensors.index.json"));
            assert!(reason.contains("not a file name"), "{reason}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}
