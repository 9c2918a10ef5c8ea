#![allow(dead_code)] // shared by several test binaries, each using a part
//! Shared by ddp-train's integration tests: the binary on the CPU outside any launcher, the ranks
//! of one run started on this machine, checkpoints compared, epoch records read, and the
//! checkpoint signal sent once a run has reported its first checkpoint.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_ddp-train");

/// `ddp-train --device cpu` with no launcher variables.
pub fn cpu() -> Command {
    let mut c = testkit::without_launcher(BIN);
    c.args(["--device", "cpu"]);
    c
}

/// `--rank R --world-size W --master-addr 127.0.0.1 --master-port PORT`: rank R of a run that
/// meets on this machine.
pub fn rank_flags(rank: usize, world: usize, port: impl std::fmt::Display) -> Vec<String> {
    vec![
        "--rank".into(),
        rank.to_string(),
        "--world-size".into(),
        world.to_string(),
        "--master-addr".into(),
        "127.0.0.1".into(),
        "--master-port".into(),
        port.to_string(),
    ]
}

/// The `world` commands of one run, `make(rank)` each, meeting on a free port when there are
/// several (one alone runs as a run by itself).
pub fn ranks(world: usize, mut make: impl FnMut(usize) -> Command) -> Vec<Command> {
    let port = testkit::free_port();
    (0..world)
        .map(|r| {
            let mut c = make(r);
            if world > 1 {
                c.args(rank_flags(r, world, port));
            }
            c
        })
        .collect()
}

/// `--model=torchscript:FILE`.
pub fn model_flag(model: &Path) -> OsString {
    let mut m = OsString::from("--model=torchscript:");
    m.push(model);
    m
}

/// `scripts/reference/torchscript_models.py`'s "bn" for 100 classes (a scripted network with
/// BatchNorm, made with the script's fixed seed), made once per test binary for the tests that
/// only read it: each Python start that imports torch costs a few CPU seconds.
pub fn bn_model() -> &'static Path {
    bn_model_of(100)
}

/// [`bn_model`] for `classes` classes (the digits have 10, synthetic data 100), made once per
/// test binary and class count.
/// It trains many times faster than ResNet-18 on the CPU, for the tests of the training loop
/// (resume, logs, data, ranks) rather than of the network: the loop treats it as a ResNet (its
/// parameters and buffers, BatchNorm's included, are the run's store).
pub fn bn_model_of(classes: usize) -> &'static Path {
    testkit::scripted_model("bn", classes)
}

/// A checkpoint file's tensors by name.
pub fn tensors(path: &Path) -> std::collections::BTreeMap<String, tch::Tensor> {
    tch::Tensor::read_safetensors(path)
        .unwrap()
        .into_iter()
        .collect()
}

/// The largest difference between two checkpoints' tensors (`params_only`: BatchNorm's running
/// statistics and counts left out), relative to the tensor's largest value (at least 1); the
/// same names in both, or a panic naming the difference.
pub fn max_rel_diff(a: &Path, b: &Path, params_only: bool) -> f64 {
    let read = |p: &Path| {
        let mut t = tensors(p);
        t.retain(|n, _| !params_only || !(n.contains("running_") || n.contains("num_batches")));
        t
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

/// Both checkpoints' tensors in the directories `a` and `b` (the model's state_dict and the
/// optimiser's state) equal to the bit.
pub fn assert_same_bits(a: &Path, b: &Path) {
    for file in ["last.safetensors", "last.train.safetensors"] {
        let (ta, tb) = (tensors(&a.join(file)), tensors(&b.join(file)));
        assert_eq!(ta.keys().collect::<Vec<_>>(), tb.keys().collect::<Vec<_>>());
        for (name, x) in &ta {
            assert!(
                x.equal(&tb[name]),
                "{file} {name}: {} vs {}",
                a.display(),
                b.display()
            );
        }
    }
}

/// The epoch records among a run's stdout (every line a JSON record).
pub fn epochs(stdout: &[u8]) -> Vec<Value> {
    testkit::records(stdout)
        .into_iter()
        .filter(|r| r["type"] == "epoch")
        .collect()
}

/// Spawns the `ranks` (their stdout piped, stderr captured) and sends the checkpoint signal
/// (SIGUSR1) to `target` once `watch` has printed its first checkpoint record (so that it lands
/// inside an epoch, after --checkpoint-every's first one): each rank's output.
pub fn usr1_after_first_checkpoint(
    ranks: Vec<Command>,
    watch: usize,
    target: usize,
) -> Vec<Output> {
    signal_after_first_checkpoint(ranks, watch, target, libc::SIGUSR1)
}

/// [`usr1_after_first_checkpoint`] with another signal.
pub fn signal_after_first_checkpoint(
    mut ranks: Vec<Command>,
    watch: usize,
    target: usize,
    signal: i32,
) -> Vec<Output> {
    let mut children: Vec<std::process::Child> = ranks
        .iter_mut()
        .map(|c| {
            c.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let target_pid = children[target].id() as i32;
    let watched = children[watch].stdout.take().unwrap();
    let reader = read_watching(watched, r#""type":"checkpoint""#, move || {
        // SAFETY: a signal to a child of this test, still running (its stdout is open).
        assert_eq!(unsafe { libc::kill(target_pid, signal) }, 0);
    });
    let mut outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    outs[watch].stdout = reader.join().unwrap();
    outs
}

/// Reads a child's `stdout` to its end on a thread of its own, calling `first` at the first line
/// that holds `needle`; what was read.
pub fn read_watching(
    stdout: std::process::ChildStdout,
    needle: &'static str,
    first: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<Vec<u8>> {
    use std::io::BufRead;
    std::thread::spawn(move || {
        let (mut lines, mut first) = (String::new(), Some(first));
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if line.contains(needle)
                && let Some(f) = first.take()
            {
                f();
            }
            lines += &line;
            lines.push('\n');
        }
        lines.into_bytes()
    })
}
