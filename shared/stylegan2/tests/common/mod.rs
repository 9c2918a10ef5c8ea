//! What the tests against reference tensors share.

use std::collections::BTreeMap;
use std::path::Path;

use tch::Tensor;

/// A safetensors file's tensors by name (a fixture's `reference.safetensors`, a script's output).
pub fn tensors(path: &Path) -> BTreeMap<String, Tensor> {
    Tensor::read_safetensors(path)
        .unwrap()
        .into_iter()
        .collect()
}

/// max |a − b| of two tensors of one shape.
pub fn max_abs(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    (a - b).abs().max().double_value(&[])
}
