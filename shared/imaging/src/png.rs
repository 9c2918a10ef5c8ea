//! PNGs whose rows are complete but whose end is missing or damaged, read as Pillow reads them:
//! PngImagePlugin checks the CRC of every chunk before the image data (a mismatch refuses the
//! file), then ImageFile.load feeds the IDAT data to zlib and stops as soon as the last row is
//! out, so a file cut after its last row (no CRC, Adler-32 or IEND) decodes, and the image data's
//! own CRCs and checksum are never looked at.
//!
//! `decode_rgb` tries the `image` crate first and comes here only when it fails.

use std::io::Cursor;

use image::{DynamicImage, ImageBuffer};

use crate::{Error, Result};

fn bad(what: impl std::fmt::Display) -> Error {
    Error::Decode(format!("PNG: {what}"))
}

/// The chunks before the first IDAT, each with its CRC checked (PngStream's `crc`).
fn check_header_chunks(bytes: &[u8]) -> Result<()> {
    let mut at = 8;
    loop {
        let head = bytes
            .get(at..at + 8)
            .ok_or_else(|| bad("truncated before the image data"))?;
        let len = u32::from_be_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let kind = &head[4..8];
        if kind == b"IDAT" {
            return Ok(());
        }
        let body = bytes
            .get(at + 4..at + 8 + len)
            .ok_or_else(|| bad("truncated before the image data"))?;
        let crc = bytes
            .get(at + 8 + len..at + 12 + len)
            .ok_or_else(|| bad("incomplete checksum"))?;
        if crc32fast::hash(body).to_be_bytes() != crc {
            return Err(bad(format!(
                "broken PNG file (bad header checksum in {})",
                String::from_utf8_lossy(kind)
            )));
        }
        at += 12 + len;
    }
}

/// Rows of each Adam7 pass of a `w` × `h` image, in all (passes of no columns have none).
fn adam7_rows(w: u32, h: u32) -> u32 {
    [
        (0, 0, 8, 8),
        (4, 0, 8, 8),
        (0, 4, 4, 8),
        (2, 0, 4, 4),
        (0, 2, 2, 4),
        (1, 0, 2, 2),
        (0, 1, 1, 2),
    ]
    .iter()
    .filter(|&&(x0, y0, _, _)| w > x0 && h > y0)
    .map(|&(_, y0, _, dy)| (h - y0).div_ceil(dy))
    .sum()
}

/// The image from its rows alone, as the `image` crate would have returned it.
pub(crate) fn decode_rows(bytes: &[u8]) -> Result<DynamicImage> {
    check_header_chunks(bytes)?;
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND);
    decoder.ignore_checksums(true);
    let mut reader = decoder.read_info().map_err(bad)?;
    let (w, h, interlaced) = {
        let info = reader.info();
        (info.width, info.height, info.interlaced)
    };
    let (color, depth) = reader.output_color_type();
    let stride = reader.output_line_size(w).ok_or_else(|| bad("too large"))?;
    let mut buf = vec![0u8; stride * h as usize];
    let bits_pp = color.samples() as u8 * depth as u8;
    let rows = if interlaced { adam7_rows(w, h) } else { h };
    // Exactly as many rows as there are: asking for one more reads on to the end of the data.
    for y in 0..rows as usize {
        let row = reader
            .next_interlaced_row()
            .map_err(bad)?
            .ok_or_else(|| bad("fewer rows than the image has"))?;
        match row.interlace() {
            png::InterlaceInfo::Adam7(info) => {
                png::expand_interlaced_row(&mut buf, stride, row.data(), info, bits_pp)
            }
            png::InterlaceInfo::Null(_) => {
                buf[y * stride..(y + 1) * stride].copy_from_slice(row.data())
            }
        }
    }
    let wide = || -> Vec<u16> {
        buf.chunks_exact(2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .collect()
    };
    use png::{BitDepth::Eight, BitDepth::Sixteen, ColorType as C};
    let image = match (color, depth) {
        (C::Grayscale, Eight) => ImageBuffer::from_raw(w, h, buf).map(DynamicImage::ImageLuma8),
        (C::GrayscaleAlpha, Eight) => {
            ImageBuffer::from_raw(w, h, buf).map(DynamicImage::ImageLumaA8)
        }
        (C::Rgb, Eight) => ImageBuffer::from_raw(w, h, buf).map(DynamicImage::ImageRgb8),
        (C::Rgba, Eight) => ImageBuffer::from_raw(w, h, buf).map(DynamicImage::ImageRgba8),
        (C::Grayscale, Sixteen) => {
            ImageBuffer::from_raw(w, h, wide()).map(DynamicImage::ImageLuma16)
        }
        (C::GrayscaleAlpha, Sixteen) => {
            ImageBuffer::from_raw(w, h, wide()).map(DynamicImage::ImageLumaA16)
        }
        (C::Rgb, Sixteen) => ImageBuffer::from_raw(w, h, wide()).map(DynamicImage::ImageRgb16),
        (C::Rgba, Sixteen) => ImageBuffer::from_raw(w, h, wide()).map(DynamicImage::ImageRgba16),
        other => return Err(bad(format!("unexpected output {other:?}"))),
    };
    image.ok_or_else(|| bad("row sizes do not match the image"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adam7_rows_count_the_passes_that_have_columns() {
        assert_eq!(adam7_rows(1, 1), 1);
        assert_eq!(adam7_rows(8, 8), 1 + 1 + 1 + 2 + 2 + 4 + 4);
        assert_eq!(adam7_rows(23, 17), 3 + 3 + 2 + 5 + 4 + 9 + 8);
    }

    #[test]
    fn complete_rows_decode_whatever_follows_them() {
        let img =
            image::RgbImage::from_fn(9, 7, |x, y| image::Rgb([x as u8 * 20, y as u8 * 30, 7]));
        let mut png = Vec::new();
        DynamicImage::ImageRgb8(img.clone())
            .write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        // Without IEND and the IDAT's CRC: the rows are all there.
        let cut = &png[..png.len() - 16];
        assert!(
            image::load_from_memory(cut).is_err(),
            "the image crate refuses it"
        );
        assert_eq!(decode_rows(cut).unwrap().to_rgb8(), img);
        // Cut inside the compressed rows: refused.
        assert!(decode_rows(&png[..png.len() / 2]).is_err());
        // A damaged header chunk: refused, as Pillow's CRC check does.
        let mut broken = png.clone();
        broken[20] ^= 1; // inside IHDR's data
        let e = decode_rows(&broken).unwrap_err().to_string();
        assert!(e.contains("bad header checksum in IHDR"), "{e}");
    }
}
