from domain.rsvps import RsvpCreate, RsvpSettingsUpdate, RsvpUpdate
from registry import Mcp, Operation, register
from registry.operations.common import PAGE, PAGE_ARGUMENTS, PAGE_VARIABLES, path_id
from registry.operations.events import EVENT_ID, RSVP_SETTINGS_FIELDS, RSVP_STATS_FIELDS

RSVP_ID = path_id("rsvp_id", "rsvp", "RSVP")
# Not "RSVPs": client generators make snake_case modules of tags, and "RSVPs"
# became `rsv_ps`. The MCP toolset (the tag in lower case) is `rsvps` either way.
TAG = "Rsvps"

RSVP_FIELDS = """
fragment RsvpFields on Rsvp {
  id event_id attendee_email attendee_first_name attendee_last_name status rsvp_type
  num_guests created_at updated_at
}
"""

register(
    Operation(
        name="listEventRsvps",
        method="GET",
        path="/v1/events/{event_id}/rsvps",
        tag=TAG,
        summary="List an event's RSVPs",
        params=(EVENT_ID, *PAGE),
        document=f"""
        query listEventRsvps($event_id: ID!, {PAGE_VARIABLES}) {{
          event_rsvps(event_id: $event_id, {PAGE_ARGUMENTS}) {{
            data {{ ...RsvpFields }} has_more next_cursor
          }}
        }}
        {RSVP_FIELDS}""",
        result="event_rsvps",
        mcp=Mcp(
            title="List an event's RSVPs",
            description=(
                "List RSVPs of an event (evt_ ID), oldest first. The event's administrators "
                "see every attendee; anyone else sees only their own RSVPs (use "
                "getEventRsvpStats for counts). Paginated: pass next_cursor as cursor while "
                "has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="createEventRsvp",
        method="POST",
        path="/v1/events/{event_id}/rsvps",
        tag=TAG,
        summary="Create or replace the caller's RSVP",
        params=(EVENT_ID,),
        body=RsvpCreate,
        creates=True,
        status=201,
        created="create_event_rsvp.created",
        location="/v1/events/{event_id}/rsvps/{id}",
        document=f"""
        mutation createEventRsvp($event_id: ID!, $input: RsvpCreateInput!) {{
          create_event_rsvp(event_id: $event_id, input: $input) {{
            rsvp {{ ...RsvpFields }} created
          }}
        }}
        {RSVP_FIELDS}""",
        result="create_event_rsvp.rsvp",
        mcp=Mcp(
            title="RSVP to an event",
            description=(
                "Answer an event for the caller: status going, maybe, not_going or waitlist. "
                "Posting again (same attendee_email, or none) replaces the earlier answer. "
                "On a full event, going becomes waitlist when the waitlist is open; check "
                "the returned status."
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="updateEventRsvp",
        method="PATCH",
        path="/v1/events/{event_id}/rsvps/{rsvp_id}",
        tag=TAG,
        summary="Update an RSVP",
        params=(EVENT_ID, RSVP_ID),
        body=RsvpUpdate,
        document=f"""
        mutation updateEventRsvp($event_id: ID!, $rsvp_id: ID!, $input: RsvpUpdateInput!) {{
          update_event_rsvp(event_id: $event_id, rsvp_id: $rsvp_id, input: $input) {{
            ...RsvpFields
          }}
        }}
        {RSVP_FIELDS}""",
        result="update_event_rsvp",
        mcp=Mcp(
            title="Update an RSVP",
            description=(
                "Change status and/or num_guests of an RSVP of this event; allowed to the "
                "RSVP's attendee and the event's administrators."
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="deleteEventRsvp",
        method="DELETE",
        path="/v1/events/{event_id}/rsvps/{rsvp_id}",
        tag=TAG,
        summary="Withdraw an RSVP",
        params=(EVENT_ID, RSVP_ID),
        document="""
        mutation deleteEventRsvp($event_id: ID!, $rsvp_id: ID!) {
          delete_event_rsvp(event_id: $event_id, rsvp_id: $rsvp_id)
        }
        """,
        result=None,
        status=204,
        no_body_status="deleted",
        mcp=Mcp(
            title="Withdraw an RSVP",
            description=(
                "Remove an RSVP of this event, and with it its place in the attendee count; "
                "allowed to the RSVP's attendee and the event's administrators."
            ),
            destructive=True,
        ),
    ),
    Operation(
        name="getEventRsvpStats",
        method="GET",
        path="/v1/events/{event_id}/rsvps/stats",
        tag=TAG,
        summary="Counts of an event's RSVPs",
        params=(EVENT_ID,),
        document=f"""
        query getEventRsvpStats($event_id: ID!) {{
          event_rsvp_stats(event_id: $event_id) {{ ...RsvpStatsFields }}
        }}
        {RSVP_STATS_FIELDS}""",
        result="event_rsvp_stats",
        mcp=Mcp(
            title="Get RSVP counts",
            description=(
                "Counts of an event's RSVPs by status; total_attendees sums num_guests of "
                "going RSVPs, which is what capacity counts."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="getEventRsvpSettings",
        method="GET",
        path="/v1/events/{event_id}/rsvp-settings",
        tag=TAG,
        summary="An event's RSVP settings",
        params=(EVENT_ID,),
        document=f"""
        query getEventRsvpSettings($event_id: ID!) {{
          event_rsvp_settings(event_id: $event_id) {{ ...RsvpSettingsFields }}
        }}
        {RSVP_SETTINGS_FIELDS}""",
        result="event_rsvp_settings",
        mcp=Mcp(
            title="Get RSVP settings",
            description="Capacity, waitlist and attendee rules of an event's RSVPs.",
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="updateEventRsvpSettings",
        method="PATCH",
        path="/v1/events/{event_id}/rsvp-settings",
        tag=TAG,
        summary="Update an event's RSVP settings",
        params=(EVENT_ID,),
        body=RsvpSettingsUpdate,
        document=f"""
        mutation updateEventRsvpSettings($event_id: ID!, $input: RsvpSettingsUpdateInput!) {{
          update_event_rsvp_settings(event_id: $event_id, input: $input) {{
            ...RsvpSettingsFields
          }}
        }}
        {RSVP_SETTINGS_FIELDS}""",
        result="update_event_rsvp_settings",
        mcp=Mcp(
            title="Update RSVP settings",
            description=(
                "Change an event's RSVP settings (its administrators only). "
                "enable_capacity_limit needs a capacity_limit. Lowering the capacity below "
                "the current attendees keeps their RSVPs and refuses new going ones."
            ),
            idempotent=True,
        ),
    ),
)
