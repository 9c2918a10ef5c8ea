//! `decode_region` gives exactly the pixels of the whole decode (`decode_rgb`, then
//! `exif_transpose` for the EXIF frame) inside the region, and refuses exactly what it refuses,
//! on every file of both corpora and on JPEGs made here in every subsampling, baseline and
//! progressive, with and without restart markers, in odd sizes. `decode_rgb` itself is Pillow's
//! pixels (conformance.rs), so a region is Pillow's pixels too. Tolerance 0.

use std::path::Path;

use image::RgbImage;
use imaging::{Box4, DecodeOptions, Frame, Orientation, decode_region, decode_rgb, exif_transpose};

/// Centre crops, thin strips, corners, the whole image and a few pseudo-random boxes.
fn regions(w: u32, h: u32, seed: u64) -> Vec<Box4> {
    let s = w.min(h);
    let mut out = vec![
        (0, 0, w, h),
        ((w - s) / 2, (h - s) / 2, s, s),
        (0, 0, 1, 1),
        (w - 1, h - 1, 1, 1),
        (w / 2, 0, 1, h),
        (0, h / 2, w, 1),
        (w / 3, h / 3, (w - w / 3).max(1), (h / 3).max(1)),
    ];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = |n: u32| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as u32
    };
    for _ in 0..6 {
        let (left, top) = (next(w), next(h));
        out.push((left, top, 1 + next(w - left), 1 + next(h - top)));
    }
    out
}

fn crop(img: &RgbImage, (x, y, w, h): Box4) -> RgbImage {
    image::imageops::crop_imm(img, x, y, w, h).to_image()
}

/// Every region of `bytes` in both frames against the whole decode; returns how many it checked
/// (0 when the whole decode refuses the file, after checking that every region refuses it too).
fn check(name: &str, bytes: &[u8]) -> usize {
    let opts = DecodeOptions::default();
    let whole = decode_rgb(bytes, &opts);
    let mut checked = 0;
    for frame in [Frame::Stored, Frame::Exif] {
        let (img, o) = match &whole {
            Ok(d) if frame == Frame::Exif => {
                (exif_transpose(d.rgb.clone(), d.orientation), d.orientation)
            }
            Ok(d) => (d.rgb.clone(), d.orientation),
            Err(e) => {
                // A region reaching the last row, and one ending far above it (what is wrong
                // with a file may lie below a window).
                let bottom = |w: u32, h: u32| (w / 2, h / 2, w - w / 2, h - h / 2);
                let top = |w: u32, h: u32| (w / 4, 0, w.div_ceil(4), h.div_ceil(8));
                for choose in [bottom, top] {
                    let r = decode_region(bytes, &opts, frame, choose);
                    let theirs = r.err().map(|e| e.to_string());
                    assert_eq!(
                        theirs,
                        Some(e.to_string()),
                        "{name}: refused whole, not as a region"
                    );
                }
                return 0;
            }
        };
        let (w, h) = img.dimensions();
        for region in regions(w, h, bytes.len() as u64) {
            let r = decode_region(bytes, &opts, frame, |rw, rh| {
                assert_eq!((rw, rh), (w, h), "{name}: size offered in {frame:?}");
                region
            })
            .unwrap_or_else(|e| panic!("{name} {frame:?} {region:?}: {e}"));
            assert_eq!((r.width, r.height, r.region), (w, h, region));
            assert_eq!(r.orientation, o);
            assert!(
                r.rgb == crop(&img, region),
                "{name} {frame:?} {region:?}: pixels differ"
            );
            checked += 1;
        }
    }
    checked
}

#[test]
fn regions_equal_the_whole_decode_on_both_corpora() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let mut files = 0;
    let mut checked = 0;
    for dir in ["conformance/files", "pillow/inputs"] {
        let mut names: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let bytes = std::fs::read(&p).unwrap();
            if imaging::sniff(&bytes[..bytes.len().min(64)]).is_err() {
                continue;
            }
            files += 1;
            checked += check(&p.display().to_string(), &bytes);
        }
    }
    eprintln!("{files} files, {checked} regions");
    assert!(
        files > 900 && checked > 10_000,
        "{files} files, {checked} regions"
    );
}

/// A JPEG of `w`×`h` noise-and-gradient pixels made by the vendored libjpeg-turbo.
fn encode(
    w: u32,
    h: u32,
    subsamp: i32,
    pixel_format: i32,
    progressive: bool,
    restart: bool,
) -> Vec<u8> {
    use turbojpeg_sys::*;
    let channels = match pixel_format {
        TJPF_TJPF_GRAY => 1,
        TJPF_TJPF_CMYK => 4,
        _ => 3,
    };
    let mut x = 0x2545_F491_4F6C_DD1Du64 ^ (w as u64 * 31 + h as u64);
    let pixels: Vec<u8> = (0..w * h * channels)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (px, py) = ((i / channels) % w, (i / channels) / w);
            ((px * 7 + py * 3 + (i % channels) * 60) as u64 % 200 + (x >> 58)) as u8
        })
        .collect();
    // SAFETY: the TurboJPEG API used as documented: a compressor handle, its parameters, one
    // compression of `pixels` (w*h*channels bytes, rows `w * channels` apart) into a buffer that
    // tj3Compress8 allocates and tj3Free releases after it is copied.
    unsafe {
        let tj = tj3Init(TJINIT_TJINIT_COMPRESS as i32);
        assert!(!tj.is_null());
        for (param, value) in [
            (TJPARAM_TJPARAM_QUALITY, 85),
            (TJPARAM_TJPARAM_SUBSAMP, subsamp),
            (TJPARAM_TJPARAM_PROGRESSIVE, progressive as i32),
            (TJPARAM_TJPARAM_RESTARTBLOCKS, if restart { 3 } else { 0 }),
        ] {
            assert_eq!(tj3Set(tj, param as i32, value), 0);
        }
        let mut buf: *mut u8 = std::ptr::null_mut();
        let mut size = 0;
        let rc = tj3Compress8(
            tj,
            pixels.as_ptr(),
            w as i32,
            (w * channels) as i32,
            h as i32,
            pixel_format,
            &mut buf,
            &mut size,
        );
        assert_eq!(
            rc,
            0,
            "{}",
            std::ffi::CStr::from_ptr(tj3GetErrorStr(tj)).to_string_lossy()
        );
        let out = std::slice::from_raw_parts(buf, size as usize).to_vec();
        tj3Free(buf.cast());
        tj3Destroy(tj);
        out
    }
}

