//! The first frame of a GIF as Pillow 13 reads it (GifImagePlugin `_open`/`_seek(0)`/
//! `load_prepare`, and the LZW decoder of libImaging/GifDecode.c), so that `convert('RGB')` gives
//! the same pixels:
//!
//! - the canvas is the logical screen, grown to hold the frame if the frame reaches past it; where
//!   the frame does not cover it, it holds the frame's transparency index, or 0 without one;
//! - all of the frame's indices are written, the transparent one included (Pillow keeps frame 0 in
//!   mode P and `convert('RGB')` looks every index up);
//! - no palette, or one that is the grey ramp (entry i = (i, i, i)), makes the image `L`: the
//!   index is the grey level; with a palette, indices past its end are black;
//! - decoding stops as soon as the last row is full; data that ends before, a first code above
//!   the clear code, or a code past the next free entry refuse the file, as in Pillow.

use crate::{Error, Result};

fn bad(what: &str) -> Error {
    Error::Decode(format!("GIF: {what}"))
}

use crate::pyfile::PyFile as Reader;

impl<'a> Reader<'a> {
    /// GifImagePlugin's `data()`: one sub-block, None at its terminator or the end of the file.
    fn data(&mut self) -> Option<&'a [u8]> {
        match self.read(1) {
            [n] if *n > 0 => Some(self.read(*n as usize)),
            _ => None,
        }
    }
}

fn le16(s: &[u8], at: usize) -> Result<u16> {
    s.get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or_else(|| bad("header too short"))
}

/// `_is_palette_needed`: None when the table is the grey ramp (Pillow then uses mode L).
fn palette(p: &[u8]) -> Result<Option<&[u8]>> {
    if !p.len().is_multiple_of(3) {
        return Err(bad("colour table cut short"));
    }
    let ramp = p
        .chunks_exact(3)
        .enumerate()
        .all(|(i, c)| c.iter().all(|&v| v as usize == i));
    Ok((!ramp).then_some(p))
}

/// The first frame: (width, height, RGB, Pillow's mode: `P`, or `L` without a palette).
///
/// GifImagePlugin's blocks in stream order up to the first frame ([`screen`], then
/// [`first_frame`]), each length checked before it is read; then the caller's check, the LZW
/// data decoded onto the canvas and the canvas looked up in the colour table.
pub(crate) fn decode(
    bytes: &[u8],
    check: impl FnOnce(u32, u32) -> Result<()>,
) -> Result<(u32, u32, Vec<u8>, &'static str)> {
    let mut fp = Reader::new(bytes, 0);
    let (width, height, global) = screen(&mut fp)?;
    let (frame, transparency) = first_frame(&mut fp)?;
    // The canvas grows to hold a frame that reaches past the logical screen.
    let (width, height) = (width.max(frame.x1), height.max(frame.y1));
    if width == 0 || height == 0 {
        return Err(bad("not identified (empty screen)"));
    }
    check(width, height)?;
    let table = frame.local.unwrap_or(global);
    let mut canvas = vec![transparency.unwrap_or(0); width as usize * height as usize];
    let Frame { x0, y0, x1, y1, .. } = frame;
    Lzw::new(frame.bits, frame.interlace)?.decode(
        &bytes[fp.pos..],
        &mut canvas,
        width as usize,
        (x0 as usize, y0 as usize, x1 as usize, y1 as usize),
    )?;
    let (rgb, mode) = match table {
        Some(p) => (
            canvas
                .iter()
                .flat_map(|&i| match p.get(3 * i as usize..3 * i as usize + 3) {
                    Some(c) => [c[0], c[1], c[2]],
                    None => [0; 3],
                })
                .collect(),
            "P",
        ),
        None => (canvas.iter().flat_map(|&i| [i; 3]).collect(), "L"),
    };
    Ok((width, height, rgb, mode))
}

