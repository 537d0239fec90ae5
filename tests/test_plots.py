"""Figure rules (issue 16) checked on the matplotlib objects, not by eye."""

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from ragen_lib import plots  # noqa: E402


def runs_df():
    rows = []
    for env in ("bandit", "sokoban"):
        for keep in ("top 100%", "top 25%", "top 5%"):
            for seed in (0, 1):
                for step in range(6):
                    rows.append(
                        {
                            "run_id": f"{env}-{keep}-{seed}",
                            "cfg.env.name": env,
                            "variant": keep,
                            "cfg.train.seed": seed,
                            "step": step,
                            "rollout/success": 0.9 + 0.001 * step,
                            "val/success": 0.5 if step % 3 == 0 else None,
                            "val/format_valid": 0.75 if step % 3 == 0 else None,
                            "rollout/format_valid": 1.0,
                            "policy/entropy": 1000.0 + 0.001 * step,  # offset notation would kick in
                        }
                    )
    return pd.DataFrame(rows)


def test_natural_order_puts_numbers_in_numeric_order():
    assert plots.order(["top 100%", "top 25%", "top 5%", "top 50%"]) == [
        "top 5%",
        "top 25%",
        "top 50%",
        "top 100%",
    ]
    assert plots.order(["k=10", "k=2", "k=1"]) == ["k=1", "k=2", "k=10"]


def test_curves_share_colours_across_panels_fix_rate_axes_and_draw_one_legend():
    fig = plots.curves(
        runs_df(), ["rollout/success", "val/success", "policy/entropy"], hue="variant", col="cfg.env.name"
    )
    axes = fig.axes
    success = [ax for ax in axes if ax.get_ylabel() == plots.label("rollout/success")]
    assert len(success) == 2 and all(ax.get_ylim() == (-0.03, 1.03) for ax in success)  # not 0.9-0.905
    # the bold (mean) lines: same colour for the same variant in both env columns
    bold = [[tuple(line.get_color()) for line in ax.lines if line.get_linewidth() > 2] for ax in success]
    assert bold[0][:3] == bold[1][:3] and len(set(bold[0][:3])) == 3
    # thin seed lines: 2 seeds x 3 variants per panel
    assert sum(line.get_linewidth() < 1 for line in success[0].lines) == 6
    val = [ax for ax in axes if ax.get_ylabel() == plots.label("val/success")][0]
    assert any(line.get_marker() == "o" for line in val.lines)  # sparse validation: markers
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in axes)
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert names[:3] == ["top 5%", "top 25%", "top 100%"] and "random play (chance)" in names
    assert "2 seeds per line" in fig._suptitle.get_text()
    # every success curve has the format-valid rate measured with it below: training's, validation's
    labels = [ax.get_ylabel() for ax in axes[::2]]  # one column
    assert labels[-2:] == [plots.label("rollout/format_valid"), plots.label("val/format_valid")]
    val_fmt = [ax for ax in axes if ax.get_ylabel() == plots.label("val/format_valid")]
    assert len(val_fmt) == 2 and all(ax.get_ylim() == (-0.03, 1.03) for ax in val_fmt)
    entropy = [ax for ax in axes if ax.get_ylabel() == plots.label("policy/entropy")][0]
    fig.canvas.draw()
    assert entropy.yaxis.get_major_formatter().get_offset() == ""  # no offset notation


def test_tiny_values_get_a_scientific_multiplier_not_ticks_that_all_read_zero():
    """A*-PO's loss at smoke scale is about 1e-14: plain ticks drew every label as 0.000000000000000."""
    df = runs_df()
    df["loss/policy"] = 1e-14 * (1 + df["step"])
    fig = plots.curves(df, ["loss/policy"], hue="variant")
    ax = [ax for ax in fig.axes if ax.get_ylabel() == plots.label("loss/policy")][0]
    fig.canvas.draw()
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert len(set(ticks)) == len(ticks) > 2, ticks  # distinct labels
    assert ax.yaxis.get_offset_text().get_text() == "1e\u221214"  # the multiplier, above the axis


