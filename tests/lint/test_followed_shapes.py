"""Code shapes from public reports that the linter follows (held-out recall misses of session 2
and the second held-out set), each next to its correct twin."""

from __future__ import annotations

from pathlib import Path

import pytest

from maskcheck.lint.runner import lint_file
from maskcheck.rules.registry import all_rules

SOURCE_CODES = frozenset(r.code for r in all_rules() if r.kind == "source")
HEAD = ("import math\nfrom typing import Optional\n\nimport torch\nimport torch.nn as nn\n"
        "import torch.nn.functional as F\n\n\n")

# (name, buggy source, {line: code} expected in it, the fixed twin)
CASES = [
    ("cache-through-subscript", """\
def forward(q, k, v, past):
    if past is not None:
        k = torch.cat((past[0], k), dim=-2)
        v = torch.cat((past[1], v), dim=-2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
""", {5: "MC510"}, """\
def forward(q, k, v, past):
    if past is not None:
        k = torch.cat((past[0], k), dim=-2)
        v = torch.cat((past[1], v), dim=-2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
"""),
    ("einsum-in-half", """\
def forward_half(embeddings, input_ids, attention_mask):
    hidden = embeddings(input_ids).to(torch.float16)
    scores = torch.einsum("bqd,bkd->bqk", hidden, hidden)
    scores = scores.masked_fill(attention_mask[:, None, :] == 0, torch.finfo(torch.float32).min)
    return scores.softmax(-1)
""", {4: "MC517"}, """\
def forward_half(embeddings, input_ids, attention_mask):
    hidden = embeddings(input_ids).to(torch.float16)
    scores = torch.einsum("bqd,bkd->bqk", hidden, hidden)
    scores = scores.masked_fill(attention_mask[:, None, :] == 0, torch.finfo(scores.dtype).min)
    return scores.softmax(-1)
"""),
    ("buffer-in-forward-like-method", """\
class Attention(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("causal", torch.zeros(n, n))

    def forward_eager(self, scores, n):
        self.causal.masked_fill_(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        return scores + self.causal[:n, :n]
""", {7: "MC524"}, """\
class Attention(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("causal", torch.zeros(n, n))
        self.causal.masked_fill_(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))

    def forward_eager(self, scores, n):
        return scores + self.causal[:n, :n]
"""),
    ("buffer-in-closure-through-fill", """\
class PadMasked(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("key_bias", torch.zeros(1, n))

    def forward(self, scores, pad):
        def apply():
            self.key_bias.fill_(0.0).masked_fill_(pad, float("-inf"))
            return scores + self.key_bias

        return apply()
""", {8: "MC524"}, """\
class PadMasked(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("key_bias", torch.zeros(1, n))

    def forward(self, scores, pad):
        def apply():
            return scores + self.key_bias.masked_fill(pad, float("-inf"))

        return apply()
"""),
    ("one-minus-times-inf", """\
class Decoder(nn.Module):
    def forward(self, x, keep):
        bias = (1.0 - keep.float()) * -math.inf
        return self.attn(x, x, x, attn_mask=bias)
""", {3: "MC522"}, """\
class Decoder(nn.Module):
    def forward(self, x, keep):
        bias = torch.zeros_like(keep, dtype=x.dtype).masked_fill(~keep.bool(), -math.inf)
        return self.attn(x, x, x, attn_mask=bias)
"""),
    ("annotated-multihead-attention", """\
def encode(tokenizer, texts, layer: nn.MultiheadAttention, x):
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    out, _ = layer(x, x, x, key_padding_mask=batch["attention_mask"].bool())
    return out
""", {3: "MC502"}, """\
def encode(tokenizer, texts, layer: nn.MultiheadAttention, x):
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    out, _ = layer(x, x, x, key_padding_mask=batch["attention_mask"] == 0)
    return out
"""),
    ("declared-multihead-attention", """\
class Encoder(nn.Module):
    attn: nn.MultiheadAttention

    def forward(self, x, attention_mask):
        out, _ = self.attn(x, x, x, key_padding_mask=attention_mask)
        return out
""", {5: "MC502"}, """\
class Encoder(nn.Module):
    attn: nn.MultiheadAttention

    def forward(self, x, attention_mask):
        out, _ = self.attn(x, x, x, key_padding_mask=attention_mask == 0)
        return out
"""),
    ("annotated-bool-triu-into-mha", """\
def decode(dec: nn.TransformerDecoder, tgt, memory, n):
    tgt_mask: torch.Tensor = torch.triu(torch.ones(n, n, dtype=torch.bool))
    return dec(tgt, memory, tgt_mask=tgt_mask)
""", {2: "MC503"}, """\
def decode(dec: nn.TransformerDecoder, tgt, memory, n):
    tgt_mask: torch.Tensor = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    return dec(tgt, memory, tgt_mask=tgt_mask)
"""),
    ("one-minus-comparison-of-an-annotated-tensor", """\
class Batch:
    def __init__(self, src: torch.Tensor, lengths: Optional[torch.Tensor]) -> None:
        self.mask_src = 1 - (src == 0)
        self.n = 1 - (lengths == 0)
""", {3: "MC512"}, """\
class Batch:
    def __init__(self, src: torch.Tensor, lengths: Optional[torch.Tensor]) -> None:
        self.mask_src = ~(src == 0)
        self.n = 1 - (lengths == 0)
"""),
    ("torch-imported-as-th", """\
import torch as th
from torch.nn import functional as fn


def causal_scores(scores, n):
    future = th.triu(th.ones(n, n) * float("-inf"))
    causal_mask = th.ones(n, n, dtype=th.bool).tril()
    return fn.softmax(scores + future, -1), scores + causal_mask
""", {6: "MC503", 8: "MC509"}, """\
import torch as th
from torch.nn import functional as fn


def causal_scores(scores, n):
    future = th.triu(th.ones(n, n) * float("-inf"), diagonal=1)
    causal_mask = th.ones(n, n, dtype=th.bool).tril()
    return fn.softmax(scores + future, -1), scores.masked_fill(~causal_mask, float("-inf"))
"""),
    # (reported where the triangle is built, the line the twin changes: `&` reads it once)
    ("keep-and-upper-triangle", """\
class Seq2Seq(nn.Module):
    def make_trg_mask(self, trg):
        trg_pad_mask = (trg != self.trg_pad_idx).unsqueeze(1).unsqueeze(2)
        trg_sub_mask = torch.triu(torch.ones((trg.shape[1], trg.shape[1]))).bool()
        return trg_pad_mask & trg_sub_mask
""", {4: "MC521"}, """\
class Seq2Seq(nn.Module):
    def make_trg_mask(self, trg):
        trg_pad_mask = (trg != self.trg_pad_idx).unsqueeze(1).unsqueeze(2)
        trg_sub_mask = torch.tril(torch.ones((trg.shape[1], trg.shape[1]))).bool()
        return trg_pad_mask & trg_sub_mask
"""),
    ("self-buffer-read-in-expression", """\
class Causal(nn.Module):
    def __init__(self, ctx):
        super().__init__()
        self.register_buffer("mask", torch.triu(torch.ones(ctx, ctx), diagonal=1))

    def forward(self, q, k, v):
        n = q.size(-2)
        mask_bool = self.mask.bool()[:n, :n]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask_bool)
""", {9: "MC521"}, """\
class Causal(nn.Module):
    def __init__(self, ctx):
        super().__init__()
        self.register_buffer("mask", torch.triu(torch.ones(ctx, ctx), diagonal=1))

    def forward(self, q, k, v):
        n = q.size(-2)
        mask_bool = self.mask.bool()[:n, :n]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=~mask_bool)
"""),
    ("one-minus-pad-index-test", """\
class AttentionLayer(nn.Module):
    def forward(self, hidden, enc_out, xs):
        attn_mask = xs != self.null_idx
        attn_w_premask = torch.bmm(enc_out, hidden.unsqueeze(2)).squeeze(2).float()
        attn_w_premask.masked_fill_((1 - attn_mask), -1e20)
        return torch.softmax(attn_w_premask, dim=1)
""", {5: "MC512"}, """\
class AttentionLayer(nn.Module):
    def forward(self, hidden, enc_out, xs):
        attn_mask = xs != self.null_idx
        attn_w_premask = torch.bmm(enc_out, hidden.unsqueeze(2)).squeeze(2).float()
        attn_w_premask.masked_fill_(~attn_mask, -1e20)
        return torch.softmax(attn_w_premask, dim=1)
"""),
    ("pair-bias-times-additive-mask", """\
class PairBias(nn.Module):
    def forward(self, pair, seq_mask):
        bias = self.proj(pair).permute(0, 3, 1, 2)
        pad_bias = torch.zeros_like(seq_mask, dtype=bias.dtype)
        pad_bias = pad_bias.masked_fill(~seq_mask, float("-inf"))
        return bias * pad_bias[:, None, None, :]
""", {6: "MC523"}, """\
class PairBias(nn.Module):
    def forward(self, pair, seq_mask):
        bias = self.proj(pair).permute(0, 3, 1, 2)
        pad_bias = torch.zeros_like(seq_mask, dtype=bias.dtype)
        pad_bias = pad_bias.masked_fill(~seq_mask, float("-inf"))
        return bias + pad_bias[:, None, None, :]
"""),
    ("additive-mask-times-a-mask-stays-silent", """\
def combine(attention_mask, causal_mask):
    extended = torch.zeros_like(attention_mask, dtype=torch.float32).masked_fill(
        attention_mask == 0, float("-inf"))
    return extended * causal_mask
""", {}, """\
def combine(attention_mask, causal_mask):
    extended = torch.zeros_like(attention_mask, dtype=torch.float32).masked_fill(
        attention_mask == 0, float("-inf"))
    return extended + causal_mask
"""),
]
SHIFT = HEAD.count("\n")


def _found(source: str, tmp_path: Path) -> dict[int, str]:
    path = tmp_path / "case.py"
    path.write_text(HEAD + source)
    report = lint_file(str(path), SOURCE_CODES)
    assert report.error is None, report.error
    return {(f.line or 0) - SHIFT: f.code for f in report.findings}


@pytest.mark.parametrize(("name", "buggy", "expected", "fixed"), CASES, ids=[c[0] for c in CASES])
def test_the_bug_is_found_on_its_line(name: str, buggy: str, expected: dict[int, str],
                                      fixed: str, tmp_path: Path) -> None:
    assert _found(buggy, tmp_path) == expected


@pytest.mark.parametrize(("name", "buggy", "expected", "fixed"), CASES, ids=[c[0] for c in CASES])
def test_the_fixed_twin_is_silent(name: str, buggy: str, expected: dict[int, str], fixed: str,
                                  tmp_path: Path) -> None:
    assert _found(fixed, tmp_path) == {}
