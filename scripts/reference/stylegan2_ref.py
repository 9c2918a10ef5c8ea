#!/usr/bin/env python3
"""An independent PyTorch transcription of StyleGAN2-ADA's generator (training/networks.py with
the reference ops of torch_utils/ops), working straight from a state_dict + config, for the cases
the upstream fixtures do not cover (architectures `orig` and `resnet`, conditional mapping).

It is checked against the upstream fixtures first (tests/ in shared/stylegan2 run both), so it
is the upstream maths; it is not imported by anything at run time.

  stylegan2_ref.py G.safetensors inputs.safetensors out.safetensors

inputs: `z` [N,z_dim] (and `c` [N,c_dim]) and/or `ws` [N,num_ws,w_dim]; optional `psi`, `cutoff`.
out: `ws` (from z), `img_const`, `img_none`, `img_const_unfused` (from ws, or from the mapped z).
"""

import json
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file


def bias_act(x, b=None, act="linear", gain=None, clamp=None):
    gain = float(gain if gain is not None else (np.sqrt(2) if act == "lrelu" else 1))
    if b is not None:
        x = x + b.reshape([-1 if i == 1 else 1 for i in range(x.ndim)])
    if act == "lrelu":
        x = F.leaky_relu(x, 0.2)
    if gain != 1:
        x = x * gain
    if clamp is not None and clamp >= 0:
        x = x.clamp(-clamp, clamp)
    return x


def upfirdn2d(x, f, up=1, padding=(0, 0, 0, 0), gain=1):
    b, c, h, w = x.shape
    px0, px1, py0, py1 = padding
    x = x.reshape([b, c, h, 1, w, 1])
    x = F.pad(x, [0, up - 1, 0, 0, 0, up - 1])
    x = x.reshape([b, c, h * up, w * up])
    x = F.pad(x, [max(px0, 0), max(px1, 0), max(py0, 0), max(py1, 0)])
    x = x[:, :, max(-py0, 0): x.shape[2] - max(-py1, 0), max(-px0, 0): x.shape[3] - max(-px1, 0)]
    f = f * (gain ** (f.ndim / 2))
    f = f.to(x.dtype).flip(list(range(f.ndim)))
    f = f[np.newaxis, np.newaxis].repeat([c, 1] + [1] * f.ndim)
    return F.conv2d(x, f, groups=c)


