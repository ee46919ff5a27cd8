"""Lowering rules for the parameter-server ops (send, send_barrier, recv, fetch_barrier, row pulls
and pushes): ordered host callbacks into the trainer's channel, from the runtime's services.

The backend does not import the runtime: a rule finds the channel (and a server's sum) in
the host services of the Executor building its step, ``c.services`` (runtime/host_services.py:
a trainer's channel is ``services.channel``, set by distributed.pserver.start_trainer on the
process's services). A step that its data checks refuse (a label out of range) exchanges nothing:
every callback also reads whether a check traced before it found a bad element, and then
only drops what the step queued (``drop_step``), so the servers never see the step.
``jax.experimental.io_callback(ordered=True)`` keeps the callbacks in program
order inside the jitted step, and the tokens make the order a data dependency too.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import io_callback

from ...backends.data_checks import refused_so_far, report_invalid
from ...backends.lowering import LoweringError, RuleContext, lowering
from ...backends.selected_rows import SelectedRows
from ..nn.lowering import looked_up_rows

_TOKEN = jax.ShapeDtypeStruct((1,), np.int32)


def _channel(c: RuleContext):
    """The trainer's channel of the services the step is built with: ``send(names, epmap,
    arrays)``, ``send_barrier()``, ``recv(names, epmap, initial=False) -> arrays``,
    ``fetch_barrier()``, ``geo_exchange(spec, olds, xs)``, ``pull(table, ids, keep, width,
    dtype, route) -> rows``, ``send_rows(varnames, epmap, split, sections, rows, values)``,
    ``drop_step()``."""
    services = c.services
    ch = None if services is None else services.channel
    if ch is None:
        raise LoweringError(f"{c.where}: this program exchanges blocks with parameter servers, "
                            "but this process is no parameter-server trainer: get the program "
                            "from DistributeTranspiler.get_trainer_program() (or fleet) in a "
                            "job started by mpirun / graphc launch")
    return ch


def _token() -> np.ndarray:
    return np.ones((1,), np.int32)


def _as_list(x) -> list:
    return list(x) if isinstance(x, list | tuple) else [x]


def _refused():
    """The step's "refused by a data check so far" flag, as a callback argument."""
    flag = refused_so_far()
    return jax.numpy.asarray(False) if flag is None else flag


def _guarded(ch, host, fallback):
    """``host(*args)`` unless the last argument (the refused flag) is set: then the step's
    queued exchange is dropped and ``fallback(*args)`` answers (the step will not commit)."""
    def run(*args):
        if bool(np.asarray(args[-1])):
            ch.drop_step()
            return fallback(*args[:-1])
        return host(*args[:-1])
    return run


@lowering("send")
def _send(c: RuleContext, X):
    ch, names, epmap = _channel(c), list(c["varnames"]), list(c["epmap"])

    def host(*blocks):
        ch.send(names, epmap, [np.asarray(b) for b in blocks])
        return _token()

    run = _guarded(ch, host, lambda *_: _token())
    return {"Out": io_callback(run, _TOKEN, *_as_list(X), _refused(), ordered=True)}


@lowering("send_barrier")
def _send_barrier(c: RuleContext, X):
    ch = _channel(c)

    def host(*tokens):
        ch.send_barrier()
        return _token()

    run = _guarded(ch, host, lambda *_: _token())
    return {"Out": io_callback(run, _TOKEN, *_as_list(X), _refused(), ordered=True)}


@lowering("recv")
def _recv(c: RuleContext, X):
    ch, names, epmap = _channel(c), list(c["varnames"]), list(c["epmap"])
    types, initial = c.out_types["Out"], bool(c["initial"])
    shapes = [jax.ShapeDtypeStruct(t.shape, np.dtype(t.dtype)) for t in types]

    def host(*tokens):
        arrays = ch.recv(names, epmap, initial=initial)
        return [np.asarray(a, s.dtype).reshape(s.shape) for a, s in zip(arrays, shapes)]

    def refused(*tokens):  # the step's new parameters are thrown away: any values do
        return [np.zeros(s.shape, s.dtype) for s in shapes]

    run = _guarded(ch, host, refused)
    return {"Out": list(io_callback(run, shapes, *_as_list(X or []), _refused(),
                                    ordered=True))}


