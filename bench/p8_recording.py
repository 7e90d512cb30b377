"""P8 recording throughput: exchanges persisted and published per second (and per CPU second) by
the product's recording path ÷ a bare INSERT loop of the same rows into the same table.

The exchanges come from a taped turn: one turn of ``TAPE_STEPS`` model calls run through the
product (``turn_run``, the fake model, the bundled stdio server) before anything is timed; its
model calls and ``tools/call`` exchanges, read back, are the records every leg writes (the model
requests grow with the turn's history, as they do).

Five legs, each writing ``BENCH_P8_EXCHANGES`` exchanges (2,000 by default) of fresh turns:

- **product** — the recording path as a turn drives it: a ``TurnRecorder`` per turn, and for each
  taped exchange the steps a turn makes (a ``decide`` step with the model call's exchange, a
  ``tool`` step under it with the ``tools/call`` exchange); the process's record writer redacts,
  escapes, hashes into the conversation's chain, indexes the request's new span and commits the
  batches, then rings the doorbells on Redis (``inspector.live``). Timed from the first step to
  every recorder drained and every doorbell sent. The product writes a step row per exchange too:
  that is part of what recording an exchange costs it.
- **product, ORM store** — the same, with the record store forced to the ORM reference
  (``RECORD_STORE = "orm"``): what the product's path costs without PostgreSQL's fast path.
- **fast path** — PostgreSQL's record store alone (``record.postgres.PostgresStore``: ``COPY``)
  on the rows the product stored, ``CHUNK`` rows per write (the writer's most batches per write).
- **ORM reference** — the ORM record store (``record.orm.OrmStore``: ``bulk_create``) on the
  same rows, ``CHUNK`` per transaction: the readable way to write them, and what the fast path
  is measured against.
- **bare** — plain psycopg on its own connection: ``executemany`` of one ``INSERT`` per row,
  ``CHUNK`` rows per transaction, nothing else.

Every leg commits with ``synchronous_commit = off``, as the writer does. CPU is this process's
(``time.process_time``: the loop, the writer and publisher threads, the client library), so
"per core" is exchanges per second of the process's CPU; the database backends' CPU (read from
``/proc`` for the bench database's connections) is reported beside it, and the product's CPU
per thread (the loop, ``record-preparer``, ``record-writer``, ``live-publisher``). On a miss one
more product leg runs under py-spy (``bench/results/p8-recording-profile.txt``).

Target: the product at least half the bare loop's throughput. The product does, per exchange,
about twice the database work of the bare loop (the step row and its update go with it) and
the redaction, hashing and publishing a record needs; at half the bare rate the database still
bounds it, below that the recorder's own Python does. The ratio of CPU per exchange, and the
fast path against the ORM reference, are reported, not judged.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, models, transaction
from django.test import override_settings
from psycopg.types.json import Jsonb

from bench import fixtures, profiling
from bench.context import Context
from bench.environment import REPO_ROOT
from bench.fake_model import FakeModel
from bench.processes import cpu_seconds
from bench.stats import Result, judged, not_run, summary
from conversations.lifecycle import turn_claim
from conversations.loop.wire import WireExchange
from conversations.models import Exchange, Step, Turn
from conversations.record.orm import OrmStore
from conversations.record.postgres import PostgresStore
from conversations.record.recording import TurnRecorder
from conversations.record.store import Batch
from conversations.runner import turn_run
from inspector import live

ID, NAME, UNIT, TARGET, LIMIT = (
    "P8",
    "recording throughput",
    "×",
    "≥ 0.5× of a bare INSERT loop's exchanges per second",
    0.5,
)
TAPE_STEPS = 10
EXCHANGES = int(os.environ.get("BENCH_P8_EXCHANGES", "2000"))
CHUNK = 200
LEGS = ("product", "product, ORM store", "fast path", "ORM reference", "bare")
QUESTION = "Work out the running totals with the calculator, one call at a time."
# Columns a copied row takes from its new turn, or leaves to the database.
_OWN_COLUMNS = {"id", "turn_id", "conversation_id", "step_id"}


@dataclass
class Leg:
    """One leg's write of ``exchanges`` rows: wall and CPU seconds (this process, the database)."""

    exchanges: int
    wall: float
    cpu: float
    db_cpu: float

    @property
    def per_second(self) -> float:
        return self.exchanges / self.wall

    @property
    def per_cpu_second(self) -> float:
        """Exchanges per second of this process's CPU: the rate one core sustains (0: no CPU read)."""
        return self.exchanges / self.cpu if self.cpu else 0.0

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu / self.exchanges

    @property
    def db_cpu_ms(self) -> float:
        return 1000 * self.db_cpu / self.exchanges


