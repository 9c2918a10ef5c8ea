//! Several ranks and pipeline stages: rank processes on this machine against one rank with the
//! same global batch, SyncBatchNorm, ranks that disagree, the CPUs divided among them, and a
//! model split into stages.

use super::*;

#[test]
fn two_rank_processes_match_one_rank_with_the_same_global_batch() {
    let base = [
        "--batch-size",
        "32",
        "--max-steps",
        "3",
        "--epochs",
        "1",
        "--seed",
        "5",
    ];
    let one = tempfile::tempdir().unwrap();
    records(
        &cmd()
            .args(base)
            // One thread, as each rank has (libtorch's CPU kernels sum in a thread count's
            // order; three steps make the last bits visible).
            .args(["--threads", "1", "--accum", "2", "--checkpoint-dir"])
            .arg(one.path())
            .output()
            .unwrap(),
    );
    let (_, two) = two_rank_processes(&base);
    assert_same_weights(one.path(), two.path(), 1e-6);
}

/// Two ranks on one host all-reduce their gradients in place in memory they share (the
/// shared-memory transport), or over the TCP ring: the same weights and optimiser state, to the
/// bit (both sum in the ring's order).
#[test]
fn shared_memory_and_tcp_ranks_train_the_same_bits() {
    let base = ["--batch-size", "32", "--max-steps", "2", "--epochs", "1"];
    let (_, shm) = two_rank_processes(&[&base[..], &["--transport", "shm"]].concat());
    let (_, tcp) = two_rank_processes(&[&base[..], &["--transport", "tcp"]].concat());
    common::assert_same_bits(shm.path(), tcp.path());
}

#[test]
fn sync_bn_on_two_rank_processes_matches_one_rank_with_the_whole_batch() {
    // One step at a constant LR: see train's test of the same for why (ReLU kinks turn
    // float-level differences into visible gradient differences; later steps compound them).
    let base = [
        "--batch-size",
        "32",
        "--max-steps",
        "1",
        "--epochs",
        "1",
        "--seed",
        "5",
        "--schedule",
        "constant",
    ];
    let (init, one) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    trained(cmd().args(base).args(["--lr", "0"]), init.path());
    trained(
        cmd().args(base).args(["--lr", "0.05", "--sync-bn"]),
        one.path(),
    );
    let mut args = base.to_vec();
    args.extend(["--lr", "0.05", "--sync-bn"]);
    let (stderr, two) = two_rank_processes(&args);
    assert!(stderr.contains("SyncBatchNorm"), "{stderr}");
    let file = |d: &tempfile::TempDir| {
        Tensor::read_safetensors(d.path().join("last.safetensors"))
            .unwrap()
            .into_iter()
            .collect::<BTreeMap<_, _>>()
    };
    let (init, one, two) = (file(&init), file(&one), file(&two));
    // The running statistics (forward only): those of the whole batch.
    let stats: Vec<&String> = one.keys().filter(|n| n.contains("running_")).collect();
    assert_eq!(stats.len(), 40);
    for n in stats {
        let d = (&two[n] - &one[n]).abs().max().double_value(&[])
            / one[n].abs().max().double_value(&[]).max(1e-3);
        assert!(d < 1e-5, "{n}: relative difference {d}");
    }
    // The weights as a whole, relative to how far the step moved them. One rank runs libtorch's
    // BatchNorm, two ranks our fp32 SyncBatchNorm: on an AMD EPYC one flipped ReLU made layer2.0
    // and everything before it 1e-3 apart here (everything after 4e-6), 9.6e-4 overall;
    // per-rank BatchNorm is 1.16 apart.
    let l2 = |a: &BTreeMap<String, Tensor>, b: &BTreeMap<String, Tensor>| {
        let weights = a
            .iter()
            .filter(|(n, _)| !n.contains("running_") && !n.contains("num_batches"));
        weights
            .map(|(n, t)| {
                (t - &b[n])
                    .to_kind(tch::Kind::Double)
                    .square()
                    .sum(tch::Kind::Double)
                    .double_value(&[])
            })
            .sum::<f64>()
            .sqrt()
    };
    let apart = l2(&two, &one) / l2(&one, &init);
    eprintln!("2 rank processes with --sync-bn vs 1: {apart:e} of the distance moved");
    assert!(
        apart < 1e-2,
        "2 ranks --sync-bn vs 1 rank: {apart} of the distance moved"
    );
}

