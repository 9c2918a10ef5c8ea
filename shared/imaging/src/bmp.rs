//! BMP as Pillow 13 reads it (BmpImagePlugin `_open`/`_bitmap`, the raw decoder and
//! `BmpRleDecoder`), so that `convert('RGB')` gives the same pixels and the same files are refused:
//!
//! - headers of 12 (OS/2 1.x), 40, 52, 56, 64 (OS/2 2.x), 108 and 124 bytes; the planes field is
//!   not looked at; a height whose top byte is 0xFF is a top-down image, RLE ones included;
//! - 1, 4 and 8 bits are palettes, read as `1` or `L` when the palette is the grey ramp (then,
//!   as in Pillow, the samples are read with that mode's raw mode whatever the bit depth);
//!   16 bits are 5-5-5 unless the bit fields say 5-6-5, expanded as Pillow's `BGR;15`/`BGR;16`
//!   unpackers do (`c * 255 / 31`); 24 and 32 bits BGR(X); bit fields only in Pillow's layouts;
//! - RLE8 and RLE4 decoded as BmpRleDecoder does, down to its padding rule (the file position is
//!   made even after an absolute run) and its refusal of data that ends before the image is full;
//! - uncompressed rows that the file cuts short refuse the file ("image file is truncated").

use crate::{Error, Result};

fn bad(what: impl std::fmt::Display) -> Error {
    Error::Decode(format!("BMP: {what}"))
}

use crate::pyfile::PyFile as File;

impl<'a> File<'a> {
    /// ImageFile._safe_read: all `n` bytes or an error.
    fn safe_read(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self.read(n);
        if s.len() < n {
            return Err(bad("Truncated File Read"));
        }
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32> {
        let s = self.read(4);
        le32(s, 0).ok_or_else(|| bad("cannot identify image file"))
    }
}

fn le16(s: &[u8], at: usize) -> Option<u32> {
    Some(u16::from_le_bytes(s.get(at..at + 2)?.try_into().ok()?) as u32)
}

fn le32(s: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(s.get(at..at + 4)?.try_into().ok()?))
}

/// Pillow's mode of the image and the raw mode its samples are read with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `1`: any non-zero sample is white.
    One,
    L,
    P,
    Rgb,
}

