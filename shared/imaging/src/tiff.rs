//! TIFF as Pillow 13 reads it: the mode and raw mode chosen from the tags exactly as
//! TiffImagePlugin `_setup` chooses them (its `OPEN_INFO` table), the samples read through libtiff
//! the way libImaging/TiffDecode.c reads them (src/tiff.c), unpacked with Pillow's unpackers
//! (libImaging/Unpack.c) and converted with `convert('RGB')`'s rules:
//!
//! - compressed files go through libtiff: samples in native byte order, fill order undone, YCbCr
//!   upsampled to RGB by libtiff (or by libjpeg for JPEG-compressed contiguous files);
//! - uncompressed files go through Pillow's own raw decoder: rows read from the file at each
//!   strip's or tile's offset (libtiff only says where), whatever the byte counts say; a YCbCr file
//!   is read as stored (no subsampling) and converted with Pillow's YCbCr tables;
//! - the Orientation tag is applied after loading (TiffImageFile.load_end calls
//!   `ImageOps.exif_transpose`), so the image comes out upright and carries no orientation;
//! - Pillow's own quirks are kept: a big-endian signed or float file that libtiff decompresses is
//!   unpacked as big-endian although libtiff gave native order (`I;16BS`, `I;32BS`, `F;32BF` keep
//!   their raw mode on that path), and `La` images are refused at `convert('RGB')`; `LAB` goes
//!   through LittleCMS as in Pillow (lab.rs).

use std::ffi::{CStr, c_char, c_int, c_uint};

use crate::{Error, Result};

fn bad(what: impl std::fmt::Display) -> Error {
    Error::Decode(format!("TIFF: {what}"))
}

#[repr(C)]
struct Handle {
    _private: [u8; 0],
}

unsafe extern "C" {
    fn shk_tiff_open(data: *const u8, size: usize) -> *mut Handle;
    fn shk_tiff_message(t: *const Handle) -> *const c_char;
    fn shk_tiff_close(t: *mut Handle);
    fn shk_tiff_read_rgba(t: *mut Handle, width: u32, height: u32, out: *mut u32) -> c_int;
    fn shk_tiff_read(
        t: *mut Handle,
        width: u32,
        height: u32,
        planes: c_int,
        bits: c_uint,
        jpeg_rgb: c_int,
        out: *mut u8,
        row_bytes: usize,
    ) -> c_int;
}

/// An open file; closed on drop.
struct Tiff(*mut Handle);

impl Drop for Tiff {
    fn drop(&mut self) {
        // SAFETY: the handle came from shk_tiff_open and is closed once.
        unsafe { shk_tiff_close(self.0) }
    }
}

impl Tiff {
    fn error(&self, what: &str) -> Error {
        // SAFETY: the handle is alive; the message is a NUL-terminated buffer inside it.
        let text = unsafe { CStr::from_ptr(shk_tiff_message(self.0)) };
        match text.to_string_lossy() {
            t if t.is_empty() => bad(what),
            t => bad(format!("{what}: {t}")),
        }
    }
}

const II: bool = false;

/// The first image file directory as TiffImagePlugin's ImageFileDirectory_v2 loads it: entries of
/// a type it does not know, whose data lies past the file (or past the file's size in total), or
/// that repeat a tag are skipped; a directory cut short keeps the entries read before the cut.
/// Integer values only (the tags that choose the layout are integers); others are `None`.
#[derive(Debug, Default)]
struct Ifd {
    big_endian: bool,
    tags: std::collections::BTreeMap<u16, Option<Vec<i64>>>,
}

impl Ifd {
    // Kept in one piece: the IFD's entries in file order, each bounds check beside the read it
    // guards.
    fn read(bytes: &[u8]) -> Result<Self> {
        let big_endian = bytes.starts_with(b"MM");
        let bigtiff = bytes.get(2) == Some(&43);
        let int = |at: usize, n: usize| -> Option<u64> {
            let b = bytes.get(at..at.checked_add(n)?)?;
            Some(b.iter().enumerate().fold(0u64, |acc, (i, &v)| {
                let shift = if big_endian { 8 * (n - 1 - i) } else { 8 * i };
                acc | (v as u64) << shift
            }))
        };
        let first = if bigtiff { int(8, 8) } else { int(4, 4) }
            .ok_or_else(|| bad("cannot identify image file (short header)"))?;
        if first == 0 {
            return Err(bad("no more images in TIFF file"));
        }
        if first >= 1 << 63 {
            return Err(bad("Unable to seek to frame"));
        }
        let mut ifd = Ifd {
            big_endian,
            ..Ifd::default()
        };
        let (count_size, entry_size, inline) = if bigtiff { (8, 20, 8) } else { (2, 12, 4) };
        let limit = bytes.len() as u64;
        let Some(count) = int(first as usize, count_size) else {
            return Ok(ifd); // "Corrupt EXIF data": a warning, no tags
        };
        let mut total = 0u64;
        for i in 0..count {
            let at = (first as usize).saturating_add(count_size + i as usize * entry_size);
            let (Some(tag), Some(typ), Some(n)) = (
                int(at, 2),
                int(at + 2, 2),
                int(at + 4, if bigtiff { 8 } else { 4 }),
            ) else {
                break;
            };
            let value_at = at + if bigtiff { 12 } else { 8 };
            if bytes.len() < value_at + inline {
                break;
            }
            let tag = tag as u16;
            if ifd.tags.contains_key(&tag) {
                continue;
            }
            // _load_dispatch: BYTE ASCII SHORT LONG RATIONAL SBYTE UNDEFINED SSHORT SLONG
            // SRATIONAL FLOAT DOUBLE IFD LONG8.
            let (unit, signed, integer) = match typ {
                3 => (2, false, true),
                4 | 13 => (4, false, true),
                16 => (8, false, true),
                6 => (1, true, true),
                8 => (2, true, true),
                9 => (4, true, true),
                1 | 2 | 7 => (1, false, false),
                11 => (4, false, false),
                5 | 10 | 12 => (8, false, false),
                _ => continue,
            };
            let Some(size) = n.checked_mul(unit) else {
                continue;
            };
            let data_at = if size > inline as u64 {
                let offset = int(value_at, inline).expect("checked above");
                if offset >= 1 << 63 {
                    continue;
                }
                total = total.saturating_add(size);
                if total > limit {
                    continue; // "Tag data larger than file"
                }
                offset
            } else {
                value_at as u64
            };
            if size == 0 || bytes.len() < (data_at + size) as usize {
                continue; // no data, or "Possibly corrupt EXIF data"
            }
            let (data_at, unit) = (data_at as usize, unit as usize);
            let values = integer.then(|| {
                (0..n as usize)
                    .map(|j| {
                        let v = int(data_at + j * unit, unit).expect("checked above");
                        match (signed, unit) {
                            (true, 1) => v as i8 as i64,
                            (true, 2) => v as i16 as i64,
                            (true, _) => v as i32 as i64,
                            _ => v as i64,
                        }
                    })
                    .collect()
            });
            ifd.tags.insert(tag, values);
        }
        Ok(ifd)
    }

