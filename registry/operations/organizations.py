from registry import Mcp, Operation, register

register(
    Operation(
        name="listOrganizations",
        method="GET",
        path="/v1/organizations",
        tag="Organizations",
        summary="List the organizations available to the caller for profile creation",
        document="""
        query listOrganizations {
          organizations { data { id name handle role is_default } has_more next_cursor }
        }
        """,
        result="organizations",
        mcp=Mcp(
            title="List organizations",
            description=(
                "List the organizations the caller belongs to, with the caller's role in each. "
                "The one with is_default true is used when createProfile omits organization_id. "
                "All organizations come in one page."
            ),
            read_only=True, idempotent=True,
        ),
    ),
)
