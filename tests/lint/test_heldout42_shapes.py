"""The shapes of held-out 42 (relation extraction, visual question answering, cross-lingual
retrieval, grammatical error correction, sound classification) that its first reading missed,
and a false finding of fresh32 (ChatGLM's layer): each bad source next to the findings it must
give, its correct form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# ATLOP's BERT: one attention that fills where the mask is True on its eager path (kept for
# `output_attentions`) and hands the same mask to SDPA otherwise; the model passes padding.
ONE_MASK_READ_BOTH_WAYS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def forward(self, q, k, v, mask, output_attentions=False):
        if output_attentions:
            scores = q @ k.transpose(-1, -2)
            probs = scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(dim=-1)
            return probs @ v
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = SelfAttention()

    def forward(self, x, mask, output_attentions=False):
        return self.attention(x, x, x, mask, output_attentions)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(2))

    def forward(self, x, input_ids, attention_mask):
        mask = (attention_mask == 0)[:, None, None, :]
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, output_attentions=i == 1)
        return x
"""


def test_a_padding_mask_as_sdpa_attn_mask_attends_to_the_padding() -> None:
    q = torch.randn(1, 1, 2, 4)
    padding = torch.tensor([[[[False, True]]]])
    wrong = F.scaled_dot_product_attention(q, q, q, attn_mask=padding)
    assert torch.allclose(wrong[0, 0, 0], q[0, 0, 1])  # only the padded key is seen


def test_sdpa_is_the_wrong_reading_when_every_call_passes_padding(found: Found) -> None:
    assert found(ONE_MASK_READ_BOTH_WAYS) == [(12, "MC511")]
    fixed = ONE_MASK_READ_BOTH_WAYS.replace("attn_mask=mask", "attn_mask=~mask")
    assert found(fixed) == []


def test_the_fill_is_the_wrong_reading_when_every_call_passes_a_keep_mask(found: Found) -> None:
    keep = ONE_MASK_READ_BOTH_WAYS.replace("(attention_mask == 0)", "(attention_mask != 0)")
    assert found(keep) == [(10, "MC519")]


# MCAN: the encoder gets the tokenizer's keep-mask as key_padding_mask while the decoder, in the
# same function, gets it inverted.
INVERTED_FOR_ONE_LAYER_ONLY = """\
import torch
import torch.nn as nn


class SA(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mhatt = nn.MultiheadAttention(d, 4, batch_first=True)

    def forward(self, x, key_padding_mask):
        return self.mhatt(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)[0]


class SGA(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mhatt = nn.MultiheadAttention(d, 4, batch_first=True)

    def forward(self, x, y, y_pad):
        return self.mhatt(x, y, y, key_padding_mask=y_pad, need_weights=False)[0]


class Backbone(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.enc_list = nn.ModuleList(SA(d) for _ in range(2))
        self.dec_list = nn.ModuleList(SGA(d) for _ in range(2))

    def forward(self, lang, img, attention_mask):
        lang_pad = ~attention_mask
        for enc in self.enc_list:
            lang = enc(lang, key_padding_mask=attention_mask)
        for dec in self.dec_list:
            img = dec(img, lang, lang_pad)
        return img


class Net(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.backbone = Backbone(d)

    def forward(self, lang, img, input_ids, attention_mask):
        attention_mask = attention_mask.bool()
        return self.backbone(lang, img, attention_mask)
"""


def test_a_keep_mask_as_key_padding_mask_hides_the_real_tokens() -> None:
    mha = torch.nn.MultiheadAttention(4, 1, batch_first=True)
    x = torch.randn(1, 2, 4)
    keep = torch.tensor([[True, False]])
    _, weights = mha(x, x, x, key_padding_mask=keep)
    assert torch.allclose(weights[0, :, 0], torch.zeros(2))  # the real token gets no weight


def test_a_mask_inverted_for_one_layer_and_handed_bare_to_another(found: Found) -> None:
    assert found(INVERTED_FOR_ONE_LAYER_ONLY) == [(32, "MC502")]
    fixed = INVERTED_FOR_ONE_LAYER_ONLY.replace(
        "key_padding_mask=attention_mask)", "key_padding_mask=lang_pad)")
    assert found(fixed) == []


