//! The IMDB task: continue the opening of a movie review positively. Prompts are the first
//! 2–7 tokens of a review (the reference's prompt builder); the reward scores the plain query
//! plus the response with a sentiment classifier; CORY's observer sees
//! `I can make this sentence "{q}{y1}" more positive: {q}`.
use std::path::Path;

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use lmrl_data::{
    AssetCache, PromptConfig, ReadOptions, Review, build_prompts, imdb_observer_prompt,
};
use lmrl_models::{GenerationConfig, LmTokenizer, ModelError, Sampling};
use lmrl_rewards::{
    DistilBertReward, Reward, SentimentContext, TextCat, TextCatScore, TextScorer, Vader,
};
use lmrl_rl::Prompt;
use lmrl_runs::Level;
use lmrl_train::{Stage, Task, TaskEnv, TaskError, TrainConfig, iter_rng, stream};
use rand::Rng;

use crate::config::{ImdbConfig, ImdbSettings};
use crate::eval::{self, EvalRow, EvalSettings, Opening};

/// A sentiment reward by name: `textcat`, `textcat-prob`, `vader`, or `distilbert:DIR` (a
/// directory or lexicon may follow `textcat:` and `vader:` too).
pub fn load_reward(spec: &str, cache: &AssetCache, device: &Device) -> Result<Box<dyn TextScorer>> {
    let (kind, arg) = match spec.split_once([':', '=']) {
        Some((k, a)) => (k, Some(a)),
        None => (spec, None),
    };
    let textcat = |score| -> Result<Box<dyn TextScorer>> {
        let dir = match arg {
            Some(d) => d.into(),
            None => cache.resolve("imdb-textcat")?,
        };
        Ok(Box::new(TextCat::load(&dir)?.with_score(score)))
    };
    Ok(match (kind, arg) {
        ("textcat", _) => textcat(TextCatScore::Logit)?,
        ("textcat-prob", _) => textcat(TextCatScore::Probability)?,
        ("vader", None) => Box::new(Vader::load(&cache.resolve("vader")?)?),
        ("vader", Some(lex)) => Box::new(Vader::load(Path::new(lex))?),
        ("distilbert", Some(dir)) => Box::new(DistilBertReward::load(Path::new(dir), device)?),
        ("distilbert", None) => bail!("`--reward distilbert` needs a directory: distilbert:DIR"),
        _ => bail!("unknown reward `{spec}`: use textcat, textcat-prob, vader or distilbert:DIR"),
    })
}

/// The IMDB classifier behind a `textcat` / `textcat-prob` reward (for P(POS)); none for
/// other rewards.
pub fn load_textcat(spec: &str, cache: &AssetCache) -> Result<Option<TextCat>> {
    let (kind, arg) = match spec.split_once([':', '=']) {
        Some((k, a)) => (k, Some(a)),
        None => (spec, None),
    };
    if kind != "textcat" && kind != "textcat-prob" {
        return Ok(None);
    }
    let dir = match arg {
        Some(d) => d.into(),
        None => cache.resolve("imdb-textcat")?,
    };
    Ok(Some(TextCat::load(&dir)?))
}

/// Names each skipped row (`path:line: reason`; the first [`SHOWN_SKIPPED`]) and the count.
fn report_skipped(skipped: &[lmrl_data::DataError], path: &std::path::Path) {
    for e in skipped.iter().take(SHOWN_SKIPPED) {
        eprintln!("note: skipped {e}");
    }
    if skipped.len() > SHOWN_SKIPPED {
        eprintln!("note: … and {} more", skipped.len() - SHOWN_SKIPPED);
    }
    if !skipped.is_empty() {
        eprintln!(
            "note: {} unreadable rows skipped in {} (--skip-bad-rows false stops at the first)",
            skipped.len(),
            path.display()
        );
    }
}

/// Skipped rows named one by one before the count.
const SHOWN_SKIPPED: usize = 20;

/// The seed of the held-out openings' lengths: one set of openings for every run seed.
const HELDOUT_SEED: u64 = 0;

/// The prompts of a run: training prompts and held-out openings.
pub struct Prompts {
    pub train: Vec<Prompt<SentimentContext>>,
    pub heldout: Vec<Opening>,
}