def test_a_curve_that_barely_moves_draws_flat_with_short_ticks_not_its_noise_across_the_panel():
    """The tiny model's entropy moved 1e-6 around 10.79: the panel spread that over its full height,
    with ticks like 10.7898684 crowding the column beside it."""
    df = runs_df()
    df["policy/entropy"] = 10.789868 + 1e-7 * df["step"]
    fig = plots.curves(df, ["policy/entropy"], hue="variant")
    ax = [ax for ax in fig.axes if ax.get_ylabel() == plots.label("policy/entropy")][0]
    fig.canvas.draw()
    low, high = ax.get_ylim()
    assert high - low >= 1e-3 * 10.78 and low < 10.789868 < high
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert ticks and max(len(t) for t in ticks) <= 7, ticks  # 10.7825, not 10.7898684
    assert ax.yaxis.get_major_formatter().get_offset() == ""  # still the values themselves


def test_a_success_panel_of_several_envs_says_it_has_no_reference_lines_and_the_legend_names_none():
    """Bandit's chance is 0.5 and Sokoban's about 0.2: a panel mixing them gets neither line, says so,
    and the legend does not list lines that are not drawn (02's echo-trap figure did)."""
    df = runs_df()
    fig = plots.curves(df, ["val/success"], hue="variant")  # both envs in one panel
    val = [ax for ax in fig.axes if ax.get_ylabel() == plots.label("val/success")][0]
    assert not [line for line in val.lines if line.get_gid() in ("chance", "expert")]
    assert plots.NO_REFERENCES in [t.get_text() for t in val.texts]
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "random play (chance)" not in names and "expert (best possible)" not in names
    one = plots.curves(df[df["cfg.env.name"] == "bandit"], ["val/success"], hue="variant")
    val = [ax for ax in one.axes if ax.get_ylabel() == plots.label("val/success")][0]
    assert [line.get_ydata()[0] for line in val.lines if line.get_gid() == "chance"] == [0.5]
    assert "random play (chance)" in [t.get_text() for t in one.legends[0].get_texts()]
    assert not val.texts


def test_curves_name_the_model_the_runs_trained_and_whether_it_is_the_papers():
    df = runs_df()
    assert "model" not in plots.curves(df, ["rollout/success"], hue="variant")._suptitle.get_text()
    df["cfg.model.name"] = "smollm2-135m-instruct"
    title = plots.curves(df, ["rollout/success"], hue="variant")._suptitle.get_text()
    assert title.endswith("\nmodel: smollm2-135m-instruct (not the paper's Qwen2.5-0.5B-Instruct)")
    df["cfg.model.name"] = "Qwen/Qwen2.5-0.5B-Instruct"
    title = plots.curves(df, ["rollout/success"], hue="variant")._suptitle.get_text()
    assert title.endswith("\nmodel: Qwen/Qwen2.5-0.5B-Instruct")


def test_bars_have_error_bars_over_seeds():
    df = runs_df()
    seeded = plots.per_seed(df, "rollout/success", ["variant"])
    assert len(seeded) == 6  # 3 variants x 2 seeds (envs pooled per seed)
    fig = plots.bars(seeded, "variant", "rollout/success", title="t")
    ax = fig.axes[0]
    assert len(ax.lines) >= 3  # one error bar per bar
    assert ax.get_ylim() == (0.0, 1.0) and "2 seed(s) per bar" in ax.get_title()
    assert "model" not in ax.get_title() and "warm-up" not in ax.get_title()  # the frame does not say


