// The few libtorch C++ calls tch 0.24 does not bind. Every function catches C++ exceptions and
// returns them as a malloc'd message (NULL on success): nothing unwinds into Rust.
// Tensors cross as tch's `C_tensor*`, which is an `at::Tensor*`.
//
// Only headers that compile without a CUDA toolkit are used (the wheel's nvidia/cu13 headers
// lack CCCL's nv/target, which cuda_fp16.h needs: ATen/cuda/CUDAContext.h is out).
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cuda.h>
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
char *dup(const char *s) {
  size_t n = std::strlen(s) + 1;
  char *p = static_cast<char *>(std::malloc(n));
  if (p) std::memcpy(p, s, n);
  return p;
}

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

// ---------------------------------------------------------------------------------------------
// StyleGAN2's modulated-convolution epilogue as one CUDA kernel each way (NVRTC at run time:
// the wheels have no nvcc, but they ship libnvrtc, and the driver is there wherever CUDA is):
//   z = x * d[b,c] * g + noise[b,p] * strength * g + bias[c] * g
//   y = clamp(leaky_relu(z, 0.2), -clamp, clamp)
// which is upstream's `addcmul(noise, x, dcoefs)` + `bias_act(lrelu, gain, clamp)` with the
// gain folded in (leaky ReLU is positively homogeneous). x is the convolution output (NCHW,
// contiguous; f32, f16 or bf16), d [B,C], noise [B,HW] or [HW] (batch stride 0), strength a
// 0-dim tensor, bias [C], all f32. Backward gives dx, dd and dnoise in one pass over the map.
const char *kEpilogueSource = R"CUDA(
struct h16 { unsigned short v; };
struct b16 { unsigned short v; };
__device__ __forceinline__ float tof(float x) { return x; }
__device__ __forceinline__ float tof(h16 x) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.v)); return f; }
__device__ __forceinline__ float tof(b16 x) { return __uint_as_float(((unsigned)x.v) << 16); }
__device__ __forceinline__ void st(float *p, float f) { *p = f; }
__device__ __forceinline__ void st(h16 *p, float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); p->v = h; }
__device__ __forceinline__ void st(b16 *p, float f) {
  unsigned u = __float_as_uint(f);
  p->v = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)0x7fc0 : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <typename T>
__device__ void fwd(const T *x, T *y, const float *d, const float *noise, long long nbs, const float *strength,
                    const float *bias, float g, float clamp, int B, int C, long long HW) {
  float sg = noise ? strength[0] * g : 0.f;
  for (long long bc = blockIdx.y; bc < (long long)B * C; bc += gridDim.y) {
    int c = (int)(bc % C), b = (int)(bc / C);
    float dg = d[bc] * g, bg = bias[c] * g;
    const T *xr = x + bc * HW;
    T *yr = y + bc * HW;
    const float *nr = noise ? noise + b * nbs : 0;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < HW; p += (long long)gridDim.x * blockDim.x) {
      float z = tof(xr[p]) * dg + bg;
      if (nr) z += nr[p] * sg;
      float a = z > 0.f ? z : 0.2f * z;
      st(&yr[p], fminf(fmaxf(a, -clamp), clamp));
    }
  }
}

