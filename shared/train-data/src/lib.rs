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
    /// A CIFAR binary file that cannot be read (the source names it).
    #[error("{hint}")]
    Cifar {
        path: std::path::PathBuf,
        hint: String,
        #[source]
        source: std::io::Error,
    },
    /// libtorch failed (moving the data to the device, say).
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    /// The device's generator failed.
    #[error("{0}")]
    Cuda(String),
}

impl From<gpu_runtime::shim::Error> for Error {
    fn from(e: gpu_runtime::shim::Error) -> Error {
        Error::Cuda(e.to_string())
    }
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
