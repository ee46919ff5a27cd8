"""Vision-sampling layers (psroi_pool, prroi_pool, deformable_conv, deformable_roi_pooling,
roi_perspective_transform, im2sequence) against loop-by-loop NumPy references of Paddle 1.8's
documented kernels, on the jitted Executor and the interpreter, with finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from vision_sampling_reference import (
    deformable_conv_ref,
    deformable_psroi_ref,
    im2sequence_ref,
    perspective_ref,
    prroi_pool_ref,
    psroi_pool_ref,
)

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ShapeError
from graphc.runtime.lod import LoDTensor, unpack
from graphc.testing.lod import as_feed
from graphc.testing.lod_checks import fd_check, token_loss


def _host(v):
    if isinstance(v, LoDTensor):  # a dense fetch is one too, with an empty LoD
        return np.asarray(v), v.recursive_sequence_lengths() or None
    if not isinstance(v, np.ndarray) and hasattr(v, "lengths"):
        t = unpack(v)
        return np.asarray(t), t.recursive_sequence_lengths()
    return np.asarray(v), None


def run_both(feed, fetch, startup=False):
    """Fetch ``fetch`` on the jitted Executor and the interpreter; they must agree (values
    and LoD). Returns [(array, lengths or None)] of the Executor's."""
    exe = graphc.Executor()
    if startup:
        exe.run(graphc.default_startup_program())
    got = [_host(v) for v in exe.run(feed=feed, fetch_list=fetch, return_numpy=False)]
    program = graphc.default_main_program()
    scope = graphc.global_scope()
    state = {v.name: np.asarray(scope.find_var(v.name).get_tensor())
             for v in program.global_block().all_parameters()}
    packed = {k: as_feed(program, k, v) for k, v in feed.items()}
    _, ref = run_graph(graphc.lower(program), state, packed, [v.name for v in fetch])
    for (a, la), b in zip(got, ref):
        b, lb = _host(b)
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)
        assert la == lb
    return got


def lod(value, lengths):
    return fluid.create_lod_tensor(np.asarray(value, np.float64), [lengths], fluid.CPUPlace())


ROIS = np.array([[0.0, 0.0, 13.0, 11.0], [4.0, 2.0, 9.0, 7.5], [1.0, 3.0, 2.0, 3.5],
                 [-3.0, -2.0, 16.0, 14.0], [6.5, 5.0, 12.0, 11.5]])
BATCH = [0, 0, 0, 1, 1]


def test_psroi_pool():
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(2, 12, 6, 7))
    x = graphc.data("x", [-1, 12, 6, 7], "float64")
    r = graphc.data("rois", [-1, 4], "float64", lod_level=1)
    out = layers.psroi_pool(x, r, 3, 0.5, 2, 2)
    assert out.shape == (-1, 3, 2, 2) and out.lod_level == 1
    feed = {"x": xv, "rois": lod(ROIS, [3, 2])}
    ((got, lengths),) = run_both(feed, [out])
    assert lengths == [[3, 2]]
    np.testing.assert_allclose(got, psroi_pool_ref(xv, ROIS, BATCH, 3, 2, 2, 0.5), rtol=1e-10)
    x.stop_gradient = False
    loss, w = token_loss(out, rng)
    fd_check(graphc.default_main_program(), loss, {**feed, **w}, ["x"], rng, coords=10)


@pytest.mark.parametrize("counts", [False, True])
def test_prroi_pool_and_its_gradient_to_x_and_rois(counts):
    rng = np.random.default_rng(1)
    xv = rng.normal(size=(2, 3, 6, 7))
    rois = np.array([[0.3, 0.2, 11.7, 9.1], [4.1, 2.3, 9.9, 7.5], [1.2, 3.1, 1.2, 3.5],
                     [-3.3, -2.2, 15.6, 14.3], [6.5, 5.1, 12.2, 11.3]])
    x = graphc.data("x", [2, 3, 6, 7], "float64")
    x.stop_gradient = False
    if counts:  # no empty box: the ROIs gradient is checked by central differences
        rois[2, 2] = 1.9
        r = graphc.data("rois", [5, 4], "float64")
        r.stop_gradient = False
        nums = graphc.data("nums", [2], "int64")
        out = layers.prroi_pool(x, r, 0.5, 2, 3, batch_roi_nums=nums)
        feed, batch = {"x": xv, "rois": rois, "nums": np.array([1, 4])}, [0, 1, 1, 1, 1]
    else:
        r = graphc.data("rois", [-1, 4], "float64", lod_level=1)
        out = layers.prroi_pool(x, r, 0.5, 2, 3)
        feed, batch = {"x": xv, "rois": lod(rois, [3, 2])}, BATCH
    assert out.shape[1:] == (3, 2, 3)
    ((got, _),) = run_both(feed, [out])
    np.testing.assert_allclose(got, prroi_pool_ref(xv, rois, batch, 2, 3, 0.5), rtol=1e-10,
                               atol=1e-12)
    loss, w = token_loss(out, rng)
    fd_check(graphc.default_main_program(), loss, {**feed, **w},
             ["x", "rois"] if counts else ["x"], rng, coords=10)


