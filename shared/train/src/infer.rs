//! A checkpoint put to work: the model `ddp-train` wrote, loaded for evaluation
//! ([`model_from_checkpoint`]), images prepared as its evaluation prepared them
//! ([`Classifier::image_options`], decoded by `train_data`'s image files), and the figures of an
//! evaluation ([`Evaluation`]), whose loss and top-1 are the sums the trainer's validation takes
//! ([`batch_sums`]), so that both count alike.
//!
//! ```no_run
//! # fn main() -> train::Result<()> {
//! use train::infer::model_from_checkpoint;
//! let model = model_from_checkpoint("ck/best.safetensors".as_ref(), tch::Device::Cpu)?;
//! let x = tch::Tensor::zeros([1, 3, 224, 224], (tch::Kind::Float, tch::Device::Cpu));
//! let logits = model.forward(&x, train::trainer::Precision::Fp32)?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use tch::{Device, Kind, Tensor, nn};
use train_data::images::{ImageFiles, ImageOptions, Transform};

use crate::checkpoint::{self, Input, Meta};
use crate::net::Net;
use crate::resnet::{Arch, ResNet, Stem};
use crate::trainer::Precision;
use crate::{Error, Result};

/// The largest image side a checkpoint's metadata may ask evaluation to prepare: one image
/// of this side is 3 × 8192² float32 values (768 MiB).
pub const MAX_IMAGE_SIZE: i64 = 8192;

/// What a file that is not a model is told.
const HINT: &str = "; classify takes the model file ddp-train writes (last.safetensors, \
                    best.safetensors), not its .train.safetensors";

/// A checkpoint's model, ready to evaluate images, with what its metadata says of them.
#[derive(Debug)]
pub struct Classifier {
    /// The network (a ResNet ddp-train builds, or the user's TorchScript module), and the
    /// store that owns its weights.
    net: Net,
    _vs: nn::VarStore,
    /// The ResNet (None for a TorchScript model).
    pub arch: Option<Arch>,
    pub stem: Stem,
    /// How messages name the model: `resnet18`, or `TorchScript FILE`.
    pub name: String,
    /// How the model sees images: size, normalisation, evaluation transform.
    pub input: Input,
    /// What each logit means: the run's class names, else "0", "1", ….
    pub classes: Vec<String>,
    /// The whole metadata (epoch, val_top1, …).
    pub meta: Meta,
    pub device: Device,
}

/// Loads the model of the checkpoint at `path` (a `ddp-train` model file: `last.safetensors`,
/// `best.safetensors`) on `device`, in evaluation mode. Its tensors must be exactly the model's
/// (PyTorch's strict `load_state_dict`) and finite; its metadata says the architecture, stem,
/// classes and how images are prepared, each checked before anything is sized by it.
pub fn model_from_checkpoint(path: &Path, device: Device) -> Result<Classifier> {
    model_from_checkpoint_with(path, device, None)
}

