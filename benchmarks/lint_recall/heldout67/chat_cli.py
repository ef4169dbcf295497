"""Terminal chat for a small Llama-style checkpoint.

Dialogs use the Llama-2 chat template ([INST] ... [/INST] with a <<SYS>>
block in the first turn).  Every turn is appended to the key/value cache of
the previous turns, so only the new tokens of a turn go through the model.

Source: seed self_attention_mask_guide.txt section 3 (generate_causal_mask); pytorch/pytorch#103749; conventions.md section 2.3.
"""
import argparse
import math
from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn

B_INST, E_INST = "[INST]", "[/INST]"
B_SYS, E_SYS = "<<SYS>>\n", "\n<</SYS>>\n\n"


@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    vocab_size: int = 258
    norm_eps: float = 1e-5
    max_batch_size: int = 1
    max_seq_len: int = 512


class ByteTokenizer:
    bos_id, eos_id = 256, 257

    def encode(self, s: str, bos: bool = True, eos: bool = False) -> List[int]:
        t = list(s.encode("utf-8"))
        return ([self.bos_id] if bos else []) + t + ([self.eos_id] if eos else [])

    def decode(self, t: List[int]) -> str:
        return bytes(i for i in t if i < 256).decode("utf-8", errors="replace")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    freqs = torch.outer(torch.arange(end).float(), freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis[None, :, None, :]
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wk = nn.Linear(args.dim, args.dim, bias=False)
        self.wv = nn.Linear(args.dim, args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)
        shape = (args.max_batch_size, args.max_seq_len, self.n_heads, self.head_dim)
        self.cache_k, self.cache_v = torch.zeros(shape), torch.zeros(shape)

    def forward(self, x, start_pos: int, freqs_cis, mask: Optional[torch.Tensor]):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos : start_pos + seqlen] = xv
        keys = self.cache_k[:bsz, : start_pos + seqlen].transpose(1, 2)
        values = self.cache_v[:bsz, : start_pos + seqlen].transpose(1, 2)
        scores = torch.matmul(xq.transpose(1, 2), keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, start_pos, freqs_cis, mask):
        h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, params: ModelArgs):
        super().__init__()
        self.params = params
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList(TransformerBlock(params) for _ in range(params.n_layers))
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        self.freqs_cis = precompute_freqs_cis(params.dim // params.n_heads, params.max_seq_len * 2)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, start_pos: int):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        freqs_cis = self.freqs_cis[start_pos : start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=0)  # expect: MC503 diagonal
            mask = torch.hstack([torch.zeros((seqlen, start_pos), device=tokens.device), mask]).type_as(h)
        for layer in self.layers:
            h = layer(h, start_pos, freqs_cis, mask)
        return self.output(self.norm(h)).float()


def sample_top_p(probs, p):
    probs_sort, probs_idx = torch.sort(probs, dim=-1, descending=True)
    probs_sum = torch.cumsum(probs_sort, dim=-1)
    mask = probs_sum - probs_sort > p
    probs_sort[mask] = 0.0
    probs_sort.div_(probs_sort.sum(dim=-1, keepdim=True))
    next_token = torch.multinomial(probs_sort, num_samples=1)
    return torch.gather(probs_idx, -1, next_token)


class ChatSession:
    def __init__(self, model: Transformer, tokenizer: ByteTokenizer, system: Optional[str] = None):
        self.model, self.tokenizer, self.system = model, tokenizer, system
        self.n_past = 0

    def render(self, content: str) -> List[int]:
        if self.n_past == 0 and self.system:
            content = B_SYS + self.system + E_SYS + content
        return self.tokenizer.encode(f"{B_INST} {content.strip()} {E_INST}", bos=True)

    def ask(self, content: str, max_gen_len: int = 32, temperature: float = 0.0, top_p: float = 0.9) -> str:
        prompt = self.render(content)
        if self.n_past + len(prompt) + max_gen_len > self.model.params.max_seq_len:
            raise ValueError("conversation is longer than the context window")
        logits = self.model(torch.tensor([prompt]), self.n_past)
        self.n_past += len(prompt)
        reply = []
        for _ in range(max_gen_len):
            if temperature > 0:
                next_token = sample_top_p(torch.softmax(logits[:, -1] / temperature, dim=-1), top_p)
            else:
                next_token = torch.argmax(logits[:, -1], dim=-1, keepdim=True)
            reply.append(next_token.item())
            logits = self.model(next_token.view(1, 1), self.n_past)
            self.n_past += 1
            if reply[-1] == self.tokenizer.eos_id:
                break
        return self.tokenizer.decode(reply)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-gen-len", type=int, default=16)
    parser.add_argument("--interactive", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    session = ChatSession(Transformer(ModelArgs()).eval(), ByteTokenizer(), system="Answer briefly.")
    turns = iter(input, "") if args.interactive else ["Hello, who are you?", "What is a KV cache?"]
    for user in turns:
        print("user:", user)
        print("assistant:", repr(session.ask(user, args.max_gen_len, args.temperature)))
