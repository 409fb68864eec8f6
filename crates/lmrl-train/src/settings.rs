//! A run's settings, from one declaration per setting: every setting is a field of a config
//! struct (`lmrl_rl::PpoConfig`, `lmrl_rl::CoryConfig`, [`RunSettings`], the task's own), which
//! is at once a section of `config.toml` (`[ppo]`, `[cory]`, `[run]`, `[imdb]`, …) and a clap
//! argument group (`--learning-rate`, `--swap-period`, …), named after the field — as TRL's
//! `PPOConfig` is both its config and its command line.
//!
//! Resolution ([`resolve`]): the app's defaults for the chosen algorithm, overridden by
//! `--config FILE`, overridden by the flags actually given on the command line; or, with
//! `--resume DIR`, the run's own `DIR/config.toml` with only its length and bookkeeping
//! cadence changeable. Help texts show the app's defaults ([`with_defaults`]).
use std::fmt::Debug;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use lmrl_models::ValueHeadInit;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use toml::{Table, Value};

use crate::algorithms::{Algo, LearnerAlgo, LearnerSettings};
use crate::error::{Result, TrainError, setting};
use crate::provenance::Provenance;
use crate::sections::{Section, section};

/// `config.toml` of a run directory: the fully resolved settings, read back on resume.
pub const CONFIG_FILE: &str = "config.toml";

/// The settings every run has, whatever its task (`[run]` in `config.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    /// What to train: `ppo`, `grpo` or `rloo` (one policy), or `cory` (a pioneer and an
    /// observer copy trained on a shared reward, exchanging roles).
    #[arg(long, value_enum)]
    pub algo: Algo,
    /// CORY only: the algorithm both copies learn with (`ppo`, `grpo` or `rloo`; their settings
    /// come from `[ppo]`, `[grpo]` or `[rloo]`).
    #[arg(long, value_enum)]
    #[serde(default)]
    pub cory_learner: LearnerAlgo,
    /// Policy model: a Hugging Face directory (config.json + model.safetensors [+ tokenizer]),
    /// a `.gguf` file, or a named asset (`smollm2-135m`).
    #[arg(long)]
    pub model: String,
    /// Iterations to train (one batch of prompts each).
    #[arg(long)]
    pub iterations: usize,
    /// Random seed of the run: data order, prompt and response lengths, sampling, value-head
    /// init, minibatch order (PPO's `seed` is set from it).
    #[arg(long)]
    pub seed: u64,
    /// How a fresh value head starts: `default` (TRL: PyTorch's uniform init) or `zeros`.
    #[arg(long, value_parser = parse_head_init)]
    pub value_head_init: ValueHeadInit,
    /// LoRA rank of adapters on every projection (0 = full fine-tuning).
    #[arg(long)]
    pub lora_rank: usize,
    /// LoRA scale α (the update is scaled by α / rank).
    #[arg(long)]
    pub lora_alpha: f64,
    /// LoRA dropout on the adapters' input while training (PEFT's `lora_dropout`; 0 = none).
    #[arg(long)]
    #[serde(default)]
    pub lora_dropout: f64,
    /// rsLoRA: scale the adapters by α / √rank instead of α / rank (PEFT's `use_rslora`).
    #[arg(long)]
    #[serde(default)]
    pub lora_rslora: bool,
    /// Prompts per generation call.
    #[arg(long)]
    pub generation_batch_size: usize,
    /// Write a checkpoint every this many iterations (and always after the last one).
    #[arg(long)]
    pub checkpoint_every: usize,
    /// Keep this many most recent checkpoints (older ones are deleted).
    #[arg(long)]
    pub keep_checkpoints: usize,
    /// Log the prompts and responses of every this many iterations to `samples.jsonl`.
    #[arg(long)]
    pub samples_every: usize,
    /// GRPO and RLOO: draw this many times `prompts_per_step` questions per iteration, answer
    /// each G times, and train on the `prompts_per_step` groups whose rewards are not all equal
    /// (the first in data order; equal-reward groups fill up when too few differ) — DAPO's
    /// dynamic sampling with one round of sampling. An equal-reward group has zero advantages
    /// and adds no gradient, so this buys informative groups with generation alone. Under CORY
    /// with GRPO or RLOO learners each copy picks its groups on its own scores. 1 = off.
    #[arg(long)]
    #[serde(default = "no_oversampling")]
    pub oversample: usize,
}

