"""Record states, acknowledge types and error codes shared by the share-partition code.

The numeric values are Kafka's own: record states are the persisted ``DeliveryState`` ids of
WriteShareGroupState / ShareSnapshot, acknowledge types are the wire ``AcknowledgeTypes`` values.
"""

from __future__ import annotations

from enum import IntEnum


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


AVAILABLE = RecordState.AVAILABLE.value
ACQUIRED = RecordState.ACQUIRED.value
ACKNOWLEDGED = RecordState.ACKNOWLEDGED.value
ARCHIVED = RecordState.ARCHIVED.value


def is_terminal(state: int) -> bool:
    """ACKNOWLEDGED and ARCHIVED are final (the ids make this a single compare: state >= 2)."""
    return state >= ACKNOWLEDGED


class AcknowledgeType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # KIP-1222: restart the acquisition lock, no state change (v2 + IsRenewAck)


RENEW = AcknowledgeType.RENEW.value

# Target record state of each state-changing acknowledge type (RENEW has none).
ACK_TYPE_TO_STATE: tuple[int, ...] = (ARCHIVED, ACKNOWLEDGED, AVAILABLE, ARCHIVED)


class AcquireMode(IntEnum):
    """ShareFetch v2 ``ShareAcquireMode`` (KIP-1206)."""

    BATCH_OPTIMIZED = 0
    RECORD_LIMIT = 1


# Kafka error codes this package returns.
NONE = 0
INVALID_REQUEST = 42
INVALID_RECORD_STATE = 121
