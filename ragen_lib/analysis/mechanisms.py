"""Whether the manipulated mechanism acted, and where each arm's floor and ceiling lie.

`mechanism_inactive`: a clip that clipped nothing, a KL reward too small to move a return, a filter
that chose by order, a think arm that did not think, per-turn limits both arms played under.
`arm_reference`: an arm's random-play and expert success within the action budget and on the
validation states its runs used (`baselines.reference_success`), the floor and ceiling a row is
judged against.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd

from ragen_lib.analysis.claims import MECHANISMS, _fmt
from ragen_lib.analysis.scores import _rollout_updates

#: A mechanism acted when its clip fraction reached this much (clip claims).
MIN_CLIP_FRAC = 0.01

#: A KL acted when its reward could move an episode's returns by this share of the spread of the
#: trajectory rewards (kl claims: `reward/kl_penalty` / `reward/std`, means over the KL arm's steps).
#: The penalty's size is an upper bound on what it moves, so below this it cannot have mattered.
#: Measured (params/examples/bandit_ppo.yaml, the embedded model, StarPO-PPO at lr 2e-5, 6 steps,
#: CPU): 0% at step 0 (the policy is the reference), 3% at step 1, 44% at step 5; 16% over the run.
MIN_KL_SHARE = 0.01

#: A filter chose by uncertainty when its kept groups' reward std beat all groups' on at least this
#: share of the steps of some stretch from the start of the run of at least `MIN_FILTER_STEPS` steps
#: (filter claims): on the others every group tied, and top-k kept the first ones, the unfiltered
#: arm's choice in all but the batch size. A stretch from the start, not the whole run: an arm that
#: converged or collapsed ties from then on (on Bandit a group shares its payout, so every group of
#: an arm that always pulls one arm has std 0), and had chosen until then; what follows is the
#: outcome its claim scores, not a filter that did not act (the whole-run share read a filter arm at
#: success 1 from step 40 of 150 as inactive: 27%).
MIN_FILTER_SHARE = 0.5

MIN_FILTER_STEPS = 10

#: Two per-turn action limits separated the arms when the smaller limit dropped the pieces past it on
#: at least this share of its arm's matched turns (`rollout/actions_dropped`; actions claims), or
#: the larger limit's arm wrote more actions a turn on average than the smaller allows
#: (`rollout/actions_written`), or past the env's default on this share of its turns where the
#: smaller is at or under that default (`rollout/actions_past_default`). Otherwise both arms played
#: what either limit would have let through, and only the action budget printed in the prompt
#: differed.
MIN_ACTIONS_DROPPED = 0.05

#: Two arms' rollouts differed in freshness (fig10's online-k; staleness claims) when the staler
#: arm's updates ran a policy at least this many times as far from the one that played their
#: rollout as the fresher arm's did: `policy/approx_kl`, KL(π_old ‖ π) before each optimizer step,
#: each arm's mean over its steps. Under drift that grows with each step (a random walk: KL ∝ steps
#: taken), online-k's k·M steps from one rollout average about (kM − 1)/(M − 1) times the fresh
#: arm's M steps (M = 4 optimizer steps an update: 6.3 at k = 5, 2.3 at k = 2); a ratio under 2
#: is a drift the noise floor (bf16 forwards on a GPU) or a policy that hardly moved dominates,
#: where a stale rollout was about as fresh as a new one. Measured (params/examples/bandit_ppo.yaml,
#: the embedded model, StarPO-S at the paper's lr 1e-6, 2 optimizer steps an update, 10 steps,
#: CPU): online-1 5.3e-5, online-5 1.6e-3, 30× (acted).
MIN_STALENESS_GROWTH = 2.0

#: A think arm thought when its parsed <think> text averaged at least this many tokens a turn, over
#: all its turns (`reasoning/length` × `reasoning/matched`; think claims): an empty
#: `<think></think>` passes the format check, and tags that matched on a few turns are not thinking.
MIN_REASONING_TOKENS = 1.0


def mechanism_inactive(A: pd.DataFrame, B: pd.DataFrame, mechanism: str | None) -> str | None:
    """Why the manipulated `mechanism` did not act between arms A and B, or None when it did (or
    when the claim names none): `inactive`'s reason alone."""
    found = inactive(A, B, mechanism)
    return found[1] if found else None


