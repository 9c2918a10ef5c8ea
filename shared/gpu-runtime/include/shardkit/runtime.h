// gpu-runtime's C++ API for crates with C++ of their own (a model's CUDA kernels): the error
// convention of the C ABI, a device scope, and CUDA C++ compiled with NVRTC at run time.
//
// A model crate keeps its kernel source and its autograd Function in its own .cpp (built with
// torch_build::compile_cxx, this folder on the include path through
// DEP_SHARDKIT_GPU_RUNTIME_INCLUDE), and exports `extern "C"` functions that return
// `shardkit::guarded(...)`'s message; its Rust side turns those into errors with
// `gpu_runtime::shim::abi::result`. stylegan2's modulated-convolution epilogue is the example.
//
// Only headers that compile without a CUDA toolkit are used (the wheel's nvidia/cu13 headers
// lack CCCL's nv/target, which cuda_fp16.h needs: ATen/cuda/CUDAContext.h is out).
#pragma once

#include <c10/cuda/CUDAFunctions.h>
#include <cuda.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace shardkit {

// A malloc'd copy of `s`: how the C ABI returns a message (freed by shk_free_message).
inline char *dup(const char *s) {
  size_t n = std::strlen(s) + 1;
  char *p = static_cast<char *>(std::malloc(n));
  if (p) std::memcpy(p, s, n);
  return p;
}

// Runs `f`; NULL on success, else the C++ exception's message: nothing unwinds into Rust.
template <typename F> char *guarded(F f) {
  try {
    f();
    return nullptr;
  } catch (const std::exception &e) {
    return dup(e.what());
  } catch (...) {
    return dup("unknown C++ exception");
  }
}

// Makes `device` current for a scope (c10's CUDAGuard is inline code calling cudart, which
// nothing here links; these calls live in libc10_cuda).
struct DeviceScope {
  c10::DeviceIndex previous;
  explicit DeviceScope(int device) : previous(c10::cuda::ExchangeDevice(static_cast<c10::DeviceIndex>(device))) {}
  ~DeviceScope() { c10::cuda::MaybeSetDevice(previous); }
};

struct Grid {
  unsigned x, y, z;
};

class KernelModule;

// A KernelModule loaded on one device: its functions, in the order the module names them.
struct LoadedModule {
  const KernelModule *module = nullptr;
  int device = 0;
  CUcontext ctx = nullptr;
  std::vector<CUfunction> functions;

  // Launches function `index` on the device's current CUDA stream (made current in the module's
  // context first). `args` points at each kernel argument, as cuLaunchKernel takes them.
  void launch(size_t index, Grid grid, unsigned block, unsigned shared_bytes, void **args) const;

  // The same, the function named by its `extern "C"` name (one of the module's functions).
  void launch(const std::string &name, Grid grid, unsigned block, unsigned shared_bytes, void **args) const;
};

// CUDA C++ source compiled with NVRTC (from the torch wheel: no nvcc, no toolkit) for a
// device's compute capability the first time it is used there, and loaded into the device's
// primary context. The driver and NVRTC are opened with dlopen on first use, so a machine
// without them fails only when a kernel is asked for, with a message saying why. Thread-safe;
// a failure on a device is remembered and re-thrown.
class KernelModule {
 public:
  // `name` names the source in messages ("epilogue.cu"); `functions` are the
  // `extern "C" __global__` names a LoadedModule holds, in this order; `defines` are passed to
  // NVRTC as -D options (constants the host code shares with the kernels: "PPT=4").
  KernelModule(std::string name, std::string source, std::vector<std::string> functions,
               std::vector<std::string> defines = {});

  // The cubin for compute capability major.minor (no GPU needed): also the build check.
  std::string compile(int major, int minor) const;

  // Compiled and loaded on `device` (once).
  const LoadedModule &on(int device);

  const std::string &name() const { return name_; }
  const std::string &function_name(size_t index) const { return functions_.at(index); }
  // The index of the function named `name` (an error naming the module when it has none).
  size_t function_index(const std::string &name) const;

 private:
  std::string name_, source_;
  std::vector<std::string> functions_, defines_;
  std::mutex mu_;
  std::map<int, LoadedModule> loaded_;
  std::map<int, std::string> failed_;
};

}  // namespace shardkit
