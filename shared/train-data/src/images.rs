//! A dataset of encoded images (an image tree read as torchvision's `ImageFolder` reads it,
//! [`crate::folder`]; the records of a `.rec`, [`crate::recordio`]; the samples of tar shards,
//! [`crate::wds`]), decoded batch by batch with Pillow's pixels and torchvision's transforms
//! ([`imaging::transforms`]) by a pool of threads, only the part of each image a crop reads.
//!
//! A batch is made in host memory (pinned when it goes to a GPU) and, for a GPU, copied on a side
//! stream that the training stream waits for (the `DataLoaderX` pattern): the copy overlaps the
//! steps queued before it.
//!
//! Training draws (the crop's box and the flip) come from a generator seeded by (seed, epoch,
//! sample index), so a batch is the same whatever `--workers` is, and on `--resume`;
//! torchvision's draws come from torch's generator, which this does not reproduce.
//!
//! A file that cannot be used (unreadable, not an image, a decoding error, the wrong size) is
//! replaced by the next sample of the rank's order (the dataset's next when no order was given),
//! and counted; past `max_bad` in a run, the batch fails with an error naming the first ones.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};

use imaging::{DecodeOptions, Frame, transforms};
use tch::{Device, Tensor};

use crate::draws::Draws;
use crate::{Error, Result};

/// Why one sample cannot be used (it is replaced, and counted: [`ImageFiles`]).
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error(transparent)]
    RecordIo(#[from] crate::recordio::Error),
    #[error(transparent)]
    Shards(#[from] crate::wds::Error),
    /// The file cannot be opened or read (the io error's text names the file).
    #[error("{source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{len} bytes, over the {limit} an image within --max-pixels takes")]
    FileTooLarge { len: u64, limit: u64 },
    #[error("a payload of {len} bytes, over --max-pixels' bound")]
    PayloadTooLarge { len: u64 },
    #[error(transparent)]
    Decode(#[from] imaging::Error),
    #[error(
        "is {width}x{height}, not the {size}x{size} that --image-size says (and --transform \
         {transform} does not resize)"
    )]
    Size {
        width: u32,
        height: u32,
        size: u32,
        transform: &'static str,
    },
    #[error("the decoder panicked on it")]
    Panicked,
}

/// What becomes of each image before the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Transform {
    /// torchvision's ImageNet recipe: training `RandomResizedCrop(size, scale=(0.08, 1),
    /// ratio=(3/4, 4/3))` + `RandomHorizontalFlip()`, evaluation `Resize(size * 256 / 224)` +
    /// `CenterCrop(size)`, both with Pillow's BILINEAR.
    Imagenet,
    /// The face-set recipe: the image as it is (it must be size×size), flipped at random for
    /// training.
    Flip,
    /// The image as it is (size×size), for training and evaluation alike.
    None,
}

/// How images are prepared (every field a flag of the tool).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageOptions {
    /// Side of the square the model sees.
    pub size: u32,
    pub transform: Transform,
    /// `Normalize(mean, std)` after `ToTensor()`.
    pub mean: [f32; 3],
    pub std: [f32; 3],
    /// Decoding threads (per rank); with shards, also how each rank's shards are split.
    pub workers: usize,
    /// Samples in each thread's shuffle buffer, for shards.
    pub shuffle_buffer: usize,
    /// Files that cannot be used, in the whole run, before it stops.
    pub max_bad: usize,
    pub decode: DecodeOptions,
    /// For sources that number their classes (RecordIO, shards): how many there are
    /// (`--num-classes`; a label past them is an error), else 0 to the largest label, which
    /// must be under [`DEFAULT_MAX_CLASSES`].
    pub classes: Option<usize>,
}

/// The most classes a source that numbers them may have when the run does not state their
/// number: a label sizes the model's last layer, so one label of 10^9 in a damaged or hostile
/// file would otherwise ask for gigabytes.
pub const DEFAULT_MAX_CLASSES: usize = 100_000;

/// The most classes a run may state (`--num-classes`).
pub const MAX_CLASSES: usize = 10_000_000;

