//! The trial command: arguments with `{placeholders}`, checked before anything runs.
//!
//! `{name}` is a parameter of the space, `{trial}` the trial number, `{trial_dir}` its directory,
//! `{slot}` the slot it runs in; `{{` and `}}` are literal braces. Values are written as JSON
//! writes them (numbers round-trip exactly), strings without quotes.

use std::collections::BTreeSet;
use std::ffi::OsString;

use crate::{Error, Result};
use serde_json::Value;

use search::space::Config;

/// Placeholders every template may use besides the parameters.
pub const BUILTIN: &[&str] = &["trial", "trial_dir", "slot"];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Arg {
    /// Not UTF-8: passed as it is.
    Raw(OsString),
    Pieces(Vec<Piece>),
}

/// A parsed command template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Arg>);

/// Values for one trial's command.
#[derive(Debug)]
pub struct Bindings<'a> {
    pub config: &'a Config,
    pub trial: usize,
    pub trial_dir: &'a std::path::Path,
    pub slot: usize,
}

impl Template {
    /// Parses `args`; every placeholder must be a parameter in `params` or a builtin.
    pub fn parse(args: &[OsString], params: &BTreeSet<String>) -> Result<Self> {
        if args.is_empty() {
            return Err(Error::Usage(
                "no command: give it after `--`, e.g. `sweep ... -- ddp-train --lr {lr}`".into(),
            ));
        }
        for p in params {
            if BUILTIN.contains(&p.as_str()) {
                return Err(Error::Usage(format!(
                    "parameter {p:?} has the name of the builtin placeholder {{{p}}}: rename it"
                )));
            }
        }
        let mut out = Vec::with_capacity(args.len());
        for a in args {
            let Some(s) = a.to_str() else {
                out.push(Arg::Raw(a.clone()));
                continue;
            };
            let pieces = pieces(s)?;
            for p in &pieces {
                if let Piece::Var(v) = p
                    && !params.contains(v)
                    && !BUILTIN.contains(&v.as_str())
                {
                    let known: Vec<String> = params
                        .iter()
                        .cloned()
                        .chain(BUILTIN.iter().map(|b| b.to_string()))
                        .collect();
                    return Err(Error::Usage(format!(
                        "unknown placeholder {{{v}}} in {s:?} (known: {}; write {{{{ and }}}} for literal braces)",
                        known.join(", ")
                    )));
                }
            }
            out.push(Arg::Pieces(pieces));
        }
        Ok(Template(out))
    }

    /// The program and its arguments for one trial.
    pub fn expand(&self, b: &Bindings<'_>) -> Vec<OsString> {
        self.0
            .iter()
            .map(|a| match a {
                Arg::Raw(os) => os.clone(),
                Arg::Pieces(ps) => {
                    let mut s = OsString::new();
                    for p in ps {
                        match p {
                            Piece::Text(t) => s.push(t),
                            Piece::Var(v) => match v.as_str() {
                                "trial" => s.push(b.trial.to_string()),
                                "slot" => s.push(b.slot.to_string()),
                                "trial_dir" => s.push(b.trial_dir.as_os_str()),
                                name => s.push(render(&b.config[name])),
                            },
                        }
                    }
                    s
                }
            })
            .collect()
    }
}

/// A config value as it appears on a command line.
pub fn render(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn pieces(s: &str) -> Result<Vec<Piece>> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|p| p.1) == Some('{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek().map(|p| p.1) == Some('}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let rest = &s[i + 1..];
                let Some(end) = rest.find('}') else {
                    return Err(Error::Usage(format!(
                        "unclosed {{ in {s:?} (write {{{{ for a literal brace)"
                    )));
                };
                let name = &rest[..end];
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(Error::Usage(format!(
                        "{{{name}}} in {s:?} is not a placeholder (write {{{{ and }}}} for literal braces)"
                    )));
                }
                if !text.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut text)));
                }
                out.push(Piece::Var(name.to_string()));
                for _ in 0..name.chars().count() + 1 {
                    chars.next();
                }
            }
            '}' => {
                return Err(Error::Usage(format!(
                    "lone }} in {s:?} (write }}}} for a literal brace)"
                )));
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn params(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn expands_parameters_and_builtins() {
        let t = Template::parse(
            &os(&[
                "train",
                "--lr={lr}",
                "{opt}",
                "--dir",
                "{trial_dir}/ck",
                "{{x}}",
                "{slot}-{trial}",
            ]),
            &params(&["lr", "opt"]),
        )
        .unwrap();
        let config = json!({"lr": 0.001, "opt": "sgd"})
            .as_object()
            .unwrap()
            .clone();
        let b = Bindings {
            config: &config,
            trial: 3,
            trial_dir: std::path::Path::new("/o/trial-0003"),
            slot: 1,
        };
        assert_eq!(
            t.expand(&b),
            os(&[
                "train",
                "--lr=0.001",
                "sgd",
                "--dir",
                "/o/trial-0003/ck",
                "{x}",
                "1-3"
            ])
        );
    }

    #[test]
    fn unknown_and_malformed_placeholders_are_errors() {
        for (arg, want) in [
            ("{lrr}", "unknown placeholder {lrr}"),
            ("{\"a\":1}", "not a placeholder"),
            ("{lr", "unclosed"),
            ("a}", "lone }"),
        ] {
            let e = Template::parse(&os(&["x", arg]), &params(&["lr"]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{arg}: {e}");
        }
        assert!(Template::parse(&[], &params(&[])).is_err());
        assert!(
            Template::parse(&os(&["x"]), &params(&["slot"]))
                .unwrap_err()
                .to_string()
                .contains("builtin")
        );
    }

    #[test]
    fn numbers_round_trip() {
        assert_eq!(render(&json!(0.1)), "0.1");
        assert_eq!(render(&json!(1e-7)), "1e-7");
        assert_eq!(render(&json!(64)), "64");
        assert_eq!(render(&json!(true)), "true");
    }
}
