"""How far nbagent's token estimate lands from what providers reported, on recorded real traffic.

    .venv/bin/python bench/context_estimate.py                  # the recordings in tests/wire/
    .venv/bin/python bench/context_estimate.py --wire DIR ...   # more directories of recordings
    .venv/bin/python bench/context_estimate.py --cases          # also one row per case
    .venv/bin/python bench/context_estimate.py --json PATH      # also the figures as JSON

Every recorded interaction (one JSON file: ``request.body``, ``response.body`` or ``response.sse``)
with a successful reply that reports input tokens is estimated from its raw request body by the
rule of ``nbagent/context/_estimate.py``: a text takes a token per digit and
``ceil(other characters / CHARS_PER_TOKEN)`` tokens,
each message and each tool call adds ``MESSAGE_TOKENS``, an image ``IMAGE_TOKENS``, and the tool
definitions take ``json.dumps(tools)`` by the same rule. The pieces follow ``message_tokens``:

- the system prompt (Anthropic ``system``, OpenAI ``system`` / ``developer`` messages, Responses
  ``instructions``) is one message;
- a user message: its text (a string or the text parts, joined) and its images;
- an assistant message: its text, each tool call's name and arguments (+ ``MESSAGE_TOKENS``
  each), and the text of its thinking blocks (Anthropic ``thinking``, Responses reasoning
  summaries); DeepSeek's ``reasoning_content`` is not counted (nbagent does not count
  `AssistantMessage.reasoning`);
- a tool result is a message of its own (as nbagent's `ToolResultMessage`), even when Anthropic
  carries several in one user message;
- an output schema (``response_format``, Responses ``text.format``) is not counted: nbagent's
  estimate does not count one.

The estimate is compared with the provider's count (``prompt_tokens`` for chat completions;
``input_tokens`` + ``cache_read_input_tokens`` + ``cache_creation_input_tokens`` for Anthropic;
``usage.input_tokens`` for Responses): per case the ratio estimate / reported, per provider family
the median, the 10th and 90th percentiles, the worst case and the share within ±25 %, for all
requests and for those above `LARGE` reported tokens (small ones are mostly fixed overheads: role
markers, the hidden tool-use prompt). Then a grid of other ``CHARS_PER_TOKEN`` and
``MESSAGE_TOKENS`` values, scored by the median absolute log ratio over the large requests.

Skipped, with the reason printed: error replies and replies without usage, requests without a
body (background-mode polls), documents / PDFs, server-side tools (web search, code execution,
image generation: the provider adds their results' tokens itself), server-side conversation
state (``previous_response_id``, item references) and encrypted items (Anthropic
``redacted_thinking``, Responses reasoning ``encrypted_content`` and compaction items), whose
token cost is opaque.

The constants come from ``nbagent.context``; where that package cannot be imported, they are read
from ``nbagent/context/_estimate.py``. Standard library and nbagent only.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WIRE_DIRS = [ROOT / "tests" / "wire" / "cases", ROOT / "tests" / "wire" / "anthropic_messages",
             ROOT / "tests" / "wire" / "openai_responses"]
LARGE = 500
"""Reported input tokens above which a request counts as large."""
FAMILIES = {"chat": "OpenAI chat", "anthropic": "Anthropic", "responses": "Responses"}
CHARS_GRID = (3.0, 3.2, 3.5, 3.8, 4.0, 4.2, 4.5)
MESSAGE_GRID = (0, 2, 4, 6, 8, 12)


def estimator_constants() -> dict[str, float]:
    """``CHARS_PER_TOKEN``, ``MESSAGE_TOKENS``, ``IMAGE_TOKENS`` (and Anthropic's
    ``TOOL_PROMPT_TOKENS``) as nbagent has them."""
    try:
        from nbagent.context import CHARS_PER_TOKEN, IMAGE_TOKENS, MESSAGE_TOKENS, TOOL_PROMPT_TOKENS
        return {"CHARS_PER_TOKEN": CHARS_PER_TOKEN, "MESSAGE_TOKENS": MESSAGE_TOKENS, "IMAGE_TOKENS": IMAGE_TOKENS,
                "ANTHROPIC_TOOL_PROMPT": TOOL_PROMPT_TOKENS.get("anthropic", 0)}
    except ImportError:
        pass
    import nbagent

    path = Path(nbagent.__file__).resolve().parent / "context" / "_estimate.py"
    if not path.exists():
        raise SystemExit(f"nbagent.context is not importable and {path} does not exist")
    found: dict[str, float] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("CHARS_PER_TOKEN", "MESSAGE_TOKENS", "IMAGE_TOKENS"):
                found[name] = ast.literal_eval(node.value)
    if len(found) != 3:
        raise SystemExit(f"could not read the three constants from {path}")
    return found


class Opaque(Exception):
    """The request holds something whose token cost cannot be estimated from its body."""


@dataclass
class Pieces:
    """What the rule counts in one request: texts, per-message overheads and images."""

    texts: list[str] = field(default_factory=list)
    units: int = 0
    images: int = 0
    tools: str = ""
    tool_prompt: bool = False
    """Whether the provider adds a hidden tool prompt (``TOOL_PROMPT_TOKENS``: Anthropic with tools)."""

    def message(self, *texts: str, images: int = 0) -> None:
        """One message (or tool call): its texts, its images, one `MESSAGE_TOKENS`."""
        self.texts.extend(t for t in texts if t)
        self.units += 1
        self.images += images

    def estimate(self, chars: float, message: float, image: float, tool_prompt: float = 0) -> float:
        """The estimated input tokens with these constants."""
        size = sum(_rule(t, chars) for t in self.texts)
        if self.tools:
            size += _rule(self.tools, chars) + (tool_prompt if self.tool_prompt else 0)
        return size + self.units * message + self.images * image


def _rule(text: str, chars: float) -> int:
    """nbagent's rule for one text (``text_tokens``): a digit a token, the rest `chars` a token."""
    digits = sum(map(text.count, "0123456789"))
    return math.ceil((len(text) - digits) / chars) + digits