fn no_oversampling() -> usize {
    1
}

impl RunSettings {
    /// Checks the run-level settings; errors name the `config.toml` key.
    pub fn validate(&self) -> Result<()> {
        if self.iterations == 0 {
            return Err(setting("run.iterations", "must be at least 1"));
        }
        for (field, v) in [
            ("run.checkpoint_every", self.checkpoint_every),
            ("run.keep_checkpoints", self.keep_checkpoints),
            ("run.samples_every", self.samples_every),
            ("run.generation_batch_size", self.generation_batch_size),
        ] {
            if v == 0 {
                return Err(setting(field, "must be at least 1"));
            }
        }
        if self.algo != Algo::Cory && self.cory_learner != LearnerAlgo::Ppo {
            return Err(setting(
                "run.cory_learner",
                format!(
                    "chooses the learners of CORY runs; this run trains `{}` (use --algo cory)",
                    self.algo.name()
                ),
            ));
        }
        if self.oversample == 0 {
            return Err(setting("run.oversample", "must be at least 1 (1 = off)"));
        }
        let groups = match self.algo {
            Algo::Grpo | Algo::Rloo => true,
            Algo::Cory => self.cory_learner != LearnerAlgo::Ppo,
            Algo::Ppo => false,
        };
        if self.oversample > 1 && !groups {
            return Err(setting(
                "run.oversample",
                format!(
                    "selects groups of GRPO or RLOO learners (alone or under CORY); this run trains `{}` with PPO learners (use 1)",
                    self.algo.name()
                ),
            ));
        }
        if self.lora_rank > 0 && !(self.lora_alpha.is_finite() && self.lora_alpha > 0.0) {
            return Err(setting("run.lora_alpha", "must be a positive number"));
        }
        if !(0.0..1.0).contains(&self.lora_dropout) {
            return Err(setting("run.lora_dropout", "must be in [0, 1)"));
        }
        Ok(())
    }
}

/// The flags beside the settings: where the run lives and what it reads (not saved in
/// `config.toml`: they do not change what it computes).
#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// Read settings from this TOML file (flags given as well override it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Output directory (default: runs/<app>-<algo>-<seed>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Continue the interrupted run in DIR with its own config.toml (exact resume).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "out"])]
    pub resume: Option<PathBuf>,
    /// Asset cache directory (default: $LMRL_CACHE, else ~/.cache/lmrl).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compute device: `cpu`, `cuda:N` or `wgpu:N` (default: the backend's first device); a
    /// list (`cuda:0,cuda:1`) trains data parallel, one rank per device (docs/distributed.md).
    #[arg(long)]
    pub device: Option<String>,
    /// CORY only: train llm2 (with its own copy of the frozen reference) on this device, e.g.
    /// `cuda:1` beside `--device cuda:0`, so each copy generates and updates on its own device
    /// and the two updates run at once. Not with a device list or MPI.
    #[arg(long, value_name = "DEVICE")]
    pub llm2_device: Option<String>,
}

fn parse_head_init(s: &str) -> std::result::Result<ValueHeadInit, String> {
    match s {
        "default" => Ok(ValueHeadInit::Default),
        "zeros" => Ok(ValueHeadInit::Zeros),
        _ => Err(format!("expected `default` or `zeros`, got `{s}`")),
    }
}

/// The sections every training app has — `[run]`, `[ppo]`, `[grpo]`, `[rloo]`, `[cory]` —
/// followed by the task's own section `task` (the fields of `T`). The group learners' flags
/// carry their section's prefix (`--grpo-beta`), as both have fields of the same names.
pub fn app_sections<T: Args>(task: &'static str) -> Vec<Section> {
    let mut sections = vec![section::<RunSettings>("run")];
    sections.extend(crate::algorithms::learner_sections());
    sections.push(section::<T>(task));
    sections
}

