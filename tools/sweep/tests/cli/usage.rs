//! Usage errors (exit 2 before anything runs), --help and the man page.

use super::*;

#[test]
fn usage_errors_exit_2_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let o = |space: Value, extra: &[&str], cmd: &[&str]| {
        let mut args = vec![
            "--metric",
            "m",
            "--mode",
            "max",
            "--out-dir",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        sweep(dir.path(), &space, &args, cmd).output().unwrap()
    };
    for (space, extra, cmd, want) in [
        (
            json!({"lr": 0.1}),
            &[][..],
            &["--lr", "{lrr}"][..],
            "unknown placeholder {lrr}",
        ),
        (
            json!({"lr": {"uniform": [1, 0]}}),
            &[],
            &["--lr", "{lr}"],
            "uniform needs a < b",
        ),
        (
            json!({"lr": 0.1}),
            &["--reduction-factor", "1"],
            &[],
            "--reduction-factor must be greater than 1",
        ),
        (
            json!({"lr": 0.1}),
            &["--slots", "3", "--gpus", "0,1"],
            &[],
            "needs 3 GPUs, 2 given",
        ),
        // Every config was made up front: this aborted in 0.5 s (a 10^6-point grid took 2 GB).
        (
            json!({"lr": {"uniform": [0, 1]}}),
            &["--samples", "100000000"],
            &["--lr", "{lr}"],
            "gives 100000000 trials",
        ),
        (
            json!({"a": {"grid": (0..1000).collect::<Vec<_>>()}, "b": {"grid": (0..1000).collect::<Vec<_>>()}}),
            &[],
            &["--a", "{a}", "--b", "{b}"],
            "gives 1000000 trials",
        ),
        (
            tpe_space(),
            &["--search", "tpe"],
            &["--lr", "{lr}", "--batch-size", "{batch_size}"],
            "--samples",
        ),
        (
            json!({"lr": {"grid": [0.1, 0.01]}}),
            &["--search", "tpe", "--samples", "4"],
            &["--lr", "{lr}"],
            "grid",
        ),
        (
            json!({"lr": 0.1}),
            &["--min-samples", "2"],
            &[],
            "--scheduler median",
        ),
        // Settings that size allocations: bounded before anything is made.
        (
            json!({"lr": 0.1}),
            &["--brackets", "1000000000000"],
            &[],
            "--brackets must be at most",
        ),
        (
            json!({"lr": 0.1}),
            &[
                "--max-t",
                "1e300",
                "--grace-period",
                "1e-300",
                "--reduction-factor",
                "1.000001",
            ],
            &[],
            "rungs; at most",
        ),
        (json!({"lr": 0.1}), &["--slots", "5000"], &[], "--slots"),
        (
            json!({"lr": 0.1}),
            &["--cpus-per-trial", "1000000000000000000"],
            &[],
            "--cpus-per-trial",
        ),
        (
            json!({"lr": 0.1}),
            &["--gpus-per-trial", "1000000000000000000"],
            &[],
            "--gpus-per-trial",
        ),
        // A width past the largest double panicked (random, hyperband) or drew null (BOHB).
        (
            json!({"lr": {"uniform": [-1e308, 1e308]}}),
            &["--search", "bohb", "--samples", "3"],
            &["--lr", "{lr}"],
            "largest double",
        ),
        (
            json!({"lr": 0.1}),
            &["--scheduler", "median", "--min-time-slice=-1"],
            &[],
            "--min-time-slice",
        ),
        (
            json!({"lr": 0.1}),
            &["--scheduler", "hyperband", "--grace-period", "2"],
            &[],
            "HyperBand's brackets follow",
        ),
        (
            json!({"lr": 0.1}),
            &["--scheduler", "hyperband", "--max-t", "0.5"],
            &[],
            "--max-t must be at least 1",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &["--scheduler", "pbt"],
            &["--lr", "{lr}"],
            "needs --perturbation-interval",
        ),
        (
            json!({"lr": 0.1}),
            &["--scheduler", "pbt", "--perturbation-interval", "2"],
            &[],
            "nothing to mutate",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &[
                "--scheduler",
                "pbt",
                "--perturbation-interval",
                "2",
                "--quantile-fraction",
                "0.7",
            ],
            &["--lr", "{lr}"],
            "--quantile-fraction",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &[
                "--scheduler",
                "pbt",
                "--perturbation-interval",
                "2",
                "--search",
                "tpe",
                "--samples",
                "3",
            ],
            &["--lr", "{lr}"],
            "random search only",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &["--perturbation-interval", "2"],
            &["--lr", "{lr}"],
            "add --scheduler pbt",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &["--search", "bohb", "--samples", "4", "--scheduler", "asha"],
            &["--lr", "{lr}"],
            "HyperBandForBOHB",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &["--search", "bohb"],
            &["--lr", "{lr}"],
            "--search bohb needs --samples",
        ),
        (
            json!({"lr": {"grid": [0.1, 1]}}),
            &["--search", "bohb", "--samples", "4"],
            &["--lr", "{lr}"],
            "BOHB takes no grid",
        ),
    ] {
        let r = o(space, extra, cmd);
        assert_eq!(
            r.status.code(),
            Some(2),
            "{want}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(
            String::from_utf8_lossy(&r.stderr).contains(want),
            "{want}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
    assert!(!out.join("journal.jsonl").exists(), "nothing ran");
    // No command at all: clap's usage error.
    let r = Command::new(BIN)
        .args([
            "--space",
            "x.json",
            "--metric",
            "m",
            "--mode",
            "max",
            "--out-dir",
            "o",
        ])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
}

/// Where roff's `\"` starts a comment outside a comment line: the rest of that line is lost.
pub(crate) fn roff_comment_in_text(page: &str) -> Option<&str> {
    page.lines().filter(|l| !l.starts_with(".\\\"")).find(|l| {
        let mut chars = l.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('"') => return true,
                    _ => continue, // `\\` and other escapes are whole
                }
            }
        }
        false
    })
}

#[test]
fn help_and_man_page_print_quotes_whole() {
    let man = Command::new(BIN)
        .args(["--generate", "man"])
        .output()
        .unwrap();
    let page = String::from_utf8(man.stdout).unwrap();
    assert!(page.contains(".SH \"OUTPUT RECORDS\""), "{page}");
    if let Some(line) = roff_comment_in_text(&page) {
        panic!("roff reads the rest of this line as a comment: {line}");
    }
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("\"stopped\""), "{help}");
    assert!(!help.contains("\\\""), "a backslash before a quote: {help}");
}

#[test]
fn a_fifo_as_the_space_is_refused_not_read_for_ever() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("space.json");
    testkit::mkfifo(&fifo);
    let out = dir.path().join("run");
    let mut c = Command::new(BIN);
    c.arg("--space")
        .arg(&fifo)
        .args(["--metric", "m", "--mode", "max", "--out-dir"])
        .arg(&out)
        .args(["--", "true"]);
    let o = testkit::output_within(&mut c, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--space") && err.contains("not a regular file"),
        "{err}"
    );
    assert!(!out.exists(), "nothing was made");
}
