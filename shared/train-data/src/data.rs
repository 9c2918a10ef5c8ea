//! Image classification data held on the training device.
//!
//! CIFAR-10/100 come from their official binary files (memory-mapped, one copy into a uint8
//! tensor, then moved to the device: 150 MB for CIFAR-100, which fits any GPU). A batch is an
//! `index_select` by a device index tensor, then augmentation (random crop with zero padding 4,
//! horizontal flip: torchvision's RandomCrop(32, padding=4) + RandomHorizontalFlip) and
//! normalisation, all tensor ops on the device: no per-sample CPU work on the hot path. Random
//! draws use libtorch's generator, which the trainer seeds per (seed, epoch, rank).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use gpu_runtime::rng::Generator;
use tch::{Device, Kind, Tensor};

use crate::{Error, Result};

/// Which files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `cifar-10-batches-bin`: data_batch_{1..5}.bin, test_batch.bin; 1 label byte per record.
    Cifar10(PathBuf),
    /// `cifar-100-binary`: train.bin, test.bin; coarse + fine label bytes per record.
    Cifar100(PathBuf),
    /// A tree of images by class, read as torchvision's `ImageFolder` reads it: `DIR/train` and
    /// `DIR/val` when both exist (the ImageNet layout), else `DIR` with the validation tree in
    /// `val`.
    ImageFolder { dir: PathBuf, val: Option<PathBuf> },
    /// MXNet's indexed RecordIO, `PREFIX.rec` + `PREFIX.idx` (insightface's face sets); the
    /// validation set is another (`val`, required).
    RecordIo {
        prefix: PathBuf,
        val: Option<PathBuf>,
    },
    /// webdataset tar shards (`PATTERN` with braces, as webdataset expands it); the validation
    /// shards are another pattern (`val`, required).
    Shards {
        pattern: PathBuf,
        val: Option<PathBuf>,
    },
    /// Class prototypes plus noise: learnable, for benchmarks and demos.
    Synthetic {
        train: usize,
        test: usize,
        classes: i64,
        seed: i64,
        /// Image side (32 unless `synthetic:N:SIZE`).
        size: i64,
    },
}

/// Images and labels (int64 [N]) on one device.
#[derive(Debug)]
pub struct Dataset {
    pub images: Images,
    pub labels: Tensor,
    pub num_classes: i64,
}

/// Where a dataset's images are.
#[derive(Debug)]
pub enum Images {
    /// Decoded, uint8 [N,3,H,W] on the device (32×32 but for `synthetic:N:SIZE`).
    Tensor(Tensor),
    /// Encoded files, decoded batch by batch; batches go to the device.
    Files(std::sync::Arc<crate::images::ImageFiles>, Device),
}

impl Images {
    /// The decoded images (not for files).
    ///
    /// # Panics
    /// For files.
    pub fn tensor(&self) -> &Tensor {
        match self {
            Images::Tensor(t) => t,
            Images::Files(..) => panic!("images in files are decoded batch by batch"),
        }
    }
}

/// Per-channel mean and std (of the training images, in [0,1]) for normalisation.
#[derive(Debug)]
pub struct Normalize {
    pub mean: Tensor,
    pub std: Tensor,
}

const RECORD_PIXELS: usize = 3 * 32 * 32;

