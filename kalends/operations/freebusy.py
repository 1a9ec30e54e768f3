from typing import Annotated, Any

from pydantic import WithJsonSchema

from kalends import ids
from kalends.agenda import DAYS_AHEAD, DAYS_BACK, MAX_CALENDARS
from kalends.freebusy import (
    DURATIONS,
    EMAIL_PATTERN,
    INSTANT_PATTERN,
    MAX_PEOPLE,
    MAX_SLOTS,
    MAX_SPAN_DAYS,
    MeetingTimesQuery,
)
from kalends.registry import Mcp, Operation, Param, register


def _list(name: str) -> Any:
    # "" lists nobody; kalends.freebusy and kalends.agenda check the entries.
    def variables(value: str | None) -> dict[str, list[str] | None]:
        return {name: None if value is None else value.split(",") if value else []}

    return variables


def _any_calendar_id() -> str:
    one = "(?:" + "|".join(ids.pattern(p).strip("^$") for p in ("cal", "xcal")) + ")"
    return f"^{one}(?:,{one}){{0,{MAX_CALENDARS - 1}}}$"


# Advertised; kalends.freebusy checks them, with the contract's codes.
_INSTANT = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time",
                                          "pattern": INSTANT_PATTERN})]
_EMAILS = Annotated[str, WithJsonSchema({
    "type": "string",
    "pattern": f"^(?:{EMAIL_PATTERN}(?:,{EMAIL_PATTERN}){{0,{MAX_PEOPLE - 1}}})?$",
})] | None
_CALENDAR_IDS = Annotated[str, WithJsonSchema({"type": "string",
                                               "pattern": _any_calendar_id()})] | None

_WINDOW_HELP = (
    f"start and end: RFC 3339 with an offset; end after start, at most {MAX_SPAN_DAYS} days "
    f"apart, within {DAYS_BACK} days back and {DAYS_AHEAD} days ahead."
)
_BUSY_HELP = (
    "Busy: occurrences in personal calendars (own events, subscription copies) and selected "
    "connected calendars that are opaque and not cancelled, plus events answered going (busy) "
    "or maybe (tentative); a subscription copy of an event answered not_going takes no time; "
    "all-day items take whole local days in their own zone. Only intervals are returned, "
    "never titles or IDs. A person with more than 10,000 occurrences in the window gets busy "
    "[] and error expansion_limit."
)
_PEOPLE_HELP = (
    f"emails: up to {MAX_PEOPLE} other people; those sharing an organization with the caller "
    "are shown, anyone else and unknown addresses alike get busy [] and error not_visible."
)

_FREE_BUSY_FIELDS = """
fragment FreeBusyFields on FreeBusy {
  start end
  people { email busy { start end status } error }
  sources { calendar_id name provider last_sync_at status }
  warnings { calendar_id code message }
  complete incomplete_reason
}
"""

register(
    Operation(
        name="getFreeBusy",
        method="GET",
        path="/v1/free-busy",
        tag="Agenda",
        summary="When the caller and people of their organizations are busy",
        params=(
            Param("start", "query", _INSTANT,
                  "Window start, RFC 3339 with an offset."),
            Param("end", "query", _INSTANT,
                  f"Window end (exclusive), after start and at most {MAX_SPAN_DAYS} days later."),
            Param("emails", "query", _EMAILS,
                  f"Comma-separated addresses of up to {MAX_PEOPLE} other people.",
                  default=None, variables=_list("emails")),
            Param("calendar_ids", "query", _CALENDAR_IDS,
                  f"The caller's own cal_ or xcal_ IDs, comma-separated, 1 to {MAX_CALENDARS}; "
                  "default as the agenda's: every personal calendar and the selected connected "
                  "ones.",
                  default=None, variables=_list("calendar_ids")),
        ),
        document=f"""
        query getFreeBusy($start: String!, $end: String!, $emails: [String!],
                          $calendar_ids: [ID!]) {{
          free_busy(start: $start, end: $end, emails: $emails, calendar_ids: $calendar_ids) {{
            ...FreeBusyFields
          }}
        }}
        {_FREE_BUSY_FIELDS}""",
        result="free_busy",
        mcp=Mcp(
            title="Get free/busy times",
            description=(
                "When the caller (first in people) and other people are busy: sorted, merged "
                "UTC intervals, status busy or tentative (busy wins where they meet). "
                + _WINDOW_HELP + " " + _BUSY_HELP + " " + _PEOPLE_HELP + " Check warnings "
                "(stale or failed connected calendars) and complete before trusting free "
                "time. For common free slots use findMeetingTimes."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="findMeetingTimes",
        method="POST",
        path="/v1/meeting-times",
        tag="Agenda",
        summary="The earliest times when the caller and other people are all free",
        body=MeetingTimesQuery,
        document="""
        query findMeetingTimes($input: MeetingTimesInput!) {
          meeting_times(input: $input) {
            data { start end local_start local_end }
            unavailable time_zone
            warnings { calendar_id code message }
            complete incomplete_reason
          }
        }""",
        result="meeting_times",
        mcp=Mcp(
            title="Find meeting times",
            description=(
                f"The earliest slots (limit, default 10, at most {MAX_SLOTS}) of "
                f"duration_minutes ({DURATIONS[0]}-{DURATIONS[1]}) when the caller and everyone "
                "in emails are free of busy and tentative time. Slots start every step_minutes "
                "(5, 10, 15, 30, 60; default 30) from each working day's start and fit in "
                "working_hours (default 09:00-17:00 MO-FR) on time_zone's wall clock (IANA; "
                "default the caller's zone, else UTC); starts a DST change skips are skipped, "
                "repeated ones taken once. " + _WINDOW_HELP + " " + _BUSY_HELP + " "
                + _PEOPLE_HELP + " Those are listed in unavailable, their time unknown: the slots "
                "then reflect only the others (complete false, incomplete_reason "
                "people_unavailable). To book "
                "a slot call createCalendarEvent with calendar_id (a cal_ ID from "
                "listCalendars), title, start_time=local_start, start_timezone=time_zone, "
                "end_time=local_end, end_timezone=time_zone. Read-only: books nothing."
            ),
            read_only=True, idempotent=True,
        ),
    ),
)
