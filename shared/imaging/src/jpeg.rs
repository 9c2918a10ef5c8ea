//! JPEG as Pillow opens it: JpegImagePlugin's walk over the markers up to the first scan (what it
//! refuses there, Pillow refuses before decoding), then libjpeg through src/jpeg.c, which follows
//! Pillow's decoder: warnings are decoded through, running out of data is "truncated".

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use crate::{Box4, Error, Result};

unsafe extern "C" {
    fn shk_jpeg_decode(
        data: *const u8,
        size: usize,
        may_window: c_int,
        out_buffer: unsafe extern "C" fn(
            *mut c_void,
            c_uint,
            c_uint,
            c_int,
            *mut c_uint,
        ) -> *mut u8,
        ctx: *mut c_void,
        message: *mut c_char,
        message_size: usize,
    ) -> c_int;
}

const OK: c_int = 0;
const TRUNCATED: c_int = 2;
const REJECTED: c_int = 3;

fn syntax(what: &str) -> Error {
    Error::Decode(format!("JPEG: {what}"))
}

/// The markers Pillow's JpegImagePlugin knows, by what it does with them.
enum Handler {
    /// A length and that many bytes (APPn, COM, DHT, DAC, SOS, DNL, DRI, EXP).
    Skip,
    App,
    Sof,
    Dqt,
    /// A marker without a segment (SOI, EOI, RSTn, JPG, JPGn).
    Bare,
}

fn handler(marker: u16) -> Option<Handler> {
    Some(match marker {
        0xFFC0..=0xFFC3 | 0xFFC5..=0xFFC7 | 0xFFC9..=0xFFCB | 0xFFCD..=0xFFCF | 0xFFDE => {
            Handler::Sof
        }
        0xFFC4 | 0xFFCC | 0xFFDA | 0xFFDC | 0xFFDD | 0xFFDF | 0xFFFE => Handler::Skip,
        0xFFC8 | 0xFFD0..=0xFFD9 | 0xFFF0..=0xFFFD => Handler::Bare,
        0xFFDB => Handler::Dqt,
        0xFFE0..=0xFFEF => Handler::App,
        _ => return None,
    })
}

/// A reader over the file with Python's `fp.read(n)` semantics (short at the end).
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn read(&mut self, n: usize) -> &'a [u8] {
        let end = self.pos.saturating_add(n).min(self.bytes.len());
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        s
    }

    /// `i16(fp.read(2)) - 2` then `ImageFile._safe_read(fp, n)`.
    fn segment(&mut self) -> Result<&'a [u8]> {
        let len = self.read(2);
        if len.len() < 2 {
            return Err(syntax("segment length past the end of the file"));
        }
        let n = u16::from_be_bytes([len[0], len[1]]) as i64 - 2;
        if n <= 0 {
            return Ok(&[]);
        }
        let s = self.read(n as usize);
        if s.len() < n as usize {
            return Err(syntax("Truncated File Read"));
        }
        Ok(s)
    }
}

fn be16(s: &[u8], at: usize) -> Result<u16> {
    s.get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or_else(|| syntax("segment too short"))
}

/// What the marker walk learnt about the frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    /// A lossless process (SOF3, 7, 11, 15), which libjpeg decodes only whole.
    pub lossless: bool,
}

/// JpegImagePlugin's `_open`: what Pillow checks before it decodes. Refuses what it refuses (no
/// SOF or SOS, an unknown marker, a segment running past the end, sample precision other than 8,
/// 2 or more than 4 components, short JFIF/Adobe/SOF/DQT segments).
pub(crate) fn check_markers(bytes: &[u8]) -> Result<Frame> {
    if !bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Err(syntax("not a JPEG file"));
    }
    let mut fp = Cursor { bytes, pos: 3 };
    let mut s: Vec<u8> = vec![0xFF];
    let mut size = None;
    let mut lossless = false;
    let mut icc: Vec<&[u8]> = Vec::new();
    while !s.is_empty() {
        if s[0] != 0xFF {
            s = fp.read(1).to_vec(); // non-0xFF junk
            continue;
        }
        s.extend_from_slice(fp.read(1));
        if s.len() < 2 {
            break;
        }
        let marker = u16::from_be_bytes([s[0], s[1]]);
        match handler(marker) {
            Some(h) => {
                match h {
                    Handler::Bare => {}
                    Handler::Skip => {
                        fp.segment()?;
                    }
                    Handler::App => app(marker, fp.segment()?, &mut icc)?,
                    Handler::Sof => {
                        size = Some(sof(fp.segment()?, &mut icc)?);
                        lossless = matches!(marker, 0xFFC3 | 0xFFC7 | 0xFFCB | 0xFFCF);
                    }
                    Handler::Dqt => dqt(fp.segment()?)?,
                }
                if marker == 0xFFDA {
                    return match size {
                        Some((w, h)) if w > 0 && h > 0 => Ok(Frame { lossless }),
                        _ => Err(syntax("not identified (no frame header before the scan)")),
                    };
                }
                s = fp.read(1).to_vec();
            }
            None if marker == 0xFFFF => s = vec![0xFF], // fill bytes
            None if marker == 0xFF00 => s = fp.read(1).to_vec(),
            None => return Err(syntax("no marker found")),
        }
    }
    Err(syntax("cannot load this image (no scan)"))
}

