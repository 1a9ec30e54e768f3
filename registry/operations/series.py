from domain.series import SeriesCreate, SeriesEventLink, SeriesUpdate
from registry import Mcp, Operation, Param, register
from registry.operations.common import PAGE, PAGE_ARGUMENTS, PAGE_VARIABLES, path_id
from registry.operations.events import EVENT_FIELDS, EVENT_ID, SERIES_FIELDS
from registry.operations.profiles import PROFILE_ID

SERIES_ID = path_id("series_id", "ser", "series")

register(
    Operation(
        name="listProfileSeries",
        method="GET",
        path="/v1/profiles/{profile_id}/series",
        tag="Profiles",
        summary="List a profile's series",
        params=(PROFILE_ID, *PAGE),
        document=f"""
        query listProfileSeries($profile_id: ID!, {PAGE_VARIABLES}) {{
          profile_series(profile_id: $profile_id, {PAGE_ARGUMENTS}) {{
            data {{ ...SeriesFields }} has_more next_cursor
          }}
        }}
        {SERIES_FIELDS}""",
        result="profile_series",
        mcp=Mcp(
            title="List a profile's series",
            description=(
                "List the series of a profile (prf_ ID) visible to the caller, oldest first. "
                "Paginated: pass next_cursor as cursor while has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="createProfileSeries",
        method="POST",
        path="/v1/profiles/{profile_id}/series",
        tag="Profiles",
        summary="Create a series on the profile",
        params=(PROFILE_ID,),
        body=SeriesCreate,
        creates=True,
        status=201,
        location="/v1/series/{id}",
        document=f"""
        mutation createProfileSeries($profile_id: ID!, $input: SeriesCreateInput!) {{
          create_profile_series(profile_id: $profile_id, input: $input) {{ ...SeriesFields }}
        }}
        {SERIES_FIELDS}""",
        result="create_profile_series",
        mcp=Mcp(
            title="Create a series",
            description=(
                "Create a series (a season, course or tour) on a profile the caller "
                "administers. slug must be unique within the profile (409 conflict)."
            ),
        ),
    ),
    Operation(
        name="listSeries",
        method="GET",
        path="/v1/series",
        tag="Series",
        summary="List the series the caller owns or administers",
        params=PAGE,
        document=f"""
        query listSeries({PAGE_VARIABLES}) {{
          series_list({PAGE_ARGUMENTS}) {{ data {{ ...SeriesFields }} has_more next_cursor }}
        }}
        {SERIES_FIELDS}""",
        result="series_list",
        mcp=Mcp(
            title="List my series",
            description=(
                "List the series of the profiles the caller owns or administers, oldest "
                "first. Not a discovery list. Paginated: pass next_cursor as cursor while "
                "has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="getSeries",
        method="GET",
        path="/v1/series/{series_id}",
        tag="Series",
        summary="Retrieve a series",
        params=(SERIES_ID,),
        document=f"""
        query getSeries($series_id: ID!) {{ series(series_id: $series_id) {{ ...SeriesFields }} }}
        {SERIES_FIELDS}""",
        result="series",
        mcp=Mcp(
            title="Get a series",
            description="Retrieve a series by its ser_ ID.",
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="updateSeries",
        method="PATCH",
        path="/v1/series/{series_id}",
        tag="Series",
        summary="Update a series",
        params=(SERIES_ID,),
        body=SeriesUpdate,
        document=f"""
        mutation updateSeries($series_id: ID!, $input: SeriesUpdateInput!) {{
          update_series(series_id: $series_id, input: $input) {{ ...SeriesFields }}
        }}
        {SERIES_FIELDS}""",
        result="update_series",
        mcp=Mcp(
            title="Update a series",
            description=(
                "Change name, slug, description or is_private of a series the caller "
                "administers; slug stays unique within the profile (409 conflict)."
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="deleteSeries",
        method="DELETE",
        path="/v1/series/{series_id}",
        tag="Series",
        summary="Delete a series",
        params=(
            SERIES_ID,
            Param("cascade_exclusive_events", "query", bool,
                  "Also delete the events that are in this series only.", default=False),
        ),
        document="""
        mutation deleteSeries($series_id: ID!, $cascade_exclusive_events: Boolean!) {
          delete_series(series_id: $series_id,
                        cascade_exclusive_events: $cascade_exclusive_events) {
            member_count deleted_event_count preserved_event_count
          }
        }
        """,
        result="delete_series",
        mcp=Mcp(
            title="Delete a series",
            description=(
                "Delete a series the caller administers. Its events stay on the profile "
                "unless cascade_exclusive_events is true, which also deletes the events in "
                "no other series. Call previewSeriesDeletion first to see the counts."
            ),
            destructive=True,
        ),
    ),
    Operation(
        name="previewSeriesDeletion",
        method="GET",
        path="/v1/series/{series_id}/deletion-preview",
        tag="Series",
        summary="What deleting the series would do",
        params=(SERIES_ID,),
        document="""
        query previewSeriesDeletion($series_id: ID!) {
          series_deletion_preview(series_id: $series_id) {
            series_name member_count exclusive_count shared_count member_recurring_count
            exclusive_recurring_count shared_recurring_count
          }
        }
        """,
        result="series_deletion_preview",
        mcp=Mcp(
            title="Preview a series deletion",
            description=(
                "Counts of what deleteSeries would affect: members, events only in this "
                "series (deleted with cascade), events shared with other series (always "
                "kept), and how many of each recur. Changes nothing."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="listSeriesEvents",
        method="GET",
        path="/v1/series/{series_id}/events",
        tag="Series",
        summary="List a series' events by start time",
        params=(SERIES_ID, *PAGE),
        document=f"""
        query listSeriesEvents($series_id: ID!, {PAGE_VARIABLES}) {{
          series_events(series_id: $series_id, {PAGE_ARGUMENTS}) {{
            data {{ ...EventFields }} has_more next_cursor
          }}
        }}
        {EVENT_FIELDS}""",
        result="series_events",
        mcp=Mcp(
            title="List a series' events",
            description=(
                "List the events of a series visible to the caller, by start time. "
                "Paginated: pass next_cursor as cursor while has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="addSeriesEvent",
        method="POST",
        path="/v1/series/{series_id}/events",
        tag="Series",
        summary="Add an event to a series",
        params=(SERIES_ID,),
        body=SeriesEventLink,
        creates=True,
        status=204,
        document="""
        mutation addSeriesEvent($series_id: ID!, $input: SeriesEventLinkInput!) {
          add_series_event(series_id: $series_id, input: $input)
        }
        """,
        result=None,
        no_body_status="linked",
        mcp=Mcp(
            title="Add an event to a series",
            description=(
                "Link an event (evt_ ID) of the same profile into a series; both must be "
                "administered by the caller. An event may be in several series; linking "
                "again is a no-op."
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="removeSeriesEvent",
        method="DELETE",
        path="/v1/series/{series_id}/events/{event_id}",
        tag="Series",
        summary="Remove an event from a series (the event stays)",
        params=(SERIES_ID, EVENT_ID),
        document="""
        mutation removeSeriesEvent($series_id: ID!, $event_id: ID!) {
          remove_series_event(series_id: $series_id, event_id: $event_id)
        }
        """,
        result=None,
        status=204,
        no_body_status="removed",
        mcp=Mcp(
            title="Remove an event from a series",
            description="Unlink an event from a series. The event itself is never deleted.",
            destructive=True, idempotent=True,
        ),
    ),
)
