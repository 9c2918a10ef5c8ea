//! The tree-structured Parzen estimator, as Optuna 5.0's `TPESampler` with its defaults decides:
//! 10 random start-up trials (Optuna's `RandomSampler`, its own stream), then every parameter
//! drawn jointly (`multivariate`, the default for one objective) from a mixture of truncated
//! normals (categorical: smoothed counts) fitted to the best `min(⌈0.1·n⌉, 25)` finished trials,
//! 24 candidates scored by log l(x) − log g(x) against the mixture of the others; trials still
//! running count among the others with their parameters (`constant_liar`, the default).
//! Prior weight 1, magic clip, no end-point kernels, weights ramping down for all but the
//! newest 25 trials.
//!
//! Both streams are numpy's `RandomState(seed)` (MT19937, doubles from two draws) and are drawn
//! in Optuna's order, so a suggestion equals Optuna's for the same seed and history up to the
//! last bits of its special functions: Optuna's `erf` is the C library's (fdlibm's) and numpy's
//! `exp`/`log` may be vectorised; here they are `libm`'s port of the same fdlibm code and Rust's.
//! Checked against Optuna's own suggestions on recorded histories (`tests/tpe_optuna.rs`).

use std::cmp::Ordering;

use crate::asha::Mode;
use crate::numpy::{RandomState, sum as np_sum};

/// One parameter as Optuna sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Dist {
    /// `FloatDistribution(low, high, log, step)`.
    Float {
        low: f64,
        high: f64,
        log: bool,
        step: Option<f64>,
    },
    /// `IntDistribution(low, high)` (both included, step 1).
    Int { low: i64, high: i64 },
    /// `CategoricalDistribution` of this many choices (values are indices).
    Categorical(usize),
}

/// A trial the sampler learns from: its parameters' internal values (floats; integers as
/// floats; a choice's index), one per dimension in the space's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub params: Vec<f64>,
    /// The objective of a finished trial; `None` while it runs.
    pub value: Option<f64>,
}

/// Optuna's `TPESampler(seed=seed)` with its defaults, for one objective.
#[derive(Debug, Clone)]
pub struct Tpe {
    space: Vec<Dist>,
    mode: Mode,
    rng: RandomState,
    random: RandomState,
}

/// Start-up trials drawn at random.
pub const N_STARTUP: usize = 10;
/// Candidates drawn from l(x) per suggestion.
const N_EI_CANDIDATES: usize = 24;
const PRIOR_WEIGHT: f64 = 1.0;

impl Tpe {
    pub fn new(space: Vec<Dist>, mode: Mode, seed: u32) -> Self {
        Tpe {
            space,
            mode,
            rng: RandomState::new(seed),
            random: RandomState::new(seed),
        }
    }

    /// The next trial's parameters given every earlier trial that finished with a value or is
    /// running, in trial order (failed trials left out, as Optuna leaves them).
    pub fn suggest(&mut self, history: &[Observed]) -> Vec<f64> {
        let complete = history.iter().filter(|t| t.value.is_some()).count();
        if complete < N_STARTUP {
            let random = &mut self.random;
            return self.space.iter().map(|d| random_value(random, d)).collect();
        }
        self.sample(history, complete)
    }

    /// `TPESampler._sample` over the whole space.
    fn sample(&mut self, history: &[Observed], complete: usize) -> Vec<f64> {
        let n_below = complete.div_ceil(10).min(25);
        // Finished trials by value (stable: ties keep trial order), the best n_below below.
        let mut done: Vec<usize> = (0..history.len())
            .filter(|&i| history[i].value.is_some())
            .collect();
        let value = |i: usize| history[i].value.expect("finished");
        // Compared as Python compares floats: -0.0 equals 0.0 (values are never NaN).
        done.sort_by(|&x, &y| {
            let o = value(x).partial_cmp(&value(y)).unwrap_or(Ordering::Equal);
            if self.mode == Mode::Max {
                o.reverse()
            } else {
                o
            }
        });
        let mut below: Vec<usize> = done[..n_below].to_vec();
        let mut above: Vec<usize> = done[n_below..].to_vec();
        above.extend((0..history.len()).filter(|&i| history[i].value.is_none()));
        below.sort_unstable();
        above.sort_unstable();
        let l = Mixture::fit(&self.space, &below, history);
        let g = Mixture::fit(&self.space, &above, history);
        let samples = l.sample(&mut self.rng, N_EI_CANDIDATES);
        let lb = l.log_pdf(&samples);
        let la = g.log_pdf(&samples);
        let acq: Vec<f64> = lb.iter().zip(&la).map(|(b, a)| b - a).collect();
        samples[argmax(&acq)].clone()
    }
}