@lowering("fetch_barrier")
def _fetch_barrier(c: RuleContext, X):
    ch = _channel(c)
    xs = _as_list(X)
    shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs]

    def host(*blocks):
        ch.fetch_barrier()
        return list(blocks)

    run = _guarded(ch, host, lambda *blocks: list(blocks))
    return {"Out": list(io_callback(run, shapes, *xs, _refused(), ordered=True))}


@lowering("geo_sgd_exchange")
def _geo_sgd_exchange(c: RuleContext, Old, X):
    ch = _channel(c)
    olds, xs = _as_list(Old), _as_list(X)
    shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs]
    spec = {k: list(c[k]) for k in ("params", "blocks", "starts", "ends", "counts", "epmap")}
    spec.update(push_nums=c["push_nums"], trainers=c["trainers"])
    n = len(xs)

    def host(*arrays):
        return ch.geo_exchange(spec, [np.asarray(a) for a in arrays[:n]],
                               [np.asarray(a) for a in arrays[n:]])

    def refused(*arrays):  # not counted as a local step either
        return [np.asarray(a) for a in arrays[n:]]

    run = _guarded(ch, host, refused)
    return {"Out": list(io_callback(run, shapes, *olds, *xs, _refused(), ordered=True))}


@lowering("distributed_lookup_table")
def _distributed_lookup_table(c: RuleContext, Ids):
    ch, table = _channel(c), c["table_name"]
    height, width, pad = c["height"], c["width"], c["padding_idx"]
    ids = Ids.reshape(Ids.shape[:-1])
    bad = (ids < 0) | (ids >= height)
    if pad != -1:
        bad = bad & (ids != pad)
    padding = f" or padding_idx {pad}" if pad != -1 else ""
    report_invalid(c, "Ids", bad.reshape(Ids.shape), Ids,
                   f"ids in [0, {height}) (the rows of table '{table}'){padding}")
    dtype = np.dtype(c["dtype"])
    flat = ids.reshape(-1)
    shape = jax.ShapeDtypeStruct((flat.shape[0], width), dtype)

    route = {"split": c["split"], "epmap": list(c["epmap"]), "sections": list(c["sections"]),
             "varnames": list(c["varnames"])}

    def host(ids):
        ids = np.asarray(ids, np.int64)
        keep = (ids >= 0) & (ids < height) & (ids != pad)  # the rest read zeros
        return ch.pull(table, ids, keep, width, dtype, route)

    rows = io_callback(host, shape, flat, ordered=True)
    return {"Out": rows.reshape(*ids.shape, width)}


@lowering("distributed_lookup_table_grad")
def _distributed_lookup_table_grad(c: RuleContext, **kw):
    height = c["height"]
    rows, values = looked_up_rows(kw["Ids"], kw["Out@GRAD"], height, c["width"],
                                  np.dtype(c["dtype"]), c["padding_idx"])
    return {"W@GRAD": SelectedRows(rows, values, height)}


@lowering("send_rows")
def _send_rows(c: RuleContext, X):
    ch, names, epmap = _channel(c), list(c["varnames"]), list(c["epmap"])
    split, sections, height = c["split"], list(c["sections"]), X.height

    def host(rows, values):
        rows = np.asarray(rows, np.int64)
        keep = rows < height  # padding rows (row = height) carry nothing
        ch.send_rows(names, epmap, split, sections, rows[keep], np.asarray(values)[keep])
        return _token()

    run = _guarded(ch, host, lambda *_: _token())
    return {"Out": io_callback(run, _TOKEN, X.rows, X.values, _refused(), ordered=True)}


@lowering("ps_server_sum")
def _ps_server_sum(c: RuleContext, X):
    # ``server.server_sum(array) -> array``: a parameter server's all-reduce over every
    # server; serve() runs the server program with services that hold its state
    services = c.services
    server = None if services is None else services.server
    if server is None:
        raise LoweringError(f"{c.where}: sums over every parameter server: run the server "
                            "program with graphc.distributed.pserver.serve (exe.run of it)")
    shape = jax.ShapeDtypeStruct(X.shape, X.dtype)

    def host(x):
        return np.asarray(server.server_sum(np.asarray(x)), shape.dtype).reshape(shape.shape)

    return {"Out": io_callback(host, shape, X, ordered=True)}
