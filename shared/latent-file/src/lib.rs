//! The latent files the projection tools share. `project-one-gpu` writes one per image: an
//! uncompressed `.npz` (`np.savez`'s format) holding [`W`], float32 [1, k, w_dim] (k = 1, or the
//! generator's num_ws for W+), and with the trajectory kept [`W_STEPS`], float32
//! [steps, k, w_dim], as StyleGAN2-ADA's projection script's `projected_w.npz` holds `w`.
//! `gather-npz` reads many of them into one array; `generate` renders them (and z, w or ws
//! arrays from anywhere, float32 or float64, in `.npz` or `.npy`).
//!
//! Reading never trusts a header: the `.npy` header's shape is checked against the bytes that
//! follow it, and an archive entry is inflated no further than its header declares
//! ([`npy`]).

use std::io::{Seek, Write};

use ndarray::ArrayD;

pub mod npy;

/// What is wrong with a latent file, or with writing one; each displays whole.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The archive has no array `key` (`in_npz`: found so while reading its entries).
    #[error(
        "no array `{key}`{} (it has: {})",
        if *.in_npz { " in the .npz" } else { "" },
        .names.join(", ")
    )]
    NoArray {
        key: String,
        names: Vec<String>,
        in_npz: bool,
    },
    /// No key was named and the archive has no w, ws or z, nor one array alone.
    #[error("no array w, ws or z (it has: {}); name one with --key", .names.join(", "))]
    NoDefaultArray { names: Vec<String> },
    /// Several entries share the name `name`.
    #[error(
        "the .npz holds {copies} entries named {name} (numpy would read the last, a zip reader \
         the first): refusing an ambiguous file"
    )]
    Ambiguous { name: String, copies: usize },
    /// The archive's entry for `key` claims more bytes than a latent has.
    #[error("`{key}` in the .npz claims {bytes} bytes (more than {limit}: not a latent)")]
    EntryTooLarge { key: String, bytes: u64, limit: u64 },
    /// The `.npy` header of `key`'s entry declares more bytes than a latent has.
    #[error("`{key}` in the .npz declares {bytes} bytes (more than {limit}: not a latent)")]
    DeclaredTooLarge {
        key: String,
        bytes: usize,
        limit: u64,
    },
    /// No `.npy` header within the first `limit` bytes of `key`'s entry.
    #[error("`{key}` in the .npz has no .npy header in its first {limit} bytes")]
    NoHeader { key: String, limit: u64 },
    /// The `.npy` header's own length runs past the file.
    #[error("the .npy header claims {header_bytes} bytes; the file has {file_bytes}")]
    HeaderTooLong {
        header_bytes: usize,
        file_bytes: usize,
    },
    /// The `.npy` header's shape needs more bytes than follow it.
    #[error("the .npy header's shape {shape:?} of {descr} needs more bytes than the file has")]
    ShapeTooLarge { shape: Vec<usize>, descr: String },
    /// The first bytes are neither a `.npy` array's nor a zip archive's ([`sniff`]).
    #[error("neither .npz nor .npy (bad magic bytes)")]
    NotLatentFile,
    /// A library below (zip, ndarray-npy) failed while reading `what`.
    #[error("{what}: {}", error_class::chain_text(&**error))]
    Read {
        what: String,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Writing the archive failed.
    #[error("writing the .npz: {}", error_class::chain_text(.0))]
    Write(ndarray_npy::WriteNpzError),
}

impl error_class::Classify for Error {
    fn class(&self) -> error_class::Class {
        error_class::Class::Fatal
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A library's error as [`Error::Read`], with what was being read.
trait Context<T> {
    fn context(self, what: impl Into<String>) -> Result<T>;
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|e| Error::Read {
            what: what.into(),
            error: Box::new(e),
        })
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Read {
            what: what(),
            error: Box::new(e),
        })
    }
}

pub use npy::{Latent, header as npy_header, npz_names, read_latent, unicode_array};

/// The projected latent's array name.
pub const W: &str = "w";
/// The per-step trajectory's array name.
pub const W_STEPS: &str = "w_steps";

/// The largest latent file read (latents are kilobytes; a trajectory of 1,000 W+ steps at
/// 1024² is 36 MB).
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// Whether a file's first bytes are an `.npz` (a zip) or a `.npy`, else
/// [`Error::NotLatentFile`].
pub fn sniff(head: &[u8]) -> Result<()> {
    if head.starts_with(b"\x93NUMPY")
        || head.starts_with(b"PK\x03\x04")
        || head.starts_with(b"PK\x05\x06")
    {
        Ok(())
    } else {
        Err(Error::NotLatentFile)
    }
}

