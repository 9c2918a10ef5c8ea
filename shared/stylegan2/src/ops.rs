//! The reference ops of StyleGAN2-ADA's `torch_utils/ops` (`bias_act`, `upfirdn2d`,
//! `conv2d_resample`) and `modulated_conv2d` from `training/networks.py`, written with the same
//! sequence of tensor operations as upstream's `_ref` implementations, so that results agree to
//! float rounding. Only the cases the generator uses are implemented (no down-sampling).
//!
//! `x = x * g` is not `x *= g` for tch tensors: the latter is in place, and `to_kind`/
//! `shallow_clone` results share storage with the weights and inputs they came from.
#![allow(clippy::assign_op_pattern)]

use tch::{Kind, Tensor};

/// Activation of `bias_act`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Linear,
    /// Leaky ReLU with slope 0.2.
    Lrelu,
}

impl Act {
    /// Upstream's `def_gain`: 1 for linear, √2 for lrelu.
    pub fn def_gain(self) -> f64 {
        match self {
            Act::Linear => 1.0,
            Act::Lrelu => std::f64::consts::SQRT_2,
        }
    }
}

/// `bias_act._bias_act_ref` along dim 1: add the bias, activate, scale by `gain`, clamp to
/// `±clamp`.
pub fn bias_act(x: &Tensor, b: Option<&Tensor>, act: Act, gain: f64, clamp: Option<f64>) -> Tensor {
    let mut x = match b {
        Some(b) => {
            let mut shape = vec![1i64; x.dim()];
            shape[1] = -1;
            x + b.to_kind(x.kind()).reshape(shape)
        }
        None => x.shallow_clone(),
    };
    if act == Act::Lrelu {
        // torch.nn.functional.leaky_relu(x, 0.2): x where x > 0, else x * 0.2 (tch's
        // leaky_relu has no slope argument).
        x = x.where_self(&x.gt(0.0), &(&x * 0.2));
    }
    if gain != 1.0 {
        x = x * gain;
    }
    match clamp {
        Some(c) if c >= 0.0 => x.clamp(-c, c),
        _ => x,
    }
}

/// `normalize_2nd_moment`: x / sqrt(mean(x², dim 1) + 1e-8).
pub fn normalize_2nd_moment(x: &Tensor) -> Tensor {
    x * (x.square().mean_dim(1, true, None) + 1e-8).rsqrt()
}

/// Upstream's default `resample_filter`: the normalised [1,3,3,1] outer product, [4,4] f32.
pub fn default_resample_filter() -> Tensor {
    let f = Tensor::from_slice(&[1f32, 3., 3., 1.]);
    let f = f.outer(&f);
    &f / f.sum(Kind::Float)
}

/// Upstream's fp16 pre-normalisation in `modulated_conv2d`: the weight scaled per output
/// channel by `1/√(I·k·k) / max|w[o]|`, the styles per sample by `1/max|s[b]|` (both cancel in
/// the demodulation). Returns the weight, the styles and the weight's scale [O,1,1,1].
pub fn fp16_prenormalize(weight: &Tensor, styles: &Tensor) -> (Tensor, Tensor, Tensor) {
    let (_, in_channels, kh, kw) = weight.size4().expect("weight is OIkk");
    let scale =
        (1.0 / ((in_channels * kh * kw) as f64).sqrt()) / weight.abs().amax([1, 2, 3], true);
    (
        weight * &scale,
        styles / styles.abs().amax([1], true),
        scale,
    )
}

/// Padding `[x0, x1, y0, y1]` as upstream's `_parse_padding` returns it.
pub type Pad = [i64; 4];

