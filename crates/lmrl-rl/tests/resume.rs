//! Exact resume: an agent (or a CORY trainer) saved after k steps and loaded into fresh
//! objects continues with bit-identical parameters and statistics, on the tiny random GPT-2
//! fixture (`tests/fixtures/gpt2-tiny`).

use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Device, Tensor};
use lmrl_models::{AutoLm, LmWithValueHead, ValueHeadInit};
use lmrl_models::{GenerationConfig, Sampling};
use lmrl_rl::RlError;
use lmrl_rl::{CoryConfig, CoryTrainer, Role};

mod common;
use common::{LowIds, MockEnv, prompts};
use lmrl_rl::{PpoAgent, PpoConfig, PpoStats};

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

/// Bit patterns, so that -0.0 ≠ 0.0 and NaN = NaN would count as they should.
fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Every piece of state matters here: two epochs of two minibatches (the permutation),
/// adaptive β, running score normalisation, global-norm clipping.
fn cfg() -> PpoConfig {
    PpoConfig {
        learning_rate: 1e-3,
        batch_size: 4,
        mini_batch_size: 2,
        ppo_epochs: 2,
        adap_kl_ctrl: true,
        use_score_scaling: true,
        use_score_norm: true,
        max_grad_norm: Some(1.0),
        seed: 5,
        ..PpoConfig::default()
    }
}

fn devices() -> (Device, Device) {
    let plain = Device::flex();
    plain.seed(3);
    let ad = plain.clone().autodiff();
    (plain, ad)
}

type Trainer = CoryTrainer<AutoLm, PpoAgent<AutoLm>>;

fn agent(ad: &Device) -> PpoAgent<AutoLm> {
    let lm = AutoLm::from_pretrained(&fixture_dir(), ad).expect("gpt2-tiny");
    PpoAgent::new(
        LmWithValueHead::new(lm, ValueHeadInit::Default, ad),
        cfg(),
        ad,
    )
    .unwrap()
}

fn reference(plain: &Device) -> AutoLm {
    AutoLm::from_pretrained(&fixture_dir(), plain).expect("reference")
}

/// The batch of step `k`: fixed queries, responses and scores that change with `k`.
fn batch(k: usize) -> (Vec<Vec<u32>>, Vec<Vec<u32>>, Vec<f32>) {
    let k32 = k as u32;
    let q = vec![
        vec![5, 17, 300],
        vec![42, 7, 9, 11, 600],
        vec![3, 3],
        vec![999, 100, 250, 4],
    ];
    let y = vec![
        vec![8 + k32, 9, 10, 11],
        vec![12 + 3 * k32],
        vec![77, 78 + k32, 79],
        vec![500, 501 - k32],
    ];
    let s = (0..4)
        .map(|i| ((i * 7 + k * 3) % 5) as f32 * 0.5 - 1.0)
        .collect();
    (q, y, s)
}

fn steps(
    a: &mut PpoAgent<AutoLm>,
    reference: &AutoLm,
    range: std::ops::Range<usize>,
) -> Vec<PpoStats> {
    range
        .map(|k| {
            let (q, y, s) = batch(k);
            a.step(&q, &y, &s, reference).unwrap()
        })
        .collect()
}

fn assert_same_stats(a: &[PpoStats], b: &[PpoStats]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        // PpoStats compares every float exactly.
        assert_eq!(x, y);
    }
}

