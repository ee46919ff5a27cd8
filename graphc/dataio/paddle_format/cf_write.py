"""graphc's cond / case / switch_case, ifelse and recurrent ops in Paddle's block structure:
conditional_block sub-blocks (merged by select_input, or IfElse's merge_lod_tensor), recurrent."""

from __future__ import annotations

from ...ir.errors import ProgramError


def _fresh(desc, stem: str) -> str:
    """A variable name no block of ``desc`` declares yet."""
    taken = {v.name for b in desc.blocks for v in b.vars}
    k = 0
    while f"{stem}.pd_{k}" in taken:
        k += 1
    return f"{stem}.pd_{k}"


def _visible(desc, bd) -> set[str]:
    """Names declared in ``bd`` and the blocks around it (a sub-block's ops see them)."""
    names, idx = set(), bd.idx
    while idx >= 0:
        names |= {v.name for v in desc.blocks[idx].vars}
        idx = desc.blocks[idx].parent_idx if idx else -1
    return names


def _declare(desc, bd, stem: str, dtype: str, shape, lod_level: int = 0) -> str:
    from .program_desc import _LOD_TENSOR
    from .tensor_stream import DTYPE_NUMBERS
    name = _fresh(desc, stem)
    v = bd.vars.add(name=name)
    v.type.type = _LOD_TENSOR
    v.type.lod_tensor.tensor.data_type = DTYPE_NUMBERS[dtype]
    v.type.lod_tensor.tensor.dims.extend(list(shape))
    if lod_level:
        v.type.lod_tensor.lod_level = lod_level
    return name


class _Writer:
    """Ops appended to block ``bd`` of ``desc`` for the region op ``op``."""

    def __init__(self, desc, bd, op):
        self.desc, self.bd, self.op, self.role = desc, bd, op, getattr(op, "role", None)
        self.stem = (op.output_arg_names or [op.type])[0]
        self.shapes: dict[str, tuple] = {}  # the variables it declares

    def shape_of(self, name: str) -> tuple:
        if name in self.shapes:
            return self.shapes[name]
        return tuple(self.op.block.var(name).shape or (1,))

    def emit(self, type_, ins, attrs=None, dtype="bool", shape=None) -> str:
        """``type_``'s one output, a new variable; its shape (one element: predicates, the
        mask) the broadcast of the inputs' ([1] and [1, 1] give [1, 1])."""
        from .program_desc import _write_op
        if shape is None:
            shape = max((self.shape_of(n) for ns in ins.values() for n in ns), key=len)
        out = _declare(self.desc, self.bd, self.stem, dtype, shape)
        self.shapes[out] = tuple(shape)
        _write_op(self.bd, type_, ins, {"Out": [out]}, attrs or {}, self.role)
        return out

    def const(self, value: int, dtype: str) -> str:
        return self.emit("fill_constant", {}, {"shape": [1], "dtype": dtype,
                                               "value": float(value)}, dtype, (1,))

    def int32(self, b: str) -> str:
        return self.emit("cast", {"X": [b]}, {"in_dtype": "bool", "out_dtype": "int32"},
                         "int32")

    def sub_block(self):
        index = len(self.desc.blocks)
        return self.desc.blocks.add(idx=index, parent_idx=self.bd.idx)

    def body(self, text: str, rename: dict):
        """The region's ops as a Program (variables named as Paddle's in-place style
        names them), its inputs and ops renamed by ``rename`` (body name -> outer name)."""
        from ...ir.to_program import graph_to_program
        from ...ops.scan.defs import body_graph
        graph = body_graph(text)
        program = graph_to_program(graph)
        block = program.global_block()
        for o in block.ops:
            o.inputs = {s: [rename.get(n, n) for n in ns] for s, ns in o.inputs.items()}
            o.outputs = {s: [rename.get(n, n) for n in ns] for s, ns in o.outputs.items()}
        return graph, block

    def fill(self, sd, block, rename: dict, write_ops) -> set[str]:
        """Declare ``block``'s own variables in ``sd`` and write its ops; the outer names
        its ops write in place."""
        from .program_desc import _var_desc
        outer = _visible(self.desc, self.bd)
        for var in block.vars.values():
            if rename.get(var.name, var.name) not in outer:
                _var_desc(sd, var)
        write_ops(self.desc, sd, block.ops)
        return {n for o in block.ops for n in o.output_arg_names if n in outer}