#[test]
fn ranks_started_with_different_flags_refuse_to_train_naming_the_flag() {
    let port = free_port();
    // Rank 1 got another --batch-size: it trained silently on a mixed batch before.
    let outs = run_all([(0, "64"), (1, "32")].map(|(rank, batch)| {
        let mut c = cmd();
        c.args(["--batch-size", batch, "--max-steps", "2", "--epochs", "1"])
            .args(rank_of(rank, 2, &port));
        c
    }));
    for (rank, (mine, theirs)) in [(0, ("64", "32")), (1, ("32", "64"))] {
        let err = String::from_utf8_lossy(&outs[rank].stderr);
        assert_eq!(outs[rank].status.code(), Some(2), "rank {rank}: {err}");
        assert!(
            err.contains(&format!(
                "--batch-size is {mine} here but {theirs} on rank {}",
                1 - rank
            )),
            "rank {rank}: {err}"
        );
        assert!(
            !String::from_utf8_lossy(&outs[rank].stdout).contains("\"epoch\""),
            "rank {rank} trained"
        );
    }
}

#[test]
fn ranks_started_by_hand_on_one_host_divide_its_cpus() {
    // No --threads, OMP_NUM_THREADS or launcher count: each rank took every CPU before. The
    // start line is the point: the small network trains.
    let port = free_port();
    let outs = run_all((0..2).map(|r| {
        let mut c = small();
        c.env_remove("OMP_NUM_THREADS")
            .env_remove("SLURM_CPUS_PER_TASK")
            .env_remove("LOCAL_WORLD_SIZE")
            .args(["--epochs", "1", "--max-steps", "1", "--batch-size", "16"])
            .args(["--rank", &r.to_string(), "--world-size", "2"])
            .args([
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                &port,
                "--all-ranks",
            ]);
        c
    }));
    let cores = std::thread::available_parallelism().unwrap().get();
    for o in &outs {
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{e}");
        let line = e.lines().find(|l| l.contains("CPU thread(s)")).unwrap();
        let threads: usize = line
            .split(", ")
            .find_map(|p| p.split_once(" CPU thread(s) (")?.0.parse().ok())
            .unwrap();
        // Divided among the ranks, and never fewer for busy CPUs on the CPU device.
        assert_eq!(threads, (cores / 2).max(1), "{line}");
        assert!(
            line.contains(&format!("({cores} CPUs / 2 ranks on the node)")),
            "{line}"
        );
    }
}

