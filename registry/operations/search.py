from typing import Annotated

from pydantic import Field

from db.search import KINDS
from domain.search import MAX_QUERY_LENGTH, split_types
from registry import Mcp, Operation, Param, register
from registry.operations.common import PAGE, PAGE_ARGUMENTS, PAGE_VARIABLES, comma_separated

Q = Param(
    "q", "query", Annotated[str, Field(min_length=1, max_length=MAX_QUERY_LENGTH)],
    f"Search text, 1 to {MAX_QUERY_LENGTH} characters, in web-search syntax: words, "
    '"an exact phrase", `or`, `-excluded`. The last word also matches as a prefix.',
)
TYPE = comma_separated(Param(
    "type", "query", Annotated[str, Field(min_length=1, max_length=64)] | None,
    f"Comma-separated kinds to search, any of {', '.join(KINDS)}; all when omitted.",
    default=None, variables=split_types,
))

register(
    Operation(
        name="search",
        method="GET",
        path="/v1/search",
        tag="Search",
        summary="Search events, profiles and series",
        params=(Q, TYPE, *PAGE),
        document=f"""
        query search($q: String!, $types: [String!], {PAGE_VARIABLES}) {{
          search(q: $q, types: $types, {PAGE_ARGUMENTS}) {{
            data {{
              type id title description rank image_url slug profile_handle date_info
            }}
            has_more next_cursor
          }}
        }}
        """,
        result="search",
        mcp=Mcp(
            title="Search events, profiles and series",
            description=(
                "Full-text search over the events, profiles and series visible to the caller, "
                "best first. q: words (all must match), \"an exact phrase\", `or`, `-word`; "
                "the last word also matches as a prefix. type: the kinds, event, profile, "
                "series. Each item has type, id (evt_, prf_ or ser_: details with getEvent, "
                "getProfile or getSeries), title, rank and profile_handle. Paginated: while "
                "has_more, call again with the same q and type and cursor=next_cursor."
            ),
            read_only=True, idempotent=True,
        ),
    ),
)
