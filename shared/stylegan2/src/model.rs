//! The modules of upstream `training/networks.py`, one struct each, holding the tensors of the
//! G_ema state_dict under the same names.
//!
//! In-place tensor ops (`+=`) appear only where upstream has them (`add_`), on fresh tensors.
#![allow(clippy::assign_op_pattern)] // `b = b * g` must not become the in-place `b *= g`

use std::cell::OnceCell;
use std::f64::consts::SQRT_2;

use tch::{Device, Kind, Tensor};

use crate::fast;
use crate::ops::{self, Act, ModConv};
use crate::{Architecture, Config, Result};
use weights::Weights;

/// `FullyConnectedLayer`: equalised learning rate (weight × lr_multiplier/√in, bias ×
/// lr_multiplier), then bias + activation.
#[derive(Debug)]
pub struct FullyConnected {
    pub weight: Tensor,
    pub bias: Tensor,
    weight_gain: f64,
    bias_gain: f64,
    act: Act,
}

impl FullyConnected {
    fn load(
        w: &mut Weights,
        prefix: &str,
        in_features: i64,
        out_features: i64,
        act: Act,
        lr_multiplier: f64,
    ) -> Result<Self> {
        Ok(FullyConnected {
            weight: w.take(&format!("{prefix}.weight"), &[out_features, in_features])?,
            bias: w.take(&format!("{prefix}.bias"), &[out_features])?,
            weight_gain: lr_multiplier / (in_features as f64).sqrt(),
            bias_gain: lr_multiplier,
            act,
        })
    }

    /// `PREFIX.affine` of a modulated layer (SynthesisLayer, ToRGBLayer): w_dim → `in_ch`
    /// styles, linear, lr_multiplier 1.
    fn affine(w: &mut Weights, prefix: &str, cfg: &Config, in_ch: i64) -> Result<Self> {
        let name = format!("{prefix}.affine");
        Self::load(w, &name, cfg.w_dim, in_ch, Act::Linear, 1.0)
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let w = self.weight.to_kind(x.kind()) * self.weight_gain;
        let mut b = self.bias.to_kind(x.kind());
        if self.bias_gain != 1.0 {
            b = b * self.bias_gain;
        }
        if self.act == Act::Linear {
            b.unsqueeze(0).addmm(x, &w.tr())
        } else {
            let x = x.matmul(&w.tr());
            ops::bias_act(&x, Some(&b), self.act, self.act.def_gain(), None)
        }
    }
}

/// `MappingNetwork`: z (and c) → w, broadcast to `num_ws`, with truncation towards `w_avg`.
#[derive(Debug)]
pub struct Mapping {
    pub embed: Option<FullyConnected>,
    pub fcs: Vec<FullyConnected>,
    pub w_avg: Tensor,
    z_dim: i64,
    c_dim: i64,
    num_ws: i64,
}

