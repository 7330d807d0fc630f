"""Token usage, exactly: each wire's usage shapes become one ModelUsage that counts nothing twice.

The payloads below have the shapes the providers send (field names, nesting, which event
carries what), with the counts of a realistic exchange; they go over the loopback wire
through the real SDKs, so a change in how an SDK parses them shows up here.
"""

from __future__ import annotations

from typing import Any

import pytest

from agents.providers.anthropic_messages import AnthropicMessagesModel
from agents.providers.openai_chat import OpenAIChatModel
from agents.providers.usage import AnthropicUsageTally, openai_usage
from agents.runtime import ModelRequest, ModelUsage, UserMessage

from .loopback import FakeServer, Reply
from .streams import collect, completed
from .wire import anthropic_message_start, anthropic_text_block, openai_chunk, sse

HELLO = ModelRequest(messages=(UserMessage("Summarise the attached manual."),))

# -- Chat Completions: the usage of the stream's last chunk ---------------------------------

OPENAI_CACHED = {  # gpt-4o, the second call with the same long prompt
    "prompt_tokens": 2006,
    "completion_tokens": 300,
    "total_tokens": 2306,
    "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 0,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}
OPENAI_REASONING = {  # an o-series model that thought before answering
    "prompt_tokens": 75,
    "completion_tokens": 1186,
    "total_tokens": 1261,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 1024,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}
VLLM_PLAIN = {  # vLLM and llama.cpp: totals only
    "prompt_tokens": 12,
    "total_tokens": 40,
    "completion_tokens": 28,
    "prompt_tokens_details": None,
}
DEEPSEEK_CACHE_HIT = {  # DeepSeek names its cache hits at the top level
    "prompt_tokens": 1200,
    "completion_tokens": 50,
    "total_tokens": 1250,
    "prompt_cache_hit_tokens": 1024,
    "prompt_cache_miss_tokens": 176,
}


def _openai_answer(usage: dict[str, Any]) -> Reply:
    chunks = [
        openai_chunk({"role": "assistant", "content": ""}),
        openai_chunk({"content": "A summary."}),
        openai_chunk({}, finish_reason="stop"),
        {**openai_chunk(), "usage": usage},
    ]
    return Reply(events=[sse(chunk) for chunk in chunks] + [b"data: [DONE]\n\n"])


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        pytest.param(
            OPENAI_CACHED,
            ModelUsage(2006, 300, cache_read_tokens=1920, reasoning_tokens=0),
            id="cached-prompt",
        ),
        pytest.param(
            OPENAI_REASONING,
            ModelUsage(75, 1186, cache_read_tokens=0, reasoning_tokens=1024),
            id="reasoning",
        ),
        pytest.param(VLLM_PLAIN, ModelUsage(12, 28), id="totals-only"),
        pytest.param(
            DEEPSEEK_CACHE_HIT, ModelUsage(1200, 50, cache_read_tokens=1024), id="deepseek-hits"
        ),
    ],
)
async def test_openai_usage_keeps_cached_and_reasoning_tokens_inside_the_totals(
    fake_server: FakeServer,
    monkeypatch: pytest.MonkeyPatch,
    wire: dict[str, Any],
    expected: ModelUsage,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")
    fake_server.script(_openai_answer(wire))
    model = OpenAIChatModel("gpt-4o", base_url=f"{fake_server.url}/v1", max_retries=0)

    usage = completed(await collect(model, HELLO)).usage

    assert fake_server.requests[0].body["stream_options"] == {"include_usage": True}
    assert usage == expected
    assert usage.total_tokens == wire["total_tokens"]  # nothing counted twice


def test_a_cached_count_larger_than_the_prompt_is_capped_rather_than_failing_the_answer() -> None:
    usage = openai_usage(
        {
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 64},
        }
    )

    assert usage == ModelUsage(10, 2, cache_read_tokens=10)


# -- Messages: message_start's usage, then message_delta's cumulative usage ----------------

