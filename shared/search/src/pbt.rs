//! Population-based training as Ray Tune 2.60's `PopulationBasedTraining` decides (asynchronous,
//! `synch=False`; ray/tune/schedulers/pbt.py).
//!
//! Ray's rules, mirrored one to one:
//! - a result before `burn_in_period`, or less than `perturbation_interval` after the trial's
//!   last perturbation, continues;
//! - otherwise the trial's score (op·metric) and time are kept, and the trials with a score (not
//!   NaN, not finished) are ranked, stable, by score: the bottom and top `⌈n·quantile_fraction⌉`
//!   (at most ⌊n/2⌋; none with fewer than two trials) are the lower and upper quantiles;
//! - a trial in the upper quantile keeps a checkpoint (its directory, for a sweep) if it has one
//!   (a trial whose command writes no state has none: Ray's save of a trainable that reports no
//!   checkpoint resolves to nothing); one in the lower quantile copies a trial drawn from the
//!   upper quantile (`random.choice`) if that one kept a checkpoint (else the copy is
//!   skipped), with a config explored from the copied trial's: per mutated parameter, a list is
//!   resampled (`random.choice`) with probability `resample_probability` or when the
//!   value is not in it, else shifted one place left or right (`random.choice([-1, 1])`,
//!   clamped); a distribution is resampled (numpy, as Ray's `Domain.sample`) with that
//!   probability, else multiplied by a factor drawn from `perturbation_factors` (integers
//!   rounded, half to even); the copying trial takes the copied one's times and pauses, to run
//!   again from the copy;
//! - the trial pauses (yields its slot) when another trial is pending or paused; the next to run
//!   is the pending or paused one with the least time (`choose_trial_to_run`).
//!
//! Draws come from Python's `random` and numpy's legacy generator, both seeded with the sweep's
//! seed, as `random.seed(N); np.random.seed(N)` leave them. numpy's vectorised `exp` differs from
//! the C library's in the last bit for about one value in twenty: a log-uniform resample may
//! differ from Ray's by an ulp.

use crate::Result;
use serde_json::Value;

use crate::asha::{Action, Mode};
use crate::numpy::{PyRandom, RandomState};
use crate::space::{Config, Param, Space};
use crate::trials::{States, TrialState};

/// `PopulationBasedTraining`'s arguments.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PbtSettings {
    pub perturbation_interval: f64,
    pub burn_in_period: f64,
    pub quantile_fraction: f64,
    pub resample_probability: f64,
    pub perturbation_factors: [f64; 2],
    pub mode: Mode,
}

impl PbtSettings {
    /// Ray's checks on the arguments, as usage errors.
    pub fn validate(&self) -> Result<()> {
        if !(self.perturbation_interval.is_finite() && self.perturbation_interval > 0.0) {
            bail!("--perturbation-interval must be positive");
        }
        if !(self.burn_in_period.is_finite() && self.burn_in_period >= 0.0) {
            bail!("--burn-in-period must be 0 or more");
        }
        if !(0.0..=0.5).contains(&self.quantile_fraction) {
            bail!("--quantile-fraction must be between 0 and 0.5");
        }
        if !(0.0..=1.0).contains(&self.resample_probability) {
            bail!("--resample-probability must be between 0 and 1");
        }
        if !self.perturbation_factors.iter().all(|f| f.is_finite()) {
            bail!("--perturbation-factors must be finite numbers");
        }
        Ok(())
    }
}

/// How a parameter mutates: a list (Ray's list mutations: a grid or a choice) or a
/// distribution (uniform, loguniform, randint, quniform).
#[derive(Debug, Clone, PartialEq)]
pub enum Mutation {
    Values(Vec<Value>),
    Domain(Param),
}

/// The mutations of a space: every parameter that is not a plain value, in key order.
pub fn mutations(space: &Space) -> Vec<(String, Mutation)> {
    (space.0.iter())
        .filter_map(|(k, p)| {
            let m = match p {
                Param::Const(_) => return None,
                Param::Grid(v) | Param::Choice(v) => Mutation::Values(v.clone()),
                other => Mutation::Domain(other.clone()),
            };
            Some((k.clone(), m))
        })
        .collect()
}

/// A copy decided: the trial takes `from`'s checkpoint and `config`.
#[derive(Debug, Clone, PartialEq)]
pub struct Exploit {
    pub from: usize,
    /// The copied trial's time (the copying trial takes it).
    pub from_time: f64,
    /// The copied trial's config, and the one explored from it.
    pub from_config: Config,
    pub config: Config,
    /// Per mutated parameter, what was done: "resample", "shift left", "* 1.2", ...
    pub operations: Vec<(String, String)>,
}