impl Source {
    /// Parses `--data`: `cifar10:DIR`, `cifar100:DIR`, `synthetic`, `synthetic:N` or
    /// `synthetic:N:SIZE` (SIZE×SIZE images instead of 32×32). DIR is taken as bytes: a
    /// directory name need not be UTF-8.
    ///
    /// Kept in one piece: one arm per `--data` kind, with its usage error.
    pub fn parse(s: &OsStr, seed: i64) -> Result<Source> {
        let bytes = s.as_bytes();
        let (kind, arg) = match bytes.iter().position(|&b| b == b':') {
            Some(i) => (&bytes[..i], OsStr::from_bytes(&bytes[i + 1..])),
            None => (bytes, OsStr::new("")),
        };
        match kind {
            b"recordio" if arg.is_empty() => Err(Error::Usage(
                "--data recordio:PREFIX needs the prefix of PREFIX.rec and PREFIX.idx".into(),
            )),
            b"recordio" => Ok(Source::RecordIo {
                prefix: arg.into(),
                val: None,
            }),
            b"wds" if arg.is_empty() => Err(Error::Usage(
                "--data wds:PATTERN needs the shards (e.g. wds:shards/{00000..00099}.tar)".into(),
            )),
            b"wds" => Ok(Source::Shards {
                pattern: arg.into(),
                val: None,
            }),
            b"imagefolder" if arg.is_empty() => Err(Error::Usage(
                "--data imagefolder:DIR needs the directory".into(),
            )),
            b"imagefolder" => Ok(Source::ImageFolder {
                dir: arg.into(),
                val: None,
            }),
            b"cifar10" | b"cifar100" if arg.is_empty() => Err(Error::Usage(format!(
                "--data {}:DIR needs the directory",
                String::from_utf8_lossy(kind)
            ))),
            b"cifar10" => Ok(Source::Cifar10(arg.into())),
            b"cifar100" => Ok(Source::Cifar100(arg.into())),
            b"synthetic" => {
                let bad = || {
                    Error::Usage(format!(
                        "--data synthetic:{}: not N or N:SIZE (a count, an image side of 8 or more)",
                        arg.display()
                    ))
                };
                let (train, size) = match arg.to_str().ok_or_else(bad)? {
                    "" => (50_000, 32),
                    a => {
                        let (n, size) = a.split_once(':').unwrap_or((a, "32"));
                        let size: i64 = size.parse().map_err(|_| bad())?;
                        (n.parse().map_err(|_| bad())?, size)
                    }
                };
                if size < 8 {
                    return Err(bad());
                }
                // Held whole in memory (as floats while it is made): bounded before anything is
                // allocated, rather than an allocation failure deep in libtorch.
                let values = (train as u128) * 6 / 5 * 3 * (size as u128).pow(2);
                if train == 0 || values > MAX_SYNTHETIC_VALUES {
                    return Err(Error::Usage(format!(
                        "--data synthetic:{}: {train} images of {size}×{size} are {values} pixel values; \
                         synthetic data holds 1 to {MAX_SYNTHETIC_VALUES} (train and test together)",
                        arg.display()
                    )));
                }
                Ok(Source::Synthetic {
                    train,
                    test: (train / 5).max(1),
                    classes: 100,
                    seed,
                    size,
                })
            }
            _ => Err(Error::Usage(format!(
                "unknown --data `{}`: cifar10:DIR, cifar100:DIR, imagefolder:DIR, recordio:PREFIX, wds:PATTERN or synthetic[:N[:SIZE]]",
                s.display()
            ))),
        }
    }

    /// Whether the images are files decoded batch by batch.
    pub fn is_files(&self) -> bool {
        matches!(
            self,
            Source::ImageFolder { .. } | Source::RecordIo { .. } | Source::Shards { .. }
        )
    }

    /// The same source with `val` as its validation set (image folders, RecordIO, shards).
    pub fn with_val(self, val: PathBuf) -> Source {
        match self {
            Source::ImageFolder { dir, .. } => Source::ImageFolder {
                dir,
                val: Some(val),
            },
            Source::RecordIo { prefix, .. } => Source::RecordIo {
                prefix,
                val: Some(val),
            },
            Source::Shards { pattern, .. } => Source::Shards {
                pattern,
                val: Some(val),
            },
            other => other,
        }
    }

