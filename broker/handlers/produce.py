"""Produce: append one record batch per partition, acks 0 / 1 / -1 on a single replica.

Per partition, in Kafka 4.2's order: topic (by name, or by id from v13: UNKNOWN_TOPIC_ID),
UNKNOWN_TOPIC_OR_PARTITION (Kafka's Produce never auto-creates topics; clients create them
through Metadata), the record checks of ``ProduceRequest.validateRecords``
(``check_produce_request``), INVALID_REQUIRED_ACKS, INVALID_TOPIC_EXCEPTION for internal topics,
then the partition service (``broker.partitions``) for the batch's own checks (base offset, size,
CRC, counts) and everything else that needs the log. As in Kafka, whose KafkaApis keys the
partitions in maps, a partition named twice is answered once: its last valid batch is appended,
and a refusal of the other's records is the answer.

acks=-1 behaves like acks=1 (the only replica is the leader). When the log's flush policy asks
for it (``log.flush.interval.messages``), the answer waits for the group-committed fsync.
acks=0 gets no response; if any partition failed, the connection is closed instead, so the
client notices and refreshes its metadata (Kafka's behaviour).

As in Kafka, whose first look at a request reads each partition's first batch, a first batch
whose size field or magic is invalid fails the whole request (CORRUPT_MESSAGE with the reason for
every partition), and a request holding transactional batches without a transactional id is
refused as a whole with TRANSACTIONAL_ID_AUTHORIZATION_FAILED; with an id, transactional batches
with a producer id get INVALID_TXN_STATE (no producer can be in a transaction: InitProducerId
refuses transactional ids) and one without is appended, as Kafka verifies only the former.
Then, still before the acks check, ReplicaManager reads the producer fields of every batch
appended: one too short to hold them fails the request with UNKNOWN_SERVER_ERROR, and
transactional batches of two producers with INVALID_PRODUCER_ID_MAPPING.
"""

from __future__ import annotations

import asyncio
import logging
import struct

from protocol.errors import ErrorCode
from protocol.messages.produce_response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from protocol.records import (
    ATTRIBUTES_OFFSET,
    BASE_SEQUENCE_END,
    MAGIC_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    TRANSACTIONAL_FLAG,
    CorruptRecordError,
    UnknownCompressionIdError,
    check_produce_request,
    first_batch_size,
)

from ..partitions import AppendError

_PRODUCER = struct.Struct(">qh")  # producer id, producer epoch

API_KEY = 0
MIN_VERSION, MAX_VERSION = 3, 13

UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
ADMIN_CLIENT_ID = "__admin_client"  # the only client Kafka lets write to internal topics
log = logging.getLogger("kshare.produce")


def _error(index: int, code: ErrorCode, *, log_start_offset: int = -1, message: str | None = None,
           record_errors=()) -> PartitionProduceResponse:
    return PartitionProduceResponse(
        index=index, error_code=code, base_offset=-1, log_append_time_ms=-1, log_start_offset=log_start_offset,
        record_errors=[BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m) for i, m in record_errors],
        error_message=message,
    )


