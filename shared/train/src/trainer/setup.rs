//! Before the first step: the flags checked against the data and the world, the data loaded, the
//! model built and placed (on one device or as pipeline stages), its weights copied or broadcast.

use std::collections::BTreeMap;
use std::ops::Range;

use collectives::Communicator;
use tch::{Device, Kind, Tensor, nn};
use train_data::data::Dataset;

use super::{Config, Named, Precision, named};
use crate::ddp::{self, Buckets};
use crate::flat::FlatParams;
use crate::net::{Net, ScriptNet};
use crate::optim::Optimizer;
use crate::pipeline::{Pipeline, Split, Stage};
use crate::resnet::ResNet;
use crate::scaler::GradScaler;
use crate::syncbn::Lent;
use crate::{Error, Result, checkpoint};

/// The settings that cannot work together, as usage errors; the per-rank batch.
pub(super) fn check(cfg: &Config, world: usize) -> Result<usize> {
    if cfg.script.is_some() {
        if cfg.pipeline.is_some() {
            return Err(Error::Usage(
                "a TorchScript model runs whole on one device: --stages needs a ResNet".into(),
            ));
        }
        if cfg.sync_bn {
            return Err(Error::Usage(
                "--sync-bn swaps a ResNet's BatchNorms for SyncBatchNorms; a TorchScript \
                 model's cannot be swapped once scripted: train it without --sync-bn"
                    .into(),
            ));
        }
    }
    if !cfg.batch_size.is_multiple_of(world) {
        return Err(Error::Usage(format!(
            "--batch-size {} is not divisible by the world size {world}",
            cfg.batch_size
        )));
    }
    let local = cfg.batch_size / world;
    let flag = match cfg.pipeline {
        Some(_) => "--micro-batches",
        None => "--accum",
    };
    if cfg.accum > local {
        return Err(Error::Usage(format!(
            "{flag} {} is more than the {local} samples per rank and step (--batch-size {} over \
             {world} rank(s))",
            cfg.accum, cfg.batch_size
        )));
    }
    if cfg.accum == 0 || !local.is_multiple_of(cfg.accum) {
        return Err(Error::Usage(format!(
            "the per-rank batch {local} is not divisible by {flag} {}",
            cfg.accum
        )));
    }
    if local / cfg.accum < 2 {
        // PyTorch: "Expected more than 1 value per channel when training" (BatchNorm).
        return Err(Error::Usage(format!(
            "BatchNorm cannot train on one image at a time: --batch-size {} over {world} rank(s) \
             and {flag} {} leaves 1 per rank and micro-batch; give each at least 2",
            cfg.batch_size, cfg.accum
        )));
    }
    if let Some(p) = &cfg.pipeline {
        check_pipeline(cfg, p, world)?;
    }
    if let Some(v) = cfg.virtual_ranks {
        check_virtual(cfg, v, world)?;
    }
    match cfg.precision {
        Precision::Fp16 | Precision::Bf16 if !cfg.device.is_cuda() => {
            return Err(Error::Usage(format!(
                "--precision {} needs a CUDA device (autocast is CUDA-only here); use fp32 on the CPU",
                cfg.precision.name()
            )));
        }
        _ => {}
    }
    if cfg.cuda_graphs && !cfg.device.is_cuda() {
        return Err(Error::Usage(
            "CUDA graphs need a CUDA device (--cuda-graphs off on the CPU)".into(),
        ));
    }
    if cfg.cuda_graphs && cfg.precision == Precision::Fp16 {
        return Err(Error::Usage(
            "CUDA graphs cannot hold fp16's loss scaler (it decides on the host whether to skip a step): \
             use --precision bf16, or --cuda-graphs off with fp16"
                .into(),
        ));
    }
    Ok(local)
}