def _dumps(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


# ---------------------------------------------------------------- OpenAI chat completions

def _chat_content(content: Any) -> tuple[str, int]:
    if content is None or isinstance(content, str):
        return content or "", 0
    texts, images = [], 0
    for part in content:
        kind = part.get("type")
        if kind in ("text", "input_text", "refusal"):
            texts.append(part.get("text") or part.get("refusal") or "")
        elif kind == "image_url":
            images += 1
        elif kind in ("file", "input_file", "input_audio"):
            raise Opaque("document / file part")
    return "\n".join(texts), images


def chat_pieces(body: dict[str, Any]) -> Pieces:
    """The pieces of a chat-completions request body."""
    pieces = Pieces()
    for message in body.get("messages") or []:
        text, images = _chat_content(message.get("content"))
        pieces.message(text, images=images)
        calls = list(message.get("tool_calls") or [])
        if message.get("function_call"):
            calls.append({"function": message["function_call"]})
        for call in calls:
            function = call.get("function") or {}
            pieces.message(function.get("name") or "", _dumps(function.get("arguments") or ""))
    if body.get("tools"):
        pieces.tools = _dumps(body["tools"])
    return pieces


# ---------------------------------------------------------------- Anthropic Messages

SERVER_BLOCKS = ("server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
                 "mcp_tool_use", "mcp_tool_result", "container_upload")


def _anthropic_blocks(content: Any) -> tuple[list[str], int]:
    if isinstance(content, str):
        return [content], 0
    texts, images = [], 0
    for block in content or []:
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind == "image":
            images += 1
        elif kind in ("document", "search_result"):
            raise Opaque("document / PDF")
        elif kind == "redacted_thinking":
            raise Opaque("encrypted item (redacted thinking)")
        elif kind in SERVER_BLOCKS:
            raise Opaque("server-side tool")
    return texts, images


def anthropic_pieces(body: dict[str, Any]) -> Pieces:
    """The pieces of a Messages API request body."""
    pieces = Pieces()
    system = body.get("system")
    if system:
        texts, _ = _anthropic_blocks(system)
        pieces.message("\n".join(texts))
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        _anthropic_blocks(blocks)  # raises for what cannot be estimated
        if message.get("role") == "assistant":
            texts = [b.get("text") or "" for b in blocks if b.get("type") == "text"]
            thinking = [b.get("thinking") or "" for b in blocks if b.get("type") == "thinking"]
            pieces.message("\n".join(texts), *thinking)
            for block in blocks:
                if block.get("type") == "tool_use":
                    pieces.message(block.get("name") or "", _dumps(block.get("input") or {}))
            continue
        rest = [b for b in blocks if b.get("type") != "tool_result"]
        for block in blocks:
            if block.get("type") == "tool_result":
                texts, images = _anthropic_blocks(block.get("content") or "")
                pieces.message("\n".join(texts), images=images)
        if rest:
            texts, images = _anthropic_blocks(rest)
            pieces.message("\n".join(texts), images=images)
    tools = body.get("tools") or []
    if any(t.get("type") not in (None, "custom") for t in tools):
        raise Opaque("server-side tool")
    if tools:
        pieces.tools = _dumps(tools)
        pieces.tool_prompt = True
    return pieces


# ---------------------------------------------------------------- OpenAI Responses

def _responses_content(content: Any) -> tuple[str, int]:
    if isinstance(content, str):
        return content, 0
    texts, images = [], 0
    for part in content or []:
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "refusal"):
            texts.append(part.get("text") or part.get("refusal") or "")
        elif kind == "input_image":
            images += 1
        elif kind in ("input_file", "input_audio"):
            raise Opaque("document / file part")
    return "\n".join(texts), images