    /// A tuple-valued tag (BitsPerSample, StripOffsets...); `Err` when it holds no integers.
    fn tuple(&self, tag: u16) -> Option<std::result::Result<&[i64], ()>> {
        self.tags.get(&tag).map(|v| v.as_deref().ok_or(()))
    }

    /// A single-valued tag (Compression, ImageWidth...): the first value, as Pillow keeps it.
    fn single(&self, tag: u16) -> Option<std::result::Result<i64, ()>> {
        self.tuple(tag).map(|v| v.map(|v| v[0]))
    }

    fn get(&self, tag: u16, default: i64) -> i64 {
        match self.single(tag) {
            Some(Ok(v)) => v,
            Some(Err(())) => -1,
            None => default,
        }
    }
}

/// The modes Pillow memory-maps (`Image._MAPMODES`).
const MAP_MODES: [&str; 8] = ["L", "P", "RGBX", "RGBA", "CMYK", "I;16", "I;16L", "I;16B"];

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

/// Bits per pixel of a raw mode (Pillow's unpacker table), for its row size.
fn raw_bits(raw: &str) -> u32 {
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
struct Px {
    v: [u8; 4],
}

impl Px {
    fn int(i: i32) -> Px {
        Px { v: i.to_ne_bytes() }
    }

    fn float(f: f32) -> Px {
        Px { v: f.to_ne_bytes() }
    }

    fn i(self) -> i32 {
        i32::from_ne_bytes(self.v)
    }

    fn f(self) -> f32 {
        f32::from_ne_bytes(self.v)
    }
}

/// Pillow's unpacker for `raw` (Unpack.c), pixel `x` of a row.
///
/// Kept in one piece: one arm per Pillow raw mode, a table of Unpack.c read as one.
fn unpack(raw: &str, row: &[u8], x: usize) -> Px {
    let mut p = Px::default();
    let bit = |bits: usize| {
        let at = x * bits;
        (row[at / 8] >> (8 - bits - at % 8)) & ((1 << bits) - 1)
    };
    let u16_at = |i: usize, big: bool| {
        let b = [row[i], row[i + 1]];
        if big {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }
    };
    let u32_at = |i: usize, big: bool| {
        let b = [row[i], row[i + 1], row[i + 2], row[i + 3]];
        if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    // RGBa: unpremultiplied with integer division, clipped (unpackRGBa).
    let unpremultiply = |c: [u8; 4]| -> [u8; 4] {
        match c[3] as u32 {
            0 => [0; 4],
            255 => c,
            a => {
                let u = |v: u8| (v as u32 * 255 / a).min(255) as u8;
                [u(c[0]), u(c[1]), u(c[2]), c[3]]
            }
        }
    };
    let stride = |n: usize, take: usize| {
        let mut v = [0u8; 4];
        v[..take].copy_from_slice(&row[x * n..x * n + take]);
        v
    };
    let hi16 = |n: usize, big: bool| {
        let mut v = [0u8; 4];
        for (c, slot) in v.iter_mut().enumerate().take(n.min(4)) {
            *slot = (u16_at(x * n * 2 + c * 2, big) >> 8) as u8;
        }
        v
    };
    match raw {
        "1" => p.v[0] = if bit(1) == 1 { 255 } else { 0 },
        "1;I" => p.v[0] = if bit(1) == 1 { 0 } else { 255 },
        "L;2" => p.v[0] = bit(2) * 0x55,
        "L;2I" => p.v[0] = 0xFF - bit(2) * 0x55,
        "L;4" => p.v[0] = bit(4) * 0x11,
        "L;4I" => p.v[0] = 0xFF - bit(4) * 0x11,
        "L" | "P" => p.v[0] = row[x],
        "L;I" => p.v[0] = !row[x],
        "P;1" => p.v[0] = bit(1),
        "P;2" => p.v[0] = bit(2),
        "P;4" => p.v[0] = bit(4),
        "LX" | "PX" => p.v[0] = row[2 * x],
        "La" | "LA" | "PA" => p.v = [row[2 * x], 0, 0, row[2 * x + 1]],
        // unpackI12_I16: pairs of pixels in three bytes, big-endian nibbles.
        "I;12" => {
            let at = x / 2 * 3;
            p = Px::int(if x.is_multiple_of(2) {
                ((row[at] as i32) << 4) | (row[at + 1] as i32 >> 4)
            } else {
                (((row[at + 1] & 0x0F) as i32) << 8) | row[at + 2] as i32
            });
        }
        "I;16" | "I;16N" => p = Px::int(u16_at(2 * x, false) as i32),
        "I;16B" => p = Px::int(u16_at(2 * x, true) as i32),
        "I;16S" => p = Px::int(u16_at(2 * x, false) as i16 as i32),
        "I;16BS" => p = Px::int(u16_at(2 * x, true) as i16 as i32),
        "I;32N" | "I;32S" => p = Px::int(u32_at(4 * x, false) as i32),
        "I;32BS" => p = Px::int(u32_at(4 * x, true) as i32),
        "F;32F" => p = Px::float(f32::from_bits(u32_at(4 * x, false))),
        "F;32BF" => p = Px::float(f32::from_bits(u32_at(4 * x, true))),
        "RGB" | "YCbCr" => p.v = stride(3, 3),
        // ImagingUnpackLAB: a and b are signed in the file, offset by 128 in Pillow.
        "LAB" => p.v = [row[3 * x], row[3 * x + 1] ^ 128, row[3 * x + 2] ^ 128, 0],
        "RGBX" | "RGBA" | "CMYK" => p.v = stride(4, 4),
        "RGBa" => p.v = unpremultiply(stride(4, 4)),
        "RGBXX" | "RGBAX" | "CMYKX" => p.v = stride(5, 4),
        "RGBaX" => p.v = unpremultiply(stride(5, 4)),
        "RGBXXX" | "RGBAXX" | "CMYKXX" => p.v = stride(6, 4),
        "RGBaXX" => p.v = unpremultiply(stride(6, 4)),
        "RGB;16L" | "RGB;16N" => p.v = hi16(3, false),
        "RGB;16B" => p.v = hi16(3, true),
        "RGBA;16L" | "RGBA;16N" | "RGBX;16L" | "RGBX;16N" | "CMYK;16L" | "CMYK;16N" => {
            p.v = hi16(4, false)
        }
        "RGBA;16B" | "RGBX;16B" | "CMYK;16B" => p.v = hi16(4, true),
        "RGBa;16L" | "RGBa;16N" => p.v = unpremultiply(hi16(4, false)),
        "RGBa;16B" => p.v = unpremultiply(hi16(4, true)),
        other => unreachable!("raw mode {other} has no unpacker"),
    }
    p
}

/// A decoded file: its size, its RGB bytes and Pillow's name of its mode.
pub(crate) type TiffImage = (u32, u32, Vec<u8>, &'static str);

/// Pillow's number of bands of a mode (`im->bands`).
fn bands(mode: &str) -> usize {
    match mode {
        "LA" | "La" | "PA" => 2,
        "RGB" | "YCbCr" | "LAB" => 3,
        "RGBA" | "CMYK" => 4,
        _ => 1,
    }
}

/// Decodes the first image of a TIFF file as `Image.open(p).convert('RGB')` does, orientation
/// applied. `check(w, h)` is asked before anything is decoded, with the upright size.
///
/// Pillow's TiffImagePlugin order: the directory ([`Ifd::read`]), the mode and layout it implies
/// ([`setup`], no pixel read), the caller's check, the strips or tiles read and converted to RGB
/// a band of rows at a time ([`raw_rgb`] for uncompressed files, [`libtiff_rgb`] for the rest;
/// each allocation bounded by the checks before it), then the orientation.
pub(crate) fn decode(
    bytes: &[u8],
    by_name: bool,
    check: impl FnOnce(u32, u32) -> Result<()>,
) -> Result<TiffImage> {
    let ifd = Ifd::read(bytes)?;
    let setup = setup(&ifd)?;
    let (w, h) = setup.upright();
    check(w, h)?;
    let rgb = if setup.raw_path() {
        raw_rgb(&ifd, bytes, &setup, by_name)?
    } else {
        libtiff_rgb(bytes, &setup)?
    };
    let (w, h, rgb) = orient(setup.width, setup.height, rgb, setup.orientation);
    Ok((w, h, rgb, setup.mode))
}

/// What the directory says of the image, as TiffImagePlugin `_setup` works it out: its size, its
/// mode and raw mode, and the layout the readers follow.
#[derive(Debug, Clone, PartialEq)]
struct Setup {
    /// The stored size (before the orientation), both at least 1.
    width: u32,
    height: u32,
    orientation: i64,
    /// Pillow's mode, and the raw mode its samples are unpacked with (on the libtiff branch,
    /// as libtiff hands them over: YCbCr as RGB, 16-bit samples in native order).
    mode: &'static str,
    raw: &'static str,
    compression: i64,
    planar: i64,
    photo: i64,
    fillorder: i64,
    bps: Vec<i64>,
    extra: Vec<i64>,
    bps_count: usize,
    /// The colour map of a `P` or `PA` image.
    palette: Option<Vec<i64>>,
}

impl Setup {
    /// Uncompressed: Pillow's own raw decoder reads the rows; else libtiff.
    fn raw_path(&self) -> bool {
        self.compression == 1
    }

    /// A compressed YCbCr file libtiff reads as an RGBA raster (all but JPEG-compressed
    /// contiguous ones).
    fn ycbcr_rgba(&self) -> bool {
        !self.raw_path() && self.photo == 6 && !(self.compression == 7 && self.planar == 1)
    }

    /// The size as the image comes out: orientations 5 to 8 swap the sides.
    fn upright(&self) -> (u32, u32) {
        if (5..=8).contains(&self.orientation) {
            (self.height, self.width)
        } else {
            (self.width, self.height)
        }
    }
}

/// TiffImagePlugin._setup, step by step: the mode, raw mode and layout from the directory's
/// tags, or why Pillow refuses the file. Reads no pixel.
fn setup(ifd: &Ifd) -> Result<Setup> {
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
    let planar = ifd.get(284, 1);
    // Old-style JPEG is YCbCr whatever the tag says. A PhotometricInterpretation of more than
    // one value is dropped (Pillow's `_setitem` keeps the first value of other single-valued
    // tags, but not of this one), so it counts as absent.
    let photo = match ifd.tuple(262) {
        _ if compression == 6 => 6,
        Some(Ok(v)) if v.len() > 1 => 0,
        _ => ifd.get(262, 0),
    };
    let fillorder = ifd.get(266, 1);
    let (Some(Ok(w)), Some(Ok(h))) = (ifd.single(256), ifd.single(257)) else {
        return Err(bad("missing or invalid dimensions"));
    };
    let orientation = ifd.get(274, 1);
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
        // A signed tag, or more unspecified extra planes than samples: Pillow's tuple slicing
        // ends in "unknown data organization" too.
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
    let narrow =
        |v: &[i64]| -> Option<Vec<u16>> { v.iter().map(|&x| u16::try_from(x).ok()).collect() };
    let key = (|| {
        let (photo, format) = (u16::try_from(photo).ok()?, narrow(&format)?);
        let (bps, extra) = (narrow(&bps)?, narrow(&extra)?);
        let found = open_info(ifd.big_endian, photo, &format, &bps, &extra)?;
        match fillorder {
            1 => Some(found),
            2 if reversible(ifd.big_endian, photo, &bps, &extra) => Some(found),
            _ => None,
        }
    })();
    let (mut mode, mut raw) = key.ok_or_else(|| bad("unknown pixel mode"))?;
    if compression != 1 {
        // The libtiff branch: YCbCr comes out as RGB, 16-bit samples in native order.
        if photo == 6 {
            mode = "RGB";
            // JPEG-compressed contiguous YCbCr: libjpeg gives RGB; others an RGBA raster.
            raw = if compression == 7 && planar == 1 {
                "RGB"
            } else {
                "RGBX"
            };
        } else if let Some(stem) = raw.strip_suffix(";16B").or(raw.strip_suffix(";16L")) {
            raw = native16(stem);
        } else if raw == "I;16" {
            raw = "I;16N";
        }
    }
    let palette: Option<Vec<i64>> = if matches!(mode, "P" | "PA") {
        match ifd.tuple(320) {
            Some(Ok(map)) => Some(map.to_vec()),
            _ => return Err(bad("palette image without a colour map")),
        }
    } else {
        None
    };
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
        bps,
        extra,
        bps_count,
        palette,
    })
}

/// An uncompressed file's RGB: Pillow's raw decoder reads the rows at each strip's or tile's
/// offset ([`read_raw`]), memory-mapped as Pillow maps them when `by_name` allows, then they are
/// converted a band of rows at a time.
fn raw_rgb(ifd: &Ifd, bytes: &[u8], s: &Setup, by_name: bool) -> Result<Vec<u8>> {
    let (wu, hu) = (s.width as usize, s.height as usize);
    let layout = Layout {
        fill_reversed: s.fillorder == 2,
        planar: s.planar == 2,
        sum_bps: s.bps.iter().map(|&b| b.max(0) as usize).sum(),
        bps_count: s.bps_count,
    };
    // Pillow's raw mode is the mode itself (fill order 2 has a ";R" raw mode of its own).
    let mappable = by_name && s.raw == s.mode && s.fillorder == 1 && MAP_MODES.contains(&s.mode);
    let pixels = read_raw(ifd, bytes, wu, hu, s.raw, &layout, mappable)?;
    rows_to_rgb(s.mode, wu, hu, s.palette.as_deref(), |y, row| {
        row.copy_from_slice(&pixels[y * wu..(y + 1) * wu])
    })
}

/// A compressed file's RGB: libtiff's samples (an RGBA raster for YCbCr, else the decompressed
/// strips or tiles unpacked with the raw mode), converted a band of rows at a time.
fn libtiff_rgb(bytes: &[u8], s: &Setup) -> Result<Vec<u8>> {
    let (w, h) = (s.width, s.height);
    let (wu, hu) = (w as usize, h as usize);
    let palette = s.palette.as_deref();
    // SAFETY: bytes outlive the handle, which is closed when `tiff` drops below.
    let handle = unsafe { shk_tiff_open(bytes.as_ptr(), bytes.len()) };
    if handle.is_null() {
        return Err(bad("out of memory"));
    }
    let tiff = Tiff(handle);
    if s.ycbcr_rgba() {
        let rgba = read_rgba(&tiff, w, h)?;
        return rows_to_rgb(s.mode, wu, hu, palette, |y, row| {
            // TIFFRGBAImage packs R in the low byte; Pillow unpacks it as `RGBX`.
            for (p, &v) in row.iter_mut().zip(&rgba[y * wu..]) {
                p.v = v.to_le_bytes();
            }
        });
    }
    let planes = if s.planar == 2 { bands(s.mode) } else { 1 };
    let bits = s.bps.first().copied().unwrap_or(1) as u16;
    let decoded = read_decoded(&tiff, w, h, s.raw, planes, s.photo == 6, bits)?;
    // ImagingLibTiffDecode: separate RGBA planes with associated (or unspecified) alpha.
    let associated = s.planar == 2 && s.mode == "RGBA" && matches!(s.extra.first(), Some(0 | 1));
    rows_to_rgb(s.mode, wu, hu, palette, |y, row| {
        decoded.unpack_row(y, row);
        if associated {
            for p in row.iter_mut() {
                p.v = unpack("RGBa", &p.v, 0).v;
            }
        }
    })
}

/// [`to_rgb`] over an image whose rows `row(y, pixels)` fills, into one buffer, a band of rows
/// at a time.
fn rows_to_rgb(
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

/// _decodeAsRGBA: libtiff's RGBA raster (R in the low byte).
fn read_rgba(tiff: &Tiff, w: u32, h: u32) -> Result<Vec<u32>> {
    let mut rgba = vec![0u32; w as usize * h as usize];
    // SAFETY: rgba holds width × height pixels, what the call writes at most (it checks that
    // libtiff's size is that one).
    if unsafe { shk_tiff_read_rgba(tiff.0, w, h, rgba.as_mut_ptr()) } != 0 {
        return Err(tiff.error("cannot read YCbCr image"));
    }
    Ok(rgba)
}

/// libtiff's decompressed samples: `planes` rasters of `h` rows of `row_bytes`.
struct Decompressed<'a> {
    buf: Vec<u8>,
    raw: &'a str,
    w: usize,
    h: usize,
    row_bytes: usize,
    planes: usize,
    bits_per_sample: u16,
}

impl Decompressed<'_> {
    /// Row `y` unpacked with `raw`, or with one band per plane when the planes are separate
    /// (_pickUnpackers: the R, G, B, A unpackers, or R;16N...: the high byte).
    fn unpack_row(&self, y: usize, out: &mut [Px]) {
        let row = |plane: usize| {
            let at = (plane * self.h + y) * self.row_bytes;
            &self.buf[at..at + self.row_bytes]
        };
        if self.planes == 1 {
            let row = row(0);
            for (x, p) in out.iter_mut().enumerate() {
                *p = unpack(self.raw, row, x);
            }
            return;
        }
        for plane in 0..self.planes {
            let row = row(plane);
            for (x, p) in out.iter_mut().enumerate().take(self.w) {
                p.v[plane.min(3)] = if self.bits_per_sample == 16 {
                    (u16::from_ne_bytes([row[2 * x], row[2 * x + 1]]) >> 8) as u8
                } else {
                    row[x]
                };
            }
        }
    }
}

