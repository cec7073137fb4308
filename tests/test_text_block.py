"""TextBlock renders as Textual's Static does, and an update renders only the lines that changed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from textual.app import App, ComposeResult
from textual.content import Content
from textual.visual import Visual
from textual.widgets import Static

from specconsole.ui.widgets.text_block import TextBlock, markup_content

pytestmark = pytest.mark.timeout(60)

TEXT = ("[b]healthy[/]  ·  SGLang 0.5.23  ·  1.0s ago\n"
        "algorithm DFLASH  ·  draft [i]Qwen3-8B-dflash[/]  ·  block size 16  ·  draft window 16\n"
        "\n"
        "running 1  ·  queued 0  ·  gen 661 tok/s")


class Pair(App[None]):
    CSS = """
    Screen { layout: horizontal; }
    TextBlock, Static { width: 30; height: auto; }
    .nowrap { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, classes: str = "") -> None:
        super().__init__()
        self.classes_ = classes

    def compose(self) -> ComposeResult:
        yield TextBlock(TEXT, classes=self.classes_)
        yield Static(TEXT, classes=self.classes_)


def _lines(widget: Any) -> list[str]:
    return [widget.render_line(y).text for y in range(widget.size.height)]


@pytest.mark.parametrize("classes", ["", "nowrap"])
async def test_renders_as_static_does(classes: str) -> None:
    app = Pair(classes)
    async with app.run_test(size=(70, 12)) as pilot:
        await pilot.pause()
        block, static = app.query_one(TextBlock), app.query_one(Static)
        assert block.size == static.size  # the same height, wrapped or not
        assert block.size.height == 4 if classes else block.size.height > 4
        assert _lines(block) == _lines(static)
        for y in range(block.size.height):  # the same segments, styles included
            assert list(block.render_line(y)) == list(static.render_line(y))


@pytest.fixture
def rendered(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The lines TextBlocks render (through Textual's Visual.to_strips), in order."""
    lines: list[str] = []
    original = Visual.to_strips.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Visual], widget: Any, visual: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(widget, TextBlock):
            lines.append(str(visual))
        return original(cls, widget, visual, *args, **kwargs)

    monkeypatch.setattr(Visual, "to_strips", classmethod(counting))
    return lines


async def test_an_update_renders_only_the_changed_line_and_a_theme_all(rendered: list[str]) -> None:
    app = Pair("nowrap")
    async with app.run_test(size=(70, 12)) as pilot:
        await pilot.pause()
        block = app.query_one(TextBlock)
        rendered.clear()
        block.set(TEXT.replace("1.0s ago", "2.0s ago"))
        await pilot.pause()
        assert rendered == ["healthy  ·  SGLang 0.5.23  ·  2.0s ago"]
        assert block.render_line(0).text.startswith("healthy  ·  SGLang 0.5.23")
        rendered.clear()
        block.set(TEXT.replace("1.0s ago", "2.0s ago"))  # the same text: nothing to do
        block.set(TEXT)  # back: its lines are still known
        await pilot.pause()
        assert rendered == []
        block.set(TEXT + "\none more line")  # a new height: laid out again
        await pilot.pause()
        assert block.size.height == 5 and rendered == ["one more line"]
        rendered.clear()
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await pilot.pause()
        assert len(rendered) == 5  # new colours: every line rendered again


async def test_lines_moving_up_are_not_rendered_again_and_keep_their_offsets(rendered: list[str]) -> None:
    app = Pair("nowrap")
    async with app.run_test(size=(70, 12)) as pilot:
        block, static = app.query_one(TextBlock), app.query_one(Static)
        block.set("step 1\nstep 2\nstep 3")
        await pilot.pause()
        rendered.clear()
        block.set("step 2\nstep 3\nstep 4")  # a log tail: every line moved up one row
        static.update("step 2\nstep 3\nstep 4")
        await pilot.pause()
        assert rendered == ["step 4"]
        assert [list(block.render_line(y)) for y in range(3)] == [list(static.render_line(y)) for y in range(3)]


async def test_a_hidden_block_costs_no_layout_and_shows_its_latest_text(rendered: list[str]) -> None:
    """A block under ``display: none`` (the host pane's GPU summary on a tall screen) takes new text
    every second: no relayout of the screen, nothing rendered, until it is shown."""
    app = Pair("nowrap")
    async with app.run_test(size=(70, 12)) as pilot:
        block = app.query_one(TextBlock)
        block.display = False
        await pilot.pause()
        screen = app.screen
        layouts = screen._layout_updates + block._layout_updates
        rendered.clear()
        for n in range(3):
            block.set(f"[b]sample[/] {n}.5s ago\n{n} GPUs")
            await pilot.pause()
        assert rendered == []
        assert block._layout_updates + screen._layout_updates == layouts
        block.display = True
        static = app.query_one(Static)
        static.update(block.text)
        await pilot.pause()
        assert [line.rstrip() for line in _lines(block)] == ["sample 2.5s ago", "2 GPUs"]
        assert _lines(block) == _lines(static)


TAGS = ["[b]", "[/b]", "[/]", "[i]", "[/i]", "[dim]", "[/dim]", "[$success]", "[$text-muted]", "[b $warning]",
        "[@click=app.quit]", "[1, 2]", "[]", "[not a tag]", "[", "]", "\\[", "[/x]"]
TEXTS = ["", "x", "step 12/200,000", "$5 $success", ":smile:", "  ·  ", "0.4s ago", "é中", "a\\b"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(TAGS + TEXTS), max_size=12), st.lists(st.sampled_from(TEXTS), min_size=3, max_size=3))
@example(["[i]", "[b]", "x", "[/i]"], ["", "", ""])  # two spans starting together: Textual's order, not the probe's
def test_markup_content_is_textuals_parse(pieces: list[str], other_texts: list[str]) -> None:
    """The same Content (text and spans) or the same error as ``Content.from_markup``, for the
    first line of a tag sequence and for a later one whose text between the tags differs."""
    markup = "".join(pieces)
    later = "".join(other_texts[i % 3] if piece in TEXTS else piece for i, piece in enumerate(pieces))
    for line in (markup, later, markup):
        try:
            expected: Content | Exception = Content.from_markup(line)
        except Exception as err:  # the same failure is the point
            expected = err
        if isinstance(expected, Exception):
            with pytest.raises(type(expected)):
                markup_content(line)
            continue
        got = markup_content(line)
        assert (got.plain, list(got.spans)) == (expected.plain, list(expected.spans)), line
