//! Trial schedulers: ASHA exactly as Ray Tune's `AsyncHyperBandScheduler` decides
//! (ray/tune/schedulers/async_hyperband.py, `stop_last_trials=True`), and FIFO.
//!
//! Ray's rules, mirrored one to one:
//! - bracket s has `int(ln(max_t/grace)/ln(rf) − s + 1)` rungs at `grace·rf^(k+s)`, searched from
//!   the largest milestone down (`_Bracket.__init__`);
//! - a result with `time ≥ max_t` stops the trial: it is complete (`on_trial_result`);
//! - otherwise, at the largest rung the trial has reached and is not yet recorded at, the cutoff
//!   is `np.nanpercentile(values recorded there, (1 − 1/rf)·100)` (linear interpolation); the
//!   trial stops when `metric·op < cutoff` (op = +1 for max, −1 for min) and its value is recorded
//!   either way; the first trial at a rung always continues (`_Bracket.on_result`);
//! - when a trial ends (stopped, complete, or its command finished), its last result goes through
//!   the bracket once more, as Ray's controller calls `on_trial_complete` (which can record it at
//!   a lower rung it skipped).
//!
//! A trial's bracket is drawn when it is added, with the probabilities of `on_trial_add`
//! (∝ e^(rungs − max rungs)) from numpy's legacy generator as `np.random.seed(seed)` leaves it:
//! MT19937 `init_genrand(seed)`, 53-bit doubles, `cdf.searchsorted(u, side='right')`. Trials are
//! added in trial order, so the assignment depends only on `--seed`, and a Python driver that
//! seeds numpy with the same value and adds the trials in the same order gets the same brackets.

use std::collections::{BTreeMap, HashMap};

use crate::Result;
use crate::numpy::RandomState;

/// What the metric should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Min,
    Max,
}

impl Mode {
    /// Ray's `_metric_op`.
    pub fn op(self) -> f64 {
        match self {
            Mode::Max => 1.0,
            Mode::Min => -1.0,
        }
    }

    /// True when `a` is better than `b`.
    pub fn better(self, a: f64, b: f64) -> bool {
        match self {
            Mode::Max => a > b,
            Mode::Min => a < b,
        }
    }
}

/// The scheduler's answer to one result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    Stop,
    /// Yield the slot to a waiting trial; run again later from where it was.
    Pause,
}

/// A rung's judgement of one result (values in the metric's own units, not multiplied by op).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judgement {
    pub milestone: f64,
    pub value: f64,
    /// None for the first trial at the rung.
    pub cutoff: Option<f64>,
}

/// What happens after one result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    pub action: Action,
    /// The trial reached max_t: it is complete (the action is Stop).
    pub complete: bool,
    /// Set when the result was judged at a rung.
    pub rung: Option<Judgement>,
}

/// ASHA's settings, as `AsyncHyperBandScheduler`'s arguments.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AshaSettings {
    pub max_t: f64,
    pub grace_period: f64,
    pub reduction_factor: f64,
    pub brackets: usize,
    pub mode: Mode,
}

impl AshaSettings {
    /// Ray's assertions on the arguments, as usage errors.
    pub fn validate(&self) -> Result<()> {
        // NaN fails every check (a NaN from the command line is not a setting).
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !positive(self.max_t) {
            bail!("--max-t must be positive");
        }
        if !positive(self.grace_period) {
            bail!("--grace-period must be positive");
        }
        if self.grace_period > self.max_t {
            bail!("--grace-period must be at most --max-t");
        }
        if !self.reduction_factor.is_finite() || self.reduction_factor <= 1.0 {
            bail!("--reduction-factor must be greater than 1");
        }
        if self.brackets == 0 {
            bail!("--brackets must be at least 1");
        }
        // Each bracket holds its rungs: their counts size the scheduler, so they are bounded
        // before anything is made (a tiny grace period and a factor near 1 gave billions).
        if self.brackets > MAX_RUNGS {
            bail!("--brackets must be at most {MAX_RUNGS}");
        }
        let rungs = (self.max_t / self.grace_period).ln() / self.reduction_factor.ln() + 1.0;
        if rungs > MAX_RUNGS as f64 {
            bail!(
                "--max-t {} over --grace-period {} with --reduction-factor {} gives {} rungs; at \
                 most {MAX_RUNGS}",
                self.max_t,
                self.grace_period,
                self.reduction_factor,
                rungs.trunc()
            );
        }
        Ok(())
    }
}