def inactive(A: pd.DataFrame, B: pd.DataFrame, mechanism: str | None) -> tuple[str, str] | None:
    """(the arm that shows it, why) where the manipulated `mechanism` did not act between arms A and
    B, each read on its runs together; None where it did, or where the claim names none. Read on
    the arm `mechanism_arm` names: both arms for "actions" (`actions_inactive`) and "staleness"
    (`staleness_inactive`), whose mechanism is a difference between the arms; for "think" arm a,
    and arm b where it thinks too (06's "BanditRev keeps longer reasoning than Bandit": an arm b
    that wrote empty tags loses any length contest); else the one arm that shows it
    (`_arm_inactive`). `inactive_seeds` asks the same of each seed a row compares."""
    if mechanism is None:
        return None
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}: {' | '.join(MECHANISMS)}")
    return _inactive(A, B, mechanism, one_arm=B is A)  # a one-arm claim: judge passes its arm as both


def inactive_seeds(A: pd.DataFrame, B: pd.DataFrame, mechanism: str | None, seeds) -> tuple[str, str] | None:
    """`inactive` seed by seed, over `seeds` (those the row compares: a seed left out as never
    learned or unscored does not count): (arm, "in seed(s) [...] of N (seed s: why)") where the
    mechanism did not act in one or more of them, though it did on each arm's runs together.
    Pooled, one seed carried an arm: a think arm that wrote 30 tokens a turn in seed 0 and empty
    tags in seeds 1-4 averaged 6 and was judged on all five, four without the manipulation (an
    audit found it). A seed one arm lacks is read against the other arm's whole."""
    if mechanism is None or SEED not in A or SEED not in B:
        return None
    seeds = sorted(seeds)
    off = []
    for seed in seeds if len(seeds) > 1 else []:
        a, b = A[A[SEED] == seed], B[B[SEED] == seed]
        if found := _inactive(a if len(a) else A, b if len(b) else B, mechanism, one_arm=B is A):
            off.append((int(seed), found))
    if not off:
        return None
    first, (arm, why) = off[0]
    return arm, f"in seed(s) {[seed for seed, _ in off]} of {len(seeds)} (seed {first}: {why})"


SEED = "cfg.train.seed"


def _inactive(A: pd.DataFrame, B: pd.DataFrame, mechanism: str, one_arm: bool) -> tuple[str, str] | None:
    """`inactive` on the runs of A and B as one sample each."""
    if mechanism in TWO_ARM_CHECKS:
        why = TWO_ARM_CHECKS[mechanism](A, B)
        return (mechanism_arm(mechanism), why) if why else None
    arms = [("b", B)] if mechanism_arm(mechanism) == "b" else [("a", A)]
    if mechanism == "think" and not one_arm and _thinks(B):
        arms.append(("b", B))
    for name, part in arms:
        why = _arm_inactive(part, mechanism)
        if why:
            return name, why
    return None


def _thinks(part: pd.DataFrame) -> bool:
    """Whether every run of an arm had thinking on (`rollout.enable_think`; False where unrecorded)."""
    col = "cfg.rollout.enable_think"
    return col in part and len(part) > 0 and bool(part[col].astype(bool).all())


