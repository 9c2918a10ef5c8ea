use std::path::{Path, PathBuf};

use assert_cmd::Command;
use records::ImageRecord;
use testkit::Batch;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pillow")
}

fn exec(
    dir: &Path,
    args: &[impl AsRef<std::ffi::OsStr>],
    stdin: impl Into<Vec<u8>>,
) -> std::process::Output {
    Command::cargo_bin("crop-resize")
        .unwrap()
        .current_dir(dir)
        .args(args)
        .write_stdin(stdin)
        .output()
        .unwrap()
}

/// Exit status, the records decoded, stderr.
fn run(
    dir: &Path,
    args: &[impl AsRef<std::ffi::OsStr>],
    stdin: impl Into<Vec<u8>>,
) -> (i32, Batch<ImageRecord>, String) {
    let out = exec(dir, args, stdin);
    (
        out.status.code().unwrap(),
        testkit::batch(&out.stdout),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The same with the records as JSON (for their wire form).
fn run_raw(
    dir: &Path,
    args: &[impl AsRef<std::ffi::OsStr>],
    stdin: impl Into<Vec<u8>>,
) -> (i32, Vec<serde_json::Value>, String) {
    let out = exec(dir, args, stdin);
    (
        out.status.code().unwrap(),
        testkit::records(&out.stdout),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The exit status of a run that is refused before it starts (no records).
fn status(dir: &Path, args: &[&str]) -> i32 {
    let out = exec(dir, args, "");
    assert!(out.stdout.is_empty());
    out.status.code().unwrap()
}

fn copy_fixture(dir: &Path, name: &str, to: &str) {
    let dst = dir.join(to);
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    std::fs::copy(fixtures().join("inputs").join(name), dst).unwrap();
}

fn all_files(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(all_files(&p))
        } else {
            v.push(p.to_string_lossy().into_owned())
        }
    }
    v
}

#[test]
fn outputs_match_pillow_and_mirror_input_paths() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "photo420.jpg", "imgs/a/photo.jpg");
    copy_fixture(tmp.path(), "palette.png", "imgs/b/pal.png");
    let (code, recs, _) = run(
        tmp.path(),
        &["-r", "24", "-o", "out"],
        "imgs/a/photo.jpg\nimgs/b/pal.png\n",
    );
    assert_eq!(code, 0);
    assert_eq!(recs.types, ["image", "image", "summary"]);
    let first = &recs.items[0];
    assert_eq!(first.input, "imgs/a/photo.jpg");
    assert_eq!(first.source_width, Some(97));
    assert_eq!(recs.summary.ok, 2);
    let out = tmp.path().join("out/imgs/a/photo.png");
    assert_eq!(first.output, out);
    let ours = image::open(&out).unwrap().to_rgb8();
    let pillow = image::open(fixtures().join("expected/photo420.jpg.24.png"))
        .unwrap()
        .to_rgb8();
    assert_eq!(ours, pillow, "bit-identical to Pillow");
}

#[test]
fn bad_inputs_give_error_records_and_the_rest_are_written() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "good1.png");
    copy_fixture(tmp.path(), "gray.jpg", "good2.jpg");
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
fn reruns_skip_finished_outputs_unless_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "x.png");
    let (_, first, _) = run(tmp.path(), &["-r", "8", "-o", "out", "x.png"], "");
    assert!(!first.items[0].skipped);
    let (code, again, _) = run(tmp.path(), &["-r", "8", "-o", "out", "x.png"], "");
    assert_eq!(code, 0);
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
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "x.png");
    copy_fixture(tmp.path(), "gray.jpg", "x.jpg");
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
    let ours = image::open(tmp.path().join("out/x.png")).unwrap().to_rgb8();
    let pillow = image::open(fixtures().join("expected/rgb.png.24.png"))
        .unwrap()
        .to_rgb8();
    assert_eq!(ours, pillow, "the first input's output");
}

