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
    #[error("{0}")]
    Data(String),
    #[error("{0}")]
    Checkpoint(String),
    /// Another run holds the checkpoint directory.
    #[error(transparent)]
    Locked(#[from] atomic_file::LockError),
    #[error(transparent)]
    Collective(#[from] collectives::Error),
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    #[error("{0}")]
    Cuda(String),
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
    /// A checkpoint's optimiser state does not fit this run's optimiser.
    #[error(transparent)]
    OptimizerState(#[from] optim::StateError),
}

pub type Result<T> = std::result::Result<T, Error>;

impl error_class::Classify for Error {
    fn class(&self) -> error_class::Class {
        match self {
            Error::Usage(_) => error_class::Class::Usage,
            Error::Interrupted { .. } | Error::Checkpointed { .. } => {
                error_class::Class::Interrupted
            }
            Error::Collective(e) => error_class::Classify::class(e),
            _ => error_class::Class::Fatal,
        }
    }
}

impl From<train_data::Error> for Error {
    fn from(e: train_data::Error) -> Error {
        match e {
            train_data::Error::Usage(m) => Error::Usage(m),
            train_data::Error::Data(m) => Error::Data(m),
            train_data::Error::Torch(e) => Error::Torch(e),
            train_data::Error::Cuda(m) => Error::Cuda(m),
            // Typed data errors (a file and byte, a source): their whole text, in their class.
            e => match error_class::Classify::class(&e) {
                error_class::Class::Usage => Error::Usage(error_class::chain_text(&e)),
                _ => Error::Data(error_class::chain_text(&e)),
            },
        }
    }
}

impl From<gpu_runtime::shim::Error> for Error {
    fn from(e: gpu_runtime::shim::Error) -> Error {
        Error::Cuda(e.to_string())
    }
}

impl Error {
    /// A libtorch failure this error is (out of memory in a backward pass, say), typed.
    pub fn torch(&self) -> Option<error_class::Torch> {
        match self {
            Error::Torch(e) => Some(error_class::Torch::from_message(&e.to_string())),
            Error::Cuda(m) => Some(error_class::Torch::from_message(m)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
