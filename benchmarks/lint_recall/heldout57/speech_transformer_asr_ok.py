"""Speech-Transformer for LibriSpeech 100h: conv subsampling, joint CTC-attention training.

80-dim fbank features in, 5000 SentencePiece units out; decoding is CTC greedy for the
dev-clean WER printed after each epoch.

Source: conventions.md section 1 (direction cheat-sheet; nn.MultiheadAttention row), section 2.4;
seed self_attention_mask_guide.txt section 2.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

USE_CUDA = torch.cuda.is_available()
PAD, SOS, EOS, BLANK = 0, 1, 2, 3


def lengths_to_mask(lengths, max_len):
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def sinusoid(max_len, d_model):
    position = torch.arange(0, max_len).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
    return torch.stack([torch.sin(position * div_term), torch.cos(position * div_term)], -1).view(max_len, d_model)


class Conv2dSubsampling(nn.Module):
    def __init__(self, idim, odim):
        super(Conv2dSubsampling, self).__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)

    def forward(self, feats, feat_lens):
        x = self.conv(feats.unsqueeze(1))
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        return x, ((feat_lens - 1) // 2 - 1) // 2


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_head, d_inner, dropout):
        super(EncoderLayer, self).__init__()
        self.self_attn = nn.MultiheadAttention(d_model, n_head, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(), nn.Dropout(dropout),
                                nn.Linear(d_inner, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, attention_mask):
        y = self.norm1(x)
        y, _ = self.self_attn(y, y, y, key_padding_mask=~attention_mask)
        x = x + self.dropout(y)
        return x + self.dropout(self.ff(self.norm2(x)))


class SpeechTransformer(nn.Module):
    def __init__(self, idim, vocab, d_model=256, n_head=4, n_enc=12, n_dec=6, d_inner=2048, dropout=0.1):
        super(SpeechTransformer, self).__init__()
        self.d_model = d_model
        self.subsample = Conv2dSubsampling(idim, d_model)
        self.enc_layers = nn.ModuleList([EncoderLayer(d_model, n_head, d_inner, dropout) for _ in range(n_enc)])
        self.enc_norm = nn.LayerNorm(d_model)
        self.ctc_proj = nn.Linear(d_model, vocab)
        self.embed = nn.Embedding(vocab, d_model, padding_idx=PAD)
        layer = nn.TransformerDecoderLayer(d_model, n_head, d_inner, dropout)
        self.decoder = nn.TransformerDecoder(layer, n_dec, norm=nn.LayerNorm(d_model))
        self.out = nn.Linear(d_model, vocab)
        self.register_buffer('pe', sinusoid(3000, d_model))

    def encode(self, feats, feat_lens):
        x, enc_lens = self.subsample(feats, feat_lens)
        x = x * math.sqrt(self.d_model) + self.pe[:x.size(1)]
        frame_mask = lengths_to_mask(enc_lens, x.size(1))
        x = x.transpose(0, 1)
        for layer in self.enc_layers:
            x = layer(x, frame_mask)
        return self.enc_norm(x), frame_mask, enc_lens

    def forward(self, feats, feat_lens, ys_in):
        memory, frame_mask, enc_lens = self.encode(feats, feat_lens)
        ctc_logp = F.log_softmax(self.ctc_proj(memory), dim=-1)
        length = ys_in.size(1)
        future = torch.triu(torch.ones(length, length, dtype=torch.bool, device=ys_in.device), diagonal=1)
        y = self.embed(ys_in) * math.sqrt(self.d_model) + self.pe[:length]
        y = self.decoder(y.transpose(0, 1), memory, tgt_mask=future,
                         tgt_key_padding_mask=ys_in == PAD,
                         memory_key_padding_mask=~frame_mask)
        return ctc_logp, enc_lens, self.out(y.transpose(0, 1))


def add_sos_eos(ys):
    ys_in = F.pad(ys, (1, 0), value=SOS)
    ys_out = F.pad(ys, (0, 1), value=PAD)
    lens = (ys != PAD).sum(1)
    ys_out[torch.arange(ys.size(0)), lens] = EOS
    return ys_in, ys_out


def joint_loss(model, batch, ctc_weight):
    feats, feat_lens, ys = batch['feats'], batch['feat_lens'], batch['ys']
    ys_in, ys_out = add_sos_eos(ys)
    ctc_logp, enc_lens, logits = model(feats, feat_lens, ys_in)
    ys_lens = (ys != PAD).sum(1)
    ctc = F.ctc_loss(ctc_logp, ys[ys != PAD], enc_lens, ys_lens, blank=BLANK, zero_infinity=True)
    att = F.cross_entropy(logits.reshape(-1, logits.size(-1)), ys_out.reshape(-1), ignore_index=PAD)
    return ctc_weight * ctc + (1.0 - ctc_weight) * att


def ctc_greedy(model, feats, feat_lens):
    with torch.no_grad():
        memory, frame_mask, enc_lens = model.encode(feats, feat_lens)
        best = model.ctc_proj(memory).argmax(-1).transpose(0, 1)
    hyps = []
    for seq, n in zip(best.tolist(), enc_lens.tolist()):
        out, prev = [], BLANK
        for tok in seq[:n]:
            if tok != prev and tok != BLANK:
                out.append(tok)
            prev = tok
        hyps.append(out)
    return hyps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--train', default='dump/train_clean_100.pt')
    parser.add_argument('--vocab', type=int, default=5000)
    parser.add_argument('--ctc_weight', type=float, default=0.3)
    parser.add_argument('--epochs', type=int, default=80)
    parser.add_argument('--lr', type=float, default=1e-3)
    args = parser.parse_args()
    model = SpeechTransformer(80, args.vocab)
    if USE_CUDA:
        model = model.cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98))
    batches = torch.load(args.train)
    for epoch in range(args.epochs):
        model.train()
        total = 0.0
        for batch in batches:
            if USE_CUDA:
                batch = dict((k, v.cuda()) for k, v in batch.items())
            loss = joint_loss(model, batch, args.ctc_weight)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            total += loss.item()
        print('epoch {} loss {:.3f}'.format(epoch, total / len(batches)))


if __name__ == '__main__':
    main()
