//! What a scheduler's decision does besides its answer for the trial that reported.

use crate::pbt::Exploit;

/// A bracket's successive halving: each live trial's last metric and whether it goes on.
#[derive(Debug, Clone, PartialEq)]
pub struct Halving {
    /// The milestone the trials were judged at.
    pub milestone: f64,
    /// The milestone the kept trials go on to.
    pub next: f64,
    /// (trial, metric, kept), worst first.
    pub judged: Vec<(usize, f64, bool)>,
}

/// What a decision does besides its answer for the trial that reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effects {
    /// Other trials to stop, in the order Ray's controller is told to (each already left the
    /// scheduler, as `stop_trial` removes it).
    pub stop: Vec<usize>,
    pub halving: Option<Halving>,
    /// Population-based training: the trial that reported copies another (it pauses).
    pub exploit: Option<Exploit>,
    /// Population-based training: the trial's state is saved now (it is in the top quantile),
    /// for a later copy to take.
    pub save: bool,
    /// BOHB's HyperBand: the result is the model's, at this budget (the bracket's milestone),
    /// unless the trial stops.
    pub budget: Option<f64>,
}

impl Effects {
    /// Whether stopping `trial` completes it: it was not among a halving's losers (it won
    /// every halving of its bracket, which is finished).
    pub fn completes(&self, trial: usize) -> bool {
        !self
            .halving
            .as_ref()
            .is_some_and(|h| h.judged.iter().any(|&(t, _, kept)| t == trial && !kept))
    }
}
