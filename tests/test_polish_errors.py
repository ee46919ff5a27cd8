"""Bad input to LoDTensor, DataLoader, scopes and the parameter-server modules raises a graphc
error naming the culprit, never a raw numpy/jax ValueError or TypeError.
"""

from __future__ import annotations

import numpy as np
import pytest
from graphc.io import DataLoader, DataLoaderError

import graphc as fluid
from graphc.ir.errors import GraphcError
from graphc.runtime.lod import LoDError, LoDTensor, create_random_int_lodtensor
from graphc.runtime.scope import Scope, ScopeError

# -- LoDTensor --------------------------------------------------------------------------------


def test_lodtensor_set_ragged_list_is_a_lod_error():
    t = LoDTensor()
    with pytest.raises(LoDError, match="LoDTensor.set: the value is not a rectangular"):
        t.set([[1, 2], [3]])


@pytest.mark.parametrize("lengths, says", [
    ([[1], [2, 3]], "level 1 has 2 lengths but level 0's lengths sum to 1"),
    ([[], [1]], "level 1 has 1 lengths but level 0's lengths sum to 0"),
])
def test_set_recursive_sequence_lengths_refuses_levels_that_disagree(lengths, says):
    t = LoDTensor()
    with pytest.raises(LoDError, match=says):
        t.set_recursive_sequence_lengths(lengths)
    assert t.recursive_sequence_lengths() == []


def test_rows_are_checked_later_as_paddle():
    # Paddle's test_lod_tensor: lengths are accepted before the data, then judged against it
    t = LoDTensor()
    t.set_recursive_sequence_lengths([[2, 3], [1, 3, 1, 2, 2]])
    t.set(np.zeros([8, 1], np.float32))
    assert not t.has_valid_recursive_sequence_lengths()
    t.set_recursive_sequence_lengths([[2, 3], [1, 3, 1, 2, 1]])
    assert t.has_valid_recursive_sequence_lengths()
    assert t.recursive_sequence_lengths() == [[2, 3], [1, 3, 1, 2, 1]]


def test_set_lod_checks_offsets_against_the_data():
    t = LoDTensor()
    t.set(np.zeros([5, 1], np.float32))
    with pytest.raises(LoDError, match="last level's lengths sum to 6 but the tensor has 5"):
        t.set_lod([[0, 2, 6]])
    with pytest.raises(LoDError, match="must start at 0"):
        t.set_lod([[1, 2, 5]])
    with pytest.raises(LoDError, match="level 1 has 2 lengths but level 0's lengths sum to 1"):
        t.set_lod([[0, 1], [0, 2, 5]])
    t.set_lod([[0, 2, 5]])
    assert t.recursive_sequence_lengths() == [[2, 3]]
    assert t.has_valid_recursive_sequence_lengths()


def test_create_random_int_lodtensor_low_above_high():
    with pytest.raises(LoDError, match="low=5 is greater than high=1"):
        create_random_int_lodtensor([[2, 3]], [1], low=5, high=1)
    t = create_random_int_lodtensor([[2, 3]], [1], low=4, high=4)  # inclusive, as Paddle
    np.testing.assert_array_equal(np.array(t), np.full([5, 1], 4, np.int64))


# -- DataLoader -------------------------------------------------------------------------------

def _feed_list():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        return [fluid.data("x", [-1, 4])]


def test_dataloader_capacity_not_an_int():
    with pytest.raises(DataLoaderError, match="capacity must be an int of at least 1, got 'a'"):
        DataLoader.from_generator(_feed_list(), capacity="a")


@pytest.mark.parametrize("method", ["set_batch_generator", "set_sample_list_generator",
                                    "set_sample_generator"])
def test_dataloader_reader_must_be_callable(method):
    loader = DataLoader.from_generator(_feed_list(), capacity=2)
    args = (3, 2) if method == "set_sample_generator" else (3,)
    with pytest.raises(DataLoaderError, match=f"{method}: reader must be a callable.*got a int"):
        getattr(loader, method)(*args)


# -- scopes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value, kind", [("x", "str"), ([[1, 2], [3]], "list"),
                                         (object(), "object")])
def test_scope_setitem_non_numeric_is_a_scope_error(value, kind):
    scope = Scope()
    scope["w"] = np.ones([2], np.float32)
    with pytest.raises(ScopeError, match=f"variable 'w': cannot hold a {kind}"):
        scope["w"] = value
    np.testing.assert_array_equal(scope["w"], np.ones([2], np.float32))  # unchanged


def test_tensor_set_non_numeric_is_a_scope_error():
    scope = Scope()
    with pytest.raises(ScopeError, match="variable 'b': cannot hold a str"):
        scope.var("b").get_tensor().set("abc", fluid.CPUPlace())
    assert "b" not in scope
    assert issubclass(ScopeError, GraphcError)


# -- the parameter-server package -------------------------------------------------------------

def test_pserver_fleet_errors_are_graphcs_own():
    import graphc.distributed.fleet as dfleet
    import graphc.strategy as gstrategy
    from graphc.fluid.incubate.fleet.parameter_server import distribute_transpiler as ps
    assert ps.FleetError is dfleet.FleetError
    assert ps.distributed_strategy.StrategyError is gstrategy.StrategyError
    with pytest.raises(gstrategy.StrategyError, match="block_size"):
        ps.StrategyFactory.create_sync_strategy().set_program_config({"block_size": 1})


def test_pserver_bad_collective_timeout_is_a_pserver_error(monkeypatch):
    from graphc.distributed import watchdog
    from graphc.distributed.programs import ServerInfo, ServerProgram
    from graphc.distributed.pserver.protocol import PServerError
    from graphc.distributed.pserver.server import serve

    program = ServerProgram(fluid.Program(), ServerInfo("127.0.0.1:1", ("127.0.0.1:1",), 0, 1))
    monkeypatch.setenv(watchdog.ENV, "soon")
    with pytest.raises(PServerError, match=f"{watchdog.ENV} must be a number of seconds.*'soon'"):
        serve(program)


# -- the batch converters DataFeeder and the DataLoader share ---------------------------------

def test_lod_column_is_public_and_shared():
    from graphc.loader_epoch import to_lod_tensor

    from graphc.runtime.feed_columns import Column, LoDColumn, column_for
    from graphc.runtime.feeds import FeedError
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        words = fluid.data("words", [-1, 2], "float32", lod_level=2)
        label = fluid.data("label", [-1, 1], "int64")
    assert isinstance(column_for(words), LoDColumn) and type(column_for(label)) is Column
    samples = [[[[1, 2], [3, 4]], [[5, 6]]], [[[7, 8]]]]  # 2 sequences of sub-sequences
    direct = column_for(words).batch(samples)
    fed = fluid.DataFeeder([words, label], fluid.CPUPlace(), program=main).feed(
        [(s, [i]) for i, s in enumerate(samples)])["words"]
    loaded = to_lod_tensor(samples, words, "batch 0")
    want = np.arange(1, 9, dtype=np.float32).reshape(4, 2)
    for t in (direct, fed, loaded):
        np.testing.assert_array_equal(np.array(t), want)
        assert t.recursive_sequence_lengths() == [[2, 1], [2, 1, 1]]
    with pytest.raises(FeedError, match="'words', sample 0: lod_level=2 expects nested seq"):
        column_for(words).batch([[1.0, 2.0]])
