"""Style-disentangled handwriting generation of online character trajectories.

Layout after dailenson/SDT (Dai et al., "Disentangling Writer and Character Styles for
Handwriting Generation", CVPR 2023): `SDT_Generator` with a convolutional `Feat_Encoder` over the
writer's style images, `base_encoder` and the `writer_head` / `glyph_head` memories, a
`Content_TR` over the standard glyph, `wri_decoder` then `gly_decoder` (`nn.TransformerDecoder`),
`SeqtoEmb` / `EmbtoSeq`, SketchRNN-style mixture density output and pen-state loss, and
`inference` by greedy decoding; synthetic writers differ in slant, aspect and pace.

Source: pytorch/pytorch#29546 (conventions.md §3 item 9), conventions.md §2.7 (generate_square_subsequent_mask)
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

GLYPHS = {
    "yi": [[(0.1, 0.5), (0.9, 0.5)]],
    "er": [[(0.2, 0.3), (0.8, 0.3)], [(0.1, 0.75), (0.9, 0.75)]],
    "shi": [[(0.1, 0.45), (0.9, 0.45)], [(0.5, 0.1), (0.5, 0.9)]],
    "kou": [[(0.2, 0.2), (0.2, 0.8)], [(0.2, 0.2), (0.8, 0.2), (0.8, 0.8)], [(0.2, 0.8), (0.8, 0.8)]],
    "ren": [[(0.5, 0.1), (0.2, 0.9)], [(0.5, 0.45), (0.8, 0.9)]],
    "tu": [[(0.2, 0.4), (0.8, 0.4)], [(0.5, 0.15), (0.5, 0.85)], [(0.1, 0.85), (0.9, 0.85)]],
}
CHARS = list(GLYPHS)
MAX_LEN = 14
N_MIX = 4


def write_char(char, writer):
    slant, sx, sy = writer
    pace = 2
    pts, lifts = [], []
    for stroke in GLYPHS[char]:
        for s, ((x0, y0), (x1, y1)) in enumerate(zip(stroke[:-1], stroke[1:])):
            for t in np.linspace(0, 1, pace + 1)[(1 if s else 0):]:
                pts.append((x0 + t * (x1 - x0), y0 + t * (y1 - y0)))
                lifts.append(False)
        lifts[-1] = True
    xy = np.array(pts)
    xy = np.stack([(xy[:, 0] - 0.5 + slant * (0.5 - xy[:, 1])) * sx, (xy[:, 1] - 0.5) * sy], 1)
    seq = np.zeros((MAX_LEN, 5), dtype=np.float32)
    seq[:, 4] = 1.0
    seq[:len(xy), :2] = np.diff(np.vstack([[0.0, 0.0], xy]), axis=0) * 4.0
    seq[:len(xy), 4] = 0.0
    seq[:len(xy), 2] = ~np.array(lifts)
    seq[:len(xy), 3] = np.array(lifts)
    return seq


def render(seq, size=16):
    img = np.zeros((size, size), dtype=np.float32)
    xy = np.cumsum(seq[:, :2], axis=0) / 4.0
    for (x, y), end in zip(xy, seq[:, 4]):
        if not end:
            img[int(np.clip((y + 0.6) / 1.2 * size, 0, size - 1)), int(np.clip((x + 0.6) / 1.2 * size, 0, size - 1))] = 1
    return img


def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones(sz, sz)) == 1)  # expect: MC521 builder
    mask = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))
    return mask


class Feat_Encoder(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(32, d_model, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))

    def forward(self, x):
        return self.net(x).flatten(2).permute(2, 0, 1)


class SDT_Generator(nn.Module):
    def __init__(self, d_model=48, nhead=4, dim_feedforward=96, dropout=0.1):
        super().__init__()
        enc = lambda n: nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout),
                                              n, enable_nested_tensor=False)
        dec = lambda n: nn.TransformerDecoder(nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout), n)
        self.Feat_Encoder = Feat_Encoder(d_model)
        self.base_encoder, self.writer_head, self.glyph_head = enc(1), enc(1), enc(1)
        self.content_cnn = Feat_Encoder(d_model)
        self.Content_TR = enc(1)
        self.wri_decoder, self.gly_decoder = dec(1), dec(1)
        self.SeqtoEmb = nn.Sequential(nn.Linear(5, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.EmbtoSeq = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, 6 * N_MIX + 3))
        pe = torch.zeros(64, d_model)
        position = torch.arange(64).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
        self.register_buffer("pe", pe.unsqueeze(1))

    def add_position(self, x):
        return x + self.pe[:x.size(0)]

    def encode(self, style_imgs, style_pad, char_img):
        B, K = style_imgs.shape[:2]
        style_embe = self.Feat_Encoder(style_imgs.flatten(0, 1).unsqueeze(1))
        P = style_embe.size(0)
        style_embe = style_embe.view(P, B, K, -1).permute(2, 0, 1, 3).reshape(K * P, B, -1)
        memory_pad = style_pad.repeat_interleave(P, dim=1)
        memory = self.base_encoder(self.add_position(style_embe), src_key_padding_mask=memory_pad)
        writer_memory = self.writer_head(memory, src_key_padding_mask=memory_pad)
        glyph_memory = self.glyph_head(memory, src_key_padding_mask=memory_pad)
        char_emb = self.Content_TR(self.add_position(self.content_cnn(char_img.unsqueeze(1)))).mean(0)
        return writer_memory, glyph_memory, memory_pad, char_emb

    def decode(self, char_emb, seq, memories):
        writer_memory, glyph_memory, memory_pad = memories
        tgt = torch.cat([char_emb.unsqueeze(0), self.SeqtoEmb(seq).permute(1, 0, 2)], 0)
        tgt_mask = generate_square_subsequent_mask(tgt.size(0)).to(tgt)
        tgt = self.add_position(tgt)
        wri_hs = self.wri_decoder(tgt, writer_memory, tgt_mask=tgt_mask, memory_key_padding_mask=memory_pad)
        hs = self.gly_decoder(wri_hs, glyph_memory, tgt_mask=tgt_mask, memory_key_padding_mask=memory_pad)
        return self.EmbtoSeq(hs.transpose(0, 1))

    def forward(self, style_imgs, style_pad, seq, char_img):
        writer_memory, glyph_memory, memory_pad, char_emb = self.encode(style_imgs, style_pad, char_img)
        return self.decode(char_emb, seq[:, :-1], (writer_memory, glyph_memory, memory_pad))

    @torch.no_grad()
    def inference(self, style_imgs, style_pad, char_img, max_len=MAX_LEN):
        writer_memory, glyph_memory, memory_pad, char_emb = self.encode(style_imgs, style_pad, char_img)
        seq = torch.zeros(char_img.size(0), 0, 5)
        for _ in range(max_len):
            pi, mu1, mu2, _, _, _, pen_logits = get_mixture_coef(self.decode(char_emb, seq, (writer_memory, glyph_memory, memory_pad))[:, -1:])
            k = pi.argmax(-1, keepdim=True)
            step = torch.cat([mu1.gather(-1, k), mu2.gather(-1, k), F.one_hot(pen_logits.argmax(-1), 3).float()], -1)
            seq = torch.cat([seq, step], 1)
        return seq


def get_mixture_coef(y_pred):
    pi, mu1, mu2, s1, s2, corr = y_pred[..., :6 * N_MIX].split(N_MIX, dim=-1)
    return pi, mu1, mu2, s1.exp().clamp(min=1e-3), s2.exp().clamp(min=1e-3), torch.tanh(corr), y_pred[..., 6 * N_MIX:]


def get_pen_loss(y_pred, seq):
    pi, mu1, mu2, s1, s2, corr, pen_logits = get_mixture_coef(y_pred)
    x1, x2 = seq[..., 0:1], seq[..., 1:2]
    z = ((x1 - mu1) / s1) ** 2 + ((x2 - mu2) / s2) ** 2 - 2 * corr * (x1 - mu1) * (x2 - mu2) / (s1 * s2)
    log_n = -z / (2 * (1 - corr ** 2)) - torch.log(2 * math.pi * s1 * s2 * torch.sqrt(1 - corr ** 2))
    gmm = -torch.logsumexp(F.log_softmax(pi, -1) + log_n, dim=-1)
    fs = 1.0 - seq[..., 4]
    offset_loss = (gmm * fs).sum() / fs.sum()
    pen_loss = F.cross_entropy(pen_logits.flatten(0, 1), seq[..., 2:].argmax(-1).flatten())
    return offset_loss, pen_loss


def make_batch(rng, n):
    chars, writers = rng.integers(0, len(CHARS), n), [(rng.uniform(-0.4, 0.4), rng.uniform(0.7, 1.2), rng.uniform(0.7, 1.2))
                                                      for _ in range(n)]
    seq = np.stack([write_char(CHARS[c], w) for c, w in zip(chars, writers)])
    char_img = np.stack([render(write_char(CHARS[c], (0.0, 1.0, 1.0))) for c in chars])
    style, style_pad = np.zeros((n, 3, 16, 16), dtype=np.float32), np.zeros((n, 3), dtype=bool)
    for i, w in enumerate(writers):
        k = int(rng.integers(2, 4))
        for j, c in enumerate(rng.choice(len(CHARS), k, replace=False)):
            style[i, j] = render(write_char(CHARS[c], w))
        style_pad[i, k:] = True
    return tuple(torch.from_numpy(a) for a in (style, style_pad, seq, char_img))


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = SDT_Generator()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step in range(300):
        model.train()
        style, style_pad, seq, char_img = make_batch(rng, 32)
        offset_loss, pen_loss = get_pen_loss(model(style, style_pad, seq, char_img), seq)
        loss = offset_loss + pen_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 99:
            print(f"step {step + 1}: offset NLL {offset_loss.item():.3f}, pen CE {pen_loss.item():.3f}")
    model.eval()
    style, style_pad, seq, char_img = make_batch(np.random.default_rng(1), 60)
    gen = model.inference(style, style_pad, char_img)
    real = (seq[..., 4] == 0)
    err = (gen[..., :2].cumsum(1) - seq[..., :2].cumsum(1)).norm(dim=-1)[real].mean().item() / 4.0
    pen_acc = (gen[..., 2:].argmax(-1) == seq[..., 2:].argmax(-1))[real].float().mean().item()
    print(f"greedy generation: mean point error {err:.3f} (glyph box 1.0), pen-state accuracy {pen_acc:.3f}")