/// The most rungs (and brackets) ASHA takes: far past any budget (a factor of 2 from 1 to 10^300
/// is 997 rungs).
pub const MAX_RUNGS: usize = 1000;

#[derive(Debug, Clone)]
struct Rung {
    milestone: f64,
    /// trial → value·op, as Ray's `recorded` dict.
    recorded: BTreeMap<usize, f64>,
}

impl Rung {
    /// `_Bracket.cutoff`: the (1 − 1/rf) percentile of the values recorded here (op-multiplied);
    /// `None` while none is.
    fn cutoff(&self, rf: f64) -> Option<f64> {
        let values: Vec<f64> = self.recorded.values().copied().collect();
        (!values.is_empty()).then(|| nanpercentile(&values, (1.0 - 1.0 / rf) * 100.0))
    }
}

#[derive(Debug, Clone)]
struct Bracket {
    /// Largest milestone first.
    rungs: Vec<Rung>,
    rf: f64,
}

impl Bracket {
    fn new(grace: f64, max_t: f64, rf: f64, s: usize) -> Self {
        // int() truncates towards zero; a negative count is an empty range.
        let n = ((max_t / grace).ln() / rf.ln() - s as f64 + 1.0).trunc();
        let n = if n > 0.0 { n as i32 } else { 0 };
        let rungs = (0..n)
            .rev()
            .map(|k| Rung {
                milestone: grace * rf.powf((k + s as i32) as f64),
                recorded: BTreeMap::new(),
            })
            .collect();
        Bracket { rungs, rf }
    }

    /// `_Bracket.on_result` with `stop_last_trials=True`: the rung judged, if any, its cutoff
    /// (op-multiplied) and whether the trial stops.
    fn on_result(
        &mut self,
        trial: usize,
        time: f64,
        reward: f64,
    ) -> Option<(f64, Option<f64>, Action)> {
        let rf = self.rf;
        for rung in &mut self.rungs {
            if time < rung.milestone || rung.recorded.contains_key(&trial) {
                continue;
            }
            let cutoff = rung.cutoff(rf);
            let action = match cutoff {
                Some(c) if reward < c => Action::Stop,
                _ => Action::Continue,
            };
            rung.recorded.insert(trial, reward);
            return Some((rung.milestone, cutoff, action));
        }
        None
    }
}

/// `np.nanpercentile(values, q)` with numpy's default linear method, operation for operation
/// (numpy/lib/_function_base_impl.py: `_quantile`, `_get_indexes`, `_lerp`).
pub fn nanpercentile(values: &[f64], q: f64) -> f64 {
    let mut a: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if a.is_empty() {
        return f64::NAN;
    }
    a.sort_by(f64::total_cmp);
    let q = q / 100.0;
    let n = a.len();
    let virtual_index = (n - 1) as f64 * q;
    let prev = virtual_index.floor();
    let (lo, hi) = if virtual_index >= (n - 1) as f64 {
        (n - 1, n - 1)
    } else if virtual_index < 0.0 {
        (0, 0)
    } else {
        (prev as usize, prev as usize + 1)
    };
    let gamma = virtual_index - prev;
    let (x, y) = (a[lo], a[hi]);
    let diff = y - x;
    if gamma >= 0.5 {
        y - diff * (1.0 - gamma)
    } else {
        x + diff * gamma
    }
}

