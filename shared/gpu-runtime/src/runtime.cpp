// The libtorch C++ calls tch 0.24 does not bind, and NVRTC kernels at run time (the C++ half of
// gpu-runtime: src/shim.rs binds the `extern "C"` functions, include/shardkit/runtime.h is the
// API for crates with C++ of their own). Every function catches C++ exceptions and returns them
// as a malloc'd message (NULL on success): nothing unwinds into Rust. Tensors cross as tch's
// `C_tensor*`, which is an `at::Tensor*`.
//
// Only headers that compile without a CUDA toolkit are used (the wheel's nvidia/cu13 headers
// lack CCCL's nv/target, which cuda_fp16.h needs: ATen/cuda/CUDAContext.h is out).
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <shardkit/runtime.h>

#include <cuda.h>

#include <algorithm>
#include <nvrtc.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <memory>
#include <cstring>
#include <optional>

namespace {
using shardkit::dup;
using shardkit::guarded;

// A graph with the stream it was captured on and the stream that was current before.
// The CUDAGraph itself is made inside capture_begin's guard: its constructor needs CUDA.
struct Graph {
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  std::optional<c10::cuda::CUDAStream> capture_stream;
  std::optional<c10::cuda::CUDAStream> previous;
};

// A caller's in-place SUM all-reduce (a Rust callback and its state). The callback takes
// ownership of the tensor handle it is given and writes a message into `msg` when it fails.
typedef int (*shk_reduce_fn)(void *state, at::Tensor *t, char *msg, size_t cap);
typedef void (*shk_drop_fn)(void *state);

struct Reducer : torch::CustomClassHolder {
  shk_reduce_fn reduce;
  shk_drop_fn drop;
  void *state;
  Reducer(shk_reduce_fn r, shk_drop_fn d, void *s) : reduce(r), drop(d), state(s) {}
  ~Reducer() override { drop(state); }
  void operator()(const at::Tensor &t) const {
    char msg[1024] = {0};
    if (reduce(state, new at::Tensor(t), msg, sizeof msg - 1) != 0) throw std::runtime_error(msg);
  }
};

// y = SUM over ranks of x; its backward is the same all-reduce of the gradient (every rank's
// loss depends on every rank's x). The reducer lives as long as the graph node.
struct AllReduceSum : torch::autograd::Function<AllReduceSum> {
  static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &x, c10::intrusive_ptr<Reducer> r) {
    auto out = x.clone(at::MemoryFormat::Contiguous);
    (*r)(out);
    ctx->saved_data["reducer"] = c10::IValue::make_capsule(std::move(r));
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx, torch::autograd::variable_list grads) {
    auto r = c10::static_intrusive_pointer_cast<Reducer>(ctx->saved_data["reducer"].toCapsule());
    // Materialised by autograd (zeros when the output was unused): every rank calls the reducer.
    auto g = grads[0].clone(at::MemoryFormat::Contiguous);
    (*r)(g);
    return {g, at::Tensor()};
  }
};

// The driver and NVRTC entry points, loaded with dlopen (no link-time CUDA dependency: the
// runtime runs on machines without a driver; this code is reached only for CUDA work, and
// NVRTC, which needs no GPU, by the compile check).
struct Driver {
  CUresult (*ctxGetCurrent)(CUcontext *);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*deviceGet)(CUdevice *, int);
  CUresult (*deviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*moduleLoadData)(CUmodule *, const void *);
  CUresult (*moduleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void **, void **);
  CUresult (*getErrorString)(CUresult, const char **);
  CUresult (*streamIsCapturing)(CUstream, CUstreamCaptureStatus *);
};

struct Nvrtc {
  nvrtcResult (*createProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                               const char *const *);
  nvrtcResult (*compileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*getProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*getProgramLog)(nvrtcProgram, char *);
  nvrtcResult (*getCUBINSize)(nvrtcProgram, size_t *);
  nvrtcResult (*getCUBIN)(nvrtcProgram, char *);
  nvrtcResult (*destroyProgram)(nvrtcProgram *);
};

// libnvrtc sits in the wheel's nvidia/cu13/lib, next to the torch package whose libraries we
// link: try the plain name (already loaded, or on the search path), then that directory. NVRTC
// dlopens its builtins library by bare name, which that directory is not on the path for: load
// it from beside libnvrtc first.
std::string dir_of(const void *addr) {
  Dl_info info;
  if (!dladdr(addr, &info) || !info.dli_fname) return "";
  std::string lib(info.dli_fname);
  auto slash = lib.rfind('/');
  return slash == std::string::npos ? "" : lib.substr(0, slash);
}

