//! project-one-gpu end to end on the CPU with the tiny upstream fixture network and a random
//! VGG16 (scripts/convert-vgg16-lpips --random): targets rendered from the generator itself are
//! projected, the distance falls and the recovered images get closer; outputs, W+ shapes,
//! trajectories, re-runs and bad inputs.

use std::path::{Path, PathBuf};
use std::process::Command as Std;

use assert_cmd::Command;
use records::LatentRecord;
use testkit::Batch;

fn network() -> PathBuf {
    testkit::stylegan2_fixtures().join("tiny-skip-clamp/G.safetensors")
}

use testkit::python;

/// project-one-gpu in `dir` on the CPU with [`setup`]'s VGG16, the fixture network and
/// `--w-avg-samples samples`; add the rest.
fn projection(dir: &Path, samples: &str) -> Std {
    let mut c = Std::new(env!("CARGO_BIN_EXE_project-one-gpu"));
    c.current_dir(dir)
        .args(["--device", "cpu", "--vgg", "vgg.safetensors"])
        .args(["--w-avg-samples", samples, "--network"])
        .arg(network());
    c
}

/// A temporary directory with a random VGG16 + LPIPS weights file, and three target images
/// rendered by the generator (seeds 1..3, truncation 0.5) under `imgs/`.
fn setup() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    testkit::random_vgg_at(1, &dir.join("vgg.safetensors"));
    let generate = env!("CARGO_BIN_EXE_project-one-gpu").replace("project-one-gpu", "generate");
    testkit::succeeds(
        Std::new(generate)
            .current_dir(dir)
            .args(["-q", "--device", "cpu", "--seeds", "1-3", "--trunc", "0.5"])
            .args(["-o", "imgs", "--network"])
            .arg(network()),
    );
    tmp
}

/// The three targets [`setup`] renders.
const IMGS: [&str; 3] = [
    "imgs/seed0001.png",
    "imgs/seed0002.png",
    "imgs/seed0003.png",
];

/// The records of a run that must end with exit 3 (some items failed).
fn items_failed(dir: &Path, args: &[&str]) -> Batch<LatentRecord> {
    let (code, recs) = project(dir, args);
    assert_eq!(code, Some(3), "{recs:?}");
    recs
}

/// Exit status and records, decoded.
fn project(dir: &Path, args: &[&str]) -> (Option<i32>, Batch<LatentRecord>) {
    let o = exec(dir, args);
    (o.status.code(), testkit::batch(&o.stdout))
}

fn exec(dir: &Path, args: &[&str]) -> std::process::Output {
    exec_with_path(dir, args, None)
}

/// [`exec`] with `PATH` set to `path` when given.
fn exec_with_path(dir: &Path, args: &[&str], path: Option<&str>) -> std::process::Output {
    let mut c = projection(dir, "1000");
    if let Some(p) = path {
        c.env("PATH", p);
    }
    c.arg("-q").args(args).output().unwrap()
}

fn mse(a: &Path, b: &Path) -> f64 {
    let (a, b) = (
        image::open(a).unwrap().to_rgb8(),
        image::open(b).unwrap().to_rgb8(),
    );
    let n = a.as_raw().len() as f64;
    a.as_raw()
        .iter()
        .zip(b.as_raw())
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum::<f64>()
        / n
}

