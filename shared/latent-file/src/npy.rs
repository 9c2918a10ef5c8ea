//! Reading one array from `.npz`/`.npy` bytes, and writing `.npy` headers.
//!
//! The common case — an uncompressed `.npz` (`np.savez`) or a `.npy` holding little-endian
//! float32 in C order — is read without copying or allocating: the zip's central directory is
//! walked by hand to the entry, its CRC-32 is checked, and the `.npy` header is parsed for
//! `descr`, `fortran_order` and `shape`. Anything else (deflated archives, other byte orders,
//! Fortran order, zip64) goes through the `zip` and `ndarray-npy` crates.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::io::{Cursor, Read};
use std::os::unix::ffi::OsStrExt;

use crate::{Context, Error, Result};
use ndarray::ArrayD;
use ndarray_npy::ReadNpyExt;

/// A float32 array read from a file.
#[derive(Debug)]
pub enum Latent<'a> {
    /// Little-endian float32 bytes in C order, borrowed from the file's bytes.
    Raw {
        shape: Vec<usize>,
        le_bytes: &'a [u8],
    },
    /// Decoded by ndarray-npy.
    Array(ArrayD<f32>),
}

impl Latent<'_> {
    pub fn shape(&self) -> &[usize] {
        match self {
            Latent::Raw { shape, .. } => shape,
            Latent::Array(a) => a.shape(),
        }
    }

    /// Writes the values, little-endian, C order, into `slot` (exactly the array's size).
    pub fn write_le(&self, slot: &mut [u8]) {
        match self {
            Latent::Raw { le_bytes, .. } => slot.copy_from_slice(le_bytes),
            Latent::Array(a) => {
                for (dst, v) in slot.chunks_exact_mut(4).zip(a.iter()) {
                    dst.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }

    /// The values, C order.
    pub fn values(&self) -> Vec<f32> {
        match self {
            Latent::Raw { le_bytes, .. } => le_bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                .collect(),
            Latent::Array(a) => a.iter().copied().collect(),
        }
    }

    pub fn all_finite(&self) -> bool {
        match self {
            Latent::Raw { le_bytes, .. } => le_bytes
                .chunks_exact(4)
                .all(|b| f32::from_le_bytes(b.try_into().unwrap()).is_finite()),
            Latent::Array(a) => a.iter().all(|v| v.is_finite()),
        }
    }
}

/// Reads array `key` of a `.npz` (stored or deflated), or the array of a `.npy`, as float32.
pub fn read_latent<'a>(bytes: &'a [u8], key: &str) -> Result<Latent<'a>> {
    latent_of(entry(bytes, key)?, bytes, key)
}

/// Reads array `key` of a `.npz`, or the array of a `.npy`, holding float32 or float64, as
/// float32 values in C order with its shape.
pub fn read_f32_or_f64(bytes: &[u8], key: &str) -> Result<(Vec<usize>, Vec<f32>)> {
    let npy = entry(bytes, key)?;
    if let Ok(l) = latent_of(npy.clone(), bytes, key) {
        return Ok((l.shape().to_vec(), l.values()));
    }
    check_size(&npy)?;
    let a = ArrayD::<f64>::read_npy(&npy[..])
        .with_context(|| format!("`{key}` is not a float32/float64 array"))?;
    Ok((a.shape().to_vec(), a.iter().map(|&v| v as f32).collect()))
}

/// The float32 array of `npy` (array `key` of the file `bytes`): borrowed when it is raw
/// little-endian C-order data, else decoded by ndarray-npy once its shape is checked against
/// the bytes.
fn latent_of<'a>(npy: Cow<'a, [u8]>, bytes: &[u8], key: &str) -> Result<Latent<'a>> {
    if let Cow::Borrowed(b) = npy
        && let Some(l) = raw_npy(b)
    {
        return Ok(l);
    }
    check_size(&npy)?;
    let what = if bytes.starts_with(b"\x93NUMPY") {
        "reading .npy".to_string()
    } else {
        format!("reading `{key}`")
    };
    Ok(Latent::Array(
        ArrayD::<f32>::read_npy(&npy[..]).context(what)?,
    ))
}

/// The names of a `.npz`'s arrays (its entries without `.npy`).
pub fn npz_names(bytes: &[u8]) -> Result<Vec<String>> {
    let strip = |n: &str| n.strip_suffix(".npy").unwrap_or(n).to_string();
    if let Some(dir) = central_directory(bytes) {
        return Ok(dir
            .iter()
            .map(|(_, n)| strip(&String::from_utf8_lossy(n)))
            .collect());
    }
    let zip = zip::ZipArchive::new(Cursor::new(bytes)).context("reading .npz")?;
    Ok(zip.file_names().map(strip).collect())
}