/// `RandomSampler.sample_independent` for one parameter.
fn random_value(random: &mut RandomState, d: &Dist) -> f64 {
    match *d {
        Dist::Categorical(n) => {
            // One uniform per choice (its one-hot column), the first largest wins.
            let draws: Vec<f64> = (0..n).map(|_| random.uniform(0.0, 1.0)).collect();
            argmax(&draws) as f64
        }
        Dist::Int { low, high } => {
            let (lo, hi) = (low as f64, high as f64);
            let v = random.uniform(lo - 0.5, hi + 0.5);
            ((v - lo + 0.5).floor() + lo).clamp(lo, hi)
        }
        Dist::Float {
            low,
            high,
            log: true,
            ..
        } => {
            let v = random.uniform(low.ln(), high.ln()).exp();
            v.clamp(low, next_down(high))
        }
        Dist::Float {
            low,
            high,
            step: Some(step),
            ..
        } => {
            let v = random.uniform(low - 0.5 * step, high + 0.5 * step);
            (round_half_even((v - low) / step) * step + low).clamp(low, high)
        }
        Dist::Float { low, high, .. } => {
            let v = random.uniform(low, high);
            v.min(next_down(high))
        }
    }
}

/// The first index of the largest value (`np.argmax`: a NaN wins).
fn argmax(v: &[f64]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x.is_nan() {
            return i;
        }
        if x > v[best] {
            best = i;
        }
    }
    best
}

fn next_down(x: f64) -> f64 {
    if x.is_nan() || x == f64::NEG_INFINITY {
        return x;
    }
    if x == 0.0 {
        return -f64::from_bits(1);
    }
    let bits = x.to_bits();
    f64::from_bits(if x > 0.0 { bits - 1 } else { bits + 1 })
}

/// `np.round`: halves to even.
fn round_half_even(x: f64) -> f64 {
    x.round_ties_even()
}

/// One dimension of a mixture: a kernel per observation plus the prior.
#[derive(Debug, Clone)]
enum Kernels {
    /// Each kernel's probabilities of the choices.
    Categorical(Vec<Vec<f64>>),
    /// Truncated normals in the transformed (log, half-step widened) space.
    Numerical {
        mu: Vec<f64>,
        sigma: Vec<f64>,
        /// The bounds the normals are truncated to (transformed).
        low: f64,
        high: f64,
        /// The untransformed bounds and step of a discrete dimension.
        discrete: Option<(f64, f64, f64)>,
        log: bool,
    },
}

/// `_MixtureOfProductDistribution`: weighted kernels, one per observation and the prior.
#[derive(Debug, Clone)]
struct Mixture {
    weights: Vec<f64>,
    dims: Vec<Kernels>,
}

/// Optuna's default weights: 1 for the newest 25, a ramp from 1/n up to 1 before them.
fn default_weights(n: usize) -> Vec<f64> {
    if n < 25 {
        return vec![1.0; n];
    }
    let ramp = linspace(1.0 / n as f64, 1.0, n - 25);
    ramp.into_iter()
        .chain(std::iter::repeat_n(1.0, 25))
        .collect()
}

/// `np.linspace(start, stop, num)`.
fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    match num {
        0 => vec![],
        1 => vec![start],
        _ => {
            let div = (num - 1) as f64;
            let step = (stop - start) / div;
            let mut v: Vec<f64> = (0..num).map(|i| i as f64 * step + start).collect();
            v[num - 1] = stop;
            v
        }
    }
}

impl Mixture {
    /// `_ParzenEstimator` of the trials `members` (indices into `history`).
    fn fit(space: &[Dist], members: &[usize], history: &[Observed]) -> Mixture {
        let n = members.len();
        let mut weights = if n == 0 {
            vec![1.0]
        } else {
            let mut w = default_weights(n);
            w.push(PRIOR_WEIGHT);
            w
        };
        let total = np_sum(&weights);
        weights.iter_mut().for_each(|w| *w /= total);
        let dims = space
            .iter()
            .enumerate()
            .map(|(d, dist)| {
                let obs: Vec<f64> = members.iter().map(|&i| history[i].params[d]).collect();
                Kernels::fit(dist, &obs)
            })
            .collect();
        Mixture { weights, dims }
    }

