//! What every shardkit tool shares, so that each `main.rs` is one line:
//!
//! - [`run_main`]: `--generate man` before parsing, clap parsing (exit 2 on usage errors), the
//!   call into the tool's `run`, and the mapping of its result to the README's exit codes
//!   (0 ok, 1 fatal, 2 usage, 3 some items failed, 130 interrupted) — the class an error carries
//!   ([`error_class`]: library errors passed up `.classified()`, [`UsageError`], [`Interrupted`])
//!   decides — with errors printed as `<tool>: error: <context chain>` on stderr;
//! - [`JsonlOut`]: records on stdout, one compact JSON object per line; a closed pipe is a quiet
//!   exit 0;
//! - [`inputs`]: work items from arguments, files and stdin (paths or records);
//! - [`atomic`]: outputs written to a temp file beside the target and renamed;
//! - [`paths`]: where an input's output goes under an output directory;
//! - [`interrupt`]: SIGINT/SIGTERM set a flag that long loops poll, so temp files are cleaned up;
//! - [`panics`]: a panic while handling one item becomes that item's error;
//! - [`progress`]: an indicatif bar on stderr, shown only on a TTY or with `--progress`;
//! - [`written`]: a flag's parsed value kept with the text it was given as.
//!
//! ```no_run
//! use cli_common::{JsonlOut, Outcome, Tool};
//! # use cli_common::CommonArgs;
//! # #[derive(clap::Parser)] struct Cli { #[command(flatten)] common: CommonArgs }
//! # impl Tool for Cli { const RECORDS: &'static str = ""; const EXAMPLES: &'static [(&'static str, &'static str)] = &[]; }
//! fn run(_cli: Cli, _out: &mut JsonlOut) -> anyhow::Result<Outcome> { Ok(Outcome::Ok) }
//! fn main() -> std::process::ExitCode { cli_common::run_main::<Cli>(run) }
//! ```

/// Atomic writes of outputs (the `atomic-file` crate, which libraries use directly).
pub use atomic_file as atomic;
pub mod inputs;
pub mod interrupt;
pub mod logger;
mod man;
pub mod memory;
mod out;
pub mod panics;
pub mod paths;
pub mod progress;
pub mod threads;
pub mod written;

pub use error_class::{Class, Classified, ResultExt, Torch};
pub use man::{check_cli, render_man};
pub use out::{JsonlOut, StdoutClosed, Tally};

use std::process::ExitCode;

/// Exit status for a finished run (fatal errors and interrupts are mapped by [`run_main`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything succeeded: exit 0.
    Ok,
    /// The run finished but some items failed or a check failed: exit 3.
    ItemsFailed,
    /// The run stopped early at a checkpoint it was asked for (a scheduler's warning signal):
    /// exit 75 (sysexits' EX_TEMPFAIL), so a script can tell it apart from a finished or a
    /// failed run and run it again with `--resume`.
    Resumable,
}

impl Outcome {
    /// `ItemsFailed` when `failed > 0`.
    pub fn from_failures(failed: usize) -> Self {
        if failed > 0 {
            Outcome::ItemsFailed
        } else {
            Outcome::Ok
        }
    }
}

pub const EXIT_FATAL: u8 = Class::Fatal.exit_code();
pub const EXIT_USAGE: u8 = Class::Usage.exit_code();
pub const EXIT_ITEMS_FAILED: u8 = Class::ItemsFailed.exit_code();
pub const EXIT_INTERRUPTED: u8 = Class::Interrupted.exit_code();
/// [`Outcome::Resumable`]'s status.
pub const EXIT_RESUMABLE: u8 = 75;
/// Stdout's reader went away: SIGPIPE's status (128 + 13), as a producer killed by it ends.
pub const EXIT_BROKEN_PIPE: u8 = 141;

/// The run was stopped by SIGINT/SIGTERM; [`run_main`] maps it to exit 130.
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
pub struct Interrupted;

impl error_class::Classify for Interrupted {
    fn class(&self) -> Class {
        Class::Interrupted
    }
}

/// A usage error found after parsing (a flag value clap cannot check alone); [`run_main`] maps
/// it to exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl error_class::Classify for UsageError {
    fn class(&self) -> Class {
        Class::Usage
    }
}

/// The class of a failed run: the first class found along the error's chain (a library error
/// passed up `.classified()`, a [`UsageError`], [`Interrupted`]); fatal when none says.
pub fn class_of(e: &anyhow::Error) -> Class {
    use error_class::Classify;
    e.chain()
        .find_map(|c| {
            c.downcast_ref::<Classified>()
                .map(|c| c.class)
                .or_else(|| c.downcast_ref::<UsageError>().map(UsageError::class))
                .or_else(|| c.downcast_ref::<Interrupted>().map(Interrupted::class))
        })
        .unwrap_or(Class::Fatal)
}

/// `Err(UsageError)` with this message, for `?`.
pub fn usage<T>(message: impl Into<String>) -> anyhow::Result<T> {
    Err(UsageError(message.into()).into())
}

