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

//!
//! The steps have a file each: the directory ([`ifd`]), the mode and layout it implies
//! ([`setup`]), the uncompressed strips and tiles Pillow reads itself ([`raw`]), libtiff's
//! decompression ([`libtiff`]) and Pillow's unpackers and `convert('RGB')` ([`convert`]).

mod convert;
mod ifd;
mod libtiff;
mod raw;
mod setup;
#[cfg(test)]
mod tests;

use crate::{Error, Result};
use ifd::Ifd;
use libtiff::libtiff_rgb;
use raw::raw_rgb;
use setup::{Setup, setup};

fn bad(what: impl std::fmt::Display) -> Error {
    Error::Decode(format!("TIFF: {what}"))
}

/// A decoded file: its size, its RGB bytes and Pillow's name of its mode.
pub(crate) type TiffImage = (u32, u32, Vec<u8>, &'static str);

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

/// TiffImageFile.load_end's `ImageOps.exif_transpose`.
fn orient(w: u32, h: u32, rgb: Vec<u8>, orientation: i64) -> (u32, u32, Vec<u8>) {
    if !(2..=8).contains(&orientation) {
        return (w, h, rgb);
    }
    let img = image::RgbImage::from_raw(w, h, rgb).expect("sized");
    let img = crate::pixels::exif_transpose(img, crate::Orientation(orientation as u16));
    (img.width(), img.height(), img.into_raw())
}
