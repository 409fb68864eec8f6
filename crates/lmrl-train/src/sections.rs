//! A `config.toml` table and the clap flags of its fields, from one clap argument group.
use clap::{Args, Command};

/// One table of `config.toml` and the flags of its fields.
#[derive(Debug, Clone)]
pub struct Section {
    pub name: &'static str,
    /// `(clap id, field name in the table)` of every setting.
    pub(crate) ids: Vec<(String, String)>,
}

impl Section {
    /// The clap ids of the section's settings.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.ids.iter().map(|(id, _)| id.as_str())
    }
}

/// The section `name`, holding the fields (and flags) of the clap group `A`; each flag's id is
/// its field's name.
pub fn section<A: Args>(name: &'static str) -> Section {
    section_prefixed::<A>(name, "")
}

/// The section `name` of a clap group whose ids are `prefix` + the field name (e.g. the group
/// learners' `grpo_beta` → `[grpo] beta`, flag `--grpo-beta`), so that sections with fields of
/// the same name live on one command line.
pub fn section_prefixed<A: Args>(name: &'static str, prefix: &str) -> Section {
    let cmd = A::augment_args(Command::new(name));
    Section {
        name,
        ids: cmd
            .get_arguments()
            .map(|a| {
                let id = a.get_id().to_string();
                let field = id.strip_prefix(prefix).unwrap_or(&id).to_string();
                (id, field)
            })
            .collect(),
    }
}