def test_bars_name_the_model_and_warm_up_and_make_room_for_many_long_variant_names():
    """A bar chart of late success is a result like a curve: its title names the model (and that it
    is not the paper's) and the warm-up, carried through `per_seed`; nine variants across three envs
    get a wider figure and wrapped names instead of a strip of bars (03's late-success figure)."""
    df = runs_df()
    df["cfg.model.name"] = "smollm2-135m-instruct"
    df.loc[df["cfg.env.name"] == "sokoban", "cfg.model.name"] = "Qwen/Qwen2.5-0.5B-Instruct"
    df["cfg.train.warmup"] = "format"
    seeded = plots.per_seed(df, "rollout/success", ["variant"])  # each bar pools both envs' runs
    title = plots.bars(seeded, "variant", "rollout/success", title="t").axes[0].get_title()
    assert "warm-up: format" in title
    assert "\nmodel: Qwen/Qwen2.5-0.5B-Instruct, smollm2-135m-instruct (not the paper" in title
    few = plots.bars(plots.per_seed(df, "rollout/success", ["variant", "cfg.env.name"]), "variant",
                     "rollout/success", hue="cfg.env.name")  # fmt: skip
    many = df.copy()
    many["variant"] = many["variant"].map(lambda v: f"vanilla StarPO (RAGEN's reference) {v}")
    many = pd.concat([many.assign(variant=many["variant"] + f" #{i}") for i in range(3)])
    wide = plots.bars(plots.per_seed(many, "rollout/success", ["variant", "cfg.env.name"]), "variant",
                      "rollout/success", hue="cfg.env.name")  # fmt: skip
    assert wide.get_figwidth() > few.get_figwidth() >= 6.5
    names = [t.get_text() for t in wide.axes[-1].get_xticklabels()]  # the format panel's, below
    assert len(names) == 9 and all(max(len(line) for line in n.split("\n")) <= 16 for n in names)
    # metric names as bars (05's Table 2 columns) read as their labels, and a name is never cut in two
    cols = pd.DataFrame(
        {
            "column": ["val/success/frozenlake", "val/success/sokoban-newvocab"],
            "s": [0.2, 0.3],
            "cfg.train.seed": 0,
        }
    )
    ticks = [t.get_text() for t in plots.bars(cols, "column", "s").axes[0].get_xticklabels()]
    assert ticks == ["success (val) on\nfrozenlake", "success (val) on\nsokoban-newvocab"]


def test_long_axis_labels_wrap_instead_of_running_into_the_next_panel():
    new = {m: f"{m}/sokoban-newvocab" for m in ("val/success", "val/format_valid")}
    fig = plots.curves(runs_df().rename(columns=new), [new["val/success"]], hue="variant")
    ylabels = [ax.get_ylabel() for ax in fig.axes]
    assert "format-valid (val) on\nsokoban-newvocab" in ylabels, ylabels
    assert (
        plots.axis_name("cfg.env.name") == "env" and plots.axis_name("cfg.algo.filter_keep") == "filter keep"
    )


def test_success_bars_show_the_format_valid_rate_of_the_same_episodes_below():
    """A bar of late success with the small model may be format learning: `per_seed` carries the
    format-valid rate of the same points, and `bars` draws it in a panel below."""
    df = runs_df()
    seeded = plots.per_seed(df, "val/success", ["variant"])
    assert (seeded[plots.FORMAT] == 0.75).all()  # val/format_valid at the validation points
    fig = plots.bars(seeded, "variant", "val/success", title="t")
    success, fmt = fig.axes
    assert "format-valid" in fmt.get_ylabel() and fmt.get_ylim() == (0.0, 1.0)
    assert sorted(round(p.get_height(), 3) for p in fmt.patches if p.get_height()) == [0.75] * 3
    # not for a metric that has no format-valid rate
    entropy = plots.per_seed(df, "policy/entropy", ["variant"])
    assert plots.FORMAT not in entropy and len(plots.bars(entropy, "variant", "policy/entropy").axes) == 1


def test_reference_lines_are_each_arms_own_where_the_arms_had_different_budgets():
    """The lines were the env's default budget whatever the runs played under: Table 3's 1-action
    arm cannot solve every level in 5 actions, and its chance is below the 5-action arm's."""
    df = runs_df()
    df = df[df["cfg.env.name"] == "sokoban"].copy()
    df["cfg.train.val_size"] = 64
    per_turn = {"top 100%": 1, "top 25%": 5, "top 5%": 5}
    df["cfg.rollout.max_actions_per_turn"] = df["variant"].map(per_turn)
    df["cfg.rollout.max_actions_per_episode"] = 5 * df["cfg.rollout.max_actions_per_turn"]
    fig = plots.curves(df, ["val/success"], hue="variant")
    val = [ax for ax in fig.axes if ax.get_ylabel() == plots.label("val/success")][0]
    from ragen_lib import analysis

    floors = sorted({line.get_ydata()[0] for line in val.lines if line.get_gid() == "chance"})
    want = sorted({analysis.arm_reference(df[df["variant"] == v], "sokoban")[0] for v in per_turn})
    assert len(floors) == 2 and floors == want
    # the legend says the coloured lines are each arm's own (it named only the grey pair)
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "random play (chance; an arm's colour: its own)" in names, names
    # one budget: one grey pair
    one_budget = {"cfg.rollout.max_actions_per_turn": 5, "cfg.rollout.max_actions_per_episode": 25}
    same = plots.curves(df.assign(**one_budget), ["val/success"], hue="variant")
    val = [ax for ax in same.axes if ax.get_ylabel() == plots.label("val/success")][0]
    assert [line.get_color() for line in val.lines if line.get_gid() == "chance"] == ["0.45"]
    assert "random play (chance)" in [t.get_text() for t in same.legends[0].get_texts()]