impl Default for ImageOptions {
    /// 224² ImageNet transforms and statistics, one thread, a shuffle buffer of 1000, 100 bad
    /// files.
    fn default() -> Self {
        ImageOptions {
            size: 224,
            transform: Transform::Imagenet,
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
            workers: 1,
            shuffle_buffer: 1000,
            max_bad: 100,
            decode: DecodeOptions::default(),
            classes: None,
        }
    }
}

/// ImageNet's channel statistics (torchvision's reference scripts).
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// The files (or records) of one split, their labels, and the threads that decode them.
#[derive(Debug)]
pub struct ImageFiles {
    /// Each sample's name: its file, `PREFIX.rec:KEY` for a record, `SHARD:KEY` in a shard.
    pub paths: Vec<PathBuf>,
    store: Store,
    pub labels: Vec<i64>,
    pub classes: Vec<OsString>,
    /// Whether [`Self::classes`] came from a `classes.txt` beside the data (sources that number
    /// their classes), rather than from the labels (folders name them always).
    pub named_classes: bool,
    opts: ImageOptions,
    seed: i64,
    pool: rayon::ThreadPool,
    /// Samples skipped so far (a bad file counts each time it is met: the epochs' figures).
    bad: AtomicUsize,
    /// Whether batches are made in pinned host memory (they go to a GPU).
    pub(crate) pinned: bool,
    /// The distinct bad files (what `max_bad` bounds: a file met again in a later epoch is
    /// still one file), and the first of them with why (for the error that ends a run).
    bad_files: Mutex<(std::collections::HashSet<usize>, Vec<String>)>,
    /// The sample that took each bad sample's place when it was last asked for
    /// ([`Self::taken`]).
    taken: Mutex<std::collections::HashMap<usize, usize>>,
    /// Batches being decoded ahead, oldest first.
    pending: Mutex<VecDeque<Pending>>,
    /// This rank's order of the samples, for training (`[1]`, per epoch) and evaluation
    /// (`[0]`): a sample that cannot be used is replaced by the next one of it.
    orders: Mutex<[Option<RankOrder>; 2]>,
    /// Host batches handed out lately (not pinned ones), to be written again once no one else
    /// holds them ([`Self::host_batch`]); at most [`SPARE_BATCHES`].
    spare: Mutex<VecDeque<(Tensor, Tensor)>>,
}

/// How many host batches [`ImageFiles::host_batch`] keeps for reuse: more than are in use at
/// once (the one a step trains on, those decoded ahead, the one being decoded).
const SPARE_BATCHES: usize = 8;

/// A rank's list of samples for one epoch, and where each sample first stands in it.
#[derive(Debug)]
struct RankOrder {
    epoch: usize,
    list: Vec<usize>,
    at: std::collections::HashMap<usize, usize>,
}

/// Where the samples' bytes are.
#[derive(Debug)]
enum Store {
    /// Each in its file (`paths`).
    Files,
    /// Records of a `.rec`, at these offsets, of these keys.
    Records(crate::recordio::RecordIo, Vec<u64>, Vec<u64>),
    /// In tar shards.
    Shards(crate::wds::Shards),
}

/// What a batch is asked by: (indices, augment, epoch).
type Key = (Vec<i64>, bool, usize);

/// A batch's pixels (float32 [n, 3, size, size]) and labels (int64 [n]), once decoded: host
/// tensors, in pinned memory when the batches go to a GPU.
type Decoded = Result<(Tensor, Tensor)>;

/// A batch being decoded ahead: its key and where its result arrives.
#[derive(Debug)]
struct Pending {
    key: Key,
    result: Receiver<Decoded>,
}

impl ImageFiles {
    pub fn new(
        folder: crate::folder::ImageFolder,
        opts: ImageOptions,
        seed: i64,
    ) -> Result<ImageFiles> {
        // What the walk could not read is said, not silently lost (os.walk's way).
        for (dir, why) in &folder.skipped {
            log::warn!(
                "{}: cannot be read ({why}): the images in it are left out",
                dir.display()
            );
        }
        let (paths, labels) = folder.samples.into_iter().unzip();
        Self::with(paths, Store::Files, labels, folder.classes, opts, seed)
    }

