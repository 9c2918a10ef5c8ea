//! A webdataset sample's image is a member with a suffix an image folder takes: the shard reader
//! and the folder reader (and so `pack`, `shard-list --images`) agree on what an image file is.

mod common;

use common::run_script as run;
use train_data::folder::is_image_name;
use train_data::wds::Shards;

#[test]
fn a_samples_image_has_a_suffix_the_folder_reader_takes() {
    let tmp = tempfile::tempdir().unwrap();
    let suffixes = [
        "jpg", "JPG", "Jpeg", "png", "ppm", "bmp", "pgm", "tif", "TIFF", "webp", "gif", "pbm",
        "pnm", "jpe", "txt",
    ];
    // One sample per suffix (key k<i>, its class i), written as tar(1) would.
    run(
        r#"
import sys, io, tarfile
with tarfile.open(sys.argv[1] + "/s.tar", "w", format=tarfile.GNU_FORMAT) as t:
    for i, s in enumerate(sys.argv[2:]):
        for name, data in [(f"k{i}.{s}", b"image"), (f"k{i}.cls", str(i).encode())]:
            ti = tarfile.TarInfo(name); ti.size = len(data); t.addfile(ti, io.BytesIO(data))
"#,
        &[tmp.path().as_os_str()]
            .into_iter()
            .chain(suffixes.iter().map(std::ffi::OsStr::new))
            .collect::<Vec<_>>(),
    );
    let shards = Shards::open(tmp.path().join("s.tar").as_os_str()).unwrap();
    let kept: Vec<String> = (shards.samples.iter())
        .map(|s| String::from_utf8_lossy(&s.key).into_owned())
        .collect();
    let want: Vec<String> = (suffixes.iter().enumerate())
        .filter(|(_, s)| is_image_name(format!("x.{s}").as_bytes()))
        .map(|(i, _)| format!("k{i}"))
        .collect();
    assert_eq!(kept, want);
    assert_eq!(want.len(), 10, "{want:?}");
    assert_eq!(shards.left_out_count, suffixes.len() - want.len());
}
