//! sweep's median stopping rule against Ray Tune's own `MedianStoppingRule` (ray 2.60.0 in the
//! venv, hard_stop=True) fed the same result streams: up to six trials interleaved, times that
//! sometimes skip, tied values, NaN values, trials completing (their last result passed again,
//! as Ray's controller does), other trials waiting or not when a trial has too few samples
//! (pause), grace 1–3, 1–4 samples required, time slices 0–2, min and max. Every action must be
//! identical.

mod common;
use common::Rng;

use search::Action;
use search::asha::Mode;
use search::median::{Median, MedianSettings};
use serde_json::{Value, json};

fn num(v: f64) -> Value {
    if v.is_nan() { json!("NaN") } else { json!(v) }
}

struct Case {
    settings: MedianSettings,
    events: Vec<(bool, usize, f64, f64, bool)>,
}

/// A stream as a sweep makes it: a trial ends when it reaches its length or when the rule
/// (ours: the streams must be made before Ray sees them) stops it, its last result then passed
/// once more; a paused trial simply goes on later. If Ray decides otherwise, the actions differ
/// (a result Ray gets after its own STOP is reported as "AFTER_STOP").
fn make_case(rng: &mut Rng) -> Case {
    let settings = MedianSettings {
        grace_period: (1 + rng.below(3)) as f64,
        min_samples: 1 + rng.below(4) as usize,
        min_time_slice: rng.below(3) as f64,
        mode: if rng.below(2) == 0 {
            Mode::Max
        } else {
            Mode::Min
        },
    };
    let mut rule = Median::new(settings);
    let n = 2 + rng.below(5) as usize;
    let length: Vec<u64> = (0..n).map(|_| 2 + rng.below(8)).collect();
    let mut time = vec![0.0; n];
    let mut live: Vec<usize> = (0..n).collect();
    let mut events = Vec::new();
    while !live.is_empty() {
        let k = rng.below(live.len() as u64) as usize;
        let i = live[k];
        time[i] += (1 + rng.below(4) / 3) as f64; // now and then skips a step
        let value = match rng.below(12) {
            0 => f64::NAN,
            1..=3 => 5.0, // ties
            _ => rng.below(100) as f64 / 10.0,
        };
        let waiting = rng.below(2) == 0;
        events.push((true, i, time[i], value, waiting));
        let stopped = rule.on_result(i, time[i], value, waiting) == Action::Stop;
        if stopped || time[i] >= length[i] as f64 {
            events.push((false, i, time[i], value, false));
            rule.on_complete(i, Some((time[i], value)));
            live.remove(k);
        }
    }
    Case { settings, events }
}

#[test]
fn decisions_equal_rays_median_stopping_rule() {
    let mut rng = Rng(0x6d65_6469_616e);
    let cases: Vec<Case> = (0..300).map(|_| make_case(&mut rng)).collect();
    let json_cases: Vec<Value> = cases
        .iter()
        .map(|c| {
            json!({
                "settings": {"grace_period": c.settings.grace_period, "min_samples": c.settings.min_samples,
                    "min_time_slice": c.settings.min_time_slice,
                    "mode": if c.settings.mode == Mode::Max { "max" } else { "min" }},
                "events": c.events.iter().map(|&(r, i, t, v, w)|
                    json!([if r { "result" } else { "complete" }, i, t, num(v), w])).collect::<Vec<_>>(),
            })
        })
        .collect();
    let ray: Vec<Vec<String>> = common::reference("ray_median.py", &[], &Value::Array(json_cases));
    let mut counts = [0usize; 3];
    for (n, (c, want)) in cases.iter().zip(&ray).enumerate() {
        let mut rule = Median::new(c.settings);
        let mut got = Vec::new();
        for &(result, i, t, v, waiting) in &c.events {
            if result {
                let a = rule.on_result(i, t, v, waiting);
                counts[a as usize] += 1;
                got.push(match a {
                    Action::Continue => "CONTINUE",
                    Action::Stop => "STOP",
                    Action::Pause => "PAUSE",
                });
            } else {
                rule.on_complete(i, Some((t, v)));
            }
        }
        assert_eq!(got, *want, "case {n}: {:?}", c.settings);
    }
    // Every kind of decision was exercised.
    assert!(counts.iter().all(|&k| k > 50), "{counts:?}");
}
