"""Shapes of session 33's reach: the bad source next to the finding it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# Held-out 52's and 55's layers: the layer takes its own padding mask (`keep`), and hands it to
# SDPA bare. The slip is the layer's, at the SDPA call: one finding there, whatever calls it.
LAYER_OWN_PADDING = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Layer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, keep):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, keep)
        return y.transpose(1, 2).reshape(b, n, d)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.layers = nn.ModuleList(Layer(32, 4) for _ in range(2))

    def forward(self, ids):
        keep = ids != 0
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x, keep)
        return x
"""


def test_a_layers_own_padding_mask_handed_to_sdpa_bare_is_reported_there(found: Found) -> None:
    sdpa = line_of(LAYER_OWN_PADDING, "F.scaled_dot_product_attention(q, k, v, keep)")
    assert found(LAYER_OWN_PADDING) == [(sdpa, "MC515")]
    fixed = LAYER_OWN_PADDING.replace("(q, k, v, keep)", "(q, k, v, keep[:, None, None, :])")
    assert fixed != LAYER_OWN_PADDING and found(fixed) == []


def test_a_parameter_named_attn_mask_makes_the_caller_the_slip(found: Found) -> None:
    # HittER's `layer(ctx, attn_mask=keep)`: the layer says it takes SDPA's attn_mask.
    source = LAYER_OWN_PADDING.replace("def forward(self, x, keep)",
                                       "def forward(self, x, attn_mask)").replace(
        "(q, k, v, keep)", "(q, k, v, attn_mask)").replace("layer(x, keep)",
                                                          "layer(x, attn_mask=keep)")
    assert source.count("attn_mask") == 3
    assert found(source) == [(line_of(source, "layer(x, attn_mask=keep)"), "MC515")]


def test_a_lambda_that_is_sdpa_under_another_name_makes_the_caller_the_slip(
        found: Found) -> None:
    # Held-out 26's Stack Overflow script: `attend` is SDPA with its arguments as they are.
    source = """\
import torch
import torch.nn.functional as fn

attend = lambda q, k, v, m: fn.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa


def embed(ids, q, k, v):
    m = ids != 0
    return attend(q, k, v, m)
"""
    assert found(source) == [(line_of(source, "return attend(q, k, v, m)"), "MC515")]
    fixed = source.replace("attend(q, k, v, m)", "attend(q, k, v, m[:, None, None, :])")
    assert found(fixed) == []


def test_sdpa_reads_a_two_axis_mask_as_queries_by_keys() -> None:
    # conventions.md 2.6: a (batch, seq) keep-mask given bare to SDPA broadcasts as (1, 1, L, S),
    # so with batch == seq, query i of every sequence gets sequence i's padding.
    torch.manual_seed(0)
    q = k = v = torch.randn(3, 2, 3, 4)
    keep = torch.tensor([[True, True, True], [True, True, False], [True, False, False]])
    bare = F.scaled_dot_product_attention(q, k, v, keep)
    right = F.scaled_dot_product_attention(q, k, v, keep[:, None, None, :])
    as_rows = F.scaled_dot_product_attention(q, k, v, keep[None, None, :, :])
    assert torch.allclose(bare, as_rows) and not torch.allclose(bare, right)


# Held-out 55's halal-ingredient classifier: the tokenizer's attention_mask renamed (`topeng`,
# Indonesian for mask) and passed as the encoder's src_key_padding_mask.
RENAMED_HF_MASK = """\
import torch
import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        layer = nn.TransformerEncoderLayer(32, 4, batch_first=True)
        self.enkoder = nn.TransformerEncoder(layer, 2)

    def forward(self, input_ids, attention_mask):
        topeng = attention_mask
        h = self.enkoder(self.emb(input_ids), src_key_padding_mask=topeng)
        bobot = topeng.unsqueeze(-1).float()
        return (h * bobot).sum(1) / bobot.sum(1)
"""