/// [`model_from_checkpoint`], for a checkpoint of a TorchScript model with its module from
/// `script` instead of the file its metadata names (the path the run was given).
pub fn model_from_checkpoint_with(
    path: &Path,
    device: Device,
    script: Option<&Path>,
) -> Result<Classifier> {
    let (tensors, map) = checkpoint::load(path, Device::Cpu)?;
    let meta = Meta::from_map(&map, path)?;
    let bad = |why: String| Error::Checkpoint(format!("{}: {why}", path.display()));
    let Some(input) = meta.input.clone() else {
        return Err(bad(
            "its metadata does not say how the model sees images (written by an older \
             ddp-train, or not by ddp-train): train on, or resume, to write a checkpoint that does"
                .into(),
        ));
    };
    if input.image_size > MAX_IMAGE_SIZE {
        return Err(bad(format!(
            "its metadata's image_size {} is past the {MAX_IMAGE_SIZE} evaluation prepares",
            input.image_size
        )));
    }
    if let Some(trained) = &meta.script {
        return script_model(path, device, script, trained.clone(), tensors, meta, input);
    }
    if script.is_some() {
        return Err(Error::Usage(format!(
            "{}: a ResNet's checkpoint (its metadata names no TorchScript file): --model is for \
             a TorchScript model's",
            path.display()
        )));
    }
    let arch: Arch = meta
        .arch
        .parse()
        .map_err(|_| bad("its metadata names no model (arch)".into()))?;
    let stem = match input.stem.as_str() {
        "cifar" => Stem::Cifar,
        _ => Stem::ImageNet,
    };
    let k = input.num_classes;
    // The classifier's shape in the file, checked before the model (whose last layer the class
    // count sizes) is made: the file itself holds a layer of that size.
    let features = arch
        .units(stem, 1, (32, 32))
        .last()
        .map_or(0, |fc| fc.params - 1);
    match tensors.get("fc.weight").map(Tensor::size) {
        Some(shape) if shape == [k, features] => {}
        Some(shape) => {
            return Err(bad(format!(
                "fc.weight is {shape:?}, not the [{k}, {features}] of a {} with the {k} classes \
                 its metadata says",
                arch.name()
            )));
        }
        None => {
            return Err(bad(format!(
                "no fc.weight: not a {} model{HINT}",
                arch.name()
            )));
        }
    }
    let classes = class_names(&meta, k, path)?;
    let vs = nn::VarStore::new(device);
    let net = ResNet::new(&vs.root(), arch, k, stem);
    load_strict(&vs, &tensors, arch.name(), path)?;
    Ok(Classifier {
        net: Net::ResNet(net),
        _vs: vs,
        arch: Some(arch),
        stem,
        name: arch.name().to_string(),
        input,
        classes,
        meta,
        device,
    })
}

/// The classes a checkpoint's logits mean: its run's names, else "0", "1", …; as many as the
/// model has.
fn class_names(meta: &Meta, k: i64, path: &Path) -> Result<Vec<String>> {
    if meta.classes.is_empty() {
        Ok((0..k).map(|c| c.to_string()).collect())
    } else if meta.classes.len() as i64 == k {
        Ok(meta.classes.clone())
    } else {
        Err(Error::Checkpoint(format!(
            "{}: its metadata names {} classes, but the model has {k}",
            path.display(),
            meta.classes.len()
        )))
    }
}

/// A TorchScript model's checkpoint: the module from `script`, else the file the run trained
/// (its path as the run was given it), its weights loaded strictly; a file whose SHA-256 is not
/// the one the run trained is named in a warning (the strict load still checks every name and
/// shape), and the module's output for a batch of one must be `[1, classes]`.
fn script_model(
    path: &Path,
    device: Device,
    script: Option<&Path>,
    trained: checkpoint::ScriptFile,
    tensors: BTreeMap<String, Tensor>,
    meta: Meta,
    input: Input,
) -> Result<Classifier> {
    let file = script.map_or_else(
        || std::path::PathBuf::from(&trained.file),
        Path::to_path_buf,
    );
    let vs = nn::VarStore::new(device);
    let net = crate::net::ScriptNet::load(&file, &vs)?;
    if !net.sha256.eq_ignore_ascii_case(&trained.sha256) {
        log::warn!(
            "{}: the run trained a file with SHA-256 {}, {} has {}",
            path.display(),
            trained.sha256,
            file.display(),
            net.sha256
        );
    }
    let name = format!("TorchScript {}", file.display());
    load_strict(&vs, &tensors, &name, path)?;
    let k = input.num_classes;
    let size = input.image_size;
    let x = Tensor::zeros([1, 3, size, size], (Kind::Float, device));
    let y = tch::no_grad(|| net.forward(&x, false))?;
    // Integer "logits" would be ranked by their float conversion without a word.
    if !y.is_floating_point() {
        return Err(Error::Checkpoint(format!(
            "{}: {} returns {:?} values for one {size}x{size} image, not float logits",
            path.display(),
            file.display(),
            y.kind()
        )));
    }
    if y.size() != [1, k] {
        return Err(Error::Checkpoint(format!(
            "{}: {} returns {:?} for one {size}x{size} image, not the [1, {k}] of the {k} classes \
             its metadata says",
            path.display(),
            file.display(),
            y.size()
        )));
    }
    // Every later batch's output is checked against them (ScriptNet::forward).
    let _ = net.classes.set(k);
    Ok(Classifier {
        classes: class_names(&meta, k, path)?,
        net: Net::Script(net),
        _vs: vs,
        arch: None,
        stem: Stem::ImageNet,
        name,
        input,
        meta,
        device,
    })
}

