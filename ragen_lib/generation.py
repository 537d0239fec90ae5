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
             generator: torch.Generator | None = None) -> list[list[int]]:
    """Sample continuations of `prompts` (lists of token ids, any lengths), all in one batch.

    Each row stops at `eos_token_id` (kept), at a stop string (kept through the token that
    completes it) or after `max_new_tokens`. temperature 0 is greedy and ignores `generator`.
    Returns the new token ids per row.
    """
    device = next(model.parameters()).device
    B = len(prompts)
    width = max(len(p) for p in prompts)
    # Left padding puts every row's last prompt token at the same column.
    input_ids = torch.full((B, width), pad_token_id, dtype=torch.long)
    attn = torch.zeros((B, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        attn[i, width - len(p):] = 1
    input_ids, attn = input_ids.to(device), attn.to(device)
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, T) positions ignore the padding
    cache = DynamicCache()
    out = model(input_ids=input_ids, attention_mask=attn, position_ids=position_ids,
                past_key_values=cache, use_cache=True)
    generated: list[list[int]] = [[] for _ in range(B)]
    live = torch.ones(B, dtype=torch.bool, device=device)
    next_pos = position_ids[:, -1:] + 1  # (B, 1)
    for _ in range(max_new_tokens):
        logits = out.logits[:, -1, :].float()  # (B, V)
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
        if not live.any():
            break
        attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=device)], dim=1)
        out = model(input_ids=new[:, None], attention_mask=attn, position_ids=next_pos,
                    past_key_values=out.past_key_values, use_cache=True)
        next_pos = next_pos + 1
    return generated
