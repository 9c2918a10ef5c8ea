//! BOHB's configuration generator as HpBandSter 0.7.4 makes it (`hpbandster/optimizers/
//! config_generators/bohb.py`), over the search space as Ray's `TuneBOHB` converts it to a
//! ConfigSpace 1.2 space.
//!
//! - The space: parameters in name order; uniform and loguniform (and quniform, whose
//!   quantization Ray drops) are floats (bounds rounded to 9 places), randint(a, b) an integer
//!   in [a, b − 1], choice a categorical. A config's vector: floats and integers scaled to
//!   [0, 1] (logarithmically for loguniform), a categorical its index; float values are rounded
//!   to 13 places, as ConfigSpace rounds them.
//! - A random config (while no model exists, and with probability `random_fraction` after):
//!   ConfigSpace's sampler, which draws 5 vectors per parameter from its generator (seeded with
//!   the seed) and keeps the first.
//! - Results are kept per budget; a budget below the largest one with a model is ignored. Once a
//!   budget has more than `min_points_in_model` (parameters + 1) results, the best
//!   `max(min_points, 15 %)` and the next `max(min_points, 85 %)` by loss each get a product
//!   kernel density (statsmodels' `KDEMultivariate`: Gaussian kernels for numbers, Aitchison–
//!   Aitken for categories, normal-reference bandwidths `1.06·σ·n^(−1/(4+d))`, at least 1e-3),
//!   if each has more points than dimensions.
//! - A model-based config: 64 candidates, each drawn around a random good point (numbers from a
//!   normal truncated to [0, 1] with 3× the bandwidth; a category kept with probability 1 − bw,
//!   else drawn uniformly), scored by `max(1e-32, g(x)) / max(l(x), 1e-32)` with the largest
//!   budget's models; the lowest wins.
//!
//! BOHB's own draws come from numpy's legacy global generator (seeded with the seed), the
//! random configs from ConfigSpace's. Equal to HpBandSter's up to the last bits of numpy's
//! vectorised `exp` (the Gaussian kernels, log-scaled values) and scipy's `ndtri_exp` (here
//! Optuna's port, as in TPE): checked against recorded runs, `tests/bohb_hpbandster.rs`.

use std::collections::BTreeMap;

use crate::Result;
use serde_json::Value;

use crate::numpy::{RandomState, sum as np_sum};
use crate::space::{Config, Param, Space};
use crate::tpe::truncnorm;

/// One parameter, as ConfigSpace holds it.
#[derive(Debug, Clone, PartialEq)]
enum Dim {
    Float { lo: f64, hi: f64, log: bool },
    Int { lo: i64, hi: i64 },
    Cat(Vec<Value>),
}

/// `np.round(x, decimals)`: scaled, rounded half to even, scaled back.
fn np_round(x: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (x * p).round_ties_even() / p
}

impl Dim {
    /// Categories (BOHB's vartype: 0 for numbers).
    fn levels(&self) -> usize {
        match self {
            Dim::Cat(c) => c.len(),
            _ => 0,
        }
    }

    fn to_vector(&self, v: &Value) -> Option<f64> {
        Some(match self {
            Dim::Float { lo, hi, log: false } => (v.as_f64()? - lo) / (hi - lo),
            Dim::Float { lo, hi, log: true } => (v.as_f64()?.ln() - lo.ln()) / (hi.ln() - lo.ln()),
            Dim::Int { lo, hi } => (v.as_f64()? - *lo as f64) / (*hi - *lo) as f64,
            Dim::Cat(c) => c.iter().position(|x| x == v)? as f64,
        })
    }

