//! What kind of failure an error is, for the exit status a tool ends with (README, "Records and
//! exit codes"), modelled on uutils' `UError::code`: every library crate's `Error` implements
//! [`Classify`]; a tool passes such errors up as [`Classified`] (`.classified()?`), and
//! `cli_common::run_main` maps the class it finds in the error chain to the exit code — the one
//! place codes are decided. An error that carries no class is fatal.
//!
//! libtorch reports most failures by panicking inside tch's operations, a few as `TchError`s;
//! either way the text is all there is. [`Torch::from_message`] is the one place that text is
//! read (for CUDA running out of memory), so tools match a typed value instead of searching
//! strings; `cli_common::panics::catch_torch` turns the panics into it.

use std::error::Error;
use std::fmt;

/// The README's exit statuses other than success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Exit 1: the run could not go on (a missing file, a lost peer, a libtorch error).
    Fatal,
    /// Exit 2: the command line (or settings only checkable once the data are known) cannot
    /// work; nothing was done.
    Usage,
    /// Exit 3: the run finished, but some items failed.
    ItemsFailed,
    /// Exit 130: SIGINT/SIGTERM (this process's, or a peer's that stopped the group).
    Interrupted,
}

impl Class {
    pub const fn exit_code(self) -> u8 {
        match self {
            Class::Fatal => 1,
            Class::Usage => 2,
            Class::ItemsFailed => 3,
            Class::Interrupted => 130,
        }
    }
}

/// An error that knows its class. Fatal unless it says otherwise: an error type whose every
/// variant is fatal implements it with an empty body (`impl Classify for Error {}`).
pub trait Classify: Error {
    fn class(&self) -> Class {
        Class::Fatal
    }
}

/// An error with its class, on its way up to the tool's exit code. Displays as the error it
/// wraps and has that error's sources, so messages do not change.
#[derive(Debug)]
pub struct Classified {
    pub class: Class,
    inner: Box<dyn Error + Send + Sync>,
}

impl Classified {
    pub fn new(class: Class, inner: impl Into<Box<dyn Error + Send + Sync>>) -> Classified {
        Classified {
            class,
            inner: inner.into(),
        }
    }

    /// The wrapped error.
    pub fn inner(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.inner
    }
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner, f)
    }
}

impl Error for Classified {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.inner.source()
    }
}

impl<E: Classify + Send + Sync + 'static> From<E> for Classified {
    fn from(e: E) -> Classified {
        Classified::new(e.class(), e)
    }
}

/// `.classified()` on a library result: its error keeps its class on the way up.
pub trait ResultExt<T> {
    fn classified(self) -> Result<T, Classified>;
}

impl<T, E: Classify + Send + Sync + 'static> ResultExt<T> for Result<T, E> {
    fn classified(self) -> Result<T, Classified> {
        self.map_err(Classified::from)
    }
}

/// An error and its causes on one line, `a: b: c`, as anyhow's `{:#}` prints a chain; a cause
/// whose text the line already ends with (a wrapper that repeats its source) is not repeated.
pub fn chain_text(e: &(dyn Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.ends_with(&more) {
            text = format!("{text}: {more}");
        }
        next = cause.source();
    }
    text
}

/// The text a panic was raised with (tch raises libtorch's errors as panics with their message).
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

/// A libtorch failure (a panic in a tch operation, or a `TchError`), typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Torch {
    /// The CUDA caching allocator could not get the memory (libtorch's message kept).
    OutOfMemory(String),
    /// Anything else libtorch raised: its first line.
    Other(String),
}

impl Torch {
    /// Reads libtorch's text: `CUDA out of memory. Tried to allocate …` (and the allocator's
    /// other out-of-memory wordings) is [`Torch::OutOfMemory`].
    pub fn from_message(message: &str) -> Torch {
        // tch's `unwrap` of a `TchError`: the text libtorch raised is inside the quotes.
        let inner = message
            .strip_prefix("called `Result::unwrap()` on an `Err` value: Torch(\"")
            .unwrap_or(message);
        let first = inner.lines().next().unwrap_or("(no message)");
        let first = first.trim_end_matches("\")").to_string();
        if message.contains("out of memory") {
            Torch::OutOfMemory(first)
        } else {
            Torch::Other(first)
        }
    }
}

impl fmt::Display for Torch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Torch::OutOfMemory(m) | Torch::Other(m) => write!(f, "libtorch error: {m}"),
        }
    }
}

impl Error for Torch {}

/// Fatal, out of memory or not (the tool may say more of an out-of-memory error).
impl Classify for Torch {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Bad;
    impl fmt::Display for Bad {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("bad flag")
        }
    }
    impl Error for Bad {}
    impl Classify for Bad {
        fn class(&self) -> Class {
            Class::Usage
        }
    }

    #[test]
    fn a_classified_error_keeps_its_message_and_class() {
        let r: Result<(), Bad> = Err(Bad);
        let e = r.classified().unwrap_err();
        assert_eq!((e.class, e.to_string()), (Class::Usage, "bad flag".into()));
        assert!(e.source().is_none());
        assert_eq!(e.class.exit_code(), 2);
        assert_eq!(Class::Interrupted.exit_code(), 130);
    }

    #[test]
    fn a_tch_unwrap_panic_keeps_only_libtorchs_first_line() {
        let panic = "called `Result::unwrap()` on an `Err` value: Torch(\"value cannot be converted \
                     to type float without overflow\nException raised from checked_convert at \
                     /pytorch/c10/util/TypeCast.h:44\n(no backtrace available)\") (at /root/.cargo/\
                     registry/src/tch-0.24.0/src/wrappers/tensor_generated.rs:1)";
        assert_eq!(
            Torch::from_message(panic).to_string(),
            "libtorch error: value cannot be converted to type float without overflow"
        );
    }

    #[test]
    fn libtorch_messages_are_typed() {
        let oom = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total)\nException raised from malloc";
        assert_eq!(
            Torch::from_message(oom),
            Torch::OutOfMemory(
                "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total)".into()
            )
        );
        assert!(matches!(
            Torch::from_message("Expected all tensors to be on the same device"),
            Torch::Other(_)
        ));
    }
}
