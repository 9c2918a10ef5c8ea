//! Pillow's resampling, ported from libImaging/Resample.c (`ImagingResampleInner`,
//! `precompute_coeffs`, `normalize_coeffs_8bpc`, `ImagingResample{Horizontal,Vertical}_8bpc`) for
//! its LANCZOS and BILINEAR filters: double-precision weights rounded to int32 with 22 fractional
//! bits, accumulators starting at 1 << 21, horizontal pass first into a clamped 8-bit
//! intermediate, an axis that keeps its size is skipped. Any deviation here shows up as a 1-level
//! difference against Pillow, which the reference tests catch.
//!
//! [`Resize::run`] computes any box of the output from only the source pixels that box reads
//! ([`Resize::reads`]), with the same arithmetic per output pixel, so a crop of a resize needs
//! only part of the source decoded.

use image::RgbImage;

/// Fractional bits of Pillow's fixed-point coefficients (`PRECISION_BITS = 32 - 8 - 2`).
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Pillow's `sinc_filter`.
fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        return 1.0;
    }
    let x = x * std::f64::consts::PI;
    x.sin() / x
}

/// A resampling filter of Pillow's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// `Image.BILINEAR` (`bilinear_filter`, support 1): what torchvision's `Resize` and
    /// `RandomResizedCrop` use on PIL images by default.
    Bilinear,
    /// `Image.LANCZOS` (`lanczos_filter`, support 3).
    Lanczos,
}

impl Filter {
    fn support(self) -> f64 {
        match self {
            Filter::Bilinear => 1.0,
            Filter::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Bilinear => {
                let x = x.abs();
                if x < 1.0 { 1.0 - x } else { 0.0 }
            }
            Filter::Lanczos if (-3.0..3.0).contains(&x) => sinc(x) * sinc(x / 3.0),
            Filter::Lanczos => 0.0,
        }
    }
}

/// Per output pixel: first input index, number of taps, and `stride` fixed-point weights (the
/// taps' and then zeros: `stride` is Pillow's `ksize` rounded up to a multiple of 8, so that the
/// SIMD kernels read whole vectors).
#[derive(Clone)]
struct Coeffs {
    bounds: Vec<(usize, usize)>,
    stride: usize,
    weights: Vec<i32>,
}

impl Coeffs {
    /// Pillow's `precompute_coeffs` over the box [0, in_size) + `normalize_coeffs_8bpc`.
    fn new(in_size: usize, out_size: usize, filter: Filter) -> Self {
        let scale = in_size as f64 / out_size as f64;
        let filterscale = scale.max(1.0);
        let support = filter.support() * filterscale;
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
                let w = filter.weight((x as f64 + xmin as f64 - center + 0.5) * ss);
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

    /// These coefficients for the outputs `outputs` only, their first inputs moved by `shift`
    /// (the source's offset in the image the passes read).
    fn restricted(mut self, outputs: std::ops::Range<usize>, shift: i64) -> Self {
        let at = |i: usize| i * self.stride;
        self.weights = self.weights[at(outputs.start)..at(outputs.end)].to_vec();
        self.bounds = self.bounds[outputs]
            .iter()
            .map(|&(min, n)| {
                (
                    usize::try_from(min as i64 + shift).expect("inside the image"),
                    n,
                )
            })
            .collect();
        self
    }

    /// The same with every first input moved by `shift`.
    fn shifted(mut self, shift: i64) -> Self {
        for b in &mut self.bounds {
            b.0 = usize::try_from(b.0 as i64 + shift).expect("inside the image");
        }
        self
    }

    /// The inputs [first, last) that the outputs read.
    fn span(&self) -> (usize, usize) {
        let first = self.bounds.iter().map(|b| b.0).min().unwrap_or(0);
        let last = self.bounds.iter().map(|b| b.0 + b.1).max().unwrap_or(0);
        (first, last)
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

/// The square crop a Pillow projection script takes: side `min(w, h)`, offset `((w-s)//2, (h-s)//2)`.
pub fn center_crop_box(width: u32, height: u32) -> Box4 {
    let s = width.min(height);
    ((width - s) / 2, (height - s) / 2, s, s)
}

/// Centre-crop to a square, then Lanczos-resize to `size`×`size` (the projection scripts'
/// preprocessing).
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
    let resize = Resize {
        from: (w, h),
        to: (out_w, out_h),
        filter: Filter::Lanczos,
    };
    resize.run(img, (left as i64, top as i64), (0, 0, out_w, out_h))
}

/// Pillow's `Image.resize(to, filter)` of a `from`-sized source image (8 bits a channel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resize {
    pub from: (u32, u32),
    pub to: (u32, u32),
    pub filter: Filter,
}

impl Resize {
    fn axis(&self, axis: usize, outputs: std::ops::Range<usize>, shift: i64) -> Option<Coeffs> {
        let (from, to) = match axis {
            0 => (self.from.0, self.to.0),
            _ => (self.from.1, self.to.1),
        };
        // An axis that keeps its size is not resampled (Pillow's need_horizontal/vertical).
        (from != to).then(|| {
            Coeffs::new(from as usize, to as usize, self.filter).restricted(outputs, shift)
        })
    }