    fn to_value(&self, x: f64) -> Value {
        match self {
            Dim::Float { lo, hi, log } => {
                let v = if *log {
                    (x * (hi.ln() - lo.ln()) + lo.ln()).exp()
                } else {
                    x * (hi - lo) + lo
                };
                let v = v.clamp(*lo, *hi);
                serde_json::Number::from_f64(np_round(v, 13)).map_or(Value::Null, Value::Number)
            }
            Dim::Int { lo, hi } => {
                Value::from((x * (*hi - *lo) as f64 + *lo as f64).round_ties_even() as i64)
            }
            Dim::Cat(c) => c[x as usize].clone(),
        }
    }
}

/// The space as BOHB sees it: its dimensions (name order) and the plain values kept aside.
#[derive(Debug, Clone)]
pub struct BohbSpace {
    dims: Vec<(String, Dim)>,
    constants: Config,
}

impl Space {
    /// The space as Ray's `TuneBOHB` converts it; a grid is refused (as Ray refuses it).
    pub fn bohb(&self) -> Result<BohbSpace> {
        let mut dims = Vec::new();
        let mut constants = Config::new();
        for (name, p) in &self.0 {
            let dim = match p {
                Param::Const(v) => {
                    constants.insert(name.clone(), v.clone());
                    continue;
                }
                Param::Grid(_) => {
                    bail!("parameter {name:?}: BOHB takes no grid (as Ray's TuneBOHB)")
                }
                Param::Choice(v) => Dim::Cat(v.clone()),
                Param::Uniform(a, b) | Param::QUniform(a, b, _) => Dim::Float {
                    lo: np_round(*a, 9),
                    hi: np_round(*b, 9),
                    log: false,
                },
                Param::LogUniform(a, b) => Dim::Float {
                    lo: np_round(*a, 9),
                    hi: np_round(*b, 9),
                    log: true,
                },
                Param::RandInt(a, b) => {
                    if b - a < 2 {
                        bail!("parameter {name:?}: BOHB needs randint over two values or more");
                    }
                    Dim::Int { lo: *a, hi: b - 1 }
                }
            };
            dims.push((name.clone(), dim));
        }
        if dims.is_empty() {
            bail!("BOHB needs a parameter to search: a choice or a distribution");
        }
        Ok(BohbSpace { dims, constants })
    }
}

impl BohbSpace {
    /// A config's vector (None: a value outside the space).
    pub fn vector(&self, config: &Config) -> Option<Vec<f64>> {
        (self.dims.iter())
            .map(|(n, d)| config.get(n).and_then(|v| d.to_vector(v)))
            .collect()
    }

    /// A config at the lowest value of each parameter (the first category).
    pub fn lowest(&self) -> Config {
        self.config(&vec![0.0; self.dims.len()])
    }

    fn config(&self, vector: &[f64]) -> Config {
        let mut c = self.constants.clone();
        for ((n, d), &x) in self.dims.iter().zip(vector) {
            c.insert(n.clone(), d.to_value(x));
        }
        c
    }

    /// ConfigSpace's `sample_configuration()`: 5 vectors per parameter, the first kept.
    fn sample(&self, rng: &mut RandomState) -> Vec<f64> {
        (self.dims.iter())
            .map(|(_, d)| {
                let draws: Vec<f64> = (0..5)
                    .map(|_| match d {
                        Dim::Float { .. } => rng.uniform(0.0, 1.0),
                        Dim::Int { lo, hi } => {
                            rng.randint(0, hi - lo + 1) as f64 / (hi - lo) as f64
                        }
                        Dim::Cat(c) => rng.randint(0, c.len() as i64) as f64,
                    })
                    .collect();
                draws[0]
            })
            .collect()
    }
}

/// `KDEMultivariate` with normal-reference bandwidths (clipped to at least `min_bw`).
#[derive(Debug, Clone)]
struct Kde {
    data: Vec<Vec<f64>>,
    bw: Vec<f64>,
    levels: Vec<usize>,
    /// Per dimension, the distinct values in the data (statsmodels counts a category's levels
    /// there, not in the space).
    seen: Vec<f64>,
}

