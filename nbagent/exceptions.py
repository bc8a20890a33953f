"""Every exception nbagent raises, in one tree.

```
NbagentError
├── UserError                      misuse by the developer, raised at once
│   ├── ToolDefinitionError        a tool that cannot become a schema, a client tool with a body
│   │   └── DuplicateToolError     two tools with one name
│   ├── InvalidArgumentsError      edited arguments that do not fit the tool's schema
│   ├── InvalidPromptError         a prompt part that is neither text nor a usable image
│   ├── ResumeError                a resume that cannot apply
│   │   ├── UnknownCallError       a decision for a call id that is not pending
│   │   ├── ArgumentsMismatchError a decision for arguments the pending call does not have
│   │   ├── NotResumableError      resuming a completed run, or a thread with nothing to resume
│   │   └── PendingCallsError      a new prompt while calls still wait for a decision
│   └── SyncInAsyncError           run_sync called from the loop that would have to run it
├── ModelError                     a model call failed (status_code, body, provider, retryable)
│   ├── ModelHTTPError             the server answered with an HTTP error status
│   │   ├── BadRequestError        400 / 422
│   │   │   └── ContextOverflowError the request does not fit the model's context window
│   │   ├── AuthenticationError    401 / 403
│   │   ├── NotFoundError          404
│   │   ├── RateLimitError         429 (retried; Retry-After honoured)
│   │   └── ServerError            5xx (retried)
│   ├── ModelConnectionError       no connection, or it dropped (retried)
│   ├── ModelTimeoutError          the request timed out (retried)
│   ├── StreamInterruptedError     a stream broke after it started (retried)
│   └── ModelResponseError         the answer cannot be used (e.g. cut off inside a tool call)
│       ├── ResponseBodyError      a 2xx whose body is no completion: an HTML page, empty, not
│       │                          UTF-8 (retried, except bytes that are not UTF-8)
│       ├── ContentFilterError     the provider's safety system stopped the answer (Anthropic's
│       │                          stop reason refusal, finish reason content_filter)
│       ├── ReplayMismatchError    a replayed run asked what the recording does not hold
│       └── BatchExpiredError      a provider's batch ended without running the request
│                                  (expired, or cancelled): a later map submits it again
├── ToolSourceError                a tool source (an MCP server) cannot start, connect or list
│                                  its tools
├── SubAgentError                  a sub-agent ended without an answer (it failed, stopped, or
│                                  would nest too deep): its parent's model reads it as the
│                                  agent call's error result
└── StoreError                     the checkpoint store cannot do what was asked
    ├── ConflictError              another writer changed the thread first (optimistic check)
    ├── StoreCorruptError          the file is not a readable store
    ├── StoreVersionError          the file was written by a newer nbagent
    ├── StoreReadOnlyError         the location cannot be written
    └── StoreConnectionError       the database server cannot be reached, refused the login, or
                                   the connection dropped and did not come back in time

ModelRetry                         raised by tool code to ask the model to try again (a signal,
                                   caught by the run loop; not an error of nbagent)
```
Errors carry what a user needs to act on them as attributes and in their text; they never log or
render themselves.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ArgumentsMismatchError",
    "AuthenticationError",
    "BadRequestError",
    "BatchExpiredError",
    "ConflictError",
    "ContentFilterError",
    "ContextOverflowError",
    "DuplicateToolError",
    "InvalidArgumentsError",
    "InvalidPromptError",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelResponseError",
    "ModelRetry",
    "ModelTimeoutError",
    "NbagentError",
    "NotFoundError",
    "NotResumableError",
    "PendingCallsError",
    "RateLimitError",
    "ReplayMismatchError",
    "ResponseBodyError",
    "ResumeError",
    "ServerError",
    "StoreConnectionError",
    "StoreCorruptError",
    "StoreError",
    "StoreReadOnlyError",
    "StoreVersionError",
    "StreamInterruptedError",
    "SubAgentError",
    "SyncInAsyncError",
    "ToolDefinitionError",
    "ToolSourceError",
    "UnknownCallError",
    "UserError",
    "error_for_status",
]


class NbagentError(Exception):
    """Base class of every error nbagent raises."""


class UserError(NbagentError):
    """The developer used nbagent in a way it cannot work; the message says how to fix it."""


class ToolDefinitionError(UserError):
    """A tool cannot be built: its signature has no schema, or a client tool has a body."""


class DuplicateToolError(ToolDefinitionError):
    """Two tools of one agent share a name."""


class InvalidArgumentsError(UserError):
    """Arguments (for example edited by a person before approval) do not fit the tool's schema."""