@pytest.mark.parametrize("modulated,groups,dgroups,stride,pad,dil", [
    (True, 1, 1, 1, 1, 1), (True, 2, 2, 2, 0, 1), (False, 1, 2, 1, 2, 2)])
def test_deformable_conv(modulated, groups, dgroups, stride, pad, dil):
    rng = np.random.default_rng(2)
    n, ch, h, w, m, k = 2, 4, 5, 6, 4, 3
    oh = (h + 2 * pad - (dil * (k - 1) + 1)) // stride + 1
    ow = (w + 2 * pad - (dil * (k - 1) + 1)) // stride + 1
    xv = rng.normal(size=(n, ch, h, w))
    offv = rng.normal(scale=1.5, size=(n, 2 * dgroups * k * k, oh, ow))
    maskv = rng.uniform(size=(n, dgroups * k * k, oh, ow))
    x = graphc.data("x", [n, ch, h, w], "float64")
    off = graphc.data("off", list(offv.shape), "float64")
    mask = graphc.data("mask", list(maskv.shape), "float64") if modulated else None
    out = layers.deformable_conv(x, off, mask, m, k, stride, pad, dil, groups, dgroups,
                                 param_attr=fluid.ParamAttr(name="dcn_w"), bias_attr=False,
                                 modulated=modulated)
    assert out.shape == (n, m, oh, ow)
    op = graphc.default_main_program().global_block().ops[-1]
    assert op.type == ("deformable_conv" if modulated else "deformable_conv_v1")
    feed = {"x": xv, "off": offv, **({"mask": maskv} if modulated else {})}
    ((got, _),) = run_both(feed, [out], startup=True)
    wv = np.asarray(graphc.global_scope().find_var("dcn_w").get_tensor())
    ref = deformable_conv_ref(xv, offv, maskv if modulated else None, wv, [stride] * 2,
                              [pad] * 2, [dil] * 2, groups, dgroups)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("no_trans,sensitive", [(False, False), (True, False), (False, True)])
def test_deformable_roi_pooling(no_trans, sensitive):
    rng = np.random.default_rng(3)
    ch, ph, pw = (8, 2, 2)
    xv = rng.normal(size=(2, ch, 6, 7))
    tv = rng.normal(size=(5, 4, 2, 2))
    x = graphc.data("x", [-1, ch, 6, 7], "float64")
    r = graphc.data("rois", [-1, 4], "float64", lod_level=1)
    t = graphc.data("trans", [-1, 4, 2, 2], "float64")
    group = [2, 2] if sensitive else [1, 1]
    out = layers.deformable_roi_pooling(x, r, t, no_trans, 0.5, group, ph, pw, None, 3, 0.2,
                                        sensitive)
    od = ch // 4 if sensitive else ch
    assert out.shape == (-1, od, ph, pw)
    feed = {"x": xv, "rois": lod(ROIS, [3, 2]), "trans": tv}
    ((got, _),) = run_both(feed, [out])
    ref, _ = deformable_psroi_ref(xv, ROIS, BATCH, tv, no_trans, 0.5, od, group, ph, pw,
                                  [ph, pw], 3, 0.2)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    if not no_trans:
        x.stop_gradient = t.stop_gradient = False
        loss, w = token_loss(out, rng)
        fd_check(graphc.default_main_program(), loss, {**feed, **w}, ["x", "trans"], rng,
                 coords=10)


def test_deformable_roi_pooling_takes_a_lod_trans_and_differentiates_its_tokens():
    """Trans computed from the boxes' features carries their LoD (R-FCN's offsets head)."""
    rng = np.random.default_rng(7)
    xv, tv = rng.normal(size=(2, 4, 6, 7)), rng.normal(size=(5, 2, 1, 1))
    x = graphc.data("x", [-1, 4, 6, 7], "float64")
    r = graphc.data("rois", [-1, 4], "float64", lod_level=1)
    t = graphc.data("trans", [-1, 2, 1, 1], "float64", lod_level=1)
    t.stop_gradient = False
    out = layers.deformable_roi_pooling(x, r, t, spatial_scale=0.5, pooled_height=2,
                                        pooled_width=2, part_size=1, sample_per_part=2)
    feed = {"x": xv, "rois": lod(ROIS, [3, 2]), "trans": lod(tv, [3, 2])}
    ((got, lengths),) = run_both(feed, [out])
    ref, _ = deformable_psroi_ref(xv, ROIS, BATCH, tv, False, 0.5, 4, [1, 1], 2, 2, [1, 1], 2,
                                  0.1)
    assert lengths == [[3, 2]]
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    loss, w = token_loss(out, rng)
    fd_check(graphc.default_main_program(), loss, {**feed, **w}, ["trans"], rng, coords=10)


