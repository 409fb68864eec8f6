//! VADER (Hutto & Gilbert, ICWSM 2014) lexicon sentiment: the `compound` score of PyPI
//! `vaderSentiment==3.3.2`, ported rule by rule.
//!
//! The compound score sums per-word valences from `vader_lexicon.txt` after the paper's
//! heuristics — booster/dampener words (±0.293, decayed ×0.95 / ×0.9 with distance), negation
//! within three words (×−0.74), ALL-CAPS emphasis (±0.733 when only some words are capitals),
//! "no" / "least" / "never so" / "without doubt" special cases, idioms, the contrastive "but"
//! (×0.5 before, ×1.5 after) and `!` / `?` emphasis — and normalises the sum `x` to
//! `x / sqrt(x² + 15)` in [−1, 1]. Unlike the Python package the compound is not rounded to 4
//! decimals. The package's quirks are kept on purpose (e.g. its "but" rule looks sentiments up
//! by value), so scores match the reference.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::{RewardError, TextScorer, default_asset_dir};

const B_INCR: f64 = 0.293;
const B_DECR: f64 = -0.293;
const C_INCR: f64 = 0.733;
const N_SCALAR: f64 = -0.74;
/// `alpha` of VADER's normalisation `x / sqrt(x² + alpha)`.
const ALPHA: f64 = 15.0;

const NEGATE: &[&str] = &[
    "aint",
    "arent",
    "cannot",
    "cant",
    "couldnt",
    "darent",
    "didnt",
    "doesnt",
    "ain't",
    "aren't",
    "can't",
    "couldn't",
    "daren't",
    "didn't",
    "doesn't",
    "dont",
    "hadnt",
    "hasnt",
    "havent",
    "isnt",
    "mightnt",
    "mustnt",
    "neither",
    "don't",
    "hadn't",
    "hasn't",
    "haven't",
    "isn't",
    "mightn't",
    "mustn't",
    "neednt",
    "needn't",
    "never",
    "none",
    "nope",
    "nor",
    "not",
    "nothing",
    "nowhere",
    "oughtnt",
    "shant",
    "shouldnt",
    "uhuh",
    "wasnt",
    "werent",
    "oughtn't",
    "shan't",
    "shouldn't",
    "uh-uh",
    "wasn't",
    "weren't",
    "without",
    "wont",
    "wouldnt",
    "won't",
    "wouldn't",
    "rarely",
    "seldom",
    "despite",
];

const BOOST_UP: &[&str] = &[
    "absolutely",
    "amazingly",
    "awfully",
    "completely",
    "considerable",
    "considerably",
    "decidedly",
    "deeply",
    "effing",
    "enormous",
    "enormously",
    "entirely",
    "especially",
    "exceptional",
    "exceptionally",
    "extreme",
    "extremely",
    "fabulously",
    "flipping",
    "flippin",
    "frackin",
    "fracking",
    "fricking",
    "frickin",
    "frigging",
    "friggin",
    "fully",
    "fuckin",
    "fucking",
    "fuggin",
    "fugging",
    "greatly",
    "hella",
    "highly",
    "hugely",
    "incredible",
    "incredibly",
    "intensely",
    "major",
    "majorly",
    "more",
    "most",
    "particularly",
    "purely",
    "quite",
    "really",
    "remarkably",
    "so",
    "substantially",
    "thoroughly",
    "total",
    "totally",
    "tremendous",
    "tremendously",
    "uber",
    "unbelievably",
    "unusually",
    "utter",
    "utterly",
    "very",
];

const BOOST_DOWN: &[&str] = &[
    "almost",
    "barely",
    "hardly",
    "just enough",
    "kind of",
    "kinda",
    "kindof",
    "kind-of",
    "less",
    "little",
    "marginal",
    "marginally",
    "occasional",
    "occasionally",
    "partly",
    "scarce",
    "scarcely",
    "slight",
    "slightly",
    "somewhat",
    "sort of",
    "sorta",
    "sortof",
    "sort-of",
];

