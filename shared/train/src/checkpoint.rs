//! Checkpoints as safetensors, written atomically (temp file + rename).
//!
//! `<name>.safetensors` holds the model's state_dict only, with torchvision's keys, so
//! `torchvision.models.resnet18(num_classes=K).load_state_dict(safetensors.torch.load_file(p))`
//! takes it as is; `<name>.train.safetensors` holds what resuming needs besides (optimiser
//! state, `optim.*`); the metadata of both carries the epoch, loss scale, etc., and resume checks
//! that the two halves belong to the same epoch.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use tch::{Device, Kind, Tensor};

use crate::{Error, Result};

fn dtype(kind: Kind) -> Result<Dtype> {
    Ok(match kind {
        Kind::Float => Dtype::F32,
        Kind::Double => Dtype::F64,
        Kind::Half => Dtype::F16,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Int64 => Dtype::I64,
        Kind::Int => Dtype::I32,
        Kind::Uint8 => Dtype::U8,
        other => return Err(Error::Checkpoint(format!("cannot save {other:?} tensors"))),
    })
}

fn kind(d: Dtype) -> Result<Kind> {
    Ok(match d {
        Dtype::F32 => Kind::Float,
        Dtype::F64 => Kind::Double,
        Dtype::F16 => Kind::Half,
        Dtype::BF16 => Kind::BFloat16,
        Dtype::I64 => Kind::Int64,
        Dtype::I32 => Kind::Int,
        Dtype::U8 => Kind::Uint8,
        other => {
            return Err(Error::Checkpoint(format!(
                "unsupported dtype {other:?} in checkpoint"
            )));
        }
    })
}

/// A checkpoint file that cannot be encoded, read or written: the cause below, kept.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// A tensor safetensors cannot hold as it is.
    #[error("{name}")]
    Tensor {
        name: String,
        #[source]
        source: safetensors::SafeTensorError,
    },
    #[error("encoding {}", .path.display())]
    Encode {
        path: std::path::PathBuf,
        #[source]
        source: safetensors::SafeTensorError,
    },
    #[error("{}: not a safetensors file", .path.display())]
    NotSafetensors {
        path: std::path::PathBuf,
        #[source]
        source: safetensors::SafeTensorError,
    },
    /// The class names in its metadata are not a JSON list of names.
    #[error("{}: its class names", .path.display())]
    ClassNames {
        path: std::path::PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// Writing one file failed; the one there before is intact.
    #[error(transparent)]
    Save(atomic_file::Error),
    /// Writing a set of files failed; none was replaced.
    #[error(
        "writing the checkpoint (nothing was replaced: the checkpoint there before, if any, is \
         intact)"
    )]
    SaveSet(#[source] atomic_file::Error),
}

/// Writes `tensors` and `meta` to `path` atomically.
pub fn save(
    path: &Path,
    tensors: &BTreeMap<String, Tensor>,
    meta: &HashMap<String, String>,
) -> Result<()> {
    let bytes = encode(path, tensors, meta)?;
    // Temp file beside the target, synced, renamed: a killed run never leaves half a checkpoint.
    atomic_file::write_atomic(path, |w| w.write_all(&bytes)).map_err(|e| FileError::Save(e).into())
}

/// Writes several files as one unit ([`atomic_file::write_set`]): each `(path, tensors)` with
/// `meta`; on error the files there before are all as they were, and the error says so. The
/// first path is the set's commit point: [`recover`] with the same paths (and any that a set
/// may omit after them) finishes or drops what a crash left.
pub fn save_set(
    files: &[(&Path, &BTreeMap<String, Tensor>)],
    meta: &HashMap<String, String>,
) -> Result<()> {
    let paths: Vec<&Path> = files.iter().map(|(p, _)| *p).collect();
    // One file's bytes at a time, encoded as its turn comes.
    atomic_file::write_set(&paths, |i, w| {
        let (path, tensors) = files[i];
        type Cause = Box<dyn std::error::Error + Send + Sync>;
        let bytes = encode(path, tensors, meta).map_err(Cause::from)?;
        w.write_all(&bytes).map_err(Cause::from)
    })
    .map_err(|e| FileError::SaveSet(e).into())
}

