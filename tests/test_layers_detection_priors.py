"""density_prior_box against a loop-by-loop NumPy reference of Paddle 1.8's kernel (the
other detection layers: tests/test_layers_detection.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph


def density_ref(fh, fw, ih, iw, dens, sizes, ratios, steps, offset, clip):
    sw, sh = steps if steps[0] and steps[1] else (iw / fw, ih / fh)
    avg = int((sw + sh) * 0.5)
    out = []
    for h in range(fh):
        for w in range(fw):
            cx, cy = (w + offset) * sw, (h + offset) * sh
            for size, d in zip(sizes, dens):
                shift = avg // d
                for r in ratios:
                    bw, bh = size * math.sqrt(r), size / math.sqrt(r)
                    dcx, dcy = cx - avg / 2 + shift / 2, cy - avg / 2 + shift / 2
                    for di in range(d):
                        for dj in range(d):
                            x, y = dcx + dj * shift, dcy + di * shift
                            out.append([max((x - bw / 2) / iw, 0), max((y - bh / 2) / ih, 0),
                                        min((x + bw / 2) / iw, 1), min((y + bh / 2) / ih, 1)])
    boxes = np.array(out).reshape(fh, fw, -1, 4)
    return np.clip(boxes, 0, 1) if clip else boxes


@pytest.mark.parametrize("kw", [
    dict(densities=[4, 2, 1], fixed_sizes=[32.0, 64.0, 128.0], fixed_ratios=[1.0]),
    dict(densities=[3, 1], fixed_sizes=[8.0, 24.0], fixed_ratios=[0.5, 2.0], clip=True,
         steps=[10.0, 7.0], offset=0.3, flatten_to_2d=True, variance=[0.1, 0.2, 0.3, 0.4]),
])
def test_density_prior_box(kw):
    x = graphc.data("x", [-1, 2, 3, 4])
    img = graphc.data("img", [-1, 3, 40, 64])
    boxes, var = layers.density_prior_box(x, img, **kw)
    feed = {"x": np.zeros((1, 2, 3, 4), "float32"), "img": np.zeros((1, 3, 40, 64), "float32")}
    got = graphc.Executor().run(feed=feed, fetch_list=[boxes, var])
    _, ref = run_graph(graphc.lower(graphc.default_main_program()), {}, feed,
                       [boxes.name, var.name])
    expect = density_ref(3, 4, 40, 64, kw["densities"], kw["fixed_sizes"], kw["fixed_ratios"],
                         kw.get("steps", [0.0, 0.0]), kw.get("offset", 0.5),
                         kw.get("clip", False))
    if kw.get("flatten_to_2d"):
        expect = expect.reshape(-1, 4)
    assert boxes.shape == expect.shape and boxes.stop_gradient
    for b, v in (got, ref):
        np.testing.assert_allclose(b, expect, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(v, np.broadcast_to(kw.get("variance", [0.1, 0.1, 0.2, 0.2]),
                                                      expect.shape), rtol=1e-6)
    assert fluid.layers.density_prior_box is layers.density_prior_box
