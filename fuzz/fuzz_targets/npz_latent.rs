//! Any bytes as a latent file (.npz zip or bare .npy): gather-npz's reader returns a latent with
//! a consistent shape and data length, or an error; never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(l) = gather_npz::read_latent(data, "w") {
        let n = l.shape().iter().try_fold(1usize, |a, &d| a.checked_mul(d)).expect("accepted shape overflows usize");
        // Deflate expands at most ~1032:1; more would be an unbounded allocation.
        assert!(n * 4 <= data.len().saturating_mul(1100), "accepted {n} elements from {} bytes", data.len());
        let mut slot = vec![0u8; n * 4];
        l.write_le(&mut slot);
        let _ = l.all_finite();
    }
});
