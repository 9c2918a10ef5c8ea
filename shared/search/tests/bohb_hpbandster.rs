//! BOHB's config generator against HpBandSter's own, recorded (`hpbandster_bohb.py` wrote
//! `bohb_hpbandster.json` with hpbandster 0.7.4, ConfigSpace 1.2.2, statsmodels 0.15.0, scipy
//! 1.17.1, numpy 2.4.6; HpBandSter is not in the project's venv). 20 runs of 40 configs over
//! five spaces (floats, log floats, integers, categories, mixed), each observed at budgets 1, 3
//! and 9 with a noisy loss, so that models are fitted per budget, replaced by larger budgets'
//! and sampled from. Every config must be the recorded one and come the same way (random or
//! from the model): categories and integers equal, floats within 1e-12 relative (the last
//! bits of numpy's vectorised `exp` and scipy's `ndtri_exp` are not reproduced, and ConfigSpace
//! rounds values to 13 places).

use search::bohb::Bohb;
use search::space::Space;
use serde_json::Value;

fn close(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_f64() || b.is_f64() => {
            x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        _ => a == b,
    }
}

#[test]
fn configs_equal_hpbandsters_bohb() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/bohb_hpbandster.json");
    let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (mut model_picks, mut total) = (0, 0);
    for (n, case) in cases.iter().enumerate() {
        let space = Space::parse(&case["space"].to_string())
            .unwrap()
            .bohb()
            .unwrap();
        let mut bohb = Bohb::new(space, case["seed"].as_u64().unwrap() as u32);
        for (k, e) in case["events"].as_array().unwrap().iter().enumerate() {
            let (config, model) = bohb.suggest();
            let want = e["config"].as_object().unwrap();
            assert_eq!(
                model,
                e["model"].as_bool().unwrap(),
                "case {n}, config {k}: model pick"
            );
            assert_eq!(config.len(), want.len(), "case {n}, config {k}");
            for (name, v) in want {
                assert!(
                    close(&config[name], v),
                    "case {n}, config {k}: {name} = {} here, {v} in HpBandSter's ({config:?})",
                    config[name]
                );
            }
            model_picks += usize::from(model);
            total += 1;
            // The recorded config is observed (as in the recorded run).
            bohb.observe(
                want,
                e["budget"].as_f64().unwrap(),
                e["loss"].as_f64().unwrap(),
            );
        }
    }
    assert_eq!(total, 800);
    assert!(model_picks > 300, "{model_picks} model picks");
}
