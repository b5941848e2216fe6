"""The metrics endpoint of a subprocess broker, scraped over HTTP after real traffic: every
share-group series shows exactly what the requests did (records acknowledged by type,
acquisition-lock timeouts, in-flight and acquired records, KIP-1226 lag, groups by state,
members, share sessions) and the request metrics count each API's requests and bytes. And
with no ``--metrics-port`` the broker opens no port but its listener.
"""

from __future__ import annotations

import os
import time
import urllib.request

import pytest

from protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from tests.broker_process import BrokerProcess
from tests.raw_client import RawClient
from tests.test_metrics import samples
from tests.test_share_wire_support import (
    ACCEPT,
    GAP,
    RELEASE,
    REJECT,
    RENEW,
    SHORT_LOCKS,
    ShareMember,
    all_acquired,
    create_topic,
    new_member_id,
    parts,
    produce_batches,
    unique,
)

pytestmark = pytest.mark.needs_private_broker

SHARE_GROUP_HEARTBEAT = 76


@pytest.fixture
def start_broker(tmp_path):
    made: list[BrokerProcess] = []

    def start(extra_args=(), overrides=None) -> BrokerProcess:
        b = BrokerProcess(tmp_path / f"data{len(made)}", overrides, extra_args=list(extra_args))
        made.append(b)
        return b.start()

    yield start
    for b in made:
        b.kill()


def scrape(broker: BrokerProcess) -> dict:
    host, port = broker.metrics_address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        return samples(resp.read().decode())


def value(got: dict, name: str, **labels) -> float:
    return got[(name, frozenset(labels.items()))]


def heartbeat(client: RawClient, group: str, member: str, epoch: int, topics=None):
    resp = client.request(SHARE_GROUP_HEARTBEAT, 1, ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics))
    assert resp.error_code == 0, (resp.error_code, resp.error_message)
    return resp


