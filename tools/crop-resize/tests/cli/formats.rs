//! Pixels as Pillow gives them, format by format: the resized outputs, `.npy`, the EXIF
//! orientation, TIFF layouts, files cut short, alpha.

use super::*;

#[test]
fn outputs_match_pillow_and_mirror_input_paths() {
    let tmp = with_fixtures(&[
        ("photo420.jpg", "imgs/a/photo.jpg"),
        ("palette.png", "imgs/b/pal.png"),
    ]);
    let recs = run_ok(
        tmp.path(),
        &["-r", "24", "-o", "out"],
        "imgs/a/photo.jpg\nimgs/b/pal.png\n",
    );
    assert_eq!(recs.types, ["image", "image", "summary"]);
    let first = &recs.items[0];
    assert_eq!(first.input, "imgs/a/photo.jpg");
    assert_eq!(first.source_width, Some(97));
    assert_eq!(recs.summary.ok, 2);
    let out = tmp.path().join("out/imgs/a/photo.png");
    assert_eq!(first.output, out);
    assert_eq!(
        rgb(&out),
        pillow("photo420.jpg.24.png"),
        "bit-identical to Pillow"
    );
}

#[test]
fn npy_output_is_uint8_channels_first_and_shard_records_are_inputs() {
    let tmp = with_fixtures(&[("rgb.png", "d/a.png"), ("la.png", "d/b.png")]);
    let shard = r#"{"type":"shard","shard":0,"shards":1,"paths":["d/a.png","d/b.png"]}"#;
    let recs = run_ok(
        tmp.path(),
        &["-r", "24", "-o", "out", "--format", "npy", "--base", "d"],
        format!("{shard}\n"),
    );
    assert_eq!(recs.types, ["image", "image", "summary"]);
    let p = tmp.path().join("out/a.npy");
    assert_eq!(
        (
            recs.items[0].output.as_path(),
            recs.items[0].format.as_str()
        ),
        (p.as_path(), "npy")
    );
    let a = read_npy(&p);
    assert_eq!(a.shape(), &[3, 24, 24]);
    assert_eq!(a[[1, 5, 7]], pillow("rgb.png.24.png").get_pixel(7, 5).0[1]);
}

#[test]
fn exif_transpose_is_opt_in() {
    let tmp = with_fixtures(&[("exif6.jpg", "e.jpg")]);
    let (_, recs, _) = run(tmp.path(), &["-r", "24", "-o", "plain", "e.jpg"], "");
    assert_eq!(
        (recs.items[0].source_width, recs.items[0].source_height),
        (Some(68), Some(52))
    );
    let (_, recs, _) = run(
        tmp.path(),
        &["-r", "24", "-o", "rot", "--exif-transpose", "e.jpg"],
        "",
    );
    assert_eq!(
        (recs.items[0].source_width, recs.items[0].source_height),
        (Some(52), Some(68))
    );
    assert_eq!(
        rgb(&tmp.path().join("rot/e.png")),
        pillow("exif6.jpg.exif.24.png")
    );
}

/// An image with an alpha channel says so: convert('RGB') drops it (as Pillow does), which is
/// why a transparent logo can come out all white or all black.
#[test]
fn records_say_when_an_alpha_channel_was_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["rgba.png", "la.png", "rgb.png"] {
        copy_fixture(tmp.path(), name, name);
    }
    let recs = run_ok(
        tmp.path(),
        &["-r", "8", "-o", "out"],
        "rgba.png\nla.png\nrgb.png\n",
    );
    let dropped: Vec<(String, bool)> = recs
        .items
        .iter()
        .map(|r| (r.input.to_string_lossy().into_owned(), r.alpha_dropped))
        .collect();
    assert_eq!(
        dropped,
        [
            ("rgba.png".to_string(), true),
            ("la.png".to_string(), true),
            ("rgb.png".to_string(), false)
        ]
    );
}

/// The planar tiled TIFF that made the tiff crate assert (exit 101, then an error record) is read
/// through libtiff now, as Pillow reads it.
#[test]
fn a_planar_tiled_tiff_is_resized_like_any_image() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("planar.tif"),
        testkit::planar_tiled_tiff(20, 20, 16),
    )
    .unwrap();
    copy_fixture(tmp.path(), "rgb.png", "rgb.png");
    let recs = run_ok(
        tmp.path(),
        &["-r", "16", "-o", "out", "planar.tif", "rgb.png"],
        "",
    );
    assert_eq!(recs.types[0], "image", "{recs:?}");
    assert_eq!(recs.items[0].input, "planar.tif");
    assert!(tmp.path().join("out/planar.png").exists());
    assert_eq!(recs.summary.ok, 2);
}

