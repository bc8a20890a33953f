"""`Image`: what a prompt (or a tool's result) may attach for models that see images.

Owns `Image` (data or a URL, checked by its first bytes), the formats it takes (`IMAGE_TYPES`) and
its size limit; imports only nbagent.exceptions. Also importable from `nbagent.messages`.
"""

from __future__ import annotations

import base64
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .exceptions import InvalidPromptError

__all__ = ["IMAGE_TYPES", "MAX_IMAGE_BYTES", "Image"]


IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image formats every vision API of the OpenAI kind accepts (and browsers show inertly)."""

MAX_IMAGE_BYTES = 20 * 1024 * 1024
"""The largest image accepted (OpenAI's limit per image); bigger ones fail before any request."""

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def _sniff(data: bytes) -> str | None:
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(slots=True, frozen=True)
class Image:
    """An image sent to the model with a prompt (for models that see images).

    ```python
    agent.run_sync(["What does this chart show?", fig])          # a matplotlib Figure
    agent.run_sync(["Describe it.", Image.from_file("photo.jpg")])
    agent.run_sync(["And this one?", Image.from_url("https://example.com/cat.png")])
    ```

    Either `data` (the encoded file: PNG, JPEG, GIF or WebP, checked by its first bytes) or `url`
    (an ``http(s)`` address the provider fetches itself). Stored with the thread (base64 in the
    store's JSON), so a resumed conversation still has it. Use `Image.of` to convert what a notebook
    has at hand: bytes, a path, a PIL image, a matplotlib figure, an ``IPython.display.Image``.

    Attributes:
        data: the image file's bytes (None for a URL image).
        media_type: ``image/png``, ``image/jpeg``, ``image/gif`` or ``image/webp``.
        url: the image's address (None for an image with data).
        detail: OpenAI's ``detail`` hint (``"low"``, ``"high"``, ``"auto"``); None sends none.
    """

    data: bytes | None = field(default=None, repr=False)
    media_type: str | None = None
    url: str | None = None
    detail: Literal["auto", "low", "high"] | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise InvalidPromptError("an Image needs either data (the file's bytes) or url, not both")
        if self.detail not in (None, "auto", "low", "high"):
            raise InvalidPromptError(f"detail must be 'auto', 'low' or 'high', got {self.detail!r}")
        if self.url is not None:
            if not isinstance(self.url, str) or not self.url.startswith(("https://", "http://", "data:image/")):
                raise InvalidPromptError(
                    f"an image URL must start with https://, http:// or data:image/, got {self.url!r}"
                )
            if not self.url.startswith("data:"):
                return
            header, _, payload = self.url.partition(",")
            if not header.endswith(";base64"):
                raise InvalidPromptError("a data: image URL must be base64-encoded (data:image/png;base64,...)")
            try:
                decoded = base64.b64decode(payload, validate=True)
            except ValueError:
                raise InvalidPromptError("the data: image URL is not valid base64") from None
            object.__setattr__(self, "url", None)  # kept as data: stored and sent like any other
            object.__setattr__(self, "data", decoded)
        if not isinstance(self.data, (bytes, bytearray, memoryview)):
            raise InvalidPromptError(f"Image data must be bytes, got {type(self.data).__name__}")
        data = bytes(self.data)
        object.__setattr__(self, "data", data)
        if len(data) > MAX_IMAGE_BYTES:
            raise InvalidPromptError(
                f"the image is {len(data) / 1e6:.1f} MB; models accept at most "
                f"{MAX_IMAGE_BYTES // (1024 * 1024)} MB per image: make it smaller first"
            )
        sniffed = _sniff(data)
        if sniffed is None:
            raise InvalidPromptError(
                "the image data is not PNG, JPEG, GIF or WebP (its first bytes are "
                f"{data[:8]!r}); convert it first, e.g. with PIL: img.save(buf, format='PNG')"
            )
        if self.media_type is not None and self.media_type != sniffed:
            raise InvalidPromptError(f"the image data is {sniffed}, not {self.media_type}")
        object.__setattr__(self, "media_type", sniffed)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, detail: Literal["auto", "low", "high"] | None = None) -> Image:
        """An image read from a file (PNG, JPEG, GIF or WebP)."""
        return cls(Path(path).expanduser().read_bytes(), detail=detail)

    @classmethod
    def from_url(cls, url: str, *, detail: Literal["auto", "low", "high"] | None = None) -> Image:
        """An image the provider fetches from `url` (``https://...``), or a ``data:image/...`` URL."""
        return cls(url=url, detail=detail)

    @classmethod
    def of(cls, value: Any) -> Image:
        """Convert what a notebook has: an `Image`, image bytes, a path (`Path`), an ``http(s)``
        URL string, a PIL image, a matplotlib figure, or anything with ``_repr_png_`` /
        ``_repr_jpeg_`` (``IPython.display.Image``).

        Raises:
            InvalidPromptError: the value is none of these, or its bytes are not an image format
                models accept, or too big.
        """
        if isinstance(value, Image):
            return value
        if isinstance(value, (bytes, bytearray, memoryview)):
            return cls(bytes(value))
        if isinstance(value, os.PathLike):
            return cls.from_file(value)
        if isinstance(value, str):
            if value.startswith(("https://", "http://", "data:image/")):
                return cls.from_url(value)
            raise InvalidPromptError(
                "a string here is taken as text; for an image file pass Path(...) or Image.from_file(...)"
            )
        savefig = getattr(value, "savefig", None)
        if callable(savefig):  # a matplotlib Figure
            buf = io.BytesIO()
            savefig(buf, format="png", bbox_inches="tight")
            return cls(buf.getvalue())
        for name in ("_repr_png_", "_repr_jpeg_"):
            method = getattr(value, name, None)
            if callable(method):
                data = method()
                if isinstance(data, tuple):  # (data, metadata)
                    data = data[0]
                if isinstance(data, str):
                    data = base64.b64decode(data)
                if data:
                    return cls(bytes(data))
        raise InvalidPromptError(
            f"cannot use {type(value).__name__} {value!r:.40} as an image: pass bytes, a Path, an http(s) URL, "
            "a PIL image, a matplotlib figure or an nbagent.Image"
        )

    # ------------------------------------------------------------------ forms
    def data_url(self) -> str:
        """The image as ``data:<type>;base64,...`` (or its `url`)."""
        if self.url is not None:
            return self.url
        assert self.data is not None
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = (
            {"url": self.url} if self.url is not None
            else {"media_type": self.media_type, "data": base64.b64encode(self.data or b"").decode("ascii")}
        )
        if self.detail is not None:
            data["detail"] = self.detail
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Image:
        if "url" in data:
            return cls(url=data["url"], detail=data.get("detail"))
        return cls(base64.b64decode(data["data"]), data.get("media_type"), detail=data.get("detail"))

    def describe(self) -> str:
        """A short label: ``image/png, 12 kB`` or the URL."""
        if self.url is not None:
            return self.url if len(self.url) <= 60 else self.url[:59] + "…"
        return f"{self.media_type}, {max(1, round(len(self.data or b'') / 1000))} kB"