# mContriever: the file's tokenizer returns an int64 attention_mask; the retriever hands it to
# an encoder (inverted into key_padding_mask) and inverts it with `~` for its pooling.
INT_MASK_INVERTED_BESIDE_A_KEY_PADDING_HAND_OVER = """\
import torch
import torch.nn as nn


class Tokenizer:
    def __call__(self, texts):
        ids = [[1] * len(t) for t in texts]
        width = max(len(x) for x in ids)
        return {"input_ids": torch.tensor([x + [0] * (width - len(x)) for x in ids]),
                "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x))
                                                for x in ids])}


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1)
        self.embed = nn.Embedding(10, 8)

    def forward(self, input_ids, attention_mask):
        return self.encoder(self.embed(input_ids), src_key_padding_mask=attention_mask == 0)


class Retriever(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()

    def forward(self, input_ids, attention_mask):
        hidden = self.encoder(input_ids, attention_mask)
        pad = ~attention_mask[..., None]
        hidden = hidden.masked_fill(pad, 0.0)
        return hidden.sum(dim=1) / attention_mask.sum(dim=1)[..., None]


def embed(texts):
    tokenizer = Tokenizer()
    model = Retriever()
    tokens = tokenizer(texts)
    return model(tokens["input_ids"], tokens["attention_mask"])
"""


def test_invert_of_an_int64_mask_is_never_false() -> None:
    mask = torch.tensor([1, 0])
    assert (~mask).tolist() == [-2, -1] and (~mask).bool().all()


def test_an_int_mask_inverted_beside_a_key_padding_hand_over(found: Found) -> None:
    assert found(INT_MASK_INVERTED_BESIDE_A_KEY_PADDING_HAND_OVER) == [(32, "MC518")]
    fixed = INT_MASK_INVERTED_BESIDE_A_KEY_PADDING_HAND_OVER.replace(
        "~attention_mask[..., None]", "attention_mask[..., None] == 0")
    assert found(fixed) == []


# BART: one attention class, built causal for the decoder's self-attention, whose flag meets
# keys concatenated after the cache.
INSTANCE_FLAG_WITH_A_CACHE = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, is_causal=False):
        super().__init__()
        self.is_causal = is_causal
        self.k_proj = nn.Linear(d, d)

    def forward(self, q, past_key_value=None, attention_mask=None):
        if past_key_value is not None:
            k = torch.cat([past_key_value, self.k_proj(q)], dim=2)
        else:
            k = self.k_proj(q)
        return F.scaled_dot_product_attention(
            q, k, k, attn_mask=attention_mask,
            is_causal=self.is_causal and attention_mask is None)


class DecoderLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.self_attn = Attention(d, is_causal=True)
        self.encoder_attn = Attention(d)
"""


def test_is_causal_with_cached_keys_hides_the_cache_from_a_new_query() -> None:
    q = torch.randn(1, 1, 1, 4)
    k = torch.randn(1, 1, 3, 4)
    top_left = F.scaled_dot_product_attention(q, k, k, is_causal=True)
    assert torch.allclose(top_left[0, 0, 0], k[0, 0, 0])  # sees only the oldest key


def test_a_causal_instance_flag_meets_cached_keys(found: Found) -> None:
    assert found(INSTANCE_FLAG_WITH_A_CACHE) == [(19, "MC510")]
    fixed = INSTANCE_FLAG_WITH_A_CACHE.replace(
        "attention_mask is None)", "attention_mask is None and past_key_value is None)")
    assert found(fixed) == []


def test_no_instance_built_causal_no_finding(found: Found) -> None:
    never = INSTANCE_FLAG_WITH_A_CACHE.replace("Attention(d, is_causal=True)", "Attention(d)")
    assert found(never) == []


# AST (Audio Spectrogram Transformer): a padding mask over frequency-by-time patches, the
# patch end `t * stride + patch` compared with the frames, flattened to (batch, patches), then
# put on the query axis.
PATCH_MASK_ON_THE_QUERY_AXIS = """\
import torch
import torch.nn as nn


class Attention(nn.Module):
    def forward(self, x, attn_keep):
        attn = x @ x.transpose(-2, -1)
        attn = attn.masked_fill(attn_keep == 0, torch.finfo(attn.dtype).min)
        return attn.softmax(dim=-1) @ x


class Model(nn.Module):
    def __init__(self, stride=4, patch=8, f_dim=3):
        super().__init__()
        self.attn = Attention()
        self.stride, self.patch, self.f_dim = stride, patch, f_dim

    def forward(self, x, n_frames):
        t_patches = x.size(1) // self.f_dim
        time_keep = torch.arange(t_patches)[None, :] * self.stride + self.patch <= n_frames[:, None]
        keep = time_keep[:, None, :].expand(-1, self.f_dim, -1).reshape(x.size(0), -1)
        attn_keep = keep.unsqueeze(1).unsqueeze(3)
        return self.attn(x, attn_keep)
