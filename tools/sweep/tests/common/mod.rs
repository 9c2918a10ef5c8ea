#![allow(dead_code)] // shared by several test crates, each using a part
//! Shared by sweep's integration tests: Ray Tune's scheduler through the venv's python.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

pub fn python() -> PathBuf {
    std::env::var_os("SHARDKIT_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python"))
}

/// Runs tests/ray_asha.py on `cases`.
pub fn ray(how: &str, cases: &Value) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cases.json");
    std::fs::write(&path, cases.to_string()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ray_asha.py");
    let out = Command::new(python())
        .arg(script)
        .arg(how)
        .arg(&path)
        .output()
        .expect("running the venv's python");
    assert!(
        out.status.success(),
        "ray_asha.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}
