use super::convert::ycbcr2rgb;
use super::*;

/// A little-endian TIFF file: `data` from offset 8, then one directory of the (tag, type, value)
/// entries, one value each, in the order given.
fn file(entries: &[(u16, u16, u32)], data: &[u8]) -> Vec<u8> {
    let ifd = 8 + data.len() as u32;
    let mut b = b"II*\0".to_vec();
    b.extend_from_slice(&ifd.to_le_bytes());
    b.extend_from_slice(data);
    b.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for &(tag, typ, value) in entries {
        b.extend_from_slice(&tag.to_le_bytes());
        b.extend_from_slice(&typ.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&value.to_le_bytes());
    }
    b.extend_from_slice(&[0; 4]);
    b
}

/// A little-endian TIFF of one strip of `data`, 2x1 unless the given (tag, type, value)
/// entries say otherwise, the IFD after the strip.
fn tiff(entries: &[(u16, u16, u32)], data: &[u8]) -> Vec<u8> {
    let mut all: Vec<(u16, u16, u32)> = [(256, 4, 2), (257, 4, 1)]
        .into_iter()
        .filter(|d| entries.iter().all(|e| e.0 != d.0))
        .collect();
    all.extend([(273, 4, 8), (279, 4, data.len() as u32)]);
    all.extend_from_slice(entries);
    all.sort();
    file(&all, data)
}

/// A 16x16 8-bit grey TIFF of one `tile`x`tile` tile holding `data`, compressed with
/// `compression`.
fn tiled(tile: u32, compression: u32, data: &[u8]) -> Vec<u8> {
    let entries: [(u16, u16, u32); 10] = [
        (256, 4, 16),
        (257, 4, 16),
        (258, 3, 8),
        (259, 3, compression),
        (262, 3, 1),
        (277, 3, 1),
        (322, 4, tile),
        (323, 4, tile),
        (324, 4, 8),
        (325, 4, data.len() as u32),
    ];
    file(&entries, data)
}

fn setup_of(entries: &[(u16, u16, u32)]) -> Result<Setup> {
    setup(&Ifd::read(&tiff(entries, &[0; 12]))?)
}

#[test]
fn setup_reads_mode_and_layout_from_the_tags_alone() {
    // 8-bit grey, uncompressed, rotated: Pillow's raw decoder, the sides swapped upright.
    let s = setup_of(&[(258, 3, 8), (262, 3, 1), (274, 3, 6)]).unwrap();
    assert_eq!((s.mode, s.raw, s.raw_path()), ("L", "L", true));
    assert_eq!(((s.width, s.height), s.upright()), ((2, 1), (1, 2)));
    assert_eq!(s.palette, None);
    // 16-bit RGB, deflated: libtiff hands the samples over in native order.
    let s = setup_of(&[(258, 3, 16), (259, 3, 8), (262, 3, 2), (277, 3, 3)]).unwrap();
    assert_eq!((s.mode, s.raw, s.raw_path()), ("RGB", "RGB;16N", false));
    assert_eq!((s.bps.as_slice(), s.bps_count), (&[16, 16, 16][..], 3));
    // YCbCr: libjpeg's RGB for a JPEG-compressed contiguous file, else libtiff's raster.
    let jpeg = [(258, 3, 8), (259, 3, 7), (262, 3, 6), (277, 3, 3)];
    let s = setup_of(&jpeg).unwrap();
    assert_eq!((s.mode, s.raw, s.ycbcr_rgba()), ("RGB", "RGB", false));
    let lzw = [(258, 3, 8), (259, 3, 5), (262, 3, 6), (277, 3, 3)];
    let s = setup_of(&lzw).unwrap();
    assert_eq!((s.mode, s.raw, s.ycbcr_rgba()), ("RGB", "RGBX", true));
    // Refusals, in Pillow's words.
    for (entries, why) in [
        (
            vec![(258, 3, 8), (262, 3, 3)],
            "palette image without a colour map",
        ),
        (vec![(258, 3, 8), (259, 3, 9)], "unknown compression 9"),
        (
            vec![(258, 3, 8), (262, 3, 1), (277, 3, 7)],
            "Invalid value for samples per pixel",
        ),
        (
            vec![(256, 4, 0), (258, 3, 8), (262, 3, 1)],
            "image of 0x1 pixels",
        ),
        (vec![(258, 3, 3), (262, 3, 1)], "unknown pixel mode"),
    ] {
        let e = setup_of(&entries).unwrap_err();
        assert_eq!(e.to_string(), format!("cannot decode: TIFF: {why}"));
    }
}

#[test]
fn raw_rows_convert_to_rgb_as_stored() {
    let bytes = tiff(&[(258, 3, 8), (262, 3, 1), (274, 3, 6)], &[10, 20]);
    let ifd = Ifd::read(&bytes).unwrap();
    let s = setup(&ifd).unwrap();
    // Before the orientation: the rows as stored.
    assert_eq!(
        raw_rgb(&ifd, &bytes, &s, false).unwrap(),
        [10, 10, 10, 20, 20, 20]
    );
    assert_eq!(
        decode(&bytes, false, |_, _| Ok(())).unwrap(),
        (1, 2, vec![10, 10, 10, 20, 20, 20], "L")
    );
}