/// Checks the sections a run reads (`[run]`, its learner's section, `[cory]` for CORY); the
/// sections of learners it does not use are not read, so not checked. Errors name the key.
pub fn validate_learners(run: &RunSettings, learners: &LearnerSettings<'_>) -> Result<()> {
    run.validate()?;
    let learner = run.algo.learner(run.cory_learner);
    learners.validate(learner)?;
    let per_step = learners.prompts_per_step(learner);
    match per_step.checked_mul(run.oversample) {
        Some(n) if n <= lmrl_rl::MAX_STEP_BATCH => {}
        _ => {
            return Err(setting(
                "run.oversample",
                format!(
                    "{} × {per_step} prompts per step is more than {} prompts drawn per \
                     iteration",
                    run.oversample,
                    lmrl_rl::MAX_STEP_BATCH
                ),
            ));
        }
    }
    if run.algo == Algo::Cory && learners.cory.swap_period == 0 {
        return Err(setting("cory.swap_period", "must be at least 1 for CORY"));
    }
    Ok(())
}

/// An app's whole run configuration: one struct whose fields are the sections.
pub trait Config: Serialize + DeserializeOwned + Clone + Debug + FromArgMatches {
    /// Names a fresh run's default output directory, `runs/<APP>-<algo>-<seed>`.
    const APP: &'static str;

    /// The algorithm of a run that names none (`cory` unless the app says otherwise).
    fn default_algo() -> Algo {
        Algo::default()
    }

    /// The built-in defaults of a run of `algo`.
    fn defaults(algo: Algo) -> Self;

    /// Every section, in `config.toml` order.
    fn sections() -> Vec<Section>;

    /// The `[run]` section.
    fn run(&self) -> &RunSettings;

    /// Sets what follows from other settings (e.g. PPO's minibatch seed from the run seed).
    fn finish(&mut self);

    /// Rejects contradictory or meaningless settings before any work starts, naming the key.
    fn validate(&self) -> Result<()>;
}

/// The settings a resumed run may change: its length and bookkeeping, not what it computes.
pub const RESUMABLE: [&str; 4] = [
    "iterations",
    "checkpoint_every",
    "keep_checkpoints",
    "samples_every",
];

/// A resolved run: its settings, its directory, and whether it continues an earlier run.
#[derive(Debug, Clone)]
pub struct Resolved<C> {
    pub config: C,
    pub out: PathBuf,
    pub resume: bool,
    /// The code that made the `config.toml` the settings were read from (the resumed run's,
    /// or `--config`'s when it is a run's), when it names one.
    pub made_by: Option<Provenance>,
}

/// Shows the app's defaults in `--help` and makes every setting optional on the command line:
/// each flag of `C`'s sections gets the default of [`Config::defaults`] for the app's default
/// algorithm ([`Config::default_algo`]). Apply to the (sub)command that flattens `C`.
pub fn with_defaults<C: Config>(mut cmd: Command) -> Command {
    let defaults = section_tables(&C::defaults(C::default_algo()));
    for sec in C::sections() {
        for (id, field) in &sec.ids {
            let value = defaults.get(sec.name).and_then(|t| t.get(field.as_str()));
            let texts = value.map(default_texts).unwrap_or_default();
            cmd = cmd.mut_arg(id.as_str(), |a| {
                let a = a.required(false);
                if texts.is_empty() {
                    a
                } else {
                    a.default_values(texts)
                }
            });
        }
    }
    cmd
}

/// The largest integer a setting may take: TOML (and so `config.toml`) holds signed 64-bit
/// integers, and a count or size beyond it is meaningless on any machine.
pub const MAX_INTEGER_SETTING: u64 = i64::MAX as u64;