class InvalidPromptError(UserError, ValueError):
    """A prompt (or an `Image`) that cannot be sent: not text, not an image format models accept
    (PNG, JPEG, GIF, WebP), too big, or empty. Also a `ValueError`."""


class ResumeError(UserError):
    """A resume or decision that cannot apply to the run as stored."""


class UnknownCallError(ResumeError):
    """A decision names a call id that is not pending."""


class ArgumentsMismatchError(ResumeError):
    """A decision was made for arguments that differ from the pending call's arguments."""


class NotResumableError(ResumeError):
    """The run is completed (or the thread has nothing to continue)."""


class PendingCallsError(ResumeError):
    """A new prompt was sent to a thread whose calls still wait for a decision or a result."""


class SyncInAsyncError(UserError):
    """A `*_sync` method was called from the event loop that would have to run it."""


class ModelError(NbagentError):
    """A model call failed.

    Attributes:
        status_code: HTTP status, when the server answered.
        body: the provider's error body (parsed JSON or text), when there is one.
        provider: the provider name (``openai``, ``test``, ...).
        retryable: whether the run loop's `Retry` policy retries it.
        retry_after: seconds the server asked to wait (``Retry-After``), if it did.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        body: Any = None,
        provider: str | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.body = body
        self.provider = provider
        self.retry_after = retry_after
        if retryable is not None:
            self.retryable = retryable

    def __str__(self) -> str:
        prefix = f"{self.status_code} " if self.status_code is not None else ""
        where = f" ({self.provider})" if self.provider else ""
        return f"{prefix}{self.message}{where}"


class ModelHTTPError(ModelError):
    """The model server answered with an HTTP error status."""


class BadRequestError(ModelHTTPError):
    """HTTP 400/422: the request was rejected; retrying the same request will not help."""


class ContextOverflowError(BadRequestError):
    """The request does not fit in the model's context window: the provider refused it (HTTP 400,
    or the same error inside a started stream) because the prompt, its history, tools and
    system prompt, sometimes with the output tokens asked for, are more tokens than the model
    takes. OpenAI's ``context_length_exceeded``, llama.cpp's ``exceed_context_size_error``, an
    OpenAI-compatible server's "maximum context length is ... tokens", Anthropic's ``prompt is
    too long``. Not retried: the same request gets the same answer; shorten the history (or
    continue in a new thread) and send again. The text stays the provider's message.

    Attributes:
        tokens: the request's size in tokens as the provider counted it, when it said (some count
            the output tokens asked for in it); None when it did not.
        limit: the model's context window in tokens, when the provider said; None when it did not.
    """

    def __init__(self, message: str, *, tokens: int | None = None, limit: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.tokens = tokens
        self.limit = limit


class AuthenticationError(ModelHTTPError):
    """HTTP 401/403: the API key is missing, wrong, or lacks access."""


class NotFoundError(ModelHTTPError):
    """HTTP 404: usually an unknown model name or a wrong base URL."""


class RateLimitError(ModelHTTPError):
    """HTTP 429: rate limited; retried with backoff, honouring Retry-After."""

    retryable = True


class ServerError(ModelHTTPError):
    """HTTP 5xx: the server failed; retried with backoff."""

    retryable = True


class ModelConnectionError(ModelError):
    """The connection could not be made or dropped; retried."""

    retryable = True


class ModelTimeoutError(ModelError):
    """The request timed out; retried."""

    retryable = True


class StreamInterruptedError(ModelError):
    """A streamed answer broke off after it started; retried (the view clears partial text)."""

    retryable = True


class ModelResponseError(ModelError):
    """The model's answer cannot be used, e.g. it was cut off inside a tool call."""


class ReplayMismatchError(ModelResponseError):
    """A replayed run (`nbagent.models.replay`) sent a request that no recorded call matches;
    the message names the first difference from the closest recorded request. Not retried."""


