"""One API process at a time runs the background loop (collector, reaper, sweeps): whoever holds
a lock in Redis, which it renews each turn of its loop. Another process (on this host or
another) takes over within `ttl_seconds` of the holder dying.

The collector's entries are acknowledged only after their commit, so a new leader finds what the
old one left pending and applies it (each write is keyed, so an event is applied once).
"""

from __future__ import annotations

import os
import secrets
import socket

import redis

# Renew if ours; else take it if nobody holds it. 1: held now.
_HOLD = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Leadership:
    def __init__(self, client: redis.Redis, key: str, ttl_seconds: float = 10.0):
        self.key = key
        self.ttl_ms = int(ttl_seconds * 1000)
        # Who holds it, as `trainjobs` status and the tests read it: host, process, a nonce.
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._hold = client.register_script(_HOLD)
        self._release = client.register_script(_RELEASE)

    def hold(self) -> bool:
        """Take the lock or renew it; whether this process leads now. Redis away: it does not."""
        try:
            return bool(self._hold(keys=[self.key], args=[self.holder, self.ttl_ms]))
        except redis.RedisError:
            return False

    def release(self) -> None:
        try:
            self._release(keys=[self.key], args=[self.holder])
        except redis.RedisError:
            pass  # it expires
