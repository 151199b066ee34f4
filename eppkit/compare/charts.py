"""The comparison's charts: per-mode latency distributions, where the time goes per step, and a representative
trace's waterfall (PNG and SVG; matplotlib, imported only when a chart is drawn)."""

from __future__ import annotations

from pathlib import Path

from eppkit.compare import bodypaths, floors, promptsizes, sweep
from eppkit.compare.report import PART_COLORS, mode_color
from eppkit.observability import steps as st
from eppkit.observability.html import service_color
from eppkit.observability.trace_model import Trace

# How a row of boxes keeps its labels apart (latency_chart), in inches but the font:
LABEL_PT = 8  # a box's label's font size (points)
GAP_IN = 0.1  # the least room between two neighbouring labels
PANEL_IN = 4.6  # a panel's least width
AXIS_IN = 0.75  # a panel's width beside its plot: the y axis's ticks and label
BODY_IN = 3.55  # a panel's height but its labels: the plot, its title, the figure's title
ROW_IN = 14.0  # the widest a row of panels may be: about report.html's width, so the page never shrinks their text


def _figure(w: float, h: float):
    # The object-oriented API with an explicit Agg canvas: no pyplot, no global backend state.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, stem: Path) -> list[Path]:
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.canvas.draw()  # lay out once, then keep that layout for both files (layout is the slow part)
    fig.set_layout_engine("none")
    for p in paths:
        fig.savefig(p)
    return paths


def latency_chart(block: dict, stem: Path, title: str) -> list[Path]:
    """Per-mode distributions: e2e, gateway (Envoy before upstream) and, when streamed, TTFT; each box labelled with
    its run and p50, the labels kept apart however many runs (:func:`_fit`), a floor hatched in its mode's colour."""
    modes = [m for m, r in block.get("modes", {}).items() if r.get("status") == "ok"]
    panels = [("e2e", "end to end (client span)"), ("gateway", "gateway: Envoy before the upstream")]
    if any(s.get("steps", {}).get("ttft") is not None for m in modes for s in block["modes"][m].get("samples", [])):
        panels.append(("ttft", "time to first token (client)"))
    shown_by_panel = []
    for step, _ in panels:
        data = [[s["steps"][step] for s in block["modes"][m].get("samples", [])
                 if s.get("ok") and (s.get("steps") or {}).get(step) is not None] for m in modes]
        shown_by_panel.append([(m, d) for m, d in zip(modes, data) if d])
    ticks = [[f"{m}\np50 {st.percentile(d, 50):.1f}" for m, d in shown] for shown in shown_by_panel]
    fig = _figure(PANEL_IN, BODY_IN)
    rotation, grid = _fit(fig, [t for labels in ticks for t in labels], max(map(len, ticks)), len(panels))
    for ax, (_, label), shown, labels in zip(fig.subplots(*grid, squeeze=False).flat, panels, shown_by_panel, ticks):
        if not shown:
            ax.set_visible(False)
            continue
        bp = ax.boxplot([d for _, d in shown], patch_artist=True, widths=0.55, showfliers=False)
        ax.set_xticks(range(1, len(shown) + 1), labels, fontsize=LABEL_PT, rotation=rotation)
        for patch, (m, _) in zip(bp["boxes"], shown):
            patch.set_facecolor(run_color(m, "#cccccc"))
            patch.set_alpha(0.45)
            if floors.is_floor(m):
                patch.set_hatch("///")
        for median in bp["medians"]:
            median.set_color("black")
        for i, (m, d) in enumerate(shown, start=1):
            # deterministic horizontal spread so points do not sit on one line
            xs = [i + ((k * 0.618) % 1 - 0.5) * 0.3 for k in range(len(d))]
            ax.scatter(xs, d, s=8, color=run_color(m, "#555555"), alpha=0.7, zorder=3, linewidths=0)
        ax.set_title(label, fontsize=10)
        ax.set_ylabel("ms")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=11)
    return _save(fig, stem)


def _fit(fig, labels: list[str], count: int, panels: int) -> tuple[int, tuple[int, int]]:
    """Size ``fig`` for ``panels`` panels of at most ``count`` boxes, each with one of ``labels`` under it, so no two
    labels touch: the labels level while ``count`` of the widest fit a panel of the least width, else turned upright
    with each panel as wide as its labels are thick; the panels side by side while the row fits :data:`ROW_IN`, else
    one under another. Returns the labels' rotation and the panels' grid (rows, columns)."""
    renderer = fig.canvas.get_renderer()
    sizes = []
    for label in labels:
        text = fig.text(0, 0, label, fontsize=LABEL_PT)
        box = text.get_window_extent(renderer)
        text.remove()
        sizes.append((box.width / fig.dpi, box.height / fig.dpi))
    wide, thick = max((w for w, _ in sizes), default=0.0), max((h for _, h in sizes), default=0.0)
    if count * (wide + GAP_IN) <= PANEL_IN - AXIS_IN:
        rotation, width, height = 0, PANEL_IN, BODY_IN + thick
    else:
        rotation, width, height = 90, max(PANEL_IN, AXIS_IN + count * (thick + GAP_IN)), BODY_IN + wide
    if panels * width <= ROW_IN:
        fig.set_size_inches(panels * width, height)
        return rotation, (1, panels)
    fig.set_size_inches(width, panels * height)
    return rotation, (panels, 1)


def run_color(key: str, default: str | None) -> str | None:
    """A run's colour: its mode's, at any step of a sweep, with any body path, and for the mode's floor (which the
    charts draw apart: hatched, dashed)."""
    name = bodypaths.split(sweep.split(key)[0])[0]
    return mode_color(name.removeprefix(floors.PREFIX), default)