/// PBT's answer to one result.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub action: Action,
    /// The trial is in the top quantile: its state is saved now (Ray's `_schedule_trial_save`),
    /// for a later copy to take.
    pub save: bool,
    /// The copy the trial makes (it then pauses).
    pub exploit: Option<Exploit>,
}

impl Step {
    fn plain(action: Action) -> Self {
        Step {
            action,
            save: false,
            exploit: None,
        }
    }
}

/// Ray's `_PBTTrialState`.
#[derive(Debug, Clone)]
struct TrialPbt {
    config: Config,
    last_score: Option<f64>,
    has_checkpoint: bool,
    /// Whether the trial has state to save (for a sweep, its directory holds files of its
    /// command's), as last told.
    has_state: bool,
    last_perturbation_time: f64,
    last_train_time: f64,
}

/// `PopulationBasedTraining`.
#[derive(Debug)]
pub struct Pbt {
    s: PbtSettings,
    mutations: Vec<(String, Mutation)>,
    /// Trials in the order added (Ray's `_trial_state` dict).
    trials: Vec<(usize, TrialPbt)>,
    py: PyRandom,
    np: RandomState,
    pub num_checkpoints: usize,
    pub num_perturbations: usize,
}

impl Pbt {
    pub fn new(s: PbtSettings, mutations: Vec<(String, Mutation)>, seed: u32) -> Result<Self> {
        s.validate()?;
        if mutations.is_empty() {
            bail!(
                "population-based training needs a parameter to mutate: a grid, choice or distribution in the space"
            );
        }
        Ok(Pbt {
            s,
            mutations,
            trials: Vec::new(),
            py: PyRandom::new(seed.into()),
            np: RandomState::new(seed),
            num_checkpoints: 0,
            num_perturbations: 0,
        })
    }

    pub fn add(&mut self, trial: usize, config: Config) {
        self.trials.push((
            trial,
            TrialPbt {
                config,
                last_score: None,
                has_checkpoint: false,
                has_state: true,
                last_perturbation_time: 0.0,
                last_train_time: 0.0,
            },
        ));
    }

    fn index(&self, trial: usize) -> usize {
        (self.trials.iter())
            .position(|(t, _)| *t == trial)
            .expect("the trial was added")
    }

    /// The trial's config as the scheduler last set it.
    pub fn config(&self, trial: usize) -> &Config {
        &self.trials[self.index(trial)].1.config
    }

    /// Whether the trial has state a save would keep, from now on (true until told otherwise):
    /// a trial without is never copied, as Ray skips the exploit of a trial whose save gave no
    /// checkpoint.
    pub fn set_has_state(&mut self, trial: usize, has_state: bool) {
        let k = self.index(trial);
        self.trials[k].1.has_state = has_state;
    }

    /// `on_trial_result`.
    pub fn on_result(&mut self, trial: usize, time: f64, metric: f64, state: States<'_>) -> Step {
        let k = self.index(trial);
        if time < self.s.burn_in_period {
            return Step::plain(Action::Continue);
        }
        let st = &mut self.trials[k].1;
        if time - st.last_perturbation_time < self.s.perturbation_interval {
            return Step::plain(Action::Continue);
        }
        st.last_score = Some(self.s.mode.op() * metric);
        st.last_train_time = time;
        st.last_perturbation_time = time;
        let (lower, upper) = self.quantiles(state);
        let waiting = (self.trials.iter())
            .any(|(t, _)| matches!(state(*t), TrialState::Pending | TrialState::Paused));
        let decision = if waiting {
            Action::Pause
        } else {
            Action::Continue
        };
        // _checkpoint_or_exploit
        let in_upper = upper.contains(&k);
        if in_upper {
            self.num_checkpoints += 1;
        }
        let saved = in_upper && self.trials[k].1.has_state;
        self.trials[k].1.has_checkpoint = saved;
        let step = Step {
            save: saved,
            ..Step::plain(decision)
        };
        if !lower.contains(&k) {
            return step;
        }
        let c = upper[self.py.below(upper.len())];
        let (from, clone) = self.trials[c].clone();
        if !clone.has_checkpoint {
            return step; // Ray: no checkpoint for the trial, skip exploit
        }
        let (config, operations) = self.explore(&clone.config);
        let st = &mut self.trials[k].1;
        st.config = config.clone();
        st.last_perturbation_time = clone.last_perturbation_time;
        st.last_train_time = clone.last_train_time;
        self.num_perturbations += 1;
        let exploit = Exploit {
            from,
            from_time: clone.last_train_time,
            from_config: clone.config,
            config,
            operations,
        };
        Step {
            action: Action::Pause,
            save: false,
            exploit: Some(exploit),
        }
    }

