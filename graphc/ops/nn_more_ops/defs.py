"""data_norm, spectral_norm, cudnn_lstm, hash, cvm, filter_by_instag and load: slots,
attributes and shape rules as Paddle 1.8's ops (cudnn_lstm's flat W layout: its doc)."""

from __future__ import annotations

from ...ir.opdef import INITIALIZER, NO_GRAD, RANDOM, STATEFUL, WHOLE_TENSOR, register
from ...ir.types import FLOAT_DTYPES, TensorType


def _float_x(c, slot):
    t = c.x(slot)
    c.check(t.dtype in FLOAT_DTYPES, f"{slot} must be floating point, got {t.dtype}")
    return t


def _cvm(c):
    x, cvm = _float_x(c, "X"), c.x("CVM")
    c.check(x.rank == 2, f"X must be [N, D], got {list(x.shape)}")
    c.check(cvm.rank == 2 and cvm.shape[1] in (2, -1), f"CVM must be [N, 2], got "
                                                        f"{list(cvm.shape)}")
    d = x.shape[1]
    c.check(d < 0 or d >= 2, f"X {list(x.shape)} needs at least the 2 show/click columns")
    width = d if c["use_cvm"] or d < 0 else d - 2
    return {"Y": TensorType((x.shape[0], width), x.dtype)}


register("cvm", "X CVM", "Y", {"use_cvm": ("bool", True)}, infer=_cvm, grad_reads=("X", "CVM"),
         doc="use_cvm: Y = X with col0 = log(show+1), col1 = log(click+1) - col0; else X "
             "without its first 2 columns. The gradient of those 2 columns is CVM (Paddle's)")


def _hash(c):
    x = c.x("X")
    c.check(x.dtype in ("int32", "int64"), f"X must be int32 or int64, got {x.dtype}")
    c.check(x.rank >= 2, f"X must be [N, ..., K], got {list(x.shape)}")
    c.check(c["num_hash"] >= 1 and c["mod_by"] >= 1,
            f"num_hash {c['num_hash']} and mod_by {c['mod_by']} must be positive")
    return {"Out": TensorType((*x.shape[:-1], c["num_hash"], 1), x.dtype)}


register("hash", "X", "Out", {"num_hash": ("int", 1), "mod_by": ("int", 100000)},
         infer=_hash, traits=(NO_GRAD,), lod_inputs=("X",),
         doc="Out[.., i, 0] = XXH64(bytes of the last-axis row, seed=i) % mod_by, i < num_hash")


def _data_norm(c):
    x = _float_x(c, "X")
    c.check(x.rank == 2, f"X must be [N, C], got {list(x.shape)}")
    ch = x.shape[1]
    stat = "float64" if x.dtype == "float64" else "float32"
    for slot in ("BatchSize", "BatchSum", "BatchSquareSum"):
        t = c.x(slot)
        c.check(t.rank == 1 and (ch < 0 or t.shape[0] in (ch, -1)),
                f"{slot} must be [{ch}] for X {list(x.shape)}, got {list(t.shape)}")
        c.check(t.dtype == stat, f"{slot} must be {stat} for X {x.dtype}, got {t.dtype}")
    slot_dim = c["slot_dim"]
    c.check(slot_dim <= 0 or ch < 0 or ch % slot_dim == 0,
            f"slot_dim {slot_dim} does not divide the {ch} columns of X")
    if c.has("scale_w") or c.has("bias"):
        c.check(c.has("scale_w") and c.has("bias"), "scale_w and bias go together")
        for slot in ("scale_w", "bias"):
            t = c.x(slot)
            c.check(t.rank == 1 and (ch < 0 or t.shape[0] in (ch, -1)),
                    f"{slot} must be [{ch}], got {list(t.shape)}")
    vec = TensorType((ch,), x.dtype)
    out = {"Y": x, "Means": vec, "Scales": vec}
    for slot in ("BatchSize", "BatchSum", "BatchSquareSum"):
        out[slot + "Out"] = c.x(slot)
    return out


