"""Rate limits (docs/operations.md, "Service behaviour"): a GCRA bucket per consumer, and per
client address for requests without a valid credential.

The buckets live in PostgreSQL (`db/ratelimits.py`), so every `kalends serve`
process and machine of a deployment shares them. A policy of `q` requests per
`w` seconds lets an idle client send `q` at once, then one every `w/q` seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.errors import ApiError
from db import ratelimits
from db.database import Database
from domain.config import Rate


@dataclass(frozen=True)
class Decision:
    """One request's outcome against one policy."""

    rate: Rate
    allowed: bool
    ahead: float
    """How far the bucket's theoretical arrival time runs ahead of now, seconds."""

    @classmethod
    def from_row(cls, rate: Rate, row: Any) -> Decision:
        return cls(rate, bool(row["allowed"]), max(0.0, float(row["ahead"])))

    @property
    def remaining(self) -> int:
        interval = self.rate.seconds / self.rate.requests
        return max(0, math.floor((self.rate.seconds - self.ahead) / interval + 1e-9))

    @property
    def reset(self) -> int:
        """Seconds until the whole quota is available again."""
        return math.ceil(self.ahead - 1e-9)

    @property
    def retry_after(self) -> int:
        """Seconds until one more request would be allowed."""
        interval = self.rate.seconds / self.rate.requests
        return max(1, math.ceil(self.ahead + interval - self.rate.seconds - 1e-9))

    def headers(self) -> dict[str, str]:
        # draft-ietf-httpapi-ratelimit-headers: the policy, then the current state.
        return {
            "RateLimit-Policy": f'"default";q={self.rate.requests};w={self.rate.seconds}',
            "RateLimit": f'"default";r={self.remaining};t={self.reset}',
        }

    def enforce(self) -> None:
        if not self.allowed:
            raise ApiError(
                "rate_limit_exceeded",
                f"Too many requests: at most {self.rate.requests} per {self.rate.seconds} s. "
                f"Retry after {self.retry_after} s.",
                retry_after=self.retry_after,
            )


async def charge(db: Database, subject: str, rate: Rate) -> Decision:
    row = await ratelimits.charge(db, subject, rate.interval, rate.window)
    return Decision.from_row(rate, row)


async def charge_address(db: Database, address: str | None, rate: Rate | None
                         ) -> Decision | None:
    """Charge an unauthenticated request to its client address."""
    if rate is None:
        return None
    return await charge(db, f"address:{address or 'unknown'}", rate)
