//! HyperBand as Ray Tune 2.60's `HyperBandScheduler` decides (ray/tune/schedulers/hyperband.py,
//! `stop_last_trials=True`): synchronous brackets, successive halving when every live trial of a
//! bracket has reached its milestone.
//!
//! Ray's rules, mirrored one to one:
//! - `s_max_1 = round(ln max_t / ln η) + 1` brackets per band; bracket s takes
//!   `n0 = ⌈s_max_1/(s+1)·η^s⌉` trials, which run to `r0 = ⌊max_t·η^−s⌋` (a bracket whose r0 is 0
//!   is skipped); trials fill the current bracket in the order they are added, then the next one,
//!   then a new band (`on_trial_add`);
//! - a result below the bracket's milestone continues; one at or past it pauses the trial until
//!   every live trial of the bracket is there; then the bracket halves: the best ⌈n/η⌉ by their
//!   last metric go on to a milestone η times further (at most max_t) — paused ones are
//!   unpaused — and the others stop; in the last round (no halvings left) the bracket is finished
//!   and every trial in it stops (`_process_bracket`, `_Bracket.successive_halving`);
//! - a trial that ends on its own (its command finished, or failed for good) leaves its bracket,
//!   which is then processed as above unless it is finished or has been halved before
//!   (`on_trial_remove`: Ray's `is_being_processed` is never reset);
//! - the next trial to run is the first pending trial, or paused trial the bracket unpaused, of
//!   the least complete bracket (progress = time reported / work planned), band by band
//!   (`choose_trial_to_run`).
//!
//! The sort of a halving is Python's `sorted` on `op·metric` (stable): with NaN metrics, whose
//! comparisons are all false, the order it leaves depends on CPython's algorithm, which is
//! followed for brackets of fewer than 64 live trials (one binary-insertion run); larger ones
//! sort NaN last.
//!
//! One addition where Ray would wait for ever: after a bracket's first halving, a trial that
//! ends on its own no longer triggers processing, so its paused siblings may never run again.
//! [`HyperBand::unstick`] (called by the caller only when nothing else can run) processes such a
//! bracket as its removal would have before.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::Result;

use crate::asha::{Action, Mode};
use crate::effects::{Effects, Halving};
use crate::trials::{States, TrialState};

/// `HyperBandScheduler`'s arguments.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HyperBandSettings {
    pub max_t: f64,
    pub reduction_factor: f64,
    pub mode: Mode,
}

/// The most brackets a band may have (each is bookkept trial by trial).
const MAX_BRACKETS: f64 = 1000.0;

impl HyperBandSettings {
    /// Ray asserts `max_t > 0`; below 1 every bracket is too small and Ray loops for ever.
    pub fn validate(&self) -> Result<()> {
        if !self.max_t.is_finite() || self.max_t < 1.0 {
            bail!("--max-t must be at least 1 for hyperband (its first bracket runs to max_t)");
        }
        if !self.reduction_factor.is_finite() || self.reduction_factor <= 1.0 {
            bail!("--reduction-factor must be greater than 1");
        }
        let brackets = self.s_max_1();
        if brackets > MAX_BRACKETS {
            bail!(
                "--max-t {} with --reduction-factor {} gives {brackets} brackets per band; at most {MAX_BRACKETS}",
                self.max_t,
                self.reduction_factor
            );
        }
        Ok(())
    }

    /// `int(np.round(np.log(max_t) / np.log(eta))) + 1` (numpy rounds half to even).
    fn s_max_1(&self) -> f64 {
        (self.max_t.ln() / self.reduction_factor.ln()).round_ties_even() + 1.0
    }
}

#[derive(Debug, Clone)]
struct Bracket {
    /// Ray's `s`: the halvings the bracket was made with.
    s: usize,
    /// Ray's `_live_trials` (insertion-ordered): trial → its last (time, metric).
    live: Vec<(usize, Option<(f64, f64)>)>,
    n: f64,
    r: f64,
    cumul_r: f64,
    max_t: f64,
    eta: f64,
    halves: usize,
    total_work: f64,
    completed_progress: f64,
    being_processed: bool,
    to_unpause: BTreeSet<usize>,
}

