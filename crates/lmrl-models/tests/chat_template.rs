//! Chat templates rendered as transformers renders them (`tests/fixtures/chat-templates`:
//! the published templates of Qwen2.5, Qwen3, Llama 3.2 and Mistral, and what
//! `apply_chat_template` returned for each conversation): byte-identical.
use std::path::{Path, PathBuf};

use lmrl_models::{ChatMessage, ChatTemplate};
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/chat-templates")
}

fn messages(v: &Value) -> Vec<ChatMessage> {
    v.as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let s = |k: &str| m[k].as_str().expect("string").to_string();
            ChatMessage::new(s("role"), s("content"))
        })
        .collect()
}

#[test]
fn published_templates_render_as_transformers_does() {
    let text = std::fs::read_to_string(dir().join("expected.json")).expect("fixture");
    let expected: Value = serde_json::from_str(&text).expect("json");
    let cases = expected["cases"].as_array().expect("cases");
    assert!(cases.len() >= 40, "the fixture covers every template");
    for (i, case) in cases.iter().enumerate() {
        let name = case["template"].as_str().expect("name");
        let path = dir().join(name);
        let source = std::fs::read_to_string(&path).expect("template");
        let bos = case["bos_token"].as_str().expect("bos");
        let eos = case["eos_token"].as_str().expect("eos");
        let t = ChatTemplate::new(source, bos, eos, &path).expect("compiles");
        let extra = case["extra"].as_object().expect("extra").clone();
        let add = case["add_generation_prompt"].as_bool().expect("bool");
        let got = t
            .render_with(&messages(&case["messages"]), add, extra)
            .unwrap_or_else(|e| panic!("case {i} ({name}): {e}"));
        let want = case["rendered"].as_str().expect("rendered");
        assert_eq!(got, want, "case {i}: {name}, add_generation_prompt {add}");
    }
}

/// A template that raises (Mistral's refuses a conversation whose roles do not alternate) is
/// an error naming the template's file, not a panic or a silently wrong prompt.
#[test]
fn a_template_that_raises_is_an_error_naming_the_file() {
    let path = dir().join("mistral-instruct.jinja");
    let source = std::fs::read_to_string(&path).expect("template");
    let t = ChatTemplate::new(source, "<s>", "</s>", &path).expect("compiles");
    let twice = [ChatMessage::user("a"), ChatMessage::user("b")];
    let e = t.render(&twice, true).expect_err("roles must alternate");
    assert!(e.to_string().contains("mistral-instruct.jinja"), "{e}");
    let bad = ChatTemplate::new("{% if %}", "", "", Path::new("bad.jinja"));
    assert!(
        bad.is_err(),
        "a template that does not parse is refused when loaded"
    );
}
