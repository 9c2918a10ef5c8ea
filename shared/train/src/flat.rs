//! All parameters as views into one flat buffer, and all gradients as views into another
//! (what apex's flat master weights and DDP's `gradient_as_bucket_view` do). The optimiser then
//! updates every parameter with a handful of kernels instead of a handful per parameter, zeroing
//! the gradients is one kernel, and gradient buckets are ranges of the flat gradient that are
//! all-reduced in place. Elementwise maths is unchanged, so results equal the per-parameter ones.
//!
//! Parameters are laid out in reverse registration order, the order backward produces their
//! gradients and DDP fills its buckets, so every bucket is one contiguous range. Each starts at a
//! multiple of [`ALIGN_BYTES`] as if allocated alone: CUDA kernels (max-pool, cuDNN) fault with
//! "misaligned address" on a view 8 bytes off (found with a 10-class model on the H100, whose
//! fc.bias of 40 bytes shifted every later parameter). The gaps are zeros and stay zero.

use tch::Tensor;

use crate::{Error, Result};

/// Every parameter's first element is aligned to this (the CUDA caching allocator's block
/// alignment).
pub const ALIGN_BYTES: i64 = 512;

/// Where one parameter lives in the flat buffers.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Index in the parameter list given to [`FlatParams::new`].
    pub index: usize,
    pub offset: i64,
    pub size: Vec<i64>,
    /// The parameter's strides (contiguous or channels_last), kept in the flat buffer.
    pub stride: Vec<i64>,
}

impl Segment {
    pub fn numel(&self) -> i64 {
        self.size.iter().product()
    }
}

/// The flat parameter and gradient buffers.
#[derive(Debug)]
pub struct FlatParams {
    pub data: Tensor,
    pub grad: Tensor,
    /// In flat order (reverse parameter order).
    pub segments: Vec<Segment>,
}

/// Strides of a dense layout of `size` (row-major).
fn contiguous_strides(size: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; size.len()];
    for d in (0..size.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * size[d + 1].max(1);
    }
    s
}

impl FlatParams {
    /// Moves every parameter's data into one buffer and gives each a gradient that is a view of
    /// another; parameters keep their shapes, values and layouts (contiguous or channels_last).
    /// All must share dtype and device.
    pub fn new(params: &[Tensor]) -> Result<FlatParams> {
        FlatParams::with_grad(params, |numel, kind, device| {
            Ok(Tensor::zeros([numel], (kind, device)))
        })
    }

    /// [`FlatParams::new`] with the flat gradient, `numel` zeroes of the parameters' kind and
    /// device, made by `grad` (memory shared with the host's other ranks, say).
    pub fn with_grad(
        params: &[Tensor],
        grad: impl FnOnce(i64, tch::Kind, tch::Device) -> Result<Tensor>,
    ) -> Result<FlatParams> {
        let first = params
            .first()
            .ok_or_else(|| Error::Usage("no parameters to flatten".into()))?;
        let (kind, device) = (first.kind(), first.device());
        if let Some(p) = params
            .iter()
            .find(|p| p.kind() != kind || p.device() != device)
        {
            return Err(Error::Usage(format!(
                "parameters differ in dtype/device ({:?} on {:?} vs {kind:?} on {device:?})",
                p.kind(),
                p.device()
            )));
        }
        let align = (ALIGN_BYTES / kind.elt_size_in_bytes() as i64).max(1);
        let mut segments = Vec::with_capacity(params.len());
        let mut offset = 0i64;
        for index in (0..params.len()).rev() {
            offset = (offset + align - 1) / align * align;
            let p = &params[index];
            let size = p.size();
            let dense = p.is_contiguous() || gpu_runtime::shim::is_channels_last(p);
            let stride = if dense {
                p.stride()
            } else {
                contiguous_strides(&size)
            };
            let seg = Segment {
                index,
                offset,
                size,
                stride,
            };
            offset += seg.numel();
            segments.push(seg);
        }
        let data = Tensor::zeros([offset], (kind, device));
        let grad = grad(offset, kind, device)?;
        if grad.size() != [offset] || grad.kind() != kind || grad.device() != device {
            return Err(Error::Usage(format!(
                "a flat gradient of {:?} {:?} on {:?}, not [{offset}] {kind:?} on {device:?}",
                grad.size(),
                grad.kind(),
                grad.device()
            )));
        }
        let flat = FlatParams {
            data,
            grad,
            segments,
        };
        tch::no_grad(|| -> Result<()> {
            for seg in &flat.segments {
                let mut p = params[seg.index].shallow_clone();
                let view = flat.view(&flat.data, seg);
                view.shallow_clone().copy_(&p);
                p.set_data(&view);
                gpu_runtime::shim::set_grad(&p, &flat.view(&flat.grad, seg))
                    .map_err(Error::Cuda)?;
            }
            Ok(())
        })?;
        Ok(flat)
    }