def _has_transactional_batch(req) -> bool:
    """Kafka's ``RequestUtils.hasTransactionalRecords``: each partition's first complete batch in
    turn, until one is transactional (magic 0 and 1 batches never are). A first batch whose size
    field or magic cannot be read raises CorruptRecordError, as Kafka's batch iterator throws there."""
    for td in req.topic_data:
        for pd in td.partition_data:
            r = pd.records
            if (r is not None and first_batch_size(r) is not None and r[MAGIC_OFFSET] == 2
                    and r[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG):
                return True
    return False


def _producers_failure(valid) -> tuple[ErrorCode, str | None] | None:
    """Kafka's ReplicaManager.handleProduceAppend, which runs before the acks check, reads every
    batch's producer id, and a transactional one's epoch and base sequence: a batch too short to
    hold them throws an index error out of the request (UNKNOWN_SERVER_ERROR for every partition),
    and transactional batches of more than one producer fail it with INVALID_PRODUCER_ID_MAPPING."""
    producers = set()
    for _, _, records, size in valid:
        if size < PRODUCER_EPOCH_OFFSET:  # no whole producer id
            return ErrorCode.UNKNOWN_SERVER_ERROR, None
        pid, epoch = _PRODUCER.unpack_from(records, PRODUCER_ID_OFFSET)
        if pid >= 0 and records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
            if size < BASE_SEQUENCE_END:
                return ErrorCode.UNKNOWN_SERVER_ERROR, None
            producers.add((pid, epoch))
    if len(producers) > 1:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING, "Transactional records contained more than one producer ID"
    return None


def _topic_response(v: int, td) -> TopicProduceResponse:
    if v >= 13:
        return TopicProduceResponse(name="", topic_id=td.topic_id)
    return TopicProduceResponse(name=td.name)


def _error_responses(req, version: int, code: int, message: str | None = None) -> list[TopicProduceResponse]:
    """Every partition of the request once, with the error (Kafka's getErrorResponse)."""
    responses = {}  # (name, topic id) -> topic response
    seen = set()
    for td in req.topic_data:
        tr = responses.setdefault((td.name, td.topic_id), _topic_response(version, td))
        for pd in td.partition_data:
            if (td.name, td.topic_id, pd.index) not in seen:
                seen.add((td.name, td.topic_id, pd.index))
                tr.partition_responses.append(_error(pd.index, code, message=message))
    return list(responses.values())


def error_response(req, version: int, code: int) -> ProduceResponse | None:
    """Kafka's getErrorResponse: none for acks=0; else every partition of the request once, with the error."""
    if req.acks == 0:
        return None
    return ProduceResponse(responses=_error_responses(req, version, code))


async def handle(ctx, req):
    broker = ctx.broker
    v = ctx.api_version
    acks = req.acks

    try:
        transactional = _has_transactional_batch(req)
    except CorruptRecordError as e:  # thrown out of Kafka's handleProduceRequest: the whole request fails
        log.debug("produce refused: %s", e)
        return await _finish(ctx, acks, _error_responses(req, v, ErrorCode.CORRUPT_MESSAGE, str(e)), [])
    if transactional and req.transactional_id is None:
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return await _finish(ctx, acks, _error_responses(req, v, code), [])

    partitions = broker.partitions
    topics = broker.topics
    store = broker.store
    internal_allowed = ctx.client_id == ADMIN_CLIENT_ID
    valid_acks = acks in (-1, 0, 1)
    now = broker.now_ms()
    flushes = []  # (partition response, log, offset to flush up to)

    # As KafkaApis, partitions are keyed by topic and index: one named twice is answered once,
    # its last valid batch is the one appended, and a refusal of its records wins the answer.
    topic_responses = {}  # topic key -> topic response, in request order
    order = {}  # (topic key, index) -> None, in request order
    refused = {}  # (topic key, index) -> error response (unknown topic or partition, records)
    valid = {}  # (topic key, index) -> (topic, log, records, size)
    for td in req.topic_data:
        tkey = td.topic_id if v >= 13 else td.name
        if tkey not in topic_responses:
            topic_responses[tkey] = _topic_response(v, td)
        topic = topics.by_id(td.topic_id) if v >= 13 else topics.get(td.name)
        for pd in td.partition_data:
            index = pd.index
            key = (tkey, index)
            order[key] = None
            if topic is None:
                refused[key] = _error(index, ErrorCode.UNKNOWN_TOPIC_ID if v >= 13 else UNKNOWN_TOPIC_OR_PARTITION)
                continue
            lg = store.get(topic.name, index) if 0 <= index < topic.partitions else None
            if lg is None:
                refused[key] = _error(index, UNKNOWN_TOPIC_OR_PARTITION)
                continue
            records = pd.records if pd.records is not None else b""
            try:
                size = check_produce_request(records, v)
            except UnknownCompressionIdError as e:  # not an ApiException: thrown out of handleProduceRequest
                log.debug("produce refused: %s", e)
                return await _finish(ctx, acks, _error_responses(req, v, ErrorCode.UNKNOWN_SERVER_ERROR), [])
            except CorruptRecordError as e:
                log.debug("produce to %s-%d refused: %s", topic.name, index, e)
                refused[key] = _error(index, ErrorCode(e.error_code), record_errors=getattr(e, "record_errors", ()))
                continue
            valid[key] = (topic, lg, records, size)

    failure = _producers_failure(valid.values())
    if failure is not None:
        log.debug("produce refused: %s", failure[1] or "a batch too short for its producer fields")
        return await _finish(ctx, acks, _error_responses(req, v, *failure), [])

    answers = {}
    for key, (topic, lg, records, size) in valid.items():
        index = key[1]
        if not valid_acks:
            answers[key] = _error(index, ErrorCode.INVALID_REQUIRED_ACKS)
            continue
        if topic.internal and not internal_allowed:
            answers[key] = _error(index, ErrorCode.INVALID_TOPIC_EXCEPTION)
            continue
        data = records[:size] if len(records) != size else records
        if type(data) is bytes or (type(data) is memoryview and data.readonly):
            data = bytearray(data)  # the log patches offsets in place (frames are writable)
        try:
            res = partitions.append_produce(topic, lg, data, now_ms=now)
        except AppendError as e:
            log.debug("produce to %s-%d refused: %s: %s", topic.name, index, e.code.name, e)
            answers[key] = _error(index, e.code, log_start_offset=e.log_start_offset, message=e.message,
                                  record_errors=e.record_errors)
            continue
        presp = answers[key] = PartitionProduceResponse(
            index=index, error_code=0, base_offset=res.base_offset,
            log_append_time_ms=res.log_append_time_ms, log_start_offset=res.log_start_offset,
        )
        if res.flush_upto is not None:
            flushes.append((presp, lg, res.flush_upto))
    answers.update(refused)
    for key in order:
        topic_responses[key[0]].partition_responses.append(answers[key])
    return await _finish(ctx, acks, list(topic_responses.values()), flushes)


async def _finish(ctx, acks: int, responses: list, flushes: list):
    if flushes:
        results = await asyncio.gather(*(lg.flush(upto) for _, lg, upto in flushes), return_exceptions=True)
        for (presp, lg, _), res in zip(flushes, results):
            if isinstance(res, BaseException):
                log.error("flush of %s-%d failed: %r", lg.topic, lg.partition, res)
                presp.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                presp.base_offset = -1
                presp.log_append_time_ms = -1
                presp.log_start_offset = -1
    if acks == 0:
        failed = [
            f"{t.name or t.topic_id}-{p.index}: {ErrorCode(p.error_code).name}"
            for t in responses for p in t.partition_responses if p.error_code
        ]
        if failed:
            log.info(
                "closing connection from %s after a failed acks=0 produce (correlation id %d, client id %s): %s",
                ctx.client_host, ctx.correlation_id, ctx.client_id, ", ".join(failed),
            )
            ctx.connection.close()
        return None
    return ProduceResponse(responses=responses, throttle_time_ms=0)
