//! Which code made a run: the `lmrl_version`, `commit` and `resumed_by` keys at the top of its
//! `config.toml`, above the settings' sections.
//!
//! Results are only comparable across code that rounds floats the same way, so a run's
//! directory names the commit its binary was built from (`LMRL_SOURCE_COMMIT`, set by this
//! crate's build script) and every other commit that later resumed it. These keys describe the
//! run; they are not settings: reading a config strips them, so a committed `config.toml` can
//! be given back with `--config` to rerun it, and a run directory resumes whichever code wrote
//! it. Files written before the keys existed carry the commit only in their first line
//! (`# lmrl <version>, commit <sha>`); that line is read as their provenance.
use serde::{Deserialize, Serialize};
use toml::{Table, Value};

/// The code that made a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The workspace version of the binary that started the run.
    pub lmrl_version: String,
    /// The commit it was built from; `unknown` outside a git checkout.
    pub commit: String,
    /// Other commits that continued the run with `--resume`, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed_by: Vec<String>,
}

const KEYS: [&str; 3] = ["lmrl_version", "commit", "resumed_by"];

impl Provenance {
    /// This binary.
    pub fn this_build() -> Self {
        Self {
            lmrl_version: env!("CARGO_PKG_VERSION").into(),
            commit: this_commit().into(),
            resumed_by: Vec::new(),
        }
    }

    /// A run whose code is not known (its `config.toml` predates the keys and names none).
    pub fn unknown() -> Self {
        Self {
            lmrl_version: UNKNOWN.into(),
            commit: UNKNOWN.into(),
            resumed_by: Vec::new(),
        }
    }

    /// `self` continued by this binary: its commit is added to `resumed_by` unless it made the
    /// run or already continued it.
    pub fn resumed_here(mut self) -> Self {
        let here = this_commit();
        if self.commit != here && !self.resumed_by.iter().any(|c| c == here) {
            self.resumed_by.push(here.into());
        }
        self
    }

    /// Whether this binary is the code that started the run.
    pub fn is_this_build(&self) -> bool {
        self.commit == this_commit() && self.commit != UNKNOWN
    }

    /// Removes the keys from a parsed `config.toml` (`text` is the file, for the first-line
    /// form of older files) and returns them; `None` when the file names no commit.
    pub(crate) fn take(table: &mut Table, text: &str) -> Option<Self> {
        let found: Vec<(&str, Value)> = KEYS
            .iter()
            .filter_map(|k| table.remove(*k).map(|v| (*k, v)))
            .collect();
        if found.is_empty() {
            return first_line(text);
        }
        let mut keys = Table::new();
        keys.extend(found.into_iter().map(|(k, v)| (k.to_string(), v)));
        Value::Table(keys).try_into().ok()
    }

    /// The file: these keys, then the settings' sections (TOML wants plain keys first).
    pub(crate) fn above(&self, settings: &str) -> String {
        let keys = toml::to_string_pretty(self).expect("provenance serialises to TOML");
        format!("{keys}\n{settings}")
    }
}

const UNKNOWN: &str = "unknown";

/// The commit this binary was built from, or `unknown`.
pub fn this_commit() -> &'static str {
    match env!("LMRL_SOURCE_COMMIT") {
        "" => UNKNOWN,
        c => c,
    }
}

/// `# lmrl <version>, commit <sha>[ …]`, the first line of configs written before the keys.
fn first_line(text: &str) -> Option<Provenance> {
    let rest = text.lines().next()?.strip_prefix("# lmrl ")?;
    let (version, rest) = rest.split_once(", commit ")?;
    let commit = rest.split_whitespace().next()?;
    Some(Provenance {
        lmrl_version: version.into(),
        commit: commit.into(),
        resumed_by: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Table, Option<Provenance>) {
        let mut t: Table = text.parse().unwrap();
        let p = Provenance::take(&mut t, text);
        (t, p)
    }

    #[test]
    fn keys_are_taken_out_of_the_settings() {
        let (t, p) = parse(
            "lmrl_version = \"0.1.0\"\ncommit = \"abc\"\nresumed_by = [\"def\"]\n\n[run]\nseed = 3\n",
        );
        assert_eq!(
            p,
            Some(Provenance {
                lmrl_version: "0.1.0".into(),
                commit: "abc".into(),
                resumed_by: vec!["def".into()],
            })
        );
        assert_eq!(t.keys().collect::<Vec<_>>(), ["run"]);
    }

    #[test]
    fn older_files_name_their_commit_in_the_first_line() {
        let text = "# lmrl 0.1.0, commit 1da50c4 (the latest possible: …)\n[run]\nseed = 1\n";
        let (t, p) = parse(text);
        assert_eq!(p.map(|p| p.commit), Some("1da50c4".into()));
        assert_eq!(t.len(), 1);
        assert_eq!(parse("[run]\nseed = 1\n").1, None);
    }

    #[test]
    fn written_keys_read_back_and_resuming_records_other_code_once() {
        let p = Provenance {
            lmrl_version: "0.0.9".into(),
            commit: "elsewhere".into(),
            resumed_by: Vec::new(),
        };
        let text = p.above("[run]\nseed = 2\n");
        assert!(
            text.starts_with("lmrl_version = \"0.0.9\"\ncommit = \"elsewhere\"\n\n[run]"),
            "{text}"
        );
        let (_, back) = parse(&text);
        assert_eq!(back.as_ref(), Some(&p));
        let once = p.resumed_here();
        assert_eq!(once.resumed_by, [this_commit()]);
        assert_eq!(once.clone().resumed_here(), once);
        let here = Provenance::this_build();
        assert_eq!(here.clone().resumed_here(), here);
    }
}
