//! The reward interface shared by every scorer: [`Reward`] over per-sample [`Sample`]s, and
//! [`TextScorer`] for the sentiment models that only need the text.
use std::ffi::OsString;
use std::path::PathBuf;

use crate::RewardError;

/// One sample to score: the prompt the policy saw, its response, and the sample's own context
/// (what the reward needs besides the two texts: the plain query for sentiment, the ground truth
/// for math).
#[derive(Debug)]
pub struct Sample<'a, C: ?Sized> {
    pub prompt: &'a str,
    pub response: &'a str,
    pub context: &'a C,
}

impl<'a, C: ?Sized> Sample<'a, C> {
    pub fn new(prompt: &'a str, response: &'a str, context: &'a C) -> Self {
        Self {
            prompt,
            response,
            context,
        }
    }
}

// By hand rather than derived: a derive would require `C: Clone`/`C: Copy`, but the sample only
// holds a reference to its context, so it is copyable whatever the context is.
impl<C: ?Sized> Clone for Sample<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C: ?Sized> Copy for Sample<'_, C> {}

/// A scalar reward per sample (the `score` TRL's PPO step receives per episode).
///
/// Object safe: apps hold a `Box<dyn Reward<C>>` chosen at run time.
pub trait Reward<C: ?Sized>: Send + Sync {
    /// Short name for logs ("textcat-imdb", "vader", "distilbert", "gsm8k").
    fn name(&self) -> &str;

    /// One score per sample, in order.
    fn score(&self, samples: &[Sample<'_, C>]) -> Result<Vec<f32>, RewardError>;
}

/// Context of the IMDB sentiment rewards: the plain query the response continues.
///
/// The text scored is `query + response`, not `prompt + response`: CORY's observer is prompted
/// with a longer merged prompt (the query plus the pioneer's response) but is scored, like the
/// pioneer, on the plain query plus its own response.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SentimentContext {
    pub query: String,
}

impl SentimentContext {
    pub fn new(query: impl Into<String>) -> Self {
        Self {
            query: query.into(),
        }
    }
}

/// Context of the GSM8K checker: the ground-truth final answer (the text after `####` of a
/// GSM8K solution, or a bare number; a whole solution with its `####` line works too).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AnswerContext {
    pub answer: String,
}

impl AnswerContext {
    pub fn new(answer: impl Into<String>) -> Self {
        Self {
            answer: answer.into(),
        }
    }
}

/// A sentiment model that scores whole texts (higher = more positive).
///
/// Every `TextScorer` is a [`Reward<SentimentContext>`] that scores `query + response`.
pub trait TextScorer: Send + Sync {
    /// Short name for logs ("textcat-imdb", "vader", "distilbert").
    fn name(&self) -> &str;

    /// One score per text, in order.
    fn score_texts(&self, texts: &[&str]) -> Result<Vec<f32>, RewardError>;
}

impl<T: TextScorer + ?Sized> Reward<SentimentContext> for T {
    fn name(&self) -> &str {
        TextScorer::name(self)
    }

    fn score(&self, samples: &[Sample<'_, SentimentContext>]) -> Result<Vec<f32>, RewardError> {
        let texts: Vec<String> = samples
            .iter()
            .map(|s| format!("{}{}", s.context.query, s.response))
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let scores = self.score_texts(&refs)?;
        // A scorer from outside this crate could return the wrong count; a silent zip would then
        // credit scores to the wrong samples.
        if scores.len() != samples.len() {
            return Err(RewardError::ScoreCount {
                reward: TextScorer::name(self).to_string(),
                expected: samples.len(),
                found: scores.len(),
            });
        }
        Ok(scores)
    }
}

impl<T: TextScorer + ?Sized> TextScorer for Box<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn score_texts(&self, texts: &[&str]) -> Result<Vec<f32>, RewardError> {
        (**self).score_texts(texts)
    }
}

/// The default directory of a cached asset: `<cache>/<name>`, where `<cache>` is the asset
/// cache's ([`lmrl_data::AssetCache::default_dir`]: `$LMRL_CACHE`, else
/// `$XDG_CACHE_HOME/lmrl`, else `$HOME/.cache/lmrl`).
///
/// Returns `None` when none of those is set. Loaders also accept explicit paths (and the textcat
/// loader honours `LMRL_TEXTCAT_DIR`), so this is only the fallback.
pub fn default_asset_dir(name: &str) -> Option<PathBuf> {
    asset_dir_from(name, &|k| std::env::var_os(k))
}