#[test]
fn decompression_bombs_are_refused_from_the_header() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "photo420.jpg", "big.jpg");
    copy_fixture(tmp.path(), "bilevel.png", "small.png");
    let (code, recs, _) = run(
        tmp.path(),
        &[
            "-r",
            "8",
            "-o",
            "out",
            "--max-pixels",
            "2000",
            "big.jpg",
            "small.png",
        ],
        "",
    );
    assert_eq!(code, 3);
    assert_eq!(recs.types, ["error", "image", "summary"]);
    let msg = &recs.errors[0].message;
    assert!(
        msg.contains("97x71") && msg.contains("--max-pixels"),
        "{msg}"
    );
}

#[test]
fn npy_output_is_uint8_channels_first_and_shard_records_are_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "d/a.png");
    copy_fixture(tmp.path(), "la.png", "d/b.png");
    let shard = r#"{"type":"shard","shard":0,"shards":1,"paths":["d/a.png","d/b.png"]}"#;
    let (code, recs, _) = run(
        tmp.path(),
        &["-r", "24", "-o", "out", "--format", "npy", "--base", "d"],
        format!("{shard}\n"),
    );
    assert_eq!(code, 0);
    assert_eq!(recs.types, ["image", "image", "summary"]);
    let p = tmp.path().join("out/a.npy");
    assert_eq!(
        (
            recs.items[0].output.as_path(),
            recs.items[0].format.as_str()
        ),
        (p.as_path(), "npy")
    );
    use ndarray_npy::ReadNpyExt;
    let a = ndarray::Array3::<u8>::read_npy(std::fs::File::open(&p).unwrap()).unwrap();
    assert_eq!(a.shape(), &[3, 24, 24]);
    let pillow = image::open(fixtures().join("expected/rgb.png.24.png"))
        .unwrap()
        .to_rgb8();
    assert_eq!(a[[1, 5, 7]], pillow.get_pixel(7, 5).0[1]);
}

#[test]
fn exif_transpose_is_opt_in() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "exif6.jpg", "e.jpg");
    let (_, recs, _) = run(tmp.path(), &["-r", "24", "-o", "plain", "e.jpg"], "");
    assert_eq!(
        (recs.items[0].source_width, recs.items[0].source_height),
        (Some(68), Some(52))
    );
    let (_, recs, _) = run(
        tmp.path(),
        &["-r", "24", "-o", "rot", "--exif-transpose", "e.jpg"],
        "",
    );
    assert_eq!(
        (recs.items[0].source_width, recs.items[0].source_height),
        (Some(52), Some(68))
    );
    let ours = image::open(tmp.path().join("rot/e.png")).unwrap().to_rgb8();
    let pillow = image::open(fixtures().join("expected/exif6.jpg.exif.24.png"))
        .unwrap()
        .to_rgb8();
    assert_eq!(ours, pillow);
}

#[test]
fn usage_errors_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(
        status(tmp.path(), &["-o", "out"]),
        2,
        "--resolution is required"
    );
    assert_eq!(status(tmp.path(), &["-r", "0", "-o", "out"]), 2);
}

#[test]
fn records_reach_the_pipe_as_work_finishes_not_at_exit() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..8 {
        copy_fixture(tmp.path(), "rgb.png", &format!("in/{i}.png"));
    }
    // One thread: a batch is 8 inputs. stdin stays open, so the run cannot end; the batch's
    // records must arrive anyway (they sat in a 64 KiB buffer until exit before).
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("crop-resize"))
        .current_dir(tmp.path())
        .args(["-r", "16", "-o", "out", "--jobs", "1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(
        &mut stdin,
        (0..8)
            .map(|i| format!("in/{i}.png\n"))
            .collect::<String>()
            .as_bytes(),
    )
    .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    for i in 0..8 {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("record {i} did not arrive while stdin was open"));
        assert!(line.contains("\"type\":\"image\""), "{line}");
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert!(
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .unwrap()
            .contains("\"type\":\"summary\"")
    );
}

