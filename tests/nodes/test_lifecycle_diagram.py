"""The committed lifecycle diagram and the portal's lifecycle graph stay true to the state machine."""

from __future__ import annotations

import io
from pathlib import Path

from django.core.management import call_command

from nodes.charts import lifecycle_edges, lifecycle_graph
from nodes.choices import STATE_LAYOUT, NodeState

DOT = Path(__file__).resolve().parents[2] / "docs" / "node-lifecycle.dot"


def _lines(text: str) -> set[str]:
    # graph_transitions emits states in set order, which varies between runs: compare as sets.
    return {line.strip() for line in text.splitlines() if line.strip()}


def test_the_committed_diagram_matches_the_state_machine():
    out = io.StringIO()
    call_command("graph_transitions", "nodes.Node", exclude="force_state", stdout=out)
    assert _lines(out.getvalue()) == _lines(DOT.read_text()), (
        "Regenerate: manage.py graph_transitions --exclude force_state nodes.Node > docs/node-lifecycle.dot "
        "and -o docs/node-lifecycle.png"
    )


def test_every_state_has_a_place_on_the_portal_graph_and_every_edge_is_drawn():
    assert set(STATE_LAYOUT) == set(NodeState.values)
    figure = lifecycle_graph([], NodeState.PRODUCTION)
    drawn = {a["name"] for a in figure["layout"]["annotations"]}
    assert drawn == {f"{s}->{t}" for s, t, _ in lifecycle_edges()}
    assert len(figure["data"][0]["x"]) == len(NodeState.values)
