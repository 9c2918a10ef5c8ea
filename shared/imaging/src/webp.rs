//! WebP as Pillow decodes it, through libwebp (src/webp.c): a still image whole or a window of
//! it, an animation's first frame on its canvas.

use std::ffi::{c_int, c_uint, c_void};

use image::RgbImage;

use crate::window::WindowBuffer;
use crate::{Box4, Error, Result};

unsafe extern "C" {
    fn shk_webp_decode(
        data: *const u8,
        size: usize,
        out_buffer: unsafe extern "C" fn(*mut c_void, c_uint, c_uint, *mut c_uint) -> *mut u8,
        ctx: *mut c_void,
        code: *mut c_int,
    ) -> c_int;
}

const OK: c_int = 0;
const REJECTED: c_int = 3;

unsafe extern "C" fn out_buffer(
    ctx: *mut c_void,
    w: c_uint,
    h: c_uint,
    window: *mut c_uint,
) -> *mut u8 {
    // SAFETY: ctx is the &mut WindowBuffer that decode() passed, alive for the whole call;
    // window points to webp.c's four unsigned ints.
    let (out, window) = unsafe { crate::window::callback_args::<WindowBuffer>(ctx, window) };
    out.take(w, h, 3, window)
}

/// libwebp's VP8StatusCode in words.
fn status_text(code: c_int) -> &'static str {
    match code {
        1 => "out of memory",
        2 => "invalid parameter",
        3 => "bitstream error",
        4 => "unsupported feature",
        5 => "suspended",
        6 => "user abort",
        7 => "not enough data (truncated?)",
        _ => "could not decode",
    }
}

/// Decodes the window `choose(width, height)` returns (`(left, top, width, height)`, inside the
/// image) to RGB, with the source mode Pillow reports (`RGBA` when the file has alpha, else
/// `RGB`). `choose` runs before any pixel memory is taken and may refuse the image.
pub(crate) fn decode(
    bytes: &[u8],
    mut choose: impl FnMut(u32, u32) -> Result<Box4>,
) -> Result<(RgbImage, &'static str)> {
    let mut out = WindowBuffer::new(&mut choose);
    let mut code: c_int = 0;
    // SAFETY: bytes outlives the call; out_buffer gets &mut out back as ctx and returns a buffer
    // of exactly window width * height * 3 bytes, which webp.c fills.
    let status = unsafe {
        shk_webp_decode(
            bytes.as_ptr(),
            bytes.len(),
            out_buffer,
            &mut out as *mut WindowBuffer as *mut c_void,
            &mut code,
        )
    };
    match status {
        OK => {
            let ((_, _, w, h), pixels) = out.window.expect("set before decoding");
            let mode = if has_alpha(bytes) { "RGBA" } else { "RGB" };
            Ok((RgbImage::from_raw(w, h, pixels).expect("sized"), mode))
        }
        REJECTED => Err(out.refused.expect("set when rejected")),
        _ => Err(Error::Decode(format!("WebP: {}", status_text(code)))),
    }
}

/// Whether a WebP has alpha: the VP8X flag, a VP8L header's alpha hint, never a plain VP8.
fn has_alpha(bytes: &[u8]) -> bool {
    match bytes.get(12..16) {
        Some(b"VP8X") => bytes.get(20).is_some_and(|f| f & 0x10 != 0),
        // VP8L: signature byte 0x2f at 20, then 14 + 14 bits of size and the alpha bit.
        Some(b"VP8L") => bytes.get(24).is_some_and(|b| b & 0x10 != 0),
        _ => false,
    }
}
