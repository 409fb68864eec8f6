//! A tokenizer that follows spaCy's English tokenizer algorithm closely enough for a
//! bag-of-words classifier trained on spaCy tokens.
//!
//! spaCy (v3) tokenizes in two stages, reproduced here:
//! 1. split on single spaces; any other whitespace run (and every space after the first) becomes
//!    its own token (`"\n"`, `"\n\n"`, `" "`);
//! 2. each remaining chunk is peeled: unless the chunk is a special case (a tokenizer
//!    exception such as `"don't" → "do" "n't"`) or a URL, one prefix and one suffix are split
//!    off repeatedly (`"(great!)"` → `(` `great` `!` `)`), then the middle is split at infixes
//!    (`"self-indulgent"` → `self` `-` `indulgent`, `"end.The"` → `end` `.` `The`).
//!
//! The prefix / suffix / infix rules are spaCy's English punctuation rules written as Rust
//! predicates instead of spaCy's regular expressions, restricted to the character classes that
//! matter for English text (ASCII punctuation, typographic quotes and dashes, currency signs,
//! units after numbers, common symbols and emoji). The exception table is either a built-in
//! generated one (contractions, emoticons, abbreviations: [`SpacyTokenizer::english`]) or the
//! exact table of a spaCy pipeline's serialized `tokenizer` file
//! ([`SpacyTokenizer::from_spacy_tokenizer_file`]).
use std::collections::HashMap;
use std::path::Path;

use rmpv::Value;

use crate::RewardError;

/// spaCy's attribute id of `ORTH` (the verbatim token text) in serialized exceptions.
const ORTH: u64 = 65;

/// A spaCy-style rule-based tokenizer (see the module docs).
#[derive(Debug, Clone)]
pub struct SpacyTokenizer {
    /// Special cases: chunk text → its token texts (which concatenate back to the chunk).
    specials: HashMap<String, Vec<String>>,
}

impl SpacyTokenizer {
    /// The built-in English tokenizer: spaCy's punctuation rules plus a generated exception
    /// table (negative and pronoun contractions with `'` and `’`, emoticons, abbreviations).
    pub fn english() -> Self {
        Self {
            specials: builtin_exceptions(),
        }
    }

    /// A tokenizer with the built-in rules and the exact exception table of a spaCy pipeline
    /// (`<pipeline>/tokenizer`, msgpack: `{"exceptions": {text: [{65: orth, ...}, ...]}}`).
    pub fn from_spacy_tokenizer_file(path: &Path) -> Result<Self, RewardError> {
        let bytes = std::fs::read(path).map_err(|e| RewardError::io(path, e))?;
        let value = rmpv::decode::read_value(&mut bytes.as_slice()).map_err(|e| {
            RewardError::format(path, "<root>", format!("a msgpack document ({e})"))
        })?;
        let exceptions = map_get(&value, "exceptions")
            .ok_or_else(|| RewardError::format(path, "exceptions", "a map of special cases"))?;
        let Value::Map(entries) = exceptions else {
            return Err(RewardError::format(path, "exceptions", "a map"));
        };
        let mut specials = HashMap::with_capacity(entries.len());
        for (k, v) in entries {
            let Some(text) = k.as_str() else {
                return Err(RewardError::format(path, "exceptions", "string keys"));
            };
            let field = format!("exceptions[{text:?}]");
            let Value::Array(pieces) = v else {
                return Err(RewardError::format(
                    path,
                    field,
                    "an array of token attributes",
                ));
            };
            let mut orths = Vec::with_capacity(pieces.len());
            for p in pieces {
                let orth = match p {
                    Value::Map(attrs) => attrs
                        .iter()
                        .find(|(a, _)| a.as_u64() == Some(ORTH))
                        .and_then(|(_, o)| o.as_str()),
                    _ => None,
                };
                let Some(orth) = orth else {
                    return Err(RewardError::format(
                        path,
                        field,
                        "an ORTH (65) string per token",
                    ));
                };
                orths.push(orth.to_string());
            }
            if orths.concat() != text {
                return Err(RewardError::format(
                    path,
                    field,
                    "ORTH pieces that concatenate to the key",
                ));
            }
            specials.insert(text.to_string(), orths);
        }
        Ok(Self { specials })
    }

