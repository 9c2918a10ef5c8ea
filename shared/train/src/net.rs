//! The model a run trains: a torchvision ResNet built here ([`crate::resnet`]), or the user's own
//! model as a TorchScript file ([`ScriptNet`]: written by `torch.jit.save`, scripted or traced,
//! taking the loader's float batch `[N, 3, H, W]` and returning logits `[N, classes]`).
//!
//! A TorchScript model's parameters and buffers join the run's `VarStore` under their
//! `state_dict` names (handles to the module's own tensors), so everything that works on the
//! store — DDP's broadcasts and buckets, the flat buffers, the optimisers, checkpoints, `--init`
//! — works on it unchanged, and a checkpoint loads with `load_state_dict` into the user's eager
//! `nn.Module`.

use std::ops::Range;
use std::path::{Path, PathBuf};

use gpu_runtime::script::ScriptModule;
use tch::{Tensor, nn};

use crate::resnet::ResNet;
use crate::{Error, Result};

/// A run's model (one per run: the size difference of the variants costs nothing).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Net {
    ResNet(ResNet),
    Script(ScriptNet),
}

/// A TorchScript module being trained.
#[derive(Debug)]
pub struct ScriptNet {
    module: ScriptModule,
    /// The file it was loaded from, and its SHA-256 (hex): what a checkpoint names.
    pub file: PathBuf,
    pub sha256: String,
    /// The classes its output has, once the first check saw them.
    pub classes: std::sync::OnceLock<i64>,
}

/// The most bytes a model file may have (a TorchScript archive of 4 GiB holds a billion float32
/// weights).
pub const MAX_MODEL_BYTES: u64 = 4 << 30;

