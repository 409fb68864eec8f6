//! Chat templates: the Jinja template a model ships in `tokenizer_config.json` (or
//! `chat_template.jinja`, or a GGUF's `tokenizer.chat_template`), rendered as transformers'
//! `apply_chat_template(messages, tokenize=False, add_generation_prompt=…)` renders it.
//!
//! transformers compiles the template with `trim_blocks` and `lstrip_blocks`, the loop-control
//! extension, a `tojson` filter that is Python's `json.dumps` (non-ASCII kept), and the
//! functions `raise_exception` and `strftime_now`; templates also call Python string methods
//! (`.strip()`, `.split()`, `.startswith()`). minijinja with its Python-compatibility methods
//! is that dialect; the pieces transformers adds are defined here.
use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, Serde, Value};
use minijinja::{Environment, Error, ErrorKind};
use serde::Serialize;

use crate::error::{ModelError, Result};

/// One message of a conversation (`{"role": …, "content": …}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
}

/// A model's chat template, compiled once, with the special-token strings it refers to.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    /// Where the template was read from, for error messages.
    origin: PathBuf,
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source` (errors name `origin`); `bos_token` and `eos_token` are the strings the
    /// template sees under those names, as transformers passes them.
    pub fn new(
        source: impl Into<String>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
        origin: &Path,
    ) -> Result<Self> {
        let source = source.into();
        let env = environment(&source).map_err(|e| chat_err(origin, e))?;
        Ok(Self {
            source,
            env,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
            origin: origin.to_path_buf(),
        })
    }

    /// The Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `apply_chat_template(messages, tokenize=False, add_generation_prompt=…)`.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, serde_json::Map::new())
    }

    /// [`ChatTemplate::render`] with extra template variables, as the keyword arguments of
    /// `apply_chat_template` (e.g. `enable_thinking` for Qwen3, `date_string` for Llama 3).
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let mut ctx = extra;
        let set = |ctx: &mut serde_json::Map<_, _>, k: &str, v: serde_json::Value| {
            ctx.insert(k.to_string(), v);
        };
        let msgs = serde_json::to_value(messages).map_err(|e| self.err(e))?;
        set(&mut ctx, "messages", msgs);
        set(
            &mut ctx,
            "add_generation_prompt",
            add_generation_prompt.into(),
        );
        set(&mut ctx, "bos_token", self.bos_token.clone().into());
        set(&mut ctx, "eos_token", self.eos_token.clone().into());
        let tmpl = self.env.get_template(NAME).map_err(|e| self.err(e))?;
        tmpl.render(Value::from(Serde(serde_json::Value::Object(ctx))))
            .map_err(|e| self.err(e))
    }

    fn err(&self, e: impl std::fmt::Display) -> ModelError {
        chat_err(&self.origin, e)
    }
}

fn chat_err(origin: &Path, e: impl std::fmt::Display) -> ModelError {
    ModelError::Tokenizer {
        path: origin.to_path_buf(),
        reason: format!("chat template: {e}"),
    }
}

/// `source` compiled in transformers' dialect (see the module doc).
fn environment(source: &str) -> std::result::Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()?;
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", tojson);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_template_owned(NAME, source.to_string())?;
    Ok(env)
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=indent)`.
fn tojson(value: Value, kwargs: Kwargs) -> std::result::Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    let mut out = String::new();
    python_dumps(&json, indent, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

/// Python's `json.dumps` layout: `", "` and `": "` between items without an indent; with
/// one, an item per line and `","` at line ends.
fn python_dumps(v: &serde_json::Value, indent: Option<usize>, level: usize, out: &mut String) {
    use serde_json::Value as J;
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, level + 1);
                python_dumps(x, indent, level + 1, out);
            }
            newline(out, level);
            out.push(']');
        }
        J::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (k, x)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, level + 1);
                out.push_str(&J::String(k.clone()).to_string());
                out.push_str(": ");
                python_dumps(x, indent, level + 1, out);
            }
            newline(out, level);
            out.push('}');
        }
        J::Bool(true) => out.push_str("true"),
        J::Bool(false) => out.push_str("false"),
        other => out.push_str(&other.to_string()),
    }
}

fn raise_exception(message: String) -> std::result::Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers' `strftime_now(format)`: the current UTC date and time, for the `%d`, `%m`,
/// `%Y`, `%b`, `%B`, `%H`, `%M`, `%S` directives templates use.
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    strftime(&format, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// `format` for the UTC time `secs` after the epoch (the civil-from-days algorithm).
fn strftime(format: &str, secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let name = MONTHS[(month - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('Y') => out.push_str(&year.to_string()),
            Some('b') => out.push_str(&name[..3]),
            Some('B') => out.push_str(name),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_matches_hand_computed_dates() {
        // 2024-07-26 00:00:00 UTC is 1721952000 s after the epoch.
        assert_eq!(strftime("%d %b %Y", 1_721_952_000), "26 Jul 2024");
        // 2000-02-29 13:05:09 UTC.
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %B", 951_829_509),
            "2000-02-29 13:05:09 February"
        );
    }

    #[test]
    fn tojson_lays_out_as_python() {
        let v = serde_json::json!({"a": [1, "é", true], "b": {}});
        let mut out = String::new();
        python_dumps(&v, None, 0, &mut out);
        assert_eq!(out, r#"{"a": [1, "é", true], "b": {}}"#);
        let mut out = String::new();
        python_dumps(&v, Some(2), 0, &mut out);
        assert_eq!(
            out,
            "{\n  \"a\": [\n    1,\n    \"é\",\n    true\n  ],\n  \"b\": {}\n}"
        );
    }

    #[test]
    fn raise_exception_is_an_error_naming_the_origin() {
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}ok",
            "<s>",
            "</s>",
            Path::new("tokenizer_config.json"),
        )
        .unwrap();
        assert_eq!(t.render(&[ChatMessage::user("hi")], true).unwrap(), "ok");
        let e = t
            .render(&[ChatMessage::new("system", "x")], true)
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("user first") && text.contains("tokenizer_config.json"),
            "{text}"
        );
    }
}