def test_the_mean_line_stops_where_a_seed_stopped_and_the_title_says_a_run_is_unfinished():
    df = runs_df()
    df = df[(df["cfg.env.name"] == "bandit") & (df["variant"] == "top 25%")].copy()
    df = df[~((df["cfg.train.seed"] == 1) & (df["step"] > 2))]  # seed 1 stopped after 3 steps
    df["done"] = df["cfg.train.seed"] == 0
    fig = plots.curves(df, ["rollout/success"], hue="variant")
    ax = [a for a in fig.axes if a.get_ylabel() == plots.label("rollout/success")][0]
    bold = [line for line in ax.lines if line.get_linewidth() > 2]
    assert list(bold[0].get_xdata()) == [0, 1, 2]  # not the other seed alone after step 2
    assert "unfinished: 1 run (drawn, not scored)" in fig._suptitle.get_text()
    # a line that holds several runs of one seed (a sweep at seed 0) still gets its mean
    sweep = runs_df().assign(variant="all")
    fig = plots.curves(sweep[sweep["cfg.env.name"] == "bandit"], ["rollout/success"], hue="variant")
    ax = [a for a in fig.axes if a.get_ylabel() == plots.label("rollout/success")][0]
    assert len([line for line in ax.lines if line.get_linewidth() > 2][0].get_xdata()) == 6


def test_an_empty_selection_gets_an_error_that_says_what_to_do():
    import pytest

    for call in (lambda d: plots.curves(d, ["rollout/success"], hue="variant"),
                 lambda d: plots.bars(d, "variant", "rollout/success")):  # fmt: skip
        with pytest.raises(ValueError, match="no rows to draw.*run the study first"):
            call(runs_df().iloc[:0])


def test_a_line_breaks_where_its_metric_has_no_value_instead_of_bridging_the_gap():
    """reasoning/length is NaN at a step where no think tag matched: the line joined the steps on
    either side, drawing a value that was never measured. Validation, logged every 3 steps, still
    joins its points (those steps were never logged, not missing)."""
    df = runs_df()
    df["reasoning/length"] = 10.0 + df["step"]
    df["reasoning/matched"] = 1.0  # logged at every step: where it is 0, the length is NaN
    gap = (df["variant"] == "top 25%") & (df["step"] == 2)
    df.loc[gap, ["reasoning/length", "reasoning/matched"]] = [float("nan"), 0.0]
    one_seed = (df["variant"] == "top 5%") & (df["step"] == 4) & (df["cfg.train.seed"] == 1)
    df.loc[one_seed, ["reasoning/length", "reasoning/matched"]] = [float("nan"), 0.0]
    fig = plots.curves(df[df["cfg.env.name"] == "bandit"], ["reasoning/length", "val/success"], hue="variant")
    ax = [ax for ax in fig.axes if ax.get_ylabel() == plots.label("reasoning/length")][0]
    colour = {name: tuple(plots.palette(plots.order(df["variant"]))[name]) for name in df["variant"]}

    def lines(variant, bold):
        return [
            (list(line.get_xdata()), list(line.get_ydata()))
            for line in ax.lines
            if tuple(line.get_color()) == colour[variant] and (line.get_linewidth() > 2) == bold
        ]

    [(x, y)] = lines("top 25%", bold=True)
    assert x == [0, 1, 2, 3, 4, 5] and y[2] != y[2] and y[3] == 13.0  # a break at 2, not 11 -> 13
    assert all(xs == [0, 1, 2, 3, 4, 5] and ys[2] != ys[2] for xs, ys in lines("top 25%", bold=False))
    [(x, y)] = lines("top 5%", bold=True)  # one seed missing: no mean there either
    assert y[4] != y[4] and y[3] == 13.0 and y[5] == 15.0
    val = [ax for ax in fig.axes if ax.get_ylabel() == plots.label("val/success")][0]
    bold = [list(line.get_xdata()) for line in val.lines if line.get_linewidth() > 2]
    assert bold and all(xs == [0, 3] for xs in bold)
    plots.plt.close("all")


