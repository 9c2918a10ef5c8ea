//! Reliability: each file-writing tool is killed with SIGKILL mid-run; the outputs it leaves are
//! whole or absent (never truncated under their final name), and a re-run completes the work,
//! skipping what was finished, with results equal to an uninterrupted run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::{bin, files_under as files, projection_job, records, write_image, write_latent};

/// `paths` relative to `base`.
fn rel(base: &Path, paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .map(|p| p.strip_prefix(base).unwrap().to_path_buf())
        .collect()
}

/// Starts `cmd`, waits until `ready()` holds (or the process ends), then SIGKILLs it.
/// Returns whether it was still running when killed.
fn kill_when(mut cmd: Command, ready: impl Fn() -> bool) -> bool {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        if ready() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "nothing happened within 300 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    true
}

/// Runs `cmd` (the killed run, again), which must succeed: how many `kind` records say
/// `skipped` (an output the killed run had finished).
fn skipped_on_rerun(mut cmd: Command, kind: &str) -> usize {
    let o = cmd.output().unwrap();
    testkit::ok(&o);
    records(&o.stdout)
        .iter()
        .filter(|r| r["type"] == kind && r["skipped"] == true)
        .count()
}

#[test]
fn crop_resize_killed_then_rerun_completes_identically() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 240;
    for i in 0..n {
        let ext = if i % 2 == 0 { "png" } else { "jpg" };
        write_image(
            &tmp.path().join(format!("imgs/d{}/{i}.{ext}", i % 4)),
            700 + i % 13,
            500 + i % 7,
            i,
        );
    }
    let inputs = rel(tmp.path(), &files(&tmp.path().join("imgs"), ""));
    let run = |out: &str| {
        let mut c = Command::new(bin("crop-resize"));
        c.current_dir(tmp.path())
            .args(["-q", "-r", "64", "-j", "2", "-o", out])
            .args(&inputs);
        c
    };
    assert!(run("straight").output().unwrap().status.success());
    let out = tmp.path().join("killed");
    let killed = kill_when(run("killed"), || files(&out, ".png").len() >= 5);
    let partial = files(&out, ".png").len();
    eprintln!("crop-resize killed: {killed}, {partial}/{n} outputs at the kill");
    // Whatever exists under a final name decodes.
    for p in files(&out, ".png") {
        image::open(&p).unwrap_or_else(|e| panic!("{} is corrupt after SIGKILL: {e}", p.display()));
    }
    let skipped = skipped_on_rerun(run("killed"), "image");
    assert_eq!(
        skipped, partial,
        "the re-run skips exactly the finished images"
    );
    // A SIGKILL cannot be caught: the temp files being written stayed, hidden
    // (`.<name>.<pid>.XXXXXX.partial`), never under an output's name; the re-run, writing the
    // unfinished outputs into those directories, removed them (their pid is gone).
    let stray: Vec<PathBuf> = files(&out, "")
        .into_iter()
        .filter(|p| !p.to_string_lossy().ends_with(".png"))
        .collect();
    assert!(
        stray.is_empty(),
        "temp files of the killed run left after the re-run: {stray:?}"
    );
    let (a, b) = (
        files(&tmp.path().join("straight"), ".png"),
        files(&out, ".png"),
    );
    assert_eq!(a.len(), n as usize);
    assert_eq!(b.len(), n as usize);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            std::fs::read(x).unwrap(),
            std::fs::read(y).unwrap(),
            "{} differs",
            y.display()
        );
    }
}

