"""GraphQL input types derived from the pydantic body models, so a body's shape
is declared once. Optional fields default to UNSET: a PATCH can tell an omitted
field from an explicit null."""

from __future__ import annotations

import types
import typing
from typing import Any, TypeVar, Union

import strawberry
from pydantic import BaseModel

from domain.validation import validate

M = TypeVar("M", bound=BaseModel)


def input_type(model: type[BaseModel], name: str) -> Any:
    annotations: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for field_name, info in model.model_fields.items():
        base = _graphql_type(info.annotation)
        if info.is_required():
            annotations[field_name] = base
        else:
            annotations[field_name] = base | None
            defaults[field_name] = strawberry.UNSET
    cls = type(name, (), {"__annotations__": annotations, **defaults})
    return strawberry.input(cls, name=name, description=model.__doc__)


def parse_input(model: type[M], value: Any) -> M:
    """Re-check a GraphQL input against its model: the same rules as REST and MCP."""
    data = {k: v for k, v in vars(value).items() if v is not strawberry.UNSET}
    return validate(model, data)


def _graphql_type(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _graphql_type(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _graphql_type(args[0])
    if origin is typing.Literal:  # enums arrive as their values' type, checked by pydantic
        return type(typing.get_args(annotation)[0])
    if origin is list:
        return list[_graphql_type(typing.get_args(annotation)[0])]  # type: ignore[misc]
    return annotation
