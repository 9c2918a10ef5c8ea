//! The shard reader against shards written by webdataset's own `ShardWriter` (venv) and read
//! back by its own `WebDataset`: the same samples in the same order, keys, image bytes and
//! classes; brace patterns expanded as its `braceexpand`; and the errors for damaged shards.

mod common;

use common::run_script as run;
use train_data::wds::{Error, Shards, braceexpand};

/// An error and its causes, as a tool prints them.
fn text(e: &Error) -> String {
    error_class::chain_text(e)
}

/// Writes DIR/shard-00000.tar.. with webdataset's ShardWriter (4 samples a shard), then reads
/// them with webdataset and prints, per sample it groups: key, the suffixes, and the image
/// (first of jpg, jpeg, png, webp) and class (cls, else json label) as this project picks them.
const WRITE_AND_READ: &str = r#"
import json, sys, io, tarfile, logging
logging.disable(logging.WARNING)
import webdataset as wds
d = sys.argv[1]
samples = [
    {"__key__": "a/000", "jpg": b"\xff\xd8 jpeg zero", "cls": 3},
    {"__key__": "a/001", "png": b"\x89PNG one", "json": {"label": 7, "caption": "x"}},
    {"__key__": "a/002", "webp": b"RIFF two", "cls": 0, "txt": "words"},
    {"__key__": "n" * 120, "jpg": b"long key, a pax header", "cls": 1},
    {"__key__": "dir.v2/003", "jpg": b"a dotted folder", "cls": 2},
    {"__key__": "no-label", "jpg": b"left out"},
    {"__key__": "no-image", "cls": 5},
    {"__key__": "caf\u00e9", "jpeg": b"non-ascii key", "cls": 4},
    {"__key__": "both", "png": b"png loses", "jpg": b"jpg wins", "cls": 6},
]
with wds.ShardWriter(d + "/shard-%05d.tar", maxcount=4, verbose=0) as w:
    for s in samples:
        w.write(s)
# An upper-case suffix and a metadata file, written by hand (tar as tar(1) would).
with tarfile.open(d + "/shard-00003.tar", "w", format=tarfile.GNU_FORMAT) as t:
    for name, data in [("__index__", b"meta"), ("up/010.JPG", b"upper case"), ("up/010.CLS", b"9")]:
        ti = tarfile.TarInfo(name); ti.size = len(data); t.addfile(ti, io.BytesIO(data))
out = []
for s in wds.WebDataset(d + "/shard-{00000..00003}.tar", shardshuffle=False, empty_check=False):
    img = next((s[k] for k in ["jpg", "jpeg", "png", "webp"] if k in s), None)
    if "cls" in s:
        label = int(s["cls"])
    elif "json" in s:
        label = json.loads(s["json"])["label"]
    else:
        label = None
    if img is None or label is None:
        continue
    out.append([s["__url__"] + ":" + s["__key__"], img.hex(), label])
print(json.dumps(out))
"#;

#[test]
fn shards_written_and_read_by_webdataset_read_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let expected: Vec<serde_json::Value> =
        serde_json::from_slice(&run(WRITE_AND_READ, &[tmp.path()])).unwrap();
    assert_eq!(expected.len(), 8, "{expected:?}");
    let pattern = tmp.path().join("shard-{00000..00003}.tar");
    let shards = Shards::open(pattern.as_os_str()).unwrap();
    assert_eq!(shards.files.len(), 4);
    assert_eq!(shards.samples.len(), expected.len());
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(
            shards.name(i).to_str().unwrap(),
            e[0].as_str().unwrap(),
            "sample {i}"
        );
        let bytes = shards.read(i, 1 << 20).unwrap();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, e[1].as_str().unwrap(), "sample {i}");
        assert_eq!(
            shards.samples[i].label,
            e[2].as_i64().unwrap(),
            "sample {i}"
        );
    }
    // The two samples without an image or a class are left out, and said so.
    assert_eq!(shards.left_out_count, 2, "{:?}", shards.left_out);
    assert!(shards.left_out[0].ends_with(":no-label: no `cls` or `json` file (its class)"));
    assert!(shards.left_out[1].ends_with(":no-image: no image file"));
    // Beyond the limit an image is refused before it is read.
    let e = shards.read(0, 3).unwrap_err();
    assert!(matches!(e, Error::ImageTooLarge { limit: 3, .. }), "{e}");
    assert!(text(&e).contains("over the 3"));
}