def _arm_inactive(df: pd.DataFrame, mechanism: str) -> str | None:
    """Why `mechanism` did not act in the one arm `df`, or None when it did."""
    if mechanism in ("clip", "clip_high"):
        steps = df["policy/optimizer_steps"].dropna() if "policy/optimizer_steps" in df else pd.Series([])
        if len(steps) and (steps <= 1).all():
            return "one optimizer step per batch: the ratio is 1, the clip never acts"
        # clip_high: only the upper bound differs between the arms; the lower bound's clipping, the
        # same in both, says nothing about whether raising ε_high changed an update.
        names = ("policy/clip_frac_high",) if mechanism == "clip_high" else CLIP_FRACS
        cols = [c for c in names if c in df]
        frac = float(df[cols].sum(axis=1, min_count=1).mean()) if cols else float("nan")
        if not frac >= MIN_CLIP_FRAC:
            which = "upper-bound clip fraction" if mechanism == "clip_high" else "clip fraction"
            return f"{which} {_fmt(frac)} < {MIN_CLIP_FRAC:.0%}: the clip hardly acted"
        return None
    if mechanism == "kl":
        # The KL arm's KL reward, at its largest (kl_coef · Σ|KL_t|), beside the spread of the
        # trajectory rewards it is added to: under MIN_KL_SHARE of it, no return moved enough for
        # removing the KL to change an update, however long the run.
        size = df["reward/kl_penalty"].dropna() if "reward/kl_penalty" in df else pd.Series([])
        if not len(size):
            return (
                "no KL reward logged (reward/kl_penalty; a KL loss term, kl_in_reward=false, is not measured)"
            )
        if not float(size.mean()) > 0:
            return f"the KL reward was {_fmt(float(size.mean()))} at every step: the KL did not act"
        if "reward/std" not in df or df["reward/std"].isna().all():
            return "no reward/std logged: the KL reward cannot be sized against the rewards' spread"
        spread = float(df["reward/std"].mean())
        share = float(size.mean()) / spread if spread > 0 else math.inf  # the only reward signal
        if share < MIN_KL_SHARE:
            return (
                f"the KL reward moved an episode's returns by at most {_fmt(float(size.mean()))}, "
                f"{share:.2%} of the rewards' spread {_fmt(spread)} (< {MIN_KL_SHARE:.0%}): "
                "the KL hardly acted"
            )
        return None
    if mechanism == "think":
        length = df["reasoning/length"].dropna() if "reasoning/length" in df else pd.Series([])
        if not len(length):
            # absent, or NaN at every step: no turn's tags matched, no reasoning to measure
            return "no reasoning/length logged" + (
                " (NaN at every step: no turn's tags matched the format)" if "reasoning/length" in df else ""
            )
        matched = df["reasoning/matched"].dropna() if "reasoning/matched" in df else pd.Series([])
        if len(matched):
            # Tokens a turn over all turns, not only the matched ones: an arm whose tags matched on a
            # few turns of one step out of 30 averaged many tokens there, and had not thought.
            rows = df.loc[matched.index]
            per_turn = float((rows["reasoning/length"].fillna(0.0) * matched).mean())
            if per_turn < MIN_REASONING_TOKENS:
                return (
                    f"its reasoning averaged {_fmt(per_turn)} tokens a turn over all its turns "
                    f"(< {MIN_REASONING_TOKENS:g}; {_fmt(float(length.mean()))} where the tags matched, "
                    f"on {float(matched.mean()):.0%} of its turns): the think arm did not think"
                )
            return None
        # a run store from before reasoning/matched: the matched turns' length alone
        if float(length.mean()) < MIN_REASONING_TOKENS:
            return (
                f"its reasoning averaged {_fmt(float(length.mean()))} tokens a turn "
                f"(< {MIN_REASONING_TOKENS:g}): the think arm did not think"
            )
        return None
    if mechanism == "filter":
        if "rollout/kept" not in df:
            return "no rollout/kept logged"
        if "cfg.train.groups" not in df or "cfg.train.group_size" not in df:
            return "no cfg.train.groups / cfg.train.group_size in the frame: the batch the filter chose from"
        # a step plays online_k × P × N episodes (each rollout feeds online_k updates), all filtered
        total = df["cfg.train.groups"] * df["cfg.train.group_size"] * _rollout_updates(df)
        if (df["rollout/kept"].dropna() >= total.loc[df["rollout/kept"].dropna().index]).all():
            return "the filter kept every episode"
        modes = set(df["cfg.algo.filter_mode"].dropna()) if "cfg.algo.filter_mode" in df else {"top"}
        if {"reward/group_std", "reward/group_std_kept"} <= set(df) and modes in ({"top"}, {"bottom"}):
            # Groups tied in reward std (all 0: every answer of a group scored the same) leave the
            # top-k choice to the order: the filter kept groups, but not by their std. (A random
            # filter chooses by design without it: not checked.)
            both = df[["step", "reward/group_std", "reward/group_std_kept"]].dropna()
            kept, every = both["reward/group_std_kept"], both["reward/group_std"]
            chose = kept > every + 1e-9 if modes == {"top"} else kept < every - 1e-9
            # the share of its seeds' steps where it chose, over the first n logged steps, at the
            # best n of at least MIN_FILTER_STEPS (all of them in a shorter run)
            by_step = chose.groupby(both["step"]).mean().sort_index()
            first = min(MIN_FILTER_STEPS, len(by_step))
            best = float(by_step.expanding().mean().iloc[first - 1 :].max()) if len(by_step) else 1.0
            if best == 0:  # kept == all at every step: every group's std was the same
                zero = float(every.abs().max()) < 1e-9
                alike = " (0: each group's answers all scored alike)" if zero else ""
                return (
                    f"every group had the same reward std at every logged step{alike}, so which "
                    "groups it kept fell to their order: the filter kept groups, but did not choose them "
                    "by their std"
                )
            if best < MIN_FILTER_SHARE:
                which = "exceeded" if modes == {"top"} else "fell below"
                return (
                    f"the kept groups' reward std {which} all groups' on at most {best:.0%} of the "
                    f"steps of any stretch from the start of {first} steps or more "
                    f"(< {MIN_FILTER_SHARE:.0%}; on the others every group had the same std): "
                    "the filter kept groups, but did not choose them by their std"
                )
        return None
    raise AssertionError(f"mechanism {mechanism!r} has no check in _arm_inactive")


