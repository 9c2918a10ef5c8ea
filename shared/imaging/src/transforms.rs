//! torchvision's image-classification transforms on PIL images, pixel for pixel, on a decode of
//! only the part of the image they read ([`crate::decode_region`]):
//!
//! - evaluation: `Resize(resize)` (the short side to `resize`, the long side
//!   `int(resize * long / short)`, Pillow's BILINEAR) then `CenterCrop(size)` ([`eval_crop`]);
//! - training: `RandomResizedCrop(size, scale, ratio)` ([`random_resized_crop_box`], torchvision's
//!   `get_params`: ten attempts, then the central fallback) then `resize((size, size), BILINEAR)`
//!   ([`train_crop`]); `RandomHorizontalFlip` and `ToTensor` + `Normalize` in [`to_chw`].
//!
//! The random draws come from the caller (a uniform in [0, 1) per call): torchvision's come from
//! torch's generator, which this does not reproduce; the distribution of the boxes is the same.

use image::RgbImage;

use crate::{Box4, DecodeOptions, Filter, Frame, Resize, Result, decode_region};

/// torchvision's `Resize(size)` output size for a `w`×`h` image: the short side `size`, the long
/// side `int(size * long / short)` (`_compute_resized_output_size`).
pub fn resized_short_side(w: u32, h: u32, size: u32) -> (u32, u32) {
    let (short, long) = if w <= h { (w, h) } else { (h, w) };
    // Python's int * int / int: exact product, correctly rounded division, then truncation.
    let new_long = (size as u64 * long as u64) as f64 / short as f64;
    let new_long = new_long as u32;
    if w <= h {
        (size, new_long)
    } else {
        (new_long, size)
    }
}

/// torchvision's `CenterCrop` box of `cw`×`ch` in a `w`×`h` image: offsets
/// `int(round((w - cw) / 2.0))` (Python rounds halves to even). The crop must fit.
pub fn center_crop(w: u32, h: u32, cw: u32, ch: u32) -> Box4 {
    assert!(
        cw <= w && ch <= h,
        "a {cw}x{ch} crop does not fit in {w}x{h}"
    );
    let off = |a: u32, b: u32| ((a - b) as f64 / 2.0).round_ties_even() as u32;
    (off(w, cw), off(h, ch), cw, ch)
}

/// `Resize(resize)` then `CenterCrop(size)` of an encoded image, decoding only the source pixels
/// the crop reads. `resize >= size` (torchvision's evaluation recipe: 256 for 224).
pub fn eval_crop(
    bytes: &[u8],
    opts: &DecodeOptions,
    frame: Frame,
    resize: u32,
    size: u32,
) -> Result<RgbImage> {
    assert!(
        size > 0 && resize >= size,
        "resize {resize} below the crop {size}"
    );
    let mut plan = None;
    let region = decode_region(bytes, opts, frame, |w, h| {
        let to = resized_short_side(w, h, resize);
        let r = Resize {
            from: (w, h),
            to,
            filter: Filter::Bilinear,
        };
        let crop = center_crop(to.0, to.1, size, size);
        let reads = r.reads(crop);
        plan = Some((r, crop));
        reads
    })?;
    let (r, crop) = plan.expect("planned before decoding");
    let (x, y, _, _) = region.region;
    Ok(r.run(&region.rgb, (-(x as i64), -(y as i64)), crop))
}

/// torchvision's `RandomResizedCrop.get_params` for a `w`×`h` image: `(left, top, width,
/// height)`. `uniform()` returns a draw in [0, 1) each time it is called.
pub fn random_resized_crop_box(
    w: u32,
    h: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    mut uniform: impl FnMut() -> f64,
) -> Box4 {
    let area = w as f64 * h as f64;
    // torch.log(torch.tensor(ratio)) and the draws are float32 in torchvision.
    let (lo, hi) = ((ratio.0 as f32).ln(), (ratio.1 as f32).ln());
    for _ in 0..10 {
        let target = area * (scale.0 + (scale.1 - scale.0) * uniform());
        let aspect = (lo + (hi - lo) * uniform() as f32).exp() as f64;
        let cw = (target * aspect).sqrt().round_ties_even();
        let ch = (target / aspect).sqrt().round_ties_even();
        if cw > 0.0 && cw <= w as f64 && ch > 0.0 && ch <= h as f64 {
            let (cw, ch) = (cw as u32, ch as u32);
            // torch.randint(0, n + 1): uniform over 0..=n.
            let pick = |n: u32, u: f64| ((u * (n as f64 + 1.0)) as u32).min(n);
            let top = pick(h - ch, uniform());
            let left = pick(w - cw, uniform());
            return (left, top, cw, ch);
        }
    }
    let in_ratio = w as f64 / h as f64;
    let (min_r, max_r) = (ratio.0.min(ratio.1), ratio.0.max(ratio.1));
    let (cw, ch) = if in_ratio < min_r {
        (w, ((w as f64 / min_r).round_ties_even() as u32).clamp(1, h))
    } else if in_ratio > max_r {
        (((h as f64 * max_r).round_ties_even() as u32).clamp(1, w), h)
    } else {
        (w, h)
    };
    ((w - cw) / 2, (h - ch) / 2, cw, ch)
}