def compared(leg: Leg, reference: Leg) -> dict[str, float]:
    """``leg`` against ``reference``: throughput ratio (above 1: faster), CPU per exchange ratio
    (above 1: more CPU), per core ratio, and the database's CPU per exchange ratio (0 where the
    reference's CPU could not be read)."""

    def ratio(mine: float, theirs: float) -> float:
        return mine / theirs if theirs else 0.0

    return {
        "throughput": ratio(leg.per_second, reference.per_second),
        "cpu_per_exchange": ratio(leg.cpu_ms, reference.cpu_ms),
        "per_core": ratio(leg.per_cpu_second, reference.per_cpu_second),
        "db_cpu_per_exchange": ratio(leg.db_cpu_ms, reference.db_cpu_ms),
    }


def turns_for(exchanges: int, per_turn: int) -> list[int]:
    """How many taped exchanges each turn replays: whole tapes, the last one cut to fit."""
    if per_turn <= 0:
        raise ValueError("the tape has no exchanges")
    full, rest = divmod(exchanges, per_turn)
    return [per_turn] * full + ([rest] if rest else [])


def _threads() -> dict[str, float]:
    """CPU seconds of this process's threads so far, by name (the loop is ``MainThread``)."""
    spent: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.native_id is not None:
            # The task's own entry: ``/proc/<tid>/stat`` counts the whole process.
            task = f"{os.getpid()}/task/{thread.native_id}"
            spent[thread.name] = spent.get(thread.name, 0.0) + cpu_seconds(task)
    return spent


def _backends() -> dict[int, float]:
    """CPU seconds of the database backends serving the bench database (0 where unreadable)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        return {int(pid): cpu_seconds(int(pid)) for (pid,) in cursor.fetchall()}


def _timed(write: Callable[[], None], exchanges: int) -> Leg:
    db_before = _backends()
    cpu_before = time.process_time()
    started = time.perf_counter()
    write()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    db_after = _backends()
    db_cpu = sum(value - db_before.get(pid, 0.0) for pid, value in db_after.items())
    return Leg(exchanges=exchanges, wall=wall, cpu=cpu, db_cpu=max(db_cpu, 0.0))


def _tape(owner: Any) -> list[WireExchange]:
    """One product turn's model calls and ``tools/call`` exchanges, as the recorder receives them."""
    server = fixtures.demo_server()
    with FakeModel(steps=TAPE_STEPS, latency=0) as model:
        _, turn = fixtures.queued_turn(
            owner=owner, profile=fixtures.fake_profile(model.base_url), server=server, question=QUESTION
        )
        turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    if turn.status != Turn.Status.DONE:
        raise RuntimeError(f"the taped turn ended {turn.status}: {turn.error}")
    rows = Exchange.objects.filter(turn=turn).order_by("seq")
    tape = [
        WireExchange(
            channel=row.channel,
            label=row.label,
            started_at=row.started_at,
            direction=row.direction,
            jsonrpc_id=row.jsonrpc_id,
            request_headers=dict(row.request_headers),
            request_body=row.request_body,
            response_headers=dict(row.response_headers),
            response_body=row.response_body,
            status=row.status,
            error=row.error,
            duration_ms=row.duration_ms,
            server_id=row.server_id,
            server_name=row.server_name,
        )
        for row in rows
        if row.channel == Exchange.Channel.LLM or row.label == "tools/call"
    ]
    if sum(1 for record in tape if record.channel == Exchange.Channel.LLM) != TAPE_STEPS:
        raise RuntimeError(f"the taped turn has {len(tape)} exchanges, not {TAPE_STEPS} model calls")
    return tape


def _new_turns(owner: Any, count: int) -> list[Turn]:
    profile = fixtures.demo_profile()
    server = fixtures.demo_server()
    with transaction.atomic():
        turns = [
            fixtures.queued_turn(owner=owner, profile=profile, server=server, question=QUESTION)[1]
            for _ in range(count)
        ]
    return list(Turn.objects.filter(pk__in=[t.pk for t in turns]).select_related("conversation"))


