//! MXNet RecordIO: an index (`key<TAB>offset` lines) and a `.rec` from one input (its first two
//! bytes give the index's length). Opening, listing the image keys (record 0's header), each
//! record's class and each whole record give values or errors naming the file, never a panic,
//! a hang or an allocation sized by a length word or a header label. The index's bytes also
//! stand as the list of files beside (`PREFIX.lst`), whose paths are asked for each key.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let n = (u16::from_le_bytes(*head) as usize).min(rest.len());
    let (idx, rec) = rest.split_at(n);
    let dir = shardkit_fuzz::scratch_dir("rec");
    let prefix = dir.join("train");
    std::fs::write(prefix.with_extension("idx"), idx).unwrap();
    std::fs::write(prefix.with_extension("rec"), rec).unwrap();
    std::fs::write(prefix.with_extension("lst"), idx).unwrap();
    let Ok(r) = train_data::recordio::RecordIo::open(&prefix) else {
        return;
    };
    if let Ok(keys) = r.image_keys() {
        assert!(keys.len() <= r.index.len());
    }
    for &(key, _) in r.index.iter().take(64) {
        let _ = r.packed_path(key);
    }
    for &(_, offset) in r.index.iter().take(64) {
        if let Ok(record) = r.read(offset) {
            assert!(record.payload.len() <= rec.len());
            assert_eq!(r.class(offset).ok().map(f32::to_bits), Some(record.class().to_bits()));
        }
    }
});
