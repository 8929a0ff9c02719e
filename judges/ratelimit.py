"""Per-provider rate limits: max in-flight calls, requests per minute, tokens per minute.

Limits come from `settings.REVIEWHUB_PROVIDER_LIMITS`, keyed by the base URL's host, or by
"host/model" for one model (the most specific key wins):

    {"api.openai.com": {"max_in_flight": 64, "rpm": 5000, "tpm": 2000000},
     "api.openai.com/gpt-4o": {"rpm": 500}}

Two implementations with one interface:

- `RedisLimiter` (whenever `REDIS_URL` is set): every worker process on every machine shares
  the same counters. Each acquire is ONE Lua script, so the check-and-take is atomic across
  processes. RPM and TPM are exact sliding 60-second windows (a sorted set of timestamps; a
  token bucket would let a full bucket plus a minute of refill through in the first minute).
  The in-flight semaphore is a sorted set of holders scored by an expiry time, so a worker that
  is SIGKILLed while holding slots leaks them only until the expiry (request timeout + margin),
  never forever. Time is Redis's own clock (`TIME`), so worker clocks need not agree.
- `LocalLimiter` (embedded default, no REDIS_URL): the same algorithm in process memory under a
  lock. It is PER PROCESS: two worker processes each get the full limit. The demo runs one
  worker process, so this holds there; production must set REDIS_URL.

Token counts are estimated before the call (prompt characters / 4 + max_tokens) and corrected
with the provider's reported usage afterwards, so the TPM window converges on real usage.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from django.conf import settings

logger = logging.getLogger(__name__)

WINDOW_MS = 60_000
# Seconds a held in-flight slot survives its holder; added to the request timeout.
SLOT_MARGIN_S = 30.0
# Poll interval bounds while waiting for a slot (the script cannot know when one frees up).
POLL_MIN_S = 0.005
POLL_MAX_S = 0.25


@dataclass(frozen=True)
class ProviderLimits:
    max_in_flight: int | None = None
    rpm: int | None = None
    tpm: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.max_in_flight or self.rpm or self.tpm)


def _parse_limits(raw: Mapping[str, Any]) -> ProviderLimits:
    def positive(name: str) -> int | None:
        value = raw.get(name)
        if value in (None, 0):
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"REVIEWHUB_PROVIDER_LIMITS: '{name}' must be a positive number")
        return int(value)

    unknown = set(raw) - {"max_in_flight", "rpm", "tpm"}
    if unknown:
        raise ValueError(f"REVIEWHUB_PROVIDER_LIMITS: unknown keys {sorted(unknown)}")
    return ProviderLimits(
        max_in_flight=positive("max_in_flight"), rpm=positive("rpm"), tpm=positive("tpm")
    )


def limits_for(
    *, base_url: str, model: str, table: Mapping[str, Any] | None = None
) -> tuple[str, ProviderLimits] | None:
    """(limit key, limits) for a provider endpoint, or None when no limit is configured."""
    table = settings.REVIEWHUB_PROVIDER_LIMITS if table is None else table
    if not table:
        return None
    host = (urlsplit(base_url).netloc or base_url).lower()
    for key in (f"{host}/{model}", host):
        if key in table:
            limits = _parse_limits(table[key])
            return (key, limits) if limits.active else None
    return None


def estimate_tokens(*, prompt_chars: int, max_tokens: int | None) -> int:
    """A pre-call token estimate: ~4 characters per token, plus the completion budget."""
    return max(1, prompt_chars // 4) + (max_tokens or 0)


class Limiter(Protocol):
    async def acquire(
        self, key: str, limits: ProviderLimits, *, tokens: int, ttl_s: float
    ) -> str: ...

    async def release(
        self, key: str, limits: ProviderLimits, *, holder: str, token_delta: int
    ) -> None: ...


def _poll_delay(wait_s: float, rounds: int) -> float:
    # Jitter spreads many waiters so they do not all retry on the same tick.
    base = wait_s if wait_s > 0 else POLL_MIN_S * (2 ** min(rounds, 6))
    return min(POLL_MAX_S, base) * (0.5 + random.random())


# KEYS: in-flight zset, request-window zset, token-window zset, token-window sum
# ARGV: max_in_flight, rpm, tpm, tokens, holder, ttl_ms  (0 = no limit)
# Returns wait_ms (0: acquired). Window members are "<holder>:<tokens>" scored by time.
_ACQUIRE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_in_flight = tonumber(ARGV[1])
local rpm = tonumber(ARGV[2])
local tpm = tonumber(ARGV[3])
local need = tonumber(ARGV[4])
local holder = ARGV[5]
local ttl = tonumber(ARGV[6])
local window = 60000
local wait = 0
if max_in_flight > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= max_in_flight then
    wait = 1
  end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  if redis.call('ZCARD', KEYS[2]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    local w = tonumber(oldest[2]) + window - now + 1
    if w > wait then wait = w end
  end
end
local sum = 0
if tpm > 0 then
  sum = tonumber(redis.call('GET', KEYS[4]) or '0')
  local old = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - window)
  for _, m in ipairs(old) do
    sum = sum - tonumber(string.match(m, ':(-?%d+)$'))
  end
  if #old > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - window)
    redis.call('SET', KEYS[4], sum, 'PX', window * 2)
  end
  if sum > 0 and sum + need > tpm then
    local live = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
    local freed = 0
    local w = window
    for i = 1, #live, 2 do
      freed = freed + tonumber(string.match(live[i], ':(-?%d+)$'))
      if sum - freed + need <= tpm then
        w = tonumber(live[i + 1]) + window - now + 1
        break
      end
    end
    if w > wait then wait = w end
  end
end
if wait > 0 then return wait end
if max_in_flight > 0 then
  redis.call('ZADD', KEYS[1], now + ttl, holder)
  redis.call('PEXPIRE', KEYS[1], ttl + window)
end
if rpm > 0 then
  redis.call('ZADD', KEYS[2], now, holder)
  redis.call('PEXPIRE', KEYS[2], window * 2)
end
if tpm > 0 then
  redis.call('ZADD', KEYS[3], now, holder .. ':' .. need)
  redis.call('PEXPIRE', KEYS[3], window * 2)
  redis.call('SET', KEYS[4], sum + need, 'PX', window * 2)
end
return 0
"""

