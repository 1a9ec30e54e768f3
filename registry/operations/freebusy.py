from typing import Annotated, Any

from pydantic import WithJsonSchema

from domain import ids
from domain.agenda import DAYS_AHEAD, DAYS_BACK, MAX_CALENDARS
from domain.freebusy import (
    EMAIL_PATTERN,
    INSTANT_PATTERN,
    MAX_PEOPLE,
    MAX_SLOTS,
    MAX_SPAN_DAYS,
    MeetingTimesQuery,
)
from registry import Mcp, Operation, Param, register
from registry.operations.common import comma_separated


def _list(name: str) -> Any:
    # "" lists nobody; domain.freebusy and domain.agenda check the entries.
    def variables(value: str | None) -> dict[str, list[str] | None]:
        return {name: None if value is None else value.split(",") if value else []}

    return variables


def _any_calendar_id() -> str:
    one = "(?:" + "|".join(ids.pattern(p).strip("^$") for p in ("cal", "xcal")) + ")"
    return f"^{one}(?:,{one}){{0,{MAX_CALENDARS - 1}}}$"


# Advertised; domain.freebusy checks them, with the API's codes (docs/http.md).
_INSTANT = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time",
                                          "pattern": INSTANT_PATTERN})]
_EMAILS = Annotated[str, WithJsonSchema({
    "type": "string",
    "pattern": f"^(?:{EMAIL_PATTERN}(?:,{EMAIL_PATTERN}){{0,{MAX_PEOPLE - 1}}})?$",
})] | None
_CALENDAR_IDS = Annotated[str, WithJsonSchema({"type": "string",
                                               "pattern": _any_calendar_id()})] | None

_WINDOW_HELP = (
    f"start, end: RFC 3339 with an offset, at most {MAX_SPAN_DAYS} days apart, within "
    f"{DAYS_BACK} days back and {DAYS_AHEAD} ahead."
)
_BUSY_HELP = (
    "Busy: opaque, not cancelled occurrences of personal calendars (subscription copies "
    "included) and selected connected calendars, and events answered going (busy) or maybe "
    "(tentative); only intervals, never titles."
)
_PEOPLE_HELP = (
    f"emails: up to {MAX_PEOPLE} other people sharing an organization with the caller; "
    "anyone else gets busy [] and error not_visible."
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
            comma_separated(Param(
                "emails", "query", _EMAILS,
                f"Comma-separated addresses of up to {MAX_PEOPLE} other people.",
                default=None, variables=_list("emails"))),
            comma_separated(Param(
                "calendar_ids", "query", _CALENDAR_IDS,
                f"The caller's own cal_ or xcal_ IDs, comma-separated, 1 to {MAX_CALENDARS}; "
                "default as the agenda's: every personal calendar and the selected connected "
                "ones.",
                default=None, variables=_list("calendar_ids"))),
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
                "When the caller (first in people) and other people are busy: merged UTC "
                "intervals, status busy or tentative. " + _WINDOW_HELP + " " + _BUSY_HELP
                + " " + _PEOPLE_HELP + " Check warnings and complete before trusting free "
                "time. For free slots use findMeetingTimes."
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
                "duration_minutes when the caller and everyone in emails are free. Slots "
                "start every step_minutes (default 30) within working_hours (default "
                "09:00-17:00 MO-FR) on time_zone's clock (default the caller's zone). "
                + _WINDOW_HELP + " " + _BUSY_HELP + " " + _PEOPLE_HELP + " Those are listed "
                "in unavailable, and the slots reflect only the others (complete false). To "
                "book a slot: createCalendarEvent with calendar_id, title, "
                "start_time=local_start, end_time=local_end and both zones time_zone. Books "
                "nothing itself."
            ),
            read_only=True, idempotent=True,
        ),
    ),
)