/// A tool's command line plus the man-page sections clap does not know about.
pub trait Tool: clap::Parser {
    /// roff body of the OUTPUT RECORDS section: what the tool reads and prints.
    const RECORDS: &'static str;
    /// (what it does, command line) pairs for the EXAMPLES section.
    const EXAMPLES: &'static [(&'static str, &'static str)];
    /// (variable, what it does) for the ENVIRONMENT section, in groups (a library's list, the
    /// tool's own): what the tool and its libraries read from the environment besides the
    /// flags' own `[env: ...]` fallbacks (launchers' variables, library path overrides). None
    /// by default.
    const ENVIRONMENT: &'static [EnvVars] = &[];
}

/// (variable, what it does) pairs, as a library lists what it reads (`device::ENVIRONMENT`).
pub type EnvVars = &'static [(&'static str, &'static str)];

/// `-q` and `--progress`, flattened into every tool's `Cli` (`run_main` reads `-q` from the
/// parsed arguments by its name, `quiet`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CommonArgs {
    /// Print only errors on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Show progress on stderr even when it is not a terminal (then as plain lines: one at once,
    /// then one every 10 s).
    #[arg(long, global = true)]
    pub progress: bool,
}

/// Parses the command line, runs the tool and maps the result to an exit code.
pub fn run_main<C: Tool>(
    run: impl FnOnce(C, &mut JsonlOut) -> anyhow::Result<Outcome>,
) -> ExitCode {
    let name = <C as clap::CommandFactory>::command()
        .get_name()
        .to_string();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "--generate") {
        return match args.get(2).and_then(|a| a.to_str()) {
            Some("man") => match render_man::<C>() {
                Ok(page) => {
                    print!("{page}");
                    ExitCode::SUCCESS
                }
                Err(e) => report(&name, &e),
            },
            other => {
                eprintln!("{name}: error: --generate takes `man`, not {other:?}");
                ExitCode::from(EXIT_USAGE)
            }
        };
    }
    // --help ends with what the man page adds to clap's text: records, exit status, examples
    // (printed as written, not re-wrapped by clap, so command lines copy and paste).
    if args
        .iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--help")
    {
        use std::io::Write as _;
        let mut cmd = <C as clap::CommandFactory>::command();
        // A closed pipe (`--help | head`) is not an error.
        let _ = write!(
            std::io::stdout(),
            "{}\n{}",
            cmd.render_long_help(),
            man::help_tail::<C>()
        );
        return ExitCode::SUCCESS;
    }
    let (cli, quiet) = parse::<C>(args).unwrap_or_else(|e| e.exit());
    if stdout_was_closed() {
        eprintln!(
            "{name}: error: stdout is closed (>&-): the records would be lost; redirect it to /dev/null to discard them"
        );
        return ExitCode::from(EXIT_FATAL);
    }
    logger::install(&name, quiet);
    interrupt::install();
    panics::install_hook();
    let mut out = JsonlOut::stdout();
    // A panic that no step caught (libtorch raises its errors as panics through tch) ends the
    // run as a fatal error with libtorch's first line, not a Rust backtrace of C++ frames.
    let result = panics::catch(|| run(cli, &mut out))
        .unwrap_or_else(|panic| {
            Err(anyhow::Error::new(error_class::Torch::from_message(
                &panic.message,
            )))
        })
        .and_then(|outcome| out.flush().map(|_| outcome));
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::ItemsFailed) => ExitCode::from(EXIT_ITEMS_FAILED),
        Ok(Outcome::Resumable) => ExitCode::from(EXIT_RESUMABLE),
        Err(e) => report(&name, &e),
    }
}

/// The tool's `Cli` from `args`, and whether `-q` ([`CommonArgs`]) was given.
fn parse<C: Tool>(args: Vec<std::ffi::OsString>) -> Result<(C, bool), clap::Error> {
    let mut matches = <C as clap::CommandFactory>::command().try_get_matches_from(args)?;
    let quiet = matches!(matches.try_get_one::<bool>("quiet"), Ok(Some(true)));
    let cli = <C as clap::FromArgMatches>::from_arg_matches_mut(&mut matches)
        .map_err(|e| e.format(&mut <C as clap::CommandFactory>::command()))?;
    Ok((cli, quiet))
}

fn report(name: &str, e: &anyhow::Error) -> ExitCode {
    // The reader of stdout went away: stop quietly with SIGPIPE's status (128 + 13), as a
    // producer killed by SIGPIPE does, never 0 with work left undone.
    if e.chain()
        .any(|c| c.is::<StdoutClosed>() || is_broken_pipe(c))
    {
        return ExitCode::from(EXIT_BROKEN_PIPE);
    }
    let class = class_of(e);
    if e.chain().any(|c| c.is::<Interrupted>()) {
        eprintln!("{name}: interrupted");
        return ExitCode::from(EXIT_INTERRUPTED);
    }
    // A run that fails after SIGINT/SIGTERM arrived failed because of it (a wait it cut short,
    // a peer that stopped for the same signal): interrupted too, with what broke.
    if interrupt::requested() || class == Class::Interrupted {
        eprintln!("{name}: interrupted ({})", error_line(e));
        return ExitCode::from(EXIT_INTERRUPTED);
    }
    eprintln!("{name}: error: {}", error_line(e));
    ExitCode::from(class.exit_code())
}

