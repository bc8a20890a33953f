"""Prices: the cost of a model call, computed when its usage row is made and stored with it.

Owns the price lookup; imports usage and exceptions only, and `genai_prices` lazily (on the first
priced call), never pandas. Prices change over time and history must not: the loop prices each
`ModelCallUsage` row once (`RunConfig.price` -> `price_row`) and the store keeps the numbers.

Where a price comes from, first match wins:

1. your own prices, ``Agent(..., prices={...})``, looked up as ``"provider:model"``, then
   ``"model"``, then ``"*"`` (a default for every other model);
2. the offline price table of `genai-prices`, by model name and the provider the model reports
   (``openai`` for `OpenAIModel`, whatever its base URL, so a proxy still gets prices), at the
   time of the call;
3. nothing: the cost columns stay None (NaN in DataFrames) and one `UnknownPriceWarning` is
   issued per ``(provider, model)`` and process.

Custom prices are **USD per million tokens**, per token type::

    Agent(model, prices={
        "my-finetune": {"input": 0.5, "cache_read": 0.05, "cache_write": 0.6, "output": 1.5},
        "openai:gpt-4.1-mini": {"cache_read": 0.0},   # override one type, the rest from genai-prices
        "*": {"input": 0, "output": 0},               # every other model is free (no warnings)
    })

Token types: ``input`` (uncached prompt tokens), ``cache_read`` (alias ``cached_input``: prompt
tokens served from the cache; default: the ``input`` price), ``cache_write`` (prompt tokens written
to the cache; default: the ``input`` price), ``output`` (completion tokens, reasoning included).
``input_tokens`` of a row counts all prompt tokens, so the uncached part is ``input_tokens -
cache_read_tokens - cache_write_tokens`` (the same convention as genai-prices).
A type missing from your entry is taken from genai-prices when it knows the model (the base price
of a tiered price), else the row gets no cost and a warning.

Batch prices: a row answered through a provider's batch API (``ModelCallUsage.batch``,
``agent.map(..., batch_api=True)``) is priced at genai-prices' batch price of the model where the
table has one (its ``processing: batch`` variant), else at `BATCH_DISCOUNT` (half) of the live
price: what OpenAI's Batch API and Anthropic's Message Batches charge. Your own prices are live
prices: a batch row pays `BATCH_DISCOUNT` of them.

The same table gives a model's context window in tokens (`context_window_of`, which
`Model.context_window` reads when the model was given none).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from .exceptions import UserError
from .usage import ModelCallUsage

__all__ = [
    "BATCH_DISCOUNT",
    "PRICE_TYPES",
    "UnknownPriceWarning",
    "check_prices",
    "context_window_of",
    "lookup_prices",
    "price_row",
]

PRICE_TYPES = ("input", "cache_read", "cache_write", "output")
"""Token types a custom price can set (USD per million tokens)."""

_ALIASES = {"cached_input": "cache_read", "input_cached": "cache_read", "cache_read_input": "cache_read"}
_GP_KEYS = {
    "input": "input_mtok",
    "cache_read": "cache_read_mtok",
    "cache_write": "cache_write_mtok",
    "output": "output_mtok",
}
_PER = 1_000_000
BATCH_DISCOUNT = 0.5
"""What a batch row pays of the live price when genai-prices knows no batch price of the model
(or the price is your own): OpenAI's Batch API and Anthropic's Message Batches both charge half."""
_BATCH_CONTEXT = {"processing": "batch"}
"""genai-prices' request context that selects a model's batch price variant."""
_FREE_PROVIDERS = frozenset({"local"})
"""Providers that run on your own machine: their calls cost 0 USD (no lookup, no warning)."""

_PROVIDER_IDS = {"openai": "openai", "azure": "azure", "google": "google", "anthropic": "anthropic"}
"""nbagent provider name -> genai-prices provider id (names not listed are passed unchanged)."""

_warned: set[tuple[str, str]] = set()


class UnknownPriceWarning(UserWarning):
    """No price is known for a model: its cost columns stay empty (None / NaN)."""


def check_prices(prices: Mapping[str, Any] | None) -> dict[str, dict[str, float]] | None:
    """Validate custom prices and return them normalised (aliases resolved, floats).

    Raises:
        UserError: an entry is not a mapping, names an unknown token type, or has a price that
            is not a non-negative number.
    """
    if not prices:
        return None
    if not isinstance(prices, Mapping):
        raise UserError(f"prices must be a dict {{model: {{token type: USD per 1M tokens}}}}, got {prices!r}")
    out: dict[str, dict[str, float]] = {}
    for model, entry in prices.items():
        if not isinstance(model, str) or not isinstance(entry, Mapping):
            raise UserError(
                f"prices[{model!r}] must map token types to USD per million tokens, e.g. "
                "{'input': 0.5, 'output': 1.5}"
            )
        clean: dict[str, float] = {}
        for key, value in entry.items():
            kind = _ALIASES.get(key, key)
            if kind not in PRICE_TYPES:
                raise UserError(
                    f"prices[{model!r}] has unknown token type {key!r}; use {', '.join(PRICE_TYPES)} "
                    "(USD per million tokens)"
                )
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise UserError(f"prices[{model!r}][{key!r}] must be a non-negative number, got {value!r}")
            clean[kind] = float(value)
        out[model] = clean
    return out


def _custom_entry(prices: Mapping[str, Any] | None, provider: str, model: str) -> dict[str, float] | None:
    if not prices:
        return None
    table = check_prices(prices) or {}  # a few µs: small dicts, once per model call
    for key in (f"{provider}:{model}", model, "*"):
        entry = table.get(key)
        if entry is not None:
            return entry
    return None


def _gp_provider(provider: str) -> str:
    return _PROVIDER_IDS.get(provider, provider)


def _gp_calc(row: ModelCallUsage) -> Any:
    """genai-prices' PriceCalculation for the row, or None when it knows no price (a batch row:
    with the batch variant of the price when the table has one, see `_batch_known`)."""
    try:
        from genai_prices import Usage as GPUsage
        from genai_prices import calc_price
    except ImportError:  # pragma: no cover - genai-prices is in the pandas extra
        return None
    usage = GPUsage(
        input_tokens=row.input_tokens,
        cache_read_tokens=row.cache_read_tokens or None,
        cache_write_tokens=row.cache_write_tokens or None,
        output_tokens=row.output_tokens,
    )
    when = datetime.fromtimestamp(row.time, timezone.utc) if row.time else None
    context = _BATCH_CONTEXT if row.batch else None
    try:
        return calc_price(
            usage, model_ref=row.model, provider_id=_gp_provider(row.provider), genai_request_timestamp=when,
            price_context=context,
        )
    except LookupError:
        pass
    except Exception:  # pragma: no cover - pricing must never break a run: the cost stays unknown
        return None
    try:  # a provider genai-prices does not list (a gateway's own name): look up by model only
        return calc_price(usage, model_ref=row.model, genai_request_timestamp=when, price_context=context)
    except LookupError:
        return None
    except Exception:  # pragma: no cover - a malformed model name must not break a run
        return None


def _batch_known(calc: Any, row: ModelCallUsage) -> bool:
    """Whether genai-prices priced the batch row `row` at a batch price of its own (an active
    ``processing: batch`` variant of the model's price); False: `calc` holds the live price."""
    when = datetime.fromtimestamp(row.time, timezone.utc) if row.time else datetime.now(timezone.utc)
    try:
        return any(variant.when == _BATCH_CONTEXT and (variant.constraint is None or variant.constraint.active(when))
                   for variant in calc.model.price_variants or ())
    except Exception:  # a table of another shape: take the live price and discount it
        return False


def _discount(row: ModelCallUsage) -> None:
    """`BATCH_DISCOUNT` of `row`'s live cost columns: a batch row with no batch price of its own."""
    if row.cost_input is not None and row.cost_output is not None:
        row.cost_input *= BATCH_DISCOUNT
        row.cost_output *= BATCH_DISCOUNT
        row.cost_total = row.cost_input + row.cost_output


def lookup_prices(model: str, provider: str = "openai") -> dict[str, float] | None:
    """The genai-prices prices of a model in USD per million tokens, by token type.

    ```python
    >>> lookup_prices("gpt-4o-mini")
    {'input': 0.15, 'cache_read': 0.075, 'output': 0.6}
    ```
    Tiered prices give their base price. None when genai-prices does not know the model.
    """
    calc = _gp_calc(ModelCallUsage("", None, 0, 0.0, provider, model, input_tokens=1, output_tokens=1))
    return None if calc is None else _type_prices(calc.model_price)


@functools.lru_cache(maxsize=256)
def context_window_of(model: str, provider: str = "openai") -> int | None:
    """A model's context window in tokens, from the genai-prices table; None when unknown.

    ```python
    >>> context_window_of("gpt-4o-mini")
    128000
    >>> context_window_of("claude-haiku-4-5-20251001", "anthropic")   # a dated name
    200000
    ```
    The model is found as its prices are: by name (case and date suffixes as genai-prices
    matches them) at `provider` (nbagent's name: ``openai``, ``anthropic``...), else, for a
    provider that genai-prices does not list or that does not list the model (a gateway), by name
    alone. None when genai-prices is not installed, does not know the model, or gives it no
    window. Never raises. Cached per ``(model, provider)`` for the process.
    """
    try:
        from genai_prices.data_snapshot import get_snapshot
    except ImportError:  # genai-prices is in the openai / anthropic extras
        return None
    try:
        snapshot = get_snapshot()
        try:
            _, info = snapshot.find_provider_model(model, None, _gp_provider(provider), None)
        except LookupError:  # as `_gp_calc`: a provider genai-prices does not list, by model only
            _, info = snapshot.find_provider_model(model, None, None, None)
        window = info.context_window
    except Exception:  # unknown model, or a table of another shape: the window stays unknown
        return None
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def _type_prices(model_price: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for kind, attr in _GP_KEYS.items():
        value = getattr(model_price, attr, None)
        if value is None:
            continue
        base = getattr(value, "base", value)  # TieredPrices -> its base price
        out[kind] = float(base)
    return out


def _warn_unknown(row: ModelCallUsage, detail: str = "") -> None:
    key = (row.provider, row.model)
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"no price known for model {row.model!r} (provider {row.provider!r}){detail}; its cost is "
        "left empty (NaN). Set one with Agent(prices={model: {'input': ..., 'output': ...}}) "
        "in USD per million tokens.",
        UnknownPriceWarning,
        stacklevel=3,
    )


def _apply_custom(row: ModelCallUsage, entry: Mapping[str, float]) -> bool:
    price = dict(entry)
    if not {"input", "output"} <= price.keys():
        calc = _gp_calc(row)
        if calc is None:
            missing = sorted({"input", "output"} - price.keys())
            _warn_unknown(
                row,
                f": your prices give no {' / '.join(missing)} price and genai-prices does not know the model",
            )
            return False
        for kind, value in _type_prices(calc.model_price).items():
            price.setdefault(kind, value)
    base = price.get("input", 0.0)
    uncached = max(row.input_tokens - row.cache_read_tokens - row.cache_write_tokens, 0)
    cost_in = (
        uncached * base
        + row.cache_read_tokens * price.get("cache_read", base)
        + row.cache_write_tokens * price.get("cache_write", base)
    ) / _PER
    cost_out = row.output_tokens * price.get("output", 0.0) / _PER
    row.cost_input, row.cost_output, row.cost_total = cost_in, cost_out, cost_in + cost_out
    return True


def price_row(row: ModelCallUsage, prices: Mapping[str, Any] | None = None) -> None:
    """Fill ``cost_input``, ``cost_output`` and ``cost_total`` (USD) of `row` in place.

    Args:
        row: one model call; its token counts and ``time`` (prices in effect then) are used.
        prices: custom prices (see the module docstring), USD per million tokens.

    A row whose provider reported no usage (``usage_reported=False``) keeps no cost: its
    counts are zeros, not measurements. Unknown models keep None and warn once. A batch row
    (``row.batch``) is priced at the batch price (see the module docstring).
    """
    if not row.usage_reported:
        return
    entry = _custom_entry(prices, row.provider, row.model)
    if entry is not None:
        if _apply_custom(row, entry) and row.batch:
            _discount(row)
        return
    if row.provider in _FREE_PROVIDERS:
        row.cost_input = row.cost_output = row.cost_total = 0.0
        return
    calc = _gp_calc(row)
    if calc is None:
        _warn_unknown(row)
        return
    row.cost_input = float(calc.input_price)
    row.cost_output = float(calc.output_price)
    row.cost_total = float(calc.total_price)
    row.currency = "USD"
    if row.batch and not _batch_known(calc, row):
        _discount(row)


def _reset_warnings() -> None:
    """Forget which models were warned about (for tests)."""
    _warned.clear()
