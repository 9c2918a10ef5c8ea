//! `ddp-train` through its command line on the digits data (scripts/make-digits-cifar): records,
//! checkpoints and resume, two ranks as separate processes, and the messages for bad set-ups.
//! One test binary, its tests by topic in the modules below; their shared helpers here and in
//! `tests/common` (which the other test binaries of ddp-train use too).

#[path = "../common/mod.rs"]
mod common;

mod checkpoints;
mod data;
mod eval_snippet;
mod logs;
mod ranks;
mod signals;

use common::{BIN, read_watching, signal_after_first_checkpoint, usr1_after_first_checkpoint};
use testkit::{ok, repo_root as root, run_all};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use records::EpochRecord;
use serde_json::Value;
use tch::Tensor;

/// Runs the venv's Python with `args` and asserts that it succeeds (its output in the message
/// when not); its stdout.
fn python<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> String {
    String::from_utf8_lossy(&testkit::run_python(args).stdout).into_owned()
}

/// `ddp-train --device cpu` with no launcher variables and no --data.
fn cmd_without_data() -> Command {
    common::cpu()
}

/// `--threads 1` and [`common::rank_flags`]: rank R of a run that meets on this machine, one CPU
/// thread each (as torchrun's OMP_NUM_THREADS=1 does: ranks that each spin all the cores'
/// threads run 2.5 times slower here).
fn rank_of(rank: usize, world: usize, port: &str) -> Vec<String> {
    let mut flags = vec!["--threads".to_string(), "1".into()];
    flags.extend(common::rank_flags(rank, world, port));
    flags
}

/// Runs `c`, which must be a usage error (exit 2) whose message says `says`.
fn assert_usage(c: &mut Command, says: &str) {
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(says), "{stderr}");
}

fn digits() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = testkit::fixture_dir("ddp-digits");
        testkit::make_digits(&dir, &[]);
        dir
    })
}

fn cmd() -> Command {
    cmd_on(format!("cifar100:{}", digits().display()))
}

/// `ddp-train --device cpu --data DATA` with no launcher variables.
fn cmd_on(data: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = cmd_without_data();
    c.arg("--data").arg(data);
    c
}

/// `--model=torchscript:FILE` of the small BatchNorm network for `classes` classes
/// ([`common::bn_model_of`]).
fn small_model(classes: usize) -> std::ffi::OsString {
    common::model_flag(common::bn_model_of(classes))
}

/// `c` training the small network for `classes` classes ([`small_model`]) on one libtorch thread
/// unless its flags or Slurm say otherwise (OMP_NUM_THREADS=1, as torchrun sets it): for the
/// tests of the training loop, where ResNet-18 is not the point and cost most of their time.
/// (Two threads spin between the small network's short kernels: several times the CPU time of
/// one on a busy machine.)
fn with_small_net(c: &mut Command, classes: usize) -> &mut Command {
    c.arg(small_model(classes)).env("OMP_NUM_THREADS", "1")
}

/// [`cmd`] training the small network (the digits' 10 classes).
fn small() -> Command {
    let mut c = cmd();
    with_small_net(&mut c, 10);
    c
}

/// [`cmd_on`] `data` of `classes` classes, training the small network.
fn small_on(data: impl AsRef<std::ffi::OsStr>, classes: usize) -> Command {
    let mut c = cmd_on(data);
    with_small_net(&mut c, classes);
    c
}

/// A port nothing listens on now, for a run's --master-port.
fn free_port() -> String {
    testkit::free_port().to_string()
}

/// A successful run's records, decoded: one per epoch (`items`), then the summary.
type Run = testkit::Batch<EpochRecord>;

fn records(o: &Output) -> Run {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let run: Run = testkit::batch(&o.stdout);
    assert!(run.errors.is_empty(), "{run:?}");
    run
}

/// Runs `c` with `--checkpoint-dir CK` to its successful end; its records.
fn trained(c: &mut Command, ck: impl AsRef<std::ffi::OsStr>) -> Run {
    records(&c.arg("--checkpoint-dir").arg(ck).output().unwrap())
}

/// Two runs' figures of an epoch equal to the bit: the losses and top-1s of training and
/// evaluation.
fn assert_same_figures(a: &EpochRecord, b: &EpochRecord) {
    assert_eq!(
        (a.train_loss, a.train_top1, a.val_loss, a.val_top1),
        (b.train_loss, b.train_top1, b.val_loss, b.val_top1)
    );
}

