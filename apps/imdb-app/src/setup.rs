//! Turning the names in a [`RunConfig`] into things: reward model, review prompts (the asset
//! cache, policy path and tokenizer come from `lmrl_runs`).
use std::path::Path;

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use lmrl_data::{AssetCache, ImdbPrompt, PromptConfig, ReadOptions, Review, build_prompts};
use lmrl_models::LmTokenizer;
use lmrl_rewards::{DistilBertReward, RewardError, TextCat, TextScorer, Vader};

use crate::config::RunConfig;

/// A reward by name: `textcat`, `vader`, or `distilbert:DIR` (also `distilbert=DIR`).
pub fn load_reward(spec: &str, cache: &AssetCache, device: &Device) -> Result<Box<dyn TextScorer>> {
    let (kind, arg) = match spec.split_once([':', '=']) {
        Some((k, a)) => (k, Some(a)),
        None => (spec, None),
    };
    Ok(match (kind, arg) {
        ("textcat", None) => {
            let dir = cache.resolve("imdb-textcat")?;
            Box::new(TextCat::load(&dir)?)
        }
        ("textcat", Some(dir)) => Box::new(TextCat::load(Path::new(dir))?),
        ("vader", None) => Box::new(Vader::load(&cache.resolve("vader")?)?),
        ("vader", Some(lex)) => Box::new(Vader::load(Path::new(lex))?),
        ("distilbert", Some(dir)) => Box::new(DistilBertReward::load(Path::new(dir), device)?),
        ("distilbert", None) => bail!("`--reward distilbert` needs a directory: distilbert:DIR"),
        _ => bail!("unknown reward `{spec}`: use textcat, vader or distilbert:DIR"),
    })
}

/// Scores each full text `q + y` (the reference scores `decode(q) + decode(y)`), naming the
/// iteration when the reward fails or returns the wrong number of scores.
pub fn score_texts(
    reward: &dyn TextScorer,
    texts: &[String],
    iteration: usize,
) -> Result<Vec<f32>> {
    let batch: Vec<&str> = texts.iter().map(String::as_str).collect();
    let scores = reward.score_texts(&batch).map_err(|e: RewardError| {
        anyhow::anyhow!(
            "reward `{}` failed on iteration {iteration}: {e}",
            reward.name()
        )
    })?;
    if scores.len() != texts.len() {
        bail!(
            "reward `{}` returned {} scores for {} texts on iteration {iteration}",
            reward.name(),
            scores.len(),
            texts.len()
        );
    }
    if let Some(i) = scores.iter().position(|s| !s.is_finite()) {
        bail!(
            "reward `{}` gave a non-finite score ({}) on iteration {iteration}, sample {i}: {:?}",
            reward.name(),
            scores[i],
            texts[i]
        );
    }
    Ok(scores)
}

/// Reads every review source and builds the prompts (first 2–7 tokens of each review).
pub fn load_prompts(
    cfg: &RunConfig,
    cache: &AssetCache,
    tok: &LmTokenizer,
) -> Result<Vec<ImdbPrompt>> {
    let mut reviews: Vec<Review> = Vec::new();
    for src in &cfg.data {
        let path = lmrl_runs::resolve_path_or_asset(cache, src)?;
        let report = lmrl_data::read_reviews(&path, None, ReadOptions::skip_bad_rows())
            .with_context(|| format!("cannot read reviews from {}", path.display()))?;
        if report.skipped_count() > 0 {
            eprintln!(
                "note: {} unreadable rows skipped in {}",
                report.skipped_count(),
                path.display()
            );
        }
        reviews.extend(report.items);
    }
    let pc = PromptConfig {
        min_chars: cfg.min_review_chars,
        min_tokens: cfg.prompt_tokens_min,
        max_tokens: cfg.prompt_tokens_max,
        strip_br: true,
        seed: cfg.seed,
    };
    let encode = |t: &str| tok.encode(t).unwrap_or_default();
    let decode = |ids: &[u32]| tok.decode(ids).unwrap_or_default();
    let prompts = build_prompts(&reviews, &pc, &encode, &decode)?;
    if prompts.len() < cfg.batch_size {
        bail!(
            "only {} prompts from {} reviews (after dropping reviews of ≤ {} characters), \
             fewer than one batch of {}",
            prompts.len(),
            reviews.len(),
            cfg.min_review_chars,
            cfg.batch_size
        );
    }
    Ok(prompts)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Failing;
    impl TextScorer for Failing {
        fn name(&self) -> &str {
            "failing"
        }
        fn score_texts(&self, batch: &[&str]) -> Result<Vec<f32>, RewardError> {
            if batch.len() > 1 {
                return Err(RewardError::Input("batch too large".into()));
            }
            Ok(vec![f32::NAN])
        }
    }

    #[test]
    fn a_failing_reward_names_the_iteration() {
        let texts = vec!["a".to_string(), "b".to_string()];
        let err = score_texts(&Failing, &texts, 17).unwrap_err().to_string();
        assert!(
            err.contains("iteration 17") && err.contains("failing"),
            "{err}"
        );
        let err = score_texts(&Failing, &texts[..1], 3)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("iteration 3") && err.contains("non-finite"),
            "{err}"
        );
    }
}