/// `AsyncHyperBandScheduler`.
#[derive(Debug)]
pub struct Asha {
    settings: AshaSettings,
    brackets: Vec<Bracket>,
    trial_bracket: HashMap<usize, usize>,
    /// numpy's legacy global generator as `np.random.seed(seed)` leaves it: the bracket draws.
    rng: RandomState,
    /// Trials stopped so far (Ray's `num_stopped`).
    pub num_stopped: usize,
}

impl Asha {
    pub fn new(settings: AshaSettings, seed: u32) -> Result<Self> {
        settings.validate()?;
        let brackets = (0..settings.brackets)
            .map(|s| {
                Bracket::new(
                    settings.grace_period,
                    settings.max_t,
                    settings.reduction_factor,
                    s,
                )
            })
            .collect();
        Ok(Asha {
            settings,
            brackets,
            trial_bracket: HashMap::new(),
            rng: RandomState::new(seed),
            num_stopped: 0,
        })
    }

    /// `on_trial_add`: draws the trial's bracket and returns its index.
    pub fn add(&mut self, trial: usize) -> usize {
        let sizes: Vec<f64> = self.brackets.iter().map(|b| b.rungs.len() as f64).collect();
        let max = sizes.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let probs: Vec<f64> = sizes
            .iter()
            .map(|s| std::f64::consts::E.powf(s - max))
            .collect();
        let sum: f64 = probs.iter().sum();
        let normalized: Vec<f64> = probs.iter().map(|p| p / sum).collect();
        let idx = self.rng.choice(&normalized, 1)[0];
        self.trial_bracket.insert(trial, idx);
        idx
    }

    /// `on_trial_result`.
    pub fn on_result(&mut self, trial: usize, time: f64, metric: f64) -> Verdict {
        let op = self.settings.mode.op();
        let verdict = if time >= self.settings.max_t {
            Verdict {
                action: Action::Stop,
                complete: true,
                rung: None,
            }
        } else {
            let b = self.trial_bracket[&trial];
            match self.brackets[b].on_result(trial, time, op * metric) {
                Some((milestone, cutoff, action)) => Verdict {
                    action,
                    complete: false,
                    rung: Some(Judgement {
                        milestone,
                        value: metric,
                        cutoff: cutoff.map(|c| op * c),
                    }),
                },
                None => Verdict {
                    action: Action::Continue,
                    complete: false,
                    rung: None,
                },
            }
        };
        if verdict.action == Action::Stop {
            self.num_stopped += 1;
        }
        verdict
    }

    /// `on_trial_complete`: the trial's last result (if it had one) goes through its bracket once
    /// more, and the trial leaves the scheduler.
    pub fn on_complete(&mut self, trial: usize, last: Option<(f64, f64)>) {
        if let (Some((time, metric)), Some(&b)) = (last, self.trial_bracket.get(&trial)) {
            self.brackets[b].on_result(trial, time, self.settings.mode.op() * metric);
        }
        self.trial_bracket.remove(&trial);
    }

    /// The bracket a trial was given.
    pub fn bracket_of(&self, trial: usize) -> Option<usize> {
        self.trial_bracket.get(&trial).copied()
    }

    /// Each bracket's rungs as Ray keeps them: largest milestone first, with the values
    /// (multiplied by op) recorded per trial.
    pub fn recorded(&self) -> Vec<Vec<(f64, BTreeMap<usize, f64>)>> {
        self.brackets
            .iter()
            .map(|b| {
                b.rungs
                    .iter()
                    .map(|r| (r.milestone, r.recorded.clone()))
                    .collect()
            })
            .collect()
    }

