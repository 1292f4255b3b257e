"""The client's view of the world while the coordinator does not know every
worker (it restarted a moment ago and they have not re-registered yet),
without a cluster: the chaos harness (tests/chaos) found clients failing
every call with INVALID_ARGUMENT "rank 0 is out of range; the world has 4
ranks" then, and tensor() dying of a KeyError."""

import grpc
import pytest

import ccl
from ccl.v1 import coordinator_pb2


def world(generation, ranks, size=4, state=coordinator_pb2.WORLD_STATE_COMPLETE):
    w = coordinator_pb2.World(generation=generation, world_size=size,
                              state=state)
    for r in ranks:
        w.members.add(rank=r, address=f"10.0.0.{r}:{5000 + generation}")
    return w


def client_with(view):
    c = ccl.Client.__new__(ccl.Client)
    c._world = view
    c._closed = False
    return c


def test_members_the_new_view_lacks_are_kept():
    c = client_with(world(7, [0, 1, 2, 3]))
    forming = world(0, [2], state=coordinator_pb2.WORLD_STATE_FORMING)
    merged = c._merged(forming)
    assert [m.rank for m in merged.members] == [0, 1, 2, 3]
    # The new view wins where it has the rank; the rest are as known.
    assert merged.members[2].address == "10.0.0.2:5000"
    assert merged.members[0].address == "10.0.0.0:5007"
    assert merged.generation == 0


def test_a_replaced_worker_comes_in_under_its_new_address():
    c = client_with(world(7, [0, 1, 2, 3]))
    c._world = c._merged(world(8, [0, 1, 2, 3]))
    assert c._member(1).address == "10.0.0.1:5008"


def test_a_smaller_world_is_taken_as_is():
    c = client_with(world(7, [0, 1, 2, 3]))
    shrunk = c._merged(world(8, [0, 1, 2], size=3))
    assert [m.rank for m in shrunk.members] == [0, 1, 2]


def test_a_rank_with_no_worker_yet_is_unavailable_not_out_of_range():
    c = client_with(world(0, [0, 2], state=coordinator_pb2.WORLD_STATE_FORMING))
    with pytest.raises(ccl.CclError) as e:
        c._member(1)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert "rank 1 has no worker" in e.value.details
    assert "WORLD_STATE_FORMING" in e.value.details
    with pytest.raises(ccl.InvalidArgument):
        c._member(4)
    # The world group is every rank, known or not: an op "on the world"
    # must never go to fewer ranks.
    assert c._world_ranks() == [0, 1, 2, 3]
