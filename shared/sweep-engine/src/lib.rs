//! A hyper-parameter sweep's engine, as the `sweep` tool runs it: a journal that makes it
//! resumable ([`journal`]), the command template ([`template`]), trial launchers behind one trait
//! ([`launcher`]), the loop that acts on the schedulers' decisions ([`Engine`]), and what a
//! sweep leaves in its directory ([`files`], [`plot`]).
//!
//! Records go to the caller through [`Output`], warnings through the `log` facade; nothing is
//! printed here.

mod engine;
pub mod files;
pub mod journal;
pub mod launcher;
pub mod plot;
mod pyjson;
mod setup;
pub mod template;

pub use engine::{Engine, RunOptions, trial_dir};
pub use setup::{MAX_TRIALS, Opened, check_resumed, create, resume, template_of};

/// The most trials that run at once (`--slots`, and the default a launcher derives from what
/// it has, such as a Slurm allocation's nodes and CPUs): the per-slot lists are sized by it.
pub const MAX_SLOTS: usize = 4096;

use error_class::{Class, Classified, Classify};

/// Every record a sweep prints, in the order it happens.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(untagged)]
pub enum Record {
    Trial(records::TrialRecord),
    Result(records::TrialResult),
    Decision(records::Decision),
    Exploit(records::Exploit),
    Summary(records::SweepSummary),
}

/// Where a running sweep's output goes.
pub trait Output {
    /// One record (stdout, for the tool); an error (a closed pipe) ends the sweep.
    fn record(&mut self, record: Record) -> anyhow::Result<()>;
    /// The status table, as it changes and at the end.
    fn status(&mut self, table: &str);
}

/// How a sweep's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// Trials that ended in error.
    pub failed: usize,
}

/// What went wrong, by class.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The settings (flags, a definition) cannot work; nothing was run.
    #[error("{0}")]
    Usage(String),
    /// SIGINT or SIGTERM: the running trials were stopped and the journal kept for `--resume`.
    #[error("interrupted")]
    Interrupted,
    /// Anything else: a file that cannot be read or written, a damaged journal.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl From<search::Error> for Error {
    /// A definition that no longer passes the schedulers' checks: a damaged journal.
    fn from(e: search::Error) -> Error {
        Error::Failed(anyhow::Error::new(e))
    }
}

impl Classify for Error {
    fn class(&self) -> Class {
        match self {
            Error::Usage(_) => Class::Usage,
            Error::Interrupted => Class::Interrupted,
            // A classified error inside (an input that is not a regular file) keeps its class.
            Error::Failed(e) => e
                .chain()
                .find_map(|c| c.downcast_ref::<Classified>().map(|c| c.class))
                .unwrap_or(Class::Fatal),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
