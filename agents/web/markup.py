"""Untrusted model output as HTML: markdown-it with raw HTML off, then nh3's allow-list."""

from __future__ import annotations

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

_markdown = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])

# Only what markdown itself produces; no style, no id/class except code languages.
_ALLOWED_TAGS = frozenset(
    {
        "p", "br", "hr", "em", "strong", "del", "s", "code", "pre", "blockquote",
        "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6",
        "table", "thead", "tbody", "tr", "th", "td",
    }
)  # fmt: skip
_ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"style"}, "td": {"style"}}


def render_markdown(text: str) -> SafeString:
    """Untrusted markdown as HTML that can neither run script nor restyle the page."""
    return sanitize(_markdown.render(text or ""))


def sanitize(html: str) -> SafeString:
    """HTML reduced to the markdown allow-list: no script, handlers, styles or odd URLs."""
    cleaned = nh3.clean(
        html,
        tags=set(_ALLOWED_TAGS),
        clean_content_tags={"script", "style"},
        attributes={tag: set(names) for tag, names in _ALLOWED_ATTRIBUTES.items()},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        filter_style_properties={"text-align"},
        strip_comments=True,
    )
    return mark_safe(cleaned)  # noqa: S308 - nh3 output is the sanitised HTML
