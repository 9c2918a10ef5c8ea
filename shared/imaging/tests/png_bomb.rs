//! A small PNG whose colour profile (iCCP) inflates to 512 MB: refused within Pillow's limit on
//! what one chunk may inflate to, before the decoder inflates it (it took ~530 MB per decoder,
//! since reading the header inflated the profile before the chunks were checked). Alone in its
//! test binary: the process's peak memory is the measure.

/// The peak resident memory of this process so far, in bytes (VmHWM).
fn peak() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn a_profile_that_inflates_to_512_mb_is_refused_within_a_few_megabytes() {
    let png = testkit::png_with_profile(4, 512 << 20);
    let before = peak();
    let e = imaging::decode_rgb(&png, &imaging::DecodeOptions::default())
        .unwrap_err()
        .to_string();
    let grew = peak().saturating_sub(before);
    assert!(e.contains("inflates to more than"), "{e}");
    assert!(grew < 64 << 20, "the peak grew by {} MB", grew >> 20);
}