/// Reads every review source and builds the prompts (the first 2–7 tokens of each review),
/// each carrying its plain query as the reward's context. The `heldout_reviews` reviews whose
/// text hashes lowest ([`review_hash`], the same reviews for every seed) give the held-out
/// openings instead (lengths drawn with [`HELDOUT_SEED`]); a training prompt whose text equals
/// a held-out opening is dropped too, so no held-out text is ever trained on.
pub fn load_prompts(
    t: &ImdbSettings,
    seed: u64,
    cache: &AssetCache,
    tok: &LmTokenizer,
) -> Result<Prompts> {
    let mut reviews: Vec<Review> = Vec::new();
    for src in &t.data {
        let path = lmrl_train::resolve_path_or_asset(cache, src)?;
        let opts = if t.skip_bad_rows {
            ReadOptions::skip_bad_rows()
        } else {
            ReadOptions::strict()
        };
        let report = lmrl_data::read_reviews(&path, None, opts)
            .with_context(|| format!("cannot read reviews from {}", path.display()))?;
        report_skipped(&report.skipped, &path);
        reviews.extend(report.items);
    }
    let total = reviews.len();
    let (heldout, train) = split_heldout(reviews, t.heldout_reviews, t.min_review_chars);
    if t.heldout_reviews > 0 && train.len() * 2 < total {
        bail!(
            "imdb.heldout_reviews = {} holds out {} of the {total} reviews, more than half: \
             lower it (--heldout-reviews) or add reviews",
            t.heldout_reviews,
            heldout.len()
        );
    }
    let pc = |seed| PromptConfig {
        min_chars: t.min_review_chars,
        min_tokens: t.prompt_tokens_min,
        max_tokens: t.prompt_tokens_max,
        strip_br: true,
        seed,
    };
    let encode = |s: &str| tok.encode(s).unwrap_or_default();
    let decode = |ids: &[u32]| tok.decode(ids).unwrap_or_default();
    let heldout: Vec<Opening> = build_prompts(&heldout, &pc(HELDOUT_SEED), &encode, &decode)?
        .into_iter()
        .map(|p| Opening { text: p.query })
        .collect();
    let held: std::collections::BTreeSet<&str> = heldout.iter().map(|o| o.text.as_str()).collect();
    let train = build_prompts(&train, &pc(seed), &encode, &decode)?
        .into_iter()
        .filter(|p| !held.contains(p.query.as_str()))
        .map(|p| Prompt {
            context: SentimentContext::new(p.query.clone()),
            text: p.query,
            ids: p.input_ids,
        })
        .collect();
    Ok(Prompts { train, heldout })
}

/// FNV-1a (64-bit) of a review's text: a fixed, platform-independent order to hold reviews out
/// by, unrelated to their source order or label.
pub fn review_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// (held-out, training) reviews: the `n` eligible reviews (longer than `min_chars`) with the
/// lowest [`review_hash`], and every review whose text is not one of theirs, each in source
/// order.
fn split_heldout(reviews: Vec<Review>, n: usize, min_chars: usize) -> (Vec<Review>, Vec<Review>) {
    let mut hashes: Vec<u64> = reviews
        .iter()
        .filter(|r| r.text.chars().count() > min_chars)
        .map(|r| review_hash(&r.text))
        .collect();
    hashes.sort_unstable();
    hashes.dedup();
    hashes.truncate(n);
    let held: std::collections::BTreeSet<u64> = hashes.into_iter().collect();
    reviews
        .into_iter()
        .partition(|r| held.contains(&review_hash(&r.text)))
}

/// The IMDB task of one run.
pub struct ImdbTask {
    prompts: Vec<Prompt<SentimentContext>>,
    heldout: Vec<Opening>,
    reward: Box<dyn TextScorer>,
    /// The classifier for the held-out P(POS), when the reward is that classifier.
    textcat: Option<TextCat>,
    tokenizer: LmTokenizer,
    device: Device,
    settings: ImdbSettings,
    seed: u64,
    /// The ids generation stops on (EOS first).
    eos: Vec<u32>,
    pad: u32,
}