/// Copies `weights` (read from `path`) into the model's `vs` as PyTorch's strict
/// `load_state_dict` does: the same names, the same shapes; and finite values.
fn load_strict(
    vs: &nn::VarStore,
    weights: &BTreeMap<String, Tensor>,
    model: &str,
    path: &Path,
) -> Result<()> {
    let bad = |why: String| Error::Checkpoint(format!("{}: {why}", path.display()));
    if let Some(name) = checkpoint::non_finite(weights) {
        return Err(bad(format!(
            "tensor {name} holds NaN or infinite values: not a usable checkpoint"
        )));
    }
    let mut vars = vs.variables();
    let list = |mut names: Vec<&String>| {
        names.sort_unstable();
        let n = names.len();
        let text: Vec<&str> = names.into_iter().take(8).map(String::as_str).collect();
        format!(
            "{n} ({}{})",
            text.join(", "),
            if n > 8 { ", …" } else { "" }
        )
    };
    let missing: Vec<&String> = vars.keys().filter(|n| !weights.contains_key(*n)).collect();
    let extra: Vec<&String> = weights.keys().filter(|n| !vars.contains_key(*n)).collect();
    if !missing.is_empty() || !extra.is_empty() {
        return Err(bad(format!(
            "not the tensors of {model}: missing {}, extra {} (a strict load, as PyTorch's \
             load_state_dict){HINT}",
            list(missing),
            list(extra)
        )));
    }
    tch::no_grad(|| {
        for (name, t) in weights {
            let v = vars.get_mut(name).expect("checked above");
            if v.size() != t.size() {
                return Err(bad(format!(
                    "{name}: file {:?}, model {:?}",
                    t.size(),
                    v.size()
                )));
            }
            v.f_copy_(t)?;
        }
        Ok(())
    })
}

impl Classifier {
    /// Logits (float32 [n, classes]) of prepared images `x` (float32 [n, 3, size, size] on the
    /// model's device), in evaluation mode (BatchNorm's running statistics), without gradients;
    /// `precision` bf16 and fp16 run under CUDA autocast as training's evaluation does.
    pub fn forward(&self, x: &Tensor, precision: Precision) -> Result<Tensor> {
        let run = || -> Result<Tensor> { tch::no_grad(|| self.net.try_forward(x, false)) };
        let dtype = match precision {
            Precision::Fp16 => gpu_runtime::shim::AutocastDtype::F16,
            Precision::Bf16 => gpu_runtime::shim::AutocastDtype::Bf16,
            Precision::Fp32 | Precision::Tf32 => return Ok(run()?.to_kind(Kind::Float)),
        };
        Ok(gpu_runtime::shim::autocast(dtype, run)??.to_kind(Kind::Float))
    }

    /// How images are prepared for this model, as its training run's evaluation prepared them:
    /// `Resize(size * 256 / 224)` + `CenterCrop(size)` (eval_transform `imagenet`) or the image
    /// as it is (`none`, which must then be size×size), `ToTensor()`, `Normalize(mean, std)`;
    /// decoded by `workers` threads.
    pub fn image_options(&self, workers: usize) -> ImageOptions {
        let f = |v: &[f64]| [v[0] as f32, v[1] as f32, v[2] as f32];
        ImageOptions {
            size: self.input.image_size as u32,
            transform: match self.input.eval_transform.as_str() {
                "imagenet" => Transform::Imagenet,
                _ => Transform::None,
            },
            mean: f(&self.input.mean),
            std: f(&self.input.std),
            workers: workers.max(1),
            ..ImageOptions::default()
        }
    }
}