/// Finishes or drops a set of files that a crash in [`save_set`] left half-written; says which.
pub fn recover(paths: &[&Path]) -> Result<atomic_file::Recovered> {
    atomic_file::recover_set(paths).map_err(|e| Error::Io {
        what: format!(
            "finishing the checkpoint a killed run left in {}",
            paths[0].parent().unwrap_or(Path::new(".")).display()
        ),
        error: e,
    })
}

/// The first tensor (in name order) holding NaN or an infinity, if any.
pub fn non_finite(tensors: &BTreeMap<String, Tensor>) -> Option<&str> {
    tensors.iter().find_map(|(n, t)| {
        (t.is_floating_point() && t.isfinite().all().int64_value(&[]) == 0).then_some(n.as_str())
    })
}

/// A safetensors file's bytes.
fn encode(
    path: &Path,
    tensors: &BTreeMap<String, Tensor>,
    meta: &HashMap<String, String>,
) -> Result<Vec<u8>> {
    let mut owned = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let t = t.detach().to_device(Device::Cpu).contiguous();
        let mut bytes = vec![0u8; t.numel() * t.kind().elt_size_in_bytes()];
        let n = t.numel();
        t.copy_data_u8(&mut bytes, n);
        let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        owned.push((name.clone(), dtype(t.kind())?, shape, bytes));
    }
    let views = owned
        .iter()
        .map(|(name, d, shape, b)| {
            TensorView::new(*d, shape.clone(), b)
                .map(|v| (name.clone(), v))
                .map_err(|source| {
                    FileError::Tensor {
                        name: name.clone(),
                        source,
                    }
                    .into()
                })
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::tensor::serialize(views, &Some(meta.clone())).map_err(|source| {
        FileError::Encode {
            path: path.to_path_buf(),
            source,
        }
        .into()
    })
}

/// Reads every tensor (on `device`) and the metadata.
pub fn load(
    path: &Path,
    device: Device,
) -> Result<(BTreeMap<String, Tensor>, HashMap<String, String>)> {
    // A regular file only: a FIFO given as --init would block the open for ever.
    let bytes = input_file::read(path, u64::MAX >> 1).map_err(|e| Error::Io {
        what: "reading a checkpoint".into(),
        error: e,
    })?;
    let bad = |source| FileError::NotSafetensors {
        path: path.to_path_buf(),
        source,
    };
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(bad)?;
    let meta = header.metadata().clone().unwrap_or_default();
    let st = SafeTensors::deserialize(&bytes).map_err(bad)?;
    let mut out = BTreeMap::new();
    for (name, view) in st.tensors() {
        let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
        let t = Tensor::f_from_data_size(view.data(), &shape, kind(view.dtype())?)?;
        out.insert(name, t.to_device(device));
    }
    Ok((out, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_that_cannot_be_read_or_written_keeps_its_cause_by_kind() {
        use error_class::chain_text;
        use std::error::Error as _;
        let (dir, junk) = testkit::temp_file("junk.safetensors", b"not safetensors at all");
        let e = load(&junk, Device::Cpu).unwrap_err();
        assert!(
            matches!(&e, Error::File(FileError::NotSafetensors { path, .. }) if *path == junk),
            "{e:?}"
        );
        assert!(
            e.source()
                .is_some_and(|s| s.is::<safetensors::SafeTensorError>()),
            "{e:?}"
        );
        assert!(
            chain_text(&e).starts_with(&format!("{}: not a safetensors file: ", junk.display())),
            "{e}"
        );
        // A checkpoint whose directory is a file: the write's error, whole.
        let file = dir.path().join("plain");
        std::fs::write(&file, b"").unwrap();
        let t = BTreeMap::from([("w".to_string(), Tensor::from_slice(&[1f32]))]);
        let e = save(&file.join("ck.safetensors"), &t, &HashMap::new()).unwrap_err();
        assert!(matches!(&e, Error::File(FileError::Save(_))), "{e:?}");
        assert!(
            chain_text(&e).starts_with(&format!("creating directory {}: ", file.display())),
            "{e}"
        );
        let e = save_set(&[(&file.join("ck.safetensors"), &t)], &HashMap::new()).unwrap_err();
        assert!(matches!(&e, Error::File(FileError::SaveSet(_))), "{e:?}");
        assert!(
            e.source().is_some_and(|s| s.is::<atomic_file::Error>()),
            "{e:?}"
        );
        assert!(chain_text(&e).contains("nothing was replaced"), "{e}");
        assert_eq!(error_class::Classify::class(&e), error_class::Class::Fatal);
    }

    #[test]
    fn round_trips_tensors_of_several_kinds_with_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.safetensors");
        let t = BTreeMap::from([
            (
                "a".to_string(),
                Tensor::from_slice(&[1.5f32, -2.0]).view([2, 1]),
            ),
            ("n".to_string(), Tensor::from(7i64)),
        ]);
        save(&p, &t, &HashMap::from([("epoch".into(), "3".into())])).unwrap();
        let (back, meta) = load(&p, Device::Cpu).unwrap();
        assert!(back["a"].equal(&t["a"]));
        assert_eq!(back["n"].int64_value(&[]), 7);
        assert_eq!(meta["epoch"], "3");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temp file left"
        );
    }
}

/// What a training checkpoint records beside its tensors, as safetensors string metadata (the
/// same keys in `last.safetensors` and `last.train.safetensors`, so that resume can tell halves
/// of different epochs and steps apart).
#[derive(Debug, Clone, PartialEq)]
pub struct Meta {
    /// Epochs completed (1-based: the epoch this checkpoint ends).
    pub epoch: usize,
    /// Steps of the next epoch done: 0 for a checkpoint at an epoch's end, else a mid-epoch
    /// checkpoint, which resumes only into the same world size, batch, seed and steps per epoch.
    pub step: usize,
    /// The run's steps per epoch and seed (what a mid-epoch resume must match).
    pub steps_per_epoch: usize,
    pub seed: i64,
    /// Steps of the unfinished epoch the loss scaler skipped (mid-epoch checkpoints).
    pub skipped_steps: usize,
    pub arch: String,
    pub best_top1: f64,
    pub val_top1: f64,
    /// Whether fp16's loss scaler is on; its scale and growth tracker.
    pub scaler: bool,
    pub loss_scale: f64,
    pub growth_tracker: u64,
    pub world_size: usize,
    pub batch_size: usize,
    /// The run's `--virtual-ranks` (None: its processes were its ranks): a mid-epoch
    /// checkpoint of a run with virtual ranks resumes on any number of processes dividing them.
    pub virtual_ranks: Option<usize>,
    /// The class names of an image tree, in label order (what the logits mean); none for
    /// CIFAR and synthetic data.
    pub classes: Vec<String>,
    /// What the model takes, so that it can be used elsewhere: its stem and classes, and the
    /// images as evaluation prepared them (`ddp-train --print-eval-snippet` writes them out as
    /// torchvision code).
    pub input: Option<Input>,
    /// The TorchScript file the run trained (`arch` is then empty, the stem `none`).
    pub script: Option<ScriptFile>,
}

/// A TorchScript model file as a checkpoint names it: its path as the run was given it, and
/// the SHA-256 of what it held.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptFile {
    pub file: String,
    pub sha256: String,
}

