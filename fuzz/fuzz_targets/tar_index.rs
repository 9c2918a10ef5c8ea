//! A webdataset shard's bytes: indexing it (every member header, keys, suffixes, labels) gives
//! shards or an error naming the file and byte, never a panic, a hang or an allocation sized by
//! a header; every sample it lists lies inside the file.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = shardkit_fuzz::scratch_dir("tar");
    let shard = dir.join("shard.tar");
    std::fs::write(&shard, data).unwrap();
    if let Ok(shards) = train_data::wds::Shards::open(shard.as_os_str()) {
        for s in &shards.samples {
            assert!(s.offset + s.len <= data.len() as u64, "{s:?} past the file");
        }
    }
});
