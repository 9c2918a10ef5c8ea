//! What can go wrong in a sweep: one [`Error`] with its sources and its class.
//!
//! Each variant displays only its own part; what it wraps is its [`source`](std::error::Error::source),
//! so a tool printing the chain (`a: b: c`, [`Error::describe`]) gets the same line anyhow's
//! `{:#}` gave, and the class (usage, interrupted, fatal) is read off the variant, not found by
//! searching the chain.

use std::path::PathBuf;

use error_class::{Class, Classify};

/// What went wrong, by class.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The settings (flags, a definition, the command template) cannot work; nothing was run.
    #[error("{0}")]
    Usage(String),
    /// SIGINT or SIGTERM: the running trials were stopped and the journal kept for `--resume`.
    #[error("interrupted")]
    Interrupted,
    /// A file, directory or process could not be read, written or started (the context around
    /// it says which).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A record or journal entry that could not be written or read as JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The journal does not hold what this sweep writes: damaged, edited, or another version's.
    #[error("{0}")]
    Journal(String),
    /// A sweep definition (a journal's) that the search space or the schedulers refuse.
    #[error(transparent)]
    Definition(search::Error),
    /// A new sweep's directory holds a sweep already.
    #[error(
        "{} holds a sweep already: continue it with `sweep --resume --out-dir {}`, or choose another --out-dir",
        .dir.display(),
        .dir.display()
    )]
    Started { dir: PathBuf },
    /// One of the sweep's own files is a FIFO, device or directory (`kind` says which).
    #[error("{}: {kind}, not a regular file", .path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    /// A trial's stdout.log has other names (hard links): another file of the sweep's, or
    /// another trial's, would be read and written as the trial's output.
    #[error(
        "{}: the file has other names too (hard links): a trial's stdout.log must be its own",
        .path.display()
    )]
    Linked { path: PathBuf },
    /// The directory is held by another live sweep, or cannot be locked.
    #[error(transparent)]
    Lock(#[from] atomic_file::LockError),
    /// A TensorBoard event file could not be created or written.
    #[error(transparent)]
    Events(#[from] tensorboard::Error),
    /// The sweep's [`Output`](crate::Output) refused a record (a closed pipe): the sweep stops.
    #[error("the sweep's output refused a record")]
    Output(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// `source`, while doing `what`.
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<Error>,
    },
}

impl From<search::Error> for Error {
    /// Within the engine, a definition that no longer passes the schedulers' checks is a
    /// damaged journal (a tool checks a new sweep's flags itself, as usage errors).
    fn from(e: search::Error) -> Error {
        Error::Definition(e)
    }
}

impl Error {
    /// The message and its causes on one line, as anyhow's `{:#}` prints a chain.
    pub fn describe(&self) -> String {
        error_class::chain_text(self)
    }

    /// The error under its contexts (what to match on).
    pub fn root(&self) -> &Error {
        match self {
            Error::Context { source, .. } => source.root(),
            other => other,
        }
    }

    /// This error with what was being done around it.
    pub fn context(self, what: impl Into<String>) -> Error {
        Error::Context {
            what: what.into(),
            source: Box::new(self),
        }
    }
}

impl Classify for Error {
    fn class(&self) -> Class {
        match self {
            Error::Usage(_) => Class::Usage,
            Error::Interrupted => Class::Interrupted,
            Error::Events(e) => e.class(),
            Error::Context { source, .. } => source.class(),
            Error::Io(_)
            | Error::Json(_)
            | Error::Journal(_)
            | Error::Started { .. }
            | Error::Definition(_)
            | Error::NotRegular { .. }
            | Error::Linked { .. }
            | Error::Lock(_)
            | Error::Output(_) => Class::Fatal,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `.context(...)` and `.with_context(|| ...)` on any result whose error becomes an [`Error`],
/// and on an option (its `None` a damaged journal's missing part).
pub(crate) trait Context<T> {
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;

    fn context(self, what: impl Into<String>) -> Result<T>
    where
        Self: Sized,
    {
        let what = what.into();
        self.with_context(|| what)
    }
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| e.into().context(what()))
    }
}

impl<T> Context<T> for Option<T> {
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.ok_or_else(|| Error::Journal(what().into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_reads_as_one_line_and_keeps_its_sources() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = Err::<(), _>(io)
            .context("opening /x/journal.jsonl")
            .unwrap_err();
        assert_eq!(e.describe(), "opening /x/journal.jsonl: No such file");
        assert!(
            matches!(e.root(), Error::Io(io) if io.kind() == std::io::ErrorKind::NotFound),
            "{e:?}"
        );
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(e.class(), Class::Fatal);
    }

    #[test]
    fn context_keeps_the_class_of_what_it_wraps() {
        let usage = Error::Usage("--slots 0".into()).context("starting the sweep");
        assert_eq!(usage.class(), Class::Usage);
        assert_eq!(usage.describe(), "starting the sweep: --slots 0");
        assert_eq!(
            Error::Interrupted.context("waiting").class(),
            Class::Interrupted
        );
    }
}
