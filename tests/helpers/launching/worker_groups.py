"""Which tests must share a pytest-xdist worker: those sharing a launched run.

`make test` spreads tests over two workers (`-n 2 --dist loadgroup`, the Makefile). A module- or session-scoped
fixture of ours (a `run_cache` of training runs, a module's launch, `uninterrupted_resume_run`) is set up once per
worker, so tests sharing one on two workers would launch its runs twice. Every such test gets an `xdist_group`
named after the fixtures it shares, joined transitively (a module's own launch and the session's resume run put
both modules' tests on one worker); every other test goes to whichever worker is free.
"""

import pytest

PER_WORKER = {"launch_zygote"}  # each worker's own warm zygote: sharing it is what the workers must not do


def shared_fixtures(item) -> list[str]:
    """The module- or session-scoped fixtures of ours in the test's closure, as `where::name` keys."""
    keys = []
    for name, defs in item._fixtureinfo.name2fixturedefs.items():
        last = defs[-1]
        ours = bool(last.baseid)  # defined in a test module or conftest; pytest's and plugins' have no base id
        if last.scope in ("module", "session") and ours and name not in PER_WORKER:
            where = item.nodeid.split("::")[0] if last.scope == "module" else last.baseid  # a session one: its home
            keys.append(f"{where}::{name}")
    return keys


def group_items(items) -> dict[str, str]:
    """Each grouped test's nodeid -> its group: the fixtures it shares, joined across tests (union-find)."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    keyed = {item.nodeid: shared_fixtures(item) for item in items}
    for keys in keyed.values():
        for key in keys[1:]:
            parent[find(key)] = find(keys[0])
    # the group's name: its root key without "::" (it ends up in reported nodeids, which tools split at "::")
    return {nodeid: find(keys[0]).removeprefix("tests/").replace("::", ":") for nodeid, keys in keyed.items() if keys}


def mark_groups(config, items) -> None:
    groups = group_items(items)
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(name=groups[item.nodeid]))
            if config.getoption("loadgroup", False):
                carry_group(item, groups[item.nodeid])


def carry_group(item, group: str) -> None:
    """The group as xdist's scheduler reads it, a `@group` suffix of the nodeid the worker reports.

    xdist 3.8.0 writes the suffix into `item._nodeid`, which pytest 9.2 no longer reads (its nodeid is the structured
    `item._id`), so every group was silently ignored (pytest-dev/pytest-xdist#1386; the fix, #1388, is not
    released). This is that fix, on the pinned versions: tests/launch/test_worker_groups.py fails without it."""
    from _pytest.nodeid import NodeId

    item._id = NodeId.parse(f"{item.nodeid}@{group}")
