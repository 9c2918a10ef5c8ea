use std::path::Path;

use assert_cmd::Command;
use ndarray::{Array2, Array3};
use ndarray_npy::{NpzReader, NpzWriter, WriteNpyExt};
use serde_json::Value;

/// gather-npz prints error records and a summary (no item records).
type Out = testkit::Batch<records::LatentRecord>;

fn exec(dir: &Path, args: &[&str], stdin: &str) -> std::process::Output {
    Command::cargo_bin("gather-npz")
        .unwrap()
        .current_dir(dir)
        .args(args)
        .write_stdin(stdin)
        .output()
        .unwrap()
}

/// Exit status and stderr of a run refused before it starts (no records).
fn refused(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = exec(dir, args, "");
    assert!(out.stdout.is_empty());
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Exit status, the records decoded, stderr.
fn run(dir: &Path, args: &[&str], stdin: &str) -> (i32, Out, String) {
    let out = exec(dir, args, stdin);
    (
        out.status.code().unwrap(),
        decode(&out.stdout),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn decode(stdout: &[u8]) -> Out {
    let out: Out = testkit::batch(stdout);
    assert!(out.items.is_empty());
    out
}

fn latent(k: usize, d: usize, base: f32) -> Array3<f32> {
    Array3::from_shape_fn((1, k, d), |(_, i, j)| base + (i * d + j) as f32)
}

fn npz(path: &Path, key: &str, a: &Array3<f32>, compressed: bool) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = if compressed {
        NpzWriter::new_compressed(f)
    } else {
        NpzWriter::new(f)
    };
    w.add_array(key, a).unwrap();
    w.finish().unwrap();
}

fn w_of(path: &Path) -> Array3<f32> {
    NpzReader::new(std::fs::File::open(path).unwrap())
        .unwrap()
        .by_name("w")
        .unwrap()
}

#[test]
fn gathers_npz_and_npy_in_input_order() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    npz(&d.join("a.npz"), "w", &latent(2, 3, 0.0), false);
    npz(&d.join("b.npz"), "w", &latent(2, 3, 100.0), true); // savez_compressed
    latent(2, 3, 200.0)
        .write_npy(std::fs::File::create(d.join("c.npy")).unwrap())
        .unwrap();
    let (code, out, _) = run(d, &["-o", "all.npz", "c.npy", "a.npz", "b.npz"], "");
    assert_eq!(code, 0);
    assert!(out.errors.is_empty());
    assert_eq!(out.summary.shape, Some(vec![3, 2, 3]));
    assert_eq!(
        out.summary.output.unwrap(),
        d.join("all.npz").canonicalize().unwrap()
    );
    let w = w_of(&d.join("all.npz"));
    assert_eq!(w.shape(), &[3, 2, 3]);
    assert_eq!(
        (w[[0, 0, 0]], w[[1, 1, 2]], w[[2, 0, 1]]),
        (200.0, 5.0, 101.0)
    );
}

#[test]
fn bad_files_are_error_records_naming_them_and_the_rest_are_gathered() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("garbage.npz"), b"PK\x03\x04 not really a zip").unwrap();
    npz(&d.join("good1.npz"), "w", &latent(1, 4, 0.0), false);
    npz(&d.join("wide.npz"), "w", &latent(1, 5, 0.0), false);
    npz(&d.join("otherkey.npz"), "z", &latent(1, 4, 0.0), false);
    let f = std::fs::File::create(d.join("f64.npz")).unwrap();
    let mut w = NpzWriter::new(f);
    w.add_array("w", &Array3::<f64>::zeros((1, 1, 4))).unwrap();
    w.finish().unwrap();
    let f = std::fs::File::create(d.join("flat.npz")).unwrap();
    let mut w = NpzWriter::new(f);
    w.add_array("w", &Array2::<f32>::zeros((1, 4))).unwrap();
    w.finish().unwrap();
    npz(&d.join("good2.npz"), "w", &latent(1, 4, 10.0), false);
    let list = "garbage.npz\nflat.npz\ngood1.npz\nwide.npz\nmissing.npz\notherkey.npz\nf64.npz\ngood2.npz\n";
    let (code, out, stderr) = run(d, &["-o", "out/all.npz"], list);
    assert_eq!(code, 3);
    let errors = out.errors();
    let names: Vec<&str> = errors.iter().map(|e| e.0).collect();
    assert_eq!(
        names,
        [
            "garbage.npz",
            "flat.npz",
            "wide.npz",
            "missing.npz",
            "otherkey.npz",
            "f64.npz"
        ]
    );
    assert!(errors[1].1.contains("not [1, k, d]"), "{}", errors[1].1);
    assert!(
        errors[2]
            .1
            .contains("differs from the first input's [1, 1, 4]"),
        "{}",
        errors[2].1
    );
    assert!(errors[4].1.contains("no array `w`"), "{}", errors[4].1);
    assert_eq!((out.summary.ok, out.summary.failed), (2, 6));
    assert!(stderr.contains("6 of 8 inputs failed"));
    let w = w_of(&d.join("out/all.npz"));
    assert_eq!(w.shape(), &[2, 1, 4]);
    assert_eq!(w[[1, 0, 3]], 13.0);
    let leftovers: Vec<_> = std::fs::read_dir(d.join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        1,
        "no scratch or temp files left: {leftovers:?}"
    );
}