    /// (train, test) on `device`; `images` says how files are prepared.
    pub fn load(
        &self,
        device: Device,
        images: &crate::images::ImageOptions,
        seed: i64,
    ) -> Result<(Dataset, Dataset)> {
        match self {
            Source::RecordIo { prefix, val: None } => Err(Error::Usage(format!(
                "--data recordio:{} needs --val-data PREFIX2 (the validation records)",
                prefix.display()
            ))),
            Source::Shards { pattern, val: None } => Err(Error::Usage(format!(
                "--data wds:{} needs --val-data PATTERN2 (the validation shards)",
                pattern.display()
            ))),
            Source::RecordIo {
                prefix,
                val: Some(val),
            } => {
                let open = |p: &Path| {
                    let rec = crate::recordio::RecordIo::open(p)?;
                    crate::images::ImageFiles::from_records(rec, p, *images, seed)
                };
                numbered_splits(open(prefix)?, open(val)?, "records", device)
            }
            Source::Shards {
                pattern,
                val: Some(val),
            } => {
                let open = |p: &Path| {
                    let shards = crate::wds::Shards::open(p.as_os_str())?;
                    crate::images::ImageFiles::from_shards(shards, *images, seed)
                };
                numbered_splits(open(pattern)?, open(val)?, "shards", device)
            }
            Source::ImageFolder { dir, val } => {
                image_folders(dir, val.as_deref(), device, images, seed)
            }
            Source::Cifar10(dir) => cifar10(dir, device),
            Source::Cifar100(dir) => cifar100(dir, device),
            Source::Synthetic {
                train,
                test,
                classes,
                seed,
                size,
            } => Ok((
                synthetic(*train, *classes, *seed, 0, *size)?.to(device),
                synthetic(*test, *classes, *seed, *train as i64, *size)?.to(device),
            )),
        }
    }
}

/// An image tree's training and validation splits (`val`, else DIR/train and DIR/val), with
/// the same class folders.
fn image_folders(
    dir: &Path,
    val: Option<&Path>,
    device: Device,
    images: &crate::images::ImageOptions,
    seed: i64,
) -> Result<(Dataset, Dataset)> {
    let (train, val) = match val {
        Some(v) => (dir.to_path_buf(), v.to_path_buf()),
        None if dir.join("train").is_dir() && dir.join("val").is_dir() => {
            (dir.join("train"), dir.join("val"))
        }
        None => {
            return Err(Error::Usage(format!(
                "--data imagefolder:{} has no validation split: give --val-data DIR, or \
                 lay the images out as DIR/train and DIR/val",
                dir.display()
            )));
        }
    };
    let scan = |d: &Path| crate::folder::ImageFolder::scan(d);
    let (train, val) = (scan(&train)?, scan(&val)?);
    if train.classes != val.classes {
        return Err(Error::Data(format!(
            "the training images and the validation images have different class \
             folders ({}): training {}, validation {}",
            first_difference(&train.classes, &val.classes),
            class_list(&train.classes),
            class_list(&val.classes)
        )));
    }
    let files = |f| crate::images::ImageFiles::new(f, *images, seed);
    Ok((
        Dataset::files(files(train)?, device),
        Dataset::files(files(val)?, device),
    ))
}

/// CIFAR-10's binary files in `dir`: data_batch_1.bin … data_batch_5.bin, test_batch.bin.
fn cifar10(dir: &Path, device: Device) -> Result<(Dataset, Dataset)> {
    let train: Vec<PathBuf> = (1..=5)
        .map(|i| dir.join(format!("data_batch_{i}.bin")))
        .collect();
    let test = vec![dir.join("test_batch.bin")];
    let hint = "CIFAR-10 binary version (cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html: \
                data_batch_1.bin … data_batch_5.bin, test_batch.bin)";
    Ok((
        read_records(&train, 1, 0, 10, hint)?.to(device),
        read_records(&test, 1, 0, 10, hint)?.to(device),
    ))
}

/// CIFAR-100's binary files in `dir`: train.bin, test.bin, the fine labels.
fn cifar100(dir: &Path, device: Device) -> Result<(Dataset, Dataset)> {
    let hint = "CIFAR-100 binary version (cifar-100-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html: \
                train.bin, test.bin); scripts/make-digits-cifar writes a small real set in this layout";
    // Fine labels (byte 1); the classes are the largest label + 1 (100 for CIFAR-100).
    let train = read_records(&[dir.join("train.bin")], 2, 1, 100, hint)?;
    let test = read_records(&[dir.join("test.bin")], 2, 1, 100, hint)?;
    let classes = train
        .labels
        .max()
        .int64_value(&[])
        .max(test.labels.max().int64_value(&[]))
        + 1;
    let fix = |d: Dataset| Dataset {
        num_classes: classes,
        ..d
    };
    Ok((fix(train).to(device), fix(test).to(device)))
}

