//! What `pack` writes, `ddp-train` reads back: a tree of every extension the image-folder reader
//! takes, packed as shards and as RecordIO, and every sample pack packed read back through
//! `--dump-batches` with the pixels Pillow decodes from its file; what pack leaves out is an
//! error record naming the file.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use records::{ErrorRecord, Packed};

/// Runs the venv's Python on the code `script` with `args`, which must succeed; its stdout.
fn python(script: &str, args: &[&Path]) -> String {
    let args = args.iter().map(|a| a.as_os_str());
    let out = testkit::run_python(["-c".as_ref(), script.as_ref()].into_iter().chain(args));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts that pack finished (exit 0, or 3 when it left files out).
fn packed(o: &Output) {
    assert!(
        o.status.code().is_some_and(|c| c == 0 || c == 3),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `ddp-train --device cpu --data DATA`, reading 16×16 images as they are, for
/// `--dump-batches`.
fn dump(data: impl AsRef<std::ffi::OsStr>, batch: &str) -> Command {
    let mut c = common::cpu();
    c.arg("--data")
        .arg(data)
        .args(["--image-size", "16", "--transform", "none"])
        .args(["--batch-size", batch]);
    c
}

/// DIR/train and DIR/val, each with two classes holding a 16×16 picture (told apart by their
/// pixels) in every extension torchvision's ImageFolder takes, in upper case too, and as a file
/// named only by its extension.
fn every_extension(dir: &Path) {
    let script = r#"
import sys, os
from PIL import Image
root = sys.argv[1]
names = ["a.jpg", "b.jpeg", "c.png", "d.ppm", "e.bmp", "f.pgm", "g.tif", "h.tiff", "i.webp",
         "J.JPG", "K.PNG", "L.TIFF", ".png", ".JPG"]
formats = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "ppm": "PPM", "bmp": "BMP", "pgm": "PPM",
           "tif": "TIFF", "tiff": "TIFF", "webp": "WEBP"}
n = 0
for split in ["train", "val"]:
    for cls in ["cat", "dog"]:
        os.makedirs(os.path.join(root, split, cls))
        for name in names:
            n += 1
            ext = name.rsplit(".", 1)[1].lower()
            mode = "L" if ext == "pgm" else "RGB"
            im = Image.new(mode, (16, 16))
            im.putdata([(x * 16 + n * 7) % 256 if mode == "L" else ((x * 3 + n) % 256, (x * 5) % 256, (n * 11) % 256)
                        for x in range(256)])
            kw = {"lossless": True} if ext == "webp" else {}
            im.save(os.path.join(root, split, cls, name), formats[ext], **kw)
"#;
    python(script, &[dir]);
}

/// Packs `imgs` in `format`; the split records and the error records.
fn pack(d: &Path, format: &str) -> (Vec<Packed>, Vec<ErrorRecord>) {
    let out = d.join(format!("out-{format}"));
    let o = Command::new(testkit::bin("pack"))
        .arg(d.join("imgs"))
        .arg("-o")
        .arg(&out)
        .args(["--format", format, "--no-shuffle"])
        .output()
        .unwrap();
    packed(&o);
    (testkit::typed(&o.stdout), testkit::typed(&o.stdout))
}

#[test]
fn every_image_pack_packs_trains_from_every_format_it_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    every_extension(&d.join("imgs"));
    let mut dumps = Vec::new();
    for format in ["wds", "recordio"] {
        let (recs, errors) = pack(d, format);
        // PPM and PGM: Pillow reads them, ddp-train's decoders do not; pack says so.
        let mut left: Vec<String> = errors
            .iter()
            .map(|e| e.input.to_string_lossy().into_owned())
            .collect();
        left.sort();
        let expected: Vec<String> = ["train", "val"]
            .iter()
            .flat_map(|s| {
                ["cat", "dog"].iter().flat_map(move |c| {
                    ["d.ppm", "f.pgm"]
                        .iter()
                        .map(move |f| format!("{}/imgs/{s}/{c}/{f}", d.display()))
                })
            })
            .collect();
        assert_eq!(left, expected, "{format}: {errors:?}");
        let (train, val) = (&recs[0], &recs[1]);
        assert_eq!((train.samples, val.samples), (24, 24), "{format}");
        let val_data = val.data.to_str().unwrap().split_once(':').unwrap().1;
        let npz = d.join(format!("{format}.npz"));
        let o = dump(&train.data, "24")
            .arg("--val-data")
            .arg(val_data)
            .args([
                "--workers",
                "1",
                "--dump-batches",
                "1",
                "--split",
                "val",
                "--max-bad-inputs",
                "0",
            ])
            .arg("--dump")
            .arg(&npz)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        dumps.push(npz);
    }
    // Every packed validation sample of both formats' dumps, its label and Pillow's pixels of
    // its file: the folder's images but PPM and PGM, in ImageFolder's order (packed
    // unshuffled); and the path pack stored for it, its file's relative to the folder packed.
    // One Python process for both (each start that imports torchvision costs seconds).
    let check = r#"
import os, sys, numpy as np
from PIL import Image
from torchvision.datasets import ImageFolder
samples = [s for s in ImageFolder(sys.argv[1], loader=lambda p: None).samples
           if not s[0].lower().endswith((".ppm", ".pgm"))]
mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
def check(npz):
    d = np.load(npz)
    paths = d["paths"].tobytes().split(b"\n")[:-1]
    keys = [int(p.rsplit(b":", 1)[1]) for p in paths]
    assert sorted(keys) == list(range(len(samples))), keys
    packed = d["packed_paths"].tobytes().split(b"\0")[:-1]
    assert len(packed) == len(keys), (len(packed), len(keys))
    for k, p in zip(keys, packed):
        assert p == os.fsencode(os.path.relpath(samples[k][0], sys.argv[1])), (p, samples[k][0])
    for k, img, label in zip(keys, d["images"], d["labels"]):
        path, cls = samples[k]
        assert label == cls, (path, label, cls)
        ref = (np.asarray(Image.open(path).convert("RGB"), np.float32) / 255 - mean) / std
        diff = np.abs(ref.transpose(2, 0, 1) - img).max()
        assert diff < 1e-4, (path, diff)
for npz in sys.argv[2:]:
    try:
        check(npz)
    except AssertionError as e:
        raise AssertionError(npz, *e.args) from e
print("ok")
"#;
    let val = d.join("imgs/val");
    let args: Vec<&Path> = std::iter::once(val.as_path())
        .chain(dumps.iter().map(|p| p.as_path()))
        .collect();
    python(check, &args);
}

#[test]
fn an_unreadable_folder_of_a_class_is_a_warning_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for split in ["train", "val"] {
        for (c, class) in ["cat", "dog"].iter().enumerate() {
            for i in 0..3 {
                let p = d.join(format!("imgs/{split}/{class}/{i}.png"));
                testkit::write_image(&p, 16, 16, (c * 3 + i) as u32);
            }
        }
    }
    // Two of the class's images in a folder that cannot be read (by an unprivileged user: the
    // test drops root's rights for the run when it has them).
    let locked = d.join("imgs/train/dog/more");
    for i in 0..2 {
        testkit::write_image(&locked.join(format!("m{i}.png")), 16, 16, 40 + i);
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let mut c = dump(format!("imagefolder:{}", d.join("imgs").display()), "4");
    c.args(["--dump-batches", "1"])
        .arg("--dump")
        .arg(d.join("x.npz"));
    let o = testkit::as_nobody(&mut c).output().unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: cannot be read", locked.display())),
        "{stderr}"
    );
}