/// `RandomResizedCrop(size, scale, ratio)` of an encoded image (Pillow's BILINEAR), decoding only
/// the crop.
pub fn train_crop(
    bytes: &[u8],
    opts: &DecodeOptions,
    frame: Frame,
    size: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    uniform: impl FnMut() -> f64,
) -> Result<RgbImage> {
    let region = decode_region(bytes, opts, frame, |w, h| {
        random_resized_crop_box(w, h, scale, ratio, uniform)
    })?;
    let (_, _, cw, ch) = region.region;
    let r = Resize {
        from: (cw, ch),
        to: (size, size),
        filter: Filter::Bilinear,
    };
    Ok(r.run(&region.rgb, (0, 0), (0, 0, size, size)))
}

/// `ToTensor()` then `Normalize(mean, std)` (and a horizontal flip first when `flip`), into
/// `out` as float32 channels-first [3, h, w]: `(v / 255 - mean) / std` in float32, as torchvision
/// computes it (a division, then a subtraction and a division by tensors of float32). A byte has
/// 256 values: each channel's 256 results are computed once, with those very operations, and
/// looked up.
pub fn to_chw(img: &RgbImage, mean: [f32; 3], std: [f32; 3], flip: bool, out: &mut [f32]) {
    let (w, h) = (img.width() as usize, img.height() as usize);
    assert_eq!(out.len(), 3 * w * h, "[3, {h}, {w}] floats");
    let lut: [[f32; 256]; 3] =
        std::array::from_fn(|c| std::array::from_fn(|v| (v as f32 / 255.0 - mean[c]) / std[c]));
    let (r, rest) = out.split_at_mut(w * h);
    let (g, b) = rest.split_at_mut(w * h);
    let rows = img.as_raw().chunks_exact(3 * w);
    let planes = r
        .chunks_exact_mut(w)
        .zip(g.chunks_exact_mut(w))
        .zip(b.chunks_exact_mut(w));
    // One loop per direction, over iterators: no index to check per pixel.
    fn put<'a>(
        pixels: std::slice::ChunksExact<u8>,
        planes: impl Iterator<Item = ((&'a mut f32, &'a mut f32), &'a mut f32)>,
        lut: &[[f32; 256]; 3],
    ) {
        for (p, ((r, g), b)) in pixels.zip(planes) {
            (*r, *g, *b) = (
                lut[0][p[0] as usize],
                lut[1][p[1] as usize],
                lut[2][p[2] as usize],
            );
        }
    }
    for (row, ((r, g), b)) in rows.zip(planes) {
        let pixels = row.chunks_exact(3);
        if flip {
            let planes = r
                .iter_mut()
                .rev()
                .zip(g.iter_mut().rev())
                .zip(b.iter_mut().rev());
            put(pixels, planes, &lut);
        } else {
            put(
                pixels,
                r.iter_mut().zip(g.iter_mut()).zip(b.iter_mut()),
                &lut,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_torchvision() {
        assert_eq!(resized_short_side(500, 375, 256), (341, 256));
        assert_eq!(resized_short_side(375, 500, 256), (256, 341));
        assert_eq!(resized_short_side(256, 256, 256), (256, 256));
        assert_eq!(resized_short_side(1000, 3, 256), (85333, 256));
        // (341 - 224) / 2 = 58.5 rounds to 58 (half to even), (342 - 224) / 2 = 59.
        assert_eq!(center_crop(341, 256, 224, 224), (58, 16, 224, 224));
        assert_eq!(center_crop(343, 256, 224, 224), (60, 16, 224, 224));
    }

    #[test]
    fn random_boxes_fit_and_fall_back_to_the_centre() {
        let mut x = 7u64;
        let mut uniform = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        for (w, h) in [(500, 375), (37, 1000), (1, 1), (224, 224)] {
            for _ in 0..200 {
                let (l, t, cw, ch) =
                    random_resized_crop_box(w, h, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut uniform);
                assert!(cw > 0 && ch > 0 && l + cw <= w && t + ch <= h, "{w}x{h}");
            }
        }
        // Draws that never fit: a wide image falls back to the widest allowed ratio.
        let b = random_resized_crop_box(1000, 10, (2.0, 2.0), (0.75, 4.0 / 3.0), || 0.5);
        assert_eq!(b, (493, 0, 13, 10));
    }

    #[test]
    fn normalisation_is_torchvisions_arithmetic() {
        let img = RgbImage::from_fn(2, 1, |x, _| image::Rgb([x as u8 * 255, 128, 3]));
        let mut out = vec![0.0; 6];
        to_chw(
            &img,
            [0.485, 0.456, 0.406],
            [0.229, 0.224, 0.225],
            true,
            &mut out,
        );
        let v = |v: u8, m: f32, s: f32| (v as f32 / 255.0 - m) / s;
        assert_eq!(
            out,
            [
                v(255, 0.485, 0.229),
                v(0, 0.485, 0.229),
                v(128, 0.456, 0.224),
                v(128, 0.456, 0.224),
                v(3, 0.406, 0.225),
                v(3, 0.406, 0.225)
            ]
        );
    }
}
