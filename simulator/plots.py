"""Pictures: a run's TTFT and inter-token-latency distributions and its timeline; a sweep's latency against load,
Pareto front and goodput; a search's capacity per configuration; a recommendation's cost against latency
(`plot_results` reads a results folder for them)."""

from __future__ import annotations

import json
import math
import re
import sys
import unicodedata
import warnings
from functools import partial
from pathlib import Path

import numpy as np

from servesim.simulator.errors import ConfigError


def latency_values(result) -> tuple[np.ndarray, np.ndarray]:
    """TTFTs and inter-token gaps (ms) of the summary's requests: under a warm-up or cool-down, the measured ones
    (r171: drawn over all, the plot's lines contradicting summary.json's percentiles and its own title's count)."""
    keep = (result.requests["status"] == "finished").to_numpy()
    measured = getattr(result, "measured", None)
    if measured is not None:
        keep = keep & measured
    itl = result.itls if measured is None else result.tokens.itls(only=measured)
    return result.requests.loc[keep, "ttft"].to_numpy() * 1000, itl * 1000


def latency_distributions(result, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ttft, itl = latency_values(result)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, values, title in ((axes[0], ttft, "Time to first token"), (axes[1], itl, "Inter-token latency")):
        if values.size:
            lo = max(values.min(), 1e-3)
            bins = np.logspace(np.log10(lo), np.log10(max(values.max(), lo * 1.01)), 60)
            ax.hist(values, bins=bins, color="#4C72B0")
            ax.set_xscale("log")
            for p, style in ((50, "--"), (99, ":")):
                v = np.percentile(values, p)
                ax.axvline(v, color="k", linestyle=style, label=f"p{p} = {v:,.1f} ms")
            ax.legend()
            if ax is axes[1]:
                ax.set_yscale("log")  # the stalls behind a long prefill are few but matter
        ax.set_title(plain(title))
        ax.set_xlabel("milliseconds (log scale)")
        ax.set_ylabel("requests" if ax is axes[0] else "token gaps (log scale)")
    s = result.summary
    fig.suptitle(plain(f"{result.config.get('name', '')}: {s['completed']} requests, "
                       f"{s['request_throughput']:.2f} req/s, {s['num_preemptions']} preemptions"))
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _figure(path_stem: str | Path, fig) -> list[Path]:
    """PNG and SVG side by side."""
    import matplotlib.pyplot as plt

    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = [stem.parent / f"{stem.name}.png", stem.parent / f"{stem.name}.svg"]  # a dot in the name stays
    with warnings.catch_warnings(record=True) as caught:  # matplotlib's own, with its source lines (r149)
        warnings.simplefilter("always")
        fig.tight_layout()
        fig.savefig(out[0], dpi=110)
        fig.savefig(out[1], metadata={"Date": None})  # no timestamp: the same table draws the same bytes
    plt.close(fig)
    missing = sorted({m.group(1) for w in caught if (m := re.search(r"Glyph \d+ \((.+?)\) missing", str(w.message)))})
    if missing:
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: the plot's font lacks {len(missing)} character(s) of its text, drawn as boxes: "
                  f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"])
    return out


def _plt():
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:  # a command's own drawing; a notebook's chosen backend stays its own
        matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "servesim"  # SVG ids from a fixed salt, not a random one per run
    import matplotlib.pyplot as plt

    return plt


def plain(text: str) -> str:
    """Text drawn as given: matplotlib reads a pair of `$` as math (r130: a title or a folder named with `$\\x$`
    was an internal error, `$3 vs $4` lost its spaces); a control character (but a line break) is drawn as U+FFFD,
    as the SVG's XML cannot hold it (r149: a malformed SVG)."""
    return "".join("\ufffd" if unicodedata.category(c) == "Cc" and c != "\n" else c
                   for c in str(text)).replace("$", r"\$")


def _label(key: str) -> str:
    return {"workload.arrival.rate": "arrival rate (requests/s; sessions/s for sessions)", "engine.max_num_batched_tokens": "token budget",
            "engine.max_num_seqs": "max_num_seqs", "p99_tpot_ms": "p99 TPOT (ms)",
            "p99_ttft_ms": "p99 TTFT (ms)"}.get(key, key)


def _groups(table, by: str | None):
    """(label, rows) per `by` value, a run whose value is unset (null) in a group of its own: groupby's default
    dropped those runs from the plot without a word."""
    if not by or by not in table:
        return [("runs", table)]
    return [(f"{_label(by)} = {_value_name(value)}", g) for value, g in table.groupby(by, sort=True, dropna=False)]


def _colored_groups(plt, table, by: str | None):
    """_groups with a colour each: the cycle's ten, or past ten groups a colour scale, so no two share one and
    none is dropped (r151: zip with ten colours x 10 drew 100 of 105 groups, every tenth alike)."""
    groups = _groups(table, by)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if len(groups) <= len(cycle):
        return list(zip(groups, cycle))
    scale = plt.get_cmap("viridis")
    return [(g, scale(i / (len(groups) - 1))) for i, g in enumerate(groups)]


def _value_name(value) -> str:
    import pandas as pd

    return "null" if pd.isna(value) else str(value)  # not "unset": a null retention interval keeps every block


def _slo_text(slos: dict | None) -> str:
    if not slos:
        return ""
    parts = [f"{name}: " + ", ".join(f"{k[:-3].upper()} <= {v:g} ms" for k, v in c.items()
                                     if k.endswith("_ms") and v is not None) for name, c in slos.items()]
    return "SLOs " + "; ".join(parts)


def latency_vs_rate(table, path, x: str = "workload.arrival.rate", by: str | None = "engine.max_num_batched_tokens",
                    title: str | None = None, slos: dict | None = None):
    """TTFT and TPOT (p50 solid, p99 dashed) against load, one colour per `by` value: the budget trade-off. A
    metric no run measured (TPOT when every output is one token) gets no panel."""
    plt = _plt()
    titles = {"ttft": "Time to first token", "tpot": "Time per output token"}
    metrics = [m for m in titles if table[[f"median_{m}_ms", f"p99_{m}_ms"]].notna().any().any()] or ["ttft"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics), 4.5), squeeze=False)
    axes = list(axes[0])
    for (name, g), color in _colored_groups(plt, table, by):
        g = g.groupby(x).mean(numeric_only=True).reset_index()
        for ax, metric in zip(axes, metrics):
            ax.plot(g[x], g[f"median_{metric}_ms"], "-o", color=color, label=f"{name}, p50")
            ax.plot(g[x], g[f"p99_{metric}_ms"], "--s", color=color, label=f"{name}, p99")
    import matplotlib.ticker as mticker

    if title or slos:
        fig.suptitle(plain("\n".join(t for t in (title, _slo_text(slos)) if t)))
    for ax, metric in zip(axes, metrics):  # each class's target, a dotted line
        for name, c in (slos or {}).items():
            if c.get(f"{metric}_ms"):
                ax.axhline(c[f"{metric}_ms"], color="black", lw=0.8, ls=":", label=f"SLO {name}")
    for ax, panel in zip(axes, (titles[m] for m in metrics)):
        ax.set_xlabel(_label(x))
        ax.xaxis.set_major_locator(mticker.MaxNLocator(nbins=6))  # few enough that long labels (1.0005) stay apart
        ax.set_ylabel("milliseconds (log scale)")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
        ax.yaxis.set_minor_formatter(mticker.FuncFormatter(partial(_minor_label, ax)))
        ax.set_title(plain(panel))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return _figure(path, fig)


