"""The operation registry: one declaration per operation, validated before serving."""

from __future__ import annotations

import pytest

import kalends.service.app  # noqa: F401  (prepares the registry)
import registry
from core.errors import ApiError
from graph.schema import schema
from registry import OPERATIONS, Mcp, Operation, bind_flat

ISSUE_2_OPERATIONS = {
    "listOrganizations", "listProfiles", "createProfile", "getProfile", "updateProfile",
    "deleteProfile",
}


def _op(document: str, name: str = "brokenOp") -> Operation:
    return Operation(
        name=name, method="GET", path="/v1/broken", tag="Test", summary="x",
        document=document, result="profile", mcp=Mcp(title="x", description="x"),
    )


def test_every_operation_of_the_foundation_is_registered() -> None:
    assert set(OPERATIONS) >= ISSUE_2_OPERATIONS
    routes = [(op.method, op.path) for op in OPERATIONS.values()]
    assert len(routes) == len(set(routes))


@pytest.mark.parametrize(
    "document",
    [
        "query brokenOp { profile(profile_id: 1) { no_such_field } }",
        "query brokenOp { profile { id } }",  # missing required argument
        "query otherName { organizations { has_more } }",  # name must match
        "query brokenOp { organizations { has_more } ",  # syntax
    ],
)
def test_a_broken_document_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, document: str
) -> None:
    monkeypatch.setattr(registry, "OPERATIONS", {"brokenOp": _op(document)})
    with pytest.raises(Exception) as info:
        registry.prepare(schema._schema)
    assert "brokenOp" in str(info.value) or "Syntax Error" in str(info.value)


def test_declaring_an_operation_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        registry.register(OPERATIONS["getProfile"])


def test_flat_arguments_split_into_path_query_and_body() -> None:
    op = OPERATIONS["updateProfile"]
    variables = bind_flat(op, {"profile_id": "PRF_" + "A" * 32, "display_name": "New"})
    assert variables == {"profile_id": "prf_" + "a" * 32, "input": {"display_name": "New"}}
    with pytest.raises(ApiError) as info:
        bind_flat(op, {"profile_id": "prf_" + "a" * 32, "colour": "red"})
    assert (info.value.code, info.value.param) == ("unknown_field", "colour")
    with pytest.raises(ApiError) as info:
        bind_flat(OPERATIONS["getProfile"], {"profile_id": "prf_" + "a" * 32, "x": 1})
    assert (info.value.code, info.value.param) == ("unknown_field", "x")
    with pytest.raises(ApiError) as info:
        bind_flat(OPERATIONS["listProfiles"], {"limit": 500})
    assert (info.value.code, info.value.param) == ("invalid_field", "limit")


def test_tool_input_schemas_are_flat_and_closed() -> None:
    schema_ = OPERATIONS["updateProfile"].tool_input_schema()
    assert schema_["additionalProperties"] is False
    assert schema_["required"] == ["profile_id"]
    assert schema_["properties"]["profile_id"]["pattern"] == "^[pP][rR][fF]_[0-9a-fA-F]{32}$"
    assert "platform_id" not in schema_["properties"]