FIRST_CALL_WRITES_CACHE = (
    {
        "input_tokens": 3,
        "cache_creation_input_tokens": 2051,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 2051, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 1,
        "service_tier": "standard",
    },
    {
        "input_tokens": 3,
        "cache_creation_input_tokens": 2051,
        "cache_read_input_tokens": 0,
        "output_tokens": 503,
    },
)
SECOND_CALL_READS_CACHE = (  # an older API version: message_delta reports output only
    {
        "input_tokens": 3,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 2051,
        "output_tokens": 1,
        "service_tier": "standard",
    },
    {"output_tokens": 287},
)
DELTA_WITH_NULL_CACHE_FIELDS = (
    {"input_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 100},
    {
        "input_tokens": 5,
        "cache_creation_input_tokens": None,
        "cache_read_input_tokens": None,
        "output_tokens": 3,
    },
)
COMPATIBLE_SERVER_WITHOUT_CACHE = ({"input_tokens": 25, "output_tokens": 1}, {"output_tokens": 9})


def _anthropic_answer(start: dict[str, Any], delta: dict[str, Any]) -> Reply:
    opening = sse(
        {
            "type": "message_start",
            "message": {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start,
            },
        },
        "message_start",
    )
    closing = [
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": delta,
            },
            "message_delta",
        ),
        sse({"type": "message_stop"}, "message_stop"),
    ]
    return Reply(events=[opening, *anthropic_text_block(0, "A summary."), *closing])


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        pytest.param(
            FIRST_CALL_WRITES_CACHE,
            ModelUsage(2054, 503, cache_read_tokens=0, cache_write_tokens=2051),
            id="cache-write",
        ),
        pytest.param(
            SECOND_CALL_READS_CACHE,
            ModelUsage(2054, 287, cache_read_tokens=2051, cache_write_tokens=0),
            id="cache-read-output-only-delta",
        ),
        pytest.param(
            DELTA_WITH_NULL_CACHE_FIELDS,
            ModelUsage(105, 3, cache_read_tokens=100, cache_write_tokens=0),
            id="null-cache-fields-in-delta",
        ),
        pytest.param(COMPATIBLE_SERVER_WITHOUT_CACHE, ModelUsage(25, 9), id="no-cache-fields"),
    ],
)
async def test_anthropic_usage_counts_cached_prompt_tokens_as_input_once(
    fake_server: FakeServer,
    monkeypatch: pytest.MonkeyPatch,
    wire: tuple[dict[str, Any], dict[str, Any]],
    expected: ModelUsage,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    fake_server.script(_anthropic_answer(*wire))
    model = AnthropicMessagesModel("claude-test", base_url=fake_server.url, max_retries=0)

    usage = completed(await collect(model, HELLO)).usage

    assert usage == expected
    assert usage.uncached_input_tokens == wire[0]["input_tokens"]


async def test_anthropic_usage_without_a_message_delta_usage_keeps_message_start(
    fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    closing = [
        sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}, "message_delta"),
        sse({"type": "message_stop"}, "message_stop"),
    ]
    frames = [anthropic_message_start(7, cache_read=40), *anthropic_text_block(0, "Hi"), *closing]
    fake_server.script(Reply(events=frames))
    model = AnthropicMessagesModel("claude-test", base_url=fake_server.url, max_retries=0)

    usage = completed(await collect(model, HELLO)).usage

    assert usage == ModelUsage(47, 1, cache_read_tokens=40, cache_write_tokens=0)


def test_the_anthropic_tally_takes_the_latest_report_of_each_count() -> None:
    tally = AnthropicUsageTally()
    tally.update({"input_tokens": 3, "cache_read_input_tokens": 2051, "output_tokens": 1})
    tally.update({"output_tokens": 120})
    tally.update({"output_tokens": 287})

    assert tally.usage() == ModelUsage(2054, 287, cache_read_tokens=2051)


# -- ModelUsage: its parts are inside its totals --------------------------------------------


def test_usage_parts_are_optional_and_unreported_by_default() -> None:
    usage = ModelUsage(10, 4)

    assert (usage.cache_read_tokens, usage.cache_write_tokens, usage.reasoning_tokens) == (
        None,
        None,
        None,
    )
    assert (usage.total_tokens, usage.uncached_input_tokens) == (14, 10)


def test_a_sum_of_usages_adds_the_reported_parts() -> None:
    first = ModelUsage(2054, 503, cache_read_tokens=0, cache_write_tokens=2051)
    second = ModelUsage(2054, 287, cache_read_tokens=2051, cache_write_tokens=0)
    plain = ModelUsage(10, 5)

    total = first + second + plain

    assert total == ModelUsage(
        4118, 795, cache_read_tokens=2051, cache_write_tokens=2051, reasoning_tokens=None
    )
    assert total.uncached_input_tokens == 16


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"input_tokens": -1}, "cannot be negative"),
        ({"cache_read_tokens": -1}, "cannot be negative"),
        ({"reasoning_tokens": -2, "output_tokens": 5}, "cannot be negative"),
        ({"input_tokens": 10, "cache_read_tokens": 8, "cache_write_tokens": 3}, "cannot exceed"),
        ({"output_tokens": 5, "reasoning_tokens": 6}, "cannot exceed"),
    ],
)
def test_usage_rejects_negative_counts_and_parts_larger_than_their_whole(
    fields: dict[str, int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ModelUsage(**fields)