def _replay(recorder: TurnRecorder, records: Sequence[WireExchange]) -> None:
    """The steps a turn makes for these exchanges: a model call's ``decide`` step, each
    ``tools/call`` in a ``tool`` step under it."""
    decide: int | None = None
    for record in records:
        if record.channel == Exchange.Channel.LLM:
            if decide is not None:
                recorder.step_close(decide, status="ok")
            decide = recorder.step_open(kind="decide", title="model call")
            recorder.step_save(decide, text=record.response_body[:200], exchanges=[record])
        else:
            tool = recorder.step_open(
                kind="tool",
                parent=decide,
                title=f"{record.server_name}/calculate",
                tool_name="calculate",
                arguments={"expression": "1 + 2"},
                server_id=record.server_id,
                server_name=record.server_name,
            )
            recorder.step_close(tool, status="ok", result=record.response_body[:200], exchanges=[record])
    if decide is not None:
        recorder.step_close(decide, status="ok")
    recorder.flush()


def _product(
    owner: Any, tape: list[WireExchange], plan: list[int], starting: Callable[[], None] | None = None
) -> tuple[Leg, list[int], dict[str, float]]:
    """The product's recording path over ``plan``'s turns; returns the leg, the turns' ids and
    the CPU seconds each thread spent (the loop, the record writer, the publisher).
    ``starting`` is called once the turns exist, right before the timed part."""
    turns = _new_turns(owner, len(plan))
    # Claimed as a runner claims them: every batch then carries the claim and the store's guard
    # (docs/turn-lifecycle.md, fencing), as a real turn's do.
    recorders = [TurnRecorder(turn, claim=turn_claim(turn_id=turn.pk)) for turn in turns]
    if not all(recorder.deferred for recorder in recorders):
        raise RuntimeError("the recorder writes inline here (not PostgreSQL?): not the product's path")

    def write() -> None:
        for recorder, count in zip(recorders, plan, strict=True):
            _replay(recorder, tape[:count])
        for recorder in recorders:
            recorder.drain()
        if not live.flush(timeout=30):
            raise RuntimeError("the doorbells were not all sent within 30 s")

    if starting is not None:
        starting()
    before = _threads()
    leg = _timed(write, sum(plan))
    by_thread = {name: spent - before.get(name, 0.0) for name, spent in _threads().items()}
    ids = [turn.pk for turn in turns]
    _check(ids, sum(plan), "product")
    steps = Step.objects.filter(turn_id__in=ids).count()
    if steps != sum(plan):
        raise RuntimeError(f"the product stored {steps} steps for {sum(plan)} exchanges")
    return leg, ids, {name: spent for name, spent in by_thread.items() if spent > 0}


def _check(turn_ids: list[int], expected: int, leg: str) -> None:
    stored = Exchange.objects.filter(turn_id__in=turn_ids).count()
    if stored != expected:
        raise RuntimeError(f"the {leg} leg stored {stored} exchanges, not {expected}")


def _columns() -> list[str]:
    return [str(field.column) for field in Exchange._meta.concrete_fields]


def _stored_rows(turn_ids: list[int]) -> list[dict[str, Any]]:
    """The product's rows as stored (column → value), in the order they were written; JSON
    columns decoded (Django's connection reads them as text)."""
    columns = _columns()
    json_columns = {
        str(field.column) for field in Exchange._meta.concrete_fields if isinstance(field, models.JSONField)
    }
    table = connection.ops.quote_name(Exchange._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(connection.ops.quote_name(c) for c in columns)} FROM {table}"
            " WHERE turn_id = ANY(%s) ORDER BY id",
            [turn_ids],
        )
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    for row in rows:
        for column in json_columns:
            if isinstance(row[column], str):
                row[column] = json.loads(row[column])
    return rows


def _moved(rows: list[dict[str, Any]], turns: list[Turn]) -> list[dict[str, Any]]:
    """The rows, each product turn's moved to a new turn (and its conversation), with no step."""
    targets: dict[int, Turn] = {}
    pending = iter(turns)
    moved = []
    for row in rows:
        turn = targets.get(row["turn_id"]) or targets.setdefault(row["turn_id"], next(pending))
        moved.append(
            {**row, "id": None, "turn_id": turn.pk, "conversation_id": turn.conversation_id, "step_id": None}
        )
    return moved


def _chunks(items: Sequence[Any]) -> list[Sequence[Any]]:
    return [items[start : start + CHUNK] for start in range(0, len(items), CHUNK)]


