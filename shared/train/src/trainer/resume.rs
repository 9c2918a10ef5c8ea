//! Checkpoints: what is saved at an epoch's end and within one, and what a resumed run starts
//! from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use collectives::Communicator;
use tch::{Device, Kind, Tensor};
use train_data::data::Dataset;

use super::setup::{Parts, copy_weights, model_name};
use super::step::Stepper;
use super::{Config, MidEpoch, Named};
use crate::net::{Net, ScriptNet};
use crate::optim::Optimizer;
use crate::resnet::Stem;
use crate::scaler::GradScaler;
use crate::{Error, Result, checkpoint};

/// Where a run starts: epoch 0, or where `--resume` finds the last checkpoint.
pub(super) struct Start {
    /// Epochs done, and steps of the next one (a mid-epoch checkpoint).
    pub(super) epoch: usize,
    pub(super) step: usize,
    pub(super) best_top1: f64,
    /// The last finished epoch's (NaN before the first).
    pub(super) val_top1: f64,
    pub(super) resumed_from: Option<usize>,
    /// A mid-epoch checkpoint's metadata, file and per-rank sums ([`PROGRESS`]).
    pub(super) mid: Option<(checkpoint::Meta, PathBuf, Tensor)>,
    /// The run that wrote the checkpoint resumed from.
    pub(super) written_by: Option<WrittenBy>,
}

/// What of the run that wrote a checkpoint decides the steps after it.
#[derive(Debug, Clone, Copy)]
pub(super) struct WrittenBy {
    world: usize,
    virtual_ranks: Option<usize>,
    batch_size: usize,
    seed: i64,
}

impl Start {
    /// This rank's sums of the epoch a mid-epoch checkpoint interrupted, once the checkpoint
    /// is known to come from this very run set-up: the same ranks, global batch, seed and steps
    /// per epoch (the samples of each step depend on all four), else a usage error.
    pub(super) fn mid_epoch(
        &mut self,
        cfg: &Config,
        rank: usize,
        world: usize,
        steps_per_epoch: usize,
    ) -> Result<Option<RankSums>> {
        let Some((meta, path, progress)) = self.mid.take() else {
            // At an epoch's end the run goes on with other ranks or virtual ranks, as that
            // number's run from this epoch on, and says so; the same virtual ranks on another
            // number of processes are the same run.
            let Some(by) = self.written_by.filter(|_| rank == 0) else {
                return Ok(None);
            };
            if match (by.virtual_ranks, cfg.virtual_ranks) {
                (Some(v), Some(now)) => v != now,
                (None, None) => by.world != world,
                _ => true,
            } {
                log::warn!(
                    "the checkpoint resumed from was written by {}; the run goes on with {} from \
                     this epoch on",
                    ranks_text(by.world, by.virtual_ranks),
                    ranks_text(world, cfg.virtual_ranks)
                );
            }
            // Another global batch or seed: other samples in other steps from here, not the
            // run the checkpoint came from.
            let (mut then, mut now) = (Vec::new(), Vec::new());
            if by.batch_size != cfg.batch_size {
                then.push(format!("--batch-size {}", by.batch_size));
                now.push(format!("--batch-size {}", cfg.batch_size));
            }
            if by.seed != cfg.seed {
                then.push(format!("--seed {}", by.seed));
                now.push(format!("--seed {}", cfg.seed));
            }
            if !then.is_empty() {
                log::warn!(
                    "the checkpoint resumed from was written with {}; the run goes on with {} \
                     from this epoch on",
                    then.join(" and "),
                    now.join(" and ")
                );
            }
            return Ok(None);
        };
        same_set_up(cfg, (&meta, &path), world, steps_per_epoch)?;
        let row = rank_row(cfg, (&meta, &path, &progress), rank, world)?;
        Ok(Some(RankSums {
            loss: row[0],
            correct: row[1] as i64,
            bad: row[2] as usize,
            skipped: meta.skipped_steps,
        }))
    }
}

