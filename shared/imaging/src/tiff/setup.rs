use super::{Ifd, bad};
use crate::Result;

const II: bool = false;

/// TiffImagePlugin's OPEN_INFO: (big-endian, photometric, sample format, bits per sample,
/// extra samples) with fill order 1 → (mode, raw mode). Fill order 2 has the same entries where
/// [`reversible`] says so (libtiff reverses the bits; the raw path reverses them itself).
fn open_info(
    big: bool,
    photo: u16,
    format: &[u16],
    bps: &[u16],
    extra: &[u16],
) -> Option<(&'static str, &'static str)> {
    let one = |b: u16| bps == [b];
    let n8 = |n: usize| bps.len() == n && bps.iter().all(|&b| b == 8);
    let n16 = |n: usize| bps.len() == n && bps.iter().all(|&b| b == 16);
    Some(match (photo, format, extra) {
        (0 | 1, [1], []) if one(1) => ("1", if photo == 0 { "1;I" } else { "1" }),
        (0 | 1, [1], []) if one(2) => ("L", if photo == 0 { "L;2I" } else { "L;2" }),
        (0 | 1, [1], []) if one(4) => ("L", if photo == 0 { "L;4I" } else { "L;4" }),
        (0 | 1, [1], []) if one(8) => ("L", if photo == 0 { "L;I" } else { "L" }),
        (1, [2], []) if one(8) => ("L", "L"),
        (1, [1], []) if one(12) && big == II => ("I;16", "I;12"),
        (0, [1], []) if one(16) && big == II => ("I;16", "I;16"),
        (1, [1], []) if one(16) => {
            if big {
                ("I;16B", "I;16B")
            } else {
                ("I;16", "I;16")
            }
        }
        (1, [2], []) if one(16) => ("I", if big { "I;16BS" } else { "I;16S" }),
        (0 | 1, [3], []) if one(32) => ("F", if big { "F;32BF" } else { "F;32F" }),
        (1, [1], []) if one(32) && big == II => ("I", "I;32N"),
        (1, [2], []) if one(32) => ("I", if big { "I;32BS" } else { "I;32S" }),
        (1, [1], [0]) if n8(2) => ("L", "LX"),
        (1, [1], [1]) if n8(2) => ("La", "La"),
        (1, [1], [2]) if n8(2) => ("LA", "LA"),
        (2, [1], []) if n8(3) => ("RGB", "RGB"),
        (2, [1], []) if n8(4) => ("RGBA", "RGBA"),
        (2, [1], [0]) if n8(4) => ("RGB", "RGBX"),
        (2, [1], [0, 0]) if n8(5) => ("RGB", "RGBXX"),
        (2, [1], [0, 0, 0]) if n8(6) => ("RGB", "RGBXXX"),
        (2, [1], [1]) if n8(4) => ("RGBA", "RGBa"),
        (2, [1], [1, 0]) if n8(5) => ("RGBA", "RGBaX"),
        (2, [1], [1, 0, 0]) if n8(6) => ("RGBA", "RGBaXX"),
        (2, [1], [2] | [999]) if n8(4) => ("RGBA", "RGBA"),
        (2, [1], [2, 0]) if n8(5) => ("RGBA", "RGBAX"),
        (2, [1], [2, 0, 0]) if n8(6) => ("RGBA", "RGBAXX"),
        (2, [1], []) if n16(3) => ("RGB", if big { "RGB;16B" } else { "RGB;16L" }),
        (2, [1], [] | [2]) if n16(4) => ("RGBA", if big { "RGBA;16B" } else { "RGBA;16L" }),
        (2, [1], [0]) if n16(4) => ("RGB", if big { "RGBX;16B" } else { "RGBX;16L" }),
        (2, [1], [1]) if n16(4) => ("RGBA", if big { "RGBa;16B" } else { "RGBa;16L" }),
        (3, [1], []) if one(1) => ("P", "P;1"),
        (3, [1], []) if one(2) => ("P", "P;2"),
        (3, [1], []) if one(4) => ("P", "P;4"),
        (3, [1], []) if one(8) => ("P", "P"),
        (3, [1], [0]) if n8(2) => ("P", "PX"),
        (3, [1], [2]) if n8(2) => ("PA", "PA"),
        (5, [1], []) if n8(4) => ("CMYK", "CMYK"),
        (5, [1], [0]) if n8(5) => ("CMYK", "CMYKX"),
        (5, [1], [0, 0]) if n8(6) => ("CMYK", "CMYKXX"),
        (5, [1], []) if n16(4) => ("CMYK", if big { "CMYK;16B" } else { "CMYK;16L" }),
        (6, [1], []) if one(8) => ("L", "L"),
        (6, [1], []) if n8(3) => ("YCbCr", "YCbCr"),
        (8, [1], []) if n8(3) => ("LAB", "LAB"),
        _ => return None,
    })
}

