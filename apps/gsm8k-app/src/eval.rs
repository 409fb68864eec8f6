//! pass@k on a held-out split: `k` sampled answers per test question, each checked by the
//! answer checker; a question counts as solved for pass@k when at least one is correct
//! (paper §4 / Fig. 5). pass@1 is also reported as the unbiased estimate c/n from the same
//! samples (Chen et al. 2021, eq. 1 with k = 1).
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use lmrl_models::{AutoLm, CausalLm, GenerationConfig, LmTokenizer, Sampling, generate};
use lmrl_rewards::{check_answer, extract_response_answer};
use serde::{Deserialize, Serialize};

use crate::cli::EvalArgs;
use crate::config::{Gsm8kConfig, MAX_EVAL_K, check_eval_sampling};
use crate::setup::{self, MathTask, Split};
use lmrl_train::{mix, stream};

/// How to sample during an evaluation.
#[derive(Debug, Clone)]
pub struct EvalSettings {
    pub k: usize,
    /// 0 = greedy.
    pub temperature: f32,
    pub max_new_tokens: usize,
    pub generation_batch_size: usize,
    pub seed: u64,
    /// The ids generation stops on (EOS first).
    pub eos: Vec<u32>,
    pub pad: u32,
    /// Token sequences that end a response (see [`crate::setup::stop_sequences`]).
    pub stop_sequences: Vec<Vec<u32>>,
}

/// What one question gave.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionResult {
    /// [`setup::question_id`]: pairs results across files (`compare`).
    pub id: String,
    pub question: String,
    pub truth: String,
    pub responses: Vec<String>,
    pub extracted: Vec<Option<String>>,
    pub correct: usize,
}

/// One row of `eval.csv` / the printed table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    /// `before` / `after` training, or `eval` for the standalone command.
    pub stage: String,
    /// `base`, `policy`, `llm1`, `llm2`, or the model path.
    pub agent: String,
    /// `ASDiv`, `GSM8K` or `GSM-Symbolic`: never ASDiv reported as GSM8K.
    pub dataset: String,
    pub split: String,
    pub questions: usize,
    pub k: usize,
    pub temperature: f32,
    pub pass_at_1: f64,
    pub pass_at_k: f64,
    pub mean_response_tokens: f64,
    pub seconds: f64,
    /// Questions of the file left out because the evaluated run trained on them (a problem
    /// whose identity is in the run's training split never counts as held out).
    #[serde(default)]
    pub excluded_training: usize,
}

/// The outcome of [`evaluate`].
#[derive(Debug, Clone)]
pub struct Evaluated {
    pub results: Vec<QuestionResult>,
    pub pass_at_1: f64,
    pub pass_at_k: f64,
    /// Mean generated tokens per sample (EOS included).
    pub mean_tokens: f64,
}