impl Bracket {
    fn new(n0: f64, r0: f64, max_t: f64, eta: f64, s: usize) -> Self {
        Bracket {
            s,
            live: Vec::new(),
            n: n0,
            r: r0,
            cumul_r: r0,
            max_t,
            eta,
            halves: s,
            total_work: total_work(n0, r0, s, eta, max_t),
            completed_progress: 0.0,
            being_processed: false,
            to_unpause: BTreeSet::new(),
        }
    }

    fn position(&self, trial: usize) -> Option<usize> {
        self.live.iter().position(|(t, _)| *t == trial)
    }

    fn time(result: Option<(f64, f64)>) -> f64 {
        result.map_or(0.0, |r| r.0)
    }

    fn cur_iter_done(&self) -> bool {
        self.live
            .iter()
            .all(|(_, r)| Self::time(*r) >= self.cumul_r)
    }

    fn finished(&self) -> bool {
        self.halves == 0 && self.cur_iter_done()
    }

    fn filled(&self) -> bool {
        self.live.len() as f64 == self.n
    }

    fn continue_trial(&self, trial: usize) -> bool {
        let r = self.position(trial).and_then(|p| self.live[p].1);
        Self::time(r) < self.cumul_r
    }

    fn update(&mut self, p: usize, time: f64, metric: f64) {
        let delta = time - Self::time(self.live[p].1);
        self.completed_progress += delta;
        self.live[p].1 = Some((time, metric));
        self.to_unpause.remove(&self.live[p].0);
    }

    fn cleanup(&mut self, trial: usize) {
        if let Some(p) = self.position(trial) {
            self.live.remove(p);
        }
    }

    fn completion(&self) -> f64 {
        if self.finished() {
            return 1.0;
        }
        let c = self.completed_progress / self.total_work;
        if 1.0 < c { 1.0 } else { c }
    }

    /// `successive_halving`: (good, bad, judged worst first) after the next milestone is set.
    fn halve(&mut self, op: f64) -> (Vec<usize>, Vec<usize>, Vec<(usize, f64)>) {
        debug_assert!(self.halves > 0);
        self.halves -= 1;
        self.n = (self.n / self.eta).ceil();
        self.r *= self.eta;
        self.r = self.r.min(self.max_t).trunc();
        self.cumul_r = self.r;
        let keys: Vec<f64> = self
            .live
            .iter()
            .map(|(_, r)| op * r.expect("every live trial reached the milestone").1)
            .collect();
        let order = python_sorted(&keys);
        let sorted: Vec<usize> = order.iter().map(|&k| self.live[k].0).collect();
        let keep = (self.n as usize).min(sorted.len());
        let cut = sorted.len() - keep;
        let judged = order
            .iter()
            .map(|&k| (self.live[k].0, self.live[k].1.map_or(f64::NAN, |r| r.1)))
            .collect();
        (sorted[cut..].to_vec(), sorted[..cut].to_vec(), judged)
    }
}

/// `_Bracket._calculate_total_work` (its `cumulative_r` stays r0, as Ray's does).
fn total_work(n: f64, r: f64, s: usize, eta: f64, max_t: f64) -> f64 {
    let (mut n, mut r, cumulative_r) = (n, r, r);
    let mut work = 0.0;
    for _ in 0..=s {
        work += n.trunc() * r.trunc();
        n = (n / eta).ceil();
        r *= eta;
        r = r.min(max_t - cumulative_r).trunc();
    }
    work
}

/// The permutation Python's `sorted` gives `keys` (floats compared with `<`). Fewer than 64
/// keys: CPython 3.11's `count_run` then `binarysort`, exact even with NaNs; more: a stable sort
/// with NaN last, which is the same wherever the keys are ordered.
fn python_sorted(keys: &[f64]) -> Vec<usize> {
    if keys.len() < 64 {
        cpython_small_sort(keys)
    } else {
        stable_sort_nan_last(keys)
    }
}