#[test]
fn the_window_is_chosen_before_the_image_is_decoded() {
    // The caller's choice holds memory for the image (crop-resize's --max-memory): it was
    // asked only once the whole image had been decoded, so it bounded nothing. Asked first,
    // it is asked also of a file that then fails to decode, with the upright size.
    let cut = tiff(
        &[(256, 4, 64), (257, 4, 48), (258, 3, 8), (262, 3, 1)],
        &[1, 2],
    );
    let mut asked = None;
    let e = crate::decode_region(&cut, &Default::default(), crate::Frame::Stored, |w, h| {
        asked = Some((w, h));
        (0, 0, w, h)
    });
    assert!(e.is_err());
    assert_eq!(asked, Some((64, 48)));
    let rotated = tiff(&[(258, 3, 8), (262, 3, 1), (274, 3, 6)], &[10, 20]);
    let mut asked = None;
    let r = crate::decode_region(
        &rotated,
        &Default::default(),
        crate::Frame::Stored,
        |w, h| {
            asked = Some((w, h));
            (0, 0, w, h)
        },
    )
    .unwrap();
    assert_eq!(asked, Some((1, 2)));
    assert_eq!(r.rgb.dimensions(), (1, 2));
}

#[test]
fn a_tile_far_larger_than_its_image_is_refused_before_it_is_allocated() {
    let ok = |_, _| Ok(());
    // zlib's stream of nothing: libtiff would allocate the whole tile before inflating it.
    let empty = [0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01];
    for compression in [8, 1] {
        let huge = tiled(65536, compression, &empty);
        let e = decode(&huge, true, ok).unwrap_err().to_string();
        assert!(e.contains("TIFF"), "{compression}: {e}");
    }
    let e = decode(&tiled(65536, 8, &empty), true, ok)
        .unwrap_err()
        .to_string();
    assert!(e.contains("strip or tile of 4294967296 bytes"), "{e}");
    // A tile larger than a small image, as encoders write them (256x256), is read.
    let zeros = {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&[7u8; 256 * 256]).unwrap();
        z.finish().unwrap()
    };
    let (w, h, rgb, _) = decode(&tiled(256, 8, &zeros), true, ok).unwrap();
    assert_eq!((w, h), (16, 16));
    assert!(rgb.iter().all(|&v| v == 7));
}

#[test]
fn a_negative_sample_count_is_refused_not_a_panic() {
    let ok = |_, _| Ok(());
    let grey = tiff(&[(258, 3, 8), (262, 3, 1)], &[10, 20]);
    assert_eq!(
        decode(&grey, false, ok).unwrap().2,
        [10, 10, 10, 20, 20, 20]
    );
    // SamplesPerPixel as a signed short of -1 (the fuzzer's find: a capacity overflow).
    let signed = tiff(&[(258, 3, 8), (262, 3, 1), (277, 8, 0xFFFF)], &[10, 20]);
    let e = decode(&signed, false, ok).unwrap_err().to_string();
    assert!(e.contains("unknown data organization"), "{e}");
}

#[test]
fn a_one_strip_image_in_its_own_mode_is_read_whole_when_opened_by_name() {
    // Pillow 13 on a 2x3 8-bit grey TIFF of one strip: Image.open(path) memory-maps it
    // (every row from the strip's offset), Image.open(BytesIO) decodes RowsPerStrip rows.
    let ok = |_, _| Ok(());
    let grey = |rows: u32, data: &[u8]| {
        tiff(
            &[(257, 4, 3), (258, 3, 8), (262, 3, 1), (278, 4, rows)],
            data,
        )
    };
    let data = [10, 20, 30, 40, 50, 60];
    let rgb = |v: &[u8]| v.iter().flat_map(|&x| [x; 3]).collect::<Vec<u8>>();
    // RowsPerStrip 0: by name as stored; as a stream "tile cannot extend outside image".
    let zero = grey(0, &data);
    assert_eq!(decode(&zero, true, ok).unwrap().2, rgb(&data));
    assert!(decode(&zero, false, ok).is_err());
    // RowsPerStrip 1 with one strip: by name every row; as a stream the first, then black.
    let one = grey(1, &data);
    assert_eq!(decode(&one, true, ok).unwrap().2, rgb(&data));
    assert_eq!(
        decode(&one, false, ok).unwrap().2,
        rgb(&[10, 20, 0, 0, 0, 0])
    );
    // Short data: the map takes the bytes that follow (here the IFD's count, 7), as
    // Pillow's does, since the file holds them.
    assert_eq!(
        decode(&grey(0, &data[..4]), true, ok).unwrap().2,
        rgb(&[10, 20, 30, 40, 7, 0])
    );
    // Fill order 2: Pillow's raw mode is "L;R", not the mode, so no map, and no rows.
    let reversed = tiff(
        &[
            (257, 4, 3),
            (258, 3, 8),
            (262, 3, 1),
            (266, 3, 2),
            (278, 4, 0),
        ],
        &data,
    );
    assert!(decode(&reversed, true, ok).is_err());
    // A file too short for the map ("buffer is not large enough"): read as a stream is.
    let tall = tiff(
        &[(257, 4, 100), (258, 3, 8), (262, 3, 1), (278, 4, 3)],
        &data,
    );
    let streamed = decode(&tall, false, ok).unwrap().2;
    assert_eq!(streamed[..18], rgb(&data));
    assert_eq!(decode(&tall, true, ok).unwrap().2, streamed);
}

#[test]
fn ycbcr_tables_follow_pillow() {
    // Pillow 13: Image.new("YCbCr", (1, 1), c).convert("RGB").
    assert_eq!(ycbcr2rgb([0, 0, 0, 0]), [0, 135, 0]);
    assert_eq!(ycbcr2rgb([128, 128, 128, 0]), [128, 128, 128]);
    assert_eq!(ycbcr2rgb([200, 30, 240, 0]), [255, 153, 26]);
}
