"""What a handler knows about the request it serves, besides the request body."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .broker import Broker
    from .server import Connection


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    connection: Connection
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    @property
    def client_host(self) -> str:
        return self.connection.peer[0]
