//! TorchScript modules for training (`src/script.cpp`): a file written by `torch.jit.save`
//! (scripted or traced) loaded onto a device, its parameters and buffers as tensors under their
//! `state_dict` names (handles to the module's own tensors: what an optimiser changes in place,
//! the module computes with), and its forward in training or evaluation mode, as
//! `model.train()` / `model.eval()` switch dropout and BatchNorm. tch 0.24 lists a module's
//! parameters only, under names with `.` replaced, and no buffers.

use std::ffi::{CStr, c_char, c_int, c_void};

use tch::{Device, Tensor};
use torch_sys::C_tensor;

use crate::shim::{Result, check, ptr};

/// The opaque C++ module.
#[repr(C)]
struct Script {
    _private: [u8; 0],
}

type NamedFn = unsafe extern "C" fn(*mut c_void, *const c_char, *mut C_tensor);

unsafe extern "C" {
    fn shk_script_load_bytes(
        data: *const c_char,
        len: usize,
        device_type: c_int,
        index: c_int,
        out: *mut *mut Script,
    ) -> *mut c_char;
    fn shk_script_free(s: *mut Script);
    fn shk_script_named(
        s: *mut Script,
        buffers: c_int,
        state: *mut c_void,
        add: NamedFn,
    ) -> *mut c_char;
    fn shk_script_forward(
        s: *mut Script,
        x: *mut C_tensor,
        train: c_int,
        out: *mut *mut C_tensor,
    ) -> *mut c_char;
}

/// A loaded TorchScript module. One thread uses it at a time (its forward switches the
/// module's mode).
pub struct ScriptModule {
    ptr: *mut Script,
}

// SAFETY: the C++ module is owned by this handle alone and used by one thread at a time
// (`&mut`-free methods are not called concurrently: the trainer runs one forward at a time per
// rank, and ranks have modules of their own).
unsafe impl Send for ScriptModule {}

impl std::fmt::Debug for ScriptModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScriptModule")
    }
}

impl ScriptModule {
    /// The module saved (`torch.jit.save`) in `bytes`, with its tensors on `device`. The
    /// caller reads the file once and names what it read (hash these bytes, load these
    /// bytes): loading by path after hashing would load whatever the path holds by then.
    pub fn from_bytes(bytes: &[u8], device: Device) -> Result<ScriptModule> {
        let (kind, index) = match device {
            Device::Cuda(i) => (1, i as c_int),
            _ => (0, 0),
        };
        let mut out = std::ptr::null_mut();
        // SAFETY: `bytes` is alive and unchanged for the call (the C++ reads it in place and
        // keeps no pointer into it: the module's tensors are its own); on success `out` is a
        // module we own.
        check(unsafe {
            shk_script_load_bytes(bytes.as_ptr().cast(), bytes.len(), kind, index, &mut out)
        })?;
        Ok(ScriptModule { ptr: out })
    }

    fn named(&self, buffers: bool) -> Result<Vec<(String, Tensor)>> {
        unsafe extern "C" fn add(state: *mut c_void, name: *const c_char, t: *mut C_tensor) {
            // SAFETY: `state` is the Vec below, alive for the call.
            let v = unsafe { &mut *(state as *mut Vec<(String, Tensor)>) };
            // SAFETY: a NUL-terminated name the C++ keeps alive for the call (state_dict names
            // are Python identifiers joined by dots: UTF-8).
            let name = unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
            // SAFETY: a tensor handle the C++ made for us to own.
            v.push((name, unsafe { Tensor::from_ptr(t) }));
        }
        let mut v: Vec<(String, Tensor)> = Vec::new();
        // SAFETY: a live module; the callback only pushes into `v`.
        check(unsafe {
            shk_script_named(
                self.ptr,
                buffers as c_int,
                &mut v as *mut _ as *mut c_void,
                add,
            )
        })?;
        Ok(v)
    }

    /// The parameters of the module and its submodules, in `parameters()` order, by their
    /// `state_dict` names.
    pub fn named_parameters(&self) -> Result<Vec<(String, Tensor)>> {
        self.named(false)
    }

    /// The buffers (BatchNorm's running statistics and count, ...), by their `state_dict` names.
    pub fn named_buffers(&self) -> Result<Vec<(String, Tensor)>> {
        self.named(true)
    }

    /// `model.train(train)`, then `model(x)`.
    pub fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let mut out = std::ptr::null_mut();
        // SAFETY: a live module and tensor; on success `out` is a tensor we own.
        check(unsafe { shk_script_forward(self.ptr, ptr(x), train as c_int, &mut out) })?;
        // SAFETY: see above.
        Ok(unsafe { Tensor::from_ptr(out) })
    }
}

impl Drop for ScriptModule {
    fn drop(&mut self) {
        // SAFETY: made by shk_script_load, freed once.
        unsafe { shk_script_free(self.ptr) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_torchscript_is_an_error_with_one_line() {
        let e = ScriptModule::from_bytes(b"not a zip archive", Device::Cpu).unwrap_err();
        assert!(!e.to_string().contains('\n'), "{e}");
        assert!(ScriptModule::from_bytes(b"", Device::Cpu).is_err(), "empty");
    }
}