#[test]
fn projection_recovers_the_generators_own_images() {
    let tmp = setup();
    let d = tmp.path();
    let imgs = IMGS;
    // One step leaves w at w_avg (the learning rate of step 0 is 0): the starting point.
    let (code, start) = project(
        d,
        &[
            &["-o", "start", "--steps", "1", "--save-image"][..],
            &imgs[..],
        ]
        .concat(),
    );
    assert_eq!(code, Some(0));
    let (code, end) = project(
        d,
        &[
            &["-o", "end", "--steps", "60", "-b", "2", "--save-image"][..],
            &imgs[..],
        ]
        .concat(),
    );
    assert_eq!(code, Some(0));
    let (start, end) = (&start.items, &end);
    for i in 0..3 {
        let (d0, d1) = (start[i].distance.unwrap(), end.items[i].distance.unwrap());
        assert!(d1 < 0.7 * d0, "image {i}: distance {d0} -> {d1}");
        let target = d.join(imgs[i]);
        let (m0, m1) = (
            mse(start[i].image.as_ref().unwrap(), &target),
            mse(end.items[i].image.as_ref().unwrap(), &target),
        );
        assert!(m1 < m0, "image {i}: pixel MSE {m0} -> {m1}");
        eprintln!("image {i}: distance {d0:.3} -> {d1:.3}, pixel MSE {m0:.1} -> {m1:.1}");
    }
    assert_eq!(end.items[0].output, d.join("end/imgs/seed0001.npz"));
    assert_eq!(end.items[0].w_shape, Some(vec![1, 1, 32]));
    assert_eq!(end.types, ["latent", "latent", "latent", "summary"]);
}

#[test]
fn outputs_beside_inputs_w_plus_trajectory_reruns_and_bad_inputs() {
    let tmp = setup();
    let d = tmp.path();
    std::fs::write(d.join("imgs/broken.jpg"), b"\xff\xd8\xff not really").unwrap();
    let stdin = "imgs/seed0001.png\nimgs/missing.png\nimgs/broken.jpg\nimgs/seed0002.png\n";
    let run = |extra: &[&str]| {
        let o = Command::from_std(projection(d, "500"))
            .args(["-q", "--steps", "3"])
            .args(extra)
            .write_stdin(stdin)
            .output()
            .unwrap();
        let recs: Batch<LatentRecord> = testkit::batch(&o.stdout);
        (o.status.code(), recs)
    };
    let (code, recs) = run(&["--w-plus", "--save-trajectory", "-b", "3"]);
    assert_eq!(code, Some(3));
    assert_eq!(
        recs.types,
        ["latent", "error", "error", "latent", "summary"]
    );
    assert_eq!(recs.errors[0].input, "imgs/missing.png");
    assert_eq!(recs.errors[1].input, "imgs/broken.jpg");
    assert_eq!(recs.items[0].w_shape, Some(vec![1, 8, 32]));
    // Beside the input, as seed 000 writes it; w and the trajectory load in numpy.
    let npz = d.join("imgs/seed0001.npz");
    assert_eq!(recs.items[0].output, npz);
    let check = "import numpy as np, sys; f = np.load(sys.argv[1]); print(f['w'].shape, f['w'].dtype, f['w_steps'].shape)";
    let o = Std::new(python())
        .args(["-c", check])
        .arg(&npz)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "(1, 8, 32) float32 (3, 8, 32)"
    );
    assert_eq!((recs.summary.ok, recs.summary.failed), (2, 2));

    // --retry-failed takes the failures of an earlier run's output, here with one fixed since.
    let failed: String = recs
        .errors
        .iter()
        .map(|e| {
            format!(
                "{{\"type\":\"error\",\"input\":{:?},\"message\":\"m\"}}\n",
                e.input
            )
        })
        .collect();
    std::fs::write(d.join("run1.jsonl"), failed).unwrap();
    std::fs::copy(d.join("imgs/seed0003.png"), d.join("imgs/broken.jpg")).unwrap();
    let (code, again) = run(&["--retry-failed", "run1.jsonl"]);
    assert_eq!(code, Some(3));
    assert_eq!(again.types, ["error", "latent", "summary"]);
    assert_eq!(again.errors[0].input, "imgs/missing.png");
    assert_eq!(again.items[0].input, "imgs/broken.jpg");

    // A re-run skips what is done and retries what failed.
    let (code, recs) = run(&[]);
    assert_eq!(code, Some(3));
    assert!(recs.items.iter().all(|r| r.skipped), "{recs:?}");
    let before = std::fs::read(&npz).unwrap();
    let (_, recs) = run(&["--overwrite"]);
    assert!(!recs.items[0].skipped);
    assert_eq!(recs.items[0].w_shape, Some(vec![1, 1, 32]));
    assert_ne!(std::fs::read(&npz).unwrap(), before);
}

