//! What is written: skips and `--overwrite`, outputs that would replace inputs or each other, long
//! names, temp files, permissions.

use super::*;

#[test]
fn reruns_skip_finished_outputs_unless_overwrite() {
    let tmp = with_fixtures(&[("rgb.png", "x.png")]);
    let (_, first, _) = run(tmp.path(), &["-r", "8", "-o", "out", "x.png"], "");
    assert!(!first.items[0].skipped);
    let again = run_ok(tmp.path(), &["-r", "8", "-o", "out", "x.png"], "");
    assert!(again.items[0].skipped);
    assert_eq!(again.summary.skipped, 1);
    let (_, forced, _) = run(
        tmp.path(),
        &["-r", "8", "-o", "out", "--overwrite", "x.png"],
        "",
    );
    assert!(!forced.items[0].skipped);
}

#[test]
fn two_inputs_with_one_output_keep_the_first_and_fail_the_second() {
    let tmp = with_fixtures(&[("rgb.png", "x.png"), ("gray.jpg", "x.jpg")]);
    // x.jpg and x.png both map to out/x.png: the second is an error, not a silent replacement
    // (same chunk) or a "skipped" record for another image's output (a later chunk, or a re-run).
    for _ in 0..2 {
        let (code, recs, _) = run(
            tmp.path(),
            &["-r", "24", "-o", "out", "-j", "2"],
            "x.png\nx.jpg\n",
        );
        assert_eq!(code, 3);
        assert_eq!(recs.types, ["image", "error", "summary"]);
        assert!(
            recs.errors[0]
                .message
                .contains("is already the output of x.png"),
            "{recs:?}"
        );
    }
    assert_eq!(
        rgb(&tmp.path().join("out/x.png")),
        pillow("rgb.png.24.png"),
        "the first input's output"
    );
}

#[test]
fn an_output_never_replaces_an_input_and_skips_describe_the_file_there() {
    let tmp = with_fixtures(&[("rgb.png", "photo.png")]);
    let before = std::fs::read(tmp.path().join("photo.png")).unwrap();
    // -o on the inputs' own directory: photo.png's output is photo.png itself.
    for extra in [&[][..], &["--overwrite"][..]] {
        let mut args = vec!["-r", "16", "-o", "."];
        args.extend_from_slice(extra);
        args.push("photo.png");
        let (code, recs, _) = run(tmp.path(), &args, "");
        assert_eq!(code, 3, "{extra:?}: {recs:?}");
        assert_eq!(recs.types[0], "error");
        assert!(
            recs.errors[0].message.contains("this input itself"),
            "{recs:?}"
        );
        assert_eq!(
            std::fs::read(tmp.path().join("photo.png")).unwrap(),
            before,
            "the photo is untouched"
        );
    }
    // A skip record gives the size of the file that is there, not the size asked for.
    let (code, _, _) = run(tmp.path(), &["-r", "16", "-o", "out", "photo.png"], "");
    assert_eq!(code, 0);
    let recs = run_ok(tmp.path(), &["-r", "24", "-o", "out", "photo.png"], "");
    assert_eq!(
        (recs.items[0].skipped, recs.items[0].width),
        (true, 16),
        "{recs:?}"
    );
}