/// The `.npy` bytes of array `key`: a `.npy` file's own, an uncompressed entry borrowed from the
/// archive (its CRC checked), or an entry inflated up to the size its `.npy` header declares.
///
/// Kept in one piece: the archive's checks in the order they bound what is read (duplicate
/// names, the entry's claimed size, the header, then the declared size).
fn entry<'a>(bytes: &'a [u8], key: &str) -> Result<Cow<'a, [u8]>> {
    if bytes.starts_with(b"\x93NUMPY") {
        return Ok(Cow::Borrowed(bytes));
    }
    if !bytes.starts_with(b"PK") {
        return Err(Error::NotLatentFile);
    }
    let name = format!("{key}.npy");
    // numpy's zipfile reads the last of several entries with one name, a zip reader the first:
    // such a file means different things to different readers, so it is refused.
    if let Some(dir) = central_directory(bytes) {
        let copies = dir.iter().filter(|(_, n)| *n == name.as_bytes()).count();
        if copies > 1 {
            return Err(Error::Ambiguous { name, copies });
        }
    }
    if let Some(data) = stored_entry(bytes, name.as_bytes())
        && raw_npy(data).is_some()
    {
        return Ok(Cow::Borrowed(data));
    }
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).context("reading .npz")?;
    let Some(index) = zip.index_for_name(&name) else {
        let keys: Vec<String> = zip
            .file_names()
            .map(|n| n.trim_end_matches(".npy").to_string())
            .collect();
        return Err(Error::NoArray {
            key: key.to_string(),
            names: keys,
            in_npz: true,
        });
    };
    let entry = zip.by_index(index).context("reading .npz")?;
    if entry.size() > MAX_ENTRY_BYTES {
        return Err(Error::EntryTooLarge {
            key: key.to_string(),
            bytes: entry.size(),
            limit: MAX_ENTRY_BYTES,
        });
    }
    // The zip's claimed size may lie (a deflate bomb, or a header that understates it): the
    // .npy header is read first, and its shape bounds what is inflated after it, as numpy reads
    // the size the header declares and no more.
    let mut entry = entry;
    let mut data = Vec::with_capacity(entry.size().min(1 << 20) as usize);
    let read = |entry: &mut dyn Read, data: &mut Vec<u8>, n: u64| {
        entry
            .take(n)
            .read_to_end(data)
            .with_context(|| format!("reading `{key}` from the .npz"))
    };
    read(&mut entry, &mut data, MAX_HEADER_BYTES)?;
    let need = parse_header(&data).and_then(|h| declared_bytes(&h));
    let limit = match need {
        Some(n) if n as u64 > MAX_ENTRY_BYTES => {
            return Err(Error::DeclaredTooLarge {
                key: key.to_string(),
                bytes: n,
                limit: MAX_ENTRY_BYTES,
            });
        }
        Some(n) => n as u64,
        // No readable header in its first MiB: ndarray-npy says what is wrong with it.
        None if (data.len() as u64) < MAX_HEADER_BYTES => data.len() as u64,
        None => {
            return Err(Error::NoHeader {
                key: key.to_string(),
                limit: MAX_HEADER_BYTES,
            });
        }
    };
    // What follows the declared data is not read (numpy does not read it either).
    data.truncate(limit as usize);
    let rest = limit.saturating_sub(data.len() as u64);
    read(&mut entry, &mut data, rest)?;
    Ok(Cow::Owned(data))
}

/// The largest array entry read from an .npz (latents are kilobytes; this only stops archives
/// whose entry would exhaust memory).
const MAX_ENTRY_BYTES: u64 = 1 << 30;
/// The most of an .npz entry read before its .npy header is parsed.
const MAX_HEADER_BYTES: u64 = 1 << 20;

/// The bytes an .npy of this header holds, header included (None if that overflows).
fn declared_bytes(h: &Header) -> Option<usize> {
    h.shape
        .iter()
        .try_fold(item_bytes(h.descr), |a, &d| a.checked_mul(d))?
        .checked_add(h.data_start)
}

