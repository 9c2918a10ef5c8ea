//! Any line on a tool's stdin: a path, a JSON record (shard, image, latent, error...) or
//! garbage gives items or a BadLine, never a panic; items round-trip through their paths.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(line) = std::str::from_utf8(data) {
        if let Ok(items) = records::parse_input_line(line) {
            for it in items {
                let _ = format!("{it:?}");
            }
        }
    }
});
