from typing import Annotated, Literal

from pydantic import Field, WithJsonSchema

from domain import ids
from domain.agenda import DAYS_AHEAD, DAYS_BACK, DEFAULT_DAYS, MAX_CALENDARS, MAX_DAYS, MAX_ITEMS
from registry import Mcp, Operation, Param, register
from registry.operations.common import comma_separated


def _calendar_ids(value: str | None) -> dict[str, list[str] | None]:
    # "" is a list with no entries, refused by domain.agenda like any empty list.
    return {"calendar_ids": None if value is None else value.split(",") if value else []}


def _any_calendar_id() -> str:
    one = "(?:" + "|".join(ids.pattern(p).strip("^$") for p in ("cal", "xcal")) + ")"
    return f"^{one}(?:,{one}){{0,{MAX_CALENDARS - 1}}}$"


# Advertised; domain.agenda checks them, with the API's codes (docs/http.md).
_CALENDAR_IDS = Annotated[str, WithJsonSchema({"type": "string",
                                               "pattern": _any_calendar_id()})] | None
_DATE = Annotated[str, WithJsonSchema({"type": "string", "format": "date",
                                       "pattern": r"^\d{4}-\d{2}-\d{2}$"})] | None


def _detail(value: str) -> dict[str, bool]:
    return {"full": value == "full"}


_FIELDS = """
fragment AgendaFields on Agenda {
  window { date end_date timezone start end }
  items {
    occurrence_id calendar_id event_id editable title start end local_start local_end
    is_all_day location busy is_recurring
    profile { id platform_id display_name }
    source { type subscription_id }
    start_date end_date
    description @include(if: $full)
  }
  complete incomplete_reason
  sources { calendar_id name provider last_sync_at status }
  warnings { calendar_id code message }
}
"""

register(
    Operation(
        name="getAgenda",
        method="GET",
        path="/v1/agenda",
        tag="Agenda",
        summary="The caller's combined schedule over a window of local days",
        params=(
            Param("date", "query", _DATE,
                  "First local day, YYYY-MM-DD; default today in the resolved zone.",
                  default=None),
            Param("days", "query", Annotated[int, Field(ge=1, le=MAX_DAYS)],
                  f"Window length in local days, 1 to {MAX_DAYS}.", default=DEFAULT_DAYS),
            Param("timezone", "query", str | None,
                  "IANA zone of the local days; default the user's saved zone, then UTC.",
                  default=None),
            comma_separated(Param(
                "calendar_ids", "query", _CALENDAR_IDS,
                f"Comma-separated exact cal_ or xcal_ IDs, 1 to {MAX_CALENDARS}; default all "
                "of the caller's personal calendars.",
                default=None, variables=_calendar_ids)),
            Param("detail", "query", Literal["summary", "full"],
                  "summary: titles, times, location and source; full adds descriptions.",
                  default="summary", variables=_detail),
        ),
        document=f"""
        query getAgenda($date: String, $days: Int!, $timezone: String, $calendar_ids: [ID!],
                        $full: Boolean!) {{
          agenda(date: $date, days: $days, timezone: $timezone, calendar_ids: $calendar_ids) {{
            ...AgendaFields
          }}
        }}
        {_FIELDS}""",
        result="agenda",
        omit_null=("items.start_date", "items.end_date"),
        mcp=Mcp(
            title="Get the agenda",
            description=(
                "The caller's schedule over `days` (1 to 31, default 7) local days from `date` "
                "(YYYY-MM-DD, default today) in `timezone` (default the saved zone, then UTC): "
                "personal events and subscription copies, recurring ones expanded, by start, "
                f"at most {MAX_ITEMS} items, within {DAYS_BACK} days back and {DAYS_AHEAD} "
                "ahead. calendar_ids: exact cal_ IDs from getContext or listCalendars. Check "
                "complete and warnings before relying on availability; busy tells time "
                "blocked. Edit an editable item with updateCalendarEvent (its calendar_id and "
                "event_id)."
            ),
            read_only=True, idempotent=True,
        ),
    ),
)
