"""Joint CTC/attention ASR model in the style of ESPnet (espnet/nets/pytorch_backend/nets_utils.py,
espnet2/asr/espnet_model.py): Conv1d subsampling with its own length arithmetic, ``make_pad_mask``
and ``make_non_pad_mask``, ``add_sos_eos`` with ``ignore_id`` padding, a CTC branch over the
encoder lengths, an attention decoder trained with label smoothing, ``ctc_weight``
interpolation of the two losses and CTC greedy decoding.

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8
"""
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

IGNORE_ID = -1


def make_pad_mask(lengths, maxlen=None):
    maxlen = int(lengths.max()) if maxlen is None else maxlen
    return torch.arange(maxlen, device=lengths.device)[None, :] >= lengths[:, None]


def make_non_pad_mask(lengths, maxlen=None):
    return ~make_pad_mask(lengths, maxlen)


def pad_list(xs, pad_value):
    pad = xs[0].new_full((len(xs), max(x.size(0) for x in xs)), pad_value)
    for i, x in enumerate(xs):
        pad[i, : x.size(0)] = x
    return pad


def add_sos_eos(ys_pad, sos, eos, ignore_id):
    ys = [y[y != ignore_id] for y in ys_pad]
    ys_in = [torch.cat([ys_pad.new([sos]), y], dim=0) for y in ys]
    ys_out = [torch.cat([y, ys_pad.new([eos])], dim=0) for y in ys]
    return pad_list(ys_in, eos), pad_list(ys_out, ignore_id)


def label_smoothing_loss(x, target, size, smoothing=0.1):
    x, target = x.view(-1, size), target.view(-1)
    ignore = target == IGNORE_ID
    true_dist = torch.full_like(x, smoothing / (size - 1))
    true_dist.scatter_(1, target.masked_fill(ignore, 0).unsqueeze(1), 1 - smoothing)
    kl = F.kl_div(torch.log_softmax(x, dim=1), true_dist, reduction="none")
    return kl.masked_fill(ignore.unsqueeze(1), 0).sum() / (~ignore).sum()


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head, n_feat):
        super().__init__()
        self.h = n_head
        self.linear_q, self.linear_kv = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, 2 * n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)

    def forward(self, x, memory, mask, causal=False):
        B, L, _ = x.shape
        q = self.linear_q(x).view(B, L, self.h, -1).transpose(1, 2)
        k, v = self.linear_kv(memory).view(B, memory.shape[1], 2, self.h, -1).permute(2, 0, 3, 1, 4)
        if causal:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask & torch.ones(L, L, dtype=torch.bool).tril())
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.linear_out(out.transpose(1, 2).reshape(B, L, -1))


class Layer(nn.Module):
    def __init__(self, adim, aheads, src_attn=False):
        super().__init__()
        self.self_attn = MultiHeadedAttention(aheads, adim)
        self.src_attn = MultiHeadedAttention(aheads, adim) if src_attn else None
        self.ff = nn.Sequential(nn.Linear(adim, 4 * adim), nn.ReLU(), nn.Linear(4 * adim, adim))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(adim), nn.LayerNorm(adim), nn.LayerNorm(adim)

    def forward(self, x, mask, memory=None, memory_mask=None):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, mask, causal=self.src_attn is not None)
        if self.src_attn is not None:
            x = x + self.src_attn(self.norm2(x), memory, memory_mask)
        return x + self.ff(self.norm3(x))


class E2E(nn.Module):
    def __init__(self, idim=20, odim=12, adim=32, aheads=4, elayers=2, dlayers=2, ctc_weight=0.3):
        super().__init__()
        self.sos = self.eos = odim - 1
        self.odim, self.ctc_weight = odim, ctc_weight
        self.subsample = nn.Sequential(nn.Conv1d(idim, adim, 3, 2, 1), nn.ReLU(), nn.Conv1d(adim, adim, 3, 2, 1))
        self.encoders = nn.ModuleList(Layer(adim, aheads) for _ in range(elayers))
        self.ctc_lo = nn.Linear(adim, odim)
        self.embed = nn.Embedding(odim, adim)
        self.pos = nn.Parameter(torch.randn(64, adim) * 0.02)
        self.decoders = nn.ModuleList(Layer(adim, aheads, src_attn=True) for _ in range(dlayers))
        self.output_layer = nn.Linear(adim, odim)

    def encode(self, xs_pad, ilens):
        xs_pad = xs_pad.masked_fill(make_pad_mask(ilens, xs_pad.size(1)).unsqueeze(-1), 0.0)
        hs = self.subsample(xs_pad.transpose(1, 2)).transpose(1, 2)
        hlens = ((ilens - 1) // 2 + 1 - 1) // 2 + 1
        src_mask = make_non_pad_mask(hlens, hs.size(1))[:, None, None, :]
        for layer in self.encoders:
            hs = layer(hs, src_mask)
        return hs, hlens

    def decode(self, ys_in_pad, ys_in_lens, hs, hlens):
        x = self.embed(ys_in_pad) + self.pos[: ys_in_pad.size(1)]
        tgt_mask = make_non_pad_mask(ys_in_lens, ys_in_pad.size(1))[:, None, None, :]
        memory_mask = make_non_pad_mask(hlens, hs.size(1))[:, None, None, :]
        for layer in self.decoders:
            x = layer(x, tgt_mask, hs, memory_mask)
        return self.output_layer(x)

    def forward(self, xs_pad, ilens, ys_pad):
        hs, hlens = self.encode(xs_pad, ilens)
        ys_lens = (ys_pad != IGNORE_ID).sum(-1)
        log_probs = self.ctc_lo(hs).log_softmax(-1).transpose(0, 1)
        loss_ctc = F.ctc_loss(log_probs, ys_pad[ys_pad != IGNORE_ID], hlens, ys_lens, zero_infinity=True)
        ys_in_pad, ys_out_pad = add_sos_eos(ys_pad, self.sos, self.eos, IGNORE_ID)
        pred = self.decode(ys_in_pad, ys_lens + 1, hs, hlens)
        loss_att = label_smoothing_loss(pred, ys_out_pad, self.odim)
        return self.ctc_weight * loss_ctc + (1 - self.ctc_weight) * loss_att, pred

    def ctc_greedy(self, xs_pad, ilens):
        hs, hlens = self.encode(xs_pad, ilens)
        best = self.ctc_lo(hs).argmax(-1).masked_fill(make_pad_mask(hlens, hs.size(1)), 0)
        return [[int(t) for t in torch.unique_consecutive(b) if t != 0] for b in best]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = E2E().eval()
    xs, ilens = torch.randn(2, 40, 20), torch.tensor([40, 31])
    ys = torch.tensor([[3, 5, 2, 7, 4], [6, 1, 8, IGNORE_ID, IGNORE_ID]])
    with torch.no_grad():
        loss, pred = model(xs, ilens, ys)
        print("loss (default kernel):", round(loss.item(), 4), "ctc greedy:", model.ctc_greedy(xs, ilens))
        try:
            with sdpa_kernel(SDPBackend.MATH):
                loss_math, pred_math = model(xs, ilens, ys)
            print("math kernel vs default:", (pred_math - pred).abs().max().item())
        except RuntimeError as err:
            print("math kernel:", err)
        later = ys.clone()
        later[0, 4] = 9
        print("future leak:", (model(xs, ilens, later)[1] - pred)[0, :4].abs().max().item())
        alone = model(xs[1:, :31], ilens[1:], ys[1:, :3])[1]
        print("batched vs alone:", (alone[0] - pred[1, :4]).abs().max().item())