"""


def test_a_query_axis_mask_leaves_the_padded_keys_visible() -> None:
    scores = torch.zeros(1, 1, 2, 2)
    keep = torch.tensor([[True, False]])
    rows = scores.masked_fill(keep[:, None, :, None] == 0, -1e4).softmax(-1)
    assert torch.allclose(rows[0, 0, 0], torch.tensor([0.5, 0.5]))  # the padded key is seen


def test_a_scaled_position_test_flattened_over_patches(found: Found) -> None:
    assert found(PATCH_MASK_ON_THE_QUERY_AXIS) == [(22, "MC514")]
    fixed = PATCH_MASK_ON_THE_QUERY_AXIS.replace(".unsqueeze(1).unsqueeze(3)",
                                                 ".unsqueeze(1).unsqueeze(2)")
    assert found(fixed) == []


def test_a_reversed_position_test_is_not_read_as_lengths(found: Found) -> None:
    # `patch - t * stride`: positions counted down, not a lengths test's (batch, seq) mask; the
    # mask's name is neutral here (since session 38, a mask named per token, `keep`, laid on the
    # query axis by `.unsqueeze(1).unsqueeze(3)` is MC514 by its name and shape alone)
    reversed_order = PATCH_MASK_ON_THE_QUERY_AXIS.replace(
        "torch.arange(t_patches)[None, :] * self.stride + self.patch",
        "self.patch - torch.arange(t_patches)[None, :] * self.stride").replace(
        "keep = time_keep", "chosen = time_keep").replace("keep.unsqueeze", "chosen.unsqueeze")
    assert "chosen.unsqueeze(1)" in reversed_order and found(reversed_order) == []


# ChatGLM (collie-lm): the layer gives `_forward` the bool mask of `get_masks()`, True where the
# prefix-causal mask hides a key, and `_forward` fills where it is True.
BOOL_MASK_BESIDE_INPUT_IDS = """\
import torch
import torch.nn as nn


class Layer(nn.Module):
    def get_masks(self, input_ids):
        n = input_ids.shape[1]
        mask = torch.ones((input_ids.shape[0], n, n), device=input_ids.device)
        mask.tril_()
        return (mask.unsqueeze(1) < 0.5).bool()

    def _forward(self, hidden_states, input_ids, attention_mask):
        scores = hidden_states @ hidden_states.transpose(-1, -2)
        scores.masked_fill_(attention_mask, -10000.0)
        return scores.softmax(-1) @ hidden_states

    def forward(self, hidden_states, input_ids, past=None):
        if past is not None:
            attention_mask = torch.zeros(1, 1).bool()
        else:
            attention_mask = self.get_masks(input_ids)
        return self._forward(hidden_states=hidden_states, input_ids=input_ids,
                             attention_mask=attention_mask)
"""


def test_a_bool_mask_every_call_gives_beside_input_ids_is_not_the_tokenizers(
        found: Found) -> None:
    assert found(BOOL_MASK_BESIDE_INPUT_IDS) == []


def test_the_tokenizer_pair_still_reads_an_unknown_mask_as_a_keep_mask(found: Found) -> None:
    unknown = BOOL_MASK_BESIDE_INPUT_IDS.replace(
        "attention_mask=attention_mask)", "attention_mask=past)")
    assert found(unknown) == [(14, "MC519")]


# bio-attention: the causal part is folded into the mask when there is one; is_causal is set
# only on the `elif` that runs without one.
CAUSAL_FLAG_ONLY_WITHOUT_A_MASK = """\
import torch
import torch.nn.functional as F


def attend(q, k, v, mask=None, causal=False):
    is_causal = False
    if causal and (mask is not None):
        hidden = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(diagonal=1)
        mask = mask.masked_fill(hidden, -float("inf"))
    elif causal:
        is_causal = True
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
"""


def test_a_causal_flag_set_on_the_elif_without_a_mask(found: Found) -> None:
    assert found(CAUSAL_FLAG_ONLY_WITHOUT_A_MASK) == []


def test_a_causal_flag_set_on_an_elif_that_may_have_a_mask(found: Found) -> None:
    # `elif q.requires_grad:` does not hold the `and`'s other term: the mask may be there
    either = CAUSAL_FLAG_ONLY_WITHOUT_A_MASK.replace("    elif causal:",
                                                     "    elif q.requires_grad:")
    assert found(either) == [(12, "MC506")]
