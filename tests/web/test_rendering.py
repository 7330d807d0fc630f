"""Untrusted model output becomes HTML that cannot run script; fragments escape what they carry."""

from __future__ import annotations

import re

from agents.web import rendering


def test_script_tags_are_shown_as_text_never_as_elements() -> None:
    html = rendering.render_markdown("hi <script>alert(1)</script> there")
    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_img_onerror_is_neutralised() -> None:
    html = rendering.render_markdown('<img src=x onerror="alert(1)"> and ![pic](x "t")')
    assert "<img" not in html  # raw HTML is text, and markdown images are not allowed
    assert not re.search(r"<[^>]+\bonerror\b", html)


def test_javascript_and_data_links_are_not_links() -> None:
    html = rendering.render_markdown(
        "[click](javascript:alert(1)) [also](JaVaScRiPt:alert(2)) <javascript:alert(3)> "
        "[d](data:text/html;base64,PHNjcmlwdD4=)"
    )
    assert "<a" not in html
    assert "href" not in html


def test_sanitiser_drops_javascript_hrefs_even_in_allowed_anchors() -> None:
    # Defence in depth: should markdown ever emit such a link, nh3 still removes the href.
    assert "javascript" not in rendering.sanitize('<a href="javascript:alert(1)">x</a>')


def test_raw_html_anchors_with_handlers_stay_text() -> None:
    html = rendering.render_markdown('<a href="https://x.example" onclick="steal()">x</a>')
    assert "<a " not in html
    assert "onclick" in html  # only as escaped text
    assert "&lt;a href" in html


def test_safe_links_get_rel_noopener_noreferrer_nofollow() -> None:
    html = rendering.render_markdown("[docs](https://example.com/a?b=1)")
    assert 'href="https://example.com/a?b=1"' in html
    assert 'rel="noopener noreferrer nofollow"' in html


def test_markdown_emphasis_and_code_are_kept() -> None:
    html = rendering.render_markdown("**bold** *it* `x < 1`\n\n```python\nprint('<b>')\n```")
    assert "<strong>bold</strong>" in html
    assert "<em>it</em>" in html
    assert "<code>x &lt; 1</code>" in html
    assert "<pre><code>print('&lt;b&gt;')" in html


def test_streaming_delta_is_escaped_text_targeting_its_bubble() -> None:
    fragment = rendering.delta("req-1", 2, "text", '<img src=x onerror="alert(1)">')
    assert fragment == (
        '<span hx-swap-oob="beforeend:#answer-req-1-2">'
        "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;</span>"
    )


def test_reasoning_delta_targets_the_reasoning_span() -> None:
    assert 'beforeend:#reasoning-r-1"' in rendering.delta("r", 1, "reasoning", "hm")


def test_tool_arguments_and_results_are_escaped_in_cards() -> None:
    call = {"id": "call_1", "name": "calc<b>", "arguments": {"expression": "<script>x</script>"}}
    result = {"id": "m1", "content": "<img src=x onerror=alert(1)>", "is_error": False}
    html = rendering.tool_update(call, "completed", result)
    assert "<script" not in html and "<img" not in html
    assert "calc&lt;b&gt;" in html
    assert 'data-state="ok"' in html


def test_user_message_content_is_escaped() -> None:
    html = rendering.append_message({"id": "u1", "role": "user", "content": "<script>x</script>"})
    assert "<script" not in html
    assert "&lt;script&gt;" in html


def test_odd_provider_ids_become_selector_safe_dom_ids() -> None:
    assert rendering.dom_id("call_abc-1") == "call_abc-1"
    odd = rendering.dom_id('x" onmouseover="y')
    assert re.fullmatch(r"h[0-9a-f]{20}", odd)


def test_tool_states_cover_running_error_skipped_and_denied() -> None:
    assert rendering.tool_state(None, "started") == "running"
    assert rendering.tool_state({"is_error": True}) == "error"
    assert rendering.tool_state({"skipped": True}) == "skipped"
    denied = {"is_error": True, "attributes": {"approval": "denied", "reason": "no", "by": "op"}}
    assert rendering.tool_state(denied) == "denied"
    assert rendering.tool_state({"content": "5"}) == "ok"


def test_transcript_folds_tool_results_into_their_call_cards() -> None:
    messages = [
        {"id": "u", "role": "user", "content": "2+3?"},
        {
            "id": "a",
            "role": "assistant",
            "content": "Let me use the calculator tool.",
            "tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "2+3"}}],
        },
        {
            "id": "t",
            "role": "tool",
            "tool_call_id": "c1",
            "tool_name": "calculator",
            "content": "5",
        },
        {"id": "b", "role": "assistant", "content": "The result is 5."},
    ]
    items = rendering.transcript_items(messages)
    assert [item["m"]["id"] for item in items] == ["u", "a", "b"]
    card = items[1]["cards"][0]
    assert card["state"] == "ok" and card["result"]["content"] == "5"
    assert '"expression": "2+3"' in card["arguments"]