const SPECIAL_CASES: &[(&str, f64)] = &[
    ("the shit", 3.0),
    ("the bomb", 3.0),
    ("bad ass", 1.5),
    ("badass", 1.5),
    ("bus stop", 0.0),
    ("yeah right", -2.0),
    ("kiss of death", -1.5),
    ("to die for", 3.0),
    ("beating heart", 3.5),
];

/// The VADER scorer: lexicon (and optional emoji descriptions) plus the fixed rules.
#[derive(Debug, Clone)]
pub struct Vader {
    lexicon: HashMap<String, f64>,
    emojis: HashMap<char, String>,
    boosters: HashMap<&'static str, f64>,
}

/// Python's `str.isupper()`: at least one cased character and no lower-case one.
fn is_upper(s: &str) -> bool {
    s.chars().any(char::is_uppercase) && !s.chars().any(char::is_lowercase)
}

/// VADER's `_strip_punc_if_word`: strip ASCII punctuation at both ends unless that leaves two
/// characters or fewer (then it was probably an emoticon such as `:)`).
fn strip_punc_if_word(token: &str) -> &str {
    let stripped = token.trim_matches(|c: char| c.is_ascii_punctuation());
    if stripped.chars().count() <= 2 {
        token
    } else {
        stripped
    }
}

fn negated(word_lower: &str) -> bool {
    NEGATE.contains(&word_lower) || word_lower.contains("n't")
}

/// VADER's normalisation of the summed valence into (−1, 1).
pub(crate) fn normalize(score: f64) -> f64 {
    (score / (score * score + ALPHA).sqrt()).clamp(-1.0, 1.0)
}

impl Vader {
    /// Loads `vader_lexicon.txt` (TSV: token, mean valence, …) and, if it sits next to it,
    /// `emoji_utf8_lexicon.txt` (TSV: emoji, description).
    pub fn load(lexicon: &Path) -> Result<Self, RewardError> {
        let text = std::fs::read_to_string(lexicon).map_err(|e| RewardError::io(lexicon, e))?;
        let mut v = Self::from_lexicon_str(lexicon, &text)?;
        let emoji_path = lexicon.with_file_name("emoji_utf8_lexicon.txt");
        if emoji_path.is_file() {
            let text = std::fs::read_to_string(&emoji_path)
                .map_err(|e| RewardError::io(&emoji_path, e))?;
            for (n, line) in text.trim_end_matches('\n').split('\n').enumerate() {
                let mut parts = line.trim().split('\t');
                let (Some(e), Some(desc)) = (parts.next(), parts.next()) else {
                    continue;
                };
                let mut cs = e.chars();
                match (cs.next(), cs.next()) {
                    (Some(c), None) => {
                        v.emojis.insert(c, desc.to_string());
                    }
                    // Multi-code-point entries can never match VADER's per-character lookup.
                    _ if !e.is_empty() => {}
                    _ => {
                        return Err(RewardError::format(
                            &emoji_path,
                            format!("line {}", n + 1),
                            "emoji<TAB>description",
                        ));
                    }
                }
            }
        }
        Ok(v)
    }

    /// `vader/vader_lexicon.txt` in the asset cache ([`default_asset_dir`]; override with
    /// `LMRL_VADER_LEXICON`).
    pub fn default_lexicon_path() -> Option<PathBuf> {
        std::env::var_os("LMRL_VADER_LEXICON")
            .map(PathBuf::from)
            .or_else(|| default_asset_dir("vader").map(|d| d.join("vader_lexicon.txt")))
    }

    /// Loads from [`Vader::default_lexicon_path`].
    pub fn load_default() -> Result<Self, RewardError> {
        let p = Self::default_lexicon_path().ok_or_else(|| RewardError::MissingAsset {
            what: "vader_lexicon.txt".into(),
            path: PathBuf::from("~/.cache/lmrl/vader"),
            hint: "set LMRL_VADER_LEXICON, LMRL_CACHE or HOME".into(),
        })?;
        if !p.is_file() {
            return Err(RewardError::MissingAsset {
                what: "vader_lexicon.txt".into(),
                path: p,
                hint: "copy vaderSentiment==3.3.2's vaderSentiment/vader_lexicon.txt there".into(),
            });
        }
        Self::load(&p)
    }

