//! What trials print, as the engine takes it: lines that cannot be used (warned about, naming
//! the trial and the line), non-finite metrics (spelled alike in every file the sweep writes,
//! plotted where finite), and a retry's counted results (going on from its checkpoint, or
//! repeats skipped when it starts again without one). The sweep tool's tests check the same
//! through its command line where a real process or stderr is needed.

use super::*;

/// As the sweep tool's results_that_cannot_be_used_are_warnings_naming_the_trial_and_line: each
/// line that cannot be used loses nothing without a word; the NaN Python writes for a diverged
/// metric is a result (Ray Tune takes it too), journalled and replayed as one.
#[test]
fn results_that_cannot_be_used_are_warnings_naming_the_trial_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = definition(&[1], SchedulerKind::Fifo, 4.0, 0);
    let lines = [
        "x".repeat(2 << 20),
        r#"{"m": null, "epoch": 1}"#.into(),
        r#"{"m": "12", "epoch": 1}"#.into(),
        r#"{"m": NaN, "epoch": 1}"#.into(),
        r#"{"m": 1e400, "epoch": 1}"#.into(),
        r#"{"m": 5, "epoch": "two"}"#.into(),
        r#"{"m": 1, "epoch": 2}"#.into(),
        r#"{"m": 2, "epoch": 1}"#.into(),
        r#"{"m": 3, "epoch": 3}"#.into(),
    ];
    let fake = Fake::new(move |_, _| (lines.to_vec(), Exit::Code(0)));
    warnings();
    let (out, ended) = run(create(&dir, def), fake, 1);
    let warned = warnings();
    assert_eq!(ended.unwrap().failed, 0);
    assert_eq!(
        out.results(),
        [
            (json!(1.0), json!("NaN")),
            (json!(2.0), json!(1.0)),
            (json!(3.0), json!(3.0))
        ],
        "{warned:?}"
    );
    // The record carries the NaN as every record spells it.
    let first = out.of_type("result").next().unwrap();
    assert_eq!(first["record"]["m"], "NaN");
    for want in [
        "a line of 2097153 bytes (over 1 MiB) was skipped",
        r#"has "m": null, not a number"#,
        r#"has "m": "12", not a number"#,
        "is not valid JSON (a number out of range?)",
        r#"has "epoch": "two", not a number"#,
        "1 after 2: the time went backwards",
    ] {
        let named = |w: &&String| w.starts_with("trial 0: ") && w.contains(want);
        assert_eq!(warned.iter().filter(named).count(), 1, "{want}: {warned:?}");
    }
    assert_eq!(warned.len(), 6, "{warned:?}");
    // The journal keeps the NaN: a resumed sweep replays it.
    let journal = std::fs::read_to_string(dir.join(sweep_engine::journal::FILE)).unwrap();
    assert!(journal.contains(r#""metric":"NaN""#), "{journal}");
    let fake = Fake::new(|_, _| (Vec::new(), Exit::Code(0)));
    let (again, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let summary = again.summary();
    assert_eq!(
        (&summary["completed"], &summary["best"]["metric"]),
        (&json!(1), &json!(3.0))
    );
}

/// The cells of a CSV file without quoted fields, a row a line.
fn csv_rows(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap();
    (text.lines())
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

/// As the sweep tool's non_finite_metrics_are_spelled_alike_in_every_file_and_plotted_where_finite
/// (which reads the TensorBoard files back with TensorBoard's own reader).
#[test]
fn non_finite_metrics_are_spelled_alike_in_every_file_and_plotted_where_finite() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = definition(&[1, 2, 3], SchedulerKind::Fifo, 2.0, 0);
    let fake = Fake::new(|trial, _| {
        let lines: [&str; 2] = match trial {
            0 => [
                r#"{"epoch": 1, "m": NaN, "extra": {"loss": Infinity}}"#,
                r#"{"epoch": 2, "m": Infinity}"#,
            ],
            1 => [
                r#"{"epoch": 1, "m": 1e308}"#,
                r#"{"epoch": 2, "m": -Infinity}"#,
            ],
            _ => [
                r#"{"epoch": 1, "m": -1e308}"#,
                r#"{"epoch": 2, "m": -1e308}"#,
            ],
        };
        (lines.map(String::from).to_vec(), Exit::Code(0))
    });
    let (out, ended) = run(create(&dir, def), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    assert_eq!(out.of_type("result").count(), 6);
    // result.json: JSON lines (no bare tokens), the values as the records spell them.
    let lines: Vec<Value> = std::fs::read_to_string(dir.join("trial-0000/result.json"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(
        (&lines[0]["m"], &lines[0]["extra"]["loss"], &lines[1]["m"]),
        (&json!("NaN"), &json!("Infinity"), &json!("Infinity"))
    );
    // progress.csv: the same spelling in the cells.
    let rows = csv_rows(&dir.join("trial-0000/progress.csv"));
    let col = |name: &str| rows[0].iter().position(|c| c == name).unwrap();
    assert_eq!(
        (
            &rows[1][col("m")][..],
            &rows[1][col("extra/loss")][..],
            &rows[2][col("m")][..]
        ),
        ("NaN", "Infinity", "Infinity"),
        "{rows:?}"
    );
    // results.csv: the last metric of each trial.
    let rows = csv_rows(&dir.join("results.csv"));
    let last = rows[0].iter().position(|c| c == "last_m").unwrap();
    assert_eq!(
        (&rows[1][last][..], &rows[2][last][..]),
        ("Infinity", "-Infinity"),
        "{rows:?}"
    );
    // metric.svg: finite coordinates only, and a line through the finite points.
    let svg = std::fs::read_to_string(dir.join("metric.svg")).unwrap();
    assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    let points = |trial: usize| {
        let title = format!("<title>trial {trial} (");
        let line = svg.lines().find(|l| l.contains(&title)).unwrap();
        let start = line.find("points=\"").unwrap() + 8;
        (line[start..].split('"').next().unwrap().split(' '))
            .filter(|p| !p.is_empty())
            .count()
    };
    assert_eq!((points(0), points(1), points(2)), (0, 1, 2), "{svg}");
}

/// As the sweep tool's a_failed_trial_is_retried_from_its_checkpoint_and_one_out_of_retries_is_an_error,
/// with counted results (no time in them): a retry of a trial that keeps its state in its
/// directory goes on counting from the failed attempt's last result; one without state starts
/// again from 1, its repeats skipped.
#[test]
fn a_failed_trial_is_retried_from_its_checkpoint_or_from_its_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let mut def = definition(&[1, 2], SchedulerKind::Fifo, 4.0, 1);
    def.time_attr = "training_iteration".into();
    let m = |x: i64| json!({ "m": x }).to_string();
    // Each first attempt prints 2 results and fails. Trial 0 keeps its state: its retry prints
    // results 3 and 4; trial 1 keeps none: its retry prints all 4 again.
    let state = dir.join("trial-0000/state");
    let fake = Fake::new(move |trial, attempt| match (trial, attempt) {
        (_, 1) => {
            if trial == 0 {
                std::fs::write(&state, "epoch 2").unwrap();
            }
            (vec![m(1), m(2)], Exit::Code(3))
        }
        (0, _) => (vec![m(3), m(4)], Exit::Code(0)),
        _ => ((1..=4).map(m).collect(), Exit::Code(0)),
    });
    let (out, ended) = run(create(&dir, def), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let retries: Vec<&Value> = out.trial_records("retry").collect();
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(
        (retries.iter()).all(|r| r["message"].as_str().unwrap().contains("exit status 3")),
        "{retries:?}"
    );
    for trial in [0, 1] {
        let results: Vec<(f64, f64)> = (out.of_type("result"))
            .filter(|r| r["trial"] == trial)
            .map(|r| (r["time"].as_f64().unwrap(), r["metric"].as_f64().unwrap()))
            .collect();
        assert_eq!(
            results,
            [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0), (4.0, 4.0)],
            "trial {trial}"
        );
    }
    assert_eq!(
        out.events("end"),
        [(0, json!("completed")), (1, json!("completed"))]
    );
}