    /// `sample(rng, n)`: kernels by weight, then each categorical dimension's draws, then all
    /// numerical dimensions' quantiles at once (dimension by dimension).
    fn sample(&self, rng: &mut RandomState, n: usize) -> Vec<Vec<f64>> {
        let active = rng.choice(&self.weights, n);
        let mut out = vec![vec![0.0; self.dims.len()]; n];
        for (d, k) in self.dims.iter().enumerate() {
            if let Kernels::Categorical(w) = k {
                for (j, &a) in active.iter().enumerate() {
                    let u = rng.random_sample();
                    let mut cum = 0.0;
                    let row = &w[a];
                    let mut count = 0;
                    for (c, p) in row.iter().enumerate() {
                        cum += p;
                        let c_val = if c + 1 == row.len() { 1.0 } else { cum };
                        if c_val < u {
                            count += 1;
                        }
                    }
                    out[j][d] = count as f64;
                }
            }
        }
        let numerical: Vec<usize> = (0..self.dims.len())
            .filter(|&d| matches!(self.dims[d], Kernels::Numerical { .. }))
            .collect();
        if numerical.is_empty() {
            return out;
        }
        // Quantiles, a (dims × n) array in C order; standardised bounds of the active kernels.
        let mut q = Vec::with_capacity(numerical.len() * n);
        let mut a = Vec::with_capacity(q.capacity());
        let mut b = Vec::with_capacity(q.capacity());
        let mut loc = Vec::with_capacity(q.capacity());
        let mut scale = Vec::with_capacity(q.capacity());
        for _ in 0..numerical.len() * n {
            q.push(rng.uniform(0.0, 1.0));
        }
        for &d in &numerical {
            let Kernels::Numerical {
                mu,
                sigma,
                low,
                high,
                ..
            } = &self.dims[d]
            else {
                unreachable!("numerical dimensions only")
            };
            for &k in &active {
                a.push((low - mu[k]) / sigma[k]);
                b.push((high - mu[k]) / sigma[k]);
                loc.push(mu[k]);
                scale.push(sigma[k]);
            }
        }
        let x = truncnorm::ppf(&q, &a, &b);
        for (r, &d) in numerical.iter().enumerate() {
            let Kernels::Numerical { discrete, log, .. } = &self.dims[d] else {
                unreachable!("numerical dimensions only")
            };
            for (j, row) in out.iter_mut().enumerate() {
                let e = r * n + j;
                let mut v = x[e] * scale[e] + loc[e];
                if *log {
                    v = v.exp();
                }
                if let Some((lo, hi, step)) = discrete {
                    v = (lo + round_half_even((v - lo) / step) * step).clamp(*lo, *hi);
                }
                row[d] = v;
            }
        }
        out
    }

    /// `log_pdf(x)` of each sample: log Σ_k w_k Π_d p_kd(x_d).
    /// Summed as Optuna sums: categorical and discrete dimensions one by one into the
    /// kernels' totals, then the continuous dimensions' sum (from 0, in dimension order), then
    /// the log weights; the log of the sum of exponentials over the kernels.
    fn log_pdf(&self, samples: &[Vec<f64>]) -> Vec<f64> {
        let nk = self.weights.len();
        samples
            .iter()
            .map(|x| {
                let mut per_kernel = vec![0.0; nk];
                let mut continuous: Option<Vec<f64>> = None;
                for (d, k) in self.dims.iter().enumerate() {
                    match k {
                        Kernels::Numerical { discrete: None, .. } => {
                            let c = continuous.get_or_insert_with(|| vec![0.0; nk]);
                            k.add_log_pdf(x[d], c);
                        }
                        _ => k.add_log_pdf(x[d], &mut per_kernel),
                    }
                }
                if let Some(c) = continuous {
                    per_kernel.iter_mut().zip(c).for_each(|(p, c)| *p += c);
                }
                for (p, w) in per_kernel.iter_mut().zip(&self.weights) {
                    *p += w.ln();
                }
                let mut max = per_kernel.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if max == f64::NEG_INFINITY {
                    max = 0.0;
                }
                let e: Vec<f64> = per_kernel.iter().map(|p| (p - max).exp()).collect();
                np_sum(&e).ln() + max
            })
            .collect()
    }
}

