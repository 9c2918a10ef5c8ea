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
/// taps' and then zeros: `stride` is Pillow's `ksize`).
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
        let stride = ksize;
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

    /// These coefficients for the outputs `outputs` only.
    fn restricted(mut self, outputs: std::ops::Range<usize>) -> Self {
        let at = |i: usize| i * self.stride;
        self.weights = self.weights[at(outputs.start)..at(outputs.end)].to_vec();
        self.bounds = self.bounds[outputs].to_vec();
        self
    }

    /// The same with every first input moved by `shift` (the source's offset in the image the
    /// passes read).
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
    fn axis(&self, axis: usize, outputs: std::ops::Range<usize>) -> Option<Coeffs> {
        let (from, to) = match axis {
            0 => (self.from.0, self.to.0),
            _ => (self.from.1, self.to.1),
        };
        // An axis that keeps its size is not resampled (Pillow's need_horizontal/vertical).
        (from != to)
            .then(|| Coeffs::new(from as usize, to as usize, self.filter).restricted(outputs))
    }

    /// The box of the source that the outputs in `out` (a box of the resized image) read.
    pub fn reads(&self, out: Box4) -> Box4 {
        self.passes(out).0
    }

    /// [`Self::reads`] and the two passes' coefficients (in the source's frame) for the
    /// outputs in `out`, computed once.
    fn passes(&self, out: Box4) -> (Box4, Option<Coeffs>, Option<Coeffs>) {
        let (x, y, w, h) = out;
        let horiz = self.axis(0, x as usize..(x + w) as usize);
        let vert = self.axis(1, y as usize..(y + h) as usize);
        let span = |c: &Option<Coeffs>, start: u32, len: u32| match c {
            Some(c) => {
                let (first, last) = c.span();
                (first as u32, (last - first) as u32)
            }
            None => (start, len),
        };
        let ((sx, sw), (sy, sh)) = (span(&horiz, x, w), span(&vert, y, h));
        ((sx, sy, sw, sh), horiz, vert)
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
        let ((sx, sy, sw, sh), horiz, vert) = self.passes(out);
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
        let horiz = horiz.map(|c| c.shifted(offset.0));
        let vert = vert.map(|c| c.shifted(offset.1));
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
    let mut kernel = coeffs.map(Horizontal::new);
    for (y, out_row) in (first..last).zip(mid.chunks_exact_mut(row_len)) {
        let row = &src[y * stride..(y * stride + stride).min(src.len())];
        match &mut kernel {
            Some(k) => k.row(row, out_row),
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

/// `ImagingResampleHorizontal_8bpc` row by row, in the widest form this CPU runs: with AVX2
/// the weights are split once per pass for [`avx2::horizontal_row`] and a row's planes are kept
/// between rows.
struct Horizontal<'a> {
    c: &'a Coeffs,
    #[cfg(target_arch = "x86_64")]
    avx2: Option<(avx2::SplitWeights, Vec<u8>)>,
}

impl<'a> Horizontal<'a> {
    fn new(c: &'a Coeffs) -> Self {
        Self {
            c,
            #[cfg(target_arch = "x86_64")]
            avx2: use_avx2().then(|| (avx2::SplitWeights::new(c), Vec::new())),
        }
    }

    fn row(&mut self, src: &[u8], out: &mut [u8]) {
        #[cfg(target_arch = "x86_64")]
        if let Some((split, planes)) = &mut self.avx2 {
            // SAFETY: the CPU has AVX2 (use_avx2() said so in new()).
            return unsafe { avx2::horizontal_row(src, out, self.c, split, planes) };
        }
        horizontal_row_scalar(src, out, self.c)
    }
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

    /// [`super::vertical_row_generic`] 16 bytes of the row at a time, two taps a step: the
    /// bytes of two source rows interleaved and widened to 16 bits, `_mm256_madd_epi16` against
    /// the two taps' weights [`split`] gives each output's two products
    /// added, and the sums stay in registers over all the taps. The same sums as Pillow's (an
    /// odd tap count's last step pairs the last row with a weight of 0); the bytes past the
    /// last multiple of 16 go through the generic code.
    ///
    /// Kept in one piece: one pass whose sums stay in registers from the first tap to the store.
    #[target_feature(enable = "avx2")]
    pub(super) fn vertical_row(
        src: &[u8],
        stride: usize,
        start: usize,
        k: &[i32],
        acc: &mut [i32],
        out: &mut [u8],
    ) {
        let n = out.len();
        if k.is_empty() || n == 0 {
            return super::vertical_row_generic(src, stride, start, k, acc, out);
        }
        // Every tap's row of `n` bytes is inside `src`.
        assert!(
            start + (k.len() - 1) * stride + n <= src.len(),
            "taps inside the image"
        );
        // Per pair of taps: the high parts of both weights, then the low parts, as the 16-bit
        // pairs `madd` multiplies by (a missing second tap weighs 0).
        let parts = |i: usize| k.get(i).map_or((0, 0), |&w| split(w));
        let two = |a: i16, b: i16| (a as u16 as u32 | (b as u16 as u32) << 16) as i32;
        let pairs: Vec<(__m256i, __m256i)> = (0..k.len())
            .step_by(2)
            .map(|i| {
                let ((h0, l0), (h1, l1)) = (parts(i), parts(i + 1));
                (
                    _mm256_set1_epi32(two(h0, h1)),
                    _mm256_set1_epi32(two(l0, l1)),
                )
            })
            .collect();
        let whole16 = n / 16 * 16;
        let zero = _mm256_setzero_si256();
        for x in (0..whole16).step_by(16) {
            let (mut h0, mut l0, mut h1, mut l1) = (zero, zero, zero, zero);
            for (p, &(kh, kl)) in pairs.iter().enumerate() {
                let a = start + 2 * p * stride + x;
                // An odd count's last tap pairs its row with itself (at a weight of 0).
                let b = if 2 * p + 1 < k.len() { a + stride } else { a };
                // SAFETY: rows a and b have 16 bytes from x (x + 16 <= n, asserted above).
                let (ra, rb) = unsafe {
                    (
                        _mm_loadu_si128(src.as_ptr().add(a).cast()),
                        _mm_loadu_si128(src.as_ptr().add(b).cast()),
                    )
                };
                let low = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(ra, rb));
                let high = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(ra, rb));
                h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(low, kh));
                l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(low, kl));
                h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(high, kh));
                l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(high, kl));
            }
            let clip = |h, l| {
                _mm256_srai_epi32(
                    _mm256_add_epi32(whole(h, l), _mm256_set1_epi32(HALF)),
                    PRECISION_BITS as i32,
                )
            };
            // Packs work within 128-bit halves: [0-3 8-11 | 4-7 12-15] as 16 bits, put in
            // order, then as bytes [0-7 0-7 | 8-15 8-15], of which the two first quarters.
            let words = _mm256_permute4x64_epi64(
                _mm256_packs_epi32(clip(h0, l0), clip(h1, l1)),
                0b11_01_10_00,
            );
            let bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(words, words), 0b00_00_10_00);
            // SAFETY: out has 16 bytes from x.
            unsafe {
                _mm_storeu_si128(
                    out.as_mut_ptr().add(x).cast(),
                    _mm256_castsi256_si128(bytes),
                )
            };
        }
        if whole16 < n {
            super::vertical_row_generic(
                src,
                stride,
                start + whole16,
                k,
                &mut acc[whole16..],
                &mut out[whole16..],
            );
        }
    }

    /// One of Pillow's weights for `_mm256_madd_epi16`, which multiplies 16-bit lanes: `k` as
    /// `hi · 2^11 + lo` with `hi = k >> 11` and `lo = k & 0x7ff`, both of which fit 16 bits
    /// (|k| ≤ 2^22 · the largest normalised weight, well under 2^26).
    fn split(k: i32) -> (i16, i16) {
        let hi = i16::try_from(k >> 11).expect("a weight under 2^26");
        (hi, (k & 0x7ff) as i16)
    }

    /// A horizontal pass's weights, [`split`]: `stride` parts per output, zeros after its taps:
    /// 8 when every output has at most 8 taps (two outputs a vector), else a multiple of 16 (16
    /// taps a vector); one output of zeros at the end.
    pub(super) struct SplitWeights {
        stride: usize,
        hi: Vec<i16>,
        lo: Vec<i16>,
    }

    impl SplitWeights {
        pub(super) fn new(c: &Coeffs) -> Self {
            let stride = match c.stride {
                ..=8 => 8,
                n => n.next_multiple_of(16),
            };
            let mut hi = vec![0i16; (c.bounds.len() + 1) * stride];
            let mut lo = hi.clone();
            // The last output's parts (the zeros) are left as they are.
            let outputs = hi.chunks_exact_mut(stride).zip(lo.chunks_exact_mut(stride));
            for (xx, (hi, lo)) in (0..c.bounds.len()).zip(outputs) {
                for ((h, l), &k) in hi.iter_mut().zip(lo.iter_mut()).zip(c.taps(xx).1) {
                    (*h, *l) = split(k);
                }
            }
            Self { stride, hi, lo }
        }
    }

    /// [`super::horizontal_row_scalar`] on the row split into three planes (R, G, B, each
    /// followed by 16 zeros). `_mm256_madd_epi16` multiplies 16 pixels by 16 weights' high parts
    /// and by their low parts and adds pairs of products; each 32-bit lane's
    /// `hi_sum · 2^11 + lo_sum` is then its pixels' sum of pixel × weight, and the lanes of an
    /// output are added at the end ([`sums8`], [`pair_sums8`]). With at most 8 taps an output,
    /// a vector holds two outputs' taps (one in each 128-bit half); with more, 16 taps of one
    /// output a step. Every channel's sum has the scalar one's terms (the padding's weights are
    /// 0), and 32-bit integer addition and multiplication give the same bits in any order
    /// (wrapping arithmetic is exact modulo 2^32, and the whole sum fits in 32 bits as in
    /// Pillow).
    #[target_feature(enable = "avx2")]
    pub(super) fn horizontal_row(
        src: &[u8],
        out: &mut [u8],
        c: &Coeffs,
        split: &SplitWeights,
        planes: &mut Vec<u8>,
    ) {
        let w = src.len() / 3;
        let plane = w + 16;
        planes.clear();
        planes.resize(3 * plane, 0);
        let (r, rest) = planes.split_at_mut(plane);
        let (g, b) = rest.split_at_mut(plane);
        for (((p, r), g), b) in src.chunks_exact(3).zip(&mut *r).zip(&mut *g).zip(&mut *b) {
            (*r, *g, *b) = (p[0], p[1], p[2]);
        }
        let rgb = [&r[..], &g[..], &b[..]];
        for (block, px) in out.chunks_mut(3 * 8).enumerate() {
            let outputs = block * 8..block * 8 + px.len() / 3;
            let channels = if split.stride == 8 {
                narrow_block(rgb, outputs, c, split)
            } else {
                wide_block(rgb, outputs, c, split)
            };
            if px.len() == 24 {
                interleave(channels, px);
            } else {
                let mut pixels = [0; 24];
                interleave(channels, &mut pixels);
                px.copy_from_slice(&pixels[..px.len()]);
            }
        }
    }

    /// Eight R, eight G and eight B bytes (each in the low half of a vector) as R G B R G B...
    /// into the first 24 bytes of `out`.
    #[target_feature(enable = "avx2")]
    fn interleave([r, g, b]: [__m128i; 3], out: &mut [u8]) {
        // Byte i of the output is channel i % 3 of pixel i / 3: R at p and G at 8 + p of `rg`,
        // B at p of `b`; -1 selects a zero.
        const RG: [i8; 24] = {
            let mut m = [-1i8; 24];
            let mut i = 0;
            while i < 24 {
                m[i] = match i % 3 {
                    0 => (i / 3) as i8,
                    1 => 8 + (i / 3) as i8,
                    _ => -1,
                };
                i += 1;
            }
            m
        };
        const B: [i8; 24] = {
            let mut m = [-1i8; 24];
            let mut i = 2;
            while i < 24 {
                m[i] = (i / 3) as i8;
                i += 3;
            }
            m
        };
        let rg = _mm_unpacklo_epi64(r, g);
        assert!(out.len() >= 24, "room for eight pixels");
        // SAFETY: the masks hold 24 bytes (16 read from 0, 16 from 8) and `out` at least 24
        // (16 written at 0, 16 at 8).
        unsafe {
            let mask = |m: &[i8; 24], at: usize| _mm_loadu_si128(m.as_ptr().add(at).cast());
            let part = |at| {
                _mm_or_si128(
                    _mm_shuffle_epi8(rg, mask(&RG, at)),
                    _mm_shuffle_epi8(b, mask(&B, at)),
                )
            };
            _mm_storeu_si128(out.as_mut_ptr().cast(), part(0));
            // Bytes 8..24: the first 8 again, then the last 8.
            _mm_storeu_si128(out.as_mut_ptr().add(8).cast(), part(8));
        }
    }

    /// `hi · 2^11 + lo`, lane by lane.
    #[target_feature(enable = "avx2")]
    fn whole(hi: __m256i, lo: __m256i) -> __m256i {
        _mm256_add_epi32(_mm256_slli_epi32(hi, 11), lo)
    }

    /// Up to eight outputs of at most 8 taps, two a vector; per channel, those outputs' bytes.
    #[target_feature(enable = "avx2")]
    fn narrow_block(
        rgb: [&[u8]; 3],
        outputs: std::ops::Range<usize>,
        c: &Coeffs,
        split: &SplitWeights,
    ) -> [__m128i; 3] {
        let mut sums = [[_mm256_setzero_si256(); 4]; 3];
        for (pair, o) in outputs.clone().step_by(2).enumerate() {
            // A missing second output reads the first's pixels with the zero weights at the end.
            let x0 = c.bounds[o].0;
            let x1 = if o + 1 < outputs.end {
                c.bounds[o + 1].0
            } else {
                x0
            };
            // Taps end at most 8 after their first input, and each plane has 16 bytes of padding.
            assert!(x0.max(x1) + 8 <= rgb[0].len(), "taps inside the row");
            let at = o * 8;
            assert!(at + 16 <= split.hi.len(), "two outputs' weights");
            // SAFETY: the reads are inside the planes and the weights (asserted above).
            unsafe {
                let kh = _mm256_loadu_si256(split.hi.as_ptr().add(at).cast());
                let kl = _mm256_loadu_si256(split.lo.as_ptr().add(at).cast());
                for (ch, p) in rgb.iter().enumerate() {
                    let taps = _mm_unpacklo_epi64(
                        _mm_loadl_epi64(p.as_ptr().add(x0).cast()),
                        _mm_loadl_epi64(p.as_ptr().add(x1).cast()),
                    );
                    let px = _mm256_cvtepu8_epi16(taps);
                    sums[ch][pair] = whole(_mm256_madd_epi16(px, kh), _mm256_madd_epi16(px, kl));
                }
            }
        }
        sums.map(|v| pair_sums8(v))
    }

    /// Up to eight outputs, 16 taps a step; per channel, those outputs' bytes.
    #[target_feature(enable = "avx2")]
    fn wide_block(
        [r, g, b]: [&[u8]; 3],
        outputs: std::ops::Range<usize>,
        c: &Coeffs,
        split: &SplitWeights,
    ) -> [__m128i; 3] {
        let zero = _mm256_setzero_si256();
        let (mut sr, mut sg, mut sb) = ([zero; 8], [zero; 8], [zero; 8]);
        for (o, xx) in outputs.enumerate() {
            let (xmin, n) = c.bounds[xx];
            let steps = n.div_ceil(16);
            // xmin + n <= w and 16 * steps < n + 16: every read below is inside a plane.
            assert!(xmin + 16 * steps <= r.len(), "taps inside the row");
            let hi = &split.hi[xx * split.stride..(xx + 1) * split.stride];
            let lo = &split.lo[xx * split.stride..(xx + 1) * split.stride];
            let (mut hr, mut hg, mut hb) = (zero, zero, zero);
            let (mut lr, mut lg, mut lb) = (zero, zero, zero);
            for j in 0..steps {
                let at = xmin + 16 * j;
                // SAFETY: hi and lo hold 16 i16 from 16 * j (16 * steps <= stride) and each
                // plane has 16 bytes from `at` (asserted above).
                unsafe {
                    let kh = _mm256_loadu_si256(hi.as_ptr().add(16 * j).cast());
                    let kl = _mm256_loadu_si256(lo.as_ptr().add(16 * j).cast());
                    let load =
                        |p: &[u8]| _mm256_cvtepu8_epi16(_mm_loadu_si128(p.as_ptr().add(at).cast()));
                    let (pr, pg, pb) = (load(r), load(g), load(b));
                    hr = _mm256_add_epi32(hr, _mm256_madd_epi16(pr, kh));
                    lr = _mm256_add_epi32(lr, _mm256_madd_epi16(pr, kl));
                    hg = _mm256_add_epi32(hg, _mm256_madd_epi16(pg, kh));
                    lg = _mm256_add_epi32(lg, _mm256_madd_epi16(pg, kl));
                    hb = _mm256_add_epi32(hb, _mm256_madd_epi16(pb, kh));
                    lb = _mm256_add_epi32(lb, _mm256_madd_epi16(pb, kl));
                }
            }
            (sr[o], sg[o], sb[o]) = (whole(hr, lr), whole(hg, lg), whole(hb, lb));
        }
        [sums8(sr), sums8(sg), sums8(sb)]
    }

    /// The sums of the lanes of each of eight vectors, clipped: two rounds of pairwise adds
    /// within the 128-bit halves leave each half's sums of v0..v3 and of v4..v7, and the halves
    /// are then added.
    #[target_feature(enable = "avx2")]
    fn sums8(v: [__m256i; 8]) -> __m128i {
        let t0 = _mm256_hadd_epi32(v[0], v[1]);
        let t1 = _mm256_hadd_epi32(v[2], v[3]);
        let t2 = _mm256_hadd_epi32(v[4], v[5]);
        let t3 = _mm256_hadd_epi32(v[6], v[7]);
        let (u0, u1) = (_mm256_hadd_epi32(t0, t1), _mm256_hadd_epi32(t2, t3));
        clip8x8(_mm256_add_epi32(
            _mm256_permute2x128_si256(u0, u1, 0x20),
            _mm256_permute2x128_si256(u0, u1, 0x31),
        ))
    }

    /// The sums of each 128-bit half's lanes of four vectors (outputs 2i and 2i + 1 in vector
    /// i), clipped: two rounds of pairwise adds leave [o0 o2 o4 o6 | o1 o3 o5 o7], put in order.
    #[target_feature(enable = "avx2")]
    fn pair_sums8(v: [__m256i; 4]) -> __m128i {
        let t0 = _mm256_hadd_epi32(v[0], v[1]);
        let t1 = _mm256_hadd_epi32(v[2], v[3]);
        let u = _mm256_hadd_epi32(t0, t1);
        clip8x8(_mm256_permutevar8x32_epi32(
            u,
            _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7),
        ))
    }

    /// Pillow's `clip8(HALF + sum)` of eight sums, as the low 8 bytes of a vector: >> 22, then
    /// clamped to 0..=255 by the two saturating packs, after which each 128-bit half's first
    /// four bytes are its four outputs, brought together.
    #[target_feature(enable = "avx2")]
    fn clip8x8(sums: __m256i) -> __m128i {
        let shifted = _mm256_srai_epi32(
            _mm256_add_epi32(sums, _mm256_set1_epi32(HALF)),
            PRECISION_BITS as i32,
        );
        let packed = _mm256_packus_epi16(_mm256_packs_epi32(shifted, shifted), shifted);
        _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
            packed,
            _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0),
        ))
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
        // Odd and even tap counts, up- and downscaling, a pair read at the very end of a row,
        // many taps (a 16 MP photo's side to 256: 70 of them), an upscale whose weights include
        // exactly 2^22 (output centres on input centres), output counts that leave a part of
        // eight and an odd one out; Lanczos and bilinear (at most 8 taps an output: two outputs
        // a vector), so both kernels.
        for (i, (w, o)) in [
            (4624, 256),
            (3, 9),
            (1000, 256),
            (257, 256),
            (33, 7),
            (5, 64),
            (3, 1),
            (600, 599),
            (500, 223),
            (375, 224),
            (161, 224),
        ]
        .into_iter()
        .enumerate()
        {
            let img = noise(w, 2, i as u64 + 1);
            let row = &img.as_raw()[..w as usize * 3];
            let (mut a, mut b) = (vec![0u8; o * 3], vec![0u8; o * 3]);
            for filter in [Filter::Lanczos, Filter::Bilinear] {
                let c = Coeffs::new(w as usize, o, filter);
                horizontal_row_scalar(row, &mut a, &c);
                let split = avx2::SplitWeights::new(&c);
                // SAFETY: use_avx2() said yes.
                unsafe { avx2::horizontal_row(row, &mut b, &c, &split, &mut Vec::new()) };
                assert_eq!(a, b, "horizontal {w} -> {o}, {filter:?}");
            }
            // Even and odd tap counts (the last one paired with a weight of 0), negative
            // weights, rows of whole 16-byte parts and with a rest.
            let rows = noise(o as u32, 40, i as u64 + 7);
            let k = &Coeffs::new(100, 37, Filter::Lanczos).weights[..];
            for n in [40, 7, 1] {
                let taps = &k[..n];
                let rows = &rows.as_raw()[..taps.len() * o * 3];
                let mut acc = vec![0; o * 3];
                let stride = o * 3;
                vertical_row_generic(rows, stride, 0, taps, &mut acc, &mut a);
                // SAFETY: as above.
                unsafe { avx2::vertical_row(rows, stride, 0, taps, &mut acc, &mut b) };
                assert_eq!(a, b, "vertical, {} taps, {o} outputs", taps.len());
            }
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
