//! What the integration tests share: running a reference script with the project venv's Python.

use std::ffi::OsStr;
use std::process::Command;

/// Runs `python -c script args...` with the venv's Python (`SHARDKIT_PYTHON` overrides it),
/// asserting that it succeeds; its stdout.
pub fn run_script<S: AsRef<OsStr>>(script: &str, args: &[S]) -> Vec<u8> {
    let python = std::env::var("SHARDKIT_PYTHON")
        .unwrap_or_else(|_| format!("{}/../../.venv/bin/python", env!("CARGO_MANIFEST_DIR")));
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("the venv's python (scripts/setup makes it)");
    testkit::ok(&out);
    out.stdout
}