#[test]
fn outputs_are_created_0666_less_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "a.png");
    let bin = assert_cmd::cargo::cargo_bin("crop-resize");
    let o = std::process::Command::new("sh")
        .current_dir(tmp.path())
        .arg("-c")
        .arg(format!(
            "umask 022 && '{}' -r 16 -o out a.png",
            bin.display()
        ))
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

/// The planar tiled TIFF that made the tiff crate assert (exit 101, then an error record) is read
/// through libtiff now, as Pillow reads it.
#[test]
fn a_planar_tiled_tiff_is_resized_like_any_image() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("planar.tif"),
        testkit::planar_tiled_tiff(20, 20, 16),
    )
    .unwrap();
    copy_fixture(tmp.path(), "rgb.png", "rgb.png");
    let (code, recs, stderr) = run(
        tmp.path(),
        &["-r", "16", "-o", "out", "planar.tif", "rgb.png"],
        "",
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(recs.types[0], "image", "{recs:?}");
    assert_eq!(recs.items[0].input, "planar.tif");
    assert!(tmp.path().join("out/planar.png").exists());
    assert_eq!(recs.summary.ok, 2);
}

#[test]
fn fifos_devices_directories_and_non_images_are_error_records_read_no_further() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "good.png");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(tmp.path().join("fifo.png"))
            .status()
            .unwrap()
            .success()
    );
    std::fs::create_dir(tmp.path().join("dir.png")).unwrap();
    // 1 GiB of zeros (sparse): refused from its first bytes, not read whole.
    std::fs::File::create(tmp.path().join("zeros.png"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let bin = assert_cmd::cargo::cargo_bin("crop-resize");
    // Under 800 MB of address space (the tool needs a tenth of it), with a deadline: before,
    // /dev/zero was read until memory ran out, the FIFO blocked forever, and the zeros file was
    // read whole.
    let mut child = std::process::Command::new("sh")
        .current_dir(tmp.path())
        .arg("-c")
        .arg(format!("ulimit -v 800000 && exec '{}' -r 16 -o out /dev/zero fifo.png dir.png zeros.png good.png", bin.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("crop-resize hung on a non-regular input");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
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

#[test]
fn an_output_never_replaces_an_input_and_skips_describe_the_file_there() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "photo.png");
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
    let (code, recs, _) = run(tmp.path(), &["-r", "24", "-o", "out", "photo.png"], "");
    assert_eq!(code, 0);
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
    let (code, recs, stderr) = run(
        d,
        &[
            "-r",
            "8",
            "--overwrite",
            "-o",
            ".",
            "a.jpg",
            "a.png",
            "y.jpg",
            "y.png",
        ],
        "",
    );
    assert_eq!(code, 3, "{stderr}");
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
    let (code, recs, stderr) = run(
        d,
        &[
            "-r",
            "8",
            "--overwrite",
            "-o",
            "out",
            "--base",
            ".",
            "x.jpg",
            "in/b.png",
        ],
        "",
    );
    assert_eq!(
        (code, recs.types[0].as_str()),
        (3, "error"),
        "{stderr} {recs:?}"
    );
    assert!(
        recs.errors[0].message.contains("is the input in/b.png"),
        "{recs:?}"
    );
    let (code, recs, stderr) = run(
        d,
        &[
            "-r",
            "8",
            "--overwrite",
            "-o",
            "linked",
            "--base",
            "in",
            "in/c.jpg",
            "in/c.png",
        ],
        "",
    );
    assert_eq!(recs.types[0], "error", "{code} {stderr} {recs:?}");
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
    let (code, recs, stderr) = run(
        tmp.path(),
        &[
            &["-r", "8", "-o", "out"][..],
            &names.iter().map(String::as_str).collect::<Vec<_>>(),
        ]
        .concat(),
        "",
    );
    assert_eq!(code, 0, "{stderr} {recs:?}");
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
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "a.png");
    std::fs::create_dir(tmp.path().join("out")).unwrap();
    // pid_max is at most 2^22: pid 999999999 never runs; this test's own pid does.
    let dead = tmp.path().join("out/.x.png.999999999.AbCdEf.partial");
    let live = tmp
        .path()
        .join(format!("out/.y.png.{}.XyZ123.partial", std::process::id()));
    std::fs::write(&dead, vec![0u8; 1 << 20]).unwrap();
    std::fs::write(&live, b"being written").unwrap();
    let (code, _, _) = run(tmp.path(), &["-r", "16", "-o", "out", "a.png"], "");
    assert_eq!(code, 0);
    assert!(
        !dead.exists(),
        "a kill -9's temp file stays forever otherwise"
    );
    assert!(live.exists(), "a live run's temp file is never removed");
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
    let (code, _, err) = run(
        tmp.path(),
        &["-r", "4", "-o", "out3"],
        &b"caf\xe9.png\n"[..],
    );
    assert_eq!(code, 0, "{err}");
    assert!(tmp.path().join("out3").join(name).is_file());
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn a_failed_input_does_not_claim_its_output() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "cap/0001.png");
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
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("crop-resize"))
        .current_dir(tmp.path())
        .args(["-r", "16", "-o", "o"])
        .stdin(std::fs::File::open(tmp.path()).unwrap())
        .output()
        .unwrap();
    // It looped on EISDIR before, writing error records without end.
    assert_eq!(out.status.code(), Some(1));
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
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "two\nlines.png");
    copy_fixture(tmp.path(), "gray.png", "plain.png");
    let (code, recs, _) = run(
        tmp.path(),
        &["-0", "-r", "16", "-o", "o"],
        &b"two\nlines.png\0plain.png\0"[..],
    );
    assert_eq!(code, 0, "{recs:?}");
    assert_eq!(recs.types, ["image", "image", "summary"]);
    assert_eq!(recs.items[0].input, std::ffi::OsStr::new("two\nlines.png"));
    assert!(tmp.path().join("o/two\nlines.png").is_file());
}

