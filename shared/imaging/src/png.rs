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

/// PngImagePlugin's MAX_TEXT_CHUNK (ImageFile.SAFEBLOCK): the most one compressed ancillary
/// chunk (iCCP, zTXt, compressed iTXt) may inflate to.
pub(crate) const MAX_TEXT_CHUNK: usize = 1 << 20;
/// PngImagePlugin's MAX_TEXT_MEMORY: the most all text chunks together may hold.
pub(crate) const MAX_TEXT_MEMORY: usize = 64 * MAX_TEXT_CHUNK;

/// Pillow's limits on the ancillary chunks, checked before anything is inflated for the image:
/// a compressed profile or text that inflates past [`MAX_TEXT_CHUNK`] refuses the file
/// (`_safe_zlib_decompress`: "Decompressed data too large"), and so do text chunks holding more
/// than [`MAX_TEXT_MEMORY`] together (`check_text_memory`). Each chunk is inflated at most one
/// byte past the limit, so a small file that inflates to gigabytes costs a megabyte. A corrupt
/// compressed stream is ignored, as Pillow ignores `zlib.error` there. Chunks are walked, by
/// their lengths, to IEND or to the first chunk header that is cut short or not a chunk type.
pub(crate) fn check_ancillary_chunks(bytes: &[u8]) -> Result<()> {
    let mut text_memory = 0usize;
    let mut at = 8;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_be_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let kind = &head[4..8];
        if kind == b"IEND" || !kind.iter().all(u8::is_ascii_alphabetic) {
            break;
        }
        let Some(body) = bytes.get(at + 8..(at + 8).saturating_add(len)) else {
            break;
        };
        let text = match kind {
            b"iCCP" => {
                let rest = after_nul(body).unwrap_or(&[]);
                // rest[0] is the compression method (0: zlib), the profile follows.
                rest.get(1..).map(inflate_bounded).transpose()?;
                None
            }
            b"tEXt" => split_key(body).map(|(_, v)| v.len()),
            b"zTXt" => match split_key(body) {
                Some((_, v)) => Some(v.get(1..).map_or(Ok(0), inflate_bounded)?),
                None => None,
            },
            b"iTXt" => itxt_chars(body)?,
            _ => None,
        };
        if let Some(n) = text {
            text_memory += n;
            if text_memory > MAX_TEXT_MEMORY {
                return Err(Error::Decode(format!(
                    "PNG text chunks hold more than {MAX_TEXT_MEMORY} bytes (Pillow's MAX_TEXT_MEMORY)"
                )));
            }
        }
        at += 12 + len;
    }
    Ok(())
}

/// What follows the first NUL of a chunk (after its keyword).
fn after_nul(body: &[u8]) -> Option<&[u8]> {
    let nul = body.iter().position(|&b| b == 0)?;
    Some(&body[nul + 1..])
}

/// A text chunk's keyword and value; a chunk with an empty keyword counts for nothing (Pillow
/// stores and counts only text with a key).
fn split_key(body: &[u8]) -> Option<(&[u8], &[u8])> {
    let (k, v) = match body.iter().position(|&b| b == 0) {
        Some(nul) => (&body[..nul], &body[nul + 1..]),
        None => (body, &[][..]),
    };
    (!k.is_empty()).then_some((k, v))
}

