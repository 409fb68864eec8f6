//! The flags of a [`GroupConfig`]: each shared setting a user may change on the command line
//! as `--<section>-<field>` with the clap id `<section>_<field>` (`--grpo-beta`, id
//! `grpo_beta`), then the kind's own flags. Written out rather than derived: clap's derive
//! cannot prefix the flags of a flattened group, and GRPO's and RLOO's settings share names.

use clap::builder::ValueParser;
use clap::error::ErrorKind;
use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches, value_parser};

use crate::group::config::{GroupConfig, GroupKind};

/// One shared setting's flag.
struct Flag {
    field: &'static str,
    parser: ValueParser,
    /// An `Option` field: the flag may be left out.
    optional: bool,
    help: String,
}

fn flag(field: &'static str, parser: ValueParser, help: String) -> Flag {
    Flag {
        field,
        parser,
        optional: false,
        help,
    }
}

fn optional(field: &'static str, parser: ValueParser, help: String) -> Flag {
    Flag {
        optional: true,
        ..flag(field, parser, help)
    }
}

/// The shared settings with flags, in `--help` order; the rest (sampler, Adam, seed) are set
/// by the app or in `config.toml`.
fn flags<K: GroupKind>() -> Vec<Flag> {
    let n = K::NAME;
    vec![
        flag(
            "learning_rate",
            value_parser!(f64).into(),
            format!("{n}: Adam learning rate (`learning_rate`, TRL 1e-6)"),
        ),
        flag(
            "num_generations",
            value_parser!(usize).into(),
            format!(
                "{n}: completions per prompt, G (`num_generations`, {}); at least 2",
                K::NUM_GENERATIONS
            ),
        ),
        flag(
            "prompts_per_step",
            value_parser!(usize).into(),
            format!(
                "{n}: prompts per step (each answered G times; TRL counts completions instead: \
                 `generation_batch_size` = this × G)"
            ),
        ),
        flag(
            "mini_batch_size",
            value_parser!(usize).into(),
            format!(
                "{n}: completions per forward/backward pass (`per_device_train_batch_size`, 8)"
            ),
        ),
        flag(
            "gradient_accumulation_steps",
            value_parser!(usize).into(),
            format!(
                "{n}: micro-batches whose gradients are summed into one Adam step \
                 (`gradient_accumulation_steps`, 1)"
            ),
        ),
        optional(
            "forward_batch_size",
            value_parser!(usize).into(),
            format!(
                "{n}: completions per no-grad forward of the reference (and, off-policy, the old \
                 policy); `None` = `mini_batch_size`. Memory only: results do not depend on it"
            ),
        ),
        flag(
            "beta",
            value_parser!(f64).into(),
            format!("{n}: KL coefficient β {}", K::BETA_HELP),
        ),
        flag(
            "num_iterations",
            value_parser!(usize).into(),
            format!("{n}: passes over each generation batch, μ (`num_iterations`, 1)"),
        ),
        flag(
            "epsilon",
            value_parser!(f64).into(),
            format!("{n}: lower clip ε_low of the ratio (`epsilon`, 0.2)"),
        ),
        optional(
            "epsilon_high",
            value_parser!(f64).into(),
            format!(
                "{n}: upper clip ε_high (`epsilon_high`, unset = ε_low; DAPO's clip-higher uses \
                 0.28)"
            ),
        ),
        flag(
            "mask_truncated_completions",
            value_parser!(bool),
            format!(
                "{n}: leave truncated completions (no EOS within `max_completion_length`) out of \
                 the loss (`mask_truncated_completions`, false); their rewards still count in \
                 the groups"
            ),
        ),
        optional(
            "max_grad_norm",
            value_parser!(f32).into(),
            format!(
                "{n}: clip the global gradient norm (`max_grad_norm`, TRL 1.0); unset = no \
                 clipping"
            ),
        ),
    ]
}

/// The clap id of a shared setting, `<section>_<field>`.
fn id<K: GroupKind>(field: &str) -> String {
    format!("{}_{field}", K::SECTION)
}

/// `cmd` with the shared settings' flags; those of non-`Option` fields are required except
/// `for_update`, as clap's derive makes them.
fn add_flags<K: GroupKind>(cmd: Command, for_update: bool) -> Command {
    flags::<K>().into_iter().fold(cmd, |cmd, f| {
        let long = format!("{}-{}", K::SECTION, f.field.replace('_', "-"));
        cmd.arg(
            Arg::new(id::<K>(f.field))
                .long(long)
                .value_parser(f.parser)
                .action(ArgAction::Set)
                .required(!(f.optional || for_update))
                .help(f.help),
        )
    })
}

impl<K: GroupKind> Args for GroupConfig<K> {
    fn augment_args(cmd: Command) -> Command {
        K::augment_args(add_flags::<K>(cmd, false))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        K::augment_args_for_update(add_flags::<K>(cmd, true))
    }
}

