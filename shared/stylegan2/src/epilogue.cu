// The kernels of StyleGAN2's fused modulated-convolution epilogue (epilogue.cpp launches them,
// by name; gpu-runtime's KernelModule compiles this file with NVRTC on first use). Embedded in
// the library at build time (build.rs).
//   fwd_T: y = clamp(leaky_relu(x * d[b,c] * g + noise[b,p] * strength * g + bias[c] * g), +-clamp)
//   bwd_T: dx, dd and dnoise in one pass over the map
// for T = f32, f16, bf16 (16-bit types as raw bits: NVRTC has no cuda_fp16.h without a toolkit).
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
// shuffles, shared atomics, one global atomic per block and channel). PPT, the pixels per
// thread, is the host's kPixelsPerThread, passed by the module as -DPPT.
#ifndef PPT
#error "PPT (pixels per thread in the backward pass) is passed by epilogue.cpp"
#endif
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