// Block (tile of PPT*blockDim pixels, image b, channel chunk): per pixel the sum over its
// channels (dnoise, atomically across chunks), per channel the sum over its pixels (dd: warp
// shuffles, shared atomics, one global atomic per block and channel).
#define PPT 4
template <typename T>
__device__ void bwd(const T *gy, const T *x, T *gx, float *gd, float *gn, const float *d, const float *noise,
                    long long nbs, const float *strength, const float *bias, float g, float clamp, int C, int chunk,
                    long long HW) {
  extern __shared__ float acc[];
  int b = blockIdx.y;
  int c0 = blockIdx.z * chunk, c1 = c0 + chunk < C ? c0 + chunk : C;
  for (int c = c0 + threadIdx.x; c < c1; c += blockDim.x) acc[c - c0] = 0.f;
  __syncthreads();
  float sg = noise ? strength[0] * g : 0.f;
  long long p0 = (long long)blockIdx.x * blockDim.x * PPT + threadIdx.x;
  float nz[PPT], gacc[PPT];
#pragma unroll
  for (int k = 0; k < PPT; ++k) {
    long long p = p0 + (long long)k * blockDim.x;
    nz[k] = (noise && p < HW) ? noise[b * nbs + p] * sg : 0.f;
    gacc[k] = 0.f;
  }
  for (int c = c0; c < c1; ++c) {
    long long bc = (long long)b * C + c;
    float dg = d[bc] * g, bg = bias[c] * g;
    float part = 0.f;
#pragma unroll
    for (int k = 0; k < PPT; ++k) {
      long long p = p0 + (long long)k * blockDim.x;
      if (p < HW) {
        long long i = bc * HW + p;
        float xv = tof(x[i]);
        float z = xv * dg + nz[k] + bg;
        float a = z > 0.f ? z : 0.2f * z;
        float gz = (a >= -clamp && a <= clamp) ? tof(gy[i]) : 0.f;
        gz = z > 0.f ? gz : 0.2f * gz;
        st(&gx[i], gz * dg);
        part += gz * xv;
        gacc[k] += gz;
      }
    }
    for (int o = 16; o > 0; o >>= 1) part += __shfl_down_sync(0xffffffffu, part, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(&acc[c - c0], part);
  }
  __syncthreads();
  for (int c = c0 + threadIdx.x; c < c1; c += blockDim.x) atomicAdd(&gd[(long long)b * C + c], acc[c - c0] * g);
  if (gn) {
#pragma unroll
    for (int k = 0; k < PPT; ++k) {
      long long p = p0 + (long long)k * blockDim.x;
      if (p < HW) atomicAdd(&gn[b * HW + p], gacc[k] * sg);
    }
  }
}

#define DEFINE(NAME, T)                                                                                       \
  extern "C" __global__ void fwd_##NAME(const T *x, T *y, const float *d, const float *noise, long long nbs,  \
                                        const float *strength, const float *bias, float g, float clamp, int B, \
                                        int C, long long HW) {                                               \
    fwd<T>(x, y, d, noise, nbs, strength, bias, g, clamp, B, C, HW);                                         \
  }                                                                                                           \
  extern "C" __global__ void bwd_##NAME(const T *gy, const T *x, T *gx, float *gd, float *gn, const float *d, \
                                        const float *noise, long long nbs, const float *strength,             \
                                        const float *bias, float g, float clamp, int C, int chunk,            \
                                        long long HW) {                                                       \
    bwd<T>(gy, x, gx, gd, gn, d, noise, nbs, strength, bias, g, clamp, C, chunk, HW);                         \
  }
DEFINE(f32, float)
DEFINE(f16, h16)
DEFINE(bf16, b16)
)CUDA";

// The driver and NVRTC entry points, loaded with dlopen (no link-time CUDA dependency: the
// shim runs on machines without a driver; this code is reached only for CUDA tensors, and
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

// The epilogue kernels as a cubin for compute capability major.minor.
std::string compile_epilogue(int major, int minor) {
  const Nvrtc &api = nvrtc_api();
  std::string arch = "--gpu-architecture=sm_" + std::to_string(major) + std::to_string(minor);
  nvrtcProgram prog;
  if (api.createProgram(&prog, kEpilogueSource, "shardkit_epilogue.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
    throw std::runtime_error("nvrtcCreateProgram failed");
  const char *opts[] = {arch.c_str(), "--std=c++17", "-default-device"};
  nvrtcResult rc = api.compileProgram(prog, 3, opts);
  size_t log_size = 0;
  api.getProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) api.getProgramLog(prog, log.data());
  if (rc != NVRTC_SUCCESS) {
    api.destroyProgram(&prog);
    throw std::runtime_error("NVRTC could not compile the modconv epilogue for " + arch + ": " + log);
  }
  size_t n = 0;
  api.getCUBINSize(prog, &n);
  std::string cubin(n, '\0');
  api.getCUBIN(prog, cubin.data());
  api.destroyProgram(&prog);
  return cubin;
}

void cu_check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return;
  const char *s = nullptr;
  driver_api().getErrorString(r, &s);
  throw std::runtime_error(std::string(what) + ": " + (s ? s : "CUDA driver error"));
}

// The epilogue kernels, compiled once per device for its architecture.
struct EpilogueKernels {
  CUcontext ctx = nullptr;
  CUfunction fwd[3] = {}, bwd[3] = {};  // f32, f16, bf16
};

