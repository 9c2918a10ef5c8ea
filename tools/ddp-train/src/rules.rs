//! The flags as a run: each cross-flag rule (what needs what, what excludes what, the
//! defaults that depend on other flags) in one place, and the training [`Config`] they make.
//! `train::trainer::setup` checks what depends on the world size, known only after the
//! rendezvous.

use anyhow::{Result, bail};
use device::{DeviceArg, Env};
use train::optim::Rule;
use train::pipeline::{Pipeline, Split};
use train::resnet::{Arch, Stem};
use train::trainer::{Config, Precision};
use train_data::data::Source;
use train_data::images::Transform;

use crate::{Cli, ModelArg, OptimizerKind, data_arg};

/// The devices of the stages (one without a pipeline), checked against the machine; usage
/// errors for lists that cannot work.
pub(crate) fn stage_devices(cli: &Cli, env: &Env) -> Result<Vec<tch::Device>> {
    let usage = |m: String| anyhow::Error::new(cli_common::UsageError(m));
    let listed = cli.stage_devices.as_ref().map(|l| l.value.clone());
    let stages = cli.stages.or(listed.as_ref().map(Vec::len)).unwrap_or(1);
    if stages == 0 {
        return Err(usage("--stages must be at least 1".into()));
    }
    let args = match listed {
        Some(l) if l.len() != stages => {
            return Err(usage(format!(
                "--stage-devices lists {} device(s) for --stages {stages}",
                l.len()
            )));
        }
        Some(l) => l,
        None if stages == 1 => return Ok(vec![cli.gpu.device.resolve(env)?]),
        None => {
            let gpus = device::cuda_device_count();
            let first = match cli.gpu.device {
                DeviceArg::Cpu => None,
                DeviceArg::Auto if gpus == 0 => None,
                DeviceArg::Cuda(n) => Some(n),
                DeviceArg::Auto => Some(env.local_rank.unwrap_or(0) * stages),
            };
            match first {
                None => vec![DeviceArg::Cpu; stages],
                Some(n) => (n..n + stages).map(DeviceArg::Cuda).collect(),
            }
        }
    };
    args.into_iter()
        .map(|d| {
            d.resolve(env).map_err(|e| match e {
                device::Error::Unavailable { asked, why } => usage(format!(
                    "stage {asked} ({}) asked for, but {why}",
                    match &cli.stage_devices {
                        Some(list) => format!("--stage-devices {}", list.text),
                        None => format!("--stages {stages} on this rank"),
                    }
                )),
                e => usage(e.to_string()),
            })
        })
        .collect()
}

/// The training `Config`: one field per flag.
pub(crate) fn config(cli: &Cli, devices: &[tch::Device]) -> Result<Config> {
    let device = devices[0];
    let precision = cli.gpu.precision;
    if let (ModelArg::TorchScript(_), Some(_)) = (&cli.model.value, cli.stem) {
        return cli_common::usage(
            "--stem picks a ResNet's first layers: a TorchScript model has its own",
        );
    }
    if let (Some(_), Some(v)) = (cli.dump_batches, cli.virtual_ranks) {
        bail!(
            "--virtual-ranks {v}: not with --dump-batches (it shows a rank's batches of a run \
             without virtual ranks)"
        );
    }
    let stem = cli.stem.unwrap_or(Stem::ImageNet);
    check_peak_lr(cli)?;
    let data = Source::parse(data_arg(cli), cli.seed)?;
    let images = image_options(cli, &data)?;
    let data = match &cli.val_data {
        Some(v) => data.with_val(v.clone()),
        None => data,
    };
    Ok(Config {
        arch: match &cli.model.value {
            ModelArg::ResNet(a) => *a,
            ModelArg::TorchScript(_) => Arch::ResNet18,
        },
        script: match &cli.model.value {
            ModelArg::TorchScript(file) => Some(file.clone()),
            ModelArg::ResNet(_) => None,
        },
        stem,
        augment: cli.augment || data.is_files(),
        data,
        images,
        epochs: cli.epochs,
        batch_size: cli.batch_size,
        virtual_ranks: cli.virtual_ranks,
        accum: micro_batches(cli, devices.len())?,
        lr: cli.lr,
        schedule: cli.schedule.value,
        rule: rule(cli),
        label_smoothing: cli.label_smoothing,
        shuffle: !cli.no_shuffle,
        drop_last: cli.drop_last,
        seed: cli.seed,
        precision,
        device,
        pipeline: (devices.len() > 1).then(|| Pipeline {
            split: cli.split_at.value.clone(),
            devices: devices.to_vec(),
        }),
        checkpoint_dir: cli.checkpoint_dir.clone(),
        resume: cli.resume,
        max_steps: cli.max_steps,
        max_val_steps: cli.max_val_steps,
        prefetch: cli.prefetch,
        broadcast_buffers: !cli.no_broadcast_buffers,
        init: cli.init.clone(),
        init_strict: !cli.init_non_strict,
        channels_last: cli.channels_last.or(device.is_cuda()),
        // One device's step: a pipeline runs eagerly.
        cuda_graphs: cli.graphs.cuda_graphs.or(device.is_cuda()
            && precision != Precision::Fp16
            && devices.len() == 1
            && cli.virtual_ranks.is_none()),
        deterministic: cli.deterministic,
        sync_bn: cli.sync_bn,
        fused_optim: cli.fused_optim.or(device.is_cuda()),
        should_stop: cli_common::interrupt::requested,
        checkpoint_every: cli.checkpoint_every,
        checkpoint_signal: (cli.checkpoint_signal.value)
            .map(|_| cli_common::interrupt::checkpoint_requested as fn() -> bool),
        // Set once the rank is known: only rank 0 writes them.
        log_every: None,
    })
}