/// `n` inputs: the same small image under many names.
fn many_inputs(dir: &Path, n: usize) -> String {
    copy_fixture(dir, "photo420.jpg", "in/0.jpg");
    for i in 1..n {
        std::fs::hard_link(dir.join("in/0.jpg"), dir.join(format!("in/{i}.jpg"))).unwrap();
    }
    (0..n).map(|i| format!("in/{i}.jpg\n")).collect()
}

#[test]
fn a_reader_that_goes_away_stops_the_run_with_sigpipes_status() {
    let tmp = tempfile::tempdir().unwrap();
    // 1,000 records are more than a pipe holds (64 KiB), so the run cannot finish before the
    // reader has gone, however the two are scheduled.
    let list = many_inputs(tmp.path(), 1000);
    std::fs::write(tmp.path().join("list"), list).unwrap();
    // `| head -1`: the reader takes one line and exits; the run must not end 0 with work undone.
    let out = std::process::Command::new("bash")
        .current_dir(tmp.path())
        .arg("-c")
        .arg(format!(
            "{} -r 16 -o o --jobs 1 - <list | head -1 >/dev/null; echo \"${{PIPESTATUS[0]}}\"",
            assert_cmd::cargo::cargo_bin("crop-resize").display()
        ))
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stdout.trim(), "141", "{stderr}");
    assert!(!stderr.contains("error"), "quiet, as SIGPIPE is: {stderr}");
}

#[test]
fn a_closed_stdout_is_a_fatal_error_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "a.png");
    let out = std::process::Command::new("bash")
        .current_dir(tmp.path())
        .arg("-c")
        .arg(format!(
            "{} -r 16 -o o a.png >&-",
            assert_cmd::cargo::cargo_bin("crop-resize").display()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("stdout is closed"), "{stderr}");
    assert!(!tmp.path().join("o").exists(), "nothing was done");
    // >/dev/null is a choice, not a mistake.
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("crop-resize"))
        .current_dir(tmp.path())
        .args(["-r", "16", "-o", "o", "a.png"])
        .stdout(std::fs::File::create("/dev/null").unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // So is /dev/null opened read-write, as Python's `subprocess.DEVNULL` opens it.
    std::fs::remove_dir_all(tmp.path().join("o")).unwrap();
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap();
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("crop-resize"))
        .current_dir(tmp.path())
        .args(["-r", "16", "-o", "o", "a.png"])
        .stdout(null)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(tmp.path().join("o/a.png").exists());
}

