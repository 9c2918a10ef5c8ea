//! `--model torchscript:FILE`: the user's own model, trained as PyTorch trains it.
//!
//! Three small models that stress a trainer differently (GroupNorm and dropout; a vision
//! transformer with LayerNorm, attention and GELU; BatchNorm with running statistics) are
//! scripted by `scripts/reference/torchscript_models.py`, trained here for a few steps, and
//! trained again by that script with `torch.optim.SGD` (two ranks: PyTorch's
//! DistributedDataParallel over gloo) on the very batches ddp-train drew (`--dump-batches`): the
//! weights and buffers must agree.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::{BIN, max_rel_diff, rank_flags as ranks_of};
use testkit::ok;

/// `ddp-train --device cpu --threads 1` with no launcher variables.
fn cmd() -> Command {
    let mut c = common::cpu();
    c.args(["--threads", "1"]);
    c
}

const SEED: &str = "3";
const LR: &str = "0.05";
const STEPS: usize = 3;

/// The training flags of every run here: one epoch of a global batch of 8 synthetic 32×32
/// images (100 classes; the runs add --max-steps), SGD at a constant LR.
fn flags(model: &Path) -> Vec<std::ffi::OsString> {
    let mut m = std::ffi::OsString::from("--model=torchscript:");
    m.push(model);
    [
        "--data",
        "synthetic:64",
        "--epochs",
        "1",
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

/// Trains `model` on `world` ranks (processes) with `accum` micro-batches each; the checkpoint.
fn train(dir: &Path, model: &Path, world: usize, accum: usize) -> PathBuf {
    train_with(
        dir,
        model,
        world,
        accum,
        &[],
        &format!("ck-{world}x{accum}"),
    )
}

/// [`train`] with more flags, into `dir/name`.
fn train_with(
    dir: &Path,
    model: &Path,
    world: usize,
    accum: usize,
    extra: &[&std::ffi::OsStr],
    name: &str,
) -> PathBuf {
    let ck = dir.join(name);
    let port = testkit::free_port();
    let children: Vec<_> = (0..world)
        .map(|r| {
            let mut c = cmd();
            c.args(flags(model))
                .args(["--max-steps", "3", "--accum", &accum.to_string()])
                .args(extra)
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
                .args([
                    "--max-steps",
                    "3",
                    "--dump-batches",
                    &STEPS.to_string(),
                    "--dump",
                ])
                .arg(&npz);
            if world > 1 {
                c.args(ranks_of(r, world, 1));
            }
            ok(&c.output().unwrap());
            npz
        })
        .collect()
}

/// The reference's `train` call: `model` trained with torch.optim (its `options`) on one rank's
/// `batches` for 3 steps without micro-batches, into `out`.
fn reference_train(
    options: &[&std::ffi::OsStr],
    model: &Path,
    out: &Path,
    batches: &[PathBuf],
) -> Vec<std::ffi::OsString> {
    let mut args = vec!["train".into()];
    args.extend(options.iter().map(Into::into));
    args.extend([
        model.into(),
        out.into(),
        SEED.into(),
        LR.into(),
        "3".into(),
        "1".into(),
    ]);
    args.extend(batches.iter().map(Into::into));
    args
}

#[test]
fn torchscript_models_train_to_pytorchs_weights_on_one_and_two_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let kinds = ["gn_dropout", "vit", "bn"];
    let models = testkit::scripted_models(&kinds.map(|k| (k, 100)));
    // The reference's calls, all run by one Python process at the end, and what each gives.
    let (mut calls, mut compare) = (Vec::new(), Vec::new());
    let port = testkit::free_port().to_string();
    for (kind, model) in kinds.into_iter().zip(models) {
        let sub = dir.path().join(kind);
        std::fs::create_dir(&sub).unwrap();
        for world in [1, 2] {
            let ours = train(&sub, model, world, 1);
            let batches = dumps(&sub, model, world);
            let theirs = sub.join(format!("torch-{world}.safetensors"));
            // One rank: torch.optim on the module; two: PyTorch's DistributedDataParallel over
            // gloo, one process per rank.
            calls.push(match world {
                1 => reference_train(&[], model, &theirs, &batches),
                _ => {
                    let mut args = vec!["ddp".into(), model.into(), theirs.clone().into()];
                    args.extend([SEED, LR, "3", &port].map(Into::into));
                    args.extend(batches.iter().map(Into::into));
                    args
                }
            });
            compare.push((kind, world, ours, theirs));
        }
        // The checkpoint loads strictly into the eager nn.Module, and --print-eval-snippet's
        // code (torch.jit.load of the file, then the checkpoint) computes what it computes.
        let snippet = sub.join("snippet.py");
        let out = Command::new(BIN)
            .arg("--print-eval-snippet")
            .arg(sub.join("ck-1x1/last.safetensors"))
            .output()
            .unwrap();
        ok(&out);
        std::fs::write(&snippet, &out.stdout).unwrap();
        calls.push(vec![
            "eager".into(),
            kind.into(),
            "100".into(),
            sub.join("ck-1x1/last.safetensors").into(),
            snippet.into(),
        ]);
        // Two ranks compute what one rank with two micro-batches computes, bit for bit: the
        // weights (BatchNorm's running statistics follow rank 0's batches with DDP, and every
        // micro-batch's with --accum, as in PyTorch).
        let accum = train(&sub, model, 1, 2);
        let two = sub.join("ck-2x1/last.safetensors");
        let d = max_rel_diff(&accum, &two, true);
        assert_eq!(d, 0.0, "{kind}: 2 ranks vs 1 rank × accum 2");
    }
    testkit::scripted_model_calls(&calls);
    for (kind, world, ours, theirs) in compare {
        // libtorch's kernels are PyTorch's, on one thread each: equal on this machine (0
        // measured); the bound leaves room for a gradient sum over ranks added in another
        // order elsewhere: within 1e-5 of each tensor's scale.
        let d = max_rel_diff(&ours, &theirs, false);
        eprintln!("{kind}, {world} rank(s): largest relative difference {d:e}");
        assert!(d <= 1e-5, "{kind}, {world} rank(s): {d}");
    }
}

/// AdamW, label smoothing, `--init` (a state_dict as safetensors.torch.save_file writes it) and
/// channels_last, each against torch.optim.AdamW / nn.CrossEntropyLoss(label_smoothing) /
/// load_state_dict / `.to(memory_format=torch.channels_last)` on the same batches (one rank, the
/// BatchNorm model: 4-D weights, buffers and an int64 count in the state_dict).
#[test]
fn torchscript_adamw_smoothing_init_channels_last_and_tied_weights_train_to_pytorchs_weights() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = testkit::scripted_model("bn", 100);
    let (other, init, tied) = (
        d.join("other.pt"),
        d.join("init.safetensors"),
        d.join("tied.pt"),
    );
    // --init: another initialisation of the same module (seed 1), as PyTorch saves it; and a
    // model with tied weights.
    testkit::scripted_model_calls(&[
        testkit::scripted_model_make("bn", &other, 100, Some(1)),
        vec!["state".into(), other.into(), init.clone().into()],
        testkit::scripted_model_make("tied", &tied, 100, None),
    ]);
    let batches = dumps(d, model, 1);
    let mut init_flag = std::ffi::OsString::from("--init=");
    init_flag.push(&init);
    // (ddp-train's flags, the reference's options, the bound and why.)
    let cases: [(&str, Vec<&std::ffi::OsStr>, Vec<&std::ffi::OsStr>, f64); 3] = [
        // AdamW's update is m/√v: ddp-train computes g² and m/denominator in a scratch buffer
        // where torch.optim multiplies and divides inside addcmul_/addcdiv_ (another rounding
        // of the same products), and early steps magnify an ulp of a small gradient (1.6e-6
        // measured): within 1e-5 of each tensor's scale.
        (
            "adamw",
            vec!["--optimizer".as_ref(), "adamw".as_ref()],
            vec!["--optimizer=adamw".as_ref()],
            1e-5,
        ),
        // The same kernels on one thread: 0 measured, bound 1e-5.
        (
            "smoothing-init",
            vec![
                "--label-smoothing".as_ref(),
                "0.1".as_ref(),
                init_flag.as_os_str(),
            ],
            vec!["--label-smoothing=0.1".as_ref(), init_flag.as_os_str()],
            1e-5,
        ),
        // NHWC weights and batches on both sides: the first step equal to the bit, later ones
        // apart by float rounding in the backward (1e-7 measured after 3 steps), bound 1e-5.
        (
            "channels-last",
            vec!["--channels-last".as_ref(), "on".as_ref()],
            vec!["--channels-last".as_ref()],
            1e-5,
        ),
    ];
    // The reference's calls, run by one Python process, and what each gives.
    let (mut calls, mut compare) = (Vec::new(), Vec::new());
    for (name, ours_flags, their_flags, bound) in cases {
        let ours = train_with(d, model, 1, 1, &ours_flags, name);
        let theirs = d.join(format!("torch-{name}.safetensors"));
        calls.push(reference_train(&their_flags, model, &theirs, &batches));
        compare.push((name, ours, theirs, bound));
    }
    // Weight tying: one parameter under two state_dict names (parameters() lists it once),
    // stepped once with the sum of both uses' gradients, saved under both names. 0 measured,
    // bound 1e-5.
    let sub = d.join("tied");
    std::fs::create_dir(&sub).unwrap();
    let ours = train(&sub, &tied, 1, 1);
    let batches = dumps(&sub, &tied, 1);
    let theirs = sub.join("torch.safetensors");
    calls.push(reference_train(&[], &tied, &theirs, &batches));
    compare.push(("tied", ours.clone(), theirs, 1e-5));
    testkit::scripted_model_calls(&calls);
    for (name, ours, theirs, bound) in compare {
        let diff = max_rel_diff(&ours, &theirs, false);
        eprintln!("{name}: largest relative difference {diff:e}");
        assert!(diff <= bound, "{name}: {diff}");
    }
    let saved = tch::Tensor::read_safetensors(&ours).unwrap();
    let get = |n: &str| {
        saved
            .iter()
            .find(|(k, _)| k == n)
            .unwrap()
            .1
            .shallow_clone()
    };
    assert!(get("a.weight").equal(&get("b.weight")), "still tied");
}

