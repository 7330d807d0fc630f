"""Run starts: the one hop that makes a run (or claims a queued one), with what hosting needs.

Starts that wait together share a hop (``group_commit``) and a transaction: a batch of
them is written in a few statements, one INSERT of the runs, one of their input messages,
one UPDATE of their sessions, one read of their histories; a start that breaks a
constraint (another run of its session is active) sends the batch to a savepoint per
start, so each start still gets its own result. No policy lives here: the manager decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from ..budgets import BUDGET_KEY, budget_applies_now, price_in_force_now, start_refusal_for
from ..db_retry import RETRYABLE, db_hop
from ..group_commit import GroupCommit, each_alone_if_whole_fails
from ..models import (
    ChatSession,
    ExtensionSetting,
    Message,
    Role,
    Run,
    RunKind,
    RunStatus,
    SessionStatus,
)
from ..per_loop import PerLoop
from ..runtime.ids import new_uuid7
from ..runtime.pricing import TokenPrices
from ..session_store import History, session_rows

ExtensionRows = tuple[tuple[Any, ...], ...]


@dataclass(slots=True)
class Intake:
    """A run just created for a message, with what hosting it needs (one transaction)."""

    run: Run
    session: ChatSession
    extension_rows: ExtensionRows
    input_id: str  # the stored input Message's id (the runtime message reuses it)
    prices: TokenPrices | None = None  # the model's prices in force at the start; None: unpriced
    history: History | None = None  # the session's rows for the session store; None: not read
    # Prices of models the extensions call besides the run's (a summary model), by
    # (provider, model name); None for such a model without a price.
    other_prices: dict[tuple[str, str], TokenPrices | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Refused:
    """A run that may not start: ``reason`` says which cap is used up and when it resets."""

    reason: str


def _other_prices(
    rows: ExtensionRows, when: datetime | None
) -> dict[tuple[str, str], TokenPrices | None]:
    """The prices of the summary models the enabled extension rows name."""
    models = {
        (str(settings["provider"]), str(settings.get("model") or ""))
        for key, _name, enabled, _priority, settings in rows
        if key == "summary_compaction" and enabled and (settings or {}).get("provider")
    }
    return {model: price_in_force_now(*model, when) for model in models}


def extension_rows_of(profile_pk: int) -> ExtensionRows:
    return tuple(
        ExtensionSetting.objects.filter(profile_id=profile_pk)
        .order_by("position", "id")
        .values_list("key", "instance_name", "enabled", "priority", "settings")
    )


def session_with_profile(session_id: str) -> ChatSession | None:
    return ChatSession.objects.select_related("owner", "profile").filter(pk=session_id).first()


@dataclass(frozen=True, slots=True)
class StartRequest:
    """One run start asked for: what create_run takes (see there)."""

    session_id: str
    user_id: int | None
    text: str
    host: str  # this process's host id; "" queues the run for the workers
    by: str  # the sender's name, kept on the input message
    title: str | None  # the session's title if it has none yet
    kind: str = RunKind.ANSWER


Started = Intake | Refused | str


class _BatchReads:
    """What the run starts of one batch share, read once: their sessions, caps, extension
    rows, prices, and each session's last message seq (kept up to date as runs are made)."""

    def __init__(self, session_ids: list[str]) -> None:
        self.sessions = {
            s.pk: s
            for s in ChatSession.objects.select_related("owner", "profile").filter(
                pk__in=set(session_ids)
            )
        }
        self.last_seq: dict[str, int] = {
            row["session_id"]: row["last"] or 0
            for row in Message.objects.filter(session_id__in=list(self.sessions))
            .values("session_id")
            .annotate(last=Max("seq"))
        }
        self._memo: dict[tuple[Any, ...], Any] = {}
        # Sessions' message rows read together for many starts (see read_histories).
        self.histories: dict[str, list[Message]] = {}

    def memo(self, key: tuple[Any, ...], read: Any) -> Any:
        if key not in self._memo:
            self._memo[key] = read()
        return self._memo[key]

    def next_seq(self, session_id: str) -> int:
        return self.last_seq.get(session_id, 0) + 1

    def extension_rows(self, profile_pk: int) -> ExtensionRows:
        return self.memo(("rows", profile_pk), lambda: extension_rows_of(profile_pk))

    def stores(self, session: ChatSession) -> bool:
        """Whether the session's profile stores its sessions (the store reads the history)."""
        rows = self.extension_rows(session.profile.pk)
        return any(row[0] == "session_store" and row[2] for row in rows)

    def read_histories(self, session_ids: list[str]) -> None:
        """The message rows of these sessions in order, in one query (for history_of)."""
        if not session_ids:
            return
        for session_id in session_ids:
            self.histories[session_id] = []
        for row in Message.objects.filter(session_id__in=session_ids).order_by("session_id", "seq"):
            self.histories[row.session_id].append(row)

    def history_of(self, session_id: str) -> list[Message]:
        rows = self.histories.get(session_id)
        return rows if rows is not None else session_rows(session_id)


