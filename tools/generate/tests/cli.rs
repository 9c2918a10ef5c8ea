//! `generate` end to end on the upstream fixtures: the raw images equal upstream's, PNGs use
//! upstream's uint8 mapping, bad inputs are error records while the rest are rendered.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};
use serde_json::Value;
use tch::Tensor;

fn fixture() -> PathBuf {
    testkit::stylegan2_fixtures().join("tiny-skip-clamp")
}

fn reference() -> BTreeMap<String, Tensor> {
    Tensor::read_safetensors(fixture().join("reference.safetensors"))
        .unwrap()
        .into_iter()
        .collect()
}

fn to_array(t: &Tensor) -> ArrayD<f32> {
    let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
    let mut v = vec![0f32; t.numel()];
    let n = v.len();
    t.contiguous().copy_data(&mut v, n);
    ArrayD::from_shape_vec(shape, v).unwrap()
}

fn save_npy(path: &Path, t: &Tensor) {
    to_array(t).write_npy(File::create(path).unwrap()).unwrap();
}

fn generate(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_generate"));
    c.current_dir(dir)
        .args(["--device", "cpu", "--network"])
        .arg(fixture().join("G.safetensors"));
    c
}

use records::ImageRecord;
use testkit::Batch;

/// Runs `cmd`, which must end with exit 3 (some items failed): its records.
fn items_failed(cmd: &mut Command) -> Batch<ImageRecord> {
    let o = cmd.output().unwrap();
    testkit::exits(&o, 3);
    testkit::batch(&o.stdout)
}

#[test]
fn raw_output_equals_upstream_images_from_ws_and_z() {
    let tmp = tempfile::tempdir().unwrap();
    let r = reference();
    save_npy(&tmp.path().join("ws.npy"), &r["ws"]);
    save_npy(&tmp.path().join("z.npy"), &r["z"]);
    let o = generate(tmp.path())
        .args(["ws.npy", "z.npy", "--raw", "raw.npy", "-o", "out"])
        .output()
        .unwrap();
    testkit::ok(&o);
    let out: Batch<ImageRecord> = testkit::batch(&o.stdout);
    assert_eq!((out.items.len(), out.types.len()), (8, 9));
    assert_eq!(out.summary.shape, Some(vec![8, 3, 32, 32]));

    let raw = ArrayD::<f32>::read_npy(File::open(tmp.path().join("raw.npy")).unwrap()).unwrap();
    let want = to_array(&r["img_const"]);
    for half in 0..2 {
        let got = raw.slice(ndarray::s![half * 4..half * 4 + 4, .., .., ..]);
        let d = got
            .iter()
            .zip(want.iter())
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(d <= 1e-4, "rows {half}: max|Δ| {d}");
    }

    // PNG = (img * 127.5 + 128).clamp(0, 255) as uint8, channels last.
    let png = image::open(tmp.path().join("out/ws.0002.png"))
        .unwrap()
        .to_rgb8();
    let img = want.slice(ndarray::s![2, .., .., ..]);
    for (x, y, p) in png.enumerate_pixels() {
        for c in 0..3 {
            let v = (img[[c, y as usize, x as usize]] * 127.5 + 128.0).clamp(0.0, 255.0) as u8;
            assert_eq!(p[c], v, "pixel ({x},{y}) channel {c}");
        }
    }
}

