//! What a run says: its start line, its records (epochs, mid-epoch checkpoints, the summary), its
//! progress bar and logs as the trainer's events arrive, and how its end becomes an exit status.

use std::time::Instant;

use anyhow::Result;
use cli_common::{Classified, JsonlOut, Outcome, Torch, progress};
use collectives::Communicator;
use records::{CheckpointRecord, EpochRecord, StageRecord, Summary};
use train::trainer::{Config, EpochStats, Event, MidEpoch};

use crate::Cli;
use crate::logs::Logs;

/// The start line: model, devices, world, batch, precision and engine, the fast paths on, the
/// CPU threads.
pub fn banner(
    cli: &Cli,
    cfg: &Config,
    engine: &str,
    (rank, world): (usize, usize),
    threads: &impl std::fmt::Display,
) -> String {
    let placement = match &cfg.pipeline {
        Some(p) => format!(
            "in {} stages on {:?} ({} micro-batches, split {})",
            p.devices.len(),
            p.devices,
            cfg.accum,
            cli.split_at.text
        ),
        None => format!("on {:?}", cfg.device),
    };
    let mut extras = String::new();
    for (on, what) in [
        (cfg.cuda_graphs, ", CUDA graphs"),
        (cfg.channels_last, ", channels_last"),
        (cfg.sync_bn && world > 1, ", SyncBatchNorm"),
    ] {
        if on {
            extras.push_str(what);
        }
    }
    let decoding = if cfg.data.is_files() {
        format!(", {} decoding thread(s)", cfg.images.workers)
    } else {
        String::new()
    };
    let ranks = match cfg.virtual_ranks {
        Some(v) => format!("{v} virtual ranks on {world} process(es)"),
        None => format!("{world} rank(s)"),
    };
    format!(
        "ddp-train[rank {rank}]: {} {placement}, {ranks}, global batch {} ({} per rank), {} via {engine}{extras}, {threads}{decoding}",
        match &cfg.script {
            Some(file) => format!("TorchScript model {}", file.display()),
            None => format!("{} ({:?} stem)", cfg.arch.name(), cfg.stem),
        },
        cfg.batch_size,
        cfg.batch_size / world.max(1),
        // TF32 is a CUDA tensor-core mode: the CPU computes fp32.
        match cli.gpu.precision {
            device::Precision::Tf32 if !cfg.device.is_cuda() => "fp32",
            p => p.name(),
        },
    )
}

/// Takes the trainer's events on one rank: records on stdout (rank 0, or every rank with
/// --all-ranks), rank 0's progress bar and logs.
pub struct Reporter<'a> {
    pub cli: &'a Cli,
    pub cfg: &'a Config,
    pub rank: usize,
    pub world: usize,
    pub out: &'a mut JsonlOut,
    pub logs: Logs,
    /// The bar of the run's steps, from the first step (a resumed run starts where it stands).
    pub bar: Option<indicatif::ProgressBar>,
    /// Epochs this process finished.
    pub ran: usize,
    /// The run's last epoch is reported: an interrupt after it does not make the run
    /// unfinished.
    pub complete: bool,
    pub started: Instant,
}

/// A reporting error of this tool's (a closed stdout, a log that cannot be written), carried
/// through the training loop whole: [`caller_failed`] takes it out as it went in.
#[derive(Debug)]
struct Reported(anyhow::Error);

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for Reported {}

fn as_train_error(e: anyhow::Error) -> train::Error {
    train::Error::Caller(Box::new(Reported(e)))
}

