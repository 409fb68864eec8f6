//! Generation, sampling and scoring against the golden fixtures, hand-computed values and
//! invariants (cache vs no cache, seeds, top-k = 1 vs greedy, score vs plain forward).
use std::path::PathBuf;

use burn::tensor::activation::log_softmax;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use lmrl_models::{AutoLm, CausalLm, LmWithValueHead, ModelError};
use lmrl_models::{Generation, generate, left_pad};
use lmrl_models::{
    GenerationConfig, Sampling, TokenChooser, apply_repetition_penalty, presence_mask,
    process_logits, top_k_filter, top_p_filter,
};
use lmrl_models::{QueryResponseBatch, response_logprobs, response_values, score, score_reference};
use serde_json::Value;

mod common;

fn device() -> Device {
    common::backend_device()
}

fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn expected(name: &str) -> Value {
    let path = fixture_dir(name).join("expected.json");
    let text = std::fs::read_to_string(&path).expect("fixture expected.json is readable");
    serde_json::from_str(&text).expect("fixture expected.json is JSON")
}

fn load(name: &str) -> AutoLm {
    AutoLm::from_pretrained(&fixture_dir(name), &device()).expect("fixture model loads")
}

fn ints(v: &Value) -> Vec<Vec<i64>> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("row")
                .iter()
                .map(|x| x.as_i64().expect("int"))
                .collect()
        })
        .collect()
}

fn floats(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("row")
                .iter()
                .map(|x| x.as_f64().expect("float"))
                .collect()
        })
        .collect()
}

/// The real tokens of left-padded rows (mask 1).
fn strip_padding(ids: &[Vec<i64>], mask: &[Vec<i64>]) -> Vec<Vec<u32>> {
    ids.iter()
        .zip(mask)
        .map(|(r, m)| {
            r.iter()
                .zip(m)
                .filter(|(_, m)| **m == 1)
                .map(|(t, _)| *t as u32)
                .collect()
        })
        .collect()
}

fn to_vec2(t: Tensor<2>) -> Vec<Vec<f32>> {
    let [_, c] = t.dims();
    let v = t.try_into_vec_as::<f32>().unwrap();
    v.chunks(c).map(<[f32]>::to_vec).collect()
}

fn to_ivec2(t: Tensor<2, Int>) -> Vec<Vec<i64>> {
    let [_, c] = t.dims();
    let v = t.try_into_vec_as::<i64>().unwrap();
    v.chunks(c).map(<[i64]>::to_vec).collect()
}

fn fixture_prompts(name: &str) -> (Vec<Vec<u32>>, Value) {
    let g = expected(name)["greedy_left_padded"].clone();
    let prompts = strip_padding(&ints(&g["input_ids"]), &ints(&g["attention_mask"]));
    (prompts, g)
}

fn check_greedy_fixture(name: &str) {
    let model = load(name);
    let eos = model.eos_token_id();
    let (prompts, g) = fixture_prompts(name);
    let n = g["max_new_tokens"].as_u64().unwrap() as usize;
    let want_tokens = ints(&g["new_tokens"]);
    let want_lp = floats(&g["new_token_logprobs"]);
    // HF uses eos as pad when the model has no pad token; the pad id only fills masked slots.
    let cfg = GenerationConfig::greedy(n, eos, eos.unwrap_or(0));
    let out = generate(&model, &prompts, &cfg, &device()).unwrap();
    for (r, (got, want)) in out.tokens.iter().zip(&want_tokens).enumerate() {
        let got: Vec<i64> = got.iter().map(|&t| t as i64).collect();
        assert_eq!(&got, want, "{name}: row {r} tokens");
    }
    for (r, (got, want)) in out.logprobs.iter().zip(&want_lp).enumerate() {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (*g as f64 - w).abs() < 1e-4,
                "{name}: row {r} step {i}: logprob {g} vs {w}"
            );
        }
    }
    assert_eq!(to_ivec2(out.padded), want_tokens);
    assert!(to_ivec2(out.mask).iter().flatten().all(|&m| m == 1));
}

#[test]
fn greedy_left_padded_matches_hf_gpt2() {
    check_greedy_fixture("gpt2-tiny");
}

#[test]
fn greedy_left_padded_matches_hf_llama() {
    check_greedy_fixture("llama-tiny");
}