#[test]
fn gather_npz_killed_leaves_no_partial_output() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 1500;
    for i in 0..n {
        write_latent(
            &tmp.path().join(format!("lat/{i:05}.npz")),
            18,
            512,
            i as f32,
        );
    }
    let inputs = rel(tmp.path(), &files(&tmp.path().join("lat"), ".npz"));
    let run = || {
        let mut c = Command::new(bin("gather-npz"));
        c.current_dir(tmp.path())
            .args(["-q", "-j", "1", "-o", "all.npz"])
            .args(&inputs);
        c
    };
    let target = tmp.path().join("all.npz");
    // Killed at ~30 different moments: the output is either absent or complete.
    let (mut mid_run, mut complete) = (0, 0);
    for delay_ms in (0..30).map(|k| 20 * k) {
        let t0 = Instant::now();
        mid_run += kill_when(run(), || t0.elapsed() >= Duration::from_millis(delay_ms)) as usize;
        if target.exists() {
            complete += 1;
            let f = std::fs::File::open(&target).unwrap();
            let mut npz = ndarray_npy::NpzReader::new(f)
                .unwrap_or_else(|e| panic!("corrupt after a kill at {delay_ms} ms: {e}"));
            let w: ndarray::Array3<f32> = npz.by_name("w.npy").unwrap();
            assert_eq!(w.shape(), &[n, 18, 512]);
            std::fs::remove_file(&target).unwrap();
        }
    }
    eprintln!("gather-npz: {mid_run}/30 runs killed mid-run, {complete} left a (complete) output");
    // A re-run completes.
    let o = run().output().unwrap();
    testkit::ok(&o);
    let mut npz = ndarray_npy::NpzReader::new(std::fs::File::open(&target).unwrap()).unwrap();
    let w: ndarray::Array3<f32> = npz.by_name("w.npy").unwrap();
    assert_eq!(w[[n - 1, 0, 0]], (n - 1) as f32);
    // The killed runs' scratch and temp files (up to 110 MB each here) are gone after the re-run.
    let stray: Vec<PathBuf> = files(tmp.path(), ".partial");
    assert!(
        stray.is_empty(),
        "{} temp files of killed runs left: {stray:?}",
        stray.len()
    );
}

#[test]
fn project_one_gpu_killed_then_rerun_skips_finished_and_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let (g, inputs) = projection_job(tmp.path(), 12);
    // One thread in every run: on the CPU the count changes the results' last bits (a sum split
    // over 2 threads adds in another order), and 6 Adam steps grow them to ~1e-3; left to
    // itself each run takes fewer threads when the CPUs are busy as it starts, so the runs
    // compared here could differ in count. One also does not spin on a loaded machine.
    let run = |out: &str| {
        let mut c = Command::new(bin("project-one-gpu"));
        c.current_dir(tmp.path())
            .args(["-q", "--device", "cpu", "--threads", "1", "--network"])
            .arg(&g)
            .args([
                "--vgg",
                "vgg.safetensors",
                "--steps",
                "6",
                "--w-avg-samples",
                "200",
                "-b",
                "1",
                "-o",
                out,
            ])
            .args(&inputs);
        c
    };
    assert!(run("straight").output().unwrap().status.success());
    let out = tmp.path().join("killed");
    let killed = kill_when(run("killed"), || files(&out, ".npz").len() >= 2);
    let partial = files(&out, ".npz");
    eprintln!(
        "project-one-gpu killed: {killed}, {}/12 outputs at the kill",
        partial.len()
    );
    for p in &partial {
        let mut npz = ndarray_npy::NpzReader::new(std::fs::File::open(p).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let _: ndarray::Array3<f32> = npz.by_name("w.npy").unwrap();
    }
    let skipped = skipped_on_rerun(run("killed"), "latent");
    assert_eq!(
        skipped,
        partial.len(),
        "the re-run skips exactly the finished images"
    );
    let (a, b) = (
        files(&tmp.path().join("straight"), ".npz"),
        files(&out, ".npz"),
    );
    assert_eq!((a.len(), b.len()), (12, 12));
    for (x, y) in a.iter().zip(&b) {
        let w = |p: &Path| -> ndarray::Array3<f32> {
            ndarray_npy::NpzReader::new(std::fs::File::open(p).unwrap())
                .unwrap()
                .by_name("w.npy")
                .unwrap()
        };
        assert_eq!(
            w(x),
            w(y),
            "{} differs from the uninterrupted run",
            y.display()
        );
    }
}