/// A run's ranks as its flags gave them: `world` processes, or `--virtual-ranks` on them.
fn ranks_text(world: usize, virtual_ranks: Option<usize>) -> String {
    match virtual_ranks {
        Some(v) => format!("--virtual-ranks {v} ({world} process(es))"),
        None => format!("{world} rank(s)"),
    }
}

/// A mid-epoch checkpoint (`meta`, from `path`) comes from this run's set-up: the same ranks
/// (virtual ones, where either run has them), global batch, seed and steps per epoch, else a
/// usage error.
fn same_set_up(
    cfg: &Config,
    (meta, path): (&checkpoint::Meta, &Path),
    world: usize,
    steps_per_epoch: usize,
) -> Result<()> {
    // The ranks that decide what a step computes: the virtual ones, else the processes.
    let ranks = |w: usize, v: Option<usize>| v.unwrap_or(w);
    let then = (
        ranks(meta.world_size, meta.virtual_ranks),
        meta.batch_size,
        meta.seed,
        meta.steps_per_epoch,
    );
    let now = (
        ranks(world, cfg.virtual_ranks),
        cfg.batch_size,
        cfg.seed,
        steps_per_epoch,
    );
    let same_kind = meta.virtual_ranks.is_some() == cfg.virtual_ranks.is_some();
    if then == now && same_kind {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "{} was written after step {} of epoch {} by a run of {}, --batch-size {}, \
         --seed {} and {} steps an epoch; this one has {}, --batch-size {}, --seed {} and \
         {steps_per_epoch} steps an epoch: resume a mid-epoch checkpoint as it was run \
         (the steps an epoch count its smaller last batch unless --drop-last; a run \
         started with --virtual-ranks V resumes mid-epoch on any number of processes \
         that divides V)",
        path.display(),
        meta.step,
        meta.epoch + 1,
        ranks_text(meta.world_size, meta.virtual_ranks),
        then.1,
        then.2,
        then.3,
        ranks_text(world, cfg.virtual_ranks),
        cfg.batch_size,
        cfg.seed,
    )))
}

/// This rank's sums (loss, correct, bad files) from a mid-epoch checkpoint's `progress`
/// (float64, a row per rank that wrote it), checked to be in range.
fn rank_row(
    cfg: &Config,
    (meta, path, progress): (&checkpoint::Meta, &Path, &Tensor),
    rank: usize,
    world: usize,
) -> Result<Vec<f64>> {
    let rows = meta.world_size as i64;
    if progress.size() != [rows, 3] || progress.kind() != Kind::Double {
        return Err(Error::Checkpoint(format!(
            "{}: {PROGRESS} is {:?} {:?}, not float64 [{rows}, 3]",
            path.with_file_name("last.train.safetensors").display(),
            progress.kind(),
            progress.size()
        )));
    }
    // On as many processes as wrote it, each its own row; on another number (virtual
    // ranks), the sums are the epoch's figures only: rank 0 takes them all.
    let row: Vec<f64> = if rows == world as i64 {
        Vec::try_from(progress.get(rank as i64))?
    } else if rank == 0 {
        Vec::try_from(progress.sum_dim_intlist(0, false, Kind::Double))?
    } else {
        vec![0.0; 3]
    };
    // Counts are whole numbers, the correct ones at most the samples the steps done saw.
    let seen = (meta.step * cfg.batch_size) as f64;
    let whole = |v: f64| v.is_finite() && v.fract() == 0.0 && v >= 0.0;
    if row[0].is_nan() || row[0] < 0.0 || !whole(row[1]) || row[1] > seen || !whole(row[2]) {
        return Err(Error::Checkpoint(format!(
            "{}: {PROGRESS} of rank {rank} is {row:?}: out of range (a damaged or edited \
             checkpoint)",
            path.with_file_name("last.train.safetensors").display()
        )));
    }
    Ok(row)
}

