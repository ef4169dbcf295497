"""Reward model and PPO fine-tuning of a small GPT policy on left-padded prompts.

The layout follows TRL / OpenRLHF-style RLHF code: a GPT-2-like causal LM with SDPA attention
whose position ids come from the attention mask's cumsum, a policy with a value head, a
`RewardModel` trained on pairwise preferences with the Bradley-Terry loss and read at the last
token, then rollouts from left-padded prompts, a per-token KL penalty to the frozen reference
policy, GAE and the clipped PPO objective. Held-out preference pairs are scored under the
MATH kernel for reproducible numbers.

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8; pytorch/pytorch PR
#111007 (conventions.md §1).
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


@dataclass
class GPTConfig:
    vocab_size: int = 32
    n_positions: int = 64
    n_embd: int = 64
    n_head: int = 4
    n_layer: int = 2
    pad_token_id: int = 0
    bos_token_id: int = 1
    good_token_id: int = 7
    bad_token_id: int = 8


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, is_causal=True)  # expect: MC506 rlhf
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
        )

    def forward(self, x, attention_mask):
        x = x + self.attn(self.ln_1(x), attention_mask)
        return x + self.mlp(self.ln_2(x))


class GPTModel(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        hidden = self.wte(input_ids) + self.wpe(position_ids)
        extended = attention_mask.bool()[:, None, None, :]
        for block in self.h:
            hidden = block(hidden, extended)
        return self.ln_f(hidden)


class CausalLMWithValueHead(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.transformer = GPTModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.v_head = nn.Linear(config.n_embd, 1)

    def forward(self, input_ids, attention_mask):
        hidden = self.transformer(input_ids, attention_mask)
        return self.lm_head(hidden), self.v_head(hidden).squeeze(-1)


class RewardModel(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.transformer = GPTModel(config)
        self.score = nn.Linear(config.n_embd, 1, bias=False)

    def forward(self, input_ids, attention_mask):
        hidden = self.transformer(input_ids, attention_mask)
        return self.score(hidden[:, -1]).squeeze(-1)


def left_pad(seqs: list[list[int]], pad_id: int):
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s)
        mask[i, width - len(s) :] = 1
    return ids, mask


def sample_prompts(n: int, rng: random.Random, cfg: GPTConfig) -> list[list[int]]:
    prompts = []
    for _ in range(n):
        body = [rng.randrange(9, cfg.vocab_size) for _ in range(rng.randrange(2, 8))]
        prompts.append([cfg.bos_token_id, *body])
    return prompts


def preference_pairs(n: int, rng: random.Random, cfg: GPTConfig):
    chosen, rejected = [], []
    for prompt in sample_prompts(n, rng, cfg):
        good = [rng.choice([cfg.good_token_id, rng.randrange(9, cfg.vocab_size)]) for _ in range(6)]
        bad = [rng.choice([cfg.bad_token_id, rng.randrange(9, cfg.vocab_size)]) for _ in range(6)]
        chosen.append(prompt + good)
        rejected.append(prompt + bad)
    return chosen, rejected


def train_reward_model(rm: RewardModel, cfg: GPTConfig, rng: random.Random, steps: int = 60):
    opt = torch.optim.AdamW(rm.parameters(), lr=1e-3)
    for _ in range(steps):
        chosen, rejected = preference_pairs(16, rng, cfg)
        ids, mask = left_pad(chosen + rejected, cfg.pad_token_id)
        rewards = rm(ids, mask)
        loss = -F.logsigmoid(rewards[:16] - rewards[16:]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


@torch.no_grad()
def generate(policy, input_ids, attention_mask, max_new_tokens: int, generator):
    for _ in range(max_new_tokens):
        logits, _ = policy(input_ids, attention_mask)
        probs = logits[:, -1].softmax(dim=-1)
        nxt = torch.multinomial(probs, 1, generator=generator)
        input_ids = torch.cat([input_ids, nxt], dim=1)
        attention_mask = torch.cat([attention_mask, torch.ones_like(nxt)], dim=1)
    return input_ids, attention_mask


def logprobs_of(logits, tokens):
    return torch.gather(logits.log_softmax(-1), 2, tokens[..., None]).squeeze(-1)


def ppo_step(policy, ref_policy, rm, cfg, rng, gen, opt, kl_coef=0.05, gamma=1.0, lam=0.95):
    prompt_ids, prompt_mask = left_pad(sample_prompts(16, rng, cfg), cfg.pad_token_id)
    P, R = prompt_ids.shape[1], 6
    ids, mask = generate(policy, prompt_ids, prompt_mask, R, gen)
    with torch.no_grad():
        logits, values = policy(ids, mask)
        ref_logits, _ = ref_policy(ids, mask)
        old_logp = logprobs_of(logits[:, P - 1 : -1], ids[:, P:])
        ref_logp = logprobs_of(ref_logits[:, P - 1 : -1], ids[:, P:])
        values = values[:, P - 1 : -1]
        score = rm(ids, mask)
        rewards = -kl_coef * (old_logp - ref_logp)
        rewards[:, -1] += score
        advantages = torch.zeros_like(rewards)
        last = torch.zeros(ids.shape[0])
        for t in reversed(range(R)):
            next_value = values[:, t + 1] if t + 1 < R else torch.zeros_like(last)
            delta = rewards[:, t] + gamma * next_value - values[:, t]
            last = delta + gamma * lam * last
            advantages[:, t] = last
        returns = advantages + values
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    for _ in range(2):
        logits, new_values = policy(ids, mask)
        logp = logprobs_of(logits[:, P - 1 : -1], ids[:, P:])
        ratio = (logp - old_logp).exp()
        pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(0.8, 1.2)).mean()
        vf_loss = 0.5 * (new_values[:, P - 1 : -1] - returns).pow(2).mean()
        loss = pg_loss + 0.1 * vf_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    good = (ids[:, P:] == cfg.good_token_id).float().sum(1).mean().item()
    return score.mean().item(), good


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    cfg = GPTConfig()
    rm = RewardModel(cfg)
    print(f"reward model BT loss {train_reward_model(rm, cfg, rng):.3f}")
    rm.eval()
    policy = CausalLMWithValueHead(cfg)
    ref_policy = copy.deepcopy(policy).eval()
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    for it in range(8):
        score, good = ppo_step(policy, ref_policy, rm, cfg, rng, gen, opt)
        print(f"ppo iter {it}: mean reward {score:.3f}, good tokens per response {good:.2f}")
    chosen, rejected = preference_pairs(32, random.Random(123), cfg)
    ids, mask = left_pad(chosen + rejected, cfg.pad_token_id)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        rewards = rm(ids, mask)
    acc = (rewards[:32] > rewards[32:]).float().mean().item()
    print(f"held-out preference accuracy (MATH kernel) {acc:.3f}")


if __name__ == "__main__":
    main()
