"""Request bodies (domain/validation.py): a field that may be omitted but not sent as
`null` (`Omittable`) refuses null exactly as its type alone does, and every body's
validation agrees with what its documents advertise about null."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, StringConstraints, ValidationError

import registry.operations  # noqa: F401  (importing them registers the operations)
from core.errors import ApiError
from domain.validation import Body, Omittable, _NotNull, validate
from registry import OPERATIONS, honest_defaults

Name = Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]


class _Patch(Body):
    flag: Omittable[bool] = None
    kind: Omittable[Literal["a", "b"]] = None
    name: Omittable[Name] = None
    note: str | None = None


def _refusal(data: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiError) as raised:
        validate(_Patch, data)
    return raised.value.envelope("req_test")["error"]


def test_an_omittable_field_is_left_out_when_omitted() -> None:
    assert validate(_Patch, {}).model_dump(exclude_unset=True) == {}
    sent = validate(_Patch, {"flag": False, "kind": "a", "name": "x", "note": None})
    assert sent.model_dump(exclude_unset=True) == {"flag": False, "kind": "a", "name": "x",
                                                    "note": None}


def test_an_omittable_field_refuses_null_as_its_type_does() -> None:
    for field, message in (("flag", "Input should be a valid boolean"),
                           ("kind", "Input should be 'a' or 'b'"),
                           ("name", "Input should be a valid string")):
        error = _refusal({field: None})
        assert error["code"] == "invalid_field" and error["param"] == field
        assert error["message"] == f"`{field}`: {message}.", error
    # The type's own rules still hold.
    assert _refusal({"name": " "})["code"] == "invalid_field"


def test_its_schema_is_the_type_alone() -> None:
    properties = honest_defaults(_Patch.model_json_schema())["properties"]
    assert {k: properties[k].get("type") for k in ("flag", "kind", "name")} == {
        "flag": "boolean", "kind": "string", "name": "string"}
    assert all("default" not in properties[k] and "anyOf" not in properties[k]
               for k in ("flag", "kind", "name"))


def test_only_an_optional_type_can_be_omittable() -> None:
    with pytest.raises(TypeError, match="needs an optional type"):
        class _Wrong(Body):
            flag: Annotated[bool, _NotNull()] = False


def _accepts_null(schema: dict[str, Any]) -> bool:
    options = schema.get("anyOf", [schema])
    return any(o.get("type") == "null" for o in options)


def _bodies() -> dict[str, type[BaseModel]]:
    return {op.body.__name__: op.body for op in OPERATIONS.values() if op.body is not None}


def test_every_body_refuses_null_exactly_where_its_schema_does() -> None:
    """The documents (OpenAPI, MCP, GraphQL inputs) are derived from these schemas: a
    field advertised without null must refuse it, and one advertised with it accept it."""
    checked = 0
    for name, body in _bodies().items():
        properties = body.model_json_schema()["properties"]
        for field, info in body.model_fields.items():
            if info.is_required():
                continue
            try:
                body.model_validate({field: None})
                refused = False
            except ValidationError as exc:
                refused = any(e["loc"][:1] == (field,) for e in exc.errors())
            assert refused != _accepts_null(properties[field]), (name, field)
            checked += 1
    assert checked > 50
