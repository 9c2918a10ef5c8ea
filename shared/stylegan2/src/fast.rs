//! Faster formulations of the synthesis layers: the same maths as [`crate::ops`] (upstream's
//! reference ops), different rounding. What the projector's hot loop runs (`Ops::Fast`); the
//! reference sequence stays for parity with upstream (`Ops::Reference`).
//!
//! Measured on an H100 (scripts/bench/project_variants.py, projection step at 1024², batch 16),
//! the reference sequence spends most of its time outside the convolutions: the FIR filter's
//! depthwise convolution (forward and backward) and a dozen element-wise passes per layer over
//! full-resolution maps. Here:
//! - The 2× up-sampling convolution (transposed 3×3 convolution, then the 4×4 FIR) becomes one
//!   3×3 convolution of the low-resolution input with 4·out channels (the FIR folded into the
//!   weights, one set per output phase) and a pixel shuffle: no depthwise pass, no padding copy;
//!   or upstream's transposed convolution with the FIR as a 1-channel convolution (a quarter of
//!   the multiply-adds, plus a cheap pass). On CUDA each input shape times both once and keeps
//!   the faster ([`upconv_for`]); the CPU takes the phase convolution.
//! - The image's FIR up-sampling likewise: a 3×3 convolution per phase, no zero insertion.
//! - `addcmul(noise, x, dcoefs)` + `bias_act` (add, lrelu, ×√2·gain, clamp) become one fused
//!   CUDA kernel each way ([`crate::epilogue`]); elsewhere (CPU, or when the
//!   kernel cannot be built) four ops with the gain folded in (leaky ReLU is positively
//!   homogeneous).
//! - Demodulation coefficients from `styles² @ Σ_k weight²ᵀ` instead of materialising the
//!   per-sample weights [B,O,I,k,k].
//! - ToRGB (1×1, no demodulation) as one batched matrix product with per-sample weights.
#![allow(clippy::assign_op_pattern)]

use std::sync::Mutex;

use tch::{Device, Kind, Tensor};

use crate::tune::{self, KernelChoices, Tuner};

/// What [`Ops::Fast`](crate::Ops) keeps between calls, one per generator: the up-sampling
/// convolutions' timed decisions, and whether the fused epilogue compiled on each CUDA device
/// (the reason it cannot is logged once as a warning).
#[derive(Debug, Default)]
pub struct FastState {
    tuner: Tuner,
    epilogue: Mutex<Vec<(usize, bool)>>,
}

impl FastState {
    /// The decisions timed so far (benchmarks print them).
    pub fn decisions(&self) -> Vec<tune::Decision> {
        self.tuner.decisions()
    }

    /// Whether the fused CUDA epilogue can run on `device` (compiled once per device).
    fn epilogue_runs(&self, device: Device) -> bool {
        let Device::Cuda(i) = device else {
            return false;
        };
        let mut known = self.epilogue.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(_, ok)) = known.iter().find(|(d, _)| *d == i) {
            return ok;
        }
        let ok = match crate::epilogue::modconv_epilogue_ready(i) {
            Ok(()) => true,
            Err(e) => {
                log::warn!("fused CUDA epilogue unavailable on cuda:{i} ({e}); using separate ops");
                false
            }
        };
        known.push((i, ok));
        ok
    }
}

/// The fast path's settings and state for one synthesis call.
#[derive(Debug, Clone, Copy)]
pub struct Fast<'a> {
    pub choices: KernelChoices,
    pub state: &'a FastState,
}

/// The 4 output phases of `conv2d_resample(x, w, f, up=2, padding=1, flip_weight=false)` for a
/// 3×3 kernel, as one convolution weight [4·O, I, 3, 3] (f32): output channel `o·4 + py·2 + px`
/// is the 3×3 correlation giving output pixel (2i+py, 2j+px) from the input around (i, j).
///
/// Upstream computes `conv_transpose2d(x, wᵀ, stride 2)` then the FIR `4·f` with padding 1:
/// z = (up(x) ⊛ wᵀ ⊛ 4f)[n+2] (⊛ true convolution, up() zero insertion), i.e. a stride-2
/// transposed convolution with the 6×6 kernel K = wᵀ ⊛ 4f; its output phase p reads K at
/// p+4−2a for tap a = 0..2.
pub fn phase_weight(w: &Tensor, f: &Tensor) -> Tensor {
    let (o, i, kh, kw) = w.size4().expect("weight is OIkk");
    assert!(
        kh == 3 && kw == 3 && f.size() == [4, 4],
        "phase weights are for 3x3 kernels and 4x4 filters"
    );
    let wt = w
        .to_kind(Kind::Float)
        .transpose(0, 1)
        .reshape([i * o, 1, 3, 3]);
    // Correlation with the flipped filter = convolution; padding 3 gives the full 6×6 result.
    let f4 = (f.to_kind(Kind::Float) * 4.0)
        .flip([0, 1])
        .reshape([1, 1, 4, 4]);
    let k = wt
        .conv2d(&f4, None::<Tensor>, [1, 1], [3, 3], [1, 1], 1)
        .reshape([i, o, 6, 6])
        .flip([2, 3]);
    // After the flip, index p+4−2a of K is index 1−p+2a: a stride-2 slice from 1−p.
    let phases: Vec<Tensor> = [(0, 0), (0, 1), (1, 0), (1, 1)]
        .iter()
        .map(|&(py, px)| k.slice(2, 1 - py, 6, 2).slice(3, 1 - px, 6, 2))
        .collect();
    Tensor::stack(&phases, 0)
        .permute([2, 0, 1, 3, 4])
        .reshape([4 * o, i, 3, 3])
}

