//! A sweep's journal (`--resume` reads it): its lines give a definition and entries, or an
//! error naming the line, never a panic; a journal cut anywhere (a killed sweep's torn last
//! line) is cut back to whole lines.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = shardkit_fuzz::scratch_dir("journal");
    let path = dir.join(sweep_engine::journal::FILE);
    std::fs::write(&path, data).unwrap();
    if let Ok((definition, entries, _)) = sweep_engine::journal::Journal::resume(&dir) {
        let whole = data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole as u64);
        for e in &entries {
            let _ = e.trial();
        }
        if let Ok(space) = search::space::Space::parse(&definition.space.to_string()) {
            let _ = space.tpe();
            let _ = space.bohb();
        }
    }
});