/// Labelled images to evaluate, as `ddp-train --data` names them: `imagefolder:DIR` (DIR/val
/// when DIR has both train and val, else DIR itself), `recordio:PREFIX` or `wds:PATTERN` (the
/// records or shards given: the validation set). Their classes must be the model's: an image
/// folder's class folders the checkpoint's class names (when it has them), and every label of
/// the others one of the model's classes.
pub fn labelled_images(
    source: &train_data::data::Source,
    opts: ImageOptions,
    model: &Classifier,
) -> Result<ImageFiles> {
    use train_data::data::Source;
    let files = match source {
        Source::ImageFolder { dir, .. } => {
            let dir = if dir.join("train").is_dir() && dir.join("val").is_dir() {
                dir.join("val")
            } else {
                dir.clone()
            };
            let folder =
                train_data::folder::ImageFolder::scan(&dir).map_err(train_data::Error::from)?;
            let names: Vec<String> = folder
                .classes
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            if !model.meta.classes.is_empty() && names != model.classes {
                return Err(Error::Usage(format!(
                    "{} has {} class folders ({}), but the model's {} classes are {}: the class \
                     folders must be the ones it was trained on",
                    dir.display(),
                    names.len(),
                    first_names(&names),
                    model.classes.len(),
                    first_names(&model.classes)
                )));
            }
            ImageFiles::new(folder, opts, 0)?
        }
        Source::RecordIo { prefix, .. } => {
            let rec =
                train_data::recordio::RecordIo::open(prefix).map_err(train_data::Error::from)?;
            ImageFiles::from_records(rec, prefix, opts, 0)?
        }
        Source::Shards { pattern, .. } => {
            let shards = train_data::wds::Shards::open(pattern.as_os_str())
                .map_err(train_data::Error::from)?;
            ImageFiles::from_shards(shards, opts, 0)?
        }
        _ => {
            return Err(Error::Usage(
                "--data takes imagefolder:DIR, recordio:PREFIX or wds:PATTERN (images in files)"
                    .into(),
            ));
        }
    };
    let k = model.classes.len() as i64;
    if let Some((path, label)) = (files.paths.iter().zip(&files.labels)).find(|&(_, &l)| l >= k) {
        return Err(Error::Data(format!(
            "{}: label {label} is past the model's {k} classes",
            path.display()
        )));
    }
    Ok(files)
}

/// Up to three names, then how many more.
fn first_names(names: &[String]) -> String {
    let mut s = names
        .iter()
        .take(3)
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > 3 {
        s += &format!(", … {} more", names.len() - 3);
    }
    s
}

/// One batch's summed cross-entropy (float64 scalar) and top-1 hits (int64 scalar), on the
/// logits' device: what the trainer's validation and [`Evaluation`] both add up.
pub fn batch_sums(logits: &Tensor, y: &Tensor) -> (Tensor, Tensor) {
    let loss = logits
        .cross_entropy_loss::<Tensor>(y, None, tch::Reduction::Sum, -100, 0.0)
        .to_kind(Kind::Double);
    let correct = logits.argmax(1, false).eq_tensor(y).sum(Kind::Int64);
    (loss, correct)
}

/// The most classes a confusion matrix is kept for (its CSV has classes² cells: 10^8 here).
pub const MAX_CONFUSION_CLASSES: usize = 10_000;

