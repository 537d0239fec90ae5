"""Figures a reviewer can trust: one look, one palette and legend per figure, fixed rate axes.

Rules every figure follows (issue 16): one palette and `hue_order` shared by all panels and one
legend for the figure, in natural (numeric) order; success and format-valid axes fixed to [0, 1];
sparse series (validation) drawn with markers; axis labels from `metrics.label`; the env's chance
(random play) and best-possible (expert) success as reference lines, each arm's own as the verdicts
take them; every seed drawn thin and the mean over seeds bold where every seed has a value (a line
breaks at a logged step where it has none, never bridges it), each arm's mean in its own dash as
well as colour (two equal curves stay visible); the seeds (per panel column where they differ),
steps, validation states and any unfinished run in the title; a format-valid rate beside every
success, curve or bar; error bars (95% Student t CI over seeds, as the verdicts' intervals) on
every bar, a caret at the edge of a rate axis where one runs past it, and the value written on a bar
too low to see (a gap is a bar with no run); one `hue_order` per notebook where it draws several
figures of one set of arms, so an arm keeps its colour in each; no offset notation on any axis.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from ragen_lib import models
from ragen_lib.analysis.reporting import results_folder
from ragen_lib.metrics import format_rate_of, is_rate, label, natural_key

ROOT = Path(__file__).resolve().parent.parent
SEED = "cfg.train.seed"
ENV = "cfg.env.name"
NO_REFERENCES = "several envs: no chance / expert lines"
#: A panel whose metric has no value in its runs (NaN: no `<think>` tag matched; memory on a CPU).
NO_DATA = "no data"
WARMUP = "cfg.train.warmup"
FORMAT = "format_valid"
"""`per_seed`'s column for the format-valid rate of the episodes a success score averaged."""
STEPS, VAL_SIZE = "cfg.train.steps", "cfg.train.val_size"
UNFINISHED = "unfinished_runs"
"""`per_seed`'s column naming the runs of a seed that did not finish (', '-joined; '' where none)."""
RUN_FACTS = ("cfg.model.name", WARMUP, "profile", STEPS, VAL_SIZE)
"""Columns of a run that every figure's title or stamp reads; `per_seed` carries them over."""


def theme() -> None:
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")


def axis_name(column: str) -> str:
    """A readable axis name: the metric's label, or a config column's last part ("cfg.env.name" → "env")."""
    if column.startswith("cfg."):
        parts = column.split(".")
        return parts[-2] if parts[-1] == "name" else parts[-1].replace("_", " ")
    return label(column)


def order(values) -> list:
    return sorted(pd.Series(values).dropna().unique(), key=natural_key)


DASHES = ["-", (0, (6, 2)), (0, (1.5, 1.5)), (0, (6, 2, 1.5, 2))]
"""The mean line of the i-th arm: its dash as well as its colour, so an arm whose curve equals
another's is seen under it (04's PPO under StarPO-S, 07's adaptive under refresh)."""


def palette(hue_order: list) -> dict:
    """One colour per hue value, shared by every panel of a figure."""
    colours = sns.color_palette("colorblind", max(len(hue_order), 1))
    return {h: colours[i % len(colours)] for i, h in enumerate(hue_order)}


def _arms(df: pd.DataFrame, hue: str, hue_order: list | None) -> list:
    """The arms' order that sets colours: `hue_order` where given (it may name arms the frame
    lacks), else the frame's in natural order. An arm of the frame that `hue_order` leaves out is
    an error: it would not be drawn."""
    if hue_order is None:
        return order(df[hue])
    missing = [h for h in order(df[hue]) if h not in hue_order]
    if missing:
        raise ValueError(
            f"plots: hue_order lacks {missing}, arms of this frame's {hue!r}: it would leave them "
            "undrawn; pass the order of every arm (e.g. plots.order(df[hue]) of the whole frame)"
        )
    return list(hue_order)


