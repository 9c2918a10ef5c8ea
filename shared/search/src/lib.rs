//! Hyper-parameter search without processes: the search space and its variants as Ray Tune's
//! `BasicVariantGenerator` makes them ([`space`]), trial schedulers that decide as Ray Tune's
//! ([`asha`], [`hyperband`], [`median`], [`pbt`]; the [`scheduler`] a sweep runs), a sampler
//! that suggests as Optuna's TPE ([`tpe`]), and BOHB's config generator as HpBandSter's
//! ([`bohb`]). `sweep` runs them over commands; another tool could drive them as well.

/// `return Err(Error::Invalid(format!(...)))`.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err($crate::Error::Invalid(format!($($t)*)))
    };
}

pub mod asha;
pub mod bohb;
mod effects;
pub mod hyperband;
pub mod median;
mod numpy;
pub mod pbt;
pub mod scheduler;
pub mod space;
pub mod tpe;
mod trials;

pub use asha::{Action, Asha, AshaSettings, Judgement, Mode, Verdict, nanpercentile};
pub use scheduler::{Effects, Scheduler, States, TrialState};

/// Settings or a search space that cannot work: every error here is the user's to fix (a
/// usage error, exit 2, in a tool). Each displays whole (what it is within included).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// What is wrong.
    #[error("{0}")]
    Invalid(String),
    /// What is wrong within `what` (a parameter of the space).
    #[error("{what}: {error}")]
    Within { what: String, error: Box<Error> },
    /// The space's text.
    #[error("the search space is not JSON: {0}")]
    NotJson(serde_json::Error),
}

impl error_class::Classify for Error {
    fn class(&self) -> error_class::Class {
        error_class::Class::Usage
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