#[test]
fn existing_output_needs_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    npz(&d.join("a.npz"), "w", &latent(1, 2, 0.0), false);
    assert_eq!(run(d, &["-o", "all.npz", "a.npz"], "").0, 0);
    let (code, stderr) = refused(d, &["-o", "all.npz", "a.npz"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("--overwrite"), "{stderr}");
    assert_eq!(run(d, &["-o", "all.npz", "--overwrite", "a.npz"], "").0, 0);
    // A directory is not an output, --overwrite or not (was "pass --overwrite").
    std::fs::create_dir(d.join("dir")).unwrap();
    for extra in [&[][..], &["--overwrite"][..]] {
        let mut args = vec!["-o", "dir", "a.npz"];
        args.extend_from_slice(extra);
        let (code, stderr) = refused(d, &args);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("is a directory"), "{stderr}");
    }
}

#[test]
fn the_output_is_never_an_input_of_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    npz(&d.join("a.npz"), "w", &latent(2, 3, 0.0), false);
    npz(&d.join("b.npz"), "w", &latent(2, 3, 10.0), false);
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::hard_link(d.join("b.npz"), d.join("sub/linked.npz")).unwrap();
    std::os::unix::fs::symlink(d, d.join("here")).unwrap();
    let before = |p: &str| std::fs::read(d.join(p)).unwrap();
    let (a, b) = (before("a.npz"), before("b.npz"));
    // The output by its name, through a symlinked directory, and as a hard link to an input.
    for (output, input) in [
        ("b.npz", "b.npz"),
        ("here/a.npz", "a.npz"),
        ("sub/linked.npz", "b.npz"),
    ] {
        let (code, stderr) = refused(d, &["-o", output, "--overwrite", "a.npz", "b.npz"]);
        assert_eq!(code, 2, "{output}: {stderr}");
        assert!(
            stderr.contains(&format!("-o {output} is the input {input} of this run")),
            "{stderr}"
        );
    }
    assert!(
        before("a.npz") == a && before("b.npz") == b,
        "the inputs are untouched"
    );
}

#[test]
fn two_runs_at_once_never_both_write_one_output() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let names: Vec<String> = (0..200).map(|i| format!("l{i}.npz")).collect();
    for (i, n) in names.iter().enumerate() {
        npz(&d.join(n), "w", &latent(4, 64, i as f32), false);
    }
    let list = names.join("\n");
    for round in 0..3 {
        let out = format!("same{round}.npz");
        let spawn = || {
            let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("gather-npz"));
            c.current_dir(d)
                .args(["-o", &out])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped());
            let mut child = c.spawn().unwrap();
            let mut stdin = child.stdin.take().unwrap();
            let list = list.clone();
            std::thread::spawn(move || {
                std::io::Write::write_all(&mut stdin, list.as_bytes()).unwrap()
            });
            child
        };
        let (a, b) = (spawn(), spawn());
        let codes = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let mut c: Vec<i32> = codes.iter().map(|o| o.status.code().unwrap()).collect();
        c.sort();
        assert_eq!(c, [0, 1], "exactly one run writes {out}; the other fails");
        let loser = codes.iter().find(|o| o.status.code() == Some(1)).unwrap();
        assert!(
            String::from_utf8_lossy(&loser.stderr).contains("--overwrite"),
            "{}",
            String::from_utf8_lossy(&loser.stderr)
        );
        assert_eq!(w_of(&d.join(&out)).shape(), [200, 4, 64]);
    }
    let left: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "temp files left: {left:?}");
}

#[test]
fn nothing_gathered_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // No input at all: exit 1, no file (an empty [0,0,0] array made the re-run refuse).
    let (code, out, stderr) = run(d, &["-o", "all.npz"], "");
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("no inputs"), "{stderr}");
    assert_eq!(out.summary.ok, 0);
    assert!(!d.join("all.npz").exists());
    // Every input failed: error records, exit 3, no file.
    std::fs::write(d.join("bad.npz"), b"not a zip").unwrap();
    let (code, out, _) = run(d, &["-o", "all.npz", "bad.npz", "missing.npz"], "");
    assert_eq!(code, 3);
    assert_eq!(out.errors.len(), 2);
    assert!(out.summary.output.is_none());
    assert!(!d.join("all.npz").exists());
}