def responses_pieces(body: dict[str, Any]) -> Pieces:
    """The pieces of a Responses API request body."""
    if body.get("previous_response_id"):
        raise Opaque("server-side conversation state (previous_response_id)")
    if any(t.get("type") != "function" for t in body.get("tools") or []):
        raise Opaque("server-side tool")
    pieces = Pieces()
    if body.get("instructions"):
        pieces.message(body["instructions"])
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    in_answer = False  # consecutive assistant items are one nbagent AssistantMessage
    last_user = max((i for i, it in enumerate(items) if it.get("type", "message") == "message"
                     and it.get("role") == "user"), default=-1)
    for at, item in enumerate(items):
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "reasoning" and at < last_user:
            continue  # OpenAI drops an earlier turn's reasoning from the context: not counted

        if kind in ("reasoning", "compaction") and item.get("encrypted_content"):
            raise Opaque("encrypted item (reasoning / compaction)")
        if kind == "message" and role != "assistant":
            text, images = _responses_content(item.get("content"))
            pieces.message(text, images=images)
            in_answer = False
        elif kind == "function_call_output":
            text, images = _responses_content(item.get("output"))
            pieces.message(text, images=images)
            in_answer = False
        elif kind in ("message", "reasoning", "function_call"):
            if not in_answer:
                pieces.message()
                in_answer = True
            if kind == "message":  # the answer's text, inside the answer's message
                pieces.texts.append(_responses_content(item.get("content"))[0])
            elif kind == "reasoning":
                pieces.texts.extend(s.get("text") or "" for s in item.get("summary") or [])
            else:
                pieces.message(item.get("name") or "", _dumps(item.get("arguments") or ""))
        elif kind == "item_reference":
            raise Opaque("server-side conversation state (item_reference)")
        else:
            raise Opaque(f"server-side tool or item ({kind})")
    if body.get("tools"):
        pieces.tools = _dumps(body["tools"])
    return pieces


# ---------------------------------------------------------------- reported usage