/// A row that emits EOS stops (EOS kept, then padding with mask 0) and does not disturb the
/// other rows: with eos = llama row 0's first greedy token, row 0 is `[295]` and rows 1–2 are
/// the fixture's.
#[test]
fn per_row_stop_at_eos() {
    let model = load("llama-tiny");
    let (prompts, g) = fixture_prompts("llama-tiny");
    let want = ints(&g["new_tokens"]);
    let eos = want[0][0] as u32;
    let cfg = GenerationConfig::greedy(6, Some(eos), 0);
    let out = generate(&model, &prompts, &cfg, &device()).unwrap();
    assert_eq!(out.tokens[0], vec![eos]);
    for (r, want_row) in want.iter().enumerate().skip(1) {
        // a row stops at its first `eos`, wherever it appears
        let cut = want_row
            .iter()
            .position(|&t| t == eos as i64)
            .map_or(6, |p| p + 1);
        let w: Vec<u32> = want_row[..cut].iter().map(|&t| t as u32).collect();
        assert_eq!(out.tokens[r], w, "row {r}");
    }
    let mask = to_ivec2(out.mask);
    let padded = to_ivec2(out.padded);
    assert_eq!(mask[0], vec![1, 0, 0, 0, 0, 0]);
    assert_eq!(padded[0], vec![eos as i64, 0, 0, 0, 0, 0]);
    assert_eq!(out.logprobs[0].len(), 1);
}

/// `min_new_tokens` (HF's): with eos = llama row 0's first greedy token, row 0 cannot stop
/// before 3 tokens, so its first token is the runner-up of the fixture's logits; a row whose
/// free run has no EOS among its first 3 tokens is unchanged.
#[test]
fn min_new_tokens_holds_eos_back() {
    let model = load("llama-tiny");
    let (prompts, _) = fixture_prompts("llama-tiny");
    let free = GenerationConfig::greedy(6, None, 0);
    let eos = generate(&model, &prompts, &free, &device()).unwrap().tokens[0][0];
    let cfg = GenerationConfig {
        eos_token_ids: vec![eos],
        min_new_tokens: 3,
        ..free.clone()
    };
    let out = generate(&model, &prompts, &cfg, &device()).unwrap();
    let stopping = GenerationConfig {
        eos_token_ids: vec![eos],
        ..free.clone()
    };
    let plain = generate(&model, &prompts, &stopping, &device()).unwrap();
    assert_eq!(plain.tokens[0], vec![eos]);
    for (r, row) in out.tokens.iter().enumerate() {
        assert!(row.len() >= 3, "row {r}: {row:?}");
        assert!(!row[..3].contains(&eos), "row {r}: {row:?}");
        if !plain.tokens[r].iter().take(3).any(|&t| t == eos) {
            assert_eq!(row, &plain.tokens[r], "row {r}");
        }
    }
    // Row 0's first token: the argmax of its first-step logits once EOS is excluded.
    let step0 = lmrl_models::suppress_early_eos(first_step_logits(&model, &prompts), 0, &cfg);
    let best = to_vec2(step0)[0]
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32);
    assert_eq!(Some(out.tokens[0][0]), best);
    // Past the floor it changes nothing.
    let late = lmrl_models::suppress_early_eos(first_step_logits(&model, &prompts), 3, &cfg);
    assert_eq!(to_vec2(late), to_vec2(first_step_logits(&model, &prompts)));
}

/// The next-token logits of every prompt (left-padded), `[B, V]`.
fn first_step_logits(model: &AutoLm, prompts: &[Vec<u32>]) -> Tensor<2> {
    let (ids, mask, positions) = left_pad(prompts, 0, &device());
    let logits = model.forward(ids, positions, mask, None).logits;
    let [b, l, v] = logits.dims();
    logits.slice([0..b, l - 1..l, 0..v]).reshape([b, v])
}

/// A row stops once its new tokens end with a stop sequence (kept, as the EOS is); the other
/// rows, and the samples of a row before its stop, are those of the run without stop sequences.
#[test]
fn stop_sequences_end_rows_and_change_nothing_else() {
    let model = load("gpt2-tiny");
    let (prompts, _) = fixture_prompts("gpt2-tiny");
    let free = generate(&model, &prompts, &sample_cfg(3, 0, 1.0, 1.0), &device()).unwrap();
    // Row 0 stops at its 2-token window starting at position 3; a sequence no row produces is
    // harmless, an empty one is ignored.
    let stop = free.tokens[0][3..5].to_vec();
    let cfg = GenerationConfig {
        stop_sequences: vec![vec![], stop.clone(), vec![u32::MAX, u32::MAX]],
        ..sample_cfg(3, 0, 1.0, 1.0)
    };
    let out = generate(&model, &prompts, &cfg, &device()).unwrap();
    for (r, (full, cut)) in free.tokens.iter().zip(&out.tokens).enumerate() {
        let end = (stop.len()..=full.len())
            .find(|&n| full[..n].ends_with(&stop))
            .unwrap_or(full.len());
        assert_eq!(cut, &full[..end].to_vec(), "row {r}");
        assert_eq!(out.logprobs[r], free.logprobs[r][..end].to_vec(), "row {r}");
    }
    assert!(out.tokens[0].len() <= 5 && out.tokens[0].ends_with(&stop));
    assert!(cfg.ends_with_stop(&out.tokens[0]));
    assert!(!cfg.ends_with_stop(&[]));
    // Deterministic.
    let again = generate(&model, &prompts, &cfg, &device()).unwrap();
    assert_eq!(again.tokens, out.tokens);
}