def _minor_label(ax, v: float, _pos) -> str:
    """A log axis's minor tick: 2s and 5s labelled; every one where the axis spans under a decade (TPOT lines at
    6-7 ms sat between unlabelled ticks, the only label 10), with the decimals that tell neighbours apart (a
    5.25-5.34 ms span read "5" at every tick)."""
    low, high = ax.get_ylim()
    if 0 < low < high < 10 * low:
        decimals = max(0, -math.floor(math.log10((high - low) / 5)))
        return f"{v:,.{decimals}f}"
    return f"{v:,.0f}" if v >= 1 and str(int(v))[0] in "25" else ""


PARETO_CATEGORIES = 10  # a numeric --by with at most this many values is drawn as named categories


def pareto(table, path, latency: str = "p99_tpot_ms", throughput: str = "output_throughput", by: str | None = None,
           title: str | None = None):
    """Each run as (latency, throughput); the frontier joins the runs no other run beats on both."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 5))
    t = table.dropna(subset=[latency, throughput])
    if not by or by not in t:
        ax.scatter(t[latency], t[throughput], s=30)
    elif is_numeric_dtype(t[by]) and not is_bool_dtype(t[by]) and t[by].nunique() > PARETO_CATEGORIES:
        # many values (a scale): one colour bar; a few (token budgets, sequence caps) are named one by one below
        unset = t[by].isna()  # no colour on the scale: grey crosses, named, not left transparent
        sc = ax.scatter(t[latency][~unset], t[throughput][~unset], c=t[by][~unset], cmap="viridis", s=30)
        fig.colorbar(sc, ax=ax, label=_label(by))
        if unset.any():
            ax.scatter(t[latency][unset], t[throughput][unset], marker="x", color="grey", s=40,
                       label=f"{_label(by)} = {_value_name(None)}")
    else:  # names (a policy, a GPU): one colour and legend entry each
        for name, g in _groups(t, by):
            ax.scatter(g[latency], g[throughput], s=30, label=name)
    front = t.sort_values([latency, throughput], ascending=[True, False])
    best, pts = -1.0, []
    for lat, thr in zip(front[latency], front[throughput]):
        if thr > best:
            best = thr
            pts.append((lat, thr))
    if pts:
        ax.plot(*zip(*pts), "-", color="crimson", label="Pareto frontier")
    ax.set_xlabel(_label(latency) if _label(latency) != latency else f"{latency} (ms)")
    ax.set_ylabel(throughput.replace("_", " ") + (" (tok/s)" if "output" in throughput else " (req/s)"))
    ax.set_title(plain(title or "Throughput against latency"))
    ax.grid(alpha=0.3)
    ax.legend()
    return _figure(path, fig)


def goodput_vs_rate(table, path, x: str = "workload.arrival.rate", by: str | None = None, title: str | None = None,
                    slos: dict | None = None):
    """Goodput (requests/s meeting their SLOs) and throughput against offered load."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (name, g), color in _colored_groups(plt, table, by):
        g = g.groupby(x).mean(numeric_only=True).reset_index()
        suffix = f" ({name})" if by and by in table else ""
        ax.plot(g[x], g["request_goodput"], "-o", color=color, label="goodput" + suffix)
        ax.plot(g[x], g["request_throughput"], ":", color=color, label="throughput" + suffix)
    if x != "offered_rate" and "offered_rate" in table and table["offered_rate"].notna().any():  # the requests/s
        # the runs offered: a session workload's rate counts sessions, whose turns offer more requests than it says
        offered = table.groupby(x)["offered_rate"].mean().reset_index()
        ax.plot(offered[x], offered["offered_rate"], color="grey", lw=0.8, label="offered load (req/s)")
    else:
        lim = float(table[x].max())
        ax.plot([0, lim], [0, lim], color="grey", lw=0.8, label="offered load")
    ax.set_xlabel(_label(x))
    ax.set_ylabel("requests per second")
    ax.set_title(plain("\n".join(t for t in (title or "Goodput under SLOs", _slo_text(slos)) if t)), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _figure(path, fig)


TIMELINE_REPLICAS = 10  # lines drawn per panel at most; one colour each


def _held(steps, column: str, idle: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A step's value from its start to its end, then `idle` (None: the value held) until the next step starts:
    (times, values) for a steps-post line. A line joined step to step drew an idle engine as running one request
    across a gap of seconds (round 89)."""
    start, end, value = (steps[c].to_numpy(float) for c in ("start", "end", column))
    if idle is None or not len(start):
        return start, value
    gap = np.append(start[1:] > end[:-1], True)  # idle after this step (and after the last one)
    t = np.empty(len(start) + int(gap.sum()))
    v = np.empty_like(t)
    at = np.arange(len(start)) + np.concatenate([[0], np.cumsum(gap)[:-1]])  # where each step's start goes
    t[at], v[at] = start, value
    t[at[gap] + 1], v[at[gap] + 1] = end[gap], idle
    return t, v


def timeline(steps, path, title: str = "one run over time"):
    """Queue depth, running requests, KV usage and preemptions against simulated time; one line per replica
    (their steps interleave in time, so a single line would zig-zag between replicas)."""
    plt = _plt()
    fig, axes = plt.subplots(3, 1, figsize=(11, 7), sharex=True)
    replicas = sorted(steps["replica"].unique().tolist()) if "replica" in steps and len(steps) else [None]
    shown = replicas[:TIMELINE_REPLICAS]
    for k, r in enumerate(shown):
        one = steps if r is None else steps[steps["replica"] == r]
        many = len(replicas) > 1
        name = f" (replica {r})" if many else ""
        t, waiting = _held(one, "num_waiting")
        axes[0].plot(t, waiting, label="waiting" + name, color=f"C{k}" if many else "tab:red",
                     ls="--" if many else "-", drawstyle="steps-post")
        axes[0].plot(*_held(one, "num_running", idle=0), label="running" + name, color=f"C{k}" if many else "tab:blue",
                     drawstyle="steps-post")
        t, usage = _held(one, "kv_usage")
        axes[1].plot(t, usage * 100, color=f"C{k}" if many else "tab:green", label=name.strip(" ()"),
                     drawstyle="steps-post")
        pre = one[one["num_preempted"] > 0]
        axes[2].vlines(pre["start"], 0, pre["num_preempted"], color=f"C{k}" if many else "tab:purple")
    axes[0].set_ylabel("requests")
    axes[0].legend(fontsize=8 if len(shown) > 1 else None, ncol=2 if len(shown) > 2 else 1)
    axes[1].set_ylabel("KV cache usage (%)")
    axes[1].set_ylim(0, 105)
    axes[2].set_ylabel("preemptions per step")
    axes[2].set_xlabel("simulated time (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
    more = f" ({len(shown)} of {len(replicas)} replicas shown)" if len(replicas) > len(shown) else ""
    axes[0].set_title(plain(title + more))
    return _figure(path, fig)


def capacity(table, path, by: str | None, title: str | None = None):
    """The highest rate meeting the SLOs, per configuration (servesim search max-rate). A configuration where
    no rate met them is a bar of 0 marked "none", one never simulated (it cannot run) "cannot run"; one where no
    failing rate was found (held_up_to) is hatched
    and marked ">=": its capacity is only known to be at least that (drawn at most a quarter above the others); one
    the search called not stable (it moved as the run doubled) is dotted and marked "~"."""
    import pandas as pd

    plt = _plt()
    held = pd.to_numeric(table["held_up_to"], errors="coerce").astype(float) if "held_up_to" in table else \
        pd.Series(float("nan"), index=table.index)
    if "reason" in table:  # a table written before held_up_to was a column says it in the reason
        said = table["reason"].astype("string").str.extract(r"^no failing rate found: the SLOs held up to ([0-9.e+]+)")
        said = pd.to_numeric(said[0], errors="coerce").astype(float)
        held = held.fillna(said.where(np.isfinite(said) & (said >= 0)))  # text that is no rate: not known
    from servesim.workloads.settings import MAX_RATE

    for column, values in (("max_rate", pd.to_numeric(table["max_rate"], errors="coerce")), ("held_up_to", held)):
        if (values > MAX_RATE).any():  # no search reaches past it: a damaged table (its bar drew 309 digits)
            raise ConfigError("results", f"{column} {values.max():g} req/s is past any rate a search tries "
                                         f"({MAX_RATE:g}): a damaged table")
    table = table.assign(_open=table["max_rate"].isna() & held.notna(),
                         _value=table["max_rate"].fillna(held).fillna(0),  # what is known: exact, or at least
                         # an answer that moved as the run doubled (the search's stable column) is drawn apart
                         _unstable=table["stable"].astype("string").str.lower().eq("false").fillna(False)
                         if "stable" in table else False,
                         # a configuration never simulated (its reason: not searched, it cannot run) met nothing
                         _unrun=pd.to_numeric(table["runs"], errors="coerce").eq(0) if "runs" in table else False)
    if by in table and table[by].duplicated().any():  # one bar per value: several rows at one are averaged, said
        axes = list(table.columns[:list(table.columns).index("max_rate")]) if "max_rate" in table else []
        others = [c for c in axes if c != by and table[c].nunique(dropna=False) > 1]
        print(f"servesim: warning: several rows share each {by} value (the table also varies "
              f"{', '.join(others) or 'nothing else'}): each bar is their mean max_rate; --by another column to "
              f"split them", file=sys.stderr)
        # a configuration where no rate met the SLOs counts 0 in the mean, as its own bar shows it; a bar with an
        # open-ended row is a lower bound of its mean
        table = table.groupby(by, sort=False, dropna=False).agg(_value=("_value", "mean"), _open=("_open", "any"),
                                                               _none=("max_rate", lambda r: r.isna().all()),
                                                               _unstable=("_unstable", "any"), _unrun=("_unrun", "all"))
        table = table.reset_index()
    else:
        table = table.assign(_none=table["max_rate"].isna())
    exact = table.loc[~table["_open"], "_value"]
    top = 1.25 * exact.max() if len(exact) and exact.max() > 0 else table["_value"].max() or 1.0
    heights = table["_value"].where(~table["_open"], table["_value"].clip(upper=top))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = [_value_name(v) for v in table[by]] if by in table else \
        ["scenario"] if len(table) == 1 else [f"#{i + 1}" for i in range(len(table))]
    bars = ax.bar(labels, heights, color="tab:blue")
    for i, (bar, value, open_, none, unstable, unrun) in enumerate(zip(bars, table["_value"], table["_open"],
                                                                       table["_none"], table["_unstable"],
                                                                       table["_unrun"])):
        if open_ or unstable:
            bar.set_hatch("//" if open_ else "..")
            bar.set_alpha(0.6)
        said = f"{value:.2f}" if abs(value) < 1e6 else f"{value:.3g}"  # a damaged table's 1e308: not 309 digits
        text = f">= {value:.3g}\n(no failing rate)" if open_ else "cannot run\n(not searched)" if unrun else \
            "none meets" if none and value == 0 else \
            f"~{said}\n(not stable)" if unstable else said
        ax.text(i, bar.get_height(), text, ha="center", va="bottom")
    top = heights.max() * 1.25 if heights.max() > 0 else 1.0  # room for the labels above the bars
    ax.set_ylim(0, top if np.isfinite(top) else heights.max())
    ax.set_xlabel(_label(by) if by in table else "configuration")
    ax.set_ylabel("max arrival rate meeting the SLOs (req/s)")
    ax.set_title(plain(title or "Capacity per configuration"))
    ax.grid(alpha=0.3, axis="y")
    return _figure(path, fig)


def recommendation(table, path, slos: dict, load: str, title: str | None = None):
    """`servesim recommend`'s candidates meeting the SLOs: their cost against their p99 TTFT and TPOT at the
    target rate, each labelled, the SLO targets as dotted lines; the cheapest is the leftmost point."""
    plt = _plt()
    met = table[(table["status"] == "meets") & table["usd_per_million_output_tokens"].notna()]
    # a metric no candidate has (TPOT when every output is one token) gets no panel; a candidate without it, no point
    panels = [m for m in ("p99_ttft_ms", "p99_tpot_ms") if m in met and met[m].notna().any()]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    # the other axes searched (--grid, --disagg) where candidates differ in them: two of one GPU were told apart by
    # their rank alone (r128)
    varied = [c for c in met.columns if ("." in c or c == "disaggregation") and c not in
              ("hardware.gpu", "engine.tensor_parallel_size") and met[c].astype(str).nunique() > 1]
    for ax, metric in zip(axes[0], panels):
        shown = met[met[metric].notna()]
        ax.scatter(shown["usd_per_million_output_tokens"], shown[metric], color="tab:blue")
        for _, row in shown.iterrows():
            tp = row.get("engine.tensor_parallel_size")
            others = ", ".join(f"{c.rsplit('.', 1)[-1]}={row[c]}" for c in varied)
            ax.annotate(plain(f"#{row['rank']} {row['gpu']} x{row['gpus']:g}" + (f" (TP{tp:g})" if tp == tp and tp
                                                                                  else "")
                              + (f"\n{others}" if others else "")),
                        (row["usd_per_million_output_tokens"], row[metric]), fontsize=8,
                        xytext=(4, 4), textcoords="offset points")
        if metric in slos:
            ax.axhline(slos[metric], color="tab:red", linestyle=":", label=f"SLO {slos[metric]:g} ms")
            ax.legend(loc="upper right")
        ax.set_xlabel("cost ($ per million output tokens)")
        ax.set_ylabel(_label(metric))
        ax.grid(alpha=0.3)
    unpriced = int(((table["status"] == "meets") & table["usd_per_million_output_tokens"].isna()).sum())
    fig.suptitle(plain(title or f"Deployments carrying {load} within the SLOs ({len(met)} candidates"
                       + (f"; {unpriced} more not drawn: no price" if unpriced else "") + ")"))  # (r150: unsaid)
    return _figure(path, fig)


PLOT_KINDS = ("latency-vs-rate", "pareto", "goodput", "timeline", "capacity", "recommend")
PLOT_COLUMNS = {  # what each table plot reads, beside x and by
    "latency-vs-rate": ["median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms"],
    "pareto": ["p99_tpot_ms", "output_throughput"],
    "goodput": ["request_throughput"],
    "capacity": ["max_rate"],
}


LOAD_AXIS_KINDS = ("latency-vs-rate", "goodput")  # the kinds --x is read by
UNSPLIT_KINDS = ("timeline", "recommend")  # the kinds --by is not read by


def plot_results(results, kind: str, out=None, x: str | None = None, by: str | None = None,
                 title: str | None = None) -> list[Path]:
    """`servesim plot`: a results folder (a sweep's, a search's, or a run's for the timeline) to PNG and SVG;
    out is a path without extension or a folder (default: beside the results); x the load axis (default the
    arrival rate). A flag the kind does not read is said once the plot is drawn (r143: ignored unsaid)."""
    from servesim.simulator.config import say_once
    from servesim.simulator.errors import ConfigError

    if kind not in PLOT_KINDS:
        raise ConfigError("--kind", f"one of {', '.join(PLOT_KINDS)}, got {kind!r}")
    unread = [f"--{flag}" for flag, given, kinds in (("x", x, LOAD_AXIS_KINDS),
                                                    ("by", by, [k for k in PLOT_KINDS if k not in UNSPLIT_KINDS]))
              if given is not None and kind not in kinds]
    files = _plot_results(results, kind, out, x or "workload.arrival.rate", by, title)
    say_once([f"servesim: warning: {flag} has no effect on --kind {kind}" for flag in unread])
    return files


_LOAD_AXES = "the load axis (a swept rate, or offered_rate)"


def _a_setting(column: str) -> bool:
    """A table column that is a setting the runs were given (an axis, the seed), not one they measured."""
    from servesim.simulator.config import Scenario

    return column.split(".")[0] in Scenario.model_fields


def _plot_results(results, kind: str, out, x: str, by: str | None, title: str | None) -> list[Path]:
    from servesim.simulator.errors import ConfigError
    from servesim.simulator.files import read_table

    src = Path(results)
    out = str(out) if out is not None else None
    if out and (out.endswith(("/", ".")) or Path(out).is_dir()):  # a folder: the plot goes in it
        stem = Path(out) / f"plot-{kind}"
    else:
        stem = Path(out) if out else (src if src.is_dir() else src.parent) / f"plot-{kind}"
        if stem.suffix.lower() in (".png", ".svg"):  # both are written: x.png named the stem, not x.png.png
            stem = stem.with_suffix("")
        elif stem.suffix.lower() in (".jpg", ".jpeg", ".pdf", ".gif", ".webp", ".tif", ".tiff", ".bmp", ".eps"):
            raise ConfigError("--out", f"{out}: plots are written as PNG and SVG; name a stem, or end it in .png "
                                       f"or .svg")  # (r146: {out}.png and {out}.svg were written)
    from servesim.simulator.files import refuse_folder_over_inputs, refuse_run_file

    read = src / ("steps.parquet" if kind == "timeline" else {"capacity": "max_rate.csv",
                                                              "recommend": "recommend.json"}.get(kind, "sweep.parquet")) \
        if src.is_dir() else src  # the table the plot reads: neither picture may replace it
    refuse_folder_over_inputs(stem.parent, (f"{stem.name}.png", f"{stem.name}.svg"), "--out", [read])
    if not (src.is_dir() and stem == src / f"plot-{kind}"):  # the folder's own plot of this kind is redrawn
        for suffix in (".png", ".svg"):  # (r139: refused as recommend's, listed in its manifest)
            refuse_run_file(stem.with_name(stem.name + suffix), "--out")
    if kind == "recommend":
        return _plot_recommendation(src, stem, title)
    if kind == "timeline":
        steps = src / "steps.parquet" if src.is_dir() else src
        if not steps.is_file():
            raise ConfigError("results", f"{steps} not found: give a run's output directory")
        columns = ("start", "end", "num_waiting", "num_running", "kv_usage", "num_preempted")
        table = read_table(steps, "results", columns)
        if not len(table):
            raise ConfigError("results", f"{steps} holds no steps to plot")
        _check_numbers(table, list(columns), steps, complete=("start", "end"))
        _check_steps(table, steps)
        return timeline(table, stem, title or f"run {src}")
    name = {"capacity": "max_rate.csv"}.get(kind, "sweep.parquet")
    table_path = src / name if src.is_dir() else src
    if src.is_dir() and not table_path.is_file() and (src / "sweep.csv").is_file() and kind != "capacity":
        table_path = src / "sweep.csv"  # the same table (r178: a folder holding only it was "no sweep's")
    if not table_path.is_file():
        if kind == "capacity" and src.is_dir() and (src / "replicas.csv").is_file():
            raise ConfigError("results", f"{src} holds a `search replicas` table (replicas.csv): --kind capacity "
                                         f"draws `search max-rate`'s max_rate.csv")
        want = "a `search max-rate` output directory" if kind == "capacity" else "a sweep's output directory"
        raise ConfigError("results", f"{table_path} not found: give {want}")
    table = read_table(table_path, "results")
    if "error" in table:
        failed = int(table["error"].notna().sum())
        table = table[table["error"].isna()]
        if failed and len(table):  # (r159: left out unsaid; a seed's average then over the others alone)
            from servesim.simulator.config import say_once

            say_once([f"servesim: warning: {failed} failed run(s) of {table_path} left out of the plot (column "
                      f"`error` says why): a point they belong to is drawn from its other runs, or not at all"])
    if not len(table):
        raise ConfigError("results", f"{table_path} holds no successful runs to plot")
    missing = [c for c in PLOT_COLUMNS[kind] if c not in table]
    if missing:
        raise ConfigError("results", f"{table_path} has no column {', '.join(missing)}: not a "
                                     f"{'search max-rate' if kind == 'capacity' else 'sweep'} table")
    load_axis = x if kind in LOAD_AXIS_KINDS else None
    if load_axis and by == load_axis:
        raise ConfigError("--by", f"{load_axis!r} is the --x axis already: give another column to split the lines by")
    measured = PLOT_COLUMNS[kind] + ["request_goodput"] * (kind == "goodput")
    for flag, col, also in (("--x", load_axis, ("offered_rate",)), ("--by", by, ())):
        if col and col in measured:  # (r157: a latency drawn against itself)
            raise ConfigError(flag, f"{col!r} is what the plot measures: give "
                                    f"{'a setting column to split it by' if flag == '--by' else _LOAD_AXES}")
        if col and col not in table:
            raise ConfigError(flag, f"{col!r} is not a column of {table_path}")
        if col and col not in also and not _a_setting(col):  # (r158: another measured column, a run's id)
            raise ConfigError(flag, f"{col!r} is what a run measured, not a setting it ran with: give "
                                    f"{'a setting column to split the runs by' if flag == '--by' else _LOAD_AXES}")
    if kind == "goodput" and "request_goodput" not in table:
        raise ConfigError("results", f"{table_path} has no request_goodput column: the swept scenario needs "
                                     f"workload.slo_classes")  # (r179: the table not named)
    _check_numbers(table, PLOT_COLUMNS[kind] + ["request_goodput"] * (kind == "goodput") + [load_axis] * bool(load_axis)
                   + ["held_up_to"] * (kind == "capacity" and "held_up_to" in table)
                   + ["offered_rate"] * (kind == "goodput" and "offered_rate" in table), table_path)  # (r149)
    _check_rows_agree(table, table_path, ("max_rate", "fails_at") if kind == "capacity" else None)
    measured = table[PLOT_COLUMNS[kind]].notna()  # a pareto point needs both figures, a latency panel its own
    # (a capacity table's empty max_rate is an answer: no rate met the SLOs, or the point could not run)
    if kind != "capacity" and not (measured.all(axis=1) if kind == "pareto" else measured.any(axis=1)).any():
        missing = [c for c in PLOT_COLUMNS[kind] if not measured[c].any()]
        finished = "completed" not in table or bool((table["completed"].fillna(0) > 0).any())
        why = "TPOT needs outputs of more than one token" if finished and missing and \
            all("tpot" in c for c in missing) else "no request finished in any"
        raise ConfigError("results", f"{table_path}: no run measured {', '.join(missing or PLOT_COLUMNS[kind])} "
                                     f"({why}): nothing to plot")
    if load_axis:
        unset = int(table[load_axis].isna().sum())
        if unset:  # a number axis has no place for them: dropped without a word before
            raise ConfigError("--x", f"{unset} run(s) have no {load_axis} (null): a number axis cannot place them; "
                                     f"--by {load_axis} draws them as a line of their own")
        _warn_averaged(table, load_axis, by)
    with warnings.catch_warnings():  # a log axis over a zero latency: the point is left off, as matplotlib says
        warnings.filterwarnings("ignore", message="Data has no positive values")
        from servesim.simulator.sweep import judged_slos

        slos = judged_slos(table_path.parent, table) if kind in ("latency-vs-rate", "goodput") else None
        if kind == "goodput" and not slos:
            from servesim.simulator.config import say_once

            say_once([f"servesim: note: the plot cannot state the SLOs its goodput was judged by: neither "
                      f"{table_path.parent / 'runs'} nor {table_path.parent / 'sweep.yaml'} records one set of them"])
        if kind == "latency-vs-rate":
            return latency_vs_rate(table, stem, x, by, title, slos)
        if kind == "pareto":
            return pareto(table, stem, by=by, title=title)
        if kind == "goodput":
            return goodput_vs_rate(table, stem, x, by, title, slos)
        axes = list(table.columns[:list(table.columns).index("max_rate")])  # the grid's, before the answer
        return capacity(table, stem, by or (axes[0] if axes else None), title)


def _plot_recommendation(src: Path, stem: Path, title: str | None) -> list[Path]:
    """A `servesim recommend` folder's recommend.json drawn."""
    import pandas as pd

    from servesim.simulator.files import read_settings_text

    path = src / "recommend.json" if src.is_dir() else src
    if not path.is_file():
        raise ConfigError("results", f"{path} not found: give a `servesim recommend` output directory")
    text = read_settings_text(path, "results", limit=64 << 20)
    try:
        data = json.loads(text)
        table, slos, load = pd.DataFrame(data["rows"]), data["slos"], str(data["load"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError("results", f"{path} is not a recommend.json ({type(exc).__name__})") from None
    if "status" not in table or not (table["status"] == "meets").any():
        raise ConfigError("results", f"{path}: no candidate met the SLOs, nothing to draw")
    # the SLO lines drawn: an object of positive numbers (r129: a null or a text one was an internal error)
    if not isinstance(slos, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                             and 0 < v < HUGEST for v in slos.values()):
        raise ConfigError("results", f"{path}: slos must be an object of SLO targets, each a positive number, "
                                     f"got {json.dumps(slos)[:80]}")
    drawn = [c for c in ("usd_per_million_output_tokens", "p99_ttft_ms", "p99_tpot_ms", "gpus") if c in table]
    for col in drawn:  # JSON's null is a figure the run had none of (None in an object column): NaN, left off
        v = table[col]
        if v.dtype == object and v.map(lambda x: x is None or isinstance(x, (int, float))
                                       and not isinstance(x, bool)).all():
            table[col] = v.astype(float)
    _check_numbers(table, drawn, path)  # anything else (text, true/false) is named
    for col in ("rank", "gpu"):  # each drawn point's label (r149: a KeyError without them)
        if col not in table or table[col].isna().any():
            raise ConfigError("results", f"{path}: every row needs its {col}")
    if "engine.tensor_parallel_size" in table:
        _check_numbers(table, ["engine.tensor_parallel_size"], path)  # (r149: text was an internal error)
    _check_rows_agree(table, path)
    _check_ranked(table, slos, path)
    met = table[(table["status"] == "meets") & table.get("usd_per_million_output_tokens", pd.Series(
        index=table.index, dtype=float)).notna()]
    if not any(m in met and met[m].notna().any() for m in ("p99_ttft_ms", "p99_tpot_ms")):
        raise ConfigError("results", f"{path}: no candidate meeting the SLOs has a price and a p99 TTFT or TPOT, "
                                     f"nothing to draw")
    return recommendation(table, stem, slos, load, title)


def _row(mask) -> int:
    """The first row (from 1) a boolean mask marks."""
    return int(np.argmax(np.asarray(mask, dtype=bool))) + 1


def _check_rows_agree(table, where, bracket: tuple[str, str] | None = None) -> None:
    """A table as servesim writes it (r157: contradictory rows were drawn silently): no two rows with the same
    settings (a run or candidate twice: averaged, or two labels on one point), and a search's answer below the
    rate it failed at (`bracket`: the answer's and the failing end's columns)."""
    settings = [c for c in table.columns if _a_setting(c)]
    if settings:
        twice = table[settings].astype(str).duplicated()
        if twice.any():
            raise ConfigError("results", f"{where}: row {_row(twice)} repeats an earlier row's settings: not a "
                                         f"table servesim writes")
    if bracket and bracket[1] in table:
        answer, fails = (_numeric(table[c]) for c in bracket)
        crossed = (answer >= fails).fillna(False)
        if crossed.any():
            raise ConfigError("results", f"{where}: row {_row(crossed)} has its {bracket[0]} at or above its "
                                         f"{bracket[1]} (the rate it failed at): not a table servesim writes")


def _numeric(column):
    import pandas as pd

    return pd.to_numeric(column, errors="coerce")


def _check_ranked(table, slos: dict, where) -> None:
    """recommend.json's rows as recommend ranks them: ranks 1, 2, ... in order, the candidates meeting the SLOs
    first, cheapest first, each within every SLO its row measures."""
    from servesim.simulator.search import AT_LEAST

    rank = _numeric(table["rank"])
    if not (rank.to_numpy() == np.arange(1, len(table) + 1)).all():
        raise ConfigError("results", f"{where}: the rows' ranks are not 1, 2, ... in order: not a table "
                                     f"recommend writes")
    meets = (table["status"] == "meets").to_numpy()
    if (np.diff(meets.astype(int)) > 0).any():
        raise ConfigError("results", f"{where}: row {_row(np.diff(meets.astype(int)) > 0) + 1} meets the SLOs "
                                     f"below one that does not: not a ranking recommend writes")
    for key, target in slos.items():
        column = key if key in table else f"slo_{key}"
        if column not in table:
            continue
        value = _numeric(table[column])
        missed = meets & (value < target if key in AT_LEAST else value > target).fillna(False).to_numpy()
        if missed.any():
            raise ConfigError("results", f"{where}: row {_row(missed)} meets the SLOs with {column} "
                                         f"{value[missed].iloc[0]:g} past its target {target:g}: not a table "
                                         f"recommend writes")
    if "usd_per_million_output_tokens" in table:
        price = _numeric(table["usd_per_million_output_tokens"])[meets].dropna()
        dearer = price.diff() < 0
        if dearer.any():
            raise ConfigError("results", f"{where}: row {int(price.index[dearer.to_numpy()][0]) + 1} is cheaper "
                                         f"than a candidate ranked above it: not a ranking recommend writes")


def _check_steps(table, where) -> None:
    """A run's steps as it wrote them (r149: an `end` before its start or steps out of order drew a scribble, a KV
    usage past 1 was clipped): each ends after it starts, each replica's in time order, usage a share."""
    replica = table["replica"] if "replica" in table else np.zeros(len(table))
    for name, bad in (("an end before its start", table["end"] < table["start"]),
                      ("a kv_usage above 1", table["kv_usage"] > 1),
                      ("a start before its replica's step before it",
                       table.groupby(replica, sort=False)["start"].diff() < 0)):
        if bad.any():
            raise ConfigError("results", f"{where}: row {_row(bad)} has {name}: not the "
                                         f"steps a run writes")


HUGEST = 1e15  # past any latency (ms), rate or time a run writes: a damaged table (matplotlib's ticks overflow)


def _check_numbers(table, columns: list[str], where, complete: tuple[str, ...] = ()) -> None:
    """A plotted column must hold numbers, finite, non-negative and below HUGEST (NaN: a run with nothing to
    measure, left off, except in `complete` columns such as a step's start). A damaged table was drawn as text tick
    labels, or crashed deep in matplotlib."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    from servesim.simulator.errors import ConfigError

    for col in columns:
        v = table[col]
        if col in complete and v.isna().any():
            raise ConfigError("results", f"{where}: column {col} has no value in row "
                                         f"{int(np.argmax(v.isna().to_numpy())) + 1}: every step has one")
        if v.isna().all():  # nothing measured in any run (a sweep whose requests all failed writes it untyped)
            table[col] = v.astype(float)
            continue
        if not is_numeric_dtype(v) or is_bool_dtype(v):
            raise ConfigError("results", f"{where}: column {col} must hold numbers, got {v.dtype} "
                                         f"(e.g. {v.dropna().iloc[0]!r:.40})" if v.notna().any() else
                                         f"{where}: column {col} must hold numbers, got {v.dtype}")
        x = v.to_numpy(dtype=float)
        bad = v.notna() & ~(np.isfinite(x) & (x >= 0) & (x <= HUGEST))
        if bad.any():
            raise ConfigError("results", f"{where}: column {col} must be finite, non-negative and at most "
                                         f"{HUGEST:g}, got "
                                         f"{float(v[bad].iloc[0])!r} (row {_row(bad)})")


def _warn_averaged(table, x: str, by: str | None) -> None:
    """A point per load value averages the runs at it: over seeds, as meant, but over another swept setting it
    mixes deployments (4 and 64 sequences averaged to a TTFT neither has). Said, with the flag that splits it."""
    from servesim.simulator.config import Scenario

    settings = [c for c in table.columns if ("." in c or c in Scenario.model_fields) and c not in (x, by, "seed")]
    per_point = [x] + ([by] if by else [])  # what one drawn point holds fixed: a zipped axis moves with the load
    swept = [c for c in settings if table.groupby(per_point, dropna=False)[c].nunique(dropna=False).max() > 1]
    if swept:
        print(f"servesim: warning: the table also varies {', '.join(swept)}: each point averages over "
              f"{'it' if len(swept) == 1 else 'them'} (split the lines with --by {swept[0]})", file=sys.stderr)

