//! CORY on the tiny random GPT-2 fixture with a numeric mock environment.

use std::path::PathBuf;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Device, Tensor};
use lmrl_models::{AutoLm, LmWithValueHead, ValueHeadInit};
use lmrl_models::{GenerationConfig, Sampling};
use lmrl_rl::{CoryConfig, CoryTrainer, RewardMode, Role};

mod common;
use common::{LowIds, MockEnv, prompts};
use lmrl_rl::ppo::RunningMoments;
use lmrl_rl::{PpoAgent, PpoConfig};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpt2-tiny")
}

struct Snapshot(Vec<f32>);
impl ModuleVisitor for Snapshot {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        self.0
            .extend(p.val().try_into_vec_as::<f32>().expect("read"));
    }
}
fn snapshot<M: Module>(m: &M) -> Vec<f32> {
    let mut s = Snapshot(Vec::new());
    m.visit(&mut s);
    s.0
}

fn cfg() -> PpoConfig {
    PpoConfig {
        learning_rate: 1e-3,
        batch_size: 4,
        mini_batch_size: 2,
        ppo_epochs: 1,
        ..PpoConfig::default()
    }
}

/// The flex device's RNG is one per process and the tests of this file run on several threads:
/// a setup holds this lock from its seed until its value heads are drawn, or another test's
/// seed or draws land in between and two setups of one test start from different heads.
fn device_rng() -> std::sync::MutexGuard<'static, ()> {
    static DEVICE_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());
    DEVICE_RNG.lock().unwrap_or_else(|e| e.into_inner())
}

/// llm1 and llm2 from the same pretrained weights, each with its own fresh value head.
fn setup() -> (PpoAgent<AutoLm>, PpoAgent<AutoLm>, AutoLm) {
    setup_with(ValueHeadInit::Default)
}

/// As [`setup`] with the value heads' initialisation `init` (`Zeros` draws nothing from the
/// device's generator, which the tests running alongside share).
fn setup_with(init: ValueHeadInit) -> (PpoAgent<AutoLm>, PpoAgent<AutoLm>, AutoLm) {
    let _rng = device_rng();
    let plain = Device::flex();
    plain.seed(11);
    let ad = plain.clone().autodiff();
    let lm1 = AutoLm::from_pretrained(&fixture_dir(), &ad).expect("gpt2-tiny");
    let lm2 = AutoLm::from_pretrained(&fixture_dir(), &ad).expect("gpt2-tiny");
    let a1 = PpoAgent::new(LmWithValueHead::new(lm1, init, &ad), cfg(), &ad).unwrap();
    let a2 = PpoAgent::new(LmWithValueHead::new(lm2, init, &ad), cfg(), &ad).unwrap();
    let reference = AutoLm::from_pretrained(&fixture_dir(), &plain).expect("reference");
    (a1, a2, reference)
}

fn queries() -> Vec<Vec<u32>> {
    vec![
        vec![5, 17, 300],
        vec![42, 7, 9, 11],
        vec![3, 3],
        vec![998, 100, 250, 4],
    ]
}

fn generation(seed: u64) -> GenerationConfig {
    GenerationConfig {
        sampling: Sampling::pure(),
        max_new_tokens: 3,
        repetition_penalty: 1.0,
        eos_token_ids: vec![999],
        pad_token_id: 999,
        seed,
        first_row: 0,
        stop_sequences: Vec::new(),
        min_new_tokens: 0,
    }
}

#[test]
fn pioneer_and_observer_from_the_same_weights_give_identical_logprobs() {
    let (a1, a2, reference) = setup();
    let q = queries();
    let y = vec![vec![1, 2, 3], vec![4], vec![5, 6], vec![7, 8, 9]];
    let r1 = a1.rollout(&q, &y, &reference).unwrap();
    let r2 = a2.rollout(&q, &y, &reference).unwrap();
    let l1 = r1.logprobs.try_into_vec_as::<f32>().unwrap();
    let l2 = r2.logprobs.try_into_vec_as::<f32>().unwrap();
    assert_eq!(l1, l2, "same LM weights, same context: identical log-probs");
    let v1 = r1.values.try_into_vec_as::<f32>().unwrap();
    let v2 = r2.values.try_into_vec_as::<f32>().unwrap();
    assert_ne!(
        v1, v2,
        "each copy has its own freshly initialised value head"
    );
}