impl Mapping {
    fn load(w: &mut Weights, cfg: &Config) -> Result<Self> {
        let embed_features = if cfg.c_dim > 0 { cfg.w_dim } else { 0 };
        let embed = if cfg.c_dim > 0 {
            Some(FullyConnected::load(
                w,
                "mapping.embed",
                cfg.c_dim,
                embed_features,
                Act::Linear,
                1.0,
            )?)
        } else {
            None
        };
        let mut features = vec![cfg.z_dim + embed_features];
        features.extend(std::iter::repeat_n(cfg.w_dim, cfg.map_layers as usize));
        let fcs = (0..cfg.map_layers as usize)
            .map(|i| {
                FullyConnected::load(
                    w,
                    &format!("mapping.fc{i}"),
                    features[i],
                    features[i + 1],
                    Act::Lrelu,
                    cfg.mapping_lr_multiplier,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Mapping {
            embed,
            fcs,
            w_avg: w.take("mapping.w_avg", &[cfg.w_dim])?,
            z_dim: cfg.z_dim,
            c_dim: cfg.c_dim,
            num_ws: cfg.num_ws(),
        })
    }

    /// z [N, z_dim] (and c [N, c_dim] for conditional networks) → ws [N, num_ws, w_dim].
    /// `psi` ≠ 1 pulls ws towards `w_avg`; with `cutoff`, only the first `cutoff` ws.
    pub fn forward(&self, z: &Tensor, c: Option<&Tensor>, psi: f64, cutoff: Option<i64>) -> Tensor {
        let mut x = None;
        if self.z_dim > 0 {
            x = Some(ops::normalize_2nd_moment(&z.to_kind(Kind::Float)));
        }
        if self.c_dim > 0 {
            let embed = self.embed.as_ref().expect("conditional mapping has embed");
            let c = c.expect("a conditional network needs labels c");
            let y = ops::normalize_2nd_moment(&embed.forward(&c.to_kind(Kind::Float)));
            x = Some(match x {
                Some(x) => Tensor::cat(&[x, y], 1),
                None => y,
            });
        }
        let mut x = x.expect("z_dim + c_dim > 0");
        for fc in &self.fcs {
            x = fc.forward(&x);
        }
        let x = x.unsqueeze(1).repeat([1, self.num_ws, 1]);
        self.truncate(&x, psi, cutoff)
    }

    /// Truncation trick on ws [N, num_ws, w_dim]: `w_avg.lerp(ws, psi)` on all ws or the first
    /// `cutoff`.
    pub fn truncate(&self, ws: &Tensor, psi: f64, cutoff: Option<i64>) -> Tensor {
        if psi == 1.0 {
            return ws.shallow_clone();
        }
        let n = ws.size()[1];
        match cutoff {
            Some(k) if k < n => {
                let k = k.max(0);
                let head = self.w_avg.lerp(&ws.narrow(1, 0, k), psi);
                Tensor::cat(&[head, ws.narrow(1, k, n - k)], 1)
            }
            _ => self.w_avg.lerp(ws, psi),
        }
    }
}

/// Per-layer noise, as upstream's `noise_mode` (plus explicit buffers for the projector).
#[derive(Debug, Clone, Copy, Default)]
pub enum Noise<'a> {
    /// Fresh N(0,1) noise per sample and call (torch's global generator).
    Random,
    /// The stored `noise_const` buffers (upstream's projector and generate.py default).
    #[default]
    Const,
    /// No noise.
    None,
    /// Replacement `noise_const` buffers, one per noise layer in [`Synthesis::noise_layers`]
    /// order, each broadcastable to [N, 1, res, res]; scaled by `noise_strength` like `Const`.
    Given(&'a [Tensor]),
}

/// Which sequence of tensor operations computes the synthesis layers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ops {
    /// Upstream's reference ops, op for op (bit-identical to upstream on CPU).
    #[default]
    Reference,
    /// The same maths reformulated for speed ([`crate::fast`]): phase convolutions instead of
    /// transposed convolution + FIR, a fused epilogue kernel on CUDA. Differs by rounding;
    /// `fused_modconv` is ignored (the layers run unfused). The choices fix or free each timed
    /// kernel choice; the decisions are the synthesis network's own ([`Synthesis::fast_state`]).
    Fast(crate::tune::KernelChoices),
}

/// Options of a synthesis call.
#[derive(Debug, Clone, Copy, Default)]
pub struct SynthesisOptions<'a> {
    pub noise: Noise<'a>,
    /// `fused_modconv`; `None`: upstream's eval default (fused when fp32 or batch 1).
    pub fused_modconv: Option<bool>,
    /// Run the fp16 blocks in fp32 too. fp16 blocks only ever run on CUDA.
    pub force_fp32: bool,
    pub ops: Ops,
}

/// `SynthesisLayer`: modulated 3×3 convolution (optionally 2× up), noise, bias, lrelu, clamp.
#[derive(Debug)]
pub struct SynthesisLayer {
    pub affine: FullyConnected,
    pub weight: Tensor,
    pub noise_const: Tensor,
    pub noise_strength: Tensor,
    pub bias: Tensor,
    pub resample_filter: Tensor,
    up: i64,
    resolution: i64,
    conv_clamp: Option<f64>,
    /// [`fast::phase_weight`] of `weight` (f32), made on first use by an up-sampling layer.
    phase: OnceCell<Tensor>,
}

