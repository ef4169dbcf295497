"""Sparse mixture-of-experts decoder with top-k routing, expert capacity and expert pruning.

Written in the style of the Switch Transformers / Mixtral code in transformers: a ``TopKRouter``
produces router logits and probabilities, picks ``num_experts_per_tok`` experts, renormalises
their weights, drops assignments beyond each expert's capacity (priority by top-k slot, then by
token order), skips padding tokens, and returns the auxiliary load-balancing and router z-losses.
``prune_experts`` switches experts off for serving through the ``expert_available`` buffer.
Attention uses scaled-dot-product attention with a causal and padding mask.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3, conventions.md §1 (direction cheat-sheet)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MoEConfig:
    vocab_size: int = 48
    hidden_size: int = 48
    intermediate_size: int = 96
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    num_local_experts: int = 8
    num_experts_per_tok: int = 2
    capacity_factor: float = 1.5
    router_aux_loss_coef: float = 0.01
    router_z_loss_coef: float = 0.001
    pad_token_id: int = 0


class ExpertMLP(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.w3 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.w2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TopKRouter(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.num_experts = cfg.num_local_experts
        self.top_k = cfg.num_experts_per_tok
        self.capacity_factor = cfg.capacity_factor
        self.classifier = nn.Linear(cfg.hidden_size, cfg.num_local_experts, bias=False)
        self.register_buffer("expert_available", torch.ones(cfg.num_local_experts, dtype=torch.bool))

    def forward(self, hidden_states: torch.Tensor, token_keep: torch.Tensor):
        num_tokens = hidden_states.shape[0]
        router_logits = self.classifier(hidden_states)
        available = self.expert_available.to(router_logits.dtype)
        router_probs = F.softmax(router_logits * available, dim=-1)  # expect: MC520 moe
        topk_weights, topk_idx = router_probs.topk(self.top_k, dim=-1)
        topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)

        expert_mask = F.one_hot(topk_idx, self.num_experts) * token_keep[:, None, None].long()
        capacity = math.ceil(self.capacity_factor * int(token_keep.sum()) * self.top_k / self.num_experts)
        priority = expert_mask.permute(1, 0, 2).reshape(self.top_k * num_tokens, self.num_experts)
        position_in_expert = torch.cumsum(priority, dim=0) * priority
        within_capacity = (position_in_expert > 0) & (position_in_expert <= capacity)
        dispatch = within_capacity.reshape(self.top_k, num_tokens, self.num_experts).permute(1, 0, 2)

        real = token_keep.to(router_probs.dtype)
        tokens_per_expert = (expert_mask[:, 0].to(router_probs.dtype) * real[:, None]).sum(0) / real.sum()
        router_prob_per_expert = (router_probs * real[:, None]).sum(0) / real.sum()
        aux_loss = self.num_experts * torch.sum(tokens_per_expert * router_prob_per_expert)
        z_loss = ((torch.logsumexp(router_logits, dim=-1) ** 2) * real).sum() / real.sum()
        return topk_weights, dispatch, aux_loss, z_loss


class SparseMoeBlock(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.router = TopKRouter(cfg)
        self.experts = nn.ModuleList(ExpertMLP(cfg) for _ in range(cfg.num_local_experts))
        self.last_dispatch_counts = torch.zeros(cfg.num_local_experts, dtype=torch.long)

    def forward(self, hidden_states: torch.Tensor, token_keep: torch.Tensor):
        B, T, D = hidden_states.shape
        flat = hidden_states.reshape(-1, D)
        topk_weights, dispatch, aux_loss, z_loss = self.router(flat, token_keep.reshape(-1))
        final = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token_idx, slot = torch.where(dispatch[:, :, e])
            if token_idx.numel() == 0:
                continue
            final = final.index_add(0, token_idx, topk_weights[token_idx, slot, None] * expert(flat[token_idx]))
        self.last_dispatch_counts = dispatch.sum(dim=(0, 1)).detach()
        return final.reshape(B, T, D), aux_loss, z_loss


class Attention(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.n_head = cfg.num_attention_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=False)
        self.o_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.qkv(x).split(C, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(cfg.hidden_size)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size)
        self.block_sparse_moe = SparseMoeBlock(cfg)

    def forward(self, x, attn_mask, token_keep):
        x = x + self.self_attn(self.input_layernorm(x), attn_mask)
        moe_out, aux_loss, z_loss = self.block_sparse_moe(self.post_attention_layernorm(x), token_keep)
        return x + moe_out, aux_loss, z_loss


class MoEForCausalLM(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_positions = nn.Embedding(64, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = nn.RMSNorm(cfg.hidden_size)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, labels=None):
        B, T = input_ids.shape
        token_keep = attention_mask.bool()
        causal = torch.ones(T, T, dtype=torch.bool, device=input_ids.device).tril()
        attn_mask = causal[None, None] & token_keep[:, None, None, :]
        x = self.embed_tokens(input_ids) + self.embed_positions(torch.arange(T, device=input_ids.device))
        aux_total = z_total = 0.0
        for layer in self.layers:
            x, aux_loss, z_loss = layer(x, attn_mask, token_keep)
            aux_total, z_total = aux_total + aux_loss, z_total + z_loss
        logits = self.lm_head(self.norm(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100)
            loss = loss + self.config.router_aux_loss_coef * aux_total + self.config.router_z_loss_coef * z_total
        return {"loss": loss, "logits": logits}


def prune_experts(model: MoEForCausalLM, expert_ids: list[int]) -> None:
    for layer in model.layers:
        layer.block_sparse_moe.router.expert_available[expert_ids] = False


def make_batch(n: int, cfg: MoEConfig, g: torch.Generator) -> dict:
    lengths = torch.randint(6, 17, (n,), generator=g)
    width = int(lengths.max())
    input_ids = torch.full((n, width), cfg.pad_token_id)
    for i, L in enumerate(lengths.tolist()):
        start = int(torch.randint(1, cfg.vocab_size - 20, (1,), generator=g))
        input_ids[i, :L] = torch.arange(start, start + L) % (cfg.vocab_size - 1) + 1
    attention_mask = (input_ids != cfg.pad_token_id).long()
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def main() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg = MoEConfig()
    model = MoEForCausalLM(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(40):
        out = model(**make_batch(16, cfg, g))
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
        if step % 10 == 0 or step == 39:
            print(f"step {step:2d} loss {out['loss'].item():.4f}")

    model.eval()
    pruned = [1, 5]
    prune_experts(model, pruned)
    batch = make_batch(16, cfg, g)
    with torch.no_grad():
        out = model(**batch)
    counts = sum(layer.block_sparse_moe.last_dispatch_counts for layer in model.layers)
    print(f"assignments per expert after pruning {pruned}: {counts.tolist()}")
    print(f"assignments to pruned experts: {int(counts[pruned].sum())}")


if __name__ == "__main__":
    main()