fn app<'a>(marker: u16, s: &'a [u8], icc: &mut Vec<&'a [u8]>) -> Result<()> {
    if marker == 0xFFE0 && s.starts_with(b"JFIF") || marker == 0xFFEE && s.starts_with(b"Adobe") {
        be16(s, 5)?; // the version
    } else if marker == 0xFFE2 && s.starts_with(b"ICC_PROFILE\0") {
        icc.push(s);
    } else if marker == 0xFFED && s.starts_with(b"Photoshop 3.0\0") {
        photoshop(s)?;
    }
    Ok(())
}

/// The resource walk of JpegImagePlugin's APP13 handler: a struct error ends it quietly, an index
/// past the end (a name length byte missing) refuses the file.
fn photoshop(s: &[u8]) -> Result<()> {
    let mut offset = 14;
    while s.get(offset..offset + 4) == Some(b"8BIM") {
        offset += 4;
        if be16(s, offset).is_err() {
            return Ok(());
        }
        offset += 2;
        let name_len = *s
            .get(offset)
            .ok_or_else(|| syntax("Photoshop resource without a name"))?;
        offset += 1 + name_len as usize;
        offset += offset & 1;
        let Some(size) = s.get(offset..offset + 4) else {
            return Ok(());
        };
        offset += 4 + u32::from_be_bytes(size.try_into().expect("4 bytes")) as usize;
        offset += offset & 1;
    }
    Ok(())
}

fn sof(s: &[u8], icc: &mut Vec<&[u8]>) -> Result<(u16, u16)> {
    let (h, w) = (be16(s, 1)?, be16(s, 3)?);
    if s[0] != 8 {
        return Err(syntax(&format!("cannot handle {}-bit layers", s[0])));
    }
    let layers = *s.get(5).ok_or_else(|| syntax("frame header too short"))?;
    if ![1, 3, 4].contains(&layers) {
        return Err(syntax(&format!("cannot handle {layers}-layer images")));
    }
    if !icc.is_empty() {
        icc.sort();
        if icc[0].len() < 14 {
            return Err(syntax("ICC profile segment too short"));
        }
        icc.clear();
    }
    Ok((w, h))
}

fn dqt(mut s: &[u8]) -> Result<()> {
    while !s.is_empty() {
        let len = if s[0] / 16 == 0 { 65 } else { 129 };
        if s.len() < len {
            return Err(syntax("bad quantization table marker"));
        }
        s = &s[len..];
    }
    Ok(())
}

/// A decoded window of a JPEG.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// 1 (grey), 3 (RGB) or 4 (CMYK as stored, Adobe inverted).
    pub components: usize,
    /// The part decoded, `(left, top, width, height)`, and its samples, row by row.
    pub window: Box4,
    pub samples: Vec<u8>,
}

struct Output<'a> {
    buffer: crate::window::WindowBuffer<'a>,
    components: usize,
}

unsafe extern "C" fn out_buffer(
    ctx: *mut c_void,
    w: c_uint,
    h: c_uint,
    comps: c_int,
    window: *mut c_uint,
) -> *mut u8 {
    // SAFETY: ctx is the &mut Output that decode() passed, alive for the whole call; window
    // points to jpeg.c's four unsigned ints.
    let (out, window) = unsafe { crate::window::callback_args::<Output>(ctx, window) };
    out.components = comps as usize;
    out.buffer.take(w, h, out.components, window)
}