def write_branches(desc, bd, op, write_ops) -> None:
    """cond / case / switch_case as Paddle writes cond: one conditional_block per branch, run
    when the mask (cond: cast(pred); else the index of the branch taken) selects it, each
    copying its results into variables of its own, and one select_input per result. Paddle's
    cond is written as Paddle writes it (Cond pred and logical_not(pred)); the branches of
    case and switch_case run under equal(mask, k) (cf_read.py reads both forms back)."""
    w = _Writer(desc, bd, op)
    ins, outs = op.inputs, list(op.outputs.get("Out", []))
    inputs = list(ins.get("Input", []))
    if op.type == "cond":
        pred = ins["Cond"][0]
        conds = [w.emit("logical_not", {"X": [pred]}), pred]
        mask = w.int32(pred)
        texts = [op.attrs["false_body"], op.attrs["true_body"]]
    else:
        if op.type == "case":
            taken, none = [], None  # branch k: Conds[k] and no earlier one
            for c in ins["Conds"]:
                taken.append(c if none is None else w.emit("logical_and",
                                                             {"X": [c], "Y": [none]}))
                n = w.emit("logical_not", {"X": [c]})
                none = n if none is None else w.emit("logical_and", {"X": [none], "Y": [n]})
        else:  # switch_case: the keys are distinct, so at most one equal holds
            index = ins["Index"][0]
            dtype = op.block.var(index).dtype
            taken = [w.emit("equal", {"X": [index], "Y": [w.const(k, dtype)]})
                     for k in op.attrs["keys"]]
            none = None
            for e in taken:
                n = w.emit("logical_not", {"X": [e]})
                none = n if none is None else w.emit("logical_and", {"X": [none], "Y": [n]})
        taken.append(none)
        mask = None
        for k, e in enumerate(taken[1:], 1):  # mask = sum of k * taken[k]
            term = w.emit("scale", {"X": [w.int32(e)]}, {"scale": float(k)}, "int32")
            mask = term if mask is None else w.emit("elementwise_add",
                                                    {"X": [mask], "Y": [term]}, {}, "int32")
        conds = [w.emit("equal", {"X": [mask], "Y": [w.const(k, "int32")]})
                 for k in range(len(taken))]
        texts = list(op.attrs["branches"])
    types = [op.block.var(n) for n in outs]
    arrays = [t.name for t in types if t.is_array or t.shape is None]
    if arrays:
        raise ProgramError(f"{op.where}: {op.type} gives tensor array(s) {arrays}; graphc "
                           "writes conditionals over tensors only in Paddle's format")
    results = []
    for cond, text in zip(conds, texts):
        sd = w.sub_block()
        graph, block = w.body(text, {})
        rename = {v.var.name: n for v, n in zip(graph.inputs, inputs) if v.var.name != n}
        if rename:
            graph, block = w.body(text, rename)
        mine = [_declare(desc, bd, w.stem, t.dtype, t.shape or ()) for t in types]
        written = w.fill(sd, block, rename, write_ops)
        from .program_desc import _write_op
        for v, r in zip(graph.outputs, mine):
            _write_op(sd, "assign", {"X": [rename.get(v.var.name, v.var.name)]},
                      {"Out": [r]}, {}, w.role)
        scope = _fresh(desc, f"{w.stem}.scope")
        bd.vars.add(name=scope).type.type = _step_scopes()
        _raw(bd, "conditional_block", {"Cond": [cond], "Input": inputs},
             {"Out": mine + sorted(written - set(mine)), "Scope": [scope]},
             {"sub_block": sd.idx, "is_scalar_condition": True}, w.role)
        results.append(mine)
    for j, out in enumerate(outs):
        _raw(bd, "select_input", {"X": [r[j] for r in results], "Mask": [mask]},
             {"Out": [out]}, {}, w.role)


def write_ifelse(desc, bd, op, write_ops) -> None:
    """graphc's ifelse as Paddle 1.8's IfElse writes it (ifelse26): split_lod_tensor of each
    row input by the condition, one conditional_block per side (``is_scalar_condition``
    False: it runs whenever the condition has rows) computing on its side's rows and copying
    its results into variables of its own, then one merge_lod_tensor per result, with the
    condition as ``x`` as Paddle's IfElse merges."""
    from .program_desc import _write_op
    w = _Writer(desc, bd, op)
    cond = op.inputs["Cond"][0]
    xs, consts = list(op.inputs.get("X", [])), list(op.inputs.get("Input", []))
    outs = list(op.outputs.get("Out", []))
    sides: dict[bool, list[str]] = {True: [], False: []}
    for x in xs:
        v = op.block.var(x)
        for side in (True, False):
            # a side is a LoD value: the rows taken, one per sequence (split_lod_tensor)
            sides[side].append(_declare(desc, bd, f"{x}.{'true' if side else 'false'}",
                                        v.dtype, v.shape or (), lod_level=1))
        _write_op(bd, "split_lod_tensor", {"X": [x], "Mask": [cond]},
                  {"OutTrue": [sides[True][-1]], "OutFalse": [sides[False][-1]]},
                  {"level": 0}, w.role)
    types = [op.block.var(n) for n in outs]
    results = {}
    for side, text in ((True, op.attrs["true_body"]), (False, op.attrs["false_body"])):
        graph, _ = w.body(text, {})
        rename = {v.var.name: n for v, n in zip(graph.inputs, [*sides[side], *consts])
                  if v.var.name != n}
        graph, block = w.body(text, rename)
        sd = w.sub_block()
        mine = [_declare(desc, bd, w.stem, t.dtype, t.shape or (), lod_level=1) for t in types]
        w.fill(sd, block, rename, write_ops)
        rows = set(sides[side])  # values computed from the side's rows are LoD values too
        for o in block.ops:
            if rows & set(o.input_arg_names):
                rows |= set(o.output_arg_names)
        for v in sd.vars:
            if v.name in rows and v.type.type == _lod_tensor():
                v.type.lod_tensor.lod_level = 1
        for v, r in zip(graph.outputs, mine):
            _write_op(sd, "assign", {"X": [rename.get(v.var.name, v.var.name)]},
                      {"Out": [r]}, {}, w.role)
        scope = _fresh(desc, f"{w.stem}.scope")
        bd.vars.add(name=scope).type.type = _step_scopes()
        _raw(bd, "conditional_block", {"Cond": [cond], "Input": [*sides[side], *consts]},
             {"Out": mine, "Scope": [scope]},
             {"sub_block": sd.idx, "is_scalar_condition": False}, w.role)
        results[side] = mine
    for j, out in enumerate(outs):
        _write_op(bd, "merge_lod_tensor", {"X": [cond], "Mask": [cond],
                                           "InTrue": [results[True][j]],
                                           "InFalse": [results[False][j]]},
                  {"Out": [out]}, {"level": 0}, w.role)

