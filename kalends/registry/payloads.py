"""The `data` of a webhook message: the resource as REST shows it to the
profile's owner, read inside the transaction of the change.

An event is the registry's own `getEvent`, run as the owner, and an occurrence its
`getEventOccurrence` (docs/occurrences.md). An RSVP has no REST
read of its own; its document selects the fragment every RSVP operation returns.
Both run as compiled plans, like any registry call.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any, cast

from graphql import GraphQLSchema

from db.database import Database, Tx
from graph.context import Context, Services
from graph.plan import Plan
from kalends import registry
from kalends.auth import Viewer
from kalends.notify.webhooks import Kind, Render
from kalends.operations.rsvps import RSVP_FIELDS

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
        ctx = Context(dataclasses.replace(services, db=cast(Database, tx)),
                      Viewer(user_id=owner_user_id, consumer="webhooks", email="",
                             timezone=None),
                      request_id="webhook")
        read = reads.get(kind)
        if read is not None:
            body, _ = await registry.run(read, registry.bind(read, variables, {}, None), ctx)
            return cast(dict[str, Any], body)
        data = await registry.execute(rsvp_plan, "webhookRsvp", variables, ctx)
        return cast(dict[str, Any], data["event_rsvp"])

    return render