    /// The images of an MXNet RecordIO file, as MXFaceDataset lists them; a record's class is
    /// its label (or its label vector's first), classes 0 to the largest.
    pub fn from_records(
        rec: crate::recordio::RecordIo,
        prefix: &std::path::Path,
        opts: ImageOptions,
        seed: i64,
    ) -> Result<ImageFiles> {
        let offsets: std::collections::HashMap<u64, u64> = rec.index.iter().copied().collect();
        let keys = rec.image_keys()?;
        let (mut paths, mut labels, mut at) = (Vec::new(), Vec::new(), Vec::new());
        for &key in &keys {
            let name = || format!("{}.rec:{key}", prefix.display());
            let offset = *offsets
                .get(&key)
                .ok_or_else(|| Error::Data(format!("{}: key {key} is not in the index", name())))?;
            let class = rec.class(offset)?;
            if !(class.is_finite() && class >= 0.0 && class.fract() == 0.0 && class < 1e9) {
                return Err(Error::Data(format!(
                    "{}: label {class} is not a class number",
                    name()
                )));
            }
            paths.push(PathBuf::from(name()));
            labels.push(class as i64);
            at.push(offset);
        }
        if paths.is_empty() {
            return Err(Error::Data(format!(
                "{}.rec holds no image",
                prefix.display()
            )));
        }
        let named = data_pack::read_classes_beside(prefix)?;
        let is_named = named.is_some();
        let classes = numbered_classes(&paths, &labels, opts.classes, named)?;
        let store = Store::Records(rec, at, keys);
        let mut files = Self::with(paths, store, labels, classes, opts, seed)?;
        files.named_classes = is_named;
        Ok(files)
    }

    /// The samples of webdataset shards ([`crate::wds`]); classes 0 to the largest.
    pub fn from_shards(
        shards: crate::wds::Shards,
        opts: ImageOptions,
        seed: i64,
    ) -> Result<ImageFiles> {
        if shards.left_out_count > 0 {
            log::warn!(
                "{} sample{} in the shards left out (no image or no class); the first: {}",
                shards.left_out_count,
                if shards.left_out_count == 1 { "" } else { "s" },
                shards.left_out.join("; ")
            );
        }
        let paths: Vec<PathBuf> = (0..shards.samples.len()).map(|i| shards.name(i)).collect();
        let labels: Vec<i64> = shards.samples.iter().map(|s| s.label).collect();
        let named = match shards.files.first() {
            Some(first) => data_pack::read_classes_beside(first)?,
            None => None,
        };
        let is_named = named.is_some();
        let classes = numbered_classes(&paths, &labels, opts.classes, named)?;
        let mut files = Self::with(paths, Store::Shards(shards), labels, classes, opts, seed)?;
        files.named_classes = is_named;
        Ok(files)
    }

    /// This rank's training order for `epoch` when the samples are in shards (webdataset's
    /// split over ranks and `--workers` threads, [`crate::wds`]); None for other sources, which
    /// the sampler orders.
    pub fn shard_order(
        &self,
        sampler: &crate::sampler::DistributedSampler,
        epoch: usize,
        block: usize,
    ) -> Option<Vec<usize>> {
        let Store::Shards(shards) = &self.store else {
            return None;
        };
        let split = crate::wds::Split {
            world: sampler.world,
            rank: sampler.rank,
            workers: self.opts.workers,
            block,
            shuffle: sampler.shuffle,
            seed: sampler.seed,
            drop_last: sampler.drop_last,
            buffer: self.opts.shuffle_buffer,
        };
        Some(shards.order(&split, epoch))
    }

