#!/usr/bin/env python3
"""Where a projection step's time goes, and what each reformulation of it buys (issue 4).

One projection step of shared/projector (paper `stylegan2` generator with random weights, fp16
blocks as upstream, unfused modulated convolutions at batch > 1, a VGG16 with random weights,
LPIPS distance, noise regulariser, Adam over w and the noise buffers, noise renormalisation),
written in PyTorch with the same sequence of tensor operations as the Rust crates, then
variants of it, each timed over a few steps after warm-up:

  ref      the op sequence of shared/stylegan2 + shared/projector as they were
  act      bias_act as addcmul with the gain folded into dcoefs/noise/bias (lrelu is positively
           homogeneous), one leaky_relu and one clamp (was: add, gt, mul, where, mul, clamp)
  cl       channels_last activations and weights in the generator and the VGG
  fir=sep  the 4x4 FIR of the up-sampling convolution as two 1-D depthwise passes
  fir=merged  the FIR folded into the transposed convolution's weights (6x6, stride 2)
  vgg16    the VGG in fp16 (bf16 likewise with vgg=bf16)
  graph    the step's forward + backward captured as a CUDA graph (optimiser eager)

  project_variants.py RES BATCH [--steps N] [--profile] [--variants a,b,...] [--check]

--check runs on the CPU at 32x32 in fp32 and compares each variant's loss and gradients with
ref (the reformulations are exact up to rounding). Prints one JSON line per variant.
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F

SQRT2 = math.sqrt(2.0)


def channels(res):
    return min(32768 // res, 512)


def make_g(res, dev, num_fp16_res=4):
    gen = torch.Generator().manual_seed(0)
    rn = lambda *s: torch.randn(*s, generator=gen)
    f = torch.tensor([1.0, 3.0, 3.0, 1.0])
    f = torch.outer(f, f)
    f = f / f.sum()
    blocks = []
    log2 = int(math.log2(res))
    fp16_res = max(2 ** (log2 + 1 - num_fp16_res), 8)
    for i in range(2, log2 + 1):
        r = 2 ** i
        cin, cout = (channels(r // 2) if r > 4 else 0), channels(r)

        def layer(ci, co, up):
            return dict(aw=rn(ci, 512), ab=torch.ones(ci), weight=rn(co, ci, 3, 3), strength=torch.tensor(0.1),
                        bias=rn(co) * 0.1, res=r, up=up)

        b = dict(res=r, fp16=r >= fp16_res, f=f)
        if r == 4:
            b["const"] = rn(cout, 4, 4)
        else:
            b["conv0"] = layer(cin, cout, 2)
        b["conv1"] = layer(cout, cout, 1)
        b["torgb"] = dict(aw=rn(cout, 512), ab=torch.ones(cout), weight=rn(3, cout, 1, 1), bias=torch.zeros(3))
        blocks.append(b)

    def to(d):
        return {k: (v.to(dev) if torch.is_tensor(v) else v) for k, v in d.items()}

    out = []
    for b in blocks:
        b = to(b)
        for k in ("conv0", "conv1", "torgb"):
            if k in b:
                b[k] = to(b[k])
        out.append(b)
    return out


def fc(w, a):
    return torch.addmm(a["ab"].unsqueeze(0), w, (a["aw"] * (1 / math.sqrt(a["aw"].shape[1]))).t())


def fir_weight(f, c, dtype, gain):
    f = (f * gain).to(dtype).flip([0, 1])
    return f[None, None].repeat(c, 1, 1, 1)


def upfirdn_pad_conv(x, f, pad, gain):
    # upfirdn2d with up=1 (the reference): pad (crop negative) then depthwise 4x4.
    px0, px1, py0, py1 = pad
    x = F.pad(x, [max(px0, 0), max(px1, 0), max(py0, 0), max(py1, 0)])
    x = x[:, :, max(-py0, 0): x.shape[2] - max(-py1, 0), max(-px0, 0): x.shape[3] - max(-px1, 0)]
    return F.conv2d(x, fir_weight(f, x.shape[1], x.dtype, gain), groups=x.shape[1])


def upsample2d_ref(x, f):
    b, c, h, w = x.shape
    x = x.reshape(b, c, h, 1, w, 1)
    x = F.pad(x, [0, 1, 0, 0, 0, 1]).reshape(b, c, h * 2, w * 2)
    return upfirdn_pad_conv(x, f, [2, 1, 2, 1], 4.0)


def conv_up(x, weight, f, V):
    """conv2d_resample(up=2, padding=1, flip_weight=False) for a 3x3 kernel."""
    c = weight.shape[0]
    w = weight.transpose(0, 1)  # [in, out, 3, 3]
    if V["fir"] == "merged":
        # Transposed conv with (w (*) f): 6x6 kernel. w flipped once (flip_weight False, then
        # !flip for the transposed call -> no flip); full 2-D convolution of w with f*4.
        k = F.conv2d(w.reshape(-1, 1, 3, 3).float(), (f * 4).flip([0, 1])[None, None].float(), padding=3)
        k = k.reshape(w.shape[0], c, 6, 6).to(x.dtype)
        if V["cl"]:
            k = k.contiguous(memory_format=torch.channels_last)
        y = F.conv_transpose2d(x, k, stride=2, padding=0)
        # ref: transposed output [2h+1] then pad [1,1] & 4x4 -> 2h. merged output 2h+4: crop 2.
        return y[:, :, 2:-2, 2:-2]
    if V["cl"]:
        w = w.contiguous(memory_format=torch.channels_last)
    y = F.conv_transpose2d(x, w, stride=2, padding=0)
    if V["fir"] == "sep":
        y = F.pad(y, [1, 1, 1, 1])
        f1 = (f.sum(0) * 2).to(y.dtype)  # separable: outer(f1, f1)/64*4 = outer(f1*2/8...)
        f1 = f1.flip([0])
        wc = y.shape[1]
        y = F.conv2d(y, f1.reshape(1, 1, 4, 1).repeat(wc, 1, 1, 1), groups=wc)
        return F.conv2d(y, f1.reshape(1, 1, 1, 4).repeat(wc, 1, 1, 1), groups=wc)
    return upfirdn_pad_conv(y, f, [1, 1, 1, 1], 4.0)


def layer_fwd(x, w, L, f, gain, noise_buf, V, clamp=256.0):
    B = x.shape[0]
    dtype = x.dtype
    styles = fc(w, L)
    weight = L["weight"]
    cin = weight.shape[1]
    if dtype == torch.float16:
        weight = weight * ((1 / math.sqrt(cin * 9)) / weight.abs().amax(dim=[1, 2, 3], keepdim=True))
        styles = styles / styles.abs().amax(dim=1, keepdim=True)
    wm = weight.unsqueeze(0) * styles.reshape(B, 1, -1, 1, 1)
    d = (wm.square().sum(dim=[2, 3, 4]) + 1e-8).rsqrt()
    x = x * styles.to(dtype).reshape(B, -1, 1, 1)
    wk = weight.to(dtype)
    if L["up"] == 2:
        x = conv_up(x, wk, f, V)
    else:
        if V["cl"]:
            wk = wk.contiguous(memory_format=torch.channels_last)
        x = F.conv2d(x, wk, padding=1)
    noise = noise_buf * L["strength"]
    g = SQRT2 * gain
    if V["act"]:
        x = torch.addcmul((noise * g).to(dtype), x, (d * g).to(dtype).reshape(B, -1, 1, 1))
        x = x + (L["bias"] * g).to(dtype).reshape(1, -1, 1, 1)
        x = F.leaky_relu(x, 0.2)
        return x.clamp(-clamp * gain, clamp * gain)
    x = torch.addcmul(noise.to(dtype), x, d.to(dtype).reshape(B, -1, 1, 1))
    x = x + L["bias"].to(dtype).reshape(1, -1, 1, 1)
    x = torch.where(x > 0, x, x * 0.2)
    x = x * g
    return x.clamp(-clamp * gain, clamp * gain)


def torgb_fwd(x, w, T, V, clamp=256.0):
    B = x.shape[0]
    styles = fc(w, T) * (1 / math.sqrt(T["weight"].shape[1]))
    x = x * styles.to(x.dtype).reshape(B, -1, 1, 1)
    wk = T["weight"].to(x.dtype)
    if V["cl"]:
        wk = wk.contiguous(memory_format=torch.channels_last)
    x = F.conv2d(x, wk)
    x = x + T["bias"].to(x.dtype).reshape(1, -1, 1, 1)
    return x.clamp(-clamp, clamp)


def synthesis(G, ws, bufs, V):
    B = ws.shape[0]
    x = img = None
    wi = ni = 0
    for blk in G:
        dtype = torch.float16 if (blk["fp16"] and V["fp16"]) else torch.float32
        if "const" in blk:
            x = blk["const"].to(dtype).unsqueeze(0).repeat(B, 1, 1, 1)
        else:
            x = x.to(dtype)
        if V["cl"]:
            x = x.contiguous(memory_format=torch.channels_last)
        if "conv0" in blk:
            x = layer_fwd(x, ws[:, wi], blk["conv0"], blk["f"], 1.0, bufs[ni], V)
            wi += 1
            ni += 1
        x = layer_fwd(x, ws[:, wi], blk["conv1"], blk["f"], 1.0, bufs[ni], V)
        ni += 1
        if img is not None:
            img = upsample2d_ref(img, blk["f"])
        y = torgb_fwd(x, ws[:, wi + 1], blk["torgb"], V).float()
        img = y if img is None else img.add_(y)
        wi += 1
    return img


VGG_CH = [(3, 64), (64, 64), (64, 128), (128, 128), (128, 256), (256, 256), (256, 256), (256, 512),
          (512, 512), (512, 512), (512, 512), (512, 512), (512, 512)]
SLICES = [2, 2, 3, 3, 3]


def make_vgg(dev):
    gen = torch.Generator().manual_seed(1)
    convs = [(torch.randn(co, ci, 3, 3, generator=gen) * math.sqrt(2 / (ci * 9)), torch.zeros(co)) for ci, co in VGG_CH]
    lp = [torch.rand(c, generator=gen) for c in (64, 128, 256, 512, 512)]
    return [(w.to(dev), b.to(dev)) for w, b in convs], [l.to(dev) for l in lp]


def vgg_features(vgg, img, V):
    convs, lp = vgg
    kind = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[V["vgg"]]
    shift = torch.tensor([-0.030, -0.088, -0.188], device=img.device).reshape(1, 3, 1, 1)
    scale = torch.tensor([0.458, 0.448, 0.450], device=img.device).reshape(1, 3, 1, 1)
    x = ((img.float() / 127.5 - 1 - shift) / scale).to(kind)
    if V["cl"]:
        x = x.contiguous(memory_format=torch.channels_last)
    it = iter(convs)
    out = []
    for k, n in enumerate(SLICES):
        if k > 0:
            x = F.max_pool2d(x, 2, 2)
        for _ in range(n):
            w, b = next(it)
            w = w.to(kind)
            if V["cl"]:
                w = w.contiguous(memory_format=torch.channels_last)
            x = F.conv2d(x, w, b.to(kind), padding=1).relu()
        f = x.float()
        _, c, h, ww = f.shape
        norm = f.square().sum(1, keepdim=True).sqrt() + 1e-10
        sc = (lp[k] / (h * ww)).sqrt().reshape(1, c, 1, 1)
        out.append((f / norm * sc).flatten(1))
    return torch.cat(out, 1)


def noise_reg(bufs):
    reg = 0
    for v in bufs:
        n = v
        while True:
            for dim in (3, 2):
                reg = reg + (n * n.roll(1, dim)).mean(dim=[1, 2, 3]).square()
            if n.shape[2] <= 8:
                break
            n = F.avg_pool2d(n, 2)
    return reg


class Adam:
    def __init__(self, p):
        self.m, self.v = torch.zeros_like(p), torch.zeros_like(p)

    def step(self, p, g, lr, t):
        self.m.lerp_(g, 0.1)
        self.v.mul_(0.999).addcmul_(g, g * 0.001)
        denom = self.v.sqrt() / math.sqrt(1 - 0.999 ** t) + 1e-8
        p.addcdiv_(self.m * (-lr / (1 - 0.9 ** t)), denom)


def noise_sizes(G):
    s = []
    for b in G:
        if "conv0" in b:
            s.append(b["res"])
        s.append(b["res"])
    return s


class Step:
    def __init__(self, G, vgg, targets, V, seed=0):
        dev = targets.device
        self.G, self.vgg, self.V = G, vgg, V
        B = targets.shape[0]
        self.num_ws = 2 * len(G)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            t = targets if targets.shape[2] <= 256 else F.adaptive_avg_pool2d(targets, 256)
            self.tf = vgg_features(vgg, t, V).float()
        self.w = (torch.randn(B, 1, 512, generator=gen) * 0.1).to(dev).requires_grad_(True)
        self.bufs = [torch.randn(B, 1, r, r, generator=gen).to(dev).requires_grad_(True) for r in noise_sizes(G)]
        self.wn = torch.randn(B, 1, 512, generator=gen).to(dev)
        self.params = [self.w] + self.bufs
        self.opt = [Adam(p) for p in self.params]
        self.t = 0

    def loss(self):
        ws = (self.w + self.wn * 0.01).repeat(1, self.num_ws, 1)
        img = (synthesis(self.G, ws, self.bufs, self.V) + 1) * 127.5
        if img.shape[2] > 256:
            img = F.adaptive_avg_pool2d(img, 256)
        sf = vgg_features(self.vgg, img, self.V)
        dist = (self.tf - sf.float()).square().sum(1)
        return (dist + noise_reg(self.bufs) * 1e5).sum()

    def grads(self):
        loss = self.loss()
        return loss.detach(), torch.autograd.grad(loss, self.params)

    def update(self, grads, lr=0.01):
        self.t += 1
        with torch.no_grad():
            for o, p, g in zip(self.opt, self.params, grads):
                o.step(p, g, lr, self.t)
            for b in self.bufs:
                b.sub_(b.mean(dim=[1, 2, 3], keepdim=True))
                b.mul_(b.square().mean(dim=[1, 2, 3], keepdim=True).rsqrt())


VARIANTS = {
    "ref": {},
    "act": dict(act=True),
    "cl": dict(cl=True),
    "act+cl": dict(act=True, cl=True),
    "fir=sep": dict(fir="sep"),
    "fir=merged": dict(fir="merged"),
    "act+cl+merged": dict(act=True, cl=True, fir="merged"),
    "act+cl+sep": dict(act=True, cl=True, fir="sep"),
    "vgg16": dict(vgg="fp16"),
    "act+cl+vgg16": dict(act=True, cl=True, vgg="fp16"),
    "act+cl+vggbf16": dict(act=True, cl=True, vgg="bf16"),
    "act+cl+merged+vgg16": dict(act=True, cl=True, fir="merged", vgg="fp16"),
    "act+cl+vgg16+graph": dict(act=True, cl=True, vgg="fp16", graph=True),
    "act+cl+merged+vgg16+graph": dict(act=True, cl=True, fir="merged", vgg="fp16", graph=True),
}


def variant(name, fp16=True):
    V = dict(act=False, cl=False, fir="ref", vgg="fp32", graph=False, fp16=fp16)
    V.update(VARIANTS[name])
    return V


def make_targets(G, B, res, dev):
    with torch.no_grad():
        gen = torch.Generator().manual_seed(7)
        ws = torch.randn(B, 2 * len(G), 512, generator=gen).to(dev) * 0.5
        bufs = [torch.randn(B, 1, r, r, generator=gen).to(dev) for r in noise_sizes(G)]
        return ((synthesis(G, ws, bufs, variant("ref", fp16=False)) + 1) * 127.5).clamp(0, 255)


def timed(name, G, vgg, targets, steps, profile):
    V = variant(name)
    s = Step(G, vgg, targets, V)
    dev = targets.device
    for _ in range(3):
        loss, g = s.grads()
        s.update(g)
    torch.cuda.synchronize()
    if V["graph"]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                loss, g = s.grads()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            sloss, sg = s.grads()
        run = lambda: (graph.replay(), s.update(sg))
    else:
        run = lambda: s.update(s.grads()[1])
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        run()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / steps
    B = targets.shape[0]
    rec = dict(variant=name, res=targets.shape[2], batch=B, ms_per_step=round(ms, 2),
               img_per_s_150=round(B / (150 * ms / 1e3), 3), peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 1))
    print(json.dumps(rec), flush=True)
    if profile:
        from torch.profiler import ProfilerActivity, profile as prof
        with prof(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(2):
                run()
            torch.cuda.synchronize()
        print(p.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=70), flush=True)
    del s
    torch.cuda.empty_cache()


def check():
    """CPU, fp32, 32x32: every reformulation gives ref's loss and gradients."""
    torch.manual_seed(0)
    G = make_g(32, "cpu")
    vgg = make_vgg("cpu")
    targets = make_targets(G, 2, 32, "cpu")
    base = None
    for name in ["ref", "act", "cl", "fir=sep", "fir=merged", "act+cl+merged"]:
        V = variant(name, fp16=False)
        s = Step(G, vgg, targets, V)
        loss, g = s.grads()
        if base is None:
            base = (loss, g)
            continue
        rel = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(g, base[1]))
        dl = ((loss - base[0]).abs() / base[0].abs()).item()
        print(json.dumps(dict(variant=name, loss_rel=dl, grad_rel=rel)))
        assert dl < 1e-5 and rel < 1e-4, name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("res", type=int, nargs="?", default=256)
    ap.add_argument("batch", type=int, nargs="?", default=16)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--profile", default="", help="comma list of variants to profile")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if a.check:
        return check()
    torch.backends.cudnn.benchmark = True
    dev = "cuda"
    G = make_g(a.res, dev)
    vgg = make_vgg(dev)
    targets = make_targets(G, a.batch, a.res, dev)
    prof = set(a.profile.split(",")) - {""}
    for name in a.variants.split(","):
        try:
            timed(name, G, vgg, targets, a.steps, name in prof)
        except Exception as e:  # noqa: BLE001 -- one failing variant must not hide the rest
            print(json.dumps(dict(variant=name, error=str(e)[:300])), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
