//! Element types and the element-wise reductions of the CPU backend.
//!
//! Half-precision types are reduced in f32 and rounded back after each pairwise step, as NCCL's
//! ring does; integer averages truncate toward zero (C division, as `ncclAvg` does).

use half::{bf16, f16};

use crate::{Error, Result};

/// A reduction, as `torch.distributed.ReduceOp` / `ncclRedOp_t` name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    /// Sum divided by the world size.
    Avg,
    Prod,
    Max,
    Min,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Avg,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }

    pub(crate) fn code(self) -> u8 {
        // ncclRedOp_t's values (nccl.h).
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Prod => 1,
            ReduceOp::Max => 2,
            ReduceOp::Min => 3,
            ReduceOp::Avg => 4,
        }
    }
}

impl std::str::FromStr for ReduceOp {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ReduceOp::ALL
            .into_iter()
            .find(|op| op.name() == s)
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "unknown reduce op `{s}` (sum, avg, prod, max, min)"
                ))
            })
    }
}

/// The element types the collectives move and reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    U8,
    I8,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 8] = [
        DType::U8,
        DType::I8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    pub fn from_kind(kind: tch::Kind) -> Result<DType> {
        use tch::Kind as K;
        Ok(match kind {
            K::Uint8 => DType::U8,
            K::Int8 => DType::I8,
            K::Int => DType::I32,
            K::Int64 => DType::I64,
            K::Half => DType::F16,
            K::BFloat16 => DType::BF16,
            K::Float => DType::F32,
            K::Double => DType::F64,
            other => {
                return Err(Error::Unsupported(format!(
                    "collectives on {other:?} tensors"
                )));
            }
        })
    }

    pub fn kind(self) -> tch::Kind {
        use tch::Kind as K;
        match self {
            DType::U8 => K::Uint8,
            DType::I8 => K::Int8,
            DType::I32 => K::Int,
            DType::I64 => K::Int64,
            DType::F16 => K::Half,
            DType::BF16 => K::BFloat16,
            DType::F32 => K::Float,
            DType::F64 => K::Double,
        }
    }

    /// Short name (`f32`, `bf16`, `i32`...).
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    pub fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// `ncclDataType_t` (nccl.h).
    pub(crate) fn code(self) -> u8 {
        match self {
            DType::I8 => 0,
            DType::U8 => 1,
            DType::I32 => 2,
            DType::I64 => 4,
            DType::F16 => 6,
            DType::F32 => 7,
            DType::F64 => 8,
            DType::BF16 => 9,
        }
    }
}

impl std::str::FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "unknown dtype `{s}` (u8, i8, i32, i64, f16, bf16, f32, f64)"
                ))
            })
    }
}

trait Elem: bytemuck::Pod {
    fn combine(a: Self, b: Self, op: ReduceOp) -> Self;
    fn div(a: Self, n: usize) -> Self;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn combine(a: Self, b: Self, op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                }
            }
            fn div(a: Self, n: usize) -> Self {
                a / (n as $t)
            }
        }
    )*};
}
int_elem!(u8, i8, i32, i64);

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn combine(a: Self, b: Self, op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => a + b,
                    ReduceOp::Prod => a * b,
                    // NaN-propagating, as NCCL and torch are.
                    ReduceOp::Max => if a.is_nan() || a > b { a } else { b },
                    ReduceOp::Min => if a.is_nan() || a < b { a } else { b },
                }
            }
            fn div(a: Self, n: usize) -> Self {
                a / (n as $t)
            }
        }
    )*};
}
float_elem!(f32, f64);

macro_rules! half_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn combine(a: Self, b: Self, op: ReduceOp) -> Self {
                <$t>::from_f32(f32::combine(a.to_f32(), b.to_f32(), op))
            }
            fn div(a: Self, n: usize) -> Self {
                <$t>::from_f32(a.to_f32() / n as f32)
            }
        }
    )*};
}
half_elem!(f16, bf16);

/// Runs `$body` with `$T` bound to the Rust type of `$dtype`.
/// `$body` with `$T` the Rust type of `$dtype`'s elements.
macro_rules! with_elem {
    ($dtype:expr, $T:ident => $body:expr) => {
        with_elem!(@arms $dtype, $T, $body,
            U8 u8, I8 i8, I32 i32, I64 i64, F16 f16, BF16 bf16, F32 f32, F64 f64)
    };
    (@arms $dtype:expr, $T:ident, $body:expr, $($variant:ident $ty:ty),+) => {
        match $dtype {
            $(DType::$variant => {
                type $T = $ty;
                $body
            })+
        }
    };
}

