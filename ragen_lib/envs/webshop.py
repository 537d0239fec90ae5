"""WebShop-lite: a 96-product shop with search, click and buy (the A*-PO WebShop-lite report)."""

from __future__ import annotations

import re

import numpy as np

from ragen_lib.envs.base import TextEnv

COLOURS = ("black", "white", "red", "blue", "green", "gray", "yellow", "brown")
SIZES = ("small", "medium", "large", "xlarge")
CATEGORIES = ("shoe", "clothing", "accessory")
# Made-up brand words: titles read like shop listings, and a search for a brand is a plausible
# (but unhelpful) query the agent has to learn to avoid.
BRANDS = ("acme", "nordic", "urban", "summit", "coastal", "metro")
ATTRIBUTES = ("colour", "size", "category")
# Verb, then the argument; the whole action must be one piece (anything after it is part of the arg).
_ACTION = re.compile(r"^\s*(search|click|buy)\s*:\s*(.*?)\s*$", re.IGNORECASE | re.DOTALL)
# Queries are plain lower-case ASCII words: rejects non-ASCII, tags and newlines the model leaks.
_QUERY = re.compile(r"^[a-z0-9 $.\-]{1,100}$")
# Punctuation a query copied from the shop's own listings carries ("metro red shoe, size large",
# "men's"): read as a space, as the search reads titles without their commas.
_QUERY_PUNCTUATION = re.compile(r"[,;:'\"()!?]")
MAX_ACTION_CHARS = 200


def catalogue(seed: int = 0, price_min: int = 20, price_max: int = 150) -> list[dict]:
    """The 96 products: every colour × size × category once, brands and prices drawn from `seed`.

    Its own generator (not the env's) so that the shop is the same in every episode and instance.
    """
    rng = np.random.default_rng(seed)
    items = []
    combos = ((c, s, k) for c in COLOURS for s in SIZES for k in CATEGORIES)
    for i, (colour, size, cat) in enumerate(combos):
        brand = BRANDS[int(rng.integers(len(BRANDS)))]
        price = int(rng.integers(price_min, price_max + 1))  # uniform, both ends included
        items.append(
            {
                "id": f"p{i:02d}",
                "colour": colour,
                "size": size,
                "category": cat,
                "price": price,
                "title": f"{brand} {colour} {cat}, size {size}",
            }
        )
    return items


def eval_seeds(n: int = 256, seed: int = 42) -> list[int]:
    """The fixed evaluation instructions: `n` distinct reset seeds drawn with `seed` (report: 256, 42).
    The first n of one draw of 256 (of n, above it): a 128-state validation (quick) is part of the
    paper's 256, as every other env's is, where separate draws of 128 and 256 shared no seed."""
    draw = np.random.default_rng(seed).choice(2**31 - 1, size=max(n, 256), replace=False)
    return [int(s) for s in draw[:n]]


