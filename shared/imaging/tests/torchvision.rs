//! The training and evaluation transforms against torchvision 0.26 with Pillow 13 (the project
//! venv's): `Resize(R)` + `CenterCrop(S)` and `resized_crop` to S×S (BILINEAR) on the reference
//! images and on conformance files of every format, bit for bit (tolerance 0: the same integer
//! arithmetic), and `ToTensor` + `Normalize` as float32 bit patterns.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use imaging::transforms::{eval_crop, to_chw};
use imaging::{DecodeOptions, Filter, Frame, Resize, decode_region};

/// Runs `script` with the cases (as JSON in DIR/cases.json) and DIR as its arguments; it writes
/// its results into DIR.
fn run_python(script: &str, cases: &[serde_json::Value], dir: &Path) {
    let list = dir.join("cases.json");
    std::fs::write(&list, serde_json::to_vec(cases).unwrap()).unwrap();
    testkit::run_python([
        OsStr::new("-c"),
        OsStr::new(script),
        list.as_os_str(),
        dir.as_os_str(),
    ]);
}

fn inputs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join("pillow/inputs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    for name in [
        "RGB.jpeg-q75-s1-prog",
        "RGB.jpeg-q5-s2",
        "L.jpeg-q95-s0",
        "RGB.webp-lossy",
        "RGBA.webp-lossless",
        "RGB.png",
        "P.gif",
        "RGB.bmp",
        "RGB.tiff-tiff_lzw",
    ] {
        let p = root.join("conformance/files").join(name);
        if p.exists() {
            v.push(p);
        }
    }
    v.sort();
    v
}

const SCRIPT: &str = r#"
import sys, json
import numpy as np
from PIL import Image
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
cases = json.load(open(sys.argv[1]))
for i, c in enumerate(cases):
    img = Image.open(c["path"]).convert("RGB")
    if c["kind"] == "eval":
        out = T.Compose([T.Resize(c["resize"]), T.CenterCrop(c["size"])])(img)
    else:
        left, top, w, h = c["box"]
        out = F.resized_crop(img, top, left, h, w, [c["size"], c["size"]])
    a = np.asarray(out, dtype=np.uint8)
    open(f"{sys.argv[2]}/{i}.raw", "wb").write(a.tobytes())
    if c.get("normalize"):
        t = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])(T.ToTensor()(F.hflip(out)))
        open(f"{sys.argv[2]}/{i}.f32", "wb").write(t.numpy().astype("<f4").tobytes())
"#;

#[test]
fn transforms_equal_torchvisions_bit_for_bit() {
    let opts = DecodeOptions::default();
    let tmp = tempfile::tempdir().unwrap();
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for path in inputs() {
        let bytes = std::fs::read(&path).unwrap();
        let Ok(whole) = imaging::decode_rgb(&bytes, &opts) else {
            continue;
        };
        let (w, h) = whole.rgb.dimensions();
        // Evaluation at 224 (from 256), and small sizes that up- and downscale these images.
        for (resize, size) in [(256, 224), (36, 32), (73, 64), (9, 8)] {
            cases.push(
                serde_json::json!({"path": path, "kind": "eval", "resize": resize, "size": size,
                                          "normalize": resize == 36}),
            );
            ours.push(eval_crop(&bytes, &opts, Frame::Stored, resize, size).unwrap());
        }
        // Training crops: boxes of several shapes, resized to 32 and 224.
        for (i, size) in [32u32, 224].into_iter().enumerate() {
            let b = (w / 5, h / 7, (w / 2).max(1), (h * 3 / 5).max(1));
            let b = if i == 1 { (0, 0, w, h) } else { b };
            cases.push(serde_json::json!({"path": path, "kind": "train", "box": [b.0, b.1, b.2, b.3], "size": size}));
            let region = decode_region(&bytes, &opts, Frame::Stored, |_, _| b).unwrap();
            let r = Resize {
                from: (b.2, b.3),
                to: (size, size),
                filter: Filter::Bilinear,
            };
            ours.push(r.run(&region.rgb, (0, 0), (0, 0, size, size)));
        }
    }
    assert!(cases.len() > 100, "{} cases", cases.len());
    run_python(SCRIPT, &cases, tmp.path());
    let mut floats = 0;
    for (i, (case, img)) in cases.iter().zip(&ours).enumerate() {
        let theirs = std::fs::read(tmp.path().join(format!("{i}.raw"))).unwrap();
        assert!(img.as_raw() == &theirs, "case {i}: {case}");
        if case["normalize"] == true {
            let mut chw = vec![0f32; img.as_raw().len()];
            to_chw(
                img,
                [0.485, 0.456, 0.406],
                [0.229, 0.224, 0.225],
                true,
                &mut chw,
            );
            let bits: Vec<u8> = chw.iter().flat_map(|v| v.to_le_bytes()).collect();
            let theirs = std::fs::read(tmp.path().join(format!("{i}.f32"))).unwrap();
            assert!(bits == theirs, "case {i}: normalised floats differ");
            floats += 1;
        }
    }
    eprintln!("{} cases, {floats} normalised", cases.len());
}

const RESIZE_SCRIPT: &str = r#"
import sys, json
import numpy as np
from PIL import Image
cases = json.load(open(sys.argv[1]))
for i, c in enumerate(cases):
    w, h = c["from"]
    a = np.frombuffer(open(f"{sys.argv[2]}/{i}.in", "rb").read(), np.uint8).reshape(h, w, 3)
    f = Image.BILINEAR if c["filter"] == "bilinear" else Image.LANCZOS
    out = Image.fromarray(a).resize(tuple(c["to"]), f)
    open(f"{sys.argv[2]}/{i}.out", "wb").write(np.asarray(out).tobytes())
"#;

#[test]
fn resizes_equal_pillows_whichever_pass_it_runs_first() {
    // Pillow 13 resizes vertically first when the height shrinks by more than twice what the
    // width does; random sizes land on both sides of that rule, and on its edge.
    let tmp = tempfile::tempdir().unwrap();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |n: u32| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as u32
    };
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for i in 0..240 {
        let (w, h) = (2 + next(90), 2 + next(90));
        let (ow, oh) = match i % 4 {
            // On the rule's edge: the width shrinks by 1 and the height by exactly 2 (Pillow goes
            // horizontally first) or by 3 (vertically first).
            0 if h > 4 => (w - 1, h - 2 - i % 8 / 4),
            _ => (1 + next(120), 1 + next(120)),
        };
        let filter = if i % 2 == 0 {
            Filter::Bilinear
        } else {
            Filter::Lanczos
        };
        let img = image::RgbImage::from_fn(w, h, |_, _| {
            image::Rgb([next(256) as u8, next(256) as u8, next(256) as u8])
        });
        std::fs::write(tmp.path().join(format!("{i}.in")), img.as_raw()).unwrap();
        let r = Resize {
            from: (w, h),
            to: (ow, oh),
            filter,
        };
        ours.push(r.run(&img, (0, 0), (0, 0, ow, oh)));
        let name = if filter == Filter::Bilinear {
            "bilinear"
        } else {
            "lanczos"
        };
        cases.push(serde_json::json!({"from": [w, h], "to": [ow, oh], "filter": name}));
    }
    run_python(RESIZE_SCRIPT, &cases, tmp.path());
    for (i, (case, img)) in cases.iter().zip(&ours).enumerate() {
        let theirs = std::fs::read(tmp.path().join(format!("{i}.out"))).unwrap();
        assert!(img.as_raw() == &theirs, "case {i}: {case}");
    }
}