/// What a pipeline cannot be combined with.
/// `--virtual-ranks V` on `world` processes: what it cannot be combined with, and sizes that
/// divide.
fn check_virtual(cfg: &Config, v: usize, world: usize) -> Result<()> {
    let refuse = |why: String| Err(Error::Usage(format!("--virtual-ranks {v}: {why}")));
    if v == 0 || !v.is_multiple_of(world) {
        return refuse(format!(
            "the processes ({world}) must divide the virtual ranks (each computes the same number)"
        ));
    }
    if !cfg.batch_size.is_multiple_of(v) || cfg.batch_size / v < 2 {
        return refuse(format!(
            "--batch-size {} must give every virtual rank the same batch of at least 2",
            cfg.batch_size
        ));
    }
    let with = if cfg.accum != 1 {
        "--accum (each virtual rank is one micro-batch: give more virtual ranks instead)"
    } else if cfg.pipeline.is_some() {
        "a pipeline of stages"
    } else if cfg.sync_bn {
        "--sync-bn (virtual ranks run one after another, SyncBatchNorm needs them at once)"
    } else if cfg.cuda_graphs {
        "CUDA graphs (--cuda-graphs off)"
    } else if !cfg.broadcast_buffers {
        "--no-broadcast-buffers (only rank 0's BatchNorm statistics are kept)"
    } else if matches!(cfg.data, train_data::data::Source::Shards { .. }) {
        "wds shards (their order is split by the processes' streams)"
    } else {
        return Ok(());
    };
    refuse(format!("not with {with}"))
}

pub(super) fn check_pipeline(cfg: &Config, p: &Pipeline, world: usize) -> Result<()> {
    if p.devices.first() != Some(&cfg.device) {
        return Err(Error::Usage(format!(
            "the first stage's device ({:?}) must be the run's device ({:?}), where the data lives",
            p.devices.first(),
            cfg.device
        )));
    }
    if p.devices
        .iter()
        .any(|d| d.is_cuda() != cfg.device.is_cuda())
    {
        return Err(Error::Usage(
            "the stages must all be on CUDA devices or all on the CPU".into(),
        ));
    }
    if p.devices.len() > 1 && cfg.cuda_graphs {
        return Err(Error::Usage(
            "CUDA graphs capture one device's step: --cuda-graphs off with --stages".into(),
        ));
    }
    if p.devices.len() > 1 && cfg.sync_bn && world > 1 {
        return Err(Error::Usage(
            "--sync-bn cannot be combined with --stages over several ranks (each stage's \
             BatchNorms would all-reduce from the backward pass's per-device threads)"
                .into(),
        ));
    }
    Ok(())
}

/// The model and what trains it, as [`setup`] makes them.
pub(super) struct Parts {
    pub(super) vs: nn::VarStore,
    pub(super) model: Net,
    pub(super) named: Named,
    /// One per pipeline stage (one for the whole model), with its optimiser in `opts`.
    pub(super) stages: Vec<StageParts>,
    pub(super) opts: Vec<Optimizer>,
    pub(super) scaler: GradScaler,
    /// The communicator's loan to the SyncBatchNorms (None: per-rank BatchNorm).
    pub(super) lent: Option<std::sync::Arc<Lent>>,
}

/// One stage of the model: where it runs, and its parameters as one flat buffer (with the
/// flat gradient) whose DDP buckets are ranges of it.
pub(super) struct StageParts {
    pub(super) plan: Stage,
    pub(super) flat: FlatParams,
    pub(super) buckets: Vec<(i64, i64)>,
}

/// The device the last stage runs on: where the logits, the loss and the epoch sums are.
pub(super) fn out_device(stages: &[StageParts]) -> Device {
    stages
        .last()
        .expect("a model has one stage at least")
        .plan
        .device
}