def test_share_consumption_shows_up_exactly_in_the_metrics(start_broker, topic_name):
    broker = start_broker(["--metrics-port", "0"], SHORT_LOCKS)
    assert broker.metrics_address[0] == "127.0.0.1"
    group, idle_group = unique("g"), unique("idle")
    with RawClient(broker.bootstrap) as admin:
        tid = create_topic(admin, topic_name)  # CreateTopics + Metadata
        tp = (tid, 0)
        heartbeat(admin, group, new_member_id(), 0, [topic_name])  # stays: Stable, 1 member
        leaver = new_member_id()
        heartbeat(admin, idle_group, leaver, 0, [topic_name])
        heartbeat(admin, idle_group, leaver, -1)  # left: Empty, 0 members
        a = ShareMember(broker.bootstrap, group)
        b = ShareMember(broker.bootstrap, group)
        try:
            a.open([tp])  # loads the share partition at the log end (0)
            produce_batches(admin, topic_name, [4, 6])  # offsets 0-3 and 4-9, two Produce requests
            assert all_acquired(a.fetch()) == {tp: [(0, 9, 1)]}
            resp = a.acknowledge({tp: [(0, 3, [ACCEPT]), (4, 9, [ACCEPT, ACCEPT, RELEASE, REJECT, ACCEPT, GAP])]})
            assert parts(resp)[tp].error_code == 0
            # 0-5 and 8 acknowledged, 7 and 9 archived, 6 available again: SPSO 6, three terminal
            # records after it (7, 8, 9), log end 10 -> lag 10 - 6 - 3 = 1; in flight 6-9.
            got = scrape(broker)
            labels = dict(group=group, topic=topic_name, partition="0")
            for ack_type, n in (("Accept", 7), ("Release", 1), ("Reject", 1), ("Gap", 1), ("Renew", 0)):
                assert value(got, "kafka_server_sharegroupmetrics_recordacknowledgements_total",
                             ackType=ack_type) == n, ack_type
            assert value(got, "kafka_server_sharepartitionmetrics_lag", **labels) == 1
            assert value(got, "kafka_server_sharepartitionmetrics_startoffset", **labels) == 6
            assert value(got, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 4
            assert value(got, "kafka_server_sharepartitionmetrics_acquiredmessagecount", **labels) == 0
            assert value(got, "kafka_server_sharepartitionmetrics_acquiredrecords_total", **labels) == 10
            assert value(got, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) == 0

            # a takes offset 6 again and lets its 1 s lock expire; b's long poll then gets it.
            assert all_acquired(a.fetch()) == {tp: [(6, 6, 2)]}
            assert value(scrape(broker), "kafka_server_sharepartitionmetrics_acquiredmessagecount", **labels) == 1
            b.open([tp])
            assert all_acquired(b.fetch(max_wait_ms=5000)) == {tp: [(6, 6, 3)]}
            got = scrape(broker)
            assert value(got, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) == 1
            assert value(got, "kafka_server_sharepartitionmetrics_acquiredrecords_total", **labels) == 12
            assert value(got, "kafka_server_sharepartitionmetrics_lag", **labels) == 1
            assert value(got, "kafka_server_sharesessioncache_sharesessionscount") == 2
            assert value(got, "kafka_server_sharesessioncache_sharepartitionscount") == 2

            assert parts(b.acknowledge({tp: [(6, 6, [RENEW])]}, version=2, is_renew_ack=True))[tp].error_code == 0
            assert parts(b.acknowledge({tp: [(6, 6, [ACCEPT])]}))[tp].error_code == 0
            got = scrape(broker)
        finally:
            a.close()
            b.close()
        # Both members' connections closed with their sessions open: two evictions, as Kafka's
        # ShareSessionCache counts them, once the broker has seen the closes.
        deadline = time.monotonic() + 10
        while value(scrape(broker), "kafka_server_sharesessioncache_sharesessionscount") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert value(scrape(broker), "kafka_server_sharesessioncache_sharesessionevictions_total") == 2

    assert value(got, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType="Accept") == 8
    assert value(got, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType="Renew") == 1
    assert value(got, "kafka_server_sharepartitionmetrics_lag", **labels) == 0
    assert value(got, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 0
    assert value(got, "kafka_server_sharegroupmetrics_partitionloadtimems_count") == 1
    # ShareFetch: a opens and fetches twice, b opens and long-polls; ShareAcknowledge: three.
    for api, n in (("ShareFetch", 5), ("ShareAcknowledge", 3), ("Produce", 2), ("CreateTopics", 1),
                   ("ShareGroupHeartbeat", 3), ("Fetch", 0), ("FetchConsumer", 0)):
        assert value(got, "kafka_network_requestmetrics_requests_total", request=api) == n, api
    assert value(got, "kafka_network_requestmetrics_totaltimems_count", request="ShareFetch") == 5
    # The long poll waited for the lock to expire: at least one ShareFetch took over 250 ms.
    assert value(got, "kafka_network_requestmetrics_totaltimems_bucket", request="ShareFetch", le="250.0") < 5
    assert value(got, "kafka_server_brokertopicmetrics_totalsharefetchrequests_total", topic=topic_name) == 5
    assert value(got, "kafka_server_brokertopicmetrics_failedsharefetchrequests_total", topic=topic_name) == 0
    assert value(got, "kafka_server_brokertopicmetrics_totalshareacknowledgementrequests_total", topic=topic_name) == 3
    assert value(got, "kafka_server_brokertopicmetrics_totalsharefetchrequests_total") == 5  # all topics
    assert value(got, "kafka_server_brokertopicmetrics_totalshareacknowledgementrequests_total") == 3
    produce_in = value(got, "kafka_network_requestmetrics_requestbytes_sum", request="Produce")
    assert produce_in > 10 * 2  # ten records of at least two bytes each
    assert value(got, "kafka_network_requestmetrics_responsebytes_sum", request="ShareFetch") > produce_in / 2
    incoming = value(got, "kafka_server_socket_server_metrics_incoming_byte_total", listener="PLAINTEXT")
    outgoing = value(got, "kafka_server_socket_server_metrics_outgoing_byte_total", listener="PLAINTEXT")
    assert incoming > produce_in and outgoing > 0

    assert value(got, "kafka_server_group_coordinator_metrics_group_count", protocol="share") == 2
    for state, n in (("Stable", 1), ("Empty", 1), ("Dead", 0)):
        assert value(got, "kafka_server_group_coordinator_metrics_share_group_count", state=state) == n, state
    assert value(got, "kafka_server_group_coordinator_metrics_share_group_member_count", group=group) == 1
    assert value(got, "kafka_server_group_coordinator_metrics_share_group_member_count", group=idle_group) == 0
    assert broker.stop() == 0
    assert "Traceback" not in broker.log()


def _listening_ports(pid: int) -> set[int]:
    """TCP ports the process listens on (its socket inodes matched against /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_metrics_are_off_by_default(start_broker):
    plain = start_broker()
    assert plain.metrics_address is None
    assert _listening_ports(plain.proc.pid) == {plain.port}
    served = start_broker(["--metrics-port", "0"])
    assert _listening_ports(served.proc.pid) == {served.port, served.metrics_address[1]}
