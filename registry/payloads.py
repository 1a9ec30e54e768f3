"""The `data` of a webhook message: the resource as REST shows it to the
profile's owner, read inside the transaction of the change.

The domain records a message as it changes a resource (domain/notify/webhooks.py,
`record`), before it goes on, so that a deleted resource is shown as it was; it
asks the `Render` of its write's unit of work (registry/calls.py), this module's.
An event is the registry's own `getEvent`, run as the owner, and an occurrence its
`getEventOccurrence` (docs/occurrences.md). An RSVP has no REST read of its own;
its document selects the fragment every RSVP operation returns. Both run as
compiled plans, like any registry call, on the write's transaction: they see the
change being made.
"""

from __future__ import annotations

from functools import cache
from typing import Any, cast

import registry
from db.database import Tx
from domain.auth import Viewer
from domain.notify.webhooks import Kind, Render
from graph.context import Services
from graph.plan import Plan
from registry.operations.rsvps import RSVP_FIELDS

_RSVP = """
query webhookRsvp($event_id: ID!, $rsvp_id: ID!) {
  event_rsvp(event_id: $event_id, rsvp_id: $rsvp_id) { ...RsvpFields }
}
""" + RSVP_FIELDS


@cache
def prepare() -> Plan:
    """The RSVP document's plan, on the schema the registry was prepared with;
    compiled at start-up (kalends/service/app.py), so a broken one stops the start."""
    schema = registry.OPERATIONS["getEvent"].plan.schema
    return registry.compile_document(schema, "webhookRsvp", _RSVP)[1]


def renderer(services: Services) -> Render:
    async def render(tx: Tx, owner_user_id: str, kind: Kind, variables: dict[str, str]
                     ) -> dict[str, Any]:
        ctx = registry.context(services, Viewer(user_id=owner_user_id, consumer="webhooks",
                                                email="", timezone=None),
                               "webhook", tx=tx)
        if kind == "rsvp":
            data = await registry.execute(prepare(), "webhookRsvp", variables, ctx)
            return cast(dict[str, Any], data["event_rsvp"])
        read = registry.OPERATIONS["getEvent" if kind == "event" else "getEventOccurrence"]
        body, _ = await registry.run(read, registry.bind(read, variables, {}, None), ctx)
        return cast(dict[str, Any], body)

    return render
