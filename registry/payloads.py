"""The `data` of a webhook message: the resource as REST shows it to the
profile's owner, read inside the transaction of the change.

An event is the registry's own `getEvent`, run as the owner, and an occurrence its
`getEventOccurrence` (docs/occurrences.md). An RSVP has no REST
read of its own; its document selects the fragment every RSVP operation returns.
Both run as compiled plans, like any registry call.
"""

from __future__ import annotations

from functools import cache
from typing import Any, cast

from graphql import GraphQLSchema

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
def _rsvp_plan(schema: GraphQLSchema) -> Plan:
    return registry.compile_document(schema, "webhookRsvp", _RSVP)[1]


def renderer(services: Services, schema: GraphQLSchema) -> Render:
    """Checks its documents now, so a broken one stops the start."""
    rsvp_plan = _rsvp_plan(schema)
    reads = {"event": registry.OPERATIONS["getEvent"],
             "occurrence": registry.OPERATIONS["getEventOccurrence"]}

    async def render(tx: Tx, owner_user_id: str, kind: Kind, variables: dict[str, str]
                     ) -> dict[str, Any]:
        # Reads only, so the transaction serves where the pool would: they see
        # the change being made, and a deleted resource as it was just before.
        ctx = registry.context(services, Viewer(user_id=owner_user_id, consumer="webhooks",
                                                email="", timezone=None),
                               "webhook", tx=tx)
        read = reads.get(kind)
        if read is not None:
            body, _ = await registry.run(read, registry.bind(read, variables, {}, None), ctx)
            return cast(dict[str, Any], body)
        data = await registry.execute(rsvp_plan, "webhookRsvp", variables, ctx)
        return cast(dict[str, Any], data["event_rsvp"])

    return render
