//! Decoding to 8-bit RGB with Pillow's `Image.open(p).convert('RGB')` semantics.

use std::io::Cursor;

use image::{DynamicImage, ImageReader, RgbImage};

use crate::pixels::{Orientation, cmyk2rgb, exif_transpose};
use crate::{Box4, Error, Result};

/// What 16-bit greyscale becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Gray16 {
    /// Pillow's behaviour: `I;16` → `RGB` clips each value to 255 (so most pixels turn white).
    #[default]
    Clip,
    /// The high byte, like every other 16-bit mode.
    Scale,
}

/// Options for [`decode_rgb`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Refuse images with more pixels than this (checked from the header). Pillow's
    /// `Image.MAX_IMAGE_PIXELS` warns above 89,478,485 and refuses above twice that.
    pub max_pixels: u64,
    pub gray16: Gray16,
    /// Decode as Pillow decodes a file it opens by name (`Image.open(path)`), not a stream
    /// (`Image.open(file_object)`, `BytesIO`): Pillow then memory-maps an uncompressed TIFF of
    /// one strip stored in its own mode (L, P, RGBA, RGBX, CMYK, I;16), so all its rows come
    /// from that strip's offset whatever RowsPerStrip says. Only such files differ.
    pub by_name: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            max_pixels: 2 * 89_478_485,
            gray16: Gray16::Clip,
            by_name: false,
        }
    }
}

/// A decoded image and what it was before conversion.
#[derive(Debug)]
pub struct Decoded {
    pub rgb: RgbImage,
    /// Pillow-style name of the source mode (`RGB`, `L`, `RGBA`, `P`→`RGB`/`RGBA`, `CMYK`, `I;16`...).
    pub source_mode: &'static str,
    pub orientation: Orientation,
}

impl DecodeOptions {
    /// The largest file that can hold an image within `max_pixels`: 16 bytes a pixel (four
    /// 32-bit channels, uncompressed) plus 64 MiB of metadata. Reading stops there.
    pub fn max_file_bytes(&self) -> u64 {
        self.max_pixels.saturating_mul(16).saturating_add(64 << 20)
    }
}

/// The formats [`decode_rgb`] reads, told apart by their first bytes as Pillow's plugins'
/// `_accept` functions do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Jpeg,
    Gif,
    Bmp,
    Tiff,
    Png,
    WebP,
}

fn format_of(head: &[u8]) -> Option<Format> {
    const TIFF: [&[u8]; 6] = [
        b"MM\0*", b"II*\0", b"MM*\0",
        b"II\0*", // classic (the last two: Pillow assumes the order)
        b"MM\0+", b"II+\0", // BigTIFF
    ];
    Some(match head {
        [0xFF, 0xD8, 0xFF, ..] => Format::Jpeg,
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Format::Gif,
        [b'B', b'M', ..] => Format::Bmp,
        [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n', ..] => Format::Png,
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => Format::WebP,
        _ if TIFF.iter().any(|m| head.starts_with(m)) => Format::Tiff,
        _ => return None,
    })
}

/// Whether a file's first bytes are those of a format [`decode_rgb`] reads (PNG, JPEG, GIF, BMP,
/// TIFF and BigTIFF, WebP), so that anything else is refused before the rest is read
/// ([`Error::NotAnImage`]).
pub fn sniff(head: &[u8]) -> Result<()> {
    format_of(head).map(|_| ()).ok_or(Error::NotAnImage)
}

/// Decodes `bytes` to RGB as Pillow's `Image.open(p).convert('RGB')` would: JPEG through
/// libjpeg-turbo, TIFF through libtiff, WebP through libwebp, GIF and BMP by Pillow's own rules,
/// PNG through the `image` crate.
pub fn decode_rgb(bytes: &[u8], opts: &DecodeOptions) -> Result<Decoded> {
    let r = decode_region(bytes, opts, Frame::Stored, |w, h| (0, 0, w, h))?;
    Ok(Decoded {
        rgb: r.rgb,
        source_mode: r.source_mode,
        orientation: r.orientation,
    })
}

/// The frame in which [`decode_region`] chooses its region and returns its pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// As stored: Pillow's `Image.open`, which ignores the EXIF orientation.
    Stored,
    /// After the EXIF orientation: Pillow's `ImageOps.exif_transpose(Image.open(p))`.
    Exif,
}

