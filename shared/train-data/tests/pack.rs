//! data-pack's writers read back by the readers training uses: webdataset shards and MXNet's
//! RecordIO.

use std::path::Path;

use data_pack::{MAGIC, RecordWriter, Sample, ShardWriter, Written};

/// `images` as PNG samples `000000000`, `000000001`... of labels 0, 1, 0, 1... in shards of at
/// most `max_bytes` and `max_samples` under `dir`: the shards written.
fn write_shards<I: AsRef<[u8]>>(
    dir: &Path,
    (max_bytes, max_samples): (u64, usize),
    images: &[I],
) -> Vec<Written> {
    let mut w = ShardWriter::new(dir, max_bytes, max_samples);
    for (i, image) in images.iter().enumerate() {
        let s = Sample {
            suffix: "png",
            image: image.as_ref(),
            label: i % 2,
            path: None,
        };
        w.add(&format!("{i:09}"), &s).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn shards_read_back_as_written_and_are_cut_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let images: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 700 + i as usize]).collect();
    // Each sample takes 512 + 1024 (image) + 1024 (cls): two fit in 6 KiB with the end.
    let written = write_shards(dir.path(), (6 * 1024, 100), &images);
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

/// `n` 16×16 PNGs of noise.
fn noise_pngs(n: usize) -> Vec<Vec<u8>> {
    let mut state = 11u32;
    (0..n)
        .map(|_| {
            let pixels: Vec<u8> = (0..16 * 16 * 3)
                .map(|_| {
                    state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (state >> 16) as u8
                })
                .collect();
            let mut png = Vec::new();
            imaging::write_png(&mut png, &pixels, 16, 16, 3).unwrap();
            png
        })
        .collect()
}

fn opts() -> train_data::images::ImageOptions {
    train_data::images::ImageOptions {
        size: 16,
        transform: train_data::images::Transform::None,
        ..Default::default()
    }
}

/// Every sample once, in batches of 4, until one fails: that error.
fn read_all(files: &train_data::images::ImageFiles) -> Result<(), String> {
    let n = files.len() as i64;
    for start in (0..n).step_by(4) {
        let batch: Vec<i64> = (start..(start + 4).min(n)).collect();
        let _batch = files
            .batch(&batch, false, 0, tch::Device::Cpu)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Reads every sample of `files`, cuts `file` (which they are read from) to `len` bytes, and
/// reads them again: the run ends with an error naming the file, the byte and the truncation.
fn read_after_cutting(files: &train_data::images::ImageFiles, file: &Path, len: u64) {
    read_all(files).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.set_len(len).unwrap();
    let e = read_all(files).unwrap_err();
    let name = file.file_name().unwrap().to_str().unwrap();
    assert!(
        e.contains(&format!("{name} at byte {len}")) && e.contains("truncated"),
        "{e}"
    );
    // One line of words: the message once held a run of spaces where its source broke a line.
    assert!(!e.contains("  "), "{e}");
}

#[test]
fn a_rec_cut_short_while_read_ends_the_run_naming_the_file_and_byte() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("data");
    let mut w = RecordWriter::create(&prefix).unwrap();
    for (key, png) in noise_pngs(40).iter().enumerate() {
        w.add(key as u64, (key % 2) as f32, png).unwrap();
    }
    w.finish().unwrap();
    let rec = train_data::recordio::RecordIo::open(&prefix).unwrap();
    let files = train_data::images::ImageFiles::from_records(rec, &prefix, opts(), 0).unwrap();
    // Cut to 2,000 bytes while the run reads it: the first records still decode, the rest are
    // not bad samples to replace but data gone.
    read_after_cutting(&files, &dir.path().join("data.rec"), 2000);
    assert_eq!(files.bad_inputs(), 0, "nothing counted as a bad sample");
}

#[test]
fn a_shard_cut_short_while_read_ends_the_run_naming_the_file_and_byte() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_shards(dir.path(), (1 << 30, 1000), &noise_pngs(40));
    let shards = train_data::wds::Shards::open(written[0].path.as_os_str()).unwrap();
    let files = train_data::images::ImageFiles::from_shards(shards, opts(), 0).unwrap();
    read_after_cutting(&files, &written[0].path, 4000);
}

