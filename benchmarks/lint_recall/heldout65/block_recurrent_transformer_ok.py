"""
Block-Recurrent Transformer (Hutchins et al., 2022): the sequence is read in
blocks; a recurrent layer keeps a set of state vectors that the block's tokens
read (vertical direction) and that are rewritten from the block's tokens
(horizontal direction) through a fixed gate. Token self-attention also sees
the previous block (a one-block sliding window); documents are right-padded.

Source: conventions.md §2.3 (softmax of -inf rows, large negatives); seed self_attention_mask_guide.txt §3 (generate_causal_mask), §7 Q3
"""

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn, Tensor


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


class Attention(nn.Module):
    def __init__(self, dim, *, heads=4, dropout=0.):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm = nn.LayerNorm(dim)
        self.context_norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_kv = nn.Linear(dim, dim * 2, bias=False)
        self.to_out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: Tensor, context: Optional[Tensor] = None, attn_mask: Optional[Tensor] = None) -> Tensor:
        x = self.norm(x)
        context = self.context_norm(context) if exists(context) else x
        q, k, v = (self.to_q(x), *self.to_kv(context).chunk(2, dim=-1))
        q, k, v = map(lambda t: t.unflatten(-1, (self.heads, -1)).transpose(1, 2), (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=self.dropout if self.training else 0.)
        return self.to_out(out.transpose(1, 2).flatten(2))


def FeedForward(dim, mult=4):
    return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * mult), nn.GELU(), nn.Linear(dim * mult, dim))


class TransformerLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn, self.ff = Attention(dim, heads=heads), FeedForward(dim)

    def forward(self, x, keep):
        w = x.shape[1]
        attn_mask = torch.ones((w, w), dtype=torch.bool, device=x.device).tril() & keep[:, None, None, :]
        x = self.attn(x, attn_mask=attn_mask) + x
        return self.ff(x) + x


class RecurrentLayer(nn.Module):
    def __init__(self, dim, *, num_state_vectors=4, heads=4):
        super().__init__()
        self.init_state = nn.Parameter(torch.randn(num_state_vectors, dim) * 0.02)
        self.token_self_attn = Attention(dim, heads=heads)
        self.token_state_attn = Attention(dim, heads=heads)
        self.token_ff = FeedForward(dim)
        self.state_self_attn = Attention(dim, heads=heads)
        self.state_token_attn = Attention(dim, heads=heads)
        self.state_ff = FeedForward(dim)
        self.state_gate_bias = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor, keep: Tensor, state: Optional[Tensor] = None, xl_memory: Optional[Tuple[Tensor, Tensor]] = None):
        b, w, _ = x.shape
        state = default(state, self.init_state.expand(b, -1, -1))

        if exists(xl_memory):
            memory, memory_keep = xl_memory
            kv, kv_keep = torch.cat((memory, x), dim=1), torch.cat((memory_keep, keep), dim=1)
        else:
            kv, kv_keep = x, keep
        offset = kv.shape[1] - w
        causal_keep = torch.ones((w, kv.shape[1]), dtype=torch.bool, device=x.device).tril(offset)
        attn_mask = causal_keep & kv_keep[:, None, None, :]

        out = self.token_self_attn(x, context=kv, attn_mask=attn_mask) + x
        out = self.token_state_attn(out, context=state) + out
        out = self.token_ff(out) + out

        token_bias = torch.where(keep[:, None, None, :], 0., float('-inf'))
        new_state = self.state_self_attn(state) + state
        new_state = self.state_token_attn(new_state, context=x, attn_mask=token_bias) + new_state
        new_state = self.state_ff(new_state) + new_state

        gate = self.state_gate_bias.sigmoid()
        next_state = gate * state + (1. - gate) * new_state
        return out, next_state, (x.detach(), keep)


class BlockRecurrentTransformer(nn.Module):
    def __init__(self, *, num_tokens, dim=32, depth=3, heads=4, block_width=8, num_state_vectors=4, recurrent_layer=2, pad_id=0):
        super().__init__()
        self.block_width, self.pad_id = block_width, pad_id
        self.recurrent_layer = recurrent_layer
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(block_width, dim)
        self.layers = nn.ModuleList([
            RecurrentLayer(dim, num_state_vectors=num_state_vectors, heads=heads) if layer == recurrent_layer else TransformerLayer(dim, heads)
            for layer in range(1, depth + 1)
        ])
        self.to_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_tokens))

    def forward(self, seq: Tensor, labels: Tensor, state: Optional[Tensor] = None):
        total_loss, total_tokens = 0., 0
        xl_memory = None
        for block, block_labels in zip(seq.split(self.block_width, dim=1), labels.split(self.block_width, dim=1)):
            keep = block != self.pad_id
            x = self.token_emb(block) + self.pos_emb(torch.arange(block.shape[1], device=block.device))
            for layer in self.layers:
                if isinstance(layer, RecurrentLayer):
                    x, state, xl_memory = layer(x, keep, state=state, xl_memory=xl_memory)
                else:
                    x = layer(x, keep)
            logits = self.to_logits(x)
            num_tokens = int((block_labels != self.pad_id).sum())
            if num_tokens > 0:
                loss = F.cross_entropy(logits.transpose(1, 2), block_labels, ignore_index=self.pad_id, reduction='sum')
                total_loss, total_tokens = total_loss + loss, total_tokens + num_tokens
        return total_loss / max(total_tokens, 1), state


def pad_documents(docs: List[Tensor], pad_id: int = 0) -> Tensor:
    return nn.utils.rnn.pad_sequence(docs, batch_first=True, padding_value=pad_id)


if __name__ == '__main__':
    torch.manual_seed(0)
    model = BlockRecurrentTransformer(num_tokens=64)
    docs = pad_documents([torch.randint(1, 64, (33,)), torch.randint(1, 64, (21,))])
    loss, state = model(docs[:, :-1], docs[:, 1:])
    loss.backward()
    print('loss', round(loss.item(), 4), 'state', tuple(state.shape), 'state finite', bool(state.isfinite().all()))
