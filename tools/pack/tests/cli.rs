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
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
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
                std::fs::write(&p, format!("{split} {class} {i}").repeat(100 * (i + 1))).unwrap();
            }
        }
    }
}

fn pack(args: &[&str], dir: &Path) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn packed(o: &Output) -> Vec<Packed> {
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    testkit::typed(&o.stdout)
}

#[test]
fn shards_are_what_webdataset_reads_in_the_shuffled_folder_order_with_the_class_names() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    folder(&d.join("imgs"));
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
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    folder(&d.join("imgs"));
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
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    folder(&d.join("imgs"));
    testkit::mkfifo(&d.join("imgs/train/cat/stuck.png"));
    let o = pack(&["imgs/train", "-o", "out"], d);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let errors: Vec<ErrorRecord> = testkit::typed(&o.stdout);
    assert_eq!(errors.len(), 1);
    assert!(errors[0].input.to_string_lossy().ends_with("stuck.png"));
    let recs: Vec<Packed> = testkit::typed(&o.stdout);
    assert_eq!(recs[0].samples, 15);
}

#[test]
fn a_folder_packed_before_is_kept_unless_overwritten_and_classes_can_be_given() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    folder(&d.join("imgs"));
    packed(&pack(&["imgs/train", "-o", "out", "--shard-size", "4K"], d));
    let o = pack(&["imgs/train", "-o", "out"], d);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--overwrite"));
    // Replaced, with no shard of the earlier pack left beside the new one.
    let recs = packed(&pack(&["imgs/train", "-o", "out", "--overwrite"], d));
    assert_eq!(recs[0].files.len(), 2, "one shard and classes.txt");
    assert_eq!(std::fs::read_dir(d.join("out")).unwrap().count(), 2);
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