/// `crop-resize -r 16 -o o --jobs 1 INPUTS` in `dir` under 800 MB of address space (the tool needs
/// a tenth of it): exit status, records, stderr.
fn run_in_800_mb(dir: &Path, inputs: &str) -> (i32, Batch<ImageRecord>, String) {
    let out = std::process::Command::new("bash")
        .current_dir(dir)
        .arg("-c")
        .arg(format!(
            "ulimit -v 800000; exec {} -r 16 -o o --jobs 1 {inputs}",
            assert_cmd::cargo::cargo_bin("crop-resize").display()
        ))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        testkit::batch(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A 16×16 RGB PNG whose iCCP profile inflates to `profile_bytes` zeros (about 1/1000 of that
/// in the file).
fn png_with_profile(profile_bytes: usize) -> Vec<u8> {
    use std::io::Write;
    let zlib = |data: &mut dyn FnMut(&mut dyn Write)| {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        data(&mut z);
        z.finish().unwrap()
    };
    let chunk = |png: &mut Vec<u8>, kind: &[u8], body: &[u8]| {
        png.extend((body.len() as u32).to_be_bytes());
        let start = png.len();
        png.extend(kind);
        png.extend(body);
        let crc = crc32fast::hash(&png[start..]);
        png.extend(crc.to_be_bytes());
    };
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend(16u32.to_be_bytes());
    ihdr.extend(16u32.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    let mut iccp = b"icc\0\0".to_vec();
    iccp.extend(zlib(&mut |w| {
        let zeros = vec![0u8; 1 << 20];
        let mut left = profile_bytes;
        while left > 0 {
            let n = left.min(zeros.len());
            w.write_all(&zeros[..n]).unwrap();
            left -= n;
        }
    }));
    chunk(&mut png, b"iCCP", &iccp);
    let rows: Vec<u8> = (0..16).flat_map(|_| [0u8; 49]).collect();
    chunk(
        &mut png,
        b"IDAT",
        &zlib(&mut |w| w.write_all(&rows).unwrap()),
    );
    chunk(&mut png, b"IEND", &[]);
    png
}

#[test]
fn a_png_whose_profile_inflates_to_gigabytes_is_refused_in_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "good1.png");
    copy_fixture(tmp.path(), "rgb.png", "good2.png");
    // A profile under Pillow's MAX_TEXT_CHUNK (1 MiB) is an image like any other.
    std::fs::write(tmp.path().join("small.png"), png_with_profile(1 << 19)).unwrap();
    // 1 GiB of profile in a ~1 MB file: it inflated whole before (aborting the whole batch
    // under a memory limit, every record lost); Pillow refuses it, and so must we, cheaply.
    std::fs::write(tmp.path().join("bomb.png"), png_with_profile(1 << 30)).unwrap();
    let (code, recs, stderr) = run_in_800_mb(tmp.path(), "good1.png small.png bomb.png good2.png");
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(recs.types, ["image", "image", "error", "image", "summary"]);
    assert_eq!(recs.errors[0].input, std::ffi::OsStr::new("bomb.png"));
    assert!(
        recs.errors[0].message.contains("MAX_TEXT_CHUNK"),
        "{recs:?}"
    );
}

#[test]
fn a_small_tiff_claiming_millions_of_pixels_is_truncated_not_allocated() {
    // 6,488,101 × 23 RGB (under the pixel limit), uncompressed, in one strip that the file does
    // not hold: it allocated 12 bytes a pixel (1.75 GB) before noticing (an abort under a memory
    // limit); Pillow says "image file is truncated" at once.
    let (w, h) = (6_488_101u32, 23u32);
    let entries: [(u16, u16, u32); 9] = [
        (256, 4, w),
        (257, 4, h),
        (258, 3, 8),
        (259, 3, 1),
        (262, 3, 2),
        (273, 4, 8),
        (277, 3, 3),
        (278, 4, h),
        (279, 4, w * h * 3),
    ];
    let mut tiff = tiff_directory(&entries);
    tiff.resize(2693, 0);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("wide.tif"), tiff).unwrap();
    copy_fixture(tmp.path(), "rgb.png", "good.png");
    let (code, recs, stderr) = run_in_800_mb(tmp.path(), "wide.tif good.png");
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(recs.types, ["error", "image", "summary"]);
    assert!(recs.errors[0].message.contains("truncated"), "{recs:?}");
}

/// A little-endian TIFF header and one directory of (tag, type, value) entries, one value each.
fn tiff_directory(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut tiff = b"II*\0".to_vec();
    tiff.extend(8u32.to_le_bytes());
    tiff.extend((entries.len() as u16).to_le_bytes());
    for &(tag, kind, value) in entries {
        tiff.extend(tag.to_le_bytes());
        tiff.extend(kind.to_le_bytes());
        tiff.extend(1u32.to_le_bytes());
        tiff.extend(value.to_le_bytes());
    }
    tiff.extend(0u32.to_le_bytes());
    tiff
}

/// The same with one strip of `data` after the directory: the entries plus StripOffsets and
/// StripByteCounts (in tag order).
fn tiff_with_strip(entries: &[(u16, u16, u32)], data: &[u8]) -> Vec<u8> {
    let mut entries = entries.to_vec();
    let directory_len = 2 + 12 * (entries.len() + 2) + 4;
    entries.push((273, 4, 8 + directory_len as u32));
    entries.push((279, 4, data.len() as u32));
    entries.sort();
    let mut tiff = tiff_directory(&entries);
    tiff.extend(data);
    tiff
}

#[test]
fn a_large_compressed_greyscale_tiff_takes_a_few_bytes_a_pixel() {
    // 7,000² greyscale in a 50 KB deflate strip: every pixel went through a 12-byte
    // intermediate (and two RGB copies), over 900 MB, which failed under the 800 MB limit; it now
    // takes the decompressed samples and the RGB image (4 bytes a pixel), as Pillow takes 8.
    use std::io::Write;
    let (w, h) = (7_000u32, 7_000u32);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    let row = vec![90u8; w as usize];
    for _ in 0..h {
        z.write_all(&row).unwrap();
    }
    let strip = z.finish().unwrap();
    let tiff = tiff_with_strip(
        &[
            (256, 4, w),
            (257, 4, h),
            (258, 3, 8),
            (259, 3, 8),
            (262, 3, 1),
            (277, 3, 1),
            (278, 4, h),
        ],
        &strip,
    );
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("grey.tif"), tiff).unwrap();
    let (code, recs, stderr) = run_in_800_mb(tmp.path(), "grey.tif");
    assert_eq!(code, 0, "{stderr} {recs:?}");
    assert_eq!(recs.types, ["image", "summary"]);
    let out = image::open(tmp.path().join("o/grey.png"))
        .unwrap()
        .to_rgb8();
    assert!(out.pixels().all(|p| p.0 == [90; 3]));
}