/// [`default_asset_dir`] with the environment read through `lookup`.
fn asset_dir_from(name: &str, lookup: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    lmrl_data::AssetCache::default_dir_from(lookup)
        .ok()
        .map(|d| d.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rewards look for their assets where the asset cache puts them, under each of its
    /// directory rules (the two used to disagree: rewards ignored `LMRL_CACHE`).
    #[test]
    fn assets_are_found_where_the_cache_puts_them() {
        // Each environment as the variables it sets, `NAME=value`.
        let env = |set: &'static [&'static str]| {
            move |k: &str| {
                set.iter()
                    .filter_map(|kv| kv.split_once('='))
                    .find_map(|(n, v)| (n == k).then(|| OsString::from(v)))
            }
        };
        let cache = env(&["LMRL_CACHE=/c", "HOME=/h"]);
        assert_eq!(
            asset_dir_from("vader", &cache),
            Some(PathBuf::from("/c/vader"))
        );
        let xdg = env(&["XDG_CACHE_HOME=/x", "HOME=/h"]);
        assert_eq!(
            asset_dir_from("imdb-textcat", &xdg),
            Some(PathBuf::from("/x/lmrl/imdb-textcat"))
        );
        let home = env(&["LMRL_CACHE=", "HOME=/h"]);
        assert_eq!(
            asset_dir_from("vader", &home),
            Some(PathBuf::from("/h/.cache/lmrl/vader"))
        );
        assert_eq!(asset_dir_from("vader", &env(&[])), None);
        // The same directory as the cache's own path for the asset.
        let dir = lmrl_data::AssetCache::default_dir_from(&cache).unwrap();
        let from_cache = lmrl_data::AssetCache::new(dir)
            .cache_path("imdb-textcat")
            .unwrap();
        assert_eq!(asset_dir_from("imdb-textcat", &cache), Some(from_cache));
    }

    /// Scores a text by its length, so the test can see which text each sample was scored on.
    struct Len;
    impl TextScorer for Len {
        fn name(&self) -> &str {
            "len"
        }
        fn score_texts(&self, texts: &[&str]) -> Result<Vec<f32>, RewardError> {
            Ok(texts.iter().map(|t| t.chars().count() as f32).collect())
        }
    }

    /// Drops the last score, as a buggy external scorer might.
    struct Short;
    impl TextScorer for Short {
        fn name(&self) -> &str {
            "short"
        }
        fn score_texts(&self, texts: &[&str]) -> Result<Vec<f32>, RewardError> {
            Ok(vec![0.0; texts.len().saturating_sub(1)])
        }
    }

    #[test]
    fn sentiment_reward_scores_query_plus_response_not_the_prompt() {
        let q1 = SentimentContext::new("This film");
        let q2 = SentimentContext::new("I");
        // The observer's prompt (query + pioneer response) is longer than its query.
        let samples = [
            Sample::new("This film", " is great", &q1),
            Sample::new("I think the movie was bad. I", " agree", &q2),
        ];
        let r: Box<dyn Reward<SentimentContext>> = Box::new(Len);
        assert_eq!(r.name(), "len");
        assert_eq!(r.score(&samples).expect("scores"), [18.0, 7.0]);
        // A boxed scorer is a scorer and a reward too.
        let boxed: Box<dyn TextScorer> = Box::new(Len);
        assert_eq!(boxed.score_texts(&["abc"]).expect("scores"), [3.0]);
        assert_eq!(
            Reward::score(&boxed, &samples[..1]).expect("scores"),
            [18.0]
        );
        assert!(Reward::score(&Len, &[]).expect("empty").is_empty());
    }

    #[test]
    fn wrong_score_count_is_an_error() {
        let q = SentimentContext::new("q");
        let err = Reward::score(&Short, &[Sample::new("q", "a", &q); 3]).expect_err("2 for 3");
        assert!(
            matches!(
                err,
                RewardError::ScoreCount {
                    expected: 3,
                    found: 2,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("short"), "{err}");
    }

    #[test]
    fn contexts_round_trip_through_json() {
        let a = AnswerContext::new("1,000");
        let text = serde_json::to_string(&a).expect("serialize");
        assert_eq!(text, r#"{"answer":"1,000"}"#);
        assert_eq!(serde_json::from_str::<AnswerContext>(&text).ok(), Some(a));
        let s: SentimentContext = serde_json::from_str(r#"{"query":"Great"}"#).expect("parse");
        assert_eq!(s, SentimentContext::new("Great"));
    }
}