fn sample_cfg(seed: u64, top_k: usize, top_p: f32, temperature: f32) -> GenerationConfig {
    GenerationConfig {
        sampling: Sampling::Sample {
            temperature,
            top_k,
            top_p,
        },
        max_new_tokens: 12,
        repetition_penalty: 1.0,
        eos_token_ids: Vec::new(),
        pad_token_id: 0,
        seed,
        first_row: 0,
        stop_sequences: Vec::new(),
        min_new_tokens: 0,
    }
}

#[test]
fn same_seed_same_samples_different_seed_differs() {
    let model = load("gpt2-tiny");
    let (prompts, _) = fixture_prompts("gpt2-tiny");
    let a = generate(&model, &prompts, &sample_cfg(7, 0, 1.0, 1.0), &device()).unwrap();
    let b = generate(&model, &prompts, &sample_cfg(7, 0, 1.0, 1.0), &device()).unwrap();
    let c = generate(&model, &prompts, &sample_cfg(8, 0, 1.0, 1.0), &device()).unwrap();
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.logprobs, b.logprobs);
    assert_ne!(a.tokens, c.tokens);
    assert!(a.tokens.iter().all(|r| r.len() == 12));
    // a random tiny model is close to uniform over 1000 tokens: sampled log-probs are finite
    // and negative
    assert!(
        a.logprobs
            .iter()
            .flatten()
            .all(|&l| l.is_finite() && l < 0.0)
    );
}

/// Each row draws from its own stream, keyed by its global index `first_row + r`: a prompt gets
/// the same sample alone, in a chunk of a larger batch or at the start of another rank's share
/// — what makes a batch split across data-parallel ranks sample as one process does.
#[test]
fn a_row_samples_the_same_in_any_chunk_at_its_global_index() {
    let model = load("gpt2-tiny");
    let prompts: Vec<Vec<u32>> = vec![
        vec![5, 17, 300],
        vec![42, 7, 9, 11, 600],
        vec![3, 3],
        vec![999, 100, 250, 4],
    ];
    let cfg = |first_row: u64| GenerationConfig {
        first_row,
        ..sample_cfg(7, 0, 1.0, 1.0)
    };
    let whole = generate(&model, &prompts, &cfg(0), &device()).unwrap();
    // The last two prompts as a chunk starting at global row 2 (differently padded).
    let tail = generate(&model, &prompts[2..], &cfg(2), &device()).unwrap();
    assert_eq!(tail.tokens, whole.tokens[2..]);
    // One prompt alone at its index.
    let one = generate(&model, &prompts[1..2], &cfg(1), &device()).unwrap();
    assert_eq!(one.tokens, whole.tokens[1..2]);
    for (a, b) in one.logprobs[0].iter().zip(&whole.logprobs[1]) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
    // The index, not the position in the call, picks the stream: the same chunk at row 0
    // samples something else.
    let shifted = generate(&model, &prompts[2..], &cfg(0), &device()).unwrap();
    assert_ne!(shifted.tokens, whole.tokens[2..]);
    // Streams of neighbouring rows and seeds are distinct.
    let seeds: std::collections::BTreeSet<u64> = (0..4u64)
        .flat_map(|s| (0..64u64).map(move |r| lmrl_models::row_seed(s, r)))
        .collect();
    assert_eq!(seeds.len(), 4 * 64);
}

