//! sweep's HyperBand against Ray Tune's own `HyperBandScheduler` and `HyperBandForBOHB` (ray
//! 2.60.0 in the venv), driven through the same controller steps: which trial the scheduler
//! picks to run, each result's action (continue, pause, stop), which other trials each event
//! stops, and (BOHB's) the budget a result is the model's at. Cases draw max_t 1–30, η 2, 2.5, 3
//! or 4, 1–40 trials, 1–4 slots, results that sometimes skip a step, trials whose command ends
//! before max_t, trials that fail for good, tied values, NaN values, min and max; BOHB's trials
//! are made one at a time, as Ray makes a searcher's. Every output must be identical.

mod common;
use common::Rng;

use search::Action;
use search::Effects;
use search::TrialState;
use search::asha::Mode;
use search::hyperband::{HyperBand, HyperBandSettings};
use serde_json::{Value, json};

fn num(v: f64) -> Value {
    if v.is_nan() { json!("NaN") } else { json!(v) }
}

fn action(a: Action) -> &'static str {
    match a {
        Action::Continue => "CONTINUE",
        Action::Stop => "STOP",
        Action::Pause => "PAUSE",
    }
}

struct Case {
    json: Value,
    /// Ours, per event, as the reference prints it.
    outputs: Vec<Value>,
}

/// Runs a sweep's controller steps with our scheduler, recording the events and our outputs:
/// free slots take the scheduler's choice, else the first pending trial (Ray starts pending
/// trials as well); a random running trial reports next.
fn make_case(rng: &mut Rng, bohb: bool) -> Case {
    let settings = HyperBandSettings {
        max_t: (1 + rng.below(30)) as f64,
        reduction_factor: [2.0, 2.5, 3.0, 4.0][rng.below(4) as usize],
        mode: if rng.below(2) == 0 {
            Mode::Max
        } else {
            Mode::Min
        },
    };
    let mut hb = if bohb {
        HyperBand::for_bohb(settings).unwrap()
    } else {
        HyperBand::new(settings).unwrap()
    };
    let n = 1 + rng.below(40) as usize;
    let slots = 1 + rng.below(4) as usize;
    let nans = rng.below(3) == 0;
    // Some commands end before max_t, some fail at a time of their own.
    let length: Vec<u64> = (0..n)
        .map(|_| match rng.below(4) {
            0 => 1 + rng.below(settings.max_t as u64 + 2),
            _ => 1000,
        })
        .collect();
    let error_at: Vec<Option<u64>> = (0..n)
        .map(|_| (rng.below(10) == 0).then(|| 1 + rng.below(settings.max_t as u64)))
        .collect();
    let quality: Vec<f64> = (0..n).map(|_| rng.below(20) as f64 / 4.0).collect();
    if !bohb {
        for t in 0..n {
            hb.add(t);
        }
    }
    // BOHB's trials are made one at a time: one pending while more remain.
    let mut made = if bohb { 0 } else { n };
    let mut state = vec![TrialState::Pending; n];
    let mut time = vec![0u64; n];
    let mut events: Vec<Value> = Vec::new();
    let mut outputs: Vec<Value> = Vec::new();
    // Ends every trial in `stop`.
    fn end(state: &mut [TrialState], stop: &[usize]) {
        for &s in stop {
            state[s] = TrialState::Ended;
        }
    }
    for _ in 0..5000 {
        loop {
            let running = state.iter().filter(|s| **s == TrialState::Running).count();
            if running >= slots {
                break;
            }
            if made < n && (0..made).all(|t| state[t] != TrialState::Pending) {
                events.push(json!(["add", made]));
                outputs.push(json!([null, [], null]));
                hb.add(made);
                made += 1;
            }
            let st = state.clone();
            let mut chosen = hb.choose(&|t| st[t]);
            let mut stopped = Vec::new();
            // HyperBandForBOHB's choice processes brackets with paused trials when none runs.
            if bohb && chosen.is_none() && !state.contains(&TrialState::Running) {
                let e = hb.unstick(&|t| st[t]);
                end(&mut state, &e.stop);
                stopped = e.stop;
                let st = state.clone();
                chosen = hb.choose(&|t| st[t]);
            }
            events.push(json!(["choose"]));
            outputs.push(json!([chosen, stopped, null]));
            let next = chosen.or_else(|| state.iter().position(|s| *s == TrialState::Pending));
            let Some(i) = next else { break };
            events.push(json!(["start", i]));
            outputs.push(json!([null, [], null]));
            state[i] = TrialState::Running;
        }
        let running: Vec<usize> = (0..n)
            .filter(|&t| state[t] == TrialState::Running)
            .collect();
        if running.is_empty() {
            break; // done, or every trial left paused (where Ray waits)
        }
        let i = running[rng.below(running.len() as u64) as usize];
        time[i] += 1 + rng.below(5) / 4; // now and then skips a step
        let t = time[i] as f64;
        let value = if nans && rng.below(8) == 0 {
            f64::NAN
        } else {
            // Ties between trials of equal quality; a little noise otherwise.
            quality[i] * (1.0 + t / 10.0) + [0.0, 0.5][rng.below(2) as usize]
        };
        events.push(json!(["result", i, t, num(value)]));
        let st = state.clone();
        let (a, effects): (_, Effects) = hb.on_result(i, t, value, &|t| st[t]);
        let budget = effects.budget;
        let mut stopped = effects.stop.clone();
        end(&mut state, &effects.stop);
        match a {
            Action::Stop => {
                // The controller's stop_trial: on_trial_complete, then the trial ends.
                let st = state.clone();
                let e = hb.on_remove(i, &|t| st[t]);
                end(&mut state, &e.stop);
                stopped.extend(e.stop);
                stopped.push(i);
                state[i] = TrialState::Ended;
            }
            Action::Pause => state[i] = TrialState::Paused,
            Action::Continue => {}
        }
        outputs.push(json!([action(a), stopped, budget]));
        if state[i] != TrialState::Running {
            continue;
        }
        let ended = common::ended_at(time[i], error_at[i], length[i]);
        if let Some(kind) = ended {
            events.push(json!([kind, i]));
            let st = state.clone();
            let e = hb.on_remove(i, &|t| st[t]);
            end(&mut state, &e.stop);
            state[i] = TrialState::Ended;
            outputs.push(json!([null, e.stop, null]));
        }
    }
    let json = json!({
        "settings": {"max_t": settings.max_t, "reduction_factor": settings.reduction_factor,
            "mode": if settings.mode == Mode::Max { "max" } else { "min" }, "bohb": bohb},
        "trials": n,
        "events": events,
    });
    Case { json, outputs }
}