def _env_of(metric: str, part: pd.DataFrame) -> str | None:
    """The env whose success `metric` measures in this panel (None when several)."""
    if metric.startswith("val/success/"):
        return metric.split("/", 2)[2]
    if "success" in metric and ENV in part:
        envs = part[ENV].dropna().unique()
        return str(envs[0]) if len(envs) == 1 else None
    return None


def _references(ax, env: str | None, part: pd.DataFrame, hue: str, colours: dict) -> str | None:
    """Draw `env`'s random-play and expert success, each arm's as the verdicts take it
    (`analysis.arm_reference`: the action budget, env.kwargs and validation states its runs used);
    one grey pair where every arm shares them ("shared"), else a pair per arm in its colour
    ("per arm"). None where there is no one env to draw."""
    if env is None:
        return None
    from ragen_lib import analysis

    try:
        refs = {
            h: analysis.arm_reference(part[part[hue] == h], env) for h in colours if (part[hue] == h).any()
        }
    except Exception:  # an env without a floor (unknown name, odd kwargs): no lines, not a failed figure
        return None
    if not refs:
        return None
    shared = len({(r.floor, r.ceiling) for r in refs.values()}) == 1
    for h, (floor, ceiling, _states) in [(None, next(iter(refs.values())))] if shared else refs.items():
        colour = ("0.45", "0.2") if shared else (colours[h], colours[h])
        ax.axhline(floor, color=colour[0], ls="--", lw=1, zorder=1, gid="chance")
        ax.axhline(ceiling, color=colour[1], ls=":", lw=1.2, zorder=1, gid="expert")
    return "shared" if shared else "per arm"


def _wrap(text: str, width: int) -> str:
    """`text` on lines of at most `width` characters, broken at spaces only (a name stays whole)."""
    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)


FLAT_SPAN = 1e-3
"""The least height of a value axis, relative to its values' size: a curve that moves less draws
flat (the tiny model's entropy moved 1e-6 around 10.79, drawn across the whole panel, its ticks
10.7898684, wide enough to crowd the next column)."""


def _plain(ax) -> None:
    """No offset: the ticks show the values themselves, in scientific notation only where they are
    under 1e-3 or over 1e6 in size (a loss of 1e-14 drew every tick as 0.0000000000000000). A value
    axis spans at least FLAT_SPAN of its values' size."""
    low, high = ax.get_ylim()
    least = FLAT_SPAN * max(abs(low), abs(high))
    if 0 < high - low < least:
        mid = (low + high) / 2
        ax.set_ylim(mid - least / 2, mid + least / 2)
    for axis in ("x", "y"):
        try:
            ax.ticklabel_format(axis=axis, useOffset=False, style="sci", scilimits=(-3, 6))
        except AttributeError:  # a categorical axis has no ScalarFormatter
            pass


def span(values) -> str:
    """'4' or '1–4' of whole numbers (a `per_seed` fact joins a bar's values with ', ')."""
    nums = sorted({int(float(x)) for v in values for x in str(v).split(", ") if x not in ("", "nan")})
    return "" if not nums else f"{nums[0]}" if nums[0] == nums[-1] else f"{nums[0]}–{nums[-1]}"


def seeds_text(df: pd.DataFrame, hue: str, col: str | None = None) -> str:
    """'4 seeds per line', or per panel column where they differ ('seeds per line: bandit 4,
    frozenlake 1'): pooled, 01's one-seed FrozenLake pilot read as a 4-seed mean."""
    if SEED not in df:
        return "seeds: unknown"
    keys = [k for k in (col, hue) if k and k in df]
    n = df.groupby(keys)[SEED].nunique() if keys else pd.Series([df[SEED].nunique()])
    lo, hi = int(n.min()), int(n.max())
    if lo == hi:
        return f"{lo} seed{'s' if hi > 1 else ''} per line"
    if col and col in df:
        per = n.groupby(level=0).agg(lambda x: span(x.tolist()))
        return "seeds per line: " + ", ".join(f"{c} {per[c]}" for c in order(per.index))
    return f"{span(n)} seeds per line"