/// _decodeStrip / _decodeTile: libtiff's decompressed samples, to be unpacked with `raw` (one band
/// per plane when the planes are separate).
fn read_decoded<'a>(
    tiff: &Tiff,
    width: u32,
    height: u32,
    raw: &'a str,
    planes: usize,
    jpeg_rgb: bool,
    bits_per_sample: u16,
) -> Result<Decompressed<'a>> {
    let (w, h) = (width as usize, height as usize);
    let bits = raw_bits(raw);
    let row_bytes = (w * bits as usize / planes).div_ceil(8);
    if planes > 1 && bits_per_sample != 8 && bits_per_sample != 16 {
        return Err(bad(format!("separate planes of {bits_per_sample} bits")));
    }
    let mut buf = vec![0u8; planes * h * row_bytes];
    // SAFETY: buf holds planes × height rows of row_bytes, what the call writes at most.
    let status = unsafe {
        shk_tiff_read(
            tiff.0,
            width,
            height,
            planes as c_int,
            bits,
            jpeg_rgb as c_int,
            buf.as_mut_ptr(),
            row_bytes,
        )
    };
    if status != 0 {
        return Err(tiff.error("cannot read image data"));
    }
    Ok(Decompressed {
        buf,
        raw,
        w,
        h,
        row_bytes,
        planes,
        bits_per_sample,
    })
}