/// The data, and the model built from `cfg.seed` (placed on its stages' devices) with each
/// stage's flat buffers, buckets and optimiser, and the loss scaler; every rank ends with rank
/// 0's weights and buffers (DDP's constructor: data, model, stages, flat buffers and buckets,
/// optimisers, rank 0's weights broadcast).
pub(super) fn setup(cfg: &Config, comm: &mut Communicator) -> Result<(Dataset, Dataset, Parts)> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let (train_set, test_set) = cfg.data.load(cfg.device, &cfg.images, cfg.seed)?;
    check_train_set(cfg, &train_set)?;
    let (vs, mut model) = build_model(cfg, &train_set)?;
    if let Net::Script(s) = &model {
        check_script_output(s, &vs, &train_set, cfg.device)?;
    }
    let plans = stage_plans(cfg, &model, &vs, &train_set)?;
    if plans.len() > 1 {
        let place: Vec<(Range<usize>, Device)> =
            plans.iter().map(|s| (s.units.clone(), s.device)).collect();
        // (A TorchScript model is one stage: `check` refuses --stages.)
        if let Net::ResNet(r) = &mut model {
            r.place(&vs, &place)?;
        }
    }
    // The communicator is lent to the SyncBatchNorms for each step's forward and backward.
    let lent = (cfg.sync_bn && world > 1).then(Lent::new);
    if let Some(l) = &lent {
        // (A TorchScript model is refused with --sync-bn by `check`.)
        if let Net::ResNet(r) = &mut model {
            r.sync_batch_norm(crate::syncbn::Group {
                reducer: l.clone(),
                rank,
                world,
            });
        }
    }
    if cfg.channels_last {
        for t in vs.variables().values() {
            gpu_runtime::shim::channels_last_(t)?;
        }
    }
    let named = named(&vs);
    let (stages, opts) = stage_parts(cfg, &model, &named, plans, comm)?;
    let scaler = GradScaler::new(cfg.precision == Precision::Fp16);

    // Start: everyone takes rank 0's weights and buffers (DDP's constructor).
    let all: Vec<Tensor> = named
        .all_sorted
        .iter()
        .map(|(_, t)| t.shallow_clone())
        .collect();
    ddp::broadcast(comm, &all)?;
    let parts = Parts {
        vs,
        model,
        named,
        stages,
        opts,
        scaler,
        lent,
    };
    Ok((train_set, test_set, parts))
}

/// The training set can be trained on: its class names are text, and it holds a batch.
fn check_train_set(cfg: &Config, train_set: &Dataset) -> Result<()> {
    if let Some(name) = train_set.non_utf8_class() {
        return Err(Error::Data(format!(
            "the class name {name:?} is not UTF-8: records, checkpoints and the evaluation \
             snippet name classes as text, where two such names would look alike (rename the \
             class folder, or its line of classes.txt)"
        )));
    }
    if train_set.len() < cfg.batch_size {
        return Err(Error::Usage(format!(
            "--batch-size {} is larger than the {} training images",
            cfg.batch_size,
            train_set.len()
        )));
    }
    Ok(())
}

/// The model (`--script`'s module, or the ResNet for the data's classes), initialised from
/// `cfg.seed` on `cfg.device`.
fn build_model(cfg: &Config, train_set: &Dataset) -> Result<(nn::VarStore, Net)> {
    // The initialisation draws from libtorch's default generator (tch's initialisers take no
    // generator), as torchvision's do after torch.manual_seed: a lock held only around them
    // keeps ranks run as threads of one process (tests) from interleaving their draws. Every
    // other draw of a run is from a generator of its own (gpu_runtime::rng).
    static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _init = INIT.lock().unwrap_or_else(|e| e.into_inner());
    tch::manual_seed(cfg.seed);
    let vs = nn::VarStore::new(cfg.device);
    let model = match &cfg.script {
        Some(file) => Net::Script(ScriptNet::load(file, &vs)?),
        None => Net::ResNet(ResNet::new(
            &vs.root(),
            cfg.arch,
            train_set.num_classes,
            cfg.stem,
        )),
    };
    Ok((vs, model))
}

/// The model's stages: its units split as `--pipeline` says, or one stage on `cfg.device`.
fn stage_plans(
    cfg: &Config,
    model: &Net,
    vs: &nn::VarStore,
    train_set: &Dataset,
) -> Result<Vec<Stage>> {
    let units = match model {
        Net::ResNet(_) => cfg
            .arch
            .units(cfg.stem, train_set.num_classes, train_set.image_size()),
        // One unit: the module is run whole.
        Net::Script(_) => vec![crate::resnet::Unit {
            name: "model".into(),
            flops: 1.0,
            params: vs
                .trainable_variables()
                .iter()
                .map(Tensor::numel)
                .sum::<usize>() as i64,
        }],
    };
    match &cfg.pipeline {
        Some(p) => Ok(crate::pipeline::stages(&units, &p.split, &p.devices)?),
        None => Ok(crate::pipeline::stages(
            &units,
            &Split::At(Vec::new()),
            &[cfg.device],
        )?),
    }
}