#[test]
fn agent_saved_and_reloaded_continues_bit_identically() {
    let (plain, ad) = devices();
    let reference = reference(&plain);
    let start = agent(&ad);

    let mut full = start.clone();
    let all = steps(&mut full, &reference, 0..4);

    let mut first = start.clone();
    let before = steps(&mut first, &reference, 0..2);
    assert_same_stats(&before, &all[..2]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("agent");
    first.save(&dir).unwrap();
    drop(first);

    let mut resumed = PpoAgent::load(&dir, cfg(), &ad).unwrap();
    assert_eq!(resumed.steps(), 2);
    let after = steps(&mut resumed, &reference, 2..4);
    assert_same_stats(&after, &all[2..]);
    assert_eq!(
        bits(&snapshot(resumed.model())),
        bits(&snapshot(full.model()))
    );
    assert_eq!(resumed.kl_controller(), full.kl_controller());
    assert_eq!(resumed.running_moments(), full.running_moments());
    assert_eq!(resumed.steps(), 4);

    // Control: the weights alone (fresh Adam, β₀, empty statistics) do not continue the run,
    // so the test above is sensitive to the restored state.
    let model = LmWithValueHead::from_pretrained(&dir, true, ValueHeadInit::Default, &ad).unwrap();
    let mut naive = PpoAgent::new(model, cfg(), &ad).unwrap();
    let naive_after = steps(&mut naive, &reference, 2..4);
    assert_ne!(naive_after[0], all[2]);
    assert_ne!(snapshot(naive.model()), snapshot(full.model()));
}

#[test]
fn state_is_loaded_into_an_agent_built_from_the_saved_weights() {
    let (plain, ad) = devices();
    let reference = reference(&plain);
    let mut a = agent(&ad);
    steps(&mut a, &reference, 0..1);
    let tmp = tempfile::tempdir().unwrap();
    a.model().save_pretrained(tmp.path()).unwrap();
    a.save_state(tmp.path()).unwrap();
    for f in ["optimizer.bpk", "trainer_state.toml"] {
        assert!(tmp.path().join(f).is_file(), "{f}");
    }
    let model =
        LmWithValueHead::from_pretrained(tmp.path(), true, ValueHeadInit::Default, &ad).unwrap();
    let mut b = PpoAgent::new(model, cfg(), &ad).unwrap();
    b.load_state(tmp.path()).unwrap();
    assert_eq!(b.training_state().unwrap(), a.training_state().unwrap());
    let sa = steps(&mut a, &reference, 1..2);
    let sb = steps(&mut b, &reference, 1..2);
    assert_same_stats(&sa, &sb);
    assert_eq!(bits(&snapshot(a.model())), bits(&snapshot(b.model())));
}

#[test]
fn reset_state_restarts_the_minibatch_stream() {
    let (plain, ad) = devices();
    let reference = reference(&plain);
    let mut a = agent(&ad);
    steps(&mut a, &reference, 0..2);
    assert_eq!(a.training_state().unwrap().rng_steps, 2);
    a.reset_state();
    let s = a.training_state().unwrap();
    assert_eq!((s.steps, s.rng_steps), (2, 0));
    assert_eq!(a.kl_coef(), cfg().init_kl_coef);
}

#[test]
fn missing_or_mismatched_state_is_a_typed_error() {
    let (_plain, ad) = devices();
    let mut a = agent(&ad);
    let tmp = tempfile::tempdir().unwrap();
    match a.load_state(&tmp.path().join("nowhere")) {
        Err(RlError::State { path, .. }) => {
            assert!(path.ends_with("nowhere/trainer_state.toml"), "{path:?}")
        }
        other => panic!("expected a state error, got {other:?}"),
    }
    // A state whose parameter list does not match the model names the parameter.
    a.save_state(tmp.path()).unwrap();
    let file = tmp.path().join("trainer_state.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    let first_path = text
        .lines()
        .skip_while(|l| !l.starts_with("[param_ids]"))
        .nth(1)
        .and_then(|l| l.split(" = ").next())
        .unwrap()
        .to_string();
    std::fs::write(&file, text.replacen(&first_path, "\"no.such.param\"", 1)).unwrap();
    let err = a.load_state(tmp.path()).unwrap_err().to_string();
    assert!(
        err.contains(first_path.trim_matches('"')) && err.contains("trainer_state.toml"),
        "{err}"
    );
}

fn generation(it: usize) -> GenerationConfig {
    GenerationConfig {
        sampling: Sampling::pure(),
        max_new_tokens: 3,
        repetition_penalty: 1.0,
        eos_token_ids: vec![999],
        pad_token_id: 999,
        seed: 100 + it as u64,
        first_row: 0,
        stop_sequences: Vec::new(),
        min_new_tokens: 0,
    }
}

fn queries() -> Vec<Vec<u32>> {
    vec![
        vec![5, 17, 300],
        vec![42, 7, 9, 11],
        vec![3, 3],
        vec![998, 100, 250, 4],
    ]
}

fn cory_config() -> CoryConfig {
    CoryConfig {
        swap_period: 2,
        ..CoryConfig::default()
    }
}

fn run_iterations(t: &mut Trainer, range: std::ops::Range<usize>) -> Vec<String> {
    range
        .map(|it| {
            let s = t
                .iteration(
                    &prompts(&queries()),
                    &generation(it),
                    &mut MockEnv,
                    &LowIds::default(),
                )
                .unwrap();
            // Every metric, both agents' PPO statistics and the texts, as one string.
            serde_json::to_string(&s).unwrap()
        })
        .collect()
}

/// Two agents with their own value heads (drawn from the device RNG once, then cloned, so
/// that every trainer of a test starts from the same weights).
fn start_agents(ad: &Device) -> (PpoAgent<AutoLm>, PpoAgent<AutoLm>) {
    (agent(ad), agent(ad))
}

fn trainer(plain: &Device, start: &(PpoAgent<AutoLm>, PpoAgent<AutoLm>)) -> Trainer {
    CoryTrainer::new(
        start.0.clone(),
        start.1.clone(),
        reference(plain),
        cory_config(),
    )
    .unwrap()
}

fn check_resumed(full: &Trainer, resumed: &Trainer) {
    for i in 0..2 {
        assert_eq!(
            bits(&snapshot(resumed.llm(i).model())),
            bits(&snapshot(full.llm(i).model())),
            "llm{}",
            i + 1
        );
        assert_eq!(
            resumed.llm(i).training_state().unwrap().kl_controller,
            full.llm(i).training_state().unwrap().kl_controller
        );
        assert_eq!(resumed.role_of(i), full.role_of(i));
    }
    assert_eq!(resumed.iterations(), full.iterations());
}

#[test]
fn cory_trainer_saved_after_a_role_exchange_continues_bit_identically() {
    let (plain, ad) = devices();
    let start = start_agents(&ad);
    let mut full = trainer(&plain, &start);
    let all = run_iterations(&mut full, 0..5);

    let mut part = trainer(&plain, &start);
    let before = run_iterations(&mut part, 0..3);
    assert_eq!(before, all[..3]);
    // Swapped after iteration 2: llm2 is the pioneer at the checkpoint.
    assert_eq!(part.role_of(1), Role::Pioneer);
    let tmp = tempfile::tempdir().unwrap();
    part.save(tmp.path()).unwrap();
    drop(part);

    let mut resumed =
        CoryTrainer::load(tmp.path(), &cfg(), reference(&plain), cory_config(), &ad).unwrap();
    assert_eq!(resumed.iterations(), 3);
    assert_eq!(resumed.role_of(1), Role::Pioneer);
    let after = run_iterations(&mut resumed, 3..5);
    assert_eq!(after, all[3..]);
    check_resumed(&full, &resumed);
}

#[test]
fn cory_state_loads_into_a_trainer_built_from_saved_weights() {
    let (plain, ad) = devices();
    let start = start_agents(&ad);
    let mut full = trainer(&plain, &start);
    let all = run_iterations(&mut full, 0..4);
    let mut part = trainer(&plain, &start);
    run_iterations(&mut part, 0..3);
    let tmp = tempfile::tempdir().unwrap();
    let dir: &Path = tmp.path();
    for i in 0..2 {
        let d = dir.join(Trainer::llm_name(i));
        part.llm(i).model().save_pretrained(&d).unwrap();
    }
    part.save_state(dir).unwrap();
    let load = |name: &str| {
        let m =
            LmWithValueHead::from_pretrained(&dir.join(name), true, ValueHeadInit::Default, &ad)
                .unwrap();
        PpoAgent::new(m, cfg(), &ad).unwrap()
    };
    let mut resumed =
        CoryTrainer::new(load("llm1"), load("llm2"), reference(&plain), cory_config()).unwrap();
    resumed.load_state(dir).unwrap();
    let after = run_iterations(&mut resumed, 3..4);
    assert_eq!(after, all[3..]);
    check_resumed(&full, &resumed);
}