# KEYS: in-flight zset, token-window zset, token-window sum; ARGV: holder, token_delta
_RELEASE_LUA = """
redis.call('ZREM', KEYS[1], ARGV[1])
local delta = tonumber(ARGV[2])
if delta ~= 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[2], now, ARGV[1] .. 'c:' .. delta)
  redis.call('INCRBY', KEYS[3], delta)
  redis.call('PEXPIRE', KEYS[3], 120000)
end
return 0
"""


def _keys(prefix: str, key: str) -> tuple[str, str, str, str]:
    base = f"{prefix}{key}"
    return (f"{base}:inflight", f"{base}:req", f"{base}:tok", f"{base}:toksum")


class RedisLimiter:
    """Limits shared by all processes through Redis (see the module docstring)."""

    def __init__(self, url: str, *, prefix: str = "reviewhub:ratelimit:") -> None:
        import redis.asyncio as aioredis

        self._redis = aioredis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._prefix = prefix
        self._acquire = self._redis.register_script(_ACQUIRE_LUA)
        self._release = self._redis.register_script(_RELEASE_LUA)

    async def try_acquire(
        self, key: str, limits: ProviderLimits, *, tokens: int, ttl_s: float, holder: str
    ) -> float:
        """One atomic attempt: 0.0 when acquired, else seconds to wait (a small poll for an
        in-flight slot, whose release time nobody can know)."""
        wait_ms = int(
            await self._acquire(
                keys=list(_keys(self._prefix, key)),
                args=[limits.max_in_flight or 0, limits.rpm or 0, limits.tpm or 0,
                      tokens, holder, int(ttl_s * 1000)],
            )
        )
        if wait_ms <= 0:
            return 0.0
        return POLL_MIN_S if wait_ms == 1 else wait_ms / 1000

    async def acquire(self, key: str, limits: ProviderLimits, *, tokens: int, ttl_s: float) -> str:
        holder = uuid.uuid4().hex
        rounds = 0
        while True:
            wait = await self.try_acquire(key, limits, tokens=tokens, ttl_s=ttl_s, holder=holder)
            if wait <= 0:
                return holder
            await asyncio.sleep(_poll_delay(0 if wait == POLL_MIN_S else wait, rounds))
            rounds += 1

    async def release(
        self, key: str, limits: ProviderLimits, *, holder: str, token_delta: int
    ) -> None:
        inflight, _, tok, toksum = _keys(self._prefix, key)
        await self._release(
            keys=[inflight, tok, toksum], args=[holder, token_delta if limits.tpm else 0]
        )

    async def aclose(self) -> None:
        await self._redis.aclose()