#[test]
fn swap_exchanges_weights_value_heads_and_state() {
    for reset in [false, true] {
        let (mut a1, a2, reference) = setup();
        // Give llm1 its own weights, β and reward statistics.
        let q = queries();
        let y = vec![vec![1, 2, 3], vec![4], vec![5, 6], vec![7, 8, 9]];
        a1.step(&q, &y, &[1.0, 0.0, 2.0, -1.0], &reference).unwrap();
        let (w1, w2) = (snapshot(a1.model()), snapshot(a2.model()));
        let (h1, h2) = (snapshot(&a1.model().v_head), snapshot(&a2.model().v_head));
        assert_ne!(w1, w2);
        let (beta1, beta2) = (a1.kl_coef(), a2.kl_coef());
        assert_ne!(beta1, beta2);
        let m1 = *a1.running_moments();
        let config = CoryConfig {
            reset_state_on_swap: reset,
            ..CoryConfig::default()
        };
        let mut t = CoryTrainer::new(a1, a2, reference, config).unwrap();
        assert_eq!(t.role_of(0), Role::Pioneer);
        t.swap_roles();
        assert_eq!(t.role_of(0), Role::Observer);
        assert_eq!(
            snapshot(t.pioneer().model()),
            w2,
            "pioneer now holds llm2's weights"
        );
        assert_eq!(
            snapshot(t.observer().model()),
            w1,
            "observer now holds llm1's weights"
        );
        assert_eq!(snapshot(&t.pioneer().model().v_head), h2);
        assert_eq!(snapshot(&t.observer().model().v_head), h1);
        assert_eq!(
            snapshot(t.llm(0).model()),
            w1,
            "llm1 is followed across the swap"
        );
        if reset {
            assert_eq!(t.observer().kl_coef(), cfg().init_kl_coef);
            assert_eq!(*t.observer().running_moments(), RunningMoments::new());
        } else {
            assert_eq!(t.observer().kl_coef(), beta1, "β travels with llm1");
            assert_eq!(t.pioneer().kl_coef(), beta2);
            assert_eq!(*t.observer().running_moments(), m1);
        }
        t.swap_roles();
        assert_eq!(
            snapshot(t.pioneer().model()),
            w1,
            "two swaps restore the roles"
        );
    }
}

#[test]
fn iterations_train_both_agents_and_exchange_roles() {
    let (a1, a2, reference) = setup();
    let config = CoryConfig {
        swap_period: 1,
        ..CoryConfig::default()
    };
    let mut t = CoryTrainer::new(a1, a2, reference, config).unwrap();
    let reward = LowIds::default();
    let q = prompts(&queries());
    let s0 = t
        .iteration(&q, &generation(1), &mut MockEnv, &reward)
        .unwrap();
    assert_eq!(
        reward.calls(),
        3,
        "pioneer, observer, observer in query-only format"
    );
    assert!(s0.swapped_after);
    let [l1, l2] = &s0.agents;
    assert_eq!(
        (l1.llm, l1.role, l2.llm, l2.role),
        ("llm1", Role::Pioneer, "llm2", Role::Observer)
    );
    // R = r1 + r2 goes to both (raw, before normalisation).
    assert!((l1.trained_score - (l1.task_reward + l2.task_reward)).abs() < 1e-5);
    assert_eq!(l1.trained_score, l2.trained_score);
    assert_eq!(
        l1.stats.trl["env/raw_score_mean"],
        l2.stats.trl["env/raw_score_mean"]
    );
    // Normalised with each agent's own running statistics (cory.py: norm + scaling).
    assert!(l1.stats.trl["ppo/mean_scores"].abs() < 1e-5);
    assert!(l2.query_only_kl.is_some() && l2.query_only_reward.is_some());
    assert!((l1.combined_reward - (l1.task_reward - 0.4 * l1.kl)).abs() < 1e-5);
    assert_eq!(t.role_of(0), Role::Observer);
    let s1 = t
        .iteration(&q, &generation(2), &mut MockEnv, &reward)
        .unwrap();
    let [l1, l2] = &s1.agents;
    assert_eq!(
        (l1.llm, l1.role, l2.llm, l2.role),
        ("llm1", Role::Observer, "llm2", Role::Pioneer)
    );
    assert!(
        l1.kl > 0.0 && l2.kl > 0.0,
        "both moved away from the reference"
    );
    assert_eq!(t.iterations(), 2);
    let (b1, b2) = t.into_learners();
    assert_eq!(b1.steps(), 2);
    assert_eq!(b2.steps(), 2);
}

