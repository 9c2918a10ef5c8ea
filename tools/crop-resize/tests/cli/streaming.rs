//! The record stream: records as work finishes, a reader that goes away, a closed stdout, progress
//! lines.

use super::*;

#[test]
fn records_reach_the_pipe_as_work_finishes_not_at_exit() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..8 {
        copy_fixture(tmp.path(), "rgb.png", &format!("in/{i}.png"));
    }
    // One thread: a batch is 8 inputs. stdin stays open, so the run cannot end; the batch's
    // records must arrive anyway (they sat in a 64 KiB buffer until exit before).
    let mut child = tool(tmp.path())
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
    let script = r#""$CROP_RESIZE" -r 16 -o o --jobs 1 - <list | head -1 >/dev/null
                    echo "${PIPESTATUS[0]}""#;
    let out = shell(tmp.path(), script).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stdout.trim(), "141", "{stderr}");
    assert!(!stderr.contains("error"), "quiet, as SIGPIPE is: {stderr}");
}

#[test]
fn a_closed_stdout_is_a_fatal_error_before_any_work() {
    let tmp = with_fixtures(&[("rgb.png", "a.png")]);
    let out = shell(tmp.path(), r#""$CROP_RESIZE" -r 16 -o o a.png >&-"#)
        .output()
        .unwrap();
    testkit::exits_saying(&out, 1, "stdout is closed");
    assert!(!tmp.path().join("o").exists(), "nothing was done");
    // >/dev/null is a choice, not a mistake.
    let out = tool(tmp.path())
        .args(["-r", "16", "-o", "o", "a.png"])
        .stdout(std::fs::File::create("/dev/null").unwrap())
        .output()
        .unwrap();
    testkit::ok(&out);
    // So is /dev/null opened read-write, as Python's `subprocess.DEVNULL` opens it.
    std::fs::remove_dir_all(tmp.path().join("o")).unwrap();
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap();
    let out = tool(tmp.path())
        .args(["-r", "16", "-o", "o", "a.png"])
        .stdout(null)
        .output()
        .unwrap();
    testkit::ok(&out);
    assert!(tmp.path().join("o/a.png").exists());
}

/// `--progress` with stderr a file or a pipe (a batch job's log) writes plain lines there; the
/// terminal bar drew nothing at all off a terminal. Without the flag, nothing.
#[test]
fn progress_off_a_terminal_is_plain_lines() {
    let tmp = with_fixtures(&[("rgb.png", "a.png")]);
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