#[test]
fn seeds_are_deterministic_and_reruns_skip() {
    let tmp = tempfile::tempdir().unwrap();
    let o = generate(tmp.path())
        .args(["--seeds", "3,5-6", "--trunc", "0.7", "-o", "out"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let out: Batch<ImageRecord> = testkit::batch(&o.stdout);
    let inputs: Vec<&str> = out
        .items
        .iter()
        .map(|r| r.input.to_str().unwrap())
        .collect();
    assert_eq!(inputs, ["seed:3", "seed:5", "seed:6"]);
    assert!(out.items[0].output.ends_with("out/seed0003.png"));
    let first = std::fs::read(tmp.path().join("out/seed0005.png")).unwrap();

    let o = generate(tmp.path())
        .args(["--seeds", "3,5-6", "--trunc", "0.7", "-o", "out"])
        .output()
        .unwrap();
    let out: Batch<ImageRecord> = testkit::batch(&o.stdout);
    assert!(out.items.iter().all(|r| r.skipped));
    assert_eq!(out.summary.skipped, 3);

    let o = generate(tmp.path())
        .args([
            "--seeds",
            "5",
            "--trunc",
            "0.7",
            "-o",
            "again",
            "--overwrite",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(
        std::fs::read(tmp.path().join("again/seed0005.png")).unwrap(),
        first
    );
}

#[test]
fn bad_inputs_are_error_records_and_the_rest_render() {
    let tmp = tempfile::tempdir().unwrap();
    let r = reference();
    // A projector-style record on stdin: w [1,1,w_dim] in an .npz, named by its source image.
    let w = r["w_avg_1000"].shallow_clone();
    let mut npz = ndarray_npy::NpzWriter::new(File::create(tmp.path().join("a.npz")).unwrap());
    npz.add_array("w", &to_array(&w)).unwrap();
    npz.finish().unwrap();
    save_npy(
        &tmp.path().join("wrong.npy"),
        &Tensor::zeros([2, 7], (tch::Kind::Float, tch::Device::Cpu)),
    );
    std::fs::write(tmp.path().join("junk.npz"), b"not a zip").unwrap();
    let stdin = [
        r#"{"type":"latent","input":"imgs/a.jpg","output":"a.npz"}"#,
        r#"{"type":"latent","input":"imgs/a.png","output":"a.npz"}"#,
        "missing.npy",
        "wrong.npy",
        "junk.npz",
        r#"{"type":"summary","ok":1,"skipped":0,"failed":0,"elapsed_ms":1}"#,
    ]
    .join("\n");
    let out = items_failed(generate(tmp.path()).args(["-o", "out"]).write_stdin(stdin));
    assert_eq!(out.types[0], "image");
    assert_eq!(out.items[0].input, "imgs/a.jpg");
    assert!(tmp.path().join("out/imgs/a.png").is_file());
    let errors = out.errors();
    assert_eq!(errors.len(), 4, "{errors:?}");
    // imgs/a.png would write imgs/a.png too: the first input's image stays.
    assert_eq!(errors[0].0, "imgs/a.png");
    assert!(
        errors[0].1.contains("is already the output of imgs/a.jpg"),
        "{}",
        errors[0].1
    );
    assert_eq!(errors[1].0, "missing.npy");
    assert!(errors[2].1.contains("shape [2, 7]"), "{}", errors[2].1);
    assert!(errors[3].1.contains("not an .npz"), "{}", errors[3].1);
    assert_eq!((out.summary.ok, out.summary.failed), (1, 4));
}

/// Every input is known before anything is written: an image is not written over an input
/// listed after its latent, nor --raw's array over an input.
#[test]
fn with_overwrite_no_image_replaces_an_input_listed_later() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let w = reference()["w_avg_1000"].shallow_clone();
    let mut npz = ndarray_npy::NpzWriter::new(File::create(d.join("a.npz")).unwrap());
    npz.add_array("w", &to_array(&w)).unwrap();
    npz.finish().unwrap();
    std::fs::write(d.join("a.png"), b"an input, not a latent").unwrap();
    let read = |p: &str| std::fs::read(d.join(p)).unwrap();
    let (png, latent) = (read("a.png"), read("a.npz"));
    let out = items_failed(generate(d).args(["-q", "-o", ".", "--overwrite", "a.npz", "a.png"]));
    let errors = out.errors();
    assert_eq!(errors[0].0, "a.npz", "{errors:?}");
    assert!(
        errors[0].1.contains("is the input a.png of this run"),
        "{errors:?}"
    );
    assert_eq!(read("a.png"), png, "the input is untouched");
    let o = generate(d)
        .args(["-q", "-o", "out", "--raw", "a.npz", "a.npz"])
        .output()
        .unwrap();
    testkit::exits_saying(&o, 2, "--raw a.npz is the input a.npz");
    assert_eq!(read("a.npz"), latent, "the input is untouched");
    assert!(!d.join("out").exists(), "nothing written");
}

#[test]
fn config_comes_from_metadata_or_the_flag_never_the_name() {
    let tmp = tempfile::tempdir().unwrap();
    // The same tensors without metadata.
    let tensors = Tensor::read_safetensors(fixture().join("G.safetensors")).unwrap();
    let bare = tmp.path().join("tiny-skip-clamp.safetensors");
    Tensor::write_safetensors(&tensors, &bare).unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_generate"))
            .current_dir(tmp.path())
            .args(["--device", "cpu", "--seeds", "1", "-o", "out", "--network"])
            .arg(&bare)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run(&[]);
    testkit::exits_saying(&o, 1, "no `config` metadata");
    let cfg = std::fs::read_to_string(fixture().join("config.json")).unwrap();
    let o = run(&["--config", &cfg]);
    testkit::ok(&o);
    // A config that does not fit the tensors is refused with the tensor named.
    let o = run(&[
        "--config",
        &cfg.replace("\"map_layers\": 8", "\"map_layers\": 2"),
    ]);
    testkit::exits_saying(&o, 1, "mapping.fc2.weight");
    // Declared sizes are bounded before anything is sized by them: 10^12 mapping layers
    // aborted the process ("allocation of 8000000000008 bytes failed") before.
    for (key, huge) in [
        ("\"map_layers\": 8", "\"map_layers\": 1000000000000"),
        ("\"w_dim\": ", "\"w_dim\": 1000000000000, \"_was\": "),
        (
            "\"img_resolution\": ",
            "\"img_resolution\": 1099511627776, \"_was\": ",
        ),
    ] {
        assert!(cfg.contains(key), "{key}");
        let o = run(&["--config", &cfg.replace(key, huge)]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{huge}: {stderr}");
        assert!(stderr.contains("bad generator config"), "{huge}: {stderr}");
    }
}

#[test]
fn non_finite_latents_are_error_records_not_black_images() {
    let tmp = tempfile::tempdir().unwrap();
    let w = reference()["w_avg_1000"].copy();
    let _ = w.get(0).get(0).get(0).fill_(f64::NAN);
    let two = Tensor::cat(&[reference()["w_avg_1000"].copy(), w], 0); // [2, 1, w_dim]: row 1 is bad
    save_npy(&tmp.path().join("ws.npy"), &two);
    // A z file with 0 rows gave no record at all.
    save_npy(
        &tmp.path().join("empty.npy"),
        &Tensor::zeros([0, 32], (tch::Kind::Float, tch::Device::Cpu)),
    );
    let out = items_failed(generate(tmp.path()).args(["-o", "out", "--input-kind", "w", "ws.npy"]));
    assert_eq!(out.types, ["image", "error", "summary"]);
    assert_eq!(out.errors[0].input, "ws.npy[1]");
    assert!(out.errors[0].message.contains("non-finite"));
    assert!(tmp.path().join("out/ws.0000.png").exists());
    assert!(
        !tmp.path().join("out/ws.0001.png").exists(),
        "no black image counted as done"
    );
    let out =
        items_failed(generate(tmp.path()).args(["-o", "out", "--input-kind", "z", "empty.npy"]));
    assert_eq!(out.types[0], "error", "{out:?}");
    assert_eq!(out.errors[0].input, "empty.npy");
    assert!(out.errors[0].message.contains("no rows"));
}

#[test]
fn a_huge_seed_range_is_rendered_as_a_stream() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    // 2^32 seeds: was a 16 GiB list, an abort (exit 134) before the first image where memory is
    // short. 4 GB of address space is short of that and plenty for the tool (it runs in 2).
    let cmd = format!(
        "ulimit -v 4000000 && exec '{}' --device cpu --batch-size 1 --seeds 0-4294967295 -o out --network '{}'",
        env!("CARGO_BIN_EXE_generate"),
        fixture().join("G.safetensors").display()
    );
    let mut child = std::process::Command::new("sh")
        .current_dir(tmp.path())
        .args(["-c", &cmd])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for want in ["seed:0", "seed:1", "seed:2"] {
        let line = lines.next().expect("a record").unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["input"], want, "{line}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The start line of `generate --seeds 0` run as `wrap` (a command and its arguments, or none)
/// with `args` and `env`.
fn start_line(wrap: &[&str], args: &[&str], env: &[(&str, &str)]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_generate");
    let mut c = match wrap {
        [] => Command::new(bin),
        [w, rest @ ..] => {
            let mut c = Command::new(w);
            c.args(rest).arg(bin);
            c
        }
    };
    c.current_dir(tmp.path())
        .args(["--device", "cpu", "--network"])
        .arg(fixture().join("G.safetensors"))
        .args(["--seeds", "0", "-o", "out"])
        .args(args);
    for v in ["OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK", "LOCAL_WORLD_SIZE"] {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    testkit::ok(&o);
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .find(|l| l.starts_with("generate: "))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn cpu_threads_come_from_the_flag_the_launcher_or_the_cpus_it_may_use() {
    let line = start_line(&[], &["--threads", "1"], &[("OMP_NUM_THREADS", "2")]);
    assert!(line.ends_with(", 1 CPU thread(s) (--threads)"), "{line}");
    let line = start_line(&[], &[], &[("OMP_NUM_THREADS", "1")]);
    assert!(
        line.ends_with(", 1 CPU thread(s) (OMP_NUM_THREADS)"),
        "{line}"
    );
    // More than the CPUs it may use is capped there, and the start line says so.
    let line = start_line(&["taskset", "-c", "0"], &["--threads", "3"], &[]);
    assert!(
        line.ends_with(
            ", 1 CPU thread(s) (--threads), capped: 3 asked, more than the 1 CPU(s) it may use"
        ),
        "{line}"
    );
    let line = start_line(&[], &[], &[("SLURM_CPUS_PER_TASK", "1")]);
    assert!(
        line.ends_with(", 1 CPU thread(s) (SLURM_CPUS_PER_TASK)"),
        "{line}"
    );
    // Pinned to one CPU (taskset, as parallel's or Slurm's binding does): one thread, not a pool
    // of every core.
    let line = start_line(&["taskset", "-c", "0"], &[], &[]);
    assert!(
        line.ends_with(", 1 CPU thread(s) (the 1 CPU(s) it may use)"),
        "{line}"
    );
    // Four ranks of a torchrun on this node share the CPUs it may use.
    let cpus = std::thread::available_parallelism().unwrap().get();
    let line = start_line(&[], &[], &[("LOCAL_WORLD_SIZE", "4")]);
    assert!(
        line.ends_with(&format!(
            ", {} CPU thread(s) ({cpus} CPUs / 4 ranks on the node)",
            (cpus / 4).max(1)
        )),
        "{line}"
    );
}

#[test]
fn precision_is_spelled_as_in_every_tool_and_the_old_flags_still_work() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = |args: &[&str], name: &str| {
        generate(tmp.path())
            .args(["--seeds", "1-2", "-q", "--raw", name, "-o"])
            .arg(format!("{name}.d"))
            .args(args)
            .assert()
            .success();
        std::fs::read(tmp.path().join(name)).unwrap()
    };
    // On the CPU everything is fp32: the same images whichever way it is asked for.
    let base = raw(&[], "a.npy");
    assert_eq!(raw(&["--precision", "fp32"], "b.npy"), base);
    assert_eq!(raw(&["--fp32", "--no-tf32"], "c.npy"), base);
    let o = generate(tmp.path())
        .args(["--seeds", "1", "--precision", "bf16", "-o", "d"])
        .output()
        .unwrap();
    testkit::exits_saying(&o, 2, "--precision bf16: generate takes fp32, tf32");
}

#[test]
fn init_network_writes_a_small_random_generator_to_try_the_tools_with() {
    let dir = tempfile::tempdir().unwrap();
    let init = |name: &str, seed: &str, extra: &[&str]| {
        Command::cargo_bin("generate")
            .unwrap()
            .current_dir(dir.path())
            .args(["--init-network", seed, "--network", name])
            .args(extra)
            .output()
            .unwrap()
    };
    let o = init("G.safetensors", "0", &[]);
    testkit::ok(&o);
    let rec: records::NetworkRecord = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rec.output, dir.path().join("G.safetensors"));
    assert_eq!(
        (
            rec.config["img_resolution"].as_u64(),
            rec.config["z_dim"].as_u64()
        ),
        (Some(32), Some(32))
    );
    let bytes = |n: &str| std::fs::read(dir.path().join(n)).unwrap();
    // One file per seed: the same seed writes the same bytes, another seed other weights.
    assert!(init("again.safetensors", "0", &[]).status.success());
    assert!(init("other.safetensors", "1", &[]).status.success());
    assert_eq!(bytes("G.safetensors"), bytes("again.safetensors"));
    assert_ne!(bytes("G.safetensors"), bytes("other.safetensors"));
    // A file there is kept unless --overwrite.
    let o = init("G.safetensors", "1", &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--overwrite"));
    assert_eq!(bytes("G.safetensors"), bytes("again.safetensors"));
    assert!(
        init("G.safetensors", "1", &["--overwrite"])
            .status
            .success()
    );
    assert_eq!(bytes("G.safetensors"), bytes("other.safetensors"));
    // --config gives another shape; the weights render.
    let cfg = r#"{"z_dim": 16, "w_dim": 16, "img_resolution": 16, "img_channels": 3, "map_layers": 1, "channel_base": 256, "channel_max": 16, "conv_clamp": null, "architecture": "resnet"}"#;
    let o = init("small.safetensors", "3", &["--config", cfg]);
    testkit::ok(&o);
    let o = Command::cargo_bin("generate")
        .unwrap()
        .current_dir(dir.path())
        .args([
            "--network",
            "small.safetensors",
            "--seeds",
            "0-1",
            "-o",
            "out",
            "--device",
            "cpu",
        ])
        .output()
        .unwrap();
    testkit::ok(&o);
    let img = image::open(dir.path().join("out/seed0001.png")).unwrap();
    assert_eq!((img.width(), img.height()), (16, 16));
}

#[test]
fn processes_side_by_side_share_the_cpus_instead_of_each_taking_all() {
    // Three under xargs -P3, each rendering a few images: each counts the others that xargs
    // started (the last started sees all three) and takes its share, at least one thread.
    let dir = tempfile::tempdir().unwrap();
    let bin = assert_cmd::cargo::cargo_bin("generate");
    let made = std::process::Command::new(&bin)
        .current_dir(dir.path())
        .args(["--init-network", "0", "--network", "G.safetensors"])
        .output()
        .unwrap();
    assert!(made.status.success());
    let on_the_cpu = ["--network", "G.safetensors", "--device", "cpu"];
    let o = std::process::Command::new("xargs")
        .current_dir(dir.path())
        .args(["-n", "1", "-P", "3"])
        .arg(&bin)
        .args(on_the_cpu)
        .args(["--seeds", "0-15", "-o"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"a\nb\nc\n")?;
            c.wait_with_output()
        })
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let cpus = std::thread::available_parallelism().unwrap().get();
    let seen: Vec<usize> = (stderr.lines())
        .filter_map(|l| {
            l.split(" processes of this program side by side")
                .next()
                .filter(|h| h.len() < l.len())
        })
        .map(|h| h.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(seen.contains(&3), "{stderr}");
    let want = format!(
        "{} CPU thread(s) ({cpus} CPU(s) / 3 processes",
        (cpus / 3).max(1)
    );
    assert!(stderr.contains(&want), "{want}: {stderr}");
    // Alone (this test's others start generate too, but not under xargs), the pool of every
    // CPU it may use — fewer only when the CPUs were busy as it started, which it then says.
    let o = std::process::Command::new(&bin)
        .current_dir(dir.path())
        .args(on_the_cpu)
        .args(["--seeds", "0", "-o", "d"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!(
            "{cpus} CPU thread(s) (the {cpus} CPU(s) it may use)"
        )) || (stderr.contains(&format!("(the {cpus} CPU(s) it may use), not {cpus}: "))
            && stderr.contains("were free when it started")),
        "{stderr}"
    );
}

/// --batch-size sizes how many latents are held and rendered at once: past its bound (1024)
/// it is a usage error.
#[test]
fn a_batch_size_past_the_bound_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    for b in ["1025", "1000000000000"] {
        let o = generate(tmp.path())
            .args(["-q", "-o", "out", "--seeds", "1", "--batch-size", b])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "--batch-size {b}: {stderr}");
        assert!(stderr.contains("1..=1024"), "{stderr}");
    }
    assert!(!tmp.path().join("out").exists());
}