register("data_norm", "X BatchSize BatchSum BatchSquareSum scale_w? bias?",
         "Y Means Scales BatchSizeOut? BatchSumOut? BatchSquareSumOut?", {
             "epsilon": ("float", 1e-4), "data_layout": ("str", "NCHW"),
             "slot_dim": ("int", -1), "summary_decay_rate": ("float", 0.9999999),
             "sync_stats": ("bool", False), "enable_scale_and_shift": ("bool", False),
             "is_test": ("bool", False),
         }, infer=_data_norm, traits=(STATEFUL,), lod_inputs=("X",),
         lod_outputs={"Y": ("X",)},
         # the summaries' names hold the updated values once this op ran: the gradient
         # reads the Means and Scales the forward used instead
         grad_reads=("X", "Means", "Scales", "scale_w", "bias"),
         grad_type_from={"BatchSize": "Means", "BatchSum": "Means", "BatchSquareSum": "Means"},
         doc="Y = (X - BatchSum/BatchSize) * sqrt(BatchSize/BatchSquareSum) (then * scale_w + "
             "bias; empty slots 0); training folds the batch statistics of Paddle's "
             "data_norm_grad into the summaries as its GPU kernel: s = s * decay + batch s")


def _spectral_norm(c):
    w, u, v = _float_x(c, "Weight"), c.x("U"), c.x("V")
    dim = c["dim"]
    c.check(w.rank >= 2, f"Weight must have rank >= 2, got {list(w.shape)}")
    c.check(dim in (0, 1), f"dim must be 0 or 1, got {dim}")
    c.check(c["power_iters"] >= 0, f"power_iters must be >= 0, got {c['power_iters']}")
    c.check(c["eps"] > 0, f"eps must be positive, got {c['eps']}")
    h = w.shape[dim]
    rest = [d for i, d in enumerate(w.shape) if i != dim]
    wd = -1 if min(rest) < 0 else _prod(rest)
    c.check(u.rank == 1 and u.shape[0] in (h, -1), f"U must be [{h}], got {list(u.shape)}")
    c.check(v.rank == 1 and v.shape[0] in (wd, -1), f"V must be [{wd}], got {list(v.shape)}")
    return {"Out": w}


def _prod(dims):
    n = 1
    for d in dims:
        n *= d
    return n


register("spectral_norm", "Weight U V", "Out",
         {"dim": ("int", 0), "power_iters": ("int", 1), "eps": ("float", 1e-12)},
         infer=_spectral_norm, traits=(WHOLE_TENSOR,),
         doc="Out = Weight / sigma, sigma = u^T W v after power_iters power iterations from U, "
             "V on W (dim moved first, [h, w]); the gradient holds u and v constant")


def _lstm_weight_size(input_size, hidden, layers, dirs):
    size = 0
    for layer in range(layers):
        width = input_size if layer == 0 else hidden * dirs
        size += dirs * (4 * hidden * width + 4 * hidden * hidden + 8 * hidden)
    return size


def _cudnn_lstm(c):
    x, h0, c0, w = _float_x(c, "Input"), c.x("InitH"), c.x("InitC"), c.x("W")
    hid, layers = c["hidden_size"], c["num_layers"]
    dirs = 2 if c["is_bidirec"] else 1
    c.check(x.rank == 3, f"Input must be [seq_len, batch, input_size], got {list(x.shape)}")
    c.check(hid > 0 and layers > 0, f"hidden_size {hid} and num_layers {layers} must be > 0")
    c.check(x.shape[2] > 0, f"input_size of Input {list(x.shape)} must be known")
    for slot, t in (("InitH", h0), ("InitC", c0)):
        c.check(t.rank == 3 and t.shape[0] in (layers * dirs, -1) and t.shape[2] in (hid, -1)
                and (t.shape[1] < 0 or x.shape[1] < 0 or t.shape[1] == x.shape[1]),
                f"{slot} must be [{layers * dirs}, batch, {hid}] for Input "
                f"{list(x.shape)}, got {list(t.shape)}")
    want = _lstm_weight_size(x.shape[2], hid, layers, dirs)
    c.check(w.rank == 1 and w.shape[0] in (want, -1), f"W must be [{want}], got "
                                                       f"{list(w.shape)}")
    state = TensorType((layers * dirs, x.shape[1], hid), x.dtype)
    masks = TensorType((layers - 1, x.shape[0], x.shape[1], hid * dirs), x.dtype)
    return {"Out": TensorType((x.shape[0], x.shape[1], hid * dirs), x.dtype),
            "LastH": state, "LastC": state, "Reserve": masks}


