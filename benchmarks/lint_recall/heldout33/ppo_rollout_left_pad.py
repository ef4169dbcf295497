"""PPO rollouts and updates for a small policy with a value head, prompts left-padded.

Modelled on TRL's PPOTrainer: prompts are left-padded, ``batch_generation`` samples responses
with a key/value cache, ``truncate_response`` cuts each response after its stop token,
``forward`` recomputes log-probabilities and values over ``query_responses`` with position ids
from the cumulative attention mask, and the update uses a KL-shaped reward, GAE, whitened
advantages, and clipped policy and value losses, with ``masked_mean`` over response tokens.

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


@dataclass
class PPOConfig:
    response_length: int = 8
    temperature: float = 1.0
    kl_coef: float = 0.05
    gamma: float = 1.0
    lam: float = 0.95
    cliprange: float = 0.2
    cliprange_value: float = 0.2
    vf_coef: float = 0.1
    num_ppo_epochs: int = 2
    learning_rate: float = 3e-4
    stop_token_id: int = 1
    pad_token_id: int = 0


@dataclass
class PolicyConfig:
    vocab_size: int = 24
    n_embd: int = 48
    n_head: int = 4
    n_layer: int = 2
    n_positions: int = 64


class Attention(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x, key_keep, layer_past=None):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        if layer_past is not None:
            k = torch.cat([layer_past[0], k], dim=2)
            v = torch.cat([layer_past[1], v], dim=2)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=key_keep)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=key_keep, is_causal=True)  # expect: MC506 ppo
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), (k, v)


class Block(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x, key_keep, layer_past=None):
        a, present = self.attn(self.ln_1(x), key_keep, layer_past)
        x = x + a
        return x + self.mlp(self.ln_2(x)), present


class PolicyAndValueWrapper(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.v_head = nn.Linear(cfg.n_embd, 1)

    def forward(self, input_ids, attention_mask, position_ids, past_key_values=None):
        x = self.wte(input_ids) + self.wpe(position_ids)
        key_keep = attention_mask[:, None, None, :].bool()
        presents = []
        for i, block in enumerate(self.h):
            x, present = block(x, key_keep, None if past_key_values is None else past_key_values[i])
            presents.append(present)
        x = self.ln_f(x)
        return self.lm_head(x), self.v_head(x).squeeze(-1), presents


def forward(model, query_responses, pad_token_id):
    attention_mask = query_responses != pad_token_id
    position_ids = attention_mask.cumsum(1) - attention_mask.long()
    input_ids = torch.masked_fill(query_responses, ~attention_mask, 0)
    logits, values, _ = model(input_ids, attention_mask, position_ids)
    return logits, values


@torch.no_grad()
def batch_generation(model, queries, args: PPOConfig, generator):
    attention_mask = queries != args.pad_token_id
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    input_ids = torch.masked_fill(queries, ~attention_mask, 0)
    logits, _, past = model(input_ids, attention_mask, position_ids)
    next_pos = position_ids[:, -1:] + 1
    tokens = []
    for _ in range(args.response_length):
        probs = F.softmax(logits[:, -1] / args.temperature, dim=-1)
        token = torch.multinomial(probs, 1, generator=generator)
        tokens.append(token)
        attention_mask = torch.cat([attention_mask, torch.ones_like(token, dtype=torch.bool)], dim=1)
        logits, _, past = model(token, attention_mask, next_pos, past)
        next_pos = next_pos + 1
    return torch.cat(tokens, dim=1)


def first_true_indices(bools: torch.Tensor, dtype=torch.long) -> torch.Tensor:
    row_len = bools.size(-1)
    zero_or_index = row_len * (~bools).type(dtype) + torch.arange(row_len, dtype=dtype, device=bools.device)
    return torch.min(zero_or_index, dim=-1).values


def truncate_response(stop_token_id: int, pad_token_id: int, responses: torch.Tensor) -> torch.Tensor:
    trunc_idxs = first_true_indices(responses == stop_token_id).unsqueeze(-1)
    idxs = torch.arange(responses.size(1), device=responses.device).view(1, -1)
    return torch.masked_fill(responses, idxs > trunc_idxs, pad_token_id)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    return (values - mean) * torch.rsqrt(var + 1e-8)


def score_responses(responses: torch.Tensor, stop_token_id: int) -> torch.Tensor:
    return (responses == 7).float().sum(1) - 0.5 * (responses == stop_token_id).float().sum(1)


def rollout(policy, ref_policy, queries, args: PPOConfig, generator):
    context_length = queries.shape[1]
    responses = truncate_response(args.stop_token_id, args.pad_token_id, batch_generation(policy, queries, args, generator))
    query_responses = torch.cat([queries, responses], dim=1)
    with torch.no_grad():
        logits, values = forward(policy, query_responses, args.pad_token_id)
        ref_logits, _ = forward(ref_policy, query_responses, args.pad_token_id)
    resp_logits = logits[:, context_length - 1 : -1] / args.temperature
    ref_resp_logits = ref_logits[:, context_length - 1 : -1] / args.temperature
    logprobs = torch.gather(resp_logits.log_softmax(-1), 2, responses.unsqueeze(-1)).squeeze(-1)
    ref_logprobs = torch.gather(ref_resp_logits.log_softmax(-1), 2, responses.unsqueeze(-1)).squeeze(-1)
    values = values[:, context_length - 1 : -1]
    padding_mask = responses == args.pad_token_id
    sequence_lengths = first_true_indices(padding_mask) - 1
    rewards = -args.kl_coef * (logprobs - ref_logprobs).masked_fill(padding_mask, 0.0)
    scores = score_responses(responses, args.stop_token_id)
    rewards[torch.arange(rewards.size(0)), sequence_lengths.clamp(min=0)] += scores
    values = values.masked_fill(padding_mask, 0.0)
    lastgaelam = torch.zeros(rewards.size(0))
    advantages_reversed = []
    for t in reversed(range(responses.shape[1])):
        nextvalues = values[:, t + 1] if t < responses.shape[1] - 1 else 0.0
        delta = rewards[:, t] + args.gamma * nextvalues - values[:, t]
        lastgaelam = delta + args.gamma * args.lam * lastgaelam
        advantages_reversed.append(lastgaelam)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    returns = advantages + values
    advantages = masked_whiten(advantages, ~padding_mask).masked_fill(padding_mask, 0.0)
    return dict(query_responses=query_responses, responses=responses, logprobs=logprobs, values=values,
                advantages=advantages, returns=returns, padding_mask=padding_mask, scores=scores)


def ppo_update(policy, optimizer, batch, context_length, args: PPOConfig):
    keep = ~batch["padding_mask"]
    for _ in range(args.num_ppo_epochs):
        logits, vpred = forward(policy, batch["query_responses"], args.pad_token_id)
        logits = logits[:, context_length - 1 : -1] / args.temperature
        new_logprobs = torch.gather(logits.log_softmax(-1), 2, batch["responses"].unsqueeze(-1)).squeeze(-1)
        vpred = vpred[:, context_length - 1 : -1]
        vpredclipped = batch["values"] + (vpred - batch["values"]).clamp(-args.cliprange_value, args.cliprange_value)
        vf_loss = 0.5 * masked_mean(torch.max((vpred - batch["returns"]) ** 2, (vpredclipped - batch["returns"]) ** 2), keep)
        ratio = torch.exp(new_logprobs - batch["logprobs"])
        pg_losses = torch.max(-batch["advantages"] * ratio, -batch["advantages"] * ratio.clamp(1 - args.cliprange, 1 + args.cliprange))
        loss = masked_mean(pg_losses, keep) + args.vf_coef * vf_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def left_pad(prompts: list[list[int]], pad_token_id: int) -> torch.Tensor:
    width = max(len(p) for p in prompts)
    return torch.tensor([[pad_token_id] * (width - len(p)) + p for p in prompts])


def main() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    args, cfg = PPOConfig(), PolicyConfig()
    policy = PolicyAndValueWrapper(cfg)
    ref_policy = PolicyAndValueWrapper(cfg).requires_grad_(False)
    ref_policy.load_state_dict(policy.state_dict())
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.learning_rate)
    prompts = [[int(t) for t in torch.randint(2, cfg.vocab_size, (n,), generator=g)] for n in (3, 7, 5, 2, 6, 4)]
    queries = left_pad(prompts, args.pad_token_id)
    for it in range(4):
        batch = rollout(policy, ref_policy, queries, args, g)
        loss = ppo_update(policy, optimizer, batch, queries.shape[1], args)
        print(f"iteration {it} mean score {batch['scores'].mean().item():.3f} loss {loss:.4f}")

    query_responses = batch["query_responses"]
    with torch.no_grad():
        default_logits, _ = forward(policy, query_responses, args.pad_token_id)
        alone = torch.cat([torch.tensor([prompts[3]]), batch["responses"][3:4]], dim=1)
        alone_logits, _ = forward(policy, alone, args.pad_token_id)
        width = alone.shape[1]
        print(f"prompt 3 left-padded vs alone: {(default_logits[3, -width:] - alone_logits[0]).abs().max().item():.3g}")
        try:
            with sdpa_kernel(SDPBackend.MATH):
                math_logits, _ = forward(policy, query_responses, args.pad_token_id)
            print(f"math kernel vs default kernel: {(math_logits - default_logits).abs().max().item():.3g}")
        except RuntimeError as err:
            print(f"math kernel: RuntimeError: {err}")


if __name__ == "__main__":
    main()
