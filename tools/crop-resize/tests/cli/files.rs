//! Image files made byte by byte for the tests above.

/// A 16×16 RGB PNG whose iCCP profile inflates to `profile_bytes` zeros (about 1/1000 of that
/// in the file).
pub fn png_with_profile(profile_bytes: usize) -> Vec<u8> {
    use std::io::Write;
    let zlib = |data: &mut dyn FnMut(&mut dyn Write)| {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        data(&mut z);
        z.finish().unwrap()
    };
    let chunk = |png: &mut Vec<u8>, kind: &[u8], body: &[u8]| {
        png.extend((body.len() as u32).to_be_bytes());
        let start = png.len();
        png.extend(kind);
        png.extend(body);
        let crc = crc32fast::hash(&png[start..]);
        png.extend(crc.to_be_bytes());
    };
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend(16u32.to_be_bytes());
    ihdr.extend(16u32.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    let mut iccp = b"icc\0\0".to_vec();
    iccp.extend(zlib(&mut |w| {
        let zeros = vec![0u8; 1 << 20];
        let mut left = profile_bytes;
        while left > 0 {
            let n = left.min(zeros.len());
            w.write_all(&zeros[..n]).unwrap();
            left -= n;
        }
    }));
    chunk(&mut png, b"iCCP", &iccp);
    let rows: Vec<u8> = (0..16).flat_map(|_| [0u8; 49]).collect();
    chunk(
        &mut png,
        b"IDAT",
        &zlib(&mut |w| w.write_all(&rows).unwrap()),
    );
    chunk(&mut png, b"IEND", &[]);
    png
}

/// A little-endian TIFF header and one directory of (tag, type, value) entries, one value each.
pub fn tiff_directory(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut tiff = b"II*\0".to_vec();
    tiff.extend(8u32.to_le_bytes());
    tiff.extend((entries.len() as u16).to_le_bytes());
    for &(tag, kind, value) in entries {
        tiff.extend(tag.to_le_bytes());
        tiff.extend(kind.to_le_bytes());
        tiff.extend(1u32.to_le_bytes());
        tiff.extend(value.to_le_bytes());
    }
    tiff.extend(0u32.to_le_bytes());
    tiff
}

/// The same with one strip of `data` after the directory: the entries plus StripOffsets and
/// StripByteCounts (in tag order).
pub fn tiff_with_strip(entries: &[(u16, u16, u32)], data: &[u8]) -> Vec<u8> {
    let mut entries = entries.to_vec();
    let directory_len = 2 + 12 * (entries.len() + 2) + 4;
    entries.push((273, 4, 8 + directory_len as u32));
    entries.push((279, 4, data.len() as u32));
    entries.sort();
    let mut tiff = tiff_directory(&entries);
    tiff.extend(data);
    tiff
}