/// The characters an iTXt chunk's text counts for (`chunk_iTXt`): its UTF-8 text, inflated if
/// compressed with zlib; a chunk Pillow gives up on (malformed, not UTF-8) counts for none.
fn itxt_chars(body: &[u8]) -> Result<Option<usize>> {
    let Some(r) = after_nul(body) else {
        return Ok(None);
    };
    let [flag, method, rest @ ..] = r else {
        return Ok(None);
    };
    let mut parts = rest.splitn(3, |&b| b == 0);
    let (Some(_lang), Some(_tk), Some(v)) = (parts.next(), parts.next(), parts.next()) else {
        return Ok(None);
    };
    let text: Vec<u8> = match (flag, method) {
        (0, _) => v.to_vec(),
        (_, 0) => match inflate(v)? {
            Some(t) => t,
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    Ok(std::str::from_utf8(&text).ok().map(|t| t.chars().count()))
}

/// The inflated length of a zlib stream, refusing one past [`MAX_TEXT_CHUNK`]; a corrupt stream
/// counts as empty.
fn inflate_bounded(data: &[u8]) -> Result<usize> {
    Ok(inflate(data)?.map_or(0, |t| t.len()))
}

/// A zlib stream inflated, at most [`MAX_TEXT_CHUNK`] bytes (past that, the file is refused);
/// `None` when the stream is corrupt before that.
fn inflate(data: &[u8]) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut out = Vec::new();
    let read = flate2::read::ZlibDecoder::new(data)
        .take(MAX_TEXT_CHUNK as u64 + 1)
        .read_to_end(&mut out);
    if out.len() > MAX_TEXT_CHUNK {
        return Err(Error::Decode(format!(
            "a PNG chunk inflates to more than {MAX_TEXT_CHUNK} bytes (Pillow: Decompressed data too large for PngImagePlugin.MAX_TEXT_CHUNK)"
        )));
    }
    Ok(read.ok().map(|_| out))
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

    /// A PNG signature followed by these chunks (CRCs are not looked at by the check).
    fn with_chunks(chunks: &[(&[u8; 4], Vec<u8>)]) -> Vec<u8> {
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        for (kind, body) in chunks {
            png.extend((body.len() as u32).to_be_bytes());
            png.extend(*kind);
            png.extend(body);
            png.extend([0; 4]);
        }
        png
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(data).unwrap();
        z.finish().unwrap()
    }

    #[test]
    fn ancillary_chunks_follow_pillows_limits() {
        let big = vec![b'x'; MAX_TEXT_CHUNK + 1];
        let fits = vec![b'x'; MAX_TEXT_CHUNK];
        let check = |chunks: &[(&[u8; 4], Vec<u8>)]| check_ancillary_chunks(&with_chunks(chunks));
        let tagged = |head: &[u8], data: &[u8]| [head, &zlib(data)].concat();
        // One compressed chunk: at most MAX_TEXT_CHUNK inflated.
        assert!(check(&[(b"iCCP", tagged(b"icc\0\0", &fits))]).is_ok());
        for bomb in [
            (b"iCCP", tagged(b"icc\0\0", &big)),
            (b"zTXt", tagged(b"Comment\0\0", &big)),
            (b"iTXt", tagged(b"Comment\0\x01\0en\0\0", &big)),
        ] {
            let e = check(std::slice::from_ref(&bomb)).unwrap_err().to_string();
            assert!(
                e.contains("MAX_TEXT_CHUNK"),
                "{}: {e}",
                String::from_utf8_lossy(bomb.0)
            );
        }
        // A corrupt stream is ignored, as Pillow ignores zlib.error there.
        assert!(check(&[(b"iCCP", b"icc\0\0not zlib".to_vec())]).is_ok());
        // Text chunks together: at most MAX_TEXT_MEMORY (keyword-less ones count for nothing).
        let text = |n: usize| [&b"k\0"[..], &vec![b'x'; n]].concat();
        let many: Vec<(&[u8; 4], Vec<u8>)> =
            (0..64).map(|_| (b"tEXt", text(MAX_TEXT_CHUNK))).collect();
        assert!(check(&many).is_ok());
        let mut over = many.clone();
        over.push((b"zTXt", tagged(b"k\0\0", b"x")));
        let e = check(&over).unwrap_err().to_string();
        assert!(e.contains("MAX_TEXT_MEMORY"), "{e}");
        over.pop();
        over.push((b"tEXt", [&b"\0"[..], &big].concat()));
        assert!(check(&over).is_ok());
        // The walk stops at IEND and at a header that is not a chunk's.
        let mut after_end = vec![(b"IEND", Vec::new())];
        after_end.push((b"iCCP", tagged(b"icc\0\0", &big)));
        assert!(check(&after_end).is_ok());
    }

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
