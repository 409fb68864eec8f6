//! The single-learner rollout: the learner steps on exactly the responses it generated and the
//! scores the reward gave them, prompts repeated as its groups need.
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use burn::tensor::Device;
use lmrl_models::{
    AutoLm, CausalLm, Generation, GenerationConfig, LmWithValueHead, ValueHeadInit, generate,
};
use lmrl_rewards::{Reward, RewardError, Sample};
use lmrl_rl::{
    EnvError, Learner, PpoAgent, PpoConfig, Prompt, RlError, ScoredBatch, StepStats, rollout,
    rollout_step,
};

mod common;
use common::{LowIds, ids_text, prompts};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpt2-tiny")
}

fn queries() -> Vec<Vec<u32>> {
    vec![vec![5, 17, 300], vec![42, 7, 9, 11], vec![3, 3]]
}

fn generation() -> GenerationConfig {
    GenerationConfig::default()
        .with_max_new_tokens(4)
        .with_seed(7)
}

/// What a learner saw: the batches it generated and the one it stepped on.
type StepInputs = (Vec<Vec<u32>>, Vec<Vec<u32>>, Vec<f32>);

/// A learner that generates with its frozen policy, `group` samples per prompt, and records
/// what it generated and what it was asked to step on, without training.
struct Recorder {
    policy: AutoLm,
    group: usize,
    generated: Mutex<Vec<Vec<Vec<u32>>>>,
    stepped: Option<StepInputs>,
}

impl Learner<AutoLm> for Recorder {
    fn algorithm(&self) -> &'static str {
        "recorder"
    }
    fn samples_per_prompt(&self) -> usize {
        self.group
    }
    fn generate(
        &self,
        prompts: &[Vec<u32>],
        config: &GenerationConfig,
    ) -> lmrl_rl::Result<Generation> {
        let g = generate(&self.policy, prompts, config, &Device::flex())?;
        self.generated.lock().unwrap().push(g.tokens.clone());
        Ok(g)
    }
    fn step(
        &mut self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
        _reference: &AutoLm,
    ) -> lmrl_rl::Result<StepStats> {
        self.stepped = Some((queries.to_vec(), responses.to_vec(), scores.to_vec()));
        Ok(StepStats::default())
    }
    fn kl_to_reference(
        &self,
        _queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        _reference: &AutoLm,
    ) -> lmrl_rl::Result<Vec<f32>> {
        Ok(vec![0.0; responses.len()])
    }
    fn kl_coef(&self) -> f64 {
        0.0
    }
    fn reset_state(&mut self) {}
    fn save_state(&self, _dir: &Path) -> lmrl_rl::Result<()> {
        Ok(())
    }
    fn load_state(&mut self, _dir: &Path) -> lmrl_rl::Result<()> {
        Ok(())
    }
    fn policy(&self) -> &AutoLm {
        &self.policy
    }
}

fn recorder(group: usize) -> Recorder {
    Recorder {
        policy: AutoLm::from_pretrained(&fixture_dir(), &Device::flex()).expect("gpt2-tiny"),
        group,
        generated: Mutex::new(Vec::new()),
        stepped: None,
    }
}

/// LowIds by hand: the fraction of a response's ids below 500.
fn low_fraction(ids: &[u32]) -> f32 {
    ids.iter().filter(|&&i| i < 500).count() as f32 / ids.len().max(1) as f32
}

fn decode(ids: &[u32]) -> Result<String, EnvError> {
    Ok(ids_text(ids))
}

/// [`rollout_step`] over the prompts of [`queries`] with the [`LowIds`] reward.
fn low_ids_step<L: Learner<AutoLm>>(
    learner: &mut L,
    reference: &AutoLm,
) -> lmrl_rl::Result<(ScoredBatch, StepStats)> {
    let batch = prompts(&queries());
    let reward = LowIds::default();
    rollout_step(learner, &batch, &generation(), &decode, &reward, reference)
}

#[test]
fn the_learner_steps_on_its_own_responses_and_the_rewards_scores() {
    for group in [1, 2] {
        let mut learner = recorder(group);
        let reference = learner.policy.clone();
        let (scored, _) = low_ids_step(&mut learner, &reference).unwrap();
        let generated = learner.generated.lock().unwrap().clone();
        assert_eq!(generated.len(), 1, "one generation call");
        let responses = &generated[0];
        let want_queries: Vec<Vec<u32>> = queries()
            .into_iter()
            .flat_map(|q| std::iter::repeat_n(q, group))
            .collect();
        let want_scores: Vec<f32> = responses.iter().map(|y| low_fraction(y)).collect();
        let stepped = learner.stepped.clone().expect("stepped");
        assert_eq!(
            stepped,
            (want_queries.clone(), responses.clone(), want_scores.clone())
        );
        assert_eq!(scored.queries, want_queries);
        assert_eq!(&scored.responses, responses);
        assert_eq!(scored.scores, want_scores);
        let texts: Vec<String> = responses.iter().map(|y| ids_text(y)).collect();
        assert_eq!(scored.texts, texts);
        let mean = want_scores.iter().sum::<f32>() / want_scores.len() as f32;
        assert!((scored.mean_score() - mean).abs() < 1e-6);
        if group == 2 {
            assert_ne!(
                responses[0], responses[1],
                "a group's samples draw their own noise"
            );
        }
    }
}

