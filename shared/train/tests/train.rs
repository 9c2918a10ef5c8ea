//! The training loop on the CPU: DDP over 2 ranks equals 1 rank with the same global batch,
//! a pipeline (stages on `cpu`) equals gradient accumulation, resume repeats the uninterrupted
//! run exactly (also between split and unsplit runs), and real images (digits) are learnt.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use collectives::rendezvous::StoreAt;
use collectives::store::StoreServer;
use collectives::{Backend, Communicator, Options, Plan};
use tch::{Device, Kind, Tensor};
use train::optim::{Rule, Schedule};
use train::pipeline::Pipeline;
use train::resnet::{Arch, Stem};
use train::syncbn::{self, Group, Lent};
use train::trainer::{Config, Event, Precision, Trained, train};
use train_data::data::Source;

/// scikit-learn's digits in the CIFAR-100 layout (scripts/make-digits-cifar), made once.
fn digits() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = testkit::fixture_dir("digits");
        testkit::make_digits(&dir, &[]);
        dir
    })
}

/// scripts/reference/torchscript_models.py's "bn" for 10 classes (a small scripted network with
/// BatchNorm, made with the script's fixed seed), made once per test binary: for the tests of
/// the loop (stops, checkpoints, resume) rather than of the network, which it trains many times
/// faster than ResNet-18 on the CPU. Its parameters and buffers join the run's store as a
/// ResNet's do.
fn small_net() -> PathBuf {
    testkit::scripted_model("bn", 10).to_path_buf()
}

/// libtorch's generator is process-global: tests that seed and draw from it run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn config() -> Config {
    Config {
        arch: Arch::ResNet18,
        stem: Stem::ImageNet,
        script: None,
        data: Source::Cifar100(digits().to_path_buf()),
        images: Default::default(),
        prefetch: 0,
        epochs: 1,
        batch_size: 32,
        accum: 1,
        virtual_ranks: None,
        lr: 0.05,
        schedule: Schedule::Constant,
        rule: Rule::Sgd {
            momentum: 0.9,
            nesterov: false,
            weight_decay: 5e-4,
        },
        label_smoothing: 0.0,
        augment: false,
        shuffle: true,
        drop_last: false,
        seed: 3,
        precision: Precision::Fp32,
        device: Device::Cpu,
        checkpoint_dir: None,
        resume: false,
        max_steps: Some(3),
        // One evaluation batch (64 images): the tests compare runs, and the whole validation
        // set costs 4 training steps of each run; digits_are_learnt evaluates it all.
        max_val_steps: Some(1),
        broadcast_buffers: true,
        channels_last: false,
        cuda_graphs: false,
        deterministic: false,
        sync_bn: false,
        fused_optim: false,
        pipeline: None,
        init: None,
        init_strict: true,
        should_stop: || false,
        checkpoint_every: None,
        checkpoint_signal: None,
        log_every: None,
    }
}

/// Two epochs of two augmented steps each.
fn two_short_epochs() -> Config {
    Config {
        epochs: 2,
        max_steps: Some(2),
        augment: true,
        ..config()
    }
}

fn single() -> Communicator {
    let plan = Plan {
        rank: 0,
        world_size: 1,
        local_rank: None,
        store: StoreAt::Tcp {
            host: "127.0.0.1".into(),
            port: 0,
            serve: false,
            port_from: "test",
        },
        prefix: String::new(),
        launcher: "test",
        run_id: None,
    };
    Communicator::from_plan(
        plan,
        &Options {
            timeout: Duration::from_secs(30),
            ..Options::default()
        },
        Backend::Cpu,
    )
    .unwrap()
}