def write_recurrent(desc, bd, op, write_ops) -> None:
    """graphc's recurrent op as Paddle 1.8's StaticRNN writes it: the step in a sub-block
    where each step input's slice has its sequence's name, each memory its ``ex_states``
    name; rnn_memory_helper copies give the ``states`` and the step outputs (named like the
    stacked outputs outside)."""
    from .tensor_stream import DTYPE_NUMBERS
    w = _Writer(desc, bd, op)
    ins = op.inputs
    seqs, inits = list(ins.get("inputs", [])), list(ins.get("initial_states", []))
    params, outs = list(ins.get("parameters", [])), list(op.outputs.get("outputs", []))
    graph, _ = w.body(op.attrs["body"], {})
    names = [v.var.name for v in graph.inputs]
    m, s = len(inits), len(seqs)
    pre, slices, consts = names[:m], names[m:m + s], names[m + s:]
    clash = sorted(set(seqs) & (set(params) | set(pre)))
    if clash:
        raise ProgramError(f"{op.where}: the recurrent step reads {clash} both as a step input "
                           "and whole: Paddle names a step input's slice like its sequence, "
                           "so this step cannot be written in Paddle's format")
    rename = {a: b for a, b in [*zip(slices, seqs), *zip(consts, params)] if a != b}
    graph, block = w.body(op.attrs["body"], rename)
    sd = w.sub_block()
    for v, name in zip(graph.inputs[m:m + s], seqs):  # the slices, under their sequences' names
        _declare_slice(sd, name, v.type)
    w.fill(sd, block, rename, write_ops)
    states = []
    for j, v in enumerate(graph.outputs):
        src = rename.get(v.var.name, v.var.name)
        if j < m:
            dst = _declare(desc, sd, f"{pre[j]}.state", v.type.dtype, v.type.shape)
            states.append(dst)
        else:
            dst = outs[j - m]
            _declare_slice(sd, dst, v.type)
        _raw(sd, "rnn_memory_helper", {"X": [src]}, {"Out": [dst]},
             {"dtype": DTYPE_NUMBERS[v.type.dtype]}, w.role)
    scope = _fresh(desc, f"{w.stem}.scope")
    bd.vars.add(name=scope).type.type = _step_scopes()
    _raw(bd, "recurrent", {"inputs": seqs, "initial_states": inits, "parameters": params},
         {"outputs": outs, "step_scopes": [scope]},
         {"sub_block": sd.idx, "has_states": bool(m), "ex_states": pre, "states": states,
          "reverse": False, "is_train": False}, w.role)


def _declare_slice(sd, name: str, t) -> None:
    from .program_desc import _LOD_TENSOR
    from .tensor_stream import DTYPE_NUMBERS
    v = sd.vars.add(name=name)
    v.type.type = _LOD_TENSOR
    v.type.lod_tensor.tensor.data_type = DTYPE_NUMBERS[t.dtype]
    v.type.lod_tensor.tensor.dims.extend(list(t.shape))


def _lod_tensor() -> int:
    from .program_desc import _LOD_TENSOR
    return _LOD_TENSOR


def _step_scopes() -> int:
    from .program_desc import _STEP_SCOPES
    return _STEP_SCOPES


def _raw(bd, type_, inputs, outputs, attrs, role) -> None:
    """An op graphc has no definition of (Paddle's own control-flow ops), attributes typed
    by their Python values."""
    from .program_desc import _ROLE_NUMBERS, _T, _op_desc
    od = _op_desc(bd, type_, inputs, outputs, {})
    for name, value in attrs.items():
        if name == "sub_block":
            od.attrs.add(name=name, type=_T["BLOCK"], block_idx=value)
        elif isinstance(value, bool):
            od.attrs.add(name=name, type=_T["BOOLEAN"], b=value)
        elif isinstance(value, int):
            od.attrs.add(name=name, type=_T["INT"], i=value)
        else:
            od.attrs.add(name=name, type=_T["STRINGS"]).strings.extend(value)
    od.attrs.add(name="op_role", type=_T["INT"], i=_ROLE_NUMBERS.get(role or "forward", 0))