def _models(rows: list[dict[str, Any]]) -> list[Exchange]:
    by_column = {str(field.column): field.attname for field in Exchange._meta.concrete_fields}
    return [Exchange(**{by_column[c]: v for c, v in row.items() if c != "id"}) for row in rows]


def _fast(rows: list[dict[str, Any]]) -> Leg:
    objects = _models(rows)

    def write() -> None:
        store = PostgresStore()
        for chunk in _chunks(objects):
            batch = Batch(relaxed=True)
            batch.insert(list(chunk))
            store.write(batch)
        connection.close()  # back to the pool, as the writer hands it back when idle

    return _timed(write, len(objects))


def _orm(rows: list[dict[str, Any]]) -> Leg:
    objects = _models(rows)

    def write() -> None:
        store = OrmStore()
        for chunk in _chunks(objects):
            batch = Batch()
            batch.insert(list(chunk))
            with transaction.atomic():  # committed asynchronously, as the other legs are
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL synchronous_commit = off")
                store.write(batch)
        connection.close()

    return _timed(write, len(objects))


def _bare(rows: list[dict[str, Any]]) -> Leg:
    columns = [c for c in _columns() if c != "id"]
    table = connection.ops.quote_name(Exchange._meta.db_table)
    sql = (
        f"INSERT INTO {table} ({', '.join(connection.ops.quote_name(c) for c in columns)})"
        f" VALUES ({', '.join(['%s'] * len(columns))})"
    )
    values = [
        tuple(Jsonb(row[c]) if isinstance(row[c], dict | list) else row[c] for c in columns) for row in rows
    ]
    database = settings.DATABASES["default"]
    with psycopg.connect(
        dbname=database["NAME"],
        user=database["USER"],
        password=database.get("PASSWORD") or None,
        host=database["HOST"],
        port=database["PORT"] or None,
    ) as bare:
        bare.execute("SET synchronous_commit = off")
        bare.commit()

        def write() -> None:
            for chunk in _chunks(values):
                with bare.transaction(), bare.cursor() as cursor:
                    cursor.executemany(sql, chunk)

        return _timed(write, len(values))


def _profile(
    ctx: Context, owner: Any, tape: list[WireExchange], plan: list[int], wall: float
) -> dict[str, Any]:
    """One more (unmeasured) product leg with py-spy sampling this process's threads for most of
    its timed part (not the turns' creation before it)."""
    out = ctx.results_dir / "p8-recording-profile.txt"
    with ThreadPoolExecutor(1) as pool:
        started: list[Future[dict[str, Any]]] = []

        def attach() -> None:
            started.append(pool.submit(profiling.record, os.getpid(), max(1, int(wall * 0.8)), out))
            time.sleep(0.5)  # py-spy attaches

        _product(owner, tape, plan, starting=attach)
        found = started[0].result()
    if "profile" in found and out.exists():
        found["profile"] = str(out.relative_to(REPO_ROOT))
    return found


def _median(legs: list[Leg], value: Callable[[Leg], float]) -> float:
    return float(summary([value(leg) for leg in legs])["median"])