def upsample2d(x, f, up=2):
    fh, fw = f.shape
    p = [(fw + up - 1) // 2, (fw - up) // 2, (fh + up - 1) // 2, (fh - up) // 2]
    return upfirdn2d(x, f, up=up, padding=p, gain=up * up)


def conv2d_wrapper(x, w, stride=1, padding=0, groups=1, transpose=False, flip_weight=True):
    if not flip_weight:
        w = w.flip([2, 3])
    if transpose:
        return F.conv_transpose2d(x, w, stride=stride, padding=padding, groups=groups)
    return F.conv2d(x, w, stride=stride, padding=padding, groups=groups)


def conv2d_resample(x, w, f=None, up=1, padding=0, groups=1, flip_weight=True):
    out_channels, in_per_group, kh, kw = w.shape
    fh, fw = (1, 1) if f is None else f.shape
    px0 = px1 = py0 = py1 = padding
    if up > 1:
        px0 += (fw + up - 1) // 2
        px1 += (fw - up) // 2
        py0 += (fh + up - 1) // 2
        py1 += (fh - up) // 2
    if kw == 1 and kh == 1 and up > 1:
        x = conv2d_wrapper(x, w, groups=groups, flip_weight=flip_weight)
        return upfirdn2d(x, f, up=up, padding=[px0, px1, py0, py1], gain=up ** 2)
    if up > 1:
        if groups == 1:
            w = w.transpose(0, 1)
        else:
            w = w.reshape(groups, out_channels // groups, in_per_group, kh, kw)
            w = w.transpose(1, 2)
            w = w.reshape(groups * in_per_group, out_channels // groups, kh, kw)
        px0 -= kw - 1
        px1 -= kw - up
        py0 -= kh - 1
        py1 -= kh - up
        pxt = max(min(-px0, -px1), 0)
        pyt = max(min(-py0, -py1), 0)
        x = conv2d_wrapper(x, w, stride=up, padding=[pyt, pxt], groups=groups, transpose=True, flip_weight=not flip_weight)
        return upfirdn2d(x, f, padding=[px0 + pxt, px1 + pxt, py0 + pyt, py1 + pyt], gain=up ** 2)
    return conv2d_wrapper(x, w, padding=[py0, px0], groups=groups, flip_weight=flip_weight)


def modulated_conv2d(x, weight, styles, noise=None, up=1, padding=0, resample_filter=None, demodulate=True, flip_weight=True, fused_modconv=True):
    batch_size = x.shape[0]
    out_channels, in_channels, kh, kw = weight.shape
    w = dcoefs = None
    if demodulate or fused_modconv:
        w = weight.unsqueeze(0) * styles.reshape(batch_size, 1, -1, 1, 1)
    if demodulate:
        dcoefs = (w.square().sum(dim=[2, 3, 4]) + 1e-8).rsqrt()
    if demodulate and fused_modconv:
        w = w * dcoefs.reshape(batch_size, -1, 1, 1, 1)
    if not fused_modconv:
        x = x * styles.reshape(batch_size, -1, 1, 1)
        x = conv2d_resample(x, weight, f=resample_filter, up=up, padding=padding, flip_weight=flip_weight)
        if demodulate and noise is not None:
            x = torch.addcmul(noise, x, dcoefs.reshape(batch_size, -1, 1, 1))
        elif demodulate:
            x = x * dcoefs.reshape(batch_size, -1, 1, 1)
        elif noise is not None:
            x = x.add_(noise)
        return x
    x = x.reshape(1, -1, *x.shape[2:])
    w = w.reshape(-1, in_channels, kh, kw)
    x = conv2d_resample(x, w, f=resample_filter, up=up, padding=padding, groups=batch_size, flip_weight=flip_weight)
    x = x.reshape(batch_size, -1, *x.shape[2:])
    if noise is not None:
        x = x.add_(noise)
    return x


class G:
    def __init__(self, sd, cfg):
        self.sd, self.cfg = sd, cfg
        r = cfg["img_resolution"]
        self.res = [2 ** i for i in range(2, int(np.log2(r)) + 1)]
        self.ch = {res: min(cfg["channel_base"] // res, cfg["channel_max"]) for res in self.res}
        self.arch = cfg.get("architecture", "skip")
        self.num_ws = 2 * len(self.res)

    def fc(self, name, x, act="linear", lr=1.0):
        w, b = self.sd[name + ".weight"], self.sd[name + ".bias"]
        w = w * (lr / np.sqrt(w.shape[1]))
        if lr != 1:
            b = b * lr
        if act == "linear":
            return torch.addmm(b.unsqueeze(0), x, w.t())
        return bias_act(x.matmul(w.t()), b, act=act)

    def mapping(self, z, c, psi=1, cutoff=None):
        norm = lambda x: x * (x.square().mean(dim=1, keepdim=True) + 1e-8).rsqrt()
        x = None
        if self.cfg["z_dim"] > 0:
            x = norm(z.to(torch.float32))
        if self.cfg.get("c_dim", 0) > 0:
            y = norm(self.fc("mapping.embed", c.to(torch.float32)))
            x = torch.cat([x, y], dim=1) if x is not None else y
        for i in range(self.cfg.get("map_layers", 8)):
            x = self.fc(f"mapping.fc{i}", x, act="lrelu", lr=self.cfg.get("mapping_lr_multiplier", 0.01))
        x = x.unsqueeze(1).repeat([1, self.num_ws, 1])
        w_avg = self.sd["mapping.w_avg"]
        if psi != 1:
            if cutoff is None:
                x = w_avg.lerp(x, psi)
            else:
                x[:, :cutoff] = w_avg.lerp(x[:, :cutoff], psi)
        return x

    def layer(self, p, x, w, up, res, noise_mode, fused, gain=1):
        sd = self.sd
        styles = self.fc(p + ".affine", w)
        noise = None
        if noise_mode == "const":
            noise = sd[p + ".noise_const"] * sd[p + ".noise_strength"]
        x = modulated_conv2d(x, sd[p + ".weight"], styles, noise=noise, up=up, padding=1,
                             resample_filter=sd[p + ".resample_filter"], flip_weight=(up == 1), fused_modconv=fused)
        clamp = self.cfg.get("conv_clamp")
        return bias_act(x, sd[p + ".bias"], act="lrelu", gain=np.sqrt(2) * gain, clamp=clamp * gain if clamp is not None else None)

    def torgb(self, p, x, w, fused):
        sd = self.sd
        styles = self.fc(p + ".affine", w) * (1 / np.sqrt(sd[p + ".weight"].shape[1]))
        x = modulated_conv2d(x, sd[p + ".weight"], styles, demodulate=False, fused_modconv=fused)
        return bias_act(x, sd[p + ".bias"], clamp=self.cfg.get("conv_clamp"))

    def synthesis(self, ws, noise_mode="const", fused=True):
        sd = self.sd
        x = img = None
        w_idx = 0
        for res in self.res:
            p = f"synthesis.b{res}"
            is_last = res == self.res[-1]
            nconv = 1 if res == 4 else 2
            ntorgb = 1 if (is_last or self.arch == "skip") else 0
            it = iter(ws.narrow(1, w_idx, nconv + ntorgb).unbind(dim=1))
            w_idx += nconv
            if res == 4:
                x = sd[p + ".const"].unsqueeze(0).repeat([ws.shape[0], 1, 1, 1])
                x = self.layer(p + ".conv1", x, next(it), 1, res, noise_mode, fused)
            elif self.arch == "resnet":
                skw = sd[p + ".skip.weight"]
                y = conv2d_resample(x, skw * (1 / np.sqrt(skw.shape[1])), f=sd[p + ".skip.resample_filter"], up=2, flip_weight=False)
                y = bias_act(y, None, gain=np.sqrt(0.5))
                x = self.layer(p + ".conv0", x, next(it), 2, res, noise_mode, fused)
                x = self.layer(p + ".conv1", x, next(it), 1, res, noise_mode, fused, gain=np.sqrt(0.5))
                x = y.add_(x)
            else:
                x = self.layer(p + ".conv0", x, next(it), 2, res, noise_mode, fused)
                x = self.layer(p + ".conv1", x, next(it), 1, res, noise_mode, fused)
            if img is not None:
                img = upsample2d(img, sd[p + ".resample_filter"])
            if ntorgb:
                y = self.torgb(p + ".torgb", x, next(it), fused)
                img = img.add_(y) if img is not None else y
        return img


def main():
    gpath, ipath, opath = sys.argv[1:4]
    with safe_open(gpath, "pt") as f:
        cfg = json.loads(f.metadata()["config"])
        sd = {k: f.get_tensor(k) for k in f.keys()}
    with safe_open(ipath, "pt") as f:
        inp = {k: f.get_tensor(k) for k in f.keys()}
    g = G(sd, cfg)
    out = {}
    with torch.no_grad():
        if "z" in inp:
            psi = float(inp["psi"]) if "psi" in inp else 1
            cutoff = int(inp["cutoff"]) if "cutoff" in inp else None
            out["ws"] = g.mapping(inp["z"], inp.get("c"), psi, cutoff)
        ws = inp["ws"] if "ws" in inp else out["ws"]
        out["img_const"] = g.synthesis(ws, "const")
        out["img_none"] = g.synthesis(ws, "none")
        out["img_const_unfused"] = g.synthesis(ws, "const", fused=False)
    save_file({k: v.contiguous() for k, v in out.items()}, opath)


if __name__ == "__main__":
    main()
