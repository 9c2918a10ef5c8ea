use crate::{Error, Result};

/// Bits per pixel of a raw mode (Pillow's unpacker table), for its row size.
pub(super) fn raw_bits(raw: &str) -> u32 {
    match raw {
        "1" | "1;I" | "P;1" => 1,
        "L;2" | "L;2I" | "P;2" => 2,
        "L;4" | "L;4I" | "P;4" => 4,
        "L" | "L;I" | "P" => 8,
        "I;12" => 12,
        "I;16" | "I;16N" | "I;16B" | "I;16S" | "I;16BS" | "LX" | "La" | "LA" | "PX" | "PA" => 16,
        "RGB" | "YCbCr" | "LAB" => 24,
        "RGBXX" | "RGBaX" | "RGBAX" | "CMYKX" => 40,
        "RGBXXX" | "RGBaXX" | "RGBAXX" | "CMYKXX" | "RGB;16L" | "RGB;16B" | "RGB;16N" => 48,
        r if r.contains(";16") => 64,
        _ => 32, // RGBX, RGBa, RGBA, CMYK, I;32*, F;32*
    }
}

/// One pixel in Pillow's storage for the mode, in its 4 bytes: 8-bit modes in `v[0]`, multi-band
/// modes in `v[0..4]`, 32-bit modes as [`Px::i`] or [`Px::f`] (a mode has one of the three).
#[derive(Clone, Copy, Default)]
pub(super) struct Px {
    pub(super) v: [u8; 4],
}

impl Px {
    pub(super) fn int(i: i32) -> Px {
        Px { v: i.to_ne_bytes() }
    }

    pub(super) fn float(f: f32) -> Px {
        Px { v: f.to_ne_bytes() }
    }

    pub(super) fn i(self) -> i32 {
        i32::from_ne_bytes(self.v)
    }

    pub(super) fn f(self) -> f32 {
        f32::from_ne_bytes(self.v)
    }
}

/// Pillow's unpacker for `raw` (Unpack.c), pixel `x` of a row: a grey or palette one, an integer
/// or float one, or a multi-band one.
pub(super) fn unpack(raw: &str, row: &[u8], x: usize) -> Px {
    unpack_grey(raw, row, x)
        .or_else(|| unpack_number(raw, row, x))
        .or_else(|| unpack_bands(raw, row, x))
        .unwrap_or_else(|| unreachable!("raw mode {raw} has no unpacker"))
}

/// The grey and palette unpackers of 1 to 8 bits, with or without alpha: the sample in `v[0]`,
/// alpha in `v[3]`.
fn unpack_grey(raw: &str, row: &[u8], x: usize) -> Option<Px> {
    let bit = |bits: usize| bits_at(row, x, bits);
    let v = match raw {
        "1" => [0, 255][bit(1) as usize],
        "1;I" => [255, 0][bit(1) as usize],
        "L;2" => bit(2) * 0x55,
        "L;2I" => 0xFF - bit(2) * 0x55,
        "L;4" => bit(4) * 0x11,
        "L;4I" => 0xFF - bit(4) * 0x11,
        "L" | "P" => row[x],
        "L;I" => !row[x],
        "P;1" => bit(1),
        "P;2" => bit(2),
        "P;4" => bit(4),
        "LX" | "PX" => row[2 * x],
        "La" | "LA" | "PA" => {
            return Some(Px {
                v: [row[2 * x], 0, 0, row[2 * x + 1]],
            });
        }
        _ => return None,
    };
    Some(Px { v: [v, 0, 0, 0] })
}

/// The integer and float unpackers (12, 16 and 32 bits): a [`Px::int`] or a [`Px::float`].
fn unpack_number(raw: &str, row: &[u8], x: usize) -> Option<Px> {
    Some(match raw {
        // unpackI12_I16: pairs of pixels in three bytes, big-endian nibbles.
        "I;12" => {
            let at = x / 2 * 3;
            Px::int(if x.is_multiple_of(2) {
                ((row[at] as i32) << 4) | (row[at + 1] as i32 >> 4)
            } else {
                (((row[at + 1] & 0x0F) as i32) << 8) | row[at + 2] as i32
            })
        }
        "I;16" | "I;16N" => Px::int(u16_at(row, 2 * x, false) as i32),
        "I;16B" => Px::int(u16_at(row, 2 * x, true) as i32),
        "I;16S" => Px::int(u16_at(row, 2 * x, false) as i16 as i32),
        "I;16BS" => Px::int(u16_at(row, 2 * x, true) as i16 as i32),
        "I;32N" | "I;32S" => Px::int(u32_at(row, 4 * x, false) as i32),
        "I;32BS" => Px::int(u32_at(row, 4 * x, true) as i32),
        "F;32F" => Px::float(f32::from_bits(u32_at(row, 4 * x, false))),
        "F;32BF" => Px::float(f32::from_bits(u32_at(row, 4 * x, true))),
        _ => return None,
    })
}