/// A decoded file: its size, its RGB bytes and Pillow's name of its mode.
pub(crate) type BmpImage = (u32, u32, Vec<u8>, &'static str);

/// Decodes a BMP file as `Image.open(p).convert('RGB')` does; `check(w, h)` is asked before
/// any pixel is decoded.
///
/// BmpImagePlugin's order: the headers' fields in file order ([`Header::read`]), the mode they
/// imply ([`modes`]), the colour table ([`colour_table`]), each checked before what it sizes is
/// allocated; then the caller's check, the samples ([`samples`]) and their RGB.
pub(crate) fn decode(bytes: &[u8], check: impl FnOnce(u32, u32) -> Result<()>) -> Result<BmpImage> {
    let mut fp = File::new(bytes, 0);
    let header = Header::read(&mut fp)?;
    let (mut mode, mut raw, rle) = modes(&header)?;
    let mut palette = Vec::new();
    if mode == Mode::P {
        match colour_table(&mut fp, &header)? {
            Table::Grey(grey, grey_raw) => (mode, raw) = (grey, grey_raw),
            Table::Colours(colours) => palette = colours,
        }
    }
    check(header.width, header.height)?;
    let start = match header.offset {
        0 => fp.pos,
        o => usize::try_from(o).unwrap_or(usize::MAX),
    };
    let samples = samples(bytes, start, &header, mode, raw, rle)?;
    let rgb: Vec<u8> = samples
        .into_iter()
        .flat_map(|s| match (mode, s) {
            (Mode::One, [v, ..]) => [if v != 0 { 255 } else { 0 }; 3],
            (Mode::L, [v, ..]) => [v; 3],
            (Mode::P, [i, ..]) => palette.get(i as usize).copied().unwrap_or([0; 3]),
            (Mode::Rgb, [r, g, b]) => [r, g, b],
        })
        .collect();
    let name = match mode {
        Mode::One => "1",
        Mode::L => "L",
        Mode::P => "P",
        Mode::Rgb if raw.contains('A') => "RGBA",
        Mode::Rgb => "RGB",
    };
    Ok((header.width, header.height, rgb, name))
}

/// What the file header and the bitmap header say of the image.
struct Header {
    width: u32,
    height: u32,
    bits: u32,
    compression: u32,
    /// Entries in the colour table (`1 << bits` where the header says 0).
    colors: u32,
    /// Bytes of a colour table entry: 3 (OS/2 1.x, BGR) or 4 (BGRX).
    padding: usize,
    top_down: bool,
    /// The red, green, blue and alpha bit fields of compression 3.
    masks: Option<[u32; 4]>,
    /// Where the pixels start in the file (0: right after the colour table).
    offset: u64,
}

impl Header {
    /// BmpImagePlugin `_open`'s and `_bitmap`'s header fields in file order; `fp` is left at
    /// the colour table.
    fn read(fp: &mut File) -> Result<Header> {
        let head = fp.read(14);
        let mut offset = le32(head, 10).ok_or_else(|| bad("cannot identify image file"))? as u64;
        let header_size = fp.u32()?;
        let data = fp.safe_read((header_size as usize).saturating_sub(4))?;
        let h16 = |at| le16(data, at).expect("read above");
        let h32 = |at| le32(data, at).expect("read above");
        let (width, height, bits, compression, mut colors, padding, top_down);
        let mut masks = None;
        match header_size {
            12 => {
                (width, height, bits) = (h16(0), h16(2), h16(6));
                (compression, colors, padding, top_down) = (0, 0, 3, false);
            }
            40 | 52 | 56 | 64 | 108 | 124 => {
                top_down = data[7] == 0xFF;
                width = h32(0);
                height = if top_down {
                    h32(4).wrapping_neg()
                } else {
                    h32(4)
                };
                (bits, compression, colors, padding) = (h16(10), h32(12), h32(28), 4);
                if compression == 3 {
                    masks = Some(if data.len() >= 48 {
                        let a = if data.len() >= 52 { h32(48) } else { 0 };
                        [h32(36), h32(40), h32(44), a]
                    } else {
                        [fp.u32()?, fp.u32()?, fp.u32()?, 0]
                    });
                }
            }
            other => return Err(bad(format!("Unsupported BMP header type ({other})"))),
        }
        if colors == 0 {
            colors = 1u32.checked_shl(bits).unwrap_or(0);
        }
        if offset == 14 + header_size as u64 && bits <= 8 {
            offset += padding as u64 * colors as u64;
        }
        Ok(Header {
            width,
            height,
            bits,
            compression,
            colors,
            padding,
            top_down,
            masks,
            offset,
        })
    }
}

/// BIT2MODE, then the bit fields Pillow supports: the mode, the raw mode of the samples and
/// whether they are run-length encoded.
fn modes(header: &Header) -> Result<(Mode, &'static str, bool)> {
    let bits = header.bits;
    let (mode, mut raw) = match bits {
        1 => (Mode::P, "P;1"),
        4 => (Mode::P, "P;4"),
        8 => (Mode::P, "P"),
        16 => (Mode::Rgb, "BGR;15"),
        24 => (Mode::Rgb, "BGR"),
        32 => (Mode::Rgb, "BGRX"),
        other => return Err(bad(format!("Unsupported BMP pixel depth ({other})"))),
    };
    let rle = match header.compression {
        0 => false,
        1 | 2 => true,
        3 => {
            let [r, g, b, a] = header.masks.expect("read with compression 3");
            raw = match (bits, r, g, b, a) {
                (32, 0xFF0000, 0xFF00, 0xFF, 0) => "BGRX",
                (32, 0xFF000000, 0xFF0000, 0xFF00, 0) => "XBGR",
                (32, 0xFF000000, 0xFF00, 0xFF, 0) => "BGXR",
                (32, 0xFF000000, 0xFF0000, 0xFF00, 0xFF) => "ABGR",
                (32, 0xFF, 0xFF00, 0xFF0000, 0xFF000000) => "RGBA",
                (32, 0xFF0000, 0xFF00, 0xFF, 0xFF000000) => "BGRA",
                (32, 0xFF000000, 0xFF00, 0xFF, 0xFF0000) => "BGAR",
                (32, 0, 0, 0, 0) => "BGRA",
                (24, 0xFF0000, 0xFF00, 0xFF, _) => "BGR",
                (16, 0xF800, 0x7E0, 0x1F, _) => "BGR;16",
                (16, 0x7C00, 0x3E0, 0x1F, _) => "BGR;15",
                _ => return Err(bad("Unsupported BMP bitfields layout")),
            };
            false
        }
        other => return Err(bad(format!("Unsupported BMP compression ({other})"))),
    };
    Ok((mode, raw, rle))
}

/// A palette image's colour table.
enum Table {
    /// The grey ramp: the image is `1` or `L`, read with that mode's raw mode.
    Grey(Mode, &'static str),
    /// Any other table, as RGB; indices past it are black.
    Colours(Vec<[u8; 3]>),
}

/// The colour table of a palette image, read from `fp`.
fn colour_table(fp: &mut File, header: &Header) -> Result<Table> {
    let (colors, padding) = (header.colors, header.padding);
    if !(1..=65536).contains(&colors) {
        return Err(bad(format!("Unsupported BMP Palette size ({colors})")));
    }
    let table = fp.read(padding * colors as usize);
    let entry = |i: usize| table.get(i * padding..(i * padding + 3).min(table.len()));
    let grey = (0..colors as usize).all(|i| {
        let v = if colors == 2 { [0u8, 255][i] } else { i as u8 };
        entry(i) == Some(&[v, v, v][..])
    });
    Ok(if grey && colors <= 2 {
        Table::Grey(Mode::One, "1")
    } else if grey {
        Table::Grey(Mode::L, "L")
    } else {
        // "BGRX" or "BGR" entries.
        Table::Colours(
            table
                .chunks(padding)
                .filter(|e| e.len() >= 3)
                .map(|e| [e[2], e[1], e[0]])
                .collect(),
        )
    })
}

/// The samples of the whole image, from `start`: RLE data decoded (refused where it ends before
/// the image is full), or raw rows (refused where the file cuts them short).
fn samples(
    bytes: &[u8],
    start: usize,
    header: &Header,
    mode: Mode,
    raw: &str,
    rle: bool,
) -> Result<Vec<[u8; 3]>> {
    let (w, h) = (header.width as usize, header.height as usize);
    let top_down = header.top_down;
    if rle {
        let data = rle_decode(bytes, start, w, h, header.compression == 2);
        if data.len() < w * h {
            return Err(bad("not enough image data"));
        }
        let raw = if matches!(mode, Mode::One | Mode::L) {
            "L"
        } else {
            "P"
        };
        return Ok(rows(&data, w, h, w, top_down, raw));
    }
    let stride = ((w as u64 * header.bits as u64 + 31) >> 3 & !3) as usize;
    if stride < row_bytes(raw, w) {
        // RawDecode: rows longer than the stride (a grey palette read as L or 1).
        return Err(bad("codec configuration error"));
    }
    let need = (h - 1)
        .checked_mul(stride)
        .and_then(|n| n.checked_add(row_bytes(raw, w)))
        .and_then(|n| n.checked_add(start));
    if need.is_none_or(|n| n > bytes.len()) {
        return Err(bad("image file is truncated"));
    }
    Ok(rows(&bytes[start..], w, h, stride, top_down, raw))
}

/// The raw decoder: `h` rows of `raw` samples `stride` apart (bottom-up unless `top_down`); the
/// caller has checked that `data` holds them (the last row needs no padding after it).
fn rows(data: &[u8], w: usize, h: usize, stride: usize, top_down: bool, raw: &str) -> Vec<[u8; 3]> {
    let mut out = vec![[0u8; 3]; w * h];
    for i in 0..h {
        let row = &data[i * stride..];
        let y = if top_down { i } else { h - 1 - i };
        for x in 0..w {
            out[y * w + x] = unpack(raw, row, x);
        }
    }
    out
}

/// Bytes of a row of `w` samples of `raw`.
fn row_bytes(raw: &str, w: usize) -> usize {
    match raw {
        "1" | "P;1" => w.div_ceil(8),
        "P;4" => w.div_ceil(2),
        "L" | "P" => w,
        "BGR;15" | "BGR;16" => 2 * w,
        "BGR" => 3 * w,
        _ => 4 * w,
    }
}

/// Pillow's unpacker for `raw`, sample `x` of a row (Unpack.c). Palette and grey samples come
/// back in the first byte.
fn unpack(raw: &str, row: &[u8], x: usize) -> [u8; 3] {
    let bit = |bits: usize| {
        let at = x * bits;
        (row[at / 8] >> (8 - bits - at % 8)) & ((1 << bits) - 1)
    };
    let px = |n: usize| &row[x * n..x * n + n];
    match raw {
        "1" => [if bit(1) == 1 { 255 } else { 0 }, 0, 0],
        "P;1" => [bit(1), 0, 0],
        "P;4" => [bit(4), 0, 0],
        "L" | "P" => [row[x], 0, 0],
        // ImagingUnpackBGR15 / BGR16: each field scaled by 255 / its maximum, truncated.
        "BGR;15" | "BGR;16" => {
            let v = u16::from_le_bytes([row[2 * x], row[2 * x + 1]]) as u32;
            let (r, g, b, gmax) = if raw == "BGR;15" {
                ((v >> 10) & 31, (v >> 5) & 31, v & 31, 31)
            } else {
                ((v >> 11) & 31, (v >> 5) & 63, v & 31, 63)
            };
            [
                (r * 255 / 31) as u8,
                (g * 255 / gmax) as u8,
                (b * 255 / 31) as u8,
            ]
        }
        "BGR" => {
            let p = px(3);
            [p[2], p[1], p[0]]
        }
        "BGRX" | "BGRA" => {
            let p = px(4);
            [p[2], p[1], p[0]]
        }
        "XBGR" | "ABGR" => {
            let p = px(4);
            [p[3], p[2], p[1]]
        }
        "BGXR" | "BGAR" => {
            let p = px(4);
            [p[3], p[1], p[0]]
        }
        "RGBA" => {
            let p = px(4);
            [p[0], p[1], p[2]]
        }
        other => unreachable!("raw mode {other} has no unpacker"),
    }
}

/// BmpRleDecoder.decode: indices of the whole image in file row order (may be short).
///
/// Kept in one piece: BmpRleDecoder.decode's state machine, transcribed whole to read beside
/// Pillow's.
fn rle_decode(bytes: &[u8], start: usize, w: usize, h: usize, rle4: bool) -> Vec<u8> {
    let mut fd = File::new(bytes, start);
    let dest = w * h;
    let mut data: Vec<u8> = Vec::with_capacity(dest);
    let mut x = 0usize;
    while data.len() < dest {
        let (pixels, byte) = (fd.read(1), fd.read(1));
        let (Some(&n), Some(&b)) = (pixels.first(), byte.first()) else {
            break;
        };
        if n > 0 {
            let n = if x + n as usize > w {
                w.saturating_sub(x)
            } else {
                n as usize
            };
            if rle4 {
                data.extend((0..n).map(|i| if i % 2 == 0 { b >> 4 } else { b & 0x0F }));
            } else {
                data.extend(std::iter::repeat_n(b, n));
            }
            x += n;
            continue;
        }
        match b {
            0 => {
                // End of line: zeros up to the next multiple of the width.
                while !data.len().is_multiple_of(w) {
                    data.push(0);
                }
                x = 0;
            }
            1 => break,
            2 => {
                let delta = fd.read(2);
                let [right, up] = delta else {
                    break;
                };
                let skip = (*right as usize + *up as usize * w).min(dest - data.len());
                data.extend(std::iter::repeat_n(0, skip));
                x = data.len() % w;
            }
            count => {
                let count = count as usize;
                let data_count = (dest - data.len()).min(count);
                let byte_count = if rle4 {
                    data_count.div_ceil(2)
                } else {
                    data_count
                };
                let read = fd.read(byte_count);
                if rle4 {
                    for (i, v) in read.iter().enumerate() {
                        data.push(v >> 4);
                        if i * 2 + 1 < data_count {
                            data.push(v & 0x0F);
                        }
                    }
                } else {
                    data.extend_from_slice(read);
                }
                if read.len() < byte_count || data.len() == dest {
                    break;
                }
                x += count;
                if !fd.pos.is_multiple_of(2) {
                    fd.pos += 1;
                }
            }
        }
    }
    data
}
