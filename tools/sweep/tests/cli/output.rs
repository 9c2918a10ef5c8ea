//! What the sweep writes: non-finite metrics as TensorBoard reads them, and a reader of stdout
//! that goes away.

use super::*;

/// TensorBoard's own reader on the event files; result.json, progress.csv, results.csv and
/// metric.svg are sweep-engine's
/// printed::non_finite_metrics_are_spelled_alike_in_every_file_and_plotted_where_finite.
#[test]
fn non_finite_metrics_are_spelled_alike_in_every_file_and_plotted_where_finite() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"case $1 in
1) printf '\173"epoch": 1, "m": NaN, "extra": \173"loss": Infinity\175\175\n\173"epoch": 2, "m": Infinity\175\n' ;;
2) printf '\173"epoch": 1, "m": 1e308\175\n\173"epoch": 2, "m": -Infinity\175\n' ;;
*) printf '\173"epoch": 1, "m": -1e308\175\n\173"epoch": 2, "m": -1e308\175\n' ;;
esac"#;
    let space = json!({"x": {"grid": [1, 2, 3]}});
    let r = ok(
        &shell_sweep_of(dir.path(), script, &space, &["--scheduler", "fifo"])
            .output()
            .unwrap(),
    );
    assert_eq!(r.results.len(), 6);
    let out = dir.path().join("run");
    // TensorBoard: a scalar per result, the non-finite ones included.
    let check = r#"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1]); ea.Reload()
print([str(e.value) for e in ea.Scalars("m")], [str(e.value) for e in ea.Scalars("extra/loss")])
"#;
    let py = Command::new(testkit::python())
        .args(["-c", check])
        .arg(out.join("trial-0000"))
        .output()
        .unwrap();
    testkit::ok(&py);
    assert_eq!(
        String::from_utf8_lossy(&py.stdout).trim(),
        "['nan', 'inf'] ['inf']"
    );
}

#[test]
fn a_reader_that_goes_away_stops_the_sweep_with_sigpipes_status() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    // One result, then (once the test has closed its end of the pipe) another.
    let script = format!(
        "printf '\\173\"epoch\": 1, \"m\": 1\\175\\n'; i=0; while [ ! -e '{}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done; printf '\\173\"epoch\": 2, \"m\": 2\\175\\n'",
        go.display()
    );
    let mut c = shell_sweep_of(
        dir.path(),
        &script,
        &json!({"x": {"grid": [1]}}),
        &["--scheduler", "fifo"],
    );
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("\"type\":\"result\"") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "no result record");
    }
    drop(stdout);
    std::fs::write(&go, "").unwrap();
    let o = child.wait_with_output().unwrap();
    testkit::exits(&o, 141);
}
