"""The shapes of held-out 31 (speech, audio and vision models) that its first reading missed,
each bad source next to the findings it must give, its correct form next to none, and the
torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# An audio tagger: frames pooled into patches with `.any`, two kept tokens prepended, then the
# keep-mask handed to `src_key_padding_mask` (True = padding).
AUDIO_TAGGER = """\
import torch
import torch.nn as nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x, attention_mask=None):
        b, t = x.shape[:2]
        if attention_mask is None:
            attention_mask = torch.ones(b, 2 * t, dtype=torch.int32)
        attention_mask = attention_mask.view(b, -1, 2).any(dim=-1)
        attention_mask = torch.cat([attention_mask.new_ones(b, 2), attention_mask], dim=1)
        return self.encoder(x, src_key_padding_mask=attention_mask)
"""


def test_a_keep_mask_as_key_padding_mask_hides_the_real_tokens() -> None:
    keep = torch.tensor([[True, True, False]])
    x = torch.randn(1, 3, 8)
    layer = torch.nn.TransformerEncoderLayer(8, 2, batch_first=True).eval()
    with torch.no_grad():
        out = layer(x, src_key_padding_mask=keep)
        right = layer(x, src_key_padding_mask=~keep)
    assert not torch.allclose(out[:, :2], right[:, :2], atol=1e-4)


def test_a_pooled_keep_mask_with_prepended_tokens_is_still_a_keep_mask(found: Found) -> None:
    assert found(AUDIO_TAGGER) == [(17, "MC502")]
    fixed = AUDIO_TAGGER.replace("src_key_padding_mask=attention_mask)",
                                 "src_key_padding_mask=~attention_mask)")
    assert found(fixed) == []


# WeNet: the registered chunk mask limited to the left chunks with an in-place fill of False.
CHUNK_BUFFER = """\
import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("chunk_mask", torch.ones(n, n, dtype=torch.bool).tril())

    def forward(self, too_far, left: int = -1):
        chunk_mask = self.chunk_mask
        if left >= 0:
            chunk_mask = self.chunk_mask.masked_fill_(too_far, False)
        return chunk_mask
"""


def test_an_in_place_fill_of_a_buffer_rewrites_it() -> None:
    m = torch.nn.Module()
    m.register_buffer("chunk_mask", torch.ones(2, 2, dtype=torch.bool))
    m.chunk_mask.masked_fill_(torch.tensor([[False, True], [False, False]]), False)
    assert not m.state_dict()["chunk_mask"][0, 1]


def test_a_buffer_filled_in_place_with_false_is_reported(found: Found) -> None:
    assert found(CHUNK_BUFFER) == [(13, "MC524")]
    fixed = CHUNK_BUFFER.replace("masked_fill_(too_far, False)", "masked_fill(too_far, False)")
    assert found(fixed) == []


# Tacotron 2: a weak fill value kept in an attribute, written through `.data`.
TACOTRON = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.score_mask_value = -1e-9

    def forward(self, alignment, mask):
        alignment.data.masked_fill_(mask, self.score_mask_value)
        return F.softmax(alignment, dim=1)
"""


def test_a_fill_through_data_is_a_fill_of_the_scores(found: Found) -> None:
    scores = torch.zeros(1, 3)
    scores.data.masked_fill_(torch.tensor([[False, False, True]]), -1e-9)
    assert scores.softmax(1)[0, 2] > 0.3  # the "masked" step keeps a third of the weight
    assert found(TACOTRON) == [(12, "MC516")]
    fixed = TACOTRON.replace("-1e-9", "-float('inf')")
    assert found(fixed) == []


# Token dropping: the kept-token mask, a CLS token prepended, laid on the query axis.
TOKEN_DROP = """\
import torch
import torch.nn.functional as F


def attend(q, len_keep):
    token_keep = torch.arange(q.shape[2] - 1)[None, :] < len_keep[:, None]
    keep = torch.cat([token_keep.new_ones(q.shape[0], 1), token_keep], dim=1)
    attn_mask = keep[:, None, :, None]
    return F.scaled_dot_product_attention(q, q, q, attn_mask=attn_mask)
"""


def test_a_prepended_token_keeps_the_padding_layout(found: Found) -> None:
    assert found(TOKEN_DROP) == [(8, "MC514")]
    fixed = TOKEN_DROP.replace("keep[:, None, :, None]", "keep[:, None, None, :]")
    assert found(fixed) == []


# ESPnet's MultiHeadedAttention(x, memory, mask): `memory` is the source of the keys, called
# with `memory=x` for self-attention; the causal flag beside a mask is the finding, not a cache.
MEMORY_ARGUMENT = """\
import torch.nn as nn
import torch.nn.functional as F


class MultiHeadedAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.linear_q, self.linear_kv = nn.Linear(d, d), nn.Linear(d, 2 * d)

    def forward(self, x, memory, mask, causal=False):
        q = self.linear_q(x)
        k, v = self.linear_kv(memory).view(*memory.shape[:2], 2, -1).permute(2, 0, 1, 3)
        if causal:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
"""


def test_keys_of_a_memory_argument_are_not_a_cache(found: Found) -> None:
    assert found(MEMORY_ARGUMENT) == [(14, "MC506")]
    # Transformer-XL's `mems`: keys and values of the previous segment, prepended
    kv_line = next(line + "\n" for line in MEMORY_ARGUMENT.splitlines() if "k, v =" in line)
    mems = MEMORY_ARGUMENT.replace(
        kv_line,
        kv_line + "        mk, mv = self.linear_kv(mems).view(*mems.shape[:2], 2, -1)"
                  ".permute(2, 0, 1, 3)\n"
    ).replace(
        "def forward(self, x, memory, mask, causal=False):",
        "def forward(self, x, memory, mask, mems, causal=False):").replace(
        "return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)",
        "return F.scaled_dot_product_attention(q, torch.cat([mk, k], 1), v, is_causal=True)")
    assert found("import torch\n" + mems) == [(16, "MC510")]