/// Test-only reference: generation without a KV cache, re-running the whole left-padded
/// sequence every step (positions = cumsum(mask) - 1), with the same processors and chooser.
fn generate_no_cache(model: &AutoLm, prompts: &[Vec<u32>], cfg: &GenerationConfig) -> Generation {
    let dev = device();
    let vocab = model.vocab_size();
    let b = prompts.len();
    let mut seqs: Vec<Vec<u32>> = prompts.to_vec();
    let mut real: Vec<Vec<bool>> = prompts.iter().map(|p| vec![true; p.len()]).collect();
    let mut finished = vec![false; b];
    let mut tokens = vec![Vec::new(); b];
    let mut logprobs = vec![Vec::new(); b];
    let mut history: Vec<Vec<u32>> = prompts.to_vec();
    let mut chooser = TokenChooser::new(cfg);
    for _ in 0..cfg.max_new_tokens {
        let l = seqs.iter().map(Vec::len).max().unwrap();
        let mut ids = vec![cfg.pad_token_id as i64; b * l];
        let mut mask = vec![0i64; b * l];
        let mut pos = vec![0i64; b * l];
        for r in 0..b {
            let off = l - seqs[r].len();
            let mut p = 0;
            for i in 0..seqs[r].len() {
                ids[r * l + off + i] = seqs[r][i] as i64;
                if real[r][i] {
                    mask[r * l + off + i] = 1;
                    pos[r * l + off + i] = p;
                    p += 1;
                } else {
                    pos[r * l + off + i] = (p - 1).max(0);
                }
            }
        }
        let t = |v: Vec<i64>| Tensor::<2, Int>::from_data(TensorData::new(v, [b, l]), &dev);
        let logits = model.forward(t(ids), t(pos), t(mask), None).logits;
        let last: Tensor<2> = logits.narrow(1, l - 1, 1).reshape([b, vocab]);
        let seen = (cfg.repetition_penalty != 1.0).then(|| presence_mask(&history, vocab, &dev));
        let choice = chooser.choose(process_logits(last, seen, cfg)).unwrap();
        for r in 0..b {
            if finished[r] {
                seqs[r].push(cfg.pad_token_id);
                real[r].push(false);
                continue;
            }
            let tok = choice.tokens[r];
            tokens[r].push(tok);
            logprobs[r].push(choice.logprobs[r]);
            history[r].push(tok);
            seqs[r].push(tok);
            real[r].push(true);
            if cfg.is_eos(tok) {
                finished[r] = true;
            }
        }
        if finished.iter().all(|&f| f) {
            break;
        }
    }
    let (padded, mask, _) = left_pad(&tokens, cfg.pad_token_id, &dev);
    Generation {
        tokens,
        logprobs,
        padded,
        mask,
    }
}

fn assert_same_generation(a: &Generation, b: &Generation) {
    assert_eq!(a.tokens, b.tokens);
    for (ra, rb) in a.logprobs.iter().zip(&b.logprobs) {
        for (x, y) in ra.iter().zip(rb) {
            assert!((x - y).abs() < 1e-4, "{x} vs {y}");
        }
    }
}

#[test]
fn cache_and_no_cache_agree() {
    for name in ["gpt2-tiny", "llama-tiny"] {
        let model = load(name);
        let (prompts, _) = fixture_prompts(name);
        let mut greedy = GenerationConfig::greedy(8, None, 0);
        greedy.repetition_penalty = 1.3;
        let a = generate(&model, &prompts, &greedy, &device()).unwrap();
        assert_same_generation(&a, &generate_no_cache(&model, &prompts, &greedy));

        let mut sampled = sample_cfg(11, 50, 0.9, 0.8);
        // stop rows early on a token the seed-11 run draws, to exercise finished rows
        let probe = generate(&model, &prompts, &sampled, &device()).unwrap();
        sampled.eos_token_ids = vec![probe.tokens[1][2]];
        let a = generate(&model, &prompts, &sampled, &device()).unwrap();
        assert!(a.tokens[1].len() <= 3);
        assert_same_generation(&a, &generate_no_cache(&model, &prompts, &sampled));
    }
}

/// Rows that finish early leave the running batch (and its cache); the rows still generating
/// sample exactly what the cache-free reference, which keeps every row to the end, samples.
#[test]
fn finished_rows_leave_the_batch_and_change_nothing_else() {
    for name in ["gpt2-tiny", "llama-tiny"] {
        let model = load(name);
        let (base, _) = fixture_prompts(name);
        // 12 prompts of several lengths, so that rows stop at different steps.
        let prompts: Vec<Vec<u32>> = (0..12)
            .map(|i| {
                let p = &base[i % base.len()];
                p[..p.len() - (i / base.len()).min(p.len() - 1)].to_vec()
            })
            .collect();
        let mut cfg = sample_cfg(5, 0, 1.0, 1.0);
        let probe = generate(&model, &prompts, &cfg, &device()).unwrap();
        // The token the probe draws most often as EOS.
        let mut counts = std::collections::BTreeMap::<u32, usize>::new();
        for &t in probe.tokens.iter().flatten() {
            *counts.entry(t).or_default() += 1;
        }
        let eos = counts
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(t, _)| *t)
            .unwrap();
        cfg.eos_token_ids = vec![eos];
        let out = generate(&model, &prompts, &cfg, &device()).unwrap();
        let lengths: std::collections::BTreeSet<usize> = out.tokens.iter().map(Vec::len).collect();
        assert!(
            lengths.len() >= 3,
            "{name}: rows stop at too few steps: {lengths:?}"
        );
        assert!(lengths.contains(&cfg.max_new_tokens), "{name}: {lengths:?}");
        assert_same_generation(&out, &generate_no_cache(&model, &prompts, &cfg));
    }
}