    /// Parses lexicon text (`token<TAB>valence<TAB>…` per line); `path` names it in errors.
    pub fn from_lexicon_str(path: &Path, text: &str) -> Result<Self, RewardError> {
        let mut lexicon = HashMap::new();
        for (n, line) in text.trim_end_matches('\n').split('\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            let mut parts = line.trim().split('\t');
            let word = parts.next().unwrap_or_default();
            let value = parts
                .next()
                .and_then(|m| m.trim().parse::<f64>().ok())
                .ok_or_else(|| {
                    RewardError::format(path, format!("line {}", n + 1), "token<TAB>float valence")
                })?;
            lexicon.insert(word.to_string(), value);
        }
        let boosters = BOOST_UP
            .iter()
            .map(|w| (*w, B_INCR))
            .chain(BOOST_DOWN.iter().map(|w| (*w, B_DECR)))
            .collect();
        Ok(Self {
            lexicon,
            emojis: HashMap::new(),
            boosters,
        })
    }

    /// Number of lexicon entries.
    pub fn lexicon_len(&self) -> usize {
        self.lexicon.len()
    }

    fn in_lex(&self, w: &str) -> bool {
        self.lexicon.contains_key(w)
    }

    /// VADER's `scalar_inc_dec`: the booster/dampener contribution of a preceding word.
    fn scalar_inc_dec(&self, word: &str, valence: f64, cap_diff: bool) -> f64 {
        let Some(&b) = self.boosters.get(word.to_lowercase().as_str()) else {
            return 0.0;
        };
        let mut scalar = if valence < 0.0 { -b } else { b };
        if is_upper(word) && cap_diff {
            scalar += if valence > 0.0 { C_INCR } else { -C_INCR };
        }
        scalar
    }

    /// The compound score of `text` in [−1, 1] (VADER's `polarity_scores(text)["compound"]`,
    /// unrounded).
    pub fn compound(&self, text: &str) -> f64 {
        // Emojis → their textual descriptions.
        let mut t = String::with_capacity(text.len());
        let mut prev_space = true;
        for c in text.chars() {
            if let Some(desc) = self.emojis.get(&c) {
                if !prev_space {
                    t.push(' ');
                }
                t.push_str(desc);
                prev_space = false;
            } else {
                t.push(c);
                prev_space = c == ' ';
            }
        }
        let text = t.trim();
        let words: Vec<&str> = text.split_whitespace().map(strip_punc_if_word).collect();
        let lower: Vec<String> = words.iter().map(|w| w.to_lowercase()).collect();
        let upper_count = words.iter().filter(|w| is_upper(w)).count();
        let cap_diff = upper_count > 0 && upper_count < words.len();

        let mut sentiments: Vec<f64> = Vec::with_capacity(words.len());
        for i in 0..words.len() {
            if self.boosters.contains_key(lower[i].as_str())
                || (lower[i] == "kind" && lower.get(i + 1).is_some_and(|w| w == "of"))
            {
                sentiments.push(0.0);
                continue;
            }
            sentiments.push(self.sentiment_valence(&words, &lower, i, cap_diff));
        }
        but_check(&lower, &mut sentiments);
        if sentiments.is_empty() {
            return 0.0;
        }
        let mut sum: f64 = sentiments.iter().sum();
        let amp = punctuation_emphasis(text);
        if sum > 0.0 {
            sum += amp;
        } else if sum < 0.0 {
            sum -= amp;
        }
        normalize(sum)
    }

