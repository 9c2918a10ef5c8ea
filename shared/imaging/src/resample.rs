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

/// Per output pixel: first input index, number of taps, and `stride` fixed-point weights (the
/// taps' and then zeros: `stride` is Pillow's `ksize` rounded up to a multiple of 8, so that the
/// SIMD kernels read whole vectors).
struct Coeffs {
    bounds: Vec<(usize, usize)>,
    stride: usize,
    weights: Vec<i32>,
}

impl Coeffs {
    /// Pillow's `precompute_coeffs` over the box [0, in_size) + `normalize_coeffs_8bpc`.
    fn new(in_size: usize, out_size: usize) -> Self {
        let scale = in_size as f64 / out_size as f64;
        let filterscale = scale.max(1.0);
        let support = SUPPORT * filterscale;
        let ksize = support.ceil() as usize * 2 + 1;
        let stride = ksize.next_multiple_of(8);
        let mut bounds = Vec::with_capacity(out_size);
        let mut weights = vec![0i32; out_size * stride];
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
                weights[xx * stride + x] = if w < 0.0 {
                    (-0.5 + fixed) as i32
                } else {
                    (0.5 + fixed) as i32
                };
            }
            bounds.push((xmin, n));
        }
        Coeffs {
            bounds,
            stride,
            weights,
        }
    }

    fn taps(&self, out: usize) -> (usize, &[i32]) {
        let (min, n) = self.bounds[out];
        (min, &self.weights[out * self.stride..out * self.stride + n])
    }

    /// [`Self::taps`] padded with zero weights to a multiple of 8.
    #[cfg(target_arch = "x86_64")]
    fn taps8(&self, out: usize) -> (usize, &[i32]) {
        let (min, n) = self.bounds[out];
        let at = out * self.stride;
        (min, &self.weights[at..at + n.next_multiple_of(8)])
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
        let mut scratch = Vec::new();
        for (y, out_row) in (first..last).zip(mid.chunks_exact_mut(out_w * 3)) {
            horizontal_row(row(y), out_row, &horiz, &mut scratch);
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
        let rows = &mid[(ymin - first) * row_len..(ymin - first + k.len()) * row_len];
        vertical_row(rows, k, &mut acc, out_row);
    }
    RgbImage::from_raw(out_w as u32, out_h as u32, out).expect("sized buffer")
}