CLIP_FRACS = ("policy/clip_frac_low", "policy/clip_frac_high")


def mechanism_arm(mechanism: str | None) -> str:
    """Which arm shows whether `mechanism` acted: "b" for clip_high (the lower ε_high: the tokens
    its upper bound clips are the ones arm a's higher bound would let through) and for kl (the arm
    that keeps the KL: "no KL beats KL"), "a and b" for actions and staleness (`actions_inactive`,
    `staleness_inactive`), else "a" (for think, arm b too where it thinks: `inactive`)."""
    if mechanism in ("actions", "staleness"):
        return "a and b"
    return "b" if mechanism in ("clip_high", "kl") else "a"


PER_TURN = "cfg.rollout.max_actions_per_turn"


def per_turn_limit(part: pd.DataFrame) -> int | None:
    """The one per-turn action limit an arm's runs played under (`rollout.max_actions_per_turn`, the
    env's default where unset), or None where its runs differ."""
    from ragen_lib import envs

    cols = [c for c in (PER_TURN, "cfg.env.name") if c in part]
    limits = {
        envs.env_class(r["cfg.env.name"])
        .limits(max_actions_per_turn=_int_or_none(r.get(PER_TURN)))
        .max_actions_per_turn
        for _, r in part[cols].drop_duplicates().iterrows()
    }
    return limits.pop() if len(limits) == 1 else None


def _int_or_none(value) -> int | None:
    """A run's integer setting from its DataFrame column (a `rollout.*` limit, `train.val_size`): None
    where the run left it unset (NaN in a store mixing runs that set it with runs that did not, or
    no such column)."""
    return None if value is None or pd.isna(value) else int(value)


