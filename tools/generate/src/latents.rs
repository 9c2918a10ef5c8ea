//! Reading z / w / ws arrays from `.npy` and `.npz` files, and turning them into ws.

use std::path::Path;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use stylegan2::Generator;
use tch::{Kind, Tensor};

pub use latent_file::Array;

/// Reads a float32/float64 array from `.npy`, or from `.npz` under `key` (default: `w`, else
/// `ws`, else `z`, else the only array): the latent file reader project-one-gpu's and
/// gather-npz's files go through.
pub fn read(path: &Path, key: Option<&str>) -> Result<Array> {
    let bytes = cli_common::inputs::read_regular(path, latent_file::MAX_FILE_BYTES, |head| {
        latent_file::sniff(head).map_err(|_| {
            format!(
                "{} is not an .npz archive or a .npy array (bad magic bytes)",
                path.display()
            )
        })
    })?;
    latent_file::read_array(&bytes, key).with_context(|| format!("reading {}", path.display()))
}

/// What an input array holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InputKind {
    /// By shape: [N, z_dim] is z, [N, 1, w_dim] is w, [N, num_ws, w_dim] is ws.
    Auto,
    /// Latents z [N, z_dim], run through the mapping network.
    Z,
    /// One w per image, [N, w_dim] or [N, 1, w_dim], broadcast to all num_ws layers.
    W,
    /// Per-layer ws [N, num_ws, w_dim].
    Ws,
}

/// How latents become ws.
#[derive(Debug)]
pub struct Mapper<'a> {
    pub g: &'a Generator,
    pub psi: f64,
    pub cutoff: Option<i64>,
    /// Class index for conditional networks.
    pub class: Option<i64>,
}

impl Mapper<'_> {
    /// z [N, z_dim] (f64 or f32) → ws, through the mapping network and truncation.
    pub fn from_z(&self, z: &Tensor) -> Result<Tensor> {
        let g = self.g;
        let n = z.size()[0];
        let c = if g.config.c_dim > 0 {
            let class = self
                .class
                .context("this network is conditional: pass --class")?;
            if !(0..g.config.c_dim).contains(&class) {
                bail!("--class {class} is outside 0..{}", g.config.c_dim);
            }
            let c = Tensor::zeros([n, g.config.c_dim], (Kind::Float, g.device()));
            let _ = c.narrow(1, class, 1).fill_(1.0);
            Some(c)
        } else {
            None
        };
        Ok(g.mapping
            .forward(&z.to_device(g.device()), c.as_ref(), self.psi, self.cutoff))
    }

    /// An array of the given kind → ws [N, num_ws, w_dim].
    pub fn to_ws(&self, a: &Array, kind: InputKind) -> Result<Tensor> {
        let g = self.g;
        let (z_dim, w_dim, num_ws) = (
            g.config.z_dim as usize,
            g.config.w_dim as usize,
            g.num_ws() as usize,
        );
        let s = a.shape.as_slice();
        let kind = match (kind, s) {
            (InputKind::Auto, [_, d]) if *d == z_dim => InputKind::Z,
            (InputKind::Auto, [_, 1, d]) if *d == w_dim => InputKind::W,
            (InputKind::Auto, [_, k, d]) if *k == num_ws && *d == w_dim => InputKind::Ws,
            (InputKind::Auto, _) => bail!(
                "array of shape {s:?} is none of z [N,{z_dim}], w [N,1,{w_dim}], ws [N,{num_ws},{w_dim}]"
            ),
            (k, _) => k,
        };
        let t = Tensor::from_slice(&a.data).to_device(g.device());
        let ws = match (kind, s) {
            (InputKind::Z, [n, d]) if *d == z_dim => {
                return self.from_z(&t.reshape([*n as i64, z_dim as i64]));
            }
            (InputKind::W, [n, d] | [n, 1, d]) if *d == w_dim => t
                .reshape([*n as i64, 1, w_dim as i64])
                .repeat([1, num_ws as i64, 1]),
            (InputKind::Ws, [n, k, d]) if *k == num_ws && *d == w_dim => {
                t.reshape([*n as i64, *k as i64, *d as i64])
            }
            (k, _) => bail!(
                "array of shape {s:?} is not {k:?} for this network (z_dim {z_dim}, w_dim {w_dim}, num_ws {num_ws})"
            ),
        };
        Ok(g.mapping.truncate(&ws, self.psi, self.cutoff))
    }
}

/// Parses upstream's number ranges: `1,2,5-10`.
pub fn parse_seeds(s: &str) -> Result<Vec<std::ops::RangeInclusive<u32>>, String> {
    // Kept as ranges and rendered as a stream: `0-4294967295` is 2^32 seeds, not a 16 GiB list.
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{t}` is not a seed in 0..2^32"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("empty range {part}"));
                }
                out.push(a..=b);
            }
            None => {
                let n = num(part)?;
                out.push(n..=n);
            }
        }
    }
    if out.is_empty() {
        return Err("no seeds".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_like_upstream_num_range() {
        let flat = |s: &str| {
            parse_seeds(s)
                .unwrap()
                .into_iter()
                .flatten()
                .collect::<Vec<u32>>()
        };
        assert_eq!(flat("1,2,5-7"), [1, 2, 5, 6, 7]);
        assert_eq!(flat("0"), [0]);
        // The whole u32 range is two numbers, not 2^32 of them.
        assert_eq!(parse_seeds("0-4294967295").unwrap(), [0..=u32::MAX]);
        assert!(parse_seeds("3-1").is_err());
        assert!(parse_seeds("x").is_err());
        assert!(parse_seeds("-1").is_err());
    }
}