impl ScriptNet {
    /// Loads `file` onto the store's device and adds its parameters (trainable, in
    /// `parameters()` order) and buffers to `vs` under their `state_dict` names. A file that is
    /// not TorchScript, or a module without parameters, is an error naming the file.
    pub fn load(file: &Path, vs: &nn::VarStore) -> Result<ScriptNet> {
        let bad =
            |why: String| Error::Data(format!("--model torchscript:{}: {why}", file.display()));
        let file_of = || file.to_path_buf();
        // A regular file read once: the bytes hashed are the bytes loaded (loading the path
        // again after hashing would load whatever it holds by then).
        let bytes =
            input_file::read(file, MAX_MODEL_BYTES).map_err(|source| ScriptError::Read {
                file: file_of(),
                source,
            })?;
        let sha256 = hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        let module = ScriptModule::from_bytes(&bytes, vs.device()).map_err(|source| {
            ScriptError::NotTorchScript {
                file: file_of(),
                source,
            }
        })?;
        let tensors = |source| ScriptError::Tensors {
            file: file_of(),
            source,
        };
        let params = module.named_parameters().map_err(tensors)?;
        let buffers = module.named_buffers().map_err(tensors)?;
        let trained: Vec<&(String, Tensor)> =
            params.iter().filter(|(_, t)| t.requires_grad()).collect();
        let Some((first, t0)) = trained.first() else {
            return Err(bad(
                "the module has no parameters to train (none, or none with requires_grad)".into(),
            ));
        };
        // One flat buffer holds the trained parameters (DDP's buckets are ranges of it).
        if let Some((name, t)) = trained.iter().find(|(_, t)| t.kind() != t0.kind()) {
            return Err(bad(format!(
                "its trained parameters must share one dtype: {first} is {:?}, {name} {:?}",
                t0.kind(),
                t.kind()
            )));
        }
        for (name, t) in params {
            // A frozen parameter (requires_grad False) is state, not trained: as DDP leaves it.
            let trainable = t.requires_grad();
            add(vs, &name, t, trainable).map_err(|source| ScriptError::Name {
                file: file_of(),
                source,
            })?;
        }
        for (name, t) in buffers {
            add(vs, &name, t, false).map_err(|source| ScriptError::Name {
                file: file_of(),
                source,
            })?;
        }
        Ok(ScriptNet {
            module,
            // Absolute: what a checkpoint names must not depend on where it is read.
            file: std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf()),
            sha256,
            classes: std::sync::OnceLock::new(),
        })
    }

    /// `model.train(train)`, then `model(x)`. An exception the module's code raised is named by
    /// its last line (`RuntimeError: ...`) beside libtorch's first. In evaluation mode, once the
    /// classes are known, the output must be float logits `[batch, classes]` (an evaluation
    /// would otherwise fail inside libtorch's loss, or index rows that are not there).
    pub fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let y = self.run(x, train)?;
        if let (false, Some(&k)) = (train, self.classes.get()) {
            let n = x.size().first().copied().unwrap_or(0);
            if y.size() != [n, k] || !y.is_floating_point() {
                return Err(Error::Data(format!(
                    "{}: in evaluation mode, for a batch of shape {:?} it returns {:?} of shape \
                     {:?}, not float logits [{n}, {k}]",
                    self.file.display(),
                    x.size(),
                    y.kind(),
                    y.size()
                )));
            }
        }
        Ok(y)
    }

    fn run(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        self.module.forward(x, train).map_err(|e| {
            let reason =
                e.0.lines()
                    .rev()
                    .map(str::trim)
                    .find(|l| l.contains("Error: ") || l.contains("Exception: "))
                    .filter(|l| *l != e.to_string());
            let reason = reason.map(str::to_string);
            ScriptError::Forward {
                file: self.file.clone(),
                reason,
                source: e,
            }
            .into()
        })
    }

    /// A training forward's output for a batch of `n` (of a global batch `batch`): float
    /// logits `[n, classes]` (as many as the first check saw) that depend on the parameters.
    pub fn check_training_output(
        &self,
        x: &Tensor,
        y: &Tensor,
        n: i64,
        batch: usize,
    ) -> Result<()> {
        let classes = self.classes.get().copied();
        let ok_shape = y.dim() == 2 && y.size()[0] == n && classes.is_none_or(|k| y.size()[1] == k);
        if !ok_shape || !y.is_floating_point() {
            return Err(Error::Data(format!(
                "--model torchscript:{:?}: in training mode, for a batch of shape {:?} it returns \
                 {:?} of shape {:?}, not float logits [{n}, {}] (global batch {batch})",
                self.file,
                x.size(),
                y.kind(),
                y.size(),
                classes.map_or("classes".to_string(), |k| k.to_string())
            )));
        }
        if !y.requires_grad() {
            return Err(Error::Data(format!(
                "--model torchscript:{:?}: its output in training mode depends on no trained \
                 parameter (detached, or computed without them): there is nothing to train",
                self.file
            )));
        }
        Ok(())
    }
}

/// Why a module's tensor cannot be added under its name ([`add`]).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// A name with an empty part (`a..b`, `.a`): no path in a VarStore.
    #[error("a tensor named {0:?}")]
    Malformed(String),
    /// A name already in the store.
    #[error("two tensors named {0:?}")]
    Twice(String),
}

/// A TorchScript model (`--model torchscript:FILE`) that cannot be loaded or run: the file,
/// and the cause below.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file cannot be read (the io error names it).
    #[error("--model torchscript:{}", .file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--model torchscript:{}: not a TorchScript module torch.jit.load reads",
        .file.display()
    )]
    NotTorchScript {
        file: PathBuf,
        #[source]
        source: gpu_runtime::shim::Error,
    },
    /// Its parameters or buffers cannot be listed.
    #[error("--model torchscript:{}", .file.display())]
    Tensors {
        file: PathBuf,
        #[source]
        source: gpu_runtime::shim::Error,
    },
    /// A parameter's or buffer's name cannot be a store path.
    #[error("--model torchscript:{}", .file.display())]
    Name {
        file: PathBuf,
        #[source]
        source: NameError,
    },
    /// Its forward raised: libtorch's text, and the exception's own line (`reason`) when
    /// libtorch's first line is not it.
    #[error(
        "{file:?}: its forward{}",
        .reason.as_ref().map_or(String::new(), |r| format!(" ({r})"))
    )]
    Forward {
        file: PathBuf,
        reason: Option<String>,
        #[source]
        source: gpu_runtime::shim::Error,
    },
}

