//! A progress bar on stderr: drawn at most once a second when stderr is a terminal; with
//! `--progress` and stderr a file or a pipe (a batch job's log), a plain line at once and then
//! every [`LINE_EVERY`]; never with `-q`.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

/// How often `--progress` writes its line when stderr is not a terminal.
pub const LINE_EVERY: Duration = Duration::from_secs(10);

use crate::CommonArgs;

/// A bar of `len` items (`None`: unknown length, a spinner with a count).
pub fn bar(common: &CommonArgs, tool: &str, len: Option<u64>) -> ProgressBar {
    bar_from(common, tool, len, 0)
}

/// A bar of `len` items of which `done` are done already (a resumed run): its rate and ETA
/// count from here.
pub fn bar_from(common: &CommonArgs, tool: &str, len: Option<u64>, done: u64) -> ProgressBar {
    let show = !common.quiet && (common.progress || std::io::stderr().is_terminal());
    let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::hidden()).with_position(done);
    bar.reset_eta();
    if show {
        let template = if len.is_some() {
            format!("{tool}: {{bar:30}} {{pos}}/{{len}} {{per_sec}} eta {{eta}}")
        } else {
            format!("{tool}: {{spinner}} {{pos}} {{per_sec}}")
        };
        bar.set_style(ProgressStyle::with_template(&template).expect("valid template"));
        // indicatif draws nothing where stderr is not a terminal: there, plain lines.
        bar.set_draw_target(if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr_with_hz(1)
        } else {
            ProgressDrawTarget::term_like_with_hz(Box::new(Lines::default()), 1)
        });
        // The first line now, not at the ticker's first tick: a run shorter than that said
        // nothing (and `tick` does nothing once a ticker is installed, so it is a forced draw).
        bar.force_draw();
        bar.enable_steady_tick(Duration::from_secs(1));
    }
    bar
}

/// A terminal for indicatif that is a log: each draw of the bar becomes one line on stderr, at
/// most one per [`LINE_EVERY`] (the first at once); cursor moves and clears do nothing.
#[derive(Debug, Default)]
struct Lines {
    last: Mutex<Option<Instant>>,
}

impl Lines {
    fn line(&self, s: &str) -> std::io::Result<()> {
        if s.trim().is_empty() {
            return Ok(());
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| t.elapsed() < LINE_EVERY) {
            return Ok(());
        }
        *last = Some(Instant::now());
        eprintln!("{}", s.trim_end());
        Ok(())
    }
}

impl TermLike for Lines {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.line(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.line(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}
