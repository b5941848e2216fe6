"""Request-level shape rules for acknowledgement batches (ShareAcknowledge and ShareFetch).

Kafka checks these in KafkaApis before a share partition sees the batches; the first broken rule
makes the whole partition INVALID_REQUEST and none of its batches is applied. Keeping the rules
pure lets both handlers share them and test them without a broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .state import INVALID_REQUEST, RENEW

AckBatch = tuple[int, int, Sequence[int]]  # (first_offset, last_offset, acknowledge_types)


def validate_ack_batches(
    batches: Iterable[AckBatch], version: int, is_renew_ack: bool
) -> int | None:
    """Return INVALID_REQUEST (42) for the first batch breaking a rule, else None.

    Rules, in Kafka's order: first <= last; first >= previous batch's last (a one-offset
    overlap passes; the first batch is compared with -1, so a negative offset below it fails);
    at least one type; several types mean one per offset; every type within 0..4 for v2
    (0..3 before); RENEW only when the request set IsRenewAck.
    """
    max_type = RENEW if version >= 2 else RENEW - 1
    allowed = frozenset(t for t in range(max_type + 1) if t != RENEW or is_renew_ack)
    prev_last = -1
    for first, last, types in batches:
        if first > last or first < prev_last or not types:
            return INVALID_REQUEST
        if len(types) == 1:  # the usual shape: one type for the whole batch
            if types[0] not in allowed:
                return INVALID_REQUEST
        elif last - first != len(types) - 1 or not allowed.issuperset(types):
            return INVALID_REQUEST
        prev_last = last
    return None
