"""Batched sampling with a KV cache, our own loop rather than `model.generate`, because we need
(1) a `torch.Generator` we own (HF generate draws from the global RNG), (2) a per-row stop at
`</answer>` without decoding every row at every step, and (3) one place to make fast later.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


class StopOnText:
    """Per-row stop when the decoded tail contains any of `stops` (e.g. "</answer>").

    Only rows whose new token can end a stop string are decoded, which keeps the check off the
    hot path: for "</answer>" that is the few tokens whose text contains ">".
    """

    def __init__(self, tokenizer, stops: tuple[str, ...], tail_tokens: int = 8):
        self.tokenizer, self.stops, self.tail = tokenizer, stops, tail_tokens
        last_chars = {s[-1] for s in stops}
        vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self.candidates = torch.tensor(
            [any(c in (tok or "") for c in last_chars) for tok in vocab], dtype=torch.bool
        )

    def __call__(self, generated: list[list[int]], new_tokens: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        hit = torch.zeros_like(live)
        maybe = live & self.candidates.to(new_tokens.device)[new_tokens]
        for i in maybe.nonzero().flatten().tolist():
            tail = self.tokenizer.decode(generated[i][-self.tail:])
            hit[i] = any(s in tail for s in self.stops)
        return hit


@torch.no_grad()
def generate(model, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
             eos_token_id: int, pad_token_id: int, stop: StopOnText | None = None,
             generator: torch.Generator | None = None, group_size: int = 1) -> list[list[int]]:
    """Sample continuations of `prompts` (lists of token ids, any lengths), all in one batch.

    Each row stops at `eos_token_id` (kept), at a stop string (kept through the token that
    completes it) or after `max_new_tokens`. temperature 0 is greedy and ignores `generator`.
    `group_size` > 1 says the prompts come in contiguous groups of that many identical rows
    (a GRPO/StarPO group on its first turn): each distinct prompt is prefilled once and its KV
    cache copied to the group's rows. The samples drawn are the same as with group_size=1.
    Returns the new token ids per row.
    """
    device = next(model.parameters()).device
    B = len(prompts)
    _check_groups(prompts, group_size)
    input_ids, attn = _left_pad(prompts[::group_size], pad_token_id, device)
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)  # (P, T) positions ignore the padding
    cache = DynamicCache()
    # logits_to_keep=1: the LM head over every prompt position would cost more than the rest of
    # the prefill for a small model with a 49k vocabulary, and only the last position is sampled.
    out = model(input_ids=input_ids, attention_mask=attn, position_ids=position_ids,
                past_key_values=cache, use_cache=True, logits_to_keep=1)
    logits = out.logits[:, -1, :].float()  # (P, V)
    if group_size > 1:
        # Prefill is O(P·T²) attention plus O(P·T) MLP: with N samples per prompt, copying the
        # cache rows costs a memcpy where recomputing them would cost N× the prefill.
        cache.batch_repeat_interleave(group_size)
        logits, attn, position_ids = (x.repeat_interleave(group_size, dim=0)
                                      for x in (logits, attn, position_ids))
    generated: list[list[int]] = [[] for _ in range(B)]
    live = torch.ones(B, dtype=torch.bool, device=device)
    next_pos = position_ids[:, -1:] + 1  # (B, 1)
    for i_step in range(max_new_tokens):
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            new = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            new = logits.argmax(-1)
        new = torch.where(live, new, torch.full_like(new, pad_token_id))
        for i in live.nonzero().flatten().tolist():
            generated[i].append(int(new[i]))
        finished = live & (new == eos_token_id)
        if stop is not None:
            finished |= stop(generated, new, live)
        live &= ~finished
        if not live.any() or i_step == max_new_tokens - 1:
            break  # no forward for a token nobody will sample
        attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=device)], dim=1)
        out = model(input_ids=new[:, None], attention_mask=attn, position_ids=next_pos,
                    past_key_values=cache, use_cache=True)
        logits = out.logits[:, -1, :].float()  # (B, V)
        next_pos = next_pos + 1
    return generated


def _left_pad(prompts: list[list[int]], pad_token_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask), both (B, T). Left padding puts every row's last prompt token at
    the same column, so one decode step serves every row."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        attn[i, width - len(p):] = 1
    return input_ids.to(device), attn.to(device)


def _check_groups(prompts: list[list[int]], group_size: int) -> None:
    if group_size < 1 or len(prompts) % group_size:
        raise ValueError(f"group_size={group_size} must be ≥ 1 and divide the {len(prompts)} prompts")
    if group_size > 1 and any(prompts[i] != prompts[i - i % group_size] for i in range(len(prompts))):
        raise ValueError("group_size > 1 shares one prefill per group, but the rows of a group differ; "
                         "pass group_size=1 (later turns of a multi-turn rollout diverge)")