#[test]
fn self_plus_other_reward_mode() {
    let (a1, a2, reference) = setup();
    let config = CoryConfig {
        swap_period: 0,
        reward_mode: RewardMode::SelfPlusOther { lambda: -1.0 },
        pioneer_format_metrics: false,
        ..CoryConfig::default()
    };
    let mut t = CoryTrainer::new(a1, a2, reference, config).unwrap();
    let reward = LowIds::default();
    let s = t
        .iteration(&prompts(&queries()), &generation(3), &mut MockEnv, &reward)
        .unwrap();
    let [l1, l2] = &s.agents;
    assert_eq!(reward.calls(), 2);
    assert!(!s.swapped_after);
    assert!((l1.trained_score - (l1.task_reward - l2.task_reward)).abs() < 1e-5);
    assert!((l2.trained_score - (l2.task_reward - l1.task_reward)).abs() < 1e-5);
    assert!(l2.query_only_kl.is_none());
}

/// llm1 and llm2 forked from one loaded base (as the apps make them), with PyTorch-default
/// value heads (drawn from the device's RNG).
fn setup_forked() -> (PpoAgent<AutoLm>, PpoAgent<AutoLm>, AutoLm) {
    let _rng = device_rng();
    let plain = Device::flex();
    plain.seed(11);
    let ad = plain.clone().autodiff();
    let base = AutoLm::from_pretrained(&fixture_dir(), &ad).expect("gpt2-tiny");
    let agent = |lm: AutoLm| {
        PpoAgent::new(
            LmWithValueHead::new(lm, ValueHeadInit::Default, &ad),
            cfg(),
            &ad,
        )
        .unwrap()
    };
    let a1 = agent(base.clone().fork(&ad));
    let a2 = agent(base.fork(&ad));
    let reference = AutoLm::from_pretrained(&fixture_dir(), &plain).expect("reference");
    (a1, a2, reference)
}

/// Three iterations (with role exchanges) with both updates on two threads and one after the
/// other, for copies loaded apart and for copies forked from one base with random value heads:
/// the same statistics and the same weights, bit for bit (no race for the device's RNG), and no
/// deadlock (burn's autodiff hangs when two threads' graphs share a node, as plain clones of one
/// base do).
#[test]
fn concurrent_updates_equal_the_sequential_order() {
    let run = |concurrent_updates: bool, forked: bool| {
        let (a1, a2, reference) = if forked {
            setup_forked()
        } else {
            setup_with(ValueHeadInit::Zeros)
        };
        let config = CoryConfig {
            swap_period: 1,
            concurrent_updates,
            ..CoryConfig::default()
        };
        let mut t = CoryTrainer::new(a1, a2, reference, config).unwrap();
        let reward = LowIds::default();
        let stats: Vec<String> = (0..3)
            .map(|i| {
                let s = t
                    .iteration(&prompts(&queries()), &generation(i), &mut MockEnv, &reward)
                    .unwrap();
                format!("{:?}", s.agents)
            })
            .collect();
        let (b1, b2) = t.into_learners();
        (stats, snapshot(b1.model()), snapshot(b2.model()))
    };
    for forked in [false, true] {
        let sequential = run(false, forked);
        assert_ne!(sequential.1, sequential.2, "the two copies trained apart");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(run(true, forked)));
        let concurrent = rx
            .recv_timeout(std::time::Duration::from_secs(300))
            .unwrap_or_else(|_| panic!("concurrent updates (forked: {forked}) hung"));
        assert_eq!(concurrent.0, sequential.0, "forked: {forked}");
        assert!(concurrent.1 == sequential.1 && concurrent.2 == sequential.2);
    }
}

/// A learner that records, for every step and KL measurement, which reference it was handed
/// (by the sum of the reference's weights).
struct Recording {
    inner: PpoAgent<AutoLm>,
    name: &'static str,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(&'static str, f64)>>>,
}

fn weight_sum(m: &AutoLm) -> f64 {
    snapshot(m).iter().map(|&x| f64::from(x)).sum()
}

impl Recording {
    fn saw(&self, reference: &AutoLm) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.push((self.name, weight_sum(reference)));
    }
}