const EpilogueKernels &epilogue_kernels(int device) {
  static std::mutex mu;
  static std::map<int, EpilogueKernels> cache;
  static std::map<int, std::string> failed;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(device); it != cache.end()) return it->second;
  if (auto it = failed.find(device); it != failed.end()) throw std::runtime_error(it->second);
  try {
    const Driver &api = driver_api();
    EpilogueKernels k;
    CUdevice dev;
    cu_check(api.deviceGet(&dev, device), "cuDeviceGet");
    cu_check(api.primaryCtxRetain(&k.ctx, dev), "cuDevicePrimaryCtxRetain");
    cu_check(api.ctxSetCurrent(k.ctx), "cuCtxSetCurrent");
    int major = 0, minor = 0;
    cu_check(api.deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "compute capability");
    cu_check(api.deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "compute capability");
    std::string cubin = compile_epilogue(major, minor);
    CUmodule module;
    cu_check(api.moduleLoadData(&module, cubin.data()), "cuModuleLoadData");
    const char *names[3] = {"f32", "f16", "bf16"};
    for (int i = 0; i < 3; ++i) {
      cu_check(api.moduleGetFunction(&k.fwd[i], module, (std::string("fwd_") + names[i]).c_str()), "cuModuleGetFunction");
      cu_check(api.moduleGetFunction(&k.bwd[i], module, (std::string("bwd_") + names[i]).c_str()), "cuModuleGetFunction");
    }
    return cache.emplace(device, k).first->second;
  } catch (const std::exception &e) {
    failed.emplace(device, e.what());
    throw;
  }
}

int dtype_index(const at::Tensor &x) {
  switch (x.scalar_type()) {
    case at::kFloat: return 0;
    case at::kHalf: return 1;
    case at::kBFloat16: return 2;
    default: throw std::runtime_error("modconv epilogue: x must be float32, float16 or bfloat16");
  }
}

void launch(const EpilogueKernels &k, CUfunction f, dim3 grid, unsigned block, unsigned shared, int device, void **args) {
  const Driver &api = driver_api();
  CUcontext cur = nullptr;
  api.ctxGetCurrent(&cur);
  if (cur != k.ctx) cu_check(api.ctxSetCurrent(k.ctx), "cuCtxSetCurrent");
  auto stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  cu_check(api.launchKernel(f, grid.x, grid.y, grid.z, block, 1, 1, shared, reinterpret_cast<CUstream>(stream), args, nullptr),
           "launching the modconv epilogue");
}

// Makes `device` current for a scope (c10's CUDAGuard is inline code calling cudart, which the
// shim does not link; these calls live in libc10_cuda).
struct DeviceScope {
  c10::DeviceIndex previous;
  explicit DeviceScope(int device) : previous(c10::cuda::ExchangeDevice(static_cast<c10::DeviceIndex>(device))) {}
  ~DeviceScope() { c10::cuda::MaybeSetDevice(previous); }
};

struct Noise {
  at::Tensor t;           // f32, contiguous, [B*HW] or [HW]
  long long batch_stride;  // HW or 0
};

// An empty noise tensor means no noise (autograd's apply wants every input defined).
Noise noise_view(const at::Tensor &noise, int64_t B, int64_t HW) {
  if (noise.numel() == 0) return {at::Tensor(), 0};
  TORCH_CHECK(noise.scalar_type() == at::kFloat && noise.is_contiguous(), "modconv epilogue: noise must be contiguous float32");
  if (noise.numel() == B * HW) return {noise, HW};
  TORCH_CHECK(noise.numel() == HW, "modconv epilogue: noise must have B*H*W or H*W elements");
  return {noise, 0};
}

