//! The composition examples under examples/ run as users run them, on the tiny test generator
//! and a random VGG: Make fans shards out and a re-run has nothing to do; xargs -P does the same;
//! the Slurm job array's tasks and its gather, run as Slurm would run them. Every photo that pack
//! and ddp-train take is projected, whatever its extension's case.

use std::path::Path;

use testkit::{photo_tree, python, sh, shared_dir};

/// The photos [`workdir`] adds to [`photo_tree`]'s 9, written by Pillow: one in each other
/// extension the image folder reader takes, in mixed case (and files it passes over).
const MIXED: &[&str] = &[
    "imgs/d/IMG_1001.JPG",
    "imgs/d/b.Jpeg",
    "imgs/d/c.webp",
    "imgs/d/d.tif",
    "imgs/d/e.TIFF",
    "imgs/d/f.bmp",
    "imgs/d/g.PNG",
];

/// Pillow writes each file named in the format its extension says.
const MAKE_MIXED: &str = r#"
import os, sys
from PIL import Image
formats = {".jpg": "JPEG", ".jpeg": "JPEG", ".tif": "TIFF", ".tiff": "TIFF", ".webp": "WEBP",
           ".bmp": "BMP", ".png": "PNG", ".gif": "GIF"}
for i, p in enumerate(sys.argv[1:]):
    os.makedirs(os.path.dirname(p), exist_ok=True)
    fmt = formats[os.path.splitext(p)[1].lower()]
    Image.new("RGB", (40 + i, 33), (20 * i, 100, 200 - 9 * i)).save(p, fmt)
"#;

/// The latents' shape, then their names sorted, one a line.
const READ_LATENTS: &str = r#"
import sys
import numpy as np
f = np.load(sys.argv[1])
print(f["w"].shape)
print("\n".join(sorted(str(n) for n in f["names"])))
"#;

/// A work dir with imgs/ (16 photos in 4 folders, and a GIF and a text file that are not
/// taken) and vgg.safetensors (random LPIPS VGG weights).
fn workdir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    photo_tree(tmp.path());
    testkit::random_vgg_at(2, &tmp.path().join("vgg.safetensors"));
    std::fs::write(tmp.path().join("mixed.py"), MAKE_MIXED).unwrap();
    let out = sh(
        tmp.path(),
        &format!("{} mixed.py {} imgs/d/h.gif", python(), MIXED.join(" ")),
    );
    testkit::ok(&out);
    std::fs::write(tmp.path().join("imgs/d/notes.txt"), "not a photo").unwrap();
    tmp
}

/// Every photo of [`workdir`]'s tree, as the examples' records name them.
fn photos() -> Vec<String> {
    let mut all: Vec<String> = ["a", "b", "c"]
        .iter()
        .flat_map(|d| {
            (0..3).map(move |j| format!("imgs/{d}/{j}.{}", if j % 2 == 0 { "png" } else { "jpg" }))
        })
        .chain(MIXED.iter().map(|s| s.to_string()))
        .collect();
    all.sort();
    all
}

fn vars() -> String {
    let g = shared_dir().join("fixtures/stylegan2/tiny-skip/G.safetensors");
    format!(
        "IMAGES=imgs SHARDS=3 GPUS=2 NETWORK={} VGG=vgg.safetensors RES=32 STEPS=3 DEVICE=cpu PROJECT_FLAGS='--w-avg-samples 200 -b 4'",
        g.display()
    )
}

/// OUT/latents.npz holds one w per photo, named by the photo's path (from the projection
/// records, not the .npz files' names); `npz_beside` says where the .npz files are: beside
/// each photo (the usual projection script's layout) when true.
/// `examples/NAME`.
fn example(name: &str) -> std::path::PathBuf {
    testkit::repo_root().join("examples").join(name)
}

/// [`sh`] in `dir`, which must succeed: `what`, its stdout and its stderr in the message when
/// not.
fn sh_ok(dir: &Path, script: &str, what: &str) -> std::process::Output {
    let out = sh(dir, script);
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn check_latents(dir: &Path, npz: &str, npz_beside: bool) {
    std::fs::write(dir.join("read_latents.py"), READ_LATENTS).unwrap();
    let out = sh(dir, &format!("{} read_latents.py {npz}", python()));
    testkit::ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let n = photos().len();
    assert_eq!(lines.next(), Some(format!("({n}, 1, 32)").as_str()));
    let names: Vec<String> = lines
        .map(|l| l.trim_start_matches("./").to_string())
        .collect();
    assert_eq!(names, photos());
    let beside = sh(dir, "find imgs -name '*.npz' | wc -l");
    let want = if npz_beside { n } else { 0 };
    assert_eq!(
        String::from_utf8_lossy(&beside.stdout).trim(),
        want.to_string()
    );
}

#[test]
fn makefile_fans_out_and_a_rerun_does_nothing() {
    let tmp = workdir();
    let mk = example("Makefile");
    let make = format!("make -s -j3 -f {} {}", mk.display(), vars());
    sh_ok(tmp.path(), &make, "make");
    check_latents(tmp.path(), "out/latents.npz", true);
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
    let script = format!("env {} sh {}", vars(), example("xargs.sh").display());
    let out = sh_ok(tmp.path(), &script, "xargs.sh");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "out/latents.npz"
    );
    check_latents(tmp.path(), "out/latents.npz", true);
}

#[test]
fn slurm_array_tasks_and_their_gather_name_every_photo() {
    let tmp = workdir();
    let script = example("project-array.sbatch");
    // Each task of the array as Slurm runs it: the batch script, with the array's variables.
    for task in 0..3 {
        let run = format!(
            "env {} SLURM_ARRAY_TASK_ID={task} SLURM_ARRAY_TASK_COUNT=3 \
             SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_MAX=2 bash {}",
            vars(),
            script.display()
        );
        sh_ok(tmp.path(), &run, &format!("task {task}"));
    }
    // The gather job, as the script's comment submits it (sbatch --wrap "...").
    let text = std::fs::read_to_string(&script).unwrap();
    let gather = (text.lines())
        .find_map(|l| l.split_once("--wrap \"").map(|(_, r)| r.trim_end()))
        .and_then(|r| r.strip_suffix('"'))
        .expect("the header's sbatch --wrap \"...\" line");
    sh_ok(tmp.path(), gather, gather);
    check_latents(tmp.path(), "latents.npz", false);
    // The .npz files mirror the photos' folders under out/latents.
    let npz = sh(
        tmp.path(),
        "cd out/latents && find . -name '*.npz' | LC_ALL=C sort",
    );
    let want: Vec<String> = (photos().iter())
        .map(|p| {
            let p = Path::new(p.strip_prefix("imgs/").unwrap()).with_extension("npz");
            format!("./{}", p.display())
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&npz.stdout)
            .lines()
            .collect::<Vec<_>>(),
        want
    );
}