class _LocalState:
    def __init__(self) -> None:
        self.inflight: dict[str, float] = {}
        self.requests: deque[float] = deque()
        self.tokens: deque[tuple[float, int]] = deque()
        self.token_sum = 0


class LocalLimiter:
    """The same limits within ONE process (threads share it; other processes do not)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, _LocalState] = {}

    def try_acquire(
        self, key: str, limits: ProviderLimits, *, tokens: int, ttl_s: float, holder: str
    ) -> float:
        """0.0 when acquired, else seconds to wait (a small poll for in-flight)."""
        now = time.monotonic()
        window = WINDOW_MS / 1000
        with self._lock:
            st = self._state.setdefault(key, _LocalState())
            wait = 0.0
            if limits.max_in_flight:
                for h, expiry in list(st.inflight.items()):
                    if expiry <= now:
                        del st.inflight[h]
                if len(st.inflight) >= limits.max_in_flight:
                    wait = POLL_MIN_S
            if limits.rpm:
                while st.requests and st.requests[0] <= now - window:
                    st.requests.popleft()
                if len(st.requests) >= limits.rpm:
                    wait = max(wait, st.requests[0] + window - now)
            if limits.tpm:
                while st.tokens and st.tokens[0][0] <= now - window:
                    st.token_sum -= st.tokens.popleft()[1]
                if st.token_sum > 0 and st.token_sum + tokens > limits.tpm:
                    freed, w = 0, window
                    for ts, n in st.tokens:
                        freed += n
                        if st.token_sum - freed + tokens <= limits.tpm:
                            w = ts + window - now
                            break
                    wait = max(wait, w)
            if wait > 0:
                return wait
            if limits.max_in_flight:
                st.inflight[holder] = now + ttl_s
            if limits.rpm:
                st.requests.append(now)
            if limits.tpm:
                st.tokens.append((now, tokens))
                st.token_sum += tokens
            return 0.0

    async def acquire(self, key: str, limits: ProviderLimits, *, tokens: int, ttl_s: float) -> str:
        holder = uuid.uuid4().hex
        rounds = 0
        while True:
            wait = self.try_acquire(key, limits, tokens=tokens, ttl_s=ttl_s, holder=holder)
            if wait <= 0:
                return holder
            await asyncio.sleep(_poll_delay(0 if wait == POLL_MIN_S else wait, rounds))
            rounds += 1

    async def release(
        self, key: str, limits: ProviderLimits, *, holder: str, token_delta: int
    ) -> None:
        with self._lock:
            st = self._state.get(key)
            if st is None:
                return
            st.inflight.pop(holder, None)
            if limits.tpm and token_delta:
                st.tokens.append((time.monotonic(), token_delta))
                st.token_sum += token_delta


_local_limiter = LocalLimiter()
_announced = False


def limiter_create() -> Limiter:
    """The limiter for this process: Redis-shared when REDIS_URL is set, else per-process.

    Called inside the event loop that will use it (redis.asyncio clients are loop-bound).
    """
    global _announced
    url = settings.REDIS_URL
    if url:
        limiter: Limiter = RedisLimiter(url)
        kind = f"redis ({url.rsplit('@', 1)[-1]})"
    else:
        limiter = _local_limiter
        kind = "in-process (per worker process; set REDIS_URL to share limits)"
    if not _announced:
        logger.info("judge rate limits: %s", kind)
        _announced = True
    return limiter