impl Reporter<'_> {
    fn speaks(&self) -> bool {
        self.rank == 0 || self.cli.all_ranks
    }

    pub fn event(&mut self, event: Event<'_>) -> train::Result<()> {
        match event {
            Event::Step(s) => {
                if self.rank == 0 {
                    let (cli, epochs) = (self.cli, self.cfg.epochs);
                    self.bar
                        .get_or_insert_with(|| {
                            progress::bar_from(
                                &cli.common,
                                "ddp-train",
                                Some((epochs * s.steps) as u64),
                                s.global_step as u64 - 1,
                            )
                        })
                        .set_position(s.global_step as u64);
                }
                self.logs.step(s).map_err(as_train_error)
            }
            Event::Checkpoint(c) => {
                if self.speaks() {
                    let rec = checkpoint_record(c, self.rank, (self.world, self.cfg.virtual_ranks));
                    self.out.emit(&rec).map_err(as_train_error)?;
                }
                Ok(())
            }
            Event::Epoch(e) => self.epoch(e),
        }
    }

    fn epoch(&mut self, e: &EpochStats) -> train::Result<()> {
        if !(e.train_loss.is_finite() && e.val_loss.is_finite()) {
            return Err(train::Error::Data(format!(
                "training diverged at epoch {} (train loss {}, val loss {}): lower --lr, or use --precision fp32",
                e.epoch, e.train_loss, e.val_loss
            )));
        }
        self.ran += 1;
        self.logs.epoch(e).map_err(as_train_error)?;
        if self.speaks() {
            let rec = epoch_record(e, self.cfg, self.rank, self.world);
            self.out.emit(&rec).map_err(as_train_error)?;
        }
        // The last epoch reported: the run is done, whatever comes now (a sweep stopping a
        // trial once it has its last result, say).
        self.complete = e.epoch == self.cfg.epochs;
        if cli_common::interrupt::requested() && !self.complete {
            return Err(train::Error::Interrupted {
                epoch: e.epoch + 1,
                step: 0,
                last_complete: e.epoch,
            });
        }
        Ok(())
    }

    /// The last record (rank 0, or every rank with --all-ranks); `skipped`: epochs a resumed
    /// run found done.
    pub fn summary(&mut self, skipped: usize) -> Result<()> {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if self.speaks() {
            self.out.emit(&Summary {
                ok: self.ran,
                skipped,
                failed: 0,
                elapsed_ms: self.started.elapsed().as_millis() as u64,
                world_size: Some(self.world),
                virtual_ranks: self.cfg.virtual_ranks,
                ..Summary::default()
            })?;
        }
        Ok(())
    }

    /// How the run ended, as the tool's outcome: the hparams session closed, the summary
    /// printed, and each way of stopping said in its own words (and exit status): one arm per
    /// way a run ends.
    pub fn ended(
        &mut self,
        run: std::result::Result<train::Result<train::trainer::Trained>, Torch>,
        comm: Communicator,
        requeue_job: Option<&str>,
    ) -> Result<Outcome> {
        let rank = self.rank;
        if self.complete && stopped(&run) {
            // Interrupted once every epoch was reported (in the ranks' last meeting, say): done.
            self.logs.end(tensorboard::SessionStatus::Success);
            self.summary(self.cfg.epochs - self.ran)?;
            return Ok(Outcome::Ok);
        }
        // The hparams session ends as a success or a failure; a run stopped to be resumed (the
        // checkpoint signal, an interrupt) leaves it open.
        match &run {
            Ok(Ok(_)) => self.logs.end(tensorboard::SessionStatus::Success),
            Ok(Err(train::Error::Checkpointed { .. } | train::Error::Interrupted { .. })) => {}
            Ok(Err(train::Error::Collective(collectives::Error::PeerStopped { .. }))) => {}
            _ if cli_common::interrupt::requested() => {}
            _ => self.logs.end(tensorboard::SessionStatus::Failure),
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        match run {
            Ok(Ok(trained)) => {
                self.summary(trained.resumed_from.unwrap_or(0))?;
                Ok(Outcome::Ok)
            }
            // The checkpoint signal: every rank stopped at the same step, where the checkpoint
            // stands; exit 75, and with --requeue-on-signal the job goes back into the queue.
            Ok(Err(e @ train::Error::Checkpointed { .. })) => self.checkpointed(&e, requeue_job),
            // SIGINT/SIGTERM: stopped before the next step, exit 130.
            Ok(Err(train::Error::Interrupted {
                epoch,
                step,
                last_complete,
            })) => {
                let why = format!("interrupted before step {} of epoch {epoch}", step + 1);
                let kept = if self.cfg.checkpoint_dir.is_some() && last_complete > 0 {
                    format!("; the checkpoint of epoch {last_complete} is the last one")
                } else {
                    String::new()
                };
                eprintln!("ddp-train[rank {rank}]: {why}{kept}");
                // The others stop too, naming this rank, instead of failing on a lost peer.
                comm.leave(&why);
                Err(cli_common::Interrupted.into())
            }
            // Another rank was interrupted and left: this one stops as well, exit 130.
            Ok(Err(train::Error::Collective(e @ collectives::Error::PeerStopped { .. }))) => {
                eprintln!("ddp-train[rank {rank}]: {e}");
                Err(cli_common::Interrupted.into())
            }
            // Signalled while waiting in a collective (or while a peer that stopped for the same
            // signal broke it).
            Ok(Err(e)) if cli_common::interrupt::requested() => {
                eprintln!("ddp-train[rank {rank}]: interrupted ({e})");
                comm.leave(&format!("interrupted ({e})"));
                Err(cli_common::Interrupted.into())
            }
            // CUDA running out of memory surfaces as a panic (tch's forward ops) or as an error
            // (backward through f_backward): either way the message says what to change.
            Ok(Err(e)) if matches!(e.torch(), Some(Torch::OutOfMemory(_))) => {
                Err(out_of_memory(self.cfg, rank, self.world))
            }
            Err(Torch::OutOfMemory(_)) => Err(out_of_memory(self.cfg, rank, self.world)),
            // This rank's own reporting failed (stdout closed: exit 141, quietly), as it was.
            Ok(Err(train::Error::Caller(e))) => Err(caller_failed(e, rank)),
            // Its class (a usage error found once the data and model are known: exit 2) goes up.
            Ok(Err(e)) => {
                Err(anyhow::Error::new(Classified::from(e)).context(format!("rank {rank}")))
            }
            Err(other) => anyhow::bail!("rank {rank}: {other}"),
        }
    }

    /// The checkpoint signal (`e`): every rank stopped at the same step, where the checkpoint
    /// stands; rank 0 requeues Slurm's job `requeue_job` where given.
    fn checkpointed(&mut self, e: &train::Error, requeue_job: Option<&str>) -> Result<Outcome> {
        let (cli, rank) = (self.cli, self.rank);
        if !cli.common.quiet {
            eprintln!(
                "ddp-train[rank {rank}]: the checkpoint signal came: {e}; --resume goes on from there"
            );
        }
        if let (0, Some(job)) = (rank, requeue_job) {
            anyhow::Context::with_context(crate::requeue(job), || {
                format!("rank {rank}: {e}, but")
            })?;
            if !cli.common.quiet {
                eprintln!("ddp-train[rank {rank}]: Slurm job {job} requeued");
            }
        }
        self.summary(0)?;
        Ok(Outcome::Resumable)
    }
}