fn stable_sort_nan_last(keys: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..keys.len()).collect();
    idx.sort_by(|&a, &b| {
        let key = |x: f64| if x == 0.0 { 0.0 } else { x }; // -0 and 0 tie
        match (keys[a].is_nan(), keys[b].is_nan()) {
            (false, false) => key(keys[a]).total_cmp(&key(keys[b])),
            (x, y) => x.cmp(&y),
        }
    });
    idx
}

/// CPython 3.11's `listsort` for fewer than 64 items: `count_run`, then `binarysort`.
fn cpython_small_sort(keys: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..keys.len()).collect();
    let n = keys.len();
    if n < 2 {
        return idx;
    }
    let lt = |a: usize, b: usize| keys[a] < keys[b];
    // count_run: a strictly descending run is reversed; otherwise a non-descending one.
    let mut run = 2;
    if lt(idx[1], idx[0]) {
        while run < n && lt(idx[run], idx[run - 1]) {
            run += 1;
        }
        idx[..run].reverse();
    } else {
        while run < n && !lt(idx[run], idx[run - 1]) {
            run += 1;
        }
    }
    // binarysort from the end of the run.
    for start in run..n {
        let pivot = idx[start];
        let (mut l, mut r) = (0, start);
        while l < r {
            let p = l + ((r - l) >> 1);
            if lt(pivot, idx[p]) {
                r = p;
            } else {
                l = p + 1;
            }
        }
        idx.copy_within(l..start, l + 1);
        idx[l] = pivot;
    }
    idx
}

/// `HyperBandScheduler`.
#[derive(Debug)]
pub struct HyperBand {
    s: HyperBandSettings,
    s_max_1: usize,
    /// Ray's `_hyperbands`: each band's brackets (None: too small to make).
    bands: Vec<Vec<Option<usize>>>,
    brackets: Vec<Bracket>,
    current: Option<usize>,
    trial_bracket: HashMap<usize, usize>,
    /// Trials that have left (Ray's controller asks no more of a terminated trial).
    removed: HashSet<usize>,
    /// Trials stopped by halvings (Ray's `_num_stopped`).
    pub num_stopped: usize,
    /// Ray's `HyperBandForBOHB` (see [`HyperBand::for_bohb`]).
    bohb: bool,
}

impl HyperBand {
    pub fn new(s: HyperBandSettings) -> Result<Self> {
        s.validate()?;
        Ok(HyperBand {
            s_max_1: s.s_max_1() as usize,
            s,
            bands: vec![Vec::new()],
            brackets: Vec::new(),
            current: None,
            trial_bracket: HashMap::new(),
            removed: HashSet::new(),
            num_stopped: 0,
            bohb: false,
        })
    }

    /// Ray's `HyperBandForBOHB`: brackets are made from the most halvings down; a trial at its
    /// milestone pauses unless its bracket is full and every other trial of it is paused, and
    /// its result is then the model's, at the milestone as budget ([`Effects::budget`]); the
    /// next trial is the first pending or unpaused one bracket by bracket (not by completion),
    /// and when nothing runs the brackets with paused trials are processed
    /// ([`HyperBand::unstick`], which Ray's `choose_trial_to_run` does itself).
    pub fn for_bohb(s: HyperBandSettings) -> Result<Self> {
        Ok(HyperBand {
            bohb: true,
            ..HyperBand::new(s)?
        })
    }

    fn n0(&self, s: usize) -> f64 {
        (self.s_max_1 as f64 / (s + 1) as f64 * self.s.reduction_factor.powf(s as f64)).ceil()
    }

    fn r0(&self, s: usize) -> f64 {
        (self.s.max_t * self.s.reduction_factor.powf(-(s as f64))).trunc()
    }