    fn with(
        paths: Vec<PathBuf>,
        store: Store,
        labels: Vec<i64>,
        classes: Vec<OsString>,
        opts: ImageOptions,
        seed: i64,
    ) -> Result<ImageFiles> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.workers.max(1))
            .thread_name(|i| format!("decode-{i}"))
            .build()
            .map_err(Error::Threads)?;
        Ok(ImageFiles {
            paths,
            store,
            labels,
            classes,
            named_classes: false,
            opts,
            seed,
            pool,
            bad: AtomicUsize::new(0),
            pinned: false,
            bad_files: Mutex::new(Default::default()),
            taken: Mutex::new(Default::default()),
            pending: Mutex::new(VecDeque::new()),
            orders: Mutex::new([None, None]),
            spare: Mutex::new(VecDeque::new()),
        })
    }

    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    pub fn size(&self) -> u32 {
        self.opts.size
    }

    /// Files found unusable so far.
    /// The sample whose pixels and label stood for sample `index` when it was last decoded:
    /// `index` itself, or the sample that replaced it (a bad file).
    pub fn taken(&self, index: usize) -> usize {
        let taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        taken.get(&index).copied().unwrap_or(index)
    }

    /// The path of the file sample `index` was packed from, relative to the folder packed
    /// (what `pack` stores: a shard sample's `path` member, a record's line of `PREFIX.lst`),
    /// if the data holds one; none for files, which [`Self::paths`] names.
    pub fn packed_path(&self, index: usize) -> Result<Option<PathBuf>> {
        match &self.store {
            Store::Records(rec, _, keys) => Ok(rec.packed_path(keys[index])?),
            Store::Shards(shards) => Ok(shards.packed_path(index)?),
            Store::Files => Ok(None),
        }
    }

    pub fn bad_inputs(&self) -> usize {
        self.bad.load(Ordering::Relaxed)
    }

    /// Why the store can no longer be read as it was opened (a `.rec` or shard cut short while
    /// the run reads it), if it cannot.
    fn shrunk(&self, index: usize) -> Option<Error> {
        match &self.store {
            Store::Records(rec, ..) => rec.shrunk().map(Error::from),
            Store::Shards(shards) => shards.shrunk(index).map(Error::from),
            Store::Files => None,
        }
    }

    /// Sample `index` as the model receives it: float32 [3, size, size] into `out`.
    fn load(
        &self,
        index: usize,
        augment: bool,
        epoch: usize,
        out: &mut [f32],
    ) -> std::result::Result<(), SampleError> {
        let o = &self.opts;
        let bytes = match &self.store {
            Store::Records(rec, offsets, _) => {
                let payload = rec.read(offsets[index])?.payload;
                if payload.len() as u64 > o.decode.max_file_bytes() {
                    return Err(SampleError::PayloadTooLarge {
                        len: payload.len() as u64,
                    });
                }
                payload
            }
            Store::Shards(shards) => shards.read(index, o.decode.max_file_bytes())?,
            Store::Files => read_bounded(&self.paths[index], o.decode.max_file_bytes())?,
        };
        let mut draws = Draws::new(self.seed, epoch, index);
        let (img, flip) = match (o.transform, augment) {
            (Transform::Imagenet, true) => {
                let img = transforms::train_crop(
                    &bytes,
                    &o.decode,
                    Frame::Stored,
                    o.size,
                    (0.08, 1.0),
                    (3.0 / 4.0, 4.0 / 3.0),
                    || draws.uniform(),
                );
                (img, draws.uniform() < 0.5)
            }
            (Transform::Imagenet, false) => (
                transforms::eval_crop(&bytes, &o.decode, Frame::Stored, o.size * 256 / 224, o.size),
                false,
            ),
            (Transform::Flip | Transform::None, _) => {
                let img = imaging::decode_rgb(&bytes, &o.decode).map(|d| d.rgb);
                let flip = o.transform == Transform::Flip && augment && draws.uniform() < 0.5;
                (img, flip)
            }
        };
        let img = img?;
        if img.dimensions() != (o.size, o.size) {
            return Err(SampleError::Size {
                width: img.width(),
                height: img.height(),
                size: o.size,
                transform: match o.transform {
                    Transform::Flip => "flip",
                    _ => "none",
                },
            });
        }
        transforms::to_chw(&img, o.mean, o.std, flip, out);
        Ok(())
    }

    /// This rank's samples in the order it takes them, for training (`augment`) in `epoch` or
    /// for evaluation: a sample that cannot be used is replaced by the next good one of this
    /// list (without one, by the next of the dataset).
    pub fn set_order(&self, augment: bool, epoch: usize, list: Vec<usize>) {
        let mut at = std::collections::HashMap::with_capacity(list.len());
        for (p, &i) in list.iter().enumerate() {
            at.entry(i).or_insert(p);
        }
        self.orders.lock().unwrap_or_else(|e| e.into_inner())[augment as usize] =
            Some(RankOrder { epoch, list, at });
    }

    /// Starts decoding the batch at `indices` on the worker threads, for a later [`Self::batch`]
    /// with the same arguments to take (the trainer asks a few steps ahead, so that decoding
    /// overlaps the steps before).
    pub fn prefetch(self: &Arc<Self>, indices: Vec<i64>, augment: bool, epoch: usize) {
        let (tx, rx) = channel();
        let me = Arc::clone(self);
        let key = (indices, augment, epoch);
        let job = key.clone();
        self.pool.spawn(move || {
            // The receiver may be gone (a run that stopped): nothing to deliver then.
            let _ = tx.send(me.decode(&job.0, job.1, job.2));
        });
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(Pending { key, result: rx });
    }

    /// The samples at `indices`: images (float32 [n, 3, size, size], normalised) and labels
    /// (int64 [n]) on `device`, from [`Self::prefetch`] when it was asked for them, else decoded
    /// now. A sample that cannot be used is replaced by the next one in the dataset (counted;
    /// an error past `max_bad` in the run).
    pub fn batch(
        &self,
        indices: &[i64],
        augment: bool,
        epoch: usize,
        device: Device,
    ) -> Result<(Tensor, Tensor)> {
        let ahead = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let wanted = |p: &Pending| p.key.0 == indices && p.key.1 == augment && p.key.2 == epoch;
            // Batches asked before this one and never taken are stale: dropped.
            match pending.iter().position(wanted) {
                Some(at) => {
                    pending.drain(..at);
                    pending.pop_front()
                }
                None => None,
            }
        };
        let decoded = match ahead {
            Some(p) => p
                .result
                .recv()
                .map_err(|_| Error::Data("a decoding thread stopped without its batch".into()))?,
            None => self.decode(indices, augment, epoch),
        };
        let (x, y) = decoded?;
        match device {
            // From pinned memory on a side stream that the training stream waits for: the copy
            // overlaps the steps queued before it, and the host runs on.
            Device::Cuda(i) => Ok((
                gpu_runtime::shim::to_device_on_side_stream(&x, i)?,
                gpu_runtime::shim::to_device_on_side_stream(&y, i)?,
            )),
            _ => Ok((x.to_device(device), y.to_device(device))),
        }
    }

    /// Host tensors for a batch of `n`: pixels and labels, pinned when the batches go to a GPU.
    /// Unpinned ones are reused: an earlier batch that nothing holds any more (no handle, view
    /// or tensor autograd saved: [`gpu_runtime::shim::sole_owner`]) is written again, since new
    /// memory costs a page fault per 4 KiB on its first write (a fifth of the decoding time of
    /// 224² batches of 64; PyTorch's DataLoader pays it too). Pinned memory comes from libtorch's
    /// caching host allocator, which reuses it once the copies from it are done.
    fn host_batch(&self, n: usize) -> Result<(Tensor, Tensor)> {
        let s = self.opts.size as i64;
        let shape = [n as i64, 3, s, s];
        if self.pinned {
            return Ok((
                gpu_runtime::shim::empty_pinned(&shape, tch::Kind::Float)?,
                gpu_runtime::shim::empty_pinned(&[n as i64], tch::Kind::Int64)?,
            ));
        }
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        let free = spare.iter().position(|(x, y)| {
            use gpu_runtime::shim::sole_owner;
            x.size() == shape && sole_owner(x) && sole_owner(y)
        });
        let (x, y) = match free.and_then(|i| spare.remove(i)) {
            Some(batch) => batch,
            None => {
                if spare.len() == SPARE_BATCHES {
                    spare.pop_front();
                }
                (
                    Tensor::empty(shape, (tch::Kind::Float, Device::Cpu)),
                    Tensor::empty([n as i64], (tch::Kind::Int64, Device::Cpu)),
                )
            }
        };
        spare.push_back((x.shallow_clone(), y.shallow_clone()));
        Ok((x, y))
    }

    /// The `k`-th sample to try in place of sample `index` (k = 1, 2, …): the samples after it
    /// in this rank's order ([`Self::set_order`]) for this epoch, wrapping round; else the
    /// dataset's next samples. Asked only when a sample cannot be used.
    fn replacement(&self, index: usize, k: usize, augment: bool, epoch: usize) -> usize {
        let orders = self.orders.lock().unwrap_or_else(|e| e.into_inner());
        let order = orders[augment as usize]
            .as_ref()
            .filter(|o| !augment || o.epoch == epoch);
        match order.and_then(|o| Some((o, *o.at.get(&index)?))) {
            Some((o, p)) => o.list[(p + k) % o.list.len()],
            None => (index + k) % self.len(),
        }
    }

    /// Image files named by their paths, unlabelled (label 0, no classes), for a tool that
    /// prepares images as evaluation does ([`Self::eval_batch`]).
    pub fn from_paths(paths: Vec<PathBuf>, opts: ImageOptions) -> Result<ImageFiles> {
        let labels = vec![0; paths.len()];
        Self::with(paths, Store::Files, labels, Vec::new(), opts, 0)
    }

    /// The samples at `indices` as evaluation prepares them (the transform's evaluation form,
    /// normalised), decoded on the worker threads: float32 [n, 3, size, size] on the host, and
    /// per sample `Ok` or why it cannot be used (its rows then hold nothing meaningful). Unlike
    /// [`Self::batch`], a bad sample is neither replaced nor counted: the caller reports it (the
    /// reason as text, whole: `error_class::chain_text` of the [`SampleError`]).
    pub fn eval_batch(
        &self,
        indices: &[usize],
    ) -> (Tensor, Vec<std::result::Result<(), SampleError>>) {
        use rayon::prelude::*;
        let s = self.opts.size as usize;
        let per = 3 * s * s;
        let x = Tensor::zeros(
            [indices.len() as i64, 3, s as i64, s as i64],
            (tch::Kind::Float, Device::Cpu),
        );
        // SAFETY: `x` is a new contiguous host tensor of exactly these many float32 elements,
        // held only here while the slice lives.
        let pixels = unsafe {
            std::slice::from_raw_parts_mut(x.data_ptr() as *mut f32, indices.len() * per)
        };
        let results = self.pool.install(|| {
            pixels
                .par_chunks_exact_mut(per)
                .zip(indices.par_iter())
                .map(|(out, &index)| {
                    // A decoder that panics on a file makes it a bad sample, not the end.
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        self.load(index, false, 0, out)
                    }))
                    .unwrap_or(Err(SampleError::Panicked))
                })
                .collect()
        });
        (x, results)
    }

    /// Decodes the batch at `indices` on the worker threads: pixels and labels.
    fn decode(&self, indices: &[i64], augment: bool, epoch: usize) -> Decoded {
        use rayon::prelude::*;
        let s = self.opts.size as usize;
        let per = 3 * s * s;
        if indices.is_empty() {
            return Err(Error::Data("an empty batch".into()));
        }
        let (x, y) = self.host_batch(indices.len())?;
        // SAFETY: `x` and `y` are contiguous host tensors of exactly these many float32 and int64
        // elements, new or held by no one else ([`Self::host_batch`]; the clone it keeps is only
        // asked its reference counts), so not read or written elsewhere while the slices live.
        let pixels = unsafe {
            std::slice::from_raw_parts_mut(x.data_ptr() as *mut f32, indices.len() * per)
        };
        // SAFETY: as above, for `y`.
        let label_out =
            unsafe { std::slice::from_raw_parts_mut(y.data_ptr() as *mut i64, indices.len()) };
        let labels: Vec<Result<i64>> = self.pool.install(|| {
            pixels
                .par_chunks_exact_mut(per)
                .zip(indices.par_iter())
                .map(|(out, &first)| self.decode_one(first as usize, (augment, epoch), out))
                .collect()
        });
        for (out, label) in label_out.iter_mut().zip(labels) {
            *out = label?;
        }
        Ok((x, y))
    }

    /// Decodes sample `first` (modulo the samples) into `out` and gives its label; a bad one
    /// is counted and replaced by the next sample that decodes (see [`Self::replacement`]).
    fn decode_one(
        &self,
        first: usize,
        (augment, epoch): (bool, usize),
        out: &mut [f32],
    ) -> Result<i64> {
        let first = first % self.len();
        let (mut index, mut tries) = (first, 0);
        loop {
            // A decoder that panics on a file makes it a bad input, not the end of the run.
            let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.load(index, augment, epoch, out)
            }))
            .unwrap_or(Err(SampleError::Panicked));
            match loaded {
                Ok(()) => {
                    if index != first {
                        self.taken
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(first, index);
                    }
                    return Ok(self.labels[index]);
                }
                Err(why) => {
                    // Data cut short under the run end it: not a bad sample to replace (the
                    // rest of the file would be skipped one by one).
                    if let Some(e) = self.shrunk(index) {
                        return Err(e);
                    }
                    self.note_bad(index, &why)?;
                    tries += 1;
                    index = self.replacement(first, tries, augment, epoch);
                }
            }
        }
    }

    /// Counts sample `index` as bad (`why`), warning the first time; an error once the bad
    /// ones pass `max_bad` or most of the data.
    fn note_bad(&self, index: usize, why: &SampleError) -> Result<()> {
        let n = self.len();
        let why = error_class::chain_text(why);
        let text = format!("{}: {why}", self.paths[index].display());
        self.bad.fetch_add(1, Ordering::Relaxed);
        let mut files = self.bad_files.lock().unwrap_or_else(|e| e.into_inner());
        if files.0.insert(index) {
            if files.1.len() < 5 {
                files.1.push(text.clone());
            }
            let bad = files.0.len();
            log::warn!("skipping {text} (bad input {bad}, the next sample takes its place)");
            if bad > self.opts.max_bad {
                return Err(Error::TooManyBad {
                    max_bad: self.opts.max_bad,
                    first: files.1.clone(),
                });
            }
            // Whatever the bound, a run on data of which most cannot be used is not the run
            // asked for.
            if bad * 2 > n {
                return Err(Error::MostBad {
                    bad,
                    samples: n,
                    first: files.1.clone(),
                });
            }
        }
        Ok(())
    }
}

