//! A panic while handling one item (a dependency's assertion on a malformed file, say) becomes
//! that item's error, not the end of the batch: [`catch`] runs the item's work and returns the
//! panic's message as an error. The hook [`crate::run_main`] installs once keeps such caught
//! panics off stderr (the message goes into the item's error record instead); any other panic is
//! reported by the previous hook as before.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

static INSTALL: Once = Once::new();

/// Installs the hook (idempotent).
pub fn install_hook() {
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) {
                let at = info
                    .location()
                    .map(|l| format!(" (at {}:{})", l.file(), l.line()))
                    .unwrap_or_default();
                CAUGHT.with(|c| {
                    *c.borrow_mut() =
                        Some(format!("{}{at}", error_class::panic_text(info.payload())))
                });
            } else {
                previous(info);
            }
        }));
    });
}

/// A panic caught by [`catch`]: its message (with its source location when the hook is
/// installed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Panicked {
    pub message: String,
}

impl Panicked {
    /// A panic's payload as [`Panicked`]: its text, `&str` or `String`.
    pub fn from_payload(payload: &(dyn std::any::Any + Send)) -> Panicked {
        Panicked {
            message: error_class::panic_text(payload),
        }
    }
}

impl error_class::Classify for Panicked {
    fn class(&self) -> error_class::Class {
        error_class::Class::Fatal
    }
}

/// Runs `f`; a panic inside it is returned as [`Panicked`] (with its source location when the
/// hook is installed).
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, Panicked> {
    let was = CATCHING.with(|c| c.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(was));
    result.map_err(|payload| match CAUGHT.with(|c| c.borrow_mut().take()) {
        Some(message) => Panicked { message },
        None => Panicked::from_payload(payload.as_ref()),
    })
}

/// [`catch`] for libtorch work: tch raises libtorch's errors (CUDA out of memory among them)
/// as panics; this is where they become a typed [`error_class::Torch`].
pub fn catch_torch<T>(f: impl FnOnce() -> T) -> Result<T, error_class::Torch> {
    catch(f).map_err(|p| error_class::Torch::from_message(&p.message))
}

/// [`catch`] for one item's work that returns an `anyhow::Result`: a panic becomes the error
/// `internal error while {doing}: {message}`.
pub fn catch_item<T>(doing: &str, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    catch(f).unwrap_or_else(|panic| Err(anyhow::anyhow!("internal error while {doing}: {panic}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_an_error_with_its_message_and_location() {
        install_hook();
        let r: Result<(), Panicked> = catch(|| panic!("bad tile {}", 3));
        let e = r.unwrap_err().message;
        assert!(
            e.starts_with("bad tile 3 (at ") && e.contains("panics.rs"),
            "{e}"
        );
        assert_eq!(catch(|| 7), Ok(7));
        // Nested use keeps catching for the outer call.
        let r = catch(|| {
            let inner: Result<(), Panicked> = catch(|| panic!("inner"));
            assert!(inner.is_err());
            panic!("outer")
        });
        assert!(r.unwrap_err().message.starts_with("outer"));
        let e = catch_item("reading it", || -> anyhow::Result<()> {
            panic!("bad header")
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("internal error while reading it: bad header (at "),
            "{e}"
        );
        assert_eq!(catch_item("reading it", || Ok(3)).unwrap(), 3);
    }

    #[test]
    fn a_caught_panic_is_a_typed_fatal_error_with_its_message() {
        use error_class::{Class, Classify};
        install_hook();
        let e: Panicked = catch(|| panic!("bad tile {}", 3)).unwrap_err();
        assert!(e.message.starts_with("bad tile 3 (at "), "{e}");
        assert_eq!(e.to_string(), e.message);
        assert!(std::error::Error::source(&e).is_none());
        assert_eq!(e.class(), Class::Fatal);
        // Without the hook's location, the payload's text alone.
        assert_eq!(
            Panicked::from_payload(&"no room"),
            Panicked {
                message: "no room".into()
            }
        );
    }
}
