"""Transformer Hawkes Process for continuous-time event sequences, on scaled_dot_product_attention.

Layout of SimiaoZuo/Transformer-Hawkes-Process (Zuo et al., ICML 2020): Constants.PAD,
get_non_pad_mask / get_attn_key_pad_mask / get_subsequent_mask, Encoder with the temporal
encoding and event embedding, EncoderLayer with MultiHeadAttention and PositionwiseFeedForward
(w_qs / w_ks / w_vs, normalize_before), RNN_layers, Predictor heads, and Utils' log_likelihood
with the Monte-Carlo compute_integral_unbiased, type_loss and time_loss, trained on simulated
multivariate Hawkes sequences (Ogata thinning).

Source: rasbt/LLMs-from-scratch#1061, conventions.md §1 (SDPA row, direction cheat-sheet) and §5 item 1, seed self_attention_mask_guide.txt §2
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


def get_non_pad_mask(seq):
    assert seq.dim() == 2
    return seq.ne(PAD).type(torch.float).unsqueeze(-1)


def get_attn_key_pad_mask(seq_k, seq_q):
    len_q = seq_q.size(1)
    padding_mask = seq_k.eq(PAD)
    return padding_mask.unsqueeze(1).expand(-1, len_q, -1)


def get_subsequent_mask(seq):
    sz_b, len_s = seq.size()
    subsequent_mask = torch.triu(torch.ones((len_s, len_s), device=seq.device, dtype=torch.bool), diagonal=1)
    return subsequent_mask.unsqueeze(0).expand(sz_b, -1, -1)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_head, d_model, d_k, d_v, dropout=0.1, normalize_before=True):
        super().__init__()
        self.normalize_before = normalize_before
        self.n_head, self.d_k, self.d_v = n_head, d_k, d_v
        self.w_qs = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_ks = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_vs = nn.Linear(d_model, n_head * d_v, bias=False)
        self.fc = nn.Linear(d_v * n_head, d_model)
        for linear in (self.w_qs, self.w_ks, self.w_vs, self.fc):
            nn.init.xavier_uniform_(linear.weight)
        self.dropout_p = dropout
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask=None):
        d_k, d_v, n_head = self.d_k, self.d_v, self.n_head
        sz_b, len_q, len_k, len_v = q.size(0), q.size(1), k.size(1), v.size(1)
        residual = q
        if self.normalize_before:
            q = self.layer_norm(q)
        q = self.w_qs(q).view(sz_b, len_q, n_head, d_k).transpose(1, 2)
        k = self.w_ks(k).view(sz_b, len_k, n_head, d_k).transpose(1, 2)
        v = self.w_vs(v).view(sz_b, len_v, n_head, d_v).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)
        output = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask, dropout_p=self.dropout_p if self.training else 0.0)
        output = output.transpose(1, 2).contiguous().view(sz_b, len_q, -1)
        output = self.dropout(self.fc(output)) + residual
        if not self.normalize_before:
            output = self.layer_norm(output)
        return output


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_in, d_hid, dropout=0.1, normalize_before=True):
        super().__init__()
        self.normalize_before = normalize_before
        self.w_1 = nn.Linear(d_in, d_hid)
        self.w_2 = nn.Linear(d_hid, d_in)
        self.layer_norm = nn.LayerNorm(d_in, eps=1e-6)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        residual = x
        if self.normalize_before:
            x = self.layer_norm(x)
        x = self.dropout(self.w_2(self.dropout(F.gelu(self.w_1(x))))) + residual
        return x if self.normalize_before else self.layer_norm(x)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, d_inner, n_head, d_k, d_v, dropout=0.1, normalize_before=True):
        super().__init__()
        self.slf_attn = MultiHeadAttention(n_head, d_model, d_k, d_v, dropout=dropout,
                                           normalize_before=normalize_before)
        self.pos_ffn = PositionwiseFeedForward(d_model, d_inner, dropout=dropout, normalize_before=normalize_before)

    def forward(self, enc_input, non_pad_mask=None, slf_attn_mask=None):
        enc_output = self.slf_attn(enc_input, enc_input, enc_input, mask=slf_attn_mask) * non_pad_mask
        return self.pos_ffn(enc_output) * non_pad_mask


class Encoder(nn.Module):
    def __init__(self, num_types, d_model, d_inner, n_layers, n_head, d_k, d_v, dropout):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("position_vec", torch.tensor(
            [math.pow(10000.0, 2.0 * (i // 2) / d_model) for i in range(d_model)]), persistent=False)
        self.event_emb = nn.Embedding(num_types + 1, d_model, padding_idx=PAD)
        self.layer_stack = nn.ModuleList([
            EncoderLayer(d_model, d_inner, n_head, d_k, d_v, dropout=dropout, normalize_before=False)
            for _ in range(n_layers)])

    def temporal_enc(self, time, non_pad_mask):
        result = time.unsqueeze(-1) / self.position_vec
        result = torch.cat([torch.sin(result[:, :, 0::2]), torch.cos(result[:, :, 1::2])], dim=-1)
        return result * non_pad_mask

    def forward(self, event_type, event_time, non_pad_mask):
        slf_attn_mask_subseq = get_subsequent_mask(event_type)
        slf_attn_mask_keypad = get_attn_key_pad_mask(seq_k=event_type, seq_q=event_type)
        slf_attn_mask = slf_attn_mask_keypad | slf_attn_mask_subseq
        tem_enc = self.temporal_enc(event_time, non_pad_mask)
        enc_output = self.event_emb(event_type)
        for enc_layer in self.layer_stack:
            enc_output = enc_layer(enc_output + tem_enc, non_pad_mask=non_pad_mask, slf_attn_mask=slf_attn_mask)
        return enc_output


class RNN_layers(nn.Module):
    def __init__(self, d_model, d_rnn):
        super().__init__()
        self.rnn = nn.LSTM(d_model, d_rnn, num_layers=1, batch_first=True)
        self.projection = nn.Linear(d_rnn, d_model)

    def forward(self, data, non_pad_mask):
        lengths = non_pad_mask.squeeze(2).long().sum(1).cpu()
        pack_enc_output = nn.utils.rnn.pack_padded_sequence(data, lengths, batch_first=True, enforce_sorted=False)
        out = nn.utils.rnn.pad_packed_sequence(self.rnn(pack_enc_output)[0], batch_first=True,
                                               total_length=data.size(1))[0]
        return self.projection(out)


class Transformer(nn.Module):
    def __init__(self, num_types, d_model=64, d_rnn=32, d_inner=128, n_layers=2, n_head=4, d_k=16, d_v=16, dropout=0.1):
        super().__init__()
        self.encoder = Encoder(num_types, d_model, d_inner, n_layers, n_head, d_k, d_v, dropout)
        self.num_types = num_types
        self.linear = nn.Linear(d_model, num_types)
        self.alpha = nn.Parameter(torch.tensor(-0.1))
        self.beta = nn.Parameter(torch.tensor(1.0))
        self.rnn = RNN_layers(d_model, d_rnn)
        self.time_predictor = nn.Linear(d_model, 1, bias=False)
        self.type_predictor = nn.Linear(d_model, num_types, bias=False)

    def forward(self, event_type, event_time):
        non_pad_mask = get_non_pad_mask(event_type)
        enc_output = self.rnn(self.encoder(event_type, event_time, non_pad_mask), non_pad_mask)
        type_prediction = self.type_predictor(enc_output) * non_pad_mask
        time_prediction = self.time_predictor(enc_output) * non_pad_mask
        return enc_output, (type_prediction, time_prediction)


def softplus(x, beta):
    temp = (beta * x).clamp(max=20)
    return 1.0 / beta * torch.log(1 + torch.exp(temp))


def log_likelihood(model, data, time, types, num_samples=50):
    non_pad_mask = get_non_pad_mask(types).squeeze(2)
    type_mask = F.one_hot(types, model.num_types + 1)[:, :, 1:].float()
    type_lambda = torch.sum(softplus(model.linear(data), model.beta) * type_mask, dim=2)
    event_ll = torch.log(type_lambda + 1e-9).masked_fill(~non_pad_mask.bool(), 0.0).sum(-1)
    diff_time = (time[:, 1:] - time[:, :-1]) * non_pad_mask[:, 1:]
    temp_time = diff_time.unsqueeze(2) * torch.rand([*diff_time.size(), num_samples]) / (time[:, :-1] + 1).unsqueeze(2)
    temp_hid = torch.sum(model.linear(data)[:, 1:, :] * type_mask[:, 1:, :], dim=2, keepdim=True)
    all_lambda = softplus(temp_hid + model.alpha * temp_time, model.beta).mean(dim=2)
    non_event_ll = (all_lambda * diff_time).sum(-1)
    return event_ll, non_event_ll


def type_loss(prediction, types):
    truth = types[:, 1:] - 1
    prediction = prediction[:, :-1, :]
    correct_num = torch.sum((prediction.argmax(dim=-1) == truth) & (truth >= 0))
    return F.cross_entropy(prediction.transpose(1, 2), truth, ignore_index=-1, reduction="sum"), correct_num


def time_loss(prediction, event_time, types):
    true = event_time[:, 1:] - event_time[:, :-1]
    diff = (prediction.squeeze(-1)[:, :-1] - true) * (types[:, 1:] != PAD)
    return torch.sum(diff * diff)


def simulate_hawkes(rng, mu=(0.3, 0.2, 0.2), alpha=((0.5, 0.1, 0.0), (0.2, 0.4, 0.2), (0.0, 0.3, 0.5)),
                    decay=1.5, n=30):
    events, t = [], 0.0
    while len(events) < n:
        lam_bar = sum(mu) + sum(alpha[k][j] * decay for (s, k) in events for j in range(3))
        t += rng.expovariate(lam_bar)
        lam = [mu[j] + sum(alpha[k][j] * decay * math.exp(-decay * (t - s)) for (s, k) in events) for j in range(3)]
        if rng.random() * lam_bar <= sum(lam):
            events.append((t, rng.choices(range(3), weights=lam)[0]))
    return events


def make_batch(seqs):
    width = max(len(s) for s in seqs)
    event_time = torch.zeros(len(seqs), width)
    event_type = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        event_time[i, : len(s)] = torch.tensor([t for t, _ in s])
        event_type[i, : len(s)] = torch.tensor([k + 1 for _, k in s])
    return event_time, event_type


if __name__ == "__main__":
    rng = random.Random(0)
    torch.manual_seed(0)
    train = [simulate_hawkes(rng, n=rng.randint(10, 40)) for _ in range(512)]
    test = [simulate_hawkes(rng, n=rng.randint(10, 40)) for _ in range(128)]
    model = Transformer(num_types=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-05)
    for epoch in range(6):
        model.train()
        rng.shuffle(train)
        for b in range(0, 512, 32):
            event_time, event_type = make_batch(train[b:b + 32])
            enc_out, prediction = model(event_type, event_time)
            event_ll, non_event_ll = log_likelihood(model, enc_out, event_time, event_type)
            event_loss = -torch.sum(event_ll - non_event_ll)
            pred_loss, _ = type_loss(prediction[0], event_type)
            loss = event_loss + pred_loss + time_loss(prediction[1], event_time, event_type) / 10.0
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            event_time, event_type = make_batch(test)
            enc_out, prediction = model(event_type, event_time)
            event_ll, non_event_ll = log_likelihood(model, enc_out, event_time, event_type)
            _, correct = type_loss(prediction[0], event_type)
            ll = (event_ll - non_event_ll).sum().item() / (event_type != PAD).sum().item()
            accuracy = correct.item() / (event_type[:, 1:] != PAD).sum().item()
        print(f"epoch {epoch} test log-likelihood/event {ll:.3f} type accuracy {accuracy:.3f}")
    with torch.no_grad():
        edited = event_type.clone()
        edited[:, 6:] = torch.where(edited[:, 6:] != PAD, edited[:, 6:] % 3 + 1, edited[:, 6:])
        moved = (model(edited, event_time)[1][0][:, :6] - prediction[0][:, :6]).abs().max().item()
    print(f"predictions at events 0-5 after changing the types of later events: {moved:.2e}")