/// What Pillow's raw tiles need to know of the file.
struct Layout {
    fill_reversed: bool,
    planar: bool,
    sum_bps: usize,
    bps_count: usize,
}

/// Pillow's raw decoder over the tiles TiffImagePlugin._setup lists: rows read from the file at
/// each strip's (or tile's) offset, whatever its byte count says, and "truncated" where the file
/// ends first.
///
/// Kept in one piece: Pillow's decoder loop, strip by strip and row by row, in its order.
fn read_raw(
    ifd: &Ifd,
    bytes: &[u8],
    w: usize,
    h: usize,
    raw: &str,
    layout: &Layout,
    mappable: bool,
) -> Result<Vec<Px>> {
    let (all, bw, bh) = if let Some(offsets) = ifd.tuple(273) {
        let rows = match ifd.single(278) {
            None => h as i64,
            Some(Ok(r)) => r,
            Some(Err(())) => -1,
        };
        (offsets, w as i64, rows)
    } else if let Some(offsets) = ifd.tuple(324) {
        let (Some(Ok(tw)), Some(Ok(th))) = (ifd.single(322), ifd.single(323)) else {
            return Err(bad("Invalid tile dimensions"));
        };
        (offsets, tw, th)
    } else {
        return Err(bad("unknown data organization"));
    };
    let all = all.map_err(|()| bad("unknown data organization"))?;
    let (Ok(bw), Ok(bh)) = (usize::try_from(bw), usize::try_from(bh)) else {
        return Err(bad("negative strip or tile size"));
    };
    // "Every tile covers the image. Only use the last offset."
    let offsets = if bw == w && bh == h && !layout.planar {
        &all[all.len() - 1..]
    } else {
        all
    };
    // Opened by name, Pillow memory-maps an image of one tile in its own mode (ImageFile.load):
    // every row from that tile's offset, a row apart (the tile's width where it is wider than
    // the image), whatever its height says — when the file holds them all. That is the walk
    // below over one tile of the image's height.
    let (mut bw, mut bh) = (bw, bh);
    if let [offset] = offsets
        && mappable
    {
        let Ok(at) = usize::try_from(*offset) else {
            return Err(bad("Tile offset cannot be negative"));
        };
        let stride = if bw > w {
            bw.checked_mul(layout.sum_bps).map(|b| b / 8)
        } else {
            w.checked_mul(raw_bits(raw) as usize).map(|b| b.div_ceil(8))
        };
        let end = stride
            .and_then(|stride| stride.checked_mul(h))
            .and_then(|n| n.checked_add(at));
        if end.is_some_and(|end| end <= bytes.len()) {
            (bw, bh) = (bw.max(w), h);
        }
    }
    if bw == 0 || bh == 0 {
        return Err(bad("strips or tiles of no size"));
    }
    // Every row is found in the file before the image is allocated: a small file that claims
    // millions of pixels is "truncated" without first taking gigabytes.
    visit_rows(bytes, offsets, w, h, bw, bh, raw, layout, |_, _, _| {})?;
    let mut out = vec![Px::default(); w * h];
    visit_rows(
        bytes,
        offsets,
        w,
        h,
        bw,
        bh,
        raw,
        layout,
        |at, row, dest| {
            let reversed: Vec<u8>;
            let row = if layout.fill_reversed {
                reversed = row.iter().map(|b| b.reverse_bits()).collect();
                &reversed[..]
            } else {
                row
            };
            for (i, px) in out[at..at + dest.count].iter_mut().enumerate() {
                match dest.raw {
                    Some(m) => *px = unpack(m, row, i),
                    None => px.v[dest.band] = row[i],
                }
            }
        },
    )?;
    Ok(out)
}

