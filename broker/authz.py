"""Authorized-operation bitfields for describe responses.

kshare has no authorizer yet, so every principal may do everything; Kafka reports that as the
bitfield of all operations that apply to the resource type (AclOperation codes).
"""

from __future__ import annotations

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION = 3, 4, 5, 6, 7, 8, 9
DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 10, 11, 12
NOT_REQUESTED = -(2**31)


def _bits(*ops: int) -> int:
    return sum(1 << op for op in ops)


TOPIC_OPERATIONS = _bits(READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
GROUP_OPERATIONS = _bits(READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
# Kafka's AclEntry.supportedOperations(CLUSTER); CREATE_TOKENS and DESCRIBE_TOKENS are USER's.
CLUSTER_OPERATIONS = _bits(CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE)
