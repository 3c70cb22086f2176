"""The store port's conformance suite: the behaviour every adapter's `Store` must have,
as pytest tests that drive a real database through the port and assert what it did.

An adapter's own test module runs all of it with

    import pytest
    from headgate.testing.conformance import *  # noqa: F403

    @pytest.fixture
    def headgate_store_url(tmp_path) -> str:
        return ...  # a URL open_store opens, naming a fresh, empty database

The import brings one class per test module here (`TestPortAdmission` holds
test_port_admission.py's tests), so `-k TestPortAdmission` picks a module, and the
fixtures the tests ask for (plugin.py), which outrank a conftest.py's of the same name.
Each test keeps its module's globals, so a failure points to the file it is written in.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from . import plugin

# What pytest makes of a function decorated with @pytest.fixture.
_FIXTURE = type(plugin.store)


def _class_name(module: str) -> str:
    return "Test" + "".join(word.capitalize() for word in module.removeprefix("test_").split("_"))


def _modules() -> list[ModuleType]:
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("test_"))
    return [importlib.import_module(f"{__name__}.{name}") for name in names]


def _collect() -> dict[str, object]:
    """One class per module, of its tests as static methods; the modules' own fixtures
    and the plugin's, refusing two of one name."""
    found: dict[str, object] = {
        name: value for name, value in vars(plugin).items() if isinstance(value, _FIXTURE)}
    for module in _modules():
        tests: dict[str, object] = {}
        for name, value in vars(module).items():
            if isinstance(value, _FIXTURE):  # the tests import no fixture: each is its own
                if name in found:
                    raise RuntimeError(f"fixture {name} of {module.__name__} is defined twice")
                found[name] = value
            elif (name.startswith("test") and callable(value)
                  and getattr(value, "__module__", None) == module.__name__):
                tests[name] = staticmethod(value)
        cls = type(_class_name(module.__name__.rpartition(".")[2]), (), {
            "__doc__": module.__doc__, "__module__": __name__, **tests})
        found[cls.__name__] = cls
    return found


_SUITE = _collect()
globals().update(_SUITE)
__all__ = sorted(_SUITE)