/// How a checkpoint's model sees images.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// `imagenet` or `cifar`.
    pub stem: String,
    pub num_classes: i64,
    /// Side of the square the model saw.
    pub image_size: i64,
    /// `Normalize(mean, std)` after `ToTensor()`.
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
    /// Evaluation's preparation before ToTensor: `imagenet` (`Resize(size * 256 // 224)`,
    /// `CenterCrop(size)`), or `none` (the image as it is, size×size).
    pub eval_transform: String,
}

impl Meta {
    /// The string map written into the file.
    pub fn to_map(&self) -> HashMap<String, String> {
        // The plain fields, each under its own name.
        macro_rules! as_text {
            ($($field:ident),*) => { [$((stringify!($field), self.$field.to_string())),*] };
        }
        let fields = as_text!(
            epoch,
            step,
            steps_per_epoch,
            seed,
            skipped_steps,
            arch,
            best_top1,
            val_top1,
            loss_scale,
            growth_tracker,
            scaler,
            world_size,
            batch_size
        );
        fields
            .into_iter()
            .chain((self.virtual_ranks.iter()).map(|v| ("virtual_ranks", v.to_string())))
            .chain(self.script.iter().flat_map(|s| {
                [
                    ("model_file", s.file.clone()),
                    ("model_sha256", s.sha256.clone()),
                ]
            }))
            .chain((!self.classes.is_empty()).then(|| {
                let json = serde_json::to_string(&self.classes).expect("strings serialise");
                ("classes", json)
            }))
            .chain(self.input.iter().flat_map(|i| {
                let list = |v: &[f64]| serde_json::to_string(v).expect("numbers serialise");
                [
                    ("stem", i.stem.clone()),
                    ("num_classes", i.num_classes.to_string()),
                    ("image_size", i.image_size.to_string()),
                    ("normalize_mean", list(&i.mean)),
                    ("normalize_std", list(&i.std)),
                    ("eval_transform", i.eval_transform.clone()),
                ]
            }))
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    /// Reads the map back: the epoch is required; what else is missing takes the value a fresh
    /// run starts with (step 0, no best yet, GradScaler's defaults).
    pub fn from_map(map: &HashMap<String, String>, path: &Path) -> Result<Self> {
        let get = |k: &str| map.get(k).map(String::as_str);
        let epoch = parsed(map, "epoch", path)?.ok_or_else(|| {
            Error::Checkpoint(format!("{}: no epoch in its metadata", path.display()))
        })?;
        let count = |k: &str| parsed::<usize>(map, k, path).map(Option::unwrap_or_default);
        let num = |k: &str, default: f64| parsed(map, k, path).map(|v| v.unwrap_or(default));
        let meta = Meta {
            epoch,
            step: count("step")?,
            steps_per_epoch: count("steps_per_epoch")?,
            seed: parsed(map, "seed", path)?.unwrap_or(0),
            skipped_steps: count("skipped_steps")?,
            // Empty is absent (what `to_map` writes for a meta without one).
            arch: match get("arch").filter(|a| !a.is_empty()) {
                Some(a) => a
                    .parse::<crate::resnet::Arch>()
                    .map_err(|_| {
                        Error::Checkpoint(format!("{}: bad arch in its metadata", path.display()))
                    })?
                    .name()
                    .to_string(),
                None => String::new(),
            },
            best_top1: num("best_top1", f64::NEG_INFINITY)?,
            val_top1: num("val_top1", f64::NAN)?,
            scaler: parsed(map, "scaler", path)?.unwrap_or(false),
            loss_scale: num("loss_scale", 65536.0)?,
            growth_tracker: parsed(map, "growth_tracker", path)?.unwrap_or(0),
            world_size: count("world_size")?,
            batch_size: count("batch_size")?,
            virtual_ranks: match get("virtual_ranks") {
                Some(v) => Some(v.parse().ok().filter(|&v: &usize| v > 0).ok_or_else(|| {
                    Error::Checkpoint(format!(
                        "{}: its metadata's virtual_ranks is not a count (a damaged or edited \
                         checkpoint)",
                        path.display()
                    ))
                })?),
                None => None,
            },
            classes: match get("classes") {
                Some(json) => {
                    serde_json::from_str(json).map_err(|source| FileError::ClassNames {
                        path: path.to_path_buf(),
                        source,
                    })?
                }
                None => Vec::new(),
            },
            input: Input::from_map(map, path)?,
            script: match (get("model_file"), get("model_sha256")) {
                (Some(file), Some(sha256))
                    if sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit()) =>
                {
                    Some(ScriptFile {
                        file: file.to_string(),
                        sha256: sha256.to_string(),
                    })
                }
                (None, None) => None,
                _ => {
                    return Err(Error::Checkpoint(format!(
                        "{}: its metadata's model_file and model_sha256 are not a pair ddp-train \
                         writes",
                        path.display()
                    )));
                }
            },
        };
        meta.check().map_err(|field| {
            Error::Checkpoint(format!(
                "{}: its metadata's {field} is out of range (a damaged or edited checkpoint)",
                path.display()
            ))
        })?;
        Ok(meta)
    }