/// `upfirdn2d._upfirdn2d_ref` with `down = 1` and a 2-D filter `f` ([fh, fw]): zero-insert
/// up-sampling, padding (negative crops), then a depthwise convolution with the flipped filter
/// scaled by `gain`.
pub fn upfirdn2d(x: &Tensor, f: &Tensor, up: i64, pad: Pad, gain: f64) -> Tensor {
    let (b, c, h, w) = x.size4().expect("upfirdn2d takes NCHW");
    let [px0, px1, py0, py1] = pad;
    let mut x = x.shallow_clone();
    if up > 1 {
        x = x
            .reshape([b, c, h, 1, w, 1])
            .constant_pad_nd([0, up - 1, 0, 0, 0, up - 1])
            .reshape([b, c, h * up, w * up]);
    }
    x = x.constant_pad_nd([px0.max(0), px1.max(0), py0.max(0), py1.max(0)]);
    let (hh, ww) = (x.size()[2], x.size()[3]);
    let (cy0, cy1, cx0, cx1) = ((-py0).max(0), (-py1).max(0), (-px0).max(0), (-px1).max(0));
    if cy0 + cy1 + cx0 + cx1 > 0 {
        x = x
            .narrow(2, cy0, hh - cy0 - cy1)
            .narrow(3, cx0, ww - cx0 - cx1);
    }
    // f * gain ** (f.ndim / 2) with a 2-D filter.
    let mut f = f.to_kind(x.kind());
    if gain != 1.0 {
        f = f * gain;
    }
    let f = f
        .flip([0, 1])
        .unsqueeze(0)
        .unsqueeze(0)
        .repeat([c, 1, 1, 1]);
    x.conv2d(&f, None::<Tensor>, [1, 1], [0, 0], [1, 1], c)
}

/// `upfirdn2d.upsample2d(x, f, up=2)`: 2× up-sampling with the FIR filter.
pub fn upsample2d(x: &Tensor, f: &Tensor) -> Tensor {
    let (fh, fw) = filter_size(Some(f));
    let up = 2;
    let pad = [
        (fw + up - 1) / 2,
        (fw - up) / 2,
        (fh + up - 1) / 2,
        (fh - up) / 2,
    ];
    upfirdn2d(x, f, up, pad, (up * up) as f64)
}

fn filter_size(f: Option<&Tensor>) -> (i64, i64) {
    match f {
        None => (1, 1),
        Some(f) => {
            let s = f.size();
            (s[0], s[1])
        }
    }
}

/// `conv2d_resample._conv2d_wrapper`: `conv2d` performs correlation; `flip_weight = false`
/// flips the kernel to make it a convolution.
fn conv2d_wrapper(
    x: &Tensor,
    w: &Tensor,
    stride: i64,
    padding: [i64; 2],
    groups: i64,
    transpose: bool,
    flip_weight: bool,
) -> Tensor {
    let w = if flip_weight {
        w.shallow_clone()
    } else {
        w.flip([2, 3])
    };
    if transpose {
        x.conv_transpose2d(
            &w,
            None::<Tensor>,
            [stride, stride],
            padding,
            [0, 0],
            groups,
            [1, 1],
        )
    } else {
        x.conv2d(
            &w,
            None::<Tensor>,
            [stride, stride],
            padding,
            [1, 1],
            groups,
        )
    }
}

/// `conv2d_resample.conv2d_resample` for `down = 1`: plain (grouped) convolution, or with
/// `up > 1` the transposed strided convolution followed by the FIR filter (or, for 1×1
/// kernels, the convolution then `upfirdn2d`).
pub fn conv2d_resample(
    x: &Tensor,
    w: &Tensor,
    f: Option<&Tensor>,
    up: i64,
    padding: i64,
    groups: i64,
    flip_weight: bool,
) -> Tensor {
    let (out_channels, in_per_group, kh, kw) = w.size4().expect("weight is OIkk");
    let (fh, fw) = filter_size(f);
    let (mut px0, mut px1, mut py0, mut py1) = (padding, padding, padding, padding);
    if up > 1 {
        px0 += (fw + up - 1) / 2;
        px1 += (fw - up) / 2;
        py0 += (fh + up - 1) / 2;
        py1 += (fh - up) / 2;
    }
    let gain = (up * up) as f64;
    if up > 1 && kw == 1 && kh == 1 {
        let x = conv2d_wrapper(x, w, 1, [0, 0], groups, false, flip_weight);
        return upfirdn2d(
            &x,
            f.expect("up-sampling needs a filter"),
            up,
            [px0, px1, py0, py1],
            gain,
        );
    }
    if up > 1 {
        let w = if groups == 1 {
            w.transpose(0, 1)
        } else {
            w.reshape([groups, out_channels / groups, in_per_group, kh, kw])
                .transpose(1, 2)
                .reshape([groups * in_per_group, out_channels / groups, kh, kw])
        };
        px0 -= kw - 1;
        px1 -= kw - up;
        py0 -= kh - 1;
        py1 -= kh - up;
        let pxt = (-px0).min(-px1).max(0);
        let pyt = (-py0).min(-py1).max(0);
        let x = conv2d_wrapper(x, &w, up, [pyt, pxt], groups, true, !flip_weight);
        let pad = [px0 + pxt, px1 + pxt, py0 + pyt, py1 + pyt];
        return upfirdn2d(&x, f.expect("up-sampling needs a filter"), 1, pad, gain);
    }
    assert!(
        px0 == px1 && py0 == py1 && px0 >= 0,
        "symmetric non-negative padding"
    );
    conv2d_wrapper(x, w, 1, [py0, px0], groups, false, flip_weight)
}