/// Samples `k` answers for every task and checks them.
pub fn evaluate<M: CausalLm>(
    lm: &M,
    tok: &LmTokenizer,
    tasks: &[MathTask],
    s: &EvalSettings,
    device: &Device,
) -> Result<Evaluated> {
    if tasks.is_empty() {
        bail!("no questions to evaluate");
    }
    check_eval_sampling(s.k, s.temperature).map_err(|e| anyhow::anyhow!("temperature {e}"))?;
    // Each prompt k times in a row, so sample j of question i is entry i·k + j.
    let prompts: Vec<&Vec<u32>> = tasks
        .iter()
        .flat_map(|t| std::iter::repeat_n(&t.prompt_ids, s.k))
        .collect();
    let mut tokens: Vec<Vec<u32>> = Vec::with_capacity(prompts.len());
    let bar = indicatif::ProgressBar::new(prompts.len() as u64);
    bar.set_message("evaluating");
    for (c, chunk) in prompts.chunks(s.generation_batch_size).enumerate() {
        let sampling = if s.temperature == 0.0 {
            Sampling::Greedy
        } else {
            Sampling::Sample {
                temperature: s.temperature,
                top_k: 0,
                top_p: 1.0,
            }
        };
        let cfg = GenerationConfig {
            sampling,
            max_new_tokens: s.max_new_tokens,
            repetition_penalty: 1.0,
            eos_token_ids: s.eos.clone(),
            pad_token_id: s.pad,
            seed: mix(&[s.seed, c as u64, stream::EVAL]),
            first_row: 0,
            stop_sequences: s.stop_sequences.clone(),
            min_new_tokens: 0,
        };
        let owned: Vec<Vec<u32>> = chunk.iter().map(|p| (*p).clone()).collect();
        let g =
            generate(lm, &owned, &cfg, device).context("generation failed during evaluation")?;
        tokens.extend(g.tokens);
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    let mean_len = tokens.iter().map(Vec::len).sum::<usize>() as f64 / tokens.len().max(1) as f64;
    let mut results = Vec::with_capacity(tasks.len());
    for (t, ys) in tasks.iter().zip(tokens.chunks(s.k)) {
        let mut r = QuestionResult {
            id: setup::question_id(&t.question),
            question: t.question.clone(),
            truth: t.final_answer.clone(),
            responses: Vec::new(),
            extracted: Vec::new(),
            correct: 0,
        };
        for y in ys {
            let text = tok.decode_skip_special(y)?;
            if check_answer(&text, &t.truth)? > 0.5 {
                r.correct += 1;
            }
            r.extracted.push(extract_response_answer(&text));
            r.responses.push(text);
        }
        results.push(r);
    }
    let n = results.len() as f64;
    let pass_k = results.iter().filter(|r| r.correct > 0).count() as f64 / n;
    let pass_1 = results
        .iter()
        .map(|r| lmrl_rewards::pass_at_k(s.k, r.correct, 1))
        .sum::<Result<f64, _>>()?
        / n;
    Ok(Evaluated {
        results,
        pass_at_1: pass_1,
        pass_at_k: pass_k,
        mean_tokens: mean_len,
    })
}

/// Every question's responses and checks as JSONL (one [`QuestionResult`] per line), the
/// input of `compare`.
pub fn write_question_results(path: &Path, results: &[QuestionResult]) -> Result<()> {
    let mut bytes = Vec::new();
    for r in results {
        serde_json::to_writer(&mut bytes, r)?;
        bytes.push(b'\n');
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    lmrl_runs::atomic_write(path, &bytes)?;
    Ok(())
}

/// Runs [`evaluate`] and packs the row.
#[allow(clippy::too_many_arguments)]
pub fn eval_row<M: CausalLm>(
    stage: &str,
    agent: &str,
    dataset: &str,
    split: Split,
    lm: &M,
    tok: &LmTokenizer,
    tasks: &[MathTask],
    s: &EvalSettings,
    device: &Device,
) -> Result<(EvalRow, Vec<QuestionResult>)> {
    let t0 = Instant::now();
    let e = evaluate(lm, tok, tasks, s, device)?;
    let row = EvalRow {
        stage: stage.into(),
        agent: agent.into(),
        dataset: dataset.into(),
        split: split.name().into(),
        questions: tasks.len(),
        k: s.k,
        temperature: s.temperature,
        pass_at_1: e.pass_at_1,
        pass_at_k: e.pass_at_k,
        mean_response_tokens: e.mean_tokens,
        seconds: t0.elapsed().as_secs_f64(),
        excluded_training: 0,
    };
    Ok((row, e.results))
}

/// The rows as a markdown table.
pub fn markdown(rows: &[EvalRow]) -> String {
    let mut s = String::from(
        "| stage | agent | dataset | split | questions | k | temperature | pass@1 | pass@k | mean tokens | seconds |\n\
         |---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.3} | {:.3} | {:.1} | {:.1} |\n",
            r.stage,
            r.agent,
            r.dataset,
            r.split,
            r.questions,
            r.k,
            r.temperature,
            r.pass_at_1,
            r.pass_at_k,
            r.mean_response_tokens,
            r.seconds
        ));
    }
    s
}

