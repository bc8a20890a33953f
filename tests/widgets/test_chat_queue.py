"""The chat view's message queue on its own: the rules for messages sent while the view is busy
(`nbagent.widgets._queue.MessageQueue`), with no widgets and no event loop."""

from __future__ import annotations

from nbagent.messages import UserMessage
from nbagent.widgets._queue import MessageQueue, dropped_note


def queued(*texts: str) -> MessageQueue:
    queue = MessageQueue()
    for text in texts:
        queue.submit(UserMessage(text))
    return queue


def test_each_queued_message_is_taken_in_the_order_sent() -> None:
    queue = queued("first", "second", "third")
    assert queue.texts == ["first", "second", "third"] and len(queue) == 3
    assert [queue.take(busy=False).content for _ in range(3)] == ["first", "second", "third"]
    assert queue.take(busy=False) is None and not queue and queue.texts == []


def test_nothing_is_taken_while_busy() -> None:
    queue = queued("later")
    assert not queue.ready(busy=True) and queue.take(busy=True) is None  # a run goes on, or calls wait
    assert queue.texts == ["later"]
    assert queue.ready(busy=False) and queue.take(busy=False).content == "later"


def test_completed_paused_and_stopped_runs_let_the_queue_go_on() -> None:
    for status in ("completed", "paused", "stopped"):
        queue = queued("next")
        queue.run_ended(status)
        assert not queue.on_hold and queue.take(busy=False).content == "next"


def test_a_stopped_or_failed_run_puts_the_queue_on_hold_until_send() -> None:
    for status in ("cancelled", "failed"):
        queue = queued("a", "b")
        queue.run_ended(status)
        assert queue.on_hold and queue.take(busy=False) is None and queue.texts == ["a", "b"]
        queue.submit()  # Send with an empty box
        assert not queue.on_hold and queue.take(busy=False).content == "a"


def test_send_with_new_text_on_hold_adds_it_at_the_end_and_goes_on_from_the_first() -> None:
    queue = queued("second")
    queue.run_ended("failed")
    queue.submit(UserMessage("third"))
    assert not queue.on_hold and queue.texts == ["second", "third"]
    assert queue.take(busy=False).content == "second"


def test_a_message_that_could_not_be_sent_goes_back_to_the_head_on_hold() -> None:
    queue = queued("one", "two")
    message = queue.take(busy=False)
    queue.not_sent(message)
    assert queue.messages[0] is message and queue.texts == ["one", "two"]
    assert queue.on_hold and queue.take(busy=False) is None


def test_clear_drops_every_message_and_the_hold() -> None:
    queue = queued("one", "two")
    queue.run_ended("cancelled")
    assert [m.content for m in queue.clear()] == ["one", "two"]
    assert queue.texts == [] and not queue.on_hold and queue.clear() == []
    assert dropped_note(2) == "dropped 2 queued messages (not sent)"
    assert dropped_note(1) == "dropped 1 queued message (not sent)" and dropped_note(0) == ""


def test_the_note_says_how_many_wait_and_for_what() -> None:
    assert MessageQueue().note(running=True, undecided=True) == ""
    one, two = queued("a"), queued("a", "b")
    assert two.note(running=True, undecided=False) == "2 messages queued: sent when this run ends (one run each)"
    assert one.note(running=True, undecided=False) == "1 message queued: sent when this run ends"
    assert one.note(running=False, undecided=True) == "1 message queued: sent after you decide the waiting tool calls"
    assert one.note(running=False, undecided=False) == "1 message queued"
    one.run_ended("failed")
    two.run_ended("cancelled")
    assert one.note(running=False, undecided=False) == "1 message queued, on hold: Send sends it, Clear queue drops it"
    assert two.note(running=True, undecided=True) == (
        "2 messages queued, on hold: Send sends them (one run each), Clear queue drops them")