class WebShopEnv(TextEnv):
    """Find and buy the product an instruction describes.

    ## Actions
    Free-form text, one action per turn: `search:<query>` lists the top `top_k` products by
    query words matched (ties by id); `click:<id>` shows a product page; `buy:<id>` buys it
    and ends the episode. Ids are `p00`..`p95`; verbs are case-insensitive.

    ## Observation
    The instruction ("Find a red shoe in size large under $80.") and the current page: home,
    search results (one `id: title $price` per line) or a product page.

    ## Rewards
    The report's tiers, paid on `buy`: 1.0 for the right product (colour, size, category and
    price ≤ cap all match); 0.5 + 0.1 × attributes matched (0.5..0.8) for a wrong one. A
    search or click pays `progress_reward` when it makes progress (results that contain the
    target, or a first click on a product matching ≥ 3 of 4 attributes) and `no_progress_reward`
    otherwise (the report uses 0.3–0.5 and 0.1–0.3). Both default to 0 because the rollout sums
    step rewards, so with them the trajectory reward would no longer be the tier;
    `info["progress"]` records the progress either way.

    ## Episode end
    Terminated on `buy` (success when the reward is 1.0); truncated after `max_steps` actions
    (the rollout's 5-action budget normally ends the episode first).

    ## Arguments
    catalog_seed=0 (fixes the catalogue); price_min=20, price_max=150 (dollar range of the
    prices); max_cap_margin=30 (the cap is the target's price rounded up to $10 plus 0..this
    many dollars in $10 steps); top_k=5 (search results shown); progress_reward=0.0;
    no_progress_reward=0.0; max_steps=15.
    """

    name = "webshop"
    actions = ()  # free-form; `action_help` describes the syntax in the prompt
    action_help = (
        "search:<query> (lists the top 5 matching products), click:<product id> (shows a "
        "product), buy:<product id> (buys it and ends the episode)"
    )
    # Laid out as RAGEN's WebShop prompt (config/envs.yaml:98): the action syntax and an example
    # answer live in the instruction, since free-form actions have no list to show.
    instructions = (
        "You are shopping online. Find the product the instruction describes (colour, "
        "category, size and price cap) and buy it. Product ids look like p07. Valid answers are "
        + action_help
        + ", one action per answer, like <answer>search:red shoe large</answer>"
    )
    max_turns = 5
    max_actions_per_turn = 1
    max_actions_per_episode = 5

    def __init__(
        self,
        catalog_seed: int = 0,
        price_min: int = 20,
        price_max: int = 150,
        max_cap_margin: int = 30,
        top_k: int = 5,
        progress_reward: float = 0.0,
        no_progress_reward: float = 0.0,
        max_steps: int = 15,
    ):
        super().__init__()
        if not 0 < price_min <= price_max:
            raise ValueError(f"need 0 < price_min <= price_max, got {price_min}, {price_max}")
        if max_cap_margin < 0 or top_k < 1 or max_steps < 1:
            raise ValueError("max_cap_margin must be >= 0, top_k and max_steps >= 1")
        self.products = catalogue(catalog_seed, price_min, price_max)
        self.by_id = {p["id"]: p for p in self.products}
        self.max_cap_margin, self.top_k, self.max_steps = max_cap_margin, top_k, max_steps
        self.progress_reward, self.no_progress_reward = progress_reward, no_progress_reward
        if top_k != 5:  # keep the prompt truthful about how many results a search lists
            self.action_help = self.action_help.replace("top 5", f"top {top_k}")
            self.instructions = self.instructions.replace("top 5", f"top {top_k}")
        self.goal: dict = {}
        self.page, self.steps = "home", 0
        self.shown: list[dict] = []
        self.clicked: set[str] = set()

    # --- Gymnasium API -----------------------------------------------------------------------
    @classmethod
    def eval_seeds(cls, n: int) -> list[int]:
        """The report's fixed evaluation instructions (drawn with seed 42)."""
        return eval_seeds(n)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        # Draw the target first and set the cap at or above its price: every instruction is
        # satisfiable, and exactly one product (the unique colour/size/category) satisfies it.
        target = self.products[int(self.np_random.integers(len(self.products)))]
        margin = 10 * int(self.np_random.integers(0, self.max_cap_margin // 10 + 1))
        cap = int(np.ceil(target["price"] / 10) * 10) + margin
        self.goal = {**{k: target[k] for k in ATTRIBUTES}, "cap": cap}
        self.page, self.steps, self.shown, self.clicked = "home", 0, [], set()
        return self.render(), {"success": False, "progress": False}

    def parse_action(self, text: str) -> str | None:
        if not isinstance(text, str) or len(text) > MAX_ACTION_CHARS:
            return None
        m = _ACTION.match(text)
        if not m:
            return None
        verb, arg = m.group(1).lower(), m.group(2).strip().lower()
        if verb == "search":
            query = " ".join(_QUERY_PUNCTUATION.sub(" ", arg).split())  # one canonical form
            return f"search:{query}" if _QUERY.match(query) else None
        return f"{verb}:{arg}" if arg in self.by_id else None

    def step(self, action: str):
        canonical = self.parse_action(action)
        if canonical is None:
            raise ValueError(f"webshop: invalid action {str(action)[:80]!r}; valid forms: {self.action_help}")
        verb, arg = canonical.split(":", 1)
        self.steps += 1
        terminated, success, progress = False, False, False
        if verb == "search":
            self.shown, self.page = self._search(arg), "results"
            progress = any(self._matches(p) == 4 for p in self.shown)
            reward = self.progress_reward if progress else self.no_progress_reward
        elif verb == "click":
            product = self.by_id[arg]
            # Only the first click on a near-match counts: re-clicking must not farm shaping reward.
            progress = self._matches(product) >= 3 and arg not in self.clicked
            self.clicked.add(arg)
            self.page = arg
            reward = self.progress_reward if progress else self.no_progress_reward
        else:
            n = self._matches(self.by_id[arg])
            success = n == 4
            # round(): a guard for other tiers (0.1 * 3 is 0.30000000000000004; 0.5 + it happens to
            # round back to 0.8, as do n = 0..3 here), so a reward is the tier's decimal as printed
            reward = 1.0 if success else round(0.5 + 0.1 * n, 10)
            terminated, self.page = True, f"bought:{arg}"
        truncated = not terminated and self.steps >= self.max_steps
        return self.render(), float(reward), terminated, truncated, {"success": success, "progress": progress}

    def render(self) -> str:
        g = self.goal
        head = (
            f"Instruction: Find a {g.get('colour')} {g.get('category')} in size {g.get('size')} "
            f"under ${g.get('cap')}."
        )
        if self.page == "home":
            body = "Page: home"
        elif self.page == "results":
            lines = [f"{p['id']}: {p['title']} ${p['price']}" for p in self.shown] or ["No products match."]
            body = "Page: search results\n" + "\n".join(lines)
        elif self.page.startswith("bought:"):
            p = self.by_id[self.page.split(":", 1)[1]]
            body = f"Page: order placed\nYou bought {p['id']}: {p['title']} ${p['price']}."
        else:
            p = self.by_id[self.page]
            body = (
                f"Page: product {p['id']}\nTitle: {p['title']}\nColour: {p['colour']}\nSize: {p['size']}\n"
                f"Category: {p['category']}\nPrice: ${p['price']}"
            )
        return f"{head}\n{body}"

    # --- helpers and the scripted expert ----------------------------------------------------
    def _matches(self, p: dict) -> int:
        """How many of the four target attributes (colour, size, category, price ≤ cap) `p` has."""
        g = self.goal
        return sum(p[k] == g[k] for k in ATTRIBUTES) + (p["price"] <= g["cap"])

    def _search(self, query: str) -> list[dict]:
        words = set(query.split())

        def hits(p: dict) -> int:
            fields = {*(p[k] for k in ATTRIBUTES), *p["title"].replace(",", "").split()}
            return len(words & fields)

        ranked = sorted((p for p in self.products if hits(p) > 0), key=lambda p: (-hits(p), p["id"]))
        return ranked[: self.top_k]

    def random_action(self, rng: np.random.Generator) -> str:
        """A valid action with random content: a query of random attribute words, a click on a
        random listed product, or buying the product on the page."""
        options = (
            ["search"] + (["click"] if self.shown else []) + (["buy"] if self.page in self.by_id else [])
        )
        verb = str(rng.choice(options))
        if verb == "search":
            return f"search:{rng.choice(COLOURS)} {rng.choice(SIZES)} {rng.choice(CATEGORIES)}"
        if verb == "click":
            return f"click:{self.shown[int(rng.integers(len(self.shown)))]['id']}"
        return f"buy:{self.page}"

    def expert_action(self) -> str:
        """search → click the matching product → buy it (3 steps on every instruction)."""
        g = self.goal
        if self.page.startswith("bought:"):
            raise RuntimeError("webshop: the episode is over (already bought)")
        if self.page in self.by_id and self._matches(self.by_id[self.page]) == 4:
            return f"buy:{self.page}"
        best = self._best_shown() if self.page == "results" else None
        if best is not None:
            return f"click:{best['id']}"
        return f"search:{g['colour']} {g['size']} {g['category']}"

    def _best_shown(self) -> dict | None:
        good = [p for p in self.shown if self._matches(p) == 4]
        return good[0] if good else None