/// This rank's own reporting error (`train::Error::Caller`), as it was: a closed stdout stays
/// [`cli_common::StdoutClosed`], which ends the run quietly with exit 141.
fn caller_failed(e: Box<dyn std::error::Error + Send + Sync>, rank: usize) -> anyhow::Error {
    match e.downcast::<Reported>() {
        Ok(reported) => reported.0,
        Err(e) => anyhow::anyhow!(e),
    }
    .context(format!("rank {rank}"))
}

/// Whether the run was stopped: interrupted here or by another rank, or signalled.
fn stopped(run: &std::result::Result<train::Result<train::trainer::Trained>, Torch>) -> bool {
    match run {
        Ok(Ok(_)) => false,
        Ok(Err(
            train::Error::Interrupted { .. }
            | train::Error::Collective(collectives::Error::PeerStopped { .. }),
        )) => true,
        _ => cli_common::interrupt::requested(),
    }
}

/// CUDA out of memory: what is in use and what to change.
fn out_of_memory(cfg: &Config, rank: usize, world: usize) -> anyhow::Error {
    let devices = match &cfg.pipeline {
        Some(p) => p.devices.clone(),
        None => vec![cfg.device],
    };
    let used = devices
        .iter()
        .filter_map(|&d| Some(format!("{} MiB on {}", gpu_mib(d)?, device::name(d))))
        .collect::<Vec<_>>();
    let used = if used.is_empty() {
        String::new()
    } else {
        format!(" ({} in use)", used.join(", "))
    };
    anyhow::anyhow!(
        "rank {rank}: CUDA out of memory at --batch-size {} ({} per rank){used}: lower --batch-size or {}",
        cfg.batch_size,
        cfg.batch_size / world,
        if cfg.pipeline.is_some() {
            "use more --stages (a pipeline holds every micro-batch's activations until its backward)"
        } else {
            "use --accum"
        }
    )
}

