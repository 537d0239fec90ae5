"""One seaborn look for every figure; curves with a seed band and the format-valid rate beside."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from ragen_lib import runs
from ragen_lib.metrics import label

ROOT = Path(__file__).resolve().parent.parent


def theme() -> None:
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")


def curves(
    df: pd.DataFrame, metrics: list[str], hue: str, *, col: str | None = None, title: str = ""
) -> plt.Figure:
    """One row per metric (rollout/format_valid always added last), one column per `col` value; lines
    by `hue`, the band is the spread over seeds. The warm-up each run had goes in the title."""
    theme()
    fmt = "rollout/format_valid"
    metrics = [m for m in metrics if m in df] + ([fmt] if fmt not in metrics else [])
    cols = sorted(df[col].dropna().unique()) if col else [None]
    fig, axes = plt.subplots(
        len(metrics), len(cols), figsize=(4.2 * len(cols), 2.6 * len(metrics)), squeeze=False, sharex=True
    )
    for j, c in enumerate(cols):
        part = df if c is None else df[df[col] == c]
        for i, m in enumerate(metrics):
            ax = axes[i][j]
            data = part.dropna(subset=[m])
            if len(data):
                sns.lineplot(
                    data=data,
                    x="step",
                    y=m,
                    hue=hue,
                    ax=ax,
                    errorbar=("pi", 100),
                    legend=(i == 0 and j == len(cols) - 1),
                )
            ax.set_title(f"{c}" if i == 0 and c is not None else "")
            ax.set_ylabel(label(m))
    col_w = "cfg.train.warmup"
    warm = ", ".join(sorted(df[col_w].dropna().astype(str).unique())) if col_w in df else "none"
    fig.suptitle(f"{title}  (warm-up: {warm})", y=1.0)
    _stamp(fig, df)
    fig.tight_layout()
    return fig


def bars(df: pd.DataFrame, x: str, y: str, *, hue: str | None = None, title: str = "") -> plt.Figure:
    theme()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    sns.barplot(data=df, x=x, y=y, hue=hue, ax=ax, errorbar=None)
    ax.set_title(title)
    if df[x].nunique() > 3:  # long variant names overlap otherwise
        plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    _stamp(fig, df)
    fig.tight_layout()
    return fig


def _stamp(fig, df: pd.DataFrame) -> None:
    if "profile" in df and (df["profile"] == "smoke").any():
        fig.text(
            0.5,
            0.5,
            "SMOKE: tiny random model,\npipeline check, not science",
            ha="center",
            va="center",
            fontsize=16,
            color="red",
            alpha=0.25,
            rotation=20,
        )


def save(fig: plt.Figure, profile: str, name: str) -> str:
    out = runs.output_root(profile) / "figures" / f"{name}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    return str(out.relative_to(ROOT)) if out.is_relative_to(ROOT) else str(out)