/// Every unsigned integer flag of `cmd` and of its subcommands, at any depth, parsed with a
/// checked conversion into its type and bounded by [`MAX_INTEGER_SETTING`]: a larger value, or a
/// negative one, is a usage error naming the flag and the range (exit 2), never a wrapped or
/// truncated number and never a panic further on. Apply it last, to the whole command.
pub fn checked_integers(mut cmd: Command) -> Command {
    use clap::builder::RangedU64ValueParser;
    use std::any::TypeId;
    let ids: Vec<(String, TypeId)> = cmd
        .get_arguments()
        .filter_map(|a| {
            let t = a.get_value_parser().type_id();
            [
                TypeId::of::<u64>(),
                TypeId::of::<usize>(),
                TypeId::of::<u32>(),
                TypeId::of::<u16>(),
                TypeId::of::<u8>(),
            ]
            .into_iter()
            .find(|id| t == *id)
            .map(|id| (a.get_id().to_string(), id))
        })
        .collect();
    for (id, t) in ids {
        cmd = cmd.mut_arg(id, |a| {
            let bound = 0..=MAX_INTEGER_SETTING;
            if t == TypeId::of::<u64>() {
                a.value_parser(RangedU64ValueParser::<u64>::new().range(bound))
            } else if t == TypeId::of::<usize>() {
                a.value_parser(RangedU64ValueParser::<usize>::new().range(bound))
            } else if t == TypeId::of::<u32>() {
                a.value_parser(RangedU64ValueParser::<u32>::new())
            } else if t == TypeId::of::<u16>() {
                a.value_parser(RangedU64ValueParser::<u16>::new())
            } else {
                a.value_parser(RangedU64ValueParser::<u8>::new())
            }
        });
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in subs {
        cmd = cmd.mut_subcommand(name, checked_integers);
    }
    cmd
}

fn default_texts(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().flat_map(default_texts).collect(),
        other => vec![other.to_string()],
    }
}

fn section_tables<C: Serialize>(c: &C) -> Table {
    Table::try_from(c).expect("a config struct serialises to a TOML table")
}

/// A setting given on the command line: its section, clap id and field name.
struct Given {
    section: &'static str,
    id: String,
    field: String,
}

/// The settings given on the command line.
fn given<C: Config>(matches: &ArgMatches) -> Vec<Given> {
    let mut out = Vec::new();
    for sec in C::sections() {
        for (id, field) in sec.ids {
            if matches.value_source(&id) == Some(ValueSource::CommandLine) {
                out.push(Given {
                    section: sec.name,
                    id,
                    field,
                });
            }
        }
    }
    out
}

fn flag(id: &str) -> String {
    format!("--{}", id.replace('_', "-"))
}

/// Resolves the run's settings and directory from the matches of the (sub)command that
/// flattens `C` and `RunArgs` (see the module docs for the order).
///
/// A flag of a learner section the run does not learn with (`--learning-rate`, a `[ppo]`
/// setting, on a GRPO run) is refused rather than silently ignored.
pub fn resolve<C: Config>(matches: &ArgMatches, args: &RunArgs) -> Result<Resolved<C>> {
    let resolved = resolve_with::<C>(matches, args, &Table::new())?;
    let run = resolved.config.run();
    if let Some(g) = given::<C>(matches)
        .into_iter()
        .find(|g| !reads_section(run, g.section))
    {
        let learner = run.algo.learner(run.cory_learner);
        return Err(setting(
            format!("{}.{}", g.section, g.field),
            format!(
                "given as {}, but this run ({}) learns with {} and reads [{}], not [{}] (e.g. \
                 {})",
                flag(&g.id),
                run_name(run),
                learner.name(),
                learner.name(),
                g.section,
                learner_flag(learner, "learning_rate"),
            ),
        ));
    }
    Ok(resolved)
}

/// Whether a run of these settings reads the section `name`: of the learner sections only its
/// copies' algorithm's. `[cory]` counts as read by every run, so that PPO and CORY runs
/// compared side by side can share one command line (`--swap-period` changes nothing in PPO).
fn reads_section(run: &RunSettings, name: &str) -> bool {
    match name {
        n if LearnerAlgo::ALL.iter().any(|l| l.name() == n) => {
            run.algo.learner(run.cory_learner).name() == name
        }
        _ => true,
    }
}