#[test]
fn top_k_one_equals_greedy_with_logprob_zero() {
    let model = load("llama-tiny");
    let (prompts, g) = fixture_prompts("llama-tiny");
    let mut cfg = sample_cfg(3, 1, 1.0, 0.7);
    cfg.max_new_tokens = 6;
    let out = generate(&model, &prompts, &cfg, &device()).unwrap();
    let want = ints(&g["new_tokens"]);
    for (got, want) in out.tokens.iter().zip(&want) {
        let got: Vec<i64> = got.iter().map(|&t| t as i64).collect();
        assert_eq!(&got, want);
    }
    // one surviving token: probability 1 under the processed distribution
    assert!(out.logprobs.iter().flatten().all(|&l| l.abs() < 1e-6));
}

fn row(v: &[f32]) -> Tensor<2> {
    Tensor::from_data(TensorData::new(v.to_vec(), [1, v.len()]), &device())
}

#[test]
fn repetition_penalty_hand_computed() {
    let logits = row(&[1.0, -2.0, 0.5, 3.0, -1.0]);
    let seen: Tensor<2, Bool> = presence_mask(&[vec![0, 1, 3, 3]], 5, &device());
    let out = to_vec2(apply_repetition_penalty(logits, seen, 2.0));
    // seen: 1.0/2, -2.0*2, 3.0/2; unseen unchanged
    assert_eq!(out[0], vec![0.5, -4.0, 0.5, 1.5, -1.0]);
}

#[test]
fn processors_run_in_hf_order() {
    // penalty (÷1.5 on id 2) → temperature 0.5 → top-k 2
    let mut cfg = sample_cfg(0, 2, 1.0, 0.5);
    cfg.repetition_penalty = 1.5;
    let seen = presence_mask(&[vec![2]], 4, &device());
    let out = to_vec2(process_logits(row(&[0.0, 1.0, 3.0, 2.5]), Some(seen), &cfg));
    let ninf = f32::NEG_INFINITY;
    // id 2: 3.0/1.5 = 2.0 → /0.5 = 4.0; id 3: 5.0; id 1: 2.0 is third → removed
    assert_eq!(out[0], vec![ninf, ninf, 4.0, 5.0]);
}

#[test]
fn top_k_keeps_ties() {
    let ninf = f32::NEG_INFINITY;
    let l = row(&[1.0, 3.0, 2.0, 3.0]);
    assert_eq!(
        to_vec2(top_k_filter(l.clone(), 1))[0],
        vec![ninf, 3.0, ninf, 3.0]
    );
    assert_eq!(
        to_vec2(top_k_filter(l.clone(), 3))[0],
        vec![ninf, 3.0, 2.0, 3.0]
    );
    assert_eq!(to_vec2(top_k_filter(l, 0))[0], vec![1.0, 3.0, 2.0, 3.0]);
}

#[test]
fn top_p_keeps_smallest_nucleus() {
    let ninf = f32::NEG_INFINITY;
    // probabilities 0.15, 0.5, 0.05, 0.3 (scrambled to exercise the un-sort)
    let p = [0.15f32, 0.5, 0.05, 0.3];
    let l = row(&p.map(f32::ln));
    let kept = |top_p: f32| -> Vec<bool> {
        to_vec2(top_p_filter(l.clone(), top_p))[0]
            .iter()
            .map(|x| *x != ninf)
            .collect()
    };
    assert_eq!(kept(0.4), vec![false, true, false, false]); // 0.5 ≥ 0.4
    assert_eq!(kept(0.7), vec![false, true, false, true]); // 0.8 ≥ 0.7
    assert_eq!(kept(0.9), vec![true, true, false, true]); // 0.95 ≥ 0.9
    assert_eq!(kept(0.01), vec![false, true, false, false]); // at least one
    assert_eq!(kept(1.0), vec![true, true, true, true]);
}

/// The device-side inverse-CDF draw follows the processed distribution and never picks a
/// filtered token.
#[test]
fn categorical_draw_matches_probabilities() {
    let p = [0.1f32, 0.0, 0.6, 0.3];
    let logits = row(&p.map(|x| if x > 0.0 { x.ln() } else { f32::NEG_INFINITY }));
    let rows = 2000;
    let batch = logits.repeat_dim(0, rows);
    let cfg = sample_cfg(5, 0, 1.0, 1.0);
    let mut chooser = TokenChooser::new(&cfg);
    let choice = chooser.choose(batch).unwrap();
    let mut counts = [0usize; 4];
    for (&t, &lp) in choice.tokens.iter().zip(&choice.logprobs) {
        counts[t as usize] += 1;
        assert!((lp - p[t as usize].ln()).abs() < 1e-5);
    }
    assert_eq!(counts[1], 0);
    for (c, q) in counts.iter().zip(p) {
        let freq = *c as f32 / rows as f32;
        // 4.5 standard deviations of a binomial proportion at n = 2000
        assert!((freq - q).abs() < 0.05, "{counts:?}");
    }
}