impl lmrl_rl::Learner<AutoLm> for Recording {
    fn algorithm(&self) -> &'static str {
        "ppo"
    }
    fn generate(
        &self,
        prompts: &[Vec<u32>],
        config: &GenerationConfig,
    ) -> lmrl_rl::Result<lmrl_models::Generation> {
        lmrl_rl::Learner::generate(&self.inner, prompts, config)
    }
    fn step(
        &mut self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        scores: &[f32],
        reference: &AutoLm,
    ) -> lmrl_rl::Result<lmrl_rl::StepStats> {
        self.saw(reference);
        lmrl_rl::Learner::step(&mut self.inner, queries, responses, scores, reference)
    }
    fn kl_to_reference(
        &self,
        queries: &[Vec<u32>],
        responses: &[Vec<u32>],
        reference: &AutoLm,
    ) -> lmrl_rl::Result<Vec<f32>> {
        self.saw(reference);
        lmrl_rl::Learner::kl_to_reference(&self.inner, queries, responses, reference)
    }
    fn kl_coef(&self) -> f64 {
        lmrl_rl::Learner::kl_coef(&self.inner)
    }
    fn reset_state(&mut self) {
        lmrl_rl::Learner::reset_state(&mut self.inner)
    }
    fn save_state(&self, dir: &std::path::Path) -> lmrl_rl::Result<()> {
        lmrl_rl::Learner::save_state(&self.inner, dir)
    }
    fn load_state(&mut self, dir: &std::path::Path) -> lmrl_rl::Result<()> {
        lmrl_rl::Learner::load_state(&mut self.inner, dir)
    }
    fn policy(&self) -> &AutoLm {
        lmrl_rl::Learner::policy(&self.inner)
    }
}

/// Adds `.0` to every weight: a reference that differs from the original everywhere.
struct Shift(f32);
impl burn::module::ModuleMapper for Shift {
    fn map_float<const D: usize>(&mut self, p: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let d = self.0;
        p.map(|t| t.add_scalar(d))
    }
}

/// With a reference per LLM (`with_references`, as for two devices), each LLM is scored against
/// its own in both roles — its step as pioneer and as observer, and the observer's plain-query
/// KL — across role exchanges, and the pioneer's first step is the same as with one shared
/// reference.
#[test]
fn each_llm_is_scored_against_its_own_reference() {
    let (a1, a2, reference) = setup_with(ValueHeadInit::Zeros);
    let shifted = reference.clone().map(&mut Shift(1e-3));
    let (sum1, sum2) = (weight_sum(&reference), weight_sum(&shifted));
    assert!((sum1 - sum2).abs() > 1e-3, "{sum1} vs {sum2}");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recording = |inner, name| Recording {
        inner,
        name,
        seen: seen.clone(),
    };
    let config = CoryConfig {
        swap_period: 1,
        pioneer_format_metrics: true,
        ..CoryConfig::default()
    };
    let (b1, b2, _) = setup_with(ValueHeadInit::Zeros);
    let mut shared = CoryTrainer::new(b1, b2, reference.clone(), config.clone()).unwrap();
    let mut apart = CoryTrainer::with_references(
        recording(a1, "llm1"),
        recording(a2, "llm2"),
        [reference, shifted],
        config,
    )
    .unwrap();
    assert_eq!(weight_sum(apart.reference(1)), sum2);
    let reward = LowIds::default();
    for i in 0..3 {
        let (p, g) = (prompts(&queries()), generation(i));
        let a = apart.iteration(&p, &g, &mut MockEnv, &reward).unwrap();
        let s = shared.iteration(&p, &g, &mut MockEnv, &reward).unwrap();
        if i == 0 {
            assert_eq!(format!("{:?}", a.agents[0]), format!("{:?}", s.agents[0]));
            assert_ne!(
                a.agents[1].kl, s.agents[1].kl,
                "llm2's KL is to its own reference"
            );
        }
    }
    let seen = seen.lock().unwrap();
    // Per iteration: both steps and the observer's plain-query KL.
    assert_eq!(seen.len(), 9);
    for (name, sum) in seen.iter() {
        let own = if *name == "llm1" { sum1 } else { sum2 };
        assert_eq!(*sum, own, "{name} was handed the other LLM's reference");
    }
    let observed = |n: &str| seen.iter().filter(|(m, _)| *m == n).count();
    assert!(observed("llm1") >= 4 && observed("llm2") >= 4);
}
