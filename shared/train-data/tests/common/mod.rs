//! What the integration tests share: running a reference script with the project venv's Python.

use std::ffi::OsStr;
use std::process::Command;

/// Runs `python -c script args...` with the venv's Python ([`testkit::python`]),
/// asserting that it succeeds; its stdout.
pub fn run_script<S: AsRef<OsStr>>(script: &str, args: &[S]) -> Vec<u8> {
    let out = Command::new(testkit::python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("the venv's python (scripts/setup makes it)");
    testkit::ok(&out);
    out.stdout
}
