"""The run's picture: TTFT and inter-token-latency distributions."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def latency_distributions(result, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = result.requests[result.requests["status"] == "finished"]
    ttft = done["ttft"].to_numpy() * 1000
    itl = result.itls * 1000
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
        ax.set_title(title)
        ax.set_xlabel("milliseconds (log scale)")
        ax.set_ylabel("requests" if ax is axes[0] else "token gaps (log scale)")
    s = result.summary
    fig.suptitle(f"{result.config.get('name', '')}: {s['completed']} requests, "
                 f"{s['request_throughput']:.2f} req/s, {s['num_preemptions']} preemptions")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
