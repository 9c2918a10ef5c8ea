//! Any line on a tool's stdin: a path, a JSON record (shard, image, latent, error...) or
//! garbage gives items or a BadLine, never a panic; each item's path round-trips through a
//! record's JSON unchanged.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Lines are bytes: a path need not be UTF-8.
    if let Ok(items) = records::parse_input_line(data) {
        for it in items {
            // A path survives a record: written as JSON and read back, it is the same bytes.
            let v = records::os_text::to_json(it.path.as_os_str());
            assert_eq!(records::os_text::from_json(&v).unwrap(), it.path.as_os_str());
        }
    }
});