#[test]
fn generation_errors_are_typed() {
    let model = load("gpt2-tiny");
    let cfg = GenerationConfig::greedy(4, Some(999), 999);
    let dev = device();
    assert!(matches!(
        generate(&model, &[], &cfg, &dev),
        Err(ModelError::Input(_))
    ));
    assert!(matches!(
        generate(&model, &[vec![1, 2], vec![]], &cfg, &dev),
        Err(ModelError::Input(_))
    ));
    match generate(&model, &[vec![1, 2], vec![3, 1000]], &cfg, &dev) {
        Err(ModelError::TokenOutOfRange {
            id: 1000,
            row: 1,
            pos: 1,
            vocab: 1000,
        }) => {}
        other => panic!("expected TokenOutOfRange, got {other:?}"),
    }
    let long = vec![1u32; 61]; // n_positions = 64
    assert!(matches!(
        generate(&model, &[long], &cfg, &dev),
        Err(ModelError::ContextTooLong { len: 65, max: 64 })
    ));
    let mut bad = sample_cfg(0, 0, 1.0, 0.0);
    bad.max_new_tokens = 2;
    assert!(matches!(
        generate(&model, &[vec![1]], &bad, &dev),
        Err(ModelError::Input(_))
    ));
}

fn qr() -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    (
        vec![vec![5, 17, 300, 41], vec![9], vec![77, 12]],
        vec![vec![8, 9], vec![500, 3, 3, 42, 7], vec![998]],
    )
}

/// `score` equals a plain forward of each unpadded `[q; y]`, read by hand at
/// `|q| + t - 1` for token `y[t]`.
#[test]
fn score_matches_hand_indexed_forward() {
    let dev = device();
    let lm = load("gpt2-tiny");
    let model = LmWithValueHead::new(lm, lmrl_models::ValueHeadInit::Default, &dev);
    let (queries, responses) = qr();
    let batch = QueryResponseBatch::new(&queries, &responses, 999, &dev).unwrap();
    assert_eq!(batch.max_response_len(), 5);
    let scored = score(&model, &batch);
    let reference = score_reference(&model.lm, &batch);
    let lp = to_vec2(scored.logprobs);
    let ref_lp = to_vec2(reference.logprobs);
    let values = to_vec2(scored.values);
    let mask = to_vec2(scored.mask);
    let [_, _, vocab] = scored.log_softmax.dims();
    for (b, (q, y)) in queries.iter().zip(&responses).enumerate() {
        let seq: Vec<i64> = q.iter().chain(y).map(|&t| t as i64).collect();
        let s = seq.len();
        let ids = Tensor::<2, Int>::from_data(TensorData::new(seq, [1, s]), &dev);
        let ones = Tensor::<2, Int>::ones([1, s], &dev);
        let (logits, vals) = model.forward(ids, ones);
        let ls = log_softmax(logits, 2);
        let vals = to_vec2(vals)[0].clone();
        let row_ls: Tensor<2> = scored
            .log_softmax
            .clone()
            .narrow(0, b, 1)
            .reshape([5, vocab]);
        let row_ls = to_vec2(row_ls);
        for t in 0..5 {
            if t < y.len() {
                let p = q.len() + t - 1;
                let pos_ls = to_vec2(ls.clone().narrow(1, p, 1).reshape([1, vocab]))[0].clone();
                let want = pos_ls[y[t] as usize];
                assert!((lp[b][t] - want).abs() < 1e-5, "row {b} t {t}");
                assert!((ref_lp[b][t] - want).abs() < 1e-5);
                assert!((values[b][t] - vals[p]).abs() < 1e-5);
                assert_eq!(mask[b][t], 1.0);
                for (x, w) in row_ls[t].iter().zip(&pos_ls) {
                    assert!((x - w).abs() < 1e-5);
                }
            } else {
                assert_eq!(mask[b][t], 0.0);
                assert_eq!(lp[b][t], 0.0);
                assert_eq!(values[b][t], 0.0);
            }
        }
    }
}

