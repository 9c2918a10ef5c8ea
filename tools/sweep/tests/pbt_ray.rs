//! sweep's population-based training against Ray Tune's own `PopulationBasedTraining` (ray
//! 2.60.0 in the venv, asynchronous), driven through the same controller steps with Python's
//! `random` and numpy seeded alike: which trial runs next, each result's action (continue,
//! pause, or a copy of a better trial), which trial is copied and the config explored from it,
//! operation by operation. Cases draw 2–12 trials, 1–4 slots, spaces of lists (numbers,
//! strings) and distributions (uniform, loguniform, randint, quniform), values outside their
//! list, intervals, burn-in periods, quantile fractions, resample probabilities, ties, NaN
//! values, trials that end or fail, min and max.
//!
//! Configs compare exactly except a float may differ by a few ulps: a log-uniform resample
//! goes through numpy's vectorised `exp`, which differs from the C library's in the last bit
//! for about one value in twenty.

mod common;
use common::Rng;

use search::asha::Mode;
use search::pbt::{Pbt, PbtSettings, mutations};
use search::space::{Config, Space};
use search::{Action, TrialState};
use serde_json::{Value, json};

fn num(v: f64) -> Value {
    if v.is_nan() { json!("NaN") } else { json!(v) }
}

struct Case {
    json: Value,
    outputs: Vec<Value>,
}

fn make_space(rng: &mut Rng) -> Value {
    let mut space = serde_json::Map::new();
    let kinds = [
        json!({"choice": [16, 32, 64, 128]}),
        json!({"grid": ["sgd", "adam", "lamb"]}),
        json!({"uniform": [0.0, 1.0]}),
        json!({"loguniform": [1e-4, 1.0]}),
        json!({"randint": [1, 100]}),
        json!({"quniform": [0.5, 4.0, 0.25]}),
        json!(7),
    ];
    for (k, spec) in kinds.iter().enumerate() {
        if rng.below(2) == 0 || k == 3 {
            space.insert(format!("p{k}"), spec.clone());
        }
    }
    Value::Object(space)
}