def _intake_in(batch: _BatchReads, run: Run, session: ChatSession, input_id: str) -> Intake:
    """What hosting the run needs besides the run itself, read in the hop that made it.

    Reads the runs of one batch share come from ``batch``. The history is read only when
    the profile stores its sessions (the store would read it first thing); the prices are
    those in force on the day the run started.
    """
    profile = session.profile
    user_id = run.started_by_id or session.owner_id
    rows = batch.extension_rows(profile.pk)
    if not any(row[0] == BUDGET_KEY for row in rows) and batch.memo(
        ("budget", profile.pk, user_id), lambda: budget_applies_now(profile, user_id)
    ):
        rows = (*rows, (BUDGET_KEY, "", True, 100, {}))  # a budget applies: enforce it mid-run
    stores = batch.stores(session)
    when = run.started_at or run.created_at
    prices = batch.memo(
        ("prices", profile.provider, profile.model_name, timezone.localdate(when)),
        lambda: price_in_force_now(profile.provider, profile.model_name, when),
    )
    history = (batch.history_of(session.pk), run.pk) if stores else None
    other = batch.memo(
        ("other", profile.pk, timezone.localdate(when)), lambda: _other_prices(rows, when)
    )
    return Intake(
        run, session, rows, input_id, prices=prices, history=history, other_prices=dict(other)
    )


def _refused(batch: _BatchReads, request: StartRequest) -> Started | None:
    """Why this start makes no run ("missing", "disabled", a Refused), or None: it may."""
    session = batch.sessions.get(request.session_id)
    if session is None:
        return "missing"
    if not session.profile.is_active:
        return "disabled"
    user_id = request.user_id
    refusal = batch.memo(
        ("refusal", user_id if user_id is not None else session.owner_id, session.profile_id),
        lambda: start_refusal_for(session, user_id),
    )
    return Refused(refusal) if refusal is not None else None


def _new_run(session: ChatSession, request: StartRequest, now: datetime) -> Run:
    host = request.host
    return Run(
        session=session,
        profile=session.profile,
        started_by_id=request.user_id,
        input_text=request.text,
        kind=request.kind,
        status=RunStatus.RUNNING if host else RunStatus.QUEUED,
        phase="created",
        host=host,
        heartbeat_at=now,
        created_at=now,
        started_at=now if host else None,
    )


def _input_message(
    session: ChatSession, run: Run, seq: int, input_id: str, request: StartRequest, now: datetime
) -> Message:
    return Message(
        session=session,
        run=run,
        seq=seq,
        message_id=input_id,
        role=Role.USER,
        content=request.text,
        attributes={"by": request.by},
        created_at=now,
    )


def _create_all(batch: _BatchReads, requests: list[StartRequest]) -> list[Started] | None:
    """The batch's runs in a few statements, not a savepoint and three writes per start.

    One INSERT of the runs, one of their input messages, one UPDATE of the sessions (one
    more for each that gets its title). None, with nothing written, when one of them breaks
    a constraint (another run of its session is active), when two starts are for one
    session, or when the database cannot hand back the new rows' keys: the caller then
    makes each on its own savepoint, which gives every start its own result.
    """
    if not connection.features.can_return_rows_from_bulk_insert:
        return None
    results: list[Started | None] = [_refused(batch, request) for request in requests]
    starts = [
        (index, request, batch.sessions[request.session_id])
        for index, request in enumerate(requests)
        if results[index] is None
    ]
    if len({session.pk for _, _, session in starts}) < len(starts):
        return None
    now = timezone.now()
    runs = [_new_run(session, request, now) for _, request, session in starts]
    inputs: list[str] = []
    seqs: dict[str, int] = {}
    messages: list[Message] = []
    titled: dict[str, str] = {}
    try:
        with transaction.atomic():  # a savepoint: a failure here leaves nothing behind
            Run.objects.bulk_create(runs)
            for (_, request, session), run in zip(starts, runs, strict=True):
                input_id = new_uuid7() if request.kind == RunKind.ANSWER else ""
                inputs.append(input_id)
                if input_id:
                    seqs[session.pk] = seq = batch.next_seq(session.pk)
                    messages.append(_input_message(session, run, seq, input_id, request, now))
                if request.title is not None and not session.title:
                    titled[session.pk] = request.title
            Message.objects.bulk_create(messages)
            for hosted in (True, False):
                pks = [s.pk for _, r, s in starts if bool(r.host) is hosted and s.pk not in titled]
                if pks:
                    ChatSession.objects.filter(pk__in=pks).update(**_session_fields(hosted, now))
            for _, request, session in starts:
                if session.pk in titled:
                    ChatSession.objects.filter(pk=session.pk).update(
                        title=titled[session.pk], **_session_fields(bool(request.host), now)
                    )
    except IntegrityError:
        return None
    batch.last_seq.update(seqs)
    batch.read_histories([session.pk for _, _, session in starts if batch.stores(session)])
    for (index, _, session), run, input_id in zip(starts, runs, inputs, strict=True):
        if session.pk in titled:
            session.title = titled[session.pk]
        results[index] = _intake_in(batch, run, session, input_id)
    return results  # type: ignore[return-value]  # every None was replaced


