"""Many rows written with one prepared statement: ``executemany`` where the ORM builds one each.

The writes that come in batches (a checkpoint of every run changed at one moment, the
streaming answers saved each second, trace entries, message rows) were the ORM thread's
largest cost at scale, and most of it was Python building the SQL: a queryset, a WHERE node
and an UPDATE compiler per run, or a compiler pass over every value of a ``bulk_create``.
Here the statement is built once per batch from the model's metadata and run with
``executemany`` (pipelined by psycopg). Values are adapted exactly as the ORM adapts them
(``pre_save`` and ``get_db_prep_save`` of each field), and nothing else differs from
``QuerySet.update`` and ``bulk_create``: no signals, no ``save()``, auto_now untouched by an
update. Call inside the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connections, models, router
from django.db.models.constants import OnConflict


def update_rows(
    model: type[models.Model],
    fields: Sequence[str],
    rows: Iterable[tuple[Any, Sequence[Any]]],
    *,
    only_if_in: tuple[str, Sequence[Any]] | None = None,
) -> None:
    """For each ``(pk, values)``: ``UPDATE ... SET fields = values WHERE pk = pk``.

    ``only_if_in=(field, allowed)`` adds ``AND field IN allowed`` (a row whose field holds
    another value is left as it is).
    """
    rows = list(rows)
    if not rows or not fields:
        return
    meta = model._meta
    connection = connections[router.db_for_write(model)]
    quote = connection.ops.quote_name
    columns = [meta.get_field(name) for name in fields]
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in columns)  # type: ignore[union-attr]
    where = f"{quote(meta.pk.column)} = %s"  # type: ignore[union-attr]
    extra: list[Any] = []
    if only_if_in is not None:
        name, allowed = only_if_in
        field = meta.get_field(name)
        extra = [field.get_db_prep_save(value, connection) for value in allowed]  # type: ignore[union-attr]
        where += f" AND {quote(field.column)} IN ({', '.join(['%s'] * len(extra))})"  # type: ignore[union-attr]
    sql = f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {where}"
    params = [
        [
            *(
                field.get_db_prep_save(value, connection)  # type: ignore[union-attr]
                for field, value in zip(columns, values, strict=True)
            ),
            pk,
            *extra,
        ]
        for pk, values in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def insert_rows(objs: Sequence[models.Model], *, ignore_conflicts: bool = False) -> None:
    """``bulk_create(objs)`` of unsaved objects of one model, primary keys left to the database.

    With ``ignore_conflicts`` a row that breaks a unique constraint is skipped. The objects'
    ``pk`` stays unset (nothing reads them back).
    """
    if not objs:
        return
    model = type(objs[0])
    meta = model._meta
    connection = connections[router.db_for_write(model)]
    quote = connection.ops.quote_name
    fields = [
        field
        for field in meta.concrete_fields
        if not field.generated and field not in meta.db_returning_fields
    ]
    on_conflict = OnConflict.IGNORE if ignore_conflicts else None
    statement = connection.ops.insert_statement(on_conflict=on_conflict)
    suffix = connection.ops.on_conflict_suffix_sql(fields, on_conflict, None, None)
    sql = (
        f"{statement} {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) {suffix}"
    ).rstrip()
    params = [
        [field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields]
        for obj in objs
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
