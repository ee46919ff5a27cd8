"""Sequence labelling ops over LoD sequences: linear_chain_crf (the negative log-likelihood
of a linear-chain CRF), crf_decoding (Viterbi) and chunk_eval (chunk precision / recall)."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, InferContext, register
from ...ir.types import FLOAT_DTYPES, TensorType

# chunk_scheme -> (tag types per chunk type, begin, inside, end, single tag; -1: none)
CHUNK_SCHEMES = {"IOB": (2, 0, 1, -1, -1), "IOE": (2, -1, 0, 1, -1),
                 "IOBES": (4, 0, 1, 2, 3), "plain": (1, -1, -1, -1, -1)}


def _emission(c: InferContext, slot: str) -> tuple[TensorType, int]:
    x, w = c.x(slot), c.x("Transition")
    c.check(x.lod_level == 1 and x.rank == 2,
            f"{slot} must be a level-1 LoD value [tokens, tags], got {x}")
    c.check(x.dtype in FLOAT_DTYPES, f"{slot} must be floating point, got {x}")
    d = x.shape[1]
    c.check(w.lod_level == 0 and w.shape == (d + 2, d),
            f"Transition must be [tags + 2, tags] = [{d + 2}, {d}] (start weights, end "
            f"weights, then tag-to-tag weights), got {w}")
    c.check(w.dtype == x.dtype, f"Transition is {w.dtype} but {slot} is {x.dtype}")
    return x, d


def _labels(c: InferContext, slot: str) -> None:
    for t in c.xs(slot):
        c.check(t.lod_level == 1 and t.rank == 2 and t.shape[1] == 1
                and t.dtype in ("int64", "int32"),
                f"{slot} must be a level-1 LoD value of int64 [tokens, 1], got {t}")


def _linear_chain_crf(c: InferContext):
    x, d = _emission(c, "Emission")
    c.check(c.has("Label"), "Label is required")
    _labels(c, "Label")
    return {"Alpha": x, "EmissionExps": x, "TransitionExps": c.x("Transition"),
            "LogLikelihood": TensorType((-1, 1), x.dtype)}


register("linear_chain_crf", "Emission Transition Label", "Alpha EmissionExps TransitionExps "
         "LogLikelihood", {}, infer=_linear_chain_crf, lod_inputs=("Emission", "Label"),
         lod="aware",
         doc="per sequence: log Z - score of the label path (the cost to minimise; Paddle "
             "calls it LogLikelihood); Alpha = the normalised forward variables, "
             "EmissionExps / TransitionExps = exp of the (row-max shifted) weights")


def _crf_decoding(c: InferContext):
    x, _ = _emission(c, "Emission")
    _labels(c, "Label")
    return {"ViterbiPath": TensorType((x.shape[0], 1), "int64", False, 1)}


register("crf_decoding", "Emission Transition Label?", "ViterbiPath", {},
         infer=_crf_decoding, traits=(NO_GRAD,), lod_inputs=("Emission", "Label"),
         lod="aware",
         doc="the highest-scoring tag path of each sequence (Viterbi); with Label: 1 where "
             "the path equals the label, else 0")


def _chunk_eval(c: InferContext):
    _labels(c, "Inference")
    _labels(c, "Label")
    c.check(c["chunk_scheme"] in CHUNK_SCHEMES,
            f"chunk_scheme must be one of {list(CHUNK_SCHEMES)}, got {c['chunk_scheme']!r}")
    c.check(c["num_chunk_types"] >= 1, f"num_chunk_types must be >= 1, got "
                                       f"{c['num_chunk_types']}")
    f, i = TensorType((1,), "float32"), TensorType((1,), "int64")
    return {"Precision": f, "Recall": f, "F1Score": f, "NumInferChunks": i,
            "NumLabelChunks": i, "NumCorrectChunks": i}


# Paddle's output "F1-Score" is F1Score here: slot names in the text form are identifiers
register("chunk_eval", "Inference Label", "Precision Recall F1Score NumInferChunks "
         "NumLabelChunks NumCorrectChunks",
         {"num_chunk_types": "int", "chunk_scheme": ("str", "IOB"),
          "excluded_chunk_types": ("ints", [])},
         infer=_chunk_eval, traits=(NO_GRAD,), lod_inputs=("Inference", "Label"),
         lod="aware",
         doc="chunks of each sequence's tags (label = chunk type * tag types + tag; "
             "num_chunk_types * tag types = outside) compared exactly: precision, recall, F1")
