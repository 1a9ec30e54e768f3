from domain.profiles import ProfileCreate, ProfileUpdate
from registry import Mcp, Operation, register
from registry.operations.common import PAGE, PAGE_ARGUMENTS, PAGE_VARIABLES, path_id

PROFILE_ID = path_id("profile_id", "prf", "profile")

PROFILE_FIELDS = """
fragment ProfileFields on Profile {
  id platform_id display_name description profile_image_url header_image_url
  is_private default_event_duration_minutes created_at updated_at
}
"""

register(
    Operation(
        name="listProfiles",
        method="GET",
        path="/v1/profiles",
        tag="Profiles",
        summary="List the profiles the caller owns or administers",
        params=PAGE,
        document=f"""
        query listProfiles({PAGE_VARIABLES}) {{
          profiles({PAGE_ARGUMENTS}) {{ data {{ ...ProfileFields }} has_more next_cursor }}
        }}
        {PROFILE_FIELDS}""",
        result="profiles",
        mcp=Mcp(
            title="List my profiles",
            description=(
                "List profiles the caller owns or administers through an organization, oldest "
                "first. Not a discovery list. Paginated: pass next_cursor as cursor while "
                "has_more is true."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="createProfile",
        method="POST",
        path="/v1/profiles",
        tag="Profiles",
        summary="Create a profile",
        body=ProfileCreate,
        creates=True,
        status=201,
        location="/v1/profiles/{id}",
        document=f"""
        mutation createProfile($input: ProfileCreateInput!) {{
          create_profile(input: $input) {{ ...ProfileFields organization_id }}
        }}
        {PROFILE_FIELDS}""",
        result="create_profile",
        mcp=Mcp(
            title="Create a profile",
            description=(
                "Create a public-facing profile. platform_id is a unique handle (3 to 64 of "
                "letters, digits, _ . -); it is not a prf_ ID. organization_id (org_ ID from "
                "listOrganizations) defaults to the caller's default organization."
            ),
        ),
    ),
    Operation(
        name="getProfile",
        method="GET",
        path="/v1/profiles/{profile_id}",
        tag="Profiles",
        summary="Retrieve a profile",
        params=(PROFILE_ID,),
        document=f"""
        query getProfile($profile_id: ID!) {{
          profile(profile_id: $profile_id) {{ ...ProfileFields }}
        }}
        {PROFILE_FIELDS}""",
        result="profile",
        mcp=Mcp(
            title="Get a profile",
            description=(
                "Retrieve a profile by its prf_ ID (not its platform_id handle). Private "
                "profiles are visible only to their owner and organization."
            ),
            read_only=True, idempotent=True,
        ),
    ),
    Operation(
        name="updateProfile",
        method="PATCH",
        path="/v1/profiles/{profile_id}",
        tag="Profiles",
        summary="Update a profile",
        params=(PROFILE_ID,),
        body=ProfileUpdate,
        document=f"""
        mutation updateProfile($profile_id: ID!, $input: ProfileUpdateInput!) {{
          update_profile(profile_id: $profile_id, input: $input) {{ ...ProfileFields }}
        }}
        {PROFILE_FIELDS}""",
        result="update_profile",
        mcp=Mcp(
            title="Update a profile",
            description=(
                "Change display_name, description, image URLs or is_private of a profile the "
                "caller owns or administers. platform_id cannot change. null clears a nullable "
                "field; omitted fields are left as they are."
            ),
            idempotent=True,
        ),
    ),
    Operation(
        name="deleteProfile",
        method="DELETE",
        path="/v1/profiles/{profile_id}",
        tag="Profiles",
        summary="Delete a profile (soft delete, idempotent)",
        params=(PROFILE_ID,),
        document="""
        mutation deleteProfile($profile_id: ID!) { delete_profile(profile_id: $profile_id) }
        """,
        result=None,
        status=204,
        no_body_status="deleted",
        mcp=Mcp(
            title="Delete a profile",
            description=(
                "Soft-delete a profile the caller owns or administers; its data is scheduled "
                "for cleanup and its handle becomes free. Deleting it again is a no-op."
            ),
            destructive=True, idempotent=True,
        ),
    ),
)
