//! sweep's ASHA against Ray Tune's own `AsyncHyperBandScheduler` (ray 2.60.0 in the venv), fed
//! the same result streams: random interleavings of up to four trials at a time, times that
//! sometimes skip a rung, tied values, NaN values (as Python reports a diverged metric), trials
//! that end before max_t, over rf 2/3/4, grace 1/2, several max_t, 1-3 brackets, min and max. Every decision, every trial's bracket and every
//! value recorded at every rung must be identical (exact equality: the same float operations in
//! the same order, numpy's percentile included).

use std::collections::BTreeMap;
mod common;
use common::Rng;

use search::{Action, Asha, AshaSettings, Mode};
use serde_json::{Value, json};

/// A value as the JSON both sides read: NaN as the string "NaN".
fn num(v: f64) -> Value {
    if v.is_nan() { json!("NaN") } else { json!(v) }
}

struct Case {
    json: Value,
    actions: Vec<&'static str>,
    brackets: Vec<usize>,
    rungs: Value,
}

fn make_case(rng: &mut Rng, seed: u32) -> Case {
    let rf = [2.0, 3.0, 4.0][rng.below(3) as usize];
    let grace = [1.0, 2.0][rng.below(2) as usize];
    let max_t = [4.0, 8.0, 9.0, 10.0, 16.0, 27.0, 30.0][rng.below(7) as usize];
    let brackets = 1 + rng.below(3) as usize;
    let mode = if rng.below(2) == 0 {
        Mode::Max
    } else {
        Mode::Min
    };
    let settings = AshaSettings {
        max_t,
        grace_period: grace,
        reduction_factor: rf,
        brackets,
        mode,
    };
    let n = 5 + rng.below(26) as usize;
    let concurrency = 1 + rng.below(4) as usize;
    let ties = rng.below(2) == 0;
    // A third of the cases have NaN results, about one in eight of their values.
    let nans = rng.below(3) == 0;
    let mut asha = Asha::new(settings, seed).unwrap();
    let brackets_of: Vec<usize> = (0..n).map(|t| asha.add(t)).collect();
    let mut events = Vec::new();
    let mut actions = Vec::new();
    let mut next = 0usize;
    let mut active: Vec<(usize, f64)> = Vec::new();
    while next < n || !active.is_empty() {
        while active.len() < concurrency && next < n {
            active.push((next, 0.0));
            next += 1;
        }
        let k = rng.below(active.len() as u64) as usize;
        let (trial, time) = active[k];
        let step = match rng.below(10) {
            0 => 2.0,
            1 => 3.0,
            _ => 1.0,
        };
        let time = time + step;
        let value = if nans && rng.below(8) == 0 {
            f64::NAN
        } else if ties {
            (rng.below(5) as f64) / 4.0
        } else {
            (rng.unit() * 1000.0).round() / 10.0
        };
        events.push(json!(["result", trial, time, num(value)]));
        let v = asha.on_result(trial, time, value);
        actions.push(if v.action == Action::Stop {
            "STOP"
        } else {
            "CONTINUE"
        });
        if v.action == Action::Stop || rng.below(12) == 0 {
            asha.on_complete(trial, Some((time, value)));
            events.push(json!(["complete", trial, time, num(value)]));
            active.remove(k);
        } else {
            active[k].1 = time;
        }
    }
    let rungs: Vec<Vec<Value>> = asha
        .recorded()
        .into_iter()
        .map(|b| {
            b.into_iter()
                .map(|(m, rec)| {
                    json!([
                        m,
                        rec.into_iter()
                            .map(|(t, v)| (t.to_string(), num(v)))
                            .collect::<BTreeMap<_, _>>()
                    ])
                })
                .collect()
        })
        .collect();
    let json = json!({
        "settings": {"mode": if mode == Mode::Max { "max" } else { "min" }, "max_t": max_t, "grace_period": grace, "reduction_factor": rf, "brackets": brackets},
        "seed": seed, "trials": n, "events": events,
    });
    Case {
        json,
        actions,
        brackets: brackets_of,
        rungs: json!(rungs),
    }
}

#[test]
fn decisions_brackets_and_rungs_equal_ray_tunes() {
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    let cases: Vec<Case> = (0..400).map(|i| make_case(&mut rng, i)).collect();
    let ray = common::ray(
        "replay",
        &Value::Array(cases.iter().map(|c| c.json.clone()).collect()),
    );
    let mut decisions = 0;
    let mut nan_results = 0;
    let mut stops = 0;
    for (i, (c, r)) in cases.iter().zip(&ray).enumerate() {
        let ray_actions: Vec<&str> = r["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(ray_actions, c.actions, "case {i}: {}", c.json["settings"]);
        let ray_brackets: Vec<usize> = r["brackets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(ray_brackets, c.brackets, "case {i}: brackets");
        // Milestones as numbers (Ray's are ints where ours are integral floats).
        let norm = |v: &Value| -> Value {
            json!(
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|r| json!([r[0].as_f64().unwrap(), r[1]]))
                        .collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            )
        };
        assert_eq!(norm(&r["rungs"]), norm(&c.rungs), "case {i}: rungs");
        decisions += c.actions.len();
        nan_results += c.json["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e[0] == "result" && e[3] == "NaN")
            .count();
        stops += c.actions.iter().filter(|a| **a == "STOP").count();
    }
    // The streams exercise both answers a fair amount.
    assert!(
        stops > decisions / 10 && stops < decisions / 2,
        "{stops} stops of {decisions}"
    );
    assert!(nan_results > 100, "{nan_results} NaN results");
    eprintln!(
        "{} cases, {decisions} decisions ({stops} stops): identical to Ray Tune",
        cases.len()
    );
}
