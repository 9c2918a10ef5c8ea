//! The one facade through which library code speaks to people: the `log` crate. [`crate::run_main`]
//! installs a logger that prints `<tool>: warning: ...` (and notes as `<tool>: ...`) on stderr,
//! and only errors under `-q`, so a library's warning (a CUDA graph capture that failed, a fused
//! kernel that cannot compile) reaches the user as the tool's own line and `-q` silences it.

use log::{Level, LevelFilter, Log, Metadata, Record};

struct Stderr {
    tool: String,
    level: LevelFilter,
}

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let label = match record.level() {
            Level::Error => "error: ",
            Level::Warn => "warning: ",
            _ => "",
        };
        eprintln!("{}: {label}{}", self.tool, record.args());
    }

    fn flush(&self) {}
}

/// The level a tool logs at: notes and warnings, or only errors under `-q`.
fn level(quiet: bool) -> LevelFilter {
    if quiet {
        LevelFilter::Error
    } else {
        LevelFilter::Info
    }
}

/// Installs the stderr logger for `tool` (the first call wins; later ones do nothing).
pub fn install(tool: &str, quiet: bool) {
    let level = level(quiet);
    let logger = Stderr {
        tool: tool.to_string(),
        level,
    };
    if log::set_boxed_logger(Box::new(logger)).is_ok() {
        log::set_max_level(level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_keeps_errors_only() {
        let meta = |l| Metadata::builder().level(l).build();
        let quiet = Stderr {
            tool: "t".into(),
            level: level(true),
        };
        assert!(quiet.enabled(&meta(Level::Error)));
        assert!(!quiet.enabled(&meta(Level::Warn)));
        let loud = Stderr {
            tool: "t".into(),
            level: level(false),
        };
        assert!(loud.enabled(&meta(Level::Warn)) && loud.enabled(&meta(Level::Info)));
        assert!(!loud.enabled(&meta(Level::Debug)));
    }
}