/// Only a vocabulary head, the identity on `V` = 16 hidden units: the hidden states handed to
/// `response_logprobs` are then the logits themselves.
#[derive(burn::module::Module, Debug)]
struct IdentityHead {
    proj: burn::nn::Linear,
}

impl CausalLm for IdentityHead {
    fn hidden_states(
        &self,
        _: Tensor<2, Int>,
        _: Tensor<2, Int>,
        _: Tensor<2, Int>,
        _: Option<&mut lmrl_models::KvCache>,
    ) -> Tensor<3> {
        unreachable!("the test feeds hidden states directly")
    }
    fn lm_head(&self, hidden: Tensor<2>) -> Tensor<2> {
        hidden.matmul(self.proj.weight.val())
    }
    fn vocab_size(&self) -> usize {
        16
    }
    fn hidden_size(&self) -> usize {
        16
    }
    fn max_positions(&self) -> usize {
        64
    }
}

/// The gather is differentiable: the gradient of Σ logprobs w.r.t. the logits is
/// `onehot(y_t) - softmax` at the response positions and zero elsewhere.
#[test]
fn response_logprobs_backpropagates() {
    let dev = device().autodiff();
    let (queries, responses) = qr();
    // keep ids inside the 16-token toy vocabulary
    let small: Vec<Vec<u32>> = responses
        .iter()
        .map(|r| r.iter().map(|t| t % 16).collect())
        .collect();
    let small_q: Vec<Vec<u32>> = queries
        .iter()
        .map(|r| r.iter().map(|t| t % 16).collect())
        .collect();
    let batch = QueryResponseBatch::new(&small_q, &small, 0, &dev).unwrap();
    let (b, s, v) = (3, batch.seq_len(), 16);
    let data: Vec<f32> = (0..b * s * v)
        .map(|i| ((i * 37 % 101) as f32) / 50.0)
        .collect();
    let logits = Tensor::<3>::from_data(TensorData::new(data, [b, s, v]), &dev).require_grad();
    let head = IdentityHead {
        proj: burn::nn::Linear {
            weight: burn::module::Param::from_tensor(Tensor::eye(16, &dev)),
            bias: None,
        },
    };
    let (lp, _) = response_logprobs(&head, logits.clone(), &batch);
    let grads = lp.sum().backward();
    let g = logits.grad(&grads).expect("logits get a gradient");
    let g = g.try_into_vec_as::<f32>().unwrap();
    let probs = burn::tensor::activation::softmax(logits.inner(), 2)
        .try_into_vec_as::<f32>()
        .unwrap();
    for bi in 0..b {
        let (q, y) = (small_q[bi].len(), &small[bi]);
        for p in 0..s {
            for k in 0..v {
                let i = (bi * s + p) * v + k;
                let want = if p + 1 >= q && p + 1 < q + y.len() {
                    let tok = y[p + 1 - q] as usize;
                    f32::from(k == tok) - probs[i]
                } else {
                    0.0
                };
                assert!((g[i] - want).abs() < 1e-5, "b {bi} p {p} k {k}");
            }
        }
    }
    // values gather on autodiff tensors too
    let vals = Tensor::<2>::ones([b, s], &dev).require_grad();
    let rv = response_values(vals.clone(), &batch);
    assert_eq!(rv.dims(), [3, 5]);
}

#[test]
fn query_response_batch_errors() {
    let dev = device();
    assert!(QueryResponseBatch::new(&[vec![]], &[vec![1]], 0, &dev).is_err());
    assert!(QueryResponseBatch::new(&[vec![1]], &[vec![]], 0, &dev).is_err());
    assert!(QueryResponseBatch::new(&[vec![1]], &[], 0, &dev).is_err());
    let b = QueryResponseBatch::new(&[vec![1]], &[vec![1000]], 0, &dev).unwrap();
    assert!(matches!(
        b.check_vocab(1000),
        Err(ModelError::TokenOutOfRange { id: 1000, .. })
    ));
}

/// Every float parameter's gradient, flattened, in visiting order.
struct AllGrads<'a> {
    grads: &'a burn::optim::GradientsParams,
    out: Vec<Vec<f32>>,
}

impl burn::module::ModuleVisitor for AllGrads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            self.out.push(g.try_into_vec_as::<f32>().unwrap());
        }
    }
}