/// Where a row of a strip or tile goes: `count` pixels, unpacked with `raw`, or (separate
/// planes) one byte each into `band`.
struct Dest<'a> {
    count: usize,
    raw: Option<&'a str>,
    band: usize,
}

/// Calls `f(first pixel, row bytes, dest)` for every row of every strip or tile in Pillow's tile
/// order; "image file is truncated" (before any call past it) where a row is not in the file.
#[allow(clippy::too_many_arguments)]
fn visit_rows<'a>(
    bytes: &[u8],
    offsets: &[i64],
    w: usize,
    h: usize,
    bw: usize,
    bh: usize,
    raw: &'a str,
    layout: &Layout,
    mut f: impl FnMut(usize, &[u8], &Dest<'a>),
) -> Result<()> {
    let (mut x, mut y, mut layer) = (0usize, 0usize, 0usize);
    for &offset in offsets {
        let (x1, y1) = ((x + bw).min(w), (y + bh).min(h));
        let (tile_raw, band) = if layout.planar {
            let c = raw
                .as_bytes()
                .get(layer)
                .ok_or_else(|| bad("more planes than bands"))?;
            (None, band_of(*c)?)
        } else {
            (Some(raw), 0)
        };
        let bits = tile_raw.map_or(8, raw_bits) as usize;
        let mut stride = 0.0;
        if x + bw > w {
            stride = (bw * layout.sum_bps) as f64 / 8.0;
        }
        if layout.planar {
            stride /= layout.bps_count as f64;
        }
        let row_len = ((x1 - x) * bits).div_ceil(8);
        let stride = match stride as usize {
            0 => row_len,
            s => s,
        };
        let dest = Dest {
            count: x1 - x,
            raw: tile_raw,
            band,
        };
        for r in 0..y1.saturating_sub(y) {
            let start = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(r * stride))
                .ok_or_else(|| bad("image file is truncated"))?;
            let row = bytes
                .get(start..start.saturating_add(row_len))
                .ok_or_else(|| bad("image file is truncated"))?;
            f((y + r) * w + x, row, &dest);
        }
        x += bw;
        if x >= w {
            x = 0;
            y += bh;
            if y >= h {
                y = 0;
                layer += 1;
            }
        }
    }
    Ok(())
}