/// The most pixel values synthetic data may hold (1.2 GB as bytes, 4.8 GB as floats while made).
const MAX_SYNTHETIC_VALUES: u128 = 1 << 30;

/// Reads CIFAR records: `label_bytes` bytes of labels (the label at `label_at`, each below
/// `num_classes`) then 3072 pixels.
fn read_records(
    files: &[PathBuf],
    label_bytes: usize,
    label_at: usize,
    num_classes: i64,
    hint: &'static str,
) -> Result<Dataset> {
    let rec = label_bytes + RECORD_PIXELS;
    let mut images = Vec::new();
    let mut labels = Vec::new();
    for f in files {
        // Read, not mapped (a file truncated meanwhile would be SIGBUS), and opened without
        // blocking: a FIFO is refused rather than waited on. CIFAR's largest file is 150 MB.
        let map = input_file::read(f, 1 << 32).map_err(|source| Error::Cifar {
            path: f.clone(),
            dir: f.parent().unwrap_or(Path::new(".")).to_path_buf(),
            hint,
            source,
        })?;
        if map.is_empty() || map.len() % rec != 0 {
            return Err(Error::Data(format!(
                "{}: {} bytes is not a whole number of {rec}-byte records: not the {hint}",
                f.display(),
                map.len()
            )));
        }
        // Labels are checked here, where the file and record can be named: a label out of range
        // would otherwise surface as a diverged loss blamed on the learning rate.
        if let Some((i, r)) = map
            .chunks_exact(rec)
            .enumerate()
            .find(|(_, r)| r[label_at] as i64 >= num_classes)
        {
            return Err(Error::Data(format!(
                "{}: record {i} has label {}, but the {hint} has {num_classes} classes (0 to {})",
                f.display(),
                r[label_at],
                num_classes - 1
            )));
        }
        let t = Tensor::from_slice(&map[..]).view([-1, rec as i64]);
        images.push(t.narrow(1, label_bytes as i64, RECORD_PIXELS as i64));
        labels.push(t.select(1, label_at as i64).to_kind(Kind::Int64));
    }
    let images = Tensor::cat(&images, 0).view([-1, 3, 32, 32]);
    let labels = Tensor::cat(&labels, 0);
    Ok(Dataset {
        images: Images::Tensor(images),
        labels,
        num_classes,
    })
}

/// `n` images of `classes` classes: a fixed random 8×8 pattern per class, upsampled to
/// `size`×`size`, plus per-image noise; label `i mod classes`. Rows start at global index
/// `offset` so test images differ from training ones.
fn synthetic(n: usize, classes: i64, seed: i64, offset: i64, size: i64) -> Result<Dataset> {
    let draws = |seed: i64| Generator::new(Device::Cpu, seed);
    let protos =
        draws(seed)?
            .rand(&[classes, 3, 8, 8])?
            .upsample_nearest2d([size, size], None, None);
    let labels = (Tensor::arange(n as i64, (Kind::Int64, Device::Cpu)) + offset).remainder(classes);
    let noise = draws(seed.wrapping_add(1 + offset))?.randn(&[n as i64, 3, size, size])? * 0.25;
    let images = ((protos.index_select(0, &labels) + noise).clamp(0.0, 1.0) * 255.0)
        .round()
        .to_kind(Kind::Uint8);
    Ok(Dataset {
        images: Images::Tensor(images),
        labels,
        num_classes: classes,
    })
}

