//! A search space (`--space`'s JSON): parsed, it gives configs of finite values for every
//! searcher (random, TPE's and BOHB's dimensions), or an error naming what is wrong, never a
//! panic, a NaN or an allocation sized by the text (a grid's product is bounded first).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(space) = search::space::Space::parse(text) else {
        return;
    };
    if space.trial_count(2) <= 1000 {
        for config in space.generate(2, 7) {
            // serde_json cannot hold NaN or infinities: a config is finite by construction;
            // it must also print and read back.
            let again: serde_json::Value =
                serde_json::from_str(&serde_json::Value::Object(config.clone()).to_string())
                    .unwrap();
            assert_eq!(again, serde_json::Value::Object(config));
        }
    }
    let _ = space.tpe();
    let _ = space.bohb();
});
