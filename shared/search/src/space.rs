//! The search space: Ray Tune's sampling primitives written as JSON, and the trial configs they
//! generate.
//!
//! ```json
//! {"lr": {"loguniform": [1e-4, 1]}, "batch_size": {"grid": [32, 64]}, "epochs": 10}
//! ```
//!
//! Generation follows Ray's `BasicVariantGenerator`: for each of `--samples` repetitions, every
//! combination of the grid parameters (the first parameter in key order varying fastest, as
//! `_grid_search_generator` does over its sorted grid variables), each with fresh random draws
//! for the other parameters. Keys are kept in byte order, as Ray sorts its grid variables. The
//! draws come from one MT19937-64 stream seeded with `--seed`, so a sweep is reproducible; they
//! are not Ray's numpy draws.

use std::collections::BTreeMap;

use crate::{Error, Result};
use rand_mt::Mt64;
use serde_json::{Map, Value};

use crate::tpe::Dist;

/// One parameter of the space.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// A plain value, the same in every trial.
    Const(Value),
    /// `{"grid": [...]}` (or Ray's name `grid_search`): every value, in the order listed.
    Grid(Vec<Value>),
    /// `{"choice": [...]}`: one value drawn uniformly.
    Choice(Vec<Value>),
    /// `{"uniform": [a, b]}`: a float in [a, b).
    Uniform(f64, f64),
    /// `{"loguniform": [a, b]}`: a float whose logarithm is uniform in [ln a, ln b).
    LogUniform(f64, f64),
    /// `{"randint": [a, b]}`: an integer in [a, b) (b excluded, as numpy's and Ray's).
    RandInt(i64, i64),
    /// `{"quniform": [a, b, q]}`: uniform in [a, b), rounded to a multiple of q (half to even,
    /// as `np.round`).
    QUniform(f64, f64, f64),
}

/// A trial's parameter values, keys in byte order.
pub type Config = Map<String, Value>;

/// The parsed space, keys in byte order.
#[derive(Debug, Clone, PartialEq)]
pub struct Space(pub BTreeMap<String, Param>);

impl Space {
    /// Parses the JSON object of a space file.
    pub fn parse(text: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(text).map_err(Error::NotJson)?;
        let Value::Object(obj) = v else {
            bail!("the search space must be a JSON object of parameters")
        };
        let mut params = BTreeMap::new();
        for (name, spec) in obj {
            if !valid_name(&name) {
                bail!(
                    "parameter name {name:?}: use letters, digits and _ (it is a {{placeholder}} in the command)"
                );
            }
            let p = Param::parse(&spec).map_err(|e| Error::Within {
                what: format!("parameter {name:?}"),
                error: Box::new(e),
            })?;
            params.insert(name, p);
        }
        Ok(Space(params))
    }

    /// Parameter names, in byte order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// How many trials `samples` repetitions of the space make (every grid combination each
    /// time), without overflow.
    pub fn trial_count(&self, samples: usize) -> u128 {
        self.grid().iter().fold(samples as u128, |n, (_, v)| {
            n.saturating_mul(v.len() as u128)
        })
    }

    /// The grid parameters, in key order.
    fn grid(&self) -> Vec<(&String, &Vec<Value>)> {
        self.0
            .iter()
            .filter_map(|(k, p)| match p {
                Param::Grid(v) => Some((k, v)),
                _ => None,
            })
            .collect()
    }

