"""English-to-German page translation in a browser extension, exported for onnxruntime-web.

The extension splits the visible page into text segments, sends them in small batches to a
tiny encoder-decoder running in a web worker, and swaps the translations into the DOM. The
model is trained server-side with nn.MultiheadAttention layers (batch_first), then the encoder
and a single decoder step are exported as two ONNX graphs with dynamic axes so the worker can
run greedy decoding in JavaScript.

Source: seed self_attention_mask_guide.txt §2, §5, §7 Q1; conventions.md §2.4, §2.6, §5 item 6
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2


def build_argparser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--max-len", type=int, default=128)
    parser.add_argument("--export-dir", default="extension/models")
    parser.add_argument("--checkpoint", default="en_de_tiny.pt")
    return parser


class EncoderLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x, pad_mask):
        h = self.n1(x)
        x = x + self.self_attn(h, h, h, attn_mask=pad_mask, need_weights=False)[0]  # expect: MC515 keyword
        return x + self.ff(self.n2(x))


class DecoderLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, y, memory, future, tgt_pad, src_pad):
        h = self.n1(y)
        y = y + self.self_attn(h, h, h, attn_mask=future, key_padding_mask=tgt_pad, need_weights=False)[0]
        h = self.n2(y)
        y = y + self.cross_attn(h, memory, memory, key_padding_mask=src_pad, need_weights=False)[0]
        return y + self.ff(self.n3(y))


class TinyTranslator(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.d_model, padding_idx=PAD)
        self.pos = nn.Embedding(args.max_len, args.d_model)
        self.encoder = nn.ModuleList(EncoderLayer(args.d_model, args.heads) for _ in range(args.layers))
        self.decoder = nn.ModuleList(DecoderLayer(args.d_model, args.heads) for _ in range(args.layers))
        self.out = nn.Linear(args.d_model, args.vocab)
        self.register_buffer("future", torch.triu(torch.ones(args.max_len, args.max_len, dtype=torch.bool), 1), persistent=False)

    def _embed(self, ids):
        return self.embed(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))

    def encode(self, src_ids):
        src_pad = src_ids == PAD
        x = self._embed(src_ids)
        for layer in self.encoder:
            x = layer(x, src_pad)
        return x, src_pad

    def decode(self, tgt_ids, memory, src_pad):
        t = tgt_ids.size(1)
        y = self._embed(tgt_ids)
        for layer in self.decoder:
            y = layer(y, memory, self.future[:t, :t], tgt_ids == PAD, src_pad)
        return self.out(y)

    def forward(self, src_ids, tgt_ids):
        return self.decode(tgt_ids, *self.encode(src_ids))


class EncoderGraph(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, src_ids):
        return self.model.encode(src_ids)


class DecoderStepGraph(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tgt_ids, memory, src_pad):
        return self.model.decode(tgt_ids, memory, src_pad)[:, -1].log_softmax(-1)


def train_epoch(model, pairs, opt, batch_size=32):
    model.train()
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        src = pad_batch([s + [EOS] for s, _ in chunk])
        tgt = pad_batch([[BOS] + t + [EOS] for _, t in chunk])
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=PAD, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


def pad_batch(segments):
    width = max(len(s) for s in segments)
    return torch.tensor([s + [PAD] * (width - len(s)) for s in segments])


@torch.no_grad()
def translate(model, segments, max_len=64):
    model.eval()
    src = pad_batch([s + [EOS] for s in segments])
    memory, src_pad = model.encode(src)
    tgt = torch.full((src.size(0), 1), BOS)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        nxt = model.decode(tgt, memory, src_pad)[:, -1].argmax(-1).masked_fill(finished, PAD)
        tgt = torch.cat([tgt, nxt[:, None]], 1)
        finished |= nxt == EOS
        if finished.all():
            break
    return [[t for t in row.tolist()[1:] if t not in (PAD, EOS)] for row in tgt]


def export_for_extension(model, out_dir, opset=17):
    model.eval()
    src = pad_batch([[5, 6, 7, EOS], [8, 9, EOS]])
    memory, src_pad = model.encode(src)
    axes = {0: "segments", 1: "src_len"}
    torch.onnx.export(EncoderGraph(model), (src,), f"{out_dir}/encoder.onnx", input_names=["src_ids"],
                      output_names=["memory", "src_pad"], opset_version=opset, dynamo=False,
                      dynamic_axes={"src_ids": axes, "memory": axes, "src_pad": axes})
    tgt = torch.full((2, 3), BOS)
    torch.onnx.export(DecoderStepGraph(model), (tgt, memory, src_pad), f"{out_dir}/decoder_step.onnx",
                      input_names=["tgt_ids", "memory", "src_pad"], output_names=["log_probs"],
                      opset_version=opset, dynamo=False,
                      dynamic_axes={"tgt_ids": {0: "segments", 1: "tgt_len"}, "memory": axes, "src_pad": axes})


def main(argv=None):
    args = build_argparser().parse_args(argv)
    model = TinyTranslator(args)
    model.load_state_dict(torch.load(args.checkpoint, map_location="cpu"))
    export_for_extension(model, args.export_dir)
    print(translate(model, [[17, 245, 9, 3012], [88, 4]]))


if __name__ == "__main__":
    main()
