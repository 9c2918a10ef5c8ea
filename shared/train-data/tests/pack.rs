//! data-pack's writers read back by the readers training uses: webdataset shards and MXNet's
//! RecordIO.

use data_pack::{MAGIC, RecordWriter, Sample, ShardWriter};

#[test]
fn shards_read_back_as_written_and_are_cut_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let images: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 700 + i as usize]).collect();
    // Each sample takes 512 + 1024 (image) + 1024 (cls): two fit in 6 KiB with the end.
    let mut w = ShardWriter::new(dir.path(), 6 * 1024, 100);
    for (i, img) in images.iter().enumerate() {
        let s = Sample {
            suffix: "png",
            image: img,
            label: i % 2,
        };
        w.add(&format!("{i:09}"), &s).unwrap();
    }
    let written = w.finish().unwrap();
    assert_eq!(
        written.iter().map(|w| w.samples).collect::<Vec<_>>(),
        [2, 2, 1]
    );
    for w in &written {
        assert_eq!(std::fs::metadata(&w.path).unwrap().len(), w.bytes, "{w:?}");
    }
    let pattern = ShardWriter::pattern(dir.path(), written.len());
    assert!(pattern.ends_with("shard-{000000..000002}.tar"));
    let shards = train_data::wds::Shards::open(pattern.as_os_str()).unwrap();
    assert_eq!(shards.samples.len(), 5);
    for (i, s) in shards.samples.iter().enumerate() {
        assert_eq!(s.label, (i % 2) as i64);
        assert_eq!(shards.read(i, 1 << 20).unwrap(), images[i]);
    }
    // No temporary file is left.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}

#[test]
fn records_read_back_as_written_across_magic_words() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("data");
    // A payload holding the magic word at aligned places (the header is 24 bytes).
    let mut tricky = vec![7u8; 8];
    tricky.extend_from_slice(&MAGIC.to_le_bytes());
    tricky.extend_from_slice(&[1, 2, 3]);
    tricky.extend_from_slice(&MAGIC.to_le_bytes());
    let payloads = [b"abc".to_vec(), tricky, Vec::new()];
    let mut w = RecordWriter::create(&prefix).unwrap();
    for (key, p) in payloads.iter().enumerate() {
        w.add(key as u64, key as f32 * 2.0, p).unwrap();
    }
    w.finish().unwrap();
    let r = train_data::recordio::RecordIo::open(&prefix).unwrap();
    assert_eq!(r.image_keys().unwrap(), [0, 1, 2]);
    for (key, p) in payloads.iter().enumerate() {
        let rec = r.read(r.offset(key as u64).unwrap()).unwrap();
        assert_eq!(
            (rec.flag, rec.label, rec.id, &rec.payload),
            (0, key as f32 * 2.0, key as u64, p)
        );
    }
}