/// Writes a latent file to `out`: [`W`], and [`W_STEPS`] when given.
pub fn write<O: Write + Seek>(out: O, w: &ArrayD<f32>, steps: Option<&ArrayD<f32>>) -> Result<()> {
    let mut npz = ndarray_npy::NpzWriter::new(out);
    npz.add_array(W, w).map_err(Error::Write)?;
    if let Some(s) = steps {
        npz.add_array(W_STEPS, s).map_err(Error::Write)?;
    }
    npz.finish().map_err(Error::Write)?;
    Ok(())
}

/// A float array read from a latent file, as float32 values in C order.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// The array of a `.npy`, or of an `.npz` under `key` (default: `w`, else `ws`, else `z`, else
/// its only array), float32 or float64, as float32.
pub fn read_array(bytes: &[u8], key: Option<&str>) -> Result<Array> {
    let key = if bytes.starts_with(b"PK") {
        npz_key(bytes, key)?
    } else {
        key.unwrap_or(W).to_string()
    };
    let (shape, data) = npy::read_f32_or_f64(bytes, &key)?;
    Ok(Array { shape, data })
}

/// The array an `.npz` is read under: `key` if it holds it, else the default.
fn npz_key(bytes: &[u8], key: Option<&str>) -> Result<String> {
    let names = npz_names(bytes).context("not an .npz archive")?;
    let has = |k: &str| names.iter().any(|n| n == k);
    match key {
        Some(k) if has(k) => Ok(k.to_string()),
        Some(k) => Err(Error::NoArray {
            key: k.to_string(),
            names,
            in_npz: false,
        }),
        None => match ["w", "ws", "z"].into_iter().find(|k| has(k)) {
            Some(k) => Ok(k.to_string()),
            None if names.len() == 1 => Ok(names[0].clone()),
            None => Err(Error::NoDefaultArray { names }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray_npy::{NpzWriter, WriteNpyExt};
    use std::io::Cursor;

    #[test]
    fn sniff_tells_other_bytes_apart_by_kind() {
        assert!(sniff(b"\x93NUMPY\x01\x00").is_ok() && sniff(b"PK\x03\x04").is_ok());
        let e = sniff(b"P6 1 1 255\n").unwrap_err();
        assert!(matches!(e, Error::NotLatentFile), "{e:?}");
        assert_eq!(e.to_string(), "neither .npz nor .npy (bad magic bytes)");
        // The reader says the same of the whole file.
        let e = read_latent(b"P6 1 1 255\n\0\0\0", W).unwrap_err();
        assert!(matches!(e, Error::NotLatentFile), "{e:?}");
    }

    #[test]
    fn a_failed_write_names_the_reason_below_the_zip_writer() {
        struct Full;
        impl std::io::Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from_raw_os_error(28))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        impl std::io::Seek for Full {
            fn seek(&mut self, _: std::io::SeekFrom) -> std::io::Result<u64> {
                Ok(0)
            }
        }
        let w = ndarray::Array3::<f32>::zeros((1, 2, 3)).into_dyn();
        let e = write(Full, &w, None).unwrap_err().to_string();
        assert!(e.contains("No space left on device"), "{e}");
    }

    #[test]
    fn what_is_written_reads_back_in_both_readers() {
        let w = ndarray::Array3::<f32>::from_shape_fn((1, 2, 3), |(_, i, j)| (i * 3 + j) as f32)
            .into_dyn();
        let steps = ndarray::Array3::<f32>::from_elem((4, 2, 3), 0.5).into_dyn();
        let mut file = Cursor::new(Vec::new());
        write(&mut file, &w, Some(&steps)).unwrap();
        let bytes = file.into_inner();
        assert_eq!(npz_names(&bytes).unwrap(), [W, W_STEPS]);
        let l = read_latent(&bytes, W).unwrap();
        assert!(
            matches!(l, Latent::Raw { .. }),
            "uncompressed: read in place"
        );
        assert_eq!(l.shape(), [1, 2, 3]);
        let a = read_array(&bytes, None).unwrap();
        assert_eq!(
            (a.shape, a.data),
            (vec![1, 2, 3], vec![0., 1., 2., 3., 4., 5.])
        );
        assert_eq!(read_array(&bytes, Some(W_STEPS)).unwrap().shape, [4, 2, 3]);
    }

    #[test]
    fn arrays_are_read_by_key_or_default_in_either_dtype() {
        let a = ndarray::Array3::<f32>::from_shape_fn((2, 1, 3), |(i, _, k)| (i * 3 + k) as f32);
        let mut npy = Vec::new();
        a.write_npy(&mut npy).unwrap();
        let got = read_array(&npy, None).unwrap();
        assert_eq!(got.shape, [2, 1, 3]);
        assert_eq!(got.data, [0., 1., 2., 3., 4., 5.]);

        let mut npz = Cursor::new(Vec::new());
        let mut w = NpzWriter::new(&mut npz);
        w.add_array("other", &ndarray::arr1(&[1.0f64])).unwrap();
        w.add_array("w", &a.mapv(|v| v as f64)).unwrap();
        w.finish().unwrap();
        let npz = npz.into_inner();
        assert_eq!(
            read_array(&npz, None).unwrap().data,
            [0., 1., 2., 3., 4., 5.]
        );
        assert_eq!(read_array(&npz, Some("other")).unwrap().data, [1.0]);
        let e = read_array(&npz, Some("z")).unwrap_err().to_string();
        assert!(e.contains("no array `z`") && e.contains("other"), "{e}");

        let mut two = Cursor::new(Vec::new());
        let mut w = NpzWriter::new_compressed(&mut two);
        w.add_array("a", &ndarray::arr1(&[1.0f32])).unwrap();
        w.add_array("b", &ndarray::arr1(&[2.0f32])).unwrap();
        w.finish().unwrap();
        let e = read_array(two.get_ref(), None).unwrap_err().to_string();
        assert!(e.contains("name one with --key"), "{e}");
        let mut one = Cursor::new(Vec::new());
        let mut w = NpzWriter::new_compressed(&mut one);
        w.add_array("latent", &ndarray::arr1(&[3.0f64])).unwrap();
        w.finish().unwrap();
        assert_eq!(read_array(one.get_ref(), None).unwrap().data, [3.0]);

        let mut ints = Vec::new();
        ndarray::arr1(&[1i32]).write_npy(&mut ints).unwrap();
        let e = format!("{:#}", read_array(&ints, None).unwrap_err());
        assert!(e.contains("not a float32/float64"), "{e}");
    }

    #[test]
    fn a_file_that_is_not_a_latent_says_what_it_is_not_by_kind() {
        use error_class::{Class, Classify};
        let mut npz = Cursor::new(Vec::new());
        let mut w = NpzWriter::new(&mut npz);
        w.add_array("a", &ndarray::arr1(&[1.0f32])).unwrap();
        w.add_array("b", &ndarray::arr1(&[2.0f32])).unwrap();
        w.finish().unwrap();
        let npz = npz.into_inner();
        let names = vec!["a".to_string(), "b".to_string()];
        let e = read_array(&npz, Some("z")).unwrap_err();
        assert_eq!(e.to_string(), "no array `z` (it has: a, b)");
        assert!(
            matches!(&e, Error::NoArray { key, names: n, in_npz: false } if key == "z" && *n == names),
            "{e:?}"
        );
        assert_eq!(e.class(), Class::Fatal);
        let e = read_array(&npz, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no array w, ws or z (it has: a, b); name one with --key"
        );
        assert!(
            matches!(&e, Error::NoDefaultArray { names: n } if *n == names),
            "{e:?}"
        );
        let e = read_latent(&npz, "z").unwrap_err();
        assert_eq!(e.to_string(), "no array `z` in the .npz (it has: a, b)");
        assert!(matches!(&e, Error::NoArray { in_npz: true, .. }), "{e:?}");
        let mut npy = npy::header("<f8", &[1_000_000, 1_000_000]);
        npy.extend([0u8; 8]);
        let e = read_latent(&npy, W).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the .npy header's shape [1000000, 1000000] of <f8 needs more bytes than the file has"
        );
        assert!(
            matches!(&e, Error::ShapeTooLarge { shape, descr } if *shape == [1_000_000, 1_000_000] && descr == "<f8"),
            "{e:?}"
        );
        let npy = include_bytes!("../tests/data/fuzz-oom-header-length.npy");
        let e = read_latent(npy, W).unwrap_err();
        assert!(
            matches!(e, Error::HeaderTooLong { file_bytes, .. } if file_bytes == npy.len()),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("the .npy header claims "), "{e}");
        assert!(std::error::Error::source(&e).is_none());
    }
}