impl Kde {
    fn fit(data: Vec<Vec<f64>>, levels: &[usize], min_bw: f64) -> Self {
        let (n, d) = (data.len(), levels.len());
        // np.std(axis=0): row by row sums (a reduction over the outer axis), ddof 0.
        let bw = (0..d)
            .map(|j| {
                let mean = data.iter().fold(0.0, |s, r| s + r[j]) / n as f64;
                let var = data
                    .iter()
                    .fold(0.0, |s, r| s + (r[j] - mean) * (r[j] - mean))
                    / n as f64;
                let bw = 1.06 * var.sqrt() * (n as f64).powf(-1.0 / (4 + d) as f64);
                bw.max(min_bw)
            })
            .collect();
        let seen = (0..d)
            .map(|j| {
                let mut v: Vec<f64> = data.iter().map(|r| r[j]).collect();
                v.sort_by(f64::total_cmp);
                v.dedup();
                v.len() as f64
            })
            .collect();
        Kde {
            data,
            bw,
            levels: levels.to_vec(),
            seen,
        }
    }

    /// `pdf(x)`: the mean over the points of the product kernels.
    fn pdf(&self, x: &[f64]) -> f64 {
        let d = self.levels.len();
        let seen = &self.seen;
        let continuous_bw = (0..d)
            .filter(|&j| self.levels[j] == 0)
            .fold(1.0, |p, j| p * self.bw[j]);
        let dens: Vec<f64> = (self.data.iter())
            .map(|row| {
                let k = (0..d).fold(1.0, |p, j| {
                    let h = self.bw[j];
                    let kv = if self.levels[j] == 0 {
                        let z = row[j] - x[j];
                        (1.0 / (2.0 * std::f64::consts::PI).sqrt())
                            * (-(z * z) / (h * h * 2.0)).exp()
                    } else if row[j] == x[j] {
                        1.0 - h
                    } else {
                        h / (seen[j] - 1.0)
                    };
                    p * kv
                });
                k / continuous_bw
            })
            .collect();
        np_sum(&dens) / self.data.len() as f64
    }
}

/// HpBandSter's `BOHB` config generator with its defaults.
#[derive(Debug)]
pub struct Bohb {
    space: BohbSpace,
    min_points: usize,
    /// Per budget (ascending): the vectors and losses observed.
    observed: Vec<(f64, Vec<Vec<f64>>, Vec<f64>)>,
    /// Per budget: the good and bad densities.
    models: BTreeMap<u64, (Kde, Kde)>,
    /// numpy's global generator (BOHB's own draws) and ConfigSpace's.
    np: RandomState,
    cs: RandomState,
}

const TOP_N_PERCENT: usize = 15;
const NUM_SAMPLES: usize = 64;
const RANDOM_FRACTION: f64 = 1.0 / 3.0;
const BANDWIDTH_FACTOR: f64 = 3.0;
const MIN_BANDWIDTH: f64 = 1e-3;

impl Bohb {
    pub fn new(space: BohbSpace, seed: u32) -> Self {
        Bohb {
            min_points: space.dims.len() + 1,
            space,
            observed: Vec::new(),
            models: BTreeMap::new(),
            np: RandomState::new(seed),
            cs: RandomState::new(seed),
        }
    }

    pub fn space(&self) -> &BohbSpace {
        &self.space
    }