/// Writes `eval.csv` (header + rows).
pub fn write_csv(path: &Path, rows: &[EvalRow]) -> Result<()> {
    let mut bytes = Vec::new();
    {
        let mut w = std::io::Cursor::new(&mut bytes);
        writeln!(
            w,
            "stage,agent,dataset,split,questions,k,temperature,pass_at_1,pass_at_k,mean_response_tokens,seconds,excluded_training"
        )?;
        for r in rows {
            writeln!(
                w,
                "{},{},{},{},{},{},{},{},{},{},{},{}",
                csv_field(&r.stage),
                csv_field(&r.agent),
                csv_field(&r.dataset),
                r.split,
                r.questions,
                r.k,
                r.temperature,
                r.pass_at_1,
                r.pass_at_k,
                r.mean_response_tokens,
                r.seconds,
                r.excluded_training
            )?;
        }
    }
    lmrl_runs::atomic_write(path, &bytes)?;
    Ok(())
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// What `--model` of `eval` names: a model, or an agent of a run / checkpoint directory.
struct EvalModel {
    path: PathBuf,
    /// The run's configuration when `--model` is a run directory or one of its checkpoints.
    run_config: Option<Gsm8kConfig>,
    label: String,
}

/// The copy a run's checkpoint holds by default: `policy` for single learners, `llm1` for CORY.
/// The ids generation stops on: the tokenizer's (EOS first, then e.g. Llama 3's end of turn),
/// else the model config's EOS.
pub(crate) fn end_ids(tokenizer: Vec<u32>, config: Option<u32>) -> Vec<u32> {
    match tokenizer.is_empty() {
        true => config.into_iter().collect(),
        false => tokenizer,
    }
}

fn default_agent(cfg: Option<&Gsm8kConfig>, ckpt: &Path) -> &'static str {
    match cfg.map(|c| c.run.algo) {
        Some(lmrl_train::Algo::Cory) => "llm1",
        Some(_) => lmrl_train::POLICY,
        None if ckpt.join("llm1").is_dir() => "llm1",
        None => lmrl_train::POLICY,
    }
}

fn resolve_model(
    cache: &lmrl_data::AssetCache,
    model: &str,
    agent: Option<&str>,
) -> Result<EvalModel> {
    let p = PathBuf::from(model);
    let run_cfg = p.join(lmrl_train::CONFIG_FILE);
    let (ckpt, run_config) = if p.is_dir() && run_cfg.is_file() && p.join("checkpoints").is_dir() {
        let cfg: Gsm8kConfig = lmrl_train::read_config(&run_cfg)?;
        let (_, ckpt) = lmrl_runs::CheckpointDir::new(p.join("checkpoints"))
            .latest()?
            .with_context(|| format!("{} has no checkpoint", p.display()))?;
        (ckpt, Some(cfg))
    } else if p.is_dir() && p.join(lmrl_runs::STATE_FILE).is_file() {
        // A checkpoint directory: `<run>/checkpoints/iter-N`; its run's settings, if there.
        let run_cfg = p
            .parent()
            .and_then(Path::parent)
            .map(|r| r.join(lmrl_train::CONFIG_FILE))
            .filter(|f| f.is_file());
        let cfg = match run_cfg {
            Some(f) => Some(lmrl_train::read_config::<Gsm8kConfig>(&f)?),
            None => None,
        };
        (p.clone(), cfg)
    } else {
        return Ok(EvalModel {
            path: lmrl_train::resolve_path_or_asset(cache, model)?,
            run_config: None,
            label: model.to_string(),
        });
    };
    let agent = agent.unwrap_or(default_agent(run_config.as_ref(), &ckpt));
    let path = ckpt.join(agent);
    if !path.is_dir() {
        bail!(
            "{} has no agent `{agent}` (PPO, GRPO and RLOO runs: policy; CORY runs: llm1, llm2)",
            ckpt.display()
        );
    }
    lmrl_train::verify_model(&path)?;
    Ok(EvalModel {
        path,
        run_config,
        label: agent.to_string(),
    })
}

/// The identities of the problems the run `cfg` trained on (its data, its split), to keep them
/// out of any evaluation of that run.
fn training_identities(
    cache: &lmrl_data::AssetCache,
    cfg: &Gsm8kConfig,
) -> Result<std::collections::BTreeSet<String>> {
    let g = &cfg.gsm8k;
    let problems = setup::load_problems(cache, &g.data, g.data_format)
        .with_context(|| format!("cannot read the evaluated run's training data `{}`", g.data))?;
    let train = setup::split(problems, g.split_spec(), Split::Train)?;
    Ok(setup::identities(&train))
}

