//! Elastic runs: with `--virtual-ranks V` a run computes the same steps on any number of
//! processes dividing V (bit for bit on the CPU), and any checkpoint, mid-epoch included,
//! resumes on another number; without it a resume on another world size is allowed at an
//! epoch's end only.

mod common;

use std::ffi::OsString;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use common::{BIN, assert_same_bits, epochs, model_flag, ranks, usr1_after_first_checkpoint};
use testkit::ok;

/// A scripted network with BatchNorm (buffers that only rank 0 keeps), made once for the
/// tests here.
fn model() -> &'static Path {
    common::bn_model()
}

/// The flags of every run here: `data` (synthetic images, augmented: each rank draws its own)
/// at a global batch of 12, SGD at a constant LR, on the CPU with one thread.
fn flags(data: &str, model: &Path) -> Vec<OsString> {
    [
        "--device",
        "cpu",
        "--threads",
        "1",
        "--data",
        data,
        "--batch-size",
        "12",
        "--seed",
        "5",
        "--augment",
        "--lr",
        "0.05",
        "--schedule",
        "constant",
        "--max-val-steps",
        "1",
    ]
    .iter()
    .map(Into::into)
    .chain([model_flag(model)])
    .collect()
}

/// Two epochs of 30 synthetic images (unless `extra` gives `--data`), a global batch of 12:
/// with 4 virtual ranks, 8 samples each (two repeated), steps of 3, 3 and 2.
fn cmd(model: &Path, ck: &Path, extra: &[&str]) -> Command {
    let mut c = testkit::without_launcher(BIN);
    let (data, extra) = match extra.iter().position(|a| *a == "--data") {
        Some(i) => (extra[i + 1], [&extra[..i], &extra[i + 2..]].concat()),
        None => ("synthetic:30:16", extra.to_vec()),
    };
    c.args(flags(data, model)).args(&extra);
    if !extra.contains(&"--epochs") {
        c.args(["--epochs", "2"]);
    }
    c.arg("--checkpoint-dir")
        .arg(ck)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// The `world` processes of one run.
fn start(model: &Path, ck: &Path, world: usize, extra: &[&str]) -> Vec<Command> {
    ranks(world, |_| cmd(model, ck, extra))
}

/// Runs `world` processes to the end; rank 0's output.
fn run(model: &Path, ck: &Path, world: usize, extra: &[&str]) -> Output {
    let mut outs = testkit::run_all(start(model, ck, world, extra));
    for o in &outs {
        ok(o);
    }
    outs.swap_remove(0)
}

/// Starts `world` processes, sends the checkpoint signal to rank 0 once its first mid-epoch
/// checkpoint is on record, and waits for them to stop there (exit 75).
fn stopped_at_first_checkpoint(model: &Path, ck: &Path, world: usize, extra: &[&str]) {
    for o in usr1_after_first_checkpoint(start(model, ck, world, extra), 0, 0) {
        testkit::exits(&o, 75);
    }
}

#[test]
fn four_virtual_ranks_train_the_same_bits_on_four_two_or_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let model = model();
    let mut runs = Vec::new();
    for world in [4, 2, 1] {
        let ck = dir.path().join(format!("w{world}"));
        let out = run(model, &ck, world, &["--virtual-ranks", "4"]);
        let e = epochs(&out.stdout);
        assert_eq!(e.len(), 2, "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            (e[0]["steps"].as_u64(), e[0]["left_out"].as_u64()),
            (Some(3), Some(0))
        );
        assert_eq!(e[1]["virtual_ranks"], 4);
        assert_eq!(e[1]["world_size"], world);
        runs.push(ck);
    }
    assert_same_bits(&runs[0], &runs[1]);
    assert_same_bits(&runs[0], &runs[2]);
}

#[test]
fn a_mid_epoch_checkpoint_of_virtual_ranks_resumes_on_another_number_of_processes() {
    let dir = tempfile::tempdir().unwrap();
    let model = model();
    // Twenty steps an epoch: each signal, sent at a run's first checkpoint record, stops it
    // before its end (with three steps an epoch a loaded machine let the resumed run finish
    // first).
    let v4 = ["--virtual-ranks", "4", "--data", "synthetic:240:16"];
    let straight = dir.path().join("straight");
    run(model, &straight, 2, &v4);
    // Two processes stop mid-run, at a step the signal chose; one goes on from there and stops
    // at another; four finish.
    let ck = dir.path().join("elastic");
    let every = [&v4[..], &["--checkpoint-every", "2"]].concat();
    stopped_at_first_checkpoint(model, &ck, 2, &every);
    stopped_at_first_checkpoint(model, &ck, 1, &[&every[..], &["--resume"]].concat());
    let out = run(model, &ck, 4, &[&v4[..], &["--resume"]].concat());
    let e = epochs(&out.stdout);
    assert_eq!(
        e.last().map(|e| e["epoch"].as_u64()),
        Some(Some(2)),
        "{e:?}"
    );
    assert_same_bits(&straight, &ck);
}