def run(ctx: Context) -> list[Result]:
    reason = ctx.services.missing("postgres", "redis")
    if reason:
        why = f"needs PostgreSQL (the record writer's path) and Redis (the doorbells): {reason}"
        return [not_run(id=ID, name=NAME, unit=UNIT, target=TARGET, reason=why)]
    repeats = ctx.repeats(full=3, quick=1)
    exchanges = EXCHANGES // 4 if ctx.quick else EXCHANGES
    owner = fixtures.user("bench-p8")
    fixtures.purge(owner)
    tape = _tape(owner)
    plan = turns_for(exchanges, len(tape))
    legs: dict[str, list[Leg]] = {name: [] for name in LEGS}
    threads: dict[str, list[float]] = {}
    # One small unmeasured round first: code paths, caches and connections warm.
    for index in range(repeats + 1):
        warm = index == 0
        this_plan = turns_for(len(tape) * 2, len(tape)) if warm else plan
        product, ids, by_thread = _product(owner, tape, this_plan)
        rows = _stored_rows(ids)
        measured = {"product": product}
        with override_settings(RECORD_STORE="orm"):
            measured["product, ORM store"] = _product(owner, tape, this_plan)[0]
        for name, write in (("fast path", _fast), ("ORM reference", _orm), ("bare", _bare)):
            turns = _new_turns(owner, len(this_plan))
            measured[name] = write(_moved(rows, turns))
            _check([t.pk for t in turns], len(rows), name)
        fixtures.purge(owner)
        if warm:
            continue
        for name, leg in measured.items():
            legs[name].append(leg)
        for name, spent in by_thread.items():
            threads.setdefault(name, []).append(1000 * spent / product.exchanges)
        ctx.log(
            f"P8 {index}/{repeats}: "
            + ", ".join(
                f"{name} {leg.per_second:.0f}/s ({leg.cpu_ms:.2f} ms CPU, db {leg.db_cpu_ms:.2f} ms)"
                for name, leg in measured.items()
            )
        )
    against_bare = [compared(p, b) for p, b in zip(legs["product"], legs["bare"], strict=True)]
    ratios = [pair["throughput"] for pair in against_bare]
    profile: dict[str, Any] = {}
    if ctx.profile and ratios and min(ratios) < LIMIT:
        profile = _profile(ctx, owner, tape, plan, min(leg.wall for leg in legs["product"]))
        fixtures.purge(owner)
    fast_vs_orm = [compared(f, o) for f, o in zip(legs["fast path"], legs["ORM reference"], strict=True)]
    orm_product_over_bare = [
        compared(p, b)["throughput"] for p, b in zip(legs["product, ORM store"], legs["bare"], strict=True)
    ]
    per_leg = {
        name: {
            "exchanges_per_s": round(_median(values, lambda leg: leg.per_second)),
            "exchanges_per_cpu_s": round(_median(values, lambda leg: leg.per_cpu_second)),
            "cpu_ms_per_exchange": round(_median(values, lambda leg: leg.cpu_ms), 3),
            "db_cpu_ms_per_exchange": round(_median(values, lambda leg: leg.db_cpu_ms), 3),
            "wall_s": [round(leg.wall, 3) for leg in values],
        }
        for name, values in legs.items()
    }

    def median_of(pairs: list[dict[str, float]], key: str) -> float:
        return round(float(summary([pair[key] for pair in pairs])["median"]), 2)

    cpu_ratio = median_of(against_bare, "cpu_per_exchange")
    orm_product_median = round(float(summary(orm_product_over_bare)["median"]), 2)
    fast_throughput = median_of(fast_vs_orm, "throughput")
    fast_cpu = median_of(fast_vs_orm, "cpu_per_exchange")
    mine, floor = per_leg["product"], per_leg["bare"]
    return [
        judged(
            id=ID,
            name=NAME,
            unit=UNIT,
            target=TARGET,
            limit=LIMIT,
            samples=ratios,
            at_most=False,
            details={
                "exchanges_per_repeat": exchanges,
                "tape": f"{len(tape)} exchanges of one product turn ({TAPE_STEPS} model calls, "
                f"{len(tape) - TAPE_STEPS} tools/call), {len(plan)} turns per repeat",
                "chunk_rows": CHUNK,
                "bare_loop": f"psycopg executemany, one INSERT per row, {CHUNK} rows per transaction",
                "legs": per_leg,
                "product_cpu_ms_per_exchange_by_thread": {
                    name: round(float(summary(values)["median"]), 3) for name, values in threads.items()
                },
                "product_profile": profile,
                "product_over_bare": {
                    "throughput": [round(ratio, 2) for ratio in ratios],
                    "cpu_per_exchange": [round(pair["cpu_per_exchange"], 2) for pair in against_bare],
                    "db_cpu_per_exchange": [round(pair["db_cpu_per_exchange"], 2) for pair in against_bare],
                },
                "product_orm_store_over_bare": {
                    "throughput": [round(ratio, 2) for ratio in orm_product_over_bare],
                },
                "fast_path_over_orm": {
                    "throughput": [round(pair["throughput"], 2) for pair in fast_vs_orm],
                    "cpu_per_exchange": [round(pair["cpu_per_exchange"], 2) for pair in fast_vs_orm],
                },
                "summary": (
                    f"product {mine['exchanges_per_s']}/s, {mine['cpu_ms_per_exchange']} ms CPU "
                    f"per exchange ({mine['exchanges_per_cpu_s']}/s per core); bare INSERT loop "
                    f"{floor['exchanges_per_s']}/s, {floor['cpu_ms_per_exchange']} ms CPU; product CPU per "
                    f"exchange {cpu_ratio}× the bare loop's; with the ORM store instead of the fast path "
                    f"the product reaches {orm_product_median}× of the bare loop; fast path "
                    f"{fast_throughput}× the ORM reference's throughput at {fast_cpu}× its CPU per exchange"
                ),
            },
        )
    ]