/// `--init`'s weights, then with `--resume` the last checkpoint's weights, optimiser state and
/// loss scaler.
pub(super) fn restore(cfg: &Config, parts: &mut Parts) -> Result<Start> {
    let mut start = Start {
        epoch: 0,
        step: 0,
        best_top1: f64::NEG_INFINITY,
        val_top1: f64::NAN,
        resumed_from: None,
        mid: None,
        written_by: None,
    };
    let last = match (&cfg.checkpoint_dir, cfg.resume) {
        (Some(dir), true) => load_last(dir, cfg.device)?,
        _ => None,
    };
    if let Some(state) = &last {
        within_epochs(cfg, state)?;
    }
    if let Some(path) = &cfg.init {
        let (weights, _) = checkpoint::load(path, cfg.device)?;
        let strict = cfg
            .init_strict
            .then_some("; --init-non-strict loads what matches");
        copy_weights(&parts.vs, &weights, &model_name(cfg), strict, path)?;
    }
    if let Some(state) = last {
        copy_weights(
            &parts.vs,
            &state.model,
            &model_name(cfg),
            Some(""),
            &state.path,
        )?;
        if let Net::Script(s) = &parts.model {
            warn_other_script(&state, s);
        }
        check_optim_finite(&state)?;
        load_optimizers(&mut parts.opts, &state.train)?;
        let mid = mid_epoch_progress(&state)?;
        start = Start {
            epoch: state.meta.epoch,
            step: state.meta.step,
            best_top1: state.meta.best_top1,
            val_top1: state.meta.val_top1,
            resumed_from: Some(state.meta.epoch),
            mid,
            written_by: Some(WrittenBy {
                world: state.meta.world_size,
                virtual_ranks: state.meta.virtual_ranks,
                batch_size: state.meta.batch_size,
                seed: state.meta.seed,
            }),
        };
        if state.meta.scaler {
            parts.scaler.scale = state.meta.loss_scale;
            parts.scaler.growth_tracker = state.meta.growth_tracker;
        }
    }
    Ok(start)
}

/// Another module file of the same names and shapes loads; the run says so, as later
/// checkpoints name the new file.
fn warn_other_script(state: &LastState, s: &ScriptNet) {
    if let Some(then) = &state.meta.script
        && !then.sha256.eq_ignore_ascii_case(&s.sha256)
    {
        log::warn!(
            "{}: the run trained {} (SHA-256 {}); it goes on with {} (SHA-256 {}), which its \
             checkpoints name from now on",
            state.path.display(),
            then.file,
            then.sha256,
            s.file.display(),
            s.sha256
        );
    }
}

/// The optimiser state resumed from holds finite numbers only (the epoch's loss sum may be
/// infinite: fp16's skipped steps).
fn check_optim_finite(state: &LastState) -> Result<()> {
    let optim: BTreeMap<String, Tensor> = state
        .train
        .iter()
        .filter(|(n, _)| n.as_str() != PROGRESS)
        .map(|(n, t)| (n.clone(), t.shallow_clone()))
        .collect();
    match checkpoint::non_finite(&optim) {
        Some(name) => Err(Error::Checkpoint(format!(
            "{}: tensor {name} holds NaN or infinite values: not a usable checkpoint",
            state
                .path
                .with_file_name("last.train.safetensors")
                .display()
        ))),
        None => Ok(()),
    }
}

/// A mid-epoch checkpoint's metadata, path and the ranks' sums (on the CPU); None for one at
/// an epoch's end.
fn mid_epoch_progress(state: &LastState) -> Result<Option<(checkpoint::Meta, PathBuf, Tensor)>> {
    match (state.meta.step, state.train.get(PROGRESS)) {
        (0, _) => Ok(None),
        (_, Some(p)) => Ok(Some((
            state.meta.clone(),
            state.path.clone(),
            p.to_device(Device::Cpu),
        ))),
        (step, None) => Err(Error::Checkpoint(format!(
            "{}: a checkpoint after step {step} of an epoch without the ranks' {PROGRESS}",
            state.path.display()
        ))),
    }
}