impl SynthesisLayer {
    fn load(
        w: &mut Weights,
        prefix: &str,
        (in_ch, out_ch): (i64, i64),
        cfg: &Config,
        resolution: i64,
        up: i64,
    ) -> Result<Self> {
        Ok(SynthesisLayer {
            affine: FullyConnected::affine(w, prefix, cfg, in_ch)?,
            weight: w.take(&format!("{prefix}.weight"), &[out_ch, in_ch, 3, 3])?,
            noise_const: w.take(&format!("{prefix}.noise_const"), &[resolution, resolution])?,
            noise_strength: w.take(&format!("{prefix}.noise_strength"), &[])?,
            bias: w.take(&format!("{prefix}.bias"), &[out_ch])?,
            resample_filter: w.take(&format!("{prefix}.resample_filter"), &[4, 4])?,
            up,
            resolution,
            conv_clamp: cfg.conv_clamp,
            phase: OnceCell::new(),
        })
    }

    /// [`Ops::Fast`]: the same layer through [`fast`]'s formulations.
    ///
    /// Kept in one piece: it mirrors [`SynthesisLayer::forward`] (upstream's layer) step for step,
    /// so the two read side by side.
    fn forward_fast(
        &self,
        x: &Tensor,
        w: &Tensor,
        noise: Noise<'_>,
        idx: usize,
        gain: f64,
        fast: fast::Fast<'_>,
    ) -> Tensor {
        let kind = x.kind();
        let batch = x.size()[0];
        let styles = self.affine.forward(w);
        let (weight, styles, out_scale) = if kind == Kind::Half {
            let (w, s, scale) = ops::fp16_prenormalize(&self.weight, &styles);
            (w, s, Some(scale))
        } else {
            (self.weight.shallow_clone(), styles, None)
        };
        let d = fast::dcoefs(&weight, &styles);
        let x = x * styles.to_kind(kind).reshape([batch, -1, 1, 1]);
        let x = if self.up == 2 {
            let by_phase = |x: &Tensor| {
                let phase = self
                    .phase
                    .get_or_init(|| fast::phase_weight(&self.weight, &self.resample_filter));
                let phase = match &out_scale {
                    // Row o·4 + k of the phase weights belongs to output channel o.
                    Some(s) => {
                        phase
                            * s.reshape([-1, 1])
                                .expand([-1, 4], false)
                                .reshape([-1, 1, 1, 1])
                    }
                    None => phase.shallow_clone(),
                };
                fast::conv_up(x, &phase.to_kind(kind))
            };
            let by_tconv =
                |x: &Tensor| fast::conv_up_tconv(x, &weight.to_kind(kind), &self.resample_filter);
            match fast::upconv_for(fast, &x, self.weight.size()[0], &by_phase, &by_tconv) {
                fast::UpConv::Phase => by_phase(&x),
                fast::UpConv::Tconv => by_tconv(&x),
            }
        } else {
            x.conv2d(
                &weight.to_kind(kind),
                None::<Tensor>,
                [1, 1],
                [1, 1],
                [1, 1],
                1,
            )
        };
        let noise = self.raw_noise(noise, batch, x.device(), idx);
        let clamp = self.conv_clamp.map(|c| c * gain);
        fast::epilogue(
            fast,
            &x,
            &d,
            noise.as_ref(),
            &self.noise_strength,
            &self.bias,
            gain,
            clamp,
        )
    }

    /// This layer's noise before `noise_strength` is applied: [N,1,r,r] fresh, or the buffer.
    fn raw_noise(
        &self,
        noise: Noise<'_>,
        batch: i64,
        device: Device,
        idx: usize,
    ) -> Option<Tensor> {
        match noise {
            Noise::Random => Some(Tensor::randn(
                [batch, 1, self.resolution, self.resolution],
                (Kind::Float, device),
            )),
            Noise::Const => Some(self.noise_const.shallow_clone()),
            Noise::None => None,
            Noise::Given(bufs) => Some(bufs[idx].shallow_clone()),
        }
    }

