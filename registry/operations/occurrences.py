"""One occurrence of a recurring event, and splitting a series (docs/occurrences.md)."""

from typing import Annotated

from pydantic import BeforeValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from domain import ids
from domain.events import EventCancel, OccurrenceUpdate
from domain.occurrences import EventSplit
from registry import Mcp, Operation, Param, register
from registry.operations.common import PAGE, PAGE_ARGUMENTS, PAGE_VARIABLES
from registry.operations.events import EVENT_FIELDS


def _event_or_copy(value: object) -> str:
    if not (ids.is_valid("evt", value) or ids.is_valid("cev", value)):
        raise PydanticCustomError(
            "invalid_id", "must be an evt_ ID, or the cev_ ID of a subscription copy")
    assert isinstance(value, str)
    return value.lower()


_EITHER = "^(?:" + "|".join(ids.pattern(p).strip("^$") for p in ("evt", "cev")) + ")$"
EVENT_OR_COPY = Param(
    "event_id", "path",
    Annotated[str, BeforeValidator(_event_or_copy),
              WithJsonSchema({"type": "string", "pattern": _EITHER})],
    "An evt_ ID, or an agenda item's event_id.")
# Advertised; domain.occurrences reads it, and one that names no occurrence is 404.
_OCCURRENCE = "^(?:" + "|".join(ids.pattern(p).strip("^$") for p in ("evt", "cev")) + \
    "):[0-9]{8}(?:T[0-9]{6}Z)?$"
OCCURRENCE_ID = Param(
    "occurrence_id", "path",
    Annotated[str, WithJsonSchema({"type": "string", "pattern": _OCCURRENCE})],
    "`<event_id>:<slot>`, as getAgenda or listEventOccurrences give it.")
_INSTANT = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
WINDOW = (
    Param("from", "query", _INSTANT, "Window start, RFC 3339 with an offset."),
    Param("to", "query", _INSTANT,
          "Window end (exclusive), after `from` and at most 62 days later."),
)

OCCURRENCE_FIELDS = """
fragment OccurrenceFields on Occurrence {
  occurrence_id event_id original_start start_time end_time start_timezone end_timezone
  start_date end_date is_all_day status is_exception title description location
}
"""
_IDS = "$event_id: ID!, $occurrence_id: String!"
_ARGS = "event_id: $event_id, occurrence_id: $occurrence_id"
_WHICH = "event_id and occurrence_id as getAgenda or listEventOccurrences give them."

register(
    Operation(
        name="listEventOccurrences",
        method="GET",
        path="/v1/events/{event_id}/occurrences",
        tag="Events",
        summary="List an event's occurrences in a window, cancelled ones included",
        params=(EVENT_OR_COPY, *WINDOW, *PAGE),
        document=f"""
        query listEventOccurrences($event_id: ID!, $from: String!, $to: String!,
                                   {PAGE_VARIABLES}) {{
          event_occurrences(event_id: $event_id, from: $from, to: $to, {PAGE_ARGUMENTS}) {{
            data {{ ...OccurrenceFields }} has_more next_cursor
          }}
        }}
        {OCCURRENCE_FIELDS}""",
        result="event_occurrences",
        mcp=Mcp(
            title="List an event's occurrences",
            description=(
                "The occurrences of an event (evt_ ID) that meet [from, to) (RFC 3339, at "
                "most 62 days apart), by start: each as it stands, with status (cancelled "
                "ones too) and is_exception. Paginated: pass next_cursor as cursor while "
                "has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="getEventOccurrence",
        method="GET",
        path="/v1/events/{event_id}/occurrences/{occurrence_id}",
        tag="Events",
        summary="Retrieve one occurrence of an event",
        params=(EVENT_OR_COPY, OCCURRENCE_ID),
        document=f"""
        query getEventOccurrence({_IDS}) {{
          event_occurrence({_ARGS}) {{ ...OccurrenceFields }}
        }}
        {OCCURRENCE_FIELDS}""",
        result="event_occurrence",
        mcp=Mcp(
            title="Get an occurrence",
            description="One occurrence of an event as it stands. " + _WHICH,
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="updateEventOccurrence",
        method="PATCH",
        path="/v1/events/{event_id}/occurrences/{occurrence_id}",
        tag="Events",
        summary="Change one occurrence of a recurring event",
        params=(EVENT_OR_COPY, OCCURRENCE_ID),
        body=OccurrenceUpdate,
        document=f"""
        mutation updateEventOccurrence({_IDS}, $input: OccurrenceUpdateInput!) {{
          update_event_occurrence({_ARGS}, input: $input) {{ ...OccurrenceFields }}
        }}
        {OCCURRENCE_FIELDS}""",
        result="update_event_occurrence",
        mcp=Mcp(
            title="Change one occurrence",
            description="Change one occurrence of a recurring event; fields as updateEvent.",
            idempotent=True,
        ),
    ),
    Operation(
        name="cancelEventOccurrence",
        method="POST",
        path="/v1/events/{event_id}/occurrences/{occurrence_id}/cancel",
        tag="Events",
        summary="Cancel one occurrence of a recurring event",
        params=(EVENT_OR_COPY, OCCURRENCE_ID),
        body=EventCancel,
        creates=True,
        document=f"""
        mutation cancelEventOccurrence({_IDS}, $input: EventCancelInput!) {{
          cancel_event_occurrence({_ARGS}, input: $input) {{ ...OccurrenceFields }}
        }}
        {OCCURRENCE_FIELDS}""",
        result="cancel_event_occurrence",
        mcp=Mcp(
            title="Cancel one occurrence",
            description="Cancel one occurrence of a recurring event.",
            destructive=True,
        ),
    ),
    Operation(
        name="restoreEventOccurrence",
        method="POST",
        path="/v1/events/{event_id}/occurrences/{occurrence_id}/restore",
        tag="Events",
        summary="Undo an occurrence's own changes and cancellation",
        params=(EVENT_OR_COPY, OCCURRENCE_ID),
        creates=True,
        document=f"""
        mutation restoreEventOccurrence({_IDS}) {{
          restore_event_occurrence({_ARGS}) {{ ...OccurrenceFields }}
        }}
        {OCCURRENCE_FIELDS}""",
        result="restore_event_occurrence",
        mcp=Mcp(
            title="Restore one occurrence",
            description=(
                "Drop one occurrence's own changes and cancellation: it is again as the "
                "event's rule makes it. " + _WHICH
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="splitEvent",
        method="POST",
        path="/v1/events/{event_id}/split",
        tag="Events",
        summary="Change a recurring event from one occurrence on (this and following)",
        params=(EVENT_OR_COPY,),
        body=EventSplit,
        creates=True,
        status=201,
        location="/v1/events/{id}",
        document=f"""
        mutation splitEvent($event_id: ID!, $input: EventSplitInput!) {{
          split_event(event_id: $event_id, input: $input) {{ ...EventFields }}
        }}
        {EVENT_FIELDS}""",
        result="split_event",
        mcp=Mcp(
            title="Split a recurring event",
            description=(
                "This and following: the event (evt_ ID) ends before occurrence_id, and a "
                "new event, returned, starts at it with the rest of the rule and the fields "
                "sent (as updateEvent), with copies of its RSVP settings and RSVPs, in the "
                "same series. At the first occurrence, use updateEvent instead."
            ),
        ),
    ),
)
