"""Knowledge distillation of a masked language model into a smaller student.

Modelled on the DistilBERT ``Distiller``: batches are padded and masked for MLM
(``prepare_batch_mlm`` with the 80/10/10 rule), the teacher runs without gradients, and the
student is trained on a weighted sum of the temperature-scaled KL to the teacher's logits
(``alpha_ce``), the MLM cross-entropy (``alpha_mlm``) and a cosine loss between the last hidden
states (``alpha_cos``); logits and hidden states are compared only at real tokens selected
with ``masked_select``. The teacher is a BERT-style encoder with an additive extended mask; the
student writes its attention with a boolean mask and a fill.

Source: pytorch/pytorch#103749, Biohub/esm#299, conventions.md §2.3 and §3 items 5 and 22
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class EncoderConfig:
    vocab_size: int = 36
    dim: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_position_embeddings: int = 64
    pad_token_id: int = 0
    mask_token_id: int = 1


@dataclass
class DistillationConfig:
    temperature: float = 2.0
    alpha_ce: float = 0.5
    alpha_mlm: float = 0.5
    alpha_cos: float = 0.1
    mlm_mask_prop: float = 0.15
    word_mask: float = 0.8
    word_keep: float = 0.1
    word_rand: float = 0.1
    learning_rate: float = 2e-3


class TeacherSelfAttention(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.dim // cfg.n_heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x, extended_attention_mask):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).split(C, -1))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + extended_attention_mask
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C))


class StudentSelfAttention(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.n_heads, self.dim_per_head = cfg.n_heads, cfg.dim // cfg.n_heads
        self.q_lin, self.k_lin, self.v_lin = (nn.Linear(cfg.dim, cfg.dim) for _ in range(3))
        self.out_lin = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, query, key, value, mask):
        bs, q_length, dim = query.shape

        def shape(x):
            return x.view(bs, -1, self.n_heads, self.dim_per_head).transpose(1, 2)

        q = shape(self.q_lin(query)) / math.sqrt(self.dim_per_head)
        k, v = shape(self.k_lin(key)), shape(self.v_lin(value))
        scores = q @ k.transpose(2, 3)
        scores = scores.masked_fill(~(mask[:, None, :, None] & mask[:, None, None, :]), float("-inf"))  # expect: MC507 distill
        weights = F.softmax(scores, dim=-1)
        context = (weights @ v).transpose(1, 2).reshape(bs, q_length, dim)
        return self.out_lin(context)


class Block(nn.Module):
    def __init__(self, cfg: EncoderConfig, attention_cls):
        super().__init__()
        self.attention = attention_cls(cfg)
        self.sa_layer_norm = nn.LayerNorm(cfg.dim)
        self.ffn = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))
        self.output_layer_norm = nn.LayerNorm(cfg.dim)

    def forward(self, x, mask):
        if isinstance(self.attention, StudentSelfAttention):
            sa_output = self.attention(query=x, key=x, value=x, mask=mask)
        else:
            sa_output = self.attention(x, extended_attention_mask=mask)
        x = self.sa_layer_norm(x + sa_output)
        return self.output_layer_norm(x + self.ffn(x))


class MaskedLM(nn.Module):
    def __init__(self, cfg: EncoderConfig, student: bool):
        super().__init__()
        self.student = student
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim, padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.dim)
        self.layer = nn.ModuleList(Block(cfg, StudentSelfAttention if student else TeacherSelfAttention) for _ in range(cfg.n_layers))
        self.vocab_transform = nn.Linear(cfg.dim, cfg.dim)
        self.vocab_layer_norm = nn.LayerNorm(cfg.dim)
        self.vocab_projector = nn.Linear(cfg.dim, cfg.vocab_size)

    def forward(self, input_ids, attention_mask):
        T = input_ids.shape[1]
        hidden = self.word_embeddings(input_ids) + self.position_embeddings(torch.arange(T))
        if self.student:
            mask = attention_mask.bool()
        else:
            mask = (1.0 - attention_mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
        for block in self.layer:
            hidden = block(hidden, mask)
        logits = self.vocab_projector(self.vocab_layer_norm(F.gelu(self.vocab_transform(hidden))))
        return logits, hidden


class Distiller:
    def __init__(self, student: MaskedLM, teacher: MaskedLM, cfg: EncoderConfig, params: DistillationConfig):
        self.student, self.teacher = student, teacher.eval().requires_grad_(False)
        self.cfg, self.params = cfg, params
        self.optimizer = torch.optim.AdamW(student.parameters(), lr=params.learning_rate)
        self.ce_loss_fct = nn.KLDivLoss(reduction="batchmean")
        self.lm_loss_fct = nn.CrossEntropyLoss(ignore_index=-100)
        self.cosine_loss_fct = nn.CosineEmbeddingLoss(reduction="mean")

    def prepare_batch_mlm(self, token_ids: torch.Tensor, lengths: torch.Tensor, g: torch.Generator):
        attn_mask = torch.arange(token_ids.size(1))[None, :] < lengths[:, None]
        mlm_labels = token_ids.clone()
        pred_mask = (torch.rand(token_ids.shape, generator=g) < self.params.mlm_mask_prop) & attn_mask
        choice = torch.multinomial(torch.tensor([self.params.word_mask, self.params.word_keep, self.params.word_rand]), int(pred_mask.sum()), replacement=True, generator=g)
        _token_ids_real = token_ids[pred_mask]
        _token_ids_rand = torch.randint(2, self.cfg.vocab_size, _token_ids_real.shape, generator=g)
        _token_ids = torch.where(choice == 0, self.cfg.mask_token_id, torch.where(choice == 1, _token_ids_real, _token_ids_rand))
        token_ids = token_ids.masked_scatter(pred_mask, _token_ids)
        mlm_labels = mlm_labels.masked_fill(~pred_mask, -100)
        return token_ids, attn_mask.long(), mlm_labels

    def step(self, input_ids, attention_mask, lm_labels):
        s_logits, s_hidden = self.student(input_ids, attention_mask)
        with torch.no_grad():
            t_logits, t_hidden = self.teacher(input_ids, attention_mask)
        mask = attention_mask.bool().unsqueeze(-1).expand_as(s_logits)
        s_logits_slct = torch.masked_select(s_logits, mask).view(-1, s_logits.size(-1))
        t_logits_slct = torch.masked_select(t_logits, mask).view(-1, s_logits.size(-1))
        T = self.params.temperature
        loss_ce = self.ce_loss_fct(F.log_softmax(s_logits_slct / T, dim=-1), F.softmax(t_logits_slct / T, dim=-1)) * T ** 2
        loss_mlm = self.lm_loss_fct(s_logits.view(-1, s_logits.size(-1)), lm_labels.view(-1))
        hmask = attention_mask.bool().unsqueeze(-1).expand_as(s_hidden)
        s_hidden_slct = torch.masked_select(s_hidden, hmask).view(-1, s_hidden.size(-1))
        t_hidden_slct = torch.masked_select(t_hidden, hmask).view(-1, t_hidden.size(-1))
        loss_cos = self.cosine_loss_fct(s_hidden_slct, t_hidden_slct, s_hidden_slct.new_ones(s_hidden_slct.size(0)))
        loss = self.params.alpha_ce * loss_ce + self.params.alpha_mlm * loss_mlm + self.params.alpha_cos * loss_cos
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item(), loss_ce.item()


def sample_sequences(n: int, cfg: EncoderConfig, g: torch.Generator):
    lengths = torch.randint(5, 21, (n,), generator=g)
    token_ids = torch.full((n, int(lengths.max())), cfg.pad_token_id)
    for i, L in enumerate(lengths.tolist()):
        start = int(torch.randint(2, cfg.vocab_size, (1,), generator=g))
        token_ids[i, :L] = (torch.arange(L) * 3 + start) % (cfg.vocab_size - 2) + 2
    return token_ids, lengths


def main() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg, params = EncoderConfig(), DistillationConfig()
    teacher = MaskedLM(EncoderConfig(n_layers=4), student=False)
    student = MaskedLM(cfg, student=True)
    distiller = Distiller(student, teacher, cfg, params)
    for step in range(60):
        token_ids, lengths = sample_sequences(16, cfg, g)
        loss, loss_ce = distiller.step(*distiller.prepare_batch_mlm(token_ids, lengths, g))
        if step % 20 == 0 or step == 59:
            print(f"step {step:2d} loss {loss:.4f} kl {loss_ce:.4f}")

    student.eval()
    token_ids, lengths = sample_sequences(4, cfg, g)
    mask = (torch.arange(token_ids.size(1))[None] < lengths[:, None]).long()
    with torch.no_grad():
        s_logits, _ = student(token_ids, mask)
        t_logits, _ = teacher(token_ids, mask)
        n = int(lengths[0])
        alone, _ = student(token_ids[:1, :n], mask[:1, :n])
    real = mask.bool()
    print(f"student vs teacher argmax agreement on real tokens: {(s_logits.argmax(-1) == t_logits.argmax(-1))[real].float().mean().item():.2f}")
    print(f"first sequence batched vs alone: {(s_logits[0, :n] - alone[0]).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