#[test]
fn jpeg_regions_are_exact_in_every_subsampling_and_coding() {
    use turbojpeg_sys::*;
    let sampling = [
        ("4:4:4", TJSAMP_TJSAMP_444),
        ("4:2:2", TJSAMP_TJSAMP_422),
        ("4:2:0", TJSAMP_TJSAMP_420),
        ("4:4:0", TJSAMP_TJSAMP_440),
        ("4:1:1", TJSAMP_TJSAMP_411),
        ("4:4:1", TJSAMP_TJSAMP_441),
    ];
    let mut checked = 0;
    for (w, h) in [(333, 217), (217, 333), (130, 67), (9, 17), (1, 40)] {
        for progressive in [false, true] {
            for restart in [false, true] {
                let mut cases: Vec<(String, Vec<u8>)> = sampling
                    .iter()
                    .map(|&(name, s)| {
                        (
                            name.to_string(),
                            encode(w, h, s, TJPF_TJPF_RGB, progressive, restart),
                        )
                    })
                    .collect();
                cases.push((
                    "grey".into(),
                    encode(
                        w,
                        h,
                        TJSAMP_TJSAMP_GRAY,
                        TJPF_TJPF_GRAY,
                        progressive,
                        restart,
                    ),
                ));
                cases.push((
                    "CMYK".into(),
                    encode(
                        w,
                        h,
                        TJSAMP_TJSAMP_420,
                        TJPF_TJPF_CMYK,
                        progressive,
                        restart,
                    ),
                ));
                for (name, bytes) in cases {
                    let label =
                        format!("{name} {w}x{h} progressive={progressive} restart={restart}");
                    let n = check(&label, &bytes);
                    assert!(n > 0, "{label}: does not decode");
                    checked += n;
                    // Cut short, it is refused in every region as it is whole.
                    check(
                        &format!("{label}, truncated"),
                        &bytes[..bytes.len() * 2 / 3],
                    );
                }
            }
        }
    }
    eprintln!("{checked} regions");
}

#[test]
fn an_exif_rotated_jpeg_is_cropped_in_its_rotated_frame() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pillow/inputs");
    let bytes = std::fs::read(root.join("exif6.jpg")).unwrap();
    let whole = decode_rgb(&bytes, &DecodeOptions::default()).unwrap();
    assert_eq!(whole.orientation, Orientation(6));
    let (w, h) = whole.rgb.dimensions();
    let r = decode_region(&bytes, &DecodeOptions::default(), Frame::Exif, |rw, rh| {
        assert_eq!((rw, rh), (h, w), "offered the rotated size");
        (0, 0, rw, rh / 2)
    })
    .unwrap();
    let rotated = exif_transpose(whole.rgb, whole.orientation);
    assert!(r.rgb == crop(&rotated, (0, 0, h, w / 2)));
}

/// A window in the top part of `bytes` against the whole decode: the same refusal, or the same
/// pixels.
fn top_window_agrees(name: &str, bytes: &[u8]) {
    let opts = DecodeOptions::default();
    let whole = decode_rgb(bytes, &opts);
    let top = |w: u32, h: u32| (w / 3, h / 8, w / 3, h / 5);
    let region = decode_region(bytes, &opts, Frame::Stored, top);
    match (&whole, &region) {
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name}"),
        (Ok(d), Ok(r)) => {
            let (w, h) = d.rgb.dimensions();
            assert!(r.rgb == crop(&d.rgb, top(w, h)), "{name}: pixels differ");
        }
        _ => panic!(
            "{name}: whole {:?}, window {:?}",
            whole.as_ref().err(),
            region.as_ref().err()
        ),
    }
}

#[test]
fn rows_below_a_window_are_skipped_only_where_the_outcome_is_the_same() {
    use turbojpeg_sys::*;
    // A baseline JPEG's data is read to its end below a window unless the next marker is the
    // EOI: cut short it is still refused; cut short with an EOI after the cut, or with another
    // marker first, it decodes as the whole file does (zeros after the cut).
    let jpeg = encode(333, 217, TJSAMP_TJSAMP_420, TJPF_TJPF_RGB, false, false);
    let cut = &jpeg[..jpeg.len() * 2 / 3];
    let comment = [0xFF, 0xFE, 0x00, 0x04, b'h', b'i'];
    let variants: [(&str, Vec<u8>); 5] = [
        ("whole", jpeg.clone()),
        ("cut short", cut.to_vec()),
        ("cut short, then EOI", [cut, &[0xFF, 0xD9]].concat()),
        ("cut short, then a comment", [cut, &comment[..]].concat()),
        (
            "a comment before the EOI",
            [&jpeg[..jpeg.len() - 2], &comment[..], &[0xFF, 0xD9]].concat(),
        ),
    ];
    for (name, bytes) in &variants {
        top_window_agrees(name, bytes);
    }
    assert!(decode_rgb(cut, &DecodeOptions::default()).is_err());
}