/// Adds `t` to `vs` as `name` (a dotted state_dict name: one path segment per part).
fn add(
    vs: &nn::VarStore,
    name: &str,
    t: Tensor,
    trainable: bool,
) -> std::result::Result<(), NameError> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(NameError::Malformed(name.into()));
    }
    if vs.variables().contains_key(name) {
        return Err(NameError::Twice(name.into()));
    }
    let (last, dirs) = parts.split_last().expect("split gives one part at least");
    let path = dirs.iter().fold(vs.root(), |p, d| p / *d);
    let _ = path.add(last, t, trainable);
    Ok(())
}

/// Bytes in lower-case hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Net {
    /// Units `units` of the forward pass (a pipeline stage); a TorchScript model is one unit.
    pub fn forward_units(&self, x: &Tensor, units: Range<usize>, train: bool) -> Result<Tensor> {
        match self {
            Net::ResNet(r) => r.forward_units(x, units, train),
            Net::Script(s) => s.forward(x, train),
        }
    }

    /// The whole forward pass.
    pub fn try_forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        match self {
            Net::ResNet(r) => r.try_forward(x, train),
            Net::Script(s) => s.forward(x, train),
        }
    }

    /// The unit a parameter belongs to (a TorchScript model is one unit).
    pub fn unit_of(&self, name: &str) -> Option<usize> {
        match self {
            Net::ResNet(r) => r.unit_of(name),
            Net::Script(_) => Some(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensor_name_that_cannot_be_a_store_path_is_refused_by_kind() {
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let t = || Tensor::zeros([2], (tch::Kind::Float, tch::Device::Cpu));
        add(&vs, "layer.weight", t(), true).unwrap();
        assert!(vs.variables().contains_key("layer.weight"));
        let e = add(&vs, "layer.weight", t(), false).unwrap_err();
        assert_eq!(e, NameError::Twice("layer.weight".into()));
        assert_eq!(e.to_string(), r#"two tensors named "layer.weight""#);
        let e = add(&vs, "layer..bias", t(), false).unwrap_err();
        assert_eq!(e, NameError::Malformed("layer..bias".into()));
        assert_eq!(e.to_string(), r#"a tensor named "layer..bias""#);
    }

    #[test]
    fn a_model_file_that_cannot_be_loaded_keeps_its_cause_by_kind() {
        use std::error::Error as _;
        let dir = tempfile::tempdir().unwrap();
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let missing = dir.path().join("gone.pt");
        let Err(e) = ScriptNet::load(&missing, &vs) else {
            panic!("loaded a missing file")
        };
        assert!(
            matches!(&e, Error::Script(ScriptError::Read { file, .. }) if *file == missing),
            "{e:?}"
        );
        assert!(
            e.source().is_some_and(|s| s.is::<std::io::Error>()),
            "{e:?}"
        );
        assert_eq!(
            error_class::chain_text(&e),
            format!(
                "--model torchscript:{}: {}: No such file or directory (os error 2)",
                missing.display(),
                missing.display()
            )
        );
        let junk = dir.path().join("junk.pt");
        std::fs::write(&junk, b"not a zip").unwrap();
        let Err(e) = ScriptNet::load(&junk, &vs) else {
            panic!("loaded junk")
        };
        assert!(
            matches!(&e, Error::Script(ScriptError::NotTorchScript { .. })),
            "{e:?}"
        );
        assert!(
            e.source()
                .is_some_and(|s| s.is::<gpu_runtime::shim::Error>()),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .ends_with("junk.pt: not a TorchScript module torch.jit.load reads"),
            "{e}"
        );
        assert_eq!(error_class::Classify::class(&e), error_class::Class::Fatal);
    }
}