def _sse_events(sse: str) -> list[dict[str, Any]]:
    events = []
    for line in sse.splitlines():
        if line.startswith("data:"):
            data = line[5:].strip()
            if data and data != "[DONE]":
                try:
                    events.append(json.loads(data))
                except ValueError:
                    pass
    return events


def _anthropic_input(usage: dict[str, Any]) -> int | None:
    if usage.get("input_tokens") is None:
        return None
    return sum(usage.get(k) or 0 for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))


def reported_input(family: str, response: dict[str, Any]) -> int | None:
    """The input tokens the provider reported for this reply, or None."""
    body = response.get("body") if isinstance(response.get("body"), dict) else None
    events = _sse_events(response["sse"]) if response.get("sse") else []
    if family == "anthropic":
        usage: dict[str, Any] = dict((body or {}).get("usage") or {})
        for event in events:  # message_start's message.usage, then message_delta's
            found = (event.get("message") or {}).get("usage") or event.get("usage") or {}
            usage.update({k: v for k, v in found.items() if v is not None})
        return _anthropic_input(usage)
    key = "prompt_tokens" if family == "chat" else "input_tokens"
    found_tokens = ((body or {}).get("usage") or {}).get(key)
    for event in events:
        response_usage = event["response"].get("usage") if isinstance(event.get("response"), dict) else None
        for seen in (event.get("usage"), (event.get("x_groq") or {}).get("usage"), response_usage):
            if isinstance(seen, dict) and seen.get(key) is not None:
                found_tokens = seen[key]
    return found_tokens


# ---------------------------------------------------------------- the measurement

Constants = dict[str, float]


@dataclass
class Case:
    """One recorded interaction, estimated (or skipped, with the reason)."""

    name: str
    family: str
    reported: int | None
    pieces: Pieces | None
    skipped: str | None = None
    frame: str = ""
    """Model, system prompt and tools as canonical JSON: requests of one conversation share it."""
    turns: list[str] = field(default_factory=list)
    """Each message (or Responses input item) as canonical JSON."""

    def estimate(self, constants: Constants) -> float:
        """The estimated input tokens with these constants."""
        assert self.pieces is not None
        return self.pieces.estimate(constants["CHARS_PER_TOKEN"], constants["MESSAGE_TOKENS"],
                                    constants["IMAGE_TOKENS"], constants.get("ANTHROPIC_TOOL_PROMPT", 0))

    def ratio(self, constants: Constants) -> float | None:
        """Estimate / reported, or None where either is missing."""
        if self.pieces is None or not self.reported:
            return None
        return self.estimate(constants) / self.reported


@dataclass
class Pair:
    """Two requests of one conversation: `then` sends `first`'s messages and more after them.

    This is what the run loop estimates: the provider's count of the previous request plus the
    estimate of what was added since (docs/context.md)."""

    first: Case
    then: Case

    def added(self, constants: Constants) -> float:
        """The estimate of what `then` adds to `first`."""
        return self.then.estimate(constants) - self.first.estimate(constants)

    def increment_ratio(self, constants: Constants) -> float:
        """Estimated / reported tokens of what was added."""
        assert self.first.reported and self.then.reported
        return self.added(constants) / (self.then.reported - self.first.reported)

    def gauge_ratio(self, constants: Constants) -> float:
        """(first's reported count + the estimate of what was added) / then's reported count."""
        assert self.first.reported and self.then.reported
        return (self.first.reported + self.added(constants)) / self.then.reported


PIECES = {"chat": chat_pieces, "anthropic": anthropic_pieces, "responses": responses_pieces}


