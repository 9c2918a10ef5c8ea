//! A full disk mid-run: crop-resize, gather-npz, project-one-gpu and ddp-train write to a small
//! tmpfs (mounted in a user + mount namespace, `unshare -rm`, so no privileges are needed). Items
//! that do not fit become error records naming the input and ENOSPC, the run ends with exit 3
//! (some items failed) or 1 (gather-npz's one output, ddp-train's checkpoint), and nothing
//! truncated is left under an output's name, nor any temp file.

use std::path::Path;
use std::process::Command;

use testkit::{bin_dir, files_under, projection_job, records, write_image, write_latent};

/// Runs `script` with `out/` a tmpfs of `size` (mount's syntax: 256k, 60m), then copies what it
/// holds to `saved/`. The exit code, the records, and stderr.
fn on_full_disk_of(
    dir: &Path,
    size: &str,
    script: &str,
) -> (Option<i32>, Vec<serde_json::Value>, String) {
    std::fs::create_dir_all(dir.join("out")).unwrap();
    std::fs::create_dir_all(dir.join("saved")).unwrap();
    let full = format!(
        "mount -t tmpfs -o size={size} tmpfs out || exit 99; PATH={}:$PATH; {script}; rc=$?; cp -a out/. saved/; exit $rc",
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
    (
        o.status.code(),
        records(&o.stdout),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn on_full_disk(dir: &Path, script: &str) -> (Option<i32>, Vec<serde_json::Value>) {
    let (code, recs, _) = on_full_disk_of(dir, "256k", script);
    (code, recs)
}

/// Checks a per-item run that filled the disk part-way: one record per input (`n` of them),
/// either `kind` or an error naming its input (under `prefix`) and the full disk, some of
/// each, and exit 3. The `kind` records.
fn filled_part_way<'a>(
    code: Option<i32>,
    recs: &'a [serde_json::Value],
    (kind, n): (&str, usize),
    prefix: &str,
    stderr: &str,
) -> Vec<&'a serde_json::Value> {
    let ok: Vec<_> = recs.iter().filter(|r| r["type"] == kind).collect();
    let errors: Vec<_> = recs.iter().filter(|r| r["type"] == "error").collect();
    assert_eq!(
        ok.len() + errors.len(),
        n,
        "one record per input: {recs:?} {stderr}"
    );
    assert!(
        !ok.is_empty() && !errors.is_empty(),
        "the disk must fill part-way ({} ok): {stderr}",
        ok.len()
    );
    for e in &errors {
        let msg = e["message"].as_str().unwrap_or_default().to_lowercase();
        assert!(
            e["input"].as_str().is_some_and(|i| i.starts_with(prefix)),
            "{e}"
        );
        assert!(msg.contains("space"), "the reason names the full disk: {e}");
    }
    assert_eq!(code, Some(3), "some items failed");
    ok
}

#[test]
fn crop_resize_on_a_full_disk_reports_each_image_and_leaves_no_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..40 {
        write_image(&tmp.path().join(format!("imgs/{i:02}.png")), 300, 300, i);
    }
    let (code, recs) = on_full_disk(tmp.path(), "crop-resize -q -r 160 -j 2 -o out imgs/*.png");
    let ok = filled_part_way(code, &recs, ("image", 40), "imgs/", "");
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
    // 200 × 2 KiB of w is ~400 KiB: the scratch rows fit on the 600 KiB disk, the output beside
    // them does not, so the disk fills while the .npz is written.
    let (code, recs, stderr) =
        on_full_disk_of(tmp.path(), "600k", "gather-npz -q -o out/all.npz lat/*.npz");
    assert_eq!(code, Some(1), "{recs:?}");
    // One error line, no stray line from the zip writer's drop.
    assert!(!stderr.contains("ZipWriter drop"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        files_under(&tmp.path().join("saved"), "").is_empty(),
        "no partial output or temp file"
    );
}

#[test]
fn project_one_gpu_on_a_full_disk_reports_each_image_and_leaves_no_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (g, inputs) = projection_job(tmp.path(), 16);
    let inputs: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
    // Each image leaves a .npz, a .target.png and a .proj.png of a page (4 KiB) each: 64 KiB
    // holds about a third.
    let script = format!(
        "project-one-gpu -q --device cpu --network {} --vgg vgg.safetensors --steps 2 --w-avg-samples 100 -b 2 --save-image -o out {}",
        g.display(),
        inputs.join(" ")
    );
    let (code, recs, stderr) = on_full_disk_of(tmp.path(), "64k", &script);
    let ok = filled_part_way(code, &recs, ("latent", 16), "targets/", &stderr);
    let saved = tmp.path().join("saved");
    let npz = files_under(&saved, ".npz");
    let png = files_under(&saved, ".proj.png");
    let targets = files_under(&saved, ".target.png");
    assert_eq!(
        npz.len(),
        ok.len(),
        "a .npz exactly for each reported image: {npz:?}"
    );
    assert_eq!(
        files_under(&saved, "").len(),
        npz.len() + png.len() + targets.len(),
        "no temp files"
    );
    // The .npz marks an image done (a re-run skips it), so it is written last: its image is there.
    for p in &npz {
        let w: ndarray::ArrayD<f32> = ndarray_npy::NpzReader::new(std::fs::File::open(p).unwrap())
            .unwrap()
            .by_name("w.npy")
            .unwrap();
        assert_eq!(w.shape()[0], 1);
        let img = p.with_extension("proj.png");
        assert!(
            image::open(&img).is_ok(),
            "{} has no intact {}",
            p.display(),
            img.display()
        );
    }
}