/// Part of an image, as [`decode_region`] gives it.
#[derive(Debug)]
pub struct Region {
    /// The region's pixels.
    pub rgb: RgbImage,
    /// Where they lie in the whole image: `(left, top, width, height)`.
    pub region: Box4,
    /// The whole image's size, in the frame asked for.
    pub width: u32,
    pub height: u32,
    /// Pillow-style name of the source mode, as in [`Decoded`].
    pub source_mode: &'static str,
    /// The orientation the file declares (whether or not it was applied).
    pub orientation: Orientation,
}

/// Decodes the part of an image that `choose(width, height)` asks for (a non-empty
/// `(left, top, width, height)` inside the image, chosen from its size in `frame`): the pixels of
/// `decode_rgb` (then [`exif_transpose`] for [`Frame::Exif`]) cropped to it, bit for bit.
///
/// A JPEG is decoded only around the region: rows and columns outside it skip the IDCT,
/// upsampling and colour conversion, and memory is the region's (plus libjpeg's coefficient
/// buffer for a progressive file); the entropy-coded data is still read to its end, so the same
/// files are refused. Other formats are decoded whole, then cropped.
///
/// # Panics
/// If `choose` returns an empty region or one outside the image.
pub fn decode_region(
    bytes: &[u8],
    opts: &DecodeOptions,
    frame: Frame,
    choose: impl FnOnce(u32, u32) -> Box4,
) -> Result<Region> {
    let format =
        format_of(bytes).ok_or_else(|| Error::Unsupported("unknown image format".into()))?;
    // Pillow's TIFF loader applies the orientation itself: nothing is left to apply.
    let orientation = match format {
        Format::Tiff => Orientation(1),
        _ => read_orientation(bytes),
    };
    let applied = match frame {
        Frame::Stored => Orientation(1),
        Frame::Exif => orientation,
    };
    // From the stored size to the stored window, through the caller's choice in its frame.
    let mut choose = Some(choose);
    let mut chosen = None;
    let mut window = |w: u32, h: u32| -> Result<Box4> {
        check_pixels(w as u64, h as u64, opts)?;
        let (ow, oh) = applied.size(w, h);
        let region = choose.take().expect("chosen once")(ow, oh);
        let (x, y, rw, rh) = region;
        assert!(
            rw > 0
                && rh > 0
                && x as u64 + rw as u64 <= ow as u64
                && y as u64 + rh as u64 <= oh as u64,
            "region {region:?} is not inside the {ow}x{oh} image"
        );
        chosen = Some((region, ow, oh));
        Ok(applied.stored_box(w, h, region))
    };
    let (rgb, source_mode) = if format == Format::Jpeg {
        decode_jpeg(bytes, &mut window)?
    } else if format == Format::WebP {
        crate::webp::decode(bytes, &mut window)?
    } else if format == Format::Png {
        decode_png(bytes, opts, &mut window)?
    } else {
        decode_whole(bytes, format, opts.by_name, &mut window)?
    };
    let (region, width, height) = chosen.expect("chosen before decoding");
    Ok(Region {
        rgb: exif_transpose(rgb, applied),
        region,
        width,
        height,
        source_mode,
        orientation,
    })
}

/// A GIF, BMP or TIFF decoded whole, then cut to the window: the window is chosen from the
/// header's size, before the decoder allocates anything (the caller's choice may hold memory for
/// the image: crop-resize's --max-memory), and cut from the whole image once decoded.
fn decode_whole(
    bytes: &[u8],
    format: Format,
    by_name: bool,
    window: &mut impl FnMut(u32, u32) -> Result<Box4>,
) -> Result<(RgbImage, &'static str)> {
    let mut boxed = None;
    let fits = |w: u32, h: u32| {
        boxed = Some(((w, h), window(w, h)?));
        Ok(())
    };
    let sized = |(w, h, rgb, mode): (u32, u32, Vec<u8>, &'static str)| {
        (RgbImage::from_raw(w, h, rgb).expect("sized"), mode)
    };
    let (whole, mode) = match format {
        Format::Gif => sized(crate::gif::decode(bytes, fits)?),
        Format::Bmp => sized(crate::bmp::decode(bytes, fits)?),
        Format::Tiff => sized(crate::tiff::decode(bytes, by_name, fits)?),
        Format::Jpeg | Format::WebP | Format::Png => unreachable!("decoded by their own readers"),
    };
    let (size, (x, y, w, h)) = boxed.expect("the decoder asked for the size first");
    if whole.dimensions() != size {
        return Err(Error::Decode(format!(
            "decoded {}x{} pixels from a header of {}x{}",
            whole.width(),
            whole.height(),
            size.0,
            size.1
        )));
    }
    if (w, h) == whole.dimensions() {
        Ok((whole, mode))
    } else {
        Ok((
            image::imageops::crop_imm(&whole, x, y, w, h).to_image(),
            mode,
        ))
    }
}

