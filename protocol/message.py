"""Base class of every generated message and struct.

Generated classes hold plain attributes (``__slots__``) and per-version encoder/decoder
tables filled in by the generated module; this base only dispatches on the version.
"""

from __future__ import annotations

from .primitives import DecodeError


class _Missing:
    """Marks an absent argument of a field whose default is a fresh list or struct."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


class UnsupportedVersionError(ValueError):
    pass


class Message:
    __slots__ = ()
    # Set on top-level messages by the generated module.
    API_KEY: int | None = None
    VALID_VERSIONS: tuple[int, int] = (0, 0)
    FLEXIBLE_VERSIONS: tuple[int, int] | None = None
    _ENCODERS: dict = {}
    _DECODERS: dict = {}

    def encode(self, version: int, b: bytearray | None = None, parts: list | None = None) -> list:
        """Append the encoding to ``parts`` (a list of buffers) and return it.

        Record buffers are passed through untouched, so the result is meant for
        ``transport.writelines``; ``to_bytes`` joins it for tests and small messages.
        """
        enc = self._ENCODERS.get(version)
        if enc is None:
            raise UnsupportedVersionError(f"{type(self).__name__} has no version {version}")
        if parts is None:
            parts = []
        b = enc(self, bytearray() if b is None else b, parts)
        if b:
            parts.append(b)
        return parts

    def to_bytes(self, version: int) -> bytes:
        return b"".join(self.encode(version))

    @classmethod
    def decode(cls, buf, version: int, pos: int = 0):
        """Return ``(message, position after it)``; raises ``DecodeError`` on malformed input."""
        dec = cls._DECODERS.get(version)
        if dec is None:
            raise UnsupportedVersionError(f"{cls.__name__} has no version {version}")
        try:
            return dec(buf, pos)
        except DecodeError:
            raise
        except (IndexError, ValueError, TypeError, OverflowError) as e:
            raise DecodeError(f"malformed {cls.__name__} v{version}: {e}") from None
        except Exception as e:  # struct.error and friends
            raise DecodeError(f"malformed {cls.__name__} v{version}: {e!r}") from None

    @classmethod
    def from_bytes(cls, data, version: int):
        msg, pos = cls.decode(memoryview(data), version)
        if pos != len(data):
            raise DecodeError(f"{len(data) - pos} trailing bytes after {cls.__name__} v{version}")
        return msg

    def __eq__(self, other) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self) -> str:
        body = ", ".join(f"{s}={getattr(self, s)!r}" for s in self.__slots__)
        return f"{type(self).__name__}({body})"

    def copy(self, **changes):
        """A shallow copy with some fields replaced."""
        new = object.__new__(type(self))
        for s in self.__slots__:
            setattr(new, s, changes.pop(s) if s in changes else getattr(self, s))
        if changes:
            raise TypeError(f"unknown fields {sorted(changes)}")
        return new