/// On the CPU the thread count changes the weights' last bits: a run on busy CPUs takes the same
/// count as on idle ones (a run cut to 1 thread on a busy machine and resumed with 2 on an idle
/// one trained other weights than the run it resumed; the CI's loaded cores did that).
#[test]
fn busy_cpus_do_not_change_a_cpu_runs_thread_count() {
    let cores = std::thread::available_parallelism().unwrap().get();
    // The start line is the point: the small network, made before the spinners start (they
    // spin as long as the run lasts), trains one step and evaluates one batch.
    let mut run = small();
    run.env_remove("OMP_NUM_THREADS")
        .env_remove("SLURM_CPUS_PER_TASK")
        .env_remove("LOCAL_WORLD_SIZE")
        .args(["--epochs", "1", "--max-steps", "1", "--batch-size", "16"])
        .args(["--max-val-steps", "1"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = (0..2 * cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let out = run.output().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    spinners.into_iter().for_each(|t| t.join().unwrap());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    let line = e.lines().find(|l| l.contains("CPU thread(s)")).unwrap();
    assert!(
        line.contains(&format!(
            "{cores} CPU thread(s) (the {cores} CPU(s) it may use"
        )),
        "{line}"
    );
    if cores > 1 {
        assert!(line.contains("not fewer, as on the CPU"), "{line}");
    }
}

#[test]
fn a_pipelined_run_reports_its_stages_and_its_checkpoint_resumes_unsplit() {
    let base = [
        "--batch-size",
        "32",
        "--max-steps",
        "2",
        "--seed",
        "4",
        "--augment",
        "--max-val-steps",
        "1",
    ];
    let straight = tempfile::tempdir().unwrap();
    let recs = trained(
        cmd().args(base).args(PIPED).args(["--epochs", "2"]),
        straight.path(),
    );
    let e = &recs.items[1];
    let cut: Vec<_> = e
        .stages
        .iter()
        .map(|s| (s.device.as_str(), s.first.as_str(), s.last.as_str()))
        .collect();
    assert_eq!(
        cut,
        [("cpu", "conv1", "layer2.1"), ("cpu", "layer3.0", "fc")]
    );
    assert!(e.stages[1].params > e.stages[0].params && e.stages[0].gflops > 0.0);
    assert!(e.step_ms > 0.0);
    // Epoch 1 split, epoch 2 on one device with --accum 4: the same weights.
    let resumed = tempfile::tempdir().unwrap();
    trained(
        cmd().args(base).args(PIPED).args(["--epochs", "1"]),
        resumed.path(),
    );
    let recs = trained(
        cmd()
            .args(base)
            .args(["--accum", "4", "--epochs", "2", "--resume"]),
        resumed.path(),
    );
    let e = &recs.items[0];
    assert_eq!(e.epoch, 2);
    assert!(e.stages.is_empty(), "unsplit: no stages in the record");
    assert_same_weights(straight.path(), resumed.path(), 0.0);
}

#[test]
fn two_rank_processes_of_two_stages_match_one_of_two_stages_with_the_whole_batch() {
    let base = [
        "--batch-size",
        "32",
        "--max-steps",
        "2",
        "--epochs",
        "1",
        "--seed",
        "5",
        "--stages",
        "2",
        "--stage-devices",
        "cpu,cpu",
        "--max-val-steps",
        "1",
    ];
    let one = tempfile::tempdir().unwrap();
    trained(cmd().args(base).args(["--micro-batches", "4"]), one.path());
    let mut args = base.to_vec();
    args.extend(["--micro-batches", "2"]);
    let (stderr, two) = two_rank_processes(&args);
    assert!(stderr.contains("in 2 stages"), "{stderr}");
    // The same maths with float sums in another order (each rank's 2 micro-batches, then the
    // all-reduce, against one rank's 4); two SGD steps through BatchNorm amplify the rounding
    // to 1.2e-6 on conv1.weight on an AMD EPYC (oneDNN's CPU kernels differ per processor;
    // under 1e-6 where this was written): 5e-6 absolute, weights being ~0.05.
    assert_same_weights(one.path(), two.path(), 5e-6);
}

#[test]
fn pipeline_set_ups_that_cannot_work_are_usage_errors() {
    for (args, says) in [
        (
            &["--stages", "2", "--stage-devices", "cpu,cuda:7"][..],
            "stage cuda:7 (--stage-devices cpu,cuda:7) asked for, but",
        ),
        (&["--stages", "11"], "more than the model's 10 blocks"),
        (
            &["--stages", "2", "--micro-batches", "64"],
            "--micro-batches 64 is more than the 32 samples per rank",
        ),
        (
            &["--stages", "2", "--stage-devices", "cpu"],
            "lists 1 device(s)",
        ),
        (&["--stages", "0"], "at least 1"),
        (&["--micro-batches", "2"], "needs --stages 2 or more"),
        (
            &["--split-at", "layer3"],
            "--split-at layer3 needs --stages 2 or more",
        ),
        (&["--stages", "2", "--accum", "2"], "instead of --accum"),
        (
            &["--stages", "2", "--split-at", "layer3,fc"],
            "2 cut(s) for 2 stages",
        ),
        (
            &["--stages", "2", "--split-at", "layer9"],
            "not a place to cut",
        ),
        (
            &["--stage-devices", "cpu,auto"],
            "`auto` is not cpu, cuda or cuda:N",
        ),
    ] {
        let o = cmd()
            .args(["--batch-size", "32", "--epochs", "1", "--max-steps", "1"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn resnet50_split_over_two_stages_trains_an_image_folder_as_accum_4_does() {
    // PyTorch's model-parallel ResNet-50 on real images: two pipeline stages (cut at layer3,
    // four GPipe micro-batches) take the same steps as one device with --accum 4, bit for bit
    // on the CPU, through the ImageNet training transforms.
    let dir = digits_twice();
    let base = [
        "--model",
        "resnet50",
        "--image-size",
        "32",
        "--batch-size",
        "16",
        "--max-steps",
        "2",
        "--epochs",
        "1",
        "--lr",
        "0.01",
        "--workers",
        "2",
        "--normalize",
        "0.5",
        "--max-val-steps",
        "1",
    ];
    let run = |extra: &[&str]| {
        let ck = tempfile::tempdir().unwrap();
        trained(
            cmd_on(format!("imagefolder:{}", dir.join("folder").display()))
                .args(base)
                .args(extra),
            ck.path(),
        );
        ck
    };
    let piped = run(&PIPED);
    let accum = run(&["--accum", "4"]);
    assert_same_weights(piped.path(), accum.path(), 0.0);
}