/// An error and its causes on one line, as anyhow's `{:#}` prints them, but a cause whose text
/// the line already ends with is not said twice (an error that shows its source's text and
/// also gives it as its source, as a library error holding libtorch's does).
pub fn error_line(e: &anyhow::Error) -> String {
    error_class::chain_text(e.as_ref())
}

/// Whether fd 1 was closed when the process started. Rust's runtime reopens a closed standard
/// descriptor on /dev/null before `main`, after which it looks like `>/dev/null` (or Python's
/// `stdout=subprocess.DEVNULL`, read-write as the reopened one is); a constructor in
/// `.init_array` runs before that and asks the kernel. Elsewhere than Linux: never.
static STDOUT_CLOSED_AT_START: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static CHECK_STDOUT_AT_START: extern "C" fn() = {
    extern "C" fn check() {
        // SAFETY: F_GETFD on a descriptor number reads its flags and changes nothing.
        let closed = unsafe { libc::fcntl(1, libc::F_GETFD) } < 0;
        STDOUT_CLOSED_AT_START.store(closed, std::sync::atomic::Ordering::Relaxed);
    }
    check
};

fn stdout_was_closed() -> bool {
    STDOUT_CLOSED_AT_START.load(std::sync::atomic::Ordering::Relaxed)
}

fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// `#[test] fn verify_cli()`: [`check_cli`] on a tool's `Cli`, as a unit test of its crate.
#[macro_export]
macro_rules! verify_cli {
    ($cli:ty) => {
        #[cfg(test)]
        #[test]
        fn verify_cli() {
            $crate::check_cli::<$cli>();
        }
    };
}

/// Prints `<tool>: message` on stderr unless quiet.
#[macro_export]
macro_rules! note {
    ($common:expr, $tool:expr, $($arg:tt)*) => {
        if !$common.quiet { eprintln!("{}: {}", $tool, format_args!($($arg)*)); }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_along_the_chain_decides_the_exit_code() {
        #[derive(Debug, thiserror::Error)]
        #[error("library says no")]
        struct Lib(Class);
        impl error_class::Classify for Lib {
            fn class(&self) -> Class {
                self.0
            }
        }
        let up = |class| -> anyhow::Error {
            let r: Result<(), Lib> = Err(Lib(class));
            anyhow::Error::new(r.classified().unwrap_err()).context("rank 1")
        };
        for class in [
            Class::Usage,
            Class::ItemsFailed,
            Class::Interrupted,
            Class::Fatal,
        ] {
            assert_eq!(class_of(&up(class)), class);
        }
        assert_eq!(format!("{:#}", up(Class::Usage)), "rank 1: library says no");
        assert_eq!(class_of(&anyhow::anyhow!("plain")), Class::Fatal);
        assert_eq!(class_of(&UsageError("x".into()).into()), Class::Usage);
        assert_eq!(
            class_of(&anyhow::Error::new(Interrupted).context("waiting")),
            Class::Interrupted
        );
        // Passed up without .classified(), a library error carries no class: fatal.
        assert_eq!(class_of(&Lib(Class::Usage).into()), Class::Fatal);
    }

    #[test]
    fn an_error_line_says_a_repeated_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("{0}")]
        struct Shows(#[source] std::io::Error);
        let e = anyhow::Error::new(Shows(std::io::Error::other("CUDA error: out of memory")))
            .context("rank 0");
        assert_eq!(
            format!("{e:#}"),
            "rank 0: CUDA error: out of memory: CUDA error: out of memory"
        );
        assert_eq!(error_line(&e), "rank 0: CUDA error: out of memory");
        // Other chains read as anyhow prints them.
        let e = anyhow::Error::new(std::io::Error::other("disk full")).context("writing x");
        assert_eq!(error_line(&e), format!("{e:#}"));
    }

    #[test]
    fn outcome_from_failures() {
        assert_eq!(Outcome::from_failures(0), Outcome::Ok);
        assert_eq!(Outcome::from_failures(2), Outcome::ItemsFailed);
    }

    #[test]
    fn broken_pipe_is_recognised_through_context() {
        let e = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing");
        assert!(e.chain().any(is_broken_pipe));
    }

    #[test]
    fn quiet_is_read_from_the_parsed_common_args() {
        #[derive(clap::Parser)]
        #[command(name = "t")]
        struct Cli {
            #[arg(long)]
            n: Option<u32>,
            #[command(flatten)]
            common: CommonArgs,
        }
        impl Tool for Cli {
            const RECORDS: &'static str = "";
            const EXAMPLES: &'static [(&'static str, &'static str)] = &[];
        }
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect();
        let (cli, quiet) = parse::<Cli>(args(&["t", "--n", "3", "-q"])).unwrap();
        assert!(quiet && cli.common.quiet);
        assert_eq!(cli.n, Some(3));
        let (cli, quiet) = parse::<Cli>(args(&["t"])).unwrap();
        assert!(!quiet && !cli.common.quiet);
        let e = parse::<Cli>(args(&["t", "--n", "x"]))
            .map(|_| ())
            .unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }
}