def actions_inactive(A: pd.DataFrame, B: pd.DataFrame) -> str | None:
    """Why two arms' per-turn action limits did not separate their play, or None when they did (05's
    Table 3: k actions a turn with a 5k budget). Two limits differ only where an answer wrote more
    actions than the smaller one allows: the smaller limit then dropped pieces the larger would have
    played (`rollout/actions_dropped`, its arm), or the larger limit's arm played past the smaller
    (`rollout/actions_written` above the smaller limit, its arm's mean). Below `MIN_ACTIONS_DROPPED`
    and at or under the limit, both arms played what either limit allowed: the warm-up teaches every
    arm the env's default of 5 a turn, so a 7-action arm that never writes more than 5 plays as the
    5-action arm does, and 5 vs 7 compares a prompt's printed budget. Where the smaller limit is at
    or under the env's default (5 vs 7), the larger arm's `rollout/actions_past_default` is the share
    of its turns that played past the default, so past the smaller limit at least as often
    (`MIN_ACTIONS_DROPPED` or more: acted). Above the default (6 vs 8), and in runs stored before
    2026-12-02, a larger arm that passed the smaller limit on a minority of its turns, with a mean
    under it, is not seen: the row then errs to INCONCLUSIVE."""
    limits = {"a": per_turn_limit(A), "b": per_turn_limit(B)}
    order = _ordered(
        limits,
        f"played under different per-turn action limits ({PER_TURN})",
        f"both arms allow {limits['a']} actions a turn: no limit was manipulated",
    )
    if isinstance(order, str):
        return order
    small, large = order
    parts = {"a": A, "b": B}
    for arm, c in ((small, "rollout/actions_dropped"), (large, "rollout/actions_written")):
        if c not in parts[arm]:
            return f"no {c} logged (runs stored before 2026-12-02 lack it): whether a limit bound is unknown"
        if parts[arm][c].isna().all():
            return (
                f"arm {arm}'s {c} is NaN at every step: no turn's tags matched, so no answer wrote an "
                "action to count"
            )
    dropped = float(parts[small]["rollout/actions_dropped"].mean())
    written = float(parts[large]["rollout/actions_written"].mean())
    past, default = _past_default(parts[large], limits[small])
    if dropped >= MIN_ACTIONS_DROPPED or written > limits[small] or past >= MIN_ACTIONS_DROPPED:
        return None
    also = (
        f", past the env's default {default} on {past:.0%} of them (< {MIN_ACTIONS_DROPPED:.0%})"
        if past == past
        else ""
    )
    return (
        f"the {limits[small]}-action arm ({small}) wrote past its limit on {dropped:.0%} of its turns "
        f"(< {MIN_ACTIONS_DROPPED:.0%}) and the {limits[large]}-action arm ({large}) wrote "
        f"{_fmt(written)} actions a turn (≤ {limits[small]}){also}: both played what either limit allowed"
    )


def _ordered(settings: dict, differ: str, same: str) -> tuple[str, str] | str:
    """("a"/"b" with the smaller of the arms' `settings`, the other), or why they cannot be ordered:
    an arm whose runs differ in it ("arm a's runs " + `differ`), or both arms alike (`same`)."""
    if None in settings.values():
        return f"arm {'a' if settings['a'] is None else 'b'}'s runs {differ}"
    if settings["a"] == settings["b"]:
        return same
    small, large = sorted(settings, key=settings.get)
    return small, large