/// The digits' class names, as an image folder of them names them: "0" to "9".
fn digit_classes() -> Vec<String> {
    (0..10).map(|d| d.to_string()).collect()
}

fn params(path: &Path) -> BTreeMap<String, Tensor> {
    Tensor::read_safetensors(path)
        .unwrap()
        .into_iter()
        .filter(|(n, _)| !n.contains("running_") && !n.contains("num_batches"))
        .collect()
}

/// Runs `args` as two rank processes over the CPU backend; rank 0's stderr and the checkpoint
/// directory.
fn two_rank_processes(args: &[&str]) -> (String, tempfile::TempDir) {
    two_rank_processes_of(cmd, args).0
}

/// Two ranks of `base()` with `args` and one checkpoint directory: rank 0's stderr, the
/// directory, and rank 0's records.
fn two_rank_processes_of(
    base: fn() -> Command,
    args: &[&str],
) -> ((String, tempfile::TempDir), Run) {
    let ck = tempfile::tempdir().unwrap();
    let port = free_port();
    let outs = run_all((0..2).map(|rank| {
        let mut c = base();
        c.args(args)
            .args(rank_of(rank, 2, &port))
            .arg("--checkpoint-dir")
            .arg(ck.path());
        c
    }));
    let recs = records(&outs[0]);
    assert_eq!(recs.items[0].world_size, 2);
    assert_eq!(recs.summary.world_size, Some(2));
    assert!(
        outs[1].status.success() && outs[1].stdout.is_empty(),
        "rank 1 prints no records"
    );
    (
        (String::from_utf8_lossy(&outs[0].stderr).into_owned(), ck),
        recs,
    )
}

fn assert_same_weights(one: &Path, two: &Path, tolerance: f64) {
    let (a, b) = (
        params(&one.join("last.safetensors")),
        params(&two.join("last.safetensors")),
    );
    assert_eq!(a.len(), b.len());
    for (name, t) in &a {
        let d = (t - &b[name]).abs().max().double_value(&[]);
        assert!(d <= tolerance, "{name}: {d}");
    }
}

/// Seed 004's split (conv1…layer2 | layer3…fc) on two CPU "devices", 4 micro-batches.
const PIPED: [&str; 8] = [
    "--stages",
    "2",
    "--stage-devices",
    "cpu,cpu",
    "--micro-batches",
    "4",
    "--split-at",
    "layer3",
];

/// The digits written by make-digits-cifar: as CIFAR-100 binaries in ImageFolder's order
/// (`DIR`), as a tree of PNGs (`DIR/folder`, train and val), and as the same PNGs in the same
/// order in webdataset shards (`DIR/shards`: train-00000..00007.tar, val-00000..00001.tar).
fn digits_twice() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = testkit::fixture_dir("ddp-folder");
        let (folder, shards) = (dir.join("folder"), dir.join("shards"));
        let extra = [
            "--class-order".as_ref(),
            "--image-folder".as_ref(),
            folder.as_os_str(),
        ];
        testkit::make_digits(
            &dir,
            &[&extra[..], &["--shards".as_ref(), shards.as_os_str()]].concat(),
        );
        dir
    })
}

/// The digits' PNG tree packed into RecordIO (`DIR/train.rec`/`.idx`, `DIR/val.rec`/`.idx`) in
/// ImageFolder's order by the transcription of MXNet's writer, made once.
fn digit_records() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = testkit::fixture_dir("ddp-rec");
        let mut args = vec![
            root().join("scripts/reference/mxnet_recordio.py"),
            "pack-folder".into(),
        ];
        for split in ["train", "val"] {
            args.extend([digits_twice().join("folder").join(split), dir.join(split)]);
        }
        python(args);
        dir
    })
}

/// `--data wds:` on the digits' training shards, with their validation shards.
fn digit_shards() -> Command {
    let dir = digits_twice().join("shards");
    let mut c = cmd_on(format!("wds:{}/train-{{00000..00007}}.tar", dir.display()));
    c.arg("--val-data")
        .arg(format!("{}/val-{{00000..00001}}.tar", dir.display()));
    c
}
