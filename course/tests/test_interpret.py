"""What just happened: figures compared by column name and row label, a table whose
shape changed, live cells against the model's with the lesson's notes, and a missed
prediction explained from the run's own breakdown."""

from __future__ import annotations

from typing import Any

from django.template.loader import render_to_string

from course.interpret import Interpretation, run_interpret
from course.labs.harness.base import Tables
from course.labs.registry import lab_get
from course.pages import RunExplained
from course.textbook import lesson_text

HOT = "hot-key-and-stampede-effect"


def interpret(
    params: dict[str, Any], predicted: float | None = None, extra: Tables | None = None
) -> tuple[Interpretation, Tables]:
    lab = lab_get(HOT)
    result = lab.run(lab.validate(params))
    tables = {**result["tables"], **(extra or {})}
    explained = run_interpret(
        lab=lab,
        text=lesson_text(HOT),
        params=result["params"],
        tables=tables,
        predicted=predicted,
    )
    return explained, tables


def rendered(explained: Interpretation, *, live: bool = False) -> str:
    run = RunExplained(interpretation=explained, live=live, prediction=None)
    return render_to_string("course/_interpretation.html", {"explained": run})


def test_more_shards_compare_by_column_name_and_name_the_new_columns():
    explained, tables = interpret({"shards": 8})
    assert tables["shards"]["columns"][-1] == "shard_7"
    moved = {(m.table, m.row, m.column): (m.before, m.after) for m in explained.moved}
    # shard_1 of the defaults is shard_1 of this run, not whatever sits in its place.
    assert moved[("shards", "single key", "shard_1")] == ("684", "40")
    # Every cell of a column both runs have, counted independently.
    lab = lab_get(HOT)
    defaults = lab.run(lab.defaults())["tables"]
    differing = 0
    for name, old in defaults.items():
        new = tables[name]
        for row in new["rows"]:
            twin = next(r for r in old["rows"] if r[0] == row[0])
            for column in set(old["columns"]) & set(new["columns"]):
                ours = row[new["columns"].index(column)]
                differing += ours != twin[old["columns"].index(column)]
    assert explained.moved_total == differing > 3
    [shape] = [s for s in explained.shapes if s.table == "shards"]
    assert shape.columns_appeared == ("shard_4", "shard_5", "shard_6", "shard_7")
    assert shape.columns_gone == shape.rows_appeared == shape.rows_gone == ()
    html = rendered(explained)
    assert "No figure of the model" not in html
    assert "new columns <code>shard_4</code>, <code>shard_5</code>" in html


def test_a_row_only_one_run_has_is_new_not_compared_with_its_neighbour():
    explained, _ = interpret({"copies": [3, 8]})
    [shape] = [s for s in explained.shapes if s.table == "shards"]
    assert shape.rows_appeared == ("split into 3 copies",)
    assert shape.rows_gone == ("split into 4 copies",)
    rows = {m.row for m in explained.moved}
    assert "split into 3 copies" not in rows  # nothing to have moved from
    assert "split into 8 copies" not in rows  # same row as the defaults: unchanged
    assert "new row <code>split into 3 copies</code>" in rendered(explained)


def test_a_change_that_moves_nothing_says_so():
    explained, _ = interpret({"lifetime": 150})
    assert explained.moved_total == 0
    assert explained.shapes == ()
    assert "No figure of the model" in rendered(explained)


def test_a_missed_prediction_is_explained_from_the_runs_breakdown():
    explained, tables = interpret({"shards": 8}, predicted=30)
    check = explained.prediction
    assert check is not None
    assert not check.close
    parts = {part.column: part.model for part in check.parts}
    busiest: list[Any] = tables["busiest"]["rows"][0]
    assert parts == {
        "shard": busiest[1],
        "requests": f"{busiest[2]:,}",
        "hot_key": f"{busiest[3]:,}",
        "other_keys": f"{busiest[4]:,}",
    }
    # The busiest shard is the hot key's plus the other keys that land there.
    assert busiest[2] == busiest[3] + busiest[4]
    shard = tables["shards"]["columns"].index(busiest[1])
    assert tables["shards"]["rows"][0][shard] == busiest[2]
    html = rendered(explained)
    assert "data-breakdown" in html
    assert "other-key request" in html
    assert "Reread the section" not in html


def test_a_close_prediction_shows_no_breakdown():
    lab = lab_get(HOT)
    value = lab.run(lab.defaults())["tables"]["shards"]["rows"][0][1]
    assert isinstance(value, float)
    explained, _ = interpret({}, predicted=value)
    assert explained.prediction is not None
    assert explained.prediction.close
    assert "data-breakdown" not in rendered(explained)


def test_live_cells_that_differ_are_marked_and_explained_per_column():
    live: Tables = {
        "live_stampede": {
            "columns": [
                "strategy",
                "page",
                "origin_calls",
                "waiting_requests",
                "stale_responses",
                "p50_ms",
            ],
            "rows": [
                ["plain", "/books/1/", 100, 100, 0, 40.0],
                ["single-flight", "/books/1/", 1, 27, 0, 12.5],
                ["stale-while-revalidate", "/branches/1/", 1, 0, 88, 3.1],
            ],
        }
    }
    explained, _ = interpret({}, extra=live)
    [pair] = explained.live_pairs
    differs = {
        (row[0].text, pair.live["columns"][i])
        for row in pair.cells
        for i, cell in enumerate(row)
        if cell.differs
    }
    # waiting_requests is compared with the model's pending_requests.
    assert differs == {
        ("single-flight", "waiting_requests"),
        ("stale-while-revalidate", "stale_responses"),
    }
    notes = dict(pair.notes)
    assert set(notes) >= {"waiting_requests", "stale_responses", "p50_ms"}
    html = rendered(explained, live=True)
    assert html.count('class="is-moved"') == 2
    assert "data-live-notes" in html
    assert "single-flight stores the page within a few milliseconds" in html