#[test]
fn a_missing_vgg_file_is_fatal_with_its_name() {
    let tmp = tempfile::tempdir().unwrap();
    let o = exec(tmp.path(), &["x.png"]);
    assert_eq!(o.status.code(), Some(1));
}

/// `--cuda-graphs on` on the CPU (and its old spelling `--cuda-graph`): a warning on stderr
/// (none under -q, which it ignored before) and an eager run.
#[test]
fn cuda_graphs_on_the_cpu_is_a_warning_and_an_eager_run() {
    let tmp = setup();
    let d = tmp.path();
    let run = |quiet: bool, out: &str, flag: &[&str]| {
        let mut c = projection(d, "500");
        if quiet {
            c.arg("-q");
        }
        let o = c
            .args(["--steps", "2"])
            .args(flag)
            .args(["-o", out, "imgs/seed0001.png"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(0), "{stderr}");
        assert_eq!(testkit::records(&o.stdout)[0]["type"], "latent");
        stderr
    };
    for (flag, out) in [
        (&["--cuda-graphs", "on"][..], "a"),
        (&["--cuda-graph"], "b"),
    ] {
        let loud = run(false, out, flag);
        assert!(
            loud.contains("project-one-gpu: warning: --cuda-graphs ignored on Cpu"),
            "{flag:?}: {loud}"
        );
    }
    let quiet = run(true, "out-q", &["--cuda-graphs", "on"]);
    assert!(!quiet.contains("warning"), "-q prints errors only: {quiet}");
    // auto is off here: no warning.
    assert!(!run(false, "c", &[]).contains("warning"));
    // A precision this tool does not have is a usage error naming those it has.
    let o = exec(d, &["--precision", "fp16", "imgs/seed0001.png"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("--precision fp16: project-one-gpu takes fp32, tf32, bf16"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn inputs_listed_twice_and_inputs_sharing_an_output() {
    let tmp = setup();
    let d = tmp.path();
    // seed0001.jpg would write seed0001.npz too: it must not replace (or be "skipped" by) the
    // PNG's latent. The repeats land in the same batch and in later ones (batch 2).
    std::fs::write(d.join("imgs/seed0001.jpg"), b"another image").unwrap();
    let args = [
        "-b",
        "2",
        "--steps",
        "2",
        "imgs/seed0001.png",
        "imgs/seed0001.png",
        "imgs/seed0002.png",
        "./imgs/seed0001.png",
        "imgs/seed0001.jpg",
        "imgs/missing.png",
        "imgs/missing.png",
    ];
    let recs = items_failed(d, &args);
    assert_eq!(
        recs.types,
        [
            "latent", "latent", "latent", "latent", "error", "error", "error", "summary"
        ]
    );
    let latents: Vec<(&str, bool)> = recs
        .items
        .iter()
        .map(|r| (r.input.to_str().unwrap(), r.skipped))
        .collect();
    assert_eq!(
        latents,
        [
            ("imgs/seed0001.png", false),
            ("imgs/seed0001.png", true),
            ("imgs/seed0002.png", false),
            ("./imgs/seed0001.png", true),
        ]
    );
    let errors = recs.errors();
    assert_eq!(
        errors.iter().map(|e| e.0).collect::<Vec<_>>(),
        ["imgs/seed0001.jpg", "imgs/missing.png", "imgs/missing.png"]
    );
    assert!(
        errors[0]
            .1
            .contains("is already the output of imgs/seed0001.png"),
        "{errors:?}"
    );
    assert!(errors[2].1.contains("listed again"), "{errors:?}");
    let s = &recs.summary;
    assert_eq!((s.ok, s.skipped, s.failed), (2, 2, 3));
    // Again: the first listings find their outputs done, and so do the repeats.
    let (_, recs) = project(d, &args);
    let skipped: Vec<bool> = recs.items.iter().map(|r| r.skipped).collect();
    assert_eq!(skipped, [true; 4], "{recs:?}");
}

/// Every file a job writes is claimed, not its .npz alone: a picture of one input that is
/// another input (`seed0001.png`'s `seed0001.proj.png`), and an input that is the contact sheet,
/// are error records, and neither file is written over.
#[test]
fn pictures_never_replace_another_input() {
    let tmp = setup();
    let d = tmp.path();
    std::fs::copy(d.join(IMGS[1]), d.join("imgs/seed0001.proj.png")).unwrap();
    let before = std::fs::read(d.join("imgs/seed0001.proj.png")).unwrap();
    let args = [
        "--steps",
        "1",
        "--save-image",
        "--beside-inputs",
        "imgs/seed0001.proj.png",
        "imgs/seed0001.png",
    ];
    let recs = items_failed(d, &args);
    assert_eq!(recs.types, ["latent", "error", "summary"]);
    let errors = recs.errors();
    assert_eq!(errors[0].0, "imgs/seed0001.png");
    assert!(
        errors[0]
            .1
            .contains("seed0001.proj.png is the input imgs/seed0001.proj.png"),
        "{errors:?}"
    );
    assert_eq!(
        std::fs::read(d.join("imgs/seed0001.proj.png")).unwrap(),
        before,
        "the input is as it was"
    );
    assert!(!d.join("imgs/seed0001.npz").exists());
    assert!(d.join("imgs/seed0001.proj.proj.png").exists());
}

/// Every input is known before anything is written: a picture of the first input that is an
/// input listed after it, or a sheet that is one, replaces nothing.
#[test]
fn outputs_never_replace_inputs_listed_later() {
    let tmp = setup();
    let d = tmp.path();
    std::fs::create_dir(d.join("c")).unwrap();
    for (from, to) in [
        (0, "c/a.png"),
        (1, "c/a.proj.png"),
        (2, "c/a.target.png"),
        (2, "c/b.png"),
    ] {
        std::fs::copy(d.join(IMGS[from]), d.join(to)).unwrap();
    }
    // A hard link to a later input where the first input's .npz goes.
    std::fs::hard_link(d.join("c/b.png"), d.join("c/e.npz")).unwrap();
    std::fs::copy(d.join(IMGS[0]), d.join("c/e.png")).unwrap();
    let read = |p: &str| std::fs::read(d.join(p)).unwrap();
    let inputs = ["c/a.png", "c/a.proj.png", "c/a.target.png", "c/b.png"];
    let before: Vec<Vec<u8>> = inputs.map(read).into();
    let args = [
        "--steps",
        "1",
        "-o",
        ".",
        "--save-image",
        "--overwrite",
        "c/a.png",
        "c/e.png",
        "c/a.proj.png",
        "c/a.target.png",
        "c/b.png",
    ];
    let recs = items_failed(d, &args);
    assert_eq!(
        recs.types,
        ["error", "error", "latent", "latent", "latent", "summary"]
    );
    let errors = recs.errors();
    assert!(
        errors[0]
            .1
            .contains("c/a.target.png is the input c/a.target.png"),
        "{errors:?}"
    );
    assert!(errors[1].1.contains("is the input c/b.png"), "{errors:?}");
    assert!(!d.join("c/a.npz").exists());
    let after: Vec<Vec<u8>> = inputs.map(read).into();
    assert!(before == after, "the inputs are as they were");
    // A sheet that is an input: refused before anything is projected or written.
    let o = exec(
        d,
        &[
            "--steps", "1", "--sheet", "c/b.png", "-o", "out", "c/a.png", "c/b.png",
        ],
    );
    testkit::exits_saying(&o, 2, "--sheet c/b.png is the input c/b.png");
    assert_eq!(read("c/b.png"), before[3], "the input is as it was");
    assert!(!d.join("out").exists(), "nothing written");
}

/// An image whose files could not be written has its error record and no row on the sheet;
/// a name too long for its pictures is refused before it is projected.
#[test]
fn the_sheet_shows_only_images_whose_files_were_written() {
    let tmp = setup();
    let d = tmp.path();
    // A directory where the first image's .npz goes: its rename fails after the projection.
    std::fs::create_dir_all(d.join("out/imgs/seed0001.npz")).unwrap();
    // 250 bytes: its .npz fits in a name, its `.target.png` (257 bytes) does not.
    let long = format!("imgs/{}.png", "n".repeat(246));
    std::fs::copy(d.join(IMGS[1]), d.join(&long)).unwrap();
    let args = [
        "--steps",
        "1",
        "-o",
        "out",
        "--overwrite",
        "--save-image",
        "--sheet",
        "sheet.png",
        IMGS[0],
        &long,
    ];
    let recs = items_failed(d, &args);
    assert!(
        !d.join("sheet.png").exists(),
        "no image written, no row, no sheet"
    );
    assert_eq!(recs.types, ["error", "error", "summary"]);
    let errors = recs.errors();
    assert!(errors[0].1.contains("seed0001.npz"), "{errors:?}");
    assert!(
        errors[1]
            .1
            .contains("257 bytes, longer than file names may be (255)"),
        "{errors:?}"
    );
}

/// The planar tiled TIFF that made the tiff crate assert (an error record from the caught panic
/// before) is read through libtiff now, as Pillow reads it, and projected.
#[test]
fn a_planar_tiled_tiff_is_projected_like_any_image() {
    let tmp = setup();
    let d = tmp.path();
    std::fs::write(d.join("planar.tif"), testkit::planar_tiled_tiff(20, 20, 16)).unwrap();
    let o = projection(d, "500")
        .args(["--steps", "2", "planar.tif", "imgs/seed0001.png"])
        .output()
        .unwrap();
    testkit::ok(&o);
    let recs: Batch<LatentRecord> = testkit::batch(&o.stdout);
    assert_eq!(recs.types, ["latent", "latent", "summary"], "{recs:?}");
    assert_eq!(recs.items[0].input, "planar.tif");
}

/// `--kernel-choices` fixes what the CUDA path otherwise times (here the VGG's layout, which the
/// CPU path asks for too): NHWC on the CPU projects to the NCHW run's distance (the same maths,
/// other rounding: 1e-4 relative); a bad choice is a usage error naming the valid values.
#[test]
fn kernel_choices_are_a_checked_flag() {
    let tmp = setup();
    let d = tmp.path();
    let one = |out: &str, extra: &[&str]| {
        let mut args = vec!["--steps", "2", "-o", out];
        args.extend_from_slice(extra);
        args.push("imgs/seed0001.png");
        let (code, recs) = project(d, &args);
        assert_eq!(code, Some(0), "{recs:?}");
        recs.items[0].distance.unwrap()
    };
    let nchw = one("a", &[]);
    let nhwc = one("b", &["--kernel-choices", "vgg-layout=nhwc,upconv=tconv"]);
    assert!((nchw - nhwc).abs() <= 1e-4 * nchw.abs(), "{nchw} vs {nhwc}");
    let o = Command::new(env!("CARGO_BIN_EXE_project-one-gpu"))
        .args(["--kernel-choices", "upconv=fast", "--network", "g", "x.png"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("one of phase, tconv or auto"), "{stderr}");
}

/// `python -c code args...`'s stdout (which must succeed).
fn py(code: &str, args: &[&Path]) -> String {
    let o = Std::new(python())
        .arg("-c")
        .arg(code)
        .args(args)
        .output()
        .unwrap();
    testkit::ok(&o);
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

fn rgb(p: &Path) -> image::RgbImage {
    image::open(p).unwrap().to_rgb8()
}

#[test]
fn pictures_go_under_the_output_directory_with_a_sheet_and_videos() {
    let tmp = setup();
    let d = tmp.path();
    let imgs = IMGS;
    // Pictures beside the inputs only when asked: the next glob would take them for targets.
    let o = exec(d, &["--save-image", imgs[0]]);
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("--out-dir") && stderr.contains("--beside-inputs"),
        "{stderr}"
    );
    assert!(!d.join("imgs/seed0001.npz").exists());

    let (code, recs) = project(
        d,
        &[
            &["-o", "out", "--steps", "3", "-b", "2", "--save-image"][..],
            &["--sheet", "sheet.png", "--video=apng"],
            &imgs[..],
        ]
        .concat(),
    );
    assert_eq!(code, Some(0));
    for (i, rec) in recs.items.iter().enumerate() {
        let stem = d.join(format!("out/imgs/seed000{}", i + 1));
        assert_eq!(
            rec.image.as_deref(),
            Some(stem.with_extension("proj.png").as_path())
        );
        assert_eq!(
            rec.video.as_deref(),
            Some(stem.with_extension("proj.apng").as_path())
        );
        // The target as optimised: the generator's own 32×32 image, untouched.
        let target = rgb(&stem.with_extension("target.png"));
        assert_eq!(target, rgb(&d.join(imgs[i])));
        // The video: target | each step's image, 3 frames; the last is the projection.
        let frames = py(
            "import sys; from PIL import Image; im = Image.open(sys.argv[1]); n = im.n_frames; \
             im.seek(n - 1); im.convert('RGB').save(sys.argv[2]); print(n, im.size)",
            &[rec.video.as_ref().unwrap(), &d.join("last.png")],
        );
        assert_eq!(frames, "3 (64, 32)");
        let last = rgb(&d.join("last.png"));
        let half = |x0: u32| image::imageops::crop_imm(&last, x0, 0, 32, 32).to_image();
        assert_eq!(half(0), target);
        assert_eq!(half(32), rgb(rec.image.as_ref().unwrap()));
    }
    // The sheet: the columns named, a row per image, target | projection (32 pixels scaled up
    // 4 times, each pixel a square; gaps of 4), the image's name and distance under each.
    let sheet = rgb(&d.join("sheet.png"));
    let (top, row) = (4 + 10, 128 + 20 + 4);
    assert_eq!(sheet.dimensions(), (4 + 128 + 4 + 128 + 4, top + 3 * row));
    for (i, rec) in recs.items.iter().enumerate() {
        let y = top + i as u32 * row;
        let cell = |x| {
            let big = image::imageops::crop_imm(&sheet, x, y, 128, 128).to_image();
            image::imageops::resize(&big, 32, 32, image::imageops::FilterType::Nearest)
        };
        assert_eq!(cell(4), rgb(&d.join(imgs[i])));
        assert_eq!(cell(136), rgb(rec.image.as_ref().unwrap()));
    }

    // With ffmpeg on PATH (the venv's static one), --video alone writes MP4.
    let bin = d.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let ffmpeg = py(
        "import imageio_ffmpeg; print(imageio_ffmpeg.get_ffmpeg_exe())",
        &[],
    );
    std::os::unix::fs::symlink(ffmpeg, bin.join("ffmpeg")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let o = exec_with_path(
        d,
        &["--steps", "4", "-o", "mp4", "--video", imgs[0]],
        Some(&path),
    );
    let recs: Batch<LatentRecord> = testkit::batch(&o.stdout);
    testkit::exits(&o, 0);
    let video = recs.items[0].video.clone().unwrap();
    assert_eq!(video, d.join("mp4/imgs/seed0001.proj.mp4"));
    assert_eq!(
        py(
            "import sys, imageio_ffmpeg; print(imageio_ffmpeg.count_frames_and_secs(sys.argv[1]))",
            &[&video]
        ),
        "(4, 0.4)"
    );
    // Without ffmpeg, mp4 asked for by name is a usage error.
    let o = exec_with_path(
        d,
        &["-o", "x", "--video=mp4", imgs[0]],
        Some("/nonexistent"),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("ffmpeg"));
}

/// An ffmpeg that never reads its input (stuck, or a stand-in): writing the video's frames
/// blocked for ever in write(2), deaf to SIGTERM. Now the wait ends on SIGTERM with exit 130.
#[test]
fn sigterm_ends_a_wait_on_an_ffmpeg_that_never_reads() {
    let tmp = setup();
    let d = tmp.path();
    let bin = d.join("bin");
    std::fs::create_dir(&bin).unwrap();
    // Reads nothing; says "full" once its input pipe holds what blocks the next frame.
    let stand_in = format!(
        "#!{}\n{}",
        python(),
        r#"import array, fcntl, termios, time
while True:
    n = array.array("i", [0])
    fcntl.ioctl(0, termios.FIONREAD, n)
    if n[0] > 60000:
        open("full", "w").close()
        time.sleep(1000)
    time.sleep(0.05)
"#
    );
    std::fs::write(bin.join("ffmpeg"), stand_in).unwrap();
    let mut perms = std::fs::metadata(bin.join("ffmpeg")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(bin.join("ffmpeg"), perms).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut child = projection(d, "1000")
        .env("PATH", path)
        .args([
            "-q", "--steps", "40", "-o", "out", "--video", "mp4", IMGS[0],
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Duration::from_secs(300);
    let t = std::time::Instant::now();
    while !d.join("full").exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before the pipe filled"
        );
        assert!(t.elapsed() < deadline, "the stand-in's pipe never filled");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > deadline {
            child.kill().unwrap();
            panic!("still writing to ffmpeg {deadline:?} after SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    assert!(t.elapsed() < deadline / 3, "{:?}", t.elapsed());
}

/// Counts that size allocations (the batch, the w_avg samples) are checked against their
/// bounds before anything is loaded: usage errors, not a 400 GB channel or sample tensor.
#[test]
fn counts_past_their_bounds_are_usage_errors() {
    let tmp = setup();
    let d = tmp.path();
    for args in [
        ["--batch-size", "4000000000"],
        ["--batch-size", "1025"],
        ["--w-avg-samples", "1000000000000"],
        ["--w-avg-samples", "0"],
    ] {
        let mut all = vec!["--steps", "1", "-o", "out"];
        all.extend(args);
        all.push(IMGS[0]);
        let o = exec(d, &all);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(args[0]), "{stderr}");
    }
}

/// Inputs outside --base land in a short folder of their own under --out-dir (their folder's
/// name and a hash of its path), not under their whole absolute path; two photos of one name in
/// two folders of one name never share an output.
#[test]
fn outputs_of_inputs_outside_base_are_short_and_never_collide() {
    let tmp = setup();
    let d = tmp.path();
    for (from, to) in [("seed0001", "x"), ("seed0002", "y")] {
        std::fs::create_dir_all(d.join(to).join("photos")).unwrap();
        std::fs::copy(
            d.join(format!("imgs/{from}.png")),
            d.join(to).join("photos/IMG_1001.png"),
        )
        .unwrap();
    }
    let x = d.join("x/photos/IMG_1001.png");
    let y = d.join("y/photos/IMG_1001.png");
    let (x, y) = (x.to_str().unwrap(), y.to_str().unwrap());
    let flags = ["--steps", "1", "-o", "out", "--base", "imgs"];
    let run = |inputs: &[&str]| project(d, &[&flags[..], inputs].concat());
    let (code, recs) = run(&[x, y, "imgs/seed0003.png"]);
    assert_eq!(code, Some(0), "{recs:?}");
    let out = d.join("out").canonicalize().unwrap();
    let rel: Vec<PathBuf> = (recs.items.iter())
        .map(|r| r.output.strip_prefix(&out).unwrap().to_path_buf())
        .collect();
    // Inside --base, mirrored as before.
    assert_eq!(rel[2], Path::new("seed0003.npz"));
    for r in &rel[..2] {
        let parts: Vec<_> = r.components().collect();
        assert_eq!(parts.len(), 2, "{r:?}");
        assert_eq!(r.file_name().unwrap(), "IMG_1001.npz", "{r:?}");
        let folder = parts[0].as_os_str().to_str().unwrap();
        assert!(
            folder.starts_with("photos-") && folder.len() <= 7 + 16,
            "{r:?}"
        );
    }
    assert_ne!(rel[0], rel[1]);
    assert!(out.join(&rel[0]).is_file() && out.join(&rel[1]).is_file());
    // The same names on a second run (so that finished images are skipped).
    let (_, again) = run(&[x]);
    assert!(again.items[0].skipped, "{again:?}");
    assert_eq!(again.items[0].output, recs.items[0].output);
}