#[test]
fn a_model_file_that_is_not_torchscript_or_returns_the_wrong_shape_is_refused_naming_it() {
    let (dir, junk) = testkit::temp_file("junk.pt", b"not a model");
    let out = cmd().args(flags(&junk)).output().unwrap();
    let stderr = testkit::exit_stderr(&out, 1);
    testkit::assert_mentions(&stderr, &["junk.pt", "not a TorchScript module"]);
    assert!(!stderr.contains("Exception raised from"), "{stderr}");
    // A model for 10 classes on data of 100.
    // Every model of this test made by one Python process.
    let hostile = [
        ("detached", "depends on no trained parameter"),
        (
            "train_shape",
            "in training mode, for a batch of shape [2, 3, 32, 32] it returns",
        ),
        (
            "unused",
            "2 trained parameter(s) get no gradient in training mode (extra.bias, extra.weight)",
        ),
        ("raises", "RuntimeError: boom from forward"),
        ("no_params", "the module has no parameters to train"),
        (
            "two_rows",
            "in evaluation mode, for a batch of shape [12, 3, 32, 32] it returns",
        ),
    ];
    let mut wanted = vec![("bn", 10)];
    wanted.extend(hostile.iter().map(|&(kind, _)| (kind, 100)));
    let models = testkit::scripted_models(&wanted);
    let ten = dir.path().join("ten.pt");
    std::fs::copy(models[0], &ten).unwrap();
    let out = cmd().args(flags(&ten)).output().unwrap();
    let stderr = testkit::exit_stderr(&out, 1);
    testkit::assert_mentions(&stderr, &["ten.pt", "[2, 10]", "[2, 100]"]);
    // What only a training forward shows: one line naming the file and why, no C++ frames.
    for ((kind, why), model) in hostile.into_iter().zip(&models[1..]) {
        let out = cmd()
            .args(flags(model))
            .args(["--max-steps", "1"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{kind}: {stderr}");
        assert!(
            stderr.contains(why) && stderr.contains(&format!("{kind}.pt")),
            "{kind}: {stderr}"
        );
        assert!(
            !stderr.contains("Exception raised from") && !stderr.contains("frame #"),
            "{kind}: {stderr}"
        );
    }
    // Flags that only a ResNet takes.
    for extra in [
        &["--stem", "cifar"][..],
        &["--stages", "2"],
        &["--stage-devices", "cpu,cpu"],
        &["--sync-bn"],
    ] {
        let out = cmd().args(flags(&ten)).args(extra).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
    }
    // A file name that is not UTF-8: checkpoints name the file as text, so it is refused
    // before anything starts, saying so (not only that some argument was not UTF-8).
    {
        use std::os::unix::ffi::OsStrExt;
        let odd = dir.path().join(std::ffi::OsStr::from_bytes(b"b\xffn.pt"));
        std::fs::copy(&ten, &odd).unwrap();
        let out = cmd().args(flags(&odd)).output().unwrap();
        let stderr = testkit::exit_stderr(&out, 2);
        testkit::assert_mentions(&stderr, &["--model", "not UTF-8"]);
    }
}

/// The evaluation snippet of a TorchScript checkpoint loads the module from the file the run
/// trained; replaced by a module with the same state_dict but another output width, the
/// snippet raises before any image is classified.
#[test]
fn the_eval_snippet_raises_when_the_module_returns_other_than_the_runs_classes() {
    let dir = tempfile::tempdir().unwrap();
    let made = testkit::scripted_models(&[("bn", 100), ("narrow", 100)]);
    let model = dir.path().join("model.pt");
    std::fs::copy(made[0], &model).unwrap();
    let ck = dir.path().join("ck");
    let out = cmd()
        .args(flags(&model))
        .args(["--max-steps", "1", "--checkpoint-dir"])
        .arg(&ck)
        .output()
        .unwrap();
    ok(&out);
    let out = Command::new(BIN)
        .arg("--print-eval-snippet")
        .arg(ck.join("last.safetensors"))
        .output()
        .unwrap();
    ok(&out);
    let snippet = dir.path().join("snippet.py");
    std::fs::write(&snippet, &out.stdout).unwrap();
    let run = || {
        Command::new(testkit::python())
            .arg(&snippet)
            .output()
            .unwrap()
    };
    ok(&run());
    // The first 5 logits only: the same names and shapes, so load_state_dict takes it.
    std::fs::copy(made[1], &model).unwrap();
    let out = run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the snippet ran: {stderr}");
    testkit::assert_mentions(&stderr, &["ValueError", "(1, 5)", "100"]);
}

#[test]
fn resuming_with_another_model_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.pt"), dir.path().join("b.pt"));
    testkit::scripted_model_calls(&[
        testkit::scripted_model_make("bn", &a, 100, Some(0)),
        testkit::scripted_model_make("bn", &b, 100, Some(1)),
    ]);
    let ck = dir.path().join("ck");
    let run = |model: &Path, epochs: &str| {
        let mut base = flags(model);
        let at = base.iter().position(|a| a == "--epochs").unwrap();
        base.drain(at..at + 2);
        cmd()
            .args(base)
            .args([
                "--max-steps",
                "1",
                "--epochs",
                epochs,
                "--resume",
                "--checkpoint-dir",
            ])
            .arg(&ck)
            .output()
            .unwrap()
    };
    ok(&run(&a, "1"));
    let out = run(&b, "2");
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    testkit::assert_mentions(&stderr, &["a.pt", "it goes on with", "b.pt"]);
}

#[test]
fn a_torchscript_model_with_dropout_resumes_mid_epoch_to_the_same_weights() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let model = testkit::scripted_model("gn_dropout", 100);
    let run = |ck: &Path| {
        let mut c = cmd();
        c.args(flags(model))
            .args([
                "--max-steps",
                "8",
                "--checkpoint-every",
                "3",
                "--checkpoint-dir",
            ])
            .arg(ck);
        c
    };
    let straight = dir.path().join("straight");
    ok(&run(&straight).output().unwrap());
    // The checkpoint signal once the first mid-epoch checkpoint is on record.
    let stopped = dir.path().join("stopped");
    let mut child = run(&stopped)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains(r#""type":"checkpoint""#) {
            // SAFETY: a signal to our child, still running (its stdout is open).
            assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
            break;
        }
    }
    lines.for_each(drop);
    let out = child.wait_with_output().unwrap();
    testkit::exits(&out, 75);
    ok(&run(&stopped).arg("--resume").output().unwrap());
    // Dropout's draws are seeded per step: the resumed steps draw what the straight run drew.
    let d = max_rel_diff(
        &straight.join("last.safetensors"),
        &stopped.join("last.safetensors"),
        false,
    );
    assert_eq!(d, 0.0, "resumed mid-epoch vs uninterrupted");
}
