from domain.subscriptions import SubscriptionCreate, SubscriptionUpdate
from registry import Mcp, Operation, register
from registry.operations.common import PAGE, PAGE_ARGUMENTS, PAGE_VARIABLES, path_id

SUBSCRIPTION_ID = path_id("subscription_id", "sub", "subscription")

_FIELDS = """
fragment SubscriptionFields on Subscription {
  id profile_id series_id subscription_type is_active access_valid include_personal_calendar
  created_at updated_at
}
"""

_SYNC = (
    "Synced copies are read-only calendar events in the caller's default calendar; they "
    "follow the source within seconds, in the background."
)

register(
    Operation(
        name="listSubscriptions",
        method="GET",
        path="/v1/subscriptions",
        tag="Subscriptions",
        summary="List the caller's subscriptions",
        params=PAGE,
        document=f"""
        query listSubscriptions({PAGE_VARIABLES}) {{
          subscriptions({PAGE_ARGUMENTS}) {{
            data {{ ...SubscriptionFields }} has_more next_cursor
          }}
        }}
        {_FIELDS}""",
        result="subscriptions",
        mcp=Mcp(
            title="List my subscriptions",
            description=(
                "List the caller's subscriptions to profiles and series, active and paused, "
                "oldest first. access_valid false means the source is no longer visible. "
                "Paginated: pass next_cursor as cursor while has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="createSubscription",
        method="POST",
        path="/v1/subscriptions",
        tag="Subscriptions",
        summary="Subscribe to a profile or a series",
        body=SubscriptionCreate,
        creates=True,
        status=201,
        created="create_subscription.created",
        location="/v1/subscriptions/{id}",
        document=f"""
        mutation createSubscription($input: SubscriptionCreateInput!) {{
          create_subscription(input: $input) {{
            subscription {{ ...SubscriptionFields }} created
          }}
        }}
        {_FIELDS}""",
        result="create_subscription.subscription",
        mcp=Mcp(
            title="Subscribe to a profile or series",
            description=(
                "Sync a profile's (subscription_type profile, profile_id prf_...) or a "
                "series' (subscription_type series, series_id ser_...) visible events into "
                f"the caller's default calendar. {_SYNC} Subscribing again to the same "
                "source reactivates it (same id) and replaces external_calendar_ids (xcal_ "
                "IDs from listExternalCalendars, never cal_ IDs). consolidate true retires "
                "the caller's subscriptions to series of the same profile. 409 "
                "subscription_cleanup_in_progress: retry after a moment."
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="getSubscription",
        method="GET",
        path="/v1/subscriptions/{subscription_id}",
        tag="Subscriptions",
        summary="Retrieve a subscription",
        params=(SUBSCRIPTION_ID,),
        document=f"""
        query getSubscription($subscription_id: ID!) {{
          subscription(subscription_id: $subscription_id) {{ ...SubscriptionFields }}
        }}
        {_FIELDS}""",
        result="subscription",
        mcp=Mcp(
            title="Get a subscription",
            description="Retrieve one of the caller's subscriptions by its sub_ ID.",
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="updateSubscription",
        method="PATCH",
        path="/v1/subscriptions/{subscription_id}",
        tag="Subscriptions",
        summary="Pause or resume a subscription",
        params=(SUBSCRIPTION_ID,),
        body=SubscriptionUpdate,
        document=f"""
        mutation updateSubscription($subscription_id: ID!, $input: SubscriptionUpdateInput!) {{
          update_subscription(subscription_id: $subscription_id, input: $input) {{
            ...SubscriptionFields
          }}
        }}
        {_FIELDS}""",
        result="update_subscription",
        mcp=Mcp(
            title="Pause or resume a subscription",
            description=(
                "is_active false stops new events from syncing and keeps the copies already "
                "made; is_active true resumes and catches up."
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="deleteSubscription",
        method="DELETE",
        path="/v1/subscriptions/{subscription_id}",
        tag="Subscriptions",
        summary="Unsubscribe",
        params=(SUBSCRIPTION_ID,),
        no_body_status="deleted",
        document="""
        mutation deleteSubscription($subscription_id: ID!) {
          delete_subscription(subscription_id: $subscription_id)
        }
        """,
        result=None,
        status=204,
        mcp=Mcp(
            title="Unsubscribe",
            description=(
                "Unsubscribe. The copies synced under this subscription are removed from the "
                "calendar by a background cleanup, unless another subscription of the caller "
                "covers them."
            ),
            destructive=True, idempotent=True,
        ),
    ),
)