    /// `on_trial_add`: the trial joins the current bracket, or a new one; returns its index.
    pub fn add(&mut self, trial: usize) -> usize {
        if self.current.is_none_or(|b| self.brackets[b].filled()) {
            loop {
                if self.bands.last().expect("a band").len() == self.s_max_1 {
                    self.bands.push(Vec::new());
                }
                let band = self.bands.last_mut().expect("a band");
                let s = if self.bohb {
                    self.s_max_1 - band.len() - 1
                } else {
                    band.len()
                };
                let r0 = self.r0(s);
                if r0 == 0.0 {
                    self.bands.last_mut().expect("a band").push(None);
                    self.current = None;
                } else {
                    let bracket =
                        Bracket::new(self.n0(s), r0, self.s.max_t, self.s.reduction_factor, s);
                    self.brackets.push(bracket);
                    let b = self.brackets.len() - 1;
                    self.bands.last_mut().expect("a band").push(Some(b));
                    self.current = Some(b);
                    break;
                }
            }
        }
        let b = self.current.expect("a bracket was made");
        self.brackets[b].live.push((trial, None));
        self.trial_bracket.insert(trial, b);
        b
    }

    /// `on_trial_result`: the answer for the trial and what it does to the others.
    pub fn on_result(
        &mut self,
        trial: usize,
        time: f64,
        metric: f64,
        state: States<'_>,
    ) -> (Action, Effects) {
        let Some(&b) = self.trial_bracket.get(&trial) else {
            return (Action::Stop, Effects::default());
        };
        let Some(p) = self.brackets[b].position(trial) else {
            // Out of its bracket already (Ray would never pass it a result).
            return (Action::Stop, Effects::default());
        };
        self.brackets[b].update(p, time, metric);
        if self.brackets[b].continue_trial(trial) {
            return (Action::Continue, Effects::default());
        }
        if self.bohb {
            let br = &self.brackets[b];
            let budget = Some(br.cumul_r);
            let others_paused =
                (br.live.iter()).all(|&(t, _)| t == trial || state(t) == TrialState::Paused);
            if !br.filled() || !others_paused {
                let effects = Effects {
                    budget,
                    ..Effects::default()
                };
                return (Action::Pause, effects);
            }
            let (action, effects) = self.process(b, Some(trial), state);
            return (action, Effects { budget, ..effects });
        }
        self.process(b, Some(trial), state)
    }

    /// `on_trial_complete` and `on_trial_error` (through `on_trial_remove`): the trial leaves
    /// its bracket, which may then halve.
    pub fn on_remove(&mut self, trial: usize, state: States<'_>) -> Effects {
        if !self.removed.insert(trial) {
            return Effects::default();
        }
        let Some(&b) = self.trial_bracket.get(&trial) else {
            return Effects::default();
        };
        self.brackets[b].cleanup(trial);
        let br = &self.brackets[b];
        if !br.finished() && !br.being_processed {
            return self.process(b, None, state).1;
        }
        Effects::default()
    }

    /// The controller's `stop_trial` of a paused (or pending) trial during processing: it
    /// leaves its bracket (`on_trial_remove`, which cannot process again here: the bracket is
    /// being processed or finished).
    fn stop_other(&mut self, b: usize, trial: usize, effects: &mut Effects) {
        if self.removed.insert(trial) {
            self.brackets[b].cleanup(trial);
            debug_assert!(self.brackets[b].finished() || self.brackets[b].being_processed);
            effects.stop.push(trial);
        }
    }