/// An evaluation's running sums over labelled batches.
#[derive(Debug)]
pub struct Evaluation {
    /// [`batch_sums`]' totals, on the logits' device (one read at the end, as the trainer).
    loss: Tensor,
    correct: Tensor,
    /// Images whose class is among the `top_k` most probable.
    correct_top_k: u64,
    top_k: i64,
    images: u64,
    /// (images, top-1 hits) per class.
    per_class: Vec<(u64, u64)>,
    /// (true class, predicted class) → images, when kept.
    confusion: Option<BTreeMap<(usize, usize), u64>>,
}

/// An evaluation's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub images: u64,
    /// Mean cross-entropy.
    pub loss: f64,
    /// Percent of images whose most probable class is theirs.
    pub top1: f64,
    /// Percent whose class is among the `top_k` most probable (5, or every class when the
    /// model has fewer).
    pub top_k: f64,
    pub k: i64,
    /// Per class: (images, top-1 percent; None for a class without images).
    pub per_class: Vec<(u64, Option<f64>)>,
}

impl Evaluation {
    /// Sums for a model of `num_classes` classes on `device`; with `confusion`, the
    /// confusion matrix too (at most [`MAX_CONFUSION_CLASSES`] classes).
    pub fn new(num_classes: usize, device: Device, confusion: bool) -> Result<Evaluation> {
        if confusion && num_classes > MAX_CONFUSION_CLASSES {
            return Err(Error::Usage(format!(
                "a confusion matrix of the model's {num_classes} classes would have \
                 {num_classes}² cells; it is kept for at most {MAX_CONFUSION_CLASSES} classes"
            )));
        }
        Ok(Evaluation {
            loss: Tensor::zeros([], (Kind::Double, device)),
            correct: Tensor::zeros([], (Kind::Int64, device)),
            correct_top_k: 0,
            top_k: 5.min(num_classes as i64),
            images: 0,
            per_class: vec![(0, 0); num_classes],
            confusion: confusion.then(BTreeMap::new),
        })
    }

    /// Adds a batch: its logits (float32 [n, classes]) and labels (int64 [n], same device).
    pub fn add(&mut self, logits: &Tensor, y: &Tensor) -> Result<()> {
        let (loss, correct) = batch_sums(logits, y);
        let _ = self.loss.g_add_(&loss);
        let _ = self.correct.g_add_(&correct);
        let (_, top) = logits.topk(self.top_k, 1, true, true);
        let hits = top.eq_tensor(&y.unsqueeze(1)).any_dim(1, false);
        self.correct_top_k += hits.sum(Kind::Int64).int64_value(&[]) as u64;
        let predicted = Vec::<i64>::try_from(logits.argmax(1, false).to_device(Device::Cpu))?;
        let truth = Vec::<i64>::try_from(y.to_device(Device::Cpu))?;
        for (&t, &p) in truth.iter().zip(&predicted) {
            let (t, p) = (t as usize, p as usize);
            let slot = &mut self.per_class[t];
            slot.0 += 1;
            slot.1 += u64::from(t == p);
            if let Some(m) = &mut self.confusion {
                *m.entry((t, p)).or_insert(0) += 1;
            }
        }
        self.images += truth.len() as u64;
        Ok(())
    }

    /// The figures so far; `None` before any image (they would be NaN).
    pub fn figures(&self) -> Option<Figures> {
        if self.images == 0 {
            return None;
        }
        let n = self.images as f64;
        let pct = |hits: u64, of: u64| 100.0 * hits as f64 / of as f64;
        // The trainer's formulas: sums over images, divided by their count.
        Some(Figures {
            images: self.images,
            loss: self.loss.double_value(&[]) / n,
            top1: 100.0 * self.correct.int64_value(&[]) as f64 / n,
            top_k: pct(self.correct_top_k, self.images),
            k: self.top_k,
            per_class: (self.per_class.iter())
                .map(|&(of, hits)| (of, (of > 0).then(|| pct(hits, of))))
                .collect(),
        })
    }