/// An epoch's record.
fn epoch_record(e: &EpochStats, cfg: &Config, rank: usize, world: usize) -> EpochRecord {
    let virtual_ranks = cfg.virtual_ranks;
    EpochRecord {
        epoch: e.epoch,
        epochs: cfg.epochs,
        train_loss: e.train_loss,
        train_top1: e.train_top1,
        val_loss: e.val_loss,
        val_top1: e.val_top1,
        images_per_s: e.images_per_s,
        train_images_per_s: e.train_images_per_s,
        seconds: e.seconds,
        lr: e.lr,
        loss_scale: e.loss_scale,
        steps: e.steps,
        skipped_steps: e.skipped_steps,
        peak_gpu_mib: gpu_mib(cfg.device),
        step_ms: e.step_seconds * 1e3,
        stages: if e.stages.len() > 1 {
            e.stages
                .iter()
                .enumerate()
                .map(|(i, s)| StageRecord {
                    stage: i,
                    device: device::name(s.device),
                    first: s.first.clone(),
                    last: s.last.clone(),
                    params: s.params,
                    gflops: s.flops / 1e9,
                    peak_gpu_mib: gpu_mib(s.device),
                })
                .collect()
        } else {
            Vec::new()
        },
        checkpoint: e
            .checkpoint
            .as_ref()
            .map(|p| std::path::absolute(p).unwrap_or(p.clone())),
        best: e.best,
        bad_inputs: e.bad_inputs,
        left_out: e.left_out,
        val_images: e.val_images,
        classes: e.classes.clone(),
        rank,
        world_size: world,
        virtual_ranks,
    }
}

/// A mid-epoch checkpoint's record.
fn checkpoint_record(
    c: &MidEpoch,
    rank: usize,
    (world, virtual_ranks): (usize, Option<usize>),
) -> CheckpointRecord {
    CheckpointRecord {
        epoch: c.epoch,
        step: c.step,
        steps: c.steps,
        checkpoint: std::path::absolute(&c.checkpoint).unwrap_or(c.checkpoint.clone()),
        reason: if c.signal { "signal" } else { "every" }.to_string(),
        rank,
        world_size: world,
        virtual_ranks,
    }
}

/// Memory in use on a CUDA device, MiB (`None` for the CPU).
pub fn gpu_mib(device: tch::Device) -> Option<u64> {
    match device {
        tch::Device::Cuda(i) => device::cuda_mem_used_on(i).map(|b| b >> 20),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_stdout_while_reporting_stays_a_closed_stdout() {
        // As JsonlOut::emit says it, handed through the training loop.
        let e = as_train_error(anyhow::Error::new(cli_common::StdoutClosed));
        let train::Error::Caller(e) = e else {
            panic!("{e:?}")
        };
        let up = caller_failed(e, 0);
        assert!(
            up.chain().any(|c| c.is::<cli_common::StdoutClosed>()),
            "{up:#}"
        );
        // Any other error keeps its text under the rank.
        let io = anyhow::Error::new(std::io::Error::other("disk full")).context("writing logs");
        let train::Error::Caller(e) = as_train_error(io) else {
            unreachable!()
        };
        assert_eq!(
            format!("{:#}", caller_failed(e, 1)),
            "rank 1: writing logs: disk full"
        );
    }
}
