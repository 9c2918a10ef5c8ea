//! The median stopping rule as Ray Tune 2.60's `MedianStoppingRule` decides (`hard_stop=True`):
//! past the grace period, a trial whose best metric so far is strictly worse than the median of
//! the other trials' running means (each over its results from the grace period up to this
//! time, among trials that have reached it) is stopped. With fewer than `min_samples` such means
//! the trial yields its slot (pause) if other trials are waiting and it has run `min_time_slice`
//! since it last yielded; otherwise it continues.

use crate::asha::{Action, Mode};
use crate::numpy::sum as np_sum;

/// `MedianStoppingRule`'s arguments.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MedianSettings {
    pub grace_period: f64,
    pub min_samples: usize,
    pub min_time_slice: f64,
    pub mode: Mode,
}

/// The rule's state: every trial's (time, metric) results, trials in order of their first
/// result (Ray's dict order), and when each trial last yielded.
#[derive(Debug, Clone)]
pub struct Median {
    s: MedianSettings,
    order: Vec<usize>,
    results: Vec<Vec<(f64, f64)>>,
    last_pause: Vec<f64>,
}

impl Median {
    pub fn new(s: MedianSettings) -> Self {
        Median {
            s,
            order: Vec::new(),
            results: Vec::new(),
            last_pause: Vec::new(),
        }
    }

    fn slot(&mut self, trial: usize) -> &mut Vec<(f64, f64)> {
        if self.results.len() <= trial {
            self.results.resize(trial + 1, Vec::new());
            self.last_pause.resize(trial + 1, f64::NEG_INFINITY);
        }
        if self.results[trial].is_empty() {
            self.order.push(trial); // results only grow: this is the trial's first
        }
        &mut self.results[trial]
    }

    /// `on_trial_result`; `others_waiting`: some other trial is pending or paused.
    pub fn on_result(
        &mut self,
        trial: usize,
        time: f64,
        metric: f64,
        others_waiting: bool,
    ) -> Action {
        self.slot(trial).push((time, metric));
        if time < self.s.grace_period {
            return Action::Continue;
        }
        let means: Vec<f64> = self
            .order
            .iter()
            .filter(|&&t| t != trial && self.results[t].last().is_some_and(|r| r.0 >= time))
            .map(|&t| self.running_mean(t, time))
            .filter(|m| m.is_finite())
            .collect();
        if means.len() < self.s.min_samples {
            let pause = time - self.last_pause[trial] > self.s.min_time_slice && others_waiting;
            if pause {
                self.last_pause[trial] = time;
                return Action::Pause;
            }
            return Action::Continue;
        }
        let median = np_median(means);
        let best = self.best(trial);
        // `compare_op(median, best) != best`: Python's max/min keep the first argument unless
        // the second is strictly better.
        let kept = match self.s.mode {
            Mode::Max if best > median => best,
            Mode::Min if best < median => best,
            _ => median,
        };
        if kept != best {
            Action::Stop
        } else {
            Action::Continue
        }
    }

    /// `on_trial_complete`: the trial's last result is appended once more (Ray's controller
    /// passes it again when the trial ends).
    pub fn on_complete(&mut self, trial: usize, last: Option<(f64, f64)>) {
        if let Some(r) = last {
            self.slot(trial).push(r);
        }
    }

    /// The mean of the trial's metrics from the grace period up to `time` (NaN without any).
    fn running_mean(&self, trial: usize, time: f64) -> f64 {
        let v: Vec<f64> = self.results[trial]
            .iter()
            .filter(|r| self.s.grace_period <= r.0 && r.0 <= time)
            .map(|r| r.1)
            .collect();
        if v.is_empty() {
            return f64::NAN;
        }
        np_sum(&v) / v.len() as f64
    }

    /// Python's `max`/`min` over the trial's metrics: a value replaces the one kept only when
    /// strictly better (so a NaN first stays).
    fn best(&self, trial: usize) -> f64 {
        let mut it = self.results[trial].iter().map(|r| r.1);
        let first = it.next().expect("a result was just added");
        it.fold(first, |b, x| match self.s.mode {
            Mode::Max if x > b => x,
            Mode::Min if x < b => x,
            _ => b,
        })
    }
}

/// `np.median` of finite values: the middle one, or the mean of the two middle ones.
fn np_median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        np_sum(&v[n / 2 - 1..=n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(min_samples: usize, min_time_slice: f64) -> Median {
        Median::new(MedianSettings {
            grace_period: 2.0,
            min_samples,
            min_time_slice,
            mode: Mode::Max,
        })
    }

    #[test]
    fn stops_below_the_median_of_running_means() {
        let mut m = rule(2, 0.0);
        for (t, v) in [(0, 5.0), (1, 7.0), (2, 1.0)] {
            for time in 1..=3 {
                let a = m.on_result(t, time as f64, v, false);
                if t < 2 {
                    assert_eq!(a, Action::Continue, "trial {t} at {time}");
                } else if time < 2 {
                    assert_eq!(a, Action::Continue, "within the grace period");
                } else {
                    // Running means 5 and 7 → median 6 > best 1.
                    assert_eq!(a, Action::Stop);
                    break;
                }
            }
        }
        // Equal to the median continues.
        assert_eq!(m.on_result(3, 2.0, 6.0, false), Action::Continue);
    }

    #[test]
    fn too_few_samples_yield_when_others_wait_at_most_once_per_slice() {
        let mut m = rule(3, 2.0);
        assert_eq!(m.on_result(0, 2.0, 1.0, false), Action::Continue);
        assert_eq!(m.on_result(0, 3.0, 1.0, true), Action::Pause);
        // Within the time slice since the pause: continue.
        assert_eq!(m.on_result(0, 4.0, 1.0, true), Action::Continue);
        assert_eq!(m.on_result(0, 6.0, 1.0, true), Action::Pause);
    }
}
