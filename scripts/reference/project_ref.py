#!/usr/bin/env python3
"""Upstream project() (seed 000's copy), step by step in PyTorch, for shared/projector's tests:
the generator is stylegan2_ref.G (checked against upstream's fixtures), the perceptual network
lpips_ref's features (the vgg16.pt call), the optimiser torch.optim.Adam. The only changes from
upstream are the random draws, which come from numpy's RandomState(seed) so the Rust side can
make the same ones: each noise buffer's initialisation in layer order, then each step's w-noise.
Images are projected one at a time, as upstream does.

  project_ref.py G.safetensors VGG.safetensors IN.safetensors OUT.safetensors STEPS SEED W_SAMPLES WPLUS
IN: `targets` [B,C,R,R] in [0,255]. OUT: `w_steps` [B,steps,k,w_dim], `dist` [B,steps].
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lpips_ref  # noqa: E402
import stylegan2_ref  # noqa: E402


def project(g, vgg, target, steps, seed, w_samples, w_plus):
    initial_learning_rate, initial_noise_factor = 0.1, 0.05
    lr_rampdown_length, lr_rampup_length, noise_ramp_length = 0.25, 0.05, 0.75
    regularize_noise_weight = 1e5
    z_samples = np.random.RandomState(123).randn(w_samples, g.cfg["z_dim"])
    ws_ = g.mapping(torch.from_numpy(z_samples), None)
    ws_ = ws_[:, :1, :].cpu().numpy().astype(np.float32)
    w_avg = np.mean(ws_, axis=0, keepdims=True)
    w_std = (np.sum((ws_ - w_avg) ** 2) / w_samples) ** 0.5
    names = [k for k in g.sd if k.endswith(".noise_const")]
    names.sort(key=lambda k: (int(k.split(".")[1][1:]), k))  # b4.conv1, b8.conv0, b8.conv1, ...
    rs = np.random.RandomState(seed)
    noise_bufs = {}
    for n in names:
        r = g.sd[n].shape[0]
        noise_bufs[n] = torch.from_numpy(rs.randn(r * r)).float().view(r, r).requires_grad_(True)
    target_images = target.unsqueeze(0).to(torch.float32)
    if target_images.shape[2] > 256:
        target_images = F.interpolate(target_images, size=(256, 256), mode="area")
    target_features = vgg(target_images, resize_images=False, return_lpips=True)
    k = g.num_ws if w_plus else 1
    w_opt = torch.tensor(np.repeat(w_avg, k, axis=1), dtype=torch.float32, requires_grad=True)
    optimizer = torch.optim.Adam([w_opt] + list(noise_bufs.values()), betas=(0.9, 0.999), lr=initial_learning_rate)
    w_out, d_out = [], []
    for step in range(steps):
        t = step / steps
        w_noise_scale = w_std * initial_noise_factor * max(0.0, 1.0 - t / noise_ramp_length) ** 2
        lr_ramp = min(1.0, (1.0 - t) / lr_rampdown_length)
        lr_ramp = 0.5 - 0.5 * np.cos(lr_ramp * np.pi)
        lr_ramp = lr_ramp * min(1.0, t / lr_rampup_length)
        lr = initial_learning_rate * lr_ramp
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        w_noise = torch.from_numpy(rs.randn(k * w_opt.shape[2])).float().view(w_opt.shape) * w_noise_scale
        ws = w_opt + w_noise
        if not w_plus:
            ws = ws.repeat([1, g.num_ws, 1])
        for n, buf in noise_bufs.items():
            g.sd[n] = buf
        synth_images = g.synthesis(ws, noise_mode="const")
        synth_images = (synth_images + 1) * (255 / 2)
        if synth_images.shape[2] > 256:
            synth_images = F.interpolate(synth_images, size=(256, 256), mode="area")
        synth_features = vgg(synth_images, resize_images=False, return_lpips=True)
        dist = (target_features - synth_features).square().sum()
        reg_loss = 0.0
        for v in noise_bufs.values():
            noise = v[None, None, :, :]
            while True:
                reg_loss += (noise * torch.roll(noise, shifts=1, dims=3)).mean() ** 2
                reg_loss += (noise * torch.roll(noise, shifts=1, dims=2)).mean() ** 2
                if noise.shape[2] <= 8:
                    break
                noise = F.avg_pool2d(noise, kernel_size=2)
        loss = dist + reg_loss * regularize_noise_weight
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        w_out.append(w_opt.detach()[0].clone())
        d_out.append(float(dist.detach()))
        with torch.no_grad():
            for buf in noise_bufs.values():
                buf -= buf.mean()
                buf *= buf.square().mean().rsqrt()
    return torch.stack(w_out), torch.tensor(d_out)


def main():
    gpath, vpath, ipath, opath, steps, seed, w_samples, w_plus = sys.argv[1:9]
    with safe_open(gpath, "pt") as f:
        cfg = json.loads(f.metadata()["config"])
        sd = {k: f.get_tensor(k) for k in f.keys()}
    g = stylegan2_ref.G(sd, cfg)
    vgg, lins = lpips_ref.vgg_from(load_file(vpath))
    vgg = lpips_ref.Script(vgg, lins).eval().requires_grad_(False)
    targets = load_file(ipath)["targets"]
    ws, ds = [], []
    for target in targets:
        w, d = project(stylegan2_ref.G(dict(sd), cfg), vgg, target, int(steps), int(seed), int(w_samples), w_plus == "1")
        ws.append(w)
        ds.append(d)
    save_file({"w_steps": torch.stack(ws).contiguous(), "dist": torch.stack(ds).contiguous()}, opath)


if __name__ == "__main__":
    main()