fn check_pixels(width: u64, height: u64, opts: &DecodeOptions) -> Result<()> {
    let pixels = width * height;
    if pixels > opts.max_pixels {
        return Err(Error::TooManyPixels {
            width,
            height,
            pixels,
            limit: opts.max_pixels,
        });
    }
    if pixels == 0 {
        return Err(Error::Empty(width as u32, height as u32));
    }
    Ok(())
}

/// A JPEG's window (`window(width, height)` checks the size and gives it) in RGB.
fn decode_jpeg(
    bytes: &[u8],
    window: impl FnMut(u32, u32) -> Result<Box4>,
) -> Result<(RgbImage, &'static str)> {
    let frame = crate::jpeg::check_markers(bytes)?;
    let d = crate::jpeg::decode(bytes, frame, window)?;
    let (rgb, mode) = match d.components {
        1 => (d.samples.iter().flat_map(|&v| [v; 3]).collect(), "L"),
        3 => (d.samples, "RGB"),
        _ => (
            d.samples.chunks_exact(4).flat_map(cmyk_to_rgb).collect(),
            "CMYK",
        ),
    };
    let (_, _, w, h) = d.window;
    Ok((RgbImage::from_raw(w, h, rgb).expect("sized"), mode))
}

/// Pillow reads 4-component JPEGs as `CMYK;I` (Adobe's inverted convention, JpegImagePlugin) and
/// converts with `cmyk2rgb` (libImaging/Convert.c): `nk = 255 - k; c' = nk - c·nk/255`, where
/// `c, k` are the inverted file values.
fn cmyk_to_rgb(raw: &[u8]) -> [u8; 3] {
    cmyk2rgb([255 - raw[0], 255 - raw[1], 255 - raw[2], 255 - raw[3]])
}

/// A PNG's window (`window(width, height)` checks the size and gives it) in RGB, through the
/// `image` crate: the whole image is decoded, only the window converted.
///
/// Kept in one piece: one arm per PNG colour type, each converting only the window.
fn decode_png(
    bytes: &[u8],
    opts: &DecodeOptions,
    window: impl FnOnce(u32, u32) -> Result<Box4>,
) -> Result<(RgbImage, &'static str)> {
    let reader = || ImageReader::with_format(Cursor::new(bytes), image::ImageFormat::Png);
    // Before anything is inflated: reading the header inflates the chunks before IDAT (a
    // profile of 512 MB took that much before it was refused).
    crate::png::check_ancillary_chunks(bytes)?;
    let mut r = reader();
    let mut limits = image::Limits::no_limits();
    limits.max_alloc = Some(2 * crate::png::MAX_TEXT_MEMORY as u64);
    r.limits(limits);
    let (w, h) = r
        .into_dimensions()
        .map_err(|e| Error::Decode(e.to_string()))?;
    let window = window(w, h)?;
    let mut r = reader();
    // The pixel limit (checked by `window`) decides the size; the allocation limit keeps
    // whatever else a decoder inflates (profiles, text, metadata) bounded by it too: 8 bytes a
    // pixel (RGBA16) and Pillow's limit on text.
    let mut limits = image::Limits::no_limits();
    limits.max_alloc = Some(
        (w as u64 * h as u64)
            .saturating_mul(8)
            .saturating_add(2 * crate::png::MAX_TEXT_MEMORY as u64),
    );
    r.limits(limits);
    let img = match r.decode() {
        Ok(img) => img,
        // Pillow stops reading a PNG as soon as its rows are complete (png.rs).
        Err(e) => crate::png::decode_rows(bytes).map_err(|_| Error::Decode(e.to_string()))?,
    };
    if (img.width(), img.height()) != (w, h) {
        return Err(Error::Decode(
            "PNG: rows of another size than its header's".into(),
        ));
    }
    let hi = |v: u16| (v >> 8) as u8;
    let gray16 = |v: u16| match opts.gray16 {
        Gray16::Clip => v.min(255) as u8,
        Gray16::Scale => hi(v),
    };
    let grey = |p: &[u8]| [p[0]; 3];
    Ok(match img {
        DynamicImage::ImageRgb8(i) if (window.2, window.3) == (w, h) => (i, "RGB"),
        DynamicImage::ImageRgb8(i) => (crop_convert(&i, 3, window, |p| [p[0], p[1], p[2]]), "RGB"),
        DynamicImage::ImageRgba8(i) => {
            (crop_convert(&i, 4, window, |p| [p[0], p[1], p[2]]), "RGBA")
        }
        DynamicImage::ImageLuma8(i) => (crop_convert(&i, 1, window, grey), "L"),
        DynamicImage::ImageLumaA8(i) => (crop_convert(&i, 2, window, grey), "LA"),
        DynamicImage::ImageLuma16(i) => {
            (crop_convert(&i, 1, window, |p| [gray16(p[0]); 3]), "I;16")
        }
        // 16-bit grey with a tRNS colour, which `image` expands to an alpha channel: Pillow opens
        // it as I;16 (the transparent value in `info`), and convert('RGB') ignores that.
        DynamicImage::ImageLumaA16(i) if grey16(bytes) => {
            (crop_convert(&i, 2, window, |p| [gray16(p[0]); 3]), "I;16")
        }
        DynamicImage::ImageLumaA16(i) => (crop_convert(&i, 2, window, |p| [hi(p[0]); 3]), "LA;16"),
        DynamicImage::ImageRgb16(i) => (
            crop_convert(&i, 3, window, |p| [hi(p[0]), hi(p[1]), hi(p[2])]),
            "RGB;16",
        ),
        DynamicImage::ImageRgba16(i) => (
            crop_convert(&i, 4, window, |p| [hi(p[0]), hi(p[1]), hi(p[2])]),
            "RGBA;16",
        ),
        other => {
            return Err(Error::Unsupported(format!(
                "pixel type {:?}",
                other.color()
            )));
        }
    })
}

