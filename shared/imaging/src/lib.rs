//! Images as the StyleGAN2-ADA projection scripts prepare them, pixel for pixel as Pillow does:
//!
//! ```text
//! img = Image.open(p).convert('RGB')
//! s = min(w, h); img = img.crop(((w-s)//2, (h-s)//2, (w+s)//2, (h+s)//2))
//! img = img.resize((R, R), Image.LANCZOS)
//! ```
//!
//! - [`decode_rgb`]: JPEG through libjpeg-turbo (vendored 3.1, the same decoder family and
//!   settings as Pillow's wheels: accurate integer DCT, fancy upsampling), TIFF through libtiff,
//!   WebP through libwebp, GIF and BMP by Pillow's rules, PNG through the `image` crate, then
//!   Pillow's `convert('RGB')` rules (alpha dropped, palette expanded, 16-bit samples to their
//!   high byte, 16-bit greyscale clipped to 255 as Pillow's `I;16` does, Adobe CMYK inverted and
//!   converted with Pillow's formula). The pixel limit is checked from the header, before any
//!   pixel is decoded.
//! - [`decode_region`]: the same pixels for only a part of the image (a crop), which JPEG and
//!   WebP decode only around that part.
//! - [`center_crop_box`] and [`resize_lanczos`]: a port of Pillow's `ImagingResample`
//!   (libImaging/Resample.c) with the same fixed-point arithmetic, so results are bit-identical;
//!   AVX2 where the CPU has it.
//!
//! ```
//! let img = image::RgbImage::from_fn(40, 30, |x, y| image::Rgb([x as u8, y as u8, 7]));
//! let out = imaging::crop_resize(&img, 16);
//! assert_eq!(out.dimensions(), (16, 16));
//! ```

// The vendored libjpeg-turbo whose libjpeg API src/jpeg.c calls (nothing in Rust names it).
extern crate turbojpeg_sys;

mod bmp;
mod decode;
mod encode;
mod gif;
mod jpeg;
mod lab;
mod pixels;
mod png;
mod pyfile;
mod resample;
mod tiff;
pub mod transforms;
mod webp;
mod window;

pub use decode::{DecodeOptions, Decoded, Frame, Gray16, Region, decode_region, decode_rgb, sniff};
pub use encode::write_png;
pub use pixels::{Orientation, exif_transpose};
pub use resample::{Box4, Filter, Resize, center_crop_box, crop_resize, resize_lanczos};

/// Everything that can go wrong with one image.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "image is {width}x{height} = {pixels} pixels, over the limit of {limit} (a decompression bomb?); raise --max-pixels if it is genuine"
    )]
    TooManyPixels {
        width: u64,
        height: u64,
        pixels: u64,
        limit: u64,
    },
    #[error("cannot decode: {0}")]
    Decode(String),
    #[error("unsupported image: {0}")]
    Unsupported(String),
    #[error("image has no pixels ({0}x{1})")]
    Empty(u32, u32),
    /// The first bytes are none of the formats [`decode_rgb`] reads ([`sniff`]).
    #[error("not an image: neither PNG, JPEG, GIF, BMP, TIFF nor WebP")]
    NotAnImage,
    /// A CIELab image, and LittleCMS (`liblcms2.so.2`) could not be loaded: the loader's error.
    #[error(
        "unsupported image: a CIELab image needs LittleCMS (liblcms2.so.2), as Pillow converts it with it"
    )]
    NoLcms(#[source] std::sync::Arc<libloading::Error>),
}

pub type Result<T> = std::result::Result<T, Error>;

/// One image could not be used: if such an error ever ends a run, that run's items failed.
impl error_class::Classify for Error {
    fn class(&self) -> error_class::Class {
        error_class::Class::ItemsFailed
    }
}