/// The size of one element of a dtype string (`<f4` → 4).
fn item_bytes(descr: &str) -> usize {
    descr
        .trim_start_matches(['<', '>', '|', '='])
        .get(1..)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// Refuses a `.npy` whose header's shape needs more bytes than follow it, before ndarray-npy
/// sizes a buffer from that shape (found by fuzzing: a 200-byte file claimed terabytes).
fn check_size(b: &[u8]) -> Result<()> {
    // ndarray-npy also allocates the header's declared length up front (3.8 GB for one fuzz case).
    if let Some((len, start)) = header_span(b)
        && start.saturating_add(len) > b.len()
    {
        return Err(Error::HeaderTooLong {
            header_bytes: len,
            file_bytes: b.len(),
        });
    }
    let Some(h) = parse_header(b) else {
        return Ok(());
    }; // ndarray-npy reports the bad header
    let need = h
        .shape
        .iter()
        .try_fold(item_bytes(h.descr), |a, &d| a.checked_mul(d));
    match need {
        Some(n) if n <= b.len() - h.data_start => Ok(()),
        _ => Err(Error::ShapeTooLarge {
            shape: h.shape,
            descr: h.descr.to_string(),
        }),
    }
}

/// What a `.npy` header says.
struct Header<'a> {
    descr: &'a str,
    fortran_order: bool,
    shape: Vec<usize>,
    data_start: usize,
}

/// (header length, header start) by the format version.
fn header_span(b: &[u8]) -> Option<(usize, usize)> {
    match b.get(6)? {
        1 => Some((u16_at(b, 8)?, 10)),
        2 | 3 => Some((u32_at(b, 8)?, 12)),
        _ => None,
    }
}

fn parse_header(b: &[u8]) -> Option<Header<'_>> {
    let (len, start) = header_span(b)?;
    let header = std::str::from_utf8(b.get(start..start.checked_add(len)?)?).ok()?;
    let value = |key: &str| {
        header
            .split_once(&format!("'{key}':"))
            .map(|(_, rest)| rest.trim_start())
    };
    let descr = value("descr")?.strip_prefix('\'')?.split_once('\'')?.0;
    let fortran_order = value("fortran_order")?.starts_with("True");
    let dims = value("shape")?.strip_prefix('(')?.split_once(')')?.0;
    let shape: Vec<usize> = dims
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect::<Option<_>>()?;
    Some(Header {
        descr,
        fortran_order,
        shape,
        data_start: start + len,
    })
}

fn u16_at(b: &[u8], i: usize) -> Option<usize> {
    Some(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?) as usize)
}

fn u32_at(b: &[u8], i: usize) -> Option<usize> {
    Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?) as usize)
}

/// The central directory's entries as (offset of the entry's record, name), or `None` when it
/// cannot be walked (zip64, damage): the caller then uses the general reader.
fn central_directory(zip: &[u8]) -> Option<Vec<(usize, &[u8])>> {
    // End of central directory: 22 bytes plus a comment of up to 65535.
    let tail_start = zip.len().saturating_sub(22 + 65_535);
    let eocd = (tail_start..=zip.len().checked_sub(22)?)
        .rev()
        .find(|&i| zip[i..i + 4] == [0x50, 0x4b, 0x05, 0x06])?;
    let entries = u16_at(zip, eocd + 10)?;
    let mut p = u32_at(zip, eocd + 16)?;
    let mut out = Vec::with_capacity(entries);
    for _ in 0..entries {
        if zip.get(p..p + 4)? != [0x50, 0x4b, 0x01, 0x02] {
            return None;
        }
        let (n, e, c) = (
            u16_at(zip, p + 28)?,
            u16_at(zip, p + 30)?,
            u16_at(zip, p + 32)?,
        );
        out.push((p, zip.get(p + 46..p + 46 + n)?));
        p += 46 + n + e + c;
    }
    Some(out)
}

/// The bytes of an uncompressed (method 0), non-zip64 entry `name` whose CRC-32 checks out;
/// `None` sends the caller to the general reader (which also produces the error messages).
fn stored_entry<'a>(zip: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let &(p, _) = central_directory(zip)?.iter().find(|(_, n)| *n == name)?;
    let (method, crc) = (u16_at(zip, p + 10)?, u32_at(zip, p + 16)?);
    let (csize, usize_) = (u32_at(zip, p + 20)?, u32_at(zip, p + 24)?);
    let local = u32_at(zip, p + 42)?;
    if method != 0 || csize != usize_ || csize == u32::MAX as usize || local == u32::MAX as usize {
        return None;
    }
    if zip.get(local..local + 4)? != [0x50, 0x4b, 0x03, 0x04] {
        return None;
    }
    let start = local + 30 + u16_at(zip, local + 26)? + u16_at(zip, local + 28)?;
    let data = zip.get(start..start + csize)?;
    (crc32fast::hash(data) as usize == crc).then_some(data)
}

