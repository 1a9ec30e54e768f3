from typing import Annotated

from pydantic import Field, WithJsonSchema

from domain.events import (
    EXPAND_PATTERN,
    EXPANDABLE,
    MAX_EXPAND,
    EventCancel,
    EventCreate,
    EventReschedule,
    EventUpdate,
    ProfileEventCreate,
    parse_expand,
)
from registry import Mcp, Operation, Param, register
from registry.operations.common import (
    PAGE,
    PAGE_ARGUMENTS,
    PAGE_VARIABLES,
    comma_separated,
    path_id,
)
from registry.operations.profiles import PROFILE_FIELDS, PROFILE_ID

EVENT_ID = path_id("event_id", "evt", "event")

_EXPAND_DESCRIPTION = (
    f"Comma-separated relationships to inline, at most {MAX_EXPAND}: {', '.join(EXPANDABLE)}."
)
# The pattern is advertised; parse_expand checks, with invalid_expand as its code.
_EXPAND_TYPE = Annotated[
    str, Field(min_length=1, max_length=200), WithJsonSchema({
        "type": "string", "pattern": EXPAND_PATTERN})] | None
EXPAND = comma_separated(Param("expand", "query", _EXPAND_TYPE, _EXPAND_DESCRIPTION,
                               default=None, variables=parse_expand))


def _checked_only(value: str | None) -> dict[str, bool]:
    parse_expand(value)  # a response with no body inlines nothing, but bad input is still bad
    return {}


EXPAND_NO_BODY = comma_separated(Param("expand", "query", _EXPAND_TYPE, _EXPAND_DESCRIPTION,
                                       default=None, variables=_checked_only))

SERIES_FIELDS = """
fragment SeriesFields on Series {
  id profile_id name slug description is_private created_at updated_at
}
"""

EVENT_FIELDS = """
fragment EventFields on Event {
  id profile_id title description location start_time end_time start_timezone end_timezone
  recurrence_rule status slug image_url is_all_day is_private require_rsvp require_payment
  cancellation_reason cancelled_at is_rescheduled created_at updated_at transparency
}
"""

RSVP_SETTINGS_FIELDS = """
fragment RsvpSettingsFields on RsvpSettings {
  enable_capacity_limit capacity_limit allow_waitlist allow_multiple_attendees
  allow_notifications
}
"""

RSVP_STATS_FIELDS = """
fragment RsvpStatsFields on RsvpStats {
  event_id going maybe not_going waitlist total_attendees
}
"""

_EXPANSIONS = f"""
fragment EventExpansions on Event {{
  profile @include(if: $expand_profile) {{ ...ProfileFields }}
  series @include(if: $expand_series) {{ ...SeriesFields }}
  rsvp_settings @include(if: $expand_rsvp_settings) {{ ...RsvpSettingsFields }}
  rsvp_stats @include(if: $expand_rsvp_stats) {{ ...RsvpStatsFields }}
}}
{PROFILE_FIELDS}{SERIES_FIELDS}{RSVP_SETTINGS_FIELDS}{RSVP_STATS_FIELDS}
"""
_EXPAND_VARIABLES = ", ".join(f"$expand_{name}: Boolean! = false" for name in EXPANDABLE)

_TIME_HELP = (
    "start_time is a local time, e.g. 2026-03-08T19:30, in start_timezone (IANA, required; "
    "an offset, if sent, must be the zone's); end_time likewise in end_timezone. All-day: "
    "is_all_day true, start_date, start_timezone and an optional exclusive end_date. "
    "recurrence_rule: one RRULE, e.g. FREQ=WEEKLY;BYDAY=TU."
)

