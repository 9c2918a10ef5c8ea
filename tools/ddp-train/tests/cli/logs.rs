//! Records, logs and usage errors: what a run prints, writes to its CSV and TensorBoard logs and says
//! on stderr, how it counts its steps and threads, and the flags and inputs it refuses.

use super::*;

#[test]
fn epochs_are_records_checkpoints_are_written_and_resume_continues() {
    let ck = tempfile::tempdir().unwrap();
    // One evaluation batch: the figures are checked for being finite, not against a whole set.
    let args = [
        "--batch-size",
        "64",
        "--max-steps",
        "4",
        "--augment",
        "--max-val-steps",
        "1",
    ];
    // The loop is the point: the small network.
    let recs = trained(small().args(args).args(["--epochs", "2"]), ck.path());
    assert_eq!(recs.items.len(), 2);
    let e = &recs.items[1];
    for (k, v) in [
        ("train_loss", e.train_loss),
        ("train_top1", e.train_top1),
        ("val_loss", e.val_loss),
        ("val_top1", e.val_top1),
        ("images_per_s", e.images_per_s),
        ("seconds", e.seconds),
        ("lr", e.lr),
        ("step_ms", e.step_ms),
    ] {
        assert!(v.is_finite(), "{k}: {e:?}");
    }
    assert_eq!(e.steps, 4);
    assert!(e.stages.is_empty(), "one device: no stages");
    assert!(e.checkpoint.as_ref().unwrap().ends_with("last.safetensors"));
    for f in [
        "last.safetensors",
        "last.train.safetensors",
        "best.safetensors",
    ] {
        assert!(ck.path().join(f).exists(), "{f}");
    }
    assert_eq!((recs.summary.ok, recs.summary.skipped), (2, 0));

    // Resume with --epochs 3: only epoch 3 runs.
    let recs = trained(
        small().args(args).args(["--epochs", "3", "--resume"]),
        ck.path(),
    );
    let epochs: Vec<usize> = recs.items.iter().map(|e| e.epoch).collect();
    assert_eq!(epochs, [3]);
    assert_eq!(recs.summary.skipped, 2);
}

#[test]
fn tensorboard_and_csv_logs_hold_the_steps_and_epochs_and_progress_counts_steps() {
    let dir = tempfile::tempdir().unwrap();
    let (tb, csv, ck) = (
        dir.path().join("tb"),
        dir.path().join("metrics.csv"),
        dir.path().join("ck"),
    );
    let run = |epochs: &str, resume: bool| {
        // The logs are the point: the small network.
        let mut c = small();
        // One evaluation batch: its figures are compared between the logs and the records.
        c.args(["--batch-size", "32", "--max-steps", "4", "--lr", "0.05"])
            .args(["--epochs", epochs, "--log-every", "2", "--progress"])
            .args(["--max-val-steps", "1"])
            .arg("--tensorboard")
            .arg(&tb)
            .arg("--csv")
            .arg(&csv)
            .arg("--checkpoint-dir")
            .arg(&ck);
        if resume {
            c.arg("--resume");
        }
        c.output().unwrap()
    };
    let first = run("2", false);
    let recs = records(&first);
    // --progress with stderr a file: a plain line, counting the run's 8 steps (not its epochs).
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("ddp-train: ") && l.contains("/8 ")),
        "{stderr}"
    );
    let second = records(&run("3", true));
    let epochs: Vec<&EpochRecord> = recs.items.iter().chain(&second.items).collect();
    assert_eq!(epochs.len(), 3);

    // metrics.csv: a row per epoch, the resumed run's row after the first run's.
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert_eq!(
        &rows[0][..6],
        [
            "epoch",
            "global_step",
            "train_loss",
            "train_top1",
            "val_loss",
            "val_top1"
        ]
    );
    for (row, e) in rows[1..].iter().zip(&epochs) {
        assert_eq!(row[0], e.epoch.to_string());
        assert_eq!(row[1], (e.epoch * 4).to_string());
        assert_eq!(row[2].parse::<f64>().unwrap(), e.train_loss);
        assert_eq!(row[5].parse::<f64>().unwrap(), e.val_top1);
    }

    // TensorBoard's own reader: step/* every 2 steps over the three epochs (the resumed run
    // goes on counting), epoch/* per epoch, the hparams session with the flags and its end.
    let check = r#"
import sys, json
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
ea = EventAccumulator(sys.argv[1]); ea.Reload()
s = lambda tag: [[e.step, e.value] for e in ea.Scalars(tag)]
content = ea.PluginTagToContent("hparams")
start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"]).session_end_info
print(json.dumps({"loss": s("step/loss"), "top1": s("step/top1"), "lr": s("step/lr"),
    "train_loss": s("epoch/train_loss"), "train_top1": s("epoch/train_top1"),
    "val_top1": s("epoch/val_top1"), "hp_lr": start.hparams["lr"].number_value,
    "hp_model": start.hparams["model"].string_value, "end": end.status}))