def test_the_hf_mask_under_another_name_is_still_the_hf_mask(found: Found) -> None:
    passed = line_of(RENAMED_HF_MASK, "src_key_padding_mask=topeng")
    assert found(RENAMED_HF_MASK) == [(passed, "MC502")]
    fixed = RENAMED_HF_MASK.replace("src_key_padding_mask=topeng",
                                    "src_key_padding_mask=topeng == 0")
    assert fixed != RENAMED_HF_MASK and found(fixed) == []


def test_a_keep_mask_as_key_padding_mask_hides_the_real_tokens() -> None:
    # nn.MultiheadAttention's key_padding_mask: True = ignore. An HF keep-mask (1 = real token)
    # given as it is hides the real tokens and lets the query see only the padding.
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 4, 8)
    keep = torch.tensor([[1, 1, 1, 0]])
    wrong = mha(x, x, x, key_padding_mask=keep.bool())[1]
    right = mha(x, x, x, key_padding_mask=keep == 0)[1]
    assert torch.all(wrong[0, :, :3] == 0) and torch.all(right[0, :, 3] == 0)


# Held-out 57's electricity forecaster (its correct twin): a block mask written 1 by hand into
# zeros, then -inf where it is 0 and 0 where it is 1: an additive mask, not a 0/1 one.
BLOCK_BIAS = """\
import torch


def day_block_bias(n, block):
    bias = torch.zeros(n, n)
    for start in range(0, n, block):
        bias[start:start + block, start:start + block] = 1
    bias[bias == 0] = float('-inf')
    bias[bias == 1] = 0.0
    return bias


def attend(scores, attn_bias):
    scores = scores + attn_bias
    return scores.softmax(-1)


def run(scores):
    return attend(scores, day_block_bias(8, 4))
"""


def test_a_hand_written_block_mask_turned_additive_is_not_read_as_zero_one(
        found: Found) -> None:
    assert found(BLOCK_BIAS) == []
    # ... and without the -inf write it is the 0/1 mask SDPA-style addition ignores
    zero_one = BLOCK_BIAS.replace("    bias[bias == 0] = float('-inf')\n", "").replace(
        "    bias[bias == 1] = 0.0\n", "")
    assert found(zero_one) == [(line_of(zero_one, "scores = scores + attn_bias"), "MC508")]


def test_a_one_and_minus_inf_bias_masks_as_zero_and_minus_inf_does() -> None:
    # Adding 1 to every kept score of a row leaves its softmax as it was.
    scores = torch.randn(4, 4)
    block = torch.zeros(4, 4)
    block[:2, :2] = 1
    block[2:, 2:] = 1
    ones_inf = block.masked_fill(block == 0, float("-inf"))
    zeros_inf = ones_inf.masked_fill(ones_inf == 1, 0.0)
    assert torch.allclose((scores + ones_inf).softmax(-1), (scores + zeros_inf).softmax(-1))


# Held-out 57's code summariser: the model reads `source_mask` as a keep-mask (the encoder's
# `src_key_padding_mask=source_mask == 0`), the batch gives the tokenizer's attention_mask, and
# the Luong attention fills where the same mask is True: the fill is the slip, not the call.
READ_BOTH_WAYS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def collate(tokenizer, texts):
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    return {"source_ids": enc["input_ids"], "source_mask": enc["attention_mask"]}


