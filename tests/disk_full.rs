//! A full disk mid-run: crop-resize and gather-npz write to a 256 KiB tmpfs (mounted in a user +
//! mount namespace, `unshare -rm`, so no privileges are needed). Items that do not fit become error
//! records naming the input and ENOSPC, the run ends with exit 3 (crop-resize) or 1 (gather-npz,
//! one output), and nothing truncated is left under an output's name, nor any temp file.

use std::path::Path;
use std::process::Command;

use testkit::{bin_dir, files_under, records, write_image, write_latent};

/// Runs `script` with `out/` a 256 KiB tmpfs, then copies what it holds to `saved/`.
fn on_full_disk(dir: &Path, script: &str) -> (Option<i32>, Vec<serde_json::Value>) {
    std::fs::create_dir_all(dir.join("out")).unwrap();
    std::fs::create_dir_all(dir.join("saved")).unwrap();
    let full = format!(
        "mount -t tmpfs -o size=256k tmpfs out || exit 99; PATH={}:$PATH; {script}; rc=$?; cp -a out/. saved/; exit $rc",
        bin_dir().display()
    );
    let o = Command::new("unshare")
        .args(["-rm", "sh", "-c", &full])
        .current_dir(dir)
        .output()
        .expect("unshare (util-linux)");
    assert_ne!(
        o.status.code(),
        Some(99),
        "could not mount a tmpfs in a user namespace: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), records(&o.stdout))
}

#[test]
fn crop_resize_on_a_full_disk_reports_each_image_and_leaves_no_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..40 {
        write_image(&tmp.path().join(format!("imgs/{i:02}.png")), 300, 300, i);
    }
    let (code, recs) = on_full_disk(tmp.path(), "crop-resize -q -r 160 -j 2 -o out imgs/*.png");
    let ok: Vec<_> = recs.iter().filter(|r| r["type"] == "image").collect();
    let errors: Vec<_> = recs.iter().filter(|r| r["type"] == "error").collect();
    assert_eq!(
        ok.len() + errors.len(),
        40,
        "one record per input: {recs:?}"
    );
    assert!(
        !ok.is_empty() && !errors.is_empty(),
        "the disk must fill part-way ({} ok)",
        ok.len()
    );
    for e in &errors {
        let msg = e["message"].as_str().unwrap_or_default().to_lowercase();
        assert!(
            e["input"].as_str().is_some_and(|i| i.starts_with("imgs/")),
            "{e}"
        );
        assert!(msg.contains("space"), "the reason names the full disk: {e}");
    }
    assert_eq!(code, Some(3), "some items failed");
    let saved = files_under(&tmp.path().join("saved"), "");
    assert_eq!(
        saved.len(),
        ok.len(),
        "only the reported outputs exist, no temp files: {saved:?}"
    );
    for p in saved {
        let img = image::open(&p).unwrap_or_else(|e| panic!("{} is damaged: {e}", p.display()));
        assert_eq!(img.width(), 160);
    }
}

#[test]
fn gather_npz_on_a_full_disk_fails_without_leaving_a_partial_output() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..200 {
        write_latent(
            &tmp.path().join(format!("lat/{i:03}.npz")),
            1,
            512,
            i as f32,
        );
    }
    // 200 × 2 KiB of w is ~400 KiB: more than the 256 KiB disk.
    let (code, recs) = on_full_disk(tmp.path(), "gather-npz -q -o out/all.npz lat/*.npz");
    assert_eq!(code, Some(1), "{recs:?}");
    assert!(
        files_under(&tmp.path().join("saved"), "").is_empty(),
        "no partial output or temp file"
    );
}
