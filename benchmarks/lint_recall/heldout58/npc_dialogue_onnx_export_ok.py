"""NPC dialogue model for a role-playing game, exported to ONNX for the engine's runtime.

A small decoder-only language model conditioned on a persona prefix (faction, mood, quest
state) writes a villager's line of dialogue. Lines are generated in batches for every NPC in
view, left-padded to a common length. The export driver writes an ONNX graph with dynamic batch
and sequence axes and checks it against a float64 math-kernel reference of the eager model.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PAD, BOS, SEP, EOS = 0, 1, 2, 3


class NPCConfig:
    def __init__(self, vocab=512, dim=64, heads=4, layers=2, max_len=96, opset=17):
        self.vocab = vocab
        self.dim = dim
        self.heads = heads
        self.layers = layers
        self.max_len = max_len
        self.opset = opset
        self.use_sdpa = opset >= 14


class NPCAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg.heads
        self.use_sdpa = cfg.use_sdpa
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.dim)
        causal = torch.tril(torch.ones(cfg.max_len, cfg.max_len, dtype=torch.bool))
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x, keep):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        if self.use_sdpa:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :] & self.causal[:t, :t])
        else:
            allowed = keep[:, None, None, :] & self.causal[:t, :t]
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
            scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
            out = scores.softmax(-1) @ v
        return self.out(out.transpose(1, 2).reshape(b, t, d))


class NPCBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.attn = NPCAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x, keep):
        x = x + self.attn(self.ln1(x), keep)
        return x + self.mlp(self.ln2(x))


class NPCDialogueLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.max_len, cfg.dim)
        self.blocks = nn.ModuleList(NPCBlock(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, input_ids, attention_mask):
        keep = attention_mask.bool()
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        x = self.tok(input_ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x, keep)
        return self.lm_head(self.ln(x))


def left_pad(lines):
    width = max(len(line) for line in lines)
    ids = torch.full((len(lines), width), PAD, dtype=torch.long)
    mask = torch.zeros(len(lines), width, dtype=torch.long)
    for i, line in enumerate(lines):
        ids[i, width - len(line):] = torch.tensor(line)
        mask[i, width - len(line):] = 1
    return {"input_ids": ids, "attention_mask": mask}


@torch.no_grad()
def generate_lines(model, personas, max_new=24, temperature=0.8):
    batch = left_pad([[BOS, *p, SEP] for p in personas])
    ids, mask = batch["input_ids"], batch["attention_mask"]
    done = torch.zeros(ids.size(0), dtype=torch.bool)
    for _ in range(max_new):
        logits = model(ids, mask)[:, -1] / temperature
        nxt = torch.multinomial(logits.softmax(-1), 1).squeeze(-1)
        nxt = nxt.masked_fill(done, PAD)
        done |= nxt == EOS
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        mask = torch.cat([mask, (~done | (nxt == EOS)).long()[:, None]], dim=1)
        if done.all():
            break
    return ids


@torch.no_grad()
def reference_logits(model, batch):
    ref = model.double()
    with sdpa_kernel(SDPBackend.MATH):
        logits = ref(batch["input_ids"], batch["attention_mask"])
    model.float()
    return logits.float()


def export_onnx(model, cfg, path):
    model.eval()
    example = left_pad([[BOS, 5, 9, SEP], [BOS, 7, SEP]])
    torch.onnx.export(
        model, (example["input_ids"], example["attention_mask"]), path,
        input_names=["input_ids", "attention_mask"], output_names=["logits"],
        dynamic_axes={"input_ids": {0: "npcs", 1: "tokens"}, "attention_mask": {0: "npcs", 1: "tokens"},
                      "logits": {0: "npcs", 1: "tokens"}},
        opset_version=cfg.opset, dynamo=False,
    )
    return example


def verify_onnx(model, path, batch, atol=1e-4):
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {name: batch[name].numpy() for name in ("input_ids", "attention_mask")}
    got = torch.from_numpy(session.run(["logits"], feeds)[0])
    want = reference_logits(model, batch)
    keep = batch["attention_mask"].bool()
    return (got[keep] - want[keep]).abs().max().item() <= atol


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default="npc_dialogue.pt")
    parser.add_argument("--out", default="npc_dialogue.onnx")
    parser.add_argument("--opset", type=int, default=17)
    args = parser.parse_args(argv)
    cfg = NPCConfig(opset=args.opset)
    model = NPCDialogueLM(cfg)
    model.load_state_dict(torch.load(args.checkpoint, map_location="cpu"))
    batch = export_onnx(model, cfg, args.out)
    print("onnx matches reference:", verify_onnx(model, args.out, batch))
    print(generate_lines(model, [[40, 41, 42], [50, 51]]))


if __name__ == "__main__":
    main()
