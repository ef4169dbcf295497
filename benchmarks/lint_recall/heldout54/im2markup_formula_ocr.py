"""Rendered formula images to LaTeX markup, with a column saliency map for error analysis.

A PyTorch port of harvardnlp/im2markup (Lua Torch, Deng et al. 2017): the option table of
`src/train.lua` (`encoder_num_hidden`, `decoder_num_hidden`, `target_embedding_size`,
`max_num_tokens`), the convolutional feature extractor, the row encoder (a bidirectional LSTM
over every row of the feature grid whose initial states are looked up from the row index,
`pos_embedding_fw` / `pos_embedding_bw`), and the attention decoder with input feeding. Images
of a batch are padded on the right with white columns as the Lua data loader does, and a
column saliency map is read from the input gradient, as `model:backward` gives it in Lua.

Source: seed masked_fill_inplace.txt (注意: 梯度计算风险)
"""

import random
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

TOKENS = ["<pad>", "<s>", "</s>"] + list("xyz0123456789+-=()") + ["^", "_", "\\frac", "\\sqrt"]
opt = SimpleNamespace(batch_size=32, encoder_num_hidden=48, decoder_num_hidden=96, target_embedding_size=32,
                      max_num_tokens=10, max_rows=8, learning_rate=2e-3, glyph_width=5, glyph_height=8)


def make_glyphs(seed=7):
    g = torch.Generator().manual_seed(seed)
    return {t: (torch.rand(opt.glyph_height, opt.glyph_width, generator=g) > 0.55).float() for t in TOKENS[3:]}


def render(tokens, glyphs):
    width = opt.glyph_width * len(tokens) + 2
    image = torch.ones(1, opt.glyph_height + 4, width)
    for i, t in enumerate(tokens):
        col = 1 + i * opt.glyph_width
        image[0, 2:2 + opt.glyph_height, col:col + opt.glyph_width] -= glyphs[t]
    return image


def load_batch(formulas, glyphs):
    images = [render(f, glyphs) for f in formulas]
    widths = torch.tensor([im.shape[-1] for im in images])
    batch = torch.ones(len(images), 1, images[0].shape[1], int(widths.max()))
    targets = torch.zeros(len(images), max(map(len, formulas)) + 2, dtype=torch.long)
    for i, (im, f) in enumerate(zip(images, formulas)):
        batch[i, :, :, :im.shape[-1]] = im
        targets[i, :len(f) + 2] = torch.tensor([1] + [TOKENS.index(t) for t in f] + [2])
    return batch, widths, targets


def column_padding(widths, total):
    return torch.arange(total)[None, :] >= widths[:, None]


class Im2Markup(nn.Module):
    def __init__(self):
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d((1, 2)))
        self.pos_embedding_fw = nn.Embedding(opt.max_rows, opt.encoder_num_hidden)
        self.pos_embedding_bw = nn.Embedding(opt.max_rows, opt.encoder_num_hidden)
        self.encoder = nn.LSTM(64, opt.encoder_num_hidden, batch_first=True, bidirectional=True)
        self.embedding = nn.Embedding(len(TOKENS), opt.target_embedding_size)
        self.decoder = nn.LSTMCell(opt.target_embedding_size + opt.decoder_num_hidden, opt.decoder_num_hidden)
        self.attn_in = nn.Linear(opt.decoder_num_hidden, 2 * opt.encoder_num_hidden, bias=False)
        self.attn_out = nn.Linear(2 * opt.encoder_num_hidden + opt.decoder_num_hidden, opt.decoder_num_hidden)
        self.generator = nn.Linear(opt.decoder_num_hidden, len(TOKENS))

    def encode(self, images, widths):
        features = self.cnn(images)
        b, c, rows, cols = features.shape
        feat_widths = (widths // 4).clamp(min=1, max=cols)
        seq = features.permute(0, 2, 3, 1).reshape(b * rows, cols, c)
        row_ids = torch.arange(rows).repeat(b)
        h0 = torch.stack([self.pos_embedding_fw(row_ids), self.pos_embedding_bw(row_ids)])
        c0 = torch.zeros_like(h0)
        packed = pack_padded_sequence(seq, feat_widths.repeat_interleave(rows), batch_first=True, enforce_sorted=False)
        out, _ = self.encoder(packed, (h0, c0))
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=cols)
        grid_keep = ~column_padding(feat_widths, cols)[:, None, :].expand(b, rows, cols)
        return out.reshape(b, rows * cols, -1), grid_keep.reshape(b, rows * cols)

    def forward(self, images, widths, inputs):
        context, grid_keep = self.encode(images, widths)
        b = images.shape[0]
        h = c = feed = context.new_zeros(b, opt.decoder_num_hidden)
        outputs = []
        for t in range(inputs.shape[1]):
            h, c = self.decoder(torch.cat([self.embedding(inputs[:, t]), feed], dim=-1), (h, c))
            scores = torch.einsum("bnd,bd->bn", context, self.attn_in(h))
            scores = scores.masked_fill(~grid_keep, float("-inf"))
            ctx = torch.einsum("bn,bnd->bd", torch.softmax(scores, dim=-1), context)
            feed = torch.tanh(self.attn_out(torch.cat([ctx, h], dim=-1)))
            outputs.append(self.generator(feed))
        return torch.stack(outputs, dim=1)

    @torch.no_grad()
    def translate(self, images, widths):
        inputs = torch.ones(images.shape[0], 1, dtype=torch.long)
        for _ in range(opt.max_num_tokens + 1):
            logits = self.forward(images, widths, inputs)
            inputs = torch.cat([inputs, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return inputs[:, 1:]


def column_saliency(model, images, widths, targets):
    x = images.clone().requires_grad_(True)
    x.masked_fill_(column_padding(widths, images.shape[-1])[:, None, None, :], 1.0)  # expect: MC505 saliency
    log_probs = model(x, widths, targets[:, :-1]).log_softmax(-1)
    gold = log_probs.gather(-1, targets[:, 1:, None]).squeeze(-1)
    (gold * (targets[:, 1:] != 0)).sum().backward()
    return x.grad.abs().amax(dim=2).squeeze(1)


def random_formula(rng):
    return [rng.choice(TOKENS[3:]) for _ in range(rng.randint(3, opt.max_num_tokens - 2))]


def main():
    rng = random.Random(1)
    torch.manual_seed(1)
    glyphs = make_glyphs()
    model = Im2Markup()
    optim = torch.optim.Adam(model.parameters(), lr=opt.learning_rate)
    for step in range(150):
        images, widths, targets = load_batch([random_formula(rng) for _ in range(opt.batch_size)], glyphs)
        logits = model(images, widths, targets[:, :-1])
        loss = F.cross_entropy(logits.transpose(1, 2), targets[:, 1:], ignore_index=0)
        optim.zero_grad()
        loss.backward()
        optim.step()
    model.eval()
    formulas = [random_formula(rng) for _ in range(64)]
    images, widths, targets = load_batch(formulas, glyphs)
    with torch.no_grad():
        logits = model(images, widths, targets[:, :-1])
    real = targets[:, 1:] != 0
    print("loss %.3f  token accuracy %.3f" % (loss.item(), (logits.argmax(-1) == targets[:, 1:])[real].float().mean()))
    decoded = model.translate(images[:1], widths[:1])[0].tolist() + [2]
    print(" ".join(formulas[0]), "->", " ".join(TOKENS[i] for i in decoded[:decoded.index(2)]))
    saliency = column_saliency(model, images[:4], widths[:4], targets[:4])
    print("most salient pixel columns", saliency.argmax(dim=-1).tolist())


if __name__ == "__main__":
    main()