#[test]
fn without_virtual_ranks_another_world_size_resumes_at_an_epochs_end_only() {
    let dir = tempfile::tempdir().unwrap();
    let model = model();
    let ck = dir.path().join("ck");
    // Twenty steps an epoch: the signal after step 2's checkpoint stops the run within the
    // epoch (with three, the run could reach the epoch's end first).
    let long = ["--data", "synthetic:240:16"];
    stopped_at_first_checkpoint(
        model,
        &ck,
        2,
        &[&long[..], &["--checkpoint-every", "2"]].concat(),
    );
    let out = cmd(model, &ck, &[&long[..], &["--resume"]].concat())
        .output()
        .unwrap();
    testkit::exits(&out, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--virtual-ranks"), "{err}");
    // At an epoch's end: another world size goes on, and says so.
    let ck = dir.path().join("epoch");
    run(model, &ck, 2, &["--epochs", "1"]);
    let out = cmd(model, &ck, &["--resume"]).output().unwrap();
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("written by 2 rank(s)"), "{err}");
    assert_eq!(epochs(&out.stdout).len(), 1);
}

/// torchrun's elastic agents, two "nodes" of two workers on this machine (`--nnodes 1:2`, c10d
/// rendezvous, each agent its own process group), running 4 virtual ranks.
mod torchrun {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    /// Longest wait for anything here (torchrun notices a dead agent by its missing
    /// heartbeats: about 15 s).
    const DEADLINE: Duration = Duration::from_secs(300);

    /// An agent: the store's host (`host`) or the other node.
    pub fn agent(model: &Path, ck: &Path, port: u16, host: bool, out: &Path) -> Child {
        let torchrun = testkit::venv_bin("torchrun");
        let mut c = Command::new(torchrun);
        c.args([
            "--nnodes",
            "1:2",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "3",
        ])
        .args([
            "--rdzv-backend",
            "c10d",
            "--rdzv-id",
            "elastic",
            "--monitor-interval",
            "0.5",
        ])
        .arg(format!("--rdzv-endpoint=127.0.0.1:{port}"))
        .arg(format!(
            "--rdzv-conf=is_host={},join_timeout=120,last_call_timeout=5,close_timeout=10",
            u8::from(host)
        ))
        .args(["--no-python", BIN])
        // torch 2.11's agents share the rendezvous store with the workers and publish its
        // address once: an agent joining later waits for it forever (MASTER_ADDR). Without
        // the sharing, each round publishes it, and ddp-train's rank 0 serves the store.
        .env("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1");
        c.args(flags("synthetic:240:16", model))
            .args(["--epochs", "2"])
            .args([
                "--virtual-ranks",
                "4",
                "--checkpoint-every",
                "2",
                "--resume",
            ])
            .args(["--all-ranks", "--checkpoint-dir"])
            .arg(ck)
            .stdout(std::fs::File::create(out).unwrap())
            .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
            .process_group(0);
        c.spawn().unwrap()
    }