/// The up-sampling modulated convolution's convolution: x [B,I,h,w] with phase weights
/// ([`phase_weight`], in x's dtype) → [B,O,2h,2w].
pub fn conv_up(x: &Tensor, phase_weight: &Tensor) -> Tensor {
    x.conv2d(phase_weight, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1)
        .pixel_shuffle(2)
}

/// The up-sampling modulated convolution's convolution as upstream computes it —
/// `conv_transpose2d(x, wᵀ, stride 2)` (a quarter of the phase convolution's multiply-adds)
/// then the 4×4 FIR ×4 with padding 1 — but the FIR as a single-channel convolution of the
/// [B·O, 1, ...] view with the convolution's own zero padding, instead of upstream's pad copy
/// and depthwise convolution. x [B,I,h,w], `weight` [O,I,3,3] in x's dtype → [B,O,2h,2w].
/// [`Ops::Fast`](crate::Ops) runs it where [`upconv_for`] finds it faster than [`conv_up`].
pub fn conv_up_tconv(x: &Tensor, weight: &Tensor, f: &Tensor) -> Tensor {
    let (b, _, h, w) = x.size4().expect("conv_up_tconv takes NCHW");
    let o = weight.size()[0];
    // conv2d_resample's up-sampling branch with flip_weight = false: the transposed weight
    // [I,O,3,3] unflipped, output [B,O,2h+1,2w+1].
    let t = x.conv_transpose2d(
        &weight.transpose(0, 1),
        None::<Tensor>,
        [2, 2],
        [0, 0],
        [0, 0],
        1,
        [1, 1],
    );
    let fir = (f.to_kind(x.kind()) * 4.0)
        .flip([0, 1])
        .reshape([1, 1, 4, 4]);
    t.reshape([b * o, 1, 2 * h + 1, 2 * w + 1])
        .conv2d(&fir, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1)
        .reshape([b, o, 2 * h, 2 * w])
}

/// The two ways [`Ops::Fast`](crate::Ops) computes the 2× up-sampling convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpConv {
    /// [`conv_up`]: one 3×3 convolution with 4·O phase weights (4x the transposed
    /// convolution's multiply-adds, no FIR pass).
    Phase,
    /// [`conv_up_tconv`]: the transposed convolution, then the FIR as a 1-channel convolution.
    Tconv,
}