#[test]
fn an_uncompressed_tiff_with_rows_per_strip_0_gives_pillows_pixels() {
    // 3×3 8-bit grey in one strip with RowsPerStrip 0: Pillow 13's Image.open(path) memory-maps
    // the strip (one raw tile in the image's own mode) and gives the stored grey; crop-resize
    // refused it ("strips or tiles of no size").
    let grey: Vec<u8> = (1..=9).map(|v| v * 10).collect();
    let tiff = files::tiff_with_strip(
        &[
            (256, 4, 3),
            (257, 4, 3),
            (258, 3, 8),
            (259, 3, 1),
            (262, 3, 1),
            (278, 4, 0),
        ],
        &grey,
    );
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("zero.tif"), tiff).unwrap();
    run_ok(
        tmp.path(),
        &["-r", "3", "-o", "out", "--format", "npy"],
        "zero.tif\n",
    );
    let a = read_npy(&tmp.path().join("out/zero.npy"));
    for c in 0..3 {
        let plane: Vec<u8> = a.index_axis(ndarray::Axis(0), c).iter().copied().collect();
        assert_eq!(plane, grey, "channel {c}");
    }
}

#[test]
fn a_baseline_jpeg_cut_short_below_the_centre_square_is_refused_as_pillow_refuses_it() {
    // A tall photo's centre square ends well above its last rows; the rows below were not read
    // at all (libjpeg-turbo's jpeg_skip_scanlines reads nothing when skipping to the bottom), so
    // a file cut short there was resized where Pillow says "image file is truncated".
    let (w, h) = (64u32, 400u32);
    let mut x = 7u32;
    let img = image::RgbImage::from_fn(w, h, |_, _| {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        image::Rgb([(x >> 24) as u8, (x >> 16) as u8, (x >> 8) as u8])
    });
    let mut jpeg = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90)
        .encode_image(&img)
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("cut.jpg"), &jpeg[..jpeg.len() * 19 / 20]).unwrap();
    std::fs::write(tmp.path().join("whole.jpg"), &jpeg).unwrap();
    let recs = cut_refused_whole_resized(tmp.path(), "cut.jpg", "whole.jpg");
    assert!(recs.errors[0].message.contains("truncated"), "{recs:?}");
}

/// crop-resize on `cut` then `whole` in `dir`: the first is an error record, the second resized.
fn cut_refused_whole_resized(dir: &Path, cut: &str, whole: &str) -> Batch<ImageRecord> {
    let (code, recs, stderr) = run(dir, &["-r", "16", "-o", "out"], format!("{cut}\n{whole}\n"));
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(recs.types, ["error", "image", "summary"], "{stderr}");
    recs
}

#[test]
fn a_webp_cut_short_below_the_centre_square_is_refused_as_pillow_refuses_it() {
    // A tall lossless WebP cut at three quarters, its RIFF and VP8L sizes made to fit: libwebp's
    // cropping stopped at the crop's last row and never met the end of the data, where Pillow's
    // whole decode fails ("failed to read next frame"), as the script checks.
    let tmp = tempfile::tempdir().unwrap();
    let script = r#"
import io, random, struct, sys
from PIL import Image
random.seed(3)
im = Image.frombytes("RGB", (64, 800), bytes(random.randrange(256) for _ in range(64 * 800 * 3)))
b = io.BytesIO()
im.save(b, "WEBP", lossless=True)
whole = b.getvalue()
assert whole[12:16] == b"VP8L"
n = len(whole) * 3 // 4 & ~1
cut = bytearray(whole[:n])
cut[4:8] = struct.pack("<I", n - 8)
cut[16:20] = struct.pack("<I", n - 20)
open("whole.webp", "wb").write(whole)
open("cut.webp", "wb").write(cut)
try:
    Image.open("cut.webp").convert("RGB")
    sys.exit("Pillow decodes the cut file")
except OSError:
    pass
"#;
    let made = std::process::Command::new(testkit::python())
        .args(["-c", script])
        .current_dir(tmp.path())
        .output()
        .expect("the venv's python");
    assert!(made.status.success(), "{made:?}");
    cut_refused_whole_resized(tmp.path(), "cut.webp", "whole.webp");
}