impl ImdbTask {
    /// The task of the settings `cfg`, with its reward and prompts loaded.
    pub fn new(cfg: &ImdbConfig, env: &TaskEnv<'_>) -> Result<Self> {
        let t = &cfg.imdb;
        let max_pos = env.model.max_positions;
        match t.prompt_tokens_max.checked_add(t.response_tokens_max) {
            Some(n) if n <= max_pos => {}
            _ => bail!(
                "imdb.prompt_tokens_max + imdb.response_tokens_max = {} + {} tokens do not fit \
                 the model's {max_pos}-token context",
                t.prompt_tokens_max,
                t.response_tokens_max
            ),
        }
        let reward = load_reward(&cfg.imdb.reward, env.cache, env.device)?;
        let textcat = load_textcat(&cfg.imdb.reward, env.cache)?;
        let Prompts {
            train: prompts,
            heldout,
        } = load_prompts(&cfg.imdb, cfg.run.seed, env.cache, env.tokenizer)?;
        let batch = cfg.prompts_drawn();
        if prompts.len() < batch {
            bail!(
                "only {} prompts (after dropping reviews of ≤ {} characters), fewer than one batch \
                 of {batch}",
                prompts.len(),
                cfg.imdb.min_review_chars,
            );
        }
        let eos = env.tokenizer.eos_token_ids();
        if env.rank == 0 {
            eprintln!(
                "{} prompts ({} iterations per epoch of {batch}), {} held-out openings, reward {}",
                prompts.len(),
                prompts.len() / batch,
                heldout.len(),
                TextScorer::name(&reward)
            );
        }
        Ok(Self {
            prompts,
            heldout,
            reward,
            textcat,
            tokenizer: env.tokenizer.clone(),
            device: env.device.clone(),
            settings: cfg.imdb.clone(),
            seed: cfg.run.seed,
            eos,
            pad: env.pad_id,
        })
    }

    fn eval_settings(&self) -> EvalSettings {
        EvalSettings {
            samples: self.settings.eval_samples,
            max_new_tokens: self.settings.response_tokens_max,
            seed: self.seed,
            eos: self.eos.clone(),
            pad: self.pad,
            strip_eos: self.settings.strip_eos,
        }
    }

    /// Writes the held-out openings and, before training, the base model's held-out reward
    /// (also the plots' reference level); after it, every copy's, with its gain over the base
    /// model when the "before" row is there. The "after" rows replace any earlier ones (a
    /// resumed run that finishes again).
    fn evaluate_heldout<M: lmrl_models::CausalLm>(
        &self,
        stage: Stage,
        copies: &[(&str, &M)],
        out: &Path,
    ) -> Result<()> {
        if self.heldout.is_empty() {
            return Ok(());
        }
        if stage == Stage::Before {
            eval::write_openings(&out.join(eval::HELDOUT_FILE), &self.heldout)?;
        }
        if self.settings.eval_samples == 0 {
            return Ok(());
        }
        let name = match stage {
            Stage::Before => "before",
            Stage::After => "after",
        };
        // Before training the table starts afresh; after it, the "before" rows stay.
        let keep = |s: &str| stage == Stage::After && s == "before";
        let mut rows: Vec<EvalRow> = eval::read_eval(out)?
            .into_iter()
            .filter(|r| keep(&r.stage))
            .collect();
        let mut samples = eval::read_samples(out, keep)?;
        let base = rows
            .iter()
            .find(|r| r.stage == "before" && r.agent == "base")
            .map(|r| r.per_opening.clone());
        let ids = eval::encode_openings(&self.tokenizer, &self.heldout)?;
        let scorer = eval::Scorer {
            reward: &*self.reward,
            textcat: self.textcat.as_ref(),
        };
        for (agent, lm) in copies {
            let (row, lines) = eval::evaluate(
                (name, agent),
                *lm,
                &self.tokenizer,
                &self.heldout,
                &ids,
                &scorer,
                &self.eval_settings(),
                base.as_deref(),
                &self.device,
            )?;
            eprintln!(
                "{name} training, {agent}: held-out task reward {:+.3} ± {:.3} on {} openings",
                row.reward, row.reward_sem, row.openings
            );
            if stage == Stage::Before {
                let label = format!("base model, held-out ({} openings)", row.openings);
                lmrl_runs::write_levels(
                    out,
                    &[Level {
                        label,
                        value: row.reward,
                    }],
                )?;
            }
            rows.push(row);
            samples.extend(lines);
        }
        eval::write_eval(out, &rows, &samples)?;
        if stage == Stage::After {
            println!(
                "held-out task reward ({} openings never trained on × {} samples, {} tokens, reward {}):\n\n{}",
                self.heldout.len(),
                self.settings.eval_samples,
                self.settings.response_tokens_max,
                TextScorer::name(&self.reward),
                eval::markdown(&rows)
            );
        }
        Ok(())
    }