void *open_nvrtc() {
  void *h = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    std::string torch_lib = dir_of(reinterpret_cast<const void *>(&at::globalContext));  // .../site-packages/torch/lib
    if (!torch_lib.empty()) h = dlopen((torch_lib + "/../../nvidia/cu13/lib/libnvrtc.so.13").c_str(), RTLD_NOW | RTLD_GLOBAL);
  }
  if (!h) throw std::runtime_error(std::string("libnvrtc.so.13 not found (torch's nvidia/cu13/lib): ") + dlerror());
  if (void *f = dlsym(h, "nvrtcVersion")) {
    std::string dir = dir_of(f);
    if (!dir.empty()) dlopen((dir + "/libnvrtc-builtins.so.13.0").c_str(), RTLD_NOW | RTLD_GLOBAL);
  }
  return h;
}

template <typename F> void sym(void *h, const char *name, F &f) {
  f = reinterpret_cast<F>(dlsym(h, name));
  if (!f) throw std::runtime_error(std::string("missing CUDA symbol ") + name);
}

// Loads once; a failure is remembered and re-thrown.
template <typename T, typename Init> const T &load_once(Init init) {
  static std::once_flag once;
  static T api;
  static std::string failure;
  std::call_once(once, [&] {
    try {
      init(api);
    } catch (const std::exception &e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw std::runtime_error(failure);
  return api;
}

const Driver &driver_api() {
  return load_once<Driver>([](Driver &api) {
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!drv) throw std::runtime_error(std::string("libcuda.so.1: ") + dlerror());
    sym(drv, "cuCtxGetCurrent", api.ctxGetCurrent);
    sym(drv, "cuCtxSetCurrent", api.ctxSetCurrent);
    sym(drv, "cuDevicePrimaryCtxRetain", api.primaryCtxRetain);
    sym(drv, "cuDeviceGet", api.deviceGet);
    sym(drv, "cuDeviceGetAttribute", api.deviceGetAttribute);
    sym(drv, "cuModuleLoadData", api.moduleLoadData);
    sym(drv, "cuModuleGetFunction", api.moduleGetFunction);
    sym(drv, "cuLaunchKernel", api.launchKernel);
    sym(drv, "cuGetErrorString", api.getErrorString);
    sym(drv, "cuStreamIsCapturing", api.streamIsCapturing);
  });
}

const Nvrtc &nvrtc_api() {
  return load_once<Nvrtc>([](Nvrtc &api) {
    void *rtc = open_nvrtc();
    sym(rtc, "nvrtcCreateProgram", api.createProgram);
    sym(rtc, "nvrtcCompileProgram", api.compileProgram);
    sym(rtc, "nvrtcGetProgramLogSize", api.getProgramLogSize);
    sym(rtc, "nvrtcGetProgramLog", api.getProgramLog);
    sym(rtc, "nvrtcGetCUBINSize", api.getCUBINSize);
    sym(rtc, "nvrtcGetCUBIN", api.getCUBIN);
    sym(rtc, "nvrtcDestroyProgram", api.destroyProgram);
  });
}

void cu_check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return;
  const char *s = nullptr;
  driver_api().getErrorString(r, &s);
  throw std::runtime_error(std::string(what) + ": " + (s ? s : "CUDA driver error"));
}

} // namespace

namespace shardkit {

KernelModule::KernelModule(std::string name, std::string source, std::vector<std::string> functions,
                           std::vector<std::string> defines)
    : name_(std::move(name)), source_(std::move(source)), functions_(std::move(functions)) {
  for (auto &d : defines) defines_.push_back("-D" + d);
}

size_t KernelModule::function_index(const std::string &name) const {
  auto it = std::find(functions_.begin(), functions_.end(), name);
  if (it == functions_.end()) throw std::runtime_error(name_ + " has no kernel " + name);
  return static_cast<size_t>(it - functions_.begin());
}

std::string KernelModule::compile(int major, int minor) const {
  const Nvrtc &api = nvrtc_api();
  std::string arch = "--gpu-architecture=sm_" + std::to_string(major) + std::to_string(minor);
  nvrtcProgram prog;
  if (api.createProgram(&prog, source_.c_str(), name_.c_str(), 0, nullptr, nullptr) != NVRTC_SUCCESS)
    throw std::runtime_error("nvrtcCreateProgram failed");
  std::vector<const char *> opts = {arch.c_str(), "--std=c++17", "-default-device"};
  for (auto &d : defines_) opts.push_back(d.c_str());
  nvrtcResult rc = api.compileProgram(prog, static_cast<int>(opts.size()), opts.data());
  size_t log_size = 0;
  api.getProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) api.getProgramLog(prog, log.data());
  if (rc != NVRTC_SUCCESS) {
    api.destroyProgram(&prog);
    throw std::runtime_error("NVRTC could not compile " + name_ + " for " + arch + ": " + log);
  }
  size_t n = 0;
  api.getCUBINSize(prog, &n);
  std::string cubin(n, '\0');
  api.getCUBIN(prog, cubin.data());
  api.destroyProgram(&prog);
  return cubin;
}