/// Arguments of [`modulated_conv2d`] besides the tensors.
#[derive(Debug, Clone, Copy)]
pub struct ModConv<'a> {
    pub up: i64,
    pub padding: i64,
    pub resample_filter: Option<&'a Tensor>,
    pub demodulate: bool,
    pub flip_weight: bool,
    pub fused: bool,
}

/// `modulated_conv2d` of `training/networks.py`: styles scale the input channels of `weight`
/// per sample, demodulation rescales each output channel to unit norm, and `noise` is added
/// (fused: one grouped convolution with per-sample weights; unfused: scale activations before
/// and after a shared convolution). fp16 activations get upstream's pre-normalisation of
/// weight and styles.
///
/// Kept in one piece: upstream's `modulated_conv2d`, line for line (parity with it is the point).
pub fn modulated_conv2d(
    x: &Tensor,
    weight: &Tensor,
    styles: &Tensor,
    noise: Option<&Tensor>,
    a: ModConv<'_>,
) -> Tensor {
    let batch = x.size()[0];
    let (_out_channels, in_channels, kh, kw) = weight.size4().expect("weight is OIkk");
    let (weight, styles) = if x.kind() == Kind::Half && a.demodulate {
        let (w, s, _) = fp16_prenormalize(weight, styles);
        (w, s)
    } else {
        (weight.shallow_clone(), styles.shallow_clone())
    };
    let mut w = None;
    let mut dcoefs = None;
    if a.demodulate || a.fused {
        w = Some(weight.unsqueeze(0) * styles.reshape([batch, 1, -1, 1, 1]));
    }
    if a.demodulate {
        let ww = w.as_ref().unwrap();
        dcoefs = Some((ww.square().sum_dim_intlist(&[2i64, 3, 4][..], false, None) + 1e-8).rsqrt());
    }
    if a.demodulate && a.fused {
        w = Some(w.unwrap() * dcoefs.as_ref().unwrap().reshape([batch, -1, 1, 1, 1]));
    }

    if !a.fused {
        let kind = x.kind();
        let x = x * styles.to_kind(kind).reshape([batch, -1, 1, 1]);
        let mut x = conv2d_resample(
            &x,
            &weight.to_kind(kind),
            a.resample_filter,
            a.up,
            a.padding,
            1,
            a.flip_weight,
        );
        return match (dcoefs, noise) {
            // fma(x, dcoefs, noise) = torch.addcmul(noise, x, dcoefs).
            (Some(d), Some(n)) => n
                .to_kind(kind)
                .addcmul(&x, &d.to_kind(kind).reshape([batch, -1, 1, 1])),
            (Some(d), None) => x * d.to_kind(kind).reshape([batch, -1, 1, 1]),
            (None, Some(n)) => {
                x += n.to_kind(kind);
                x
            }
            (None, None) => x,
        };
    }

    let size = x.size();
    let x = x.reshape([1, -1, size[2], size[3]]);
    let w = w.unwrap().reshape([-1, in_channels, kh, kw]);
    let x = conv2d_resample(
        &x,
        &w.to_kind(x.kind()),
        a.resample_filter,
        a.up,
        a.padding,
        batch,
        a.flip_weight,
    );
    let s = x.size();
    let mut x = x.reshape([batch, -1, s[2], s[3]]);
    if let Some(n) = noise {
        // In place like upstream's x.add_(noise): computed in the wider type, stored in x's.
        x += n;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter() -> Tensor {
        default_resample_filter()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a - b).abs().max().double_value(&[])
    }

    #[test]
    fn bias_act_matches_definition() {
        let x = Tensor::from_slice(&[-1f32, 2.0, -3.0, 4.0]).reshape([1, 2, 2]);
        let b = Tensor::from_slice(&[0.5f32, -0.5]);
        let y = bias_act(&x, Some(&b), Act::Lrelu, 2.0, Some(3.0));
        // [-0.5, 2.5] -> lrelu [-0.1, 2.5] -> *2 [-0.2, 5] -> clamp [-0.2, 3]
        // [-3.5, 3.5] -> [-0.7, 3.5] -> [-1.4, 7] -> [-1.4, 3]
        let want = Tensor::from_slice(&[-0.2f32, 3.0, -1.4, 3.0]).reshape([1, 2, 2]);
        assert!(max_diff(&y, &want) < 1e-6);
    }

    #[test]
    fn upsample_keeps_a_constant_image_constant_inside() {
        // The normalised [1,3,3,1] filter with gain 4 reproduces a constant away from borders.
        let x = Tensor::ones([1, 2, 6, 6], (Kind::Float, tch::Device::Cpu));
        let y = upsample2d(&x, &filter());
        assert_eq!(y.size(), [1, 2, 12, 12]);
        let inner = y.narrow(2, 2, 8).narrow(3, 2, 8);
        assert!(max_diff(&inner, &Tensor::ones_like(&inner)) < 1e-6);
    }

    #[test]
    fn fused_and_unfused_modconv_agree() {
        tch::manual_seed(0);
        let opts = (Kind::Float, tch::Device::Cpu);
        let x = Tensor::randn([3, 4, 5, 5], opts);
        let w = Tensor::randn([6, 4, 3, 3], opts);
        let s = Tensor::randn([3, 4], opts);
        let n = Tensor::randn([3, 1, 10, 10], opts);
        let f = filter();
        for up in [1, 2] {
            let noise = if up == 2 { Some(&n) } else { None };
            let args = |fused| ModConv {
                up,
                padding: 1,
                resample_filter: Some(&f),
                demodulate: true,
                flip_weight: up == 1,
                fused,
            };
            let a = modulated_conv2d(&x, &w, &s, noise, args(true));
            let b = modulated_conv2d(&x, &w, &s, noise, args(false));
            assert_eq!(a.size(), [3, 6, 5 * up, 5 * up]);
            assert!(max_diff(&a, &b) < 1e-4, "up={up}: {}", max_diff(&a, &b));
        }
    }

    #[test]
    fn transposed_path_equals_zero_insertion_then_filter_then_conv() {
        // Upstream's generic reference: upfirdn2d(up=2, pad) then a plain 3x3 convolution with
        // the flipped kernel (flip_weight=false) — the transposed fast path must equal it.
        tch::manual_seed(1);
        let opts = (Kind::Float, tch::Device::Cpu);
        let x = Tensor::randn([2, 3, 4, 4], opts);
        let w = Tensor::randn([5, 3, 3, 3], opts);
        let f = filter();
        let fast = conv2d_resample(&x, &w, Some(&f), 2, 1, 1, false);
        // Upstream's generic fallback: upfirdn2d(x, f, up=2, padding=[px0,px1,py0,py1],
        // gain=4) with px0 = 1 + (4+2-1)//2 = 3 and px1 = 1 + (4-2)//2 = 2, then the convolution.
        let y = upfirdn2d(&x, &f, 2, [3, 2, 3, 2], 4.0);
        let slow = conv2d_wrapper(&y, &w, 1, [0, 0], 1, false, false);
        assert_eq!(fast.size(), slow.size());
        assert!(max_diff(&fast, &slow) < 1e-4, "{}", max_diff(&fast, &slow));
    }
}
