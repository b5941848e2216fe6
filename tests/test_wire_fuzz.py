"""Random well-formed requests of every advertised API and version, against one private broker.

Every field gets a random value of its schema type (names are drawn partly from topics and
groups that exist), so handlers meet what real clients never send: negative counts, partitions
and epochs, nulls where a version allows them, unknown ids, empty names, internal topics. Whatever
comes, the broker answers (a response of the request's API, version and correlation id) or closes
the connection, keeps serving, and logs no traceback. This found a Metadata v10-11 crash and the
deletable share-group topics.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from broker.handlers import REGISTRY
from protocol import messages
from protocol.framing import correlation_id, parse_response
from protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from tests.broker_process import BrokerProcess
from tests.protocol_strategies import message_strategy, schema
from tests.raw_client import RawClient
from tests.test_e2e_share_support import create_topic, produce
from tests.test_server import assert_clean_log, assert_serves

pytestmark = [pytest.mark.e2e, pytest.mark.needs_private_broker]

PRODUCE, SHARE_GROUP_HEARTBEAT = 0, 76
TOPICS = ["fuzz", "__consumer_offsets", "__share_group_state", ""]
GROUPS = ["fuzz-group", ""]
_NAMES = st.one_of(st.sampled_from(TOPICS), st.text(max_size=12))
_GROUPS = st.one_of(st.sampled_from(GROUPS), st.text(max_size=12))
# Field attributes (across all APIs) that get narrower values: names that exist half the time,
# and waits and counts small enough that one request cannot stall or bloat the broker.
OVERRIDES = {
    **{a: _NAMES for a in ("name", "topic", "topic_name", "topic_names", "subscribed_topic_names",
                           "resource_name")},
    **{a: _GROUPS for a in ("group_id", "group_ids", "groups", "groups_names", "key", "coordinator_keys")},
    "max_wait_ms": st.integers(-1, 30),
    "timeout_ms": st.integers(-1, 100),
    "num_partitions": st.integers(-2, 8),
    "count": st.integers(-2, 8),
}
CASES = [(key, v) for key, h in sorted(REGISTRY.items()) for v in range(h.min_version, h.max_version + 1)]


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A broker with a topic holding records and a share group with a member, so that random
    requests also reach the paths of things that exist."""
    b = BrokerProcess(tmp_path_factory.mktemp("fuzz") / "data").start()
    try:
        create_topic(b.bootstrap, "fuzz", 2)
        produce(b.bootstrap, "fuzz", [b"x"] * 6)
        with RawClient(b.bootstrap) as c:
            joined = c.request(SHARE_GROUP_HEARTBEAT, 1, ShareGroupHeartbeatRequest(
                group_id="fuzz-group", member_id="fuzz-member-0000000000000000", member_epoch=0,
                subscribed_topic_names=["fuzz"]))
            assert joined.error_code == 0
        yield b
    finally:
        b.kill()


@pytest.mark.parametrize("api_key,version", CASES, ids=[f"{messages.APIS[k][1]}-v{v}" for k, v in CASES])
def test_random_requests_are_answered_or_closed_cleanly(target, api_key, version):
    strategy = message_strategy(schema("message", messages.APIS[api_key][1]), version, overrides=OVERRIDES)

    # Derandomized: the same examples every run (exploration ran with 200 per case, clean).
    @settings(max_examples=25, derandomize=True, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(request=strategy)
    def one(request):
        with RawClient(target.bootstrap, timeout_s=15) as c:
            try:
                frame = c.frame(api_key, version, request)
            except (TypeError, ValueError, OverflowError, AttributeError):
                return  # a value our own encoder refuses for this version: not a request
            c.send_raw(frame)
            if api_key == PRODUCE and request.acks == 0:
                return  # no response by design
            try:
                response = c.recv_frame()
            except ConnectionError:
                return  # a clean close is an answer too
            assert correlation_id(response) == c._correlation
            parse_response(response, api_key, version)

    one()
    assert target.alive()
    assert_serves(target.bootstrap)
    assert_clean_log(target)


def test_share_group_still_serves_after_the_fuzz(target):
    """Runs after the cases above (file order): a new member joins the group and is persisted,
    whatever the random requests did to topics, configs and the group."""
    with RawClient(target.bootstrap) as c:
        joined = c.request(SHARE_GROUP_HEARTBEAT, 1, ShareGroupHeartbeatRequest(
            group_id="fuzz-group", member_id="fuzz-member-0000000000000001", member_epoch=0,
            subscribed_topic_names=["fuzz"]))
    assert joined.error_code == 0, joined
    assert_clean_log(target)
