"""Sequence labelling layers over LoD sequences (Fluid's ``linear_chain_crf``,
``crf_decoding`` and ``chunk_eval``), with Paddle 1.8's signatures and transition layout."""

from __future__ import annotations

from ..build.param_attr import ParamAttr
from ..ir.errors import ProgramError
from .helper import LayerHelper, check_variable


def _no_length(layer: str, length) -> None:
    if length is not None:
        raise ProgramError(f"{layer}: length= (padded [batch, max_len] input) is not "
                           "supported; give a LoD input (lod_level=1) instead")


def linear_chain_crf(input, label, param_attr=None, length=None):
    """The linear-chain CRF cost of each sequence: log Z - score(label path), [N, 1] (Paddle
    calls it the log-likelihood; minimise its mean). ``input`` [T, D] emissions and ``label``
    [T, 1] int64, both LoD. Transition parameter [D + 2, D]: start weights, end weights,
    then tag-to-tag weights (name it with ``param_attr`` to share it with crf_decoding)."""
    check_variable("linear_chain_crf", "input", input)
    check_variable("linear_chain_crf", "label", label)
    _no_length("linear_chain_crf", length)
    helper = LayerHelper("linear_chain_crf")
    size = input.shape[1]
    transition = helper.create_parameter(param_attr, [size + 2, size], input.dtype)
    outs = {slot: helper.create_variable_for_type_inference(input.dtype)
            for slot in ("Alpha", "EmissionExps", "TransitionExps", "LogLikelihood")}
    helper.append_op("linear_chain_crf", {"Emission": input, "Transition": transition,
                                          "Label": label}, outs)
    return outs["LogLikelihood"]


def crf_decoding(input, param_attr, label=None, length=None):
    """The Viterbi tag path [T, 1] int64 (LoD) of each sequence of emissions ``input`` under
    the transition parameter named by ``param_attr`` (linear_chain_crf's). With ``label``:
    1 where the path equals the label, 0 elsewhere."""
    check_variable("crf_decoding", "input", input)
    _no_length("crf_decoding", length)
    attr = ParamAttr.to_attr(param_attr)
    name = getattr(attr, "name", None)
    helper = LayerHelper("crf_decoding")
    block = helper.main_program.global_block()
    if not name or not block.has_var(name):
        raise ProgramError(f"crf_decoding: param_attr must name an existing transition "
                           f"parameter (linear_chain_crf's), got {param_attr!r}")
    ins = {"Emission": input, "Transition": block.var(name)}
    if label is not None:
        ins["Label"] = check_variable("crf_decoding", "label", label)
    path = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("crf_decoding", ins, {"ViterbiPath": path})
    return path


def chunk_eval(input, label, chunk_scheme, num_chunk_types, excluded_chunk_types=None,
               seq_length=None):
    """Chunk-level precision, recall and F1 of predicted tags ``input`` against ``label``
    (both [T, 1] int64 LoD; tag = chunk type * tag types + tag, scheme IOB, IOE, IOBES or
    plain). Returns (precision, recall, f1_score, num_infer_chunks, num_label_chunks,
    num_correct_chunks)."""
    check_variable("chunk_eval", "input", input)
    check_variable("chunk_eval", "label", label)
    if seq_length is not None:
        raise ProgramError("chunk_eval: seq_length= (padded input) is not supported; give "
                           "LoD inputs (lod_level=1) instead")
    helper = LayerHelper("chunk_eval")
    outs = {}
    for slot, dtype in (("Precision", "float32"), ("Recall", "float32"),
                        ("F1Score", "float32"), ("NumInferChunks", "int64"),
                        ("NumLabelChunks", "int64"), ("NumCorrectChunks", "int64")):
        outs[slot] = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("chunk_eval", {"Inference": input, "Label": label}, outs,
                     {"num_chunk_types": int(num_chunk_types), "chunk_scheme": chunk_scheme,
                      "excluded_chunk_types": [int(t) for t in excluded_chunk_types or []]})
    return tuple(outs.values())


__all__ = ["chunk_eval", "crf_decoding", "linear_chain_crf"]
