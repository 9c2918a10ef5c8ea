//! `pack` through its command line: the shards as webdataset itself reads them, RecordIO as
//! MXNet's writer (transcribed in scripts/reference/mxnet_recordio.py) writes it, the class
//! names beside, errors that leave an image out, and what it refuses.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use records::{ErrorRecord, Packed, Summary};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_pack");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `python -c script args...` with the venv's python; its stdout as JSON.
fn python(script: &str, args: &[&Path]) -> Value {
    let o = Command::new(testkit::python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    testkit::ok(&o);
    serde_json::from_slice(&o.stdout).unwrap()
}

/// DIR/train and DIR/val, each with the classes dog, cat and fish, of
/// images whose bytes tell them apart.
fn folder(dir: &Path) {
    for (split, n) in [("train", 5), ("val", 2)] {
        for (c, class) in ["dog", "cat", "fish"].iter().enumerate() {
            for i in 0..n {
                let ext = ["png", "jpg", "webp"][(i + c) % 3];
                let p = dir.join(format!("{split}/{class}/{class}{i}.{ext}"));
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, image_bytes(&format!("{split} {class} {i}"), i)).unwrap();
            }
        }
    }
}

/// Bytes that start as a PNG does (what training's decoders are chosen by), then `text`
/// repeated: images told apart by their bytes.
fn image_bytes(text: &str, i: usize) -> Vec<u8> {
    let mut b = PNG_MAGIC.to_vec();
    b.extend(text.repeat(100 * (i + 1)).bytes());
    b
}

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

/// A temporary directory with [`folder`]'s images under `imgs/`.
fn with_images() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    folder(&tmp.path().join("imgs"));
    tmp
}

fn pack(args: &[&str], dir: &Path) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn packed(o: &Output) -> Vec<Packed> {
    testkit::ok(o);
    testkit::typed(&o.stdout)
}

/// A pack that left out one training image, `name`, with an error record (exit 3) and packed
/// the other 15: that error record.
fn packed_but_one(o: &Output, name: &str) -> ErrorRecord {
    testkit::exits(o, 3);
    let mut errors: Vec<ErrorRecord> = testkit::typed(&o.stdout);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].input.to_string_lossy().ends_with(name),
        "{errors:?}"
    );
    let recs: Vec<Packed> = testkit::typed(&o.stdout);
    assert_eq!(recs[0].samples, 15);
    errors.remove(0)
}

#[test]
fn shards_are_what_webdataset_reads_in_the_shuffled_folder_order_with_the_class_names() {
    let tmp = with_images();
    let d = tmp.path();
    // Small shards: 15 training samples of up to ~5 KB cut into several.
    let o = pack(
        &["imgs", "-o", "out", "--shard-size", "8K", "--seed", "3"],
        d,
    );
    let recs = packed(&o);
    assert_eq!(recs.len(), 2);
    let (train, val) = (&recs[0], &recs[1]);
    assert_eq!(
        (train.split.as_deref(), train.samples, train.classes),
        (Some("train"), 15, 3)
    );
    assert_eq!((val.split.as_deref(), val.samples), (Some("val"), 6));
    let shards = train.files.len() - 1;
    assert!(shards > 2, "{train:?}");
    assert_eq!(
        train.data,
        PathBuf::from(format!(
            "wds:{}/out/train/shard-{{000000..{:06}}}.tar",
            d.display(),
            shards - 1
        ))
    );
    assert!(
        train
            .files
            .last()
            .unwrap()
            .ends_with("out/train/classes.txt")
    );
    // torchvision's class order (sorted names), in label order.
    let classes = std::fs::read_to_string(d.join("out/train/classes.txt")).unwrap();
    assert_eq!(classes, "cat\ndog\nfish\n");
    assert_eq!(
        std::fs::read_to_string(d.join("out/val/classes.txt")).unwrap(),
        classes
    );
    let summary: Summary = testkit::typed(&o.stdout).remove(0);
    assert_eq!((summary.ok, summary.failed), (21, 0));

    // webdataset itself: every sample once, in random.Random(3).shuffle of ImageFolder's order,
    // its bytes and class as the folder has them.
    let check = r#"
import json, random, sys, braceexpand, webdataset as wds
from torchvision.datasets import ImageFolder
folder, pattern = sys.argv[1], sys.argv[2]
samples = ImageFolder(folder, loader=lambda p: None).samples
order = list(range(len(samples))); random.Random(3).shuffle(order)
got = []
for s in wds.WebDataset(list(braceexpand.braceexpand(pattern)), shardshuffle=False):
    image = [k for k in s if k not in ("__key__", "__url__", "__local_path__", "cls")]
    got.append([s["__key__"], int(s["cls"]), s[image[0]] == open(samples[order[len(got)]][0], "rb").read(),
                samples[order[len(got)]][1], image[0]])
print(json.dumps(got))
"#;
    let pattern = train.data.to_str().unwrap().strip_prefix("wds:").unwrap();
    let got = python(check, &[&d.join("imgs/train"), Path::new(pattern)]);
    let got = got.as_array().unwrap();
    assert_eq!(got.len(), 15);
    for (i, s) in got.iter().enumerate() {
        assert_eq!(s[0], format!("{i:09}"), "{s}");
        assert_eq!(s[1], s[3], "the class is the folder's label: {s}");
        assert_eq!(s[2], true, "the image's bytes: {s}");
    }
}

