"""The schema the model sees: the tables in scope (introspected), rendered whole when they fit the
budget, or as a catalogue plus a lookup when they do not."""

from agent.schema.cache import SchemaCache, SchemaView, build_view
from agent.schema.catalog import Catalog
from agent.schema.tables import Column, Table, introspect, render_schema, render_table

__all__ = [
    "Catalog",
    "Column",
    "SchemaCache",
    "SchemaView",
    "Table",
    "build_view",
    "introspect",
    "render_schema",
    "render_table",
]
