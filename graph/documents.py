"""The documents `POST /graphql` has seen, each parsed, validated and compiled once.

Dashboards send the same few documents over and over, so the work that depends
on the document alone is done once and kept: its syntax tree and its validation
(graphql-core's rules and graph/limits.py's bounds) on its first request, and one
execution plan per operation (graph/plan.py) when the operation comes again. A
document a plan cannot run (abstract types, `@defer`) keeps graphql-core's
executor, as does a request naming no single operation (graphql-core words that
error).

The cache is a least-recently-used map bounded twice: by entries, and by an
estimate of the memory each holds (`_weight`), so neither many small documents
nor a few huge ones can grow the process past `max_bytes`. Refused documents
are kept too: a client repeating a broken document is refused without parsing
it again. Automatic persisted queries (Apollo's protocol) find documents here by
their SHA-256, so a hash works for exactly as long as its document is kept.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

from aiohttp import web
from graphql import (
    DocumentNode,
    ExecutionResult,
    FragmentDefinitionNode,
    GraphQLError,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    execute,
    parse,
    specified_rules,
    validate,
)
from graphql.pyutils import is_awaitable

from domain import cpu
from graph.limits import QueryLimits
from graph.plan import (
    MAX_FORMS,
    Plan,
    Text,
    Unsupported,
    compile_operation,
    directive_variables,
)

MAX_ENTRIES = 1000
MAX_BYTES = 64 * 1024 * 1024
# What an entry holds, an upper bound measured with tracemalloc on dashboards'
# documents (tests/graph_bridge/test_graphql_documents.py checks it): the syntax tree and its
# validation take 15-45 KB, plus ~250 bytes per character of text; each compiled
# form of an operation (graph/plan.py) as much again.
PARSED_BYTES = 32 * 1024
FORM_BYTES = 32 * 1024
BYTES_PER_CHARACTER = 256


def _weight(text: str, node: DocumentNode | None) -> int:
    """The bytes an entry may come to hold once every operation and form it may
    keep is compiled: forms are kept per combination of `@include`/`@skip` values."""
    parsed = PARSED_BYTES + BYTES_PER_CHARACTER * len(text)
    if node is None:
        return parsed
    operations = sum(isinstance(d, OperationDefinitionNode) for d in node.definitions)
    forms = min(MAX_FORMS, 1 << len(directive_variables(node))) * operations
    return parsed + forms * (FORM_BYTES + BYTES_PER_CHARACTER * len(text))


_RULES = (*specified_rules, QueryLimits)


class Document:
    """One document text: its tree and refusal, and its plans as they are needed."""

    __slots__ = ("_plans", "_seen", "errors", "node", "sha256", "text", "weight")

    def __init__(self, schema: GraphQLSchema, text: str, sha256: str) -> None:
        self.text = text
        self.sha256 = sha256
        self._plans: dict[str | None, Plan | None] = {}
        self._seen: set[str | None] = set()
        self.node: DocumentNode | None = None
        try:
            node = parse(Text(text))
        except GraphQLError as error:
            self.errors: list[GraphQLError] = [error]
            self.weight = _weight(text, None)
            return
        self.errors = validate(schema, node, _RULES)
        if not self.errors:
            self.node = node
        self.weight = _weight(text, self.node)

    @property
    def refused(self) -> bool:
        return self.node is None

    def operation(self, name: str | None) -> OperationDefinitionNode | None:
        """The operation a request names, when it names exactly one."""
        assert self.node is not None
        operations = [d for d in self.node.definitions if isinstance(d, OperationDefinitionNode)]
        if name is None:
            return operations[0] if len(operations) == 1 else None
        return next((o for o in operations if o.name and o.name.value == name), None)

    def plan(self, schema: GraphQLSchema, operation: OperationDefinitionNode) -> Plan | None:
        """The operation's plan, compiled when it is asked for a second time; None:
        graphql-core runs it. A document sent once (literals written into its text,
        say) would not repay compiling: graphql-core costs it less than a compiler."""
        name = operation.name.value if operation.name else None
        if name in self._plans:
            return self._plans[name]
        if name not in self._seen:
            self._seen.add(name)
            return None
        assert self.node is not None
        fragments = [d for d in self.node.definitions if isinstance(d, FragmentDefinitionNode)]
        plan: Plan | None
        try:
            plan = compile_operation(schema, DocumentNode(definitions=(operation, *fragments)))
        except Unsupported:
            plan = None
        self._plans[name] = plan
        return plan


class Documents:
    """The bounded cache of documents, by text and by SHA-256."""

    def __init__(self, schema: GraphQLSchema, *, max_entries: int = MAX_ENTRIES,
                 max_bytes: int = MAX_BYTES) -> None:
        self.schema = schema
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._by_text: OrderedDict[str, Document] = OrderedDict()
        self._by_hash: dict[str, Document] = {}

    def __len__(self) -> int:
        return len(self._by_text)

    def get(self, text: str) -> Document:
        document = self._by_text.get(text)
        if document is not None:
            self._by_text.move_to_end(text)
            return document
        document = Document(self.schema, text, hashlib.sha256(text.encode()).hexdigest())
        self._keep(document)
        return document

    async def load(self, text: str) -> Document:
        """`get`, with a document not kept yet parsed and validated beside the event
        loop (docs/api-choices.md, "Bounded work"): validating a few kilobytes of document takes
        milliseconds."""
        document = self._by_text.get(text)
        if document is None:
            made = await cpu.run(Document, self.schema, text,
                                 hashlib.sha256(text.encode()).hexdigest())
            document = self._by_text.get(text)  # made meanwhile by another request?
            if document is None:
                self._keep(made)
                return made
        self._by_text.move_to_end(text)
        return document

    def by_hash(self, sha256: str) -> Document | None:
        document = self._by_hash.get(sha256)
        if document is not None:
            self._by_text.move_to_end(document.text)
        return document

    def _keep(self, document: Document) -> None:
        if document.weight > self.max_bytes:
            return  # answered, never kept
        self._by_text[document.text] = document
        self._by_hash[document.sha256] = document
        self.bytes += document.weight
        while len(self._by_text) > self.max_entries or self.bytes > self.max_bytes:
            _, oldest = self._by_text.popitem(last=False)
            del self._by_hash[oldest.sha256]
            self.bytes -= oldest.weight


DOCUMENTS = web.AppKey("graphql_documents", Documents)
"""The process's documents, for POST, GET and WebSocket alike (set by graph_bridge/http.py)."""


async def run(schema: GraphQLSchema, document: Document, context: Any,
              variables: dict[str, Any] | None, operation_name: str | None) -> ExecutionResult:
    """What `graphql.execute` answers for this request, by the document's plan
    where it has one."""
    if document.refused:
        return ExecutionResult(None, document.errors)
    operation = document.operation(operation_name)
    if operation is not None and operation.operation is OperationType.SUBSCRIPTION:
        return ExecutionResult(None, [GraphQLError(
            "Subscriptions are served over WebSocket at /graphql (graphql-transport-ws).",
            operation)])
    plan = None if operation is None else document.plan(schema, operation)
    if plan is not None:
        return await plan.execute(context, variables)
    assert document.node is not None
    result = execute(schema, document.node, context_value=context, variable_values=variables,
                     operation_name=operation_name)
    if is_awaitable(result):
        result = await result
    assert isinstance(result, ExecutionResult)
    return result


__all__ = ["DOCUMENTS", "MAX_BYTES", "MAX_ENTRIES", "Document", "Documents", "run"]
