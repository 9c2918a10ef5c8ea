//! What the caller knows of its trials, as the schedulers that act on other trials see it.

/// What the caller knows of a trial, as Ray's `Trial.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialState {
    Pending,
    Running,
    /// Yielded its slot at the scheduler's request (or is saving to do so).
    Paused,
    /// Terminated or errored.
    Ended,
}

/// The caller's view of its trials, for the schedulers that act on other trials.
pub type States<'a> = &'a dyn Fn(usize) -> TrialState;
