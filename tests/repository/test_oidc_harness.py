"""The external authorization server harness itself (tests/oidc_server.py):
oidc-provider issues verifiable JWT access tokens for one resource, honours
each client's allowed scopes, and rotates its signing key on the same issuer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest
from oidc_server import OidcProvider, TokenError

RESOURCE = "http://127.0.0.1:9999/mcp"
WRITER = {"client_id": "writer", "client_secret": "writer-secret",
          "scope": "kalends:read kalends:write"}
READER = {"client_id": "reader", "client_secret": "reader-secret", "scope": "kalends:read"}
POSTER = {"client_id": "poster", "client_secret": "poster-secret", "scope": "kalends:read",
          "token_endpoint_auth_method": "client_secret_post"}


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with OidcProvider(RESOURCE, [WRITER, READER, POSTER]) as provider:
        yield provider


def verified_claims(provider: OidcProvider, token: str) -> dict[str, Any]:
    """The token's claims, its signature checked against the published JWKS."""
    discovery = httpx.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=10)
    jwks_uri = discovery.json()["jwks_uri"]
    published = {key["kid"] for key in httpx.get(jwks_uri, timeout=10).json()["keys"]}
    assert jwt.get_unverified_header(token)["kid"] in published
    signing_key = jwt.PyJWKClient(jwks_uri, cache_keys=False).get_signing_key_from_jwt(token)
    claims: dict[str, Any] = jwt.decode(
        token, signing_key, algorithms=["ES256"], audience=RESOURCE, issuer=provider.issuer,
        options={"require": ["iss", "aud", "sub", "exp", "iat"]},
    )
    return claims


def test_token_is_a_verifiable_jwt_for_the_resource(provider: OidcProvider) -> None:
    token = provider.token(WRITER["client_id"], WRITER["client_secret"],
                           "kalends:read kalends:write")
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "ES256"
    assert header["typ"] == "at+jwt"
    assert header["kid"] == provider.signing_kid

    claims = verified_claims(provider, token)
    assert claims["iss"] == provider.issuer
    aud = claims["aud"]
    assert aud == RESOURCE or (isinstance(aud, list) and RESOURCE in aud)
    assert claims["sub"] == claims["client_id"] == WRITER["client_id"]
    assert claims["scope"].split() == ["kalends:read", "kalends:write"]
    assert time.time() < claims["exp"] <= time.time() + 300 + 5

    # The resource named explicitly, and client_secret_post; another resource is refused.
    explicit = provider.token(READER["client_id"], READER["client_secret"], "kalends:read",
                              resource=RESOURCE)
    assert verified_claims(provider, explicit)["scope"] == "kalends:read"
    posted = provider.token(POSTER["client_id"], POSTER["client_secret"], "kalends:read",
                            auth="post")
    assert verified_claims(provider, posted)["sub"] == POSTER["client_id"]
    with pytest.raises(TokenError) as refused:
        provider.token(READER["client_id"], READER["client_secret"], "kalends:read",
                       resource="http://127.0.0.1:9999/other")
    assert refused.value.error == "invalid_target"


def test_scope_beyond_the_clients_allowance_is_refused(provider: OidcProvider) -> None:
    with pytest.raises(TokenError) as refused:
        provider.token(READER["client_id"], READER["client_secret"], "kalends:write")
    assert refused.value.status == 400
    assert refused.value.error == "invalid_scope"

    with pytest.raises(TokenError) as wrong_secret:
        provider.token(READER["client_id"], "not-the-secret", "kalends:read")
    assert wrong_secret.value.error == "invalid_client"


def test_rotate_keys_signs_with_a_new_published_kid(provider: OidcProvider) -> None:
    issuer = provider.issuer
    before = provider.token(READER["client_id"], READER["client_secret"], "kalends:read")
    old_kid = jwt.get_unverified_header(before)["kid"]

    provider.rotate_keys()

    assert provider.issuer == issuer
    after = provider.token(READER["client_id"], READER["client_secret"], "kalends:read")
    new_kid = jwt.get_unverified_header(after)["kid"]
    assert new_kid != old_kid
    assert new_kid == provider.signing_kid
    published = {key["kid"] for key in provider.public_jwks()["keys"]}
    assert new_kid in published
    assert old_kid in published  # keep_previous=True: an ordinary rollover
    assert verified_claims(provider, after)["iss"] == issuer
    assert verified_claims(provider, before)["sub"] == READER["client_id"]