struct ModconvEpilogue : torch::autograd::Function<ModconvEpilogue> {
  static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &x_in, const at::Tensor &d,
                            const at::Tensor &noise, const at::Tensor &strength, const at::Tensor &bias, double g,
                            double clamp) {
    TORCH_CHECK(x_in.is_cuda() && x_in.dim() == 4, "modconv epilogue: x must be a 4-D CUDA tensor");
    auto x = x_in.contiguous();
    int64_t B = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
    TORCH_CHECK(d.scalar_type() == at::kFloat && d.is_contiguous() && d.numel() == B * C, "modconv epilogue: d must be [B,C] float32");
    TORCH_CHECK(bias.scalar_type() == at::kFloat && bias.is_contiguous() && bias.numel() == C, "modconv epilogue: bias must be [C] float32");
    TORCH_CHECK(strength.scalar_type() == at::kFloat && strength.numel() == 1, "modconv epilogue: strength must be a float32 scalar");
    TORCH_CHECK(B * C <= INT32_MAX, "modconv epilogue: too many channels");
    Noise nv = noise_view(noise, B, HW);
    int device = x.get_device();
    DeviceScope scope(device);
    const auto &k = epilogue_kernels(device);
    auto y = at::empty_like(x);
    const void *xp = x.data_ptr(), *dp = d.data_ptr(), *sp = strength.data_ptr(), *bp = bias.data_ptr();
    const void *np = nv.t.defined() ? nv.t.data_ptr() : nullptr;
    void *yp = y.data_ptr();
    long long nbs = nv.batch_stride, hw = HW;
    float gf = static_cast<float>(g), cf = static_cast<float>(clamp);
    int bi = static_cast<int>(B), ci = static_cast<int>(C);
    void *args[] = {&xp, &yp, &dp, &np, &nbs, &sp, &bp, &gf, &cf, &bi, &ci, &hw};
    unsigned gx = static_cast<unsigned>(std::min<int64_t>((HW + 255) / 256, 1024));
    unsigned gy = static_cast<unsigned>(std::min<int64_t>(B * C, 65535));
    if (B * C * HW > 0) launch(k, k.fwd[dtype_index(x)], dim3(gx, gy, 1), 256, 0, device, args);
    ctx->save_for_backward({x, d, noise, strength, bias});
    ctx->saved_data["g"] = g;
    ctx->saved_data["clamp"] = clamp;
    ctx->saved_data["noise_sizes"] = noise.sizes().vec();
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx, torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto x = saved[0], d = saved[1], noise = saved[2], strength = saved[3], bias = saved[4];
    double g = ctx->saved_data["g"].toDouble(), clamp = ctx->saved_data["clamp"].toDouble();
    auto gy = grads[0].contiguous();
    int64_t B = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
    int device = x.get_device();
    DeviceScope scope(device);
    const auto &k = epilogue_kernels(device);
    auto gx = at::empty_like(x);
    auto gd = at::zeros({B, C}, x.options().dtype(at::kFloat));
    Noise nv = noise_view(noise, B, HW);
    bool want_noise = nv.t.defined() && ctx->needs_input_grad(2);
    at::Tensor gn;
    if (want_noise) gn = at::zeros({B, HW}, x.options().dtype(at::kFloat));
    long long nbs = nv.batch_stride, hw = HW;
    const void *gyp = gy.data_ptr(), *xp = x.data_ptr(), *dp = d.data_ptr(), *sp = strength.data_ptr(), *bp = bias.data_ptr();
    const void *np = nv.t.defined() ? nv.t.data_ptr() : nullptr;
    void *gxp = gx.data_ptr(), *gdp = gd.data_ptr(), *gnp = want_noise ? gn.data_ptr() : nullptr;
    float gf = static_cast<float>(g), cf = static_cast<float>(clamp);
    const int threads = 256, ppt = 4;
    int64_t tiles = (HW + threads * ppt - 1) / (threads * ppt);
    // Enough blocks to fill the GPU: split the channels when tiles x images are few.
    int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(C, 1024 / std::max<int64_t>(1, tiles * B)));
    int chunk = static_cast<int>((C + chunks - 1) / chunks);
    chunks = (C + chunk - 1) / chunk;
    int ci = static_cast<int>(C);
    void *args[] = {&gyp, &xp, &gxp, &gdp, &gnp, &dp, &np, &nbs, &sp, &bp, &gf, &cf, &ci, &chunk, &hw};
    TORCH_CHECK(tiles <= INT32_MAX && B <= 65535 && chunks <= 65535, "modconv epilogue: map too large");
    if (B * C * HW > 0)
      launch(k, k.bwd[dtype_index(x)], dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(B), static_cast<unsigned>(chunks)), threads,
             static_cast<unsigned>(chunk * sizeof(float)), device, args);
    at::Tensor gnoise;
    if (want_noise) {
      auto sizes = ctx->saved_data["noise_sizes"].toIntVector();
      gnoise = nbs == 0 ? gn.sum(0).reshape(sizes) : gn.reshape(sizes);
    }
    return {gx, gd.reshape(d.sizes()), gnoise, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
} // namespace

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

// The fused modulated-convolution epilogue (ModconvEpilogue above); `noise` may be NULL.
// CUDA only: compiles its kernels on first use (an error says why when it cannot).
char *shk_modconv_epilogue(at::Tensor *x, at::Tensor *d, at::Tensor *noise, at::Tensor *strength, at::Tensor *bias,
                           double gain, double clamp, at::Tensor **out) {
  return guarded([&] {
    at::Tensor n = noise ? *noise : at::empty({0}, x->options().dtype(at::kFloat));
    *out = new at::Tensor(ModconvEpilogue::apply(*x, *d, n, *strength, *bias, gain, clamp));
  });
}

// Compiles the epilogue kernels for compute capability major.minor with NVRTC (no GPU needed)
// and gives the cubin's size: the check that the kernel source builds.
char *shk_modconv_epilogue_compile(int major, int minor, size_t *bytes) {
  return guarded([&] { *bytes = compile_epilogue(major, minor).size(); });
}

// Compiles the epilogue kernels for `device` now (NULL when they are ready).
char *shk_modconv_epilogue_ready(int device) {
  return guarded([&] { epilogue_kernels(device); });
}

// Launches the captured work on the current stream.
char *shk_graph_replay(void *g) {
  return guarded([&] { static_cast<Graph *>(g)->graph->replay(); });
}

} // extern "C"