    /// Every trial's config, in generation order (see the module documentation).
    pub fn generate(&self, samples: usize, seed: u64) -> Vec<Config> {
        let mut rng = Rng(Mt64::new(seed));
        let grid = self.grid();
        let combos: usize = grid.iter().map(|(_, v)| v.len()).product();
        let mut out = Vec::with_capacity(samples * combos);
        for _ in 0..samples {
            for mut c in 0..combos {
                let mut config = Config::new();
                // Mixed radix, first grid parameter fastest.
                let mut chosen = BTreeMap::new();
                for (k, values) in &grid {
                    chosen.insert(*k, values[c % values.len()].clone());
                    c /= values.len();
                }
                for (k, p) in &self.0 {
                    let v = match p {
                        Param::Grid(_) => chosen.remove(k).expect("grid value chosen above"),
                        other => other.draw(&mut rng),
                    };
                    config.insert(k.clone(), v);
                }
                out.push(config);
            }
        }
        out
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Param {
    /// One search-space function (Ray Tune's names: an arm each, with its checks), or a plain
    /// value.
    fn parse(spec: &Value) -> Result<Self> {
        let Value::Object(obj) = spec else {
            return Ok(Param::Const(spec.clone()));
        };
        if obj.len() != 1 {
            bail!(
                "expected one of grid, choice, uniform, loguniform, randint, quniform as the only key, or a plain value, got {spec}"
            );
        }
        let (kind, args) = obj.iter().next().expect("one entry");
        let list = |n: Option<usize>| -> Result<&Vec<Value>> {
            match args {
                Value::Array(a) if n.is_none_or(|n| a.len() == n) && !a.is_empty() => Ok(a),
                _ => match n {
                    Some(n) => bail!("{kind} takes a list of {n} numbers, got {args}"),
                    None => bail!("{kind} takes a non-empty list of values, got {args}"),
                },
            }
        };
        let nums = |n: usize| -> Result<Vec<f64>> {
            list(Some(n))?
                .iter()
                .map(|v| {
                    v.as_f64().filter(|f| f.is_finite()).ok_or_else(|| {
                        Error::Invalid(format!("{kind}: {v} is not a finite number"))
                    })
                })
                .collect()
        };
        let p = match kind.as_str() {
            "grid" | "grid_search" => Param::Grid(list(None)?.clone()),
            "choice" => Param::Choice(list(None)?.clone()),
            "uniform" => {
                let v = nums(2)?;
                ordered(kind, v[0], v[1])?;
                Param::Uniform(v[0], v[1])
            }
            "loguniform" => {
                let v = nums(2)?;
                ordered(kind, v[0], v[1])?;
                if v[0] <= 0.0 {
                    bail!("loguniform needs 0 < a < b, got [{}, {}]", v[0], v[1]);
                }
                Param::LogUniform(v[0], v[1])
            }
            "randint" => Param::randint(list(Some(2))?)?,
            "quniform" => Param::quniform(&nums(3)?)?,
            other => bail!(
                "unknown search primitive {other:?} (grid, choice, uniform, loguniform, randint, quniform)"
            ),
        };
        Ok(p)
    }

    /// `randint`'s [a, b]: integers, a < b (b is excluded).
    fn randint(a: &[Value]) -> Result<Self> {
        let ints: Vec<i64> = a
            .iter()
            .map(|v| {
                v.as_i64()
                    .ok_or_else(|| Error::Invalid(format!("randint: {v} is not an integer")))
            })
            .collect::<Result<_>>()?;
        if ints[0] >= ints[1] {
            bail!(
                "randint needs a < b (b is excluded), got [{}, {}]",
                ints[0],
                ints[1]
            );
        }
        Ok(Param::RandInt(ints[0], ints[1]))
    }

    /// `quniform`'s [a, b, q]: a ≤ b, q positive and not so small that a / q or b / q leaves
    /// the doubles (a draw is round(x / q) q).
    fn quniform(v: &[f64]) -> Result<Self> {
        ordered("quniform", v[0], v[1])?;
        if v[2] <= 0.0 {
            bail!("quniform's q must be positive, got {}", v[2]);
        }
        if !(v[0] / v[2]).is_finite() || !(v[1] / v[2]).is_finite() {
            bail!(
                "quniform [{}, {}, {}]: q is too small for the range (a / q or b / q is past the largest double)",
                v[0],
                v[1],
                v[2]
            );
        }
        Ok(Param::QUniform(v[0], v[1], v[2]))
    }

    fn draw(&self, rng: &mut Rng) -> Value {
        match self {
            Param::Const(v) => v.clone(),
            Param::Grid(_) => unreachable!("grid values are enumerated, not drawn"),
            Param::Choice(v) => v[rng.below(v.len() as u64) as usize].clone(),
            Param::Uniform(a, b) => float(rng.uniform(*a, *b)),
            Param::LogUniform(a, b) => float(rng.uniform(a.ln(), b.ln()).exp()),
            Param::RandInt(a, b) => Value::from(a.wrapping_add(rng.below(b.abs_diff(*a)) as i64)),
            Param::QUniform(a, b, q) => float((rng.uniform(*a, *b) / q).round_ties_even() * q),
        }
    }
}

/// The space as the TPE sampler sees it: every drawn parameter a dimension (in key order, as
/// Optuna sorts them), plain values kept aside.
#[derive(Debug, Clone, PartialEq)]
pub struct TpeSpace {
    names: Vec<String>,
    dists: Vec<Dist>,
    /// The values of each categorical dimension (empty for the others).
    choices: Vec<Vec<Value>>,
    consts: Vec<(String, Value)>,
}

impl Space {
    /// The TPE sampler's dimensions: `uniform` and `loguniform` are Optuna's float
    /// distributions, `randint` [a, b) its int [a, b − 1], `quniform` [a, b, q] its float with
    /// step q (b − a must be a multiple of q), `choice` its categorical. A grid is refused (TPE
    /// draws every parameter: a `choice` is the same values, drawn), as are draws of one value.
    pub fn tpe(&self) -> Result<TpeSpace> {
        let mut t = TpeSpace {
            names: Vec::new(),
            dists: Vec::new(),
            choices: Vec::new(),
            consts: Vec::new(),
        };
        for (name, p) in &self.0 {
            let (dist, choices) = match p {
                Param::Const(v) => {
                    t.consts.push((name.clone(), v.clone()));
                    continue;
                }
                Param::Grid(_) => bail!(
                    "parameter {name:?}: a grid is enumerated, TPE draws every parameter: use {{\"choice\": [...]}}"
                ),
                Param::Choice(v) if v.len() < 2 => {
                    bail!(
                        "parameter {name:?}: a choice of one value is a plain value: write the value"
                    )
                }
                Param::Choice(v) => (Dist::Categorical(v.len()), v.clone()),
                Param::Uniform(a, b) => (
                    Dist::Float {
                        low: *a,
                        high: *b,
                        log: false,
                        step: None,
                    },
                    vec![],
                ),
                Param::LogUniform(a, b) => (
                    Dist::Float {
                        low: *a,
                        high: *b,
                        log: true,
                        step: None,
                    },
                    vec![],
                ),
                // b - a in i64 wraps for the widest ranges (it made them "one value").
                Param::RandInt(a, b) if b.abs_diff(*a) < 2 => {
                    bail!("parameter {name:?}: randint [{a}, {b}) has one value: write the value")
                }
                Param::RandInt(a, b) => (
                    Dist::Int {
                        low: *a,
                        high: b - 1,
                    },
                    vec![],
                ),
                Param::QUniform(a, b, q) => {
                    let steps = (b - a) / q;
                    if (steps - steps.round()).abs() > 1e-9 * steps.abs().max(1.0) {
                        bail!(
                            "parameter {name:?}: with TPE, quniform [a, b, q] needs b − a to be a multiple of q (its values are a, a + q, …, b)"
                        );
                    }
                    (
                        Dist::Float {
                            low: *a,
                            high: *b,
                            log: false,
                            step: Some(*q),
                        },
                        vec![],
                    )
                }
            };
            t.names.push(name.clone());
            t.dists.push(dist);
            t.choices.push(choices);
        }
        if t.dists.is_empty() {
            bail!("the space draws no parameter: TPE has nothing to choose");
        }
        Ok(t)
    }
}

impl TpeSpace {
    pub fn dists(&self) -> &[Dist] {
        &self.dists
    }

    /// A trial's config from the sampler's values (an index for a choice).
    pub fn config(&self, values: &[f64]) -> Config {
        let mut c = Config::new();
        for (k, v) in &self.consts {
            c.insert(k.clone(), v.clone());
        }
        for (((name, d), choices), &x) in self
            .names
            .iter()
            .zip(&self.dists)
            .zip(&self.choices)
            .zip(values)
        {
            let v = match d {
                Dist::Categorical(_) => choices[x as usize].clone(),
                Dist::Int { .. } => Value::from(x as i64),
                Dist::Float { .. } => float(x),
            };
            c.insert(name.clone(), v);
        }
        c
    }

    /// The sampler's values of a config this space made (None if it is not one).
    pub fn values(&self, config: &Config) -> Option<Vec<f64>> {
        self.names
            .iter()
            .zip(&self.dists)
            .zip(&self.choices)
            .map(|((name, d), choices)| {
                let v = config.get(name)?;
                match d {
                    Dist::Categorical(_) => choices.iter().position(|c| c == v).map(|i| i as f64),
                    _ => v.as_f64(),
                }
            })
            .collect()
    }
}

fn ordered(kind: &str, a: f64, b: f64) -> Result<()> {
    if a >= b {
        bail!("{kind} needs a < b, got [{a}, {b}]");
    }
    // Draws are a + (b - a) u: a width past the largest double would draw infinities.
    if !(b - a).is_finite() {
        bail!("{kind} [{a}, {b}]: b - a is past the largest double: narrow the range");
    }
    Ok(())
}

fn float(f: f64) -> Value {
    serde_json::Number::from_f64(f)
        .map(Value::Number)
        .expect("draws from finite bounds are finite")
}

struct Rng(Mt64);

impl Rng {
    /// A double in [0, 1) with 53 random bits.
    fn next_f64(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn uniform(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.next_f64()
    }

    /// Uniform in [0, n), unbiased (rejection of the incomplete last block).
    fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.0.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn space(v: Value) -> Space {
        Space::parse(&v.to_string()).unwrap()
    }

    #[test]
    fn grid_times_samples_first_key_fastest() {
        let s = space(json!({"b": {"grid": [1, 2]}, "a": {"grid": ["x", "y", "z"]}, "c": 7}));
        let configs = s.generate(2, 0);
        assert_eq!(configs.len(), 12);
        let pairs: Vec<(Value, Value)> = configs
            .iter()
            .map(|c| (c["a"].clone(), c["b"].clone()))
            .collect();
        assert_eq!(
            pairs[..4],
            [
                (json!("x"), json!(1)),
                (json!("y"), json!(1)),
                (json!("z"), json!(1)),
                (json!("x"), json!(2))
            ]
        );
        assert_eq!(
            pairs[6],
            (json!("x"), json!(1)),
            "the second sample starts the grid again"
        );
        assert!(configs.iter().all(|c| c["c"] == 7));
    }

    #[test]
    fn draws_are_reproducible_and_within_bounds() {
        let s = space(json!({
            "lr": {"loguniform": [1e-4, 1e-1]}, "m": {"uniform": [0.5, 0.99]}, "bs": {"choice": [16, 32, 64]},
            "layers": {"randint": [2, 5]}, "wd": {"quniform": [0.0, 1.0, 0.25]}
        }));
        let a = s.generate(200, 7);
        assert_eq!(a, s.generate(200, 7));
        assert_ne!(a, s.generate(200, 8));
        let mut layers_seen = std::collections::BTreeSet::new();
        for c in &a {
            let lr = c["lr"].as_f64().unwrap();
            assert!((1e-4..1e-1).contains(&lr), "{lr}");
            assert!((0.5..0.99).contains(&c["m"].as_f64().unwrap()));
            assert!([16, 32, 64].contains(&c["bs"].as_i64().unwrap()));
            layers_seen.insert(c["layers"].as_i64().unwrap());
            let wd = c["wd"].as_f64().unwrap();
            assert!([0.0, 0.25, 0.5, 0.75, 1.0].contains(&wd), "{wd}");
        }
        assert_eq!(
            layers_seen.into_iter().collect::<Vec<_>>(),
            [2, 3, 4],
            "randint excludes b"
        );
        // Log-uniform: about half of the draws below the geometric mean.
        let below = a
            .iter()
            .filter(|c| c["lr"].as_f64().unwrap() < (1e-4f64 * 1e-1).sqrt())
            .count();
        assert!(
            (70..130).contains(&below),
            "{below} of 200 below the geometric mean"
        );
    }

    #[test]
    fn tpe_dimensions_in_key_order_and_configs_both_ways() {
        let s = space(
            json!({"opt": {"choice": ["sgd", "adam"]}, "lr": {"loguniform": [1e-4, 1]},
            "bs": {"randint": [16, 65]}, "drop": {"quniform": [0, 0.5, 0.1]}, "epochs": 3}),
        );
        let t = s.tpe().unwrap();
        assert_eq!(
            t.dists(),
            [
                Dist::Int { low: 16, high: 64 },
                Dist::Float {
                    low: 0.0,
                    high: 0.5,
                    log: false,
                    step: Some(0.1)
                },
                Dist::Float {
                    low: 1e-4,
                    high: 1.0,
                    log: true,
                    step: None
                },
                Dist::Categorical(2),
            ]
        );
        let c = t.config(&[32.0, 0.2, 0.01, 1.0]);
        assert_eq!(
            Value::Object(c.clone()),
            json!({"bs": 32, "drop": 0.2, "epochs": 3, "lr": 0.01, "opt": "adam"})
        );
        assert_eq!(t.values(&c), Some(vec![32.0, 0.2, 0.01, 1.0]));
        for (bad, why) in [
            (json!({"a": {"grid": [1, 2]}}), "grid"),
            (json!({"a": {"choice": [1]}}), "one value"),
            (json!({"a": {"randint": [3, 4]}}), "one value"),
            (
                json!({"a": {"randint": [i64::MAX - 1, i64::MAX]}}),
                "one value",
            ),
            (json!({"a": {"quniform": [0, 1, 0.3]}}), "multiple of q"),
            (json!({"a": 1}), "no parameter"),
        ] {
            let e = space(bad).tpe().unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        // The widest ranges are two values and more, not "one value" (b - a wrapped).
        let wide = space(json!({"a": {"randint": [i64::MIN, i64::MAX]}}));
        assert!(wide.tpe().is_ok());
        let wide = space(json!({"a": {"randint": [-5, i64::MAX]}}));
        assert!(wide.tpe().is_ok());
    }

    #[test]
    fn bad_spaces_are_refused_with_the_parameter_named() {
        for (v, want) in [
            (json!([1, 2]), "JSON object"),
            (json!({"lr": {"uniform": [1, 0]}}), "\"lr\""),
            (json!({"lr": {"loguniform": [0, 1]}}), "0 < a"),
            (json!({"x": {"normal": [0, 1]}}), "unknown search primitive"),
            (json!({"x": {"grid": []}}), "non-empty"),
            (json!({"x": {"randint": [1.5, 3]}}), "not an integer"),
            // Widths past the largest double drew infinities (a panic, BOHB's null).
            (json!({"x": {"uniform": [-1e308, 1e308]}}), "largest double"),
            (
                json!({"x": {"quniform": [-1e308, 1e308, 1]}}),
                "largest double",
            ),
            (
                json!({"x": {"quniform": [0, 1e300, 1e-300]}}),
                "q is too small",
            ),
            (json!({"a-b": 1}), "placeholder"),
        ] {
            let e = format!("{:#}", Space::parse(&v.to_string()).unwrap_err());
            assert!(e.contains(want), "{v}: {e}");
        }
    }
}
