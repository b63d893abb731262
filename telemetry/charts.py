"""Plotly figures of a node's GPUs, as plain dicts (see nodes/charts.py for the style).

Each figure holds at most ``series.MAX_POINTS_PER_FIGURE`` points: the series are
bucketed in the database before they get here.
"""

from __future__ import annotations

from typing import Any

from nodes.charts import _BASE_LAYOUT

from .series import Series

Figure = dict[str, Any]

# One colour per GPU index, the same in every figure (Plotly's default cycle).
GPU_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def _colour(index: int) -> str:
    return GPU_COLOURS[index % len(GPU_COLOURS)]


def _trace(series: Series, gpu: int, field: str, name: str, unit: str, dash: str = "solid") -> dict[str, Any]:
    rows = series.gpus[gpu]
    return {
        "type": "scatter",
        "mode": "lines",
        "name": name,
        "legendgroup": f"gpu{gpu}",
        "x": [row["t"].isoformat() for row in rows],
        "y": [row[field] for row in rows],
        "line": {"width": 1.5, "color": _colour(gpu), "dash": dash},
        "hovertemplate": f"{name}: %{{y}} {unit}<extra></extra>",
    }


def _layout(title: str, y_title: str, series: Series) -> dict[str, Any]:
    return {
        **_BASE_LAYOUT,
        "height": 260,
        "hovermode": "x unified",
        "showlegend": True,
        "title": {"text": title, "font": {"size": 13}},
        "margin": {"l": 50, "r": 10, "t": 30, "b": 30},
        "legend": {"orientation": "h", "y": -0.2},
        "xaxis": {"type": "date", "range": [series.since.isoformat(), series.until.isoformat()]},
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero"},
    }


def temperature_figure(series: Series) -> Figure:
    """GPU (solid) and HBM (dotted) temperature per GPU: the bucket's maximum."""
    data = []
    for gpu in sorted(series.gpus):
        data.append(_trace(series, gpu, "temperature_max", f"GPU {gpu}", "°C"))
        data.append(_trace(series, gpu, "hbm_temperature_max", f"GPU {gpu} HBM", "°C", dash="dot"))
    return {"data": data, "layout": _layout("Temperature (max per interval)", "°C", series)}


def power_figure(series: Series) -> Figure:
    """Board power per GPU: the bucket's average."""
    data = [_trace(series, gpu, "power_avg", f"GPU {gpu}", "W") for gpu in sorted(series.gpus)]
    return {"data": data, "layout": _layout("Power (average per interval)", "W", series)}


def ecc_figure(series: Series) -> Figure:
    """Volatile ECC counts per GPU: uncorrected (solid) and corrected (dotted)."""
    data = []
    for gpu in sorted(series.gpus):
        data.append(_trace(series, gpu, "ecc_volatile_uncorrected_max", f"GPU {gpu} uncorrected", "errors"))
        data.append(_trace(series, gpu, "ecc_volatile_corrected_max", f"GPU {gpu} corrected", "errors", dash="dot"))
    return {"data": data, "layout": _layout("ECC errors since driver load", "errors", series)}


def gpu_figures(series: Series) -> dict[str, Figure]:
    """The node page's three figures, keyed by the element id they are drawn into."""
    return {
        "gpu-temperature": temperature_figure(series),
        "gpu-power": power_figure(series),
        "gpu-ecc": ecc_figure(series),
    }


def figure_points(figure: Figure) -> int:
    """How many points a figure draws (what the downsampling bounds)."""
    return sum(len(trace["x"]) for trace in figure["data"])