def _session_fields(hosted: bool, now: datetime) -> dict[str, Any]:
    """What a start writes on its session: its time, and "running" when it is hosted now."""
    return {"updated_at": now, "status": SessionStatus.RUNNING} if hosted else {"updated_at": now}


def _create_one(batch: _BatchReads, request: StartRequest) -> Started:
    refused = _refused(batch, request)
    if refused is not None:
        return refused
    session = batch.sessions[request.session_id]
    now = timezone.now()
    input_id = new_uuid7() if request.kind == RunKind.ANSWER else ""
    try:
        with transaction.atomic():  # a savepoint: one start failing leaves the others be
            run = _new_run(session, request, now)
            run.save(force_insert=True)
            if input_id:
                seq = batch.next_seq(session.pk)
                _input_message(session, run, seq, input_id, request, now).save(force_insert=True)
                batch.last_seq[session.pk] = seq
            fields = _session_fields(bool(request.host), now)
            if request.title is not None and not session.title:
                session.title = fields["title"] = request.title
            ChatSession.objects.filter(pk=session.pk).update(**fields)
    except IntegrityError:
        active = Run.objects.filter(session_id=session.pk, status__in=RunStatus.active())
        if active.exists():
            return "active"
        raise
    return _intake_in(batch, run, session, input_id)


def create_runs_now(requests: list[StartRequest]) -> list[Started | Exception]:
    """Create the runs of many starts in ONE transaction; a result each.

    What the starts share (sessions, caps, extension rows, prices) is read once, and the
    batch is written in a few statements (``_create_all``). When one start breaks a
    constraint, each goes on its own savepoint instead: a start that fails (another run of
    its session is active: "active"; or any error) is rolled back to it and gets its own
    result or exception; the others commit. A connection error fails the whole batch
    (nothing committed), which the hop retries; any other failure of the whole (a
    constraint checked at commit) sends each start on alone.
    """
    return each_alone_if_whole_fails(_create_together, requests)


def _create_together(requests: list[StartRequest]) -> list[Started | Exception]:
    results: list[Started | Exception] = []
    with transaction.atomic():
        batch = _BatchReads([r.session_id for r in requests])
        made = _create_all(batch, requests)
        if made is not None:
            return list(made)
        for request in requests:
            try:
                results.append(_create_one(batch, request))
            except RETRYABLE:
                raise
            except Exception as exc:  # this start's own failure, rolled back to its savepoint
                results.append(exc)
    return results


create_runs = db_hop(create_runs_now)
_starts: PerLoop[GroupCommit[StartRequest, Started]] = PerLoop()


async def create_run(
    session_id: str,
    user_id: int | None,
    text: str,
    host: str,
    by: str,
    title: str | None,
    kind: str = RunKind.ANSWER,
) -> Started:
    """Create the session's active run and store its input message, in one transaction.

    A compaction run has no input message (``text`` is empty, ``input_id`` too).
    The one hop of a run's start, shared with the other starts waiting at that moment
    (agents.group_commit): the same hop reads what hosting it needs (see _intake_in).
    Returns the Intake, or a reason string: "active" when another run is active (the
    one-active-run index decides), "missing", "disabled", or a Refused when a cost cap is
    used up. Nothing a page shows as stored is sent before this commits.
    """
    request = StartRequest(session_id, user_id, text, host, by, title, kind)
    return await _starts.get(lambda: GroupCommit(create_runs)).submit(request)


@db_hop
def claim_run(request_id: str, host: str) -> Intake | None:
    """Claim a run a web process queued for the workers; None if taken or gone."""
    now = timezone.now()
    with transaction.atomic():
        claimed = Run.objects.filter(
            request_id=request_id, host="", status=RunStatus.QUEUED
        ).update(host=host, heartbeat_at=now, status=RunStatus.RUNNING, started_at=now)
        if not claimed:
            return None
        run = Run.objects.get(request_id=request_id)
        ChatSession.objects.filter(pk=run.session_id).update(
            status=SessionStatus.RUNNING, updated_at=now
        )
    session = session_with_profile(run.session_id)
    assert session is not None  # the run's FK holds it
    input_row = Message.objects.filter(run=run, role=Role.USER).order_by("seq").first()
    input_id = input_row.message_id if input_row else ""
    if not input_id and run.kind == RunKind.ANSWER:
        input_id = new_uuid7()
    return _intake_in(_BatchReads([]), run, session, input_id)  # a batch of one