/// Scores each sample by its context, recording the prompts it was shown.
struct ByContext(Mutex<Vec<String>>);

impl Reward<f32> for ByContext {
    fn name(&self) -> &str {
        "by-context"
    }
    fn score(&self, samples: &[Sample<'_, f32>]) -> Result<Vec<f32>, RewardError> {
        let mut seen = self.0.lock().unwrap();
        seen.extend(samples.iter().map(|s| s.prompt.to_string()));
        Ok(samples.iter().map(|s| *s.context).collect())
    }
}

#[test]
fn each_sample_is_scored_with_its_own_prompts_text_and_context() {
    let learner = recorder(2);
    let batch: Vec<Prompt<f32>> = queries()
        .into_iter()
        .enumerate()
        .map(|(i, q)| Prompt::new(q, format!("prompt {i}"), i as f32 * 10.0))
        .collect();
    let reward = ByContext(Mutex::new(Vec::new()));
    let scored = rollout(&learner, &batch, &generation(), &decode, &reward).unwrap();
    assert_eq!(scored.scores, vec![0.0, 0.0, 10.0, 10.0, 20.0, 20.0]);
    let shown = reward.0.lock().unwrap().clone();
    let want = [
        "prompt 0", "prompt 0", "prompt 1", "prompt 1", "prompt 2", "prompt 2",
    ];
    assert_eq!(shown, want);
}

/// Answers one score too few.
struct Short;

impl Reward<()> for Short {
    fn name(&self) -> &str {
        "short"
    }
    fn score(&self, samples: &[Sample<'_, ()>]) -> Result<Vec<f32>, RewardError> {
        Ok(vec![0.0; samples.len().saturating_sub(1)])
    }
}

#[test]
fn a_miscounting_reward_and_a_failing_decoder_are_errors_not_steps() {
    let mut learner = recorder(1);
    let reference = learner.policy.clone();
    let batch = prompts(&queries());
    let err = rollout_step(
        &mut learner,
        &batch,
        &generation(),
        &decode,
        &Short,
        &reference,
    )
    .unwrap_err();
    assert!(matches!(err, RlError::Shape { .. }), "{err}");
    let failing = |_: &[u32]| -> Result<String, EnvError> { Err("no vocabulary".into()) };
    let err = rollout_step(
        &mut learner,
        &batch,
        &generation(),
        &failing,
        &LowIds::default(),
        &reference,
    )
    .unwrap_err();
    assert!(err.to_string().contains("no vocabulary"), "{err}");
    assert!(learner.stepped.is_none(), "no step on a failed rollout");
}

fn ppo_agent(device: &Device) -> PpoAgent<AutoLm> {
    let lm = AutoLm::from_pretrained(&fixture_dir(), device).expect("gpt2-tiny");
    let config = PpoConfig {
        learning_rate: 1e-3,
        batch_size: 3,
        mini_batch_size: 3,
        ppo_epochs: 1,
        ..PpoConfig::default()
    };
    PpoAgent::new(
        LmWithValueHead::new(lm, ValueHeadInit::Zeros, device),
        config,
        device,
    )
    .unwrap()
}

#[test]
fn a_ppo_rollout_step_is_generate_score_and_the_learners_step() {
    let ad = Device::flex().autodiff();
    let reference = AutoLm::from_pretrained(&fixture_dir(), &Device::flex()).expect("reference");
    let (mut helper, mut by_hand) = (ppo_agent(&ad), ppo_agent(&ad));
    let (scored, stats) = low_ids_step(&mut helper, &reference).unwrap();

    let responses = by_hand.generate(&queries(), &generation()).unwrap().tokens;
    let scores: Vec<f32> = responses.iter().map(|y| low_fraction(y)).collect();
    let want = Learner::step(&mut by_hand, &queries(), &responses, &scores, &reference).unwrap();
    assert_eq!(scored.responses, responses);
    assert_eq!(scored.scores, scores);
    assert_eq!(stats, want, "the same step, bit for bit");
    assert!(stats.kl.is_finite() && stats.policy_loss.is_finite());
    let mean_len = responses.iter().map(Vec::len).sum::<usize>() as f32 / 3.0;
    assert_eq!(stats.response_len_mean, mean_len);
    assert_eq!(helper.policy().vocab_size(), reference.vocab_size());
}
