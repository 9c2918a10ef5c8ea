//! NVIDIA's StyleGAN2-ADA generator (`training/networks.py`, `G_ema`) in tch.
//!
//! The structs mirror upstream's modules one to one and take their tensors under upstream's
//! state_dict keys (`mapping.fc0.weight`, `synthesis.b8.conv0.affine.weight`,
//! `synthesis.b4.conv1.noise_const`, ...), so a network converted by
//! `scripts/convert-network-pkl` loads as is. The ops follow upstream's reference (`_ref`)
//! implementations step by step; the parity tests compare against fixtures made with the upstream
//! code (CPU, fp32).
//!
//! ```no_run
//! use stylegan2::{Generator, SynthesisOptions};
//! let g = Generator::load("G.safetensors".as_ref(), None, tch::Device::Cpu)?;
//! let z = tch::Tensor::randn([1, g.config.z_dim], (tch::Kind::Float, tch::Device::Cpu));
//! let img = g.forward(&z, None, 0.7, None, &SynthesisOptions::default());
//! # Ok::<(), stylegan2::Error>(())
//! ```

mod config;
pub mod epilogue;
pub mod fast;
pub mod init;
mod model;
pub mod np_random;
pub mod ops;
pub mod tune;

use std::path::Path;

pub use config::{Architecture, Config};
pub use model::{
    Block, FullyConnected, Generator, Mapping, Noise, Ops, SkipConv, Synthesis, SynthesisLayer,
    SynthesisOptions, ToRgb,
};
pub use weights::Weights;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing the weights file (or a config file): the same errors as the
    /// `weights` crate's.
    #[error(transparent)]
    Weights(#[from] weights::Error),
    #[error("bad generator config: {0}")]
    Config(String),
    #[error(
        "{0} has no `config` metadata and no config was given: convert it with \
         scripts/convert-network-pkl, or pass the config explicitly"
    )]
    NoConfig(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl error_class::Classify for Error {}

/// A tensor's shape and its values as f32 in row-major order, copied to the CPU (for writing
/// .npy/.npz/safetensors files).
pub fn to_f32_vec(t: &tch::Tensor) -> (Vec<usize>, Vec<f32>) {
    let t = t
        .to_kind(tch::Kind::Float)
        .to_device(tch::Device::Cpu)
        .contiguous();
    let shape = t.size().iter().map(|&d| d as usize).collect();
    let mut v = vec![0f32; t.numel()];
    let n = v.len();
    t.copy_data(&mut v, n);
    (shape, v)
}

/// Upstream's image mapping `(img * 127.5 + 128).clamp(0, 255).to(torch.uint8)` for one image
/// [1,C,H,W] (or [C,H,W]), returned channels last (H, W, C) as bytes.
pub fn to_uint8_hwc(img: &tch::Tensor) -> Vec<u8> {
    let img = if img.dim() == 4 {
        img.squeeze_dim(0)
    } else {
        img.shallow_clone()
    };
    let u8img = (img.to_kind(tch::Kind::Float) * 127.5 + 128.0)
        .clamp(0.0, 255.0)
        .to_kind(tch::Kind::Uint8);
    let hwc = u8img
        .permute([1, 2, 0])
        .contiguous()
        .to_device(tch::Device::Cpu);
    let mut buf = vec![0u8; hwc.numel()];
    let n = buf.len();
    hwc.copy_data(&mut buf, n);
    buf
}

impl Generator {
    /// Loads a safetensors weights file. The config is `config` (flags) when given, else the
    /// file's `config` metadata; never guessed.
    pub fn load(path: &Path, config: Option<Config>, device: tch::Device) -> Result<Self> {
        let (weights, meta) = Weights::read(path, device)?;
        if let Some(what) = weights.resnet_classifier(&meta) {
            return Err(weights::Error::File {
                path: path.display().to_string(),
                message: format!("{what}, not a StyleGAN2 generator"),
            }
            .into());
        }
        let config = match config {
            Some(c) => Some(c),
            None => Config::from_metadata(&meta)?,
        };
        let config = config.ok_or_else(|| Error::NoConfig(path.display().to_string()))?;
        Generator::from_weights(config, weights, device)
    }

    /// A freshly initialised generator (upstream's initialisation, see [`init::init_tensors`]).
    pub fn random(config: Config, device: tch::Device) -> Result<Self> {
        let tensors = init::init_tensors(&config)
            .into_iter()
            .map(|(k, t)| (k, t.to_device(device)))
            .collect();
        Generator::from_weights(config, Weights::new(tensors, "<random init>"), device)
    }

    /// `z` [n, z_dim] as upstream's `np.random.RandomState(seed).randn(n, z_dim)` (float64).
    pub fn seeded_z(&self, seed: u32, n: i64) -> tch::Tensor {
        let v = np_random::RandomState::new(seed).randn((n * self.config.z_dim) as usize);
        tch::Tensor::from_slice(&v)
            .reshape([n, self.config.z_dim])
            .to_device(self.device())
    }

    /// The projector's W statistics: `samples` z from `RandomState(123)`, mapped (no
    /// truncation); returns `w_avg` [1, 1, w_dim] and the scalar
    /// `w_std = sqrt(sum((w - w_avg)^2) / samples)`, as upstream `project()` computes them.
    pub fn w_avg_std(&self, samples: i64) -> (tch::Tensor, f64) {
        let _guard = tch::no_grad_guard();
        let z = self.seeded_z(123, samples);
        let w = self.mapping.forward(&z, None, 1.0, None).narrow(1, 0, 1);
        let w_avg = w.mean_dim(0, true, tch::Kind::Float);
        let var = (&w - &w_avg)
            .square()
            .sum(tch::Kind::Float)
            .double_value(&[])
            / samples as f64;
        (w_avg, var.sqrt())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn uint8_mapping_is_upstreams() {
        // -1 -> 0.5 -> 0; 0 -> 128; 1 -> 255.5 -> 255; 0.999 -> 255.37 -> 255; -0.5 -> 64.25 -> 64.
        let img =
            tch::Tensor::from_slice(&[-1.0f32, 0.0, 1.0, 0.999, -0.5, 2.0]).reshape([1, 1, 2, 3]);
        assert_eq!(super::to_uint8_hwc(&img), [0, 128, 255, 255, 64, 255]);
    }
}
