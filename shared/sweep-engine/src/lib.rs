//! A hyper-parameter sweep's engine, as the `sweep` tool runs it: a journal that makes it
//! resumable ([`journal`]), the command template ([`template`]), trial launchers behind one trait
//! ([`launcher`]), the loop that acts on the schedulers' decisions ([`Engine`]), and what a
//! sweep leaves in its directory ([`files`], [`plot`]).
//!
//! Records go to the caller through [`Output`], warnings through the `log` facade; nothing is
//! printed here.

mod engine;
mod error;
pub mod files;
pub mod journal;
pub mod launcher;
pub mod plot;
mod pyjson;
mod setup;
pub mod template;
#[cfg(test)]
mod testing;

pub use engine::{Engine, RunOptions, trial_dir};
pub use setup::{MAX_TRIALS, Opened, check_resumed, create, resume, template_of};

/// The most trials that run at once (`--slots`, and the default a launcher derives from what
/// it has, such as a Slurm allocation's nodes and CPUs): the per-slot lists are sized by it.
pub const MAX_SLOTS: usize = 4096;

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

/// What an [`Output`] that refuses a record says why.
pub type OutputError = Box<dyn std::error::Error + Send + Sync>;

/// Where a running sweep's output goes.
pub trait Output {
    /// One record (stdout, for the tool); an error (a closed pipe) ends the sweep, as
    /// [`Error::Output`] holding it.
    fn record(&mut self, record: Record) -> std::result::Result<(), OutputError>;
    /// The status table, as it changes and at the end.
    fn status(&mut self, table: &str);
}

/// How a sweep's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// Trials that ended in error.
    pub failed: usize,
}

pub use error::{Error, Result};