def test_runs_that_log_on_their_own_schedule_keep_their_lines():
    """online-5 logs every 5th step and a val_every-10 pilot validates every 10th: reindexed over
    the steps any run of the panel logged, their lines were NaN between their own points and
    vanished (05's Fig. 10, 07's pilots beside judged arms)."""
    rows = []
    for variant, every, val_every in (("online-1", 1, 5), ("online-5", 5, 10)):
        for seed in (0, 1):
            for step in range(0, 30, every):
                rows.append(
                    {
                        "run_id": f"{variant}-{seed}",
                        "variant": variant,
                        "cfg.train.seed": seed,
                        "step": step,
                        "rollout/success": 0.5 + 0.01 * step,
                        "rollout/format_valid": 1.0,
                        "val/success": 0.4 if step % val_every == 0 else None,
                    }
                )
    df = pd.DataFrame(rows)
    fig = plots.curves(df, ["rollout/success", "val/success"], hue="variant")
    colour = tuple(plots.palette(["online-1", "online-5"])["online-5"])
    for metric, xs in (("rollout/success", [0, 5, 10, 15, 20, 25]), ("val/success", [0, 10, 20])):
        ax = [a for a in fig.axes if a.get_ylabel() == plots.label(metric)][0]
        lines = [line for line in ax.lines if tuple(line.get_color()) == colour]
        assert len(lines) == 3  # two seeds and the mean
        for line in lines:
            assert list(line.get_xdata()) == xs and all(y == y for y in line.get_ydata()), metric
    # a column with no <where>/ prefix is its own family
    fig = plots.curves(df.assign(score=df["step"] * 0.1), ["score"], hue="variant")
    ax = [a for a in fig.axes if a.get_ylabel() == "score"][0]
    assert sorted(len(line.get_xdata()) for line in ax.lines) == [6, 6, 6, 30, 30, 30]
    plots.plt.close("all")


def test_titles_count_seeds_per_column_and_name_steps_and_validation_states():
    """01 runs Bandit on 4 seeds and a FrozenLake pilot on 1: pooled, the title said '4 seeds per
    line' over the one-seed panel. The validation states and steps tell a pilot from a judged run."""
    df = runs_df()
    df = df[(df["cfg.env.name"] == "bandit") | (df["cfg.train.seed"] == 0)].assign(
        **{"cfg.train.val_size": 128}
    )
    df.loc[df["cfg.env.name"] == "sokoban", "cfg.train.val_size"] = 64
    title = plots.curves(df, ["val/success"], hue="variant", col="cfg.env.name")._suptitle.get_text()
    assert "seeds per line: bandit 2, sokoban 1" in title and "validation 64–128 states" in title
    one = plots.curves(df[df["cfg.env.name"] == "bandit"], ["val/success"], hue="variant", col="cfg.env.name")
    assert "2 seeds per line" in one._suptitle.get_text()
    bars = plots.bars(
        plots.per_seed(df.assign(**{"cfg.train.steps": 6}), "val/success", ["variant"]),
        "variant",
        "val/success",
    )
    assert "6 steps, validation 64–128 states" in bars.axes[0].get_title()