/// The classes of sources that number them (the samples at `paths`): the names of the
/// `classes.txt` beside them (what `pack` writes), else "0" to `stated - 1`, or to the largest
/// label. Checked first: a label past the classes named or stated, or past
/// [`DEFAULT_MAX_CLASSES`] when none are, is an error naming its sample.
fn numbered_classes(
    paths: &[PathBuf],
    labels: &[i64],
    stated: Option<usize>,
    named: Option<Vec<OsString>>,
) -> Result<Vec<OsString>> {
    let limit = stated.unwrap_or(DEFAULT_MAX_CLASSES).min(MAX_CLASSES);
    if let Some(names) = named {
        // The names size the model's last layer as labels do: the same bound.
        if names.len() > limit {
            let why = match stated {
                Some(n) => format!("--num-classes is {n}"),
                None => format!(
                    "more than {DEFAULT_MAX_CLASSES} classes need --num-classes N to state how \
                     many (at most {MAX_CLASSES})"
                ),
            };
            return Err(Error::Data(format!(
                "the classes.txt beside the data names {} classes: {why}",
                names.len()
            )));
        }
        if let Some(n) = stated.filter(|&n| n != names.len()) {
            return Err(Error::Usage(format!(
                "--num-classes is {n}, but the classes.txt beside the data names {}",
                names.len()
            )));
        }
        if let Some((path, label)) =
            (paths.iter().zip(labels)).find(|&(_, &l)| l >= names.len() as i64)
        {
            return Err(Error::Data(format!(
                "{}: label {label} is past the {} classes named in the classes.txt beside it",
                path.display(),
                names.len()
            )));
        }
        return Ok(names);
    }
    let limit = limit as i64;
    if let Some((path, label)) = paths.iter().zip(labels).find(|&(_, &l)| l >= limit) {
        let why = match stated {
            Some(n) => format!("--num-classes is {n}"),
            None => format!(
                "more than {DEFAULT_MAX_CLASSES} classes need --num-classes N to state how many \
                 (at most {MAX_CLASSES})"
            ),
        };
        return Err(Error::Data(format!(
            "{}: label {label} is past the classes: {why}",
            path.display()
        )));
    }
    let n = stated.map_or_else(
        || labels.iter().copied().max().unwrap_or(0) + 1,
        |n| n as i64,
    );
    Ok((0..n).map(|c| OsString::from(c.to_string())).collect())
}