    /// Every field within what a run writes; the first that is not, named.
    fn check(&self) -> std::result::Result<(), &'static str> {
        let top1 = |v: f64| (0.0..=100.0).contains(&v);
        let checks = [
            (self.step == 0 || self.step < self.steps_per_epoch, "step"),
            (self.skipped_steps <= self.step, "skipped_steps"),
            (
                top1(self.best_top1) || self.best_top1 == f64::NEG_INFINITY,
                "best_top1",
            ),
            (top1(self.val_top1) || self.val_top1.is_nan(), "val_top1"),
            (
                self.loss_scale.is_finite() && self.loss_scale > 0.0,
                "loss_scale",
            ),
            (self.step == 0 || self.world_size > 0, "world_size"),
            (self.step == 0 || self.batch_size > 0, "batch_size"),
            // As `--virtual-ranks` is checked: the processes divide them, and they the batch,
            // at least 2 samples each (0: a field not written).
            (
                self.virtual_ranks.is_none_or(|v| {
                    (self.world_size == 0 || v.is_multiple_of(self.world_size))
                        && (self.batch_size == 0
                            || (self.batch_size.is_multiple_of(v) && self.batch_size / v >= 2))
                }),
                "virtual_ranks",
            ),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, field)) => Err(field),
            None => Ok(()),
        }
    }
}

