//! A network's weights as named tensors from a safetensors file (a PyTorch state_dict saved
//! with `safetensors.torch.save_file`, and the file's metadata), taken one by one by name and
//! checked by shape while the modules are built; what is left over is an error. A file that is
//! not safetensors is named for what it is (a Python pickle, a PyTorch zip) with what to run.
//! The StyleGAN2 generator and the LPIPS VGG16 both load through it.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use tch::{Device, Kind, Tensor};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}: {message}")]
    File { path: String, message: String },
}

pub type Result<T> = std::result::Result<T, Error>;

impl error_class::Classify for Error {}

/// Named tensors taken one by one while the modules are built; leftovers are an error.
#[derive(Debug)]
pub struct Weights {
    tensors: BTreeMap<String, Tensor>,
    source: String,
}

impl Weights {
    pub fn new(tensors: BTreeMap<String, Tensor>, source: impl Into<String>) -> Self {
        Weights {
            tensors,
            source: source.into(),
        }
    }

    /// Reads every tensor of a safetensors file as fp32 on `device`, and its metadata.
    pub fn read(path: &Path, device: Device) -> Result<(Self, BTreeMap<String, String>)> {
        let source = path.display().to_string();
        let io = |e: std::io::Error| Error::Io {
            path: source.clone(),
            error: e,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the file is only read; a concurrent writer could change the bytes under us,
        // which the safetensors header checks and our shape checks catch as a bad file at worst.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let bad = |m: String| Error::File {
            path: source.clone(),
            message: m,
        };
        let (_, meta) = SafeTensors::read_metadata(&map).map_err(|e| match sniff(&map) {
            Some(what) => bad(format!("{what}, not a safetensors file")),
            None => bad(format!("not a safetensors file ({e:?})")),
        })?;
        let metadata: BTreeMap<String, String> = meta
            .metadata()
            .as_ref()
            .map(|m| m.clone().into_iter().collect())
            .unwrap_or_default();
        let st = SafeTensors::deserialize(&map).map_err(|e| bad(format!("{e:?}")))?;
        let mut tensors = BTreeMap::new();
        for (name, view) in st.tensors() {
            let kind = match view.dtype() {
                Dtype::F32 => Kind::Float,
                Dtype::F16 => Kind::Half,
                Dtype::BF16 => Kind::BFloat16,
                Dtype::F64 => Kind::Double,
                other => {
                    return Err(bad(format!(
                        "tensor {name} has dtype {other:?}, not a float"
                    )));
                }
            };
            let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            let t = Tensor::f_from_data_size(view.data(), &shape, kind)
                .map_err(|e| bad(format!("tensor {name}: {e}")))?
                .to_kind(Kind::Float)
                .to_device(device);
            tensors.insert(name, t);
        }
        Ok((Weights { tensors, source }, metadata))
    }

    /// Whether the file holds a tensor named `name`.
    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// What the file is when it holds a torchvision ResNet (ddp-train's checkpoints), for the
    /// error of a loader that expected another network; `meta` is the file's metadata.
    pub fn resnet_classifier(&self, meta: &BTreeMap<String, String>) -> Option<String> {
        (self.has("fc.weight") && self.has("conv1.weight")).then(|| {
            format!(
                "a ResNet classifier ({}: ddp-train's checkpoint?)",
                meta.get("arch")
                    .map_or("torchvision's keys", String::as_str)
            )
        })
    }

    /// Removes and returns `name`, checking its shape.
    pub fn take(&mut self, name: &str, shape: &[i64]) -> Result<Tensor> {
        let t = self.tensors.remove(name).ok_or_else(|| Error::File {
            path: self.source.clone(),
            message: format!("missing tensor {name} (shape {shape:?})"),
        })?;
        if t.size() != shape {
            return Err(Error::File {
                path: self.source.clone(),
                message: format!(
                    "tensor {name} has shape {:?}, the config implies {shape:?}",
                    t.size()
                ),
            });
        }
        Ok(t)
    }

    /// Where the tensors came from (for messages).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Errors when tensors were left over: the file is not the network the config describes.
    pub fn finish(self) -> Result<()> {
        if self.tensors.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = self.tensors.keys().map(String::as_str).take(5).collect();
        Err(Error::File {
            path: self.source,
            message: format!(
                "{} tensor(s) the config does not use, e.g. {} (wrong config, or not a StyleGAN2-ADA G_ema)",
                self.tensors.len(),
                names.join(", ")
            ),
        })
    }
}

/// What a weights file that is not safetensors is, by its first bytes, with what to do with it:
/// a Python pickle (StyleGAN2-ADA's network .pkl, or a legacy torch.save) or a zip (torch.save's
/// format, TorchScript).
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x80, 2..=5, ..] => Some(
            "a Python pickle (a StyleGAN2-ADA network .pkl?): convert it with \
             scripts/convert-network-pkl FILE.pkl G.safetensors",
        ),
        [b'P', b'K', 3, 4, ..] => Some(
            "a PyTorch zip file (torch.save or TorchScript): save its state_dict with \
             safetensors.torch.save_file (a TorchScript VGG16 is taken by --vgg as a .pt file)",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod sniff_tests {
    use super::*;

    #[test]
    fn pickles_and_zips_are_named_with_what_to_run() {
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes, says) in [
            (
                "network.pkl",
                &b"\x80\x04\x95\x10\x00"[..],
                "scripts/convert-network-pkl",
            ),
            ("model.pt", &b"PK\x03\x04archive"[..], "PyTorch zip file"),
            (
                "junk.safetensors",
                &b"\xff\xff\xff\xff\xff\xff\xff\xff"[..],
                "not a safetensors file (",
            ),
        ] {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            let e = Weights::read(&p, Device::Cpu).unwrap_err().to_string();
            assert!(e.contains(says), "{name}: {e}");
        }
    }
}
