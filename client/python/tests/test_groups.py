"""new_group and destroy_group: ops on a subgroup, ranks as world ranks,
and what is refused."""

import numpy as np
import pytest

import ccl
from conftest import WORKERS

RANKS = list(range(WORKERS))


@pytest.fixture(scope="module")
def pair(cluster):
    # The last two ranks, in reverse order: group rank 0 is world rank
    # WORKERS-1, so a mix-up of group and world ranks shows.
    with ccl.Client(cluster.coordinator) as c:
        return c.new_group([RANKS[-1], RANKS[-2]])


def test_group_is_known_everywhere(client, pair):
    assert pair.ranks == (RANKS[-1], RANKS[-2])
    names = [g.name for g in client.groups()]
    assert names[0] == "world" and pair.name in names
    assert client.get_group(pair.name) == pair
    assert client.get_world_size(pair) == 2
    for r in RANKS:
        assert pair.name in [g.name for g in client.info(r).groups]


def test_all_reduce_in_group_leaves_others_alone(client, pair):
    with client.from_numpy(lambda r: [r + 1.0], dtype="float32") as t:
        client.all_reduce(t, group=pair)
        got = t.read()
        for r in RANKS:
            expected = sum(x + 1 for x in pair.ranks) if r in pair.ranks \
                else r + 1
            assert got[r][0] == expected, f"rank {r}"


def test_broadcast_src_is_a_world_rank(client, pair):
    src = pair.ranks[1]
    with client.from_numpy(lambda r: [10 * r], dtype="int32") as t:
        client.broadcast(t, src=src, group=pair.name)
        for r in pair.ranks:
            assert t.read(r)[0] == 10 * src


def test_send_in_group(client, pair):
    a, b = pair.ranks
    with client.from_numpy(lambda r: [float(r)] * 2, dtype="float32",
                           ranks=list(pair.ranks)) as t:
        client.send(t, dst=b, src=a, group=pair)
        np.testing.assert_array_equal(t.read(b), [a, a])


def test_all_gather_in_group_is_in_group_rank_order(client, pair):
    with client.from_numpy(lambda r: [float(r)], dtype="float32",
                           ranks=list(pair.ranks)) as x, \
            client.zeros(2, ranks=list(pair.ranks)) as out:
        client.all_gather(out, x, group=pair)
        for r in pair.ranks:
            np.testing.assert_array_equal(out.read(r), list(pair.ranks))


def test_rank_outside_the_group_is_refused(client, pair):
    outsider = [r for r in RANKS if r not in pair.ranks]
    if not outsider:
        pytest.skip("every rank is in the pair on a 2-rank world")
    with client.zeros(1) as t:
        with pytest.raises(ccl.InvalidArgument) as e:
            client.broadcast(t, src=outsider[0], group=pair)
        assert "not a member of group" in str(e.value)


def test_unknown_group(client):
    with pytest.raises(ccl.CclError) as e:
        client.get_group("no-such-group")
    assert e.value.code.name == "NOT_FOUND"


def test_duplicate_group_name(client, pair):
    with pytest.raises(ccl.CclError) as e:
        client.new_group([0, 1], name=pair.name)
    assert e.value.code.name == "ALREADY_EXISTS"


def test_connect_with_a_default_group(cluster, pair):
    with ccl.Client(cluster.coordinator, group=pair.name) as c:
        assert c.get_world_size() == 2
        with c.from_numpy(lambda r: [1.0], dtype="float32") as t:
            c.all_reduce(t)
            for r in pair.ranks:
                assert t.read(r)[0] == 2.0


def test_destroyed_group_is_gone_and_its_name_free(client):
    group = client.new_group(RANKS[:2])
    with client.from_numpy(lambda r: [1.0], dtype="float32") as t:
        client.all_reduce(t, group=group)
        client.destroy_group(group)
        assert group.name not in [g.name for g in client.groups()]
        for r in RANKS:
            assert group.name not in [g.name for g in client.info(r).groups]
        with pytest.raises(ccl.CclError) as e:
            client.all_reduce(t, group=group)
        assert e.value.code.name == "NOT_FOUND", e.value
    with pytest.raises(ccl.CclError) as e:
        client.destroy_group(group.name)
    assert e.value.code.name == "NOT_FOUND"
    assert f"no group named '{group.name}'" in str(e.value)
    with pytest.raises(ccl.InvalidArgument):
        client.destroy_group("world")
    again = client.new_group(list(group.ranks), name=group.name)
    client.destroy_group(again)
