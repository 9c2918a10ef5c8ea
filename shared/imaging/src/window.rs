//! The memory a C decoder (jpeg.c, webp.c) decodes into: the window the caller chose, taken
//! only once the image's size is known and accepted.

use std::ffi::{c_uint, c_void};

use crate::{Box4, Error, Result};

/// What a C decoder's buffer callback (jpeg.c, webp.c) works with: the caller's choice of
/// window, then the window's pixel memory, or why the image was refused.
pub(crate) struct WindowBuffer<'a> {
    choose: &'a mut dyn FnMut(u32, u32) -> Result<Box4>,
    /// The window decoded and its samples, once chosen.
    pub window: Option<(Box4, Vec<u8>)>,
    /// Why `choose` refused the image.
    pub refused: Option<Error>,
}

impl<'a> WindowBuffer<'a> {
    pub fn new(choose: &'a mut dyn FnMut(u32, u32) -> Result<Box4>) -> Self {
        Self {
            choose,
            window: None,
            refused: None,
        }
    }

    /// Asks for the window of a `w`×`h` image, checks it lies inside, writes it to the
    /// decoder's four `window` words and returns room for its `bytes_per_pixel` samples; null
    /// (with `refused` set) when the image is refused, before any pixel memory is taken.
    pub fn take(
        &mut self,
        w: u32,
        h: u32,
        bytes_per_pixel: usize,
        window: &mut [std::ffi::c_uint],
    ) -> *mut u8 {
        let chosen = match (self.choose)(w, h) {
            Ok(b) => b,
            Err(e) => {
                self.refused = Some(e);
                return std::ptr::null_mut();
            }
        };
        let (x, y, ww, hh) = chosen;
        assert!(
            ww > 0 && hh > 0 && x.checked_add(ww).is_some_and(|r| r <= w) && y + hh <= h,
            "window {chosen:?} inside {w}x{h}"
        );
        window.copy_from_slice(&[x, y, ww, hh]);
        let samples = vec![0; ww as usize * hh as usize * bytes_per_pixel];
        self.window.insert((chosen, samples)).1.as_mut_ptr()
    }
}

/// A C decoder's buffer callback's arguments as Rust sees them: the context it was handed back
/// (`&mut T`) and the four unsigned ints of the window to fill.
///
/// # Safety
/// `ctx` is a live `&mut T` that nothing else uses during the call, and `window` points to four
/// unsigned ints.
pub(crate) unsafe fn callback_args<'a, T>(
    ctx: *mut c_void,
    window: *mut c_uint,
) -> (&'a mut T, &'a mut [c_uint]) {
    // SAFETY: what the caller promises.
    unsafe {
        (
            &mut *(ctx as *mut T),
            std::slice::from_raw_parts_mut(window, 4),
        )
    }
}
