//! The TPE sampler and random search on standard test functions, for scripts/bench/search.py:
//! prints one JSON line per (function, method, seed) with the best value after each trial, and
//! one line with the time a suggestion takes given a history of H finished trials (TPE's, and
//! BOHB's model-based ones with H results at one budget).
//!
//!   tpe_bench TRIALS SEEDS HISTORY

use std::time::Instant;

use search::Mode;
use search::bohb::{Bohb, BohbSpace};
use search::space::{Config, Space};
use search::tpe::{Dist, Observed, Tpe};

/// Branin on [-5, 10] × [0, 15]: minimum 0.397887.
fn branin(x: &[f64]) -> f64 {
    let (a, b, c) = (
        1.0,
        5.1 / (4.0 * std::f64::consts::PI.powi(2)),
        5.0 / std::f64::consts::PI,
    );
    let (r, s, t) = (6.0, 10.0, 1.0 / (8.0 * std::f64::consts::PI));
    a * (x[1] - b * x[0] * x[0] + c * x[0] - r).powi(2) + s * (1.0 - t) * x[0].cos() + s
}

/// Hartmann-6 on [0, 1]^6: minimum −3.32237.
fn hartmann6(x: &[f64]) -> f64 {
    const ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
    const A: [[f64; 6]; 4] = [
        [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
        [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
        [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
        [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
    ];
    const P: [[f64; 6]; 4] = [
        [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
        [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
        [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
        [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
    ];
    -(0..4)
        .map(|i| {
            ALPHA[i]
                * (-(0..6)
                    .map(|j| A[i][j] * (x[j] - P[i][j]).powi(2))
                    .sum::<f64>())
                .exp()
        })
        .sum::<f64>()
}

fn float(low: f64, high: f64) -> Dist {
    Dist::Float {
        low,
        high,
        log: false,
        step: None,
    }
}

type F = fn(&[f64]) -> f64;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let [trials, seeds, history_len] = args[..] else {
        panic!("tpe_bench TRIALS SEEDS HISTORY")
    };
    let functions: [(&str, F, Vec<Dist>); 2] = [
        ("branin", branin, vec![float(-5.0, 10.0), float(0.0, 15.0)]),
        ("hartmann6", hartmann6, vec![float(0.0, 1.0); 6]),
    ];
    for (name, f, space) in &functions {
        let names: Vec<String> = (0..space.len()).map(|d| format!("x{d}")).collect();
        let bspace = bohb_space(&names, space);
        for seed in 0..seeds as u32 {
            let best = bohb_curve(&bspace, &names, *f, seed, trials);
            println!(
                "{}",
                serde_json::json!({"function": name, "method": "bohb", "seed": seed, "best": best})
            );
            // Random search: the TPE sampler's start-up draws, never leaving them.
            for method in ["tpe", "random"] {
                let best = tpe_curve(space, *f, seed, trials, method == "tpe");
                println!(
                    "{}",
                    serde_json::json!({"function": name, "method": method, "seed": seed, "best": best})
                );
            }
        }
        let (ms, model_ms) = suggest_ms(space, bspace, &names, *f, history_len);
        println!(
            "{}",
            serde_json::json!({"function": name, "history": history_len, "suggest_ms": ms,
                "bohb_suggest_ms": model_ms})
        );
    }
}

/// The same space for BOHB: each dimension `names[d]` uniform over `space[d]`'s range.
fn bohb_space(names: &[String], space: &[Dist]) -> BohbSpace {
    let spec: serde_json::Map<String, serde_json::Value> = (names.iter().zip(space))
        .map(|(n, dist)| {
            let Dist::Float { low, high, .. } = *dist else {
                unreachable!()
            };
            (n.clone(), serde_json::json!({"uniform": [low, high]}))
        })
        .collect();
    Space::parse(&serde_json::Value::Object(spec).to_string())
        .unwrap()
        .bohb()
        .unwrap()
}

/// A point as BOHB's config.
fn to_config(names: &[String], x: &[f64]) -> Config {
    (names.iter().zip(x))
        .map(|(n, &v)| (n.clone(), serde_json::json!(v)))
        .collect()
}

/// The best value after each of `trials` of BOHB's model on its own (every result at one
/// budget: no brackets).
fn bohb_curve(bspace: &BohbSpace, names: &[String], f: F, seed: u32, trials: usize) -> Vec<f64> {
    let mut bohb = Bohb::new(bspace.clone(), seed);
    let mut best: Vec<f64> = Vec::with_capacity(trials);
    for _ in 0..trials {
        let (c, _) = bohb.suggest();
        let x: Vec<f64> = names.iter().map(|n| c[n].as_f64().unwrap()).collect();
        let v = f(&x);
        bohb.observe(&c, 1.0, v);
        best.push(best.last().map_or(v, |b| b.min(v)));
    }
    best
}

/// The best value after each of `trials` of TPE (`tpe`), or of its start-up draws alone.
fn tpe_curve(space: &[Dist], f: F, seed: u32, trials: usize, tpe_on: bool) -> Vec<f64> {
    let mut tpe = Tpe::new(space.to_vec(), Mode::Min, seed);
    let mut history: Vec<Observed> = Vec::new();
    let mut best = Vec::with_capacity(trials);
    for _ in 0..trials {
        let x = if tpe_on {
            tpe.suggest(&history)
        } else {
            tpe.suggest(&history[..0])
        };
        let v = f(&x);
        history.push(Observed {
            params: x,
            value: Some(v),
        });
        best.push(best.last().map_or(v, |b: &f64| b.min(v)));
    }
    best
}

/// The milliseconds of one TPE suggestion with `history_len` finished trials, and of one
/// model-based BOHB suggestion with the same history as results at one budget.
fn suggest_ms(
    space: &[Dist],
    bspace: BohbSpace,
    names: &[String],
    f: F,
    history_len: usize,
) -> (f64, f64) {
    let mut tpe = Tpe::new(space.to_vec(), Mode::Min, 0);
    let history: Vec<Observed> = (0..history_len)
        .map(|i| {
            let x: Vec<f64> = space
                .iter()
                .enumerate()
                .map(|(d, dist)| {
                    let Dist::Float { low, high, .. } = *dist else {
                        unreachable!()
                    };
                    let u = ((i * 7919 + d * 104_729) % 1000) as f64 / 1000.0;
                    low + u * (high - low)
                })
                .collect();
            let v = f(&x);
            Observed {
                params: x,
                value: Some(v),
            }
        })
        .collect();
    let reps = 20;
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(tpe.suggest(&history));
    }
    let ms = t.elapsed().as_secs_f64() * 1000.0 / reps as f64;
    let mut bohb = Bohb::new(bspace, 0);
    for o in &history {
        bohb.observe(&to_config(names, &o.params), 1.0, o.value.unwrap());
    }
    let (mut model_ms, mut n) = (0.0, 0);
    while n < reps {
        let t = Instant::now();
        let (_, model) = std::hint::black_box(bohb.suggest());
        if model {
            model_ms += t.elapsed().as_secs_f64() * 1000.0;
            n += 1;
        }
    }
    (ms, model_ms / n as f64)
}