register("cudnn_lstm", "Input InitH InitC W", "Out LastH LastC Reserve", {
    "max_len": ("int", 20), "hidden_size": "int", "num_layers": ("int", 1),
    "dropout_prob": ("float", 0.0), "is_bidirec": ("bool", False), "is_test": ("bool", False),
    "seed": ("int", -1), "input_size": ("int", 10),
}, infer=_cudnn_lstm, traits=(RANDOM,),
         # the gradient replays the forward with the dropout masks the forward drew (Reserve)
         grad_reads=("Input", "InitH", "InitC", "W", "Reserve"),
         doc="time-major multi-layer (bi)LSTM, gates i f c o; W flat, per layer and direction "
             "[W_x (4H x in), W_h (4H x H), b_x (4H), b_h (4H)]; dropout between layers (its "
             "masks: Reserve)")


def _filter_by_instag(c):
    ins, tag, flt = c.x("Ins"), c.x("Ins_tag"), c.x("Filter_tag")
    want = 1 if c["is_lod"] else 0
    c.check(ins.lod_level == want, f"Ins must {'' if want else 'not '}be a LoD value with "
                                   f"is_lod={c['is_lod']}, got lod_level {ins.lod_level}")
    c.check(ins.rank == 2, f"Ins must be [rows, D], got {list(ins.shape)}")
    c.check(tag.lod_level == 1 and tag.dtype == "int64",
            f"Ins_tag must be an int64 LoD value (the tags of each instance), got "
            f"lod_level {tag.lod_level} {tag.dtype}")
    c.check(flt.dtype == "int64" and (flt.rank == 1 or (flt.rank == 2 and flt.shape[1] == 1)),
            f"Filter_tag must be int64 [F] or [F, 1], got {flt.dtype} {list(flt.shape)}")
    return {"Out": TensorType((-1, ins.shape[1]), ins.dtype, False, 1),
            "LossWeight": TensorType((-1, 1), "float32", False, 1),
            "IndexMap": TensorType((-1, 3), "int64", False, 1)}


register("filter_by_instag", "Ins Ins_tag Filter_tag", "Out LossWeight IndexMap",
         {"is_lod": "bool", "out_val_if_empty": ("int", 0)}, infer=_filter_by_instag,
         lod_inputs=("Ins", "Ins_tag"), lod="aware",
         doc="the instances (rows, or Ins's sequences with is_lod) with a tag in Filter_tag, "
             "as a LoD value; LossWeight 1 and IndexMap [out start, in start, rows] per kept "
             "instance; none kept: one out_val_if_empty row of weight 0. Bound: Ins's rows; "
             "Out's LoD has one (empty) sequence per dropped instance after the kept ones")


def _load(c):
    shape = tuple(c["shape"])
    c.check(bool(shape) and min(shape) > 0, f"shape {list(shape)} must be known and positive "
                                            "(the shape of the Variable loaded into)")
    c.check(c["file_path"] != "", "file_path must be given")
    dtype = "float16" if c["load_as_fp16"] else c["dtype"]
    return {"Out": TensorType(shape, dtype)}


register("load", "", "Out", {"file_path": "str", "load_as_fp16": ("bool", False),
                             "shape": ("ints", []), "dtype": ("dtype", "float32")},
         infer=_load, traits=(INITIALIZER,),
         doc="Out = the LoDTensor in file_path (Paddle's file format) read when the op runs, "
             "cast to float16 with load_as_fp16")