def test_bar_error_bars_are_the_seeds_t_interval_not_their_range():
    """seaborn's bootstrap over seeds 0.1, 0.3, 0.5 drew exactly 0.1-0.5; the t interval, as the
    verdicts take it, is 0.3 ± 4.303 · 0.2 / √3."""
    lo, hi = plots.t_ci([0.1, 0.3, 0.5])
    assert abs(lo - (0.3 - 4.3027 * 0.2 / 3**0.5)) < 1e-3 and abs(hi - (0.3 + 4.3027 * 0.2 / 3**0.5)) < 1e-3
    assert plots.t_ci([0.4]) == (0.4, 0.4)
    df = pd.DataFrame({"arm": ["a"] * 3, "cfg.train.seed": [0, 1, 2], "score": [0.1, 0.3, 0.5]})
    ax = plots.bars(df, "arm", "score").axes[0]
    ends = sorted(y for line in ax.lines for y in line.get_ydata())
    assert abs(ends[0] - lo) < 1e-6 and abs(ends[-1] - hi) < 1e-6


def test_bars_say_which_seeds_did_not_finish():
    df = runs_df()
    df["done"] = df["run_id"] != "bandit-top 5%-1"
    scored = plots.per_seed(df, "rollout/success", ["variant"])
    assert scored["done"].tolist().count(False) == 1
    title = plots.bars(scored, "variant", "rollout/success").axes[0].get_title()
    assert "unfinished: 1 run(s), scored on the steps logged" in title
    # 05 stacks one per_seed per validation column: the run is a row of each, counted once
    stacked = pd.concat([scored, scored.assign(variant=scored["variant"] + " (other env)")])
    assert "unfinished: 1 run(s)" in plots.bars(stacked, "variant", "rollout/success").axes[0].get_title()
    assert (
        "unfinished"
        not in plots.bars(scored.assign(done=True), "variant", "rollout/success").axes[0].get_title()
    )


def test_each_arms_mean_has_its_own_dash_so_equal_curves_stay_visible():
    """04's PPO arm lay exactly under StarPO-S, one solid line of one width over the other."""
    fig = plots.curves(runs_df(), ["rollout/success"], hue="variant", col="cfg.env.name")
    means = [line for line in fig.axes[0].lines if line.get_linewidth() == 2.2]
    legend = fig.legends[0].legend_handles[:3]
    dashes = [str(line._dash_pattern) for line in means]  # matplotlib names every custom dash "--"
    assert len(means) == 3 and len(set(dashes)) == 3
    assert dashes == [str(line._dash_pattern) for line in legend]


def test_an_arm_keeps_its_colour_from_figure_to_figure_given_one_order_of_arms():
    """03 draws one figure per env, and Bandit has 2 of Sokoban's arms: each figure sized its
    palette to its own arms, so "top 25%" changed colour between figures. With the notebook's one
    order, it keeps it; the legend names only the arms drawn, and an arm the order leaves out is
    an error, not a line silently left undrawn."""
    df = runs_df()
    arms = plots.order(df["variant"])
    some = df[df["variant"] != "top 5%"]

    def legend_colour(fig, variant):
        legend = fig.legends[0]
        names = [t.get_text() for t in legend.get_texts()]
        colours = {n: tuple(h.get_color()) for n, h in zip(names, legend.legend_handles)}
        return colours[variant]

    whole = plots.curves(df, ["rollout/success"], hue="variant", hue_order=arms)
    part = plots.curves(some, ["rollout/success"], hue="variant", hue_order=arms)
    colour = legend_colour(whole, "top 25%")
    assert legend_colour(part, "top 25%") == colour == tuple(plots.palette(arms)["top 25%"])
    assert colour in {tuple(x.get_color()) for x in part.axes[0].lines if x.get_linewidth() > 2}
    own = plots.curves(some, ["rollout/success"], hue="variant")  # without the order: its own palette
    assert legend_colour(own, "top 25%") != colour
    names = [t.get_text() for t in part.legends[0].get_texts()]
    assert "top 5%" not in names and names[:2] == ["top 25%", "top 100%"]

    def bar_legend(frame):
        scored = plots.per_seed(frame, "rollout/success", ["cfg.env.name", "variant"])
        legend = plots.bars(scored, "cfg.env.name", "rollout/success", hue="variant", hue_order=arms)
        legend = legend.axes[0].get_legend()
        names = [t.get_text() for t in legend.get_texts()]
        return {n: tuple(h.get_facecolor()) for n, h in zip(names, legend.legend_handles)}

    assert list(bar_legend(some)) == ["top 25%", "top 100%"]
    assert bar_legend(some)["top 25%"] == bar_legend(df)["top 25%"]
    with pytest.raises(ValueError, match=r"hue_order lacks \['top 5%'\]"):
        plots.curves(df, ["rollout/success"], hue="variant", hue_order=["top 25%", "top 100%"])
    plots.plt.close("all")


