"""`%%agent` / `%agent` in a real (headless) IPython `InteractiveShell`, with scripted models."""

from __future__ import annotations

import sys
from typing import Any

import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell

import nbagent
from nbagent import Agent
from nbagent.models.function import FunctionModel
from nbagent.notebook import magics_of


def _echo(messages: list[Any], request: Any) -> str:
    """Answers with the user's last message, and how many user messages the thread holds."""
    users = [m for m in messages if m.kind == "user"]
    return f"[{len(users)}] {users[-1].content}"


@pytest.fixture
def shell() -> Any:
    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext nbagent", store_history=True)
    ip.user_ns["bot"] = Agent(FunctionModel(_echo), store="memory")
    magics = magics_of(ip)
    assert magics is not None
    magics.threads.clear()
    magics.errors.clear()
    yield ip


def _run(shell: Any, source: str) -> Any:
    result = shell.run_cell(source, store_history=True)
    return result


def _answer(shell: Any, source: str) -> str:
    result = _run(shell, source)
    assert result.error_in_exec is None, result.error_in_exec
    return str(result.result.output)


def test_cell_magic_sends_the_body_with_a_variable_interpolated(shell: Any) -> None:
    _run(shell, "x = 41 + 1")
    answer = _answer(shell, "%%agent --agent bot\nWhat is {x}? Braces: {{x}}")
    assert answer == "[1] What is 42? Braces: {x}"


def test_line_magic_braces_are_nbagents_not_ipythons(shell: Any) -> None:
    _run(shell, "x = 42")
    assert _answer(shell, "%agent --agent bot {{x}} is {x}") == "[1] {x} is 42"


def test_line_magic_and_follow_up_cells_continue_the_thread_until_new(shell: Any) -> None:
    assert _answer(shell, "%agent --agent bot hello") == "[1] hello"
    assert _answer(shell, "%%agent --agent bot\nagain") == "[2] again"
    assert _answer(shell, "%agent --agent bot --new fresh") == "[1] fresh"
    assert _answer(shell, "%agent --agent bot and on") == "[2] and on"


def test_line_magic_prompt_is_the_rest_of_the_line_as_typed(shell: Any) -> None:
    # apostrophes, quotes, backslashes and spacing reach the model unchanged (no shell parsing)
    assert _answer(shell, "%agent --agent bot what's wrong with it") == "[1] what's wrong with it"
    assert _answer(shell, '%agent --agent bot say "hi"  twice, a\\b') == '[2] say "hi"  twice, a\\b'
    assert _answer(shell, "%agent --agent bot --new it's --new here") == "[1] it's --new here"
    assert _answer(shell, "%agent --agent bot --thread 'my thread' it's") == "[1] it's"
    assert magics_of(shell).last.thread == "my thread"  # type: ignore[union-attr]
    dropped = _run(shell, "%%agent --agent bot look here\nthe body")  # text on the first line is not dropped
    assert isinstance(dropped.error_in_exec, nbagent.UserError)
    assert "the first line takes only options" in str(dropped.error_in_exec)


def test_named_thread_is_used(shell: Any) -> None:
    result = _run(shell, "%agent --agent bot --thread t-1 hi").result
    assert result.thread == "t-1"
    assert _answer(shell, "%agent --agent bot --thread t-1 hi") == "[2] hi"


def test_in_out_and_err_follow_jupyter_ai_conventions(shell: Any) -> None:
    out_cell = _run(shell, "6 * 7")
    n = out_cell.execution_count
    assert _answer(shell, f"%agent --agent bot {{In[{n}]}} gives {{Out[{n}]}}") == "[1] 6 * 7 gives 42"
    failed = _run(shell, "1 / 0")
    assert failed.error_in_exec is not None
    answer = _answer(shell, "%%agent --agent bot\nFix: {Err}")
    assert "ZeroDivisionError: division by zero" in answer
    _run(shell, "[][3]")
    assert "IndexError" in _answer(shell, "%agent --agent bot {Err}")
    assert "ZeroDivisionError" in _answer(shell, f"%agent --agent bot {{Err[{failed.execution_count}]}}")


def test_err_of_a_cell_without_an_exception_is_an_error_the_user_sees(shell: Any) -> None:
    ok = _run(shell, "y = 1")
    result = _run(shell, f"%agent --agent bot {{Err[{ok.execution_count}]}}")
    assert isinstance(result.error_in_exec, KeyError)
    assert "raised no exception" in str(result.error_in_exec)