def family_of(case: dict[str, Any]) -> str | None:
    """``chat``, ``anthropic`` or ``responses`` from the request's path; None for others."""
    path = (case.get("request") or {}).get("path") or ""
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/messages"):
        return "anthropic"
    if "/responses" in path:
        return "responses"
    return None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def load_case(path: Path) -> Case | None:
    """Read one recording; None when it is not one of the three APIs."""
    data = json.loads(path.read_text(encoding="utf-8"))
    family = family_of(data)
    if family is None:
        return None
    request, response = data.get("request") or {}, data.get("response") or {}
    body = request.get("body") if isinstance(request.get("body"), dict) else {}
    case = Case(path.stem, family, reported_input(family, response), None)
    if body:
        try:
            case.pieces = PIECES[family](body)
        except Opaque as reason:
            case.skipped = str(reason)
        turns = body.get("messages") if family != "responses" else body.get("input")
        turns = [{"role": "user", "content": turns}] if isinstance(turns, str) else turns or []
        case.turns = [_canonical(t) for t in turns]
        case.frame = _canonical([family, body.get("model"), body.get("tools"), body.get("system"),
                                 body.get("instructions")])
    else:
        case.skipped = "no request body"
    if not 200 <= int(response.get("status") or 0) < 300:
        case.skipped = f"error reply (HTTP {response.get('status')})"
    elif request.get("path", "").endswith("/compact"):
        case.skipped = "compaction endpoint (adds its own prompt)"
    elif case.reported is None and case.skipped is None:
        case.skipped = "no input tokens reported"
    return case


def load_cases(dirs: list[Path]) -> list[Case]:
    """Every recording in `dirs` (a file name seen twice counts once)."""
    seen: dict[str, Case] = {}
    for directory in dirs:
        for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
            if path.stem not in seen:
                case = load_case(path)
                if case is not None:
                    seen[path.stem] = case
    return list(seen.values())


def usable(cases: list[Case]) -> list[Case]:
    """The cases the figures are about: not skipped, with an estimate and a reported count."""
    return [c for c in cases if c.skipped is None and c.pieces is not None and c.reported]


def pairs(cases: list[Case]) -> list[Pair]:
    """For each usable request, the usable one of the same conversation it extends the most
    (same model, system prompt and tools; its messages a prefix of this one's), if any."""
    good = sorted(usable(cases), key=lambda c: c.name)
    found = []
    for then in good:
        earlier = [c for c in good if c.frame == then.frame and len(c.turns) < len(then.turns)
                   and then.turns[:len(c.turns)] == c.turns and (c.reported or 0) < (then.reported or 0)]
        if earlier:
            found.append(Pair(max(earlier, key=lambda c: len(c.turns)), then))
    return found