class BatchExpiredError(ModelResponseError):
    """A provider's batch (``agent.map(..., batch_api=True)``, docs/batch_api.md) ended without
    running this request: its 24-hour window closed first (``reason`` ``"expired"``) or the batch
    was cancelled (``"canceled"``). Nothing was spent on it. Not retried within the map: its row
    gets the status ``expired`` (or ``cancelled``), and the same map run again submits it anew.

    Attributes:
        reason: ``"expired"`` or ``"canceled"``.
        batch_id: the provider's batch id.
    """

    def __init__(self, message: str, *, reason: str = "expired", batch_id: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.reason = reason
        self.batch_id = batch_id


class ResponseBodyError(ModelResponseError):
    """The server answered with a success status but a body that is not a chat completion: a
    proxy's or gateway's HTML error page, an empty body, text that is not JSON, bytes that are not
    UTF-8. The message names the status, the content type and the first bytes.

    Attributes:
        content_type: the answer's ``Content-Type`` ("" when it had none).
        body: the body's first bytes as text (about 200 characters, escaped, the API key scrubbed).

    Retried (a proxy's hiccup passes), except a body that is not UTF-8 (the same bytes would come
    again) or JSON that is not an object.
    """

    retryable = True

    def __init__(self, message: str, *, content_type: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.content_type = content_type


class ContentFilterError(ModelResponseError):
    """The provider's safety system stopped the answer: Anthropic's stop reason ``refusal`` (a
    streaming classifier intervened), the finish reason ``content_filter`` of OpenAI, Azure and
    other OpenAI-compatible servers. Not retried: the same request is stopped again.

    The stopped answer is billed (its usage row is kept) but is not added to the thread: Anthropic
    asks that the turn that triggered it be removed or rephrased before the conversation goes on,
    so continue in a new thread, or from a copy of this one made before that prompt.

    Attributes:
        category: the policy category the provider named (Anthropic's ``stop_details.category``:
            ``cyber``, ``bio``, ...); None when it named none.
        explanation: the provider's explanation of the refusal, when it gave one.
        text: what the model had written before it was stopped ("" when nothing).
    """

    def __init__(
        self,
        message: str,
        *,
        category: str | None = None,
        explanation: str | None = None,
        text: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.category = category
        self.explanation = explanation
        self.text = text


class ToolSourceError(NbagentError):
    """A tool source could not do what a run needed: an MCP server that cannot be started or
    reached, refuses the connection, or cannot list its tools. The text names the server (never
    a header or environment value) and what it said.

    A run that cannot list a source's tools when it starts raises it (nothing was stored); a
    tool call that fails this way during a run becomes an error result the model sees.

    Attributes:
        source: the server, as its ``repr`` shows it (secrets left out).
    """

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source


class SubAgentError(NbagentError):
    """A sub-agent (`Agent.as_tool`) ended without an answer: its model call failed, it stopped
    at a limit (``max_steps``, a budget of the tree), or it would nest deeper than its tool's
    ``max_depth``. Raised inside the agent tool's body, so its parent's model reads it as the
    call's error result and the parent run goes on.

    Attributes:
        agent: the sub-agent's name.
        thread: its thread (None when it did not start).
    """

    def __init__(self, message: str, *, agent: str | None = None, thread: str | None = None) -> None:
        super().__init__(message)
        self.agent = agent
        self.thread = thread


class StoreError(NbagentError):
    """The checkpoint store could not do what was asked.

    Attributes:
        path: the database file or location involved, when there is one.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ConflictError(StoreError):
    """Another writer (another kernel) changed the thread since it was loaded."""


class StoreCorruptError(StoreError):
    """The store file is not readable as an nbagent store; nothing was overwritten."""


class StoreVersionError(StoreError):
    """The store was written by a newer nbagent; upgrade nbagent to read it."""


class StoreReadOnlyError(StoreError):
    """The store's location cannot be written."""


class StoreConnectionError(StoreError):
    """The store's database server cannot be reached, refused the login, or the connection
    dropped and did not come back within the store's wait (a server store, e.g. `PostgresStore`).

    Nothing half-written is left behind: each append is one transaction. The message names the
    server (never its password) and gives the server's or the driver's words.
    """


class ModelRetry(Exception):  # a signal, named for what the tool asks for (not ...Error)
    """Raise from a tool to send the message back to the model and let it try again.

    The model sees an error result with this message; the run goes on.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_STATUS_CLASSES: dict[int, type[ModelHTTPError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    422: BadRequestError,
    429: RateLimitError,
}


def error_for_status(
    status_code: int,
    message: str,
    *,
    body: Any = None,
    provider: str | None = None,
    retry_after: float | None = None,
) -> ModelHTTPError:
    """Build the `ModelHTTPError` subclass that matches an HTTP status code."""
    cls = _STATUS_CLASSES.get(status_code)
    if cls is None:
        cls = ServerError if status_code >= 500 else ModelHTTPError
    retryable = True if status_code in (408, 409) else None
    return cls(
        message,
        status_code=status_code,
        body=body,
        provider=provider,
        retry_after=retry_after,
        retryable=retryable,
    )
