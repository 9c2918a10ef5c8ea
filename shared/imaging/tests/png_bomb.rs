//! A small PNG whose colour profile (iCCP) inflates to 512 MB: refused within Pillow's limit on
//! what one chunk may inflate to, before the decoder inflates it (it took ~530 MB per decoder,
//! since reading the header inflated the profile before the chunks were checked). Alone in its
//! test binary: the process's peak memory is the measure.

use std::io::Write;

fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], body: &[u8]) {
    png.extend((body.len() as u32).to_be_bytes());
    png.extend(kind);
    png.extend(body);
    let mut crc = crc32fast::Hasher::new();
    crc.update(kind);
    crc.update(body);
    png.extend(crc.finalize().to_be_bytes());
}

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
    let profile = {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..512 {
            z.write_all(&zeros).unwrap();
        }
        z.finish().unwrap()
    };
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend(4u32.to_be_bytes());
    ihdr.extend(4u32.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(
        &mut png,
        b"iCCP",
        &[b"icc\0\0".as_slice(), &profile].concat(),
    );
    let pixels = {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&[0u8; 4 * 13]).unwrap();
        z.finish().unwrap()
    };
    chunk(&mut png, b"IDAT", &pixels);
    chunk(&mut png, b"IEND", &[]);
    let before = peak();
    let e = imaging::decode_rgb(&png, &imaging::DecodeOptions::default())
        .unwrap_err()
        .to_string();
    let grew = peak().saturating_sub(before);
    assert!(e.contains("inflates to more than"), "{e}");
    assert!(grew < 64 << 20, "the peak grew by {} MB", grew >> 20);
}