/// A checkpoint past the run's --epochs (more epochs done, or within the epoch after the last)
/// is refused: a usage error, not a run that trains nothing and says it finished.
fn within_epochs(cfg: &Config, state: &LastState) -> Result<()> {
    let (epoch, step) = (state.meta.epoch, state.meta.step);
    if epoch < cfg.epochs || (epoch == cfg.epochs && step == 0) {
        return Ok(());
    }
    let at = match step {
        0 => format!("the end of epoch {epoch}"),
        _ => format!("step {step} of epoch {}", epoch.saturating_add(1)),
    };
    Err(Error::Usage(format!(
        "{} was written at {at}, past this run's --epochs {}: resume it with --epochs {} or more",
        state.path.display(),
        cfg.epochs,
        epoch.saturating_add(usize::from(step > 0))
    )))
}

/// Gives each stage's optimiser its parameters' share of the saved state (which names
/// parameters, so a checkpoint moves between split and unsplit runs).
pub(super) fn load_optimizers(
    opts: &mut [Optimizer],
    saved: &BTreeMap<String, Tensor>,
) -> Result<()> {
    let mut claimed = BTreeSet::new();
    for opt in opts {
        let mine: BTreeMap<String, Tensor> = saved
            .iter()
            .filter(|(k, _)| {
                k.as_str() == "optim.steps"
                    || k.strip_prefix("optim.")
                        .and_then(|k| k.rsplit_once('.'))
                        .is_some_and(|(param, _)| opt.has_param(param))
            })
            .map(|(k, v)| (k.clone(), v.shallow_clone()))
            .collect();
        claimed.extend(mine.keys().cloned());
        opt.load_state(&mine)?;
    }
    match saved
        .keys()
        .find(|k| k.starts_with("optim.") && !claimed.contains(*k))
    {
        Some(k) => Err(Error::Checkpoint(format!(
            "optimiser state {} names no parameter of this model",
            &k["optim.".len()..]
        ))),
        None => Ok(()),
    }
}

/// Rank 0's checkpoint: `last.train.safetensors` (optimiser state, and in a mid-epoch
/// checkpoint every rank's sums of the unfinished epoch as `progress`), `last.safetensors` (the
/// model), and `best.safetensors` when validation improved, written as one unit
/// ([`checkpoint::save_set`]): a failure (a full disk) leaves the previous checkpoint whole.
/// Weights or optimiser state holding NaN or infinities are never written over it.
pub(super) fn save_last(
    dir: &std::path::Path,
    named: &Named,
    opts: &[Optimizer],
    meta: &checkpoint::Meta,
    best: bool,
    progress: Option<Tensor>,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        what: format!("creating {}", dir.display()),
        error: e,
    })?;
    let (epoch, step) = (meta.epoch, meta.step);
    let meta = meta.to_map();
    let model_state: BTreeMap<String, Tensor> = named
        .all_sorted
        .iter()
        .map(|(n, t)| (n.clone(), t.shallow_clone()))
        .collect();
    // Each stage's optimiser state names its parameters: together, the unsplit run's state.
    let mut train_state: BTreeMap<String, Tensor> =
        opts.iter().flat_map(Optimizer::state).collect();
    if let Some(name) =
        checkpoint::non_finite(&model_state).or_else(|| checkpoint::non_finite(&train_state))
    {
        let at = match step {
            0 => format!("epoch {epoch}"),
            _ => format!("step {step} of epoch {}", epoch + 1),
        };
        return Err(Error::Data(format!(
            "training diverged: {name} holds NaN or infinite values after {at}; the checkpoint in \
             {} was left as it was: --resume from it with a lower --lr, or use --precision fp32",
            dir.display()
        )));
    }
    if let Some(p) = progress {
        train_state.insert(PROGRESS.to_string(), p);
    }
    let [train, model, best_path] = checkpoint_files(dir);
    checkpoint::recover(&[&train, &model, &best_path])?;
    // The training state is the set's commit point (see `checkpoint::save_set`).
    let mut files = vec![
        (train.as_path(), &train_state),
        (model.as_path(), &model_state),
    ];
    if best {
        files.push((best_path.as_path(), &model_state));
    }
    checkpoint::save_set(&files, &meta)
}