/// What the directory says of the image, as TiffImagePlugin `_setup` works it out: its size, its
/// mode and raw mode, and the layout the readers follow.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Setup {
    /// The stored size (before the orientation), both at least 1.
    pub(super) width: u32,
    pub(super) height: u32,
    pub(super) orientation: i64,
    /// Pillow's mode, and the raw mode its samples are unpacked with (on the libtiff branch,
    /// as libtiff hands them over: YCbCr as RGB, 16-bit samples in native order).
    pub(super) mode: &'static str,
    pub(super) raw: &'static str,
    pub(super) compression: i64,
    pub(super) planar: i64,
    pub(super) photo: i64,
    pub(super) fillorder: i64,
    pub(super) bps: Vec<i64>,
    pub(super) extra: Vec<i64>,
    pub(super) bps_count: usize,
    /// The colour map of a `P` or `PA` image.
    pub(super) palette: Option<Vec<i64>>,
}

impl Setup {
    /// Uncompressed: Pillow's own raw decoder reads the rows; else libtiff.
    pub(super) fn raw_path(&self) -> bool {
        self.compression == 1
    }

    /// A compressed YCbCr file libtiff reads as an RGBA raster (all but JPEG-compressed
    /// contiguous ones).
    pub(super) fn ycbcr_rgba(&self) -> bool {
        !self.raw_path() && self.photo == 6 && !(self.compression == 7 && self.planar == 1)
    }

    /// The size as the image comes out: orientations 5 to 8 swap the sides.
    pub(super) fn upright(&self) -> (u32, u32) {
        if (5..=8).contains(&self.orientation) {
            (self.height, self.width)
        } else {
            (self.width, self.height)
        }
    }
}

/// TiffImagePlugin._setup, step by step: the mode, raw mode and layout from the directory's
/// tags, or why Pillow refuses the file. Reads no pixel.
pub(super) fn setup(ifd: &Ifd) -> Result<Setup> {
    let compression = compression(ifd)?;
    let planar = ifd.get(284, 1);
    let photo = photometric(ifd, compression);
    let fillorder = ifd.get(266, 1);
    let (Some(Ok(w)), Some(Ok(h))) = (ifd.single(256), ifd.single(257)) else {
        return Err(bad("missing or invalid dimensions"));
    };
    let orientation = ifd.get(274, 1);
    let samples = Samples::read(ifd, compression, photo, planar)?;
    let (mut mode, mut raw) = modes(ifd.big_endian, photo, fillorder, &samples)?;
    if compression != 1 {
        (mode, raw) = libtiff_modes(mode, raw, photo, compression, planar);
    }
    let palette = colour_map(ifd, mode)?;
    let (width, height) = match (u32::try_from(w), u32::try_from(h)) {
        (Ok(w), Ok(h)) if w > 0 && h > 0 => (w, h),
        _ => return Err(bad(format!("image of {w}x{h} pixels"))),
    };
    Ok(Setup {
        width,
        height,
        orientation,
        mode,
        raw,
        compression,
        planar,
        photo,
        fillorder,
        bps: samples.bps,
        extra: samples.extra,
        bps_count: samples.bps_count,
        palette,
    })
}

/// The Compression tag (1, none, by default), or why Pillow refuses the file.
fn compression(ifd: &Ifd) -> Result<i64> {
    if ifd.tags.contains_key(&0xBC01) {
        return Err(bad("Windows Media Photo files not yet supported"));
    }
    let compression = ifd.get(259, 1);
    if !matches!(
        compression,
        1..=8 | 32771 | 32773 | 32809 | 32946 | 34676 | 34677 | 34925 | 50000 | 50001
    ) {
        return Err(bad(format!("unknown compression {compression}")));
    }
    Ok(compression)
}

/// The PhotometricInterpretation tag as `_setup` reads it. Old-style JPEG is YCbCr whatever
/// the tag says. A PhotometricInterpretation of more than one value is dropped (Pillow's
/// `_setitem` keeps the first value of other single-valued tags, but not of this one), so it
/// counts as absent.
fn photometric(ifd: &Ifd, compression: i64) -> i64 {
    match ifd.tuple(262) {
        _ if compression == 6 => 6,
        Some(Ok(v)) if v.len() > 1 => 0,
        _ => ifd.get(262, 0),
    }
}

/// The samples as `_setup` reconciles SampleFormat, BitsPerSample, ExtraSamples and
/// SamplesPerPixel: the formats (one where all agree), a bit depth per sample, the extra
/// samples, and the number of bands the mode's raw planes count.
struct Samples {
    format: Vec<i64>,
    bps: Vec<i64>,
    extra: Vec<i64>,
    bps_count: usize,
}

