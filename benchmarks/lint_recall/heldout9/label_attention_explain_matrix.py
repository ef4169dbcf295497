"""Held-out 9: torchTextClassifiers' label attention (`model/components/text_embedder.py`:
`LabelAttention` computes label-specific sentence embeddings with SDPA and, for explainability, the
attention matrix by hand; `SentenceEmbedder` chooses between pooling and label attention from a
config dataclass).

Source: InseeFrLab/torchTextClassifiers PR #96 ("fix: correctly mask padding tokens when computing
label attention matrix": after the SDPA mask was made True at the real tokens, the explainability
branch kept `attention_scores.masked_fill(attn_mask, float("-inf"))`, which hides every real token
and keeps only the padding; the fix fills `~attn_mask`).
Surroundings: one keep-mask built for SDPA and reused by a second, hand-written consumer behind a
`compute_attention_matrix` flag; a stale comment still says True means "mask out"; the module is
built from a config dataclass and reached through the sentence embedder's dict-returning forward.
"""

import logging
from dataclasses import dataclass
from typing import Dict, Optional

import torch
import torch.nn as nn
from torch.nn import functional as F

logger = logging.getLogger(__name__)


def norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.size(-1),))


@dataclass
class LabelAttentionConfig:
    n_head: int
    num_classes: int
    embedding_dim: int


@dataclass
class SentenceEmbedderConfig:
    aggregation_method: Optional[str] = "mean"  # or 'last', or 'first'
    label_attention_config: Optional[LabelAttentionConfig] = None


class LabelAttention(nn.Module):
    """Labels are queries that attend over token embeddings (keys and values) to produce
    label-specific embeddings."""

    def __init__(self, label_attention_config: LabelAttentionConfig):
        super().__init__()
        self.num_classes = label_attention_config.num_classes
        self.n_head = label_attention_config.n_head
        self.embedding_dim = label_attention_config.embedding_dim
        self.head_dim = self.embedding_dim // self.n_head
        if self.head_dim * self.n_head != self.embedding_dim:
            raise ValueError(f"embedding_dim ({self.embedding_dim}) must be divisible by n_head ({self.n_head}).")

        self.label_embeds = nn.Embedding(self.num_classes, self.embedding_dim)
        self.c_q = nn.Linear(self.embedding_dim, self.n_head * self.head_dim, bias=False)
        self.c_k = nn.Linear(self.embedding_dim, self.n_head * self.head_dim, bias=False)
        self.c_v = nn.Linear(self.embedding_dim, self.n_head * self.head_dim, bias=False)
        self.c_proj = nn.Linear(self.embedding_dim, self.embedding_dim, bias=False)

    def forward(self, token_embeddings, attention_mask: Optional[torch.Tensor] = None,
                compute_attention_matrix: Optional[bool] = False):
        B, T, C = token_embeddings.size()
        if isinstance(compute_attention_matrix, torch.Tensor):
            compute_attention_matrix = compute_attention_matrix[0].item()
        compute_attention_matrix = bool(compute_attention_matrix)

        # 1. Create label indices [0, 1, ..., C-1] for the whole batch
        label_indices = torch.arange(self.num_classes, dtype=torch.long,
                                     device=token_embeddings.device).expand(B, -1)
        all_label_embeddings = norm(self.label_embeds(label_indices))  # [batch, num_classes, d_model]

        q = self.c_q(all_label_embeddings).view(B, self.num_classes, self.n_head, self.head_dim)
        k = self.c_k(token_embeddings).view(B, T, self.n_head, self.head_dim)
        v = self.c_v(token_embeddings).view(B, T, self.n_head, self.head_dim)

        q, k = norm(q), norm(k)  # QK norm
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, T, H, D) -> (B, H, T, D)

        # Prepare attention mask for scaled_dot_product_attention
        # attention_mask: (B, T) with 1 for real tokens, 0 for padding
        # where True means "mask out" (ignore), False means "attend to"
        attn_mask = None
        if attention_mask is not None:
            attn_mask = attention_mask == 1  # (B, T)
            # Expand to (B, 1, 1, T) for broadcasting across heads and queries
            attn_mask = attn_mask.unsqueeze(1).unsqueeze(2)  # (B, 1, 1, T)

        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=False)

        # Re-assemble the heads side by side and project back to residual stream
        y = y.transpose(1, 2).contiguous().view(B, self.num_classes, -1)  # (bs, n_labels, d_model)
        y = self.c_proj(y)

        attention_matrix = None
        if compute_attention_matrix:
            # size (B, n_head, n_labels, seq_len)
            attention_scores = torch.matmul(q, k.transpose(-2, -1)) / (self.head_dim**0.5)

            # Apply mask to attention scores before softmax
            if attention_mask is not None:
                # attn_mask is already in the right shape: (B, 1, 1, T)
                # Set masked positions to -inf so they become 0 after softmax
                attention_scores = attention_scores.masked_fill(attn_mask, float("-inf"))  # expect: MC519 flag-branch

            attention_matrix = torch.softmax(attention_scores, dim=-1)

        return {"sentence_embedding": y, "attention_matrix": attention_matrix}


class SentenceEmbedder(nn.Module):
    def __init__(self, sentence_embedder_config: SentenceEmbedderConfig):
        super().__init__()
        self.config = sentence_embedder_config
        self.label_attention_config = sentence_embedder_config.label_attention_config
        self.aggregation_method = sentence_embedder_config.aggregation_method

        if isinstance(self.label_attention_config, dict):
            self.label_attention_config = LabelAttentionConfig(**self.label_attention_config)

        if self.label_attention_config is not None:
            self.label_attention_module = LabelAttention(label_attention_config=self.label_attention_config)
            if self.aggregation_method is not None:
                logger.info("aggregation_method is ignored when label_attention_config is provided")
                self.aggregation_method = None

    def forward(self, token_embeddings: torch.Tensor, attention_mask: torch.Tensor,
                return_label_attention_matrix: bool = False) -> Dict[str, Optional[torch.Tensor]]:
        if self.aggregation_method is not None:  # default is "mean"
            mask = attention_mask.unsqueeze(-1).float()  # (batch_size, seq_len, 1)
            masked_embeddings = token_embeddings * mask
            sentence_embedding = masked_embeddings.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
            return {"sentence_embedding": sentence_embedding, "label_attention_matrix": None}

        label_attention_result = self.label_attention_module(
            token_embeddings,
            attention_mask=attention_mask,
            compute_attention_matrix=return_label_attention_matrix,
        )
        return {
            "sentence_embedding": label_attention_result["sentence_embedding"],
            "label_attention_matrix": label_attention_result["attention_matrix"],
        }