/// The unpackers of 3 to 6 bands of 8 or 16 bits (RGB, YCbCr, LAB, RGBX, RGBA, RGBa, CMYK and
/// their forms with unused bands): the first four bands in `v`.
fn unpack_bands(raw: &str, row: &[u8], x: usize) -> Option<Px> {
    let v = match raw {
        "RGB" | "YCbCr" => stride(row, x, 3, 3),
        // ImagingUnpackLAB: a and b are signed in the file, offset by 128 in Pillow.
        "LAB" => [row[3 * x], row[3 * x + 1] ^ 128, row[3 * x + 2] ^ 128, 0],
        "RGBX" | "RGBA" | "CMYK" => stride(row, x, 4, 4),
        "RGBa" => unpremultiply(stride(row, x, 4, 4)),
        "RGBXX" | "RGBAX" | "CMYKX" => stride(row, x, 5, 4),
        "RGBaX" => unpremultiply(stride(row, x, 5, 4)),
        "RGBXXX" | "RGBAXX" | "CMYKXX" => stride(row, x, 6, 4),
        "RGBaXX" => unpremultiply(stride(row, x, 6, 4)),
        "RGB;16L" | "RGB;16N" => hi16(row, x, 3, false),
        "RGB;16B" => hi16(row, x, 3, true),
        "RGBA;16L" | "RGBA;16N" | "RGBX;16L" | "RGBX;16N" | "CMYK;16L" | "CMYK;16N" => {
            hi16(row, x, 4, false)
        }
        "RGBA;16B" | "RGBX;16B" | "CMYK;16B" => hi16(row, x, 4, true),
        "RGBa;16L" | "RGBa;16N" => unpremultiply(hi16(row, x, 4, false)),
        "RGBa;16B" => unpremultiply(hi16(row, x, 4, true)),
        _ => return None,
    };
    Some(Px { v })
}

/// Sample `x` of `bits` bits (1, 2 or 4), the first in the high bits of a byte.
fn bits_at(row: &[u8], x: usize, bits: usize) -> u8 {
    let at = x * bits;
    (row[at / 8] >> (8 - bits - at % 8)) & ((1 << bits) - 1)
}

fn u16_at(row: &[u8], i: usize, big: bool) -> u16 {
    let b = [row[i], row[i + 1]];
    if big {
        u16::from_be_bytes(b)
    } else {
        u16::from_le_bytes(b)
    }
}

