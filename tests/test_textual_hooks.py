"""The Textual internals the console relies on, each named with the file that uses it.

Textual is pinned to the minor these were tested with (``pyproject.toml``: ``>=8.2.8,<8.3``). When
a Textual release renames or reshapes one of them, this test says which, and where the console
uses it, instead of the console silently falling back or breaking at run time.
"""

from __future__ import annotations

import inspect

import pytest
import textual
from textual import _compositor
from textual.app import App
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.screen import Screen
from textual.widget import Widget

from specconsole.ui.console.cropping import CroppingCompositor


def _source(obj: object) -> str:
    return inspect.getsource(obj)  # type: ignore[arg-type]


def params_of(cls: type, name: str) -> list[str]:
    fn = getattr(cls, name, None)
    return list(inspect.signature(fn).parameters) if callable(fn) else []


def hook(condition: bool, what: str, user: str) -> None:
    if not condition:
        pytest.fail(f"Textual {textual.__version__}: {what} changed; {user} relies on it "
                    f"(Textual is pinned to 8.2.x in pyproject.toml for this reason)")


def test_the_compositor_hooks() -> None:
    user = "src/specconsole/ui/console/app.py (screen_text)"
    hook("self._compositor = Compositor()" in _source(Screen.__init__), "Screen._compositor", user)
    hook(params_of(_compositor.Compositor, "render_update")[:3] == ["self", "full", "screen_stack"],
         "Compositor.render_update(full, screen_stack)", user)


def test_the_compositor_hooks_of_the_cropping_compositor() -> None:
    user = "src/specconsole/ui/console/cropping.py (CroppingCompositor)"
    hook(params_of(_compositor.Compositor, "_get_renders") == ["self", "crop"], "Compositor._get_renders(self, crop)",
         user)
    hook(hasattr(_compositor.Compositor, "render_partial_update"), "Compositor.render_partial_update", user)
    hook(hasattr(_compositor, "ChopsUpdate"), "textual._compositor.ChopsUpdate", user)
    compositor = CroppingCompositor()
    hook(isinstance(getattr(compositor, "_dirty_regions", None), set), "Compositor._dirty_regions (a set)", user)
    hook(isinstance(getattr(compositor, "visible_widgets", None), dict), "Compositor.visible_widgets (a mapping)", user)
    hook("self._compositor = Compositor()" in _source(Screen.__init__), "Screen._compositor (assigned in __init__)",
         user + " replaces Screen._compositor")


def test_the_app_and_driver_hooks() -> None:
    hook("self._driver" in _source(App.__init__), "App._driver", "src/specconsole/ui/console/app_leaving.py")
    hook("self._app = app" in _source(Driver.__init__), "Driver._app", "src/specconsole/ui/console/quit_key.py")
    hook(hasattr(Driver, "process_message"), "Driver.process_message", "src/specconsole/ui/console/quit_key.py")
    linux = _source(LinuxDriver)
    hook("self.attrs_before" in linux and "self.fileno" in linux, "LinuxDriver.attrs_before / fileno",
         "src/specconsole/ui/console/app_leaving.py (Leaving.restore_terminal)")
    for name in ("stop_application_mode", "close"):
        hook(hasattr(LinuxDriver, name), f"LinuxDriver.{name}", "src/specconsole/ui/console/app_leaving.py")


def test_the_toast_hooks() -> None:
    user = "src/specconsole/ui/console/app_actions.py (ConsoleActions.drop_echoes)"
    hook("self._notifications" in _source(App.__init__), "App._notifications", user)
    hook(hasattr(App, "_unnotify"), "App._unnotify", user)


def test_the_widget_hooks() -> None:
    hook("_component_styles" in _source(Widget), "Widget._component_styles",
         "src/specconsole/ui/widgets/plot_row.py (PlotRow)")


def test_the_console_does_not_shadow_textuals_own_bookkeeping() -> None:
    from specconsole.ui.console.app import ConsoleApp

    textual_names = {n for n in ("_loop", "_thread_id") if f"self.{n}" in _source(App)}
    ours = _source(ConsoleApp)
    for name in textual_names:
        assert f"self.{name} =" not in ours, f"ConsoleApp assigns {name}, which Textual's App uses for itself"


def test_textual_is_the_pinned_minor() -> None:
    major, minor = (int(p) for p in textual.__version__.split(".")[:2])
    assert (major, minor) == (8, 2), f"Textual {textual.__version__} is installed; the console is tested on 8.2.x"


def test_the_footer_hooks() -> None:
    from textual.widgets import Footer

    user = "src/specconsole/ui/widgets/footer.py (ConsoleFooter.bindings_changed)"
    hook(params_of(Footer, "bindings_changed") == ["self", "screen"], "Footer.bindings_changed(self, screen)", user)
    hook("self._bindings_ready = True" in _source(Footer.bindings_changed), "Footer._bindings_ready", user)
    compose = _source(Footer.compose)
    hook("self._bindings_ready" in compose and "self.screen.active_bindings" in compose
         and "self.show_command_palette" in compose and "Footer.compact" in compose,
         "Footer.compose builds its keys from screen.active_bindings, compact and show_command_palette", user)


def test_the_breakpoint_hooks() -> None:
    user = "src/specconsole/ui/console/console_screen.py (ConsoleScreen.__init__'s breakpoint classes)"
    hook(params_of(Screen, "_get_breakpoint_classes") == ["self", "dimension", "breakpoints"],
         "Screen._get_breakpoint_classes(dimension, breakpoints)", user)
    hook("self.update_classes(breakpoints" in _source(Screen._on_resize), "Screen._on_resize sets the breakpoint "
         "classes with update_classes (which styles nothing when they are set already)", user)


def test_the_focus_restyle_hook() -> None:
    user = "src/specconsole/ui/console/console_screen.py (Body.watch_has_focus)"
    code = [line.strip() for line in _source(Widget.watch_has_focus).splitlines()[1:]
            if line.strip() and not line.strip().startswith('"""')]
    hook(code == ["self.update_node_styles()"], "Widget.watch_has_focus (only a restyle of the widget and "
         "what is in it)", user)
