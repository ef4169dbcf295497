"""Two-pass voice search decoding in the WeNet U2 layout.

A shared encoder feeds a CTC head (first pass: CTC prefix beam search gives an
n-best list) and an attention decoder that rescores the n-best hypotheses in one
batched pass (second pass). Training uses the joint CTC / attention loss.

Source: pytorch/pytorch PR #111007; conventions.md section 1, section 2.7 and section 5 item 8.
"""
import math
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE_ID = -1


def make_pad_mask(lengths, max_len=0):
    max_len = max_len if max_len > 0 else lengths.max().item()
    seq_range = torch.arange(0, max_len, dtype=torch.int64, device=lengths.device)
    return seq_range.unsqueeze(0).expand(lengths.size(0), max_len) >= lengths.unsqueeze(-1)


def subsequent_mask(size, device=torch.device("cpu")):
    arange = torch.arange(size, device=device)
    return arange.expand(size, size) <= arange.unsqueeze(-1)


def log_add(*args):
    if all(a == -float("inf") for a in args):
        return -float("inf")
    a_max = max(args)
    return a_max + math.log(sum(math.exp(a - a_max) for a in args))


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head, n_feat):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)

    def forward(self, query, key, value, mask=None, causal=False):
        b = query.size(0)
        q = self.linear_q(query).view(b, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(b, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(b, -1, self.h, self.d_k).transpose(1, 2)
        if causal:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)  # expect: MC506 causal
        else:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.linear_out(x.transpose(1, 2).reshape(b, -1, self.h * self.d_k))


class Layer(nn.Module):
    def __init__(self, d, heads, cross=False):
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, d)
        self.src_attn = MultiHeadedAttention(heads, d) if cross else None
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(3))
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))

    def forward(self, x, mask, memory=None, memory_mask=None, causal=False):
        h = self.norms[0](x)
        x = x + self.self_attn(h, h, h, mask, causal=causal)
        if self.src_attn is not None:
            h = self.norms[1](x)
            x = x + self.src_attn(h, memory, memory, memory_mask)
        return x + self.ff(self.norms[2](x))