def design_text(df: pd.DataFrame, *, steps: bool = True) -> str:
    """'; 150 steps, validation 128 states' from the runs' configs ('30–150' where they differ;
    '' where the frame does not say): a pilot beside a judged run is told apart."""
    parts = []
    if steps and STEPS in df and (n := span(df[STEPS].dropna())):
        parts.append(f"{n} steps")
    if VAL_SIZE in df and (n := span(df[VAL_SIZE].dropna())):
        parts.append(f"validation {n} states")
    return "; " + ", ".join(parts) if parts else ""


def with_format_rates(metrics: list[str], df: pd.DataFrame) -> list[str]:
    """The logged `metrics`, then the format-valid rates that go with them: training's always, and
    each validation success's own (val/success[/env] → val/format_valid[/env], where logged). With
    the small model a success curve may be format learning; its format-valid rate says which."""
    shown = [m for m in metrics if m in df]
    formats = ["rollout/format_valid"] + [format_rate_of(m) for m in shown if m.startswith("val/success")]
    return shown + [f for f in formats if f not in shown and (f in df or f == "rollout/format_valid")]


def curves(
    df: pd.DataFrame,
    metrics: list[str],
    hue: str,
    *,
    col: str | None = None,
    title: str = "",
    hue_order: list | None = None,
) -> plt.Figure:
    """One row per metric, one column per `col` value; one colour per `hue` value (the same in
    every panel), each seed thin, the seeds' mean bold; the format-valid rates last (`with_format_rates`).
    `hue_order`: the arms' order, which sets their colours and dashes (default: the frame's arms in
    natural order); pass one order to every figure of a notebook and an arm keeps its colour in each."""
    if (empty := _nothing_stored(df, "curves", title)) is not None:
        return empty
    theme()
    metrics = with_format_rates(metrics, df)
    hue_order = _arms(df, hue, hue_order)
    colours = palette(hue_order)
    cols = order(df[col]) if col else [None]
    drew_references = set()  # the legend names the reference lines only where a panel has them
    fig, axes = plt.subplots(
        len(metrics), len(cols), figsize=(4.2 * len(cols), 2.6 * len(metrics)), squeeze=False, sharex="col"
    )  # per column: Bandit's 150 steps squeezed FrozenLake's 30 into a fifth of its panel
    for j, c in enumerate(cols):
        part = df if c is None else df[df[col] == c]
        for i, m in enumerate(metrics):
            ax = axes[i][j]
            data = part.dropna(subset=[m]) if m in part else part.iloc[:0]
            sparse = len(data) and data.groupby("run_id")["step"].nunique().max() < part["step"].nunique()
            # A run's steps for this metric: those where it logged the metric's family (`val/`:
            # every val_every; online-k: every k-th step). A line breaks at one of them where the
            # metric has no value (reasoning length where no tag matched), never bridges it.
            family = [x for x in part.columns if "/" in x and x.split("/")[0] == m.split("/")[0]] or [m]
            for n_h, h in enumerate(hue_order):
                d = data[data[hue] == h]
                if d.empty:
                    continue
                key = SEED if SEED in d else "run_id"  # seeds, not rows: a sweep may share one
                runs_h = part[(part[hue] == h) & part[family].notna().any(axis=1)]
                steps_of = {}
                for k, seed_part in runs_h.groupby(key):
                    line = seed_part.groupby("step")[m].mean()
                    last = line.last_valid_index()
                    line = line[line.index <= last] if last is not None else line.iloc[:0]
                    steps_of[k] = set(line.index)
                    ax.plot(line.index, line.values, color=colours[h], lw=0.7, alpha=0.35)
                # The mean only where every seed of the line has a value: past a seed that stopped
                # early it would be the mean of the others, a jump that reads as a collapse.
                every = d.groupby("step")[key].nunique() == d[key].nunique()
                mean = d.groupby("step")[m].mean().where(every)
                last = mean.last_valid_index()  # None: no step where every seed has a value
                common = set.intersection(*steps_of.values()) if steps_of else set()
                mean = mean.reindex(sorted(s for s in common if last is not None and s <= last))
                ax.plot(
                    mean.index,
                    mean.values,
                    color=colours[h],
                    lw=2.2,
                    ls=DASHES[n_h % len(DASHES)],
                    marker="o" if sparse else None,
                    ms=4,
                )
            if is_rate(m):
                ax.set_ylim(-0.03, 1.03)
                if drawn := _references(ax, _env_of(m, part), part, hue, colours):
                    drew_references.add(drawn)
                elif "success" in m and len(data) and ENV in data and data[ENV].nunique() > 1:
                    # Each env has its own chance and expert level: one pair of lines would mislead.
                    ax.text(
                        0.99,
                        0.97,
                        NO_REFERENCES,
                        transform=ax.transAxes,
                        ha="right",
                        va="top",
                        fontsize=7,
                        color="0.4",
                    )
            if not len(data):  # a blank panel reads as a drawing error
                ax.text(
                    0.5,
                    0.5,
                    f"{NO_DATA}: {label(m)} has no value in these runs",
                    transform=ax.transAxes,
                    ha="center",
                    va="center",
                    wrap=True,
                    fontsize=8,
                    color="0.4",
                )
            _plain(ax)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
            ax.set_title(f"{c}" if i == 0 and c is not None else "")
            ax.set_ylabel(_wrap(label(m), 24))  # a panel is 2.6 in tall: longer labels ran into the next
            ax.set_xlabel("step" if i == len(metrics) - 1 else "")
    # Colours and dashes follow `hue_order`, which may name arms this frame lacks (a notebook's one
    # order for all its figures, so an arm keeps its colour from figure to figure); the legend names
    # only the arms drawn.
    present = set(df[hue].dropna())
    shown = [(i, h) for i, h in enumerate(hue_order) if h in present]
    handles = [Line2D([], [], color=colours[h], lw=2.2, ls=DASHES[i % len(DASHES)]) for i, h in shown]
    names = [str(h) for _, h in shown]
    if drew_references:
        handles += [Line2D([], [], color="0.45", ls="--"), Line2D([], [], color="0.2", ls=":")]
        names += ["random play (chance)", "expert (best possible)"]
        if "per arm" in drew_references:  # 05's Table 3: each arm's budget has its own levels
            names = [
                *names[:-2],
                "random play (chance; an arm's colour: its own)",
                "expert (an arm's colour: its own)",
            ]
    legend = fig.legend(handles, names, loc="upper left", bbox_to_anchor=(1.0, 0.95), frameon=False)
    warm = warmups_text(df) or "none"
    fig.suptitle(
        f"{title}\n{seeds_text(df, hue, col)} (thin: each seed, bold: mean where every seed has a value)"
        f"{design_text(df, steps=False)}; warm-up: {warm}{unfinished_text(df)}{models_text(df)}",
        y=1.0,
    )
    _stamp(fig, df)
    fig.tight_layout()
    # The legend's top at the panels' top, under the title: at a fixed 0.95 a title of three lines
    # over one column of panels (06's) ran into the legend's first names.
    legend.set_bbox_to_anchor((1.0, axes[0][-1].get_position().y1), transform=fig.transFigure)
    return fig