const LoadedModule &KernelModule::on(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = loaded_.find(device); it != loaded_.end()) return it->second;
  if (auto it = failed_.find(device); it != failed_.end()) throw std::runtime_error(it->second);
  try {
    const Driver &api = driver_api();
    LoadedModule k;
    k.module = this;
    k.device = device;
    CUdevice dev;
    cu_check(api.deviceGet(&dev, device), "cuDeviceGet");
    cu_check(api.primaryCtxRetain(&k.ctx, dev), "cuDevicePrimaryCtxRetain");
    cu_check(api.ctxSetCurrent(k.ctx), "cuCtxSetCurrent");
    int major = 0, minor = 0;
    cu_check(api.deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "compute capability");
    cu_check(api.deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "compute capability");
    std::string cubin = compile(major, minor);
    CUmodule module;
    cu_check(api.moduleLoadData(&module, cubin.data()), "cuModuleLoadData");
    k.functions.resize(functions_.size());
    for (size_t i = 0; i < functions_.size(); ++i)
      cu_check(api.moduleGetFunction(&k.functions[i], module, functions_[i].c_str()), "cuModuleGetFunction");
    return loaded_.emplace(device, std::move(k)).first->second;
  } catch (const std::exception &e) {
    failed_.emplace(device, e.what());
    throw;
  }
}

void LoadedModule::launch(size_t index, Grid grid, unsigned block, unsigned shared_bytes, void **args) const {
  const Driver &api = driver_api();
  CUcontext cur = nullptr;
  api.ctxGetCurrent(&cur);
  if (cur != ctx) cu_check(api.ctxSetCurrent(ctx), "cuCtxSetCurrent");
  auto stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  CUresult r = api.launchKernel(functions.at(index), grid.x, grid.y, grid.z, block, 1, 1, shared_bytes,
                                reinterpret_cast<CUstream>(stream), args, nullptr);
  // The message is built only for a failure: launches sit on the hot path.
  if (r != CUDA_SUCCESS) cu_check(r, ("launching " + module->function_name(index) + " of " + module->name()).c_str());
}

void LoadedModule::launch(const std::string &name, Grid grid, unsigned block, unsigned shared_bytes, void **args) const {
  launch(module->function_index(name), grid, block, shared_bytes, args);
}

}  // namespace shardkit

