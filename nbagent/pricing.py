"""Prices: the cost of a model call, looked up when its usage row is made and stored with it.

Uses the offline price table of `genai-prices` (imported on first use) by model name and the
provider the user configured; a model it does not know gets no cost (None / NaN) and one warning.
Users can supply their own prices per model: ``Agent(..., prices={"my-model": {"input": 0.5,
"output": 1.5, "cache_read": 0.05}})`` in USD per million tokens.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from .usage import ModelCallUsage

__all__ = ["UnknownPriceWarning", "price_row"]

_warned: set[tuple[str, str]] = set()


class UnknownPriceWarning(UserWarning):
    """No price is known for a model: its cost columns stay empty."""


def _custom(row: ModelCallUsage, price: Mapping[str, float]) -> None:
    per = 1_000_000
    uncached = row.input_tokens - row.cache_read_tokens - row.cache_write_tokens
    cost_in = (
        uncached * price.get("input", 0.0)
        + row.cache_read_tokens * price.get("cache_read", price.get("input", 0.0))
        + row.cache_write_tokens * price.get("cache_write", price.get("input", 0.0))
    ) / per
    cost_out = row.output_tokens * price.get("output", 0.0) / per
    row.cost_input, row.cost_output, row.cost_total = cost_in, cost_out, cost_in + cost_out


def price_row(row: ModelCallUsage, prices: Mapping[str, Any] | None = None) -> None:
    """Fill ``cost_input``, ``cost_output``, ``cost_total`` of `row` in place."""
    if prices and row.model in prices:
        _custom(row, prices[row.model])
        return
    try:
        from genai_prices import Usage as GPUsage
        from genai_prices import calc_price
    except ImportError:
        return
    try:
        calc = calc_price(
            GPUsage(
                input_tokens=row.input_tokens,
                cache_read_tokens=row.cache_read_tokens or None,
                cache_write_tokens=row.cache_write_tokens or None,
                output_tokens=row.output_tokens,
            ),
            model_ref=row.model,
            provider_id=_PROVIDER_IDS.get(row.provider, row.provider),
        )
    except LookupError:
        key = (row.provider, row.model)
        if key not in _warned:
            _warned.add(key)
            warnings.warn(
                f"no price known for model {row.model!r} (provider {row.provider!r}); its cost is "
                "left empty. Pass Agent(prices={...}) to set one.",
                UnknownPriceWarning,
                stacklevel=2,
            )
        return
    row.cost_input = float(calc.input_price)
    row.cost_output = float(calc.output_price)
    row.cost_total = float(calc.total_price)


_PROVIDER_IDS = {"openai": "openai", "local": "openai"}