/// The header and logical screen descriptor: the screen's size and the global colour table
/// ([`palette`]: `None` for none or the grey ramp); `fp` is left at the first block.
fn screen<'a>(fp: &mut Reader<'a>) -> Result<(u32, u32, Option<&'a [u8]>)> {
    let head = fp.read(13);
    if !(head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a")) {
        return Err(bad("not a GIF file"));
    }
    let (width, height) = (le16(head, 6)? as u32, le16(head, 8)? as u32);
    let flags = *head.get(10).ok_or_else(|| bad("header too short"))?;
    let global = if flags & 128 != 0 {
        palette(fp.read(3 << ((flags & 7) + 1)))?
    } else {
        None
    };
    match fp.read(1) {
        [] | [b';'] => return Err(bad("no more images in GIF file")),
        _ => fp.pos -= 1,
    }
    Ok((width, height, global))
}

/// The first image descriptor: where the frame lies on the canvas, how it is stored and its
/// local colour table (`None`: the global one).
struct Frame<'a> {
    x0: u32,
    y0: u32,
    x1: u32,
    y1: u32,
    interlace: bool,
    local: Option<Option<&'a [u8]>>,
    /// The LZW minimum code size.
    bits: u8,
}

/// The blocks up to the first image descriptor: extensions (a graphic control extension gives
/// the transparency index), anything else between blocks skipped; `fp` is left at the image
/// data.
fn first_frame<'a>(fp: &mut Reader<'a>) -> Result<(Frame<'a>, Option<u8>)> {
    let mut transparency = None;
    loop {
        match fp.read(1) {
            [] | [b';'] => return Err(bad("image not found in GIF frame")),
            [b'!'] => extension(fp, &mut transparency)?,
            [b','] => return Ok((descriptor(fp)?, transparency)),
            _ => {} // anything else between blocks is skipped
        }
    }
}

/// An extension after its `!`, read to its terminator: a graphic control extension sets
/// `transparency` when its flag says so.
fn extension(fp: &mut Reader, transparency: &mut Option<u8>) -> Result<()> {
    let label = *fp
        .read(1)
        .first()
        .ok_or_else(|| bad("extension cut short"))?;
    let mut block = fp.data();
    if label == 249 {
        if let Some(b) = block {
            if b[0] & 1 != 0 {
                *transparency = Some(*b.get(3).ok_or_else(|| bad("short extension"))?);
            }
            le16(b, 1)?; // the duration
        }
    } else if label == 254 {
        while block.is_some() {
            block = fp.data();
        }
        return Ok(());
    } else if label == 255 && block.is_some_and(|b| b.starts_with(b"NETSCAPE2.0")) {
        fp.data();
    }
    while fp.data().is_some() {}
    Ok(())
}

/// An image descriptor after its `,`, with its local colour table and the LZW code size.
fn descriptor<'a>(fp: &mut Reader<'a>) -> Result<Frame<'a>> {
    let s = fp.read(9);
    let (x0, y0) = (le16(s, 0)? as u32, le16(s, 2)? as u32);
    let (x1, y1) = (x0 + le16(s, 4)? as u32, y0 + le16(s, 6)? as u32);
    let flags = *s.get(8).ok_or_else(|| bad("image descriptor cut short"))?;
    let local = if flags & 128 != 0 {
        Some(palette(fp.read(3 << ((flags & 7) + 1)))?)
    } else {
        None
    };
    let bits = *fp.read(1).first().ok_or_else(|| bad("no image data"))?;
    Ok(Frame {
        x0,
        y0,
        x1,
        y1,
        interlace: flags & 64 != 0,
        local,
        bits,
    })
}

const TABLE: usize = 4096;

/// GifDecode.c's decoder state.
struct Lzw {
    clear: u16,
    end: u16,
    bits: u8,
    /// 0: not interlaced; 1-3: the pass after the current one.
    interlace: u8,
    step: usize,
    data: [u8; TABLE],
    link: [u16; TABLE],
    /// The next free entry of the table, and the width of a code.
    next: u16,
    codesize: u32,
    /// The next code is the first after a clear code.
    first: bool,
    lastdata: u8,
    lastcode: u16,
}