    fn sentiment_valence(&self, words: &[&str], lower: &[String], i: usize, cap_diff: bool) -> f64 {
        let item = words[i];
        let il = lower[i].as_str();
        let Some(&base) = self.lexicon.get(il) else {
            return 0.0;
        };
        let mut valence = base;
        // "no" as a negation of the next lexicon word rather than a word of its own.
        if il == "no" && i + 1 < words.len() && self.in_lex(&lower[i + 1]) {
            valence = 0.0;
        }
        if (i > 0 && lower[i - 1] == "no")
            || (i > 1 && lower[i - 2] == "no")
            || (i > 2 && lower[i - 3] == "no" && matches!(lower[i - 1].as_str(), "or" | "nor"))
        {
            valence = base * N_SCALAR;
        }
        if is_upper(item) && cap_diff {
            valence += if valence > 0.0 { C_INCR } else { -C_INCR };
        }
        for start_i in 0..3 {
            if i > start_i && !self.in_lex(&lower[i - (start_i + 1)]) {
                let mut s = self.scalar_inc_dec(words[i - (start_i + 1)], valence, cap_diff);
                if start_i == 1 && s != 0.0 {
                    s *= 0.95;
                }
                if start_i == 2 && s != 0.0 {
                    s *= 0.9;
                }
                valence += s;
                valence = negation_check(valence, lower, start_i, i);
                if start_i == 2 {
                    valence = self.special_idioms_check(valence, lower, i);
                }
            }
        }
        least_check(valence, lower, i, |w| self.in_lex(w))
    }

    fn special_idioms_check(&self, mut valence: f64, lower: &[String], i: usize) -> f64 {
        let special = |s: &str| SPECIAL_CASES.iter().find(|(k, _)| *k == s).map(|(_, v)| *v);
        let onezero = format!("{} {}", lower[i - 1], lower[i]);
        let twoonezero = format!("{} {} {}", lower[i - 2], lower[i - 1], lower[i]);
        let twoone = format!("{} {}", lower[i - 2], lower[i - 1]);
        let threetwoone = format!("{} {} {}", lower[i - 3], lower[i - 2], lower[i - 1]);
        let threetwo = format!("{} {}", lower[i - 3], lower[i - 2]);
        for seq in [&onezero, &twoonezero, &twoone, &threetwoone, &threetwo] {
            if let Some(v) = special(seq) {
                valence = v;
                break;
            }
        }
        if lower.len() - 1 > i
            && let Some(v) = special(&format!("{} {}", lower[i], lower[i + 1]))
        {
            valence = v;
        }
        if lower.len() - 1 > i + 1
            && let Some(v) = special(&format!("{} {} {}", lower[i], lower[i + 1], lower[i + 2]))
        {
            valence = v;
        }
        for ngram in [&threetwoone, &threetwo, &twoone] {
            if let Some(b) = self.boosters.get(ngram.as_str()) {
                valence += b;
            }
        }
        valence
    }
}

fn negation_check(mut valence: f64, lower: &[String], start_i: usize, i: usize) -> f64 {
    let w = |k: usize| lower[i - k].as_str();
    match start_i {
        0 => {
            if negated(w(1)) {
                valence *= N_SCALAR;
            }
        }
        1 => {
            if w(2) == "never" && matches!(w(1), "so" | "this") {
                valence *= 1.25;
            } else if w(2) == "without" && w(1) == "doubt" {
            } else if negated(w(2)) {
                valence *= N_SCALAR;
            }
        }
        _ => {
            // Python precedence: (never and (so|this)) or (w(1) in so|this).
            if (w(3) == "never" && matches!(w(2), "so" | "this")) || matches!(w(1), "so" | "this") {
                valence *= 1.25;
            } else if w(3) == "without" && (w(2) == "doubt" || w(1) == "doubt") {
            } else if negated(w(3)) {
                valence *= N_SCALAR;
            }
        }
    }
    valence
}

fn least_check(valence: f64, lower: &[String], i: usize, in_lex: impl Fn(&str) -> bool) -> f64 {
    if i > 1 && !in_lex(&lower[i - 1]) && lower[i - 1] == "least" {
        if lower[i - 2] != "at" && lower[i - 2] != "very" {
            return valence * N_SCALAR;
        }
    } else if i > 0 && !in_lex(&lower[i - 1]) && lower[i - 1] == "least" {
        return valence * N_SCALAR;
    }
    valence
}

