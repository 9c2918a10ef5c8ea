// TorchScript modules (a file written by torch.jit.save) for training: loaded onto a device,
// their parameters and buffers by their state_dict names (tch 0.24 lists parameters only, under
// mangled names), and forward in training or evaluation mode. Every function catches C++
// exceptions and returns them as a malloc'd message (NULL on success), as runtime.cpp does.
#include <torch/script.h>

#include <shardkit/runtime.h>

#include <istream>
#include <streambuf>
#include <string>

namespace {
using shardkit::guarded;

struct Script {
  torch::jit::Module module;
};

typedef void (*shk_named_fn)(void *state, const char *name, at::Tensor *t);

// Bytes in memory as a read-only stream that seeks (torch::jit::load reads a zip archive: it
// seeks to the central directory at the end first).
struct Bytes : std::streambuf {
  Bytes(const char *data, size_t len) {
    char *p = const_cast<char *>(data);  // read only: no put area is set
    setg(p, p, p + len);
  }
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode) override {
    off_type base = dir == std::ios_base::beg ? 0 : dir == std::ios_base::cur ? gptr() - eback() : egptr() - eback();
    return seekpos(pos_type(base + off), std::ios_base::in);
  }
  pos_type seekpos(pos_type pos, std::ios_base::openmode) override {
    if (pos < 0 || pos > egptr() - eback()) return pos_type(off_type(-1));
    setg(eback(), eback() + static_cast<off_type>(pos), egptr());
    return pos;
  }
};
}  // namespace

extern "C" {

// Loads the module held in `len` bytes at `data` (a file read once, by the caller, who hashes
// what it read: what is loaded is what is named) with its tensors on `device` (type 0 CPU,
// 1 CUDA; `index`). The bytes are read in place, not copied.
char *shk_script_load_bytes(const char *data, size_t len, int device_type, int index, Script **out) {
  return guarded([&] {
    c10::Device device = device_type == 1 ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index))
                                          : c10::Device(c10::kCPU);
    Bytes buf(data, len);
    std::istream in(&buf);
    auto module = torch::jit::load(in, device);
    *out = new Script{std::move(module)};
  });
}

void shk_script_free(Script *s) { delete s; }

// Calls `add` with each parameter (buffers == 0) or buffer (buffers != 0) of the module and its
// submodules, by their state_dict names, in registration order (as `parameters()` lists them).
// Each tensor handed over is a new handle to the module's own tensor (the callee owns it).
char *shk_script_named(Script *s, int buffers, void *state, shk_named_fn add) {
  return guarded([&] {
    if (buffers) {
      for (const auto &b : s->module.named_buffers(true)) add(state, b.name.c_str(), new at::Tensor(b.value));
    } else {
      for (const auto &p : s->module.named_parameters(true)) add(state, p.name.c_str(), new at::Tensor(p.value));
    }
  });
}

// `model.train(train)` when the mode differs, then `model(x)`; the output must be a tensor.
char *shk_script_forward(Script *s, at::Tensor *x, int train, at::Tensor **out) {
  return guarded([&] {
    if (s->module.is_training() != (train != 0)) s->module.train(train != 0);
    auto r = s->module.forward({*x});
    if (!r.isTensor()) throw std::runtime_error("its forward returned a " + r.tagKind() + ", not a tensor");
    *out = new at::Tensor(r.toTensor());
  });
}

}  // extern "C"