    /// `_process_bracket`; `current`: the trial whose result triggered it (None on a removal).
    fn process(
        &mut self,
        b: usize,
        current: Option<usize>,
        state: States<'_>,
    ) -> (Action, Effects) {
        let mut action = Action::Pause;
        let mut effects = Effects::default();
        if !self.brackets[b].cur_iter_done() {
            return (action, effects);
        }
        let is_current = |t: usize| Some(t) == current;
        if self.brackets[b].finished() {
            // cleanup_full: paused trials stop; the current one stops by the answer.
            let live: Vec<usize> = self.brackets[b].live.iter().map(|l| l.0).collect();
            for t in live {
                if !is_current(t) && state(t) == TrialState::Paused {
                    self.stop_other(b, t, &mut effects);
                }
            }
            return (Action::Stop, effects);
        }
        let milestone = self.brackets[b].cumul_r;
        self.brackets[b].being_processed = true;
        let (good, bad, judged) = self.brackets[b].halve(self.s.mode.op());
        self.num_stopped += bad.len();
        let kept: HashSet<usize> = good.iter().copied().collect();
        effects.halving = Some(Halving {
            milestone,
            next: self.brackets[b].cumul_r,
            judged: judged
                .into_iter()
                .map(|(t, m)| (t, m, kept.contains(&t)))
                .collect(),
        });
        for t in bad {
            if is_current(t) {
                self.brackets[b].cleanup(t);
                action = Action::Stop;
            } else {
                self.stop_other(b, t, &mut effects);
            }
        }
        for t in good {
            if self.brackets[b].continue_trial(t) {
                if is_current(t) {
                    action = Action::Continue;
                } else if state(t) == TrialState::Paused {
                    self.brackets[b].to_unpause.insert(t);
                }
            } else if self.brackets[b].finished() {
                if is_current(t) {
                    self.brackets[b].cleanup(t);
                    action = Action::Stop;
                } else if state(t) == TrialState::Paused {
                    self.stop_other(b, t, &mut effects);
                }
            }
        }
        (action, effects)
    }

    /// `choose_trial_to_run`: the first pending trial, or paused one its bracket unpaused, of
    /// the least complete bracket, band by band.
    pub fn choose(&self, state: States<'_>) -> Option<usize> {
        for band in &self.bands {
            let mut brackets: Vec<usize> = band.iter().flatten().copied().collect();
            if !self.bohb {
                // Stable, as Python's sorted (completions are never NaN).
                brackets.sort_by(|&a, &b| {
                    self.brackets[a]
                        .completion()
                        .total_cmp(&self.brackets[b].completion())
                });
            }
            for b in brackets {
                if let Some(t) = self.choosable(b, state) {
                    return Some(t);
                }
            }
        }
        None
    }

    /// The first of bracket `b`'s trials that is pending, or paused and unpaused.
    fn choosable(&self, b: usize, state: States<'_>) -> Option<usize> {
        let br = &self.brackets[b];
        br.live.iter().map(|l| l.0).find(|&t| match state(t) {
            TrialState::Pending => true,
            TrialState::Paused => br.to_unpause.contains(&t),
            _ => false,
        })
    }

    /// Where Ray would wait for ever: brackets whose live trials are all paused and none of
    /// them unpaused are processed as a removal would have before their first halving (or,
    /// if they have not all reached the milestone, all unpaused). Call only when no trial is
    /// running and [`Self::choose`] finds none.
    pub fn unstick(&mut self, state: States<'_>) -> Effects {
        if self.bohb {
            return self.process_paused(state);
        }
        let mut all = Effects::default();
        for b in 0..self.brackets.len() {
            let br = &self.brackets[b];
            let stuck = !br.live.is_empty()
                && br.to_unpause.is_empty()
                && br.live.iter().all(|&(t, _)| state(t) == TrialState::Paused);
            if !stuck {
                continue;
            }
            if br.cur_iter_done() {
                let (_, e) = self.process(b, None, state);
                all.stop.extend(e.stop);
                all.halving = all.halving.or(e.halving);
            } else {
                let br = &mut self.brackets[b];
                let live: Vec<usize> = br.live.iter().map(|l| l.0).collect();
                br.to_unpause.extend(live);
            }
        }
        all
    }

    /// `HyperBandForBOHB.choose_trial_to_run` when no trial runs: each bracket (in band order)
    /// with a paused trial is processed, until one has a trial to run.
    fn process_paused(&mut self, state: States<'_>) -> Effects {
        let mut all = Effects::default();
        let order: Vec<usize> = self.bands.iter().flatten().flatten().copied().collect();
        for b in order {
            let paused =
                (self.brackets[b].live.iter()).any(|&(t, _)| state(t) == TrialState::Paused);
            if !paused {
                continue;
            }
            // Trials it stops are ended for what follows (Ray's stop_trial sets them TERMINATED).
            let stopped = all.stop.clone();
            let st = |t: usize| {
                if stopped.contains(&t) {
                    TrialState::Ended
                } else {
                    state(t)
                }
            };
            let (_, e) = self.process(b, None, &st);
            all.stop.extend(e.stop);
            all.halving = all.halving.or(e.halving);
            if self.choosable(b, &st).is_some() {
                break;
            }
        }
        all
    }