impl Samples {
    fn read(ifd: &Ifd, compression: i64, photo: i64, planar: i64) -> Result<Self> {
        let ints = |tag, default: &[i64]| match ifd.tuple(tag) {
            Some(Ok(v)) => Ok(v.to_vec()),
            Some(Err(())) => Err(bad("unknown pixel mode")),
            None => Ok(default.to_vec()),
        };
        let mut format = ints(339, &[1])?;
        if format.len() > 1 && format.iter().all(|&f| f == format[0]) {
            format.truncate(1);
        }
        let mut bps = ints(258, &[1])?;
        let mut extra = ints(338, &[])?;
        let default_samples = if compression == 6 && matches!(photo, 2 | 6) {
            3
        } else {
            1
        };
        let mut samples = ifd.get(277, default_samples);
        let mut bps_count: usize = match photo {
            2 | 6 | 8 => 3,
            5 => 4,
            _ => 1,
        };
        if planar == 2 && !extra.is_empty() && extra.iter().all(|&e| e == 0) {
            // Unspecified extra planes at the end are ignored.
            bps.truncate(bps.len().saturating_sub(extra.len()));
            samples -= extra.len() as i64;
            extra.clear();
        }
        bps_count += extra.len();
        if samples > 6 {
            return Err(bad("Invalid value for samples per pixel"));
        }
        if samples < 0 {
            // A signed tag, or more unspecified extra planes than samples: Pillow's tuple
            // slicing ends in "unknown data organization" too.
            return Err(bad("unknown data organization"));
        }
        if (samples as usize) < bps.len() {
            bps.truncate(samples as usize);
        } else if samples as usize > bps.len() && bps.len() == 1 {
            bps = vec![bps[0]; samples as usize];
        }
        if bps.len() != samples as usize {
            return Err(bad("unknown data organization"));
        }
        Ok(Samples {
            format,
            bps,
            extra,
            bps_count,
        })
    }
}

/// OPEN_INFO's mode and raw mode for the samples (fill order 2 only where [`reversible`]), or
/// "unknown pixel mode".
fn modes(
    big_endian: bool,
    photo: i64,
    fillorder: i64,
    s: &Samples,
) -> Result<(&'static str, &'static str)> {
    let narrow =
        |v: &[i64]| -> Option<Vec<u16>> { v.iter().map(|&x| u16::try_from(x).ok()).collect() };
    let key = (|| {
        let (photo, format) = (u16::try_from(photo).ok()?, narrow(&s.format)?);
        let (bps, extra) = (narrow(&s.bps)?, narrow(&s.extra)?);
        let found = open_info(big_endian, photo, &format, &bps, &extra)?;
        match fillorder {
            1 => Some(found),
            2 if reversible(big_endian, photo, &bps, &extra) => Some(found),
            _ => None,
        }
    })();
    key.ok_or_else(|| bad("unknown pixel mode"))
}

/// The mode and raw mode on the libtiff branch (compressed files), as libtiff hands the samples
/// over: YCbCr as RGB (libjpeg's RGB for a JPEG-compressed contiguous file, else an RGBA
/// raster), 16-bit samples in native order.
fn libtiff_modes(
    mode: &'static str,
    raw: &'static str,
    photo: i64,
    compression: i64,
    planar: i64,
) -> (&'static str, &'static str) {
    if photo == 6 {
        let jpeg_rgb = compression == 7 && planar == 1;
        ("RGB", if jpeg_rgb { "RGB" } else { "RGBX" })
    } else if let Some(stem) = raw.strip_suffix(";16B").or(raw.strip_suffix(";16L")) {
        (mode, native16(stem))
    } else if raw == "I;16" {
        (mode, "I;16N")
    } else {
        (mode, raw)
    }
}

/// The ColorMap of a `P` or `PA` image (None for other modes), or Pillow's refusal of a palette
/// image without one.
fn colour_map(ifd: &Ifd, mode: &str) -> Result<Option<Vec<i64>>> {
    if !matches!(mode, "P" | "PA") {
        return Ok(None);
    }
    match ifd.tuple(320) {
        Some(Ok(map)) => Ok(Some(map.to_vec())),
        _ => Err(bad("palette image without a colour map")),
    }
}

/// Whether OPEN_INFO has the key with fill order 2 (only then does Pillow open such a file).
fn reversible(big: bool, photo: u16, bps: &[u16], extra: &[u16]) -> bool {
    match (photo, bps, extra) {
        (0 | 1 | 3, [1 | 2 | 4 | 8], []) => true,
        (1, [16], []) => !big,
        (2, [8, 8, 8], []) => true,
        _ => false,
    }
}

fn native16(stem: &str) -> &'static str {
    match stem {
        "RGB" => "RGB;16N",
        "RGBA" => "RGBA;16N",
        "RGBX" => "RGBX;16N",
        "RGBa" => "RGBa;16N",
        "CMYK" => "CMYK;16N",
        _ => "I;16N",
    }
}