/// A checkpoint directory's files, in the order they are committed: `last.train.safetensors`,
/// `last.safetensors`, `best.safetensors`.
pub(super) fn checkpoint_files(dir: &std::path::Path) -> [PathBuf; 3] {
    ["last.train", "last", "best"].map(|n| dir.join(format!("{n}.safetensors")))
}

/// The name, in `last.train.safetensors`, of a mid-epoch checkpoint's per-rank sums: float64
/// [world, 3], each rank's row its epoch-so-far loss sum, correct count and unusable files.
pub(super) const PROGRESS: &str = "progress.ranks";

/// One rank's sums of an unfinished epoch, as a mid-epoch checkpoint keeps them, so that the
/// resumed epoch reports what the uninterrupted one does.
#[derive(Debug, Clone, Default)]
pub(super) struct RankSums {
    pub(super) loss: f64,
    pub(super) correct: i64,
    pub(super) bad: usize,
    /// Steps the loss scaler skipped (the same on every rank).
    pub(super) skipped: usize,
}

/// What every checkpoint's metadata says of the run.
pub(super) struct RunInfo<'a> {
    pub(super) cfg: &'a Config,
    pub(super) world: usize,
    pub(super) steps_per_epoch: usize,
    pub(super) classes: Vec<String>,
    pub(super) input: checkpoint::Input,
    pub(super) script: Option<checkpoint::ScriptFile>,
}

/// How the model sees images: its stem and classes, the side of its images, and what
/// evaluation does to an image before the model (image files: their transform and Normalize;
/// data held as tensors: ToTensor and the statistics the run computed).
pub(super) fn model_input(
    cfg: &Config,
    data: &Dataset,
    norm: &train_data::data::Normalize,
) -> checkpoint::Input {
    use train_data::images::Transform;
    let stats = |t: &Tensor| {
        Vec::<f64>::try_from(t.to_kind(Kind::Double).flatten(0, -1)).unwrap_or_default()
    };
    let (mean, std, eval) = if data.is_files() {
        let wide = |v: [f32; 3]| v.iter().map(|&x| f64::from(x)).collect();
        let eval = match cfg.images.transform {
            Transform::Imagenet => "imagenet",
            Transform::Flip | Transform::None => "none",
        };
        (wide(cfg.images.mean), wide(cfg.images.std), eval)
    } else {
        (stats(&norm.mean), stats(&norm.std), "none")
    };
    checkpoint::Input {
        stem: match (&cfg.script, cfg.stem) {
            (Some(_), _) => "none",
            (None, Stem::ImageNet) => "imagenet",
            (None, Stem::Cifar) => "cifar",
        }
        .to_string(),
        num_classes: data.num_classes,
        image_size: data.image_size().0,
        mean,
        std,
        eval_transform: eval.to_string(),
    }
}

impl RunInfo<'_> {
    /// The metadata of a checkpoint after `step` steps of the epoch after `epoch` (0: at the
    /// end of epoch `epoch`).
    pub(super) fn meta(
        &self,
        epoch: usize,
        step: usize,
        best_top1: f64,
        val_top1: f64,
        scaler: &GradScaler,
        skipped_steps: usize,
    ) -> checkpoint::Meta {
        checkpoint::Meta {
            epoch,
            step,
            steps_per_epoch: self.steps_per_epoch,
            seed: self.cfg.seed,
            skipped_steps,
            arch: match self.script {
                Some(_) => String::new(),
                None => self.cfg.arch.name().to_string(),
            },
            best_top1,
            val_top1,
            scaler: scaler.enabled,
            loss_scale: scaler.scale,
            growth_tracker: scaler.growth_tracker,
            world_size: self.world,
            batch_size: self.cfg.batch_size,
            virtual_ranks: self.cfg.virtual_ranks,
            classes: self.classes.clone(),
            input: Some(self.input.clone()),
            script: self.script.clone(),
        }
    }
}