/// A `.npy` holding `<f4` in C order, parsed without allocation beyond the shape.
fn raw_npy(b: &[u8]) -> Option<Latent<'_>> {
    let h = parse_header(b)?;
    if h.descr != "<f4" || h.fortran_order {
        return None;
    }
    let data = b.get(h.data_start..)?;
    let n = h.shape.iter().try_fold(4usize, |a, &d| a.checked_mul(d))?;
    (data.len() == n).then_some(Latent::Raw {
        shape: h.shape,
        le_bytes: data,
    })
}

/// A `.npy` version 1.0 (2.0 when the header needs it) header, padded to a multiple of 64 bytes.
pub fn header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims = match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    let v1 = dict.len() + 11 < 65_536;
    let prefix = if v1 { 10 } else { 12 };
    let pad = (64 - (prefix + dict.len() + 1) % 64) % 64;
    dict.push_str(&" ".repeat(pad));
    dict.push('\n');
    let mut out = b"\x93NUMPY".to_vec();
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(dict.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out
}

/// A numpy unicode array (`<U{n}`, UTF-32LE, zero-padded) of `names`: loads without pickle.
/// A name that is not UTF-8 is decoded as Python decodes file names (`os.fsdecode`, the
/// surrogateescape handler: byte 0xXY that is not UTF-8 becomes U+DCXY), so `os.fsencode(name)`
/// gives its bytes back.
pub fn unicode_array(names: &[&OsStr]) -> Vec<u8> {
    let points: Vec<Vec<u32>> = names.iter().map(|n| fs_decode(n)).collect();
    let width = points.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let mut out = header(&format!("<U{width}"), &[names.len()]);
    for p in points {
        for c in &p {
            out.extend_from_slice(&c.to_le_bytes());
        }
        out.resize(out.len() + 4 * (width - p.len()), 0);
    }
    out
}