/// The band a one-letter raw mode unpacks into (Pillow's R/G/B/A, C/M/Y/K, L, P unpackers).
fn band_of(c: u8) -> Result<usize> {
    match c {
        b'R' | b'C' | b'L' | b'P' | b'Y' => Ok(0),
        b'G' | b'M' => Ok(1),
        b'B' | b'b' => Ok(2),
        b'A' | b'K' => Ok(3),
        other => Err(bad(format!("no unpacker for band {}", other as char))),
    }
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
fn ycbcr2rgb(p: [u8; 4]) -> [u8; 3] {
    let (y, cb, cr) = (p[0] as i32, p[1] as i32 - 128, p[2] as i32 - 128);
    let t = |c: i32, k: f64| (c as f64 * k * 64.0 + 0.5) as i32;
    let r = y + (t(cr, 1.402) >> 6);
    let g = y + ((t(cb, -0.34414) + t(cr, -0.71414)) >> 6);
    let b = y + (t(cb, 1.772) >> 6);
    [r, g, b].map(|v| v.clamp(0, 255) as u8)
}

/// TiffImageFile.load_end's `ImageOps.exif_transpose`.
fn orient(w: u32, h: u32, rgb: Vec<u8>, orientation: i64) -> (u32, u32, Vec<u8>) {
    if !(2..=8).contains(&orientation) {
        return (w, h, rgb);
    }
    let img = image::RgbImage::from_raw(w, h, rgb).expect("sized");
    let img = crate::pixels::exif_transpose(img, crate::Orientation(orientation as u16));
    (img.width(), img.height(), img.into_raw())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian TIFF of one strip of `data`, 2x1 unless the given (tag, type, value)
    /// entries say otherwise, the IFD after the strip.
    fn tiff(entries: &[(u16, u16, u32)], data: &[u8]) -> Vec<u8> {
        let mut all: Vec<(u16, u16, u32)> = [(256, 4, 2), (257, 4, 1)]
            .into_iter()
            .filter(|d| entries.iter().all(|e| e.0 != d.0))
            .collect();
        all.extend([(273, 4, 8), (279, 4, data.len() as u32)]);
        all.extend_from_slice(entries);
        all.sort();
        let ifd = 8 + data.len() as u32;
        let mut b = b"II*\0".to_vec();
        b.extend_from_slice(&ifd.to_le_bytes());
        b.extend_from_slice(data);
        b.extend_from_slice(&(all.len() as u16).to_le_bytes());
        for (tag, typ, value) in all {
            b.extend_from_slice(&tag.to_le_bytes());
            b.extend_from_slice(&typ.to_le_bytes());
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(&value.to_le_bytes());
        }
        b.extend_from_slice(&[0; 4]);
        b
    }

    /// A 16x16 8-bit grey TIFF of one `tile`x`tile` tile holding `data`, compressed with
    /// `compression`.
    fn tiled(tile: u32, compression: u32, data: &[u8]) -> Vec<u8> {
        let entries: [(u16, u16, u32); 10] = [
            (256, 4, 16),
            (257, 4, 16),
            (258, 3, 8),
            (259, 3, compression),
            (262, 3, 1),
            (277, 3, 1),
            (322, 4, tile),
            (323, 4, tile),
            (324, 4, 8),
            (325, 4, data.len() as u32),
        ];
        let ifd = 8 + data.len() as u32;
        let mut b = b"II*\0".to_vec();
        b.extend_from_slice(&ifd.to_le_bytes());
        b.extend_from_slice(data);
        b.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        for (tag, typ, value) in entries {
            b.extend_from_slice(&tag.to_le_bytes());
            b.extend_from_slice(&typ.to_le_bytes());
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(&value.to_le_bytes());
        }
        b.extend_from_slice(&[0; 4]);
        b
    }

    fn setup_of(entries: &[(u16, u16, u32)]) -> Result<Setup> {
        setup(&Ifd::read(&tiff(entries, &[0; 12]))?)
    }

    #[test]
    fn setup_reads_mode_and_layout_from_the_tags_alone() {
        // 8-bit grey, uncompressed, rotated: Pillow's raw decoder, the sides swapped upright.
        let s = setup_of(&[(258, 3, 8), (262, 3, 1), (274, 3, 6)]).unwrap();
        assert_eq!((s.mode, s.raw, s.raw_path()), ("L", "L", true));
        assert_eq!(((s.width, s.height), s.upright()), ((2, 1), (1, 2)));
        assert_eq!(s.palette, None);
        // 16-bit RGB, deflated: libtiff hands the samples over in native order.
        let s = setup_of(&[(258, 3, 16), (259, 3, 8), (262, 3, 2), (277, 3, 3)]).unwrap();
        assert_eq!((s.mode, s.raw, s.raw_path()), ("RGB", "RGB;16N", false));
        assert_eq!((s.bps.as_slice(), s.bps_count), (&[16, 16, 16][..], 3));
        // YCbCr: libjpeg's RGB for a JPEG-compressed contiguous file, else libtiff's raster.
        let jpeg = [(258, 3, 8), (259, 3, 7), (262, 3, 6), (277, 3, 3)];
        let s = setup_of(&jpeg).unwrap();
        assert_eq!((s.mode, s.raw, s.ycbcr_rgba()), ("RGB", "RGB", false));
        let lzw = [(258, 3, 8), (259, 3, 5), (262, 3, 6), (277, 3, 3)];
        let s = setup_of(&lzw).unwrap();
        assert_eq!((s.mode, s.raw, s.ycbcr_rgba()), ("RGB", "RGBX", true));
        // Refusals, in Pillow's words.
        for (entries, why) in [
            (
                vec![(258, 3, 8), (262, 3, 3)],
                "palette image without a colour map",
            ),
            (vec![(258, 3, 8), (259, 3, 9)], "unknown compression 9"),
            (
                vec![(258, 3, 8), (262, 3, 1), (277, 3, 7)],
                "Invalid value for samples per pixel",
            ),
            (
                vec![(256, 4, 0), (258, 3, 8), (262, 3, 1)],
                "image of 0x1 pixels",
            ),
            (vec![(258, 3, 3), (262, 3, 1)], "unknown pixel mode"),
        ] {
            let e = setup_of(&entries).unwrap_err();
            assert_eq!(e.to_string(), format!("cannot decode: TIFF: {why}"));
        }
    }

    #[test]
    fn raw_rows_convert_to_rgb_as_stored() {
        let bytes = tiff(&[(258, 3, 8), (262, 3, 1), (274, 3, 6)], &[10, 20]);
        let ifd = Ifd::read(&bytes).unwrap();
        let s = setup(&ifd).unwrap();
        // Before the orientation: the rows as stored.
        assert_eq!(
            raw_rgb(&ifd, &bytes, &s, false).unwrap(),
            [10, 10, 10, 20, 20, 20]
        );
        assert_eq!(
            decode(&bytes, false, |_, _| Ok(())).unwrap(),
            (1, 2, vec![10, 10, 10, 20, 20, 20], "L")
        );
    }

    #[test]
    fn the_window_is_chosen_before_the_image_is_decoded() {
        // The caller's choice holds memory for the image (crop-resize's --max-memory): it was
        // asked only once the whole image had been decoded, so it bounded nothing. Asked first,
        // it is asked also of a file that then fails to decode, with the upright size.
        let cut = tiff(
            &[(256, 4, 64), (257, 4, 48), (258, 3, 8), (262, 3, 1)],
            &[1, 2],
        );
        let mut asked = None;
        let e = crate::decode_region(&cut, &Default::default(), crate::Frame::Stored, |w, h| {
            asked = Some((w, h));
            (0, 0, w, h)
        });
        assert!(e.is_err());
        assert_eq!(asked, Some((64, 48)));
        let rotated = tiff(&[(258, 3, 8), (262, 3, 1), (274, 3, 6)], &[10, 20]);
        let mut asked = None;
        let r = crate::decode_region(
            &rotated,
            &Default::default(),
            crate::Frame::Stored,
            |w, h| {
                asked = Some((w, h));
                (0, 0, w, h)
            },
        )
        .unwrap();
        assert_eq!(asked, Some((1, 2)));
        assert_eq!(r.rgb.dimensions(), (1, 2));
    }

    #[test]
    fn a_tile_far_larger_than_its_image_is_refused_before_it_is_allocated() {
        let ok = |_, _| Ok(());
        // zlib's stream of nothing: libtiff would allocate the whole tile before inflating it.
        let empty = [0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01];
        for compression in [8, 1] {
            let huge = tiled(65536, compression, &empty);
            let e = decode(&huge, true, ok).unwrap_err().to_string();
            assert!(e.contains("TIFF"), "{compression}: {e}");
        }
        let e = decode(&tiled(65536, 8, &empty), true, ok)
            .unwrap_err()
            .to_string();
        assert!(e.contains("strip or tile of 4294967296 bytes"), "{e}");
        // A tile larger than a small image, as encoders write them (256x256), is read.
        let zeros = {
            use std::io::Write;
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            z.write_all(&[7u8; 256 * 256]).unwrap();
            z.finish().unwrap()
        };
        let (w, h, rgb, _) = decode(&tiled(256, 8, &zeros), true, ok).unwrap();
        assert_eq!((w, h), (16, 16));
        assert!(rgb.iter().all(|&v| v == 7));
    }

    #[test]
    fn a_negative_sample_count_is_refused_not_a_panic() {
        let ok = |_, _| Ok(());
        let grey = tiff(&[(258, 3, 8), (262, 3, 1)], &[10, 20]);
        assert_eq!(
            decode(&grey, false, ok).unwrap().2,
            [10, 10, 10, 20, 20, 20]
        );
        // SamplesPerPixel as a signed short of -1 (the fuzzer's find: a capacity overflow).
        let signed = tiff(&[(258, 3, 8), (262, 3, 1), (277, 8, 0xFFFF)], &[10, 20]);
        let e = decode(&signed, false, ok).unwrap_err().to_string();
        assert!(e.contains("unknown data organization"), "{e}");
    }

    #[test]
    fn a_one_strip_image_in_its_own_mode_is_read_whole_when_opened_by_name() {
        // Pillow 13 on a 2x3 8-bit grey TIFF of one strip: Image.open(path) memory-maps it
        // (every row from the strip's offset), Image.open(BytesIO) decodes RowsPerStrip rows.
        let ok = |_, _| Ok(());
        let grey = |rows: u32, data: &[u8]| {
            tiff(
                &[(257, 4, 3), (258, 3, 8), (262, 3, 1), (278, 4, rows)],
                data,
            )
        };
        let data = [10, 20, 30, 40, 50, 60];
        let rgb = |v: &[u8]| v.iter().flat_map(|&x| [x; 3]).collect::<Vec<u8>>();
        // RowsPerStrip 0: by name as stored; as a stream "tile cannot extend outside image".
        let zero = grey(0, &data);
        assert_eq!(decode(&zero, true, ok).unwrap().2, rgb(&data));
        assert!(decode(&zero, false, ok).is_err());
        // RowsPerStrip 1 with one strip: by name every row; as a stream the first, then black.
        let one = grey(1, &data);
        assert_eq!(decode(&one, true, ok).unwrap().2, rgb(&data));
        assert_eq!(
            decode(&one, false, ok).unwrap().2,
            rgb(&[10, 20, 0, 0, 0, 0])
        );
        // Short data: the map takes the bytes that follow (here the IFD's count, 7), as
        // Pillow's does, since the file holds them.
        assert_eq!(
            decode(&grey(0, &data[..4]), true, ok).unwrap().2,
            rgb(&[10, 20, 30, 40, 7, 0])
        );
        // Fill order 2: Pillow's raw mode is "L;R", not the mode, so no map, and no rows.
        let reversed = tiff(
            &[
                (257, 4, 3),
                (258, 3, 8),
                (262, 3, 1),
                (266, 3, 2),
                (278, 4, 0),
            ],
            &data,
        );
        assert!(decode(&reversed, true, ok).is_err());
        // A file too short for the map ("buffer is not large enough"): read as a stream is.
        let tall = tiff(
            &[(257, 4, 100), (258, 3, 8), (262, 3, 1), (278, 4, 3)],
            &data,
        );
        let streamed = decode(&tall, false, ok).unwrap().2;
        assert_eq!(streamed[..18], rgb(&data));
        assert_eq!(decode(&tall, true, ok).unwrap().2, streamed);
    }

    #[test]
    fn ycbcr_tables_follow_pillow() {
        // Pillow 13: Image.new("YCbCr", (1, 1), c).convert("RGB").
        assert_eq!(ycbcr2rgb([0, 0, 0, 0]), [0, 135, 0]);
        assert_eq!(ycbcr2rgb([128, 128, 128, 0]), [128, 128, 128]);
        assert_eq!(ycbcr2rgb([200, 30, 240, 0]), [255, 153, 26]);
    }
}
