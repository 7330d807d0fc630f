"""The dashboard's data: agent profiles, their extensions, sessions, messages, runs and traces.

The database is the truth; the runtime's memory is only a cache of it.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from .runtime.ids import new_uuid7


class DoubleTexting(models.TextChoices):
    """What a message sent while the session's run is active means."""

    STEER = "steer", "Steer the active run"
    QUEUE = "queue", "Queue it for after the active run"
    REJECT = "reject", "Reject it with a message"
    INTERRUPT = "interrupt", "Cancel the active run, then start the new message"


class AgentProfile(models.Model):
    """An agent as admins configure it: model, prompt, limits and extensions."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    provider = models.CharField(max_length=50, default="demo")  # key in the provider catalog
    model_name = models.CharField(max_length=200, blank=True, default="demo")
    provider_settings = models.JSONField(default=dict, blank=True)  # validated by the catalog
    system_prompt = models.TextField(default="You are a helpful assistant.", blank=True)
    max_iterations = models.PositiveIntegerField(
        default=36, validators=[MinValueValidator(1), MaxValueValidator(500)]
    )
    double_texting = models.CharField(
        max_length=10, choices=DoubleTexting.choices, default=DoubleTexting.STEER
    )
    is_active = models.BooleanField(default=True)  # inactive profiles cannot start new chats
    # Budgets, enforced by the `budget` extension (and the daily cap also at a run's start).
    # Empty: no limit.
    max_tokens_per_run = models.PositiveIntegerField(
        null=True, blank=True, help_text="Input plus output tokens of all model calls of a run."
    )
    max_cost_per_run = models.DecimalField(
        max_digits=14, decimal_places=6, null=True, blank=True, help_text="In the price currency."
    )
    daily_cost_cap = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="What all runs of this profile may cost per UTC day.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ExtensionSetting(models.Model):
    """One extension enabled on a profile, with its priority and validated settings."""

    profile = models.ForeignKey(AgentProfile, on_delete=models.CASCADE, related_name="extensions")
    key = models.CharField(max_length=100)  # key in the extension catalog
    instance_name = models.CharField(
        max_length=100, blank=True, help_text="Optional name, to run one extension twice."
    )
    enabled = models.BooleanField(default=True)
    priority = models.IntegerField(default=100, help_text="Lower runs first; ties keep this order.")
    settings = models.JSONField(default=dict, blank=True)
    position = models.PositiveIntegerField(default=0)  # registration order within a profile

    class Meta:
        ordering = ["profile", "position", "id"]

    def __str__(self) -> str:
        return self.instance_name or self.key


class SessionStatus(models.TextChoices):
    IDLE = "idle", "Idle"
    RUNNING = "running", "Running"
    WAITING = "waiting", "Waiting for input"


class ChatSession(models.Model):
    """One conversation; its primary key is the runtime's session_id."""

    id = models.CharField(primary_key=True, max_length=36, default=new_uuid7, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_sessions"
    )
    profile = models.ForeignKey(AgentProfile, on_delete=models.PROTECT, related_name="sessions")
    title = models.CharField(max_length=200, blank=True)
    status = models.CharField(
        max_length=10, choices=SessionStatus.choices, default=SessionStatus.IDLE
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    pinned = models.BooleanField(default=False)  # listed first in its owner's chats
    archived = models.BooleanField(default=False)  # left out of the list; search still finds it

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return self.title or f"Session {self.id[:8]}"


class Role(models.TextChoices):
    SYSTEM = "system", "System"
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"
    TOOL = "tool", "Tool"


class Message(models.Model):
    """One persisted conversation message, ordered per session by seq."""

    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="messages")
    run = models.ForeignKey(
        "Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="messages"
    )
    seq = models.PositiveIntegerField()  # 1-based position in the session
    message_id = models.CharField(max_length=36, unique=True)  # the runtime message id
    role = models.CharField(max_length=10, choices=Role.choices)
    content = models.TextField(blank=True)
    reasoning = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)  # [{id, name, arguments}]
    tool_call_id = models.CharField(max_length=200, blank=True)
    tool_name = models.CharField(max_length=200, blank=True)
    is_error = models.BooleanField(default=False)
    skipped = models.BooleanField(default=False)
    include_in_messages = models.BooleanField(default=True)
    attributes = models.JSONField(default=dict, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Set when a compaction summarised this message: the summary row (a user message with
    # attribute compaction_summary) stands in for it in the model context from then on.
    # The row itself stays, readable in the transcript.
    summarized_by = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="summarizes"
    )

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="message_seq_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.seq}"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    WAITING = "waiting", "Waiting for input"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    INTERRUPTED = "interrupted", "Interrupted"  # its host process died
    BUDGET_EXCEEDED = "budget_exceeded", "Budget exceeded"  # a budget stopped it

    @classmethod
    def active(cls) -> tuple[str, ...]:
        return (cls.QUEUED, cls.RUNNING, cls.WAITING)


class RunKind(models.TextChoices):
    ANSWER = "answer", "Answer"  # a message in, an answer out
    COMPACTION = "compaction", "Compaction"  # the conversation summarised on request


class CancelState(models.TextChoices):
    NONE = "", "—"
    REQUESTED = "requested", "Requested"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    STOPPED = "stopped", "Stopped"


class Run(models.Model):
    """One request of a session: status, phase, timings, usage, error and host."""

    request_id = models.CharField(max_length=36, unique=True, default=new_uuid7)
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="runs")
    profile = models.ForeignKey(AgentProfile, on_delete=models.SET_NULL, null=True, blank=True)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    input_text = models.TextField()
    kind = models.CharField(max_length=12, choices=RunKind.choices, default=RunKind.ANSWER)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    phase = models.CharField(max_length=20, default="created")
    cancel_state = models.CharField(
        max_length=12, choices=CancelState.choices, default=CancelState.NONE, blank=True
    )
    current_tool = models.CharField(max_length=200, blank=True)
    waiting_for = models.JSONField(default=list, blank=True)  # open approvals / questions
    iterations = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    # Parts of input/output as providers report them (ModelUsage's normalisation).
    cache_read_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    reasoning_tokens = models.PositiveIntegerField(default=0)
    # Exact cost under the price in force when the run started; None: no price set.
    cost = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    cost_currency = models.CharField(max_length=3, blank=True)
    error = models.TextField(blank=True)
    # The answer streaming when the run was last checkpointed: what a reaped run shows.
    partial_text = models.TextField(blank=True)
    host = models.CharField(max_length=200, blank=True)  # process hosting the run (Host.host_id)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status"]),
            models.Index(fields=["session", "-created_at"]),
        ]
        constraints = [
            # The database, not a process, guarantees one active request per session,
            # so two processes racing to start a run cannot both win.
            models.UniqueConstraint(
                fields=["session"],
                condition=models.Q(status__in=["queued", "running", "waiting"]),
                name="one_active_run_per_session",
            ),
        ]

    def __str__(self) -> str:
        return f"Run {self.request_id[:8]} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in RunStatus.active()

    @property
    def elapsed_seconds(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.finished_at or timezone.now()
        return (end - self.started_at).total_seconds()


class ModelPrice(models.Model):
    """Prices per million tokens of the models a provider key names, from a date on."""

    provider = models.CharField(max_length=50)  # key in the provider catalog
    model_pattern = models.CharField(
        max_length=200, help_text="An exact model name, or a glob such as gpt-4o*."
    )
    input_per_million = models.DecimalField(max_digits=14, decimal_places=6)
    output_per_million = models.DecimalField(max_digits=14, decimal_places=6)
    cache_read_per_million = models.DecimalField(
        max_digits=14, decimal_places=6, null=True, blank=True, help_text="Empty: the input price."
    )
    cache_write_per_million = models.DecimalField(
        max_digits=14, decimal_places=6, null=True, blank=True, help_text="Empty: the input price."
    )
    currency = models.CharField(max_length=3, default="USD")
    valid_from = models.DateField(default=timezone.localdate)

    class Meta:
        ordering = ["provider", "model_pattern", "-valid_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "model_pattern", "valid_from"], name="model_price_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}:{self.model_pattern} from {self.valid_from}"


class RunEvent(models.Model):
    """One entry of a run's trace, in seq order; text deltas are coalesced."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()  # the first outward seq this entry covers
    last_seq = models.PositiveIntegerField()  # the last one (> seq for coalesced deltas)
    type = models.CharField(max_length=30)
    phase = models.CharField(max_length=20)
    iteration = models.PositiveIntegerField(default=0)
    at = models.DateTimeField(default=timezone.now)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="run_event_seq_unique")]


class OperatorAction(models.Model):
    """Something a person did to a session's run from the browser, and what came of it."""

    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="actions")
    run = models.ForeignKey(
        Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="actions"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True)
    action = models.CharField(max_length=30)  # approve, deny, answer, steer, cancel, message
    payload = models.JSONField(default=dict, blank=True)
    outcome = models.CharField(max_length=10)  # accepted | rejected
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]


