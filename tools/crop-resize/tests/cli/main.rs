//! crop-resize through its command line, run in a temp tree as users run it: one test binary,
//! its tests by topic in the modules below, their shared helpers here.

mod files;
mod formats;
mod inputs;
mod limits;
mod outputs;
mod streaming;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use records::ImageRecord;
use testkit::Batch;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pillow")
}

/// crop-resize with `args` in `dir`, `stdin` its input; killed past a deadline (two minutes,
/// far beyond any of these runs on a loaded machine), so that a run that hangs fails its test.
fn exec(
    dir: &Path,
    args: &[impl AsRef<std::ffi::OsStr>],
    stdin: impl Into<Vec<u8>>,
) -> std::process::Output {
    Command::cargo_bin("crop-resize")
        .unwrap()
        .current_dir(dir)
        .args(args)
        .write_stdin(stdin)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap()
}

/// Exit status, the records decoded, stderr.
fn run(
    dir: &Path,
    args: &[impl AsRef<std::ffi::OsStr>],
    stdin: impl Into<Vec<u8>>,
) -> (i32, Batch<ImageRecord>, String) {
    let out = exec(dir, args, stdin);
    (
        out.status.code().unwrap(),
        testkit::batch(&out.stdout),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The records of a run that must succeed (exit 0; its stderr and records in the message when
/// not).
fn run_ok(
    dir: &Path,
    args: &[impl AsRef<std::ffi::OsStr>],
    stdin: impl Into<Vec<u8>>,
) -> Batch<ImageRecord> {
    let (code, recs, stderr) = run(dir, args, stdin);
    assert_eq!(code, 0, "{stderr} {recs:?}");
    recs
}

/// The same with the records as JSON (for their wire form).
fn run_raw(
    dir: &Path,
    args: &[impl AsRef<std::ffi::OsStr>],
    stdin: impl Into<Vec<u8>>,
) -> (i32, Vec<serde_json::Value>, String) {
    let out = exec(dir, args, stdin);
    (
        out.status.code().unwrap(),
        testkit::records(&out.stdout),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The exit status of a run that is refused before it starts (no records).
fn status(dir: &Path, args: &[&str]) -> i32 {
    let out = exec(dir, args, "");
    assert!(out.stdout.is_empty());
    out.status.code().unwrap()
}

fn copy_fixture(dir: &Path, name: &str, to: &str) {
    let dst = dir.join(to);
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    std::fs::copy(fixtures().join("inputs").join(name), dst).unwrap();
}

/// A temp dir holding the fixtures named, each copied to where the pair says (`(name, to)`).
fn with_fixtures(files: &[(&str, &str)]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for (name, to) in files {
        copy_fixture(tmp.path(), name, to);
    }
    tmp
}

fn all_files(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(all_files(&p))
        } else {
            v.push(p.to_string_lossy().into_owned())
        }
    }
    v
}

/// The tool as a plain command in `dir`, for what [`exec`] does not do: a child to wait on, a
/// pipe kept open, stdin from a file.
fn tool(dir: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("crop-resize"));
    c.current_dir(dir);
    c
}

/// `script` run by bash in `dir`, the tool's path in `$CROP_RESIZE`: the tool under a umask, a
/// ulimit or in a pipeline.
fn shell(dir: &Path, script: &str) -> std::process::Command {
    let mut c = std::process::Command::new("bash");
    c.current_dir(dir)
        .arg("-c")
        .arg(script)
        .env("CROP_RESIZE", assert_cmd::cargo::cargo_bin("crop-resize"));
    c
}

/// The RGB pixels of an image file.
fn rgb(path: &Path) -> image::RgbImage {
    image::open(path).unwrap().to_rgb8()
}

/// Pillow's output for a fixture (`expected/NAME` beside the inputs).
fn pillow(name: &str) -> image::RgbImage {
    rgb(&fixtures().join("expected").join(name))
}

/// A `.npy` output: uint8, channels first.
fn read_npy(path: &Path) -> ndarray::Array3<u8> {
    use ndarray_npy::ReadNpyExt;
    ndarray::Array3::<u8>::read_npy(std::fs::File::open(path).unwrap()).unwrap()
}
