//! The RecordIO reader against files written by a transcription of MXNet's writer (dmlc-core's
//! `RecordIOWriter::WriteRecord`, which cuts a record at every aligned magic word, and
//! `mxnet.recordio`'s `pack` and `MXIndexedRecordIO`), in pure Python: every record's header,
//! labels and payload, the image keys as MXFaceDataset lists them, and the errors for damaged
//! files.

mod common;

use train_data::recordio::{Damage, Error, RecordIo};

/// An error and its causes, as a tool prints them.
fn text(e: &Error) -> String {
    error_class::chain_text(e)
}

/// Writes PREFIX.rec/.idx with scripts/reference/mxnet_recordio.py and prints the records as
/// JSON: [key, flag, label, labels, id, id2, payload hex].
const WRITER: &str = r#"
import struct, sys, json
sys.path.insert(0, sys.argv[2])
from mxnet_recordio import MAGIC, pack, write
m = struct.pack("<I", MAGIC)
records = [
    (0, [5.0, 7.0], b""),                       # the header record: images 1..4
    (1, 3.0, b"\xff\xd8jpeg bytes"),
    (2, [1.0, 0.5], b"abcd" + m + b"efgh"),     # a magic word inside: three parts
    (3, 9.0, m + m + b"x"),                     # two at the start
    (4, 2.0, b"tail" + m),                      # one at the end
    (9, 4.0, b"not listed as an image"),
]
write(sys.argv[1], [(k, pack(label, payload, id_=k * 10, id2=7)) for k, label, payload in records])
print(json.dumps([[k, len(l) if isinstance(l, list) else 0, 0.0 if isinstance(l, list) else l,
                   l if isinstance(l, list) else [], k * 10, 7, p.hex()] for k, l, p in records]))
"#;

#[test]
fn records_written_as_mxnet_writes_them_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("train");
    let scripts = format!("{}/../../scripts/reference", env!("CARGO_MANIFEST_DIR"));
    let out = common::run_script(WRITER, &[prefix.as_os_str(), scripts.as_ref()]);
    let expected: Vec<serde_json::Value> = serde_json::from_slice(&out).unwrap();
    let rec = RecordIo::open(&prefix).unwrap();
    assert_eq!(rec.index.len(), expected.len());
    for e in &expected {
        let key = e[0].as_u64().unwrap();
        let r = rec.read(rec.offset(key).unwrap()).unwrap();
        assert_eq!(r.flag as u64, e[1].as_u64().unwrap(), "key {key}");
        assert_eq!(r.label as f64, e[2].as_f64().unwrap(), "key {key}");
        let labels: Vec<f64> = e[3]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(
            r.labels.iter().map(|&v| v as f64).collect::<Vec<_>>(),
            labels,
            "key {key}"
        );
        assert_eq!((r.id, r.id2), (key * 10, 7));
        let hex: String = r.payload.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, e[6].as_str().unwrap(), "key {key}");
    }
    assert_eq!(rec.image_keys().unwrap(), [1, 2, 3, 4]);
    assert_eq!(rec.read(rec.offset(2).unwrap()).unwrap().class(), 1.0);
    // The class alone (what listing a set reads), for a record in one part and one in three.
    assert_eq!(rec.class(rec.offset(1).unwrap()).unwrap(), 3.0);
    assert_eq!(rec.class(rec.offset(2).unwrap()).unwrap(), 1.0);

    // Cut short: an error naming the file and the offset, not a hang or a panic.
    let bytes = std::fs::read(prefix.with_extension("rec")).unwrap();
    let last = rec.offset(9).unwrap() as usize;
    std::fs::write(prefix.with_extension("rec"), &bytes[..last + 12]).unwrap();
    let e = RecordIo::open(&prefix)
        .unwrap()
        .read(last as u64)
        .unwrap_err();
    assert!(
        matches!(&e, Error::Damaged { damage: Damage::Truncated, offset, .. } if *offset > last as u64),
        "{e}"
    );
    let e = text(&e);
    assert!(e.contains("train.rec") && e.contains("truncated"), "{e}");
    // An offset that is not a record.
    std::fs::write(prefix.with_extension("rec"), &bytes).unwrap();
    let e = RecordIo::open(&prefix).unwrap().read(4).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Damaged {
                damage: Damage::BadMagic,
                offset: 4,
                ..
            }
        ),
        "{e}"
    );
    let e = text(&e);
    assert!(e.contains("at byte 4") && e.contains("magic"), "{e}");
    // An index pointing past the file.
    std::fs::write(prefix.with_extension("idx"), "1\t999999\n").unwrap();
    let e = RecordIo::open(&prefix).unwrap_err();
    assert!(
        matches!(
            e,
            Error::OffsetPastEnd {
                line: 1,
                offset: 999999,
                ..
            }
        ),
        "{e}"
    );
    assert!(text(&e).contains("past the end"), "{e}");
}