"#;
    let tb: Value = serde_json::from_str(&python([
        std::ffi::OsStr::new("-c"),
        check.as_ref(),
        tb.as_os_str(),
    ]))
    .unwrap();
    let series = |k: &str| -> Vec<(u64, f64)> {
        tb[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64().unwrap(), p[1].as_f64().unwrap()))
            .collect()
    };
    let loss = series("loss");
    assert_eq!(
        loss.iter().map(|p| p.0).collect::<Vec<_>>(),
        [2, 4, 6, 8, 10, 12]
    );
    assert_eq!(series("lr").len(), 6);
    // Two equal windows per epoch: their mean is the epoch's (float32 in the file).
    let top1 = series("top1");
    for (i, e) in epochs.iter().enumerate() {
        let mean = (loss[2 * i].1 + loss[2 * i + 1].1) / 2.0;
        assert!(
            (mean - e.train_loss).abs() < 1e-5 * e.train_loss.abs().max(1.0),
            "{mean} vs {e:?}"
        );
        let mean = (top1[2 * i].1 + top1[2 * i + 1].1) / 2.0;
        assert!((mean - e.train_top1).abs() < 1e-4, "{mean} vs {e:?}");
    }
    let val: Vec<(u64, f64)> = series("val_top1");
    assert_eq!(val.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 2, 3]);
    for (v, e) in val.iter().zip(&epochs) {
        assert!((v.1 - e.val_top1).abs() < 1e-4, "{v:?} vs {e:?}");
    }
    assert_eq!(tb["hp_lr"].as_f64(), Some(0.05));
    let model = small_model(10);
    let model = model.to_str().unwrap();
    assert_eq!(tb["hp_model"].as_str(), model.strip_prefix("--model="));
    assert_eq!(tb["end"].as_i64(), Some(1), "a success");
}

#[test]
fn a_short_run_logs_its_step_figures_at_each_epochs_end() {
    // 4 steps an epoch, --log-every at its default of 50: figures at steps 4 and 8 all the same.
    let dir = tempfile::tempdir().unwrap();
    let tb = dir.path().join("tb");
    let o = small_on("synthetic:64", 100)
        .args(["--batch-size", "16", "--epochs", "2", "--tensorboard"])
        .arg(&tb)
        .output()
        .unwrap();
    records(&o);
    let check = r#"
import sys, json
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1]); ea.Reload()
print(json.dumps([e.step for e in ea.Scalars("step/loss")]))
"#;
    let steps: Vec<u64> = serde_json::from_str(&python([
        std::ffi::OsStr::new("-c"),
        check.as_ref(),
        tb.as_os_str(),
    ]))
    .unwrap();
    assert_eq!(steps, [4, 8]);
}