/// Every rank's part in a mid-epoch checkpoint: the ranks' epoch sums gathered (exactly: each
/// row is one rank's), and rank 0 writes; the caller reports it and the ranks meet
/// (`report_then_meet`).
pub(super) fn save_mid_epoch(
    comm: &mut Communicator,
    stepper: &Stepper,
    named: &Named,
    opts: &[Optimizer],
    meta: &checkpoint::Meta,
    bad: usize,
) -> Result<MidEpoch> {
    let dir = stepper.cfg.checkpoint_dir.as_deref().ok_or_else(|| {
        Error::Usage("a mid-epoch checkpoint needs a checkpoint directory".into())
    })?;
    let mine = Tensor::from_slice(&[
        stepper.loss_sum.double_value(&[]),
        stepper.correct.int64_value(&[]) as f64,
        bad as f64,
    ]);
    let mut all = Tensor::zeros([comm.world_size() as i64, 3], (Kind::Double, Device::Cpu));
    comm.all_gather(&mine, &mut all)?;
    if comm.rank() == 0 {
        save_last(dir, named, opts, meta, false, Some(all))?;
    }
    Ok(MidEpoch::standing(
        stepper.cfg,
        meta.epoch,
        meta.step,
        meta.steps_per_epoch,
    ))
}

pub(super) struct LastState {
    pub(super) model: BTreeMap<String, Tensor>,
    pub(super) train: BTreeMap<String, Tensor>,
    pub(super) meta: checkpoint::Meta,
    /// The model half's file (named in errors).
    pub(super) path: PathBuf,
}

/// The last checkpoint in `dir`, if any; both halves must be of one epoch.
pub(super) fn load_last(dir: &std::path::Path, device: Device) -> Result<Option<LastState>> {
    let [tp, mp, best] = checkpoint_files(dir);
    // A run killed while committing its checkpoint: the set it was writing is finished, or
    // dropped if none of it was in place yet.
    if checkpoint::recover(&[&tp, &mp, &best])? == atomic_file::Recovered::Finished {
        log::warn!(
            "{}: finished the checkpoint a killed run was committing",
            dir.display()
        );
    }
    if !mp.exists() {
        if tp.exists() {
            return Err(Error::Checkpoint(format!(
                "{} is there but {} is missing: an incomplete checkpoint (a run killed while \
                 writing its first one?); remove {} to start over",
                tp.display(),
                mp.display(),
                tp.display()
            )));
        }
        return Ok(None);
    }
    let (model, map) = checkpoint::load(&mp, device)?;
    let (train, tmap) = checkpoint::load(&tp, device)?;
    let meta = checkpoint::Meta::from_map(&map, &mp)?;
    let tmeta = checkpoint::Meta::from_map(&tmap, &tp).ok();
    let train_at = tmeta.as_ref().map(|t| (t.epoch, t.step));
    if train_at != Some((meta.epoch, meta.step)) {
        return Err(Error::Checkpoint(format!(
            "{} (epoch {}, step {}) and {} ({}) are from different steps: the run was killed while \
             writing; remove both to start over",
            mp.display(),
            meta.epoch,
            meta.step,
            tp.display(),
            train_at.map_or("no epoch".to_string(), |(e, s)| format!(
                "epoch {e}, step {s}"
            )),
        )));
    }
    // Both halves are written with one metadata: keys that differ pair two runs' files.
    let differ: BTreeSet<&str> = (map.keys().chain(tmap.keys()))
        .filter(|k| map.get(*k) != tmap.get(*k))
        .map(String::as_str)
        .collect();
    if !differ.is_empty() {
        return Err(Error::Checkpoint(format!(
            "{} and {} are not of one checkpoint: their metadata's {} differ (files of two \
             runs?); put back the pair a run wrote, or remove both to start over",
            mp.display(),
            tp.display(),
            super::setup::names(&differ.into_iter().collect::<Vec<_>>(), 5)
        )));
    }
    Ok(Some(LastState {
        model,
        train,
        meta,
        path: mp,
    }))
}
