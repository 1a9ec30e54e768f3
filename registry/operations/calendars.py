from domain.calendars import CalendarEventCreate, CalendarEventUpdate
from registry import Mcp, Operation, register
from registry.operations.common import PAGE, PAGE_ARGUMENTS, PAGE_VARIABLES, path_id

CALENDAR_ID = path_id("calendar_id", "cal", "calendar")
CALENDAR_EVENT_ID = path_id("event_id", "cev", "calendar event")

CALENDAR_FIELDS = """
fragment CalendarFields on Calendar {
  id name description color is_default created_at updated_at
}
"""

CALENDAR_EVENT_FIELDS = """
fragment CalendarEventFields on CalendarEvent {
  id calendar_id title description location start_time end_time start_timezone end_timezone
  is_all_day recurrence_rule status created_at updated_at transparency
}
"""

_REUSE_IDS = (
    "calendar_id: an exact cal_ ID from getContext or listCalendars (the default calendar has "
    "is_default true), never guessed."
)
_PAGINATED = "Paginated: pass next_cursor as cursor while has_more is true."
_TIME_HELP = (
    "start_time is a local time, e.g. 2026-03-08T19:30, in start_timezone (IANA, required; "
    "an offset, if sent, must be the zone's); end_time likewise in end_timezone (no end: a "
    "point in time). All-day: is_all_day true, start_date, start_timezone and an optional "
    "exclusive end_date. recurrence_rule: one RRULE, e.g. FREQ=WEEKLY;BYDAY=TU."
)
_READ_ONLY = "Subscription copies are read-only (calendar_event_read_only)."

register(
    Operation(
        name="listCalendars",
        method="GET",
        path="/v1/calendars",
        tag="Calendars",
        summary="List the caller's calendars",
        params=PAGE,
        document=f"""
        query listCalendars({PAGE_VARIABLES}) {{
          calendars({PAGE_ARGUMENTS}) {{ data {{ ...CalendarFields }} has_more next_cursor }}
        }}
        {CALENDAR_FIELDS}""",
        result="calendars",
        mcp=Mcp(
            title="List my calendars",
            description=(
                "List the caller's personal calendars, oldest first; the default one has "
                "is_default true. Use the exact cal_ IDs it returns in the other calendar "
                "tools and getAgenda. " + _PAGINATED
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="getCalendar",
        method="GET",
        path="/v1/calendars/{calendar_id}",
        tag="Calendars",
        summary="Retrieve a calendar",
        params=(CALENDAR_ID,),
        document=f"""
        query getCalendar($calendar_id: ID!) {{
          calendar(calendar_id: $calendar_id) {{ ...CalendarFields }}
        }}
        {CALENDAR_FIELDS}""",
        result="calendar",
        mcp=Mcp(
            title="Get a calendar",
            description="Retrieve one of the caller's calendars. " + _REUSE_IDS,
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="listCalendarEvents",
        method="GET",
        path="/v1/calendars/{calendar_id}/events",
        tag="Calendars",
        summary="List a calendar's stored events",
        params=(CALENDAR_ID, *PAGE),
        document=f"""
        query listCalendarEvents($calendar_id: ID!, {PAGE_VARIABLES}) {{
          calendar_events(calendar_id: $calendar_id, {PAGE_ARGUMENTS}) {{
            data {{ ...CalendarEventFields }} has_more next_cursor
          }}
        }}
        {CALENDAR_EVENT_FIELDS}""",
        result="calendar_events",
        mcp=Mcp(
            title="List a calendar's events",
            description=(
                "List the stored events of one of the caller's calendars in creation order "
                "(not by time): personal events and copies synced from subscriptions. A "
                "recurring event is one item carrying its recurrence_rule, not expanded; use "
                "getAgenda for what happens in a time window. " + _REUSE_IDS + " The list is "
                "paginated: a calendar may hold more events than one page, so keep passing "
                "next_cursor as cursor while has_more is true before concluding anything "
                "about the whole calendar."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="createCalendarEvent",
        method="POST",
        path="/v1/calendars/{calendar_id}/events",
        tag="Calendars",
        summary="Create a personal event in a calendar",
        params=(CALENDAR_ID,),
        body=CalendarEventCreate,
        creates=True,
        status=201,
        location="/v1/calendars/{calendar_id}/events/{id}",
        document=f"""
        mutation createCalendarEvent($calendar_id: ID!, $input: CalendarEventCreateInput!) {{
          create_calendar_event(calendar_id: $calendar_id, input: $input) {{
            ...CalendarEventFields
          }}
        }}
        {CALENDAR_EVENT_FIELDS}""",
        result="create_calendar_event",
        mcp=Mcp(
            title="Create a calendar event",
            description=(
                "Create a personal event (cev_ ID) in one of the caller's calendars "
                "(createProfileEvent publishes on a profile). " + _REUSE_IDS + " " + _TIME_HELP
            ),
        ),
    ),
    Operation(
        name="getCalendarEvent",
        method="GET",
        path="/v1/calendars/{calendar_id}/events/{event_id}",
        tag="Calendars",
        summary="Retrieve a calendar event",
        params=(CALENDAR_ID, CALENDAR_EVENT_ID),
        document=f"""
        query getCalendarEvent($calendar_id: ID!, $event_id: ID!) {{
          calendar_event(calendar_id: $calendar_id, event_id: $event_id) {{
            ...CalendarEventFields
          }}
        }}
        {CALENDAR_EVENT_FIELDS}""",
        result="calendar_event",
        mcp=Mcp(
            title="Get a calendar event",
            description=(
                "Retrieve a calendar event (cev_ ID) of the calendar it belongs to: the "
                "stored row, not an occurrence. " + _REUSE_IDS
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="updateCalendarEvent",
        method="PATCH",
        path="/v1/calendars/{calendar_id}/events/{event_id}",
        tag="Calendars",
        summary="Update a personal calendar event",
        params=(CALENDAR_ID, CALENDAR_EVENT_ID),
        body=CalendarEventUpdate,
        document=f"""
        mutation updateCalendarEvent($calendar_id: ID!, $event_id: ID!,
                                     $input: CalendarEventUpdateInput!) {{
          update_calendar_event(calendar_id: $calendar_id, event_id: $event_id, input: $input) {{
            ...CalendarEventFields
          }}
        }}
        {CALENDAR_EVENT_FIELDS}""",
        result="update_calendar_event",
        mcp=Mcp(
            title="Update a calendar event",
            description=(
                "Change a personal calendar event; send only the fields to change. Moving the "
                "start alone keeps the stored end (a start at or after it is "
                "invalid_time_range). " + _READ_ONLY + " " + _REUSE_IDS
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="deleteCalendarEvent",
        method="DELETE",
        path="/v1/calendars/{calendar_id}/events/{event_id}",
        tag="Calendars",
        summary="Delete a personal calendar event",
        params=(CALENDAR_ID, CALENDAR_EVENT_ID),
        document="""
        mutation deleteCalendarEvent($calendar_id: ID!, $event_id: ID!) {
          delete_calendar_event(calendar_id: $calendar_id, event_id: $event_id)
        }
        """,
        result=None,
        status=204,
        no_body_status="deleted",
        mcp=Mcp(
            title="Delete a calendar event",
            description=(
                "Delete a personal calendar event for good. " + _READ_ONLY + " " + _REUSE_IDS
            ),
            destructive=True,
        ),
    ),
)