class U2Model(nn.Module):
    def __init__(self, vocab_size=20, idim=40, d=64, heads=4):
        super().__init__()
        self.vocab_size, self.sos, self.eos = vocab_size, vocab_size - 1, vocab_size - 1
        self.embed_feats = nn.Sequential(nn.Linear(idim, d), nn.LayerNorm(d))
        self.encoders = nn.ModuleList(Layer(d, heads) for _ in range(2))
        self.ctc_lo = nn.Linear(d, vocab_size)
        self.embed_tokens = nn.Embedding(vocab_size, d)
        self.decoders = nn.ModuleList(Layer(d, heads, cross=True) for _ in range(2))
        self.output_layer = nn.Linear(d, vocab_size)
        self.pos = nn.Parameter(torch.randn(256, d) * 0.02)

    def encode(self, feats, feats_lens):
        x = self.embed_feats(feats) + self.pos[: feats.size(1)]
        masks = ~make_pad_mask(feats_lens, feats.size(1))[:, None, None, :]
        for layer in self.encoders:
            x = layer(x, masks)
        return x, masks

    def decode(self, memory, memory_mask, ys_in_pad, ys_in_lens=None, tgt_mask=None):
        x = self.embed_tokens(ys_in_pad) + self.pos[: ys_in_pad.size(1)]
        causal = tgt_mask is None
        if causal:
            tgt_mask = ~make_pad_mask(ys_in_lens, ys_in_pad.size(1))[:, None, None, :]
        for layer in self.decoders:
            x = layer(x, tgt_mask, memory, memory_mask, causal=causal)
        return self.output_layer(x)

    def add_sos_eos(self, ys_pad):
        ys = [y[y != IGNORE_ID] for y in ys_pad]
        sos, eos = ys_pad.new_tensor([self.sos]), ys_pad.new_tensor([self.eos])
        ys_in = nn.utils.rnn.pad_sequence([torch.cat([sos, y]) for y in ys], True, self.eos)
        ys_out = nn.utils.rnn.pad_sequence([torch.cat([y, eos]) for y in ys], True, IGNORE_ID)
        return ys_in, ys_out

    def forward(self, feats, feats_lens, text, text_lens, ctc_weight=0.3):
        memory, memory_mask = self.encode(feats, feats_lens)
        ctc_logp = self.ctc_lo(memory).log_softmax(-1).transpose(0, 1)
        loss_ctc = F.ctc_loss(ctc_logp, text.masked_fill(text == IGNORE_ID, 0), feats_lens, text_lens, zero_infinity=True)
        ys_in, ys_out = self.add_sos_eos(text)
        logits = self.decode(memory, memory_mask, ys_in, text_lens + 1)
        loss_att = F.cross_entropy(logits.transpose(1, 2), ys_out, ignore_index=IGNORE_ID)
        return ctc_weight * loss_ctc + (1 - ctc_weight) * loss_att

    @torch.no_grad()
    def attention_greedy_search(self, feats, feats_lens, max_len=10):
        memory, memory_mask = self.encode(feats, feats_lens)
        ys = torch.full((feats.size(0), 1), self.sos, dtype=torch.long)
        for i in range(max_len):
            logits = self.decode(memory, memory_mask, ys, tgt_mask=subsequent_mask(i + 1)[None, None])
            ys = torch.cat([ys, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return ys[:, 1:]

    @torch.no_grad()
    def ctc_prefix_beam_search(self, ctc_probs, beam_size):
        cur_hyps = [(tuple(), (0.0, -float("inf")))]
        for t in range(ctc_probs.size(0)):
            next_hyps = defaultdict(lambda: (-float("inf"), -float("inf")))
            top_k_logp, top_k_index = ctc_probs[t].topk(beam_size)
            for logp, s in zip(top_k_logp.tolist(), top_k_index.tolist()):
                for prefix, (pb, pnb) in cur_hyps:
                    last = prefix[-1] if len(prefix) > 0 else None
                    if s == 0:
                        n_pb, n_pnb = next_hyps[prefix]
                        next_hyps[prefix] = (log_add(n_pb, pb + logp, pnb + logp), n_pnb)
                    elif s == last:
                        n_pb, n_pnb = next_hyps[prefix]
                        next_hyps[prefix] = (n_pb, log_add(n_pnb, pnb + logp))
                        n_pb, n_pnb = next_hyps[prefix + (s,)]
                        next_hyps[prefix + (s,)] = (n_pb, log_add(n_pnb, pb + logp))
                    else:
                        n_pb, n_pnb = next_hyps[prefix + (s,)]
                        next_hyps[prefix + (s,)] = (n_pb, log_add(n_pnb, pb + logp, pnb + logp))
            cur_hyps = sorted(next_hyps.items(), key=lambda x: log_add(*x[1]), reverse=True)[:beam_size]
        return [(y[0], log_add(*y[1])) for y in cur_hyps]

    @torch.no_grad()
    def attention_rescoring(self, feats, feats_lens, beam_size=4, ctc_weight=0.5):
        memory, memory_mask = self.encode(feats, feats_lens)
        ctc_probs = self.ctc_lo(memory[0, : feats_lens[0]]).log_softmax(-1)
        hyps = [h for h in self.ctc_prefix_beam_search(ctc_probs, beam_size) if len(h[0]) > 0]
        hyps_pad = nn.utils.rnn.pad_sequence([torch.tensor(h[0]) for h in hyps], True, IGNORE_ID)
        hyps_lens = torch.tensor([len(h[0]) for h in hyps])
        ys_in, ys_out = self.add_sos_eos(hyps_pad)
        n = len(hyps)
        logp = self.decode(memory.repeat(n, 1, 1), memory_mask.repeat(n, 1, 1, 1), ys_in, hyps_lens + 1).log_softmax(-1)
        att = logp.gather(-1, ys_out.clamp(min=0).unsqueeze(-1)).squeeze(-1).masked_fill(ys_out == IGNORE_ID, 0.0).sum(-1)
        scores = att + ctc_weight * torch.tensor([h[1] for h in hyps])
        best = scores.argmax().item()
        return hyps[best][0], scores[best].item()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = U2Model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    feats_lens = torch.tensor([30, 24, 18])
    feats = torch.randn(3, 30, 40).masked_fill(make_pad_mask(feats_lens)[..., None], 0.0)
    text_lens = torch.tensor([5, 4, 3])
    text = torch.randint(1, 19, (3, 5)).masked_fill(make_pad_mask(text_lens), IGNORE_ID)
    for step in range(3):
        loss = model(feats, feats_lens, text, text_lens)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} joint loss {loss.item():.4f}")
    model.eval()
    hyp, score = model.attention_rescoring(feats[:1], feats_lens[:1])
    print("rescored hyp", list(hyp), f"score {score:.3f}")
    print("attention greedy", model.attention_greedy_search(feats[:1], feats_lens[:1], max_len=5)[0].tolist())
