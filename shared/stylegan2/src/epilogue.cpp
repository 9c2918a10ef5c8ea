// StyleGAN2's modulated-convolution epilogue as one CUDA kernel each way, compiled at run time
// by gpu-runtime's NVRTC module (the wheels have no nvcc, but they ship libnvrtc, and the
// driver is there wherever CUDA is):
//   z = x * d[b,c] * g + noise[b,p] * strength * g + bias[c] * g
//   y = clamp(leaky_relu(z, 0.2), -clamp, clamp)
// which is upstream's `addcmul(noise, x, dcoefs)` + `bias_act(lrelu, gain, clamp)` with the
// gain folded in (leaky ReLU is positively homogeneous). x is the convolution output (NCHW,
// contiguous; f32, f16 or bf16), d [B,C], noise [B,HW] or [HW] (batch stride 0), strength a
// 0-dim tensor, bias [C], all f32. Backward gives dx, dd and dnoise in one pass over the map.
// Bound in src/epilogue.rs; every entry point returns shardkit::guarded's message.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <shardkit/runtime.h>

#include <algorithm>
#include <string>

namespace {
// src/epilogue.cu, as build.rs embeds it (kEpilogueSource).
#include "epilogue_cu.inc"

// Pixels per thread of the backward kernel: its grid is sized with it here, and the kernel gets
// it as -DPPT.
constexpr int kPixelsPerThread = 4;

// The kernels of epilogue.cu: forward and backward for f32, f16, bf16.
shardkit::KernelModule &epilogue_module() {
  static shardkit::KernelModule module("epilogue.cu", kEpilogueSource,
                                       {"fwd_f32", "fwd_f16", "fwd_bf16", "bwd_f32", "bwd_f16", "bwd_bf16"},
                                       {"PPT=" + std::to_string(kPixelsPerThread)});
  return module;
}

// The kernels' name suffix for x's type.
const char *dtype_suffix(const at::Tensor &x) {
  switch (x.scalar_type()) {
    case at::kFloat: return "f32";
    case at::kHalf: return "f16";
    case at::kBFloat16: return "bf16";
    default: throw std::runtime_error("modconv epilogue: x must be float32, float16 or bfloat16");
  }
}

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
    shardkit::DeviceScope scope(device);
    const auto &k = epilogue_module().on(device);
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
    if (B * C * HW > 0) k.launch(std::string("fwd_") + dtype_suffix(x), {gx, gy, 1}, 256, 0, args);
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
    shardkit::DeviceScope scope(device);
    const auto &k = epilogue_module().on(device);
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
    const int threads = 256, ppt = kPixelsPerThread;
    int64_t tiles = (HW + threads * ppt - 1) / (threads * ppt);
    // Enough blocks to fill the GPU: split the channels when tiles x images are few.
    int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(C, 1024 / std::max<int64_t>(1, tiles * B)));
    int chunk = static_cast<int>((C + chunks - 1) / chunks);
    chunks = (C + chunk - 1) / chunk;
    int ci = static_cast<int>(C);
    void *args[] = {&gyp, &xp, &gxp, &gdp, &gnp, &dp, &np, &nbs, &sp, &bp, &gf, &cf, &ci, &chunk, &hw};
    TORCH_CHECK(tiles <= INT32_MAX && B <= 65535 && chunks <= 65535, "modconv epilogue: map too large");
    if (B * C * HW > 0)
      k.launch(std::string("bwd_") + dtype_suffix(x), {static_cast<unsigned>(tiles), static_cast<unsigned>(B), static_cast<unsigned>(chunks)}, threads,
               static_cast<unsigned>(chunk * sizeof(float)), args);
    at::Tensor gnoise;
    if (want_noise) {
      auto sizes = ctx->saved_data["noise_sizes"].toIntVector();
      gnoise = nbs == 0 ? gn.sum(0).reshape(sizes) : gn.reshape(sizes);
    }
    return {gx, gd.reshape(d.sizes()), gnoise, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

extern "C" {

// The fused modulated-convolution epilogue (ModconvEpilogue above); `noise` may be NULL.
// CUDA only: compiles its kernels on first use (an error says why when it cannot).
char *shk_modconv_epilogue(at::Tensor *x, at::Tensor *d, at::Tensor *noise, at::Tensor *strength, at::Tensor *bias,
                           double gain, double clamp, at::Tensor **out) {
  return shardkit::guarded([&] {
    at::Tensor n = noise ? *noise : at::empty({0}, x->options().dtype(at::kFloat));
    *out = new at::Tensor(ModconvEpilogue::apply(*x, *d, n, *strength, *bias, gain, clamp));
  });
}

// Compiles the epilogue kernels for compute capability major.minor with NVRTC (no GPU needed)
// and gives the cubin's size: the check that the kernel source builds.
char *shk_modconv_epilogue_compile(int major, int minor, size_t *bytes) {
  return shardkit::guarded([&] { *bytes = epilogue_module().compile(major, minor).size(); });
}

// Compiles the epilogue kernels for `device` now (NULL when they are ready).
char *shk_modconv_epilogue_ready(int device) {
  return shardkit::guarded([&] { epilogue_module().on(device); });
}
} // extern "C"