extern "C" {

void shk_free_message(char *m) { std::free(m); }

// Re-lays `t` out as channels_last in place (its storage changes, every alias sees it): what
// `module.to(memory_format=torch.channels_last)` does to 4-D parameters.
char *shk_channels_last_(at::Tensor *t) {
  return guarded([&] {
    if (t->dim() == 4) {
      t->set_data(t->contiguous(at::MemoryFormat::ChannelsLast));
    }
  });
}

// A channels_last copy of `t` (or `t` itself when already so laid out).
char *shk_channels_last(at::Tensor *t, at::Tensor **out) {
  return guarded([&] {
    *out = new at::Tensor(t->dim() == 4 ? t->contiguous(at::MemoryFormat::ChannelsLast) : *t);
  });
}

// Makes `g` the gradient of `p` (`p.grad = g`): backward then accumulates into g in place.
char *shk_set_grad(at::Tensor *p, at::Tensor *g) {
  return guarded([&] { p->mutable_grad() = *g; });
}

// torch.optim.SGD(fused=True)'s step (at::_fused_sgd_, dampening 0, not maximising) on one
// parameter tensor: weight decay, momentum (buf null: none; first_step: buf = the decayed
// gradient) and the update in one kernel. The learning rate comes from `lr_t` (a 0-dim float
// tensor on the parameter's device, read by the kernel: graph-safe) or, when null, `lr`. The
// gradient is left as it was.
char *shk_fused_sgd(at::Tensor *p, at::Tensor *g, at::Tensor *buf, double weight_decay, double momentum, at::Tensor *lr_t,
                    double lr, int nesterov, int first_step) {
  return guarded([&] {
    std::vector<at::Tensor> ps{*p}, gs{*g}, bs;
    if (buf) bs.push_back(*buf);
    if (lr_t)
      at::_fused_sgd_(ps, gs, bs, weight_decay, momentum, *lr_t, 0.0, nesterov != 0, false, first_step != 0);
    else
      at::_fused_sgd_(ps, gs, bs, weight_decay, momentum, lr, 0.0, nesterov != 0, false, first_step != 0);
  });
}

// torch.optim.AdamW(fused=True)'s step (at::_fused_adamw_, no amsgrad, not maximising) on one
// parameter with its moments `m`, `v` and step count `step` (a 0-dim float tensor on the
// parameter's device, already counting this step). Learning rate as in shk_fused_sgd.
char *shk_fused_adamw(at::Tensor *p, at::Tensor *g, at::Tensor *m, at::Tensor *v, at::Tensor *step, double beta1, double beta2,
                      double weight_decay, double eps, at::Tensor *lr_t, double lr) {
  return guarded([&] {
    std::vector<at::Tensor> ps{*p}, gs{*g}, ms{*m}, vs{*v}, steps{*step}, none;
    if (lr_t)
      at::_fused_adamw_(ps, gs, ms, vs, none, steps, *lr_t, beta1, beta2, weight_decay, eps, false, false);
    else
      at::_fused_adamw_(ps, gs, ms, vs, none, steps, lr, beta1, beta2, weight_decay, eps, false, false);
  });
}

int shk_is_channels_last(at::Tensor *t) {
  return t->dim() == 4 && t->is_contiguous(at::MemoryFormat::ChannelsLast);
}

// Enters (enabled = 1) or leaves (0) a CUDA autocast region with `dtype` (0 fp16, 1 bf16).
// Regions nest; leaving the outermost clears the cast cache (torch.autocast's __exit__).
char *shk_autocast_enter(int dtype) {
  return guarded([&] {
    at::autocast::set_autocast_dtype(at::kCUDA, dtype == 1 ? at::kBFloat16 : at::kHalf);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::increment_nesting();
  });
}

char *shk_autocast_exit(int was_enabled) {
  return guarded([&] {
    at::autocast::set_autocast_enabled(at::kCUDA, was_enabled != 0);
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  });
}

// torch.backends.cudnn.deterministic.
void shk_set_cudnn_deterministic(int on) { at::globalContext().setDeterministicCuDNN(on != 0); }

// torch.backends.{cudnn.conv,cudnn.rnn,cuda.matmul}.fp32_precision = "ieee": CUDA's fp32
// convolutions, RNNs and matmuls without TF32.
char* shk_cuda_fp32_strict() {
  return guarded([&] {
    auto& ctx = at::globalContext();
    for (auto op : {at::Float32Op::ALL, at::Float32Op::CONV, at::Float32Op::RNN,
                    at::Float32Op::MATMUL}) {
      ctx.setFloat32Precision(at::Float32Backend::CUDA, op, at::Float32Precision::IEEE);
    }
  });
}

// A random generator of its own for `device` (the CPU when negative): a copy of the device's
// default generator reseeded as torch.manual_seed(seed) reseeds that one, so its draws equal
// the default generator's after manual_seed(seed), without touching it.
char* shk_generator_new(int device, uint64_t seed, at::Generator** out) {
  return guarded([&] {
    auto d = device < 0 ? at::Device(at::kCPU)
                        : at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device));
    auto g = at::globalContext().defaultGenerator(d).clone();
    {
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_current_seed(seed);
    }
    *out = new at::Generator(std::move(g));
  });
}

void shk_generator_free(at::Generator* g) { delete g; }

