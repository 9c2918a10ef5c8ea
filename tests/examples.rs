//! The composition examples under examples/ run as users run them, on the tiny test generator
//! and a random VGG: Make fans shards out and a re-run has nothing to do; xargs -P does the same.

use std::path::Path;

use testkit::{photo_tree, python, sh, shared_dir};

/// A work dir with imgs/ (9 photos in 3 folders) and vgg.safetensors (random LPIPS VGG weights).
fn workdir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    photo_tree(tmp.path());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = sh(
        tmp.path(),
        &format!(
            "{} {}/scripts/convert-vgg16-lpips --random 2 -o vgg.safetensors",
            python(),
            root.display()
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    tmp
}

fn vars() -> String {
    let g = shared_dir().join("fixtures/stylegan2/tiny-skip/G.safetensors");
    format!(
        "IMAGES=imgs SHARDS=3 GPUS=2 NETWORK={} VGG=vgg.safetensors RES=32 STEPS=3 DEVICE=cpu PROJECT_FLAGS='--w-avg-samples 200 -b 4'",
        g.display()
    )
}

fn check_latents(dir: &Path) {
    let out = sh(
        dir,
        &format!(
            "{} -c \"import numpy as np; f = np.load('out/latents.npz'); print(f['w'].shape, len(set(f['names'])))\"",
            python()
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "(9, 1, 32) 9");
    // seed 000's layout: <stem>.npz beside every photo.
    let npz = sh(dir, "find imgs -name '*.npz' | wc -l");
    assert_eq!(String::from_utf8_lossy(&npz.stdout).trim(), "9");
}

#[test]
fn makefile_fans_out_and_a_rerun_does_nothing() {
    let tmp = workdir();
    let mk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/Makefile");
    let out = sh(
        tmp.path(),
        &format!("make -s -j3 -f {} {}", mk.display(), vars()),
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    check_latents(tmp.path());
    // `make -q` exits 0 only when every target is up to date.
    let again = sh(
        tmp.path(),
        &format!("make -q -f {} {}", mk.display(), vars()),
    );
    assert_eq!(
        again.status.code(),
        Some(0),
        "a second make would redo work"
    );
    // A lost shard output is redone alone.
    std::fs::remove_file(tmp.path().join("out/shard-1.jsonl")).unwrap();
    let redo = sh(
        tmp.path(),
        &format!("make -n -f {} {}", mk.display(), vars()),
    );
    let plan = String::from_utf8_lossy(&redo.stdout);
    assert!(
        plan.contains("shard-1.jsonl") && !plan.contains("shard-0.jsonl.partial"),
        "{plan}"
    );
}

#[test]
fn xargs_example_fans_out_and_gathers() {
    let tmp = workdir();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/xargs.sh");
    let out = sh(
        tmp.path(),
        &format!("env {} sh {}", vars(), script.display()),
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "out/latents.npz"
    );
    check_latents(tmp.path());
}