#[test]
fn decisions_equal_rays_hyperband_scheduler() {
    let mut rng = Rng(0x6879_7065_7262_616e);
    // The first 300 as HyperBandScheduler, the others as HyperBandForBOHB.
    let cases: Vec<Case> = (0..450).map(|k| make_case(&mut rng, k >= 300)).collect();
    let input = Value::Array(cases.iter().map(|c| c.json.clone()).collect());
    let ray: Vec<Vec<Value>> = common::reference("ray_hyperband.py", &[], &input);
    let (mut pauses, mut stops, mut unpaused, mut others) = (0, 0, 0, 0);
    for (n, (c, want)) in cases.iter().zip(&ray).enumerate() {
        for (k, (got, want)) in c.outputs.iter().zip(want).enumerate() {
            assert_eq!(
                got, want,
                "case {n}, event {k} {}: {}",
                c.json["events"][k], c.json["settings"]
            );
        }
        assert_eq!(c.outputs.len(), want.len(), "case {n}");
        let events = c.json["events"].as_array().unwrap();
        let mut paused = std::collections::HashSet::new();
        for (e, o) in events.iter().zip(&c.outputs) {
            match (e[0].as_str(), o[0].as_str()) {
                (Some("result"), Some("PAUSE")) => {
                    pauses += 1;
                    paused.insert(e[1].as_u64().unwrap());
                }
                (Some("result"), Some("STOP")) => stops += 1,
                // A paused trial chosen to run again: a halving unpaused it.
                (Some("choose"), _) if o[0].as_u64().is_some_and(|t| paused.remove(&t)) => {
                    unpaused += 1
                }
                _ => {}
            }
            others += o[1].as_array().unwrap().len();
        }
    }
    // Every kind of step was exercised, many times.
    assert!(
        pauses > 200 && stops > 200 && unpaused > 100 && others > 200,
        "pauses {pauses}, stops {stops}, unpaused {unpaused}, others stopped {others}"
    );
}
