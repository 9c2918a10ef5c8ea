//! What is read: bad inputs as error records, files that are not regular files, names that are not
//! UTF-8 or hold newlines, stdin, `--retry-failed`.

use super::*;

#[test]
fn bad_inputs_give_error_records_and_the_rest_are_written() {
    let tmp = with_fixtures(&[("rgb.png", "good1.png"), ("gray.jpg", "good2.jpg")]);
    std::fs::write(
        tmp.path().join("garbage.jpg"),
        b"\xff\xd8\xff\xe0 this is not a jpeg",
    )
    .unwrap();
    std::fs::write(tmp.path().join("text.png"), b"hello").unwrap();
    let full = std::fs::read(fixtures().join("inputs/rgb.png")).unwrap();
    std::fs::write(tmp.path().join("truncated.png"), &full[..full.len() / 2]).unwrap();
    let input = "good1.png\ngarbage.jpg\nmissing.png\ntext.png\ntruncated.png\ngood2.jpg\n";
    let (code, recs, stderr) = run(tmp.path(), &["-r", "8", "-o", "out", "-j", "2"], input);
    assert_eq!(code, 3, "items failed");
    assert_eq!(
        recs.types,
        [
            "image", "error", "error", "error", "error", "image", "summary"
        ],
        "input order"
    );
    let errors = recs.errors();
    assert_eq!(errors[0].0, "garbage.jpg");
    assert!(errors[0].1.contains("JPEG"), "{errors:?}");
    assert!(errors[1].1.contains("reading missing.png"), "{errors:?}");
    assert!(errors[2].1.contains("not an image"), "{errors:?}");
    assert_eq!(recs.summary.failed, 4);
    assert!(stderr.contains("4 of 6 inputs failed"));
    let mut files = all_files(&tmp.path().join("out"));
    files.sort();
    assert_eq!(
        files.len(),
        2,
        "only the good outputs, no partial files: {files:?}"
    );
}

#[test]
fn fifos_devices_directories_and_non_images_are_error_records_read_no_further() {
    let tmp = with_fixtures(&[("rgb.png", "good.png")]);
    testkit::mkfifo(&tmp.path().join("fifo.png"));
    std::fs::create_dir(tmp.path().join("dir.png")).unwrap();
    // 1 GiB of zeros (sparse): refused from its first bytes, not read whole.
    std::fs::File::create(tmp.path().join("zeros.png"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    // Under 800 MB of address space (the tool needs a tenth of it), with a deadline: before,
    // /dev/zero was read until memory ran out, the FIFO blocked forever, and the zeros file was
    // read whole.
    let script = "ulimit -v 800000 && exec \"$CROP_RESIZE\" -r 16 -o out \
                  /dev/zero fifo.png dir.png zeros.png good.png";
    let o = testkit::output_within(
        &mut shell(tmp.path(), script),
        std::time::Duration::from_secs(60),
    );
    testkit::exits(&o, 3);
    let recs: Batch<ImageRecord> = testkit::batch(&o.stdout);
    let errors = recs.errors();
    assert_eq!(errors.len(), 4, "{errors:?}");
    for (input, want) in [
        ("/dev/zero", "is a device"),
        ("fifo.png", "is a FIFO"),
        ("dir.png", "is a directory"),
        ("zeros.png", "not an image"),
    ] {
        let (_, m) = errors
            .iter()
            .find(|e| e.0 == input)
            .unwrap_or_else(|| panic!("no error for {input}: {errors:?}"));
        assert!(m.contains(want), "{input}: {m}");
    }
    assert_eq!(recs.summary.ok, 1);
}

/// A file name that is not UTF-8 is an input like any other, given as an argument or on stdin,
/// and its records carry the name without loss ({"bytes": base64}), so the next stage reads the
/// same file (it made the whole command line a usage error, exit 2, before).
#[test]
fn names_that_are_not_utf8_are_inputs_and_records_keep_their_bytes() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let name = OsStr::from_bytes(b"caf\xe9.png");
    std::fs::copy(fixtures().join("inputs/palette.png"), tmp.path().join(name)).unwrap();
    copy_fixture(tmp.path(), "palette.png", "good.png");
    let args = ["-r", "8", "-o", "out"].map(OsStr::new);
    let (code, recs, err) = run_raw(
        tmp.path(),
        &[&args[..], &[name, OsStr::new("good.png")]].concat(),
        "",
    );
    assert_eq!(code, 0, "{err}");
    let bytes = serde_json::json!({"bytes": "Y2Fm6S5wbmc="});
    assert_eq!(recs[0]["input"], bytes);
    let output = tmp.path().join("out").join(name);
    assert_eq!(
        recs[0]["output"]["bytes"].as_str().unwrap(),
        base64_of(output.as_os_str().as_bytes()),
    );
    assert!(output.is_file());
    assert_eq!(recs[1]["input"], "good.png");
    // The records as the next stage's input, on stdin: it reads the written file by its bytes
    // and names it by the original input.
    let lines: String = recs.iter().map(|r| format!("{r}\n")).collect();
    let (code, recs, err) = run_raw(tmp.path(), &["-r", "4", "-o", "out2", "-"], lines);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (&recs[0]["input"], &recs[0]["skipped"]),
        (&bytes, &false.into())
    );
    // And the raw name on stdin is a path too.
    run_ok(
        tmp.path(),
        &["-r", "4", "-o", "out3"],
        &b"caf\xe9.png\n"[..],
    );
    assert!(tmp.path().join("out3").join(name).is_file());
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn a_failed_input_does_not_claim_its_output() {
    let tmp = with_fixtures(&[("rgb.png", "cap/0001.png")]);
    std::fs::write(tmp.path().join("cap/0001.txt"), "a caption\n").unwrap();
    copy_fixture(tmp.path(), "rgb.png", "x.png");
    // find's order puts the caption (or a file that is gone) before the image of that name.
    let (code, recs, _) = run(
        tmp.path(),
        &["-r", "16", "-o", "o", "-"],
        "cap/0001.txt\ncap/0001.png\nx.jpg\nx.png\n",
    );
    assert_eq!(code, 3, "{recs:?}");
    assert_eq!(recs.types, ["error", "image", "error", "image", "summary"]);
    assert!(
        recs.errors[0].message.contains("judged from its first"),
        "{recs:?}"
    );
    assert!(recs.errors[1].message.contains("No such file"), "{recs:?}");
    assert!(tmp.path().join("o/cap/0001.png").is_file());
    assert!(tmp.path().join("o/x.png").is_file());
    // A re-run: the caption is still its own error, not reported as the image's skip.
    let (code, recs, _) = run(
        tmp.path(),
        &["-r", "16", "-o", "o", "-"],
        "cap/0001.txt\ncap/0001.png\n",
    );
    assert_eq!(code, 3);
    assert_eq!(recs.types, ["error", "image", "summary"]);
    assert!(recs.items[0].skipped);
}

#[test]
fn stdin_that_is_a_directory_is_one_fatal_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tool(tmp.path())
        .args(["-r", "16", "-o", "o"])
        .stdin(std::fs::File::open(tmp.path()).unwrap())
        .output()
        .unwrap();
    // It looped on EISDIR before, writing error records without end.
    testkit::exits(&out, 1);
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("reading the input list <stdin>"), "{err}");
    assert!(err.contains("Is a directory"), "{err}");
}

