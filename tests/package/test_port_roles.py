"""The store port in roles: every method belongs to one role, `Store` is their sum, the
services depend on the role they use, and none of them asks a store what it has by
`getattr`/`hasattr` (capabilities() says it)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from collections.abc import Callable
from pathlib import Path

import headgate
from headgate.core import records
from headgate.services.client import Client
from headgate.services.duties import OperationsRunner, advance_operations
from headgate.services.live import ForeignChanges
from headgate.store import port
from headgate.worker.acks import AckQueue
from headgate.worker.dispatcher import Dispatcher
from headgate.worker.heartbeat import Heartbeat
from headgate.worker.leases import LeaseKeeper

ROOT = Path(headgate.__file__).resolve().parent
ROLES = (port.StoreBasics, port.Producer, port.Admission, port.Maintenance, port.Inspection,
         port.Control)


def _own_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items()
            if callable(value) and not name.startswith("_")}


def test_every_port_method_belongs_to_exactly_one_role() -> None:
    owners: dict[str, list[str]] = {}
    for role in ROLES:
        for name in _own_methods(role):
            owners.setdefault(name, []).append(role.__name__)
    assert {n: o for n, o in owners.items() if len(o) > 1} == {}
    # Store adds nothing of its own: it is the roles together.
    assert _own_methods(port.Store) == set()
    assert set(port.Store.__mro__) >= set(ROLES)
    # Every abstract method of the whole port is one role's.
    assert port.Store.__abstractmethods__ <= set(owners)


def _store_hint(fn: Callable[..., object]) -> object:
    # The annotation as written (the modules use postponed annotations).
    return inspect.signature(fn).parameters["store"].annotation


def test_services_depend_on_the_narrowest_role() -> None:
    assert _store_hint(Client.__init__) == "Producer"
    for cls in (Dispatcher, AckQueue, LeaseKeeper, Heartbeat):
        assert _store_hint(cls.__init__) == "Admission", cls
    assert _store_hint(advance_operations) == "Maintenance"
    assert _store_hint(OperationsRunner.__init__) == "Maintenance"
    assert _store_hint(ForeignChanges.__init__) == "Inspection"


def _probes(source: str) -> list[str]:
    """`getattr(store…, …)` / `hasattr(store…, …)` calls: a probe of a store's class."""
    return [f"{node.lineno} {ast.unparse(node)}"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr") and node.args
            and re.search(r"store", ast.unparse(node.args[0]), re.I)]


def test_no_service_probes_a_store_with_getattr() -> None:
    """Services, the web layer and the CLI read `store.capabilities()` (a typed
    Capabilities) instead; only the adapters and the port itself are exempt."""
    outside = [p for p in sorted(ROOT.rglob("*.py"))
               if p.relative_to(ROOT).parts[0] not in ("adapters", "store")]
    assert len(outside) > 50
    assert [f"{p.relative_to(ROOT.parent)}:{hit}" for p in outside
            for hit in _probes(p.read_text())] == []


def test_the_probe_check_finds_a_probe() -> None:
    source = ("def f(store, self):\n"
              "    a = getattr(store, 'change_token', None)\n"
              "    return hasattr(self._store, 'ack_many') or getattr(self, 'x', 1)\n")
    assert _probes(source) == ["2 getattr(store, 'change_token', None)",
                               "3 hasattr(self._store, 'ack_many')"]


# Port methods whose signature still names `Any` where a typed record belongs, each with
# why it is left; a name leaves this table when its parameter gets its record.
ANY_PARAMETERS_LEFT: dict[tuple[str, str], str] = {
    ("create_operation", "selector"): "the bulk filter (queue, state, kind, partition_key, "
                                      "older_than_ms) passes through from the API's JSON "
                                      "and is checked by the adapter; a typed selector "
                                      "would carry those five optional fields",
    ("upsert_schedule", "schedule"): "also takes a mapping of Schedule's field names (the "
                                     "API's body, a task app's declaration), so that an "
                                     "unknown field is refused by name, not by a TypeError",
    ("record_audit", "detail"): "free-form by design: each action's own JSON",
    ("enqueue_many_async", "conn"): "the caller's own async driver connection",
    ("enqueue_many_in", "conn"): "the caller's own driver connection",
}


def _port_methods() -> dict[str, Callable[..., object]]:
    return {name: fn for role in ROLES for name, fn in vars(role).items()
            if callable(fn) and not name.startswith("_")}


def _names_any(annotation: object) -> bool:
    """`Any` anywhere in an annotation as written, `dict[str, Any]` included."""
    return bool(re.search(r"\bAny\b", str(annotation)))


def test_no_port_method_returns_a_wire_shaped_dict() -> None:
    """Every return is a typed record, a scalar or a collection of them: never
    `dict[str, Any]` (a dict shaped like an HTTP body) nor `Any`, so the web layer maps
    records to JSON and an adapter cannot drift from the wire format unseen."""
    methods = _port_methods()
    assert len(methods) > 80
    loose = {name: str(inspect.signature(fn).return_annotation)
             for name, fn in methods.items()
             if _names_any(inspect.signature(fn).return_annotation)}
    assert loose == {}


def test_port_parameters_name_any_only_where_listed() -> None:
    loose = {(name, p.name) for name, fn in _port_methods().items()
             for p in inspect.signature(fn).parameters.values() if _names_any(p.annotation)}
    assert loose == set(ANY_PARAMETERS_LEFT)


def test_the_records_are_frozen_and_name_any_only_in_free_form_fields() -> None:
    """The port's records (core/records/) are frozen dataclasses with slots; a field
    typed with `Any` is one whose content is free-form JSON by design."""
    free_form = {("AuditEntry", "detail")}
    seen = []
    for name in records.__all__:
        cls = getattr(records, name)
        assert dataclasses.is_dataclass(cls), name
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        assert params.frozen and hasattr(cls, "__slots__"), name
        seen += [(name, f.name) for f in dataclasses.fields(cls) if _names_any(f.type)]
    assert set(seen) == free_form


def test_the_any_check_finds_a_wire_shaped_dict() -> None:
    assert _names_any("list[dict[str, Any]]") and _names_any("Any | None")
    assert not _names_any("list[QueueStats]") and not _names_any("dict[str, int]")
    assert not _names_any("ManyThings")