// torch.randint(high, size, generator=g, dtype=int64, device=...) (what 0), torch.rand
// (what 1, float32) or torch.randn (what 2, float32) on `device` (the CPU when negative).
char* shk_generator_draw(at::Generator* g, int what, int64_t high, const int64_t* sizes, int ndim,
                         int device, at::Tensor** out) {
  return guarded([&] {
    auto size = at::IntArrayRef(sizes, static_cast<size_t>(ndim));
    auto d = device < 0 ? at::Device(at::kCPU)
                        : at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device));
    auto opts = at::TensorOptions().device(d);
    std::optional<at::Generator> gen = *g;
    at::Tensor t;
    switch (what) {
      case 0: t = at::randint(high, size, gen, opts.dtype(at::kLong)); break;
      case 1: t = at::rand(size, gen, opts.dtype(at::kFloat)); break;
      default: t = at::randn(size, gen, opts.dtype(at::kFloat)); break;
    }
    *out = new at::Tensor(std::move(t));
  });
}

// Whether CUDA's fp32 convolutions or matmuls may use TF32.
int shk_cuda_tf32_allowed() {
  auto& ctx = at::globalContext();
  return ctx.allowTF32CuDNN(at::Float32Op::CONV) || ctx.allowTF32CuBLAS() ? 1 : 0;
}

int shk_autocast_enabled() { return at::autocast::is_autocast_enabled(at::kCUDA) ? 1 : 0; }

void shk_autocast_set_cache_enabled(int on) { at::autocast::set_autocast_cache_enabled(on != 0); }

// The current CUDA stream of `device` (a cudaStream_t; NULL is the legacy default stream).
char *shk_current_stream(int device, void **out) {
  return guarded([&] { *out = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream(); });
}

// Makes a side stream of the pool current on `device`, after everything queued so far is done
// (warm-up before capture runs there, as torch.cuda.graph's does). shk_side_stream_end undoes it.
char *shk_side_stream_begin(int device, void **previous) {
  return guarded([&] {
    auto idx = static_cast<c10::DeviceIndex>(device);
    c10::cuda::device_synchronize();
    auto *prev = new c10::cuda::CUDAStream(c10::cuda::getCurrentCUDAStream(idx));
    c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool(false, idx));
    *previous = prev;
  });
}

char *shk_side_stream_end(void *previous) {
  auto *prev = static_cast<c10::cuda::CUDAStream *>(previous);
  char *err = guarded([&] {
    c10::cuda::device_synchronize();
    c10::cuda::setCurrentCUDAStream(*prev);
  });
  delete prev;
  return err;
}

// An uninitialised tensor of `dtype` (a c10::ScalarType) in pinned (page-locked) host memory,
// from libtorch's caching host allocator: what a copy to the GPU can read asynchronously.
char *shk_empty_pinned(const int64_t *sizes, int ndim, int dtype, at::Tensor **out) {
  return guarded([&] {
    auto opts = at::TensorOptions().dtype(static_cast<at::ScalarType>(dtype)).pinned_memory(true);
    *out = new at::Tensor(at::empty(at::IntArrayRef(sizes, static_cast<size_t>(ndim)), opts));
  });
}

// Whether `t` is the only handle on its data: no other tensor (a copy of the handle, a view,
// a tensor autograd saved) refers to its TensorImpl or its storage. Both counts only fall while
// it is the only one, so a `true` stays true until this handle is copied.
int shk_sole_owner(at::Tensor *t) {
  return t->use_count() == 1 && t->storage().use_count() == 1;
}

// Copies host tensor `src` (pinned, for the copy to be asynchronous) to CUDA `device` on a side
// stream of libtorch's pool and makes the current stream wait for it with an event: the copy
// overlaps the work queued before it on the current stream, and the host does not wait (the
// DataLoaderX pattern: `with torch.cuda.stream(side): x = x.cuda(non_blocking=True)`, then
// `current.wait_stream(side)` and `x.record_stream(current)`). The result's memory is recorded
// as used by the current stream, so the caching allocator does not hand it out again while the
// current stream may still read it; the pinned source is kept by the host allocator until the
// copy is done.
char *shk_to_device_on_side_stream(at::Tensor *src, int device, at::Tensor **out) {
  return guarded([&] {
    auto idx = static_cast<c10::DeviceIndex>(device);
    auto current = c10::cuda::getCurrentCUDAStream(idx);
    auto side = c10::cuda::getStreamFromPool(false, idx);
    at::Tensor dst;
    {
      // The side stream current for the copy (CUDAGuard.h's guard would link the CUDA runtime,
      // which this library loads at run time instead), the previous one back even on a throw.
      struct Restore {
        c10::cuda::CUDAStream previous;
        ~Restore() { c10::cuda::setCurrentCUDAStream(previous); }
      } restore{current};
      c10::cuda::setCurrentCUDAStream(side);
      dst = src->to(at::Device(at::kCUDA, idx), /*non_blocking=*/true);
    }
    c10::Event copied(c10::DeviceType::CUDA);
    copied.record(side.unwrap());
    copied.block(current.unwrap());
    c10::cuda::CUDACachingAllocator::recordStream(dst.storage().data_ptr(), current);
    *out = new at::Tensor(std::move(dst));
  });
}