#[test]
fn bad_set_ups_say_what_to_do() {
    let o = cmd()
        .args(["--batch-size", "33", "--world-size", "1", "--accum", "2"])
        .output()
        .unwrap();
    // A usage error found by the trainer (it was exit 1 before the pipeline work mapped them).
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not divisible by --accum"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let o = Command::new(BIN)
        .args(["--device", "cpu", "--data", "cifar10:/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    testkit::assert_mentions(&err, &["data_batch_1.bin", "Nothing is downloaded"]);

    for p in ["fp16", "bf16"] {
        let o = cmd().args(["--precision", p]).output().unwrap();
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("needs a CUDA device"),
            "{p}"
        );
    }
    let o = cmd().args(["--cuda-graphs", "on"]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("CUDA graphs need a CUDA device"));
    let o = cmd().args(["--cuda-graphs", "maybe"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = cmd().args(["--resume"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "--resume needs --checkpoint-dir");
    // Flag values checked before anything starts are usage errors (these were exit 1).
    let o = cmd().args(["--precision", "fp8"]).output().unwrap();
    testkit::exits(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown precision `fp8`"));
    let o = Command::new(BIN)
        .args(["--device", "cpu", "--data", "/nonexistent"])
        .output()
        .unwrap();
    testkit::exits(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown --data `/nonexistent`"));
    let o = cmd().args(["--schedule", "linear"]).output().unwrap();
    testkit::exits(&o, 2);
    // Every flag's range is checked before anything starts, naming the flag and the value:
    // these trained and "diverged" (exit 1), or unwrapped a libtorch error, or trained on.
    for (flag, value) in [
        ("--lr", "nan"),
        ("--lr", "inf"),
        ("--lr=-1", ""),
        ("--momentum", "nan"),
        ("--weight-decay", "inf"),
        // Past float32, which the optimiser computes in (a libtorch unwrap after start-up).
        ("--lr", "1e39"),
        ("--weight-decay", "1e39"),
        ("--momentum", "4e38"),
        ("--workers", "100000"),
        ("--label-smoothing", "2"),
        ("--max-steps", "0"),
        ("--epochs", "0"),
        ("--batch-size", "0"),
        // One image per rank and step cannot train BatchNorm ("diverged" before).
        ("--batch-size", "1"),
    ] {
        let args: Vec<&str> = [flag, value]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let o = cmd().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(
            err.contains(flag.split('=').next().unwrap()),
            "{flag} {value}: {err}"
        );
    }
    // A step schedule whose gamma takes the LR past float32 within the run.
    let o = cmd()
        .args(["--lr", "1", "--schedule", "step:1:1e20", "--epochs", "3"])
        .output()
        .unwrap();
    let err = testkit::exit_stderr(&o, 2);
    assert!(
        err.contains("--schedule step:1:1e20 reaches 1e40 at epoch 3"),
        "{err}"
    );
    let o = Command::new(BIN)
        .args(["--device", "cpu", "--data", "synthetic:1000000000"])
        .output()
        .unwrap();
    let err = testkit::exit_stderr(&o, 2);
    assert!(
        err.contains("synthetic:1000000000") && !err.contains("unwrap"),
        "{err}"
    );
}

#[test]
fn cpu_threads_come_from_the_flag_or_slurm_and_bound_the_decoding_threads() {
    // The start line is the point: one step of the small network, one evaluation batch.
    let banner = |c: &mut Command| {
        let o = c
            .args(["--epochs", "1", "--max-steps", "1", "--batch-size", "16"])
            .args(["--max-val-steps", "1"])
            .output()
            .unwrap();
        ok(&o);
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = banner(small().env("SLURM_CPUS_PER_TASK", "1"));
    assert!(e.contains(", 1 CPU thread(s) (SLURM_CPUS_PER_TASK)"), "{e}");
    // More than the CPUs it may use is capped there, and the start line says so (100,000
    // threads answered no signal).
    let cores = std::thread::available_parallelism().unwrap().get();
    let e = banner(small().env("SLURM_CPUS_PER_TASK", "100000"));
    assert!(
        e.contains(&format!(
            ", {cores} CPU thread(s) (SLURM_CPUS_PER_TASK), capped: 100000 asked, more than the \
             {cores} CPU(s) it may use"
        )),
        "{e}"
    );
    let folder = format!("imagefolder:{}", digits_twice().join("folder").display());
    let e = banner(
        small_on(&folder, 10)
            .args(["--image-size", "32", "--threads", "1"])
            .env("OMP_NUM_THREADS", "3"),
    );
    assert!(
        e.contains(", 1 CPU thread(s) (--threads), 1 decoding thread(s)"),
        "{e}"
    );
    // torchrun's OMP_NUM_THREADS sets libtorch's threads, not the loader's.
    let e = banner(
        small_on(&folder, 10)
            .args(["--image-size", "32"])
            .env("OMP_NUM_THREADS", "1")
            .env_remove("SLURM_CPUS_PER_TASK"),
    );
    let cores = std::thread::available_parallelism().unwrap().get();
    assert!(
        e.contains(&format!(
            ", 1 CPU thread(s) (OMP_NUM_THREADS), {cores} decoding thread(s)"
        )),
        "{e}"
    );
}

#[test]
fn an_epoch_trains_its_last_smaller_batch_or_counts_what_drop_last_leaves_out_as_dataloader_does() {
    // 47 training images (9 for validation): (ranks, --batch-size, --drop-last). A last batch
    // of one image per rank is left out (BatchNorm cannot train on one). The small network
    // (BatchNorm too) trains: the steps are the point.
    let cases = [
        (1, 16, false),
        (2, 16, false),
        (2, 20, false),
        (1, 23, false),
        (2, 16, true),
        (1, 16, true),
    ];
    let reference = r#"
import sys, json
from torch.utils.data import DataLoader, DistributedSampler
out = []
for world, batch, drop in json.loads(sys.argv[1]):
    seen, steps = set(), None
    for r in range(world):
        s = DistributedSampler(range(47), num_replicas=world, rank=r, shuffle=True, seed=0, drop_last=drop)
        batches = list(DataLoader(list(s), batch_size=batch // world, drop_last=drop))
        if len(batches[-1]) == 1:
            batches.pop()
        steps = len(batches)
        for b in batches:
            seen.update(b.tolist())
    out.append([steps, 47 - len(seen)])
print(json.dumps(out))
"#;
    let spec = serde_json::to_string(&cases).unwrap();
    let expected: Vec<(usize, usize)> =
        serde_json::from_str(&python(["-c", reference, &spec])).unwrap();
    for ((world, batch, drop), (steps, left_out)) in cases.into_iter().zip(expected) {
        let port = free_port();
        let outs = run_all((0..world).map(|r| {
            let mut c = small_on("synthetic:47", 100);
            c.args(["--batch-size", &batch.to_string(), "--epochs", "1"]);
            if drop {
                c.arg("--drop-last");
            }
            if world > 1 {
                c.args(rank_of(r, world, &port));
            }
            c
        }));
        let run = records(&outs[0]);
        let e = &run.items[0];
        let case = format!("{world} rank(s), batch {batch}, drop_last {drop}");
        assert_eq!((e.steps, e.left_out), (steps, left_out), "{case}");
        assert_eq!(e.val_images, 9, "{case}: evaluation sees every image");
        let stderr = String::from_utf8_lossy(&outs[0].stderr);
        assert_eq!(
            stderr.contains(&format!("the other {left_out} are left out")),
            left_out > 0,
            "{case}: {stderr}"
        );
    }
    // --max-val-steps 1: one evaluation batch per rank (twice a rank's training batch).
    for (world, batch, evaluated) in [(1, 4, 8), (2, 4, 8), (2, 8, 9)] {
        let port = free_port();
        let outs = run_all((0..world).map(|r| {
            let mut c = small_on("synthetic:47", 100);
            c.args(["--batch-size", &batch.to_string(), "--epochs", "1"]);
            c.args(["--max-steps", "1", "--max-val-steps", "1"]);
            if world > 1 {
                c.args(rank_of(r, world, &port));
            }
            c
        }));
        let e = &records(&outs[0]).items[0];
        assert_eq!(e.val_images, evaluated, "{world} rank(s), batch {batch}");
    }
}

/// A FIFO given where ddp-train reads a file (--init, --print-eval-snippet, --csv, an image of a
/// folder, a `.rec` or `.idx`) is refused at once, never waited on in open(2), where no signal
/// would end the wait.
#[test]
fn fifos_in_place_of_files_are_refused_not_waited_on() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    testkit::mkfifo(&fifo);
    let deadline = Duration::from_secs(120);
    let short = ["--epochs", "1", "--max-steps", "1", "--batch-size", "32"];
    let cases: Vec<(Command, &str)> = vec![
        (
            {
                let mut c = cmd();
                c.args(short).arg("--init").arg(&fifo);
                c
            },
            "fifo is a FIFO",
        ),
        (
            {
                let mut c = Command::new(BIN);
                c.arg("--print-eval-snippet").arg(&fifo);
                c
            },
            "fifo is a FIFO",
        ),
        (
            {
                let mut c = cmd();
                c.args(short).arg("--csv").arg(&fifo);
                c
            },
            "fifo is a FIFO",
        ),
        (
            {
                let prefix = tmp.path().join("faces");
                testkit::mkfifo(&prefix.with_extension("rec"));
                std::fs::write(prefix.with_extension("idx"), "0\t0\n").unwrap();
                let mut c = cmd_on(format!("recordio:{}", prefix.display()));
                c.args(short).arg("--val-data").arg(&prefix);
                c
            },
            "faces.rec is a FIFO",
        ),
    ];
    for (mut c, says) in cases {
        let start = Instant::now();
        let o = testkit::output_within(&mut c, deadline);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{c:?}: {err}");
        assert!(err.contains(says), "{c:?}: {err}");
        assert!(start.elapsed() < deadline / 3, "{c:?}");
    }
}

/// A reader of the records that goes away mid-run (`ddp-train ... | head -1`) ends the run with
/// SIGPIPE's status, quietly, as STYLE asks of a producer; it was exit 1 with "error: rank 0:
/// stdout closed" when the record of a later epoch could not be written.
#[test]
fn a_reader_that_goes_away_mid_run_is_a_quiet_exit_141() {
    use std::io::{BufRead, BufReader};
    let mut child = cmd()
        .args(["--batch-size", "32", "--max-steps", "1", "--epochs", "3"])
        .args(["--max-val-steps", "1", "--threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap(); // then dropped: the pipe closes
    assert!(first.contains("\"type\":\"epoch\""), "{first}");
    let out = child.wait_with_output().unwrap();
    let stderr = testkit::exit_stderr(&out, 141);
    assert!(!stderr.contains("error"), "{stderr}");
}