    /// The box of the source that the outputs in `out` (a box of the resized image) read.
    pub fn reads(&self, out: Box4) -> Box4 {
        let (x, y, w, h) = out;
        let span = |axis: usize, start: u32, len: u32| match self.axis(
            axis,
            start as usize..(start + len) as usize,
            0,
        ) {
            Some(c) => {
                let (first, last) = c.span();
                (first as u32, (last - first) as u32)
            }
            None => (start, len),
        };
        let ((sx, sw), (sy, sh)) = (span(0, x, w), span(1, y, h));
        (sx, sy, sw, sh)
    }

    /// The outputs in `out` (a box of the resized image), bit for bit those of resizing the
    /// whole source, from `img`, which holds the source at `offset` (source pixel (x, y) is
    /// `img`'s (x + offset.0, y + offset.1)) at least over [`Self::reads`]`(out)`.
    ///
    /// # Panics
    /// If `img` lacks a pixel the outputs read, or a size is 0.
    pub fn run(&self, img: &RgbImage, offset: (i64, i64), out: Box4) -> RgbImage {
        let (ox, oy, out_w, out_h) = out;
        assert!(
            self.from.0 > 0 && self.from.1 > 0 && out_w > 0 && out_h > 0,
            "empty image"
        );
        assert!(
            ox + out_w <= self.to.0 && oy + out_h <= self.to.1,
            "output box outside the resized image"
        );
        let (sx, sy, sw, sh) = self.reads(out);
        let inside = |s: u32, len: u32, off: i64, size: u32| {
            s as i64 + off >= 0 && s as i64 + len as i64 + off <= size as i64
        };
        assert!(
            inside(sx, sw, offset.0, img.width()) && inside(sy, sh, offset.1, img.height()),
            "the image lacks source pixels the outputs read"
        );
        let (out_w, out_h) = (out_w as usize, out_h as usize);
        let stride = img.width() as usize * 3;
        let src = img.as_raw();
        let horiz = self.axis(0, ox as usize..ox as usize + out_w, offset.0);
        let vert = self.axis(1, oy as usize..oy as usize + out_h, offset.1);
        let row_len = out_w * 3;
        let (Some(horiz), Some(vert)) = (horiz.as_ref(), vert.as_ref()) else {
            // One pass, or none: straight from `img`.
            let rows = match &vert {
                Some(c) => c.span(),
                None => {
                    let top = (oy as i64 + offset.1) as usize;
                    (top, top + out_h)
                }
            };
            // Where the rows are copied from when nothing is resampled across (with horizontal
            // coefficients the offset can be negative, and is not used).
            let left = match horiz {
                None => (ox as i64 + offset.0) as usize * 3,
                Some(_) => 0,
            };
            let mid = horizontal_pass(src, stride, rows, horiz.as_ref(), left, row_len);
            return match vert {
                Some(c) => vertical_pass(&mid, row_len, rows.0, &c, row_len),
                None => RgbImage::from_raw(out_w as u32, out_h as u32, mid).expect("sized"),
            };
        };
        let (w, h) = (self.from.0 as i64, self.from.1 as i64);
        let (ow, oh) = (self.to.0 as i64, self.to.1 as i64);
        if oh < h && h - oh > 2 * (w - ow) {
            // Pillow 13 resizes vertically first when the height shrinks by more than twice what
            // the width does: over only the columns the horizontal pass reads.
            let (first, last) = horiz.span();
            let mid = vertical_pass(&src[first * 3..], stride, 0, vert, (last - first) * 3);
            let mid_stride = (last - first) * 3;
            let shifted = horiz.clone().shifted(-(first as i64));
            let rows = (0, out_h);
            let out = horizontal_pass(&mid, mid_stride, rows, Some(&shifted), 0, row_len);
            return RgbImage::from_raw(out_w as u32, out_h as u32, out).expect("sized");
        }
        // Horizontal pass over only the rows the vertical pass reads (Pillow's ybox_first/last).
        let rows = vert.span();
        let mid = horizontal_pass(src, stride, rows, Some(horiz), 0, row_len);
        vertical_pass(&mid, row_len, rows.0, vert, row_len)
    }
}

/// The horizontal pass (or, without coefficients, a copy of `row_len` bytes from `left`) over
/// rows [first, last) of `src` (rows `stride` apart).
fn horizontal_pass(
    src: &[u8],
    stride: usize,
    (first, last): (usize, usize),
    coeffs: Option<&Coeffs>,
    left: usize,
    row_len: usize,
) -> Vec<u8> {
    let mut mid = vec![0u8; (last - first) * row_len];
    let mut scratch = Vec::new();
    for (y, out_row) in (first..last).zip(mid.chunks_exact_mut(row_len)) {
        let row = &src[y * stride..(y * stride + stride).min(src.len())];
        match coeffs {
            Some(c) => horizontal_row(row, out_row, c, &mut scratch),
            None => out_row.copy_from_slice(&row[left..left + row_len]),
        }
    }
    mid
}

/// The vertical pass over `src` (rows `stride` apart, the first being row `first` of the
/// coefficients' frame), each output row `row_len` bytes from the start of a row.
fn vertical_pass(src: &[u8], stride: usize, first: usize, c: &Coeffs, row_len: usize) -> RgbImage {
    let out_h = c.bounds.len();
    let mut out = vec![0u8; out_h * row_len];
    let mut acc = vec![0i32; row_len];
    for (yy, out_row) in out.chunks_exact_mut(row_len).enumerate() {
        let (ymin, k) = c.taps(yy);
        vertical_row(src, stride, (ymin - first) * stride, k, &mut acc, out_row);
    }
    RgbImage::from_raw((row_len / 3) as u32, out_h as u32, out).expect("sized buffer")
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

/// `ImagingResampleVertical_8bpc` for one output row: tap `i` reads `out.len()` bytes of `src`
/// from `start + i * stride`; `acc` is scratch of one row's length.
fn vertical_row(
    src: &[u8],
    stride: usize,
    start: usize,
    k: &[i32],
    acc: &mut [i32],
    out: &mut [u8],
) {
    #[cfg(target_arch = "x86_64")]
    if use_avx2() {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { avx2::vertical_row(src, stride, start, k, acc, out) };
    }
    vertical_row_generic(src, stride, start, k, acc, out)
}

/// Written so that the compiler vectorises it (lane by lane, no reordering of any one sum).
#[inline(always)]
fn vertical_row_generic(
    src: &[u8],
    stride: usize,
    start: usize,
    k: &[i32],
    acc: &mut [i32],
    out: &mut [u8],
) {
    acc.fill(HALF);
    for (i, &ky) in k.iter().enumerate() {
        let row = &src[start + i * stride..start + i * stride + out.len()];
        for (a, &p) in acc.iter_mut().zip(row) {
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
    pub(super) fn vertical_row(
        src: &[u8],
        stride: usize,
        start: usize,
        k: &[i32],
        acc: &mut [i32],
        out: &mut [u8],
    ) {
        super::vertical_row_generic(src, stride, start, k, acc, out)
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
            let c = Coeffs::new(w as usize, o, Filter::Lanczos);
            let row = &img.as_raw()[..w as usize * 3];
            let (mut a, mut b) = (vec![0u8; o * 3], vec![0u8; o * 3]);
            horizontal_row_scalar(row, &mut a, &c);
            // SAFETY: use_avx2() said yes.
            unsafe { avx2::horizontal_row(row, &mut b, &c, &mut Vec::new()) };
            assert_eq!(a, b, "horizontal {w} -> {o}");
            let rows = noise(o as u32, 40, i as u64 + 7);
            let k = &Coeffs::new(100, 37, Filter::Lanczos).weights[..];
            let taps = &k[..(rows.height() as usize).min(k.len())];
            let rows = &rows.as_raw()[..taps.len() * o * 3];
            let mut acc = vec![0; o * 3];
            let stride = o * 3;
            vertical_row_generic(rows, stride, 0, taps, &mut acc, &mut a);
            // SAFETY: as above.
            unsafe { avx2::vertical_row(rows, stride, 0, taps, &mut acc, &mut b) };
            assert_eq!(a, b, "vertical, {} taps", taps.len());
        }
    }

    #[test]
    fn any_box_of_a_resize_is_that_box_of_the_whole_from_only_what_it_reads() {
        let src = noise(97, 61, 3);
        for filter in [Filter::Bilinear, Filter::Lanczos] {
            for to in [(23, 17), (97, 40), (200, 61), (256, 300), (30, 61)] {
                let r = Resize {
                    from: (97, 61),
                    to,
                    filter,
                };
                let whole = r.run(&src, (0, 0), (0, 0, to.0, to.1));
                for out in [
                    (0, 0, to.0, to.1),
                    (3, 2, 5, 7),
                    (to.0 - 1, to.1 - 1, 1, 1),
                    (to.0 / 3, 0, to.0 / 2, to.1),
                ] {
                    // Only the source pixels it reads, as a window of their own.
                    let (sx, sy, sw, sh) = r.reads(out);
                    let window = image::imageops::crop_imm(&src, sx, sy, sw, sh).to_image();
                    let part = r.run(&window, (-(sx as i64), -(sy as i64)), out);
                    let (x, y, w, h) = out;
                    let expected = image::imageops::crop_imm(&whole, x, y, w, h).to_image();
                    assert!(part == expected, "{filter:?} {to:?} {out:?}");
                }
            }
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
            let c = Coeffs::new(i, o, Filter::Lanczos);
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
