"""Images in prompts: `nbagent.Image`, list prompts, storage and what a model receives."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, Image, InvalidPromptError, UserError, UserMessage
from nbagent.messages import MAX_IMAGE_BYTES, message_from_dict, user_message
from nbagent.models import FunctionModel
from nbagent.store import MemoryStore, SQLiteStore

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 32
GIF = b"GIF89a" + b"\x00" * 32
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 32


def _real_png() -> bytes:
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.new("RGB", (4, 3), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


# ---------------------------------------------------------------------------- Image
@pytest.mark.parametrize(("data", "media_type"), [
    (PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp"),
])
def test_image_format_comes_from_its_bytes(data: bytes, media_type: str) -> None:
    image = Image(data)
    assert image.media_type == media_type
    assert image.data_url() == f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def test_image_refuses_what_models_do_not_accept() -> None:
    with pytest.raises(InvalidPromptError, match="not PNG, JPEG, GIF or WebP"):
        Image(b"<svg xmlns='http://www.w3.org/2000/svg'/>")
    with pytest.raises(InvalidPromptError, match="image/png, not image/jpeg"):
        Image(PNG, "image/jpeg")
    with pytest.raises(InvalidPromptError, match="at most 20 MB"):
        Image(PNG + b"\x00" * MAX_IMAGE_BYTES)
    with pytest.raises(InvalidPromptError, match="either data"):
        Image()
    with pytest.raises(InvalidPromptError, match="must start with https://"):
        Image.from_url("file:///etc/passwd")
    with pytest.raises(InvalidPromptError, match="detail"):
        Image(PNG, detail="ultra")  # type: ignore[arg-type]
    # InvalidPromptError is a UserError and a ValueError: both usual catches work.
    assert issubclass(InvalidPromptError, UserError) and issubclass(InvalidPromptError, ValueError)


def test_image_urls_and_data_urls() -> None:
    remote = Image.from_url("https://example.com/cat.png", detail="low")
    assert remote.data is None and remote.data_url() == "https://example.com/cat.png"
    inline = Image.from_url("data:image/png;base64," + base64.b64encode(PNG).decode())
    assert inline.data == PNG and inline.url is None and inline.media_type == "image/png"
    with pytest.raises(InvalidPromptError, match="base64"):
        Image.from_url("data:image/png,rawbytes")
    with pytest.raises(InvalidPromptError, match="not PNG"):
        Image.from_url("data:image/png;base64," + base64.b64encode(b"hello").decode())


def test_image_of_converts_what_a_notebook_has(tmp_path: Path) -> None:
    png = _real_png()
    path = tmp_path / "dot.png"
    path.write_bytes(png)
    assert Image.of(path).data == png
    assert Image.from_file(str(path)).data == png
    assert Image.of(bytearray(png)).data == png

    from PIL import Image as PILImage

    assert Image.of(PILImage.new("RGB", (2, 2))).media_type == "image/png"  # via _repr_png_

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([1, 2, 3])
    try:
        assert Image.of(fig).media_type == "image/png"
    finally:
        plt.close(fig)

    class Jpeg:  # like IPython.display.Image: a rich repr
        def _repr_jpeg_(self) -> tuple[str, dict[str, Any]]:
            return base64.b64encode(JPEG).decode(), {}

    assert Image.of(Jpeg()).data == JPEG
    with pytest.raises(InvalidPromptError, match="Path"):
        Image.of("photo.png")  # a plain string is text, not a file name
    with pytest.raises(InvalidPromptError, match="cannot use int"):
        Image.of(3)


def test_image_round_trips_through_json() -> None:
    for image in (Image(PNG, detail="high"), Image.from_url("https://example.com/a.jpg")):
        assert Image.from_dict(image.to_dict()) == image
    message = UserMessage("look", [Image(PNG)])
    assert message_from_dict(message.to_dict()) == message
    assert "images" not in UserMessage("plain").to_dict()  # the stored form of text prompts is unchanged


# ---------------------------------------------------------------------------- prompts
def test_list_prompts_join_text_and_collect_images() -> None:
    message = user_message(["What is this?", PNG, "Be brief.", Image.from_url("https://x.org/y.png")])
    assert message.content == "What is this?\n\nBe brief."
    assert [i.media_type for i in message.images] == ["image/png", None]
    assert user_message(Image(GIF)).images[0].media_type == "image/gif"  # an image alone
    with pytest.raises(InvalidPromptError, match="prompt part 1: cannot use"):
        user_message(["text", 42])
    with pytest.raises(InvalidPromptError, match="prompt part 0: the image data is not"):
        user_message([b"not an image"])
    with pytest.raises(InvalidPromptError, match="empty"):
        user_message([])
    with pytest.raises(InvalidPromptError, match="must be a string, an image, or a list"):
        user_message(3.5)  # type: ignore[arg-type]


async def test_the_model_receives_the_images_and_counts_them() -> None:
    seen: list[Any] = []

    def answer(messages: list[Any], request: Any) -> str:
        seen.append(messages[-1])
        return f"{len(messages[-1].images)} image(s)"

    agent = Agent(FunctionModel(answer), store=MemoryStore())
    plain = await agent.run("describe")
    result = await agent.run(["describe", PNG, PNG])
    assert result.output == "2 image(s)"
    assert seen[-1].images == [Image(PNG), Image(PNG)]
    # the fakes count a fixed 85 tokens per image, not the base64 text
    assert result.usage.input_tokens - plain.usage.input_tokens == 2 * 85


async def test_a_bad_prompt_fails_before_anything_is_stored() -> None:
    store = MemoryStore()
    agent = Agent(FunctionModel(lambda m, r: "never"), store=store)
    with pytest.raises(InvalidPromptError):
        await agent.run(["look", b"junk"])
    with pytest.raises(InvalidPromptError):
        agent.run_sync(["look", object()])
    assert await store.threads() == []


async def test_images_survive_the_sqlite_store(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    png = _real_png()
    agent = Agent(FunctionModel(lambda m, r: "a red dot"), store=SQLiteStore(path))
    result = await agent.run(["What is this?", png], thread="pics")
    await agent.store.close()

    reopened = Agent(FunctionModel(lambda m, r: "still red"), store=SQLiteStore(path))
    loaded = await reopened.store.load("pics")
    assert loaded is not None
    prompt = loaded.messages[0]
    assert isinstance(prompt, UserMessage) and prompt.images == [Image(png)]
    assert result.messages[0] == prompt
    checkpoints = await reopened.checkpoints("pics")
    assert checkpoints[0].last_message.startswith("user: [1 image] What is this?")
    again = await reopened.run("and now?", thread="pics")
    assert again.output == "still red"
    await reopened.store.close()