def percentile(values: list[float], q: float) -> float:
    """The `q`-quantile (0..1) of `values`, linear between the closest ranks."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(named: list[tuple[float, str]]) -> dict[str, Any] | None:
    """Count, median, p10 / p90, the worst (farthest from 1 in log) and the share within ±25 %
    of (ratio, name) pairs."""
    if not named:
        return None
    values = [r for r, _ in named]
    worst, worst_name = max(named, key=lambda rn: abs(math.log(rn[0])) if rn[0] > 0 else math.inf)
    return {"count": len(values), "median": statistics.median(values), "p10": percentile(values, 0.1),
            "p90": percentile(values, 0.9), "worst": worst, "worst_case": worst_name,
            "within_25": sum(abs(r - 1) <= 0.25 for r in values) / len(values)}


def case_summary(cases: list[Case], constants: Constants) -> dict[str, Any] | None:
    """`summary` of estimate / reported over `cases`."""
    return summary([(r, c.name) for c in cases if (r := c.ratio(constants)) is not None])


def median_abs_log(ratios: list[float]) -> float:
    """The median of |ln ratio| (0 is a perfect fit; 0.22 is a factor of 1.25)."""
    return statistics.median(abs(math.log(r)) if r > 0 else math.inf for r in ratios)


def grid(large: list[Case], steps: list[Pair], constants: Constants) -> dict[tuple[float, float], tuple[float, float]]:
    """(chars per token, message tokens) -> median |ln ratio| over the large requests and over the
    increments, for each point of the grid."""
    scores: dict[tuple[float, float], tuple[float, float]] = {}
    for chars in CHARS_GRID:
        for message in MESSAGE_GRID:
            trial = {**constants, "CHARS_PER_TOKEN": chars, "MESSAGE_TOKENS": message}
            on_large = median_abs_log([c.ratio(trial) or 0.0 for c in large]) if large else math.nan
            on_steps = median_abs_log([p.increment_ratio(trial) for p in steps]) if steps else math.nan
            scores[(chars, float(message))] = (on_large, on_steps)
    return scores


def overheads(cases: list[Case], constants: Constants) -> dict[str, list[float]]:
    """Reported minus estimated tokens, by family and whether tools were sent."""
    out: dict[str, list[float]] = {}
    for case in usable(cases):
        key = f"{FAMILIES[case.family]}, {'with' if case.pieces and case.pieces.tools else 'no'} tools"
        out.setdefault(key, []).append((case.reported or 0) - case.estimate(constants))
    return out


# ---------------------------------------------------------------- the report

def _row(label: str, stats: dict[str, Any] | None) -> str:
    if stats is None:
        return f"| {label} | 0 | - | - | - | - |"
    return (f"| {label} | {stats['count']} | {stats['median']:.2f} | {stats['p10']:.2f} to {stats['p90']:.2f} | "
            f"{stats['worst']:.2f} (`{stats['worst_case']}`) | {stats['within_25']:.0%} |")


HEAD = ["| requests | count | median ratio | p10 to p90 | worst | within ±25 % |", "|---|---:|---:|---:|---|---:|"]


def whole_requests(cases: list[Case], constants: Constants, figures: dict[str, Any]) -> list[str]:
    """The table of estimate / reported per family, all requests and the large ones."""
    good = usable(cases)
    lines = [f"Whole requests: estimate / reported input tokens, {len(good)} usable recordings of {len(cases)}.", "",
             *HEAD]
    for key, label in [*FAMILIES.items(), ("all", "all")]:
        members = [c for c in good if key in ("all", c.family)]
        stats = case_summary(members, constants)
        big = case_summary([c for c in members if (c.reported or 0) > LARGE], constants)
        figures["families"][key] = {"all": stats, "large": big}
        lines += [_row(f"{label}, all", stats), _row(f"{label}, > {LARGE} tokens", big)]
    return lines


def increments(steps: list[Pair], constants: Constants, figures: dict[str, Any]) -> list[str]:
    """The table of the conversation pairs: what the run loop's gauge estimates."""
    lines = ["", f"Next request of a conversation ({len(steps)} pairs): the increment is the estimate of "
             "the added messages / the reported difference; the gauge is the previous request's reported "
             "count plus that estimate / the reported count (what nbagent shows before the provider answers).",
             "", "| first → then | reported | added: reported / estimated | increment | gauge |",
             "|---|---:|---:|---:|---:|"]
    for p in steps:
        lines.append(f"| `{p.first.name}` → `{p.then.name}` | {p.first.reported} → {p.then.reported} | "
                     f"{(p.then.reported or 0) - (p.first.reported or 0)} / {p.added(constants):.0f} | "
                     f"{p.increment_ratio(constants):.2f} | {p.gauge_ratio(constants):.2f} |")
    inc = summary([(p.increment_ratio(constants), p.then.name) for p in steps])
    gauge = summary([(p.gauge_ratio(constants), p.then.name) for p in steps])
    figures["increments"], figures["gauge"] = inc, gauge
    lines += ["", *HEAD, _row("increments", inc), _row("gauge", gauge)]
    return lines


def _point(point: tuple[float, float]) -> str:
    return f"{point[0]:g} chars a token, {point[1]:g} a message"


