from registry import Mcp, Operation, register

register(
    Operation(
        name="getContext",
        method="GET",
        path="/v1/context",
        tag="Context",
        summary="The caller's time, zone, organizations, profiles and calendars",
        document="""
        query getContext {
          context {
            now time_zone local_now email
            organizations { id name role }
            profiles { data { id display_name organization_id } has_more }
            calendars { data { id name is_default } has_more }
            toolsets { name tool_count }
          }
        }
        """,
        result="context",
        mcp=Mcp(
            title="Get my context",
            description=(
                "Call first. Now in UTC and on the user's clock (time_zone, local_now: "
                "today's date and the zone to write times in), the user's email, "
                "organizations, the profiles they administer (where createProfileEvent "
                "publishes), their calendars (the default one takes personal events) and "
                "the MCP toolsets."
            ),
            read_only=True, idempotent=True,
        ),
    ),
)
