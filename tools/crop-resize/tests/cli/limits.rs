//! Bounds: decompression bombs, memory under a limit on the address space, `--max-memory`, the
//! thread count, usage errors.

use super::*;

#[test]
fn usage_errors_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(
        status(tmp.path(), &["-o", "out"]),
        2,
        "--resolution is required"
    );
    assert_eq!(status(tmp.path(), &["-r", "0", "-o", "out"]), 2);
}

/// The thread count sizes a thread pool: past its bound (1024) it is a usage error, not a
/// hundred million threads being started.
#[test]
fn jobs_past_the_bound_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    for j in ["1025", "100000000", "18446744073709551615"] {
        let o = exec(tmp.path(), &["-r", "8", "-o", "out", "-j", j], "");
        testkit::exits_saying(&o, 2, "1..=1024");
    }
}

#[test]
fn decompression_bombs_are_refused_from_the_header() {
    let tmp = with_fixtures(&[("photo420.jpg", "big.jpg"), ("bilevel.png", "small.png")]);
    let (code, recs, _) = run(
        tmp.path(),
        &[
            "-r",
            "8",
            "-o",
            "out",
            "--max-pixels",
            "2000",
            "big.jpg",
            "small.png",
        ],
        "",
    );
    assert_eq!(code, 3);
    assert_eq!(recs.types, ["error", "image", "summary"]);
    let msg = &recs.errors[0].message;
    assert!(
        msg.contains("97x71") && msg.contains("--max-pixels"),
        "{msg}"
    );
}

/// `crop-resize -r 16 -o o --jobs 1 INPUTS` in `dir` under 800 MB of address space (the tool needs
/// a tenth of it): exit status, records, stderr.
fn run_in_800_mb(dir: &Path, inputs: &str) -> (i32, Batch<ImageRecord>, String) {
    let script = format!(r#"ulimit -v 800000; exec "$CROP_RESIZE" -r 16 -o o --jobs 1 {inputs}"#);
    let out = shell(dir, &script).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        testkit::batch(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_png_whose_profile_inflates_to_gigabytes_is_refused_in_bounded_memory() {
    let tmp = with_fixtures(&[("rgb.png", "good1.png"), ("rgb.png", "good2.png")]);
    // A profile under Pillow's MAX_TEXT_CHUNK (1 MiB) is an image like any other.
    std::fs::write(
        tmp.path().join("small.png"),
        testkit::png_with_profile(16, 1 << 19),
    )
    .unwrap();
    // 1 GiB of profile in a ~1 MB file: it inflated whole before (aborting the whole batch
    // under a memory limit, every record lost); Pillow refuses it, and so must we, cheaply.
    std::fs::write(
        tmp.path().join("bomb.png"),
        testkit::png_with_profile(16, 1 << 30),
    )
    .unwrap();
    let (code, recs, stderr) = run_in_800_mb(tmp.path(), "good1.png small.png bomb.png good2.png");
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(recs.types, ["image", "image", "error", "image", "summary"]);
    assert_eq!(recs.errors[0].input, std::ffi::OsStr::new("bomb.png"));
    assert!(
        recs.errors[0].message.contains("MAX_TEXT_CHUNK"),
        "{recs:?}"
    );
}

#[test]
fn a_small_tiff_claiming_millions_of_pixels_is_truncated_not_allocated() {
    // 6,488,101 × 23 RGB (under the pixel limit), uncompressed, in one strip that the file does
    // not hold: it allocated 12 bytes a pixel (1.75 GB) before noticing (an abort under a memory
    // limit); Pillow says "image file is truncated" at once.
    let (w, h) = (6_488_101u32, 23u32);
    let entries: [(u16, u16, u32); 9] = [
        (256, 4, w),
        (257, 4, h),
        (258, 3, 8),
        (259, 3, 1),
        (262, 3, 2),
        (273, 4, 8),
        (277, 3, 3),
        (278, 4, h),
        (279, 4, w * h * 3),
    ];
    let mut tiff = files::tiff_directory(&entries);
    tiff.resize(2693, 0);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("wide.tif"), tiff).unwrap();
    copy_fixture(tmp.path(), "rgb.png", "good.png");
    let (code, recs, stderr) = run_in_800_mb(tmp.path(), "wide.tif good.png");
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(recs.types, ["error", "image", "summary"]);
    assert!(recs.errors[0].message.contains("truncated"), "{recs:?}");
}

#[test]
fn a_large_compressed_greyscale_tiff_takes_a_few_bytes_a_pixel() {
    // 7,000² greyscale in a 50 KB deflate strip: every pixel went through a 12-byte
    // intermediate (and two RGB copies), over 900 MB, which failed under the 800 MB limit; it now
    // takes the decompressed samples and the RGB image (4 bytes a pixel), as Pillow takes 8.
    use std::io::Write;
    let (w, h) = (7_000u32, 7_000u32);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    let row = vec![90u8; w as usize];
    for _ in 0..h {
        z.write_all(&row).unwrap();
    }
    let strip = z.finish().unwrap();
    let tiff = files::tiff_with_strip(
        &[
            (256, 4, w),
            (257, 4, h),
            (258, 3, 8),
            (259, 3, 8),
            (262, 3, 1),
            (277, 3, 1),
            (278, 4, h),
        ],
        &strip,
    );
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("grey.tif"), tiff).unwrap();
    let (code, recs, stderr) = run_in_800_mb(tmp.path(), "grey.tif");
    assert_eq!(code, 0, "{stderr} {recs:?}");
    assert_eq!(recs.types, ["image", "summary"]);
    let out = rgb(&tmp.path().join("o/grey.png"));
    assert!(out.pixels().all(|p| p.0 == [90; 3]));
}

#[test]
fn a_memory_budget_smaller_than_one_image_makes_workers_wait_not_fail() {
    // Every image is reckoned at more than 1 KB: with -j 2 each waits for the other to finish,
    // and all are done, in input order.
    let tmp = tempfile::tempdir().unwrap();
    let names = [
        "photo420.jpg",
        "rgb.png",
        "palette.png",
        "gray.jpg",
        "exif6.jpg",
    ];
    for n in names {
        copy_fixture(tmp.path(), n, n);
    }
    let mut args = vec!["-r", "16", "-o", "o", "-j", "2", "--max-memory", "1K"];
    args.extend(names);
    let (code, recs, stderr) = run(tmp.path(), &args, "");
    assert_eq!(code, 0, "{stderr}");
    let inputs: Vec<_> = recs.items.iter().map(|r| r.input.clone()).collect();
    assert_eq!(inputs, names.map(std::ffi::OsString::from));
    for n in names {
        let stem = n.split('.').next().unwrap();
        assert!(tmp.path().join(format!("o/{stem}.png")).exists(), "{n}");
    }
    // A size that is not one is a usage error.
    let out = exec(
        tmp.path(),
        &["-r", "16", "-o", "o", "--max-memory", "lots", "x"],
        "",
    );
    testkit::exits_saying(&out, 2, "not a size");
}