    /// Parameter `seg`'s part of a buffer laid out like `data` (e.g. optimiser state).
    pub fn view(&self, buf: &Tensor, seg: &Segment) -> Tensor {
        buf.as_strided(&seg.size, &seg.stride, Some(seg.offset))
    }

    /// The flat range `(offset, len)` holding the given parameters (with the alignment gaps
    /// between them), which must be consecutive in flat order (a DDP bucket is).
    pub fn range_of(&self, indices: &[usize]) -> Option<(i64, i64)> {
        let pos: Vec<usize> = indices
            .iter()
            .map(|i| self.segments.iter().position(|s| s.index == *i))
            .collect::<Option<_>>()?;
        let (lo, hi) = (*pos.iter().min()?, *pos.iter().max()?);
        if hi - lo + 1 != pos.len() {
            return None;
        }
        let (first, last) = (&self.segments[lo], &self.segments[hi]);
        Some((first.offset, last.offset + last.numel() - first.offset))
    }

    /// Another handle on the same buffers.
    pub fn shallow_clone(&self) -> FlatParams {
        FlatParams {
            data: self.data.shallow_clone(),
            grad: self.grad.shallow_clone(),
            segments: self.segments.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn parameters_become_views_with_their_values_layouts_and_gradients() {
        let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
            .view([2, 3])
            .set_requires_grad(true);
        let b = Tensor::arange(2 * 3 * 2 * 2, (Kind::Float, Device::Cpu)).view([2, 3, 2, 2]);
        gpu_runtime::shim::channels_last_(&b).unwrap();
        let b = b.set_requires_grad(true);
        let c = Tensor::from_slice(&[7.0f32]).set_requires_grad(true);
        let before: Vec<Tensor> = [&a, &b, &c].iter().map(|t| t.detach().copy()).collect();
        let params = vec![a.shallow_clone(), b.shallow_clone(), c.shallow_clone()];
        let flat = FlatParams::new(&params).unwrap();
        // Reverse order: c, b, a, each on a 512-byte (128-float) boundary.
        assert_eq!(
            flat.segments
                .iter()
                .map(|s| (s.index, s.offset))
                .collect::<Vec<_>>(),
            vec![(2, 0), (1, 128), (0, 256)]
        );
        for (p, v) in params.iter().zip(&before) {
            assert!(p.equal(v));
        }
        assert!(gpu_runtime::shim::is_channels_last(&b));
        // Writing the flat buffer changes the parameters.
        let _ = flat.data.shallow_clone().g_add_scalar_(1.0);
        assert_eq!(c.double_value(&[0]), 8.0);
        // Backward accumulates into the flat gradient.
        ((&a * 2.0).sum(Kind::Float) + (&b * 3.0).sum(Kind::Float) + &c * 4.0)
            .sum(Kind::Float)
            .backward();
        let g: Vec<f32> = Vec::try_from(&flat.grad).unwrap();
        assert_eq!(g.len(), 256 + 6);
        assert_eq!(g[0], 4.0);
        assert!(
            g[128..152].iter().all(|&x| x == 3.0) && g[256..].iter().all(|&x| x == 2.0),
            "{g:?}"
        );
        assert!(
            g[1..128].iter().chain(&g[152..256]).all(|&x| x == 0.0),
            "gaps stay zero"
        );
        for seg in &flat.segments {
            assert_eq!(seg.offset * 4 % ALIGN_BYTES, 0);
        }
        assert!(
            a.grad()
                .equal(&Tensor::full([2, 3], 2.0, (Kind::Float, Device::Cpu)))
        );
        assert_eq!(flat.range_of(&[2, 1]), Some((0, 152)));
        assert_eq!(flat.range_of(&[1, 0]), Some((128, 134)));
        assert_eq!(flat.range_of(&[2, 0]), None);
    }
}
