//! LPIPS (v0.1, VGG16) perceptual features, as NVIDIA's `vgg16.pt` returns them for
//! `return_lpips=True`: one vector per image such that the squared distance between two vectors
//! is the LPIPS distance of the two images.
//!
//! For images in [0, 255]: `x / 127.5 - 1`, LPIPS' scaling layer `(x - shift) / scale`, the
//! VGG16 convolution stack (torchvision's `features[0..30]`), taps after relu1_2, relu2_2,
//! relu3_3, relu4_3 and relu5_3; each tap is divided by its channel norm (+1e-10), multiplied by
//! `sqrt(w_c / (H·W))` with LPIPS' linear weights `w_c`, flattened, and the five are concatenated.
//! Then `Σ (f(a) − f(b))² = Σ_taps mean_HW Σ_c w_c (â − b̂)²`, LPIPS' formula.
//!
//! Weights: [`Vgg16::load`] takes either a safetensors file (`features.{i}.weight|bias` with
//! torchvision's indices, `lpips.{k}` the linear weights of tap k, made by
//! `scripts/convert-vgg16-lpips`) for the native implementation, or NVIDIA's TorchScript
//! `vgg16.pt` (a `.pt` file), called like the upstream projector:
//! `vgg16(img, resize_images=False, return_lpips=True)`.

use std::path::Path;

use gpu_runtime::tune::{self, Tuner};
use tch::{CModule, Device, IValue, Kind, Tensor};
use weights::Weights;

/// torchvision VGG16 `features` indices of the 13 convolutions, and after which of them the
/// five LPIPS taps come (relu1_2, relu2_2, relu3_3, relu4_3, relu5_3).
pub const CONV_INDICES: [usize; 13] = [0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28];
const CHANNELS: [(i64, i64); 13] = [
    (3, 64),
    (64, 64),
    (64, 128),
    (128, 128),
    (128, 256),
    (256, 256),
    (256, 256),
    (256, 512),
    (512, 512),
    (512, 512),
    (512, 512),
    (512, 512),
    (512, 512),
];
/// Number of convolutions in each of the five slices (a max-pool precedes slices 2..5).
const SLICES: [usize; 5] = [2, 2, 3, 3, 3];
/// LPIPS' ScalingLayer constants.
const SHIFT: [f32; 3] = [-0.030, -0.088, -0.188];
const SCALE: [f32; 3] = [0.458, 0.448, 0.450];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Weights(#[from] weights::Error),
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("running the TorchScript VGG16: {0}")]
    Script(#[from] tch::TchError),
}

pub type Result<T> = std::result::Result<T, Error>;

impl error_class::Classify for Error {}

/// The native VGG16 + LPIPS weights.
#[derive(Debug)]
pub struct NativeVgg16 {
    /// (weight [out,in,3,3], bias [out]) per convolution.
    pub convs: Vec<(Tensor, Tensor)>,
    /// LPIPS linear weights per tap, [C].
    pub lpips: Vec<Tensor>,
    shift: Tensor,
    scale: Tensor,
    /// The convolution weights in channels_last, made on first use of that layout.
    convs_nhwc: std::sync::OnceLock<Vec<Tensor>>,
    /// The layout choice (a name of [`LAYOUTS`], `auto`, or unset: see [`NativeVgg16::features`])
    /// and the decisions timed for it.
    layout: Option<&'static str>,
    tuner: Tuner,
}

/// A perceptual feature extractor.
#[derive(Debug)]
pub enum Vgg16 {
    Native(NativeVgg16),
    /// NVIDIA's TorchScript module.
    Script(CModule),
}

