"""make test's order on a worker (tests/support/scheduling.py): longest group first, tests that mostly wait before
all."""
import json

import scheduling


class Item:
    def __init__(self, nodeid: str, waits: bool = False):
        self.nodeid, self.waits = nodeid, waits

    def get_closest_marker(self, name: str):
        return object() if name == "waits" and self.waits else None


def test_groups_go_longest_first_and_waiting_tests_before_all(tmp_path, monkeypatch):
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"t::a1": 50, "t::a2": 60, "t::b": 100, "t::short": 2, "t::wait": 40}))
    monkeypatch.setattr(scheduling, "DURATIONS", durations)
    items = [Item("t::short"), Item("t::a1"), Item("t::b"), Item("t::wait", waits=True), Item("t::a2")]
    names = {0: None, 1: "A", 2: None, 3: None, 4: "A"}  # a1 and a2 share a class fixture: one unit of 110 s
    assert [i.nodeid for i in scheduling.order(items, names)] == ["t::wait", "t::a1", "t::a2", "t::b", "t::short"]


def test_waiting_tests_share_one_unit_so_one_worker_waits_while_the_others_grade():
    items = [Item("t::w1", waits=True), Item("t::grading"), Item("t::w2", waits=True), Item("t::w3", waits=True)]
    names = scheduling.waits_together(items, {0: None, 1: "G", 2: None, 3: "H"})  # w3 shares a module fixture
    assert names == {0: scheduling.WAITS_UNIT, 1: "G", 2: scheduling.WAITS_UNIT, 3: "H"}
    assert [i.nodeid for i in scheduling.order(items, names)][:2] == ["t::w1", "t::w2"]


def test_refreshed_durations_add_new_tests_on_the_files_scale(tmp_path):
    """tools/refresh_durations.py: a profiled run twice as slow as the file's (two workers) adds the tests the file
    lacks at half their profiled seconds (setup, call and teardown summed), keeps the known ones, and drops the
    tests no longer collected."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "refresh_durations.py"
    spec = importlib.util.spec_from_file_location("refresh_durations", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    profile = tmp_path / "p.jsonl"
    rows = [("t::a", "call", 20), ("t::b", "setup", 100), ("t::b", "call", 20), ("t::new", "setup", 150),
            ("t::new", "call", 10)]
    profile.write_text("".join(json.dumps({"test": t, "phase": p, "wall": w}) + "\n" for t, p, w in rows))
    measured = tool.profiled([profile])
    assert measured == {"t::a": 20, "t::b": 120, "t::new": 160}
    table, scale = tool.merged({"t::a": 10, "t::b": 60, "t::gone": 5}, measured, collected={"t::a", "t::b", "t::new"})
    assert scale == 0.5 and table == {"t::a": 10, "t::b": 60, "t::new": 80}
