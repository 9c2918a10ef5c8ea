//! The TPE sampler against Optuna 5.0's own `TPESampler` (defaults, a seed) in the venv: Optuna
//! runs a study through ask and tell (several trials in flight, some failing, values that tie,
//! minimising and maximising; float, log, stepped, integer and categorical parameters) and
//! records every suggestion and value; the sampler here is fed the same history before each ask
//! and must suggest what Optuna did: integers and choices exactly, floats to 1e-9 relative (the
//! special functions' last bits: Optuna's erf is the C library's, numpy's exp/log may be
//! vectorised, here both are Rust's — the chosen candidate is the same).

use search::Mode;
use search::tpe::{Dist, Observed, Tpe};
use serde_json::{Value, json};

/// xorshift64*: the test's own reproducible randomness.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn make_dim(rng: &mut Rng) -> (Value, Dist) {
    match rng.below(5) {
        0 => (
            json!({"kind": "float", "low": -5.0, "high": 5.0, "log": false, "step": null}),
            Dist::Float {
                low: -5.0,
                high: 5.0,
                log: false,
                step: None,
            },
        ),
        1 => (
            json!({"kind": "float", "low": 1e-4, "high": 1.0, "log": true, "step": null}),
            Dist::Float {
                low: 1e-4,
                high: 1.0,
                log: true,
                step: None,
            },
        ),
        2 => (
            json!({"kind": "float", "low": 0.0, "high": 1.0, "log": false, "step": 0.25}),
            Dist::Float {
                low: 0.0,
                high: 1.0,
                log: false,
                step: Some(0.25),
            },
        ),
        3 => (
            json!({"kind": "int", "low": 1, "high": 8}),
            Dist::Int { low: 1, high: 8 },
        ),
        _ => {
            let n = 2 + rng.below(3) as usize;
            (json!({"kind": "cat", "n": n}), Dist::Categorical(n))
        }
    }
}

struct Case {
    json: Value,
    space: Vec<Dist>,
    mode: Mode,
    seed: u32,
}

/// Trials asked up to `slots` at a time; each running one finishes (or, now and then, fails)
/// in a random order.
fn make_case(rng: &mut Rng, seed: u32) -> Case {
    let dims = 1 + rng.below(4) as usize;
    let (specs, space): (Vec<Value>, Vec<Dist>) = (0..dims).map(|_| make_dim(rng)).unzip();
    let mode = if rng.below(2) == 0 {
        Mode::Min
    } else {
        Mode::Max
    };
    let slots = 1 + rng.below(4) as usize;
    let total = 14 + rng.below(30) as usize;
    let mut ops = Vec::new();
    let (mut asked, mut running) = (0, Vec::new());
    while asked < total || !running.is_empty() {
        if asked < total && running.len() < slots {
            ops.push(json!(["ask"]));
            running.push(asked);
            asked += 1;
            continue;
        }
        let k = running.remove(rng.below(running.len() as u64) as usize);
        let kind = if rng.below(12) == 0 { "fail" } else { "tell" };
        ops.push(json!([kind, k]));
    }
    let round = if rng.below(3) == 0 {
        json!(1)
    } else {
        Value::Null
    };
    Case {
        json: json!({"seed": seed, "mode": if mode == Mode::Min { "min" } else { "max" },
            "space": specs, "ops": ops, "round": round}),
        space,
        mode,
        seed,
    }
}

#[test]
fn suggestions_equal_optunas() {
    let mut rng = Rng(0x7e57_7be5);
    let cases: Vec<Case> = (0..40).map(|s| make_case(&mut rng, s)).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cases.json");
    let all: Vec<&Value> = cases.iter().map(|c| &c.json).collect();
    std::fs::write(&path, serde_json::to_string(&all).unwrap()).unwrap();
    let out =
        testkit::succeeds(testkit::python_script("shared/search/tests/optuna_tpe.py").arg(&path));
    let recorded: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let (mut compared, mut after_startup, mut worst) = (0, 0, 0.0f64);
    for (c, rec) in cases.iter().zip(&recorded) {
        let asked: Vec<Vec<f64>> = serde_json::from_value(rec["asked"].clone()).unwrap();
        let values: Vec<f64> = serde_json::from_value(rec["values"].clone()).unwrap();
        let mut tpe = Tpe::new(c.space.clone(), c.mode, c.seed);
        // Trial k: its parameters and None (running), Some(value) or failed.
        let mut trials: Vec<(Vec<f64>, Option<f64>, bool)> = Vec::new();
        let mut told = values.iter();
        for op in c.json["ops"].as_array().unwrap() {
            match op[0].as_str().unwrap() {
                "ask" => {
                    let history: Vec<Observed> = trials
                        .iter()
                        .filter(|t| !t.2)
                        .map(|t| Observed {
                            params: t.0.clone(),
                            value: t.1,
                        })
                        .collect();
                    let finished = history.iter().filter(|o| o.value.is_some()).count();
                    let got = tpe.suggest(&history);
                    let want = &asked[trials.len()];
                    for (d, (g, w)) in got.iter().zip(want).enumerate() {
                        let rel = if g == w {
                            0.0
                        } else {
                            (g - w).abs() / w.abs().max(1e-12)
                        };
                        worst = worst.max(rel);
                        let close = rel <= 1e-9;
                        assert!(
                            close,
                            "case {} trial {} dim {d} ({:?}): {g} vs Optuna's {w}\n{got:?}\n{want:?}",
                            c.seed,
                            trials.len(),
                            c.space[d]
                        );
                    }
                    compared += 1;
                    if finished >= search::tpe::N_STARTUP {
                        after_startup += 1;
                    }
                    // Optuna's values go on (the history is Optuna's, whatever was suggested).
                    trials.push((want.clone(), None, false));
                }
                "tell" => {
                    let k = op[1].as_u64().unwrap() as usize;
                    trials[k].1 = Some(*told.next().unwrap());
                }
                _ => trials[op[1].as_u64().unwrap() as usize].2 = true,
            }
        }
    }
    eprintln!(
        "{compared} suggestions compared, {after_startup} of them by TPE; worst relative difference {worst:e}"
    );
    assert!(after_startup > 300, "{after_startup}");
}
