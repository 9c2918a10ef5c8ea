//! Pillow's Lanczos resampling, ported from libImaging/Resample.c (`ImagingResampleInner`,
//! `precompute_coeffs`, `normalize_coeffs_8bpc`, `ImagingResample{Horizontal,Vertical}_8bpc`):
//! double-precision weights rounded to int32 with 22 fractional bits, accumulators starting at
//! 1 << 21, horizontal pass first into a clamped 8-bit intermediate, an axis that keeps its size is
//! skipped. Any deviation here shows up as a 1-level difference against Pillow, which the
//! reference tests catch.

use image::RgbImage;

/// Fractional bits of Pillow's fixed-point coefficients (`PRECISION_BITS = 32 - 8 - 2`).
const PRECISION_BITS: u32 = 32 - 8 - 2;
/// Lanczos' support (`lanczos_filter`'s window is [-3, 3)).
const SUPPORT: f64 = 3.0;

/// Pillow's `sinc_filter`.
fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        return 1.0;
    }
    let x = x * std::f64::consts::PI;
    x.sin() / x
}

/// Pillow's `lanczos_filter`.
fn lanczos(x: f64) -> f64 {
    if (-3.0..3.0).contains(&x) {
        sinc(x) * sinc(x / 3.0)
    } else {
        0.0
    }
}

/// Per output pixel: first input index, number of taps, and `ksize` fixed-point weights.
struct Coeffs {
    bounds: Vec<(usize, usize)>,
    ksize: usize,
    weights: Vec<i32>,
}

impl Coeffs {
    /// Pillow's `precompute_coeffs` over the box [0, in_size) + `normalize_coeffs_8bpc`.
    fn new(in_size: usize, out_size: usize) -> Self {
        let scale = in_size as f64 / out_size as f64;
        let filterscale = scale.max(1.0);
        let support = SUPPORT * filterscale;
        let ksize = support.ceil() as usize * 2 + 1;
        let mut bounds = Vec::with_capacity(out_size);
        let mut weights = vec![0i32; out_size * ksize];
        let mut k = vec![0f64; ksize];
        let ss = 1.0 / filterscale;
        for xx in 0..out_size {
            let center = (xx as f64 + 0.5) * scale;
            // `(int)` truncates toward zero, like `as`.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let n = xmax.saturating_sub(xmin);
            let mut ww = 0.0;
            for (x, kx) in k.iter_mut().enumerate().take(n) {
                let w = lanczos((x as f64 + xmin as f64 - center + 0.5) * ss);
                *kx = w;
                ww += w;
            }
            for (x, &kx) in k.iter().enumerate().take(n) {
                let w = if ww != 0.0 { kx / ww } else { kx };
                let fixed = w * (1u32 << PRECISION_BITS) as f64;
                weights[xx * ksize + x] = if w < 0.0 {
                    (-0.5 + fixed) as i32
                } else {
                    (0.5 + fixed) as i32
                };
            }
            bounds.push((xmin, n));
        }
        Coeffs {
            bounds,
            ksize,
            weights,
        }
    }

    fn taps(&self, out: usize) -> (usize, &[i32]) {
        let (min, n) = self.bounds[out];
        (min, &self.weights[out * self.ksize..out * self.ksize + n])
    }
}

/// Pillow's `clip8`.
#[inline(always)]
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// A rectangle of an RGB image: `(left, top, width, height)`.
pub type Box4 = (u32, u32, u32, u32);

/// The square crop of seed 000: side `min(w, h)`, offset `((w-s)//2, (h-s)//2)`.
pub fn center_crop_box(width: u32, height: u32) -> Box4 {
    let s = width.min(height);
    ((width - s) / 2, (height - s) / 2, s, s)
}

/// Centre-crop to a square, then Lanczos-resize to `size`×`size` (seed 000's preprocessing).
pub fn crop_resize(img: &RgbImage, size: u32) -> RgbImage {
    let b = center_crop_box(img.width(), img.height());
    resize_lanczos(img, b, size, size)
}