/// The optimiser's update rule: --optimizer with its flags (AdamW's betas and eps as
/// torch.optim.AdamW's defaults).
fn rule(cli: &Cli) -> Rule {
    match cli.optimizer {
        OptimizerKind::Sgd => Rule::Sgd {
            momentum: cli.momentum,
            nesterov: cli.nesterov,
            weight_decay: cli.weight_decay,
        },
        OptimizerKind::Adamw => Rule::AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: cli.weight_decay,
        },
    }
}

/// The learning rate at the schedule's peak fits a float32 (the optimiser computes in
/// float32), else a usage error.
fn check_peak_lr(cli: &Cli) -> Result<()> {
    let (peak, at) = cli.schedule.value.peak(cli.lr, cli.epochs);
    if peak.is_nan() || peak > f32::MAX as f64 {
        return cli_common::usage(format!(
            "--lr {} with --schedule {} reaches {peak:e} at epoch {}, more than a float32 holds \
             (the optimiser computes in float32)",
            cli.lr,
            cli.schedule.text,
            at + 1
        ));
    }
    Ok(())
}

/// Micro-batches a step splits into: --accum on one device, --micro-batches over a pipeline's
/// stages (each flag a usage error with the other layout).
fn micro_batches(cli: &Cli, stages: usize) -> Result<usize> {
    Ok(match (stages, cli.micro_batches) {
        (1, _) if cli.split_at.value != Split::Balanced => bail!(
            "--split-at {} needs --stages 2 or more (or --stage-devices with two devices)",
            cli.split_at.text
        ),
        (1, Some(_)) => bail!(
            "--micro-batches needs --stages 2 or more (on one device, --accum M splits the batch)"
        ),
        (1, None) => cli.accum,
        (_, _) if cli.accum != 1 => {
            bail!("with --stages, split the batch with --micro-batches (GPipe) instead of --accum")
        }
        (_, m) => m.unwrap_or(1),
    })
}

/// The Slurm job `--requeue-on-signal` puts back into the queue (a usage error outside Slurm).
pub(crate) fn requeue_job(
    cli: &Cli,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>> {
    if !cli.requeue_on_signal {
        return Ok(None);
    }
    if cli.checkpoint_signal.value.is_none() {
        bail!("--requeue-on-signal needs a --checkpoint-signal");
    }
    match env("SLURM_JOB_ID") {
        Some(id) if !id.is_empty() => Ok(Some(id)),
        _ => bail!("--requeue-on-signal: not in a Slurm job (SLURM_JOB_ID is not set)"),
    }
}

/// How image-folder data is prepared, from the flags that only it takes (a usage error with
/// other data).
fn image_options(cli: &Cli, data: &Source) -> Result<train_data::images::ImageOptions> {
    use train_data::images::{IMAGENET_MEAN, IMAGENET_STD, ImageOptions};
    if cli.num_classes.is_some() && !matches!(data, Source::Shards { .. } | Source::RecordIo { .. })
    {
        bail!(
            "--num-classes applies to --data recordio:PREFIX and wds:PATTERN (an image folder's \
             classes are its folders, CIFAR's are fixed)"
        );
    }
    if !data.is_files() {
        let given = [
            ("--val-data", cli.val_data.is_some()),
            ("--transform", cli.transform.is_some()),
            ("--image-size", cli.image_size.is_some()),
            ("--normalize", cli.normalize.is_some()),
            ("--workers", cli.workers.is_some()),
            ("--shuffle-buffer", cli.shuffle_buffer.is_some()),
            ("--max-pixels", cli.max_pixels.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
            bail!(
                "{flag} applies to --data imagefolder:DIR, recordio:PREFIX and wds:PATTERN (these images are decoded already)"
            );
        }
        return Ok(ImageOptions::default());
    }
    if cli.augment {
        bail!("--augment is CIFAR's crop and flip; image folders take --transform");
    }
    let transform = cli.transform.unwrap_or(Transform::Imagenet);
    let (mean, std) = cli
        .normalize
        .as_ref()
        .map_or((IMAGENET_MEAN, IMAGENET_STD), |n| {
            (n.value.mean, n.value.std)
        });
    if cli.shuffle_buffer.is_some() && !matches!(data, Source::Shards { .. }) {
        bail!("--shuffle-buffer applies to --data wds:PATTERN (other sources are shuffled whole)");
    }
    let mut options = ImageOptions {
        size: cli.image_size.unwrap_or(224),
        transform,
        mean,
        std,
        workers: workers(cli),
        shuffle_buffer: cli.shuffle_buffer.unwrap_or(1000),
        max_bad: cli.max_bad_inputs,
        decode: Default::default(),
        classes: cli.num_classes,
    };
    if let Some(n) = cli.max_pixels {
        options.decode.max_pixels = n;
    }
    Ok(options)
}

/// Decoding threads per rank: --workers, else the rank's CPU share without OMP_NUM_THREADS.
pub(crate) fn workers(cli: &Cli) -> usize {
    cli.workers.unwrap_or_else(|| cli.cpu.workers().threads)
}
