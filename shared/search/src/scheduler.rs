//! The scheduler a sweep runs, and what schedulers that act on other trials (HyperBand,
//! population-based training) need of the caller and give back.

use crate::asha::{Action, Asha, Verdict};
use crate::hyperband::HyperBand;
use crate::median::Median;
use crate::pbt::Pbt;
use crate::space::Config;

pub use crate::effects::{Effects, Halving};
pub use crate::trials::{States, TrialState};

/// The scheduler a sweep runs.
#[derive(Debug)]
pub enum Scheduler {
    Asha(Box<Asha>),
    /// Synchronous brackets; trials pause at each milestone until their bracket halves.
    HyperBand(Box<HyperBand>),
    /// Population-based training; max_t completes a trial (Ray's stopper).
    Pbt {
        pbt: Box<Pbt>,
        max_t: f64,
    },
    /// Every trial runs until its command ends or reaches max_t.
    Fifo {
        max_t: f64,
    },
    /// The median stopping rule; max_t completes a trial (Ray's stopper, checked before the
    /// scheduler sees the result).
    Median {
        rule: Box<Median>,
        max_t: f64,
    },
}

impl Scheduler {
    /// A trial joins (in trial order, all when the sweep starts); its bracket, for those that
    /// have brackets.
    pub fn add(&mut self, trial: usize, config: &Config) -> Option<usize> {
        match self {
            Scheduler::Asha(a) => Some(a.add(trial)),
            Scheduler::HyperBand(h) => Some(h.add(trial)),
            Scheduler::Pbt { pbt, .. } => {
                pbt.add(trial, config.clone());
                None
            }
            Scheduler::Fifo { .. } | Scheduler::Median { .. } => None,
        }
    }

    /// Whether the scheduler asks, before each result, whether the trial has state to save
    /// (population-based training: see [`Self::set_has_state`]).
    pub fn asks_state(&self) -> bool {
        matches!(self, Scheduler::Pbt { .. })
    }

    /// Whether the trial has state a save would keep (population-based training copies only
    /// trials that have; others ignore it).
    pub fn set_has_state(&mut self, trial: usize, has_state: bool) {
        if let Scheduler::Pbt { pbt, .. } = self {
            pbt.set_has_state(trial, has_state);
        }
    }

    /// Whether [`Self::on_result`] uses its `others_waiting` (the median rule's question).
    pub fn asks_waiting(&self) -> bool {
        matches!(self, Scheduler::Median { .. })
    }

    /// `others_waiting`: some other trial is pending or paused (the median rule yields to it).
    /// The effects (HyperBand's) are other trials to stop, each already out of the scheduler.
    pub fn on_result(
        &mut self,
        trial: usize,
        time: f64,
        metric: f64,
        others_waiting: bool,
        states: States<'_>,
    ) -> (Verdict, Effects) {
        let plain = |action| Verdict {
            action,
            complete: false,
            rung: None,
        };
        let none = Effects::default();
        match self {
            Scheduler::Asha(a) => (a.on_result(trial, time, metric), none),
            Scheduler::HyperBand(h) => {
                let (action, effects) = h.on_result(trial, time, metric, states);
                let verdict = Verdict {
                    action,
                    complete: action == Action::Stop && effects.completes(trial),
                    rung: None,
                };
                (verdict, effects)
            }
            Scheduler::Fifo { max_t }
            | Scheduler::Median { max_t, .. }
            | Scheduler::Pbt { max_t, .. }
                if time >= *max_t =>
            {
                (
                    Verdict {
                        action: Action::Stop,
                        complete: true,
                        rung: None,
                    },
                    none,
                )
            }
            Scheduler::Pbt { pbt, .. } => {
                let step = pbt.on_result(trial, time, metric, states);
                let effects = Effects {
                    exploit: step.exploit,
                    save: step.save,
                    ..Effects::default()
                };
                (plain(step.action), effects)
            }
            Scheduler::Fifo { .. } => (plain(Action::Continue), none),
            Scheduler::Median { rule, .. } => (
                plain(rule.on_result(trial, time, metric, others_waiting)),
                none,
            ),
        }
    }

    /// The trial ended: stopped, complete, or its command finished (`last`: its last result).
    pub fn on_complete(
        &mut self,
        trial: usize,
        last: Option<(f64, f64)>,
        states: States<'_>,
    ) -> Effects {
        match self {
            Scheduler::Asha(a) => a.on_complete(trial, last),
            Scheduler::HyperBand(h) => return h.on_remove(trial, states),
            Scheduler::Median { rule, .. } => rule.on_complete(trial, last),
            Scheduler::Fifo { .. } | Scheduler::Pbt { .. } => {}
        }
        Effects::default()
    }

    /// The trial failed for good (Ray's `on_trial_error`; only HyperBand acts on it).
    pub fn on_error(&mut self, trial: usize, states: States<'_>) -> Effects {
        match self {
            Scheduler::HyperBand(h) => h.on_remove(trial, states),
            _ => Effects::default(),
        }
    }

    /// The trial the scheduler wants run next (`choose_trial_to_run`; HyperBand's and
    /// population-based training's).
    pub fn choose(&self, states: States<'_>) -> Option<usize> {
        match self {
            Scheduler::HyperBand(h) => h.choose(states),
            Scheduler::Pbt { pbt, .. } => pbt.choose(states),
            _ => None,
        }
    }

    /// Whether a paused trial runs again only when [`Self::choose`] picks it (else paused
    /// trials run, in trial order, once no trial is pending); results its process prints after
    /// the pause are then not judged.
    pub fn chooses_paused(&self) -> bool {
        matches!(self, Scheduler::HyperBand(_) | Scheduler::Pbt { .. })
    }

    /// Nothing runs and nothing can start while trials are paused: see
    /// [`HyperBand::unstick`].
    pub fn unstick(&mut self, states: States<'_>) -> Effects {
        match self {
            Scheduler::HyperBand(h) => h.unstick(states),
            _ => Effects::default(),
        }
    }
}
