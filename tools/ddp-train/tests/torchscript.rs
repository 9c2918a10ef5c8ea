//! `--model torchscript:FILE`: the user's own model, trained as PyTorch trains it.
//!
//! Three small models that stress a trainer differently (GroupNorm and dropout; a vision
//! transformer with LayerNorm, attention and GELU; BatchNorm with running statistics) are
//! scripted by `scripts/reference/torchscript_models.py`, trained here for a few steps, and
//! trained again by that script with `torch.optim.SGD` on the very batches ddp-train drew
//! (`--dump-batches`): the weights and buffers must agree.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ddp-train");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python(args: &[&std::ffi::OsStr]) -> Output {
    let out = Command::new(testkit::python())
        .arg(root().join("scripts/reference/torchscript_models.py"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `ddp-train --device cpu` with no launcher variables.
fn cmd() -> Command {
    let mut c = Command::new(BIN);
    for v in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SLURM_PROCID",
    ] {
        c.env_remove(v);
    }
    c.args(["--device", "cpu", "--threads", "1"]);
    c
}

const SEED: &str = "3";
const LR: &str = "0.05";
const STEPS: usize = 3;

/// The training flags of every run here: 3 steps of a global batch of 8 synthetic 32×32
/// images (100 classes), SGD at a constant LR.
fn flags(model: &Path) -> Vec<std::ffi::OsString> {
    let mut m = std::ffi::OsString::from("--model=torchscript:");
    m.push(model);
    [
        "--data",
        "synthetic:64",
        "--epochs",
        "1",
        "--max-steps",
        "3",
        "--batch-size",
        "8",
        "--schedule",
        "constant",
        "--lr",
        LR,
        "--seed",
        SEED,
        "--max-val-steps",
        "1",
    ]
    .iter()
    .map(Into::into)
    .chain([m])
    .collect()
}

fn ranks_of(rank: usize, world: usize, port: u16) -> Vec<String> {
    [
        "--rank".to_string(),
        rank.to_string(),
        "--world-size".into(),
        world.to_string(),
        "--master-addr".into(),
        "127.0.0.1".into(),
        "--master-port".into(),
        port.to_string(),
    ]
    .into()
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Trains `model` on `world` ranks (processes) with `accum` micro-batches each; the checkpoint.
fn train(dir: &Path, model: &Path, world: usize, accum: usize) -> PathBuf {
    let ck = dir.join(format!("ck-{world}x{accum}"));
    let port = testkit::free_port();
    let children: Vec<_> = (0..world)
        .map(|r| {
            let mut c = cmd();
            c.args(flags(model))
                .args(["--accum", &accum.to_string()])
                .arg("--checkpoint-dir")
                .arg(&ck);
            if world > 1 {
                c.args(ranks_of(r, world, port));
            }
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        ok(&c.wait_with_output().unwrap());
    }
    ck.join("last.safetensors")
}

/// Each rank's first batches as ddp-train draws them.
fn dumps(dir: &Path, model: &Path, world: usize) -> Vec<PathBuf> {
    (0..world)
        .map(|r| {
            let npz = dir.join(format!("batches-{r}-of-{world}.npz"));
            let mut c = cmd();
            c.args(flags(model))
                .args(["--dump-batches", &STEPS.to_string(), "--dump"])
                .arg(&npz);
            if world > 1 {
                c.args(ranks_of(r, world, 1));
            }
            ok(&c.output().unwrap());
            npz
        })
        .collect()
}

/// The largest difference between two checkpoints' tensors (`params_only`: BatchNorm's
/// running statistics and counts left out), relative to the tensor's largest value (at least
/// 1); the same names in both, or a panic naming the difference.
fn max_rel_diff(a: &Path, b: &Path, params_only: bool) -> f64 {
    let read = |p: &Path| -> std::collections::BTreeMap<String, tch::Tensor> {
        tch::Tensor::read_safetensors(p)
            .unwrap()
            .into_iter()
            .filter(|(n, _)| !params_only || !(n.contains("running_") || n.contains("num_batches")))
            .collect()
    };
    let (a, b) = (read(a), read(b));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "the checkpoint's names are the module's state_dict's"
    );
    a.iter()
        .map(|(k, x)| {
            let y = &b[k];
            assert_eq!(x.size(), y.size(), "{k}");
            let (x, y) = (x.to_kind(tch::Kind::Double), y.to_kind(tch::Kind::Double));
            let scale = y.abs().max().double_value(&[]).max(1.0);
            (x - y).abs().max().double_value(&[]) / scale
        })
        .fold(0.0, f64::max)
}

#[test]
fn torchscript_models_train_to_pytorchs_weights_on_one_and_two_ranks() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ["gn_dropout", "vit", "bn"] {
        let model = dir.path().join(format!("{kind}.pt"));
        python(&[
            "make".as_ref(),
            kind.as_ref(),
            model.as_os_str(),
            "100".as_ref(),
        ]);
        let sub = dir.path().join(kind);
        std::fs::create_dir(&sub).unwrap();
        for world in [1, 2] {
            let ours = train(&sub, &model, world, 1);
            let batches = dumps(&sub, &model, world);
            let theirs = sub.join(format!("torch-{world}.safetensors"));
            let mut args: Vec<&std::ffi::OsStr> = vec![
                "train".as_ref(),
                model.as_os_str(),
                theirs.as_os_str(),
                SEED.as_ref(),
                LR.as_ref(),
                "3".as_ref(),
                "1".as_ref(),
            ];
            args.extend(batches.iter().map(|b| b.as_os_str()));
            python(&args);
            // libtorch's kernels are PyTorch's, on one thread each: equal on this machine (0
            // measured); the bound leaves room for a gradient sum over ranks added in another
            // order elsewhere: within 1e-5 of each tensor's scale.
            let d = max_rel_diff(&ours, &theirs, false);
            eprintln!("{kind}, {world} rank(s): largest relative difference {d:e}");
            assert!(d <= 1e-5, "{kind}, {world} rank(s): {d}");
        }
        // Two ranks compute what one rank with two micro-batches computes, bit for bit: the
        // weights (BatchNorm's running statistics follow rank 0's batches with DDP, and every
        // micro-batch's with --accum, as in PyTorch).
        let accum = train(&sub, &model, 1, 2);
        let two = sub.join("ck-2x1/last.safetensors");
        let d = max_rel_diff(&accum, &two, true);
        assert_eq!(d, 0.0, "{kind}: 2 ranks vs 1 rank × accum 2");
    }
}

#[test]
fn a_model_file_that_is_not_torchscript_or_returns_the_wrong_shape_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pt");
    std::fs::write(&junk, b"not a model").unwrap();
    let out = cmd().args(flags(&junk)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("junk.pt") && stderr.contains("not a TorchScript module"),
        "{stderr}"
    );
    assert!(!stderr.contains("Exception raised from"), "{stderr}");
    // A model for 10 classes on data of 100.
    let ten = dir.path().join("ten.pt");
    python(&[
        "make".as_ref(),
        "bn".as_ref(),
        ten.as_os_str(),
        "10".as_ref(),
    ]);
    let out = cmd().args(flags(&ten)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("ten.pt") && stderr.contains("[2, 10]") && stderr.contains("[2, 100]"),
        "{stderr}"
    );
    // Flags that only a ResNet takes.
    for extra in [&["--stem", "cifar"][..], &["--stages", "2"], &["--sync-bn"]] {
        let out = cmd().args(flags(&ten)).args(extra).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
    }
}