// Returns the caching allocator's unused blocks to the driver (torch.cuda.empty_cache), those
// of private pools whose graphs are gone included.
char *shk_empty_cache() {
  return guarded([&] { c10::cuda::CUDACachingAllocator::emptyCache(); });
}

// Whether the current stream of `device` is capturing a CUDA graph (then nothing may wait for
// the device: a synchronisation would invalidate the capture).
char *shk_stream_capturing(int device, int *out) {
  return guarded([&] {
    auto stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cu_check(driver_api().streamIsCapturing(reinterpret_cast<CUstream>(stream), &status), "cuStreamIsCapturing");
    *out = status != CU_STREAM_CAPTURE_STATUS_NONE;
  });
}

void *shk_graph_new() { return new Graph(); }

void shk_graph_free(void *g) { delete static_cast<Graph *>(g); }

// Starts capturing on a fresh side stream of `device` (made current until capture ends). Work
// queued before is waited for first, and the caching allocator's unused blocks are returned to
// the driver (as torch.cuda.graph does): what the eager warm-up steps cached on their side
// stream cannot serve the capture's private pool, and would otherwise stay reserved beside it.
char *shk_graph_capture_begin(void *g, int device) {
  auto *graph = static_cast<Graph *>(g);
  char *err = guarded([&] {
    auto idx = static_cast<c10::DeviceIndex>(device);
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    graph->previous = c10::cuda::getCurrentCUDAStream(idx);
    graph->capture_stream = c10::cuda::getStreamFromPool(false, idx);
    c10::cuda::setCurrentCUDAStream(*graph->capture_stream);
    graph->graph = std::make_unique<at::cuda::CUDAGraph>();
    graph->graph->capture_begin();
  });
  if (err && graph->previous) {
    c10::cuda::setCurrentCUDAStream(*graph->previous);
    graph->previous.reset();
  }
  return err;
}

// Ends the capture (also after a failed step: the stream is restored either way).
char *shk_graph_capture_end(void *g) {
  auto *graph = static_cast<Graph *>(g);
  char *err = guarded([&] { graph->graph->capture_end(); });
  if (graph->previous) {
    c10::cuda::setCurrentCUDAStream(*graph->previous);
    graph->previous.reset();
  }
  if (!err) err = guarded([] { c10::cuda::device_synchronize(); });
  return err;
}

// The differentiable SUM all-reduce of `x` through `reduce` (see AllReduceSum). Takes ownership
// of `state`: `drop(state)` runs exactly once, when the last graph node holding it goes (at
// once if this fails).
char *shk_all_reduce_sum_autograd(at::Tensor *x, shk_reduce_fn reduce, shk_drop_fn drop, void *state, at::Tensor **out) {
  c10::intrusive_ptr<Reducer> r;
  try {
    r = c10::make_intrusive<Reducer>(reduce, drop, state);
  } catch (...) {
    drop(state);
    return dup("out of memory");
  }
  return guarded([&] { *out = new at::Tensor(AllReduceSum::apply(*x, std::move(r))); });
}

// torch.nn.functional.leaky_relu(x, slope) (tch binds only the default slope 0.01).
char *shk_leaky_relu(at::Tensor *x, double slope, at::Tensor **out) {
  return guarded([&] { *out = new at::Tensor(at::leaky_relu(*x, slope)); });
}

// Compiles CUDA C++ `source` (named `name` in messages) with NVRTC for compute capability
// major.minor (no GPU needed) and gives the cubin's size.
char *shk_nvrtc_compile(const char *name, const char *source, int major, int minor, size_t *bytes) {
  return guarded([&] { *bytes = shardkit::KernelModule(name, source, {}).compile(major, minor).size(); });
}

// Launches the captured work on the current stream.
char *shk_graph_replay(void *g) {
  return guarded([&] { static_cast<Graph *>(g)->graph->replay(); });
}

} // extern "C"
