"""Verdict arithmetic on the metrics DataFrame (pure pandas; no plotting).

Every notebook writes its criterion as code with these helpers before it looks at a result, then
calls `Verdict.write` so that `make report` can collect the verdicts into REPORT.md.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from ragen_lib import runs

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "REPRODUCED", "NOT REPRODUCED", "INCONCLUSIVE"


def curve(df: pd.DataFrame, metric: str, by: list[str]) -> pd.DataFrame:
    """Mean of `metric` per step over seeds, for each combination of `by`; NaN rows dropped."""
    d = df.dropna(subset=[metric]) if metric in df else df.iloc[:0]
    return (
        d.groupby([*by, "step"], dropna=False)[metric].mean().reset_index()
        if len(d)
        else pd.DataFrame(columns=[*by, "step", metric])
    )


def peak_final(values: pd.Series) -> tuple[float, float, int | None]:
    """(peak, final, step of peak) of a step-indexed series; NaNs ignored."""
    v = values.dropna()
    if v.empty:
        return float("nan"), float("nan"), None
    return float(v.max()), float(v.iloc[-1]), int(v.idxmax())


def collapse_step(values: pd.Series, frac: float = 0.5, min_peak: float = 0.05) -> int | None:
    """First step after the peak where the value falls below `frac` × peak; None when it never
    does or the peak is below `min_peak` (nothing learned, nothing to collapse)."""
    v = values.dropna()
    if v.empty or v.max() < min_peak:
        return None
    after = v.loc[v.idxmax() :]
    below = after[after < frac * v.max()]
    return int(below.index[0]) if len(below) else None


def drop_step(values: pd.Series, frac: float = 0.5) -> int | None:
    """First step where the value falls below `frac` × its maximum over the first third."""
    v = values.dropna()
    if len(v) < 3:
        return None
    ref = v.iloc[: max(1, len(v) // 3)].max()
    below = v[(v < frac * ref) & (v.index > v.index[0])]
    return int(below.index[0]) if ref > 0 and len(below) else None


def success_metric(df: pd.DataFrame) -> str:
    """Validation success when the runs validated, else training success."""
    return "val/success" if "val/success" in df and df["val/success"].notna().any() else "rollout/success"


def series(df: pd.DataFrame, metric: str, **where) -> pd.Series:
    """Step-indexed mean of `metric` over the rows matching `where` (column=value), seeds pooled.
    Column names with dots or slashes go in as keyword arguments via **{"cfg.env.name": ...}."""
    part = df
    for col, value in where.items():
        part = part[part[col] == value]
    c = curve(part, metric, [])
    return c.set_index("step")[metric] if len(c) else pd.Series(dtype=float)


def late_mean(values: pd.Series, frac: float = 1 / 3) -> float:
    """Mean over the last `frac` of the logged steps (at least one): "final" performance that one
    noisy last step does not decide."""
    v = values.dropna()
    if v.empty:
        return float("nan")
    return float(v.iloc[-max(1, round(len(v) * frac)) :].mean())


def late_table(df: pd.DataFrame, metric: str, by: str | list[str]) -> pd.DataFrame:
    """One row per combination of `by`: the late mean of `metric` (seeds averaged per step first)."""
    by = [by] if isinstance(by, str) else list(by)
    rows = []
    for key, part in df.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        c = curve(part, metric, [])
        rows.append({**dict(zip(by, key)), f"late {metric}": late_mean(c.set_index("step")[metric])})
    return pd.DataFrame(rows)


def early_mean(values: pd.Series, frac: float = 1 / 3) -> float:
    v = values.dropna()
    if v.empty:
        return float("nan")
    return float(v.iloc[: max(1, round(len(v) * frac))].mean())


def lead(indicator: pd.Series, collapse: int | None, frac: float = 0.5) -> int | None:
    """Early-warning lead: steps from the indicator's drop (`drop_step`) to the reward collapse.
    Positive: the indicator warned first. None when either event never happens."""
    drop = drop_step(indicator, frac)
    return None if drop is None or collapse is None else collapse - drop


def slope(values: pd.Series) -> float:
    """Least-squares slope per step (NaN with fewer than 3 points): the trend of a curve."""
    v = values.dropna()
    if len(v) < 3:
        return float("nan")
    x = v.index.to_numpy(dtype=float)
    y = v.to_numpy(dtype=float)
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x**2).sum())


def early_late_reasoning(samples: pd.DataFrame, width: int = 160) -> pd.DataFrame:
    """Paper Table 1: per run, the first-turn reasoning at its first and last logged step, for an
    initial state (seed) logged at both when there is one, so templates show side by side."""
    rows = []
    for run_id, part in samples.groupby("run_id", sort=True):
        first, last = part["step"].min(), part["step"].max()
        common = sorted(set(part[part["step"] == first]["seed"]) & set(part[part["step"] == last]["seed"]))
        for step in sorted({first, last}):
            at = part[part["step"] == step]
            pick = at[at["seed"] == common[0]] if common else at
            s = pick.iloc[0]
            think = (s["thinks"] or [""])[0] if isinstance(s["thinks"], list) else ""
            rows.append(
                {
                    "run_id": run_id,
                    "when": "early" if step == first else "late",
                    "step": int(step),
                    "seed": s["seed"],
                    "reward": s.get("reward"),
                    "reasoning": (think or "(no <think> parsed)")[:width],
                }
            )
    return pd.DataFrame(rows)


@dataclass
class Verdict:
    notebook: str
    claim: str
    status: str
    measured: dict
    paper: dict
    reason: str
    figures: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        rows = "\n".join(
            f"  {k:<40} measured {_fmt(self.measured.get(k))}   paper {_fmt(v)}"
            for k, v in self.paper.items()
        )
        extra = "\n".join(
            f"  {k:<40} measured {_fmt(v)}" for k, v in self.measured.items() if k not in self.paper
        )
        return f"{self.status}: {self.claim}\n{rows}\n{extra}\n  why: {self.reason}".replace("\n\n", "\n")

    def write(self, profile: str, wall_s: float | None = None) -> Path:
        out = runs.output_root(profile) / "verdicts" / f"{self.notebook}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps({**asdict(self), "wall_s": wall_s, "commit": runs.git_commit()}, indent=1, default=str)
        )
        return out


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.3g}"
    return str(v)


def report(profile: str) -> Path:
    """outputs/<profile>/REPORT.md: one row per notebook verdict, with numbers and figure links."""
    import torch

    base = runs.output_root(profile)
    rows = [json.loads(p.read_text()) for p in sorted((base / "verdicts").glob("*.json"))]
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    lines = [
        f"# Replication report: profile `{profile}`",
        "",
        f"Device: {device}. Commit: {runs.git_commit()}. Total wall time of the notebooks: "
        f"{sum(r.get('wall_s') or 0 for r in rows) / 60:.1f} min.",
        "",
    ]
    if profile == "smoke":
        lines += [
            "**Smoke profile: a tiny random model on CPU. This proves the pipeline runs end to end; "
            "its verdicts say nothing about the paper's findings.**",
            "",
        ]
    lines += ["| notebook | claim | verdict | measured vs paper | figures |", "|---|---|---|---|---|"]
    for r in rows:
        nums = "; ".join(f"{k}: {_fmt(r['measured'].get(k))} vs {_fmt(v)}" for k, v in r["paper"].items())
        figs = " ".join(f"[{Path(f).stem}](figures/{Path(f).name})" for f in r["figures"])
        lines.append(f"| {r['notebook']} | {r['claim']} | **{r['status']}** | {nums} | {figs} |")
    out = base / "REPORT.md"
    out.write_text("\n".join(lines) + "\n")
    return out
