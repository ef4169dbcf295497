"""
Recurrent Memory Transformer (Bulatov et al., 2022): memory tokens are read at
the start of each segment and written at its end, and the written memories are
handed to the next segment. The [read | tokens | write] attention layout is a
registered buffer sized for the training segment length; a shorter final
segment is padded up to that length.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合; 张量共享内存风险); conventions.md §2.3
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn, Tensor


def exists(val):
    return val is not None


def build_layout_bias(num_memory_tokens: int, seq_len: int) -> Tensor:
    m, n = num_memory_tokens, seq_len
    keep = torch.ones((n, n), dtype=torch.bool).tril()
    keep = F.pad(keep, (m, 0, m, 0), value=False)
    keep[:, :m] = True
    keep = F.pad(keep, (0, m, 0, m), value=False)
    keep[-m:] = True
    return torch.zeros(keep.shape).masked_fill(~keep, float('-inf'))


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = dim ** 0.5
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.normalize(x, dim=-1) * self.scale * self.gamma


class Attention(nn.Module):
    def __init__(self, dim, *, dim_head=16, heads=4, dropout=0.):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm = RMSNorm(dim)
        self.to_qkv = nn.Linear(dim, dim_head * heads * 3, bias=False)
        self.to_out = nn.Linear(dim_head * heads, dim, bias=False)

    def forward(self, x, attn_bias):
        q, k, v = self.to_qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = map(lambda t: t.unflatten(-1, (self.heads, -1)).transpose(1, 2), (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias, dropout_p=self.dropout if self.training else 0.)
        return self.to_out(out.transpose(1, 2).flatten(2))


class RecurrentMemoryTransformer(nn.Module):
    def __init__(self, num_tokens, *, dim=32, depth=2, num_memory_tokens=4, seq_len=8, dim_head=16, heads=2, ff_mult=4, dropout=0.):
        super().__init__()
        self.seq_len = seq_len
        self.num_memory_tokens = num_memory_tokens
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(seq_len, dim)
        self.memory_tokens = nn.Parameter(torch.randn(num_memory_tokens, dim) * 0.02)
        self.read_memory_emb = nn.Parameter(torch.zeros(num_memory_tokens, dim))
        self.register_buffer('layout_bias', build_layout_bias(num_memory_tokens, seq_len))

        self.layers = nn.ModuleList([nn.ModuleList([
            Attention(dim, dim_head=dim_head, heads=heads, dropout=dropout),
            nn.Sequential(RMSNorm(dim), nn.Linear(dim, dim * ff_mult), nn.GELU(), nn.Linear(dim * ff_mult, dim))
        ]) for _ in range(depth)])
        self.norm = RMSNorm(dim)
        self.to_logits = nn.Linear(dim, num_tokens)

    def forward(self, x: Tensor, read_memories: Optional[Tensor] = None, labels: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        b, n = x.shape
        m, seq_len = self.num_memory_tokens, self.seq_len
        assert n <= seq_len

        tokens = self.token_emb(x) + self.pos_emb(torch.arange(n, device=x.device))
        attn_bias = self.layout_bias
        if n < seq_len:
            tokens = F.pad(tokens, (0, 0, 0, seq_len - n))
            positions = torch.arange(m + seq_len + m, device=x.device)
            is_pad = (positions >= m + n) & (positions < m + seq_len)
            attn_bias = self.layout_bias.masked_fill(is_pad[None, :], float('-inf'))

        if exists(read_memories):
            read_memories = read_memories + self.read_memory_emb
        else:
            read_memories = self.memory_tokens.expand(b, -1, -1)
        write_memories = self.memory_tokens.expand(b, -1, -1)

        h = torch.cat((read_memories, tokens, write_memories), dim=1)
        for attn, ff in self.layers:
            h = attn(h, attn_bias=attn_bias) + h
            h = ff(h) + h
        h = self.norm(h)

        next_memories = h[:, -m:]
        logits = self.to_logits(h[:, m:m + n])
        if not exists(labels):
            return logits, next_memories
        return F.cross_entropy(logits.transpose(1, 2), labels), next_memories


class RecurrentTrainerWrapper(nn.Module):
    def __init__(self, transformer: RecurrentMemoryTransformer, truncate_at_step: Optional[int] = None):
        super().__init__()
        self.transformer = transformer
        self.truncate_at_step = truncate_at_step

    def forward(self, seq: Tensor) -> Tensor:
        inputs, labels = seq[:, :-1], seq[:, 1:]
        segments = zip(inputs.split(self.transformer.seq_len, dim=-1), labels.split(self.transformer.seq_len, dim=-1))
        memories, total_loss, total_len = None, 0., inputs.shape[-1]
        for step, (segment, segment_labels) in enumerate(segments):
            if exists(memories) and exists(self.truncate_at_step) and step >= self.truncate_at_step:
                memories = memories.detach()
            loss, memories = self.transformer(segment, read_memories=memories, labels=segment_labels)
            total_loss = total_loss + loss * segment.shape[-1] / total_len
        return total_loss


@torch.no_grad()
def evaluate(trainer: RecurrentTrainerWrapper, docs: Tensor) -> float:
    trainer.eval()
    loss = trainer(docs)
    trainer.train()
    return loss.item()


if __name__ == '__main__':
    torch.manual_seed(0)
    model = RecurrentMemoryTransformer(num_tokens=64)
    trainer = RecurrentTrainerWrapper(model, truncate_at_step=2)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_data, valid_docs = torch.randint(0, 64, (3, 2, 25)), torch.randint(0, 64, (2, 22))
    losses = []
    for step, batch in enumerate(train_data):
        loss = trainer(batch)
        loss.backward()
        optim.step()
        optim.zero_grad()
        losses.append(round(loss.item(), 4))
        if step == 0:
            valid_loss = evaluate(trainer, valid_docs)
    masked = int(torch.isinf(model.state_dict()['layout_bias']).sum())
    print('losses', losses, 'valid', round(valid_loss, 4), 'masked layout entries', masked)