def test_monitor_frames_never_mix_top_level_rows_and_table_bodies() -> None:
    # htmx parses a ws frame in a <template>: after a top-level <tr> a <tbody> is dropped.
    row = {"request_id": "r1", "session_id": "s1", "status": "running", "phase": "generating"}
    frames = [
        *rendering.monitor_update(row, shown_active=False),
        *rendering.monitor_update(row, shown_active=True),
        *rendering.monitor_update({**row, "status": "completed"}, shown_active=True),
    ]
    for frame in frames:
        tops = set(re.findall(r"(?:^|</(?:tr|tbody)>)\s*<(tr|tbody)\b", frame.strip()))
        assert len(tops) == 1, frame
    assert frames[-2] == '<tr id="run-r1" hx-swap-oob="delete"></tr>'
    assert frames[-1].startswith('<tbody hx-swap-oob="afterbegin:#recent-runs"><tr id="run-r1"')


def test_replies_say_accepted_or_rejected_with_the_escaped_reason() -> None:
    accepted = rendering.reply("queue", True, "Queued until the active run finishes.")
    assert 'data-reply="accepted" data-action="queue"' in accepted
    assert "Queued until the active run finishes." in accepted
    rejected = rendering.reply("approve", False, "No such <pending> request")
    assert 'data-reply="rejected"' in rejected and "No such &lt;pending&gt; request" in rejected


def test_tool_cards_name_who_decided_an_approval_and_why() -> None:
    call = {"id": "c1", "name": "calculator", "arguments": {}}
    approved = {"content": "5", "attributes": {"approval": "approved", "by": "operator"}}
    html = rendering.tool_update(call, "completed", approved)
    assert 'data-testid="approval-outcome">approved by operator</div>' in html
    denied = {"content": "Denied", "is_error": True,
              "attributes": {"approval": "denied", "by": "bob", "reason": "<no>"}}  # fmt: skip
    html = rendering.tool_update(call, "failed", denied)
    assert 'data-state="denied"' in html
    assert 'data-testid="approval-outcome">denied by bob: &lt;no&gt;</div>' in html
    plain = rendering.tool_update(call, "completed", {"content": "5"})
    assert "approval-outcome" not in plain


def test_the_monitor_row_escapes_every_value_it_shows() -> None:
    evil = '<img src=x onerror="alert(1)">'
    row = {
        "request_id": "r1",
        "session_id": "s1",
        "session_title": evil,
        "user": evil,
        "profile": evil,
        "status": "failed",
        "phase": "done",
        "current_tool": evil,
        "error": evil,
        "usage": {"estimated": False, "label": evil},
        "input_tokens": 1,
        "output_tokens": 2,
        "elapsed": 0.25,
        "finished_at": 1733600010.0,
    }
    html = rendering.monitor_row(row)
    assert "<img" not in html and 'onerror="' not in html
    assert html.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") == 8
    assert ">0.3 s</td>" in html  # one decimal, halves rounded up like floatformat
    assert 'datetime="2024-12-07T19:33:30+00:00"' in html and ">19:33:30</time>" in html


def test_an_active_monitor_row_offers_cancel_and_steer_until_a_cancel_is_asked() -> None:
    row = {"request_id": "r1", "session_id": "s1", "status": "running", "phase": "generating"}
    html = rendering.monitor_row(row, oob="true")
    assert 'hx-swap-oob="true"' in html and 'href="/runs/r1/"' in html
    assert 'data-testid="monitor-cancel"' in html and 'data-testid="monitor-steer"' in html
    assert "counted when the model call ends" in html
    asked = rendering.monitor_row({**row, "cancel_state": "requested"})
    assert 'data-testid="monitor-cancel"' not in asked and "hx-swap-oob" not in asked


def test_the_status_bar_escapes_what_it_shows_and_offers_cancel_and_steer_while_active() -> None:
    evil = "<script>x</script>"
    row = {
        "request_id": "r1",
        "status": "running",
        "phase": "tool_running",
        "current_tool": evil,
        "iterations": 1,
        "input_tokens": 3,
        "output_tokens": 4,
        "usage": {"estimated": False, "cost_label": evil},
        "error": evil,
    }
    html = rendering.run_status(row, oob=True)
    assert "<script>" not in html and html.count("&lt;script&gt;x&lt;/script&gt;") == 3
    assert " · 1 model call · 3 in / 4 out tokens · " in html  # one call: no plural
    assert 'hx-swap-oob="true"' in html and 'href="/runs/r1/"' in html
    assert 'data-testid="cancel-form"' in html and 'data-testid="steer-hint"' in html

    ended = rendering.run_status({**row, "status": "cancelled", "cancel_state": "done"})
    assert "last run" in ended and 'data-testid="cancel-form"' not in ended
    assert 'data-testid="cancel-state"' in ended and "hx-swap-oob" not in ended
    idle = rendering.run_status(None)
    assert 'data-status="idle"' in idle and 'data-testid="phase">idle<' in idle
