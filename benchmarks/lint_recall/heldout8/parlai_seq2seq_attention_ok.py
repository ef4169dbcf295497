"""Held-out 8 (correct twin): ParlAI's seq2seq attention layer (parlai/agents/seq2seq/modules.py style: module
constants, `AttentionLayer` with general / concat attention, an agent that halves the model when
--fp16 is set).

Source: facebookresearch/ParlAI PR #2536 ("Fix seq2seq with --fp16 true": the pre-softmax fill
`attn_w_premask.masked_fill_((~attn_mask), -NEAR_INF)` with NEAR_INF = 1e20 cannot be written
into a float16 tensor; the fix fills with `neginf(dtype)`).
Surroundings: a module constant negated at the call, in-place masked_fill_ in a forward, a mask
unpacked from a tuple argument, fp16 chosen by an option.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

NEAR_INF = 1e20
NEAR_INF_FP16 = 65504


def neginf(dtype: torch.dtype) -> float:
    """Return a representable finite number near -inf for a dtype."""
    if dtype is torch.float16:
        return -NEAR_INF_FP16
    else:
        return -NEAR_INF


class AttentionLayer(nn.Module):
    """Computes attention between hidden and encoder states."""

    def __init__(self, attn_type: str, hiddensize: int, embeddingsize: int, bidirectional: bool = False):
        super().__init__()
        self.attention = attn_type
        hsz = hiddensize
        hszXdirs = hsz * (2 if bidirectional else 1)
        if attn_type != "none":
            input_dim = hszXdirs + hsz
            self.attn_combine = nn.Linear(input_dim, hsz, bias=False)
        if attn_type == "concat":
            self.attn = nn.Linear(hsz + hszXdirs, hsz, bias=False)
            self.attn_v = nn.Linear(hsz, 1, bias=False)
        elif attn_type == "general":
            self.attn = nn.Linear(hsz, hszXdirs, bias=False)

    def forward(self, xes, hidden, attn_params):
        if type(hidden) == tuple:
            hidden = hidden[0]
        last_hidden = hidden[-1]
        enc_out, attn_mask = attn_params
        bsz, seqlen, hszXnumdir = enc_out.size()

        if self.attention == "concat":
            hid = last_hidden.unsqueeze(1).expand(bsz, seqlen, last_hidden.size(-1))
            h_merged = torch.cat((enc_out, hid), 2)
            active = torch.tanh(self.attn(h_merged))
            attn_w_premask = self.attn_v(active).squeeze(2)
        else:
            hid = last_hidden.unsqueeze(1)
            if self.attention == "general":
                hid = self.attn(hid)
            attn_w_premask = torch.bmm(hid, enc_out.transpose(1, 2)).squeeze(1)

        # calculate activation scores, apply mask if needed
        if attn_mask is not None:
            # remove activation from NULL symbols
            attn_w_premask.masked_fill_((~attn_mask), neginf(attn_w_premask.dtype))
        attn_weights = F.softmax(attn_w_premask, dim=1)

        strip_hid = last_hidden.unsqueeze(1)
        attn_applied = torch.bmm(attn_weights.unsqueeze(1), enc_out)
        merged = torch.cat((xes.squeeze(1), attn_applied.squeeze(1)), 1)
        output = torch.tanh(self.attn_combine(merged).unsqueeze(1))
        return output, attn_weights, strip_hid


class Seq2seqAgentModel(nn.Module):
    def __init__(self, opt: dict, embeddingsize: int = 128, hiddensize: int = 128):
        super().__init__()
        self.encoder_rnn = nn.LSTM(embeddingsize, hiddensize, batch_first=True)
        self.attention = AttentionLayer(opt.get("attention", "general"), hiddensize, embeddingsize)
        if opt.get("fp16"):
            self.half()

    def decode_step(self, xes, hidden, enc_out, xs_lens):
        attn_mask = torch.arange(enc_out.size(1), device=enc_out.device)[None, :] < xs_lens[:, None]
        return self.attention(xes, hidden, (enc_out, attn_mask))
