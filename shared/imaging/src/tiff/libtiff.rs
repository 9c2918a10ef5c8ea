use std::ffi::{CStr, c_char, c_int, c_uint};

use super::convert::{Px, bands, raw_bits, rows_to_rgb, unpack};
use super::{Setup, bad};
use crate::{Error, Result};

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

/// A compressed file's RGB: libtiff's samples (an RGBA raster for YCbCr, else the decompressed
/// strips or tiles unpacked with the raw mode), converted a band of rows at a time.
pub(super) fn libtiff_rgb(bytes: &[u8], s: &Setup) -> Result<Vec<u8>> {
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