impl Kernels {
    /// `_calculate_distributions` for one dimension's observations.
    fn fit(dist: &Dist, obs: &[f64]) -> Kernels {
        match *dist {
            Dist::Categorical(choices) => {
                if obs.is_empty() {
                    return Kernels::Categorical(vec![vec![1.0 / choices as f64; choices]]);
                }
                let n_kernels = obs.len() + 1;
                let mut w = vec![vec![PRIOR_WEIGHT / n_kernels as f64; choices]; n_kernels];
                for (row, &o) in w.iter_mut().zip(obs) {
                    row[o as usize] += 1.0;
                }
                for row in &mut w {
                    let s = np_sum(row);
                    let s = if s == 0.0 { 1.0 } else { s };
                    row.iter_mut().for_each(|p| *p /= s);
                }
                Kernels::Categorical(w)
            }
            Dist::Int { low, high } => numerical(obs, low as f64, high as f64, false, Some(1.0)),
            Dist::Float {
                low,
                high,
                log,
                step,
            } => numerical(obs, low, high, log, step),
        }
    }

    /// Adds this dimension's log density (or mass) at `x` under each kernel.
    fn add_log_pdf(&self, x: f64, per_kernel: &mut [f64]) {
        match self {
            Kernels::Categorical(w) => {
                for (p, row) in per_kernel.iter_mut().zip(w) {
                    *p += row[x as i64 as usize].ln();
                }
            }
            Kernels::Numerical {
                mu,
                sigma,
                low,
                high,
                discrete: None,
                log,
            } => {
                let xt = if *log { x.ln() } else { x };
                for ((p, &m), &s) in per_kernel.iter_mut().zip(mu).zip(sigma) {
                    let (a, b) = ((low - m) / s, (high - m) / s);
                    let z = (xt - m) / s;
                    *p += if a == b {
                        f64::NAN
                    } else if z < a || z > b {
                        f64::NEG_INFINITY
                    } else {
                        truncnorm::norm_logpdf(z) - truncnorm::log_gauss_mass(a, b) - s.ln()
                    };
                }
            }
            Kernels::Numerical {
                mu,
                sigma,
                low,
                high,
                discrete: Some((_, _, step)),
                log,
            } => {
                let t = |v: f64| if *log { v.ln() } else { v };
                let (left, right) = (t(x - step / 2.0), t(x + step / 2.0));
                for ((p, &m), &s) in per_kernel.iter_mut().zip(mu).zip(sigma) {
                    *p += truncnorm::log_gauss_mass((left - m) / s, (right - m) / s);
                    *p -= truncnorm::log_gauss_mass((low - m) / s, (high - m) / s);
                }
            }
        }
    }
}

/// `_calculate_numerical_distributions`: a kernel at each observation, its width the larger
/// gap to its sorted neighbours (the outermost use their inner gap), clipped to
/// [range / min(100, kernels + 1), range]; the prior at the middle with the whole range.
fn numerical(obs: &[f64], low0: f64, high0: f64, log: bool, step: Option<f64>) -> Kernels {
    let (mut low, mut high) = (low0, high0);
    if let Some(s) = step {
        low -= s / 2.0;
        high += s / 2.0;
    }
    let mut mus: Vec<f64> = obs.to_vec();
    if log {
        mus.iter_mut().for_each(|m| *m = m.ln());
        low = low.ln();
        high = high.ln();
    }
    let n = mus.len();
    let mut order: Vec<usize> = (0..n).collect();
    // np.argsort's default (quicksort, not stable) orders equal values arbitrarily; their
    // sigmas are equal whatever the order, so a stable sort gives the same widths.
    order.sort_by(|&x, &y| mus[x].total_cmp(&mus[y]));
    let mut ends = Vec::with_capacity(n + 2);
    ends.push(low);
    ends.extend(order.iter().map(|&i| mus[i]));
    ends.push(high);
    let mut sorted_sigmas: Vec<f64> = (1..=n)
        .map(|i| (ends[i] - ends[i - 1]).max(ends[i + 1] - ends[i]))
        .collect();
    if ends.len() >= 4 {
        sorted_sigmas[0] = ends[2] - ends[1];
        sorted_sigmas[n - 1] = ends[n] - ends[n - 1];
    }
    let mut sigmas = vec![0.0; n];
    for (r, &i) in order.iter().enumerate() {
        sigmas[i] = sorted_sigmas[r];
    }
    let maxsigma = high - low;
    let minsigma = (high - low) / 100f64.min(1.0 + (n + 1) as f64);
    sigmas
        .iter_mut()
        .for_each(|s| *s = s.clamp(minsigma, maxsigma));
    mus.push(0.5 * (low + high));
    sigmas.push(high - low);
    // The normals are truncated to the distribution's bounds widened by half a step, as the
    // kernels' widths were computed.
    Kernels::Numerical {
        mu: mus,
        sigma: sigmas,
        low,
        high,
        discrete: step.map(|s| (low0, high0, s)),
        log,
    }
}