#[test]
fn recordio_is_what_mxnets_writer_writes() {
    let tmp = with_images();
    let d = tmp.path();
    let recs = packed(&pack(
        &[
            "imgs/train",
            "-o",
            "rec",
            "--format",
            "recordio",
            "--no-shuffle",
        ],
        d,
    ));
    assert_eq!(
        recs[0].data,
        PathBuf::from(format!("recordio:{}/rec/data", d.display()))
    );
    // The reference writer on the same records: key i is ImageFolder's i-th image, its class
    // the label (im2rec's layout: no header record).
    let script = format!(
        r#"
import importlib.util, json, sys
from torchvision.datasets import ImageFolder
spec = importlib.util.spec_from_file_location("m", "{}")
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
samples = ImageFolder(sys.argv[1], loader=lambda p: None).samples
m.write(sys.argv[2], [(k, m.pack(c, open(p, "rb").read(), id_=k)) for k, (p, c) in enumerate(samples)])
print(json.dumps(len(samples)))
"#,
        repo().join("scripts/reference/mxnet_recordio.py").display()
    );
    let n = python(&script, &[&d.join("imgs/train"), &d.join("reference")]);
    assert_eq!(n, 15);
    for ext in ["rec", "idx"] {
        assert_eq!(
            std::fs::read(d.join(format!("rec/data.{ext}"))).unwrap(),
            std::fs::read(d.join(format!("reference.{ext}"))).unwrap(),
            "data.{ext}"
        );
    }
}

#[test]
fn an_unreadable_image_is_left_out_with_an_error_and_the_rest_are_packed() {
    let tmp = with_images();
    let d = tmp.path();
    testkit::mkfifo(&d.join("imgs/train/cat/stuck.png"));
    packed_but_one(&pack(&["imgs/train", "-o", "out"], d), "stuck.png");
}

