"""Which tests must share a pytest-xdist worker: those sharing a launched run.

`make test` spreads tests over two workers (`-n 2 --dist loadgroup`, pyproject.toml). A module- or session-scoped
fixture of ours (a `run_cache` of training runs, a module's launch, `uninterrupted_resume_run`) is set up once per
worker, so tests sharing one on two workers would launch its runs twice. Every such test gets an `xdist_group`
named after the fixtures it shares, joined transitively (a module's own launch and the session's resume run put
both modules' tests on one worker); every other test goes to whichever worker is free.
"""

import pytest

PER_WORKER = {"launch_zygote"}  # each worker's own warm zygote: sharing it is what the workers must not do


def shared_fixtures(item) -> list[str]:
    """The module- or session-scoped fixtures of ours in the test's closure, as `module::name` keys."""
    keys = []
    for name, defs in item._fixtureinfo.name2fixturedefs.items():
        last = defs[-1]
        module = getattr(last.func, "__module__", "") or ""
        if last.scope in ("module", "session") and module.startswith("tests") and name not in PER_WORKER:
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
    return {nodeid: find(keys[0]) for nodeid, keys in keyed.items() if keys}


def mark_groups(items) -> None:
    groups = group_items(items)
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(name=groups[item.nodeid]))
