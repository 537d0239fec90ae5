"""WebShop-lite: a 96-product shop with search, click and buy (the A*-PO WebShop-lite report)."""

from __future__ import annotations

import re

import numpy as np

from ragen_lib.envs.base import TextEnv

COLOURS = ("black", "white", "red", "blue", "green", "gray", "yellow", "brown")
SIZES = ("small", "medium", "large", "xlarge")
CATEGORIES = ("shoe", "clothing", "accessory")
BRANDS = ("acme", "nordic", "urban", "summit", "coastal", "metro")
TOP_K = 5
_ACTION = re.compile(r"^\s*(search|click|buy)\s*:\s*(.*?)\s*$", re.IGNORECASE | re.DOTALL)
_QUERY = re.compile(r"^[a-z0-9 $.\-]{1,100}$")


def catalogue(seed: int = 0, price_range: tuple[int, int] = (20, 150)) -> list[dict]:
    """The 96 products: every colour × size × category once, prices drawn once from `seed`."""
    rng = np.random.default_rng(seed)
    items = []
    for i, (colour, size, cat) in enumerate((c, s, k) for c in COLOURS for s in SIZES for k in CATEGORIES):
        brand = BRANDS[int(rng.integers(len(BRANDS)))]
        price = int(rng.integers(price_range[0], price_range[1] + 1))
        items.append({"id": f"p{i:02d}", "colour": colour, "size": size, "category": cat, "price": price,
                      "title": f"{brand} {colour} {cat}, size {size}"})
    return items


def eval_seeds(n: int = 256, seed: int = 42) -> list[int]:
    """The fixed evaluation instructions: `n` reset seeds drawn with `seed` (report: 256, 42)."""
    return [int(s) for s in np.random.default_rng(seed).choice(2**31 - 1, size=n, replace=False)]


class WebShopEnv(TextEnv):
    """Find and buy the product an instruction describes.

    ## Actions (free-form text, one per turn)
    `search:<query>` lists the top 5 products by words matched; `click:<id>` shows a product;
    `buy:<id>` buys it and ends the episode.

    ## Observation
    The instruction (colour, size, category, price cap) and the current page.

    ## Rewards (the report's tiers, paid on `buy`)
    1.0 for the right product (all four of colour, size, category and price ≤ cap);
    0.5 + 0.1 × matched attributes (0.5–0.8) for a wrong one. Searches and clicks pay
    `progress_reward` when they make progress (results or a page that match the target) and
    `no_progress_reward` otherwise; both default to 0 so the trajectory reward is exactly the tier.

    ## Episode end
    Terminated on `buy`; success = reward 1.0. Truncated after `max_steps` actions.

    ## Arguments
    catalog_seed=0, progress_reward=0.0, no_progress_reward=0.0, max_steps=15.
    """

    name = "webshop"
    actions = ()  # free-form; see action_help
    action_help = ("search:<query> (lists the top 5 matching products), click:<product id> (shows a "
                   "product), buy:<product id> (buys it and ends the episode)")
    instructions = ("You are shopping online. Find the product the instruction describes and buy it. "
                    "Product ids look like p07.")
    max_turns = 5
    max_actions_per_turn = 1
    max_actions_per_episode = 5

    def __init__(self, catalog_seed: int = 0, progress_reward: float = 0.0, no_progress_reward: float = 0.0,
                 max_steps: int = 15):
        super().__init__()
        self.products = catalogue(catalog_seed)
        self.by_id = {p["id"]: p for p in self.products}
        self.progress_reward, self.no_progress_reward, self.max_steps = (progress_reward, no_progress_reward,
                                                                         max_steps)
        self.goal: dict = {}
        self.page, self.steps, self.shown = "home", 0, []

    # --- Gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        target = self.products[int(self.np_random.integers(len(self.products)))]
        cap = int(np.ceil(target["price"] / 10) * 10 + 10 * self.np_random.integers(0, 4))
        self.goal = {"colour": target["colour"], "size": target["size"], "category": target["category"],
                     "cap": cap}
        self.page, self.steps, self.shown, self.clicked = "home", 0, [], set()
        return self.render(), {"success": False}

    def parse_action(self, text: str) -> str | None:
        if len(text) > 200:
            return None
        m = _ACTION.match(text)
        if not m:
            return None
        verb, arg = m.group(1).lower(), m.group(2).strip().lower()
        if verb == "search":
            return f"search:{arg}" if _QUERY.match(arg) else None
        return f"{verb}:{arg}" if arg in self.by_id else None

    def step(self, action: str):
        canonical = self.parse_action(action)
        if canonical is None:
            raise ValueError(f"webshop: invalid action {action!r}; valid forms: {self.action_help}")
        verb, arg = canonical.split(":", 1)
        self.steps += 1
        reward, terminated, success, progress = 0.0, False, False, False
        if verb == "search":
            self.shown = self._search(arg)
            self.page = "results"
            progress = any(self._matches(p) == 4 for p in self.shown)
        elif verb == "click":
            self.page, product = arg, self.by_id[arg]
            progress = self._matches(product) >= 3 and arg not in self.clicked
            self.clicked.add(arg)
        else:
            n = self._matches(self.by_id[arg])
            success = n == 4
            reward = 1.0 if success else 0.5 + 0.1 * min(n, 3)
            terminated, self.page = True, f"bought:{arg}"
        if verb != "buy":
            reward = self.progress_reward if progress else self.no_progress_reward
        truncated = not terminated and self.steps >= self.max_steps
        info = {"success": success, "progress": progress}
        return self.render(), float(reward), terminated, truncated, info

    def render(self) -> str:
        g = self.goal
        head = (f"Instruction: Find a {g.get('colour')} {g.get('category')} in size {g.get('size')} "
                f"under ${g.get('cap')}.")
        if self.page == "home":
            body = "Page: home. Search to see products."
        elif self.page == "results":
            body = "Page: search results\n" + "\n".join(
                f"{p['id']}: {p['title']} ${p['price']}" for p in self.shown) if self.shown else \
                "Page: search results\nNo products match."
        elif self.page.startswith("bought:"):
            p = self.by_id[self.page.split(":", 1)[1]]
            body = f"You bought {p['id']}: {p['title']} ${p['price']}."
        else:
            p = self.by_id[self.page]
            body = (f"Page: product {p['id']}\nTitle: {p['title']}\nColour: {p['colour']}\nSize: {p['size']}\n"
                    f"Category: {p['category']}\nPrice: ${p['price']}")
        return f"{head}\n{body}"

    # --- helpers and the scripted expert ----------------------------------------------------
    def _matches(self, p: dict) -> int:
        g = self.goal
        return (p["colour"] == g["colour"]) + (p["size"] == g["size"]) + (p["category"] == g["category"]) \
            + (p["price"] <= g["cap"])

    def _search(self, query: str) -> list[dict]:
        words = set(query.split())

        def score(p):
            fields = {p["colour"], p["size"], p["category"], *p["title"].replace(",", "").split()}
            return -len(words & fields)

        ranked = sorted((p for p in self.products if score(p) < 0), key=lambda p: (score(p), p["id"]))
        return ranked[:TOP_K]

    def expert_action(self) -> str:
        """search → click the matching product → buy it."""
        g = self.goal
        if self.page == "home" or (self.page == "results" and not self._best_shown()):
            return f"search:{g['colour']} {g['size']} {g['category']}"
        if self.page == "results":
            return f"click:{self._best_shown()['id']}"
        return f"buy:{self.page}"

    def _best_shown(self) -> dict | None:
        good = [p for p in self.shown if self._matches(p) == 4]
        return good[0] if good else None