    /// Each bracket as Ray's `debug_string` shows it: (band, s, max size n, milestone,
    /// completion, live trials).
    pub fn brackets(&self) -> Vec<(usize, usize, f64, f64, f64, usize)> {
        let mut out = Vec::new();
        for (i, band) in self.bands.iter().enumerate() {
            for b in band.iter().flatten() {
                let br = &self.brackets[*b];
                out.push((i, br.s, br.n, br.cumul_r, br.completion(), br.live.len()));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(max_t: f64, eta: f64) -> HyperBand {
        HyperBand::new(HyperBandSettings {
            max_t,
            reduction_factor: eta,
            mode: Mode::Max,
        })
        .unwrap()
    }

    #[test]
    fn brackets_as_ray_sizes_them() {
        // max_t 81, η 3: s_max_1 5; n0 = 5, 8, 15, 34, 81; r0 = 81, 27, 9, 3, 1.
        let h = hb(81.0, 3.0);
        assert_eq!(h.s_max_1, 5);
        let n: Vec<f64> = (0..5).map(|s| h.n0(s)).collect();
        assert_eq!(n, [5.0, 8.0, 15.0, 34.0, 81.0]);
        let r: Vec<f64> = (0..5).map(|s| h.r0(s)).collect();
        assert_eq!(r, [81.0, 27.0, 9.0, 3.0, 1.0]);
        // The first five trials fill bracket 0, the sixth opens bracket 1.
        let mut h = h;
        let b: Vec<usize> = (0..6).map(|t| h.add(t)).collect();
        assert_eq!(b, [0, 0, 0, 0, 0, 1]);
        let s: Vec<usize> = h.brackets().iter().map(|b| b.1).collect();
        assert_eq!(s, [0, 1]);
        // HyperBandForBOHB fills the bracket of the most halvings first: s = 4 (81 trials).
        let mut bohb = HyperBand::for_bohb(HyperBandSettings {
            max_t: 81.0,
            reduction_factor: 3.0,
            mode: Mode::Max,
        })
        .unwrap();
        bohb.add(0);
        let b = bohb.brackets();
        assert_eq!((b.len(), b[0].1, b[0].2, b[0].3), (1, 4, 81.0, 1.0));
    }

    #[test]
    fn halving_keeps_the_best_and_unpauses_them() {
        // max_t 4, η 2: s_max_1 3; bracket 0: n0 3 trials to r0 4 (no halving).
        let mut h = hb(4.0, 2.0);
        let mut states = [TrialState::Running; 6];
        for t in 0..6 {
            h.add(t);
        }
        // Bracket 1 (s = 1): trials 3, 4, 5 (n0 = ⌈3/2·2⌉ = 3), r0 = 2.
        assert_eq!(h.trial_bracket[&3], 1);
        let st = |s: [TrialState; 6]| move |t: usize| s[t];
        assert_eq!(h.on_result(3, 1.0, 5.0, &st(states)).0, Action::Continue);
        assert_eq!(h.on_result(3, 2.0, 5.0, &st(states)).0, Action::Pause);
        states[3] = TrialState::Paused;
        assert_eq!(h.on_result(4, 2.0, 1.0, &st(states)).0, Action::Pause);
        states[4] = TrialState::Paused;
        // The last one reaches the milestone: keep ⌈3/2⌉ = 2 (trials 5 and 3), stop 4.
        let (a, e) = h.on_result(5, 2.0, 9.0, &st(states));
        assert_eq!(a, Action::Continue);
        assert_eq!(e.stop, [4]);
        let hv = e.halving.unwrap();
        assert_eq!((hv.milestone, hv.next), (2.0, 4.0));
        assert_eq!(hv.judged, [(4, 1.0, false), (3, 5.0, true), (5, 9.0, true)]);
        states[4] = TrialState::Ended;
        // Trial 3 is unpaused: chosen before the pending ones of later brackets.
        states[0] = TrialState::Pending;
        assert_eq!(
            h.choose(&st(states)),
            Some(0),
            "bracket 0 is least complete"
        );
        states[0] = TrialState::Running;
        assert_eq!(h.choose(&st(states)), Some(3));
    }

    #[test]
    fn a_bracket_left_waiting_after_its_first_halving_is_unstuck() {
        let mut h = hb(4.0, 2.0);
        for t in 0..6 {
            h.add(t);
        }
        let mut states = [TrialState::Ended; 6];
        let st = |s: [TrialState; 6]| move |t: usize| s[t];
        // Bracket 1: trials 3, 4, 5 to 2; the halving keeps 4 and 5 (5 reported last).
        for t in 3..6 {
            states[t] = TrialState::Running;
            let (a, _) = h.on_result(t, 2.0, 1.0, &st(states));
            if t < 5 {
                assert_eq!(a, Action::Pause);
                states[t] = TrialState::Paused;
            } else {
                assert_eq!(a, Action::Continue);
            }
        }
        assert_eq!(states[3], TrialState::Paused);
        states[3] = TrialState::Ended; // stopped by the halving
        // Trial 5 reaches 4 and waits for trial 4, which fails before getting there.
        assert_eq!(h.on_result(5, 4.0, 1.0, &st(states)).0, Action::Pause);
        states[5] = TrialState::Paused;
        assert_eq!(h.choose(&st(states)), Some(4));
        states[4] = TrialState::Running;
        assert_eq!(h.on_result(4, 3.0, 1.0, &st(states)).0, Action::Continue);
        states[4] = TrialState::Ended;
        assert_eq!(h.on_remove(4, &st(states)), Effects::default());
        // Where Ray waits for ever: nothing to choose. Unsticking finishes the bracket.
        assert_eq!(h.choose(&st(states)), None);
        let e = h.unstick(&st(states));
        assert_eq!(e.stop, [5]);
        assert!(e.completes(5));
    }

    #[test]
    fn python_sort_with_nans_as_cpython_leaves_it() {
        // CPython 3.11: sorted([3, nan, 1, 2]) == [3, nan, 1, 2] (every comparison with the
        // NaN is false: one run); sorted([nan, 2, 1]) == [nan, 1, 2]; sorted([2, 1, nan, 0])
        // == [0, 1, 2, nan].
        assert_eq!(python_sorted(&[3.0, f64::NAN, 1.0, 2.0]), [0, 1, 2, 3]);
        assert_eq!(python_sorted(&[f64::NAN, 2.0, 1.0]), [0, 2, 1]);
        assert_eq!(python_sorted(&[2.0, 1.0, f64::NAN, 0.0]), [3, 1, 0, 2]);
        assert_eq!(python_sorted(&[1.0, 1.0, 0.0]), [2, 0, 1], "stable");
        // Without NaNs both ways give the one stable order (ties, -0 equal to 0).
        let mut x = 0x1234_5678_u64;
        for len in 0..64 {
            let keys: Vec<f64> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    [-0.0, 0.0, 1.0, 2.5, -3.0][(x % 5) as usize]
                })
                .collect();
            assert_eq!(
                cpython_small_sort(&keys),
                stable_sort_nan_last(&keys),
                "{keys:?}"
            );
        }
    }

    #[test]
    fn settings_that_ray_cannot_run_are_refused() {
        let bad = |max_t, eta| {
            HyperBand::new(HyperBandSettings {
                max_t,
                reduction_factor: eta,
                mode: Mode::Min,
            })
            .is_err()
        };
        assert!(bad(0.5, 3.0), "every bracket too small: Ray loops for ever");
        assert!(bad(81.0, 1.0));
        assert!(bad(1e300, 1.0001));
        assert!(!bad(1.0, 3.0));
    }
}