/// `--algo A`, and for CORY its `--cory-learner`.
fn run_name(run: &RunSettings) -> String {
    match run.algo {
        Algo::Cory => format!("--algo cory --cory-learner {}", run.cory_learner.name()),
        a => format!("--algo {}", a.name()),
    }
}

/// The flag of a learner section's field (the group learners' carry their section's prefix).
fn learner_flag(learner: LearnerAlgo, field: &str) -> String {
    flag(&format!("{}{field}", learner.flag_prefix()))
}

/// [`resolve`] with `forced` settings (a partial `config.toml` table, e.g. a sweep's
/// `[run] algo` and `seed`) applied last, over the command line; `forced`'s algorithm, if it
/// has one, also picks the defaults.
pub fn resolve_with<C: Config>(
    matches: &ArgMatches,
    args: &RunArgs,
    forced: &Table,
) -> Result<Resolved<C>> {
    let given = given::<C>(matches);
    let cli = C::from_arg_matches(matches).map_err(|e| setting("flags", e.to_string()))?;
    // A value TOML cannot hold (an integer past i64::MAX) is refused, not a panic; the flags
    // of `checked_integers` never get here with one.
    let cli = Table::try_from(&cli).map_err(|e| setting("flags", e.to_string()))?;
    let overlay = |mut base: Table, allowed: &dyn Fn(&str) -> bool| -> Table {
        for g in &given {
            if !allowed(&g.field) {
                continue;
            }
            if let Some(v) = cli.get(g.section).and_then(|t| t.get(g.field.as_str())) {
                table_mut(&mut base, g.section).insert(g.field.clone(), v.clone());
            }
        }
        base
    };
    if let Some(dir) = &args.resume {
        let changed: Vec<String> = given
            .iter()
            .filter(|g| g.section != "run" || !RESUMABLE.contains(&g.field.as_str()))
            .map(|g| flag(&g.id))
            .collect();
        if !changed.is_empty() {
            return Err(TrainError::ResumeSettings {
                path: dir.clone(),
                flags: changed.join(", "),
            });
        }
        let file = dir.join(CONFIG_FILE);
        let (base, made_by) = read_table(&file)?;
        let merged = overlay(base, &|field| RESUMABLE.contains(&field));
        let config = finish::<C>(merged, &file)?;
        return Ok(Resolved {
            config,
            out: dir.clone(),
            resume: true,
            made_by,
        });
    }
    let (file, made_by) = match &args.config {
        Some(p) => read_table(p)?,
        None => (Table::new(), None),
    };
    let algo = file_algo(forced)
        .or_else(|| given_algo(&given, &cli))
        .or_else(|| file_algo(&file))
        .unwrap_or_else(C::default_algo);
    let mut base = section_tables(&C::defaults(algo));
    merge(&mut base, file);
    let mut merged = overlay(base, &|_| true);
    merge(&mut merged, forced.clone());
    let origin = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from("the command line"));
    let config = finish::<C>(merged, &origin)?;
    let run = config.run();
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!("runs/{}-{}-{}", C::APP, run.algo.name(), run.seed))
    });
    Ok(Resolved {
        config,
        out,
        resume: false,
        made_by,
    })
}

fn given_algo(given: &[Given], cli: &Table) -> Option<Algo> {
    given
        .iter()
        .find(|g| g.section == "run" && g.field == "algo")
        .and_then(|g| cli.get(g.section)?.get("algo")?.clone().try_into().ok())
}

fn file_algo(file: &Table) -> Option<Algo> {
    file.get("run")?.get("algo")?.clone().try_into().ok()
}

fn table_mut<'a>(t: &'a mut Table, name: &str) -> &'a mut Table {
    let v = t
        .entry(name.to_string())
        .or_insert_with(|| Value::Table(Table::new()));
    if !v.is_table() {
        *v = Value::Table(Table::new());
    }
    v.as_table_mut().expect("made a table above")
}