register(
    Operation(
        name="listEvents",
        method="GET",
        path="/v1/events",
        tag="Events",
        summary="List events visible to the caller",
        params=PAGE,
        document=f"""
        query listEvents({PAGE_VARIABLES}) {{
          events({PAGE_ARGUMENTS}) {{ data {{ ...EventFields }} has_more next_cursor }}
        }}
        {EVENT_FIELDS}""",
        result="events",
        mcp=Mcp(
            title="List events",
            description=(
                "Discovery feed of events visible to the caller (public events of public "
                "profiles, and those of the caller's own profiles), by start time. Stored "
                "base rows: recurring events are not expanded. Paginated: pass next_cursor "
                "as cursor while has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="createEvent",
        method="POST",
        path="/v1/events",
        tag="Events",
        summary="Create an event on one of the caller's profiles",
        body=EventCreate,
        creates=True,
        status=201,
        location="/v1/events/{id}",
        document=f"""
        mutation createEvent($input: EventCreateInput!) {{
          create_event(input: $input) {{ ...EventFields }}
        }}
        {EVENT_FIELDS}""",
        result="create_event",
        mcp=Mcp(
            title="Create an event",
            description=(
                "Create an event on a profile the caller administers (profile_id: a prf_ ID "
                "from listProfiles). " + _TIME_HELP + " slug is derived from the title and "
                "date when omitted."
            ),
        ),
    ),
    Operation(
        name="getEvent",
        method="GET",
        path="/v1/events/{event_id}",
        tag="Events",
        summary="Retrieve an event (its stored base row)",
        params=(EVENT_ID, EXPAND),
        document=f"""
        query getEvent($event_id: ID!, {_EXPAND_VARIABLES}) {{
          event(event_id: $event_id) {{ ...EventFields ...EventExpansions }}
        }}
        {EVENT_FIELDS}{_EXPANSIONS}""",
        result="event",
        mcp=Mcp(
            title="Get an event",
            description=(
                "Retrieve an event by its evt_ ID: the stored base row, not an occurrence of "
                "a recurring event. expand inlines up to 3 of profile, series, rsvp_settings, "
                "rsvp_stats."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="updateEvent",
        method="PATCH",
        path="/v1/events/{event_id}",
        tag="Events",
        summary="Update an event",
        params=(EVENT_ID, EXPAND),
        body=EventUpdate,
        document=f"""
        mutation updateEvent($event_id: ID!, $input: EventUpdateInput!, {_EXPAND_VARIABLES}) {{
          update_event(event_id: $event_id, input: $input) {{
            ...EventFields ...EventExpansions
          }}
        }}
        {EVENT_FIELDS}{_EXPANSIONS}""",
        result="update_event",
        mcp=Mcp(
            title="Update an event",
            description=(
                "Change fields of an event the caller administers; omitted fields stay. "
                "start_time goes with start_timezone, end_time with end_timezone. Moving the "
                "start alone keeps the stored end (a start at or after it is "
                "invalid_time_range); rescheduleEvent keeps the duration instead. A cancelled "
                "event cannot be changed: reschedule it. To cancel, use cancelEvent."
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="deleteEvent",
        method="DELETE",
        path="/v1/events/{event_id}",
        tag="Events",
        summary="Delete an event permanently, with its RSVPs",
        params=(EVENT_ID, EXPAND_NO_BODY),
        document="""
        mutation deleteEvent($event_id: ID!) { delete_event(event_id: $event_id) }
        """,
        result=None,
        status=204,
        no_body_status="deleted",
        mcp=Mcp(
            title="Delete an event",
            description=(
                "Permanently delete an event the caller administers, and its RSVPs. To call "
                "an event off while keeping attendees informed, use cancelEvent instead."
            ),
            destructive=True,
        ),
    ),
    Operation(
        name="cancelEvent",
        method="POST",
        path="/v1/events/{event_id}/cancel",
        tag="Events",
        summary="Cancel an event",
        params=(EVENT_ID,),
        body=EventCancel,
        creates=True,
        document=f"""
        mutation cancelEvent($event_id: ID!, $input: EventCancelInput!) {{
          cancel_event(event_id: $event_id, input: $input) {{ ...EventFields }}
        }}
        {EVENT_FIELDS}""",
        result="cancel_event",
        mcp=Mcp(
            title="Cancel an event",
            description=(
                "Cancel an event the caller administers, with an optional reason, kept as "
                "the event's cancellation_reason (shown on the event and in attendee mail; "
                "rescheduleEvent clears it). RSVPs are kept so attendees can be told. A "
                "cancelled event cannot be changed or cancelled again until rescheduleEvent "
                "reopens it."
            ),
            destructive=True,
        ),
    ),
    Operation(
        name="rescheduleEvent",
        method="POST",
        path="/v1/events/{event_id}/reschedule",
        tag="Events",
        summary="Move an event to a new time (reopens a cancelled event)",
        params=(EVENT_ID,),
        body=EventReschedule,
        creates=True,
        document=f"""
        mutation rescheduleEvent($event_id: ID!, $input: EventRescheduleInput!) {{
          reschedule_event(event_id: $event_id, input: $input) {{ ...EventFields }}
        }}
        {EVENT_FIELDS}""",
        result="reschedule_event",
        mcp=Mcp(
            title="Reschedule an event",
            description=(
                "Give an event a new start_time with start_timezone (and optionally end_time "
                "with end_timezone; without them the duration is kept). Sets is_rescheduled "
                "and reopens a cancelled event."
            ),
        ),
    ),
    Operation(
        name="listProfileEvents",
        method="GET",
        path="/v1/profiles/{profile_id}/events",
        tag="Profiles",
        summary="List a profile's events",
        params=(PROFILE_ID, *PAGE),
        document=f"""
        query listProfileEvents($profile_id: ID!, {PAGE_VARIABLES}) {{
          profile_events(profile_id: $profile_id, {PAGE_ARGUMENTS}) {{
            data {{ ...EventFields }} has_more next_cursor
          }}
        }}
        {EVENT_FIELDS}""",
        result="profile_events",
        mcp=Mcp(
            title="List a profile's events",
            description=(
                "List the events of a profile (prf_ ID) visible to the caller, by start time; "
                "private events only for the profile's own people. Paginated: pass "
                "next_cursor as cursor while has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="createProfileEvent",
        method="POST",
        path="/v1/profiles/{profile_id}/events",
        tag="Profiles",
        summary="Create an event on the profile",
        params=(PROFILE_ID,),
        body=ProfileEventCreate,
        creates=True,
        status=201,
        location="/v1/events/{id}",
        document=f"""
        mutation createProfileEvent($profile_id: ID!, $input: ProfileEventCreateInput!) {{
          create_profile_event(profile_id: $profile_id, input: $input) {{ ...EventFields }}
        }}
        {EVENT_FIELDS}""",
        result="create_profile_event",
        mcp=Mcp(
            title="Create an event on a profile",
            description=(
                "Create an event on the profile profile_id (a prf_ ID from getContext), "
                "which the caller administers. " + _TIME_HELP
            ),
        ),
    ),
)
