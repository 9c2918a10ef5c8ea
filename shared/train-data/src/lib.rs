//! Training data as PyTorch reads it, so that a run sees the samples, pixels and order a
//! PyTorch script would:
//!
//! - [`data`]: where the samples come from (`--data`): CIFAR-10/100 binary files and a
//!   synthetic set held on the device, batches gathered, augmented and normalised there; image
//!   sources decoded on the CPU;
//! - [`folder`], [`recordio`], [`wds`]: torchvision's `ImageFolder`, MXNet RecordIO and
//!   webdataset tar shards;
//! - [`images`]: their samples decoded with Pillow's pixels and torchvision's transforms by a
//!   pool of threads, bad samples replaced deterministically;
//! - [`sampler`]: `DistributedSampler`, index for index, with torch's `randperm`.

pub mod data;
mod draws;
/// Image folders are read as torchvision's ImageFolder lists them (shared with `pack`).
pub use data_pack::folder;
pub mod images;
pub mod recordio;
pub mod sampler;
pub mod wds;

/// What went wrong with the data, by class.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The settings cannot work with these data (a crop larger than the images, say).
    #[error("{0}")]
    Usage(String),
    /// The data cannot be used (classes that do not match, labels past them, ...).
    #[error("{0}")]
    Data(String),
    /// MXNet RecordIO that cannot be read: the file, and the byte or line.
    #[error(transparent)]
    RecordIo(#[from] recordio::Error),
    /// webdataset shards that cannot be read: the shard, and the byte.
    #[error(transparent)]
    Shards(#[from] wds::Error),
    /// An image folder that cannot be listed.
    #[error(transparent)]
    Folder(#[from] folder::FolderError),
    /// The `classes.txt` beside the data cannot be read.
    #[error(transparent)]
    Classes(#[from] data_pack::ClassesError),
    /// More files than `--max-bad-inputs` could not be used.
    #[error(
        "more than --max-bad-inputs {max_bad} files could not be used; the first: {}",
        .first.join("; ")
    )]
    TooManyBad { max_bad: usize, first: Vec<String> },
    /// More than half the samples could not be used, whatever the bound.
    #[error(
        "{bad} of the {samples} samples could not be used (more than half); the first: {}",
        .first.join("; ")
    )]
    MostBad {
        bad: usize,
        samples: usize,
        first: Vec<String>,
    },
    /// A CIFAR binary file that cannot be read (the source names it): where to put the files
    /// (`dir`) when it is missing, else what the files hold.
    #[error(
        "{}",
        match .source.kind() {
            std::io::ErrorKind::NotFound =>
                format!("Nothing is downloaded: put the {hint} in {}", .dir.display()),
            _ => format!("the {hint} is read from files"),
        }
    )]
    Cifar {
        path: std::path::PathBuf,
        dir: std::path::PathBuf,
        hint: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The decoding threads cannot be started.
    #[error("starting decoding threads")]
    Threads(#[source] rayon::ThreadPoolBuildError),
    /// libtorch failed (moving the data to the device, say).
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    /// The device's generator failed.
    #[error("{0}")]
    Cuda(#[from] gpu_runtime::shim::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl error_class::Classify for Error {
    fn class(&self) -> error_class::Class {
        match self {
            Error::Usage(_) => error_class::Class::Usage,
            Error::Folder(e) => error_class::Classify::class(e),
            Error::Classes(e) => error_class::Classify::class(e),
            _ => error_class::Class::Fatal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use error_class::{Class, Classify};

    #[test]
    fn a_device_generator_failure_keeps_libtorch_error_as_its_source() {
        let e = Error::from(gpu_runtime::shim::Error("CUDA error: out of memory".into()));
        assert!(matches!(e, Error::Cuda(_)), "{e:?}");
        assert_eq!(e.to_string(), "CUDA error: out of memory");
        let source = std::error::Error::source(&e).expect("a source");
        assert!(source.is::<gpu_runtime::shim::Error>(), "{source:?}");
        assert_eq!(error_class::chain_text(&e), "CUDA error: out of memory");
        assert_eq!(e.class(), Class::Fatal);
    }
}