fn u32_at(row: &[u8], i: usize, big: bool) -> u32 {
    let b = [row[i], row[i + 1], row[i + 2], row[i + 3]];
    if big {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

/// RGBa: unpremultiplied with integer division, clipped (unpackRGBa).
fn unpremultiply(c: [u8; 4]) -> [u8; 4] {
    match c[3] as u32 {
        0 => [0; 4],
        255 => c,
        a => {
            let u = |v: u8| (v as u32 * 255 / a).min(255) as u8;
            [u(c[0]), u(c[1]), u(c[2]), c[3]]
        }
    }
}

/// The first `take` bytes of pixel `x` of `n` bytes.
fn stride(row: &[u8], x: usize, n: usize, take: usize) -> [u8; 4] {
    let mut v = [0u8; 4];
    v[..take].copy_from_slice(&row[x * n..x * n + take]);
    v
}

/// The high bytes of the first four of pixel `x`'s `n` 16-bit samples.
fn hi16(row: &[u8], x: usize, n: usize, big: bool) -> [u8; 4] {
    let mut v = [0u8; 4];
    for (c, slot) in v.iter_mut().enumerate().take(n.min(4)) {
        *slot = (u16_at(row, x * n * 2 + c * 2, big) >> 8) as u8;
    }
    v
}

/// Pillow's number of bands of a mode (`im->bands`).
pub(super) fn bands(mode: &str) -> usize {
    match mode {
        "LA" | "La" | "PA" => 2,
        "RGB" | "YCbCr" | "LAB" => 3,
        "RGBA" | "CMYK" => 4,
        _ => 1,
    }
}

/// [`to_rgb`] over an image whose rows `row(y, pixels)` fills, into one buffer, a band of rows
/// at a time.
pub(super) fn rows_to_rgb(
    mode: &'static str,
    w: usize,
    h: usize,
    colormap: Option<&[i64]>,
    mut row: impl FnMut(usize, &mut [Px]),
) -> Result<Vec<u8>> {
    let band = (65_536 / w).clamp(1, h);
    let mut rgb = Vec::with_capacity(w * h * 3);
    let mut pixels = vec![Px::default(); w * band];
    for y0 in (0..h).step_by(band) {
        let rows = band.min(h - y0);
        for (dy, r) in pixels.chunks_exact_mut(w).take(rows).enumerate() {
            row(y0 + dy, r);
        }
        rgb.extend_from_slice(&to_rgb(mode, &pixels[..rows * w], colormap)?);
    }
    Ok(rgb)
}

/// `convert('RGB')` from Pillow's storage of `mode`.
fn to_rgb(mode: &'static str, pixels: &[Px], colormap: Option<&[i64]>) -> Result<Vec<u8>> {
    // TiffImagePlugin: `b // 256` of each entry, as an "RGB;L" palette (all reds, then greens,
    // then blues).
    let palette = || -> Vec<[u8; 3]> {
        let map = colormap.unwrap_or_default();
        let n = map.len() / 3;
        let at = |i: usize| map[i].div_euclid(256).clamp(0, 255) as u8;
        (0..256)
            .map(|i| match i < n {
                true => [at(i), at(n + i), at(2 * n + i)],
                false => [0; 3],
            })
            .collect()
    };
    let grey = |v: u8| [v; 3];
    let out: Vec<[u8; 3]> = match mode {
        "1" | "L" | "LA" => pixels.iter().map(|p| grey(p.v[0])).collect(),
        "P" | "PA" => {
            let pal = palette();
            pixels.iter().map(|p| pal[p.v[0] as usize]).collect()
        }
        // I;16 and I clip to 0..255 (Pillow's I;16 → RGB and I → RGB).
        "I;16" | "I;16B" | "I" => pixels
            .iter()
            .map(|p| grey(p.i().clamp(0, 255) as u8))
            .collect(),
        // f2l: clipped, then truncated.
        "F" => pixels
            .iter()
            .map(|p| {
                let f = p.f();
                grey(if f <= 0.0 {
                    0
                } else if f >= 255.0 {
                    255
                } else {
                    f as u8
                })
            })
            .collect(),
        "RGB" | "RGBA" => pixels.iter().map(|p| [p.v[0], p.v[1], p.v[2]]).collect(),
        "CMYK" => pixels
            .iter()
            .map(|p| crate::pixels::cmyk2rgb(p.v))
            .collect(),
        "YCbCr" => pixels.iter().map(|p| ycbcr2rgb(p.v)).collect(),
        "LAB" => {
            let lab: Vec<[u8; 3]> = pixels.iter().map(|p| [p.v[0], p.v[1], p.v[2]]).collect();
            crate::lab::to_rgb(&lab)?
        }
        // Pillow has no La → RGB conversion.
        "La" => {
            return Err(Error::Unsupported(
                "TIFF mode La: Pillow cannot convert it to RGB".into(),
            ));
        }
        other => return Err(Error::Unsupported(format!("TIFF mode {other}"))),
    };
    Ok(out.into_iter().flatten().collect())
}

/// ImagingConvertYCbCr2RGB (libImaging/ConvertYCbCr.c): tables of the JFIF coefficients × 64,
/// each entry C's `(int)(v + 0.5)` (towards zero), summed, shifted back arithmetically, clipped.
/// Identical to Pillow 13 on all 2^24 inputs (checked once with numpy against `convert`).
pub(super) fn ycbcr2rgb(p: [u8; 4]) -> [u8; 3] {
    let (y, cb, cr) = (p[0] as i32, p[1] as i32 - 128, p[2] as i32 - 128);
    let t = |c: i32, k: f64| (c as f64 * k * 64.0 + 0.5) as i32;
    let r = y + (t(cr, 1.402) >> 6);
    let g = y + ((t(cb, -0.34414) + t(cr, -0.71414)) >> 6);
    let b = y + (t(cb, 1.772) >> 6);
    [r, g, b].map(|v| v.clamp(0, 255) as u8)
}
