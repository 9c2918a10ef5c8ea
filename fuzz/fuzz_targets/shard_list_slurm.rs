//! shard-list's reading of a Slurm job array's variables (`--shard slurm`, with and without -n):
//! any values, even huge or not numbers, give a usage error or a shard below the count; never a
//! panic, an overflow or an allocation sized by them.
#![no_main]

use libfuzzer_sys::fuzz_target;

const VARS: [&str; 5] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
];

fuzz_target!(|data: &[u8]| {
    // The first byte picks -n (absent, or a u32 from the next 4 bytes) and which variables are
    // set; the rest is the variables' values, separated by NUL.
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (shards, rest) = match rest.split_first_chunk::<4>() {
        Some((n, rest)) if mode & 1 == 1 => (Some(u32::from_le_bytes(*n)), rest),
        _ => (None, rest),
    };
    let mut values = rest.split(|&b| b == 0);
    let vars: Vec<(&str, Option<String>)> = VARS
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            let v = values
                .next()
                .map(|v| String::from_utf8_lossy(v).into_owned());
            (k, v.filter(|_| mode & (2 << i) != 0))
        })
        .collect();
    let env = |k: &str| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .and_then(|(_, v)| v.clone())
    };
    if let Ok((parts, only)) = shard_list::shard_choice(None, shards, Some("slurm"), &env) {
        assert!((1..=shard_list::MAX_SHARDS).contains(&parts));
        assert!(only.is_some_and(|k| k < parts));
    }
});
