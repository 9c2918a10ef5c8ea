//! `ImageFolder::scan` against torchvision 0.26's `datasets.ImageFolder` (from the project venv)
//! on generated trees: the same classes and the same (path, label) list in the same order, or
//! the same refusal.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
mod common;

use train_data::folder::ImageFolder;

/// torchvision's classes and samples (paths as hex of their bytes), or its error's first line.
/// Class names and (path, label) samples, as bytes, or an error's text.
type Scan = Result<(Vec<Vec<u8>>, Vec<(Vec<u8>, i64)>), String>;

fn torchvision(dir: &Path) -> Scan {
    let script = r#"
import os, sys, json
from torchvision.datasets import ImageFolder
try:
    d = ImageFolder(sys.argv[1], loader=lambda p: None)
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
else:
    print(json.dumps({"classes": [os.fsencode(c).hex() for c in d.classes],
                      "samples": [[os.fsencode(p).hex(), t] for p, t in d.samples]}))
"#;
    let v: serde_json::Value = serde_json::from_slice(&common::run_script(script, &[dir])).unwrap();
    if let Some(e) = v.get("error") {
        return Err(e.as_str().unwrap().to_string());
    }
    let hex = |s: &serde_json::Value| {
        let s = s.as_str().unwrap();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>()
    };
    Ok((
        v["classes"].as_array().unwrap().iter().map(hex).collect(),
        v["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (hex(&s[0]), s[1].as_i64().unwrap()))
            .collect(),
    ))
}

fn ours(dir: &Path) -> Scan {
    let f = ImageFolder::scan(dir).map_err(|e| e.to_string())?;
    Ok((
        f.classes.iter().map(|c| c.as_bytes().to_vec()).collect(),
        f.samples
            .iter()
            .map(|(p, l)| (p.as_os_str().as_bytes().to_vec(), *l))
            .collect(),
    ))
}

fn touch(root: &Path, rel: &[u8]) {
    let p = root.join(OsStr::from_bytes(rel));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, b"x").unwrap();
}

#[test]
fn classes_and_samples_are_torchvisions() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("tree");
    for rel in [
        &b"cat/1.jpg"[..],
        b"cat/10.JPG",
        b"cat/2.Jpeg",
        b"cat/notes.txt",
        b"cat/sub/deeper/a.png",
        b"cat/sub/b.webp",
        b"cat/sub2/c.tif",
        b"cat/sub-x/d.bmp",
        b"cat/sub.x/e.pgm",
        b"dog/\xff\xfe.png",
        b"dog/caf\xc3\xa9.ppm",
        b"dog/\xee\x80\x80.tiff",
        b"dog/z.gif",
        b"Zebra/Z.PNG",
        b"\xe9l\xe9phant/e.jpg",
        b"a b/x.jpeg",
    ] {
        touch(&root, rel);
    }
    // Symlinks: a class that is a link to a directory, a linked file, a linked sub-directory, a
    // broken link with an image name, a plain file beside the classes.
    touch(tmp.path(), b"elsewhere/w.jpg");
    touch(tmp.path(), b"elsewhere/inner/v.png");
    std::os::unix::fs::symlink(tmp.path().join("elsewhere"), root.join("linked")).unwrap();
    std::os::unix::fs::symlink(root.join("cat/1.jpg"), root.join("dog/alias.jpg")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("elsewhere/inner"), root.join("dog/inner")).unwrap();
    std::os::unix::fs::symlink(root.join("nowhere.jpg"), root.join("dog/broken.jpg")).unwrap();
    std::fs::write(root.join("stray.jpg"), b"x").unwrap();
    let theirs = torchvision(&root).unwrap();
    assert_eq!(ours(&root).unwrap(), theirs);
    assert_eq!(theirs.0.len(), 6, "{:?}", theirs.0);
    assert!(theirs.1.len() > 15);

    // An empty class (only a non-image file) and a tree without classes: the same errors.
    touch(&root, b"empty/readme.txt");
    let (a, b) = (ours(&root).unwrap_err(), torchvision(&root).unwrap_err());
    assert!(b.ends_with(&a), "ours: {a}\ntorchvision: {b}");
    let flat = tmp.path().join("flat");
    touch(&flat, b"a.jpg");
    let (a, b) = (ours(&flat).unwrap_err(), torchvision(&flat).unwrap_err());
    assert!(b.ends_with(&a), "ours: {a}\ntorchvision: {b}");
}

#[test]
fn a_symlink_loop_is_an_error_not_a_hang() {
    let tmp = tempfile::tempdir().unwrap();
    touch(tmp.path(), b"cls/a.jpg");
    std::os::unix::fs::symlink(tmp.path().join("cls"), tmp.path().join("cls/again")).unwrap();
    let e = ImageFolder::scan(tmp.path()).unwrap_err().to_string();
    assert!(e.contains("loop"), "{e}");
}