/// Metadata field `k` as a `T`, None when it is missing (checkpoints written before it was
/// kept); one that is there but not a `T` is an error naming it, never read as the default.
fn parsed<T: std::str::FromStr>(
    map: &HashMap<String, String>,
    k: &str,
    path: &Path,
) -> Result<Option<T>> {
    map.get(k)
        .map(|v| {
            v.parse().map_err(|_| {
                Error::Checkpoint(format!(
                    "{}: its metadata's {k} is not what a run writes (a damaged or edited \
                     checkpoint)",
                    path.display()
                ))
            })
        })
        .transpose()
}

impl Input {
    /// The input keys of a checkpoint's metadata; `None` when it has none (checkpoints written
    /// before they were kept).
    fn from_map(map: &HashMap<String, String>, path: &Path) -> Result<Option<Input>> {
        let Some(stem) = map.get("stem") else {
            return Ok(None);
        };
        let bad =
            |k: &str| Error::Checkpoint(format!("{}: bad {k} in its metadata", path.display()));
        let number = |k: &str| -> Result<i64> {
            map.get(k)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(k))
        };
        let list = |k: &str| -> Result<Vec<f64>> {
            map.get(k)
                .and_then(|v| serde_json::from_str::<Vec<f64>>(v).ok())
                .filter(|v| v.len() == 3)
                .ok_or_else(|| bad(k))
        };
        // Each value within what ddp-train writes: the metadata is read by code that prints
        // Python from it (--print-eval-snippet) and may come from anyone.
        let one_of = |k: &str, v: &str, set: &[&str]| {
            if set.contains(&v) {
                Ok(v.to_string())
            } else {
                Err(bad(k))
            }
        };
        let within = |k: &str, max: i64| {
            number(k).and_then(|n| (1..=max).contains(&n).then_some(n).ok_or_else(|| bad(k)))
        };
        let finite = |k: &str, positive: bool| {
            list(k).and_then(|v| {
                v.iter()
                    .all(|x| x.is_finite() && (!positive || *x > 0.0))
                    .then_some(v)
                    .ok_or_else(|| bad(k))
            })
        };
        let eval_transform = map.get("eval_transform").map_or("none", String::as_str);
        Ok(Some(Input {
            stem: one_of("stem", stem, &["imagenet", "cifar", "none"])?,
            num_classes: within("num_classes", train_data::images::MAX_CLASSES as i64)?,
            image_size: within("image_size", 1 << 16)?,
            mean: finite("normalize_mean", false)?,
            std: finite("normalize_std", true)?,
            eval_transform: one_of("eval_transform", eval_transform, &["imagenet", "none"])?,
        }))
    }
}

#[cfg(test)]
mod meta_tests {
    use super::*;

    /// A run's metadata: step 17 of 40 of epoch 3, 4 virtual ranks on 2 processes, a global
    /// batch of 64, no class names, input or model file.
    pub(super) fn run_meta() -> Meta {
        Meta {
            epoch: 3,
            step: 17,
            steps_per_epoch: 40,
            seed: -5,
            skipped_steps: 2,
            arch: "resnet18".into(),
            best_top1: 41.5,
            val_top1: 40.25,
            scaler: true,
            loss_scale: 32768.0,
            growth_tracker: 17,
            world_size: 2,
            batch_size: 64,
            virtual_ranks: Some(4),
            classes: Vec::new(),
            script: None,
            input: None,
        }
    }