/// The code points of a file name as Python's `os.fsdecode` gives them on a UTF-8 system.
fn fs_decode(name: &OsStr) -> Vec<u32> {
    let mut out = Vec::new();
    for chunk in name.as_bytes().utf8_chunks() {
        out.extend(chunk.valid().chars().map(|c| c as u32));
        out.extend(chunk.invalid().iter().map(|&b| 0xDC00 + b as u32));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray_npy::{NpzWriter, WriteNpyExt};

    fn sample() -> ndarray::Array3<f32> {
        ndarray::Array3::from_shape_fn((1, 2, 3), |(_, i, j)| (i * 3 + j) as f32 - 1.5)
    }

    fn values(l: &Latent) -> Vec<f32> {
        let mut slot = vec![0u8; l.shape().iter().product::<usize>() * 4];
        l.write_le(&mut slot);
        slot.chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn headers_are_aligned_and_readable() {
        for shape in [vec![3usize], vec![70_000, 18, 2], vec![0, 1, 1]] {
            let h = header("<f4", &shape);
            assert_eq!(h.len() % 64, 0);
            let mut bytes = h.clone();
            bytes.resize(h.len() + 4 * shape.iter().product::<usize>(), 0);
            let a = ArrayD::<f32>::read_npy(&bytes[..]).unwrap();
            assert_eq!(a.shape(), &shape[..]);
            assert!(matches!(
                read_latent(&bytes, "w").unwrap(),
                Latent::Raw { .. }
            ));
        }
    }

    #[test]
    fn fast_and_general_paths_agree() {
        let want: Vec<f32> = sample().iter().copied().collect();
        let mut npy = Vec::new();
        sample().write_npy(&mut npy).unwrap();
        let l = read_latent(&npy, "w").unwrap();
        assert!(
            matches!(l, Latent::Raw { .. }),
            "np.save output takes the fast path"
        );
        assert_eq!((l.shape(), values(&l)), (&[1usize, 2, 3][..], want.clone()));

        let mut stored = Cursor::new(Vec::new());
        let mut w = NpzWriter::new(&mut stored);
        w.add_array("other", &ndarray::Array1::<f32>::zeros(2))
            .unwrap();
        w.add_array("w", &sample()).unwrap();
        w.finish().unwrap();
        let stored = stored.into_inner();
        let l = read_latent(&stored, "w").unwrap();
        assert!(
            matches!(l, Latent::Raw { .. }),
            "np.savez output takes the fast path"
        );
        assert_eq!(values(&l), want);

        let mut deflated = Cursor::new(Vec::new());
        let mut w = NpzWriter::new_compressed(&mut deflated);
        w.add_array("w", &sample()).unwrap();
        w.finish().unwrap();
        let l = read_latent(deflated.get_ref(), "w").unwrap();
        assert!(matches!(l, Latent::Array(_)));
        assert_eq!(values(&l), want);

        // Fortran order goes through ndarray-npy, which reorders it.
        let mut f = Vec::new();
        sample().reversed_axes().write_npy(&mut f).unwrap();
        let l = read_latent(&f, "w").unwrap();
        assert!(matches!(l, Latent::Array(_)));
        assert_eq!(l.shape(), &[3, 2, 1]);
    }

    #[test]
    fn a_corrupted_stored_entry_is_caught_by_its_crc() {
        let mut stored = Cursor::new(Vec::new());
        let mut w = NpzWriter::new(&mut stored);
        w.add_array("w", &sample()).unwrap();
        w.finish().unwrap();
        let mut bytes = stored.into_inner();
        let pos = bytes
            .windows(4)
            .position(|w| w == 1.5f32.to_le_bytes())
            .unwrap();
        bytes[pos] ^= 0x55;
        assert!(
            read_latent(&bytes, "w").is_err(),
            "the zip crate reports the CRC mismatch"
        );
    }

    #[test]
    fn other_dtypes_and_garbage_are_errors() {
        let mut buf = Vec::new();
        ndarray::Array3::<f64>::from_elem((1, 2, 3), 1.5)
            .write_npy(&mut buf)
            .unwrap();
        assert!(read_latent(&buf, "w").is_err());
        assert!(read_latent(b"hello", "w").is_err());
        assert!(read_latent(b"PK\x03\x04garbage", "w").is_err());
        let mut truncated = Vec::new();
        sample().write_npy(&mut truncated).unwrap();
        truncated.pop();
        assert!(read_latent(&truncated, "w").is_err());
    }
}

#[cfg(test)]
mod fuzz_regressions {
    use super::*;

    /// Inputs the fuzzer (scripts/fuzz.sh) found exhausting memory: they are errors now.
    #[test]
    fn lying_sizes_are_errors_not_allocations() {
        let zip = include_bytes!("../tests/data/fuzz-oom-claimed-size.npz");
        assert!(read_latent(zip, "w").is_err());
        let npy = include_bytes!("../tests/data/fuzz-oom-header-length.npy");
        assert!(
            read_latent(npy, "w")
                .unwrap_err()
                .to_string()
                .contains("header claims")
        );
        assert!(read_f32_or_f64(npy, "w").is_err());
        // A .npy whose header claims 10^12 floats over 8 bytes of data.
        let mut npy = header("<f8", &[1_000_000, 1_000_000]);
        npy.extend([0u8; 8]);
        let e = read_latent(&npy, "w").unwrap_err().to_string();
        assert!(e.contains("needs more bytes"), "{e}");
        let e = read_f32_or_f64(&npy, "w").unwrap_err().to_string();
        assert!(e.contains("needs more bytes"), "{e}");
        // Shapes whose byte count overflows usize.
        let mut npy = header("<f4", &[usize::MAX / 2, 3]);
        npy.extend([0u8; 8]);
        assert!(read_latent(&npy, "w").is_err());
        // A deflated entry whose zip header understates its size, holding a small array and
        // then 64 MiB of zeros: only the declared array is inflated (it inflated all before).
        let mut npy = header("<f4", &[1, 2]);
        npy.extend(1f32.to_le_bytes().into_iter().chain(2f32.to_le_bytes()));
        let declared = npy.len();
        npy.resize(declared + (64 << 20), 0);
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let deflated = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file("w.npy", deflated).unwrap();
        std::io::Write::write_all(&mut zip, &npy).unwrap();
        let bytes = zip.finish().unwrap().into_inner();
        let l = read_latent(&bytes, "w").unwrap();
        assert_eq!(l.shape(), [1, 2]);
        let mut le = [0u8; 8];
        l.write_le(&mut le);
        assert_eq!(le[..4], 1f32.to_le_bytes());
        assert_eq!(le[4..], 2f32.to_le_bytes());
        // A well-formed one still reads raw.
        let mut npy = header("<f4", &[1, 2]);
        npy.extend(1f32.to_le_bytes().into_iter().chain(2f32.to_le_bytes()));
        assert!(matches!(
            read_latent(&npy, "w").unwrap(),
            Latent::Raw { .. }
        ));
    }
}
