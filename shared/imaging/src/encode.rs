//! PNG output shared by the tools (fast compression: these are intermediate files).

use std::io::Write;

use image::ImageEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};

/// Writes 8-bit interleaved pixels with 1 (grey), 2 (grey+alpha), 3 (RGB) or 4 (RGBA) channels.
pub fn write_png(
    w: impl Write,
    pixels: &[u8],
    width: u32,
    height: u32,
    channels: u32,
) -> image::ImageResult<()> {
    let color = match channels {
        1 => image::ExtendedColorType::L8,
        2 => image::ExtendedColorType::La8,
        3 => image::ExtendedColorType::Rgb8,
        4 => image::ExtendedColorType::Rgba8,
        n => {
            return Err(image::ImageError::Unsupported(
                image::error::UnsupportedError::from_format_and_kind(
                    image::error::ImageFormatHint::Name("PNG".into()),
                    image::error::UnsupportedErrorKind::GenericFeature(format!("{n} channels")),
                ),
            ));
        }
    };
    PngEncoder::new_with_quality(w, CompressionType::Fast, FilterType::Adaptive)
        .write_image(pixels, width, height, color)
}