def bars(
    df: pd.DataFrame,
    x: str,
    y: str,
    *,
    hue: str | None = None,
    title: str = "",
    ylabel: str | None = None,
    metric: str | None = None,
    hue_order: list | None = None,
) -> plt.Figure:
    """Bars of the mean over seeds with 95% Student t CI error bars over seeds (one row of `df` per
    seed and bar; a bar from one seed has no error bar, and the title says how many seeds there
    were, the steps and validation states, and the seeds of unfinished runs, scored on the steps
    they logged).
    `metric`: the metric `y` summarises (fixes a rate axis to [0, 1] and names the axis). Where `df`
    has a `FORMAT` column (`per_seed` of a success metric), a panel below shows each bar's
    format-valid rate on the same episodes. `hue_order`: as `curves`' (colours by a notebook's one
    order of arms; the bars and legend show the arms present)."""
    if (empty := _nothing_stored(df, "bars", title)) is not None:
        return empty
    theme()
    x_order = order(df[x])
    arms = _arms(df, hue, hue_order) if hue else None
    colours = palette(arms) if hue else None
    hue_order = [h for h in arms if h in set(df[hue])] if hue else None  # the bars: arms present
    # Wide enough for every bar: a fixed 6.5 inches squeezed 03's 9 variants x 3 envs into a strip.
    per_x = 0.45 * (1 + 0.5 * (len(hue_order) - 1)) if hue else 0.45
    width = min(18.0, max(6.5, 2.5 + per_x * len(x_order)))
    formats = FORMAT in df and df[FORMAT].notna().any()
    if formats:
        fig, (ax, fax) = plt.subplots(
            2, 1, figsize=(width, 5.6), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]}
        )
    else:
        fig, ax = plt.subplots(figsize=(width, 3.8))

    def draw(axes, column, legend):
        sns.barplot(
            data=df,
            x=x,
            y=column,
            hue=hue,
            order=x_order,
            hue_order=hue_order,
            palette=colours,
            color=None if hue else sns.color_palette("colorblind")[0],
            errorbar=t_ci,
            capsize=0.15,
            err_kws={"linewidth": 1.2},
            ax=axes,
            legend=legend,
        )

    draw(ax, y, bool(hue))
    m = metric or y
    cut = _rate_axis(ax) if is_rate(m) else False
    _label_flat_bars(ax)
    if formats:  # with the small model a success bar may be format learning: this rate says which
        draw(fax, FORMAT, False)
        cut = _rate_axis(fax) or cut
        _label_flat_bars(fax)
        fax.set_ylabel(_wrap("format-valid (same episodes)", 18))
    n = df.groupby([x] + ([hue] if hue else []))[SEED].nunique() if SEED in df else pd.Series([1])
    seeds = span(n)
    warm = warmups_text(df)
    unfinished = unfinished_runs(df)
    ax.set_title(
        f"{title}\nmean of {seeds} seed(s) per bar, error bars: 95% t CI over seeds"
        + ("; ▲/▼: it runs past the axis" if cut else "")
        + design_text(df)
        + (f"; warm-up: {warm}" if warm else "")
        + (f"; unfinished: {unfinished} run(s), scored on the steps logged" if unfinished else "")
        + models_text(df)
    )
    # wrapped as the curves' are: 06's "success (val) on the shifted env" ran into the title
    ax.set_ylabel(_wrap(ylabel or label(m), 24))
    bottom = fax if formats else ax
    ax.set_xlabel("" if formats else axis_name(x))
    bottom.set_xlabel(axis_name(x))
    _plain(ax)
    # Long variant names wrap onto lines of their own instead of pushing the bars into a strip.
    bottom.set_xticks(bottom.get_xticks(), [_wrap(label(t.get_text()), 16) for t in bottom.get_xticklabels()])
    if df[x].nunique() > 6:  # many names still overlap side by side
        plt.setp(bottom.get_xticklabels(), rotation=30, ha="right")
    if hue:
        ax.legend(title=None, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    _stamp(fig, df)
    fig.tight_layout()
    return fig


def _rate_axis(ax) -> bool:
    """[0, 1], with a caret at the edge where an error bar runs past it (▲ above 1, ▼ below 0): a t
    interval of 2-3 seeds can span several units, which an axis widened to hold it would squeeze
    every bar into, and an axis that cut it silently drew the bar tighter than the verdict's
    interval. True where a caret was drawn (the title says what it means)."""
    ax.set_ylim(0, 1)
    cut = False
    for line in list(ax.lines):  # a bar axis's lines are its error bars (with caps: NaN-separated)
        x, y = (np.asarray(v, float) for v in line.get_data())
        if not np.isfinite(y).any():
            continue
        centre = float(np.nanmean(x))  # the caps are symmetric about the bar's centre
        for past, edge, marker in ((np.nanmax(y) > 1, 1.0, "^"), (np.nanmin(y) < 0, 0.0, "v")):
            if past:
                ax.plot([centre], [edge], marker=marker, color="0.15", ms=6, clip_on=False, gid="ci-cut")
                cut = True
    return cut


def _label_flat_bars(ax) -> None:
    """Write the value on a bar too low to see (under 1.5% of the axis): a bar at 0 drew nothing,
    like a bar with no run behind it; now 0 is written and a gap means no run."""
    lo, hi = ax.get_ylim()
    for bars_ in ax.containers:
        heights = [p.get_height() for p in bars_.patches]
        texts = [f"{h:.2g}" if np.isfinite(h) and abs(h) < 0.015 * (hi - lo) else "" for h in heights]
        if any(texts):
            ax.bar_label(bars_, labels=texts, fontsize=7, color="0.25", padding=2)


def t_ci(values) -> tuple[float, float]:
    """95% Student t interval of the mean of the seeds' `values` (one seed: no width). seaborn's
    bootstrap CI cannot reach past the range of 3-5 seeds (0.1, 0.3, 0.5 gave exactly 0.1-0.5, the t
    interval -0.2-0.8), so bars looked tighter than the verdicts' intervals (`analysis.effect_ci`)."""
    from ragen_lib.analysis import t_quantile

    x = np.asarray(values, float)
    x = x[np.isfinite(x)]
    mean = float(x.mean()) if len(x) else float("nan")
    if len(x) < 2:
        return mean, mean
    half = t_quantile(0.975, len(x) - 1) * float(x.std(ddof=1)) / np.sqrt(len(x))
    return mean - half, mean + half


def per_seed(df: pd.DataFrame, metric: str, by: list[str], score: str = "late") -> pd.DataFrame:
    """One row per (by..., seed): the seed's late mean (last third of its logged points) or median
    of `metric`: the input of `bars`, whose error bars are then over seeds. For a success metric,
    `FORMAT` holds the format-valid rate of the same episodes (`format_rate_of`) at the same
    points, which `bars` draws below the success bars. `done`: whether every run of the seed
    finished (an unfinished one is scored on the steps it logged, and `bars` says so)."""
    from ragen_lib.analysis import late_tail

    rows = []
    keys = [*by, SEED]
    fmt = format_rate_of(metric)
    for key, part in df.dropna(subset=[metric]).groupby(keys, sort=True):
        part = part.sort_values("step")
        v = part[metric]
        window = late_tail(part) if score == "late" else part
        val = float(window[metric].mean()) if score == "late" else float(np.median(v))
        # the same points as the score; NaN where none of them logged a format-valid rate
        facts_fmt = {FORMAT: float(window[fmt].mean())} if fmt and fmt in part else {}
        # A seed's bar may pool runs (envs pooled per seed): every value they hold is kept, joined.
        facts = {
            c: ", ".join(sorted(part[c].dropna().astype(str).unique())) or None
            for c in RUN_FACTS
            if c in part and c not in keys
        }
        ran = {}
        if "done" in part:  # and which runs did not: 05 stacks one per_seed per column, a run in each
            ran = {"done": bool(part["done"].astype(bool).all())}
            if "run_id" in part:
                left = part.loc[~part["done"].astype(bool), "run_id"].astype(str).unique()
                ran[UNFINISHED] = ", ".join(sorted(left))
        rows.append({**dict(zip(keys, key)), metric: val, **facts_fmt, **facts, **ran})
    facts = [c for c in RUN_FACTS if c in df and c not in keys]
    ran_cols = ["done", *([UNFINISHED] if "run_id" in df else [])] if "done" in df else []
    columns = [*keys, metric, *([FORMAT] if fmt and fmt in df else []), *facts, *ran_cols]
    out = pd.DataFrame(rows, columns=columns)
    out.attrs = dict(df.attrs)  # the grid's runs not stored: `bars` of an empty selection says so
    return out


def unfinished_runs(df: pd.DataFrame) -> int:
    """The runs of a frame with `done` (`per_seed`'s rows, 07's totals) that did not finish, each
    counted once: 05 stacks one `per_seed` per validation column, so a run is a row of each."""
    if "done" not in df:
        return 0
    left = df.loc[~df["done"].astype(bool)]
    if UNFINISHED not in left:
        return len(left)
    return len({r for v in left[UNFINISHED].dropna().astype(str) for r in v.split(", ") if r})


def unfinished_text(df: pd.DataFrame) -> str:
    """'; unfinished: 2 runs (drawn, not scored)' where runs of `df` did not finish ('' else):
    verdicts leave them out, and a figure that draws them says so."""
    if "done" not in df or "run_id" not in df:
        return ""
    n = df.loc[~df["done"].astype(bool), "run_id"].nunique()
    return f"; unfinished: {n} run{'s' if n > 1 else ''} (drawn, not scored)" if n else ""


def _nothing_stored(df: pd.DataFrame, what: str, title: str) -> plt.Figure | None:
    """None when `df` has rows to draw. An empty selection of a finding whose grid has runs not
    stored (`df.attrs["missing"]`: RAGEN_TRAIN=stored judges the stored runs alone) draws a figure
    that says so, so a notebook renders what is stored; any other empty selection is an error (a
    filter that matches nothing)."""
    if not df.empty:
        return None
    missing = {m["run_id"] for m in df.attrs.get("missing") or []}
    if not missing:
        raise ValueError(
            f"plots.{what}: no rows to draw (no run of this selection has logged a step yet): "
            "run the study first, or check the selection's filters"
        )
    fig, ax = plt.subplots(figsize=(6, 1.6))
    ax.axis("off")
    ax.text(
        0.5,
        0.5,
        f"{title}\nnot trained yet: no stored run in this selection\n({len(missing)} runs of the grid "
        "are not stored; RAGEN_TRAIN=stored draws the stored ones)",
        ha="center",
        va="center",
        fontsize=9,
    )
    return fig


def warmups_text(df: pd.DataFrame) -> str:
    """The warm-ups of the runs in `df` (their configs' train.warmup), comma-separated; '' when the
    frame does not say."""
    return ", ".join(sorted(df[WARMUP].dropna().astype(str).unique())) if WARMUP in df else ""


def models_text(df: pd.DataFrame) -> str:
    """A title's last line: the models the runs trained (their configs' model.name), and that they
    are not the paper's where they are not; '' when the frame does not say."""
    col = "cfg.model.name"
    # `per_seed` joins the models of the runs a bar pools with ", "
    names = sorted({n for v in df[col].dropna().astype(str) for n in v.split(", ")}) if col in df else []
    return f"\nmodel: {models.describe(names)}" if names else ""


def _stamp(fig, df: pd.DataFrame) -> None:
    """Smoke runs' figures say so in red, under the panels: across the middle (where it was), it
    covered the data of the panels there. Saved and shown with bbox_inches="tight", so it is kept."""
    if "profile" in df and (df["profile"] == "smoke").any():
        fig.text(
            0.5,
            0.0,
            "SMOKE: tiny random model, pipeline check, not science",
            ha="center",
            va="top",
            fontsize=12,
            color="red",
            alpha=0.8,
        )


def save(fig: plt.Figure, results: str | Path, name: str) -> str:
    """<results>/figures/<name>.png, `results` the notebook's folder (`df.attrs["results"]`: its
    profile's, or its variant's); the path written, relative to the checkout where it is in it."""
    out = results_folder(results) / "figures" / f"{name}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    return str(out.relative_to(ROOT)) if out.is_relative_to(ROOT) else str(out)