/// The training and validation sets of a source that numbers its classes (RecordIO, shards):
/// the logits cover the training classes, so a validation label past them is an error.
fn numbered_splits(
    train: crate::images::ImageFiles,
    val: crate::images::ImageFiles,
    what: &str,
    device: Device,
) -> Result<(Dataset, Dataset)> {
    match (train.named_classes, val.named_classes) {
        // A label means the class its classes.txt names: the same number in two lists that
        // disagree is two classes, scored as one.
        (true, true) if train.classes != val.classes => {
            return Err(Error::Data(format!(
                "the training {what} and the validation {what} name different classes in the \
                 classes.txt beside them ({}): training {}, validation {}",
                first_difference(&train.classes, &val.classes),
                class_list(&train.classes),
                class_list(&val.classes)
            )));
        }
        (true, false) | (false, true) => log::warn!(
            "only the {} {what} have a classes.txt beside them: the other's labels are taken as \
             the same class numbers, unchecked",
            if train.named_classes {
                "training"
            } else {
                "validation"
            }
        ),
        _ => {}
    }
    let (train, mut val) = (Dataset::files(train, device), Dataset::files(val, device));
    if val.num_classes > train.num_classes {
        return Err(Error::Data(format!(
            "the validation {what} have labels up to {} but the training {what} only up to {}",
            val.num_classes - 1,
            train.num_classes - 1
        )));
    }
    val.num_classes = train.num_classes;
    Ok((train, val))
}

/// Where two class lists first differ, in words.
fn first_difference(a: &[std::ffi::OsString], b: &[std::ffi::OsString]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!("label {i} is {:?} in one and {:?} in the other", a[i], b[i]),
        None => format!("{} classes against {}", a.len(), b.len()),
    }
}

/// A class list as messages show it: its first names, and how many in all.
fn class_list(names: &[std::ffi::OsString]) -> String {
    const SHOWN: usize = 20;
    let shown: Vec<String> = names.iter().take(SHOWN).map(|n| format!("{n:?}")).collect();
    let more = names.len().saturating_sub(SHOWN);
    let tail = if more > 0 {
        format!(", ... ({} in all)", names.len())
    } else {
        String::new()
    };
    format!("[{}{tail}]", shown.join(", "))
}

impl Dataset {
    /// Image files decoded batch by batch, for `device` (made in pinned memory for a GPU).
    fn files(mut files: crate::images::ImageFiles, device: Device) -> Dataset {
        files.pinned = device.is_cuda();
        Dataset {
            labels: Tensor::from_slice(&files.labels).to_device(device),
            num_classes: files.classes.len() as i64,
            images: Images::Files(std::sync::Arc::new(files), device),
        }
    }

    /// This rank's training samples for `epoch`: the sampler's indices, or for shards their
    /// own split over ranks and threads (batches of `block`), as long as the sampler's. Image
    /// files are told the order: a bad file is replaced by the next of it.
    pub fn train_order(
        &self,
        sampler: &crate::sampler::DistributedSampler,
        epoch: usize,
        block: usize,
        augment: bool,
    ) -> Vec<usize> {
        let Images::Files(f, _) = &self.images else {
            return sampler.indices(epoch as u64);
        };
        let order = f
            .shard_order(sampler, epoch, block)
            .unwrap_or_else(|| sampler.indices(epoch as u64));
        f.set_order(augment, epoch, order.clone());
        order
    }

    /// [`Self::train_order`] for an order made by the caller (a rank computing several
    /// virtual ranks interleaves theirs): image files are told it, as they are the sampler's.
    pub fn train_order_given(&self, order: Vec<usize>, epoch: usize, augment: bool) -> Vec<usize> {
        if let Images::Files(f, _) = &self.images {
            f.set_order(augment, epoch, order.clone());
        }
        order
    }

    /// This rank's evaluation samples: `rank`, `rank + world`, … (image files are told, as in
    /// [`Self::train_order`]).
    pub fn eval_order(&self, rank: usize, world: usize) -> Vec<usize> {
        let order: Vec<usize> = (rank..self.len()).step_by(world).collect();
        if let Images::Files(f, _) = &self.images {
            f.set_order(false, 0, order.clone());
        }
        order
    }

