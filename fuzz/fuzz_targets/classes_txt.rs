//! `classes.txt` (the class names beside packed data, one per line): read back, it is refused
//! (empty, an empty line, a name twice) or names that `pack` can write; written again, it reads
//! back as the same names, byte for byte.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = shardkit_fuzz::scratch_dir("classes");
    let path = dir.join("in.txt");
    std::fs::write(&path, data).unwrap();
    let Ok(names) = data_pack::read_classes(&path) else {
        return;
    };
    assert!(!names.is_empty() && names.len() <= data.len());
    data_pack::check_class_names(&names).expect("what was read can be written");
    let out = dir.join("out");
    let written = data_pack::write_classes(&out, &names).unwrap();
    assert_eq!(data_pack::read_classes(&written).unwrap(), names);
    let beside = data_pack::read_classes_beside(&out.join("shard-000000.tar")).unwrap();
    assert_eq!(beside.as_ref(), Some(&names));
});