    /// `_quantiles`: indices into `trials` of the lower and upper quantiles.
    fn quantiles(&self, state: States<'_>) -> (Vec<usize>, Vec<usize>) {
        let mut ranked: Vec<usize> = (0..self.trials.len())
            .filter(|&i| {
                let (t, st) = &self.trials[i];
                st.last_score.is_some_and(|s| !s.is_nan()) && state(*t) != TrialState::Ended
            })
            .collect();
        let score = |i: usize| {
            self.trials[i]
                .1
                .last_score
                .expect("ranked trials have scores")
        };
        // Stable, as list.sort with a key; scores are not NaN.
        ranked.sort_by(|&a, &b| score(a).partial_cmp(&score(b)).expect("no NaN"));
        let n = ranked.len();
        if n <= 1 {
            return (Vec::new(), Vec::new());
        }
        let mut q = (n as f64 * self.s.quantile_fraction).ceil() as usize;
        if q as f64 > n as f64 / 2.0 {
            q = n / 2;
        }
        (ranked[..q].to_vec(), ranked[n - q..].to_vec())
    }

    /// `_explore` of the copied trial's config.
    fn explore(&mut self, config: &Config) -> (Config, Vec<(String, String)>) {
        let mut new = config.clone();
        let mut ops = Vec::new();
        let p = self.s.resample_probability;
        for (key, m) in &self.mutations {
            let old = config.get(key).cloned().unwrap_or(Value::Null);
            let (value, op) = match m {
                Mutation::Values(list) => {
                    // `random() < p or value not in list`: the draw comes first, always.
                    let r = self.py.random();
                    match list.iter().position(|v| py_eq(v, &old)) {
                        Some(i) if r >= p => {
                            let shift = *self.py.choice(&[-1i64, 1]);
                            let j = (i as i64 + shift).clamp(0, list.len() as i64 - 1) as usize;
                            let side = if shift == -1 { "left" } else { "right" };
                            let noop = if i == j { " (noop)" } else { "" };
                            (list[j].clone(), format!("shift {side}{noop}"))
                        }
                        _ => (self.py.choice(list).clone(), "resample".to_string()),
                    }
                }
                Mutation::Domain(param) => {
                    let (v, op) = if self.py.random() < p {
                        (ray_sample(param, &mut self.np), "resample".to_string())
                    } else {
                        let factor = *self.py.choice(&self.s.perturbation_factors);
                        let x = old.as_f64().unwrap_or(f64::NAN) * factor;
                        (float(x), format!("* {factor}"))
                    };
                    // Ray casts to the old value's type.
                    let v = match &old {
                        Value::Bool(_) => Value::Bool(v.as_f64().is_some_and(|x| x != 0.0)),
                        Value::Number(n) if n.is_i64() || n.is_u64() => {
                            Value::from(v.as_f64().unwrap_or(f64::NAN).round_ties_even() as i64)
                        }
                        _ => v,
                    };
                    (v, op)
                }
            };
            new.insert(key.clone(), value);
            ops.push((key.clone(), op));
        }
        (new, ops)
    }

    /// `choose_trial_to_run`: the pending or paused trial with the least time (the first added
    /// among equals).
    pub fn choose(&self, state: States<'_>) -> Option<usize> {
        (self.trials.iter())
            .filter(|(t, _)| matches!(state(*t), TrialState::Pending | TrialState::Paused))
            .fold(None, |best: Option<&(usize, TrialPbt)>, x| match best {
                Some(b) if b.1.last_train_time <= x.1.last_train_time => Some(b),
                _ => Some(x),
            })
            .map(|(t, _)| *t)
    }
}

