use assert_cmd::Command;
use serde_json::Value;

fn run(args: &[&str], stdin: &str) -> (i32, Vec<Value>) {
    let out = Command::cargo_bin("shard-list")
        .unwrap()
        .args(args)
        .write_stdin(stdin)
        .output()
        .unwrap();
    (out.status.code().unwrap(), testkit::records(&out.stdout))
}

fn paths(r: &Value) -> Vec<&str> {
    r["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect()
}

#[test]
fn round_robin_matches_python_slices() {
    let (code, recs) = run(&["-n", "3"], "p0\np1\np2\np3\np4\n");
    assert_eq!(code, 0);
    assert_eq!(recs.len(), 3);
    assert_eq!(paths(&recs[0]), ["p0", "p3"]);
    assert_eq!(paths(&recs[2]), ["p2"]);
    assert_eq!(recs[1]["shard"], 1);
    assert_eq!(recs[1]["shards"], 3);
    assert_eq!(recs[0]["type"], "shard");
}

#[test]
fn empty_input_gives_zero_shards() {
    let (code, recs) = run(&["-n", "4"], "");
    assert_eq!((code, recs.len()), (0, 0));
}

#[test]
fn more_shards_than_paths_prints_only_non_empty_ones() {
    let (code, recs) = run(&["-n", "4"], "a\nb\n");
    assert_eq!(code, 0);
    assert_eq!(
        recs.iter()
            .map(|r| r["shard"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1]
    );
}

#[test]
fn sizes_reproduce_data_partitioner() {
    let input: String = (0..10).map(|i| format!("{i}\n")).collect();
    let (code, recs) = run(&["--sizes", "0.7,0.2,0.1", "--seed", "1234"], &input);
    assert_eq!(code, 0);
    // random.Random(1234).shuffle(list(range(10))) == [2, 8, 3, 5, 6, 4, 9, 0, 1, 7]
    assert_eq!(paths(&recs[0]), ["2", "8", "3", "5", "6", "4", "9"]);
    assert_eq!(paths(&recs[1]), ["0", "1"]);
    assert_eq!(paths(&recs[2]), ["7"]);
}

#[test]
fn json_records_and_list_files_are_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.txt");
    std::fs::write(&list, "x\n{\"path\":\"y\"}\n").unwrap();
    let (code, recs) = run(
        &["-n", "1", list.to_str().unwrap(), "-"],
        "{\"type\":\"shard\",\"paths\":[\"z\"]}\n",
    );
    assert_eq!(code, 0);
    assert_eq!(paths(&recs[0]), ["x", "y", "z"]);
}

#[test]
fn balance_by_size_reports_missing_files_and_shards_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut input = String::new();
    for (name, size) in [("big", 1000), ("s1", 300), ("s2", 300), ("s3", 400)] {
        let p = dir.path().join(name);
        std::fs::write(&p, vec![0u8; size]).unwrap();
        input.push_str(&format!("{}\n", p.display()));
    }
    input.push_str("/no/such/file\n");
    let (code, recs) = run(&["-n", "2", "--balance", "size"], &input);
    assert_eq!(code, 3, "a missing file is an item failure");
    let errors: Vec<_> = recs.iter().filter(|r| r["type"] == "error").collect();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["input"], "/no/such/file");
    let shards: Vec<_> = recs.iter().filter(|r| r["type"] == "shard").collect();
    assert_eq!(
        shards
            .iter()
            .map(|r| r["bytes"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1000, 1000]
    );
}

#[test]
fn bad_record_lines_are_errors_and_the_rest_continue() {
    let (code, recs) = run(&["-n", "2"], "a\n{broken json\nb\n");
    assert_eq!(code, 3);
    assert_eq!(recs[0]["type"], "error");
    assert_eq!(recs[0]["input"], "{broken json");
    assert_eq!(recs.iter().filter(|r| r["type"] == "shard").count(), 2);
}

#[test]
fn usage_errors_exit_2() {
    let (code, _) = run(&[], "a\n");
    assert_eq!(code, 2, "-n or --sizes is required");
    let (code, _) = run(&["-n", "0"], "a\n");
    assert_eq!(code, 2);
    // Fractions that cannot be a partition are a usage error too (was exit 1).
    let out = Command::cargo_bin("shard-list")
        .unwrap()
        .args(["--sizes", "0.7,0.5"])
        .write_stdin("a\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("shard-list: error: --sizes"));
}

#[test]
fn a_closed_stdout_is_a_quiet_exit_0() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command as Std, Stdio};
    let mut child = Std::new(assert_cmd::cargo::cargo_bin("shard-list"))
        .args(["-n", "100000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for i in 0..100_000 {
            if writeln!(stdin, "path/{i}.jpg").is_err() {
                break;
            }
        }
    });
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap(); // then dropped: the pipe closes
    feeder.join().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(first.starts_with("{\"type\":\"shard\""));
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
}