    fn forward(
        &self,
        x: &Tensor,
        w: &Tensor,
        noise: Noise<'_>,
        idx: usize,
        fused: bool,
        gain: f64,
    ) -> Tensor {
        let styles = self.affine.forward(w);
        let noise = self
            .raw_noise(noise, x.size()[0], x.device(), idx)
            .map(|n| n * &self.noise_strength);
        let x = ops::modulated_conv2d(
            x,
            &self.weight,
            &styles,
            noise.as_ref(),
            ModConv {
                up: self.up,
                padding: 1,
                resample_filter: Some(&self.resample_filter),
                demodulate: true,
                flip_weight: self.up == 1,
                fused,
            },
        );
        let clamp = self.conv_clamp.map(|c| c * gain);
        ops::bias_act(&x, Some(&self.bias), Act::Lrelu, SQRT_2 * gain, clamp)
    }
}

/// `ToRGBLayer`: modulated 1×1 convolution without demodulation, bias, clamp.
#[derive(Debug)]
pub struct ToRgb {
    pub affine: FullyConnected,
    pub weight: Tensor,
    pub bias: Tensor,
    weight_gain: f64,
    conv_clamp: Option<f64>,
}

impl ToRgb {
    fn load(w: &mut Weights, prefix: &str, in_ch: i64, cfg: &Config) -> Result<Self> {
        Ok(ToRgb {
            affine: FullyConnected::affine(w, prefix, cfg, in_ch)?,
            weight: w.take(
                &format!("{prefix}.weight"),
                &[cfg.img_channels, in_ch, 1, 1],
            )?,
            bias: w.take(&format!("{prefix}.bias"), &[cfg.img_channels])?,
            weight_gain: 1.0 / (in_ch as f64).sqrt(),
            conv_clamp: cfg.conv_clamp,
        })
    }

    fn forward(&self, x: &Tensor, w: &Tensor, fused: bool, ops: Ops) -> Tensor {
        let styles = self.affine.forward(w) * self.weight_gain;
        if matches!(ops, Ops::Fast(_)) {
            let x = fast::torgb(x, &self.weight, &styles);
            return ops::bias_act(&x, Some(&self.bias), Act::Linear, 1.0, self.conv_clamp);
        }
        let args = ModConv {
            up: 1,
            padding: 0,
            resample_filter: None,
            demodulate: false,
            flip_weight: true,
            fused,
        };
        let x = ops::modulated_conv2d(x, &self.weight, &styles, None, args);
        ops::bias_act(&x, Some(&self.bias), Act::Linear, 1.0, self.conv_clamp)
    }
}

/// The `resnet` architecture's skip path: `Conv2dLayer(in, out, kernel_size=1, bias=False, up=2)`.
#[derive(Debug)]
pub struct SkipConv {
    pub weight: Tensor,
    pub resample_filter: Tensor,
    weight_gain: f64,
}

impl SkipConv {
    fn forward(&self, x: &Tensor, gain: f64) -> Tensor {
        let w = (&self.weight * self.weight_gain).to_kind(x.kind());
        let x = ops::conv2d_resample(x, &w, Some(&self.resample_filter), 2, 0, 1, false);
        ops::bias_act(&x, None, Act::Linear, gain, None)
    }
}

/// `SynthesisBlock` at one resolution.
#[derive(Debug)]
pub struct Block {
    pub resolution: i64,
    pub const_input: Option<Tensor>,
    pub conv0: Option<SynthesisLayer>,
    pub conv1: SynthesisLayer,
    pub torgb: Option<ToRgb>,
    pub skip: Option<SkipConv>,
    pub resample_filter: Tensor,
    architecture: Architecture,
    use_fp16: bool,
    /// [`fast::upsample_weight`] of `resample_filter`, made on first use.
    upsample: OnceCell<Tensor>,
}