/// `dst[i] = op(dst[i], src[i])`, or with `REV` `op(src[i], dst[i])`.
fn combine_slices<T: Elem, const REV: bool>(dst: &mut [u8], src: &[u8], op: ReduceOp) {
    let dst: &mut [T] = bytemuck::cast_slice_mut(dst);
    let src: &[T] = bytemuck::cast_slice(src);
    // One monomorphic loop per op (and order), so each vectorises.
    macro_rules! lane {
        ($op:expr) => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = if REV {
                    T::combine(*s, *d, $op)
                } else {
                    T::combine(*d, *s, $op)
                };
            }
        };
    }
    match op {
        ReduceOp::Sum | ReduceOp::Avg => lane!(ReduceOp::Sum),
        ReduceOp::Prod => lane!(ReduceOp::Prod),
        ReduceOp::Max => lane!(ReduceOp::Max),
        ReduceOp::Min => lane!(ReduceOp::Min),
    }
}

fn combine_in<const REV: bool>(dtype: DType, op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    if dst.is_empty() {
        return; // an empty slice may be dangling-aligned (1), which bytemuck refuses to cast
    }
    with_elem!(dtype, T => combine_slices::<T, REV>(dst, src, op))
}

/// `dst[i] = op(dst[i], src[i])` over whole elements; both slices element-aligned and equal.
pub(crate) fn combine(dtype: DType, op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    combine_in::<false>(dtype, op, dst, src)
}

/// `acc[i] = op(x[i], acc[i])`: the TCP ring's step (a rank combines what arrives into its own
/// values, [`combine`] with `dst` its own), with the running result kept in `acc`.
pub(crate) fn combine_rev(dtype: DType, op: ReduceOp, acc: &mut [u8], x: &[u8]) {
    combine_in::<true>(dtype, op, acc, x)
}

fn div_slice<T: Elem>(buf: &mut [u8], n: usize) {
    for v in bytemuck::cast_slice_mut::<u8, T>(buf) {
        *v = T::div(*v, n);
    }
}

/// `buf[i] /= n` (the second half of `Avg`).
pub(crate) fn divide(dtype: DType, buf: &mut [u8], n: usize) {
    if buf.is_empty() {
        return;
    }
    with_elem!(dtype, T => div_slice::<T>(buf, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_covers_every_op_and_type() {
        let mut a = bytemuck::cast_slice::<f32, u8>(&[1.0, -2.0, 3.0]).to_vec();
        let b = bytemuck::cast_slice::<f32, u8>(&[4.0, 5.0, -6.0]).to_vec();
        combine(DType::F32, ReduceOp::Max, &mut a, &b);
        assert_eq!(bytemuck::cast_slice::<u8, f32>(&a), [4.0, 5.0, 3.0]);
        combine(DType::F32, ReduceOp::Sum, &mut a, &b);
        assert_eq!(bytemuck::cast_slice::<u8, f32>(&a), [8.0, 10.0, -3.0]);
        divide(DType::F32, &mut a, 2);
        assert_eq!(bytemuck::cast_slice::<u8, f32>(&a), [4.0, 5.0, -1.5]);

        let mut i = bytemuck::cast_slice::<i32, u8>(&[7, -7, 3]).to_vec();
        let j = bytemuck::cast_slice::<i32, u8>(&[2, 2, 5]).to_vec();
        combine(DType::I32, ReduceOp::Prod, &mut i, &j);
        assert_eq!(bytemuck::cast_slice::<u8, i32>(&i), [14, -14, 15]);
        divide(DType::I32, &mut i, 4); // truncation toward zero, as C and ncclAvg
        assert_eq!(bytemuck::cast_slice::<u8, i32>(&i), [3, -3, 3]);

        let h = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>();
        let mut x = bytemuck::cast_slice::<bf16, u8>(&h(&[1.5, 2.0])).to_vec();
        combine(
            DType::BF16,
            ReduceOp::Min,
            &mut x,
            bytemuck::cast_slice(&h(&[1.0, 3.0])),
        );
        assert_eq!(bytemuck::cast_slice::<u8, bf16>(&x), h(&[1.0, 2.0]));
    }

    #[test]
    fn float_max_propagates_nan() {
        let mut a = bytemuck::cast_slice::<f64, u8>(&[f64::NAN, 1.0]).to_vec();
        combine(
            DType::F64,
            ReduceOp::Max,
            &mut a,
            bytemuck::cast_slice(&[2.0f64, f64::NAN]),
        );
        let r = bytemuck::cast_slice::<u8, f64>(&a);
        assert!(r[0].is_nan() && r[1].is_nan());
    }
}