#[test]
fn brace_patterns_expand_as_braceexpand_does() {
    let patterns = [
        "s/{00000..00012}.tar",
        "{a,b{1..3},c}-{x..z}",
        "{9..11..2}{-1..1}",
        "{-05..5..3}",
        "a{}b{,}c",
        r"x\{1,2\}{1,2}",
        "{Y..b}{0..0}",
        "{1..3..0}",
        "{a..e..-2}",
    ];
    let script = "import sys, json, braceexpand\n\
                  print(json.dumps([list(braceexpand.braceexpand(p)) for p in sys.argv[1:]]))";
    let expected: Vec<Vec<String>> = serde_json::from_slice(&run(script, &patterns)).unwrap();
    for (p, e) in patterns.iter().zip(expected) {
        let ours: Vec<String> = braceexpand(p.as_bytes())
            .unwrap()
            .into_iter()
            .map(|s| String::from_utf8(s).unwrap())
            .collect();
        assert_eq!(ours, e, "{p}");
    }
}

#[test]
fn damaged_shards_are_errors_naming_the_file_and_the_byte() {
    let tmp = tempfile::tempdir().unwrap();
    // Each member: (name, header offset, data offset) as Python's tarfile reads them.
    let members: Vec<(String, usize, usize)> = serde_json::from_slice(&run(
        r#"
import sys, json, tarfile, webdataset as wds
p = sys.argv[1] + "/good.tar"
with wds.TarWriter(p) as w:
    for i in range(3):
        w.write({"__key__": "%03d" % i, "jpg": b"\x01" * 3000, "cls": i})
print(json.dumps([[m.name, m.offset, m.offset_data] for m in tarfile.open(p)]))
"#,
        &[tmp.path()],
    ))
    .unwrap();
    let at = |name: &str| members.iter().find(|m| m.0 == name).unwrap();
    let good = std::fs::read(tmp.path().join("good.tar")).unwrap();
    let open = |name: &str, bytes: &[u8]| {
        let p = tmp.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        Shards::open(p.as_os_str()).map(|s| s.samples.len())
    };
    assert_eq!(open("copy.tar", &good).unwrap(), 3);
    // Cut inside the last image: the member says how much is missing.
    let e = open("cut.tar", &good[..at("002.jpg").2 + 1000]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::CutShort {
                size: 3000,
                left: 1000,
                ..
            }
        ),
        "{e}"
    );
    let e = text(&e);
    assert!(
        e.contains("cut.tar: cut short: member 002.jpg at byte")
            && e.contains("holds 3000 bytes, and the file ends 1000 bytes after its start"),
        "{e}"
    );
    // Cut inside a header.
    let e = open("cut-header.tar", &good[..at("002.cls").1 + 100]).unwrap_err();
    assert!(matches!(e, Error::Damaged { .. }), "{e}");
    let e = text(&e);
    assert!(
        e.contains(&format!(
            "cut-header.tar: damaged or cut short after byte {}",
            at("001.jpg").2 + 3000
        )),
        "{e}"
    );
    // A header whose checksum is wrong.
    let mut bad = good.clone();
    bad[at("001.cls").1] ^= 1;
    let e = text(&open("bad-sum.tar", &bad).unwrap_err());
    assert!(
        e.contains("bad-sum.tar: damaged") && e.contains("checksum"),
        "{e}"
    );
    // Compressed shards cannot be read by position.
    let e = open("gz.tar", &[0x1f, 0x8b, 8, 0]).unwrap_err();
    assert!(matches!(e, Error::Compressed { .. }), "{e}");
    assert!(
        text(&e).contains("gz.tar: a compressed (gzip) shard"),
        "{e}"
    );
    // No such file; a shard that holds nothing.
    let e = Shards::open(tmp.path().join("none-{0..1}.tar").as_os_str()).unwrap_err();
    let Error::Open { path, source } = &e else {
        panic!("{e}")
    };
    assert!(path.ends_with("none-0.tar"), "{e}");
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    assert!(text(&e).contains("none-0.tar: No such file"), "{e}");
    let e = text(&open("empty.tar", &[0; 1024]).unwrap_err());
    assert!(
        e.contains("no sample with an image and a class in 1 shard"),
        "{e}"
    );
}

#[test]
fn a_suffix_twice_in_a_sample_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    run(
        r#"
import sys, io, tarfile
with tarfile.open(sys.argv[1] + "/dup.tar", "w") as t:
    for name in ["k.jpg", "k.cls", "k.JPG"]:
        ti = tarfile.TarInfo(name); ti.size = 1; t.addfile(ti, io.BytesIO(b"1"))
"#,
        &[tmp.path()],
    );
    let e = Shards::open(tmp.path().join("dup.tar").as_os_str()).unwrap_err();
    assert!(matches!(e, Error::Duplicate { .. }), "{e}");
    assert!(text(&e).contains("a second `jpg` file for sample k"), "{e}");
}

#[test]
fn a_fifo_among_the_shards_is_refused_not_waited_on() {
    // Opening a FIFO for reading waits for a writer: the shard is checked before it is opened.
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("shard.tar");
    testkit::mkfifo(&fifo);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Shards::open(fifo.as_os_str()).map(|s| s.samples.len()));
    });
    let e = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("Shards::open returned")
        .unwrap_err();
    assert!(
        text(&e).contains("shard.tar is a FIFO, not a regular file"),
        "{e}"
    );
}