    /// Number of special cases in the exception table.
    pub fn num_exceptions(&self) -> usize {
        self.specials.len()
    }

    /// Splits `text` into token strings, in order (whitespace tokens included, as spaCy does).
    pub fn tokenize(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        if text.is_empty() {
            return out;
        }
        // Stage 1: spaCy's whitespace loop. A chunk boundary is each change between
        // whitespace and non-whitespace; a leading single ' ' of a whitespace run is the
        // previous token's trailing space and is dropped.
        let mut in_ws = text.chars().next().is_some_and(char::is_whitespace);
        let mut start = 0usize;
        for (i, c) in text.char_indices() {
            if c.is_whitespace() != in_ws {
                if start < i {
                    self.tokenize_chunk(&text[start..i], &mut out);
                }
                start = if c == ' ' { i + 1 } else { i };
                in_ws = !in_ws;
            }
        }
        if start < text.len() {
            self.tokenize_chunk(&text[start..], &mut out);
        }
        out
    }

    fn is_special(&self, s: &str) -> bool {
        self.specials.contains_key(s)
    }

    /// spaCy's `_split_affixes` + `_attach_tokens` for one whitespace-free chunk.
    fn tokenize_chunk(&self, chunk: &str, out: &mut Vec<String>) {
        if let Some(pieces) = self.specials.get(chunk) {
            out.extend(pieces.iter().cloned());
            return;
        }
        let mut prefixes: Vec<&str> = Vec::new();
        let mut suffixes: Vec<&str> = Vec::new();
        let mut s = chunk;
        let mut last_len = usize::MAX;
        while !s.is_empty() && s.len() != last_len {
            if self.is_special(s) {
                break;
            }
            last_len = s.len();
            let pre_len = find_prefix(s);
            if pre_len != 0 {
                let minus_pre = &s[pre_len..];
                if !minus_pre.is_empty() && self.is_special(minus_pre) {
                    prefixes.push(&s[..pre_len]);
                    s = minus_pre;
                    break;
                }
            }
            let suf_len = find_suffix(&s[pre_len..]);
            if suf_len != 0 {
                let minus_suf = &s[..s.len() - suf_len];
                if !minus_suf.is_empty() && self.is_special(minus_suf) {
                    suffixes.push(&s[s.len() - suf_len..]);
                    s = minus_suf;
                    break;
                }
            }
            if pre_len != 0 && suf_len != 0 && pre_len + suf_len <= s.len() {
                prefixes.push(&s[..pre_len]);
                suffixes.push(&s[s.len() - suf_len..]);
                s = &s[pre_len..s.len() - suf_len];
            } else if pre_len != 0 {
                prefixes.push(&s[..pre_len]);
                s = &s[pre_len..];
            } else if suf_len != 0 {
                suffixes.push(&s[s.len() - suf_len..]);
                s = &s[..s.len() - suf_len];
            }
            if self.is_special(s) {
                break;
            }
        }
        out.extend(prefixes.iter().map(|p| p.to_string()));
        if !s.is_empty() {
            if let Some(pieces) = self.specials.get(s) {
                out.extend(pieces.iter().cloned());
            } else if is_url(s) {
                out.push(s.to_string());
            } else {
                let mut start = 0usize;
                for (a, b) in find_infixes(s) {
                    if a == 0 {
                        // spaCy skips an infix at the very start of the string.
                        continue;
                    }
                    if a != start {
                        out.push(s[start..a].to_string());
                    }
                    out.push(s[a..b].to_string());
                    start = b;
                }
                if start < s.len() {
                    out.push(s[start..].to_string());
                }
            }
        }
        out.extend(suffixes.iter().rev().map(|p| p.to_string()));
    }
}

impl Default for SpacyTokenizer {
    fn default() -> Self {
        Self::english()
    }
}