    pub fn len(&self) -> usize {
        self.labels.size()[0] as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn to(self, device: Device) -> Dataset {
        Dataset {
            images: match self.images {
                Images::Tensor(t) => Images::Tensor(t.to_device(device)),
                Images::Files(f, _) => Images::Files(f, device),
            },
            labels: self.labels.to_device(device),
            num_classes: self.num_classes,
        }
    }

    /// The file each sample comes from (image files), by index.
    /// The sample that stood for sample `index` when it was last decoded (a bad file's
    /// replacement; `index` itself otherwise, and for data held as tensors).
    pub fn taken(&self, index: i64) -> i64 {
        match &self.images {
            Images::Files(f, _) => f.taken(index as usize % f.len()) as i64,
            Images::Tensor(_) => index,
        }
    }

    /// The path of the file sample `index` was packed from, relative to the folder packed (what
    /// `pack` stores in shards and beside RecordIO), if its data holds one.
    pub fn packed_path(&self, index: i64) -> Result<Option<PathBuf>> {
        match &self.images {
            Images::Files(f, _) => f.packed_path(index as usize % f.len()),
            Images::Tensor(_) => Ok(None),
        }
    }

    pub fn sample_paths(&self) -> Option<&[PathBuf]> {
        match &self.images {
            Images::Files(f, _) => Some(&f.paths),
            Images::Tensor(_) => None,
        }
    }

    /// (height, width) of the images the model sees.
    pub fn image_size(&self) -> (i64, i64) {
        match &self.images {
            Images::Tensor(t) => (t.size()[2], t.size()[3]),
            Images::Files(f, _) => (f.size() as i64, f.size() as i64),
        }
    }

    /// The class names (an image tree's folders), or none (CIFAR, synthetic data).
    /// The first class name that is not UTF-8, if any (records, checkpoints and the evaluation
    /// snippet carry names as text: two such names would look alike there).
    pub fn non_utf8_class(&self) -> Option<&std::ffi::OsStr> {
        match &self.images {
            Images::Files(f, _) => f
                .classes
                .iter()
                .find(|c| c.to_str().is_none())
                .map(|c| c.as_os_str()),
            Images::Tensor(_) => None,
        }
    }

    pub fn class_names(&self) -> Vec<String> {
        match &self.images {
            Images::Files(f, _) => f
                .classes
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect(),
            Images::Tensor(_) => Vec::new(),
        }
    }

    /// Files found unusable so far (0 for decoded images).
    pub fn bad_inputs(&self) -> usize {
        match &self.images {
            Images::Files(f, _) => f.bad_inputs(),
            Images::Tensor(_) => 0,
        }
    }

    /// Per-channel mean and std over all images, in [0, 1] units (files are normalised with
    /// their options' constants as they are decoded: none here).
    pub fn normalize(&self) -> Normalize {
        let Images::Tensor(images) = &self.images else {
            return Normalize {
                mean: Tensor::zeros([1, 3, 1, 1], (Kind::Float, Device::Cpu)),
                std: Tensor::ones([1, 3, 1, 1], (Kind::Float, Device::Cpu)),
            };
        };
        let x = images.to_kind(Kind::Float) / 255.0;
        let mean = x.mean_dim([0i64, 2, 3].as_slice(), true, Kind::Float);
        let std = x.std_dim([0i64, 2, 3].as_slice(), true, true); // unbiased, as torch.std()
        Normalize { mean, std }
    }

    /// Whether the images are files decoded batch by batch.
    pub fn is_files(&self) -> bool {
        matches!(self.images, Images::Files(..))
    }

    /// Starts decoding the batch `batch` will be asked for with these arguments (image files;
    /// nothing to do for decoded images).
    pub fn prefetch(&self, idx: &Tensor, augment: bool, epoch: usize) -> Result<()> {
        if let Images::Files(files, _) = &self.images {
            let indices = Vec::<i64>::try_from(&idx.to_device(Device::Cpu))?;
            files.prefetch(indices, augment, epoch);
        }
        Ok(())
    }

    /// Where [`Dataset::batch`]'s augmentation draws are made: the device of images held as
    /// tensors (files draw their own, per image).
    pub fn draws_device(&self) -> Device {
        match &self.images {
            Images::Tensor(images) => images.device(),
            Images::Files(..) => Device::Cpu,
        }
    }

    /// The batch at `idx` (int64 on the dataset's device): float images, normalised, augmented
    /// when `augment` gives a generator on [`Dataset::draws_device`] (images held as tensors
    /// draw from it; files take their transform's training form, drawn for `epoch`, else the
    /// evaluation form), and labels.
    pub fn batch(
        &self,
        idx: &Tensor,
        norm: &Normalize,
        augment: Option<&Generator>,
        epoch: usize,
    ) -> Result<(Tensor, Tensor)> {
        match &self.images {
            Images::Tensor(images) => {
                let x = images.index_select(0, idx).to_kind(Kind::Float) / 255.0;
                let x = match augment {
                    Some(g) => augment_batch(&x, g)?,
                    None => x,
                };
                Ok((
                    (x - &norm.mean) / &norm.std,
                    self.labels.index_select(0, idx),
                ))
            }
            Images::Files(files, device) => {
                let indices = Vec::<i64>::try_from(&idx.to_device(Device::Cpu))?;
                files.batch(&indices, augment.is_some(), epoch, *device)
            }
        }
    }
}

/// RandomCrop(32, padding=4) (zero fill) and RandomHorizontalFlip(0.5), per image, on the device,
/// drawn from `g` (on the same device).
fn augment_batch(x: &Tensor, g: &Generator) -> Result<Tensor> {
    let (b, c, h, w) = x.size4()?;
    let dev = x.device();
    let padded = x.constant_pad_nd([4, 4, 4, 4]);
    let dy = g.randint(9, &[b])?;
    let dx = g.randint(9, &[b])?;
    let rows = (dy.unsqueeze(1) + Tensor::arange(h, (Kind::Int64, dev)).unsqueeze(0))
        .view([b, 1, h, 1])
        .expand([b, c, h, w + 8], false);
    let y = padded.gather(2, &rows, false);
    let cols = (dx.unsqueeze(1) + Tensor::arange(w, (Kind::Int64, dev)).unsqueeze(0))
        .view([b, 1, 1, w])
        .expand([b, c, h, w], false);
    let y = y.gather(3, &cols, false);
    let flip = g.rand(&[b])?.lt(0.5).view([b, 1, 1, 1]);
    Ok(y.flip([3]).where_self(&flip, &y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cifar100_records_parse_and_missing_files_say_where_to_put_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        for i in 0..3u8 {
            bytes.extend([i, 10 + i]); // coarse, fine
            bytes.extend((0..RECORD_PIXELS).map(|p| (p % 251) as u8 ^ i));
        }
        std::fs::write(dir.path().join("train.bin"), &bytes).unwrap();
        std::fs::write(dir.path().join("test.bin"), &bytes[..2 + RECORD_PIXELS]).unwrap();
        let (train, test) = Source::Cifar100(dir.path().into())
            .load(Device::Cpu, &Default::default(), 0)
            .unwrap();
        assert_eq!(train.images.tensor().size(), [3, 3, 32, 32]);
        assert_eq!(Vec::<i64>::try_from(&train.labels).unwrap(), [10, 11, 12]);
        assert_eq!(train.num_classes, 13);
        assert_eq!(test.len(), 1);
        // Pixel (c=1, y=0, x=5) of image 2 is byte 1024 + 5 of its pixels.
        assert_eq!(
            train.images.tensor().int64_value(&[2, 1, 0, 5]),
            (((1024 + 5) % 251) as u8 ^ 2) as i64
        );

        std::fs::write(dir.path().join("test.bin"), [1u8, 2, 3]).unwrap();
        let e = Source::Cifar100(dir.path().into())
            .load(Device::Cpu, &Default::default(), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a whole number"), "{e}");
        let e = Source::Cifar10(dir.path().into())
            .load(Device::Cpu, &Default::default(), 0)
            .unwrap_err()
            .to_string();
        testkit::assert_mentions(&e, &["data_batch_1.bin", "Nothing is downloaded"]);
    }

    #[test]
    fn a_cifar_file_that_cannot_be_read_keeps_its_io_error_and_path() {
        use error_class::{Class, Classify};
        let dir = tempfile::tempdir().unwrap();
        let e = Source::Cifar10(dir.path().into())
            .load(Device::Cpu, &Default::default(), 0)
            .unwrap_err();
        let Error::Cifar { path, source, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(*path, dir.path().join("data_batch_1.bin"));
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        let io = std::error::Error::source(&e).expect("a source");
        assert!(io.is::<std::io::Error>(), "{io:?}");
        assert_eq!(e.class(), Class::Fatal);
        let text = error_class::chain_text(&e);
        assert!(
            text.starts_with("Nothing is downloaded: put the CIFAR-10 binary version")
                && text.contains(&format!("in {}: ", dir.path().display()))
                && text.ends_with("data_batch_1.bin: No such file or directory (os error 2)"),
            "{text}"
        );
    }

    #[test]
    fn labels_out_of_range_and_fifos_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let record = |fine: u8| [[0u8, fine].as_slice(), &[0; RECORD_PIXELS]].concat();
        let bytes = [record(3), record(250), record(4)].concat();
        std::fs::write(dir.path().join("train.bin"), &bytes).unwrap();
        std::fs::write(dir.path().join("test.bin"), record(1)).unwrap();
        // A label of 250 in CIFAR-100 ended in "training diverged ... lower --lr" before.
        let e = Source::Cifar100(dir.path().into())
            .load(Device::Cpu, &Default::default(), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("train.bin: record 1 has label 250"), "{e}");
        assert!(e.contains("100 classes"), "{e}");
        // A FIFO blocked in open(2) for ever, deaf to signals.
        std::fs::remove_file(dir.path().join("train.bin")).unwrap();
        let fifo = dir.path().join("train.bin");
        testkit::mkfifo(&fifo);
        let e = Source::Cifar100(dir.path().into())
            .load(Device::Cpu, &Default::default(), 0)
            .unwrap_err();
        let e = error_class::chain_text(&e);
        assert!(e.contains("train.bin is a FIFO, not a regular file"), "{e}");
    }

    #[test]
    fn augmentation_crops_with_zero_padding_and_flips() {
        let x = Tensor::arange(2 * 32 * 32, (Kind::Float, Device::Cpu)).view([2, 1, 32, 32]) + 1.0;
        let y = augment_batch(&x, &Generator::new(Device::Cpu, 3).unwrap()).unwrap();
        assert_eq!(y.size(), [2, 1, 32, 32]);
        for i in 0..2 {
            // Every kept pixel comes from the image (or is padding zero), in a contiguous window.
            let (src, out) = (x.get(i), y.get(i));
            let nonzero = out.ne(0.0).sum(Kind::Int64).int64_value(&[]);
            assert!(nonzero >= 24 * 24, "{nonzero}");
            let vals = out.masked_select(&out.ne(0.0));
            assert!(vals.min().double_value(&[]) >= src.min().double_value(&[]));
            assert!(vals.max().double_value(&[]) <= src.max().double_value(&[]));
        }
    }

    #[test]
    fn synthetic_data_is_deterministic_and_labelled_round_robin() {
        let a = synthetic(20, 4, 9, 0, 32).unwrap();
        let b = synthetic(20, 4, 9, 0, 32).unwrap();
        assert!(a.images.tensor().equal(b.images.tensor()));
        assert_eq!(a.labels.int64_value(&[6]), 2);
        let n = a.normalize();
        assert_eq!(n.mean.size(), [1, 3, 1, 1]);
        let parse = |s: &str| Source::parse(OsStr::new(s), 1);
        let Source::Synthetic { train, size, .. } = parse("synthetic:64:128").unwrap() else {
            panic!()
        };
        assert_eq!((train, size), (64, 128));
        assert!(matches!(
            parse("synthetic:64").unwrap(),
            Source::Synthetic { size: 32, .. }
        ));
        for bad in [
            "synthetic:x",
            "synthetic:64:4",
            "synthetic:64:y",
            "synthetic:0",
            "synthetic:1000000000",
            "synthetic:1000:100000",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let big = synthetic(2, 4, 9, 0, 64).unwrap();
        assert_eq!(big.images.tensor().size(), [2, 3, 64, 64]);
    }
}