/// The `window` of an image of `channels` samples a pixel (rows `width * channels` apart), each
/// pixel's samples converted by `rgb`.
fn crop_convert<T: Copy, I>(
    img: &image::ImageBuffer<I, Vec<T>>,
    channels: usize,
    window: Box4,
    rgb: impl Fn(&[T]) -> [u8; 3],
) -> RgbImage
where
    I: image::Pixel<Subpixel = T>,
{
    let (x, y, w, h) = window;
    let stride = img.width() as usize * channels;
    let samples = img.as_raw();
    let mut out = vec![0; w as usize * h as usize * 3];
    for (row, out_row) in (y as usize..).zip(out.chunks_exact_mut(w as usize * 3)) {
        let start = row * stride + x as usize * channels;
        let row = &samples[start..start + w as usize * channels];
        for (o, p) in out_row.chunks_exact_mut(3).zip(row.chunks_exact(channels)) {
            o.copy_from_slice(&rgb(p));
        }
    }
    RgbImage::from_raw(w, h, out).expect("sized")
}

/// Whether a PNG is 16-bit greyscale without alpha (IHDR colour type 0, depth 16).
fn grey16(png: &[u8]) -> bool {
    png.get(24..26) == Some(&[16, 0])
}

fn read_orientation(bytes: &[u8]) -> Orientation {
    let parsed = exif::Reader::new().read_from_container(&mut Cursor::new(bytes));
    let value = parsed.ok().and_then(|e| {
        e.get_field(exif::Tag::Orientation, exif::In::PRIMARY)
            .and_then(|f| f.value.get_uint(0))
    });
    Orientation(value.filter(|v| (1..=8).contains(v)).unwrap_or(1) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_bytes(img: DynamicImage) -> Vec<u8> {
        let mut buf = Vec::new();
        img.write_to(&mut Cursor::new(&mut buf), image::ImageFormat::Png)
            .unwrap();
        buf
    }

    #[test]
    fn sniff_refuses_other_bytes_as_not_an_image() {
        assert!(sniff(b"\x89PNG\r\n\x1a\n").is_ok());
        let e = sniff(b"hello, world").unwrap_err();
        assert!(matches!(e, Error::NotAnImage), "{e:?}");
        assert_eq!(
            e.to_string(),
            "not an image: neither PNG, JPEG, GIF, BMP, TIFF nor WebP"
        );
        // One image's failure: the batch goes on (exit 3 if it ends the run).
        assert_eq!(
            error_class::Classify::class(&e),
            error_class::Class::ItemsFailed
        );
    }

    #[test]
    fn stored_boxes_are_where_exif_transpose_takes_a_region_from() {
        let img = RgbImage::from_fn(7, 4, |x, y| image::Rgb([x as u8, y as u8, 0]));
        for o in 1..=8 {
            let o = Orientation(o);
            let whole = exif_transpose(img.clone(), o);
            assert_eq!(whole.dimensions(), o.size(7, 4));
            let (ow, oh) = whole.dimensions();
            for region in [
                (0, 0, ow, oh),
                (1, 2, 2, 1),
                (ow - 1, oh - 1, 1, 1),
                (0, 1, 3, 2),
            ] {
                let (x, y, w, h) = o.stored_box(7, 4, region);
                let part = image::imageops::crop_imm(&img, x, y, w, h).to_image();
                let (rx, ry, rw, rh) = region;
                let expected = image::imageops::crop_imm(&whole, rx, ry, rw, rh).to_image();
                assert_eq!(exif_transpose(part, o), expected, "{o:?} {region:?}");
            }
        }
    }

    #[test]
    fn cmyk_matches_pillow_example() {
        // Pillow 13: CMYK pixel (36, 234, 138, 71) -> RGB (158, 15, 84); file bytes are inverted.
        assert_eq!(
            cmyk_to_rgb(&[255 - 36, 255 - 234, 255 - 138, 255 - 71]),
            [158, 15, 84]
        );
    }

    #[test]
    fn sixteen_bit_modes_follow_pillow() {
        let g = image::ImageBuffer::<image::Luma<u16>, _>::from_raw(3, 1, vec![0u16, 200, 1000])
            .unwrap();
        let bytes = png_bytes(DynamicImage::ImageLuma16(g));
        let d = decode_rgb(&bytes, &DecodeOptions::default()).unwrap();
        assert_eq!(d.source_mode, "I;16");
        assert_eq!(d.rgb.as_raw(), &[0, 0, 0, 200, 200, 200, 255, 255, 255]);
        let opts = DecodeOptions {
            gray16: Gray16::Scale,
            ..Default::default()
        };
        let d = decode_rgb(&bytes, &opts).unwrap();
        assert_eq!(d.rgb.as_raw(), &[0, 0, 0, 0, 0, 0, 3, 3, 3]);
        let rgb =
            image::ImageBuffer::<image::Rgb<u16>, _>::from_raw(1, 1, vec![2732u16, 43567, 42613])
                .unwrap();
        let d = decode_rgb(
            &png_bytes(DynamicImage::ImageRgb16(rgb)),
            &DecodeOptions::default(),
        )
        .unwrap();
        assert_eq!(d.rgb.as_raw(), &[10, 170, 166]);
    }

    #[test]
    fn pixel_limit_is_checked_before_decoding() {
        let bytes = png_bytes(DynamicImage::ImageRgb8(RgbImage::new(100, 100)));
        let opts = DecodeOptions {
            max_pixels: 9_999,
            ..Default::default()
        };
        let e = decode_rgb(&bytes, &opts).unwrap_err();
        assert!(
            matches!(e, Error::TooManyPixels { pixels: 10_000, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("--max-pixels"));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode_rgb(b"not an image at all", &DecodeOptions::default()).is_err());
        assert!(decode_rgb(&[0xFF, 0xD8, 0xFF, 0xE0, 0, 1], &DecodeOptions::default()).is_err());
        let mut png = png_bytes(DynamicImage::ImageRgb8(RgbImage::new(8, 8)));
        png.truncate(png.len() / 2);
        assert!(decode_rgb(&png, &DecodeOptions::default()).is_err());
    }

    #[test]
    fn exif_transpose_orientations_are_inverse_pairs() {
        let img = RgbImage::from_fn(3, 2, |x, y| image::Rgb([x as u8, y as u8, 0]));
        let t6 = exif_transpose(img.clone(), Orientation(6));
        assert_eq!(t6.dimensions(), (2, 3));
        // 6 (rotate 90° cw) followed by 8 (rotate 90° ccw) is the identity.
        assert_eq!(exif_transpose(t6, Orientation(8)), img);
        let t5 = exif_transpose(img.clone(), Orientation(5));
        assert_eq!(t5.get_pixel(1, 2).0, [2, 1, 0]); // transpose: out(x, y) = in(y, x)
    }
}