    /// `get_config`: the next config, and whether a model chose it.
    pub fn suggest(&mut self) -> (Config, bool) {
        if self.models.is_empty() || self.np.random_sample() < RANDOM_FRACTION {
            let v = self.space.sample(&mut self.cs);
            return (self.space.config(&v), false);
        }
        let (good, bad) = self.models.values().next_back().expect("a model").clone();
        let levels: Vec<usize> = self.space.dims.iter().map(|(_, d)| d.levels()).collect();
        let mut best = f64::INFINITY;
        let mut best_vector: Option<Vec<f64>> = None;
        for _ in 0..NUM_SAMPLES {
            let idx = self.np.randint(0, good.data.len() as i64) as usize;
            let datum = &good.data[idx];
            let mut vector = Vec::with_capacity(levels.len());
            for ((&m, &bw), &t) in datum.iter().zip(&good.bw).zip(&levels) {
                let bw = bw.max(MIN_BANDWIDTH);
                if t == 0 {
                    let bw = BANDWIDTH_FACTOR * bw;
                    let u = self.np.random_sample();
                    let q = truncnorm::ppf(&[u], &[-m / bw], &[(1.0 - m) / bw])[0];
                    vector.push(q * bw + m);
                } else if self.np.random_sample() < 1.0 - bw {
                    vector.push(m.trunc());
                } else {
                    vector.push(self.np.randint(0, t as i64) as f64);
                }
            }
            let l = good.pdf(&vector);
            let g = bad.pdf(&vector);
            // Python's max(1e-32, g) and max(l, 1e-32): the first kept unless the second is
            // greater (a NaN l stays NaN).
            let g_floor = if g > 1e-32 { g } else { 1e-32 };
            let l_floor = if 1e-32 > l { 1e-32 } else { l };
            let val = g_floor / l_floor;
            if !val.is_finite() {
                if l.is_finite() {
                    best_vector = Some(vector);
                    break;
                }
            } else if val < best {
                best = val;
                best_vector = Some(vector);
            }
        }
        match best_vector {
            Some(mut v) => {
                for (x, &t) in v.iter_mut().zip(&levels) {
                    if t > 0 {
                        *x = x.round_ties_even();
                    }
                }
                (self.space.config(&v), true)
            }
            None => {
                let v = self.space.sample(&mut self.cs);
                (self.space.config(&v), false)
            }
        }
    }

    /// `new_result`: a loss (NaN and infinities as +∞) of `config` at `budget`.
    pub fn observe(&mut self, config: &Config, budget: f64, loss: f64) {
        let loss = if loss.is_finite() {
            loss
        } else {
            f64::INFINITY
        };
        let k = match self.observed.iter().position(|o| o.0 == budget) {
            Some(k) => k,
            None => {
                self.observed.push((budget, Vec::new(), Vec::new()));
                self.observed.sort_by(|a, b| a.0.total_cmp(&b.0));
                self.observed
                    .iter()
                    .position(|o| o.0 == budget)
                    .expect("just added")
            }
        };
        let largest = self.models.keys().next_back().map(|&b| f64::from_bits(b));
        if largest.is_some_and(|m| m > budget) {
            return;
        }
        let Some(vector) = self.space.vector(config) else {
            return;
        };
        let (_, configs, losses) = &mut self.observed[k];
        configs.push(vector);
        losses.push(loss);
        let n = configs.len();
        if n < self.min_points {
            return;
        }
        let n_good = self.min_points.max(TOP_N_PERCENT * n / 100);
        let n_bad = self.min_points.max((100 - TOP_N_PERCENT) * n / 100);
        // np.argsort; losses tied exactly keep their order here (numpy's is not stable).
        let mut idx: Vec<usize> = (0..n).collect();
        idx.sort_by(|&a, &b| losses[a].total_cmp(&losses[b]));
        let pick = |r: std::ops::Range<usize>| -> Vec<Vec<f64>> {
            idx[r.start.min(n)..r.end.min(n)]
                .iter()
                .map(|&i| configs[i].clone())
                .collect()
        };
        let good = pick(0..n_good);
        let bad = pick(n_good..n_good + n_bad);
        let d = self.space.dims.len();
        if good.len() <= d || bad.len() <= d {
            return;
        }
        let levels: Vec<usize> = self.space.dims.iter().map(|(_, d)| d.levels()).collect();
        let models = (
            Kde::fit(good, &levels, MIN_BANDWIDTH),
            Kde::fit(bad, &levels, MIN_BANDWIDTH),
        );
        self.models.insert(budget.to_bits(), models);
    }
}
