from domain.follows import FollowCreate, FollowingType
from registry import Mcp, Operation, Param, register
from registry.operations.common import PAGE, PAGE_ARGUMENTS, PAGE_VARIABLES, path_id
from registry.operations.profiles import PROFILE_ID

FOLLOW_ID = path_id("follow_id", "fol", "follow")

_FIELDS = """
fragment FollowFields on Follow { id following_type target_id created_at }
"""

register(
    Operation(
        name="listFollows",
        method="GET",
        path="/v1/follows",
        tag="Follows",
        summary="List the caller's follows",
        params=(
            Param("following_type", "query", FollowingType | None,
                  "Only follows of this type: profile, series or event.", default=None),
            *PAGE,
        ),
        document=f"""
        query listFollows($following_type: String, {PAGE_VARIABLES}) {{
          follows(following_type: $following_type, {PAGE_ARGUMENTS}) {{
            data {{ ...FollowFields }} has_more next_cursor
          }}
        }}
        {_FIELDS}""",
        result="follows",
        mcp=Mcp(
            title="List my follows",
            description=(
                "List the profiles, series and events the caller follows, oldest first; "
                "following_type (profile, series or event) narrows the list. target_id is "
                "null when the followed resource was deleted or is no longer visible to the "
                "caller. Paginated: pass next_cursor as cursor while has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="createFollow",
        method="POST",
        path="/v1/follows",
        tag="Follows",
        summary="Follow a profile, series or event",
        body=FollowCreate,
        creates=True,
        status=201,
        created="create_follow.created",
        location="/v1/follows/{id}",
        document=f"""
        mutation createFollow($input: FollowCreateInput!) {{
          create_follow(input: $input) {{ follow {{ ...FollowFields }} created }}
        }}
        {_FIELDS}""",
        result="create_follow.follow",
        mcp=Mcp(
            title="Follow a profile, series or event",
            description=(
                "Follow a profile (prf_ ID, not its platform_id handle), a series (ser_) or "
                "an event (evt_) visible to the caller; following_type says which, and "
                "target_id must carry its prefix. Following the same target again returns "
                "the existing follow and creates nothing."
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="deleteFollow",
        method="DELETE",
        path="/v1/follows/{follow_id}",
        tag="Follows",
        summary="Stop following",
        params=(FOLLOW_ID,),
        document="""
        mutation deleteFollow($follow_id: ID!) { delete_follow(follow_id: $follow_id) }
        """,
        result=None,
        status=204,
        no_body_status="deleted",
        mcp=Mcp(
            title="Unfollow",
            description=(
                "Delete one of the caller's follows by its fol_ ID (from listFollows or "
                "createFollow). An unknown follow, or another user's, is not found."
            ),
            destructive=True,
        ),
    ),
    Operation(
        name="listProfileFollowers",
        method="GET",
        path="/v1/profiles/{profile_id}/followers",
        tag="Profiles",
        summary="List who follows a profile",
        params=(PROFILE_ID, *PAGE),
        document=f"""
        query listProfileFollowers($profile_id: ID!, {PAGE_VARIABLES}) {{
          profile_followers(profile_id: $profile_id, {PAGE_ARGUMENTS}) {{
            data {{ follow_id display_name followed_at }} has_more next_cursor
          }}
        }}
        """,
        result="profile_followers",
        mcp=Mcp(
            title="List a profile's followers",
            description=(
                "List who follows a profile (prf_ ID), oldest follow first: each item is the "
                "follow's ID, the follower's display name and when they followed. Shown for "
                "public profiles, and for private ones to their owner and organization "
                "admins. Paginated: pass next_cursor as cursor while has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
)