#[test]
fn a_memory_budget_smaller_than_one_image_makes_workers_wait_not_fail() {
    // Every image is reckoned at more than 1 KB: with -j 2 each waits for the other to finish,
    // and all are done, in input order.
    let tmp = tempfile::tempdir().unwrap();
    let names = [
        "photo420.jpg",
        "rgb.png",
        "palette.png",
        "gray.jpg",
        "exif6.jpg",
    ];
    for n in names {
        copy_fixture(tmp.path(), n, n);
    }
    let mut args = vec!["-r", "16", "-o", "o", "-j", "2", "--max-memory", "1K"];
    args.extend(names);
    let (code, recs, stderr) = run(tmp.path(), &args, "");
    assert_eq!(code, 0, "{stderr}");
    let inputs: Vec<_> = recs.items.iter().map(|r| r.input.clone()).collect();
    assert_eq!(inputs, names.map(std::ffi::OsString::from));
    for n in names {
        let stem = n.split('.').next().unwrap();
        assert!(tmp.path().join(format!("o/{stem}.png")).exists(), "{n}");
    }
    // A size that is not one is a usage error.
    let out = exec(
        tmp.path(),
        &["-r", "16", "-o", "o", "--max-memory", "lots", "x"],
        "",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not a size"), "{stderr}");
}

#[test]
fn retry_failed_redoes_only_the_inputs_an_earlier_run_failed() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "good.png");
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
    let (code, recs, stderr) = run(
        tmp.path(),
        &["-r", "8", "-o", "out", "--retry-failed", "run1.jsonl"],
        "",
    );
    assert_eq!(code, 0, "{stderr}");
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