/// The value of the flag `id`, if it was given (taken out of `m`, as clap's derive does).
fn given<T: Clone + Send + Sync + 'static>(
    m: &mut ArgMatches,
    id: &str,
) -> Result<Option<T>, clap::Error> {
    m.try_remove_one::<T>(id)
        .map_err(|e| clap::Error::raw(ErrorKind::InvalidValue, format!("{id}: {e}")))
}

impl<K: GroupKind> GroupConfig<K> {
    /// Sets every shared setting whose flag was given.
    fn update_shared(&mut self, m: &mut ArgMatches) -> Result<(), clap::Error> {
        let id = id::<K>;
        if let Some(v) = given(m, &id("learning_rate"))? {
            self.learning_rate = v;
        }
        if let Some(v) = given(m, &id("num_generations"))? {
            self.num_generations = v;
        }
        if let Some(v) = given(m, &id("prompts_per_step"))? {
            self.prompts_per_step = v;
        }
        if let Some(v) = given(m, &id("mini_batch_size"))? {
            self.mini_batch_size = v;
        }
        if let Some(v) = given(m, &id("gradient_accumulation_steps"))? {
            self.gradient_accumulation_steps = v;
        }
        if let Some(v) = given(m, &id("forward_batch_size"))? {
            self.forward_batch_size = Some(v);
        }
        if let Some(v) = given(m, &id("beta"))? {
            self.beta = v;
        }
        if let Some(v) = given(m, &id("num_iterations"))? {
            self.num_iterations = v;
        }
        if let Some(v) = given(m, &id("epsilon"))? {
            self.epsilon = v;
        }
        if let Some(v) = given(m, &id("epsilon_high"))? {
            self.epsilon_high = Some(v);
        }
        if let Some(v) = given(m, &id("mask_truncated_completions"))? {
            self.mask_truncated_completions = v;
        }
        if let Some(v) = given(m, &id("max_grad_norm"))? {
            self.max_grad_norm = Some(v);
        }
        Ok(())
    }
}

/// Settings whose flags were not given keep their defaults ([`GroupConfig::default`]); an app
/// reads only the flags given on its command line, over its own defaults and `config.toml`.
impl<K: GroupKind> FromArgMatches for GroupConfig<K> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut m.clone())
    }

    fn from_arg_matches_mut(m: &mut ArgMatches) -> Result<Self, clap::Error> {
        let mut c = Self {
            kind: K::from_arg_matches_mut(m)?,
            ..Self::default()
        };
        c.update_shared(m)?;
        Ok(c)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.update_from_arg_matches_mut(&mut m.clone())
    }

    fn update_from_arg_matches_mut(&mut self, m: &mut ArgMatches) -> Result<(), clap::Error> {
        self.update_shared(m)?;
        self.kind.update_from_arg_matches_mut(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::{GrpoConfig, GrpoLossType, RlooConfig};

    fn longs(cmd: &Command) -> Vec<String> {
        let mut v: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect();
        v.sort();
        v
    }

    /// The flags users type are those the two separate configs had.
    #[test]
    fn flags_keep_their_names() {
        let shared = [
            "learning-rate",
            "num-generations",
            "prompts-per-step",
            "mini-batch-size",
            "gradient-accumulation-steps",
            "forward-batch-size",
            "beta",
            "num-iterations",
            "epsilon",
            "epsilon-high",
            "mask-truncated-completions",
            "max-grad-norm",
        ];
        let with = |section: &str, own: &[&str]| -> Vec<String> {
            let mut v: Vec<String> = shared
                .iter()
                .chain(own)
                .map(|f| format!("{section}-{f}"))
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            longs(&GrpoConfig::augment_args(Command::new("t"))),
            with(
                "grpo",
                &["scale-rewards", "loss-type", "use-bias-correction-kl"]
            )
        );
        assert_eq!(
            longs(&RlooConfig::augment_args(Command::new("t"))),
            with("rloo", &["normalize-advantages"])
        );
    }

    /// Given flags set their fields, shared or the kind's; the rest keep their values.
    #[test]
    fn given_flags_set_their_fields() {
        let cmd = GrpoConfig::augment_args_for_update(Command::new("t"));
        let m = cmd
            .try_get_matches_from([
                "t",
                "--grpo-beta",
                "0.04",
                "--grpo-max-grad-norm",
                "0.5",
                "--grpo-loss-type",
                "bnpo",
                "--grpo-mask-truncated-completions",
                "true",
            ])
            .expect("parse");
        let mut c = GrpoConfig::default();
        c.update_from_arg_matches(&m).expect("config");
        assert_eq!(c.beta, 0.04);
        assert_eq!(c.max_grad_norm, Some(0.5));
        assert_eq!(c.kind.loss_type, GrpoLossType::Bnpo);
        assert!(c.mask_truncated_completions);
        assert_eq!(c.num_generations, 8);
        assert_eq!(
            c,
            GrpoConfig {
                beta: 0.04,
                max_grad_norm: Some(0.5),
                mask_truncated_completions: true,
                kind: crate::group::GrpoSettings {
                    loss_type: GrpoLossType::Bnpo,
                    ..Default::default()
                },
                ..GrpoConfig::default()
            }
        );
    }
}
