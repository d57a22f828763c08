//! Where a knob's value comes from (flag, then environment), the secret
//! file indirection, and the error collector every parser writes into.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::Path;

use super::knobs::{Knob, knob_for_flag};
use super::secret::Secret;
use super::values::parse_go_duration;

/// One configuration problem, naming the variable (or flag) and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// The knob's environment variable, whichever way it was set.
    pub env: &'static str,
    pub message: String,
}

/// Every problem found, in validation order. Start-up fails with all of
/// them at once so a user fixes a manifest in one round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    pub errors: Vec<ConfigError>,
}

impl ConfigErrors {
    /// Whether any problem concerns the knob with this environment name.
    pub fn mentions(&self, env: &str) -> bool {
        self.errors.iter().any(|error| error.env == env)
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid configuration ({} problem", self.errors.len())?;
        if self.errors.len() != 1 {
            f.write_str("s")?;
        }
        f.write_str("):")?;
        for error in &self.errors {
            write!(f, "\n  - {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A value as the user set it, with the name they used for it.
pub(super) struct Setting {
    pub value: String,
    /// `WORKERS` when it came from the environment, `--workers` from a flag.
    pub name: String,
    secret: bool,
}

impl Setting {
    /// The value for an error message: quoted, or redacted for secrets.
    pub fn shown(&self) -> String {
        if self.secret {
            "<redacted>".to_owned()
        } else {
            format!("{:?}", self.value)
        }
    }

    pub fn is_blank(&self) -> bool {
        self.value.trim().is_empty()
    }
}

pub(super) type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;
pub(super) type FileReader<'a> = &'a dyn Fn(&Path) -> io::Result<String>;

pub(super) struct Parser<'a> {
    flags: BTreeMap<&'static str, String>,
    env: EnvLookup<'a>,
    read_file: FileReader<'a>,
    pub errors: Vec<ConfigError>,
}

impl<'a> Parser<'a> {
    pub fn new(
        flags: &BTreeMap<String, String>,
        env: EnvLookup<'a>,
        read_file: FileReader<'a>,
    ) -> Self {
        let mut errors = Vec::new();
        let mut by_env = BTreeMap::new();
        for (flag, value) in flags {
            match knob_for_flag(flag) {
                Some(knob) => {
                    by_env.insert(knob.env, value.clone());
                }
                None => errors.push(ConfigError {
                    env: "",
                    message: format!("unknown flag --{}", flag.trim_start_matches('-')),
                }),
            }
        }
        Parser {
            flags: by_env,
            env,
            read_file,
            errors,
        }
    }

    /// The value if set at all (even to the empty string): flag first.
    pub fn setting(&self, knob: &Knob) -> Option<Setting> {
        if let Some(value) = self.flags.get(knob.env) {
            return Some(Setting {
                value: value.clone(),
                name: format!("--{}", knob.flag),
                secret: knob.secret,
            });
        }
        (self.env)(knob.env).map(|value| Setting {
            value,
            name: knob.env.to_owned(),
            secret: knob.secret,
        })
    }

    /// The value if set to something other than blanks.
    pub fn non_blank(&self, knob: &Knob) -> Option<Setting> {
        self.setting(knob).filter(|setting| !setting.is_blank())
    }

    /// Upstream's rule for core string knobs: a set variable is used even
    /// when empty (and then fails validation); only an unset one defaults.
    pub fn string(&self, knob: &Knob) -> String {
        match self.setting(knob) {
            Some(setting) => setting.value,
            None => knob.default.unwrap_or_default().to_owned(),
        }
    }

    pub fn fail(&mut self, knob: &Knob, message: impl Into<String>) {
        let name = self.display_name(knob);
        self.errors.push(ConfigError {
            env: knob.env,
            message: format!("{name}: {}", message.into()),
        });
    }

    /// A rule violated by a value the user set: `NAME="value": message`.
    pub fn reject(&mut self, knob: &Knob, setting: &Setting, message: impl Into<String>) {
        self.errors.push(ConfigError {
            env: knob.env,
            message: format!("{}={}: {}", setting.name, setting.shown(), message.into()),
        });
    }

    /// A rule broken by the knob's effective value: reported against the
    /// value when the user set one, else against the knob (its default).
    pub fn violation(&mut self, knob: &Knob, message: impl Into<String>) {
        match self.setting(knob) {
            Some(setting) => self.reject(knob, &setting, message),
            None => self.fail(knob, message),
        }
    }

    fn display_name(&self, knob: &Knob) -> String {
        if self.flags.contains_key(knob.env) {
            format!("--{}", knob.flag)
        } else {
            knob.env.to_owned()
        }
    }

    /// A typed knob: blank or unset gives `default`; a malformed value is
    /// reported as `invalid <expected> for NAME="value": <rule>` (upstream's
    /// wording plus the rule) and `default` stands in so parsing continues.
    pub fn typed<T>(
        &mut self,
        knob: &Knob,
        expected: &str,
        rule: &str,
        parse: impl Fn(&str) -> Option<T>,
        default: T,
    ) -> T {
        let Some(setting) = self.non_blank(knob) else {
            return default;
        };
        match parse(&setting.value) {
            Some(value) => value,
            None => {
                self.errors.push(ConfigError {
                    env: knob.env,
                    message: format!(
                        "invalid {expected} for {}={}: {rule}",
                        setting.name,
                        setting.shown()
                    ),
                });
                default
            }
        }
    }

    /// A Go-syntax duration in signed nanoseconds.
    pub fn duration(&mut self, knob: &Knob, default_nanos: i128) -> i128 {
        self.typed(
            knob,
            "duration",
            "not a duration (use forms like 30s, 1m)",
            parse_go_duration,
            default_nanos,
        )
    }

    /// Reads a file a knob names, through the injected reader.
    pub fn read_file(&self, path: &Path) -> io::Result<String> {
        (self.read_file)(path)
    }

    /// A credential given directly (`NAME`) or through a file (`NAME_FILE`,
    /// read with the injected reader; one trailing newline is dropped, as
    /// Kubernetes Secrets mounted from `kubectl create secret --from-file`
    /// usually end with one). Setting both is an error.
    pub fn secret(&mut self, direct: &Knob, file: &Knob) -> Option<Secret> {
        let direct_setting = self.non_blank(direct);
        let file_setting = self.non_blank(file);
        match (direct_setting, file_setting) {
            (Some(_), Some(_)) => {
                self.fail(
                    direct,
                    format!("set only one of {} and {}", direct.env, file.env),
                );
                None
            }
            (Some(setting), None) => Some(Secret::new(setting.value)),
            (None, Some(setting)) => {
                let path = setting.value.trim().to_owned();
                match (self.read_file)(Path::new(&path)) {
                    Ok(content) => {
                        let value = content
                            .strip_suffix('\n')
                            .map(|rest| rest.strip_suffix('\r').unwrap_or(rest))
                            .unwrap_or(&content);
                        if value.trim().is_empty() {
                            self.reject(file, &setting, "the file is empty");
                            None
                        } else {
                            Some(Secret::new(value))
                        }
                    }
                    Err(err) => {
                        self.reject(file, &setting, format!("cannot read the file: {err}"));
                        None
                    }
                }
            }
            (None, None) => None,
        }
    }
}