/// An image with an alpha channel says so: convert('RGB') drops it (as Pillow does), which is
/// why a transparent logo can come out all white or all black.
#[test]
fn records_say_when_an_alpha_channel_was_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["rgba.png", "la.png", "rgb.png"] {
        copy_fixture(tmp.path(), name, name);
    }
    let (code, recs, _) = run(
        tmp.path(),
        &["-r", "8", "-o", "out"],
        "rgba.png\nla.png\nrgb.png\n",
    );
    assert_eq!(code, 0);
    let dropped: Vec<(String, bool)> = recs
        .items
        .iter()
        .map(|r| (r.input.to_string_lossy().into_owned(), r.alpha_dropped))
        .collect();
    assert_eq!(
        dropped,
        [
            ("rgba.png".to_string(), true),
            ("la.png".to_string(), true),
            ("rgb.png".to_string(), false)
        ]
    );
}

/// `--progress` with stderr a file or a pipe (a batch job's log) writes plain lines there; the
/// terminal bar drew nothing at all off a terminal. Without the flag, nothing.
#[test]
fn progress_off_a_terminal_is_plain_lines() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture(tmp.path(), "rgb.png", "a.png");
    let (code, _, stderr) = run(
        tmp.path(),
        &["--progress", "-r", "8", "-o", "out"],
        "a.png\n",
    );
    assert_eq!(code, 0);
    assert!(
        stderr.lines().any(|l| l.starts_with("crop-resize: ")),
        "{stderr:?}"
    );
    assert!(!stderr.contains('\x1b'), "no cursor movement: {stderr:?}");
    let (_, _, stderr) = run(tmp.path(), &["-r", "8", "-o", "again"], "a.png\n");
    assert!(stderr.is_empty(), "{stderr:?}");
}

#[test]
fn an_uncompressed_tiff_with_rows_per_strip_0_gives_pillows_pixels() {
    // 3×3 8-bit grey in one strip with RowsPerStrip 0: Pillow 13's Image.open(path) memory-maps
    // the strip (one raw tile in the image's own mode) and gives the stored grey; crop-resize
    // refused it ("strips or tiles of no size").
    let grey: Vec<u8> = (1..=9).map(|v| v * 10).collect();
    let tiff = tiff_with_strip(
        &[
            (256, 4, 3),
            (257, 4, 3),
            (258, 3, 8),
            (259, 3, 1),
            (262, 3, 1),
            (278, 4, 0),
        ],
        &grey,
    );
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("zero.tif"), tiff).unwrap();
    let (code, recs, stderr) = run(
        tmp.path(),
        &["-r", "3", "-o", "out", "--format", "npy"],
        "zero.tif\n",
    );
    assert_eq!(code, 0, "{stderr} {recs:?}");
    use ndarray_npy::ReadNpyExt;
    let a = ndarray::Array3::<u8>::read_npy(
        std::fs::File::open(tmp.path().join("out/zero.npy")).unwrap(),
    )
    .unwrap();
    for c in 0..3 {
        let plane: Vec<u8> = a.index_axis(ndarray::Axis(0), c).iter().copied().collect();
        assert_eq!(plane, grey, "channel {c}");
    }
}