fn map_get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Map(m) => m
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Character classes (spaCy's `lang/char_classes.py`, English-relevant subset).

/// spaCy's `LIST_PUNCT`.
const PUNCT: &[char] = &[
    '…', ',', ':', ';', '!', '?', '¿', '؟', '¡', '(', ')', '[', ']', '{', '}', '<', '>', '_', '#',
    '*', '&', '。', '？', '！', '，', '、', '；', '：', '～', '·', '।', '،', '۔', '؛', '٪',
];

/// spaCy's `LIST_QUOTES`.
const QUOTES: &[char] = &[
    '\'', '"', '”', '“', '`', '‘', '´', '’', '‚', ',', '„', '»', '«', '「', '」', '『', '』', '（',
    '）', '〔', '〕', '【', '】', '《', '》', '〈', '〉', '〈', '〉', '⟦', '⟧',
];

/// Single-character currency signs of spaCy's `LIST_CURRENCY`.
fn is_currency(c: char) -> bool {
    matches!(c, '$' | '£' | '€' | '¥' | '฿' | '₽' | '﷼') || ('\u{20A0}'..='\u{20BF}').contains(&c)
}

/// An approximation of spaCy's `LIST_ICONS` (Unicode category So): common symbol and emoji
/// blocks.
fn is_icon(c: char) -> bool {
    matches!(c, '\u{00A6}' | '\u{00A9}' | '\u{00AE}' | '\u{00B0}')
        || ('\u{2100}'..='\u{214F}').contains(&c) && !c.is_alphabetic()
        || ('\u{2190}'..='\u{21FF}').contains(&c)
        || ('\u{2300}'..='\u{23FF}').contains(&c)
        || ('\u{2500}'..='\u{27BF}').contains(&c)
        || ('\u{2B00}'..='\u{2BFF}').contains(&c)
        || ('\u{1F000}'..='\u{1FAFF}').contains(&c)
}

fn is_digit(c: char) -> bool {
    c.is_ascii_digit()
}

/// Unit strings that spaCy splits off after a number (`"10km"` → `10` `km`).
const UNITS: &[&str] = &[
    "km", "km²", "km³", "m", "m²", "m³", "dm", "dm²", "dm³", "cm", "cm²", "cm³", "mm", "mm²",
    "mm³", "ha", "µm", "nm", "yd", "in", "ft", "kg", "g", "mg", "µg", "t", "lb", "oz", "m/s",
    "km/h", "kmh", "mph", "hPa", "Pa", "mbar", "mb", "MB", "kb", "KB", "gb", "GB", "tb", "TB", "T",
    "G", "M", "K", "%",
];

/// Multi-character currency strings of spaCy's `LIST_CURRENCY`.
const CURRENCY_STRINGS: &[&str] = &["US$", "C$", "A$"];

// ---------------------------------------------------------------------------------------------
// Prefix, suffix, infix and URL rules.

/// Byte length of the prefix spaCy's English `prefix_search` would split off `s`, or 0.
fn find_prefix(s: &str) -> usize {
    let mut chars = s.chars();
    let Some(c) = chars.next() else { return 0 };
    if c == '.' {
        let dots = s.bytes().take_while(|&b| b == b'.').count();
        return if dots >= 2 { dots } else { 0 };
    }
    if c == '+' {
        return if chars.next().is_some_and(is_digit) {
            0
        } else {
            1
        };
    }
    if matches!(c, '§' | '%' | '=' | '—' | '–')
        || PUNCT.contains(&c)
        || QUOTES.contains(&c)
        || is_currency(c)
        || is_icon(c)
    {
        return c.len_utf8();
    }
    for cur in CURRENCY_STRINGS {
        if s.starts_with(cur) {
            return cur.len();
        }
    }
    0
}

/// Characters after which spaCy splits a final `.` as a suffix (besides lower-case letters and
/// digits): `%²-+`, punctuation and quotes (and the regex syntax characters that spaCy's
/// character-class construction happens to include).
fn dot_suffix_after(c: char) -> bool {
    is_digit(c)
        || c.is_lowercase()
        || matches!(
            c,
            '%' | '²' | '-' | '+' | '|' | '\\' | '(' | '?' | ':' | ')'
        )
        || PUNCT.contains(&c)
        || QUOTES.contains(&c)
}

/// Byte length of the suffix spaCy's English `suffix_search` (a leftmost `re.search` over
/// end-anchored alternatives) would split off `s`, or 0.
fn find_suffix(s: &str) -> usize {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let n = chars.len();
    if n == 0 {
        return 0;
    }
    let len = s.len();
    let mut best = len; // earliest start found so far (len = none)
    let (last_i, last) = chars[n - 1];
    // Single-character punctuation, quotes, icons, dashes.
    if PUNCT.contains(&last) || QUOTES.contains(&last) || is_icon(last) || matches!(last, '—' | '–')
    {
        best = best.min(last_i);
    }
    // `\.\.+$`
    let dots = s.bytes().rev().take_while(|&b| b == b'.').count();
    if dots >= 2 {
        best = best.min(len - dots);
    }
    // `'s`, `'S`, `’s`, `’S`
    if n >= 2 && matches!(last, 's' | 'S') && matches!(chars[n - 2].1, '\'' | '’') {
        best = best.min(chars[n - 2].0);
    }
    // `(?<=[0-9])\+$`
    if last == '+' && n >= 2 && is_digit(chars[n - 2].1) {
        best = best.min(last_i);
    }
    if last == '.' && n >= 2 {
        let prev = chars[n - 2].1;
        // `(?<=°[FfCcKk])\.$`
        let degrees =
            n >= 3 && chars[n - 3].1 == '°' && matches!(prev, 'F' | 'f' | 'C' | 'c' | 'K' | 'k');
        // `(?<=[0-9a-z%²\-\+PUNCT QUOTES])\.$` and `(?<=[A-Z][A-Z])\.$`
        let two_upper = n >= 3 && prev.is_uppercase() && chars[n - 3].1.is_uppercase();
        if degrees || dot_suffix_after(prev) || two_upper {
            best = best.min(last_i);
        }
    }
    // `(?<=[0-9])(?:CURRENCY|UNITS)$`
    let after_digit =
        |start: usize| start > 0 && s[..start].chars().next_back().is_some_and(is_digit);
    for unit in UNITS.iter().chain(CURRENCY_STRINGS) {
        if s.len() > unit.len() && s.ends_with(unit) && after_digit(len - unit.len()) {
            best = best.min(len - unit.len());
        }
    }
    if is_currency(last) && after_digit(last_i) {
        best = best.min(last_i);
    }
    len - best
}

fn is_concat_quote(c: char) -> bool {
    QUOTES.contains(&c)
}

/// Infix matches `(start, end)` in byte offsets, as spaCy's `infix_finditer` returns them
/// (leftmost-first, non-overlapping).
fn find_infixes(s: &str) -> Vec<(usize, usize)> {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let n = chars.len();
    let at = |k: usize| chars.get(k).map(|&(_, c)| c);
    let byte = |k: usize| chars.get(k).map_or(s.len(), |&(b, _)| b);
    let mut out = Vec::new();
    let mut k = 0usize;
    while k < n {
        let c = chars[k].1;
        let prev = if k > 0 { at(k - 1) } else { None };
        let next = at(k + 1);
        let mut end: Option<usize> = None; // end char index (exclusive)
        // `\.\.+`
        if c == '.' && next == Some('.') {
            let mut e = k;
            while at(e) == Some('.') {
                e += 1;
            }
            end = Some(e);
        } else if c == '…' || is_icon(c) {
            end = Some(k + 1);
        } else if matches!(c, '+' | '-' | '*' | '^')
            && prev.is_some_and(is_digit)
            && next.is_some_and(|d| is_digit(d) || d == '-')
        {
            // `(?<=[0-9])[+\-\*^](?=[0-9-])`
            end = Some(k + 1);
        } else if c == '.'
            && prev.is_some_and(|p| p.is_lowercase() || is_concat_quote(p))
            && next.is_some_and(|d| d.is_uppercase() || is_concat_quote(d))
        {
            // `(?<=[a-z q])\.(?=[A-Z q])`
            end = Some(k + 1);
        } else if c == ','
            && prev.is_some_and(char::is_alphabetic)
            && next.is_some_and(char::is_alphabetic)
        {
            end = Some(k + 1);
        } else if prev.is_some_and(|p| p.is_alphabetic() || is_digit(p)) {
            // `(?<=[a0-9])(?:-|–|—|--|---|——|~)(?=[a])` then `(?<=[a0-9])[:<>=/](?=[a])`
            let alpha_at = |e: usize| at(e).is_some_and(char::is_alphabetic);
            let candidates: &[&str] = &["-", "–", "—", "--", "---", "——", "~"];
            for cand in candidates {
                let m = cand.chars().count();
                let matches_here = (0..m).all(|j| at(k + j) == cand.chars().nth(j));
                if matches_here && alpha_at(k + m) {
                    end = Some(k + m);
                    break;
                }
            }
            if end.is_none() && matches!(c, ':' | '<' | '>' | '=' | '/') && alpha_at(k + 1) {
                end = Some(k + 1);
            }
        }
        match end {
            Some(e) => {
                out.push((byte(k), byte(e)));
                k = e;
            }
            None => k += 1,
        }
    }
    out
}

/// A hand-written version of spaCy's `URL_MATCH` host/domain branch:
/// `^(scheme://)?(user(:pass)?@)?(label.)+tld(:port)?([/?#]\S*)?$`, where the TLD is 2–63
/// lower-case letters. Like spaCy, this also keeps a missing-space typo such as
/// `"good.the"` as one token.
fn is_url(s: &str) -> bool {
    let mut rest = s;
    if let Some(p) = rest.find("://") {
        let scheme = &rest[..p];
        if scheme.chars().count() >= 2
            && scheme
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || matches!(c, '+' | '-' | '.'))
        {
            rest = &rest[p + 3..];
        }
    }
    if let Some(p) = rest.find('@')
        && p > 0
    {
        rest = &rest[p + 1..];
    }
    // Host: split off the path/port part first.
    let host_end = rest.find(['/', '?', '#', ':']).unwrap_or(rest.len());
    let (host, tail) = rest.split_at(host_end);
    if let Some(port) = tail.strip_prefix(':') {
        let digits = port.bytes().take_while(u8::is_ascii_digit).count();
        if !(2..=5).contains(&digits) {
            return false;
        }
        let after = &port[digits..];
        if !(after.is_empty() || after.starts_with(['/', '?', '#'])) {
            return false;
        }
    }
    let labels: Vec<&str> = host.split('.').collect();
    if labels.len() < 2 {
        return false;
    }
    let Some((tld, domain)) = labels.split_last() else {
        return false;
    };
    let tld_len = tld.chars().count();
    if !(2..=63).contains(&tld_len) || !tld.chars().all(char::is_lowercase) {
        return false;
    }
    let label_char = |c: char| c.is_ascii_alphanumeric() || ('\u{00a1}'..='\u{ffff}').contains(&c);
    domain.iter().all(|l| {
        let cs: Vec<char> = l.chars().collect();
        !cs.is_empty()
            && cs.len() <= 64
            && label_char(cs[0])
            && label_char(cs[cs.len() - 1])
            && cs.iter().all(|&c| label_char(c) || c == '_' || c == '-')
    })
}

