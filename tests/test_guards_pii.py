"""`nbagent.guards.pii()`: personal data and secrets found in realistic text, and nothing else.

What a user notices: the support ticket's email, phone, card and IBAN and a pasted API key are
redacted before the provider sees them (or blocked), the reason says what was found but never the
value, and an order number, a date, an amount or a tracking number is left alone.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from nbagent import Agent, tool
from nbagent._pii import find_pii, redact_pii
from nbagent.guards import pii
from nbagent.models import ScriptedModel, tool_call
from nbagent.store import MemoryStore

TICKET = """Hi team,

I'm Jane Doe (jane.doe+billing@example.co.uk) and my order #A-20481-77 from 2024-03-05 arrived
broken. You can call me on +44 20 7946 0958 or at work on (415) 555-0134.

Please refund the £129.99 to my Visa 4111 1111 1111 1111 or wire it to
GB82 WEST 1234 5698 7654 32. My colleague used the card 5555-5555-5555-4444.

Also, our dev accidentally pasted this in the last ticket: sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z
and the AWS one AKIAIOSFODNN7EXAMPLE, plus ghp_1234567890abcdefghijklmnopqrstuvwxyzAB.
Our Slack bot token was xoxb-2048-4096-AbCdEfGhIjKlMnOp and the Claude key sk-ant-api03-Zy9Xw8Vu7Ts6Rq5Po4.

Thanks,
Jane
"""

NOT_PII = """Order 4471-2290-1834 shipped on 2024-05-01 via tracking 1Z999AA10123456784 (weight 12.50 kg).
Invoice INV-2024-000123 for $1,234.56; order number 1234567890123456 was refunded.
Reference 415-555-0134 is our internal ticket; order no. 020 7946 0958 as well.
Version 3.12.4, build 20240501, ISBN 978-3-16-148410-0, SKU 4006381333931, port 8080.
Meeting at 10:30 on 05/06/2024, room 4-112, extension 2048.
"""


def kinds(text: str) -> list[str]:
    return [f.kind for f in find_pii(text)]


def test_pii_in_a_realistic_support_ticket() -> None:
    assert kinds(TICKET) == ["email", "phone", "phone", "card", "iban", "card", "api_key", "api_key", "api_key",
                             "api_key", "api_key"]
    redacted, counts = redact_pii(TICKET)
    assert counts == {"email": 1, "phone": 2, "card": 2, "iban": 1, "api_key": 5}
    for secret in ("jane.doe", "7946 0958", "555-0134", "4111", "5555-5555", "GB82", "sk-proj", "AKIA", "ghp_",
                   "xoxb", "sk-ant"):
        assert secret not in redacted, secret
    # What is not personal stays as it was.
    for kept in ("Jane Doe", "#A-20481-77", "2024-03-05", "£129.99", "Hi team"):
        assert kept in redacted, kept
    assert "[redacted email address]" in redacted and "[redacted API key]" in redacted


def test_no_false_positive_on_order_numbers_dates_amounts_and_codes() -> None:
    assert find_pii(NOT_PII) == []


@pytest.mark.parametrize("number", ["4111 1111 1111 1112", "1234 5678 9012 3456", "9999 9999 9999 9995"])
def test_a_card_needs_an_issuer_and_the_luhn_checksum(number: str) -> None:
    assert kinds(f"card {number} please") == []


def test_an_iban_needs_its_checksum_and_its_country_length() -> None:
    assert kinds("DE89 3704 0044 0532 0130 00") == ["iban"]
    assert "iban" not in kinds("DE89 3704 0044 0532 0130 01")  # checksum off by one
    assert "iban" not in kinds("DE89 3704 0044 0532 0130")  # too short for Germany
    assert kinds("pay FR1420041010050500013M02606 today") == ["iban"]


@pytest.mark.parametrize("key", ["sk-abcdefghijklmnopqrstuvwxyz0123", "sk-ant-api03-abcdefghijklmnopqrstuv",
                                 "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIAIOSFODNN7EXAMPLE",
                                 "xoxp-1234567890-abcdef", "AIzaSyA1234567890abcdefghijklmnopqrstuv"])
def test_api_keys_by_their_prefixes(key: str) -> None:
    assert kinds(f"my key: {key}.") == ["api_key"]


def test_short_lookalikes_are_not_keys() -> None:
    assert kinds("a task-list, sk-8 skis, the AKIA in a word, xox-") == []


async def test_pii_redacts_the_prompt_results_and_answers_before_anyone_sees_them() -> None:
    @tool
    async def customer(name: str) -> str:
        """A customer's record."""
        return f"{name}: phone +1 415 555 0134, card 4111-1111-1111-1111"

    model = ScriptedModel([tool_call("customer", name="Jane"), "Her key is sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"])
    store = MemoryStore()
    agent = Agent(model, tools=[customer], guards=[*pii()], store=store)
    events = [e async for e in agent.stream("jane@example.com asks about her card", thread="t")]
    result = events[-1].result  # type: ignore[union-attr]
    sent = json.dumps([[m.to_dict() for m in r.messages] for r in model.requests])
    assert "jane@example.com" not in sent and "4111" not in sent and "555 0134" not in sent
    assert result.output == "Her key is [redacted API key]"
    shown = "".join(e.delta for e in events if e.kind == "text-delta")  # type: ignore[union-attr]
    assert "sk-proj" not in shown
    stored = await store.load("t")
    assert stored is not None and "sk-proj" not in json.dumps([m.to_dict() for m in stored.messages])
    assert {(c.stage, c.verdict) for c in result.guard_checks} == {("input", "rewrite"), ("tool_result", "rewrite"),
                                                                  ("output", "rewrite")}
    assert all("4111" not in c.reason and "@" not in c.reason for c in result.guard_checks)


async def test_pii_can_block_instead_and_the_reason_never_holds_the_value() -> None:
    model = ScriptedModel(["never"])
    agent = Agent(model, guards=[*pii(action="block", stages=["input"])], store=MemoryStore())
    result = await agent.run("card 4111 1111 1111 1111, mail jane@example.com")
    assert result.status == "stopped" and model.requests == []
    assert result.guard_trip is not None and result.guard_trip.reason == "found 1 email address, 1 card number"


async def test_pii_redacts_a_structured_answer_and_it_stays_its_type() -> None:
    from dataclasses import dataclass

    @dataclass
    class Contact:
        name: str
        note: str

    model = ScriptedModel([tool_call("final_result", result={"name": "Jane", "note": "mail jane@example.com"})])
    result = await Agent(model, output_type=Contact, guards=[*pii(stages=["output"])], store=MemoryStore()).run("x")
    assert result.output == Contact("Jane", "mail [redacted email address]")


def test_pii_checks_its_arguments() -> None:
    with pytest.raises(Exception, match="unknown: ssn"):
        pii(["ssn"])
    with pytest.raises(Exception, match="'redact' or 'block'"):
        pii(action="mask")  # type: ignore[arg-type]
    guards: Any = pii(stages=("input", "tool_args"))
    assert [g.stage for g in guards] == ["input", "tool_args"] and {g.name for g in guards} == {"pii"}
