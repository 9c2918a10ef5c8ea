//! Hyper-parameter search without processes: the search space and its variants as Ray Tune's
//! `BasicVariantGenerator` makes them ([`space`]), trial schedulers that decide as Ray Tune's
//! ([`asha`], [`hyperband`], [`median`], [`pbt`]; the [`scheduler`] a sweep runs), a sampler
//! that suggests as Optuna's TPE ([`tpe`]), and BOHB's config generator as HpBandSter's
//! ([`bohb`]). `sweep` runs them over commands; another tool could drive them as well.

pub mod asha;
pub mod bohb;
pub mod hyperband;
pub mod median;
mod numpy;
pub mod pbt;
pub mod scheduler;
pub mod space;
pub mod tpe;

pub use asha::{Action, Asha, AshaSettings, Judgement, Mode, Verdict, nanpercentile};
pub use scheduler::{Effects, Scheduler, States, TrialState};