/// The `eval` command.
pub fn run(args: &EvalArgs) -> Result<()> {
    let cache = lmrl_train::asset_cache(args.cache_dir.as_deref())?;
    let m = resolve_model(&cache, &args.model, args.agent.as_deref())?;
    let base = m.run_config.clone().map_or_else(
        || {
            let mut c = Gsm8kConfig::for_algo(<Gsm8kConfig as lmrl_train::Config>::default_algo());
            lmrl_train::Config::finish(&mut c);
            c.gsm8k
        },
        |c| c.gsm8k,
    );
    let data = args.data.clone().unwrap_or(base.data.clone());
    let format = args.data_format.unwrap_or(base.data_format);
    let test_fraction = args.test_fraction.unwrap_or(base.test_fraction);
    let split_seed = args.split_seed.unwrap_or(base.split_seed);
    let dev_size = args.dev_size.unwrap_or(base.dev_size);
    let max_new_tokens = args.max_new_tokens.unwrap_or(base.max_new_tokens);
    let style = args.prompt_style.unwrap_or(base.prompt_style);
    let stop_strings: Vec<String> = args
        .stop_strings
        .clone()
        .unwrap_or(base.stop_strings.clone())
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    if args.split != Split::All && !(test_fraction > 0.0 && test_fraction < 1.0) {
        bail!("--test-fraction must be strictly between 0 and 1, got {test_fraction}");
    }
    if args.k == 0 || max_new_tokens == 0 || args.batch_size == 0 {
        bail!("--k, --max-new-tokens and --batch-size must be at least 1");
    }
    if args.k > MAX_EVAL_K {
        bail!(
            "--k must be at most {MAX_EVAL_K} samples per question, got {}",
            args.k
        );
    }
    let temperature = args
        .temperature
        .unwrap_or(if args.k == 1 { 0.0 } else { 1.0 });
    check_eval_sampling(args.k, temperature).map_err(|e| anyhow::anyhow!("--temperature {e}"))?;

    let device = lmrl_train::select_device(args.device.as_deref())?;
    device.seed(args.seed);
    let problems = setup::load_problems(&cache, &data, format)?;
    let dataset = setup::source_name(&problems);
    let spec = setup::SplitSpec {
        test_fraction,
        split_seed,
        dev_size,
    };
    let mut problems = setup::split(problems, spec, args.split)?;
    if problems.is_empty() && args.split == Split::Test {
        bail!(
            "the test split of `{data}` is empty: every held-out question is in the dev split \
             (the first --dev-size {dev_size}); pass a smaller --dev-size"
        );
    }
    // A run's own training problems never count as held out, whatever file or split is asked.
    let mut excluded = 0;
    if let Some(cfg) = &m.run_config {
        let seen = training_identities(&cache, cfg)?;
        let before = problems.len();
        problems.retain(|p| !seen.contains(&setup::problem_identity(&p.question)));
        excluded = before - problems.len();
        if excluded > 0 {
            eprintln!(
                "note: {excluded} of the {before} questions were in the run's training split and \
                 are left out"
            );
        }
    }
    if let Some(n) = args.limit {
        problems.truncate(n);
    }
    let (tok, config) = lmrl_train::load_tokenizer(&m.path)?;
    let prompter = setup::Prompter::new(style, &tok)?;
    let (tasks, dropped) = setup::make_tasks(
        &problems,
        &tok,
        &prompter,
        config.max_positions(),
        max_new_tokens,
    )?;
    if dropped > 0 {
        eprintln!(
            "note: {dropped} questions skipped: prompt + {max_new_tokens} new tokens exceed the model's context"
        );
    }
    let lm = AutoLm::from_pretrained(&m.path, &device)
        .with_context(|| format!("cannot load {}", m.path.display()))?;
    let s = EvalSettings {
        k: args.k,
        temperature,
        max_new_tokens,
        generation_batch_size: args.batch_size,
        seed: args.seed,
        eos: end_ids(tok.eos_token_ids(), config.eos_token_id()),
        pad: lmrl_train::pad_id(&tok, config.eos_token_id()),
        stop_sequences: setup::stop_sequences(&tok, &stop_strings)?,
    };
    eprintln!(
        "evaluating {} on {} questions of the {} {} split ({} per question, {})",
        m.path.display(),
        tasks.len(),
        dataset,
        args.split.name(),
        args.k,
        if temperature == 0.0 {
            "greedy".to_string()
        } else {
            format!("temperature {temperature}")
        }
    );
    let (mut row, results) = eval_row(
        "eval", &m.label, dataset, args.split, &lm, &tok, &tasks, &s, &device,
    )?;
    row.excluded_training = excluded;
    if let Some(out) = &args.out {
        write_question_results(out, &results)?;
    }
    if let Some(csv) = &args.csv {
        write_csv(csv, std::slice::from_ref(&row))?;
    }
    print!("{}", markdown(std::slice::from_ref(&row)));
    Ok(())
}