#[test]
fn nul_separated_lists_carry_names_with_newlines() {
    let tmp = with_fixtures(&[("rgb.png", "two\nlines.png"), ("gray.png", "plain.png")]);
    let recs = run_ok(
        tmp.path(),
        &["-0", "-r", "16", "-o", "o"],
        &b"two\nlines.png\0plain.png\0"[..],
    );
    assert_eq!(recs.types, ["image", "image", "summary"]);
    assert_eq!(recs.items[0].input, std::ffi::OsStr::new("two\nlines.png"));
    assert!(tmp.path().join("o/two\nlines.png").is_file());
}

#[test]
fn retry_failed_redoes_only_the_inputs_an_earlier_run_failed() {
    let tmp = with_fixtures(&[("rgb.png", "good.png")]);
    std::fs::write(tmp.path().join("later.jpg"), b"\xff\xd8\xff\xe0 not yet").unwrap();
    let first = exec(
        tmp.path(),
        &["-r", "8", "-o", "out"],
        "good.png\nlater.jpg\n",
    );
    assert_eq!(first.status.code(), Some(3));
    std::fs::write(tmp.path().join("run1.jsonl"), &first.stdout).unwrap();
    // The file is fixed; only it is redone (the good one is not even looked at).
    copy_fixture(tmp.path(), "gray.jpg", "later.jpg");
    let recs = run_ok(
        tmp.path(),
        &["-r", "8", "-o", "out", "--retry-failed", "run1.jsonl"],
        "",
    );
    assert_eq!(recs.types, ["image", "summary"]);
    assert_eq!(recs.items[0].input, "later.jpg");
    assert!(!recs.items[0].skipped);
    // Inputs as well as --retry-failed: which to do is unclear, a usage error.
    assert_eq!(
        status(
            tmp.path(),
            &[
                "-r",
                "8",
                "-o",
                "out",
                "--retry-failed",
                "run1.jsonl",
                "good.png"
            ]
        ),
        2
    );
}