def grid_table(large: list[Case], steps: list[Pair], constants: Constants, figures: dict[str, Any]) -> list[str]:
    """The grid of other constants, scored over the large requests and over the increments."""
    scores = grid(large, steps, constants)
    figures["grid"] = [[c, m, a, b] for (c, m), (a, b) in scores.items()]
    now = (constants["CHARS_PER_TOKEN"], constants["MESSAGE_TOKENS"])
    best_large = min(scores, key=lambda k: scores[k][0])
    best_steps = min(scores, key=lambda k: scores[k][1])
    lines = ["", f"Other constants: median |ln ratio| over the {len(large)} large requests / over the "
             f"{len(steps)} increments (0 is exact; 0.22 is a factor of 1.25). Now {_point(now)}: "
             f"{scores[now][0]:.3f} / {scores[now][1]:.3f}; best for the large requests {_point(best_large)} "
             f"({scores[best_large][0]:.3f}), for the increments {_point(best_steps)} "
             f"({scores[best_steps][1]:.3f}).", "",
             "| CHARS_PER_TOKEN | " + " | ".join(f"MESSAGE_TOKENS {m}" for m in MESSAGE_GRID) + " |",
             "|---:|" + "---:|" * len(MESSAGE_GRID)]
    for chars in CHARS_GRID:
        cells = [f"{scores[(chars, m)][0]:.2f} / {scores[(chars, m)][1]:.2f}" for m in MESSAGE_GRID]
        lines.append(f"| {chars} | " + " | ".join(cells) + " |")
    return lines


def overhead_table(cases: list[Case], constants: Constants, figures: dict[str, Any]) -> list[str]:
    """Reported minus estimated tokens: the fixed costs the rule does not see."""
    found = overheads(cases, constants)
    figures["overheads"] = found
    lines = ["", "Reported minus estimated tokens (what the rule misses; negative: it counts too much):", "",
             "| requests | count | median | min to max |", "|---|---:|---:|---:|"]
    for key in sorted(found):
        values = found[key]
        lines.append(f"| {key} | {len(values)} | {statistics.median(values):+.0f} | "
                     f"{min(values):+.0f} to {max(values):+.0f} |")
    return lines


def report(cases: list[Case], constants: Constants, per_case: bool) -> tuple[str, dict[str, Any]]:
    """The markdown report and its figures."""
    figures: dict[str, Any] = {"constants": constants, "families": {}}
    lines = [f"nbagent's token estimate (CHARS_PER_TOKEN {constants['CHARS_PER_TOKEN']}, MESSAGE_TOKENS "
             f"{constants['MESSAGE_TOKENS']}, IMAGE_TOKENS {constants['IMAGE_TOKENS']}) against the input tokens "
             "providers reported.", ""]
    lines += whole_requests(cases, constants, figures)
    steps = pairs(cases)
    if steps:
        lines += increments(steps, constants, figures)
    large = [c for c in usable(cases) if (c.reported or 0) > LARGE]
    if large or steps:
        lines += grid_table(large, steps, constants, figures)
    lines += overhead_table(cases, constants, figures)
    skipped: dict[str, list[str]] = {}
    for case in cases:
        if case.skipped:
            skipped.setdefault(case.skipped, []).append(case.name)
    figures["skipped"] = skipped
    lines += ["", "Skipped:"] + [f"- {reason} ({len(names)}): {', '.join(names)}"
                                 for reason, names in sorted(skipped.items())]
    if per_case:
        lines += ["", "| case | family | reported | estimate | ratio |", "|---|---|---:|---:|---:|"]
        for case in sorted(usable(cases), key=lambda c: (c.family, c.name)):
            lines.append(f"| `{case.name}` | {case.family} | {case.reported} | {case.estimate(constants):.0f} | "
                         f"{case.ratio(constants):.2f} |")
    return "\n".join(lines), figures


def main(argv: list[str] | None = None) -> int:
    """Print the report (and write the JSON where asked)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--wire", nargs="*", default=[], type=Path, help="more directories of recordings")
    parser.add_argument("--cases", action="store_true", help="also one row per case")
    parser.add_argument("--json", type=Path, help="write the figures there as JSON")
    args = parser.parse_args(argv)
    constants = estimator_constants()
    text, figures = report(load_cases([*WIRE_DIRS, *args.wire]), constants, args.cases)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