/// Which up-sampling convolution to run for input `x` ([B,I,h,w]) and `out_channels`;
/// `phase` and `tconv` compute it each way. `--kernel-choices upconv=phase|tconv|auto`
/// ([`tune::KernelChoices`]); by default CUDA times both once per shape and keeps the faster
/// ([`tune`]), the CPU takes the phase convolution.
pub fn upconv_for(
    fast: Fast<'_>,
    x: &Tensor,
    out_channels: i64,
    phase: &dyn Fn(&Tensor) -> Tensor,
    tconv: &dyn Fn(&Tensor) -> Tensor,
) -> UpConv {
    let candidates: [tune::Candidate<'_>; 2] = [("phase", phase), ("tconv", tconv)];
    let fixed = tune::mode(fast.choices.upconv, &tune::UPCONVS, x.device());
    match fast.state.tuner.choose(
        &format!("up-sampling conv to {out_channels} channels"),
        fixed,
        x,
        &candidates,
    ) {
        0 => UpConv::Phase,
        _ => UpConv::Tconv,
    }
}

/// `upfirdn2d.upsample2d(x, f, up=2)` by phases: output pixel (2i+p, 2j+s) is a 3×3
/// correlation of the input around (i, j) with taps of `4·f` (per axis: phase 0 reads f[3],
/// f[1] at offsets −1, 0; phase 1 reads f[2], f[0] at offsets 0, +1).
pub fn upsample2d(x: &Tensor, f: &Tensor) -> Tensor {
    upsample2d_with(x, &upsample_weight(f))
}

/// The phase weights [4,1,3,3] (f32) of [`upsample2d`] for filter `f` (made once per block:
/// building them copies indices to the device, which a CUDA graph capture refuses).
pub fn upsample_weight(f: &Tensor) -> Tensor {
    let f4 = (f.to_kind(Kind::Float) * 4.0).constant_pad_nd([0, 1, 0, 1]); // [5,5], index 4 is 0
    let dev = f.device();
    let idx = |p: i64| {
        Tensor::from_slice(if p == 0 { &[3i64, 1, 4] } else { &[4i64, 2, 0] }).to_device(dev)
    };
    let phases: Vec<Tensor> = [(0, 0), (0, 1), (1, 0), (1, 1)]
        .iter()
        .map(|&(py, px)| f4.index_select(0, &idx(py)).index_select(1, &idx(px)))
        .collect();
    Tensor::stack(&phases, 0).reshape([4, 1, 3, 3])
}

/// [`upsample2d`] with weights from [`upsample_weight`].
pub fn upsample2d_with(x: &Tensor, weight: &Tensor) -> Tensor {
    let (b, c, h, w) = x.size4().expect("upsample2d takes NCHW");
    x.reshape([b * c, 1, h, w])
        .conv2d(
            &weight.to_kind(x.kind()),
            None::<Tensor>,
            [1, 1],
            [1, 1],
            [1, 1],
            1,
        )
        .reshape([b, c * 4, h, w])
        .pixel_shuffle(2)
}

/// Demodulation coefficients [B,O] (f32): `rsqrt(Σ_{i,k} (w[o,i,k]·s[b,i])² + 1e-8)` as
/// `s² @ (Σ_k w²)ᵀ`.
pub fn dcoefs(weight: &Tensor, styles: &Tensor) -> Tensor {
    let wsq =
        weight
            .to_kind(Kind::Float)
            .square()
            .sum_dim_intlist(&[2i64, 3][..], false, Kind::Float); // [O,I]
    (styles.to_kind(Kind::Float).square().matmul(&wsq.tr()) + 1e-8).rsqrt()
}

/// `addcmul(noise·strength, x, dcoefs)` then `bias_act(lrelu, √2·gain, clamp)`: x [B,O,H,W]
/// the convolution output, `d` [B,O] f32, `noise` the raw noise (strength not applied), f32,
/// broadcastable to [B,1,H,W].
#[allow(clippy::too_many_arguments)] // upstream's two calls' arguments, and the fast path's state
pub fn epilogue(
    fast: Fast<'_>,
    x: &Tensor,
    d: &Tensor,
    noise: Option<&Tensor>,
    strength: &Tensor,
    bias: &Tensor,
    gain: f64,
    clamp: Option<f64>,
) -> Tensor {
    let (b, o, h, w) = x.size4().expect("epilogue takes NCHW");
    let g = std::f64::consts::SQRT_2 * gain;
    let fusable = |n: &Tensor| {
        n.kind() == Kind::Float
            && n.is_contiguous()
            && (n.numel() as i64 == b * h * w || n.numel() as i64 == h * w)
    };
    if fast.choices.fused_epilogue
        && fast.state.epilogue_runs(x.device())
        && !strength.requires_grad()
        && !bias.requires_grad()
        && d.kind() == Kind::Float
        && noise.is_none_or(fusable)
    {
        let d = d.contiguous();
        match crate::epilogue::modconv_epilogue(
            x,
            &d,
            noise,
            strength,
            bias,
            g,
            clamp.unwrap_or(f64::INFINITY),
        ) {
            Ok(y) => return y,
            Err(e) => panic!("fused epilogue on {:?} ({b}x{o}x{h}x{w}): {e}", x.device()),
        }
    }
    let kind = x.kind();
    let dd = (d * g).to_kind(kind).reshape([b, o, 1, 1]);
    let y = match noise {
        Some(n) => (n * strength * g).to_kind(kind).addcmul(x, &dd),
        None => x * dd,
    };
    let y = y + (bias * g).to_kind(kind).reshape([1, o, 1, 1]);
    let y = gpu_runtime::shim::leaky_relu(&y, 0.2).expect("leaky_relu");
    match clamp {
        Some(c) if c >= 0.0 => y.clamp(-c, c),
        _ => y,
    }
}

/// ToRGB's modulated 1×1 convolution without demodulation: x [B,C,H,W], weight [K,C,1,1],
/// styles [B,C] → [B,K,H,W], one batched matrix product with per-sample weights.
pub fn torgb(x: &Tensor, weight: &Tensor, styles: &Tensor) -> Tensor {
    let (b, c, h, w) = x.size4().expect("torgb takes NCHW");
    let k = weight.size()[0];
    let wb = (weight.reshape([1, k, c]) * styles.reshape([b, 1, c])).to_kind(x.kind());
    wb.bmm(&x.reshape([b, c, h * w])).reshape([b, k, h, w])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops;

    fn rel(a: &Tensor, b: &Tensor) -> f64 {
        (a - b).abs().max().double_value(&[]) / b.abs().max().double_value(&[])
    }

    #[test]
    fn both_up_sampling_convolutions_equal_upstreams() {
        tch::manual_seed(3);
        let o = (Kind::Float, Device::Cpu);
        // A non-symmetric filter checks the index bookkeeping too. Phase weights sum 4 FIR taps
        // into each weight first (1e-5); the transposed conv keeps upstream's order (1e-6).
        for f in [ops::default_resample_filter(), Tensor::rand([4, 4], o)] {
            let x = Tensor::randn([2, 5, 6, 7], o);
            let w = Tensor::randn([4, 5, 3, 3], o);
            let want = ops::conv2d_resample(&x, &w, Some(&f), 2, 1, 1, false);
            for (name, got, tol) in [
                ("phase", conv_up(&x, &phase_weight(&w, &f)), 1e-5),
                ("tconv", conv_up_tconv(&x, &w, &f), 1e-6),
            ] {
                assert_eq!(got.size(), want.size(), "{name}");
                assert!(rel(&got, &want) < tol, "{name}: {}", rel(&got, &want));
            }
        }
    }

    #[test]
    fn phase_upsampling_equals_zero_insertion_then_fir() {
        tch::manual_seed(4);
        let o = (Kind::Float, Device::Cpu);
        for f in [ops::default_resample_filter(), Tensor::rand([4, 4], o)] {
            let x = Tensor::randn([2, 3, 5, 6], o);
            let (got, want) = (upsample2d(&x, &f), ops::upsample2d(&x, &f));
            assert_eq!(got.size(), want.size());
            assert!(rel(&got, &want) < 1e-6, "{}", rel(&got, &want));
        }
    }

    #[test]
    fn dcoefs_equal_the_materialised_weights() {
        tch::manual_seed(5);
        let o = (Kind::Float, Device::Cpu);
        let (w, s) = (Tensor::randn([6, 4, 3, 3], o), Tensor::randn([3, 4], o));
        let want = ((w.unsqueeze(0) * s.reshape([3, 1, 4, 1, 1]))
            .square()
            .sum_dim_intlist(&[2i64, 3, 4][..], false, None)
            + 1e-8)
            .rsqrt();
        assert!(rel(&dcoefs(&w, &s), &want) < 1e-6);
    }

    #[test]
    fn epilogue_equals_addcmul_then_bias_act() {
        tch::manual_seed(6);
        let o = (Kind::Float, Device::Cpu);
        let x = Tensor::randn([2, 3, 4, 4], o) * 100.0;
        let d = Tensor::rand([2, 3], o);
        let n = Tensor::randn([2, 1, 4, 4], o);
        let (s, b) = (Tensor::from(0.7f32), Tensor::randn([3], o));
        for (gain, clamp) in [(1.0, Some(64.0)), (0.5f64.sqrt(), Some(30.0)), (1.0, None)] {
            let want = ops::bias_act(
                &(&n * &s).addcmul(&x, &d.reshape([2, 3, 1, 1])),
                Some(&b),
                ops::Act::Lrelu,
                std::f64::consts::SQRT_2 * gain,
                clamp.map(|c| c * gain),
            );
            let fast = Fast {
                choices: KernelChoices::default(),
                state: &FastState::default(),
            };
            let got = epilogue(
                fast,
                &x,
                &d,
                Some(&n),
                &s,
                &b,
                gain,
                clamp.map(|c| c * gain),
            );
            assert!(rel(&got, &want) < 1e-6, "{}", rel(&got, &want));
        }
    }

    #[test]
    fn torgb_equals_scaled_input_then_1x1_convolution() {
        tch::manual_seed(7);
        let o = (Kind::Float, Device::Cpu);
        let (x, w, s) = (
            Tensor::randn([2, 5, 4, 3], o),
            Tensor::randn([3, 5, 1, 1], o),
            Tensor::randn([2, 5], o),
        );
        let want =
            (&x * s.reshape([2, 5, 1, 1])).conv2d(&w, None::<Tensor>, [1, 1], [0, 0], [1, 1], 1);
        assert!(rel(&torgb(&x, &w, &s), &want) < 1e-6);
    }
}
