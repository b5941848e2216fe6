"""InitProducerId: a fresh producer id with epoch 0 for idempotent producers.

As in Kafka, a request without a transactional id always gets a new id (a producer that
retries InitProducerId after an error, v3+, gets a new id too), from the block allocator in
``broker.producer_ids`` so ids are never reused across restarts.

Transactions are not supported yet. A transactional id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the code Kafka uses to deny a client the use of a
transactional id. Every client treats it as fatal, so ``init_transactions()`` fails at once
with a clear cause instead of retrying until it times out (InitProducerIdResponse has no
message field; the broker logs the reason). An empty transactional id is INVALID_REQUEST, as
in Kafka's TransactionCoordinator, and so is (v3+) a ProducerId without a ProducerEpoch or the
reverse, as KafkaApis checks before asking the coordinator.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from protocol.messages.init_producer_id_response import InitProducerIdResponse

API_KEY = 22
MIN_VERSION, MAX_VERSION = 0, 5

log = logging.getLogger("kshare.init_producer_id")


def error_response(req, version: int, code: int) -> InitProducerIdResponse:
    """Kafka's getErrorResponse: the error, with no producer id (-1) and no epoch (-1)."""
    return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)


async def handle(ctx, req) -> InitProducerIdResponse:
    tid = req.transactional_id
    if tid is not None:
        if tid == "":
            return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
        log.info(
            "refusing transactional id %r from %s (client id %s): transactions are not supported yet",
            tid, ctx.client_host, ctx.client_id,
        )
        return InitProducerIdResponse(
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1
        )
    if (req.producer_id == -1) != (req.producer_epoch == -1):
        return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
    try:
        pid = ctx.broker.producer_ids.next_id()
    except OSError as e:
        # The next block of ids could not be recorded (a full disk): none is handed out. Kafka's
        # RPCProducerIdManager answers COORDINATOR_LOAD_IN_PROGRESS while it has no block, an
        # error every producer retries.
        log.error("cannot claim a block of producer ids: %s", e)
        return InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, producer_id=-1,
                                      producer_epoch=-1)
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0)