class Attention(nn.Module):
    def forward(self, h, memory, memory_mask):
        scores = torch.bmm(memory, h.unsqueeze(2)).squeeze(2)
        scores = scores.masked_fill(memory_mask.bool(), float("-inf"))
        return torch.bmm(F.softmax(scores, -1).unsqueeze(1), memory).squeeze(1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        layer = nn.TransformerEncoderLayer(32, 4, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1)
        self.attention = Attention()

    def encode(self, source_ids, source_mask):
        return self.encoder(self.embed(source_ids), src_key_padding_mask=source_mask == 0)

    def forward(self, source_ids, source_mask):
        memory = self.encode(source_ids, source_mask)
        return self.attention(memory[:, 0], memory, source_mask)


def main(tokenizer, texts):
    model = Model()
    batch = collate(tokenizer, texts)
    return model(batch["source_ids"], batch["source_mask"])
"""


def test_a_fill_that_reads_a_mask_against_its_other_uses_is_reported_at_the_fill(
        found: Found) -> None:
    fill = line_of(READ_BOTH_WAYS, "masked_fill(memory_mask.bool()")
    assert found(READ_BOTH_WAYS) == [(fill, "MC519")]
    fixed = READ_BOTH_WAYS.replace("masked_fill(memory_mask.bool()", "masked_fill(memory_mask == 0")
    assert fixed != READ_BOTH_WAYS and found(fixed) == []


# Held-out 54's KerasNLP port: a preprocessor (a callable class of the file) returns the batch
# as a dict, `padding_mask` made as `token_ids != pad_id`, and the model takes it spread.
PREPROCESSOR_DICT = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Preprocessor:
    def __call__(self, texts):
        token_ids = torch.full((len(texts), 16), 0, dtype=torch.long)
        for i, ids in enumerate(texts):
            token_ids[i, :len(ids)] = torch.tensor(ids)
        return {"token_ids": token_ids, "padding_mask": token_ids != 0}


class Encoder(nn.Module):
    def forward(self, x, padding_mask=None):
        q = k = v = x[:, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=padding_mask)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(100, 8)
        self.encoder = Encoder()

    def forward(self, token_ids, padding_mask):
        return self.encoder(self.embedding(token_ids), padding_mask=padding_mask)


def main(texts):
    preprocessor = Preprocessor()
    classifier = Classifier()
    inputs = preprocessor(texts)
    return classifier(**inputs)
"""


def test_a_dict_a_callable_class_returns_is_spread_into_the_model(found: Found) -> None:
    sdpa = line_of(PREPROCESSOR_DICT, "attn_mask=padding_mask)")
    assert found(PREPROCESSOR_DICT) == [(sdpa, "MC515")]
    fixed = PREPROCESSOR_DICT.replace("attn_mask=padding_mask)",
                                      "attn_mask=padding_mask[:, None, None, :])")
    assert fixed != PREPROCESSOR_DICT and found(fixed) == []


def test_a_returned_dicts_field_keeps_its_batch_by_seq_layout(found: Found) -> None:
    source = PREPROCESSOR_DICT.split("class Encoder")[0] + """\
def attend(texts, q, k, v):
    inputs = Preprocessor()(texts)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=inputs["padding_mask"])
"""
    assert found(source) == [(line_of(source, 'attn_mask=inputs["padding_mask"]'), "MC515")]


GENERATOR_BATCHES = """\
import torch
import torch.nn.functional as F


def batches(rows, n):
    for start in range(0, len(rows), 8):
        ids = torch.full((8, n), 0, dtype=torch.long)
        for i, row in enumerate(rows[start:start + 8]):
            ids[i, :len(row)] = torch.tensor(row)
        yield ids, ids != 0


def run(rows, q, k, v):
    for ids, keep in batches(rows, 16):
        yield F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
"""


def test_a_loop_over_a_generator_unpacks_what_each_yield_gives(found: Found) -> None:
    assert found(GENERATOR_BATCHES) == [(line_of(GENERATOR_BATCHES, "attn_mask=keep"), "MC515")]
    fixed = GENERATOR_BATCHES.replace("attn_mask=keep", "attn_mask=keep[:, None, None, :]")
    assert found(fixed) == []


# Held-out 58's keyboard model: an upper triangle (True above the diagonal) AND-ed with a
# keep-mask and handed to SDPA: one bug, reported once, where they are AND-ed.
UPPER_AND_KEEP = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, n):
        super().__init__()
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, q, k, v, lengths):
        t = q.shape[2]
        keep = torch.arange(t)[None, :] < lengths[:, None]
        allowed = self.causal[:t, :t] & keep[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
"""


def test_a_triangle_anded_with_a_keep_mask_is_one_finding(found: Found) -> None:
    anded = line_of(UPPER_AND_KEEP, "allowed = self.causal[:t, :t] & keep")
    assert found(UPPER_AND_KEEP) == [(anded, "MC521")]
    fixed = UPPER_AND_KEEP.replace("diagonal=1)", "diagonal=1) == 0")
    assert fixed != UPPER_AND_KEEP and found(fixed) == []
    # (without the keep-mask, the triangle handed to SDPA is still reported there)
    bare = UPPER_AND_KEEP.replace(" & keep[:, None, None, :]", "")
    assert found(bare) == [(line_of(bare, "attn_mask=allowed"), "MC521")]


def test_sdpa_keeps_where_a_bool_mask_is_true() -> None:
    # An upper triangle given as SDPA's bool attn_mask lets each query see only later keys:
    # the second query reads exactly the third value, and the last query sees no key at all.
    torch.manual_seed(0)
    q = k = v = torch.randn(1, 1, 3, 2)
    upper = torch.ones(3, 3, dtype=torch.bool).triu(1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=upper)
    assert torch.allclose(out[0, 0, 1], v[0, 0, 2])
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(causal[0, 0, 0], v[0, 0, 0])


# Held-out 59's Longformer-style clause classifier: the model reads `pad` as a padding mask
# (`~pad` for its local SDPA call, the pooling's key_padding_mask) and the batch gives one; the
# global row's SDPA call takes it as it is, as a keep-mask.
GLOBAL_ROW_PAD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def encode(tokenizer, texts):
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    return {"input_ids": enc["input_ids"], "pad": enc["attention_mask"] == 0}


class Attention(nn.Module):
    def local(self, q, k, v, pad):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=~pad[:, None, None, :])

    def forward(self, q, k, v, pad):
        y = self.local(q, k, v, pad)
        g = F.scaled_dot_product_attention(q[:, :, :1], k, v, attn_mask=pad[:, None, None, :])
        return torch.cat([g, y[:, :, 1:]], dim=2)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()
        self.pool = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, q, k, v, x, pad):
        y = self.attn(q, k, v, pad)
        pooled, _ = self.pool(x, x, x, key_padding_mask=pad)
        return y, pooled


def predict(model, tokenizer, texts, q, k, v, x):
    batch = encode(tokenizer, texts)
    return model(q, k, v, x, batch["pad"])
"""


def test_an_sdpa_call_that_reads_a_mask_against_the_models_other_uses_is_reported_there(
        found: Found) -> None:
    use = line_of(GLOBAL_ROW_PAD, "attn_mask=pad[:, None, None, :])")
    assert found(GLOBAL_ROW_PAD) == [(use, "MC511")]
    fixed = GLOBAL_ROW_PAD.replace("attn_mask=pad[:, None, None, :])",
                                   "attn_mask=~pad[:, None, None, :])")
    assert fixed != GLOBAL_ROW_PAD and found(fixed) == []


# Held-out 59's paged chunked prefill: the keys joined with a paged cache, then laid out for
# SDPA through a generator expression over (q, k, v), keep the cache.
CHUNKED_PREFILL = """\
import torch
import torch.nn.functional as F


def attend(q, k_new, v_new, past_k, past_v):
    k = torch.cat([past_k, k_new], dim=0)
    v = torch.cat([past_v, v_new], dim=0)
    q_, k_, v_ = (t.transpose(0, 1)[None] for t in (q, k, v))
    if q_.shape[-2] == 1:
        return F.scaled_dot_product_attention(q_, k_, v_)
    return F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)
"""


def test_names_unpacked_from_a_generator_over_a_tuple_keep_each_items_facts(
        found: Found) -> None:
    flag = line_of(CHUNKED_PREFILL, "is_causal=True)")
    assert found(CHUNKED_PREFILL) == [(flag, "MC510")]
    listed = CHUNKED_PREFILL.replace("(t.transpose(0, 1)[None] for t in (q, k, v))",
                                     "[t.transpose(0, 1)[None] for t in [q, k, v]]")
    assert listed != CHUNKED_PREFILL and found(listed) == [(flag, "MC510")]
    fixed = CHUNKED_PREFILL.replace(
        "return F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)",
        "keep = torch.ones(q_.shape[-2], k_.shape[-2], dtype=torch.bool).tril("
        "k_.shape[-2] - q_.shape[-2])\n    return F.scaled_dot_product_attention(q_, k_, v_, "
        "attn_mask=keep)")
    assert fixed != CHUNKED_PREFILL and found(fixed) == []


def test_is_causal_with_a_cache_aligns_to_the_top_left() -> None:
    # L = 2 new queries over S = 4 keys (2 cached): is_causal=True hides the last two keys
    # from the first new query, which should see three of them.
    torch.manual_seed(0)
    q = torch.randn(1, 1, 2, 4)
    k = v = torch.randn(1, 1, 4, 4)
    flagged = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    keep = torch.ones(2, 4, dtype=torch.bool).tril(2)
    right = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    assert not torch.allclose(flagged, right)
    assert torch.allclose(flagged[0, 0, 0], v[0, 0, 0])


# ChatGLM2's core attention (copied into diffusers' Kolors, ColossalAI, modelscope and collie):
# the cached keys reach it from the layer that joins them, and it sets is_causal only under
# `attention_mask is None and q.shape[2] == k.shape[2]`, without a cached prefix.
CHATGLM_CORE = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class CoreAttention(nn.Module):
    def forward(self, query_layer, key_layer, value_layer, attention_mask):
        query_layer, key_layer, value_layer = [
            k.permute(1, 2, 0, 3) for k in [query_layer, key_layer, value_layer]
        ]
        if attention_mask is None and query_layer.shape[2] == key_layer.shape[2]:
            return F.scaled_dot_product_attention(query_layer, key_layer, value_layer,
                                                  is_causal=True)
        return F.scaled_dot_product_attention(query_layer, key_layer, value_layer, ~attention_mask)


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.core_attention = CoreAttention()

    def forward(self, q, k, v, attention_mask, kv_cache=None):
        if kv_cache is not None:
            cache_k, cache_v = kv_cache
            k = torch.cat((cache_k, k), dim=0)
            v = torch.cat((cache_v, v), dim=0)
        return self.core_attention(q, k, v, attention_mask)
"""


def test_an_sdpa_call_under_an_equal_length_test_has_no_cached_prefix(found: Found) -> None:
    assert found(CHATGLM_CORE) == []
    unguarded = CHATGLM_CORE.replace(
        " and query_layer.shape[2] == key_layer.shape[2]", "")
    assert unguarded != CHATGLM_CORE
    assert found(unguarded) == [(line_of(unguarded, "is_causal=True)"), "MC510")]


def test_a_mask_read_the_other_way_attends_to_the_padding_only() -> None:
    # The MC511 and MC519 messages above: a padding mask (True = padding) given to SDPA as its
    # bool attn_mask, or a keep-mask (1 = real token) used as the fill condition, leaves the
    # padding as the only key each query attends to.
    torch.manual_seed(0)
    q = k = v = torch.randn(1, 1, 4, 2)
    pad = torch.tensor([[False, False, True, True]])
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :])
    scores = (q @ k.transpose(-1, -2))[0, 0] / 2 ** 0.5  # SDPA's scale, 1/sqrt(head dim)
    weights = scores.masked_fill(~pad, float("-inf")).softmax(-1)  # the SDPA reading
    assert torch.allclose(out[0, 0], weights @ v[0, 0], atol=1e-6)
    assert torch.all(weights[:, :2] == 0)
    keep = (~pad).long()
    filled = scores.masked_fill(keep.bool(), float("-inf")).softmax(-1)  # keep as condition
    assert torch.all(filled[:, :2] == 0) and torch.allclose(filled.sum(-1), torch.ones(4))