#[test]
fn with_overwrite_no_output_replaces_an_input_listed_later_or_linked() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    copy_fixture(d, "rgb.png", "a.jpg");
    copy_fixture(d, "rgb.png", "a.png");
    copy_fixture(d, "rgb.png", "in/b.png");
    copy_fixture(d, "rgb.png", "in/c.png");
    // A hard link and a symlink to inputs where outputs go.
    std::fs::create_dir(d.join("out")).unwrap();
    std::fs::hard_link(d.join("in/b.png"), d.join("out/x.png")).unwrap();
    std::os::unix::fs::symlink(d.join("in"), d.join("linked")).unwrap();
    std::fs::write(d.join("y.png"), b"not an image, but an input").unwrap();
    let read = |p: &str| std::fs::read(d.join(p)).unwrap();
    let before: Vec<Vec<u8>> = ["a.png", "in/b.png", "in/c.png", "y.png"].map(read).into();
    // a.jpg's output is a.png, listed after it; x.jpg's is out/x.png, in/b.png's inode;
    // linked/c.jpg's is in/c.png through the symlink; y.jpg's is y.png (not an image).
    copy_fixture(d, "rgb.png", "x.jpg");
    copy_fixture(d, "rgb.png", "in/c.jpg");
    copy_fixture(d, "rgb.png", "y.jpg");
    // Each run is refused: exit 3, an error record first.
    let refused = |args: &[&str]| {
        let (code, recs, stderr) = run(d, &[&["-r", "8", "--overwrite"][..], args].concat(), "");
        assert_eq!(
            (code, recs.types[0].as_str()),
            (3, "error"),
            "{stderr} {recs:?}"
        );
        recs
    };
    let recs = refused(&["-o", ".", "a.jpg", "a.png", "y.jpg", "y.png"]);
    assert_eq!(
        recs.types,
        ["error", "error", "error", "error", "summary"],
        "{recs:?}"
    );
    assert!(
        recs.errors[0]
            .message
            .contains("is the input a.png of this run"),
        "{recs:?}"
    );
    assert!(
        recs.errors[2].message.contains("is the input y.png"),
        "{recs:?}"
    );
    let recs = refused(&["-o", "out", "--base", ".", "x.jpg", "in/b.png"]);
    assert!(
        recs.errors[0].message.contains("is the input in/b.png"),
        "{recs:?}"
    );
    let recs = refused(&["-o", "linked", "--base", "in", "in/c.jpg", "in/c.png"]);
    assert!(
        recs.errors[0].message.contains("is the input in/c.png"),
        "{recs:?}"
    );
    let after: Vec<Vec<u8>> = ["a.png", "in/b.png", "in/c.png", "y.png"].map(read).into();
    assert!(before == after, "the inputs are untouched");
}

/// Outputs named up to the file system's 255-byte limit are written (as Pillow writes them):
/// the temp file beside them has a short name of its own.
#[test]
fn outputs_with_names_of_up_to_255_bytes_are_written() {
    let tmp = tempfile::tempdir().unwrap();
    let names: Vec<String> = [230, 245, 251]
        .map(|n| format!("{}.jpg", "n".repeat(n)))
        .into();
    for n in &names {
        copy_fixture(tmp.path(), "rgb.png", n);
    }
    let recs = run_ok(
        tmp.path(),
        &[
            &["-r", "8", "-o", "out"][..],
            &names.iter().map(String::as_str).collect::<Vec<_>>(),
        ]
        .concat(),
        "",
    );
    for (rec, name) in recs.items.iter().zip(&names) {
        let out = rec.output.file_name().unwrap().len();
        assert_eq!(out, name.len(), "{rec:?}");
        assert!(rec.output.is_file());
    }
    assert_eq!(
        all_files(&tmp.path().join("out")).len(),
        3,
        "no temp file left"
    );
}

#[test]
fn a_run_removes_temp_files_that_killed_runs_left_and_keeps_live_ones() {
    let tmp = with_fixtures(&[("rgb.png", "a.png")]);
    std::fs::create_dir(tmp.path().join("out")).unwrap();
    // pid_max is at most 2^22: pid 999999999 never runs; this test's own pid does.
    let dead = tmp.path().join("out/.x.png.999999999.AbCdEf.partial");
    let live = tmp
        .path()
        .join(format!("out/.y.png.{}.XyZ123.partial", std::process::id()));
    std::fs::write(&dead, vec![0u8; 1 << 20]).unwrap();
    std::fs::write(&live, b"being written").unwrap();
    run_ok(tmp.path(), &["-r", "16", "-o", "out", "a.png"], "");
    assert!(
        !dead.exists(),
        "a kill -9's temp file stays forever otherwise"
    );
    assert!(live.exists(), "a live run's temp file is never removed");
}

#[test]
fn outputs_are_created_0666_less_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = with_fixtures(&[("rgb.png", "a.png")]);
    let o = shell(
        tmp.path(),
        r#"umask 022 && "$CROP_RESIZE" -r 16 -o out a.png"#,
    )
    .output()
    .unwrap();
    testkit::ok(&o);
    let mode = std::fs::metadata(tmp.path().join("out/a.png"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o644, "was 0600 whatever the umask");
}