/// Parameters (not buffers) by name.
fn params(t: &Trained) -> Vec<(String, Tensor)> {
    let mut v: Vec<(String, Tensor)> =
        t.vs.variables()
            .into_iter()
            .filter(|(_, x)| x.requires_grad())
            .map(|(n, x)| (n, x.detach().copy()))
            .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// How far apart two runs' weights are, relative to how far training moved `b` from `init`:
/// ‖a − b‖ / ‖b − init‖ over all parameters together. Unlike the largest difference of any one
/// weight, a few weights jumping apart at a ReLU or max-pool kink (see the SyncBatchNorm test)
/// barely move it.
fn apart(a: &[(String, Tensor)], b: &[(String, Tensor)], init: &[(String, Tensor)]) -> f64 {
    let l2 = |a: &[(String, Tensor)], b: &[(String, Tensor)]| {
        assert_eq!(a.len(), b.len());
        let sq: f64 = a
            .iter()
            .zip(b)
            .map(|((n, x), (m, y))| {
                assert_eq!(n, m);
                (x - y)
                    .to_kind(Kind::Double)
                    .square()
                    .sum(Kind::Double)
                    .double_value(&[])
            })
            .sum();
        sq.sqrt()
    };
    l2(a, b) / l2(b, init)
}

/// BatchNorm running means and variances by name.
fn running_stats(t: &Trained) -> Vec<(String, Tensor)> {
    let mut v: Vec<(String, Tensor)> =
        t.vs.variables()
            .into_iter()
            .filter(|(n, _)| n.contains(".running_"))
            .map(|(n, x)| (n, x.detach().copy()))
            .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn max_diff(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|((n, x), (m, y))| {
            assert_eq!(n, m);
            (x - y).abs().max().double_value(&[])
        })
        .fold(0.0, f64::max)
}

/// Runs `f(rank, comm)` on two ranks (threads over the CPU backend).
fn on_two_ranks<T: Send + 'static>(
    f: impl Fn(usize, &mut Communicator) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let server = StoreServer::bind("127.0.0.1:0").unwrap();
    let port = server.addr().port();
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            let f = f.clone();
            std::thread::spawn(move || {
                let plan = Plan {
                    rank,
                    world_size: 2,
                    local_rank: Some(rank),
                    store: StoreAt::Tcp {
                        host: "127.0.0.1".into(),
                        port,
                        serve: false,
                        port_from: "test",
                    },
                    prefix: "ddp/".into(),
                    launcher: "test",
                    run_id: None,
                };
                let mut comm = Communicator::from_plan(
                    plan,
                    &Options {
                        timeout: Duration::from_secs(120),
                        ..Options::default()
                    },
                    Backend::Cpu,
                )
                .unwrap();
                f(rank, &mut comm)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// A BatchNorm layer's forward and backward (loss Σ y·u): output, input/weight/bias gradients,
/// running mean and variance; SyncBatchNorm over `group` when given.
fn batch_norm_case(x: &Tensor, u: &Tensor, group: Option<Group>) -> Vec<Tensor> {
    let x = x.copy().set_requires_grad(true);
    let w = Tensor::from_slice(&[1.5f32, -0.5, 2.0]).set_requires_grad(true);
    let b = Tensor::from_slice(&[0.1f32, 0.2, -0.3]).set_requires_grad(true);
    let (rm, rv) = (
        Tensor::from_slice(&[1.0f32, 0.0, -1.0]),
        Tensor::from_slice(&[1.0f32, 2.0, 0.5]),
    );
    let y = match &group {
        Some(g) => syncbn::batch_norm(&x, &w, &b, &rm, &rv, 0.1, 1e-5, g).unwrap(),
        None => x.batch_norm(
            Some(&w),
            Some(&b),
            Some(&rm),
            Some(&rv),
            true,
            0.1,
            1e-5,
            false,
        ),
    };
    (&y * u).sum(Kind::Float).f_backward().unwrap();
    vec![y.detach(), x.grad(), w.grad(), b.grad(), rm, rv]
}

#[test]
fn sync_batch_norm_layer_on_two_ranks_equals_batch_norm_over_the_whole_batch() {
    // It seeds and draws from the global generator: without the lock its draws raced
    // resume_repeats_the_uninterrupted_run_exactly's augmentation (0.15 apart on a 2-core run).
    let _serial = serial();
    // Rank r holds images r, r+2, …; each rank's loss is Σ y·u over its own images, so the sum
    // of the ranks' losses is the one-process loss and the gradients must match it.
    let opts = (Kind::Float, Device::Cpu);
    tch::manual_seed(11);
    let x = Tensor::randn([8, 3, 4, 5], opts) * 3.0
        + Tensor::from_slice(&[25.0f32, -1.0, 0.0]).view([1, 3, 1, 1]);
    let u = Tensor::randn([8, 3, 4, 5], opts);
    let whole = batch_norm_case(&x, &u, None);
    let idx = |r: usize| Tensor::arange_start_step(r as i64, 8, 2, (Kind::Int64, Device::Cpu));
    let flat = |t: &Tensor| Vec::<f32>::try_from(t.flatten(0, -1)).unwrap();
    let shares: std::sync::Arc<Vec<(Vec<f32>, Vec<f32>)>> = std::sync::Arc::new(
        (0..2)
            .map(|r| {
                (
                    flat(&x.index_select(0, &idx(r))),
                    flat(&u.index_select(0, &idx(r))),
                )
            })
            .collect(),
    );
    let parts = on_two_ranks(move |rank, comm| {
        let (xs, us) = &shares[rank];
        let (xs, us) = (
            Tensor::from_slice(xs).view([4, 3, 4, 5]),
            Tensor::from_slice(us).view([4, 3, 4, 5]),
        );
        let lent = Lent::new();
        let group = Group {
            reducer: lent.clone(),
            rank,
            world: 2,
        };
        lent.lend(comm, || batch_norm_case(&xs, &us, Some(group)))
    });
    let close = |what: &str, a: &Tensor, b: &Tensor| {
        let d = (a - b).abs().max().double_value(&[]) / b.abs().max().double_value(&[]).max(1.0);
        assert!(d < 1e-5, "{what}: relative difference {d}");
    };
    for (r, part) in parts.iter().enumerate() {
        close("output", &part[0], &whole[0].index_select(0, &idx(r)));
        close(
            "input gradient",
            &part[1],
            &whole[1].index_select(0, &idx(r)),
        );
        close("running mean", &part[4], &whole[4]);
        close("running var", &part[5], &whole[5]);
    }
    // Weight and bias gradients are per rank (DDP sums/averages them afterwards).
    close("weight gradient", &(&parts[0][2] + &parts[1][2]), &whole[2]);
    close("bias gradient", &(&parts[0][3] + &parts[1][3]), &whole[3]);
}

#[test]
fn sync_batch_norm_fails_with_an_error_when_the_other_rank_is_gone() {
    let results = on_two_ranks(|rank, comm| {
        if rank == 1 {
            return None; // leaves: its communicator closes
        }
        let x = Tensor::ones([4, 3, 2, 2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let (w, b) = (
            Tensor::ones([3], (Kind::Float, Device::Cpu)),
            Tensor::zeros([3], (Kind::Float, Device::Cpu)),
        );
        let (rm, rv) = (
            Tensor::zeros([3], (Kind::Float, Device::Cpu)),
            Tensor::ones([3], (Kind::Float, Device::Cpu)),
        );
        let lent = Lent::new();
        let group = Group {
            reducer: lent.clone(),
            rank,
            world: 2,
        };
        Some(lent.lend(comm, || {
            syncbn::batch_norm(&x, &w, &b, &rm, &rv, 0.1, 1e-5, &group)
                .map(|_| ())
                .unwrap_err()
                .to_string()
        }))
    });
    let msg = results[0].as_ref().unwrap();
    assert!(
        msg.contains("SyncBatchNorm all-reduce") && msg.contains("rank 1"),
        "{msg}"
    );
}

/// Trains `cfg` on two ranks (threads over the CPU backend): each rank's parameters and mean
/// training loss.
fn two_ranks(cfg: Config) -> Vec<(Vec<(String, Tensor)>, f64)> {
    on_two_ranks(move |_, comm| {
        let t = train(&cfg, comm, |_| Ok(())).unwrap();
        (params(&t), t.epochs[0].train_loss)
    })
}

#[test]
fn two_ranks_train_the_same_weights_as_one_rank_with_the_same_global_batch() {
    let _serial = serial();
    // One rank, the global batch of 32 in two interleaved micro-batches of 16 = what two ranks
    // with 16 each compute (BatchNorm statistics included).
    let mut comm = single();
    let one = train(
        &Config {
            accum: 2,
            ..config()
        },
        &mut comm,
        |_| Ok(()),
    )
    .unwrap();
    let two = two_ranks(config());
    let p1 = params(&one);
    // Ranks agree with each other exactly (same averaged gradients, same updates)...
    assert_eq!(max_diff(&two[0].0, &two[1].0), 0.0);
    // ...and with one rank up to float summation order (3 SGD steps, weights ~0.1).
    let d = max_diff(&two[0].0, &p1);
    eprintln!("2 ranks vs 1 rank (accum 2): max abs weight difference {d:e}");
    assert!(d < 1e-5, "2 ranks vs 1 rank: max |Δw| {d}");
    assert!(
        (two[0].1 - one.epochs[0].train_loss).abs() < 1e-5,
        "{} vs {}",
        two[0].1,
        one.epochs[0].train_loss
    );
}

#[test]
fn sync_batch_norm_on_two_ranks_trains_what_one_rank_does_with_the_whole_batch() {
    let _serial = serial();
    // SyncBatchNorm over 2 ranks × 16 = plain BatchNorm over all 32 on one rank (no accum):
    // forward statistics and the gradients through them span both ranks. Only float-level
    // agreement is expected — SyncBatchNorm's fp32 sums are not libtorch's batch_norm kernel's
    // (each layer alone agrees to ~2e-7 relative) — and a ReLU network's gradient is not
    // continuous: where a float-level difference flips one ReLU or max-pool choice, every
    // weight upstream of it gets a visibly different gradient. Scaling a batch by (1 + 1e-7)
    // changed some ResNet-18 gradients by 3 %; in ddp-train's CLI test of the same thing on an
    // AMD EPYC, layer2.0 and everything before it differed by 1e-3 relative after one step,
    // everything after it by 4e-6. Which rounding difference flips a kink is luck (the CPU's
    // SIMD paths decide: a test that compared single weights after two steps measured 1.3e-6 on
    // an Intel CPU and 7.5e-5 on an AMD EPYC, later steps compound it). So: one step, the
    // running statistics (forward only, continuous) compared closely, and the weights as a
    // whole relative to how far the step moved them, which a kink moves only a little.
    let cfg = Config {
        max_steps: Some(1),
        ..config()
    };
    let mut comm = single();
    // LR 0: the same step that leaves the initial weights as they are.
    let init = params(
        &train(
            &Config {
                lr: 0.0,
                ..cfg.clone()
            },
            &mut comm,
            |_| Ok(()),
        )
        .unwrap(),
    );
    let one = train(&cfg, &mut comm, |_| Ok(())).unwrap();
    let p1 = params(&one);
    let mut synced = on_two_ranks({
        let cfg = Config {
            sync_bn: true,
            ..cfg.clone()
        };
        move |_, comm| {
            let t = train(&cfg, comm, |_| Ok(())).unwrap();
            (params(&t), running_stats(&t), t.epochs[0].train_loss)
        }
    });
    let (p2, stats2, loss2) = synced.swap_remove(0);
    assert_eq!(max_diff(&p2, &synced[0].0), 0.0, "ranks agree");
    let stats1 = running_stats(&one);
    assert_eq!(
        (stats1.len(), stats2.len()),
        (40, 40),
        "ResNet-18's 20 BatchNorms"
    );
    for ((name, a), (_, b)) in stats2.iter().zip(&stats1) {
        let d = (a - b).abs().max().double_value(&[]) / b.abs().max().double_value(&[]).max(1e-3);
        assert!(d < 1e-5, "{name}: relative difference {d}");
    }
    let d = apart(&p2, &p1, &init);
    eprintln!(
        "2 ranks with SyncBatchNorm vs 1 rank: {d:e} of the distance moved (largest weight difference {:e})",
        max_diff(&p2, &p1)
    );
    // AMD EPYC: 6e-6 (no kink flipped); per-rank BatchNorm (below): 1.1.
    assert!(
        d < 1e-2,
        "2 ranks SyncBatchNorm vs 1 rank: {d} of the distance moved"
    );
    assert!(
        (loss2 - one.epochs[0].train_loss).abs() < 1e-5,
        "{loss2} vs {}",
        one.epochs[0].train_loss
    );
    // Per-rank BatchNorm computes something else (the test can tell the two apart).
    let local = two_ranks(cfg);
    let far = apart(&local[0].0, &p1, &init);
    eprintln!("2 ranks with per-rank BatchNorm vs 1 rank: {far:e} of the distance moved");
    assert!(far > 0.3, "per-rank BN {far} vs sync {d}");
}

#[test]
fn resume_repeats_the_uninterrupted_run_exactly() {
    let _serial = serial();
    let base = two_short_epochs();
    let a = tempfile::tempdir().unwrap();
    let straight = train(
        &Config {
            checkpoint_dir: Some(a.path().into()),
            ..base.clone()
        },
        &mut single(),
        |_| Ok(()),
    )
    .unwrap();
    assert!(
        a.path().join("last.safetensors").exists() && a.path().join("best.safetensors").exists()
    );

    let b = tempfile::tempdir().unwrap();
    let first = Config {
        epochs: 1,
        checkpoint_dir: Some(b.path().into()),
        ..base.clone()
    };
    train(&first, &mut single(), |_| Ok(())).unwrap();
    let resumed = train(
        &Config {
            checkpoint_dir: Some(b.path().into()),
            resume: true,
            ..base
        },
        &mut single(),
        |_| Ok(()),
    )
    .unwrap();
    assert_eq!(resumed.resumed_from, Some(1));
    assert_eq!(resumed.epochs.len(), 1);
    assert_eq!(
        max_diff(&params(&straight), &params(&resumed)),
        0.0,
        "bit-identical on the CPU"
    );
    assert_eq!(straight.epochs[1].train_loss, resumed.epochs[0].train_loss);
    assert_eq!(straight.epochs[1].val_top1, resumed.epochs[0].val_top1);
}

#[test]
fn digits_are_learnt() {
    let _serial = serial();
    let cfg = Config {
        epochs: 10,
        batch_size: 64,
        max_steps: None,
        // 0.1 is chaotic on 1.4k images (runs of the same set-up end anywhere in 73–96%).
        lr: 0.02,
        schedule: Schedule::Cosine { warmup: 1.0 },
        augment: true,
        max_val_steps: None,
        ..config()
    };
    let t = train(&cfg, &mut single(), |e| {
        let Event::Epoch(e) = e else { return Ok(()) };
        eprintln!(
            "epoch {} loss {:.3} top1 {:.1} val {:.1} ({:.1} s)",
            e.epoch, e.train_loss, e.train_top1, e.val_top1, e.seconds
        );
        Ok(())
    })
    .unwrap();
    let last = t.epochs.last().unwrap();
    assert!(last.val_top1 >= 93.0, "val top-1 {:.1}%", last.val_top1);
}

/// `cfg` cut into stages on the CPU at `split`, with `micro` micro-batches.
fn piped(cfg: Config, split: &str, stages: usize, micro: usize) -> Config {
    Config {
        accum: micro,
        pipeline: Some(Pipeline {
            split: split.parse().unwrap(),
            devices: vec![Device::Cpu; stages],
        }),
        ..cfg
    }
}

/// Largest |a − b| over all parameters relative to the largest |b|.
fn relative(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> f64 {
    let scale = b
        .iter()
        .map(|(_, t)| t.abs().max().double_value(&[]))
        .fold(0.0, f64::max);
    max_diff(a, b) / scale
}

#[test]
fn a_pipeline_computes_what_gradient_accumulation_computes() {
    let _serial = serial();
    // ResNet-18 (balanced: conv1…layer2.1 | layer3.0…fc), and ResNet-50 at seed 004's cut
    // (layer3) and balanced, each against one device with --accum 4: 3 SGD steps of 4
    // micro-batches. The same operations in the same order on the CPU (backward in forward
    // order accumulates the gradients as accumulation does), so equal bit for bit; the issue
    // asks for 1e-5 relative.
    for (arch, batch, split, stages) in [
        (Arch::ResNet18, 32, "balanced", 2),
        (Arch::ResNet18, 32, "layer2,layer4", 3),
        (Arch::ResNet50, 16, "layer3", 2),
        (Arch::ResNet50, 16, "balanced", 2),
    ] {
        let base = Config {
            arch,
            batch_size: batch,
            ..config()
        };
        let accum = train(
            &Config {
                accum: 4,
                ..base.clone()
            },
            &mut single(),
            |_| Ok(()),
        )
        .unwrap();
        let pipe = train(&piped(base, split, stages, 4), &mut single(), |_| Ok(())).unwrap();
        let cut: Vec<_> = pipe.epochs[0]
            .stages
            .iter()
            .map(|s| format!("{}…{}", s.first, s.last))
            .collect();
        let d = relative(&params(&pipe), &params(&accum));
        eprintln!(
            "{} {split} {cut:?}: relative weight difference {d:e}",
            arch.name()
        );
        assert_eq!(cut.len(), stages);
        assert!(d <= 1e-5, "{} {split}: {d}", arch.name());
        assert_eq!(d, 0.0, "{} {split}: not bit-identical", arch.name());
        assert_eq!(max_diff(&running_stats(&pipe), &running_stats(&accum)), 0.0);
        assert_eq!(pipe.epochs[0].train_loss, accum.epochs[0].train_loss);
        assert_eq!(pipe.epochs[0].val_top1, accum.epochs[0].val_top1);
        let counted = |t: &Trained| {
            t.vs.variables()
                .into_iter()
                .filter(|(n, _)| n.ends_with("num_batches_tracked"))
                .map(|(_, v)| v.int64_value(&[]))
                .collect::<Vec<_>>()
        };
        // 3 steps × 4 micro-batches through every BatchNorm.
        assert!(
            counted(&pipe).iter().all(|&c| c == 12),
            "{:?}",
            counted(&pipe)
        );
    }
    let seed4 = &train(
        &piped(
            Config {
                arch: Arch::ResNet50,
                batch_size: 8,
                max_steps: Some(1),
                ..config()
            },
            "layer3",
            2,
            1,
        ),
        &mut single(),
        |_| Ok(()),
    )
    .unwrap()
    .epochs[0]
        .stages;
    assert_eq!(
        (seed4[0].last.as_str(), seed4[1].first.as_str()),
        ("layer2.3", "layer3.0")
    );
}

#[test]
fn two_ranks_of_two_stages_train_what_one_rank_of_two_stages_does_with_the_whole_batch() {
    let _serial = serial();
    let one_rank = piped(config(), "layer3", 2, 4);
    let one = train(&one_rank, &mut single(), |_| Ok(())).unwrap();
    let two = two_ranks(piped(config(), "layer3", 2, 2));
    assert_eq!(max_diff(&two[0].0, &two[1].0), 0.0);
    // The same micro-batches of 8; only the order of the gradient sums differs (two per rank,
    // then the all-reduce, against four on one rank). Measured as the SyncBatchNorm test
    // measures (see there why): relative to how far the 3 steps moved the weights, which a
    // ReLU or max-pool kink flipped by rounding moves only a little. Largest single weight:
    // 4.9e-4 relative on an AMD EPYC (under 1e-5 on the machine this was written on); a wrong
    // gradient scale or a stage left out of the all-reduce is of the order of 1.
    let init = params(
        &train(
            &Config {
                lr: 0.0,
                ..one_rank.clone()
            },
            &mut single(),
            |_| Ok(()),
        )
        .unwrap(),
    );
    let d = apart(&two[0].0, &params(&one), &init);
    eprintln!(
        "2 ranks × 2 stages vs 1 rank × 2 stages: {d:e} of the distance moved (largest weight difference {:e} relative)",
        relative(&two[0].0, &params(&one))
    );
    assert!(d < 1e-2, "{d} of the distance moved");
}

#[test]
fn checkpoints_move_between_split_and_unsplit_runs() {
    let _serial = serial();
    let base = two_short_epochs();
    let unsplit = Config {
        accum: 4,
        ..base.clone()
    };
    let split = piped(base, "layer3", 2, 4);
    let straight = train(&split, &mut single(), |_| Ok(())).unwrap();
    // Epoch 1 split, epoch 2 unsplit; and the other way round.
    for (first, then) in [(&split, &unsplit), (&unsplit, &split)] {
        let dir = tempfile::tempdir().unwrap();
        let ck = |c: &Config, epochs, resume| Config {
            epochs,
            resume,
            checkpoint_dir: Some(dir.path().into()),
            ..c.clone()
        };
        train(&ck(first, 1, false), &mut single(), |_| Ok(())).unwrap();
        let resumed = train(&ck(then, 2, true), &mut single(), |_| Ok(())).unwrap();
        assert_eq!(resumed.resumed_from, Some(1));
        assert_eq!(
            max_diff(&params(&straight), &params(&resumed)),
            0.0,
            "{} stage(s) then {}",
            first.pipeline.as_ref().map_or(1, |p| p.devices.len()),
            then.pipeline.as_ref().map_or(1, |p| p.devices.len()),
        );
        assert_eq!(straight.epochs[1].train_loss, resumed.epochs[0].train_loss);
    }
}

#[test]
fn pipeline_settings_that_cannot_work_are_usage_errors() {
    let _serial = serial();
    let err = |cfg: Config| match train(&cfg, &mut single(), |_| Ok(())) {
        Err(train::Error::Usage(m)) => m,
        other => panic!("{:?}", other.map(|t| t.epochs)),
    };
    let m = err(piped(config(), "balanced", 11, 1));
    assert!(
        m.contains("--stages 11 is more than the model's 10 blocks"),
        "{m}"
    );
    let m = err(piped(config(), "balanced", 2, 64));
    assert!(
        m.contains("--micro-batches 64 is more than the 32 samples"),
        "{m}"
    );
    let m = err(piped(config(), "balanced", 2, 3));
    assert!(m.contains("not divisible by --micro-batches 3"), "{m}");
    let m = err(piped(config(), "layer3,layer4", 2, 1));
    assert!(m.contains("names 2 cut(s) for 2 stages"), "{m}");
    let mut mixed = piped(config(), "balanced", 2, 1);
    mixed.pipeline.as_mut().unwrap().devices[1] = Device::Cuda(0);
    let m = err(mixed);
    assert!(
        m.contains("must all be on CUDA devices or all on the CPU"),
        "{m}"
    );
}

/// Calls of [`signal_at_call`] so far, and the call from which it says the checkpoint signal has
/// come (0: never); set by the test that holds [`serial`].
static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static SIGNAL_AT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A checkpoint signal that arrives before the `SIGNAL_AT`-th step of a run (1-based, counted
/// over its epochs).
fn signal_at_call() -> bool {
    use std::sync::atomic::Ordering::SeqCst;
    let call = CALLS.fetch_add(1, SeqCst) + 1;
    let at = SIGNAL_AT.load(SeqCst);
    at != 0 && call >= at
}

/// Runs `cfg` into `dir` with the checkpoint signal coming before the run's `at`-th step: the
/// error it stops with.
fn signalled(cfg: &Config, dir: &Path, at: usize) -> train::Error {
    use std::sync::atomic::Ordering::SeqCst;
    CALLS.store(0, SeqCst);
    SIGNAL_AT.store(at, SeqCst);
    let run = train(
        &Config {
            checkpoint_dir: Some(dir.into()),
            checkpoint_signal: Some(signal_at_call),
            ..cfg.clone()
        },
        &mut single(),
        |_| Ok(()),
    );
    SIGNAL_AT.store(0, SeqCst);
    run.expect_err("the signal stops the run")
}

/// `--resume` from `dir` to the end of `cfg`: equal, bit for bit, to the uninterrupted run.
fn assert_resumes_to(cfg: &Config, dir: &Path, straight: &Trained, what: &str) {
    let resumed = train(
        &Config {
            checkpoint_dir: Some(dir.into()),
            resume: true,
            ..cfg.clone()
        },
        &mut single(),
        |_| Ok(()),
    )
    .unwrap();
    assert_eq!(
        max_diff(&params(straight), &params(&resumed)),
        0.0,
        "{what}: weights"
    );
    assert_eq!(
        max_diff(&running_stats(straight), &running_stats(&resumed)),
        0.0,
        "{what}: BatchNorm statistics"
    );
    // The resumed epoch reports the whole epoch, as the uninterrupted one does.
    let (a, b) = (
        straight.epochs.last().unwrap(),
        resumed.epochs.last().unwrap(),
    );
    assert_eq!(
        (
            a.epoch,
            a.train_loss,
            a.train_top1,
            a.val_loss,
            a.skipped_steps
        ),
        (
            b.epoch,
            b.train_loss,
            b.train_top1,
            b.val_loss,
            b.skipped_steps
        ),
        "{what}: the last epoch's figures"
    );
}

#[test]
fn the_checkpoint_signal_stops_at_a_step_that_resume_continues_bit_for_bit() {
    let _serial = serial();
    let resnet = Config {
        epochs: 2,
        max_steps: Some(4),
        // Resuming is the subject: two evaluation batches say the figures are the same.
        max_val_steps: Some(2),
        augment: true,
        ..config()
    };
    // The loop's stops and resumes are the subject: the small network, and ResNet-18 where it
    // is cut into stages.
    let base = Config {
        script: Some(small_net()),
        ..resnet.clone()
    };
    let accum = Config {
        accum: 2,
        ..base.clone()
    };
    let staged = piped(resnet, "layer3", 2, 2);
    let synthetic = Config {
        data: Source::Synthetic {
            train: 256,
            test: 64,
            classes: 10,
            seed: 3,
            size: 32,
        },
        ..base.clone()
    };
    // Steps 1-4 are epoch 1's, 5-8 epoch 2's: mid-epoch (2, 7) and at an epoch's start (5, whose
    // checkpoint the epoch's end already wrote). Each set-up's uninterrupted run once, for all
    // the steps it is stopped at (the same run to the bit each time on the CPU).
    let cases: [(&Config, &[(usize, &str)]); 4] = [
        (
            &base,
            &[
                (2, "before step 2"),
                (5, "before epoch 2"),
                (7, "before step 3 of epoch 2"),
            ],
        ),
        (&accum, &[(7, "--accum 2")]),
        (&staged, &[(3, "two stages")]),
        (&synthetic, &[(6, "synthetic data")]),
    ];
    for (cfg, stops) in cases {
        let straight = train(cfg, &mut single(), |_| Ok(())).unwrap();
        for &(at, what) in stops {
            let dir = tempfile::tempdir().unwrap();
            match signalled(cfg, dir.path(), at) {
                train::Error::Checkpointed { epoch, step, steps } => {
                    assert_eq!(
                        (epoch, step, steps),
                        (1 + (at - 1) / 4, (at - 1) % 4, 4),
                        "{what}"
                    )
                }
                other => panic!("{what}: {other}"),
            }
            assert_resumes_to(cfg, dir.path(), &straight, what);
        }
    }
}

#[test]
fn checkpoints_every_n_steps_let_a_stopped_run_resume_bit_for_bit() {
    let _serial = serial();
    static STOP_AT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static STEPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    fn stop() -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        STEPS.fetch_add(1, SeqCst) + 1 >= STOP_AT.load(SeqCst)
    }
    // The loop's checkpoints and stop are the subject: the small network.
    let cfg = Config {
        epochs: 2,
        max_steps: Some(4),
        max_val_steps: Some(2),
        augment: true,
        checkpoint_every: Some(3),
        script: Some(small_net()),
        ..config()
    };
    let straight = train(&cfg, &mut single(), |_| Ok(())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut written = Vec::new();
    // Stopped (SIGTERM) before step 8: the checkpoint after step 6 (step 2 of epoch 2) is the
    // last; the one after step 3 came before it, and none at step 4, an epoch's end.
    STOP_AT.store(8, std::sync::atomic::Ordering::SeqCst);
    STEPS.store(0, std::sync::atomic::Ordering::SeqCst);
    let run = train(
        &Config {
            checkpoint_dir: Some(dir.path().into()),
            should_stop: stop,
            ..cfg.clone()
        },
        &mut single(),
        |e| {
            if let Event::Checkpoint(c) = e {
                written.push((c.epoch, c.step, c.signal));
            }
            Ok(())
        },
    );
    assert!(
        matches!(
            run,
            Err(train::Error::Interrupted {
                epoch: 2,
                step: 3,
                ..
            })
        ),
        "{run:?}"
    );
    assert_eq!(written, [(1, 3, false), (2, 2, false)]);
    assert_resumes_to(&cfg, dir.path(), &straight, "after step 6");
}