    /// Builds the task for the training loop (errors as the loop's task errors).
    pub fn build(cfg: &ImdbConfig, env: &TaskEnv<'_>) -> std::result::Result<Self, TaskError> {
        Self::new(cfg, env).map_err(|e| e.into_boxed_dyn_error())
    }
}

impl<M: lmrl_models::CausalLm> Task<M> for ImdbTask {
    type Context = SentimentContext;

    fn prompts(&self) -> &[Prompt<SentimentContext>] {
        &self.prompts
    }

    fn reward(&self) -> &dyn Reward<SentimentContext> {
        &self.reward
    }

    fn observer_prompt(
        &self,
        prompt: &Prompt<SentimentContext>,
        pioneer_response: &str,
    ) -> std::result::Result<String, TaskError> {
        Ok(imdb_observer_prompt(&prompt.text, pioneer_response))
    }

    /// Pure sampling (TRL's `top_k=0, top_p=1.0`) for `gen_len` new tokens, one `gen_len` per
    /// batch drawn from the response-length range (the reference's `LengthSampler`).
    fn generation(&self, iteration: usize, seed: u64) -> GenerationConfig {
        let t = &self.settings;
        let gen_len = iter_rng(self.seed, iteration, stream::RESPONSE_LEN)
            .random_range(t.response_tokens_min..=t.response_tokens_max);
        GenerationConfig {
            sampling: Sampling::pure(),
            max_new_tokens: gen_len,
            repetition_penalty: t.repetition_penalty,
            eos_token_ids: self.eos.clone(),
            pad_token_id: self.pad,
            seed,
            first_row: 0,
            stop_sequences: Vec::new(),
            min_new_tokens: 0,
        }
    }

    /// The held-out task reward of the base model before training and of every copy after it
    /// ([`crate::eval`]).
    fn evaluate(
        &self,
        stage: Stage,
        copies: &[(&str, &M)],
        out: &Path,
    ) -> std::result::Result<(), TaskError> {
        self.evaluate_heldout(stage, copies, out)
            .map_err(|e| e.into_boxed_dyn_error())
    }

    /// The response as the reference scores it (`batch_decode` keeps the EOS text), or without
    /// the EOS text with `strip_eos`.
    fn decode(
        &self,
        tokenizer: &LmTokenizer,
        ids: &[u32],
    ) -> std::result::Result<String, ModelError> {
        if !self.settings.strip_eos {
            return tokenizer.decode(ids);
        }
        let kept: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|i| !self.eos.contains(i))
            .collect();
        tokenizer.decode(&kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(text: &str) -> Review {
        Review {
            text: text.into(),
            label: None,
        }
    }

    #[test]
    fn review_hash_is_fnv1a_64() {
        // The published FNV-1a test vectors.
        assert_eq!(review_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(review_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(review_hash("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_lowest_hashing_long_reviews_are_held_out_with_their_duplicates() {
        let texts: Vec<String> = (0..20)
            .map(|i| format!("review number {i} is long"))
            .collect();
        let mut reviews: Vec<Review> = texts.iter().map(|t| review(t)).collect();
        reviews.push(review("short"));
        let mut by_hash = texts.clone();
        by_hash.sort_by_key(|t| review_hash(t));
        // A duplicate of the lowest-hashing review goes with it.
        reviews.push(review(&by_hash[0]));
        let (held, train) = split_heldout(reviews, 3, 10);
        let held: Vec<&str> = held.iter().map(|r| r.text.as_str()).collect();
        let mut want: Vec<&str> = by_hash[..3].iter().map(String::as_str).collect();
        want.push(&by_hash[0]);
        let mut sorted = held.clone();
        sorted.sort();
        want.sort();
        assert_eq!(sorted, want);
        assert_eq!(train.len(), 21 + 1 - 4);
        assert!(
            train.iter().any(|r| r.text == "short"),
            "short reviews are never held out"
        );
        assert!(train.iter().all(|r| !held.contains(&r.text.as_str())));
        let (none, all) = split_heldout(vec![review("x"), review("y")], 0, 0);
        assert!(none.is_empty() && all.len() == 2);
    }
}
