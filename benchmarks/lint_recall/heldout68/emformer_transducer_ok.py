"""Low-latency live captioning with an Emformer-style streaming transducer.

The encoder stacks four frames, then attends segment by segment: every frame sees
its own segment, a few segments of left context and a short right-context look-ahead,
which bounds the captioning delay. An LSTM prediction network and an additive joiner
complete the RNN-T; the loss is the forward-variable recursion in log space.

Source: pytorch/pytorch#103963 (conventions.md section 3 item 6), huggingface/transformers#32195
(section 3 item 25); conventions.md section 2.9.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BLANK = 0


class EmformerAttention(nn.Module):
    def __init__(self, input_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.scaling = (input_dim // num_heads) ** -0.5
        self.emb_to_key_value = nn.Linear(input_dim, 2 * input_dim)
        self.emb_to_query = nn.Linear(input_dim, input_dim)
        self.out_proj = nn.Linear(input_dim, input_dim)

    def _attention_probs(self, attention_weights, attention_mask, padding_mask):
        neg = torch.finfo(attention_weights.dtype).min
        attention_weights = attention_weights.masked_fill(attention_mask, neg)
        if padding_mask is not None:
            attention_weights = attention_weights.masked_fill(padding_mask[:, None, None, :], neg)
        return F.softmax(attention_weights, dim=-1)

    def forward(self, x, attention_mask, padding_mask=None):
        b, t, d = x.shape
        h = self.num_heads
        query = self.emb_to_query(x).view(b, t, h, d // h).transpose(1, 2)
        key, value = self.emb_to_key_value(x).view(b, t, 2, h, d // h).permute(2, 0, 3, 1, 4)
        attention_weights = torch.matmul(query * self.scaling, key.transpose(-2, -1))
        probs = self._attention_probs(attention_weights, attention_mask, padding_mask)
        return self.out_proj(torch.matmul(probs, value).transpose(1, 2).reshape(b, t, d))


class EmformerLayer(nn.Module):
    def __init__(self, d, heads, ffn_dim):
        super().__init__()
        self.attention = EmformerAttention(d, heads)
        self.layer_norm_input = nn.LayerNorm(d)
        self.pos_ff = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, ffn_dim), nn.GELU(), nn.Linear(ffn_dim, d))
        self.layer_norm_output = nn.LayerNorm(d)

    def forward(self, x, attention_mask, padding_mask):
        x = x + self.attention(self.layer_norm_input(x), attention_mask, padding_mask)
        return self.layer_norm_output(x + self.pos_ff(x))


class EmformerEncoder(nn.Module):
    def __init__(self, idim=40, d=64, heads=4, layers=2, segment_length=4, left_context_segments=2, right_context_length=1, stride=4):
        super().__init__()
        self.stride = stride
        self.segment_length = segment_length
        self.left_context_segments = left_context_segments
        self.right_context_length = right_context_length
        self.input_linear = nn.Linear(idim * stride, d)
        self.layers = nn.ModuleList(EmformerLayer(d, heads, 2 * d) for _ in range(layers))

    def _gen_attention_mask(self, t, device):
        idx = torch.arange(t, device=device)
        seg = idx // self.segment_length
        lo = (seg - self.left_context_segments).clamp(min=0) * self.segment_length
        hi = (seg + 1) * self.segment_length + self.right_context_length
        return (idx[None, :] < lo[:, None]) | (idx[None, :] >= hi[:, None])

    def forward(self, feats, lengths):
        b, t, f = feats.shape
        t_out = t // self.stride
        x = self.input_linear(feats[:, : t_out * self.stride].reshape(b, t_out, f * self.stride))
        out_lengths = lengths // self.stride
        padding_mask = torch.arange(t_out, device=feats.device)[None, :] >= out_lengths[:, None]
        attention_mask = self._gen_attention_mask(t_out, feats.device)
        for layer in self.layers:
            x = layer(x, attention_mask, padding_mask)
        return x, out_lengths


class Transducer(nn.Module):
    def __init__(self, vocab_size=16, d=64, joiner_dim=64):
        super().__init__()
        self.encoder = EmformerEncoder(d=d)
        self.embedding = nn.Embedding(vocab_size, d)
        self.predictor = nn.LSTM(d, d, batch_first=True)
        self.enc_proj = nn.Linear(d, joiner_dim)
        self.pred_proj = nn.Linear(d, joiner_dim)
        self.joiner_out = nn.Linear(joiner_dim, vocab_size)

    def predict(self, tokens, state=None):
        out, state = self.predictor(self.embedding(tokens), state)
        return self.pred_proj(out), state

    def join(self, enc, pred):
        return self.joiner_out(torch.tanh(enc.unsqueeze(2) + pred.unsqueeze(1)))

    def forward(self, feats, lengths, targets, target_lengths):
        enc, enc_lengths = self.encoder(feats, lengths)
        pred_in = F.pad(targets, (1, 0), value=BLANK)
        pred, _ = self.predict(pred_in)
        logits = self.join(self.enc_proj(enc), pred)
        return rnnt_loss(logits, targets, enc_lengths, target_lengths)

    @torch.no_grad()
    def greedy_decode(self, feats, lengths, max_symbols=3):
        enc, enc_lengths = self.encoder(feats, lengths)
        enc = self.enc_proj(enc)
        hyp, state = [], None
        pred, state = self.predict(torch.tensor([[BLANK]]), state)
        for t in range(int(enc_lengths[0])):
            for _ in range(max_symbols):
                k = self.join(enc[:1, t : t + 1], pred)[0, 0, 0].argmax().item()
                if k == BLANK:
                    break
                hyp.append(k)
                pred, state = self.predict(torch.tensor([[k]]), state)
        return hyp


def rnnt_loss(logits, targets, logit_lengths, target_lengths):
    log_probs = logits.log_softmax(-1)
    losses = []
    for b in range(logits.size(0)):
        t_len, u_len = int(logit_lengths[b]), int(target_lengths[b])
        lp = log_probs[b, :t_len, : u_len + 1]
        blank = lp[..., BLANK]
        emit = lp[:, :u_len].gather(-1, targets[b, :u_len].view(1, u_len, 1).expand(t_len, u_len, 1)).squeeze(-1)
        alpha = [[None] * (u_len + 1) for _ in range(t_len)]
        for t in range(t_len):
            for u in range(u_len + 1):
                if t == 0 and u == 0:
                    alpha[t][u] = lp.new_zeros(())
                    continue
                paths = []
                if t > 0:
                    paths.append(alpha[t - 1][u] + blank[t - 1, u])
                if u > 0:
                    paths.append(alpha[t][u - 1] + emit[t, u - 1])
                alpha[t][u] = torch.logsumexp(torch.stack(paths), dim=0)
        losses.append(-(alpha[t_len - 1][u_len] + blank[t_len - 1, u_len]))
    return torch.stack(losses).mean()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Transducer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lengths = torch.tensor([64, 52, 40])
    feats = torch.randn(3, 64, 40).masked_fill((torch.arange(64)[None, :] >= lengths[:, None])[..., None], 0.0)
    target_lengths = torch.tensor([4, 3, 2])
    targets = torch.randint(1, 16, (3, 4))
    for step in range(3):
        loss = model(feats, lengths, targets, target_lengths)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} rnnt loss {loss.item():.4f} ({loss.item() / math.log(2):.2f} bits)")
    model.eval()
    print("greedy", model.greedy_decode(feats[:1], lengths[:1]))
