//! TIFF files made byte by byte for the tests above.

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