/// A `.rec` truncated while it is read (a memory map gave SIGBUS), a header record whose label
/// would size the key list (4e9 keys: 32 GB; 1e30: "capacity overflow"), and FIFOs in place of
/// the files (an open that waits for a writer for ever): each an error naming the file.
#[test]
fn truncation_a_huge_header_label_and_fifos_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("train");
    let scripts = format!("{}/../../scripts/reference", env!("CARGO_MANIFEST_DIR"));
    common::run_script(WRITER, &[prefix.as_os_str(), scripts.as_ref()]);
    let rec = RecordIo::open(&prefix).unwrap();
    let (rec_path, idx_path) = (prefix.with_extension("rec"), prefix.with_extension("idx"));
    let at = rec.offset(9).unwrap();
    // Cut to a page boundary below the record, after the open (SIGBUS with a mapping).
    std::fs::File::options()
        .write(true)
        .open(&rec_path)
        .unwrap()
        .set_len(0)
        .unwrap();
    let e = text(&rec.read(at).unwrap_err());
    assert!(e.contains("train.rec") && e.contains("truncated"), "{e}");

    let header = r#"
import sys
sys.path.insert(0, sys.argv[2])
from mxnet_recordio import pack, write
write(sys.argv[1], [(0, pack([float(sys.argv[3]), 2.0], b"")), (1, pack(1.0, b"x"))])
"#;
    for end in ["4e9", "1e30", "3e8"] {
        common::run_script(
            header,
            &[prefix.as_os_str(), scripts.as_ref(), end.as_ref()],
        );
        let e = RecordIo::open(&prefix).unwrap().image_keys().unwrap_err();
        assert!(
            matches!(e, Error::HeaderPastIndex { records: 2, .. }),
            "{e}"
        );
        assert!(
            e.to_string().contains("the index holds 2 records"),
            "{end}: {e}"
        );
    }

    for path in [&rec_path, &idx_path] {
        std::fs::remove_file(path).unwrap();
        testkit::mkfifo(path);
        let e = RecordIo::open(&prefix).unwrap_err();
        assert!(matches!(e, Error::Open { .. }), "{e}");
        let e = text(&e);
        assert!(e.contains("is a FIFO, not a regular file"), "{e}");
        std::fs::remove_file(path).unwrap();
        std::fs::write(path, b"").unwrap();
    }
}

/// `PREFIX.lst` beside the records: im2rec's own lists (several labels, CRLF), escapes read
/// back, a key it does not name, and a damaged line named by its number, never a panic.
#[test]
fn the_list_beside_names_records_and_a_damaged_line_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("data");
    let mut w = data_pack::RecordWriter::create(&prefix).unwrap();
    for key in 0..3 {
        w.add(key, key as f32, b"payload").unwrap();
    }
    w.finish().unwrap();
    let lst = data_pack::lst_path(&prefix);
    std::fs::write(
        &lst,
        b"0\t1.000000\t2.000000\tcat/a b.jpg\r\n1\t0.000000\tx\\ty\\\\z.png\n\n",
    )
    .unwrap();
    let rec = RecordIo::open(&prefix).unwrap();
    let path = |k| rec.packed_path(k).unwrap();
    assert_eq!(path(0), Some("cat/a b.jpg".into()));
    assert_eq!(path(1), Some("x\ty\\z.png".into()));
    assert_eq!(path(2), None, "a key the list does not name");
    for (bad, line) in [(&b"0\t1.0\tok.png\n7 no tab\n"[..], 2), (b"k\t1.0\tp\n", 1)] {
        std::fs::write(&lst, bad).unwrap();
        let e = RecordIo::open(&prefix).unwrap().packed_path(0).unwrap_err();
        assert!(
            matches!(e, Error::ListLine { line: l, .. } if l == line),
            "{e}"
        );
    }
    // A list in place of which there is a FIFO is refused when the set is opened.
    std::fs::remove_file(&lst).unwrap();
    testkit::mkfifo(&lst);
    let e = RecordIo::open(&prefix).unwrap_err();
    assert!(text(&e).contains("is a FIFO"), "{e}");
}