class Host(models.Model):
    """A process that hosts runs, and its lease: runs are reaped only when it expired.

    The lease is renewed by a thread of the process with its own database connection, so
    a busy event loop cannot make a healthy process look dead.
    """

    host_id = models.CharField(primary_key=True, max_length=200)
    started_at = models.DateTimeField(default=timezone.now)
    renewed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["renewed_at"])]

    def __str__(self) -> str:
        return self.host_id


class UserBudget(models.Model):
    """One user's cost caps, overriding the defaults from ZETT_USER_*_COST_CAP.

    A field left empty falls back to the default; the default unset means no cap.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="budget"
    )
    daily_cost_cap = models.DecimalField(
        max_digits=14, decimal_places=6, null=True, blank=True, help_text="Per UTC day."
    )
    monthly_cost_cap = models.DecimalField(
        max_digits=14, decimal_places=6, null=True, blank=True, help_text="Per UTC month."
    )

    def __str__(self) -> str:
        return f"Budget of {self.user}"


class BudgetCharge(models.Model):
    """What one model call of a run reserved against the cost caps, then what it cost.

    A call reserves its estimate before it starts (and more while it streams); when its
    usage arrives the row is settled to the actual cost. Caps add these rows up, plus the
    cost of ended runs that have none (runs of profiles without the budget extension).
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="budget_charges")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, related_name="+"
    )
    profile = models.ForeignKey(
        AgentProfile, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    call_id = models.CharField(max_length=80)
    amount = models.DecimalField(max_digits=20, decimal_places=10, default=0)
    settled = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["user", "created_at"]),
            models.Index(fields=["profile", "created_at"]),
        ]
        constraints = [
            models.UniqueConstraint(fields=["run", "call_id"], name="budget_charge_call_unique"),
        ]
