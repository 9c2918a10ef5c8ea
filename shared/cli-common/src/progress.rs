//! A progress bar on stderr: drawn at most once a second, only when stderr is a terminal or
//! `--progress` is given, never with `-q`.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::CommonArgs;

/// A bar of `len` items (`None`: unknown length, a spinner with a count).
pub fn bar(common: &CommonArgs, tool: &str, len: Option<u64>) -> ProgressBar {
    let show = !common.quiet && (common.progress || std::io::stderr().is_terminal());
    let bar = match len {
        Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::hidden()),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()),
    };
    if show {
        let template = if len.is_some() {
            format!("{tool}: {{bar:30}} {{pos}}/{{len}} {{per_sec}} eta {{eta}}")
        } else {
            format!("{tool}: {{spinner}} {{pos}} {{per_sec}}")
        };
        bar.set_style(ProgressStyle::with_template(&template).expect("valid template"));
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(1));
        bar.enable_steady_tick(Duration::from_secs(1));
    }
    bar
}