impl Block {
    fn load(w: &mut Weights, cfg: &Config, res: i64) -> Result<Self> {
        let p = format!("synthesis.b{res}");
        let in_ch = if res > 4 { cfg.channels(res / 2) } else { 0 };
        let out_ch = cfg.channels(res);
        let is_last = res == cfg.img_resolution;
        let arch = cfg.architecture;
        let resample_filter = w.take(&format!("{p}.resample_filter"), &[4, 4])?;
        let const_input = if in_ch == 0 {
            Some(w.take(&format!("{p}.const"), &[out_ch, res, res])?)
        } else {
            None
        };
        let conv0 = if in_ch != 0 {
            Some(SynthesisLayer::load(
                w,
                &format!("{p}.conv0"),
                (in_ch, out_ch),
                cfg,
                res,
                2,
            )?)
        } else {
            None
        };
        let conv1 = SynthesisLayer::load(w, &format!("{p}.conv1"), (out_ch, out_ch), cfg, res, 1)?;
        let torgb = if is_last || arch == Architecture::Skip {
            Some(ToRgb::load(w, &format!("{p}.torgb"), out_ch, cfg)?)
        } else {
            None
        };
        let skip = if in_ch != 0 && arch == Architecture::Resnet {
            Some(SkipConv {
                weight: w.take(&format!("{p}.skip.weight"), &[out_ch, in_ch, 1, 1])?,
                resample_filter: w.take(&format!("{p}.skip.resample_filter"), &[4, 4])?,
                weight_gain: 1.0 / (in_ch as f64).sqrt(),
            })
        } else {
            None
        };
        Ok(Block {
            resolution: res,
            const_input,
            conv0,
            conv1,
            torgb,
            skip,
            resample_filter,
            architecture: arch,
            use_fp16: res >= cfg.fp16_resolution(),
            upsample: OnceCell::new(),
        })
    }

    /// w vectors this block reads: its convolutions plus its ToRGB.
    fn num_ws(&self) -> i64 {
        self.num_conv() + self.torgb.is_some() as i64
    }

    fn num_conv(&self) -> i64 {
        1 + self.conv0.is_some() as i64
    }

    /// Noise layers of this block, in order.
    fn layers(&self) -> impl Iterator<Item = &SynthesisLayer> {
        self.conv0.iter().chain(std::iter::once(&self.conv1))
    }

    // Kept in one piece: upstream's SynthesisBlock.forward, op for op (parity with it is the
    // point).
    fn forward(
        &self,
        x: Option<Tensor>,
        img: Option<Tensor>,
        ws: &Tensor,
        opts: &SynthesisOptions<'_>,
        noise_idx: usize,
        state: &fast::FastState,
    ) -> (Tensor, Option<Tensor>) {
        let ws = ws.unbind(1);
        let mut w_iter = ws.iter();
        let cuda = ws[0].device() != Device::Cpu;
        let dtype = if self.use_fp16 && cuda && !opts.force_fp32 {
            Kind::Half
        } else {
            Kind::Float
        };
        let n = ws[0].size()[0];
        let fused = opts.fused_modconv.unwrap_or(dtype == Kind::Float || n == 1);
        let x = match (&self.const_input, x) {
            (Some(c), _) => c.to_kind(dtype).unsqueeze(0).repeat([n, 1, 1, 1]),
            (None, Some(x)) => x.to_kind(dtype),
            (None, None) => unreachable!("blocks after the first get x"),
        };
        let noise = opts.noise;
        let layer =
            |l: &SynthesisLayer, x: &Tensor, w: &Tensor, idx: usize, gain: f64| match opts.ops {
                Ops::Reference => l.forward(x, w, noise, idx, fused, gain),
                Ops::Fast(choices) => {
                    l.forward_fast(x, w, noise, idx, gain, fast::Fast { choices, state })
                }
            };
        let x = match (&self.conv0, &self.skip) {
            (None, _) => layer(&self.conv1, &x, w_iter.next().unwrap(), noise_idx, 1.0),
            (Some(conv0), Some(skip)) => {
                let g = 0.5f64.sqrt();
                let mut y = skip.forward(&x, g);
                let x = layer(conv0, &x, w_iter.next().unwrap(), noise_idx, 1.0);
                let x = layer(&self.conv1, &x, w_iter.next().unwrap(), noise_idx + 1, g);
                y += &x;
                y
            }
            (Some(conv0), None) => {
                let x = layer(conv0, &x, w_iter.next().unwrap(), noise_idx, 1.0);
                layer(&self.conv1, &x, w_iter.next().unwrap(), noise_idx + 1, 1.0)
            }
        };
        let mut img = img.map(|img| match opts.ops {
            Ops::Reference => ops::upsample2d(&img, &self.resample_filter),
            Ops::Fast(_) => fast::upsample2d_with(
                &img,
                self.upsample
                    .get_or_init(|| fast::upsample_weight(&self.resample_filter)),
            ),
        });
        if let Some(torgb) = &self.torgb {
            let y = torgb
                .forward(&x, w_iter.next().unwrap(), fused, opts.ops)
                .to_kind(Kind::Float);
            img = Some(match img {
                Some(mut img) => {
                    img += &y;
                    img
                }
                None => y,
            });
        }
        debug_assert!(self.architecture != Architecture::Skip || img.is_some());
        (x, img)
    }
}