/// Deep merge: `top`'s keys replace `base`'s; tables merge key by key.
fn merge(base: &mut Table, top: Table) {
    for (k, v) in top {
        match (base.get_mut(&k), v) {
            (Some(Value::Table(b)), Value::Table(t)) => merge(b, t),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// The settings of a `config.toml`, and the code that made it (which is not a setting).
fn read_table(path: &Path) -> Result<(Table, Option<Provenance>)> {
    let text = std::fs::read_to_string(path).map_err(|source| TrainError::ReadConfig {
        path: path.to_path_buf(),
        source,
    })?;
    let mut table = text
        .parse::<Table>()
        .map_err(|e| TrainError::ConfigSyntax {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let made_by = Provenance::take(&mut table, &text);
    Ok((table, made_by))
}

fn finish<C: Config>(merged: Table, origin: &Path) -> Result<C> {
    let mut config: C = Value::Table(merged)
        .try_into()
        .map_err(|e: toml::de::Error| TrainError::ConfigSyntax {
            path: origin.to_path_buf(),
            reason: e.to_string(),
        })?;
    config.finish();
    config.validate()?;
    Ok(config)
}

/// Reads a resolved `config.toml` (as a run directory holds it).
pub fn read_config<C: Config>(path: &Path) -> Result<C> {
    finish(read_table(path)?.0, path)
}

/// The code that made the run whose `config.toml` is `path` (`None` when it names none).
pub fn read_provenance(path: &Path) -> Result<Option<Provenance>> {
    Ok(read_table(path)?.1)
}

/// Writes the resolved settings as `config.toml` text.
pub fn to_toml<C: Serialize>(config: &C) -> String {
    toml::to_string_pretty(config).expect("a config struct serialises to TOML")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction, value_parser};

    fn cmd() -> Command {
        let int = |name: &'static str| Arg::new(name).long(name).action(ArgAction::Set);
        Command::new("app")
            .arg(int("big").value_parser(value_parser!(u64)))
            .arg(int("size").value_parser(value_parser!(usize)))
            .arg(int("id").value_parser(value_parser!(u32)))
            .arg(int("name"))
            .subcommand(
                Command::new("sub").subcommand(
                    Command::new("deep").arg(int("n").value_parser(value_parser!(usize))),
                ),
            )
    }

    fn parse(args: &[&str]) -> std::result::Result<ArgMatches, clap::Error> {
        checked_integers(cmd())
            .try_get_matches_from(std::iter::once("app").chain(args.iter().copied()))
    }

    #[test]
    fn integers_past_i64_max_or_negative_are_usage_errors_naming_the_flag() {
        let m = parse(&[
            "--big",
            "9223372036854775807",
            "--size",
            "0",
            "--id",
            "4294967295",
        ])
        .unwrap();
        assert_eq!(m.get_one::<u64>("big"), Some(&(i64::MAX as u64)));
        assert_eq!(m.get_one::<usize>("size"), Some(&0));
        assert_eq!(m.get_one::<u32>("id"), Some(&u32::MAX));
        // Text flags are left alone.
        let m = parse(&["--name", "18446744073709551616"]).unwrap();
        assert_eq!(
            m.get_one::<String>("name").map(String::as_str),
            Some("18446744073709551616")
        );
        for (flag, v) in [
            ("--big", "9223372036854775808"),
            ("--big", "18446744073709551615"),
            ("--size", "18446744073709551616"),
            ("--size", "-1"),
            ("--id", "4294967296"),
        ] {
            let e = parse(&[&format!("{flag}={v}")]).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{flag} {v}"
            );
            assert!(e.to_string().contains(flag), "{e}");
        }
        // Subcommands at any depth.
        let e = parse(&["sub", "deep", "--n", "9223372036854775808"]).unwrap_err();
        assert!(e.to_string().contains("--n"), "{e}");
        assert!(parse(&["sub", "deep", "--n", "9223372036854775807"]).is_ok());
    }
}
