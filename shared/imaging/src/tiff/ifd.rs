use super::bad;
use crate::Result;

/// The first image file directory as TiffImagePlugin's ImageFileDirectory_v2 loads it: entries of
/// a type it does not know, whose data lies past the file (or past the file's size in total), or
/// that repeat a tag are skipped; a directory cut short keeps the entries read before the cut.
/// Integer values only (the tags that choose the layout are integers); others are `None`.
#[derive(Debug, Default)]
pub(super) struct Ifd {
    pub(super) big_endian: bool,
    pub(super) tags: std::collections::BTreeMap<u16, Option<Vec<i64>>>,
}

impl Ifd {
    /// The first directory's entries in file order (those [`Reader::values`] skips left out),
    /// up to the end of the directory or of the file.
    pub(super) fn read(bytes: &[u8]) -> Result<Self> {
        let file = Reader::new(bytes);
        let first = file.first_ifd()?;
        let mut ifd = Ifd {
            big_endian: file.big_endian,
            ..Ifd::default()
        };
        let (count_size, entry_size, _) = file.sizes();
        let Some(count) = file.int(first as usize, count_size) else {
            return Ok(ifd); // "Corrupt EXIF data": a warning, no tags
        };
        let mut total = 0u64;
        for i in 0..count {
            let at = (first as usize).saturating_add(count_size + i as usize * entry_size);
            let Some((tag, typ, n, value_at)) = file.entry(at) else {
                break;
            };
            if ifd.tags.contains_key(&tag) {
                continue;
            }
            if let Some(values) = file.values(typ, n, value_at, &mut total) {
                ifd.tags.insert(tag, values);
            }
        }
        Ok(ifd)
    }

    /// A tuple-valued tag (BitsPerSample, StripOffsets...); `Err` when it holds no integers.
    pub(super) fn tuple(&self, tag: u16) -> Option<std::result::Result<&[i64], ()>> {
        self.tags.get(&tag).map(|v| v.as_deref().ok_or(()))
    }

    /// A single-valued tag (Compression, ImageWidth...): the first value, as Pillow keeps it.
    pub(super) fn single(&self, tag: u16) -> Option<std::result::Result<i64, ()>> {
        self.tuple(tag).map(|v| v.map(|v| v[0]))
    }

    pub(super) fn get(&self, tag: u16, default: i64) -> i64 {
        match self.single(tag) {
            Some(Ok(v)) => v,
            Some(Err(())) => -1,
            None => default,
        }
    }
}

/// A TIFF file's bytes with its byte order and flavour (classic or BigTIFF), for its integers.
struct Reader<'a> {
    bytes: &'a [u8],
    big_endian: bool,
    bigtiff: bool,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader {
            bytes,
            big_endian: bytes.starts_with(b"MM"),
            bigtiff: bytes.get(2) == Some(&43),
        }
    }

    /// The `n`-byte unsigned integer at `at` in the file's byte order; `None` past the end.
    fn int(&self, at: usize, n: usize) -> Option<u64> {
        let b = self.bytes.get(at..at.checked_add(n)?)?;
        Some(b.iter().enumerate().fold(0u64, |acc, (i, &v)| {
            let shift = if self.big_endian {
                8 * (n - 1 - i)
            } else {
                8 * i
            };
            acc | (v as u64) << shift
        }))
    }

    /// The first directory's offset, from the header, or why Pillow finds no image.
    fn first_ifd(&self) -> Result<u64> {
        let first = if self.bigtiff {
            self.int(8, 8)
        } else {
            self.int(4, 4)
        }
        .ok_or_else(|| bad("cannot identify image file (short header)"))?;
        if first == 0 {
            return Err(bad("no more images in TIFF file"));
        }
        if first >= 1 << 63 {
            return Err(bad("Unable to seek to frame"));
        }
        Ok(first)
    }

    /// The sizes of a directory's entry count, of an entry and of the value stored in an entry.
    fn sizes(&self) -> (usize, usize, usize) {
        if self.bigtiff { (8, 20, 8) } else { (2, 12, 4) }
    }

    /// The entry at `at`: its tag, type, value count and where its inline value lies; `None`
    /// where the file ends first.
    fn entry(&self, at: usize) -> Option<(u16, u64, u64, usize)> {
        let (Some(tag), Some(typ), Some(n)) = (
            self.int(at, 2),
            self.int(at + 2, 2),
            self.int(at + 4, if self.bigtiff { 8 } else { 4 }),
        ) else {
            return None;
        };
        let value_at = at + if self.bigtiff { 12 } else { 8 };
        let (_, _, inline) = self.sizes();
        if self.bytes.len() < value_at + inline {
            return None;
        }
        Some((tag as u16, typ, n, value_at))
    }

    /// The `n` values of type `typ` of an entry whose inline value is at `value_at`: the
    /// integers, `Some(None)` for a type that holds none, `None` for an entry Pillow skips (a
    /// type it does not know, data past the file, or past the file's size in `total`, the
    /// running sum of the data stored out of line).
    fn values(
        &self,
        typ: u64,
        n: u64,
        value_at: usize,
        total: &mut u64,
    ) -> Option<Option<Vec<i64>>> {
        let (_, _, inline) = self.sizes();
        let (unit, signed, integer) = value_type(typ)?;
        let size = n.checked_mul(unit)?;
        let data_at = if size > inline as u64 {
            let offset = self.int(value_at, inline).expect("checked by entry");
            if offset >= 1 << 63 {
                return None;
            }
            *total = total.saturating_add(size);
            if *total > self.bytes.len() as u64 {
                return None; // "Tag data larger than file"
            }
            offset
        } else {
            value_at as u64
        };
        if size == 0 || self.bytes.len() < (data_at + size) as usize {
            return None; // no data, or "Possibly corrupt EXIF data"
        }
        let (data_at, unit) = (data_at as usize, unit as usize);
        Some(integer.then(|| {
            (0..n as usize)
                .map(|j| {
                    let v = self.int(data_at + j * unit, unit).expect("checked above");
                    match (signed, unit) {
                        (true, 1) => v as i8 as i64,
                        (true, 2) => v as i16 as i64,
                        (true, _) => v as i32 as i64,
                        _ => v as i64,
                    }
                })
                .collect()
        }))
    }
}

/// ImageFileDirectory_v2's `_load_dispatch`: a type's (unit size, signed, integer), for BYTE
/// ASCII SHORT LONG RATIONAL SBYTE UNDEFINED SSHORT SLONG SRATIONAL FLOAT DOUBLE IFD LONG8;
/// `None` for the others.
fn value_type(typ: u64) -> Option<(u64, bool, bool)> {
    Some(match typ {
        3 => (2, false, true),
        4 | 13 => (4, false, true),
        16 => (8, false, true),
        6 => (1, true, true),
        8 => (2, true, true),
        9 => (4, true, true),
        1 | 2 | 7 => (1, false, false),
        11 => (4, false, false),
        5 | 10 | 12 => (8, false, false),
        _ => return None,
    })
}
