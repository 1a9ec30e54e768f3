"""The Strawberry schema: the single internal query model behind every transport."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.extensions import MaskErrors, ParserCache, ValidationCache
from strawberry.schema.config import StrawberryConfig

from core.errors import ApiError
from db.database import unavailable
from graph import limits
from graph.agenda import AgendaQueries
from graph.calendars import CalendarMutations, CalendarQueries
from graph.caller import CallerQueries
from graph.events import EventMutations, EventQueries
from graph.external_calendars import ExternalCalendarQueries
from graph.follows import FollowMutations, FollowQueries
from graph.freebusy import FreeBusyQueries
from graph.live import Subscription
from graph.occurrences import OccurrenceMutations, OccurrenceQueries
from graph.organizations import OrganizationQueries
from graph.profiles import ProfileMutations, ProfileQueries
from graph.rsvps import RsvpMutations, RsvpQueries
from graph.scalars import SCALARS
from graph.search import SearchQueries
from graph.series import SeriesMutations, SeriesQueries
from graph.subscriptions import SubscriptionMutations, SubscriptionQueries
from graph.webhooks import WebhookMutations, WebhookQueries


@strawberry.type
class Query(OrganizationQueries, ProfileQueries, EventQueries, OccurrenceQueries, SeriesQueries,
            RsvpQueries, FollowQueries, CalendarQueries, ExternalCalendarQueries,
            SubscriptionQueries, AgendaQueries, FreeBusyQueries, SearchQueries, WebhookQueries,
            CallerQueries):
    pass


@strawberry.type
class Mutation(ProfileMutations, EventMutations, OccurrenceMutations, SeriesMutations,
               RsvpMutations, FollowMutations, CalendarMutations, SubscriptionMutations,
               WebhookMutations):
    pass


_log = logging.getLogger("kalends.graphql")
MASKED = "Unexpected error."


class _Schema(strawberry.Schema):
    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        # A document refused before it ran (syntax, validation, the limits of
        # graph/limits.py, variable values) is the client's mistake: one line at info.
        # So is an ApiError, already answered. Strawberry logs the rest, bugs, at error
        # level with their traceback.
        unexpected = []
        for error in errors:
            if is_unexpected(error):
                unexpected.append(error)
            elif error.path is None:
                context = getattr(execution_context, "context", None)
                _log.info("graphql request refused", extra={
                    "request_id": getattr(context, "request_id", None),
                    "error": error.message,
                    **({"code": error.extensions["code"]}
                       if error.extensions and "code" in error.extensions else {}),
                })
        if unexpected:
            super().process_errors(unexpected, execution_context)


@dataclass(frozen=True)
class _Execution:
    """What the schema's error reporting reads (Strawberry's ExecutionContext)."""

    context: Any


def reported(errors: list[GraphQLError], context: Any) -> list[GraphQLError]:
    """Log the errors as the schema does (a refused request: one line; a bug: its
    traceback), then hide every error but an ApiError's from the client: what
    `/graphql` answers over POST and WebSocket alike. A resolver that lost its
    database connection, on whatever connection, failed with `service_unavailable`."""
    errors = [_unavailable(error) for error in errors]
    schema.process_errors(errors, _Execution(context))
    return [
        GraphQLError(MASKED, error.nodes, error.source, error.positions, error.path)
        if is_unexpected(error) else error
        for error in errors
    ]


def _unavailable(error: GraphQLError) -> GraphQLError:
    """The error as a lost database answers it, when that is what the resolver met."""
    raw = error.original_error
    lost = None if raw is None or isinstance(raw, ApiError) else unavailable(raw)
    if lost is None:
        return error
    lost.__cause__ = raw
    return GraphQLError(lost.message, error.nodes, error.source, error.positions,
                        error.path, lost)


def is_unexpected(error: GraphQLError) -> bool:
    """A resolver failed with something other than an ApiError: a bug. Errors without
    a path are about the request itself, raised before any field ran."""
    return (error.path is not None and error.original_error is not None
            and not isinstance(error.original_error, ApiError))


# Field names stay snake_case: the same names as the REST and MCP surfaces.
schema = _Schema(
    query=Query,
    mutation=Mutation,
    subscription=Subscription,
    config=StrawberryConfig(auto_camel_case=False, scalar_map=SCALARS),
    # Documents sent to /graphql by dashboards repeat: parse and validate each once.
    # Factories: the caches live at module level and outlast each request's instance.
    extensions=[
        # Depth, alias and cost bounds (graph/limits.py), before the validation cache.
        *limits.extensions(),
        lambda: ParserCache(maxsize=256),
        lambda: ValidationCache(maxsize=256),
        # Only ApiErrors speak to clients; anything else is a bug, logged, not shown.
        lambda: MaskErrors(should_mask_error=is_unexpected, error_message=MASKED),
    ],
)


def sdl() -> str:
    return schema.as_str() + "\n"


if __name__ == "__main__":  # python -m graph.schema > schema.graphql
    import sys

    sys.stdout.write(sdl())
