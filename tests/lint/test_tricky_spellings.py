"""Spellings of real bugs chosen to slip past a careless reading: each must fire some rule.

(They were written against the text pre-filter that `check` once ran before parsing; the
pre-filter is gone, and they stay as tests that the whole-file walk reads every spelling.)
"""

from __future__ import annotations

import pytest

from maskcheck.lint.runner import find_hits
from maskcheck.rules.registry import all_rules

CODES = frozenset(r.code for r in all_rules() if r.kind == "source")


@pytest.mark.parametrize("snippet", [
    "def f(s, m):\n    return s.masked_fill(m, -7e4)\n",
    "def f(s, m):\n    return s.masked_fill(m, -1_000_000)\n",
    "def f(s, m):\n    return s.masked_fill(m, -0x10000000)\n",
    "def f(s, m):\n    return s.masked_fill(m, -2 ** 31)\n",
    "def f(s, m):\n    return s.masked_fill(m, -1 * 1e9)\n",
    "def f(s, m):\n    return s.masked_fill(m, float('-1E+09'))\n",
    "BIG = 1e9\n\ndef f(s, m):\n    return s.masked_fill(m, -BIG)\n",
    "import torch\ndef f(n):\n    return torch.triu(torch.ones(n, n), 1) * float('-INFINITY')\n",
    "import torch\ndef f(n):\n    return torch.triu(torch.ones(n, n), 1) * -torch.inf\n",
    "def f(input_ids, pad, scores):\n    pad_mask = input_ids == pad\n    return scores + (\n"
    "        # why\n        pad_mask)\n",
    "def f(ids, pad, attn_scores):\n    m = (ids == pad)\n    causal_mask = m.bool()\n"
    "    return causal_mask[:, None] + attn_scores\n",
    "from torch.nn.functional import scaled_dot_product_attention as attend\n"
    "def f(q, k, v, m):\n    return attend(q, k, v, m, 0.0, True)\n",
    # a bool of any name added to scores, in place (MC509)
    "def f(scores, tokens, pad_id):\n    pad = tokens.eq(pad_id)\n    scores.add_(pad)\n"
    "    return scores\n",
    # a bool minus a number (MC512), with no literal before a `-`
    "def f(ids, pad_id):\n    keep = ids.ne(pad_id)\n    return keep.unsqueeze(-1) - 1\n",
    # keys from a static cache without `cat` anywhere (MC510)
    "import torch.nn.functional as F\ndef f(self, q, p, n):\n    k = self.cache_k[:, : p + n]\n"
    "    return F.scaled_dot_product_attention(q, k, k, is_causal=True)\n",
    # -finfo(float32).max into a half tensor (MC517)
    "import torch\ndef f(w, m):\n    w = w.half()\n"
    "    return w.masked_fill(m, -torch.finfo(torch.float32).max)\n",
    # a subscript write into a buffer, with no masked_fill_ anywhere (MC524)
    "import torch\nfrom torch import nn\nclass A(nn.Module):\n    def __init__(self, n):\n"
    "        super().__init__()\n        self.register_buffer('bias', torch.zeros(n, n))\n"
    "    def forward(self, x):\n        self.bias[0] = float('-inf')\n"
    "        return x + self.bias\n",
    # MC508 through an aliased MultiheadAttention annotation and through torch.add
    "import torch\ndef f(x, layer: torch.nn.MultiheadAttention, n):\n"
    "    return layer(x, x, x, attn_mask=torch.ones(n, n).tril())\n",
    "import torch\ndef f(q, k, ids, pad_id):\n    keep = (ids != pad_id).float()\n"
    "    return torch.add(torch.matmul(q, k), keep)\n",
    # MC520 through `*=` and a method-form softmax
    "import torch\ndef f(e, n):\n    tri = torch.ones(n, n).tril()\n    e *= tri\n"
    "    return e.softmax(-1)\n",
    # MC508 through an in-place add_, MC512 through a parenthesised literal
    "def f(scores, tokenizer, t):\n    attention_mask = tokenizer(t)['attention_mask']\n"
    "    scores.add_(attention_mask.float())\n    return scores\n",
    "def f(ids, pad_id):\n    keep = ids != pad_id\n    return keep - (1)\n",
])
def test_tricky_spellings_are_found(snippet: str) -> None:
    assert find_hits(snippet, CODES), "the snippet should fire some rule"