def _past_default(part: pd.DataFrame, limit: int) -> tuple[float, int | None]:
    """(share, default): the share of an arm's matched turns that wrote more than its env's default
    per-turn limit (`rollout/actions_past_default`), a lower bound of the share past `limit` where
    `limit` is at or under that default; (NaN, None) where it is above it, where the arm's envs'
    defaults differ, or where its runs did not log it."""
    from ragen_lib import envs

    c = "rollout/actions_past_default"
    if c not in part or part[c].isna().all() or "cfg.env.name" not in part:
        return math.nan, None
    defaults = {envs.env_class(name).max_actions_per_turn for name in part["cfg.env.name"].dropna().unique()}
    if len(defaults) != 1 or limit > (default := defaults.pop()):
        return math.nan, None
    return float(part[c].mean()), default


ONLINE_K = "cfg.train.online_k"

APPROX_KL = "policy/approx_kl"


def staleness_inactive(A: pd.DataFrame, B: pd.DataFrame) -> str | None:
    """Why two arms' rollouts were about as fresh as each other, or None where the staler arm's were
    staler (05's Fig. 10: online-1 against online-k). Taking k updates from one rollout makes its
    later updates off-policy only where the policy moves between them: the staler arm (the larger
    `train.online_k`) must have run its updates at least `MIN_STALENESS_GROWTH` times as far from the
    policy that played its rollouts as the fresher arm did (`policy/approx_kl`, means over each
    arm's logged steps; the fresher arm's is 0 where it takes one optimizer step a rollout, whose
    ratio is 1). A policy that hardly moved over k updates played the same answers it was updated
    with, and online-k then differs from online-1 only in how its initial states are batched.
    Against a fresher arm at exactly 0 any drift passes, the noise of bf16 forwards included: the
    check then catches only a policy that never moved, and errs toward judging the row."""
    ks = {"a": _online_k(A), "b": _online_k(B)}
    order = _ordered(
        ks,
        f"took different numbers of updates from a rollout ({ONLINE_K})",
        f"both arms take {ks['a']} update(s) from each rollout: freshness was not manipulated",
    )
    if isinstance(order, str):
        return order
    fresh, stale = order
    parts = {"a": A, "b": B}
    for arm in (fresh, stale):
        if APPROX_KL not in parts[arm] or parts[arm][APPROX_KL].isna().all():
            return (
                f"no {APPROX_KL} logged in arm {arm}: how far its updates ran from its rollouts' policy "
                "is unknown"
            )
    drift = {arm: float(parts[arm][APPROX_KL].mean()) for arm in (fresh, stale)}
    if drift[stale] > 0 and drift[stale] >= MIN_STALENESS_GROWTH * drift[fresh]:
        return None
    if not drift[stale] > 0:
        return (
            f"the online-{ks[stale]} arm ({stale}) ran every update at approx KL {_fmt(drift[stale])} "
            "from the policy that played its rollout: the policy never moved, so no rollout went stale"
        )
    return (
        f"the online-{ks[stale]} arm ({stale}) ran its updates at approx KL {_fmt(drift[stale])} from the "
        f"policy that played their rollout, under {MIN_STALENESS_GROWTH:g}× the online-{ks[fresh]} arm's "
        f"({fresh}) {_fmt(drift[fresh])}: the policy hardly moved between a rollout and its later updates, "
        "so the staler arm's rollouts were about as fresh"
    )


def _online_k(part: pd.DataFrame) -> int | None:
    """The one `train.online_k` of an arm's runs (1 where unrecorded: runs from before it), or None
    where its runs differ."""
    ks = set(part[ONLINE_K].fillna(1).astype(int)) if ONLINE_K in part else {1}
    return ks.pop() if len(ks) == 1 else None


TWO_ARM_CHECKS = {"actions": actions_inactive, "staleness": staleness_inactive}
"""The mechanisms that are a difference between the arms, each read on both (`inactive`)."""


MIN_REFERENCE_STATES = 64