    /// The records in `out` so far.
    pub fn records(out: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits until `what` holds (or the deadline passes: a panic naming `why`).
    pub fn wait_for(why: &str, mut what: impl FnMut() -> bool) {
        let t0 = Instant::now();
        while !what() {
            assert!(t0.elapsed() < DEADLINE, "no {why} within {DEADLINE:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The agent's workers (its children).
    pub fn workers(agent: u32) -> Vec<i32> {
        std::fs::read_to_string(format!("/proc/{agent}/task/{agent}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    pub fn signal(pid: i32, sig: i32) {
        // SAFETY: a signal to a process this test started (or its child).
        unsafe { libc::kill(pid, sig) };
    }

    /// Whether SIGTERM waits for `pid` (stopped, it cannot act on it yet).
    pub fn term_pending(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("ShdPnd:").or(l.strip_prefix("SigPnd:")))
            .filter_map(|m| u64::from_str_radix(m.trim(), 16).ok())
            .any(|m| m & (1 << (libc::SIGTERM - 1)) != 0)
    }

    /// Each epoch's record of rank 0 over every agent's output, in order.
    pub fn rank0_epochs(outs: &[&Path]) -> Vec<u64> {
        let mut e: Vec<u64> = outs
            .iter()
            .flat_map(|o| records(o))
            .filter(|r| r["type"] == "epoch" && r["rank"] == 0)
            .map(|r| r["epoch"].as_u64().unwrap())
            .collect();
        e.sort();
        e
    }
}

#[test]
fn under_torchrun_an_agent_lost_and_an_agent_joining_end_with_the_uninterrupted_weights() {
    use torchrun::*;
    let dir = tempfile::tempdir().unwrap();
    let model = model();
    // The uninterrupted run (the same flags, 4 virtual ranks on one process).
    let straight = dir.path().join("straight");
    let out = testkit::without_launcher(BIN)
        .args(flags("synthetic:240:16", model))
        .args(["--epochs", "2"])
        .args(["--virtual-ranks", "4", "--checkpoint-dir"])
        .arg(&straight)
        .output()
        .unwrap();
    ok(&out);

    // A node lost: two agents form 4 ranks; once a step checkpoint is on record, the second
    // agent and its workers are killed; the first re-forms the group with 2 ranks and goes on
    // from that checkpoint.
    let ck = dir.path().join("lost");
    let port = testkit::free_port();
    let (a_out, b_out) = (dir.path().join("a1.out"), dir.path().join("b1.out"));
    let mut a = agent(model, &ck, port, true, &a_out);
    let mut b = agent(model, &ck, port, false, &b_out);
    wait_for("checkpoint of 4 ranks", || {
        records(&a_out)
            .iter()
            .any(|r| r["type"] == "checkpoint" && r["world_size"] == 4)
    });
    let b_workers = workers(b.id());
    signal(b.id() as i32, libc::SIGKILL);
    for w in b_workers {
        signal(w, libc::SIGKILL);
    }
    b.wait().unwrap();
    let status = a.wait().unwrap();
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(a_out.with_extension("err")).unwrap()
    );
    let after: Vec<_> = records(&a_out)
        .into_iter()
        .filter(|r| r["type"] == "epoch")
        .collect();
    assert_eq!(after.last().unwrap()["world_size"], 2, "{after:?}");
    assert_eq!(rank0_epochs(&[&a_out, &b_out]), [1, 2], "each epoch once");
    assert_same_bits(&straight, &ck);

    // A node joining: one agent trains 2 ranks; its workers are held after a step checkpoint
    // while a second agent joins; torchrun restarts the workers with 4 ranks, which go on from
    // that checkpoint.
    let ck = dir.path().join("joined");
    let port = testkit::free_port();
    let (a_out, b_out) = (dir.path().join("a2.out"), dir.path().join("b2.out"));
    let mut a = agent(model, &ck, port, true, &a_out);
    wait_for("checkpoint of 2 ranks", || {
        records(&a_out)
            .iter()
            .any(|r| r["type"] == "checkpoint" && r["world_size"] == 2)
    });
    let held = workers(a.id());
    for &w in &held {
        signal(w, libc::SIGSTOP);
    }
    let mut b = agent(model, &ck, port, false, &b_out);
    // The first agent stops its workers to restart them with the newcomer's.
    wait_for("the restart's SIGTERM", || {
        held.iter().any(|&w| term_pending(w))
    });
    for &w in &held {
        signal(w, libc::SIGCONT);
    }
    for (name, child, out) in [("first", &mut a, &a_out), ("second", &mut b, &b_out)] {
        let status = child.wait().unwrap();
        let err = std::fs::read_to_string(out.with_extension("err")).unwrap();
        let tail: Vec<&str> = err.lines().rev().take(40).collect();
        assert!(
            status.success(),
            "{name} agent: {status:?}\n{}",
            tail.join("\n")
        );
    }
    let four: Vec<_> = records(&b_out)
        .into_iter()
        .filter(|r| r["type"] == "epoch")
        .collect();
    assert!(
        four.iter().all(|r| r["world_size"] == 4),
        "the second agent's workers are ranks of 4: {four:?}"
    );
    assert_eq!(rank0_epochs(&[&a_out, &b_out]), [1, 2], "each epoch once");
    assert_same_bits(&straight, &ck);
}

/// A metadata key set to a value (Some) or removed (None).
type Edit<'a> = (&'a str, Option<&'a str>);

/// Applies `edits` to a safetensors file's metadata, as an edit by hand would; the tensors stay
/// as they are.
fn edit_meta(file: &Path, edits: &[Edit]) {
    let bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let meta = header["__metadata__"].as_object_mut().unwrap();
    for (k, v) in edits {
        match v {
            Some(v) => meta.insert(k.to_string(), (*v).into()),
            None => meta.remove(*k),
        };
    }
    // The header padded to 8 bytes with spaces, as safetensors writes it.
    let mut text = serde_json::to_vec(&header).unwrap();
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(&bytes[8 + n..]);
    std::fs::write(file, out).unwrap();
}

/// A copy of checkpoint directory `ck` at `to` (its two halves).
fn copy_checkpoint(ck: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in ["last.safetensors", "last.train.safetensors"] {
        std::fs::copy(ck.join(f), to.join(f)).unwrap();
    }
}

/// `--resume` from `ck`: its exit code and stderr.
fn resumed(model: &Path, ck: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let out = cmd(model, ck, &[extra, &["--resume"]].concat())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err)
}

#[test]
fn an_edited_checkpoint_is_refused_naming_its_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let model = model();
    // A mid-epoch checkpoint of 2 virtual ranks on one process: after step 2 of 20.
    let ck = dir.path().join("ck");
    let v2 = ["--virtual-ranks", "2", "--data", "synthetic:240:16"];
    stopped_at_first_checkpoint(
        model,
        &ck,
        1,
        &[&v2[..], &["--checkpoint-every", "2"]].concat(),
    );
    let train = "last.train.safetensors";
    let cases: &[(&[Edit], i32, &[&str])] = &[
        // Read as step 0 before: the epoch trained again from its start.
        (&[("step", Some("abc"))], 1, &["last.safetensors", "step"]),
        (&[("step", Some("-1"))], 1, &["last.safetensors", "step"]),
        (&[("virtual_ranks", Some("5"))], 1, &["virtual_ranks"]),
        (&[("virtual_ranks", Some("-2"))], 1, &["virtual_ranks"]),
        (
            &[("virtual_ranks", Some("18446744073709551616"))],
            1,
            &["virtual_ranks"],
        ),
        (&[("world_size", Some("1.5"))], 1, &["world_size"]),
        // Another run's set-up: refused as a usage error naming the flag.
        (&[("virtual_ranks", Some("4"))], 2, &["--virtual-ranks 4"]),
        (&[("virtual_ranks", None)], 2, &["--virtual-ranks"]),
        // Sums of 2 processes where the metadata says 1: named in the file that holds them.
        (&[("world_size", Some("2"))], 1, &[train, "progress.ranks"]),
        // Past the run's --epochs 2: a mid-epoch checkpoint of epoch 3, an end of epoch 3.
        (&[("epoch", Some("2"))], 2, &["--epochs 2"]),
        (
            &[("epoch", Some("3")), ("step", Some("0"))],
            2,
            &["--epochs 2"],
        ),
    ];
    for (i, (edits, code, named)) in cases.iter().enumerate() {
        let case = dir.path().join(format!("case{i}"));
        copy_checkpoint(&ck, &case);
        for half in ["last.safetensors", train] {
            edit_meta(&case.join(half), edits);
        }
        let (got, err) = resumed(model, &case, &v2);
        assert_eq!(got, Some(*code), "{edits:?}: {err}");
        for n in *named {
            assert!(err.contains(n), "{edits:?}: no {n:?} in {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    }
    // As written, it resumes.
    let (got, err) = resumed(model, &ck, &v2);
    assert_eq!(got, Some(0), "{err}");
}

#[test]
fn halves_of_two_runs_are_refused_naming_what_differs() {
    let dir = tempfile::tempdir().unwrap();
    let model = model();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    run(model, &a, 1, &["--virtual-ranks", "2", "--epochs", "1"]);
    run(model, &b, 1, &["--epochs", "1"]);
    // b's optimiser state beside a's weights: both at the end of epoch 1.
    std::fs::copy(
        b.join("last.train.safetensors"),
        a.join("last.train.safetensors"),
    )
    .unwrap();
    let (got, err) = resumed(model, &a, &["--virtual-ranks", "2"]);
    assert_eq!(got, Some(1), "{err}");
    for n in [
        "last.train.safetensors",
        "last.safetensors",
        "virtual_ranks",
    ] {
        assert!(err.contains(n), "no {n:?} in {err}");
    }
}

#[test]
fn a_resume_with_other_virtual_ranks_at_an_epochs_end_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let model = model();
    let ck = dir.path().join("v4");
    run(model, &ck, 1, &["--virtual-ranks", "4", "--epochs", "1"]);
    let goes_on = "the run goes on with";
    // The same virtual ranks on another number of processes: the same run, nothing to say.
    let same = dir.path().join("same");
    copy_checkpoint(&ck, &same);
    let outs = testkit::run_all(start(
        model,
        &same,
        2,
        &["--virtual-ranks", "4", "--resume"],
    ));
    for o in &outs {
        ok(o);
    }
    let err = String::from_utf8_lossy(&outs[0].stderr);
    assert!(!err.contains(goes_on), "{err}");
    // Other virtual ranks, or none: another run from this epoch on, and the run says so.
    for (extra, now) in [
        (
            &["--virtual-ranks", "2"][..],
            "--virtual-ranks 2 (1 process(es))",
        ),
        (&[][..], "1 rank(s)"),
    ] {
        let other = dir.path().join(format!("other{}", extra.len()));
        copy_checkpoint(&ck, &other);
        let out = cmd(model, &other, &[extra, &["--resume"]].concat())
            .output()
            .unwrap();
        ok(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        let said = format!("--virtual-ranks 4 (1 process(es)); {goes_on} {now}");
        assert!(err.contains(&said), "no {said:?} in {err}");
    }
    // A checkpoint of a run without virtual ranks, resumed with them, says so too.
    let plain = dir.path().join("plain");
    run(model, &plain, 1, &["--epochs", "1"]);
    let (got, err) = resumed(model, &plain, &["--virtual-ranks", "4"]);
    assert_eq!(got, Some(0), "{err}");
    let said = format!("1 rank(s); {goes_on} --virtual-ranks 4 (1 process(es))");
    assert!(err.contains(&said), "no {said:?} in {err}");
}

/// Another --batch-size or --seed at an epoch's end: other samples in other steps from there,
/// and the run says so; the same ones say nothing.
#[test]
fn a_resume_with_another_batch_size_or_seed_at_an_epochs_end_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let model = model();
    let ck = dir.path().join("b12");
    run(model, &ck, 1, &["--epochs", "1"]);
    let goes_on = "the run goes on with";
    let resume_with = |name: &str, batch: &str, seed: &str| {
        let to = dir.path().join(name);
        copy_checkpoint(&ck, &to);
        let mut args = flags("synthetic:30:16", model);
        for (flag, value) in [("--batch-size", batch), ("--seed", seed)] {
            let at = args.iter().position(|a| a == flag).unwrap();
            args[at + 1] = value.into();
        }
        let out = testkit::without_launcher(BIN)
            .args(args)
            .args(["--epochs", "2", "--resume", "--checkpoint-dir"])
            .arg(&to)
            .output()
            .unwrap();
        ok(&out);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = resume_with("same", "12", "5");
    assert!(!err.contains(goes_on), "{err}");
    let err = resume_with("batch", "6", "5");
    let said = format!("written with --batch-size 12; {goes_on} --batch-size 6 from");
    assert!(err.contains(&said), "no {said:?} in {err}");
    let err = resume_with("both", "6", "7");
    let said = format!(
        "written with --batch-size 12 and --seed 5; {goes_on} --batch-size 6 and --seed 7 from"
    );
    assert!(err.contains(&said), "no {said:?} in {err}");
}

#[test]
fn dump_batches_with_virtual_ranks_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = model();
    let npz = dir.path().join("batches.npz");
    // Dumped the batches of a run without them before: not what the run trains on.
    let out = testkit::without_launcher(BIN)
        .args(flags("synthetic:30:16", model))
        .args(["--virtual-ranks", "4", "--dump-batches", "1", "--dump"])
        .arg(&npz)
        .output()
        .unwrap();
    let err = testkit::exit_stderr(&out, 2);
    testkit::assert_mentions(&err, &["--virtual-ranks 4", "--dump-batches"]);
    assert!(!npz.exists());
}