/// Resizes the `region` of `img` to `out_w`×`out_h` with Pillow's `Image.LANCZOS`, bit-exactly.
/// Equivalent to `img.crop(region).resize((out_w, out_h), Image.LANCZOS)` in Pillow.
pub fn resize_lanczos(img: &RgbImage, region: Box4, out_w: u32, out_h: u32) -> RgbImage {
    let (left, top, w, h) = region;
    assert!(
        left + w <= img.width() && top + h <= img.height(),
        "crop box outside the image"
    );
    assert!(w > 0 && h > 0 && out_w > 0 && out_h > 0, "empty image");
    let stride = img.width() as usize * 3;
    let src = img.as_raw();
    let (w, h, out_w, out_h) = (w as usize, h as usize, out_w as usize, out_h as usize);
    let row = |y: usize| -> &[u8] {
        let start = (top as usize + y) * stride + left as usize * 3;
        &src[start..start + w * 3]
    };
    let need_h = out_w != w;
    let need_v = out_h != h;
    let vert = need_v.then(|| Coeffs::new(h, out_h));

    // Horizontal pass over only the rows the vertical pass reads (Pillow's ybox_first/last).
    let (first, last) = match &vert {
        Some(c) => {
            let (min0, _) = c.bounds[0];
            let (minl, nl) = c.bounds[out_h - 1];
            (min0, minl + nl)
        }
        None => (0, h),
    };
    let mid_w = if need_h { out_w } else { w };
    let mut mid = vec![0u8; (last - first) * mid_w * 3];
    if need_h {
        let horiz = Coeffs::new(w, out_w);
        for (y, out_row) in (first..last).zip(mid.chunks_exact_mut(out_w * 3)) {
            horizontal_row(row(y), out_row, &horiz);
        }
    } else {
        for (y, out_row) in (first..last).zip(mid.chunks_exact_mut(w * 3)) {
            out_row.copy_from_slice(row(y));
        }
    }
    let Some(vert) = vert else {
        return RgbImage::from_raw(out_w as u32, out_h as u32, mid).expect("sized buffer");
    };
    let mut out = vec![0u8; out_h * out_w * 3];
    let row_len = out_w * 3;
    let mut acc = vec![0i32; row_len];
    for (yy, out_row) in out.chunks_exact_mut(row_len).enumerate() {
        let (ymin, k) = vert.taps(yy);
        acc.fill(HALF);
        for (dy, &ky) in k.iter().enumerate() {
            let y = ymin + dy - first;
            let src_row = &mid[y * row_len..(y + 1) * row_len];
            for (a, &p) in acc.iter_mut().zip(src_row) {
                *a += p as i32 * ky;
            }
        }
        for (o, &a) in out_row.iter_mut().zip(&acc) {
            *o = clip8(a);
        }
    }
    RgbImage::from_raw(out_w as u32, out_h as u32, out).expect("sized buffer")
}

/// `ImagingResampleHorizontal_8bpc` for one RGB row.
#[inline]
fn horizontal_row(src: &[u8], out: &mut [u8], c: &Coeffs) {
    for (xx, px) in out.chunks_exact_mut(3).enumerate() {
        let (xmin, k) = c.taps(xx);
        let taps = &src[xmin * 3..(xmin + k.len()) * 3];
        let (mut r, mut g, mut b) = (HALF, HALF, HALF);
        for (p, &kx) in taps.chunks_exact(3).zip(k) {
            r += p[0] as i32 * kx;
            g += p[1] as i32 * kx;
            b += p[2] as i32 * kx;
        }
        px[0] = clip8(r);
        px[1] = clip8(g);
        px[2] = clip8(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crop_box_matches_seed_formula() {
        // ((w-s)//2, (h-s)//2, (w+s)//2, (h+s)//2) with s = min(w, h)
        assert_eq!(center_crop_box(641, 480), (80, 0, 480, 480));
        assert_eq!(center_crop_box(300, 301), (0, 0, 300, 300));
        assert_eq!(center_crop_box(5, 5), (0, 0, 5, 5));
    }

    #[test]
    fn weights_sum_to_one_in_fixed_point() {
        // Normalised weights round individually, so sums may be off by a few units in 2^22.
        for (i, o) in [(1024, 256), (256, 1024), (7, 3), (3, 7), (100, 99)] {
            let c = Coeffs::new(i, o);
            for x in 0..o {
                let s: i32 = c.taps(x).1.iter().sum();
                assert!(
                    (s - (1 << PRECISION_BITS)).abs() <= 8,
                    "{i}->{o} at {x}: {s}"
                );
            }
        }
    }

    #[test]
    fn constant_image_stays_constant() {
        let img = RgbImage::from_pixel(37, 23, image::Rgb([200, 3, 128]));
        for size in [5, 23, 64] {
            let out = crop_resize(&img, size);
            assert!(out.pixels().all(|p| p.0 == [200, 3, 128]), "size {size}");
        }
    }

    #[test]
    fn same_size_is_a_copy_of_the_crop() {
        let img = RgbImage::from_fn(10, 6, |x, y| image::Rgb([x as u8, y as u8, (x * y) as u8]));
        let out = crop_resize(&img, 6);
        for (x, y, p) in out.enumerate_pixels() {
            assert_eq!(*p, *img.get_pixel(x + 2, y));
        }
    }

    #[test]
    fn one_axis_only_is_resampled_when_the_other_keeps_its_size() {
        let img = RgbImage::from_fn(12, 4, |x, _| image::Rgb([(x * 20) as u8; 3]));
        let out = resize_lanczos(&img, (0, 0, 12, 4), 6, 4);
        // Rows are identical because the vertical pass is skipped.
        for y in 1..4 {
            for x in 0..6 {
                assert_eq!(out.get_pixel(x, y), out.get_pixel(x, 0));
            }
        }
    }
}