/// `SynthesisNetwork`: ws [N, num_ws, w_dim] → images [N, img_channels, R, R] (fp32, about
/// [-1, 1]).
#[derive(Debug)]
pub struct Synthesis {
    pub blocks: Vec<Block>,
    num_ws: i64,
    w_dim: i64,
    fast: fast::FastState,
}

impl Synthesis {
    fn load(w: &mut Weights, cfg: &Config) -> Result<Self> {
        let blocks = cfg
            .block_resolutions()
            .into_iter()
            .map(|r| Block::load(w, cfg, r))
            .collect::<Result<Vec<_>>>()?;
        Ok(Synthesis {
            blocks,
            num_ws: cfg.num_ws(),
            w_dim: cfg.w_dim,
            fast: Default::default(),
        })
    }

    pub fn num_ws(&self) -> i64 {
        self.num_ws
    }

    /// What [`Ops::Fast`] has decided and compiled for this network so far.
    pub fn fast_state(&self) -> &fast::FastState {
        &self.fast
    }

    /// The noise layers in upstream's buffer order, with their state_dict prefix.
    pub fn noise_layers(&self) -> Vec<(String, &SynthesisLayer)> {
        let mut out = Vec::new();
        for b in &self.blocks {
            for (i, l) in b.layers().enumerate() {
                let conv = if b.conv0.is_some() { i } else { 1 };
                out.push((format!("synthesis.b{}.conv{conv}", b.resolution), l));
            }
        }
        out
    }

    pub fn forward(&self, ws: &Tensor, opts: &SynthesisOptions<'_>) -> Tensor {
        let size = ws.size();
        assert!(
            size.len() == 3 && size[1] == self.num_ws && size[2] == self.w_dim,
            "ws must be [N, {}, {}], got {size:?}",
            self.num_ws,
            self.w_dim
        );
        if let Noise::Given(bufs) = opts.noise {
            let want: usize = self.blocks.iter().map(|b| b.num_conv() as usize).sum();
            assert_eq!(bufs.len(), want, "one noise buffer per noise layer");
        }
        let ws = ws.to_kind(Kind::Float);
        let (mut x, mut img) = (None, None);
        let (mut w_idx, mut noise_idx) = (0, 0);
        for block in &self.blocks {
            let cur = ws.narrow(1, w_idx, block.num_ws());
            let (nx, nimg) = block.forward(x, img, &cur, opts, noise_idx, &self.fast);
            x = Some(nx);
            img = nimg;
            w_idx += block.num_conv();
            noise_idx += block.num_conv() as usize;
        }
        img.expect("the last block has a ToRGB")
    }
}

/// The generator: mapping + synthesis, as upstream's `Generator` (G_ema).
#[derive(Debug)]
pub struct Generator {
    pub config: Config,
    pub mapping: Mapping,
    pub synthesis: Synthesis,
    device: Device,
}

impl Generator {
    /// Builds the modules from named tensors; every tensor the config implies must be there with
    /// the right shape, and nothing else.
    pub fn from_weights(config: Config, mut weights: Weights, device: Device) -> Result<Self> {
        config.validate()?;
        let synthesis = Synthesis::load(&mut weights, &config)?;
        let mapping = Mapping::load(&mut weights, &config)?;
        weights.finish()?;
        Ok(Generator {
            config,
            mapping,
            synthesis,
            device,
        })
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn num_ws(&self) -> i64 {
        self.synthesis.num_ws
    }

    /// z → images, as upstream `G(z, c, truncation_psi, truncation_cutoff, noise_mode=...)`.
    pub fn forward(
        &self,
        z: &Tensor,
        c: Option<&Tensor>,
        psi: f64,
        cutoff: Option<i64>,
        opts: &SynthesisOptions<'_>,
    ) -> Tensor {
        let ws = self.mapping.forward(z, c, psi, cutoff);
        self.synthesis.forward(&ws, opts)
    }
}
