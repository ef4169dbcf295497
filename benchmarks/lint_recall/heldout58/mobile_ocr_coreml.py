"""Text-line recognizer for receipt scanning on phones, traced and converted to Core ML.

A small convolutional stem turns a 32-pixel-high crop of one receipt line into a sequence of
feature columns; a transformer encoder contextualises the columns and a CTC head emits
characters. Crops of a page have different widths and are right-padded into one batch; the
mobile wrapper runs a fixed width in float16 and feeds the true width as a second input.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21)
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CHARSET = "0123456789abcdefghijklmnopqrstuvwxyz.,:-/$%*# "
BLANK = 0
MASK_FILL = -1e4


def column_mask(col_lens, cols):
    col_keep = torch.arange(cols, device=col_lens.device)[None, :] < col_lens[:, None]
    return col_keep.unsqueeze(1).unsqueeze(3)  # expect: MC514 lengths


class ConvStem(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, dim, 3, padding=1), nn.BatchNorm2d(dim), nn.ReLU(), nn.AdaptiveAvgPool2d((1, None)),
        )

    def forward(self, images):
        return self.net(images).squeeze(2).transpose(1, 2)


class ColumnSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x, col_mask):
        b, w, d = x.shape
        h = self.norm(x)
        q, k, v = self.qkv(h).view(b, w, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(col_mask == 0, MASK_FILL)  # also: MC514
        x = x + self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, w, d))
        return x + self.ff(self.norm2(x))


class LineRecognizer(nn.Module):
    def __init__(self, dim=96, heads=4, layers=2, max_cols=256):
        super().__init__()
        self.stem = ConvStem(dim)
        self.pos = nn.Parameter(torch.zeros(1, max_cols, dim))
        self.layers = nn.ModuleList(ColumnSelfAttention(dim, heads) for _ in range(layers))
        self.ctc = nn.Linear(dim, len(CHARSET) + 1)

    def forward(self, images, widths):
        x = self.stem(images)
        cols = x.size(1)
        col_lens = torch.div(widths, 4, rounding_mode="floor").clamp(min=1, max=cols)
        col_mask = column_mask(col_lens, cols)
        x = x + self.pos[:, :cols]
        for layer in self.layers:
            x = layer(x, col_mask)
        return self.ctc(x).log_softmax(-1), col_lens


def render_line(text, generator=None):
    width = 8 * len(text) + 8
    img = 0.1 * torch.rand(1, 32, width, generator=generator)
    for i, ch in enumerate(text):
        code = CHARSET.index(ch) + 1
        rows = torch.tensor([(code >> bit) & 1 for bit in range(6)], dtype=torch.float32)
        img[0, 6:30, 4 + 8 * i: 10 + 8 * i] += rows.repeat_interleave(4)[:, None]
    return img


def collate(lines, generator=None):
    images = [render_line(t, generator) for t in lines]
    widths = torch.tensor([im.size(-1) for im in images])
    batch = torch.zeros(len(images), 1, 32, int(widths.max()))
    for i, im in enumerate(images):
        batch[i, :, :, : im.size(-1)] = im
    targets = [torch.tensor([CHARSET.index(c) + 1 for c in t]) for t in lines]
    return {"images": batch, "widths": widths, "targets": targets}


def ctc_decode(log_probs, lengths):
    out = []
    for row, n in zip(log_probs.argmax(-1), lengths.tolist()):
        chars, prev = [], BLANK
        for idx in row[:n].tolist():
            if idx != prev and idx != BLANK:
                chars.append(CHARSET[idx - 1])
            prev = idx
        out.append("".join(chars))
    return out


def train(model, steps=300, batch_size=16, generator=None):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        lines = ["".join(CHARSET[int(i)] for i in torch.randint(0, len(CHARSET) - 1, (int(n),), generator=generator))
                 for n in torch.randint(3, 20, (batch_size,), generator=generator)]
        batch = collate(lines, generator)
        log_probs, lengths = model(batch["images"], batch["widths"])
        loss = F.ctc_loss(log_probs.transpose(0, 1), torch.cat(batch["targets"]), lengths,
                          torch.tensor([len(t) for t in batch["targets"]]), blank=BLANK, zero_infinity=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


class MobileWrapper(nn.Module):
    def __init__(self, recognizer, width=640):
        super().__init__()
        self.recognizer = recognizer
        self.width = width

    def forward(self, image, true_width):
        log_probs, _ = self.recognizer(image, true_width)
        return log_probs.argmax(-1).to(torch.int32)


def export_coreml(model, path, width=640):
    import coremltools as ct

    wrapper = MobileWrapper(model.eval().half(), width).eval()
    example = (torch.zeros(1, 1, 32, width, dtype=torch.float16), torch.tensor([width]))
    traced = torch.jit.trace(wrapper, example)
    mlmodel = ct.convert(traced, inputs=[ct.TensorType(name="image", shape=example[0].shape),
                                         ct.TensorType(name="true_width", shape=(1,))],
                         compute_precision=ct.precision.FLOAT16, minimum_deployment_target=ct.target.iOS16)
    mlmodel.save(path)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", default="ReceiptLine.mlpackage")
    args = parser.parse_args(argv)
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = LineRecognizer()
    print("ctc loss", train(model, args.steps, generator=gen))
    model.eval()
    with torch.no_grad():
        batch = collate(["total 12.50", "visa **** 4411", "thank you"], gen)
        print(ctc_decode(*model(batch["images"], batch["widths"])))
    export_coreml(model, args.out)


if __name__ == "__main__":
    main()
