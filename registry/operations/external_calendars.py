from registry import Mcp, Operation, register
from registry.operations.common import PAGE, PAGE_ARGUMENTS, PAGE_VARIABLES

register(
    Operation(
        name="listExternalCalendars",
        method="GET",
        path="/v1/external-calendars",
        tag="External calendars",
        summary="List the caller's connected external calendars",
        params=PAGE,
        document=f"""
        query listExternalCalendars({PAGE_VARIABLES}) {{
          external_calendars({PAGE_ARGUMENTS}) {{
            data {{ id name description color can_edit time_zone is_primary created_at }}
            has_more next_cursor
          }}
        }}""",
        result="external_calendars",
        mcp=Mcp(
            title="List my connected calendars",
            description=(
                "List the calendars of the caller's connected accounts (iCloud/CalDAV, Google, "
                "Microsoft), oldest first. Their exact xcal_ IDs are what createSubscription's "
                "external_calendar_ids takes (only calendars with can_edit true) and what "
                "getAgenda's calendar_ids accepts besides cal_ IDs. Accounts are connected by "
                "an operator, not through this API. Paginated: pass next_cursor as cursor "
                "while has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
)
