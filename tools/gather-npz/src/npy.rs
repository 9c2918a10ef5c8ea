//! Reading one latent from `.npz`/`.npy`, and writing `.npy` headers for the gathered output.

use std::io::{Cursor, Read};

use anyhow::{Context, Result, bail};
use ndarray::ArrayD;
use ndarray_npy::ReadNpyExt;

/// Reads array `key` of a `.npz` (stored or deflated), or the array of a `.npy`, as float32.
pub fn read_latent(bytes: &[u8], key: &str) -> Result<ArrayD<f32>> {
    if bytes.starts_with(b"\x93NUMPY") {
        return ArrayD::<f32>::read_npy(bytes).context("reading .npy");
    }
    if !bytes.starts_with(b"PK") {
        bail!("neither .npz nor .npy (bad magic bytes)");
    }
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).context("reading .npz")?;
    let name = format!("{key}.npy");
    let Some(index) = zip.index_for_name(&name) else {
        let keys: Vec<String> = zip.file_names().map(|n| n.trim_end_matches(".npy").to_string()).collect();
        bail!("no array `{key}` in the .npz (it has: {})", keys.join(", "));
    };
    let mut entry = zip.by_index(index).context("reading .npz")?;
    let mut data = Vec::with_capacity(entry.size() as usize);
    entry.read_to_end(&mut data).with_context(|| format!("reading `{key}` from the .npz"))?;
    ArrayD::<f32>::read_npy(&data[..]).with_context(|| format!("reading `{key}`"))
}

/// A `.npy` version 1.0 (2.0 when the header needs it) header, padded to a multiple of 64 bytes.
pub fn header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims = match shape {
        [n] => format!("({n},)"),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
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
pub fn unicode_array(names: &[&str]) -> Vec<u8> {
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0).max(1);
    let mut out = header(&format!("<U{width}"), &[names.len()]);
    for n in names {
        let mut count = 0;
        for c in n.chars() {
            out.extend_from_slice(&(c as u32).to_le_bytes());
            count += 1;
        }
        out.resize(out.len() + 4 * (width - count), 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray_npy::WriteNpyExt;

    #[test]
    fn headers_are_aligned_and_readable() {
        for shape in [vec![3usize], vec![70_000, 18, 2], vec![0, 1, 1]] {
            let h = header("<f4", &shape);
            assert_eq!(h.len() % 64, 0);
            let mut bytes = h.clone();
            bytes.resize(h.len() + 4 * shape.iter().product::<usize>(), 0);
            let a = ArrayD::<f32>::read_npy(&bytes[..]).unwrap();
            assert_eq!(a.shape(), &shape[..]);
        }
    }

    #[test]
    fn reads_npy_and_rejects_other_dtypes() {
        let mut buf = Vec::new();
        ndarray::Array3::<f32>::from_elem((1, 2, 3), 1.5).write_npy(&mut buf).unwrap();
        assert_eq!(read_latent(&buf, "w").unwrap().shape(), &[1, 2, 3]);
        let mut buf = Vec::new();
        ndarray::Array3::<f64>::from_elem((1, 2, 3), 1.5).write_npy(&mut buf).unwrap();
        assert!(read_latent(&buf, "w").is_err());
        assert!(read_latent(b"hello", "w").is_err());
    }
}