    #[test]
    fn meta_round_trips_and_fills_what_is_missing() {
        let m = Meta {
            classes: vec!["cat".into(), "dog, \"big\"\n".into()],
            input: Some(Input {
                stem: "cifar".into(),
                num_classes: 10,
                image_size: 32,
                mean: vec![0.49, 0.48, 0.45],
                std: vec![0.25, 0.24, 0.26],
                eval_transform: "none".into(),
            }),
            ..run_meta()
        };
        let p = Path::new("last.safetensors");
        assert_eq!(Meta::from_map(&m.to_map(), p).unwrap(), m);
        let bare = Meta::from_map(&HashMap::from([("epoch".into(), "2".into())]), p).unwrap();
        // Written again, it reads back (the fuzzer's find: an empty arch was "bad arch").
        assert_eq!(Meta::from_map(&bare.to_map(), p).unwrap().arch, "");
        assert_eq!(
            (bare.epoch, bare.step, bare.scaler, bare.loss_scale),
            (2, 0, false, 65536.0)
        );
        assert_eq!(bare.best_top1, f64::NEG_INFINITY);
        assert!(bare.classes.is_empty());
        assert_eq!(bare.input, None);
        let e = Meta::from_map(&HashMap::new(), p).unwrap_err().to_string();
        assert!(e.contains("no epoch"), "{e}");
        // Tampered fields are named, not trusted.
        for (key, value) in [
            ("step", "40"),
            ("skipped_steps", "18"),
            ("best_top1", "1e9"),
            ("val_top1", "-3"),
            ("loss_scale", "0"),
            ("loss_scale", "inf"),
            ("world_size", "0"),
            ("arch", "resnet18(); import os"),
            ("stem", "cifar\nimport os"),
            ("num_classes", "0"),
            ("image_size", "99999999"),
            ("normalize_std", "[0.5, 0.0, 0.5]"),
            ("eval_transform", "resize"),
        ] {
            let mut map = m.to_map();
            map.insert(key.into(), value.into());
            let e = Meta::from_map(&map, p).unwrap_err().to_string();
            assert!(e.contains(key), "{key}={value}: {e}");
        }
    }
}

#[cfg(test)]
mod edited_meta_tests {
    use super::*;

    /// A run's metadata: step 17 of 40, 4 virtual ranks on 2 processes, a global batch of 64.
    fn written() -> HashMap<String, String> {
        Meta {
            best_top1: f64::NEG_INFINITY,
            val_top1: f64::NAN,
            ..super::meta_tests::run_meta()
        }
        .to_map()
    }

    #[test]
    fn a_field_that_is_there_but_not_what_a_run_writes_is_named_not_read_as_its_default() {
        let p = Path::new("ck/last.safetensors");
        // What a run writes reads back, infinities and NaN included.
        let m = Meta::from_map(&written(), p).unwrap();
        assert_eq!((m.step, m.best_top1), (17, f64::NEG_INFINITY));
        assert!(m.val_top1.is_nan());
        let mut wrong = Vec::new();
        for (key, value) in [
            // Read as 0 before, a mid-epoch checkpoint resumed as one at the epoch's start.
            ("step", "abc"),
            ("step", "-1"),
            ("step", "3.0"),
            ("steps_per_epoch", "x"),
            ("skipped_steps", "-2"),
            ("seed", "five"),
            ("seed", "18446744073709551616"),
            // Cut to a count before: 2.5 processes read as 2, 1e30 as usize::MAX.
            ("world_size", "2.5"),
            ("world_size", "1e30"),
            ("batch_size", "1e30"),
            ("batch_size", "-64"),
            ("growth_tracker", "-5"),
            ("loss_scale", "big"),
            ("best_top1", ""),
            ("val_top1", "high"),
            ("scaler", "yes"),
            // Virtual ranks that no run of 2 processes and a batch of 64 has.
            ("virtual_ranks", "3"),
            ("virtual_ranks", "64"),
            ("virtual_ranks", "1099511627776"),
            ("virtual_ranks", "18446744073709551616"),
        ] {
            let mut map = written();
            map.insert(key.into(), value.into());
            let named = format!("ck/last.safetensors: its metadata's {key} ");
            match Meta::from_map(&map, p) {
                Err(e) if e.to_string().contains(&named) => {}
                other => wrong.push(format!("{key}={value:?}: {other:?}")),
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }
}