/// VADER's `_but_check`, including its lookup of each sentiment by value
/// (`sentiments.index(sentiment)`), which the reference scores depend on.
fn but_check(lower: &[String], sentiments: &mut [f64]) {
    let Some(bi) = lower.iter().position(|w| w == "but") else {
        return;
    };
    for k in 0..sentiments.len() {
        let v = sentiments[k];
        let Some(si) = sentiments.iter().position(|&x| x == v) else {
            continue;
        };
        if si < bi {
            sentiments[si] = v * 0.5;
        } else if si > bi {
            sentiments[si] = v * 1.5;
        }
    }
}

/// `!` (up to 4, 0.292 each) and `?` (2–3: 0.18 each, more: 0.96) emphasis.
fn punctuation_emphasis(text: &str) -> f64 {
    let ep = text.matches('!').count().min(4) as f64 * 0.292;
    let qm = text.matches('?').count();
    let qa = match qm {
        0 | 1 => 0.0,
        2 | 3 => qm as f64 * 0.18,
        _ => 0.96,
    };
    ep + qa
}

impl TextScorer for Vader {
    fn name(&self) -> &str {
        "vader"
    }

    /// The compound score of each text.
    fn score_texts(&self, texts: &[&str]) -> Result<Vec<f32>, RewardError> {
        Ok(texts.iter().map(|t| self.compound(t) as f32).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Vader {
        let lex = "good\t1.9\t0.9\t[2]\nbad\t-2.5\t0.5\t[-2]\nno\t-1.2\t0.4\t[-1]\n";
        Vader::from_lexicon_str(Path::new("tiny"), lex).expect("valid lexicon")
    }

    #[test]
    fn hand_computed_scores() {
        let v = tiny();
        // One word: 1.9 / sqrt(1.9² + 15).
        let x = 1.9f64;
        assert!((v.compound("good") - x / (x * x + 15.0).sqrt()).abs() < 1e-12);
        // Booster: "very good" = 1.9 + 0.293.
        let x = 1.9 + 0.293;
        assert!((v.compound("very good") - normalize(x)).abs() < 1e-12);
        // Negation: "not good" = 1.9 · −0.74.
        assert!((v.compound("not good") - normalize(1.9 * N_SCALAR)).abs() < 1e-12);
        // Exclamation: "good!!" adds 2 · 0.292.
        assert!((v.compound("good!!") - normalize(1.9 + 0.584)).abs() < 1e-12);
        // "but": before ×0.5, after ×1.5.
        let want = normalize(-2.5 * 0.5 + 1.9 * 1.5);
        assert!((v.compound("bad but good") - want).abs() < 1e-12);
        // ALL CAPS emphasis only when other words are not capitals.
        assert!((v.compound("it is GOOD") - normalize(1.9 + C_INCR)).abs() < 1e-12);
        assert_eq!(v.compound(""), 0.0);
        assert_eq!(v.compound("neutral words only"), 0.0);
    }

    #[test]
    fn reward_scores_query_plus_response() {
        use crate::{Reward, Sample, SentimentContext};
        let v = tiny();
        let ctx = SentimentContext::new("not ");
        // "not " + "good" is negated; the response alone would be positive.
        let s = Reward::score(&v, &[Sample::new("ignored prompt", "good", &ctx)]).expect("score");
        assert!(
            (f64::from(s[0]) - normalize(1.9 * N_SCALAR)).abs() < 1e-6,
            "{s:?}"
        );
        assert_eq!(
            v.score_texts(&["good", ""]).expect("scores"),
            [v.compound("good") as f32, 0.0]
        );
    }

    #[test]
    fn malformed_lexicon_is_an_error() {
        let err = Vader::from_lexicon_str(Path::new("lex.txt"), "good\tnotanumber\n")
            .expect_err("bad float");
        assert!(err.to_string().contains("line 1"), "{err}");
    }
}