/// Σ of the masked response log-probs of `hidden` (`[B, T, H]`) and every parameter's gradient.
fn logprob_sum_and_grads(
    model: &AutoLm,
    hidden: Tensor<3>,
    batch: &QueryResponseBatch,
) -> (Vec<f32>, Vec<Vec<f32>>) {
    use burn::module::Module;
    let dev = hidden.device();
    let [b, t, h] = hidden.dims();
    let ls = log_softmax(model.lm_head(hidden.reshape([b * t, h])), 1);
    let ids: Vec<i64> = batch
        .responses()
        .iter()
        .flat_map(|y| (0..t).map(|k| y.get(k).map_or(0, |&v| i64::from(v))))
        .collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [b * t, 1]), &dev);
    let lp = ls.gather(1, ids).reshape([b, t]) * batch.response_mask(&dev);
    let values = lp.clone().detach().try_into_vec_as::<f32>().unwrap();
    let grads = burn::optim::GradientsParams::from_grads(lp.sum().backward(), model);
    let mut v = AllGrads {
        grads: &grads,
        out: Vec::new(),
    };
    model.visit(&mut v);
    (values, v.out)
}

/// Repeated queries are run once and their cache rows shared: the response log-probs and every
/// parameter gradient equal those of the full right-padded forward (the gradient of a shared
/// query sums over the completions that share it), for GPT-2 and Llama, with queries and
/// responses of different lengths (one response of a single token).
#[test]
fn shared_queries_give_the_full_forward_and_its_gradients() {
    let dev = device().autodiff();
    let queries = vec![
        vec![5, 17, 300, 41],
        vec![9, 4],
        vec![5, 17, 300, 41],
        vec![9, 4],
        vec![5, 17, 300, 41],
        vec![77],
    ];
    let responses = vec![
        vec![8, 9, 10],
        vec![500, 3, 3, 42, 7],
        vec![998],
        vec![6, 6],
        vec![8, 9, 11, 12],
        vec![1, 2, 3],
    ];
    for name in ["gpt2-tiny", "llama-tiny"] {
        let model = AutoLm::from_pretrained(&fixture_dir(name), &dev).expect("fixture model loads");
        let batch = QueryResponseBatch::new(&queries, &responses, 0, &dev).unwrap();
        let shared = lmrl_models::response_hidden_states(&model, &batch, &dev);
        assert_eq!(shared.dims()[..2], [6, 5]);
        let (lp_shared, g_shared) = logprob_sum_and_grads(&model, shared, &batch);
        // The independent truth: TRL's layout, one forward over every `[q; y]` row.
        let full = model.forward_simple(batch.input_ids.clone(), batch.attention_mask.clone());
        let (lp_full, _) = response_logprobs(&model, full.hidden.clone(), &batch);
        let lp_full_host = lp_full.clone().try_into_vec_as::<f32>().unwrap();
        for (k, (a, w)) in lp_shared.iter().zip(&lp_full_host).enumerate() {
            assert!((a - w).abs() < 1e-5, "{name}: log-prob {k}: {a} vs {w}");
        }
        assert!(lp_full_host.iter().any(|&x| x != 0.0));
        let grads = burn::optim::GradientsParams::from_grads(lp_full.sum().backward(), &model);
        let mut v = AllGrads {
            grads: &grads,
            out: Vec::new(),
        };
        burn::module::Module::visit(&model, &mut v);
        assert_eq!(
            g_shared.len(),
            v.out.len(),
            "{name}: parameters with a gradient"
        );
        for (p, (a, w)) in g_shared.iter().zip(&v.out).enumerate() {
            let scale = w.iter().fold(1e-3f32, |m, x| m.max(x.abs()));
            for (x, y) in a.iter().zip(w) {
                assert!(
                    (x - y).abs() <= 1e-4 * scale,
                    "{name}: parameter {p}: {x} vs {y}"
                );
            }
        }
    }
}

/// Prompts repeated in a batch are prefilled once; the samples equal those of the same rows
/// generated with every prompt distinct in its own batch (each row's RNG stream is its index).
#[test]
fn repeated_prompts_sample_as_distinct_ones() {
    let dev = device();
    let model = load("llama-tiny");
    let prompts = vec![
        vec![5, 17, 300],
        vec![9],
        vec![5, 17, 300],
        vec![9],
        vec![5, 17, 300],
    ];
    let cfg = sample_cfg(7, 0, 1.0, 1.0);
    let together = generate(&model, &prompts, &cfg, &dev).unwrap();
    for (r, p) in prompts.iter().enumerate() {
        let alone_cfg = GenerationConfig {
            first_row: r as u64,
            ..cfg.clone()
        };
        let alone = generate(&model, std::slice::from_ref(p), &alone_cfg, &dev).unwrap();
        assert_eq!(together.tokens[r], alone.tokens[0], "row {r}");
        for (a, b) in together.logprobs[r].iter().zip(&alone.logprobs[0]) {
            assert!((a - b).abs() < 1e-4, "row {r}");
        }
    }
    // Rows sharing a prompt still sample on their own streams.
    assert!(together.tokens[0] != together.tokens[2] || together.tokens[2] != together.tokens[4]);
}