def test_a_bar_at_zero_is_labelled_and_an_interval_past_the_rate_axis_gets_a_caret():
    """A rate bar at 0 drew nothing, like a bar with no run; and the [0, 1] axis cut a 3-seed t
    interval (here 0.6 ± 0.99) so the bar looked tighter than the verdict's interval."""
    df = pd.DataFrame(
        {
            "arm": ["a"] * 3 + ["b"] * 3,
            "cfg.train.seed": [0, 1, 2] * 2,
            "val/success": [0.2, 0.6, 1.0, 0.0, 0.0, 0.0],
        }
    )
    ax = plots.bars(df, "arm", "val/success").axes[0]
    assert ax.get_ylim() == (0.0, 1.0)
    assert [t.get_text() for t in ax.texts] == ["", "0"]  # a's bar is seen; b's 0 is written
    carets = sorted((x.get_xdata()[0], x.get_marker()) for x in ax.lines if x.get_gid() == "ci-cut")
    assert carets == [(0.0, "^"), (0.0, "v")]  # a's interval runs past 1 and below 0; b's has no width
    assert "▲/▼: it runs past the axis" in ax.get_title()
    inside = plots.bars(df.assign(**{"val/success": [0.4, 0.5, 0.6, 0.3, 0.3, 0.3]}), "arm", "val/success")
    assert not [x for x in inside.axes[0].lines if x.get_gid() == "ci-cut"]
    assert "runs past" not in inside.axes[0].get_title()
    assert not any(t.get_text() for t in inside.axes[0].texts)
    plots.plt.close("all")


def test_a_panel_with_no_value_says_so_instead_of_standing_empty():
    """02's distinct-2 and 06's reasoning tokens are NaN where no tag matched: a blank panel read as
    a drawing error."""
    df = runs_df()
    df["reasoning/length"] = float("nan")
    df.loc[df["cfg.env.name"] == "sokoban", "reasoning/length"] = 3.0
    fig = plots.curves(df, ["rollout/success", "reasoning/length"], hue="variant", col="cfg.env.name")
    empty = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_text().startswith(plots.NO_DATA)]
    assert empty == [f"{plots.NO_DATA}: {plots.label('reasoning/length')} has no value in these runs"]


@pytest.mark.parametrize("kind", ["curves", "bars"])
def test_the_smoke_stamp_marks_the_figure_without_covering_any_panel(kind):
    """The red SMOKE stamp sat across the middle of the figure, over the data of the panels there."""
    df = runs_df()
    df["profile"] = "smoke"
    fig = (
        plots.curves(df, ["rollout/success", "policy/entropy"], hue="variant", col="cfg.env.name")
        if kind == "curves"
        else plots.bars(df, "variant", "rollout/success")
    )
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    [stamp] = [t for t in fig.texts if t.get_text().startswith("SMOKE")]
    box = stamp.get_window_extent(renderer)
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes), box


def test_a_long_title_over_one_column_leaves_the_legend_and_the_axis_labels_clear_of_it():
    """06's figures: a title of three lines over one column of panels ran into the legend's first
    names (anchored at a fixed 0.95), and a bar chart's long y label into its title."""
    df = runs_df()[lambda d: d["cfg.env.name"] == "bandit"]
    title = "Fig. 11: reasoning length over training, a title as long as the notebooks' are"
    fig = plots.curves(df, ["rollout/success", "policy/entropy"], hue="variant", title=title)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    top = fig._suptitle.get_window_extent(renderer)
    assert not fig.legends[0].get_window_extent(renderer).overlaps(top)
    last = df[df["step"] == df["step"].max()].assign(score=0.5)
    fig = plots.bars(
        last, "variant", "score", title=title, ylabel="success (val) on the shifted env", metric="val/success"
    )
    fig.canvas.draw()
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    assert not ax.yaxis.label.get_window_extent(renderer).overlaps(ax.title.get_window_extent(renderer))
