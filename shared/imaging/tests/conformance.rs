//! `sniff` and `decode_rgb` (what the tools run on each input) against Pillow 13's `Image.open(p).convert('RGB')` on the conformance corpus
//! (tests/fixtures/conformance, made by scripts/make-conformance-corpus.py): every file gives
//! Pillow's pixels bit for bit (tolerance 0: the promise is Pillow's preprocessing, and a decoder
//! that is one level off on one file is off on others), or both refuse it.
//!
//! The files where that does not hold yet are listed in known-gaps.txt with their class; the test
//! fails on any file that behaves otherwise than listed, in either direction, so the list can only
//! shrink with the code. A `lenient` entry is a file Pillow refuses and we decode on purpose (the
//! docs/imaging.md names them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use imaging::{DecodeOptions, decode_rgb};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/conformance")
}

/// Pillow's result for each file (expected.json) and the RGB bytes they point into (expected.rgb).
fn references(root: &Path) -> (BTreeMap<String, serde_json::Value>, Vec<u8>) {
    let expected =
        serde_json::from_str(&std::fs::read_to_string(root.join("expected.json")).unwrap())
            .unwrap();
    (expected, std::fs::read(root.join("expected.rgb")).unwrap())
}

/// How one file compares with Pillow.
#[derive(Debug, PartialEq, Eq)]
enum Class {
    Exact,
    BothRefuse,
    /// We refuse what Pillow decodes.
    Refused(String),
    /// Pillow refuses what we decode.
    Lenient,
    Differ {
        max: u8,
        size: Option<(u32, u32)>,
    },
}

impl Class {
    fn label(&self) -> &'static str {
        match self {
            Class::Exact => "exact",
            Class::BothRefuse => "both-refuse",
            Class::Refused(_) => "refused",
            Class::Lenient => "lenient",
            Class::Differ { .. } => "differ",
        }
    }
}

fn classify(bytes: &[u8], expected: &serde_json::Value, blob: &[u8]) -> Class {
    // The tools read only what `sniff` recognises from the first 64 bytes, then decode.
    let ours = match imaging::sniff(&bytes[..bytes.len().min(64)]) {
        Err(e) => Err(e),
        Ok(()) => std::panic::catch_unwind(|| decode_rgb(bytes, &DecodeOptions::default()))
            .unwrap_or_else(|_| Err(imaging::Error::Decode("panicked".into()))),
    };
    let theirs = expected.get("offset").map(|o| {
        let (w, h) = (
            expected["width"].as_u64().unwrap(),
            expected["height"].as_u64().unwrap(),
        );
        let at = o.as_u64().unwrap() as usize;
        ((w as u32, h as u32), &blob[at..at + (w * h * 3) as usize])
    });
    match (ours, theirs) {
        (Err(_), None) => Class::BothRefuse,
        (Ok(_), None) => Class::Lenient,
        (Err(e), Some(_)) => Class::Refused(e.to_string()),
        (Ok(d), Some((dims, pixels))) => {
            if d.rgb.dimensions() != dims {
                return Class::Differ {
                    max: 255,
                    size: Some(d.rgb.dimensions()),
                };
            }
            let max = d
                .rgb
                .as_raw()
                .iter()
                .zip(pixels)
                .map(|(a, b)| a.abs_diff(*b))
                .max()
                .unwrap_or(0);
            if max == 0 {
                Class::Exact
            } else {
                Class::Differ { max, size: None }
            }
        }
    }
}

#[test]
fn decoding_matches_pillow_on_the_conformance_corpus() {
    let root = root();
    let (expected, blob) = references(&root);
    let gaps: BTreeMap<String, String> = std::fs::read_to_string(root.join("known-gaps.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next().unwrap().to_string();
            (name, it.next().expect("a class after the name").to_string())
        })
        .collect();
    assert!(expected.len() > 900, "the corpus is incomplete");
    let mut counts = BTreeMap::<&str, usize>::new();
    let mut wrong = Vec::new();
    for (name, exp) in &expected {
        let bytes = std::fs::read(root.join("files").join(name)).unwrap();
        let class = classify(&bytes, exp, &blob);
        *counts.entry(class.label()).or_default() += 1;
        let listed = gaps.get(name).map(String::as_str);
        let ok = match (&class, listed) {
            (Class::Exact | Class::BothRefuse, None) => true,
            (Class::Exact | Class::BothRefuse, Some(_)) => false,
            (c, Some(l)) => c.label() == l,
            (_, None) => false,
        };
        if !ok {
            let theirs = exp.get("refused").map_or_else(
                || format!("Pillow: {}", exp["mode"]),
                |r| format!("Pillow: {r}"),
            );
            wrong.push(format!(
                "{name}: {class:?}, listed as {} ({theirs})",
                listed.unwrap_or("conforming")
            ));
        }
    }
    for name in gaps.keys() {
        if !expected.contains_key(name) {
            wrong.push(format!(
                "{name}: listed in known-gaps.txt but not in the corpus"
            ));
        }
    }
    eprintln!("{} files: {counts:?}", expected.len());
    assert!(
        wrong.is_empty(),
        "{} files behave otherwise than known-gaps.txt says:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

unsafe extern "C" {
    /// glibc's `mallopt`.
    fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
}

/// A fax-coded strip with a bad code word half way: libtiff decodes the lines before it and
/// leaves the rest of the strip buffer untouched. Pillow's rows there are white (its buffer is
/// zeroed); ours must be too, whatever the heap held before. glibc's M_PERTURB makes every
/// block malloc hands out hold a set byte instead of what chance left there.
#[test]
fn fax_strips_that_end_early_decode_as_pillows_whatever_the_heap_held() {
    const M_PERTURB: std::ffi::c_int = -6;
    // SAFETY: mallopt only changes how glibc's malloc fills the blocks it hands out.
    assert_eq!(unsafe { mallopt(M_PERTURB, 0xA5) }, 1);
    let root = root();
    let (expected, blob) = references(&root);
    let names: Vec<&String> = (expected.keys())
        .filter(|n| n.contains("bad-code-word"))
        .collect();
    assert!(names.len() >= 2, "{names:?}");
    for name in names {
        let bytes = std::fs::read(root.join("files").join(name)).unwrap();
        assert_eq!(
            classify(&bytes, &expected[name], &blob),
            Class::Exact,
            "{name}"
        );
    }
    // SAFETY: as above; 0 turns the filling off again.
    unsafe { mallopt(M_PERTURB, 0) };
}
