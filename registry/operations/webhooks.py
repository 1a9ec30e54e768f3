from domain.notify.webhooks import EVENT_TYPES, WebhookEndpointCreate, WebhookEndpointUpdate
from registry import Mcp, Operation, register
from registry.operations.common import PAGE, PAGE_ARGUMENTS, PAGE_VARIABLES, path_id
from registry.operations.profiles import PROFILE_ID

ENDPOINT_ID = path_id("endpoint_id", "whe", "webhook endpoint")

_SELECTION = "id profile_id url event_types is_active disabled_reason created_at updated_at"
ENDPOINT_FIELDS = f"""
fragment WebhookEndpointFields on WebhookEndpoint {{ {_SELECTION} }}
"""
_WITH_SECRET_FIELDS = f"""
fragment WebhookEndpointWithSecretFields on WebhookEndpointWithSecret {{ {_SELECTION} secret }}
"""

_ADMINS = "For the profile's owner and its organization's owners and admins."
_ABOUT = (
    "Each change to the profile's events and RSVPs is POSTed, signed per Standard Webhooks "
    "(whsec_ secret), as {type, timestamp, data}: data is the event or RSVP as the REST "
    "API shows it. Types: " + ", ".join(EVENT_TYPES) + "."
)
_REUSE_IDS = "endpoint_id: an exact whe_ ID from listWebhookEndpoints."

register(
    Operation(
        name="listWebhookEndpoints",
        method="GET",
        path="/v1/profiles/{profile_id}/webhook-endpoints",
        tag="Webhooks",
        summary="List a profile's webhook endpoints",
        params=(PROFILE_ID, *PAGE),
        document=f"""
        query listWebhookEndpoints($profile_id: ID!, {PAGE_VARIABLES}) {{
          webhook_endpoints(profile_id: $profile_id, {PAGE_ARGUMENTS}) {{
            data {{ ...WebhookEndpointFields }} has_more next_cursor
          }}
        }}
        {ENDPOINT_FIELDS}""",
        result="webhook_endpoints",
        mcp=Mcp(
            title="List a profile's webhook endpoints",
            description=(
                "List a profile's webhook endpoints, oldest first; disabled_reason says why "
                "delivery stopped. " + _ADMINS + " Paginated: pass next_cursor as cursor "
                "while has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="createWebhookEndpoint",
        method="POST",
        path="/v1/profiles/{profile_id}/webhook-endpoints",
        tag="Webhooks",
        summary="Register a webhook endpoint",
        params=(PROFILE_ID,),
        body=WebhookEndpointCreate,
        creates=True,
        status=201,
        location="/v1/webhook-endpoints/{id}",
        document=f"""
        mutation createWebhookEndpoint($profile_id: ID!, $input: WebhookEndpointCreateInput!) {{
          create_webhook_endpoint(profile_id: $profile_id, input: $input) {{
            ...WebhookEndpointWithSecretFields
          }}
        }}
        {_WITH_SECRET_FIELDS}""",
        result="create_webhook_endpoint",
        mcp=Mcp(
            title="Register a webhook endpoint",
            description=(
                "Register an https URL for a profile's changes. " + _ABOUT + " event_types "
                "narrows them (default: all). The answer holds the secret, shown only once. "
                + _ADMINS
            ),
        ),
    ),
    Operation(
        name="getWebhookEndpoint",
        method="GET",
        path="/v1/webhook-endpoints/{endpoint_id}",
        tag="Webhooks",
        summary="Retrieve a webhook endpoint",
        params=(ENDPOINT_ID,),
        document=f"""
        query getWebhookEndpoint($endpoint_id: ID!) {{
          webhook_endpoint(endpoint_id: $endpoint_id) {{ ...WebhookEndpointFields }}
        }}
        {ENDPOINT_FIELDS}""",
        result="webhook_endpoint",
        mcp=Mcp(
            title="Get a webhook endpoint",
            description=(
                "Retrieve a webhook endpoint (not its secret). " + _REUSE_IDS
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="updateWebhookEndpoint",
        method="PATCH",
        path="/v1/webhook-endpoints/{endpoint_id}",
        tag="Webhooks",
        summary="Update a webhook endpoint",
        params=(ENDPOINT_ID,),
        body=WebhookEndpointUpdate,
        document=f"""
        mutation updateWebhookEndpoint($endpoint_id: ID!, $input: WebhookEndpointUpdateInput!) {{
          update_webhook_endpoint(endpoint_id: $endpoint_id, input: $input) {{
            ...WebhookEndpointFields
          }}
        }}
        {ENDPOINT_FIELDS}""",
        result="update_webhook_endpoint",
        mcp=Mcp(
            title="Update a webhook endpoint",
            description=(
                "Change url, event_types or is_active. is_active false stops delivery (later "
                "changes are not sent; queued ones wait); true resumes a paused or disabled "
                "endpoint, oldest queued first. " + _REUSE_IDS
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="deleteWebhookEndpoint",
        method="DELETE",
        path="/v1/webhook-endpoints/{endpoint_id}",
        tag="Webhooks",
        summary="Delete a webhook endpoint",
        params=(ENDPOINT_ID,),
        document="""
        mutation deleteWebhookEndpoint($endpoint_id: ID!) {
          delete_webhook_endpoint(endpoint_id: $endpoint_id)
        }
        """,
        result=None,
        status=204,
        no_body_status="deleted",
        mcp=Mcp(
            title="Delete a webhook endpoint",
            description=(
                "Delete a webhook endpoint and its undelivered messages; to pause, set "
                "is_active false instead. " + _REUSE_IDS
            ),
            destructive=True,
        ),
    ),
    Operation(
        name="rotateWebhookEndpointSecret",
        method="POST",
        path="/v1/webhook-endpoints/{endpoint_id}/rotate-secret",
        tag="Webhooks",
        summary="Rotate a webhook endpoint's signing secret",
        params=(ENDPOINT_ID,),
        document=f"""
        mutation rotateWebhookEndpointSecret($endpoint_id: ID!) {{
          rotate_webhook_endpoint_secret(endpoint_id: $endpoint_id) {{
            ...WebhookEndpointWithSecretFields
          }}
        }}
        {_WITH_SECRET_FIELDS}""",
        result="rotate_webhook_endpoint_secret",
        mcp=Mcp(
            title="Rotate a webhook secret",
            description=(
                "A new signing secret, shown only once; for 24 hours messages are signed with "
                "both the new and the old one. " + _REUSE_IDS
            ),
        ),
    ),
)
