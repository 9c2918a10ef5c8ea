//! Any bytes as an image file: decode (JPEG via libjpeg-turbo, TIFF via libtiff, GIF and BMP by
//! Pillow's rules, PNG and WebP via `image`), EXIF orientation, centre crop and Lanczos resize
//! must return an image or an error, never panic, abort or allocate without bound (the pixel limit
//! is lowered so huge headers are refused).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = imaging::DecodeOptions { max_pixels: 1 << 22, ..Default::default() };
    if let Ok(d) = imaging::decode_rgb(data, &opts) {
        let img = imaging::exif_transpose(d.rgb, d.orientation);
        let out = imaging::crop_resize(&img, 8);
        assert_eq!((out.width(), out.height()), (8, 8));
        let mut png = Vec::new();
        imaging::write_png(&mut png, out.as_raw(), 8, 8, 3).unwrap();
    }
});