/// A file's bytes, refusing more than `limit` (and anything but a regular file).
fn read_bounded(path: &std::path::Path, limit: u64) -> std::result::Result<Vec<u8>, SampleError> {
    use std::io::Read;
    // Opened without blocking: a FIFO in a folder is refused, not waited on.
    let read = |source| SampleError::Read {
        path: path.to_path_buf(),
        source,
    };
    let (f, len) = input_file::open(path).map_err(read)?;
    if len > limit {
        return Err(SampleError::FileTooLarge { len, limit });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(limit + 1).read_to_end(&mut bytes).map_err(read)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An image folder of `n` 40×30 PNGs of noise in two classes.
    fn noise_folder(dir: &std::path::Path, n: usize) -> crate::folder::ImageFolder {
        let mut state = 7u32;
        for i in 0..n {
            let class = dir.join(format!("c{}", i % 2));
            std::fs::create_dir_all(&class).unwrap();
            let pixels: Vec<u8> = (0..40 * 30 * 3)
                .map(|_| {
                    state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (state >> 16) as u8
                })
                .collect();
            let f = std::fs::File::create(class.join(format!("{i}.png"))).unwrap();
            imaging::write_png(f, &pixels, 40, 30, 3).unwrap();
        }
        crate::folder::ImageFolder::scan(dir).unwrap()
    }

    #[test]
    fn an_evaluation_batch_says_why_each_bad_sample_is_bad_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let folder = noise_folder(dir.path(), 1);
        let good = folder.samples[0].0.clone();
        let text = dir.path().join("notes.png");
        std::fs::write(&text, b"not an image at all").unwrap();
        let missing = dir.path().join("gone.png");
        let opts = ImageOptions {
            size: 16,
            ..Default::default()
        };
        let files = ImageFiles::from_paths(vec![good, text, missing.clone()], opts).unwrap();
        let (x, results) = files.eval_batch(&[0, 1, 2]);
        assert_eq!(x.size(), [3, 3, 16, 16]);
        assert!(results[0].is_ok(), "{:?}", results[0]);
        assert!(
            matches!(&results[1], Err(SampleError::Decode(_))),
            "{:?}",
            results[1]
        );
        match &results[2] {
            Err(e @ SampleError::Read { path, source }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
                assert_eq!(*path, missing);
                let io = std::error::Error::source(e).expect("a source");
                assert!(io.is::<std::io::Error>(), "{io:?}");
                // Its text is the io error's, once (which names the file).
                assert_eq!(error_class::chain_text(e), source.to_string());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn host_batches_are_reused_only_once_nothing_holds_them() {
        let dir = tempfile::tempdir().unwrap();
        let opts = ImageOptions {
            size: 16,
            ..Default::default()
        };
        let files = ImageFiles::new(noise_folder(dir.path(), 6), opts, 0).unwrap();
        let batch = |indices: &[i64]| files.batch(indices, true, 0, Device::Cpu).unwrap();
        let first = batch(&[0, 1, 2]);
        let (held, held_labels) = (first.0.copy(), first.1.copy());
        // Held: the next batch is made in other memory, and the first is left as it was.
        let second = batch(&[3, 4, 5]);
        assert_ne!(first.0.data_ptr(), second.0.data_ptr());
        assert!(first.0.equal(&held));
        // A view of it keeps it too.
        let (at, view) = (first.0.data_ptr(), first.0.narrow(0, 1, 1));
        drop(first);
        let third = batch(&[3, 4, 5]);
        assert_ne!(third.0.data_ptr(), at);
        assert!(view.equal(&held.narrow(0, 1, 1)));
        // Let go: its memory is written again, with what a batch in new memory holds.
        drop(view);
        let again = batch(&[0, 1, 2]);
        assert_eq!(again.0.data_ptr(), at);
        assert!(again.0.equal(&held) && again.1.equal(&held_labels));
        assert!(third.0.equal(&second.0));
        // A batch of another size is never made in its memory.
        drop(again);
        assert_ne!(batch(&[0, 1]).0.data_ptr(), at);
    }
}