/// Each stage's parameters in one flat buffer, its gradient buckets and its optimiser.
fn stage_parts(
    cfg: &Config,
    model: &Net,
    named: &Named,
    plans: Vec<Stage>,
    comm: &mut Communicator,
) -> Result<(Vec<StageParts>, Vec<Optimizer>)> {
    let mut stages = Vec::with_capacity(plans.len());
    let mut opts = Vec::with_capacity(plans.len());
    for plan in plans {
        let (names, tensors): (Vec<String>, Vec<Tensor>) = named
            .params
            .iter()
            .filter(|(n, _)| model.unit_of(n).is_some_and(|u| plan.units.contains(&u)))
            .map(|(n, t)| (n.clone(), t.shallow_clone()))
            .unzip();
        let buckets = Buckets::new(&tensors, ddp::FIRST_BUCKET_BYTES, ddp::BUCKET_BYTES);
        // One flat buffer for the stage's weights and one for its gradients: the optimiser and
        // the gradient all-reduce then take a few kernels per step instead of a few per
        // parameter. On the CPU the gradients are memory shared with the host's other ranks
        // (with the shared-memory transport), which the all-reduce reads in place.
        let flat = FlatParams::with_grad(&tensors, |numel, kind, device| {
            if device == Device::Cpu && comm.world_size() > 1 {
                Ok(comm.shared_zeros(numel, kind)?)
            } else {
                Ok(Tensor::zeros([numel], (kind, device)))
            }
        })?;
        let mut opt = Optimizer::flat(cfg.rule, &flat, names);
        opt.use_fused(cfg.fused_optim);
        opts.push(opt);
        stages.push(StageParts {
            plan,
            buckets: buckets.ranges(&flat)?,
            flat,
        });
    }
    Ok((stages, opts))
}