#[test]
fn a_folder_packed_before_is_kept_unless_overwritten_and_classes_can_be_given() {
    let tmp = with_images();
    let d = tmp.path();
    packed(&pack(&["imgs/train", "-o", "out", "--shard-size", "4K"], d));
    let o = pack(&["imgs/train", "-o", "out"], d);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--overwrite"));
    // Replaced, with no shard of the earlier pack left beside the new one.
    let recs = packed(&pack(&["imgs/train", "-o", "out", "--overwrite"], d));
    assert_eq!(recs[0].files.len(), 2, "one shard and classes.txt");
    assert_eq!(
        visible(&d.join("out")),
        [&b"classes.txt"[..], b"shard-000000.tar"]
    );
    // The validation folder alone, labelled by the training classes (a fourth class first).
    std::fs::write(d.join("names.txt"), "bird\ncat\ndog\nfish\n").unwrap();
    let recs = packed(&pack(
        &["imgs/val", "-o", "val", "--classes", "names.txt"],
        d,
    ));
    assert_eq!(recs[0].classes, 4);
    let labels = python(
        r#"
import json, sys, braceexpand, webdataset as wds
print(json.dumps(sorted({int(s["cls"]) for s in wds.WebDataset(list(braceexpand.braceexpand(sys.argv[1])), shardshuffle=False)})))
"#,
        &[Path::new(
            recs[0].data.to_str().unwrap().strip_prefix("wds:").unwrap(),
        )],
    );
    assert_eq!(labels, serde_json::json!([1, 2, 3]));
    std::fs::write(d.join("few.txt"), "cat\ndog\n").unwrap();
    let o = pack(&["imgs/val", "-o", "val2", "--classes", "few.txt"], d);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("\"fish\" is not among --classes few.txt"));
}

/// The names in `dir`, sorted, as bytes.
fn names(dir: &Path) -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let mut n: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    n.sort();
    n
}

/// The names in `dir` that do not start with a dot.
fn visible(dir: &Path) -> Vec<Vec<u8>> {
    names(dir)
        .into_iter()
        .filter(|n| !n.starts_with(b"."))
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn overwrite_replaces_only_the_files_pack_wrote() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = with_images();
    let d = tmp.path();
    let first = packed(&pack(&["imgs/train", "-o", "out", "--shard-size", "4K"], d));
    assert!(
        first[0].files.len() > 3,
        "several shards: {:?}",
        first[0].files
    );
    let out = d.join("out");
    // Files pack never wrote, some named almost as it names its own; a RecordIO file of
    // another tool's beside a pack of shards.
    let foreign: Vec<PathBuf> = [
        &b"shard-final.tar"[..],
        b"shard-\xff.tar",
        b"shard-00001.tar",
        b"shard-0000001.tar",
        b"notes.txt",
        b"data.rec",
    ]
    .iter()
    .map(|n| out.join(std::ffi::OsStr::from_bytes(n)))
    .collect();
    for f in &foreign {
        std::fs::write(f, b"not pack's").unwrap();
    }
    let recs = packed(&pack(&["imgs/train", "-o", "out", "--overwrite"], d));
    assert_eq!(recs[0].files.len(), 2, "one shard and classes.txt");
    for f in &foreign {
        assert_eq!(
            std::fs::read(f).unwrap(),
            b"not pack's",
            "{} kept",
            f.display()
        );
    }
    // The earlier pack's other shards are gone: nothing of it is left beside the new one.
    assert!(!out.join("shard-000001.tar").exists());
    assert!(out.join("shard-000000.tar").exists() && out.join("classes.txt").exists());
}