fn make_case(rng: &mut Rng) -> Case {
    let seed = rng.below(1000) as u32;
    let settings = PbtSettings {
        perturbation_interval: [1.0, 2.0, 3.0][rng.below(3) as usize],
        burn_in_period: [0.0, 0.0, 2.0][rng.below(3) as usize],
        quantile_fraction: [0.25, 0.5, 0.1, 0.0][rng.below(4) as usize],
        resample_probability: [0.25, 0.0, 0.5, 1.0][rng.below(4) as usize],
        perturbation_factors: [1.2, 0.8],
        mode: if rng.below(2) == 0 {
            Mode::Max
        } else {
            Mode::Min
        },
    };
    let space_json = make_space(rng);
    let space = Space::parse(&space_json.to_string()).unwrap();
    let n = 2 + rng.below(11) as usize;
    let slots = 1 + rng.below(4) as usize;
    let nans = rng.below(4) == 0;
    let mut configs: Vec<Config> = space.generate(n, rng.next());
    configs.truncate(n);
    for c in &mut configs {
        // Now and then a value outside its list (a list mutation then resamples it).
        if rng.below(6) == 0 && c.contains_key("p0") {
            c.insert("p0".into(), json!(48));
        }
    }
    let mut pbt = Pbt::new(settings, mutations(&space), seed).unwrap();
    for (t, c) in configs.iter().enumerate() {
        pbt.add(t, c.clone());
    }
    let length: Vec<u64> = (0..n)
        .map(|_| {
            if rng.below(4) == 0 {
                3 + rng.below(8)
            } else {
                1000
            }
        })
        .collect();
    let error_at: Vec<Option<u64>> = (0..n)
        .map(|_| (rng.below(12) == 0).then(|| 2 + rng.below(8)))
        .collect();
    let quality: Vec<f64> = (0..n).map(|_| rng.below(8) as f64).collect();
    let mut state = vec![TrialState::Pending; n];
    let mut time = vec![0u64; n];
    let mut events = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..300 {
        loop {
            let running = state.iter().filter(|s| **s == TrialState::Running).count();
            if running >= slots {
                break;
            }
            let st = state.clone();
            let chosen = pbt.choose(&|t| st[t]);
            events.push(json!(["choose"]));
            outputs.push(json!([chosen, null]));
            let next = chosen.or_else(|| state.iter().position(|s| *s == TrialState::Pending));
            let Some(i) = next else { break };
            events.push(json!(["start", i]));
            outputs.push(json!([null, null]));
            state[i] = TrialState::Running;
        }
        let running: Vec<usize> = (0..n)
            .filter(|&t| state[t] == TrialState::Running)
            .collect();
        if running.is_empty() {
            break;
        }
        let i = running[rng.below(running.len() as u64) as usize];
        time[i] += 1 + rng.below(4) / 3;
        let t = time[i] as f64;
        let value = if nans && rng.below(6) == 0 {
            f64::NAN
        } else {
            quality[i] + [0.0, 0.5, 1.0][rng.below(3) as usize]
        };
        events.push(json!(["result", i, t, num(value)]));
        let st = state.clone();
        let step = pbt.on_result(i, t, value, &|t| st[t]);
        let (a, exploit) = (step.action, step.exploit);
        let answer = match (a, &exploit) {
            (Action::Pause, Some(_)) => "NOOP",
            (Action::Pause, None) => "PAUSE",
            (Action::Continue, _) => "CONTINUE",
            (Action::Stop, _) => unreachable!("PBT never stops a trial"),
        };
        let copy = exploit.map(|e| {
            let ops: serde_json::Map<String, Value> = (e.operations.into_iter())
                .map(|(k, op)| (k, Value::String(op)))
                .collect();
            json!({"from": e.from, "config": e.config, "ops": ops})
        });
        outputs.push(json!([answer, copy]));
        if a == Action::Pause {
            state[i] = TrialState::Paused;
            continue;
        }
        let ended = common::ended_at(time[i], error_at[i], length[i]);
        if let Some(kind) = ended {
            events.push(json!([kind, i]));
            outputs.push(json!([null, null]));
            state[i] = TrialState::Ended;
        }
    }
    let json = json!({
        "settings": {"perturbation_interval": settings.perturbation_interval,
            "burn_in_period": settings.burn_in_period,
            "quantile_fraction": settings.quantile_fraction,
            "resample_probability": settings.resample_probability,
            "perturbation_factors": settings.perturbation_factors,
            "mode": if settings.mode == Mode::Max { "max" } else { "min" }, "seed": seed},
        "space": space_json,
        "configs": configs,
        "events": events,
    });
    Case { json, outputs }
}

/// Equal JSON, floats within 4 ulps.
fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            x == y || (x.to_bits() as i64 - y.to_bits() as i64).abs() <= 4
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| close(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| close(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn decisions_and_copies_equal_rays_population_based_training() {
    let mut rng = Rng(0x7062_745f_7261_7921);
    let cases: Vec<Case> = (0..200).map(|_| make_case(&mut rng)).collect();
    let input = Value::Array(cases.iter().map(|c| c.json.clone()).collect());
    let ray: Vec<Vec<Value>> = common::reference("ray_pbt.py", &[], &input);
    let (mut copies, mut pauses, mut resamples, mut shifts, mut factors) = (0, 0, 0, 0, 0);
    for (n, (c, want)) in cases.iter().zip(&ray).enumerate() {
        assert_eq!(c.outputs.len(), want.len(), "case {n}");
        for (k, (got, want)) in c.outputs.iter().zip(want).enumerate() {
            assert!(
                close(got, want),
                "case {n}, event {k} {}: ours {got}, Ray's {want}\n{}",
                c.json["events"][k],
                c.json["settings"]
            );
            match got[0].as_str() {
                Some("NOOP") => copies += 1,
                Some("PAUSE") => pauses += 1,
                _ => {}
            }
            for op in got[1]["ops"]
                .as_object()
                .into_iter()
                .flat_map(|o| o.values())
            {
                match op.as_str().unwrap() {
                    "resample" => resamples += 1,
                    s if s.starts_with("shift") => shifts += 1,
                    _ => factors += 1,
                }
            }
        }
    }
    assert!(
        copies > 300 && pauses > 300 && resamples > 100 && shifts > 100 && factors > 100,
        "copies {copies}, pauses {pauses}, resamples {resamples}, shifts {shifts}, factors {factors}"
    );
}