#[test]
fn non_finite_latents_and_ambiguous_archives_are_error_records() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    npz(&d.join("good.npz"), "w", &latent(1, 3, 0.0), false);
    let mut nan = latent(1, 3, 0.0);
    nan[[0, 0, 1]] = f32::NAN;
    npz(&d.join("nan.npz"), "w", &nan, false);
    let mut inf = latent(1, 3, 0.0);
    inf[[0, 0, 2]] = f32::INFINITY;
    inf.write_npy(std::fs::File::create(d.join("inf.npy")).unwrap())
        .unwrap();
    // Two entries named w.npy: numpy reads the last, gather-npz's fast path read the first.
    // (The zip writer refuses duplicates, so the second is written as x.npy and renamed in the
    // bytes: names are not covered by the CRCs.)
    {
        use std::io::Write as _;
        let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for (name, base) in [("w.npy", 0.0), ("x.npy", 9.0)] {
            let mut bytes = Vec::new();
            latent(1, 3, base).write_npy(&mut bytes).unwrap();
            z.start_file(name, opts).unwrap();
            z.write_all(&bytes).unwrap();
        }
        let mut bytes = z.finish().unwrap().into_inner();
        for i in 0..bytes.len() - 5 {
            if &bytes[i..i + 5] == b"x.npy" {
                bytes[i] = b'w';
            }
        }
        std::fs::write(d.join("twice.npz"), bytes).unwrap();
    }
    let (code, out, _) = run(
        d,
        &[
            "-o",
            "all.npz",
            "good.npz",
            "nan.npz",
            "inf.npy",
            "twice.npz",
        ],
        "",
    );
    assert_eq!(code, 3);
    let errors = out.errors();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors[0].0 == "nan.npz" && errors[0].1.contains("non-finite"),
        "{errors:?}"
    );
    assert!(
        errors[1].0 == "inf.npy" && errors[1].1.contains("non-finite"),
        "{errors:?}"
    );
    assert!(
        errors[2].0 == "twice.npz" && errors[2].1.contains("2 entries named w.npy"),
        "{errors:?}"
    );
    assert_eq!(w_of(&d.join("all.npz")).shape(), [1, 1, 3]);
}

#[test]
fn jsonl_manifest_holds_names_shapes_and_values() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    npz(&d.join("a.npz"), "w", &latent(1, 3, 0.5), false);
    let rec = r#"{"type":"latent","input":"imgs/a.jpg","output":"a.npz"}"#;
    let (code, _, _) = run(d, &["-o", "all.jsonl", "--jsonl"], &format!("{rec}\n"));
    assert_eq!(code, 0);
    let text = std::fs::read_to_string(d.join("all.jsonl")).unwrap();
    let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(line["name"], "imgs/a.jpg");
    assert_eq!(line["input"], "a.npz");
    assert_eq!(line["shape"], serde_json::json!([1, 1, 3]));
    assert_eq!(line["w"], serde_json::json!([0.5, 1.5, 2.5]));
}

#[test]
fn names_are_a_unicode_array() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    npz(&d.join("é.npz"), "w", &latent(1, 1, 0.0), false);
    npz(&d.join("b.npz"), "w", &latent(1, 1, 0.0), false);
    assert_eq!(run(d, &["-o", "all.npz", "é.npz", "b.npz"], "").0, 0);
    // names.npy: header then UTF-32LE code points, width = longest name (5 chars).
    let mut zip = zip::ZipArchive::new(std::fs::File::open(d.join("all.npz")).unwrap()).unwrap();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut zip.by_name("names.npy").unwrap(), &mut bytes).unwrap();
    let header = String::from_utf8_lossy(&bytes[10..bytes.len() - 40]).into_owned();
    assert!(
        header.contains("'descr': '<U5'") && header.contains("'shape': (2,)"),
        "{header}"
    );
    let data = &bytes[bytes.len() - 40..];
    let chars: Vec<u32> = data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(
        chars[..5],
        ['é' as u32, '.' as u32, 'n' as u32, 'p' as u32, 'z' as u32]
    );
    assert_eq!(
        chars[5..],
        ['b' as u32, '.' as u32, 'n' as u32, 'p' as u32, 'z' as u32]
    );
}

#[test]
fn non_regular_inputs_are_error_records() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    npz(&d.join("good.npz"), "w", &latent(1, 3, 0.0), false);
    testkit::mkfifo(&d.join("fifo.npz"));
    // With a deadline: the FIFO blocked the run forever before.
    let out = Command::cargo_bin("gather-npz")
        .unwrap()
        .current_dir(d)
        .args(["-o", "all.npz", "fifo.npz", "/dev/zero", "good.npz"])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    testkit::exits(&out, 3);
    let decoded = decode(&out.stdout);
    let errors: Vec<&str> = decoded.errors().into_iter().map(|e| e.1).collect();
    assert!(
        errors[0].contains("is a FIFO") && errors[1].contains("is a device"),
        "{errors:?}"
    );
    assert_eq!(w_of(&d.join("all.npz")).shape(), [1, 1, 3]);
}

/// The thread count sizes a thread pool: past its bound (1024) it is a usage error, not a
/// hundred million threads being started.
#[test]
fn jobs_past_the_bound_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    for j in ["1025", "100000000", "18446744073709551615"] {
        let o = Command::cargo_bin("gather-npz")
            .unwrap()
            .current_dir(tmp.path())
            .args(["-o", "all.npz", "-j", j])
            .write_stdin("")
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "-j {j}: {stderr}");
        assert!(stderr.contains("1..=1024"), "{stderr}");
    }
}