def test_roi_perspective_transform():
    rng = np.random.default_rng(4)
    xv = rng.normal(size=(2, 2, 7, 8))
    quads = np.array([[0.6, 0.4, 6.2, 1.1, 5.5, 6.3, 1.3, 5.2],
                      [1.0, 1.0, 5.0, 1.0, 5.0, 4.0, 1.0, 4.0],
                      [2.2, 0.3, 9.1, 2.5, 8.4, 8.8, -1.3, 6.1]])
    x = graphc.data("x", [-1, 2, 7, 8], "float64")
    r = graphc.data("rois", [-1, 8], "float64", lod_level=1)
    out, mask, mat = layers.roi_perspective_transform(x, r, 4, 5, 1.0)
    assert (out.shape, mask.shape, mat.shape) == ((-1, 2, 4, 5), (-1, 1, 4, 5), (-1, 9))
    feed = {"x": xv, "rois": lod(quads, [1, 2])}
    (got, _), (got_mask, _), (got_mat, _) = run_both(feed, [out, mask, mat])
    ref, ref_mask, ref_mat = perspective_ref(xv, quads, [0, 1, 1], 4, 5, 1.0)
    np.testing.assert_allclose(got_mat, ref_mat, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(got_mask, ref_mask)
    assert 0 < ref_mask.sum() < ref_mask.size  # some points fall outside a quad or the map
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    x.stop_gradient = False
    loss, w = token_loss(out, rng)
    fd_check(graphc.default_main_program(), loss, {**feed, **w}, ["x"], rng, coords=10)


@pytest.mark.parametrize("with_sizes", [False, True])
def test_im2sequence(with_sizes):
    rng = np.random.default_rng(5)
    xv = rng.normal(size=(2, 2, 5, 6))
    x = graphc.data("x", [2, 2, 5, 6], "float64")
    if with_sizes:
        sizes = graphc.data("sizes", [2, 2], "float64")  # Paddle reads them as X's dtype
        out = layers.im2sequence(x, [2, 3], [1, 2], [1, 0], input_image_size=sizes,
                                 out_stride=2)
        # truncated to ints, then divided by out_stride rounding up
        feed = {"x": xv, "sizes": np.array([[10.7, 12.0], [5.0, 7.9]])}
        real = [(5, 6), (3, 4)]
        assert out.shape == (-1, 12)
    else:
        out = layers.im2sequence(x, [2, 3], [1, 2], [1, 0, 0, 1])
        feed, real = {"x": xv}, None
        assert out.shape == (2 * 5 * 3, 12)
    assert out.lod_level == 1
    pads = [1, 0, 1, 0] if with_sizes else [1, 0, 0, 1]
    ((got, lengths),) = run_both(feed, [out])
    ref, ref_lengths = im2sequence_ref(xv, [2, 3], [1, 2], pads, real)
    assert lengths == [ref_lengths]
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    x.stop_gradient = False
    loss, w = token_loss(out, rng)
    fd_check(graphc.default_main_program(), loss, {**feed, **w}, ["x"], rng, coords=10)


def test_im2sequence_reads_image_sizes_only_for_a_batch_of_several():
    xv = np.random.default_rng(6).normal(size=(1, 2, 4, 5))
    x = graphc.data("x", [1, 2, 4, 5], "float64")
    out = layers.im2sequence(x, 2, input_image_size=graphc.data("sizes", [1, 2], "float64"),
                             out_stride=4)
    ((got, lengths),) = run_both({"x": xv, "sizes": np.array([[4.0, 4.0]])}, [out])
    ref, ref_lengths = im2sequence_ref(xv, [2, 2], [1, 1], [0, 0, 0, 0])
    assert lengths == [ref_lengths] == [[12]]
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_bad_shapes_name_the_input():
    x = graphc.data("x", [-1, 10, 6, 7], "float32")
    r = graphc.data("rois", [-1, 4], "float32", lod_level=1)
    with pytest.raises(ShapeError, match="output_channels"):
        layers.psroi_pool(x, r, 3, 1.0, 2, 2)
    with pytest.raises(ShapeError, match="LoD"):
        # not a feed: a feed declared dense is re-typed on the op's demand (seqtype)
        layers.prroi_pool(x, layers.fill_constant([2, 4], "float32", 0.0))
    off = graphc.data("off", [-1, 9, 6, 7], "float32")
    with pytest.raises(ShapeError, match="Offset"):
        layers.deformable_conv(x, off, None, 4, 3, padding=1, modulated=False)
    with pytest.raises(ShapeError, match="ROIs must be"):
        layers.roi_perspective_transform(x, r, 3, 3)