    /// Each bracket's rungs, smallest milestone first: (milestone, current cutoff in metric
    /// units, trials recorded), for the status table.
    pub fn rungs(&self) -> Vec<Vec<(f64, Option<f64>, usize)>> {
        let op = self.settings.mode.op();
        self.brackets
            .iter()
            .map(|b| {
                b.rungs
                    .iter()
                    .rev()
                    .map(|r| {
                        (
                            r.milestone,
                            r.cutoff(b.rf).map(|c| op * c),
                            r.recorded.len(),
                        )
                    })
                    .collect()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asha(max_t: f64, grace: f64, rf: f64, brackets: usize, mode: Mode) -> Asha {
        Asha::new(
            AshaSettings {
                max_t,
                grace_period: grace,
                reduction_factor: rf,
                brackets,
                mode,
            },
            0,
        )
        .unwrap()
    }

    #[test]
    fn rungs_as_ray_builds_them() {
        let a = asha(10.0, 1.0, 4.0, 1, Mode::Max);
        assert_eq!(
            a.rungs()[0].iter().map(|r| r.0).collect::<Vec<_>>(),
            [1.0, 4.0]
        );
        let a = asha(16.0, 1.0, 4.0, 2, Mode::Max);
        let r: Vec<Vec<f64>> = a
            .rungs()
            .iter()
            .map(|b| b.iter().map(|r| r.0).collect())
            .collect();
        assert_eq!(r, [vec![1.0, 4.0, 16.0], vec![4.0, 16.0]]);
    }

    #[test]
    fn settings_that_would_size_billions_of_rungs_or_brackets_are_refused() {
        let settings = |max_t, grace_period, reduction_factor, brackets| AshaSettings {
            max_t,
            grace_period,
            reduction_factor,
            brackets,
            mode: Mode::Max,
        };
        let e = settings(1e300, 1e-300, 1.000001, 1).validate().unwrap_err();
        assert!(e.to_string().contains("rungs; at most 1000"), "{e}");
        let e = settings(100.0, 1.0, 4.0, usize::MAX)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("--brackets must be at most"), "{e}");
        settings(2f64.powi(996), 1.0, 2.0, 1000).validate().unwrap();
    }

    #[test]
    fn percentile_matches_numpy_linear() {
        // np.nanpercentile([1, 2, 3, 4], 75) == 3.25; [5] -> 5; [1, 3] at 50 -> 2.
        assert_eq!(nanpercentile(&[4.0, 1.0, 3.0, 2.0], 75.0), 3.25);
        assert_eq!(nanpercentile(&[5.0], 75.0), 5.0);
        assert_eq!(nanpercentile(&[1.0, f64::NAN, 3.0], 50.0), 2.0);
    }

    #[test]
    fn docstring_example_of_ray() {
        // _Bracket(1, 10, 2, 0): trial 1 (2) and trial 2 (4) continue at rung 1, trial 3 (1)
        // stops: the cutoff of [2, 4] at the 50th percentile is 3.
        let mut a = asha(10.0, 1.0, 2.0, 1, Mode::Max);
        for t in 0..3 {
            a.add(t);
        }
        assert_eq!(a.on_result(0, 1.0, 2.0).action, Action::Continue);
        assert_eq!(a.on_result(1, 1.0, 4.0).action, Action::Continue);
        let v = a.on_result(2, 1.0, 1.0);
        assert_eq!(v.action, Action::Stop);
        assert_eq!(
            v.rung,
            Some(Judgement {
                milestone: 1.0,
                value: 1.0,
                cutoff: Some(3.0)
            })
        );
    }

    #[test]
    fn min_mode_reports_cutoffs_in_metric_units_and_max_t_completes() {
        let mut a = asha(4.0, 1.0, 2.0, 1, Mode::Min);
        a.add(0);
        a.add(1);
        a.on_result(0, 1.0, 0.5);
        let v = a.on_result(1, 1.0, 0.9);
        assert_eq!(v.action, Action::Stop);
        assert_eq!(v.rung.unwrap().cutoff, Some(0.5));
        let v = a.on_result(0, 4.0, 0.1);
        assert!(v.complete && v.action == Action::Stop && v.rung.is_none());
    }
}
