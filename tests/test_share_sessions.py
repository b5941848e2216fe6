"""Share-session bookkeeping: epochs, limits, incremental changes, rotation."""

import uuid

import pytest

from broker.share.sessions import INT32_MAX, ShareSessionCache, next_epoch, rotated
from protocol.errors import ErrorCode, KafkaError

T = uuid.uuid4()


def codes(fn):
    with pytest.raises(KafkaError) as e:
        fn()
    return e.value.code


def test_open_then_epochs_advance_across_requests():
    c = ShareSessionCache(2)
    s, old = c.open("g", "m", {(T, 0): None})
    assert old is None and s.epoch == 1
    assert c.check_epoch("g", "m", 1) is s
    assert c.advance(s, added={(T, 1): None, (T, 0): None}) == [(T, 1)]
    assert s.epoch == 2 and list(s.partitions) == [(T, 0), (T, 1)]
    assert codes(lambda: c.check_epoch("g", "m", 1)) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert c.check_epoch("g", "m", -1) is s  # close matches any epoch
    c.advance(s, forgotten=[(T, 0)])
    assert list(s.partitions) == [(T, 1)]
    # Added and forgotten in one request: not new (Kafka's ShareSession.update adds, then
    # removes, and answers only what the session still holds).
    assert c.advance(s, added={(T, 2): None}, forgotten=[(T, 2)]) == []
    assert list(s.partitions) == [(T, 1)]


def test_unknown_session_and_acknowledge_cannot_open():
    c = ShareSessionCache(1)
    assert codes(lambda: c.check_epoch("g", "m", 3)) == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert codes(lambda: c.check_epoch("g", "m", -1)) == ErrorCode.SHARE_SESSION_NOT_FOUND
    c.open("g", "m", {})
    assert codes(lambda: c.check_epoch("g", "m", 0, acknowledge=True)) == ErrorCode.INVALID_SHARE_SESSION_EPOCH


def test_limit_refuses_new_sessions_but_allows_reopen():
    c = ShareSessionCache(1)
    first, _ = c.open("g", "a", {})
    assert codes(lambda: c.open("g", "b", {})) == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    again, old = c.open("g", "a", {(T, 0): None})
    assert old is first and again is not first and len(c) == 1
    assert c.close("g", "a") is again and c.get("g", "a") is None
    c.open("g", "b", {})


def test_epoch_wraps_to_one():
    assert next_epoch(INT32_MAX) == 1 and next_epoch(5) == 6


def test_rotation_is_by_epoch_and_skips_open_and_close():
    ps = [1, 2, 3]
    assert rotated(ps, 0) == ps and rotated(ps, -1) == ps
    assert rotated(ps, 1) == [2, 3, 1] and rotated(ps, 3) == ps
    assert {tuple(rotated(ps, e))[0] for e in range(1, 4)} == {1, 2, 3}


def test_partitions_keep_the_topic_name_they_joined_with():
    c = ShareSessionCache(5)
    other = uuid.uuid4()
    s, _ = c.open("g", "m", {(T, 0): "t", (other, 0): None})
    assert c.advance(s, added={(T, 0): None, (T, 1): "t"}) == [(T, 1)]
    assert s.partitions == {(T, 0): "t", (other, 0): None, (T, 1): "t"}
    s.responded({}, [(T, 0)])
    assert list(s.partitions.items()) == [((other, 0), None), ((T, 1), "t"), ((T, 0), "t")]


def test_partitions_that_returned_records_go_to_the_end_of_the_fetch_order():
    c = ShareSessionCache(10)
    s, _ = c.open("g", "m", dict.fromkeys([1, 2, 3]))
    s.responded({}, [1, 4])  # 4: not (or no longer) in the session
    assert list(s.partitions) == [2, 3, 1]
    s.responded({}, [2, 3])
    assert list(s.partitions) == [1, 2, 3]


def test_a_partition_read_with_an_error_is_resent_once_after_it():
    c = ShareSessionCache(10)
    s, _ = c.open("g", "m", dict.fromkeys([1, 2]))
    s.responded({1: 3, 2: 0}, [])
    assert s.resend == {1}
    s.responded({2: 0}, [])  # not read: still owed
    assert s.resend == {1}
    s.responded({1: 0}, [])
    assert s.resend == set()
