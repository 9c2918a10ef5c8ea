//! Data-parallel training pieces for `ddp-train`, each a faithful copy of what
//! PyTorch does so that runs, checkpoints and numbers carry over:
//!
//! - [`resnet`]: torchvision's ResNet-18/34/50/101 with its state_dict keys (+ a CIFAR stem);
//! - the data (CIFAR, image folders, RecordIO, webdataset shards, `DistributedSampler`) are
//!   `train_data`'s;
//! - [`optim`]: SGD (momentum, nesterov, weight decay) and AdamW as `torch.optim` computes them,
//!   with state as named tensors (saved in checkpoints), LR schedules;
//! - [`scaler`]: `torch.amp.GradScaler`'s dynamic loss scale;
//! - [`ddp`]: parameter/buffer broadcast and bucketed gradient averaging over a
//!   [`collectives::Communicator`];
//! - [`pipeline`]: model parallelism — the cut into stages on several devices (GPipe);
//! - [`syncbn`]: SyncBatchNorm (global-batch statistics through a differentiable all-reduce);
//! - [`infer`]: a checkpoint's model loaded for evaluation, and an evaluation's figures (the
//!   sums validation takes), for `classify`;
//! - [`checkpoint`]: model + optimiser + scaler + epoch (and, inside an epoch, the step and the
//!   ranks' partial sums) in safetensors files, written atomically; the model's tensors keep
//!   torchvision's names.

pub mod checkpoint;
pub mod ddp;
pub mod flat;
pub mod infer;
pub mod net;
pub mod optim;
pub mod pipeline;
pub mod resnet;
pub mod scaler;
pub mod syncbn;
pub mod trainer;

