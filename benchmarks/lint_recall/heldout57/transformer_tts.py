"""Transformer-TTS (Li et al., 2019) on LJSpeech: phonemes to 80-band mel frames.

The decoder returns its encoder-decoder attention so train.py can plot the alignments.

Source: conventions.md section 1 (nn.Transformer row), section 2.4; pytorch/pytorch#41508
(conventions.md section 3 item 1); seed self_attention_mask_guide.txt section 3.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable

USE_CUDA = torch.cuda.is_available()


def get_mask_from_lengths(lengths, max_len=None):
    max_len = max_len or int(lengths.max().item())
    ids = torch.arange(0, max_len, device=lengths.device)
    return (ids < lengths.unsqueeze(1)).bool()


class ScaledPositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=1500):
        super(ScaledPositionalEncoding, self).__init__()
        position = torch.arange(0, max_len).unsqueeze(1).float()
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe = torch.stack([torch.sin(position * div_term), torch.cos(position * div_term)], -1)
        self.register_buffer('pe', pe.view(max_len, 1, d_model))
        self.alpha = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return x + self.alpha * self.pe[:x.size(0)]


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_head, dropout):
        super(DecoderLayer, self).__init__()
        self.self_attn = nn.MultiheadAttention(d_model, n_head, dropout=dropout)
        self.src_attn = nn.MultiheadAttention(d_model, n_head, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
        self.drop = nn.Dropout(dropout)

    def forward(self, y, memory, self_mask, memory_pad):
        h, _ = self.self_attn(y, y, y, attn_mask=self_mask)
        y = self.norms[0](y + self.drop(h))
        h, align = self.src_attn(y, memory, memory, key_padding_mask=memory_pad)
        y = self.norms[1](y + self.drop(h))
        return self.norms[2](y + self.drop(self.ff(y))), align


class TransformerTTS(nn.Module):
    def __init__(self, n_symbols, n_mels=80, d_model=256, n_head=4, n_layers=3, max_frames=1000, dropout=0.1):
        super(TransformerTTS, self).__init__()
        self.embed = nn.Embedding(n_symbols, d_model, padding_idx=0)
        self.enc_prenet = nn.Sequential(nn.Conv1d(d_model, d_model, 5, padding=2), nn.BatchNorm1d(d_model),
                                        nn.ReLU(), nn.Dropout(0.5))
        self.enc_pos = ScaledPositionalEncoding(d_model)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model, n_head, 4 * d_model, dropout),
                                             n_layers)
        self.dec_prenet = nn.Sequential(nn.Linear(n_mels, d_model), nn.ReLU(), nn.Dropout(0.5),
                                        nn.Linear(d_model, d_model), nn.ReLU(), nn.Dropout(0.5))
        self.dec_pos = ScaledPositionalEncoding(d_model)
        self.layers = nn.ModuleList([DecoderLayer(d_model, n_head, dropout) for _ in range(n_layers)])
        self.mel_linear = nn.Linear(d_model, n_mels)
        self.stop_linear = nn.Linear(d_model, 1)
        self.postnet = nn.Sequential(nn.Conv1d(n_mels, 512, 5, padding=2), nn.Tanh(),
                                     nn.Conv1d(512, n_mels, 5, padding=2))
        self.register_buffer('future', torch.triu(torch.full((max_frames, max_frames), float('-inf'))))  # expect: MC503 buffer

    def forward(self, text, text_lens, mel_in):
        text_pad = ~get_mask_from_lengths(text_lens, text.size(1))
        x = self.enc_prenet(self.embed(text).transpose(1, 2)).permute(2, 0, 1)
        memory = self.encoder(self.enc_pos(x), src_key_padding_mask=text_pad)
        y = self.dec_pos(self.dec_prenet(mel_in).transpose(0, 1))
        n_frames = y.size(0)
        aligns = []
        for layer in self.layers:
            y, align = layer(y, memory, self.future[:n_frames, :n_frames], text_pad)
            aligns.append(align)
        y = y.transpose(0, 1)
        mel = self.mel_linear(y)
        mel_post = mel + self.postnet(mel.transpose(1, 2)).transpose(1, 2)
        return mel, mel_post, self.stop_linear(y).squeeze(-1), aligns


def tts_loss(outputs, mel_target, mel_lens):
    mel, mel_post, stop_logits, _ = outputs
    frame_keep = get_mask_from_lengths(mel_lens, mel_target.size(1))
    stop_target = (~frame_keep).float()
    stop_target[torch.arange(mel_lens.size(0)), mel_lens - 1] = 1.0
    keep = frame_keep.unsqueeze(-1).float()
    n = keep.sum() * mel_target.size(-1)
    mel_loss = (((mel - mel_target) ** 2 + (mel_post - mel_target) ** 2) * keep).sum() / n
    stop_loss = F.binary_cross_entropy_with_logits(stop_logits, stop_target, pos_weight=torch.tensor(8.0))
    return mel_loss + stop_loss


def inference(model, text, max_frames=800, threshold=0.5):
    model.eval()
    text = Variable(text, volatile=True)
    text_lens = torch.LongTensor([text.size(1)])
    mel_in = torch.zeros(1, 1, model.mel_linear.out_features)
    with torch.no_grad():
        for _ in range(max_frames):
            mel, mel_post, stop_logits, aligns = model(text, text_lens, mel_in)
            mel_in = torch.cat([mel_in, mel[:, -1:]], dim=1)
            if torch.sigmoid(stop_logits[0, -1]).item() > threshold:
                break
    return mel_post, aligns


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--data', default='ljspeech_phonemes.pt')
    parser.add_argument('--n_symbols', type=int, default=80)
    parser.add_argument('--epochs', type=int, default=300)
    args = parser.parse_args()
    model = TransformerTTS(args.n_symbols)
    if USE_CUDA:
        model = model.cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    for epoch in range(args.epochs):
        for text, text_lens, mel, mel_lens in torch.load(args.data):
            mel_in = F.pad(mel, (0, 0, 1, 0))[:, :-1]
            loss = tts_loss(model(text, text_lens, mel_in), mel, mel_lens)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        print('epoch {} loss {:.4f}'.format(epoch, loss.item()))


if __name__ == '__main__':
    main()