#[test]
fn a_baseline_jpeg_cut_short_below_the_centre_square_is_refused_as_pillow_refuses_it() {
    // A tall photo's centre square ends well above its last rows; the rows below were not read
    // at all (libjpeg-turbo's jpeg_skip_scanlines reads nothing when skipping to the bottom), so
    // a file cut short there was resized where Pillow says "image file is truncated".
    let (w, h) = (64u32, 400u32);
    let mut x = 7u32;
    let img = image::RgbImage::from_fn(w, h, |_, _| {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        image::Rgb([(x >> 24) as u8, (x >> 16) as u8, (x >> 8) as u8])
    });
    let mut jpeg = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90)
        .encode_image(&img)
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("cut.jpg"), &jpeg[..jpeg.len() * 19 / 20]).unwrap();
    std::fs::write(tmp.path().join("whole.jpg"), &jpeg).unwrap();
    let recs = cut_refused_whole_resized(tmp.path(), "cut.jpg", "whole.jpg");
    assert!(recs.errors[0].message.contains("truncated"), "{recs:?}");
}

/// crop-resize on `cut` then `whole` in `dir`: the first is an error record, the second resized.
fn cut_refused_whole_resized(dir: &Path, cut: &str, whole: &str) -> Batch<ImageRecord> {
    let (code, recs, stderr) = run(dir, &["-r", "16", "-o", "out"], format!("{cut}\n{whole}\n"));
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(recs.types, ["error", "image", "summary"], "{stderr}");
    recs
}

#[test]
fn a_webp_cut_short_below_the_centre_square_is_refused_as_pillow_refuses_it() {
    // A tall lossless WebP cut at three quarters, its RIFF and VP8L sizes made to fit: libwebp's
    // cropping stopped at the crop's last row and never met the end of the data, where Pillow's
    // whole decode fails ("failed to read next frame"), as the script checks.
    let tmp = tempfile::tempdir().unwrap();
    let python = std::env::var("SHARDKIT_PYTHON")
        .unwrap_or_else(|_| format!("{}/../../.venv/bin/python", env!("CARGO_MANIFEST_DIR")));
    let script = r#"
import io, random, struct, sys
from PIL import Image
random.seed(3)
im = Image.frombytes("RGB", (64, 800), bytes(random.randrange(256) for _ in range(64 * 800 * 3)))
b = io.BytesIO()
im.save(b, "WEBP", lossless=True)
whole = b.getvalue()
assert whole[12:16] == b"VP8L"
n = len(whole) * 3 // 4 & ~1
cut = bytearray(whole[:n])
cut[4:8] = struct.pack("<I", n - 8)
cut[16:20] = struct.pack("<I", n - 20)
open("whole.webp", "wb").write(whole)
open("cut.webp", "wb").write(cut)
try:
    Image.open("cut.webp").convert("RGB")
    sys.exit("Pillow decodes the cut file")
except OSError:
    pass
"#;
    let made = std::process::Command::new(python)
        .args(["-c", script])
        .current_dir(tmp.path())
        .output()
        .expect("the venv's python");
    assert!(made.status.success(), "{made:?}");
    cut_refused_whole_resized(tmp.path(), "cut.webp", "whole.webp");
}

/// The thread count sizes a thread pool: past its bound (1024) it is a usage error, not a
/// hundred million threads being started.
#[test]
fn jobs_past_the_bound_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    for j in ["1025", "100000000", "18446744073709551615"] {
        let o = Command::cargo_bin("crop-resize")
            .unwrap()
            .current_dir(tmp.path())
            .args(["-r", "8", "-o", "out", "-j", j])
            .write_stdin("")
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "-j {j}: {stderr}");
        assert!(stderr.contains("1..=1024"), "{stderr}");
    }
}
