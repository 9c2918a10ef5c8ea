//! What Pillow does to decoded pixels before they are RGB as it gives them: the EXIF orientation
//! (`ImageOps.exif_transpose`) and the CMYK conversion (`cmyk2rgb`).

use image::RgbImage;

use crate::Box4;

/// EXIF orientation tag (1 = as stored). Pillow's `Image.open` ignores it; see [`exif_transpose`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orientation(pub u16);

impl Orientation {
    /// The size of a `width`×`height` image once [`exif_transpose`] has applied this.
    pub fn size(self, width: u32, height: u32) -> (u32, u32) {
        if (5..=8).contains(&self.0) {
            (height, width)
        } else {
            (width, height)
        }
    }

    /// The box of a stored `width`×`height` image whose pixels [`exif_transpose`] moves to
    /// `region` (`(left, top, width, height)`) of the oriented one.
    pub fn stored_box(self, width: u32, height: u32, region: Box4) -> Box4 {
        let (w, h) = (width, height);
        let (x, y, bw, bh) = region;
        match self.0 {
            2 => (w - x - bw, y, bw, bh),
            3 => (w - x - bw, h - y - bh, bw, bh),
            4 => (x, h - y - bh, bw, bh),
            5 => (y, x, bh, bw),
            6 => (y, h - x - bw, bh, bw),
            7 => (w - y - bh, h - x - bw, bh, bw),
            8 => (w - y - bh, x, bh, bw),
            _ => region,
        }
    }
}

/// libImaging/Convert.c `cmyk2rgb`: `nk = 255 - k; c' = nk - c·nk/255` (rounded as Pillow's
/// MULDIV255), clipped.
pub(crate) fn cmyk2rgb([c, m, y, k]: [u8; 4]) -> [u8; 3] {
    let nk = 255 - k as i32;
    let muldiv255 = |a: i32, b: i32| {
        let t = a * b + 128;
        ((t >> 8) + t) >> 8
    };
    let ch = |v: u8| (nk - muldiv255(v as i32, nk)).clamp(0, 255) as u8;
    [ch(c), ch(m), ch(y)]
}

/// Applies the EXIF orientation like Pillow's `ImageOps.exif_transpose`.
pub fn exif_transpose(img: RgbImage, o: Orientation) -> RgbImage {
    use image::imageops::{flip_horizontal, rotate90, rotate180, rotate270};
    match o.0 {
        2 => flip_horizontal(&img),
        3 => rotate180(&img),
        4 => image::imageops::flip_vertical(&img),
        5 => flip_horizontal(&rotate90(&img)),  // TRANSPOSE
        6 => rotate90(&img),                    // ROTATE_270 (counter-clockwise) = 90° clockwise
        7 => flip_horizontal(&rotate270(&img)), // TRANSVERSE
        8 => rotate270(&img),                   // ROTATE_90 (counter-clockwise)
        _ => img,
    }
}