/// Optuna's `_truncnorm`: the truncated normal's log mass, log density and inverse CDF, with
/// the tails in log space.
pub(crate) mod truncnorm {
    use std::cmp::Ordering;
    use std::f64::consts::{PI, SQRT_2};

    /// ln √(2π), computed as Optuna computes it.
    fn norm_pdf_log_c() -> f64 {
        (2.0 * PI).sqrt().ln()
    }

    fn ndtr_single(a: f64) -> f64 {
        let x = a / SQRT_2;
        if x < -1.0 / SQRT_2 {
            0.5 * libm::erfc(-x)
        } else if x < 1.0 / SQRT_2 {
            0.5 + 0.5 * libm::erf(x)
        } else {
            1.0 - 0.5 * libm::erfc(x)
        }
    }

    fn ndtr(a: f64) -> f64 {
        0.5 + 0.5 * libm::erf(a / SQRT_2)
    }

    pub fn log_ndtr(a: f64) -> f64 {
        if a > 6.0 {
            return -ndtr_single(-a);
        }
        if a > -20.0 {
            return ndtr_single(a).ln();
        }
        // The asymptotic series of the lower tail.
        let log_lhs = -0.5 * (a * a) - (-a).ln() - 0.5 * (2.0 * PI).ln();
        let mut last_total = 0.0;
        let mut rhs: f64 = 1.0;
        let mut numerator = 1.0;
        let mut denom_factor = 1.0;
        let denom_cons = 1.0 / (a * a);
        let mut sign = 1.0;
        let mut i = 0.0;
        while (last_total - rhs).abs() > f64::EPSILON {
            i += 1.0;
            last_total = rhs;
            sign = -sign;
            denom_factor *= denom_cons;
            numerator *= 2.0 * i - 1.0;
            rhs += sign * numerator * denom_factor;
        }
        log_lhs + rhs.ln()
    }

    pub fn norm_logpdf(x: f64) -> f64 {
        -(x * x) / 2.0 - norm_pdf_log_c()
    }

    fn log_diff(log_p: f64, log_q: f64) -> f64 {
        log_p + (-(log_q - log_p).exp()).ln_1p()
    }

    /// numpy's `logaddexp`.
    fn log_sum(x: f64, y: f64) -> f64 {
        if x == y {
            return x + std::f64::consts::LN_2;
        }
        let d = x - y;
        if d > 0.0 {
            x + (-d).exp().ln_1p()
        } else if d <= 0.0 {
            y + d.exp().ln_1p()
        } else {
            d
        }
    }

    /// The log of the standard normal's mass in [a, b].
    pub fn log_gauss_mass(a: f64, b: f64) -> f64 {
        if b <= 0.0 {
            log_diff(log_ndtr(b), log_ndtr(a))
        } else if a > 0.0 {
            log_diff(log_ndtr(-a), log_ndtr(-b))
        } else {
            (-ndtr(a) - ndtr(-b)).ln_1p()
        }
    }

    /// `_ndtri_exp` over one array: Newton steps on every element until all have converged.
    fn ndtri_exp(y: &[f64]) -> Vec<f64> {
        let flipped: Vec<bool> = y.iter().map(|&v| v > -1e-2).collect();
        let z: Vec<f64> = y
            .iter()
            .zip(&flipped)
            .map(|(&v, &f)| if f { (-v.exp_m1()).ln() } else { v })
            .collect();
        let mut x: Vec<f64> = z
            .iter()
            .map(|&z| {
                if z < -5.0 {
                    -(-2.0 * (z + norm_pdf_log_c())).sqrt()
                } else {
                    -(3f64.sqrt() / PI) * (-z).exp_m1().ln()
                }
            })
            .collect();
        for _ in 0..100 {
            let mut done = true;
            for (x, &z) in x.iter_mut().zip(&z) {
                let log_ndtr_x = log_ndtr(*x);
                let log_norm_pdf_x = -0.5 * (*x * *x) - norm_pdf_log_c();
                let dx = (log_ndtr_x - z) * (log_ndtr_x - log_norm_pdf_x).exp();
                *x -= dx;
                // NaN is not converged, as numpy's all() sees it.
                if dx.abs().partial_cmp(&(1e-8 * x.abs())) != Some(Ordering::Less) {
                    done = false;
                }
            }
            if done {
                break;
            }
        }
        for (x, f) in x.iter_mut().zip(flipped) {
            if f {
                *x = -*x;
            }
        }
        x
    }

