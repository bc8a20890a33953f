"""Prices: genai-prices numbers for known models, custom prices, unknown models."""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from datetime import datetime, timezone

import pytest
from genai_prices import Usage as GPUsage
from genai_prices import calc_price

from nbagent.exceptions import UserError
from nbagent.pricing import UnknownPriceWarning, _reset_warnings, check_prices, lookup_prices, price_row
from nbagent.usage import ModelCallUsage

T = 1_750_000_000.0  # a fixed call time: prices are looked up as of the call


@pytest.fixture(autouse=True)
def _fresh_warnings():
    _reset_warnings()
    yield
    _reset_warnings()


def row(model: str, provider: str = "openai", **counts: int) -> ModelCallUsage:
    return ModelCallUsage("run_1", "t", 1, T, provider, model, **counts)


def expected(model: str, provider: str = "openai", **counts: int):
    return calc_price(
        GPUsage(**{k: v for k, v in counts.items() if k != "reasoning_tokens"}),
        model_ref=model,
        provider_id=provider,
        genai_request_timestamp=datetime.fromtimestamp(T, timezone.utc),
    )


@pytest.mark.parametrize(
    ("model", "counts"),
    [
        ("gpt-4o-mini", {"input_tokens": 1000, "output_tokens": 100}),
        ("gpt-4o-mini", {"input_tokens": 1149, "cache_read_tokens": 1024, "output_tokens": 353}),
        ("gpt-4.1-mini", {"input_tokens": 5000, "cache_read_tokens": 4000, "output_tokens": 250}),
        ("gpt-4.1", {"input_tokens": 123_456, "output_tokens": 7_890, "reasoning_tokens": 0}),
    ],
)
def test_known_models_match_genai_prices_exactly(model, counts):
    r = row(model, **counts)
    price_row(r)
    calc = expected(model, **counts)
    assert r.cost_input == float(calc.input_price)
    assert r.cost_output == float(calc.output_price)
    assert r.cost_total == float(calc.total_price)
    assert r.currency == "USD"


def test_cached_input_is_cheaper_with_the_documented_numbers():
    # gpt-4.1-mini: $0.40 input, $0.10 cached input, $1.60 output per million tokens.
    assert lookup_prices("gpt-4.1-mini") == {"input": 0.4, "cache_read": 0.1, "output": 1.6}
    r = row("gpt-4.1-mini", input_tokens=1000, cache_read_tokens=400, output_tokens=100)
    price_row(r)
    assert r.cost_input == pytest.approx((600 * 0.4 + 400 * 0.1) / 1e6, rel=1e-12)
    assert r.cost_output == pytest.approx(100 * 1.6 / 1e6, rel=1e-12)
    assert r.cost_total == pytest.approx(0.00044, rel=1e-12)


def test_unknown_model_gets_no_cost_and_one_warning_per_model():
    r1 = row("my-private-model", input_tokens=10, output_tokens=5)
    with pytest.warns(UnknownPriceWarning, match="my-private-model") as record:
        price_row(r1)
        price_row(row("my-private-model", input_tokens=1))  # same model: no second warning
    assert len(record) == 1
    assert (r1.cost_input, r1.cost_output, r1.cost_total) == (None, None, None)
    with pytest.warns(UnknownPriceWarning, match="other-model"):
        price_row(row("other-model", input_tokens=1))


def test_gateway_provider_falls_back_to_the_model_name():
    r = row("gpt-4o-mini", provider="my-gateway", input_tokens=1000, output_tokens=100)
    price_row(r)
    assert r.cost_total == pytest.approx(
        float(expected("gpt-4o-mini", input_tokens=1000, output_tokens=100).total_price)
    )


def test_custom_prices_per_model_and_token_type():
    prices = {"my-finetune": {"input": 2.0, "cached_input": 0.5, "cache_write": 2.5, "output": 8.0}}
    r = row(
        "my-finetune",
        input_tokens=1_000_000,
        cache_read_tokens=200_000,
        cache_write_tokens=100_000,
        output_tokens=50_000,
    )
    price_row(r, prices)
    assert r.cost_input == pytest.approx(700_000 * 2.0 / 1e6 + 200_000 * 0.5 / 1e6 + 100_000 * 2.5 / 1e6)
    assert r.cost_input == pytest.approx(1.75)
    assert r.cost_output == pytest.approx(0.4)
    assert r.cost_total == pytest.approx(2.15)


def test_custom_cache_prices_default_to_the_input_price():
    r = row("m", provider="x", input_tokens=1000, cache_read_tokens=500, output_tokens=0)
    price_row(r, {"m": {"input": 1.0, "output": 2.0}})
    assert r.cost_input == pytest.approx(0.001)


def test_partial_override_takes_the_rest_from_genai_prices():
    r = row("gpt-4.1-mini", input_tokens=1000, cache_read_tokens=400, output_tokens=100)
    price_row(r, {"gpt-4.1-mini": {"cache_read": 0.0}})
    assert r.cost_input == pytest.approx(600 * 0.4 / 1e6)
    assert r.cost_output == pytest.approx(100 * 1.6 / 1e6)


def test_lookup_order_provider_model_then_model_then_star():
    prices = {
        "openai:gpt-4o": {"input": 1, "output": 1},
        "gpt-4o": {"input": 2, "output": 2},
        "*": {"input": 0, "output": 0},
    }
    a, b, c = (
        row("gpt-4o", input_tokens=1_000_000),
        row("gpt-4o", provider="azure", input_tokens=1_000_000),
        row("anything", provider="local-gw", input_tokens=1_000_000),
    )
    for r in (a, b, c):
        price_row(r, prices)
    assert (a.cost_total, b.cost_total, c.cost_total) == (1.0, 2.0, 0.0)


def test_partial_custom_price_for_an_unknown_model_warns():
    r = row("mystery", input_tokens=10)
    with pytest.warns(UnknownPriceWarning, match="no output price"):
        price_row(r, {"mystery": {"input": 1.0}})
    assert r.cost_total is None


@pytest.mark.parametrize(
    "bad",
    [
        {"m": {"inputs": 1.0}},
        {"m": {"input": -1}},
        {"m": {"input": "1"}},
        {"m": 1.0},
        {"m": {"output": True}},
    ],
)
def test_bad_custom_prices_are_rejected_with_the_fix(bad):
    with pytest.raises(UserError, match=r"USD per million tokens|non-negative"):
        check_prices(bad)


def test_check_prices_normalises_aliases():
    assert check_prices({"m": {"cached_input": 1, "output": 2}}) == {"m": {"cache_read": 1.0, "output": 2.0}}
    assert check_prices(None) is None


def test_unreported_usage_and_local_models():
    r = row("gpt-4o-mini", input_tokens=0)
    r.usage_reported = False
    price_row(r)
    assert r.cost_total is None  # zeros that were never measured are not "free"
    local = row("smollm2-135m", provider="local", input_tokens=100, output_tokens=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        price_row(local)
    assert (local.cost_input, local.cost_output, local.cost_total) == (0.0, 0.0, 0.0)


@pytest.mark.perf
def test_pricing_is_fast_enough_for_the_loop():
    price_row(row("gpt-4o-mini", input_tokens=1))  # loads the price table once
    clock = time.perf_counter()
    for _ in range(200):
        price_row(row("gpt-4o-mini", input_tokens=1000, cache_read_tokens=10, output_tokens=10))
    assert (time.perf_counter() - clock) / 200 < 0.005


def test_importing_pricing_imports_neither_pandas_nor_genai_prices():
    code = (
        "import sys, nbagent, nbagent.pricing; "
        "print(sorted(m for m in ('pandas', 'genai_prices', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