impl Vgg16 {
    /// `.pt` → TorchScript (NVIDIA's vgg16.pt); anything else → safetensors for the native net.
    pub fn load(path: &Path, device: Device) -> Result<Self> {
        if path.extension().is_some_and(|e| e == "pt" || e == "pth") {
            let mut m = CModule::load_on_device(path, device).map_err(|e| Error::File {
                path: path.display().to_string(),
                message: format!("not a TorchScript module: {e}"),
            })?;
            m.set_eval();
            return Ok(Vgg16::Script(m));
        }
        let (mut w, meta) = Weights::read(path, device)?;
        let other = if meta.contains_key("config") {
            Some("a StyleGAN2 generator (it has `config` metadata)".to_string())
        } else {
            w.resnet_classifier(&meta)
        };
        if let Some(what) = other {
            return Err(Error::File {
                path: path.display().to_string(),
                message: format!(
                    "{what}, not LPIPS's VGG16: --vgg takes NVIDIA's vgg16.pt (TorchScript) or \
                     the output of scripts/convert-vgg16-lpips"
                ),
            });
        }
        let mut convs = Vec::new();
        for (i, (cin, cout)) in CONV_INDICES.iter().zip(CHANNELS) {
            let weight = w.take(&format!("features.{i}.weight"), &[cout, cin, 3, 3])?;
            let bias = w.take(&format!("features.{i}.bias"), &[cout])?;
            convs.push((weight, bias));
        }
        let taps = [64, 128, 256, 512, 512];
        let lpips = (0..5)
            .map(|k| w.take(&format!("lpips.{k}"), &[taps[k]]))
            .collect::<weights::Result<Vec<_>>>()?;
        w.finish()?;
        Ok(Vgg16::Native(NativeVgg16::new(convs, lpips, device)))
    }

    /// Features [N, F] of images [N, 3, H, W] with values in [0, 255] (no resizing).
    pub fn features(&self, img: &Tensor) -> Result<Tensor> {
        match self {
            Vgg16::Native(n) => Ok(n.features(img)),
            Vgg16::Script(m) => {
                let out = m.forward_is(&[
                    IValue::Tensor(img.shallow_clone()),
                    IValue::Bool(false),
                    IValue::Bool(true),
                ])?;
                match out {
                    IValue::Tensor(t) => Ok(t),
                    other => Err(Error::Script(tch::TchError::Kind(format!(
                        "vgg16.pt returned {other:?}, not a tensor"
                    )))),
                }
            }
        }
    }

    /// Fixes or frees the native network's layout choice (`choices.vgg_layout`).
    pub fn set_kernel_choices(&mut self, choices: tune::KernelChoices) {
        if let Vgg16::Native(n) = self {
            n.layout = choices.vgg_layout;
        }
    }

    /// The layout decisions the native network has timed (none for TorchScript).
    pub fn decisions(&self) -> Vec<tune::Decision> {
        match self {
            Vgg16::Native(n) => n.tuner.decisions(),
            Vgg16::Script(_) => Vec::new(),
        }
    }

    /// Casts the native network's weights to `kind` (e.g. bf16); inputs are cast to match.
    pub fn to_kind(&mut self, kind: Kind) {
        if let Vgg16::Native(n) = self {
            for (w, b) in n.convs.iter_mut() {
                *w = w.to_kind(kind);
                *b = b.to_kind(kind);
            }
            n.convs_nhwc = Default::default();
        }
    }
}

/// The memory layouts the native network can run its convolutions in.
pub const LAYOUTS: [&str; 2] = tune::VGG_LAYOUTS;

impl NativeVgg16 {
    pub fn new(convs: Vec<(Tensor, Tensor)>, lpips: Vec<Tensor>, device: Device) -> Self {
        let shift = Tensor::from_slice(&SHIFT)
            .reshape([1, 3, 1, 1])
            .to_device(device);
        let scale = Tensor::from_slice(&SCALE)
            .reshape([1, 3, 1, 1])
            .to_device(device);
        NativeVgg16 {
            convs,
            lpips,
            shift,
            scale,
            convs_nhwc: Default::default(),
            layout: None,
            tuner: Tuner::default(),
        }
    }

    /// VGG16-shaped network with random weights (He-normal convolutions, uniform LPIPS weights):
    /// the compute of the real one, for benchmarks.
    pub fn random(device: Device) -> Self {
        let o = (Kind::Float, device);
        let convs = CHANNELS
            .iter()
            .map(|&(cin, cout)| {
                let std = (2.0 / (cin * 9) as f64).sqrt();
                (
                    Tensor::randn([cout, cin, 3, 3], o) * std,
                    Tensor::zeros([cout], o),
                )
            })
            .collect();
        let lpips = [64, 128, 256, 512, 512]
            .iter()
            .map(|&c| Tensor::rand([c], o))
            .collect();
        NativeVgg16::new(convs, lpips, device)
    }