def steps_chart(block: dict, stem: Path, title: str) -> list[Path]:
    """Stacked bars of the mean per-request breakdown; right panel zooms on what happens before the upstream."""
    modes = [m for m, r in block.get("modes", {}).items() if r.get("status") == "ok" and r.get("breakdown_mean_ms")]
    fig = _figure(11, 1.6 + 0.55 * max(1, len(modes)))
    left, right = fig.subplots(1, 2, width_ratios=[3, 2])
    for ax, parts, label in ((left, st.BREAKDOWN, "whole request (mean ms per request)"),
                             (right, ("decision", "picker call", "envoy"), "before the upstream (mean ms)")):
        for y, mode in enumerate(modes):
            x0 = 0.0
            for part in parts:
                w = block["modes"][mode]["breakdown_mean_ms"].get(part, 0.0)
                if w <= 0:
                    continue
                ax.barh(y, w, left=x0, color=PART_COLORS[part], edgecolor="white", linewidth=0.5, label=part)
                x0 += w
            ax.text(x0, y, f" {x0:.1f}", va="center", fontsize=7)
        ax.set_yticks(range(len(modes)), modes)
        ax.invert_yaxis()
        ax.set_title(label, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlim(0, max([sum(block["modes"][m]["breakdown_mean_ms"].get(p, 0.0) for p in parts) for m in modes] + [0.01]) * 1.15)
    seen: dict = {}
    for ax in (left, right):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    order = [p for p in st.BREAKDOWN if p in seen]
    fig.legend([seen[p] for p in order], order, loc="outside lower center", ncols=len(order), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    return _save(fig, stem)


def _measures_chart(curves: dict[str, list[dict]], x: str, xlabel: str, stem: Path, title: str, *,
                    ticks: bool = False) -> list[Path]:
    """Each of :data:`promptsizes.MEASURES` (p50) against ``x`` on a log-2 axis, one line per run (floors dashed);
    ``ticks``: the x values themselves as the axis's ticks."""
    fig = _figure(4.6 * len(promptsizes.MEASURES), 3.8)
    axes = fig.subplots(1, len(promptsizes.MEASURES), squeeze=False)[0]
    values = sorted({p[x] for points in curves.values() for p in points})
    for ax, (name, _) in zip(axes, promptsizes.MEASURES):
        for run, points in curves.items():
            xy = [(p[x], p[name]) for p in points if p.get(name) is not None]
            if xy:
                ax.plot(*zip(*xy), marker="o", markersize=3, label=run, color=run_color(run, None),
                        linestyle="--" if floors.is_floor(run) else "-")
        ax.set_xscale("log", base=2)
        if ticks:
            ax.set_xticks(values, [str(v) for v in values])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("ms, p50")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
    handles = {label: h for ax in axes for h, label in zip(*ax.get_legend_handles_labels())}
    if handles:  # below the panels, where however many runs there are cover none of their lines
        fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=min(len(handles), 5),
                   fontsize=7, frameon=False, handlelength=3)
    fig.suptitle(title, fontsize=11)
    return _save(fig, stem)


def prompt_sizes_chart(block: dict, stem: Path, title: str) -> list[Path] | None:
    """TTFT and gateway p50 against the prompt size, one line per mode (PNG and SVG); None without a curve."""
    curves = {m: r["by_prompt_kb"] for m, r in block.get("modes", {}).items()
              if r.get("status") == "ok" and r.get("by_prompt_kb")}
    return _measures_chart(curves, "kb", "prompt (KiB)", stem, title) if curves else None


def concurrency_chart(block: dict, stem: Path, title: str) -> list[Path] | None:
    """TTFT, gateway and hold p50 against the concurrency, one line per run swept (PNG and SVG); None outside a
    sweep (eppkit.compare.sweep)."""
    curves = sweep.curves(block)
    return _measures_chart(curves, "concurrency", "requests in flight", stem, title, ticks=True) if curves else None


def waterfall_chart(trace: Trace, stem: Path, title: str) -> list[Path]:
    """One row per span in tree order, bars on a shared ms axis, coloured by service; ◆ = events."""
    rows = list(trace.walk())
    t0 = trace.start_us
    total_ms = max((trace.end_us - t0) / 1000, 0.001)
    fig = _figure(11, 0.9 + 0.27 * len(rows))
    ax = fig.subplots()
    for y, (span, depth) in enumerate(rows):
        start = (span.start_us - t0) / 1000
        width = max(span.duration_us / 1000, total_ms / 500)
        ax.broken_barh([(start, width)], (y - 0.38, 0.76), facecolors=service_color(span.service),
                       edgecolor="#c00000" if span.error else "none", linewidth=1.2)
        ax.text(start + width + total_ms * 0.005, y, f"{span.duration_us / 1000:.1f} ms", va="center", fontsize=7)
        for ev in span.events:
            ax.plot((ev.time_us - t0) / 1000, y, marker="D", color="black", markersize=4)
    labels = [("  " * depth) + f"{span.service}: {_short(span.name)}" for span, depth in rows]
    ax.set_yticks(range(len(rows)), labels, fontsize=8, fontfamily="monospace")
    for tick in ax.get_yticklabels():
        tick.set_horizontalalignment("left")
    ax.tick_params(axis="y", pad=max(len(lab) for lab in labels) * 4.9 + 2)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, total_ms * 1.12)
    ax.set_xlabel("ms since the client sent the request   (◆ = span event, e.g. first_token; red edge = error)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title, fontsize=10)
    return _save(fig, stem)


def _short(name: str, width: int = 44) -> str:
    name = name.replace("envoy.service.ext_proc.v3.ExternalProcessor.Process", "ext_proc.Process")
    return name if len(name) <= width else name[: width - 1] + "…"