    /// The confusion matrix as CSV (rows the true class, columns the predicted one, both in
    /// label order, headed by `classes`' names; RFC 4180 quoting), written to `w`.
    pub fn write_confusion(
        &self,
        classes: &[String],
        w: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        let empty = BTreeMap::new();
        let m = self.confusion.as_ref().unwrap_or(&empty);
        let mut line = String::from("true\\predicted");
        for c in classes {
            line.push(',');
            line.push_str(&csv_field(c));
        }
        line.push_str("\r\n");
        w.write_all(line.as_bytes())?;
        for (t, name) in classes.iter().enumerate() {
            line.clear();
            line.push_str(&csv_field(name));
            for p in 0..classes.len() {
                line.push(',');
                line.push_str(&m.get(&(t, p)).copied().unwrap_or(0).to_string());
            }
            line.push_str("\r\n");
            w.write_all(line.as_bytes())?;
        }
        Ok(())
    }
}

/// A CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma, a quote or a line
/// break, or starts or ends with a space.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) || s.starts_with(' ') || s.ends_with(' ') {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh model of `arch` and `stem` saved with the metadata ddp-train writes; its path,
    /// an input and the model's evaluation logits for it.
    fn save_model(
        dir: &Path,
        arch: Arch,
        stem: Stem,
        k: i64,
    ) -> (std::path::PathBuf, Tensor, Tensor) {
        let vs = nn::VarStore::new(Device::Cpu);
        let net = ResNet::new(&vs.root(), arch, k, stem);
        // Running statistics away from their initial values, so that evaluation mode shows.
        tch::no_grad(|| {
            for (name, t) in vs.variables() {
                if name.ends_with("running_mean") {
                    let _ = t.shallow_clone().fill_(0.1);
                }
                if name.ends_with("running_var") {
                    let _ = t.shallow_clone().fill_(2.0);
                }
            }
        });
        let x = Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu));
        let want = tch::no_grad(|| net.try_forward(&x, false).unwrap());
        let meta = Meta {
            epoch: 1,
            step: 0,
            steps_per_epoch: 1,
            seed: 0,
            skipped_steps: 0,
            arch: arch.name().into(),
            best_top1: 10.0,
            val_top1: 10.0,
            scaler: false,
            loss_scale: 65536.0,
            growth_tracker: 0,
            world_size: 1,
            batch_size: 2,
            virtual_ranks: None,
            classes: Vec::new(),
            script: None,
            input: Some(Input {
                stem: match stem {
                    Stem::Cifar => "cifar",
                    Stem::ImageNet => "imagenet",
                }
                .into(),
                num_classes: k,
                image_size: 32,
                mean: vec![0.5; 3],
                std: vec![0.25; 3],
                eval_transform: "none".into(),
            }),
        };
        let path = dir.join(format!("{}-{stem:?}.safetensors", arch.name()));
        let tensors: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
        checkpoint::save(&path, &tensors, &meta.to_map()).unwrap();
        (path, x, want)
    }

    #[test]
    fn every_arch_and_stem_loads_to_the_models_own_logits() {
        let dir = tempfile::tempdir().unwrap();
        for (arch, stem) in [
            (Arch::ResNet18, Stem::Cifar),
            (Arch::ResNet34, Stem::ImageNet),
            (Arch::ResNet50, Stem::Cifar),
            (Arch::ResNet101, Stem::ImageNet),
        ] {
            let (path, x, want) = save_model(dir.path(), arch, stem, 7);
            let model = model_from_checkpoint(&path, Device::Cpu).unwrap();
            assert_eq!((model.arch, model.stem), (Some(arch), stem));
            assert_eq!(model.classes, ["0", "1", "2", "3", "4", "5", "6"]);
            let got = model.forward(&x, Precision::Fp32).unwrap();
            // The same weights through the same ops: equal to the bit.
            assert!(got.equal(&want), "{}", arch.name());
        }
    }

    #[test]
    fn a_checkpoint_whose_classifier_disagrees_with_its_metadata_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _, _) = save_model(dir.path(), Arch::ResNet18, Stem::Cifar, 3);
        let (tensors, mut map) = checkpoint::load(&path, Device::Cpu).unwrap();
        // The checkpoint rewritten with these tensors and metadata: why it is refused.
        let refused = |t: &BTreeMap<String, Tensor>,
                       map: &std::collections::HashMap<String, String>| {
            checkpoint::save(&path, t, map).unwrap();
            model_from_checkpoint(&path, Device::Cpu)
                .unwrap_err()
                .to_string()
        };
        // A class count that would size a 10^7 x 512 layer from a 3 x 512 one.
        map.insert("num_classes".into(), "10000000".into());
        let e = refused(&tensors, &map);
        assert!(
            e.contains("fc.weight is [3, 512], not the [10000000, 512]"),
            "{e}"
        );
        map.insert("num_classes".into(), "3".into());
        map.remove("stem");
        let e = refused(&tensors, &map);
        assert!(e.contains("does not say how the model sees images"), "{e}");
        // Strict: a tensor missing or one too many is named; NaN is refused.
        map.insert("stem".into(), "cifar".into());
        let mut t = tensors;
        let var = t.remove("layer1.0.bn1.running_var").unwrap();
        t.insert("extra.weight".into(), var.copy());
        let e = refused(&t, &map);
        assert!(
            e.contains("missing 1 (layer1.0.bn1.running_var), extra 1 (extra.weight)"),
            "{e}"
        );
        t.remove("extra.weight");
        t.insert("layer1.0.bn1.running_var".into(), var.fill(f64::NAN));
        let e = refused(&t, &map);
        assert!(e.contains("holds NaN"), "{e}");
    }

    #[test]
    fn figures_count_top1_top5_per_class_and_the_confusion_matrix() {
        // Three images of classes 0, 1, 1 over six classes.
        let logits = Tensor::from_slice(&[
            5.0f32, 1.0, 0.0, 0.0, 0.0, 0.0, // class 0, right
            1.0, 0.0, 5.0, 4.0, 3.0, 2.0, // class 1, ranked 6th: no top-5 hit
            0.0, 4.0, 5.0, 0.0, 0.0, 0.0, // class 1, ranked 2nd
        ])
        .view([3, 6]);
        let y = Tensor::from_slice(&[0i64, 1, 1]);
        let mut e = Evaluation::new(6, Device::Cpu, true).unwrap();
        e.add(&logits, &y).unwrap();
        let f = e.figures().unwrap();
        assert_eq!((f.images, f.k), (3, 5));
        assert!((f.top1 - 100.0 / 3.0).abs() < 1e-12);
        assert!((f.top_k - 200.0 / 3.0).abs() < 1e-12);
        let want = logits
            .cross_entropy_loss::<Tensor>(&y, None, tch::Reduction::Mean, -100, 0.0)
            .double_value(&[]);
        assert!((f.loss - want).abs() < 1e-6, "{} {want}", f.loss);
        assert_eq!(f.per_class[0], (1, Some(100.0)));
        assert_eq!(f.per_class[1], (2, Some(0.0)));
        assert_eq!(f.per_class[2], (0, None));
        let mut csv = Vec::new();
        let names: Vec<String> = ["a", "b,\"c\"", "c", "d", "e", "f"]
            .map(String::from)
            .into();
        e.write_confusion(&names, &mut csv).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "true\\predicted,a,\"b,\"\"c\"\"\",c,d,e,f");
        assert_eq!(lines[1], "a,1,0,0,0,0,0");
        assert_eq!(lines[2], "\"b,\"\"c\"\"\",0,0,2,0,0,0");
        assert_eq!(lines.len(), 7);
        assert!(Evaluation::new(20_000, Device::Cpu, true).is_err());
        assert_eq!(
            Evaluation::new(3, Device::Cpu, false).unwrap().figures(),
            None
        );
    }
}