def test_dataframe_is_sent_as_a_summary(shell: Any) -> None:
    shell.user_ns["df"] = pd.DataFrame({"city": ["Paris", "Lyon", None], "sales": [10.5, 3.0, 7.25]})
    answer = _answer(shell, "%%agent --agent bot\nLook at {df}")
    assert "DataFrame: 3 rows x 2 columns" in answer
    for part in ("dtypes:", "float64", "head(5):", "describe():", "null counts:", "Paris"):
        assert part in answer


def test_model_option_and_unknown_names(shell: Any) -> None:
    shell.user_ns["m"] = FunctionModel(lambda messages, request: "from m")
    assert _answer(shell, "%agent --model m hi {not_a_variable}") == "from m"
    bad = _run(shell, "%agent --agent nope hi")
    assert "no Agent named 'nope'" in str(bad.error_in_exec)
    both = _run(shell, "%agent --agent bot --model m hi")  # never silently drops one of the two
    assert isinstance(both.error_in_exec, nbagent.UserError)
    assert "an agent keeps its own model" in str(both.error_in_exec)
    bad = _run(shell, "%agent --colour red hi")
    assert "unknown option --colour" in str(bad.error_in_exec)


def test_loading_twice_registers_once_and_import_registers_too(shell: Any) -> None:
    first = magics_of(shell)
    _run(shell, "%load_ext nbagent")
    _run(shell, "import nbagent.notebook")
    assert magics_of(shell) is first
    assert "agent" in shell.magics_manager.magics["cell"]
    assert "agent" in shell.magics_manager.magics["line"]


def test_importing_nbagent_does_not_import_ipython() -> None:
    import subprocess

    code = "import sys, nbagent; assert 'IPython' not in sys.modules; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "ok", done.stderr


def test_context_redact_edits_each_variable_before_it_is_sent(shell: Any) -> None:
    seen: list[str] = []

    def mask(field: str, text: str) -> str:
        seen.append(field)
        return text.replace("Paris", "█████")

    shell.user_ns["df"] = pd.DataFrame({"city": ["Paris", "Lyon"]})
    shell.user_ns["masked"] = Agent(FunctionModel(_echo), store="memory", context_redact=mask)
    answer = _answer(shell, "%%agent --agent masked\nLook at {df}")
    assert "█████" in answer and "Paris" not in answer and "Lyon" in answer and seen == ["df"]


def test_err_goes_through_context_redact_and_shows_only_the_users_frames(shell: Any) -> None:
    """A key in an exception's message is masked like a variable's, and the traceback keeps the
    cell's frames: not IPython's (its absolute site-packages path) nor the library's insides."""
    seen: list[str] = []

    def mask(field: str, text: str) -> str:
        seen.append(field)
        return text.replace("sk-live-0123456789", "sk-***")

    shell.user_ns["masked"] = Agent(FunctionModel(_echo), store="memory", context_redact=mask)
    failed = _run(shell, "def connect():\n    key = 'sk-live-0123456789'\n"
                         "    raise RuntimeError(f'auth failed: {key}')\n\nconnect()")
    assert failed.error_in_exec is not None
    for field in ("Err", f"Err[{failed.execution_count}]"):
        answer = _answer(shell, f"%agent --agent masked --new {{{field}}}")
        assert "RuntimeError: auth failed: sk-***" in answer and "sk-live" not in answer, answer
        assert answer.splitlines()[1].strip().startswith('File "<ipython-input-'), answer  # the cell's frame first
        assert "connect()" in answer and "raise RuntimeError" in answer
        assert "site-packages" not in answer and "interactiveshell" not in answer
    assert seen == ["Err", f"Err[{failed.execution_count}]"]
    shell.user_ns["df"] = pd.DataFrame({"a": [1]})
    _run(shell, "df['nope']")
    answer = _answer(shell, "%agent --agent bot --new {Err}")
    assert "df['nope']" in answer and answer.endswith("KeyError: 'nope'")
    assert "site-packages" not in answer and "frames left out: pandas]" in answer, answer


def test_a_field_that_names_no_variable_is_sent_as_written_with_a_one_line_warning(
        shell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _run(shell, "x = 1")
    capsys.readouterr()
    assert _answer(shell, "%agent --agent bot {x} and {nope} and {typo[0]} and {{literal}} and {nope}") == (
        "[1] 1 and {nope} and {typo[0]} and {literal} and {nope}")
    err = capsys.readouterr().err
    assert err == ("nbagent: {nope}, {typo[0]} name no variables of the notebook: sent as written "
                   "(write {{nope}} for literal braces)\n")
    assert _answer(shell, "%agent --agent bot {x} and {{nope}}") == "[2] 1 and {nope}"
    assert capsys.readouterr().err == ""