/// The kernels in the widest form this CPU runs, chosen once: AVX2 (8 lanes of Pillow's 32-bit
/// arithmetic, the same sums in the same order, so the same bits) or the scalar code.
fn use_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVX2.get_or_init(|| std::arch::is_x86_feature_detected!("avx2"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `ImagingResampleHorizontal_8bpc` for one RGB row; `scratch` is kept between rows.
fn horizontal_row(src: &[u8], out: &mut [u8], c: &Coeffs, scratch: &mut Vec<u8>) {
    #[cfg(target_arch = "x86_64")]
    if use_avx2() {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { avx2::horizontal_row(src, out, c, scratch) };
    }
    let _ = scratch;
    horizontal_row_scalar(src, out, c)
}

/// `ImagingResampleVertical_8bpc` for one output row: `rows` holds the `k.len()` input rows it
/// reads, one after the other; `acc` is scratch of one row's length.
fn vertical_row(rows: &[u8], k: &[i32], acc: &mut [i32], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if use_avx2() {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { avx2::vertical_row(rows, k, acc, out) };
    }
    vertical_row_generic(rows, k, acc, out)
}

/// Written so that the compiler vectorises it (lane by lane, no reordering of any one sum).
#[inline(always)]
fn vertical_row_generic(rows: &[u8], k: &[i32], acc: &mut [i32], out: &mut [u8]) {
    acc.fill(HALF);
    for (src_row, &ky) in rows.chunks_exact(out.len()).zip(k) {
        for (a, &p) in acc.iter_mut().zip(src_row) {
            *a += p as i32 * ky;
        }
    }
    for (o, &a) in out.iter_mut().zip(acc.iter()) {
        *o = clip8(a);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Coeffs, HALF, PRECISION_BITS};

    /// [`super::vertical_row_generic`] compiled for AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) fn vertical_row(rows: &[u8], k: &[i32], acc: &mut [i32], out: &mut [u8]) {
        super::vertical_row_generic(rows, k, acc, out)
    }

    /// [`super::horizontal_row_scalar`] on the row split into three planes (R, G, B, each
    /// followed by 8 zeros), eight taps a step: lane i of a channel's accumulator sums the taps
    /// i, i + 8, i + 16... and the lanes are added at the end. Every channel's sum has the
    /// scalar one's terms (the padding's weights are 0), and 32-bit integer addition gives the
    /// same bits in any order.
    #[target_feature(enable = "avx2")]
    pub(super) fn horizontal_row(src: &[u8], out: &mut [u8], c: &Coeffs, planes: &mut Vec<u8>) {
        let w = src.len() / 3;
        let plane = w + 8;
        planes.clear();
        planes.resize(3 * plane, 0);
        let (r, rest) = planes.split_at_mut(plane);
        let (g, b) = rest.split_at_mut(plane);
        for (((p, r), g), b) in src.chunks_exact(3).zip(&mut *r).zip(&mut *g).zip(&mut *b) {
            (*r, *g, *b) = (p[0], p[1], p[2]);
        }
        let (r, g, b) = (&r[..], &g[..], &b[..]);
        for (xx, px) in out.chunks_exact_mut(3).enumerate() {
            let (xmin, k) = c.taps8(xx);
            // xmin + n <= w and k.len() < n + 8: every read below is inside a plane.
            assert!(xmin + k.len() <= plane, "taps inside the row");
            let (mut ar, mut ag, mut ab) = (
                _mm256_setzero_si256(),
                _mm256_setzero_si256(),
                _mm256_setzero_si256(),
            );
            for (j, w8) in k.chunks_exact(8).enumerate() {
                let at = xmin + 8 * j;
                // SAFETY: w8 holds 8 i32 and each plane has 8 bytes from `at` (asserted above).
                unsafe {
                    let w8 = _mm256_loadu_si256(w8.as_ptr().cast());
                    let load =
                        |p: &[u8]| _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.as_ptr().add(at).cast()));
                    ar = _mm256_add_epi32(ar, _mm256_mullo_epi32(load(r), w8));
                    ag = _mm256_add_epi32(ag, _mm256_mullo_epi32(load(g), w8));
                    ab = _mm256_add_epi32(ab, _mm256_mullo_epi32(load(b), w8));
                }
            }
            // [r g b 0] in each 128-bit half, then the halves added.
            let rg = _mm256_hadd_epi32(ar, ag);
            let b0 = _mm256_hadd_epi32(ab, _mm256_setzero_si256());
            let rgb = _mm256_hadd_epi32(rg, b0);
            let sum = _mm_add_epi32(
                _mm_add_epi32(
                    _mm256_castsi256_si128(rgb),
                    _mm256_extracti128_si256(rgb, 1),
                ),
                _mm_set1_epi32(HALF),
            );
            // >> 22, then clamped to 0..=255 by the two saturating packs (Pillow's clip8).
            let shifted = _mm_srai_epi32(sum, PRECISION_BITS as i32);
            let packed = _mm_packus_epi16(_mm_packs_epi32(shifted, shifted), shifted);
            let rgb = (_mm_cvtsi128_si32(packed) as u32).to_le_bytes();
            px.copy_from_slice(&rgb[..3]);
        }
    }
}

/// `ImagingResampleHorizontal_8bpc` for one RGB row, one channel at a time.
#[inline]
fn horizontal_row_scalar(src: &[u8], out: &mut [u8], c: &Coeffs) {
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

    /// A deterministic pseudo-random image (xorshift), so that every byte value and neighbour
    /// pattern shows up.
    fn noise(w: u32, h: u32, seed: u64) -> RgbImage {
        let mut x = seed | 1;
        RgbImage::from_fn(w, h, |_, _| {
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            };
            image::Rgb([next(), next(), next()])
        })
    }

    #[test]
    fn simd_kernels_equal_the_scalar_ones_bit_for_bit() {
        if !use_avx2() {
            eprintln!("no AVX2 here: only the scalar kernels run");
            return;
        }
        // Odd and even tap counts, up- and downscaling, a pair read at the very end of a row.
        for (i, (w, o)) in [
            (1000, 256),
            (257, 256),
            (33, 7),
            (5, 64),
            (3, 1),
            (600, 599),
        ]
        .into_iter()
        .enumerate()
        {
            let img = noise(w, 2, i as u64 + 1);
            let c = Coeffs::new(w as usize, o);
            let row = &img.as_raw()[..w as usize * 3];
            let (mut a, mut b) = (vec![0u8; o * 3], vec![0u8; o * 3]);
            horizontal_row_scalar(row, &mut a, &c);
            // SAFETY: use_avx2() said yes.
            unsafe { avx2::horizontal_row(row, &mut b, &c, &mut Vec::new()) };
            assert_eq!(a, b, "horizontal {w} -> {o}");
            let rows = noise(o as u32, 40, i as u64 + 7);
            let k = &Coeffs::new(100, 37).weights[..];
            let taps = &k[..(rows.height() as usize).min(k.len())];
            let rows = &rows.as_raw()[..taps.len() * o * 3];
            let mut acc = vec![0; o * 3];
            vertical_row_generic(rows, taps, &mut acc, &mut a);
            // SAFETY: as above.
            unsafe { avx2::vertical_row(rows, taps, &mut acc, &mut b) };
            assert_eq!(a, b, "vertical, {} taps", taps.len());
        }
    }

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