impl Lzw {
    fn new(bits: u8, interlace: bool) -> Result<Self> {
        if bits > 12 {
            return Err(bad("codec configuration error (LZW code size over 12)"));
        }
        let clear = 1 << bits;
        Ok(Self {
            clear,
            end: clear + 1,
            bits,
            interlace: interlace as u8,
            step: if interlace { 8 } else { 1 },
            data: [0; TABLE],
            link: [0; TABLE],
            next: clear + 2,
            codesize: bits as u32 + 1,
            first: true,
            lastdata: 0,
            lastcode: 0,
        })
    }

    /// Moves to the next row (NEWLINE); false when the image is complete.
    fn newline(&mut self, y: &mut usize, ysize: usize) -> bool {
        *y += self.step;
        while *y >= ysize {
            match self.interlace {
                1 => (*y, self.interlace) = (4, 2),
                2 => (self.step, *y, self.interlace) = (4, 2, 3),
                3 => (self.step, *y, self.interlace) = (2, 1, 0),
                _ => return false,
            }
        }
        true
    }

    /// GifDecode.c's loop: codes read from `stream` ([`Codes`]), each turned into its string of
    /// indices ([`Lzw::string`]), written to the frame's box `(x0, y0, x1, y1)` of `canvas` (rows
    /// of `width`) row by row, in the interlaced order where the frame is interlaced, until its
    /// last row is full.
    fn decode(
        &mut self,
        stream: &[u8],
        canvas: &mut [u8],
        width: usize,
        (x0, y0, x1, y1): (usize, usize, usize, usize),
    ) -> Result<()> {
        let (xsize, ysize) = (x1 - x0, y1 - y0);
        if xsize == 0 || ysize == 0 {
            return Err(bad("tile cannot extend outside image (an empty frame)"));
        }
        let mut codes = Codes::new(stream);
        let (mut x, mut y) = (0usize, 0usize);
        let mut string = Vec::with_capacity(TABLE);
        loop {
            let c = codes.next(self.codesize)?;
            if c == self.clear {
                if !self.first {
                    (self.next, self.codesize, self.first) =
                        (self.clear + 2, self.bits as u32 + 1, true);
                }
                continue;
            }
            if c == self.end {
                // The data ended before the image: Pillow waits for more and finds none.
                return Err(truncated());
            }
            self.string(c, &mut string)?;
            // The string was built from its end.
            for &v in string.iter().rev() {
                canvas[(y0 + y) * width + x0 + x] = v;
                x += 1;
                if x >= xsize {
                    x = 0;
                    if !self.newline(&mut y, ysize) {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The indices of code `c` into `string`, last first, and the table grown by one entry (the
    /// code width with it) unless `c` is the first after a clear; refused where `c` is past the
    /// next free entry, or a first code is above the clear code.
    fn string(&mut self, mut c: u16, string: &mut Vec<u8>) -> Result<()> {
        string.clear();
        if self.first {
            if c > self.clear {
                return Err(broken());
            }
            (self.lastdata, self.lastcode, self.first) = (c as u8, c, false);
            string.push(self.lastdata);
            return Ok(());
        }
        let this = c;
        if c > self.next {
            return Err(broken());
        }
        if c == self.next {
            string.push(self.lastdata);
            c = self.lastcode;
        }
        while c >= self.clear {
            if string.len() >= TABLE || c as usize >= TABLE {
                return Err(broken());
            }
            string.push(self.data[c as usize]);
            c = self.link[c as usize];
        }
        self.lastdata = c as u8;
        string.push(self.lastdata);
        if (self.next as usize) < TABLE {
            self.data[self.next as usize] = self.lastdata;
            self.link[self.next as usize] = self.lastcode;
            if self.next as u32 == (1 << self.codesize) - 1 && self.codesize < 12 {
                self.codesize += 1;
            }
            self.next += 1;
        }
        self.lastcode = this;
        Ok(())
    }
}

fn truncated() -> Error {
    bad("image file is truncated")
}

fn broken() -> Error {
    bad("broken data stream when reading image file")
}

/// The codes of the image data: its sub-blocks' bytes, least significant bit first.
struct Codes<'a> {
    stream: &'a [u8],
    pos: usize,
    /// Bytes left in the current sub-block.
    block: usize,
    bitbuffer: u32,
    bitcount: u32,
}

impl<'a> Codes<'a> {
    fn new(stream: &'a [u8]) -> Self {
        Codes {
            stream,
            pos: 0,
            block: 0,
            bitbuffer: 0,
            bitcount: 0,
        }
    }

    /// The next code of `codesize` bits; "truncated" where the data ends first (a sub-block is
    /// read only when it is all there).
    fn next(&mut self, codesize: u32) -> Result<u16> {
        while self.bitcount < codesize {
            let byte = *self.stream.get(self.pos).ok_or_else(truncated)?;
            self.pos += 1;
            if self.block > 0 {
                self.bitbuffer |= (byte as u32) << self.bitcount;
                self.block -= 1;
                self.bitcount += 8;
            } else {
                // A new sub-block, decoded only when it is all there.
                let n = byte as usize;
                if self.stream.len() < self.pos + n {
                    return Err(truncated());
                }
                self.block = n;
            }
        }
        let c = (self.bitbuffer & ((1 << codesize) - 1)) as u16;
        self.bitbuffer >>= codesize;
        self.bitcount -= codesize;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3x2 GIF with the given global table (flags bits) and LZW data of 2-bit codes, each
    /// literal after a clear code.
    fn gif(table: &[u8], indices: &[u8], gce: &[u8]) -> Vec<u8> {
        let mut b = b"GIF89a".to_vec();
        let flags = if table.is_empty() { 0 } else { 0x81 };
        b.extend_from_slice(&[3, 0, 2, 0, flags, 0, 0]);
        b.extend_from_slice(table);
        b.extend_from_slice(gce);
        b.extend_from_slice(&[b',', 0, 0, 0, 0, 3, 0, 2, 0, 0, 2]);
        let (mut acc, mut n, mut out) = (0u32, 0, Vec::new());
        for &v in indices
            .iter()
            .flat_map(|v| [4u8, *v])
            .chain([5])
            .collect::<Vec<_>>()
            .iter()
        {
            acc |= (v as u32) << n;
            n += 3;
            while n >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                n -= 8;
            }
        }
        if n > 0 {
            out.push(acc as u8);
        }
        b.push(out.len() as u8);
        b.extend_from_slice(&out);
        b.extend_from_slice(&[0, b';']);
        b
    }

    #[test]
    fn palette_lookup_ramp_and_transparency_follow_pillow() {
        let table = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0];
        let (w, h, rgb, mode) =
            decode(&gif(&table, &[0, 1, 2, 3, 3, 0], &[]), |_, _| Ok(())).unwrap();
        assert_eq!((w, h, mode), (3, 2, "P"));
        assert_eq!(&rgb[..9], &[9, 8, 7, 6, 5, 4, 3, 2, 1]);
        // The grey ramp is no palette: mode L, the index is the level.
        let ramp = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3];
        let (.., rgb, mode) = decode(&gif(&ramp, &[3, 1, 2, 0, 0, 0], &[]), |_, _| Ok(())).unwrap();
        assert_eq!((mode, &rgb[..6]), ("L", &[3, 3, 3, 1, 1, 1][..]));
        // The transparent index is looked up like any other.
        let gce = [b'!', 0xF9, 4, 1, 0, 0, 2, 0];
        let (.., rgb, _) = decode(&gif(&table, &[2, 2, 2, 2, 2, 2], &gce), |_, _| Ok(())).unwrap();
        assert_eq!(&rgb[..3], &[3, 2, 1]);
    }

    #[test]
    fn data_ending_before_the_image_is_truncated() {
        let e = decode(&gif(&[], &[1, 2, 3], &[]), |_, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
    }
}
