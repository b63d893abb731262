"""The Content-Security-Policy: sent on every page, strict (no inline script or style), and the
portal's templates give it nothing inline to block. The browser tests watch the pages themselves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodewarden import plotly_css

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db


def test_every_page_carries_a_strict_policy(client, viewer):
    client.force_login(viewer)
    policy = client.get("/")["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'"
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_no_template_has_an_inline_script_style_or_handler():
    inline_script = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.IGNORECASE)
    offenders = []
    for path in (ROOT / "nodewarden" / "templates").rglob("*.html"):
        text = re.sub(r"\{#.*?#\}|\{% comment %\}.*?\{% endcomment %\}", "", path.read_text(), flags=re.DOTALL)
        if inline_script.search(text) or re.search(r"\sstyle=|<style|\son[a-z]+=|hx-on", text, re.IGNORECASE):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_committed_plotly_stylesheets_match_the_installed_plotly_js():
    """After a plotly upgrade: python -m nodewarden.plotly_css, and check the ids in nodes/_charts.html."""
    assert plotly_css.CSS_FILE.read_text() == plotly_css.stylesheet(plotly_css.plotly_rules())
    style_id, css = plotly_css.maplibre_stylesheet()
    assert style_id == plotly_css.MAPLIBRE_STYLE_ID and plotly_css.MAPLIBRE_CSS_FILE.read_text() == css
    charts = (ROOT / "nodewarden" / "templates" / "nodes" / "_charts.html").read_text()
    assert f'id="{style_id}"' in charts and 'id="plotly.js-style-global" class="no-inline-styles"' in charts