/// A float as JSON (a non-finite one has no JSON form: null).
fn float(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// Python's `==` between config values: numbers (and booleans, as 0 and 1) by value.
fn py_eq(a: &Value, b: &Value) -> bool {
    let num = |v: &Value| match v {
        Value::Bool(x) => Some(f64::from(u8::from(*x))),
        Value::Number(n) => n.as_f64(),
        _ => None,
    };
    match (num(a), num(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// `Domain.sample(None)` as Ray's samplers draw from numpy's global legacy generator.
fn ray_sample(param: &Param, np: &mut RandomState) -> Value {
    match *param {
        Param::Uniform(a, b) => float(np.uniform(a, b)),
        Param::LogUniform(a, b) => float(np.uniform(a.ln(), b.ln()).exp()),
        Param::RandInt(a, b) => Value::from(np.randint(a, b)),
        Param::QUniform(a, b, q) => {
            // Quantized: the bounds moved inwards onto the grid, then rounded to it.
            let index = |bound: f64, round: fn(f64) -> f64| {
                let scaled = bound / q;
                let nearest = scaled.round_ties_even();
                if (scaled - nearest).abs() <= 1e-9 * scaled.abs().max(nearest.abs()) {
                    nearest
                } else {
                    round(scaled)
                }
            };
            let lo = index(a, f64::ceil) * q;
            let hi = index(b, f64::floor) * q;
            float((np.uniform(lo, hi) / q).round_ties_even() * q)
        }
        Param::Const(ref v) => v.clone(),
        Param::Grid(ref v) | Param::Choice(ref v) => v[0].clone(), // lists are Values mutations
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings() -> PbtSettings {
        PbtSettings {
            perturbation_interval: 2.0,
            burn_in_period: 0.0,
            quantile_fraction: 0.25,
            resample_probability: 0.25,
            perturbation_factors: [1.2, 0.8],
            mode: Mode::Max,
        }
    }

    /// A PBT with [`settings`] over the space `space` (JSON), seed 0.
    fn pbt(space: &str) -> Pbt {
        let space = Space::parse(space).unwrap();
        Pbt::new(settings(), mutations(&space), 0).unwrap()
    }

    #[test]
    fn the_worst_quarter_copies_the_best_quarter() {
        let mut p = pbt(r#"{"lr": {"loguniform": [0.001, 1]}, "bs": 64}"#);
        for t in 0..4 {
            let mut c = Config::new();
            c.insert("lr".into(), json!(0.01 * (t + 1) as f64));
            c.insert("bs".into(), json!(64));
            p.add(t, c);
        }
        let running = |_: usize| TrialState::Running;
        // Before the interval: continue; the first at 2 has no one to compare with.
        assert_eq!(
            p.on_result(0, 1.0, 1.0, &running),
            Step::plain(Action::Continue)
        );
        for t in 0..3 {
            assert_eq!(p.on_result(t, 2.0, t as f64, &running).exploit, None);
        }
        // Trial 3 best: upper quantile (its state saved); then trial 0, the worst, copies it.
        let s = p.on_result(3, 2.0, 9.0, &running);
        assert!(s.save && s.exploit.is_none());
        let s = p.on_result(0, 4.0, 0.0, &running);
        assert_eq!((s.action, s.save), (Action::Pause, false));
        let e = s.exploit.unwrap();
        assert_eq!((e.from, e.from_time), (3, 2.0));
        assert_eq!(e.operations.len(), 1, "only lr mutates");
        assert_eq!(e.config["bs"], json!(64));
        assert_eq!(p.config(0), &e.config);
        assert_eq!(p.num_perturbations, 1);
    }

    #[test]
    fn a_trial_without_state_is_never_copied() {
        let mut p = pbt(r#"{"lr": {"loguniform": [0.001, 1]}}"#);
        for t in 0..4 {
            p.add(t, Config::new());
            p.set_has_state(t, false);
        }
        let running = |_: usize| TrialState::Running;
        for round in 1..=3 {
            for t in 0..4 {
                let s = p.on_result(t, 2.0 * round as f64, t as f64, &running);
                assert_eq!(
                    (s.save, s.exploit),
                    (false, None),
                    "round {round}, trial {t}"
                );
            }
        }
        assert_eq!(p.num_perturbations, 0);
        // Once the best trial has state, the worst copies it at its next comparison.
        p.set_has_state(3, true);
        assert!(p.on_result(3, 8.0, 9.0, &running).save);
        assert_eq!(p.on_result(0, 8.0, 0.0, &running).exploit.unwrap().from, 3);
    }

    #[test]
    fn paused_and_pending_trials_run_least_time_first() {
        let mut p = pbt(r#"{"lr": {"choice": [1, 2]}}"#);
        for t in 0..3 {
            p.add(t, Config::new());
        }
        let all = |_: usize| TrialState::Running;
        p.on_result(0, 2.0, 1.0, &all);
        let st = |t: usize| match t {
            0 => TrialState::Paused,
            1 => TrialState::Running,
            _ => TrialState::Pending,
        };
        assert_eq!(p.choose(&st), Some(2), "time 0 before time 2");
        assert_eq!(
            p.on_result(1, 2.0, 1.0, &st).action,
            Action::Pause,
            "others wait"
        );
    }

    #[test]
    fn settings_ray_refuses_are_refused() {
        let bad = |f: fn(&mut PbtSettings)| {
            let mut s = settings();
            f(&mut s);
            s.validate().is_err()
        };
        assert!(bad(|s| s.quantile_fraction = 0.6));
        assert!(bad(|s| s.perturbation_interval = 0.0));
        assert!(bad(|s| s.resample_probability = 1.5));
        let space = Space::parse(r#"{"lr": 0.1}"#).unwrap();
        assert!(
            Pbt::new(settings(), mutations(&space), 0).is_err(),
            "nothing to mutate"
        );
    }
}