def reference(
    env: str | None, n: int = MIN_REFERENCE_STATES, actions: int | None = None, env_kwargs: tuple = ()
) -> tuple[float, float] | None:
    """(floor, ceiling) of `env`'s success: random-policy and expert success within `actions`
    (None: the env's default budget), on its first `n` validation states, of the env built with
    `env_kwargs` ((name, value) pairs) (baselines.reference_success)."""
    if env is None:
        return None
    from ragen_lib import baselines

    ref = baselines.reference_success(env, n=n, actions=actions, env_kwargs=tuple(sorted(env_kwargs)))
    return float(ref["random"]), float(ref["expert"])


LIMITS = ("cfg.rollout.max_turns", "cfg.rollout.max_actions_per_turn", "cfg.rollout.max_actions_per_episode")

ENV_KWARGS = "cfg.env.kwargs."


class Reference(NamedTuple):
    """An arm's floor and ceiling (`arm_reference`), with the validation states they were measured
    on: a verdict's "random play (0.2)" then says on how many, where notebook 00's table of the same
    env, on its 256 states and at the default budget, may read 0.18."""

    floor: float
    ceiling: float
    states: tuple[int, ...] = ()  # the distinct counts, where its runs were validated on several


def arm_reference(part: pd.DataFrame, env: str | None) -> Reference | None:
    """(floor, ceiling) of `env`'s success for one arm's runs: within the action budget they played
    under (their `rollout.*` limits, the env's defaults where unset: 5 actions a turn over 5 turns is
    a 25-action budget, whose random play succeeds more often than at the default 10) and on the
    first max(val_size, MIN_REFERENCE_STATES) validation states: those they were validated on, and
    no fewer, so that a small validation set (the smoke profile's) does not set a noisy floor for
    the training success a collapse claim reads; and of the env as they built it (`env.kwargs`,
    where `env` is the env they trained on: a non-slippery FrozenLake's ceiling is 1). Runs under
    several budgets get the highest floor and the lowest ceiling, so the check errs toward
    INCONCLUSIVE."""
    if env is None:
        return None
    from ragen_lib import envs

    kw_cols = sorted(c for c in part if c.startswith(ENV_KWARGS))
    cols = [c for c in (*LIMITS, "cfg.train.val_size", "cfg.env.name", *kw_cols) if c in part]
    combos = part[cols].drop_duplicates() if cols and len(part) else pd.DataFrame([{}])
    refs, states = set(), set()
    for _, r in combos.iterrows():
        # a run's env.kwargs build its own env only (trainer._validation: not an extra one)
        own = r.get("cfg.env.name", env) == env
        kwargs = _env_kwargs(env, {c.removeprefix(ENV_KWARGS): r[c] for c in kw_cols}) if own else ()
        given = {c.removeprefix("cfg.rollout."): _int_or_none(r.get(c)) for c in LIMITS}
        limits = envs.env_class(env).limits(**given)
        n = max(_int_or_none(r.get("cfg.train.val_size")) or 0, MIN_REFERENCE_STATES)
        refs.add(reference(env, n=n, actions=limits.actions, env_kwargs=kwargs))
        states.add(n)
    return Reference(max(f for f, _ in refs), min(c for _, c in refs), tuple(sorted(states)))


def _env_kwargs(env: str, flat: dict) -> tuple:
    """A run's env.kwargs back from its DataFrame columns, as sorted (name, value) pairs of the
    env's field types: the frame holds a tuple as its text ("(8, 8)") and an int as a float where
    another run left the field unset (NaN: not set, left out)."""
    import ast

    from ragen_lib import envs

    defaults = envs.env_fields(env)
    out = []
    for name, value in sorted(flat.items()):
        if not isinstance(value, str) and pd.isna(value):
            continue
        value = value.item() if hasattr(value, "item") else value
        default = defaults.get(name)
        if isinstance(value, str) and not isinstance(default, str):
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):  # not a literal: the env's own check names it
                pass
        if isinstance(default, bool):
            value = bool(value)
        elif isinstance(default, int) and isinstance(value, float) and value.is_integer():
            value = int(value)
        out.append((name, tuple(value) if isinstance(value, list) else value))
    return tuple(out)