#[test]
fn an_overwrite_stopped_midway_leaves_the_previous_pack_whole() {
    let tmp = with_images();
    let d = tmp.path();
    packed(&pack(&["imgs", "-o", "out"], d));
    let before = visible(&d.join("out/val"));
    let old_val = std::fs::read(d.join("out/val/shard-000000.tar")).unwrap();
    // The training split now holds many files that cannot be read: their error records fill
    // the pipe to a reader that does not read, which stops the pack between its two splits.
    for i in 0..1500 {
        testkit::mkfifo(&d.join(format!("imgs/train/cat/fifo-with-a-long-name-{i:04}.png")));
    }
    std::fs::write(d.join("imgs/val/cat/new.png"), image_bytes("new", 1)).unwrap();
    let mut child = Command::new(BIN)
        .current_dir(d)
        .args(["imgs", "-o", "out", "--overwrite"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Waits until the pipe (64 KiB) is all but full: the training split is written, its error
    // records wait, and the pack waits for them to be read.
    let fd = std::os::fd::AsRawFd::as_raw_fd(child.stdout.as_ref().unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes the bytes waiting in the pipe into `n`.
        unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
        if n >= 60_000 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "pack never blocked");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The pack is held between its splits: the validation split keeps its previous pack.
    assert_eq!(visible(&d.join("out/val")), before, "the previous val pack");
    assert_eq!(
        std::fs::read(d.join("out/val/shard-000000.tar")).unwrap(),
        old_val
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(visible(&d.join("out/val")), before, "the previous val pack");
    // What the killed run left does not stand in the next one's way.
    for i in 0..1500 {
        std::fs::remove_file(d.join(format!("imgs/train/cat/fifo-with-a-long-name-{i:04}.png")))
            .unwrap();
    }
    let recs = packed(&pack(&["imgs", "-o", "out", "--overwrite"], d));
    assert_eq!(recs[1].samples, 7);
    assert_eq!(
        names(&d.join("out/val")),
        [
            &b".lock"[..],
            b".pack-files",
            b"classes.txt",
            b"shard-000000.tar"
        ]
    );
}

#[test]
fn a_second_pack_into_a_directory_in_use_is_refused() {
    let tmp = with_images();
    let d = tmp.path();
    packed(&pack(&["imgs/train", "-o", "out"], d));
    let before = std::fs::read(d.join("out/shard-000000.tar")).unwrap();
    // Another run holds the directory.
    let held = atomic_file::DirLock::acquire(&d.join("out")).unwrap();
    let o = pack(&["imgs/val", "-o", "out", "--overwrite"], d);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("in use by another run"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read(d.join("out/shard-000000.tar")).unwrap(),
        before
    );
    drop(held);
    packed(&pack(&["imgs/val", "-o", "out", "--overwrite"], d));
}

#[test]
fn what_a_killed_pack_left_does_not_block_the_next() {
    let tmp = with_images();
    let d = tmp.path();
    let out = d.join("out");
    std::fs::create_dir_all(out.join(".pack-staging")).unwrap();
    // A pack killed while writing: its staging directory, and temp files of packs that wrote
    // in the directory itself, by a process that is gone and by a zombie (a child that ended
    // and that no one reaped: its pid still has its /proc entry).
    std::fs::write(out.join(".pack-staging/shard-000000.tar"), b"half").unwrap();
    let mut zombie = Command::new("true").spawn().unwrap();
    let zpid = zombie.id();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(format!("/proc/{zpid}/stat"))
        .unwrap()
        .contains(") Z")
    {
        assert!(std::time::Instant::now() < deadline, "never a zombie");
        std::thread::yield_now();
    }
    let partials = [
        format!(".data.rec.{zpid}.AbC123.partial"),
        ".shard-000000.tar.999999999.XyZ789.partial".to_string(),
    ];
    for p in &partials {
        std::fs::write(out.join(p), vec![0u8; 1000]).unwrap();
    }
    packed(&pack(&["imgs/train", "-o", "out"], d));
    for p in &partials {
        assert!(!out.join(p).exists(), "{p} removed");
    }
    assert!(!out.join(".pack-staging").exists());
    zombie.wait().unwrap();
}

#[test]
fn class_names_a_line_cannot_carry_are_refused_before_anything_is_written() {
    use std::os::unix::ffi::OsStrExt;
    for (name, says) in [
        (&b"cr\r"[..], "carriage return"),
        (b"two\nlines", "line break"),
    ] {
        let tmp = with_images();
        let d = tmp.path();
        let class = d.join("imgs/train").join(std::ffi::OsStr::from_bytes(name));
        std::fs::create_dir_all(&class).unwrap();
        std::fs::write(class.join("a.png"), image_bytes("a", 0)).unwrap();
        let o = pack(&["imgs/train", "-o", "out"], d);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{}", stderr(&o));
        assert!(
            !d.join("out").exists() || names(&d.join("out")).is_empty(),
            "nothing written: {:?}",
            names(&d.join("out"))
        );
    }
    // Names that are not UTF-8 come back as the same bytes: the pack's classes.txt packs the
    // validation split.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for split in ["train", "val"] {
        for (i, class) in [&b"caf\xe9"[..], b"caf\xe8"].iter().enumerate() {
            let c = d
                .join("imgs")
                .join(split)
                .join(std::ffi::OsStr::from_bytes(class));
            std::fs::create_dir_all(&c).unwrap();
            std::fs::write(c.join("a.png"), image_bytes(split, i)).unwrap();
        }
    }
    packed(&pack(&["imgs/train", "-o", "train"], d));
    assert_eq!(
        std::fs::read(d.join("train/classes.txt")).unwrap(),
        b"caf\xe8\ncaf\xe9\n"
    );
    let recs = packed(&pack(
        &["imgs/val", "-o", "val", "--classes", "train/classes.txt"],
        d,
    ));
    assert_eq!(recs[0].classes, 2);
}

#[test]
fn images_training_cannot_decode_are_error_records_and_suffixes_are_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let c = d.join("imgs/cls");
    std::fs::create_dir_all(&c).unwrap();
    std::fs::write(c.join(".png"), image_bytes("only a suffix", 0)).unwrap();
    std::fs::write(c.join("LOUD.JPG"), image_bytes("upper case", 0)).unwrap();
    std::fs::write(c.join("x.ppm"), b"P6\n1 1\n255\n\x01\x02\x03").unwrap();
    std::fs::write(c.join("y.pgm"), b"P5\n1 1\n255\n\x01").unwrap();
    let o = pack(&["imgs", "-o", "out", "--no-shuffle"], d);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let errors: Vec<ErrorRecord> = testkit::typed(&o.stdout);
    let mut left: Vec<String> = errors
        .iter()
        .map(|e| {
            e.input
                .to_string_lossy()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    left.sort();
    assert_eq!(left, ["x.ppm", "y.pgm"], "{errors:?}");
    assert!(errors[0].message.contains("not an image"), "{errors:?}");
    let recs: Vec<Packed> = testkit::typed(&o.stdout);
    assert_eq!(recs[0].samples, 2);
    let members = python(
        r#"
import json, sys, tarfile
print(json.dumps(sorted(tarfile.open(sys.argv[1]).getnames())))
"#,
        &[&d.join("out/shard-000000.tar")],
    );
    assert_eq!(
        members,
        serde_json::json!([
            "000000000.cls",
            "000000000.path",
            "000000000.png",
            "000000001.cls",
            "000000001.jpg",
            "000000001.path"
        ])
    );
}

#[test]
fn an_image_too_large_for_a_record_is_an_error_record() {
    let tmp = with_images();
    let d = tmp.path();
    // 512 MiB (a sparse file that starts as a PNG): no RecordIO length holds it.
    let big = d.join("imgs/train/cat/big.png");
    let f = std::fs::File::create(&big).unwrap();
    std::io::Write::write_all(&mut &f, PNG_MAGIC).unwrap();
    f.set_len(1 << 29).unwrap();
    drop(f);
    let o = pack(
        &[
            "imgs/train",
            "-o",
            "out",
            "--format",
            "recordio",
            "--max-image-bytes",
            "1G",
        ],
        d,
    );
    let e = packed_but_one(&o, "big.png");
    assert!(e.message.contains("29 bits"), "{e:?}");
}

#[test]
fn the_record_names_what_ddp_train_takes() {
    let tmp = with_images();
    let d = tmp.path();
    // A directory whose name a brace pattern would expand.
    let recs = packed(&pack(
        &["imgs/train", "-o", "out{a,b}\\x", "--shard-size", "8K"],
        d,
    ));
    let data = recs[0].data.to_str().unwrap().strip_prefix("wds:").unwrap();
    let got = python(
        r#"
import json, sys, braceexpand
print(json.dumps(list(braceexpand.braceexpand(sys.argv[1]))))
"#,
        &[Path::new(data)],
    );
    let shards: Vec<String> = recs[0].files[..recs[0].files.len() - 1]
        .iter()
        .map(|p| p.to_str().unwrap().to_string())
        .collect();
    assert_eq!(got, serde_json::json!(shards));
    // When every image fails, nothing is written and no record names files.
    let bad = d.join("bad/cls");
    std::fs::create_dir_all(&bad).unwrap();
    testkit::mkfifo(&bad.join("a.png"));
    let o = pack(&["bad", "-o", "none"], d);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        testkit::typed::<Packed>(&o.stdout).is_empty(),
        "no packed record"
    );
    let errors: Vec<ErrorRecord> = testkit::typed(&o.stdout);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        names(&d.join("none")).iter().all(|n| n.starts_with(b".")),
        "{:?}",
        names(&d.join("none"))
    );
}

#[test]
fn folders_that_are_not_packed_and_unreadable_directories_are_error_records() {
    let tmp = with_images();
    let d = tmp.path();
    std::fs::create_dir_all(d.join("imgs/test/cat")).unwrap();
    std::fs::write(d.join("imgs/test/cat/a.png"), image_bytes("t", 0)).unwrap();
    // A class's sub-directory that cannot be read (by an unprivileged user: the test drops
    // root's rights for the pack when it has them).
    let locked = d.join("imgs/train/dog/more");
    std::fs::create_dir_all(&locked).unwrap();
    std::fs::write(locked.join("m.png"), image_bytes("m", 0)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for p in [d.to_path_buf(), d.join("imgs")] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let mut c = Command::new(BIN);
    c.current_dir(d).args(["imgs", "-o", "out"]);
    let o = testkit::as_nobody(&mut c).output().unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let errors: Vec<ErrorRecord> = testkit::typed(&o.stdout);
    let inputs: Vec<PathBuf> = errors.iter().map(|e| PathBuf::from(&e.input)).collect();
    assert!(inputs.contains(&PathBuf::from("imgs/test")), "{errors:?}");
    let test = errors
        .iter()
        .find(|e| Path::new(&e.input) == Path::new("imgs/test"));
    assert_eq!(
        test.unwrap().message,
        "a folder beside train/ and val/: not packed (pack it on its own, with --classes naming \
         the packed training split's classes.txt)"
    );
    assert!(
        inputs.contains(&PathBuf::from("imgs/train/dog/more")),
        "{errors:?}"
    );
    let recs: Vec<Packed> = testkit::typed(&o.stdout);
    assert_eq!((recs[0].samples, recs[1].samples), (15, 6));
}

/// The records of `type` in `o`'s stdout, as JSON.
fn of_type(o: &Output, kind: &str) -> Vec<Value> {
    (o.stdout.split(|&b| b == b'\n'))
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice::<Value>(l).unwrap())
        .filter(|r| r["type"] == kind)
        .collect()
}

#[test]
fn files_pack_does_not_take_are_skipped_records_naming_each() {
    let tmp = with_images();
    let d = tmp.path();
    // A GIF and a text file in a class folder (ImageFolder's extensions leave them out), and a
    // file beside the class folders and one beside train/ and val/.
    std::fs::write(d.join("imgs/train/cat/anim.gif"), b"GIF89a").unwrap();
    std::fs::write(d.join("imgs/train/cat/notes.txt"), b"hello").unwrap();
    std::fs::write(d.join("imgs/val/list.csv"), b"a,b").unwrap();
    std::fs::write(d.join("imgs/README"), b"about").unwrap();
    let o = pack(&["imgs", "-o", "out"], d);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(of_type(&o, "error").is_empty(), "{}", stderr(&o));
    let skipped = of_type(&o, "skipped");
    let mut got: Vec<(String, String)> = skipped
        .iter()
        .map(|r| {
            (
                r["input"].as_str().unwrap().to_string(),
                r["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    let inputs: Vec<&str> = got.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(
        inputs,
        [
            "imgs/README",
            "imgs/train/cat/anim.gif",
            "imgs/train/cat/notes.txt",
            "imgs/val/list.csv"
        ],
        "{skipped:?}"
    );
    for (input, message) in &got {
        let why = if input.ends_with("README") {
            "beside train/ and val/"
        } else if input.ends_with("list.csv") {
            "not in a class folder"
        } else {
            "not an image file name"
        };
        assert!(message.contains(why), "{input}: {message}");
    }
    let summary: Summary = testkit::typed(&o.stdout).remove(0);
    assert_eq!((summary.ok, summary.skipped, summary.failed), (21, 4, 0));
    // An image that cannot be read stays an error (exit 3), beside the skipped files.
    testkit::mkfifo(&d.join("imgs/train/dog/stuck.jpg"));
    let o = pack(&["imgs", "-o", "out", "--overwrite"], d);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(of_type(&o, "error").len(), 1);
    assert_eq!(of_type(&o, "skipped").len(), 4);
}

#[test]
fn each_sample_keeps_the_path_of_its_file_in_the_folder() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = with_images();
    let d = tmp.path();
    // A name that is not UTF-8, and one holding a tab, in a sub-folder of a class.
    let odd = d.join("imgs/train/cat/deep");
    std::fs::create_dir_all(&odd).unwrap();
    let latin1 = odd.join(std::ffi::OsStr::from_bytes(b"caf\xe9.png"));
    std::fs::write(&latin1, image_bytes("latin1", 0)).unwrap();
    std::fs::write(odd.join("a\tb.png"), image_bytes("tab", 0)).unwrap();
    packed(&pack(&["imgs/train", "-o", "wds", "--seed", "5"], d));
    packed(&pack(
        &[
            "imgs/train",
            "-o",
            "rec",
            "--format",
            "recordio",
            "--seed",
            "5",
        ],
        d,
    ));
    // webdataset reads each sample's path member (bytes) beside its image and class; it is
    // the file's path relative to the folder packed, as bytes, and the image is that file's.
    let check = r#"
import json, os, sys, webdataset as wds
folder, shard = sys.argv[1], sys.argv[2]
got = []
for s in wds.WebDataset(shard, shardshuffle=False):
    image = [k for k in s if k not in ("__key__", "__url__", "__local_path__", "cls", "path")][0]
    p = s["path"]
    got.append([p.hex(), s[image] == open(os.path.join(os.fsencode(folder), p), "rb").read()])
print(json.dumps(got))
"#;
    let got = python(
        check,
        &[&d.join("imgs/train"), &d.join("wds/shard-000000.tar")],
    );
    let got = got.as_array().unwrap();
    assert_eq!(got.len(), 17);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut paths: Vec<String> = got
        .iter()
        .map(|s| {
            assert_eq!(s[1], true, "the file's bytes: {s}");
            s[0].as_str().unwrap().to_string()
        })
        .collect();
    paths.sort();
    assert!(paths.contains(&hex(b"cat/deep/caf\xe9.png")), "{paths:?}");
    assert!(paths.contains(&hex(b"cat/deep/a\tb.png")), "{paths:?}");
    assert!(paths.contains(&hex(b"dog/dog0.png")), "{paths:?}");
    // RecordIO: data.lst beside, as MXNet's im2rec writes a list (key, label, path by tabs):
    // key i the record's, its label the record's class; the tab in a name escaped.
    let lst = std::fs::read(d.join("rec/data.lst")).unwrap();
    let lines: Vec<&[u8]> = lst
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 17);
    let classes = ["cat", "dog", "fish"];
    for (k, line) in lines.iter().enumerate() {
        let cols: Vec<&[u8]> = line.split(|&b| b == b'\t').collect();
        assert_eq!(cols.len(), 3, "{}", line.escape_ascii());
        assert_eq!(cols[0], k.to_string().as_bytes());
        let class = cols[2].split(|&b| b == b'/').next().unwrap();
        let label = classes.iter().position(|c| c.as_bytes() == class).unwrap();
        assert_eq!(cols[1], format!("{:.6}", label as f64).as_bytes());
    }
    assert!(lines.iter().any(|l| l.ends_with(b"\tcat/deep/caf\xe9.png")));
    assert!(lines.iter().any(|l| l.ends_with(b"\tcat/deep/a\\tb.png")));
}
