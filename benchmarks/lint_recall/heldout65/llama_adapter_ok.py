"""
LLaMA-Adapter (Zhang et al., 2023): learnable adaption prompts are prepended
to the keys and values of the top layers of a frozen LLaMA, with their own
softmax and a zero-initialised gate per head. The frozen model follows the
reference LLaMA code (complex rotary embeddings, an additive float mask);
instruction batches come right-padded from the tokenizer.

Source: conventions.md §1 (HF attention_mask row, int64 from the tokenizer), §2.4 (int masks rejected), §5 item 7
"""

import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import nn, Tensor


@dataclass
class ModelArgs:
    dim: int = 32
    n_layers: int = 4
    n_heads: int = 4
    vocab_size: int = 100
    multiple_of: int = 16
    norm_eps: float = 1e-5
    max_seq_len: int = 64
    adapter_len: int = 4
    adapter_layer: int = 2


class Tokenizer:
    pad_id, bos_id, eos_id = 0, 1, 2

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def encode(self, text: str) -> List[int]:
        return [self.bos_id] + [3 + ord(c) % (self.vocab_size - 3) for c in text] + [self.eos_id]

    def __call__(self, texts: List[str], padding: bool = True, return_tensors: str = 'pt') -> Dict[str, Tensor]:
        ids = [self.encode(text) for text in texts]
        longest = max(map(len, ids))
        input_ids = torch.tensor([seq + [self.pad_id] * (longest - len(seq)) for seq in ids])
        return {'input_ids': input_ids, 'attention_mask': (input_ids != self.pad_id).long()}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    freqs = torch.outer(torch.arange(end), freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq: Tensor, xk: Tensor, freqs_cis: Tensor):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis[None, :, None, :]
    return torch.view_as_real(xq_ * freqs_cis).flatten(3).type_as(xq), torch.view_as_real(xk_ * freqs_cis).flatten(3).type_as(xk)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wk = nn.Linear(args.dim, args.dim, bias=False)
        self.wv = nn.Linear(args.dim, args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)
        self.gate = nn.Parameter(torch.zeros(1, args.n_heads, 1, 1))

    def forward(self, x: Tensor, freqs_cis: Tensor, mask: Optional[Tensor], adapter: Optional[Tensor] = None):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        xq, xk, xv = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)

        scores = torch.matmul(xq, xk.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        output = torch.matmul(F.softmax(scores.float(), dim=-1).type_as(xq), xv)

        if adapter is not None:
            adapter_len = adapter.shape[1]
            adapter_k = self.wk(adapter).view(1, adapter_len, self.n_heads, self.head_dim).transpose(1, 2)
            adapter_v = self.wv(adapter).view(1, adapter_len, self.n_heads, self.head_dim).transpose(1, 2)
            adapter_scores = torch.matmul(xq, adapter_k.transpose(2, 3)) / math.sqrt(self.head_dim)
            adapter_scores = self.gate.tanh() * F.softmax(adapter_scores.float(), dim=-1).type_as(xq)
            output = output + torch.matmul(adapter_scores, adapter_v)

        return self.wo(output.transpose(1, 2).contiguous().view(bsz, seqlen, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, multiple_of: int):
        super().__init__()
        hidden_dim = multiple_of * ((int(2 * hidden_dim / 3) + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim, args.multiple_of)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, freqs_cis, mask, adapter=None):
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, adapter)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, params: ModelArgs):
        super().__init__()
        self.params = params
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList([TransformerBlock(params) for _ in range(params.n_layers)])
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        self.adapter_query = nn.Embedding(params.adapter_len * params.adapter_layer, params.dim)
        self.register_buffer('freqs_cis', precompute_freqs_cis(params.dim // params.n_heads, params.max_seq_len * 2), persistent=False)

    def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None, labels: Optional[Tensor] = None):
        _bsz, seqlen = input_ids.shape
        h = self.tok_embeddings(input_ids)
        freqs_cis = self.freqs_cis[:seqlen]

        mask = torch.full((seqlen, seqlen), float('-inf'), device=input_ids.device).triu(diagonal=1)
        if attention_mask is not None:
            padding = attention_mask == 0
            mask = mask.masked_fill(padding[:, None, None, :], float('-inf'))

        adapter = self.adapter_query.weight.reshape(self.params.adapter_layer, self.params.adapter_len, self.params.dim)
        first_adapter_layer = self.params.n_layers - self.params.adapter_layer
        for i, layer in enumerate(self.layers):
            h = layer(h, freqs_cis, mask, adapter[i - first_adapter_layer][None] if i >= first_adapter_layer else None)

        logits = self.output(self.norm(h)).float()
        if labels is None:
            return logits
        return F.cross_entropy(logits[:, :-1].reshape(-1, self.params.vocab_size), labels[:, 1:].reshape(-1), ignore_index=-100)


def mark_only_adapter_as_trainable(model: Transformer):
    for name, param in model.named_parameters():
        param.requires_grad = 'adapter' in name or name.endswith('.gate')


if __name__ == '__main__':
    torch.manual_seed(0)
    args = ModelArgs()
    model = Transformer(args)
    mark_only_adapter_as_trainable(model)
    tokenizer = Tokenizer(args.vocab_size)
    batch = tokenizer(['Instruction: name a color. Response: blue', 'Instruction: add 2 and 3. Response: 5.'], padding=True, return_tensors='pt')
    labels = batch['input_ids'].masked_fill(batch['attention_mask'] == 0, -100)
    loss = model(batch['input_ids'], attention_mask=batch['attention_mask'], labels=labels)
    loss.backward()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print('loss', round(loss.item(), 4), 'trainable params', trainable)
