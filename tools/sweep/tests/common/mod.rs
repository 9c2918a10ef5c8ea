#![allow(dead_code)] // shared by several test crates, each using a part
//! Shared by sweep's integration tests: the sweep run over a space and its records read, Ray
//! Tune's scheduler through the venv's python, and the tests' own reproducible randomness.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use records::{Decision, SweepSummary, TrialRecord, TrialResult};
use serde_json::Value;

/// ASHA to 9, grace period 1, reduction factor 3 (with [`max_by_epoch`]'s flags).
pub const ASHA: &[&str] = &[
    "--max-t",
    "9",
    "--grace-period",
    "1",
    "--reduction-factor",
    "3",
];

/// The flags of a sweep into `out` that maximises `metric` by epoch.
pub fn max_by_epoch<'a>(metric: &'a str, out: &'a Path) -> [&'a str; 8] {
    let out = out.to_str().unwrap();
    let flags = ["--metric", metric, "--mode", "max", "--time-attr", "epoch"];
    let [a, b, c, d, e, f] = flags;
    [a, b, c, d, e, f, "--out-dir", out]
}

/// The journal of the sweep in `out`, an entry a value.
pub fn journal(out: &Path) -> Vec<Value> {
    (std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines())
    .map(|l| serde_json::from_str(l).unwrap())
    .collect()
}

/// The journal's entries of `event`.
pub fn journal_events(out: &Path, event: &str) -> Vec<Value> {
    let mut entries = journal(out);
    entries.retain(|e| e["event"] == event);
    entries
}

/// Runs the reference script `tests/SCRIPT` with `args` and a file holding `input` (JSON), and
/// reads its stdout as JSON.
pub fn reference<T: serde::de::DeserializeOwned>(script: &str, args: &[&str], input: &Value) -> T {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.json");
    std::fs::write(&path, input.to_string()).unwrap();
    let out = Command::new(testkit::python())
        .arg(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests")
                .join(script),
        )
        .args(args)
        .arg(&path)
        .output()
        .expect("running the venv's python");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs tests/ray_asha.py on `cases`.
pub fn ray(how: &str, cases: &Value) -> Vec<Value> {
    reference("ray_asha.py", &[how], cases)
}

/// The curve's arguments for a trial of the space's lr and batch_size, `epochs` long, then
/// `extra`.
pub fn lr_batch_curve<'a>(epochs: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let flags = [
        "--lr",
        "{lr}",
        "--batch-size",
        "{batch_size}",
        "--epochs",
        epochs,
    ];
    [&flags[..], extra].concat()
}

/// The reference scripts' event for a journal's end entry `e`: "error", else "complete".
pub fn end_kind(e: &Value) -> &'static str {
    if e["status"] == "error" {
        "error"
    } else {
        "complete"
    }
}

/// How a random case's trial ends with its result at `time`: "error" at `error_at`,
/// "complete" at its command's `length`, else not yet.
pub fn ended_at(time: u64, error_at: Option<u64>, length: u64) -> Option<&'static str> {
    if error_at.is_some_and(|e| time >= e) {
        Some("error")
    } else if time >= length {
        Some("complete")
    } else {
        None
    }
}

/// xorshift64*: the test's own reproducible randomness.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub const BIN: &str = env!("CARGO_BIN_EXE_sweep");

pub fn curve() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/curve");
    assert!(
        p.exists(),
        "{} not built (cargo test builds the examples)",
        p.display()
    );
    p
}

pub fn sweep(dir: &Path, space: &Value, args: &[&str], command: &[&str]) -> Command {
    sweep_running(dir, space, args, curve().as_os_str(), command)
}

/// A sweep over `space` (written to DIR/space.json) of `program command...`.
pub fn sweep_running(
    dir: &Path,
    space: &Value,
    args: &[&str],
    program: &std::ffi::OsStr,
    command: &[&str],
) -> Command {
    let space_path = dir.join("space.json");
    std::fs::write(&space_path, space.to_string()).unwrap();
    let mut c = Command::new(BIN);
    c.arg("--space")
        .arg(&space_path)
        .args(["--report-secs", "0"])
        .args(args);
    c.arg("--").arg(program).args(command);
    c.env_remove("CUDA_VISIBLE_DEVICES");
    c
}

/// A sweep into DIR/run over `space` of `sh -c SCRIPT sh ARGS...` (placeholders in SCRIPT and
/// ARGS filled in), maximising the result `m` by `epoch`, with `extra` flags.
pub fn script_sweep(
    dir: &Path,
    space: &Value,
    script: &str,
    args: &[&str],
    extra: &[&str],
) -> Command {
    let out = dir.join("run");
    let flags = [&max_by_epoch("m", &out)[..], extra].concat();
    let command = [&["-c", script, "sh"], args].concat();
    sweep_running(dir, space, &flags, "sh".as_ref(), &command)
}

#[derive(Debug, Default)]
pub struct Records {
    pub starts: Vec<TrialRecord>,
    pub ends: Vec<TrialRecord>,
    pub retries: Vec<TrialRecord>,
    pub pauses: Vec<TrialRecord>,
    pub resumes: Vec<TrialRecord>,
    pub results: Vec<TrialResult>,
    pub decisions: Vec<Decision>,
    pub exploits: Vec<records::Exploit>,
    pub summary: Option<SweepSummary>,
}

pub fn records(stdout: &[u8]) -> Records {
    let mut r = Records::default();
    for line in String::from_utf8_lossy(stdout).lines() {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        match v["type"].as_str().unwrap() {
            "trial" => {
                let t: TrialRecord = serde_json::from_value(v).unwrap();
                match t.event.as_str() {
                    "start" => r.starts.push(t),
                    "retry" => r.retries.push(t),
                    "pause" => r.pauses.push(t),
                    "resume" => r.resumes.push(t),
                    "end" => r.ends.push(t),
                    other => panic!("trial event {other}"),
                }
            }
            "result" => r.results.push(serde_json::from_value(v).unwrap()),
            "decision" => r.decisions.push(serde_json::from_value(v).unwrap()),
            "exploit" => r.exploits.push(serde_json::from_value(v).unwrap()),
            "sweep_summary" => r.summary = Some(serde_json::from_value(v).unwrap()),
            other => panic!("record type {other}: {line}"),
        }
    }
    r
}

pub fn ok(o: &Output) -> Records {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    records(&o.stdout)
}
