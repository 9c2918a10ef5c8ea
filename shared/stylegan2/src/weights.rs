//! Reading a safetensors weights file (upstream state_dict keys + `config` metadata).

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use tch::{Device, Kind, Tensor};

use crate::{Config, Error, Result};

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
            source: e,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the file is only read; a concurrent writer could change the bytes under us,
        // which the safetensors header checks and our shape checks catch as a bad file at worst.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let bad = |m: String| Error::File {
            path: source.clone(),
            message: m,
        };
        let (_, meta) = SafeTensors::read_metadata(&map).map_err(|e| bad(format!("{e:?}")))?;
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

    /// The generator config in a file's metadata (`config`), if any.
    pub fn config(metadata: &BTreeMap<String, String>) -> Result<Option<Config>> {
        metadata
            .get("config")
            .map(|json| Config::from_json(json))
            .transpose()
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