    /// `ppf(q, a, b)`: elements with a < 0 solved together from the left tail, the others
    /// together from the right.
    pub fn ppf(q: &[f64], a: &[f64], b: &[f64]) -> Vec<f64> {
        let n = q.len();
        // `~(a < 0)`: a NaN bound goes right.
        let (left, right): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| a[i] < 0.0);
        let mut out = vec![0.0; n];
        let y: Vec<f64> = left
            .iter()
            .map(|&i| log_sum(log_ndtr(a[i]), q[i].ln() + log_gauss_mass(a[i], b[i])))
            .collect();
        for (&i, x) in left.iter().zip(ndtri_exp(&y)) {
            out[i] = x;
        }
        let y: Vec<f64> = right
            .iter()
            .map(|&i| {
                log_sum(
                    log_ndtr(-b[i]),
                    (-q[i]).ln_1p() + log_gauss_mass(a[i], b[i]),
                )
            })
            .collect();
        for (&i, x) in right.iter().zip(ndtri_exp(&y)) {
            out[i] = -x;
        }
        for i in 0..n {
            if q[i] == 0.0 {
                out[i] = a[i];
            }
            if q[i] == 1.0 {
                out[i] = b[i];
            }
            if a[i] == b[i] {
                out[i] = f64::NAN;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_ramp_for_all_but_the_newest_25() {
        assert_eq!(default_weights(3), [1.0, 1.0, 1.0]);
        let w = default_weights(30);
        assert_eq!(w.len(), 30);
        assert_eq!(w[0], 1.0 / 30.0);
        assert_eq!(w[4], 1.0);
        assert!(w[25..].iter().all(|&x| x == 1.0));
    }

    #[test]
    fn log_gauss_mass_of_the_whole_line_is_zero_and_tails_are_finite() {
        assert!(truncnorm::log_gauss_mass(-40.0, 40.0).abs() < 1e-15);
        let far = truncnorm::log_gauss_mass(30.0, 31.0);
        assert!(far.is_finite() && far < -400.0, "{far}");
        // Φ(0) − Φ(−1) = 0.341344746…
        let m = truncnorm::log_gauss_mass(-1.0, 0.0).exp();
        assert!((m - 0.341_344_746_068_542_9).abs() < 1e-15, "{m}");
    }

    #[test]
    fn ppf_inverts_the_truncated_cdf() {
        let (a, b) = ([-1.0, 0.5, -3.0], [2.0, 4.0, -2.0]);
        let q = [0.3, 0.7, 0.5];
        let x = truncnorm::ppf(&q, &a, &b);
        for i in 0..3 {
            let mass = truncnorm::log_gauss_mass(a[i], b[i]).exp();
            let got = truncnorm::log_gauss_mass(a[i], x[i]).exp() / mass;
            assert!((got - q[i]).abs() < 1e-9, "{i}: {got} vs {}", q[i]);
        }
    }

    #[test]
    fn start_up_is_random_then_suggestions_approach_the_best() {
        let space = vec![Dist::Float {
            low: -5.0,
            high: 5.0,
            log: false,
            step: None,
        }];
        let mut tpe = Tpe::new(space, Mode::Min, 3);
        let mut history = Vec::new();
        for _ in 0..60 {
            let p = tpe.suggest(&history);
            let x = p[0];
            assert!((-5.0..5.0).contains(&x));
            history.push(Observed {
                params: p,
                value: Some((x - 1.5) * (x - 1.5)),
            });
        }
        let best = history
            .iter()
            .map(|o| o.value.unwrap())
            .fold(f64::INFINITY, f64::min);
        assert!(best < 1e-2, "best {best}");
    }
}