/// A TorchScript model's output for a batch of two zero images of the data's size must be
/// float logits `[2, classes]` in evaluation mode, and in training mode depend on every trained
/// parameter: one that gets no gradient is refused by name, as PyTorch's DDP refuses it (without
/// `find_unused_parameters`; torch.optim would skip it, ddp-train's flat optimiser would move it
/// by weight decay and momentum). The probes leave the module's state as it was (BatchNorm's
/// statistics, a module counting its calls in a buffer).
fn check_script_output(
    s: &ScriptNet,
    vs: &nn::VarStore,
    data: &Dataset,
    device: Device,
) -> Result<()> {
    let (h, w) = data.image_size();
    let x = Tensor::zeros([2, 3, h, w], (Kind::Float, device));
    // The module's parameters and buffers are the store's variables (handles to its tensors).
    let state: Vec<(Tensor, Tensor)> = (vs.variables().into_values())
        .map(|t| (t.copy(), t))
        .collect();
    let restore = || {
        tch::no_grad(|| {
            for (saved, t) in &state {
                t.shallow_clone().copy_(saved);
            }
        })
    };
    let y = tch::no_grad(|| s.forward(&x, false));
    restore();
    let y = y?;
    let want = [2, data.num_classes];
    if y.size() != want || !y.is_floating_point() {
        return Err(Error::Data(format!(
            "--model torchscript:{}: for a batch of shape [2, 3, {h}, {w}] it returns {:?} of \
             shape {:?}; the data has {} classes, so it must return logits of shape {want:?}",
            s.file.display(),
            y.kind(),
            y.size(),
            data.num_classes
        )));
    }
    let _ = s.classes.set(data.num_classes);
    let trained: Vec<(String, Tensor)> = {
        let mut v: Vec<(String, Tensor)> = (vs.variables().into_iter())
            .filter(|(_, t)| t.requires_grad())
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let train = s.forward(&x, true);
    let unused = train.and_then(|y| {
        s.check_training_output(&x, &y, 2, 2)?;
        let tensors: Vec<&Tensor> = trained.iter().map(|(_, t)| t).collect();
        let grads = Tensor::f_run_backward(
            &[y.to_kind(Kind::Float).sum(Kind::Float)],
            &tensors,
            false,
            false,
        )?;
        Ok((trained.iter().zip(grads))
            .filter(|(_, g)| !g.defined())
            .map(|((n, _), _)| n.clone())
            .collect::<Vec<String>>())
    });
    restore();
    let unused = unused?;
    if !unused.is_empty() {
        let listed: Vec<&str> = unused.iter().map(String::as_str).collect();
        return Err(Error::Data(format!(
            "--model torchscript:{}: {} trained parameter(s) get no gradient in training mode \
             ({}): PyTorch's DDP refuses such a model too; make them frozen \
             (requires_grad=False) or leave them out",
            s.file.display(),
            unused.len(),
            names(&listed, 8)
        )));
    }
    Ok(())
}

/// Where a dataset's batch indices live: on the device for data held there, on the host for
/// image files, which are decoded on the host (indices on a GPU would make every step wait for
/// the device to read them back).
pub(super) fn index_device(cfg: &Config, data: &Dataset) -> Device {
    if data.is_files() {
        Device::Cpu
    } else {
        cfg.device
    }
}

/// How messages name the run's model: its architecture, or its TorchScript file.
pub(super) fn model_name(cfg: &Config) -> String {
    match &cfg.script {
        Some(file) => file.display().to_string(),
        None => cfg.arch.name().to_string(),
    }
}

/// Copies `weights` (read from `path`) into the model. Non-finite values are refused. `strict`
/// (PyTorch's strict `load_state_dict`): the file holds every tensor of the model and no other,
/// else an error naming them and saying `hint`; not strict: what matches is loaded and the rest
/// named in a warning. Shapes must match either way.
///
/// Kept in one piece: `load_state_dict`'s checks in their order: names, shapes, values.
pub(super) fn copy_weights(
    vs: &nn::VarStore,
    weights: &BTreeMap<String, Tensor>,
    model: &str,
    strict: Option<&str>,
    path: &std::path::Path,
) -> Result<()> {
    let mut vars = vs.variables();
    // A checkpoint with NaN or infinite values would only resume into "training diverged".
    if let Some(name) = checkpoint::non_finite(weights) {
        return Err(Error::Checkpoint(format!(
            "{}: tensor {name} holds NaN or infinite values: not a usable checkpoint",
            path.display()
        )));
    }
    let unexpected: Vec<&str> = weights
        .keys()
        .filter(|n| !vars.contains_key(*n))
        .map(String::as_str)
        .collect();
    let mut missing: Vec<String> = vars
        .keys()
        .filter(|n| !weights.contains_key(*n))
        .cloned()
        .collect();
    missing.sort();
    let missing: Vec<&str> = missing.iter().map(String::as_str).collect();
    let (what_missing, what_extra) = (
        format!("{} tensor(s) of {model} it lacks", missing.len()),
        format!("{} tensor(s) {model} does not have", unexpected.len()),
    );
    if let Some(hint) = strict
        && !(unexpected.is_empty() && missing.is_empty())
    {
        let mut why = Vec::new();
        if !missing.is_empty() {
            why.push(format!("{what_missing}: {}", names(&missing, 8)));
        }
        if !unexpected.is_empty() {
            why.push(format!("{what_extra}: {}", names(&unexpected, 8)));
        }
        return Err(Error::Checkpoint(format!(
            "{}: {} (a strict load, as PyTorch's load_state_dict){hint}",
            path.display(),
            why.join("; ")
        )));
    }
    tch::no_grad(|| -> Result<()> {
        for (name, t) in weights {
            let Some(v) = vars.get_mut(name) else {
                continue;
            };
            if v.size() != t.size() {
                return Err(Error::Checkpoint(format!(
                    "{}: {name}: file {:?}, model {:?}",
                    path.display(),
                    t.size(),
                    v.size()
                )));
            }
            v.copy_(t);
        }
        Ok(())
    })?;
    if !missing.is_empty() || !unexpected.is_empty() {
        log::warn!(
            "{}: loaded {} tensor(s); not loaded, {what_missing} (kept from the initialisation): {}; ignored, {what_extra}: {}",
            path.display(),
            weights.len() - unexpected.len(),
            names(&missing, 20),
            names(&unexpected, 20),
        );
    }
    Ok(())
}

/// Up to `most` names, then how many more; "none" for none.
pub(super) fn names(v: &[&str], most: usize) -> String {
    if v.is_empty() {
        return "none".into();
    }
    let mut text = v[..v.len().min(most)].join(", ");
    if v.len() > most {
        text.push_str(&format!(" and {} more", v.len() - most));
    }
    text
}