/// Decodes the window `choose(width, height)` returns (`(left, top, width, height)`, inside the
/// image): grey, RGB, or CMYK as stored (Adobe inverted). `choose` runs before any pixel memory
/// is taken (it refuses an image by returning an error); the samples of the window are those of
/// a full decode, bit for bit.
pub(crate) fn decode(
    bytes: &[u8],
    frame: Frame,
    mut choose: impl FnMut(u32, u32) -> Result<Box4>,
) -> Result<Decoded> {
    let mut out = Output {
        buffer: crate::window::WindowBuffer::new(&mut choose),
        components: 0,
    };
    let mut message = [0 as c_char; 200];
    // SAFETY: bytes and message outlive the call; out_buffer gets &mut out back as ctx and
    // returns a buffer of exactly window width * height * comps bytes, which jpeg.c fills row by
    // row.
    let status = unsafe {
        shk_jpeg_decode(
            bytes.as_ptr(),
            bytes.len(),
            !frame.lossless as c_int,
            out_buffer,
            &mut out as *mut Output as *mut c_void,
            message.as_mut_ptr(),
            message.len(),
        )
    };
    match status {
        OK => {
            let (window, samples) = out.buffer.window.expect("set before decoding");
            Ok(Decoded {
                components: out.components,
                window,
                samples,
            })
        }
        TRUNCATED => Err(syntax("image file is truncated")),
        REJECTED => Err(out.buffer.refused.expect("set when rejected")),
        _ => {
            // SAFETY: jpeg.c writes a NUL-terminated string within the buffer.
            let text = unsafe { CStr::from_ptr(message.as_ptr()) };
            Err(syntax(&text.to_string_lossy()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SOI, one segment, SOF with the given precision and component count, SOS.
    fn jpeg(segment: &[u8], bits: u8, layers: u8) -> Vec<u8> {
        let mut b = vec![0xFF, 0xD8];
        b.extend_from_slice(segment);
        let mut sof = vec![0xFF, 0xC0, 0, 8 + 3 * layers, bits, 0, 4, 0, 4, layers];
        sof.extend((0..layers).flat_map(|i| [i + 1, 0x11, 0]));
        b.extend_from_slice(&sof);
        b.extend_from_slice(&[0xFF, 0xDA, 0, 2]);
        b
    }

    #[test]
    fn marker_walk_refuses_what_jpeg_image_plugin_refuses() {
        assert!(check_markers(&jpeg(&[], 8, 3)).is_ok());
        // Junk after a segment is skipped (junk right after SOI is no JPEG to Pillow's _accept).
        assert!(check_markers(&jpeg(&[0xFF, 0xFE, 0, 2, 0x12, 0x34], 8, 1)).is_ok());
        assert!(check_markers(&jpeg(&[0x12, 0x34], 8, 1)).is_err());
        assert!(check_markers(&jpeg(&[0xFF, 0xFF, 0xFF], 8, 4)).is_ok()); // fill bytes
        let err = |b: Vec<u8>| check_markers(&b).unwrap_err().to_string();
        assert!(err(jpeg(&[], 12, 3)).contains("12-bit"));
        assert!(err(jpeg(&[], 8, 2)).contains("2-layer"));
        assert!(err(jpeg(&[0xFF, 0x02], 8, 3)).contains("no marker"));
        // JFIF with no version, a DQT shorter than its table, a segment past the end.
        assert!(err(jpeg(b"\xFF\xE0\x00\x07JFIF\x00", 8, 3)).contains("too short"));
        assert!(err(jpeg(&[0xFF, 0xDB, 0, 4, 0, 1], 8, 3)).contains("quantization"));
        assert!(err(vec![0xFF, 0xD8, 0xFF, 0xE1, 0, 40, 1]).contains("Truncated"));
        assert!(err(vec![0xFF, 0xD8, 0xFF, 0xD9]).contains("no scan"));
    }

    #[test]
    fn photoshop_walk_refuses_only_a_missing_name_length() {
        let mut s = b"Photoshop 3.0\0".to_vec();
        s.extend_from_slice(b"8BIM\x04\x04\x00\x00\x00\x00\x00\x02ab");
        assert!(photoshop(&s).is_ok());
        assert!(photoshop(&[&s[..], b"8BIM\x04"].concat()).is_ok()); // struct error: quiet
        assert!(photoshop(&[&s[..], b"8BIM\x04\x04"].concat()).is_err()); // IndexError
    }
}