#[test]
fn a_run_where_most_samples_cannot_be_used_stops_whatever_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let pngs = noise_pngs(8);
    for (i, png) in pngs.iter().enumerate() {
        let class = dir.path().join(format!("c{}", i % 2));
        std::fs::create_dir_all(&class).unwrap();
        // Five of eight are not images.
        let bytes: &[u8] = if i < 5 { b"not an image" } else { png };
        std::fs::write(class.join(format!("{i}.png")), bytes).unwrap();
    }
    let folder = train_data::folder::ImageFolder::scan(dir.path()).unwrap();
    let files = train_data::images::ImageFiles::new(folder, opts(), 0).unwrap();
    let e = read_all(&files).unwrap_err();
    assert!(e.contains("more than half"), "{e}");
}

#[test]
fn a_packed_samples_path_comes_back_through_the_readers() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("imgs");
    // Four images in two classes, one with a name that is not UTF-8 and one holding a tab and
    // a backslash, in a sub-folder.
    let names: [&[u8]; 4] = [
        b"a/x.png",
        b"a/deep/caf\xe9.png",
        b"b/t\tab\\1.png",
        b"b/y.png",
    ];
    for (name, png) in names.iter().zip(noise_pngs(4)) {
        let p = root.join(std::ffi::OsStr::from_bytes(name));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, png).unwrap();
    }
    let folder = train_data::folder::ImageFolder::scan(&root).unwrap();
    for format in [data_pack::Format::Wds, data_pack::Format::Recordio] {
        let out = dir.path().join(format.name());
        let o = data_pack::Options {
            format,
            shard_size: 1 << 20,
            shard_samples: 3,
            shuffle: Some(1),
            max_image_bytes: 1 << 20,
        };
        let packed = data_pack::pack(
            &folder,
            data_pack::OutDir::open(&out, false).unwrap(),
            &folder.classes,
            &o,
            &|| false,
        )
        .unwrap();
        // The samples, and each one's image bytes as the store holds them.
        let (files, bytes): (_, Vec<Vec<u8>>) = match format {
            data_pack::Format::Wds => {
                let pattern = data_pack::ShardWriter::pattern(&out, packed.files.len() - 1);
                let open = || train_data::wds::Shards::open(pattern.as_os_str()).unwrap();
                let shards = open();
                let bytes = (0..shards.samples.len())
                    .map(|i| shards.read(i, 1 << 20).unwrap())
                    .collect();
                let files = train_data::images::ImageFiles::from_shards(open(), opts(), 0);
                (files.unwrap(), bytes)
            }
            data_pack::Format::Recordio => {
                let prefix = out.join("data");
                let open = || train_data::recordio::RecordIo::open(&prefix).unwrap();
                let rec = open();
                let bytes = (rec.image_keys().unwrap().iter())
                    .map(|&k| rec.read(rec.offset(k).unwrap()).unwrap().payload)
                    .collect();
                let files =
                    train_data::images::ImageFiles::from_records(open(), &prefix, opts(), 0);
                (files.unwrap(), bytes)
            }
        };
        assert_eq!(files.len(), 4);
        let mut seen = Vec::new();
        for (i, bytes) in bytes.iter().enumerate() {
            let path = files.packed_path(i).unwrap().unwrap_or_else(|| {
                panic!("{format:?}: sample {i} ({:?}) has no path", files.paths[i])
            });
            // The path names the file the sample was packed from: its class and its bytes.
            let file = root.join(&path);
            let class = path.components().next().unwrap().as_os_str().to_owned();
            assert_eq!(
                files.classes[files.labels[i] as usize], class,
                "{format:?} {path:?}"
            );
            assert_eq!(*bytes, std::fs::read(&file).unwrap(), "{format:?} {path:?}");
            seen.push(path.as_os_str().as_bytes().to_vec());
        }
        seen.sort();
        let mut want: Vec<Vec<u8>> = names.iter().map(|n| n.to_vec()).collect();
        want.sort();
        assert_eq!(seen, want, "{format:?}");
    }
    // Data packed without paths (before they were stored) reads as before, with none.
    let old = dir.path().join("old");
    let png = &noise_pngs(1)[0];
    let written = write_shards(&old, (1 << 20, 100), &[png, png]);
    let shards = train_data::wds::Shards::open(written[0].path.as_os_str()).unwrap();
    let files = train_data::images::ImageFiles::from_shards(shards, opts(), 0).unwrap();
    assert_eq!(files.packed_path(1).unwrap(), None);
    let prefix = old.join("data");
    let mut w = RecordWriter::create(&prefix).unwrap();
    w.add(0, 0.0, png).unwrap();
    w.finish().unwrap();
    let rec = train_data::recordio::RecordIo::open(&prefix).unwrap();
    let files = train_data::images::ImageFiles::from_records(rec, &prefix, opts(), 0).unwrap();
    assert_eq!(files.packed_path(0).unwrap(), None);
}