/// The digits as CIFAR-100 binaries under `dir/digits`.
fn digits(dir: &Path) {
    let o = std::process::Command::new(testkit::python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/make-digits-cifar"))
        .arg(dir.join("digits"))
        .output()
        .unwrap();
    testkit::ok(&o);
}

/// The files of `dir` but the run's lock (`.lock`, never removed: removing it would race with a
/// run taking it).
fn names_under(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = files_under(dir, "")
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n != ".lock")
        .collect();
    names.sort();
    names
}

#[test]
fn ddp_train_on_a_full_disk_fails_with_a_message_and_leaves_no_partial_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    digits(tmp.path());
    // ResNet-18's weights are 45 MB, its SGD momentum as much: 60 MB holds the training state
    // but not the model beside it, and a checkpoint is both or neither.
    let (code, recs, stderr) = on_full_disk_of(
        tmp.path(),
        "60m",
        "ddp-train -q --device cpu --data cifar100:digits --batch-size 32 --max-steps 1 --epochs 1 --checkpoint-dir out",
    );
    assert_eq!(code, Some(1), "{recs:?} {stderr}");
    assert!(
        stderr.to_lowercase().contains("space") && stderr.contains("last.safetensors"),
        "{stderr}"
    );
    let names = names_under(&tmp.path().join("saved"));
    assert!(
        names.is_empty(),
        "no half checkpoint, no temp file: {names:?}"
    );
}

/// A full disk while the second epoch's checkpoint is written: the first epoch's stays whole and
/// resumable (before, the optimiser half was replaced before the model half failed, and
/// `--resume` refused the mismatched pair: every epoch lost). Without momentum the optimiser
/// half is a few bytes, so it fits where the model does not.
#[test]
fn ddp_train_keeps_the_previous_checkpoint_whole_when_the_disk_fills_up() {
    let tmp = tempfile::tempdir().unwrap();
    digits(tmp.path());
    let train = "ddp-train -q --device cpu --data cifar100:digits --batch-size 32 --max-steps 1 \
                 --momentum 0 --checkpoint-dir out";
    // Epoch 1 (model, best, training state: ~90 MB) fits in 100 MB; epoch 2's does not beside it.
    let (code, recs, stderr) = on_full_disk_of(
        tmp.path(),
        "100m",
        &format!("{train} --epochs 1 || exit 99; {train} --epochs 2 --resume"),
    );
    assert_eq!(code, Some(1), "{recs:?} {stderr}");
    assert!(
        stderr.to_lowercase().contains("space") && stderr.contains("intact"),
        "{stderr}"
    );
    let saved = tmp.path().join("saved");
    assert_eq!(
        names_under(&saved),
        [
            "best.safetensors",
            "last.safetensors",
            "last.train.safetensors"
        ],
        "the epoch-1 checkpoint, no staged or temp file"
    );
    let o = std::process::Command::new(bin_dir().join("ddp-train"))
        .args(["-q", "--device", "cpu", "--data", "cifar100:digits"])
        .args(["--batch-size", "32", "--max-steps", "1", "--momentum", "0"])
        .args(["--epochs", "2", "--resume", "--checkpoint-dir", "saved"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    testkit::exits(&o, 0);
    let epochs: Vec<_> = records(&o.stdout)
        .into_iter()
        .filter(|r| r["type"] == "epoch")
        .map(|r| r["epoch"].clone())
        .collect();
    assert_eq!(epochs, [serde_json::json!(2)], "resumed after epoch 1");
}

/// `--dump-batches` on a full disk: an error naming the file, and no `FILE.npz.partial` (or any
/// temp file) left behind.
#[test]
fn a_dump_that_fails_on_a_full_disk_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    digits(tmp.path());
    // Two batches of 32 float32 32x32 images: 786 KB, in 256 KB.
    let (code, _, stderr) = on_full_disk_of(
        tmp.path(),
        "256k",
        "ddp-train -q --device cpu --data cifar100:digits --batch-size 32 --dump-batches 2 --dump out/b.npz",
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("b.npz"), "{stderr}");
    let names = names_under(&tmp.path().join("saved"));
    assert!(names.is_empty(), "{names:?}");
}
