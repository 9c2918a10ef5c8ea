//! CIELab to RGB as Pillow converts it: `Image.convert` sends LAB through LittleCMS
//! (`ImageCms.buildTransform(createProfile("LAB"), createProfile("sRGB"), "LAB", "RGB")`: the
//! D50 Lab profile, the built-in sRGB profile, perceptual intent, 8-bit Lab in, RGBA out). The
//! same transform from Debian's LittleCMS 2.14 equals Pillow 13's (LittleCMS 2.19) on all 2^24
//! inputs (checked once with numpy).
//!
//! LittleCMS is loaded when the first Lab image arrives (`liblcms2.so.2`), so that the tools do not
//! need it to start; without it, Lab images are refused with a message that says so.

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use crate::{Error, Result};

// lcms2.h: TYPE_Lab_8 = COLORSPACE_SH(PT_Lab = 10) | CHANNELS_SH(3) | BYTES_SH(1);
// TYPE_RGBA_8 = COLORSPACE_SH(PT_RGB = 4) | EXTRA_SH(1) | CHANNELS_SH(3) | BYTES_SH(1).
const TYPE_LAB_8: u32 = (10 << 16) | (3 << 3) | 1;
const TYPE_RGBA_8: u32 = (4 << 16) | (1 << 7) | (3 << 3) | 1;
const INTENT_PERCEPTUAL: u32 = 0;

type Handle = *mut c_void;

struct Lcms {
    _lib: libloading::Library,
    create_lab: unsafe extern "C" fn(*const c_void) -> Handle,
    create_srgb: unsafe extern "C" fn() -> Handle,
    close_profile: unsafe extern "C" fn(Handle) -> i32,
    create_transform: unsafe extern "C" fn(Handle, u32, Handle, u32, u32, u32) -> Handle,
    do_transform: unsafe extern "C" fn(Handle, *const c_void, *mut c_void, u32),
    delete_transform: unsafe extern "C" fn(Handle),
}

/// LittleCMS, loaded once; `Err` is the loader's error (kept for every later Lab image).
fn lcms() -> std::result::Result<&'static Lcms, Arc<libloading::Error>> {
    static LCMS: OnceLock<std::result::Result<Lcms, Arc<libloading::Error>>> = OnceLock::new();
    LCMS.get_or_init(|| load("liblcms2.so.2").map_err(Arc::new))
        .as_ref()
        .map_err(Arc::clone)
}

/// Loads LittleCMS from `file` (a soname) and takes its symbols.
fn load(file: &str) -> std::result::Result<Lcms, libloading::Error> {
    // SAFETY: loading LittleCMS runs no initialisation with side effects; each symbol is
    // given the signature lcms2.h declares for it.
    unsafe {
        let lib = libloading::Library::new(file)?;
        macro_rules! sym {
            ($name:literal) => {
                *lib.get($name)?
            };
        }
        Ok(Lcms {
            create_lab: sym!(b"cmsCreateLab2Profile"),
            create_srgb: sym!(b"cmsCreate_sRGBProfile"),
            close_profile: sym!(b"cmsCloseProfile"),
            create_transform: sym!(b"cmsCreateTransform"),
            do_transform: sym!(b"cmsDoTransform"),
            delete_transform: sym!(b"cmsDeleteTransform"),
            _lib: lib,
        })
    }
}

/// The error for a Lab image when LittleCMS could not be loaded.
fn no_lcms(e: impl Into<Arc<libloading::Error>>) -> Error {
    Error::NoLcms(e.into())
}

/// Pillow's Lab pixels (L, a + 128, b + 128) to RGB.
pub(crate) fn to_rgb(lab: &[[u8; 3]]) -> Result<Vec<[u8; 3]>> {
    let l = lcms().map_err(no_lcms)?;
    let n =
        u32::try_from(lab.len()).map_err(|_| Error::Unsupported("Lab image too large".into()))?;
    let mut rgba = vec![[0u8; 4]; lab.len()];
    // SAFETY: the profiles and the transform are made, used and released here; the buffers hold
    // n pixels of 3 (Lab) and 4 (RGBA) bytes, the formats the transform was made for.
    unsafe {
        let (lab_profile, srgb) = ((l.create_lab)(std::ptr::null()), (l.create_srgb)());
        let t = (l.create_transform)(
            lab_profile,
            TYPE_LAB_8,
            srgb,
            TYPE_RGBA_8,
            INTENT_PERCEPTUAL,
            0,
        );
        (l.close_profile)(lab_profile);
        (l.close_profile)(srgb);
        if t.is_null() {
            return Err(Error::Unsupported("LittleCMS made no Lab transform".into()));
        }
        (l.do_transform)(t, lab.as_ptr().cast(), rgba.as_mut_ptr().cast(), n);
        (l.delete_transform)(t);
    }
    Ok(rgba.into_iter().map(|[r, g, b, _]| [r, g, b]).collect())
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    #[test]
    fn without_littlecms_a_lab_image_is_unsupported_with_the_loaders_error() {
        let e = super::no_lcms(super::load("liblcms2-not-here.so.0").err().unwrap());
        assert!(matches!(e, crate::Error::NoLcms(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "unsupported image: a CIELab image needs LittleCMS (liblcms2.so.2), as Pillow \
             converts it with it"
        );
        // The loader's error (shared: it is kept for every later Lab image).
        let source = e.source().expect("the loader's error is the source");
        assert!(
            source.is::<std::sync::Arc<libloading::Error>>(),
            "{source:?}"
        );
        // As users see it (the tools print the chain): the loader's reason follows, with the
        // file it looked for.
        let text = error_class::chain_text(&e);
        assert!(
            text.starts_with(&format!("{e}: {source}")) && text.contains("liblcms2-not-here.so.0"),
            "{text}"
        );
    }

    #[test]
    fn lab_follows_pillow() {
        // Pillow 13: Image.new("LAB", (1, 1), c).convert("RGB").
        let rgb = super::to_rgb(&[[0, 0, 0], [128, 128, 128], [200, 100, 150], [255, 255, 255]]);
        assert_eq!(
            rgb.unwrap(),
            [[0, 59, 195], [119, 119, 119], [149, 208, 151], [255, 67, 0]]
        );
    }
}
