#![allow(dead_code)] // shared by several test crates, each using a part
//! Shared by sweep's integration tests: the venv's python, Ray Tune's scheduler through it, and
//! the tests' own reproducible randomness.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

pub fn python() -> PathBuf {
    std::env::var_os("SHARDKIT_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python"))
}

/// Runs the reference script `tests/SCRIPT` with `args` and a file holding `input` (JSON), and
/// reads its stdout as JSON.
pub fn reference<T: serde::de::DeserializeOwned>(script: &str, args: &[&str], input: &Value) -> T {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.json");
    std::fs::write(&path, input.to_string()).unwrap();
    let out = Command::new(python())
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