/// Where a run stopped for the checkpoint signal, in words: between epochs, the end of the one
/// before.
fn stopped_at(epoch: usize, step: usize, steps: usize) -> String {
    match step {
        0 if epoch > 1 => format!("stopped at the checkpoint of epoch {}'s end", epoch - 1),
        0 => "stopped before the first step, at the initial checkpoint".into(),
        _ => format!("stopped at a checkpoint after step {step} of {steps} of epoch {epoch}"),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    /// `Config::should_stop` said so before step `step` (0-based) of epoch `epoch` (1-based);
    /// `last_complete` epochs are done (and checkpointed, when checkpointing).
    #[error("interrupted before step {step} of epoch {epoch}")]
    Interrupted {
        epoch: usize,
        step: usize,
        last_complete: usize,
    },
    /// The checkpoint signal came: training stopped after `step` of `steps` steps of epoch
    /// `epoch` (1-based), where a checkpoint now stands (`--resume` goes on from there).
    #[error("{}", stopped_at(*epoch, *step, *steps))]
    Checkpointed {
        epoch: usize,
        step: usize,
        steps: usize,
    },
    /// The data cannot be used (a pure message; the data's own errors are [`Error::TrainData`]).
    #[error("{0}")]
    Data(String),
    /// What the data readers said, whole and in its class.
    #[error(transparent)]
    TrainData(#[from] train_data::Error),
    /// A checkpoint's contents cannot be used (a pure message).
    #[error("{0}")]
    Checkpoint(String),
    /// A checkpoint file that cannot be read or written, with the cause.
    #[error(transparent)]
    File(#[from] checkpoint::FileError),
    /// A TorchScript model that cannot be loaded or run, with the cause.
    #[error(transparent)]
    Script(#[from] net::ScriptError),
    /// Another run holds the checkpoint directory.
    #[error(transparent)]
    Locked(#[from] atomic_file::LockError),
    #[error(transparent)]
    Collective(#[from] collectives::Error),
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    /// libtorch's C++ below tch (the GPU runtime's shim) failed.
    #[error("{0}")]
    Cuda(#[from] gpu_runtime::shim::Error),
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        error: std::io::Error,
    },
    /// A checkpoint's optimiser state does not fit this run's optimiser.
    #[error(transparent)]
    OptimizerState(#[from] optim::StateError),
    /// The caller's event handler failed (writing its records, say): its error as it was.
    #[error(transparent)]
    Caller(Box<dyn std::error::Error + Send + Sync>),
}

pub type Result<T> = std::result::Result<T, Error>;

impl error_class::Classify for Error {
    fn class(&self) -> error_class::Class {
        use error_class::Class;
        match self {
            Error::Usage(_) => Class::Usage,
            Error::Interrupted { .. } | Error::Checkpointed { .. } => Class::Interrupted,
            Error::Collective(e) => e.class(),
            // A usage error of the data's is one here too; the rest are fatal.
            Error::TrainData(e) if e.class() == Class::Usage => Class::Usage,
            _ => Class::Fatal,
        }
    }
}

impl Error {
    /// A libtorch failure this error is (out of memory in a backward pass, say), typed.
    pub fn torch(&self) -> Option<error_class::Torch> {
        let from = |e: &dyn std::fmt::Display| error_class::Torch::from_message(&e.to_string());
        match self {
            Error::Torch(e) | Error::TrainData(train_data::Error::Torch(e)) => Some(from(e)),
            Error::Cuda(e) | Error::TrainData(train_data::Error::Cuda(e)) => Some(from(e)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use error_class::{Class, Classify, Torch, chain_text};
    use std::error::Error as _;

    #[test]
    fn errors_from_below_keep_their_source_and_class() {
        let e = Error::Io {
            what: "creating /x".into(),
            error: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert_eq!(chain_text(&e), "creating /x: permission denied");
        assert!(e.source().is_some_and(|s| s.is::<std::io::Error>()));
        assert_eq!(e.class(), Class::Fatal);

        let oom = || gpu_runtime::shim::Error("CUDA error: out of memory".into());
        let e = Error::from(oom());
        assert!(matches!(e, Error::Cuda(_)), "{e:?}");
        assert!(
            e.source()
                .is_some_and(|s| s.is::<gpu_runtime::shim::Error>())
        );
        assert_eq!(chain_text(&e), "CUDA error: out of memory");
        assert!(matches!(e.torch(), Some(Torch::OutOfMemory(_))));
        assert_eq!(e.class(), Class::Fatal);

        // The data's errors are kept whole, in their class.
        let e = Error::from(train_data::Error::Usage("a crop too large".into()));
        assert!(
            matches!(&e, Error::TrainData(train_data::Error::Usage(m)) if m == "a crop too large"),
            "{e:?}"
        );
        assert_eq!(e.class(), Class::Usage);
        let e = Error::from(train_data::Error::Cuda(oom()));
        assert!(matches!(e.torch(), Some(Torch::OutOfMemory(_))));
        let e = Error::from(train_data::Error::Shards(train_data::wds::Error::Open {
            path: "s/0.tar".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }));
        assert_eq!(e.class(), Class::Fatal);
        assert_eq!(chain_text(&e), "cannot read the shard: entity not found");
        assert!(e.source().is_some_and(|s| s.is::<std::io::Error>()));

        // The event handler's own error comes back as it was (a closed stdout, say).
        let e = Error::Caller(Box::new(std::io::Error::from(
            std::io::ErrorKind::BrokenPipe,
        )));
        let Error::Caller(inner) = &e else {
            unreachable!()
        };
        assert!(inner.is::<std::io::Error>());
        assert_eq!(e.to_string(), "broken pipe");
        assert_eq!(e.class(), Class::Fatal);
    }

    #[test]
    fn a_checkpoint_between_epochs_is_named_by_the_epoch_it_ends() {
        let at = |epoch, step| {
            Error::Checkpointed {
                epoch,
                step,
                steps: 5,
            }
            .to_string()
        };
        assert_eq!(at(2, 0), "stopped at the checkpoint of epoch 1's end");
        assert_eq!(
            at(2, 3),
            "stopped at a checkpoint after step 3 of 5 of epoch 2"
        );
    }
}