    /// Features of images [N,3,H,W] in [0,255], the convolutions in the faster memory layout:
    /// NCHW, or channels_last (NHWC), which cuDNN's tensor-core kernels use natively (NCHW
    /// costs a transpose each way per call). `--kernel-choices vgg-layout=nchw|nhwc|auto`
    /// ([`tune::KernelChoices`], given by [`Vgg16::set_kernel_choices`]); by default CUDA times
    /// both once per input shape with this network's own [`Tuner`], the CPU runs NCHW.
    pub fn features(&self, img: &Tensor) -> Tensor {
        let fixed = tune::mode(self.layout, &LAYOUTS, img.device());
        let nchw = |x: &Tensor| self.features_in(x, false);
        let nhwc = |x: &Tensor| self.features_in(x, true);
        let what = format!("vgg16 layout, {:?} weights", self.convs[0].0.kind());
        let i = self.tuner.choose(
            &what,
            fixed,
            img,
            &[(LAYOUTS[0], &nchw), (LAYOUTS[1], &nhwc)],
        );
        self.features_in(img, i == 1)
    }

    /// [`NativeVgg16::features`] in the layout given: NCHW, or NHWC (`channels_last`).
    pub fn features_in(&self, img: &Tensor, channels_last: bool) -> Tensor {
        let kind = self.convs[0].0.kind();
        let x = (img.to_kind(Kind::Float) / 127.5 - 1.0 - &self.shift) / &self.scale;
        let mut x = x.to_kind(kind);
        let nhwc = channels_last.then(|| {
            x = gpu_runtime::shim::to_channels_last(&x).expect("channels_last of a 4-d tensor");
            self.convs_nhwc.get_or_init(|| {
                self.convs
                    .iter()
                    .map(|(w, _)| {
                        gpu_runtime::shim::to_channels_last(w)
                            .expect("channels_last of a 4-d weight")
                    })
                    .collect()
            })
        });
        let mut convs = self
            .convs
            .iter()
            .enumerate()
            .map(|(i, (w, b))| (nhwc.map_or(w, |n| &n[i]), b));
        let mut out = Vec::with_capacity(5);
        for (k, n) in SLICES.iter().enumerate() {
            if k > 0 {
                x = x.max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false);
            }
            for _ in 0..*n {
                let (w, b) = convs.next().unwrap();
                x = x.conv2d(w, Some(b), [1, 1], [1, 1], [1, 1], 1).relu();
            }
            let f = x.to_kind(Kind::Float);
            let (_, c, h, w) = f.size4().unwrap();
            let norm = f
                .square()
                .sum_dim_intlist(&[1i64][..], true, Kind::Float)
                .sqrt()
                + 1e-10;
            let scale = (&self.lpips[k] / (h * w) as f64)
                .sqrt()
                .reshape([1, c, 1, 1]);
            out.push((f / norm * scale).flatten(1, -1));
        }
        Tensor::cat(&out, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_gives_the_same_features() {
        // Same convolutions in another memory layout: only summation order may differ (1e-5
        // relative is ~100 fp32 ulps over 13 layers).
        tch::manual_seed(9);
        let vgg = NativeVgg16::random(Device::Cpu);
        let img = Tensor::rand([2, 3, 32, 32], (Kind::Float, Device::Cpu)) * 255.0;
        let want = vgg.features(&img);
        assert!(
            vgg.convs_nhwc.get().is_none(),
            "the CPU runs NCHW by default"
        );
        let got = vgg.features_in(&img, true);
        assert!(
            vgg.convs_nhwc
                .get()
                .unwrap()
                .iter()
                .all(gpu_runtime::shim::is_channels_last)
        );
        assert_eq!(got.size(), want.size());
        let d = (&got - &want).abs().max().double_value(&[]) / want.abs().max().double_value(&[]);
        assert!(d < 1e-5, "relative difference {d}");
    }
}
