// The few libtorch C++ calls tch 0.24 does not bind. Every function catches C++ exceptions and
// returns them as a malloc'd message (NULL on success): nothing unwinds into Rust.
// Tensors cross as tch's `C_tensor*`, which is an `at::Tensor*`.
//
// Only headers that compile without a CUDA toolkit are used (the wheel's nvidia/cu13 headers
// lack CCCL's nv/target, which cuda_fp16.h needs: ATen/cuda/CUDAContext.h is out).
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdlib>
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

void *shk_graph_new() { return new Graph(); }

void shk_graph_free(void *g) { delete static_cast<Graph *>(g); }

// Starts capturing on a fresh side stream of `device` (made current until capture ends). Work
// queued before is waited for first.
char *shk_graph_capture_begin(void *g, int device) {
  auto *graph = static_cast<Graph *>(g);
  char *err = guarded([&] {
    auto idx = static_cast<c10::DeviceIndex>(device);
    c10::cuda::device_synchronize();
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

// Launches the captured work on the current stream.
char *shk_graph_replay(void *g) {
  return guarded([&] { static_cast<Graph *>(g)->graph->replay(); });
}

} // extern "C"