// ---------------------------------------------------------------------------------------------
// Built-in exception table.

fn builtin_exceptions() -> HashMap<String, Vec<String>> {
    let mut m: HashMap<String, Vec<String>> = HashMap::new();
    let mut add = |pieces: &[&str]| {
        m.insert(
            pieces.concat(),
            pieces.iter().map(|p| p.to_string()).collect(),
        );
    };
    let capitalize = |s: &str| {
        let mut cs = s.chars();
        cs.next()
            .map(|f| f.to_uppercase().collect::<String>() + cs.as_str())
            .unwrap_or_default()
    };
    for apo in ["'", "’"] {
        // Negations: "don't" → "do" "n't"; irregular stems as spaCy splits them.
        let neg: &[(&str, &str)] = &[
            ("do", "do"),
            ("does", "does"),
            ("did", "did"),
            ("is", "is"),
            ("are", "are"),
            ("was", "was"),
            ("were", "were"),
            ("has", "has"),
            ("have", "have"),
            ("had", "had"),
            ("could", "could"),
            ("would", "would"),
            ("should", "should"),
            ("must", "must"),
            ("might", "might"),
            ("need", "need"),
            ("ca", "ca"),
            ("wo", "wo"),
            ("sha", "sha"),
            ("ai", "ai"),
        ];
        for (stem, _) in neg {
            let nt = format!("n{apo}t");
            add(&[stem, &nt]);
            add(&[&capitalize(stem), &nt]);
            add(&[&stem.to_uppercase(), &format!("N{apo}T")]);
        }
        // Pronoun and wh-word contractions: "I'm", "you're", "they'll", "we've", "he'd".
        let pron = [
            "i", "you", "he", "she", "it", "we", "they", "that", "there", "who", "what", "where",
            "when", "why", "how", "this", "these", "those",
        ];
        for p in pron {
            for suf in ["m", "re", "s", "d", "ll", "ve"] {
                if suf == "m" && p != "i" {
                    continue;
                }
                let tail = format!("{apo}{suf}");
                let lower = if p == "i" { "i" } else { p };
                add(&[lower, &tail]);
                add(&[&capitalize(p), &tail]);
            }
        }
        // Clitics that stand alone after splitting.
        for t in [
            "s", "S", "m", "re", "ve", "ll", "d", "em", "cause", "bout", "nuff",
        ] {
            add(&[&format!("{apo}{t}")]);
        }
        add(&[&format!("n{apo}t")]);
        add(&[&format!("N{apo}T")]);
        add(&["y", &format!("{apo}all")]);
        add(&["Y", &format!("{apo}all")]);
        add(&["C", &format!("{apo}mon")]);
        add(&["c", &format!("{apo}mon")]);
    }
    for (a, b) in [("can", "not"), ("Can", "not"), ("gon", "na"), ("Gon", "na")] {
        add(&[a, b]);
    }
    add(&["wan", "na"]);
    add(&["got", "ta"]);
    // Emoticons that would otherwise be split at punctuation.
    for e in [
        ":)",
        ":-)",
        ":))",
        ":-))",
        ":(",
        ":-(",
        ":((",
        ";)",
        ";-)",
        ":D",
        ":-D",
        ";D",
        ":P",
        ":p",
        ":-P",
        ":-p",
        ":/",
        ":-/",
        ":|",
        ":-|",
        ":'(",
        ":')",
        ":o",
        ":O",
        ":-o",
        ":-O",
        ":*",
        ":-*",
        ":3",
        ":]",
        ":-]",
        ":>",
        "=)",
        "=(",
        "=D",
        "=/",
        "=]",
        "=[",
        "=|",
        ":}",
        "<3",
        "</3",
        "<33",
        "(:",
        "(-:",
        "):",
        ")-:",
        "(;",
        "(=",
        "-_-",
        "-__-",
        "^_^",
        "(^_^)",
        "o.O",
        "O.o",
        "0_o",
        "0_0",
        "o_o",
        "O_O",
        "o_O",
        "O_o",
        "8)",
        "8-)",
        "8D",
        "8-D",
        "xD",
        "xDD",
        "XD",
        ":-3",
        ":-x",
        ":x",
        ":X",
        ";_;",
        ">.<",
        "<.<",
        ">.>",
        "@_@",
        "¯\\(ツ)/¯",
    ] {
        add(&[e]);
    }
    // Abbreviations whose final period belongs to the word.
    for a in [
        "Mr.", "Mrs.", "Ms.", "Dr.", "St.", "Jr.", "Sr.", "Mt.", "Inc.", "Ltd.", "Co.", "Corp.",
        "vs.", "v.s.", "etc.", "e.g.", "i.e.", "a.m.", "p.m.", "Jan.", "Feb.", "Mar.", "Apr.",
        "Jun.", "Jul.", "Aug.", "Sep.", "Sept.", "Oct.", "Nov.", "Dec.", "Gov.", "Sen.", "Rep.",
        "Rev.", "Gen.", "Col.", "Lt.", "Sgt.", "Capt.", "Prof.", "Bros.", "No.", "Ph.D.", "U.S.",
        "U.K.", "w/o", "Mx.",
    ] {
        add(&[a]);
    }
    for c in 'a'..='z' {
        add(&[&format!("{c}.")]);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(s: &str) -> Vec<String> {
        SpacyTokenizer::english().tokenize(s)
    }

    #[test]
    fn contractions_and_punctuation() {
        assert_eq!(
            tok("I didn't expect much, and it still managed to disappoint me."),
            [
                "I",
                "did",
                "n't",
                "expect",
                "much",
                ",",
                "and",
                "it",
                "still",
                "managed",
                "to",
                "disappoint",
                "me",
                "."
            ]
        );
        assert_eq!(tok("can't"), ["ca", "n't"]);
        assert_eq!(tok("Don't!"), ["Do", "n't", "!"]);
        assert_eq!(tok("(don't)"), ["(", "do", "n't", ")"]);
        assert_eq!(tok("The director's cut"), ["The", "director", "'s", "cut"]);
        assert_eq!(tok("It's"), ["It", "'s"]);
    }

    #[test]
    fn suffix_rules() {
        assert_eq!(tok("years!!!"), ["years", "!", "!", "!"]);
        assert_eq!(tok("Meh..."), ["Meh", "..."]);
        assert_eq!(tok("so did I."), ["so", "did", "I."]);
        assert_eq!(tok("the USA."), ["the", "USA", "."]);
        assert_eq!(tok("100% sure"), ["100", "%", "sure"]);
        assert_eq!(tok("10km"), ["10", "km"]);
        assert_eq!(tok("5$"), ["5", "$"]);
        assert_eq!(tok("1/10."), ["1/10", "."]);
    }

    #[test]
    fn infix_rules() {
        assert_eq!(tok("self-indulgent"), ["self", "-", "indulgent"]);
        assert_eq!(tok("end.The"), ["end", ".", "The"]);
        assert_eq!(tok("good...bad"), ["good", "...", "bad"]);
        assert_eq!(tok("and/or"), ["and", "/", "or"]);
        assert_eq!(tok("10/10"), ["10/10"]);
        assert_eq!(tok("3-4"), ["3", "-", "4"]);
        assert_eq!(tok("red,green"), ["red", ",", "green"]);
    }

    #[test]
    fn whitespace_tokens_and_specials() {
        assert_eq!(
            tok("Visually stunning\nbut empty.\n\nStill"),
            [
                "Visually", "stunning", "\n", "but", "empty", ".", "\n\n", "Still"
            ]
        );
        assert_eq!(tok("a  b"), ["a", " ", "b"]);
        assert_eq!(tok(""), Vec::<String>::new());
        assert_eq!(tok("convincing :)"), ["convincing", ":)"]);
        assert_eq!(tok("“quotes”"), ["“", "quotes", "”"]);
        assert_eq!(
            tok("see www.example.com/x?y now"),
            ["see", "www.example.com/x?y", "now"]
        );
        assert_eq!(tok("https://a.org"), ["https://a.org"]);
    }

    #[test]
    fn never_loses_text() {
        let t = SpacyTokenizer::english();
        for s in [
            "a(b)c", "--x--", "'''", "...", "$5.99!", "e.g.,", "  lead", "x\t\ty", "é—ü",
        ] {
            let toks = t.tokenize(s);
            let joined: String = toks.concat();
            let stripped: String = s.chars().filter(|&c| c != ' ').collect();
            let joined_stripped: String = joined.chars().filter(|&c| c != ' ').collect();
            assert_eq!(joined_stripped, stripped, "{s:?} → {toks:?}");
        }
    }
}
